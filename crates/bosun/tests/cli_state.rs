//! `bosun state` end to end: the real binary against a real `bosun server` child process,
//! with state written and locked over the `http` backend protocol the way Terraform does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Output;

use serde_json::Value;
use support::{bosun, http, ServerProcess};
use tempfile::TempDir;

struct Env {
    server: ServerProcess,
    admin: String,
    _dir: TempDir,
}

fn start() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &[], &[]);
    let admin = server.admin_token();
    Env {
        server,
        admin,
        _dir: dir,
    }
}

fn describe(out: &Output) -> String {
    format!(
        "status: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Every CLI output of the test, to check that a secret never leaked.
#[derive(Default)]
struct Transcript(Vec<(Vec<String>, String)>);

impl Transcript {
    fn run(&mut self, env: &Env, args: &[&str]) -> Output {
        let out = bosun(&env.server, &env.admin, args);
        self.0.push((
            args.iter().map(|a| a.to_string()).collect(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        ));
        out
    }

    /// Runs a command that must succeed; returns its stdout.
    fn ok(&mut self, env: &Env, args: &[&str]) -> String {
        let out = self.run(env, args);
        assert!(
            out.status.success(),
            "bosun {args:?} failed\n{}",
            describe(&out)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs a command with `--json` that must succeed; returns the parsed JSON.
    fn ok_json(&mut self, env: &Env, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.push("--json");
        let text = self.ok(env, &args);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
    }

    /// Runs a command that must fail with exit code 1; returns its stderr.
    fn fails(&mut self, env: &Env, args: &[&str]) -> String {
        let out = self.run(env, args);
        assert_eq!(
            out.status.code(),
            Some(1),
            "bosun {args:?} should have failed\n{}",
            describe(&out)
        );
        String::from_utf8(out.stderr).unwrap()
    }
}

const STATE_PATH: &str = "/api/v1/orgs/default/stacks/net/state";

fn state_doc(serial: u64, region: &str) -> String {
    format!(
        r#"{{"version":4,"terraform_version":"1.0.3","serial":{serial},"lineage":"abc","outputs":{{"region":{{"value":"{region}","type":"string"}},"pw":{{"value":"hunter2","type":"string","sensitive":true}}}},"resources":[]}}"#
    )
}

const LOCK: &str = r#"{"ID":"lock-1","Operation":"OperationTypeApply","Who":"alice@laptop","Version":"1.0.3","Created":"2026-11-30T00:00:00Z","Path":"","Info":""}"#;

/// The data rows of a table (its header dropped), split on runs of spaces.
fn rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .skip(1)
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(String::from)
                .collect()
        })
        .collect()
}

#[test]
fn state_versions_show_lock_and_force_unlock() {
    let env = start();
    let mut t = Transcript::default();
    t.ok(
        &env,
        &[
            "stack",
            "create",
            "net",
            "--repository",
            "github:acme/infra",
        ],
    );
    t.ok(
        &env,
        &[
            "stack",
            "create",
            "empty",
            "--repository",
            "github:acme/infra",
        ],
    );

    // No state yet: says so on stderr and succeeds.
    let out = t.run(&env, &["state", "show", "net"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(out.stdout.is_empty(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("stack net has no state yet"),
        "{}",
        describe(&out)
    );
    let out = t.run(&env, &["state", "show", "empty", "--outputs"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("stack empty has no state yet"));
    assert!(t
        .ok(&env, &["state", "versions", "net"])
        .contains("no state versions"));

    // Two versions.
    let addr = env.server.addr;
    for (serial, region) in [(1, "eu-west-1"), (2, "us-east-2")] {
        let (status, body) = http(
            addr,
            "POST",
            STATE_PATH,
            &env.admin,
            Some(&state_doc(serial, region)),
        );
        assert_eq!(status, 200, "{body}");
    }

    // The versions table: newest first, the current one marked.
    let table = t.ok(&env, &["state", "versions", "net"]);
    let header = table.lines().next().unwrap();
    for col in [
        "VERSION",
        "SERIAL",
        "CURRENT",
        "WRITER",
        "LATE WRITE",
        "SIZE",
        "CREATED",
        "CHECKSUM",
    ] {
        assert!(header.contains(col), "{table}");
    }
    let r = rows(&table);
    assert_eq!(r.len(), 2, "{table}");
    assert_eq!(&r[0][..4], ["2", "2", "yes", "user:admin"], "{table}");
    assert_eq!(&r[1][..4], ["1", "1", "-", "user:admin"], "{table}");
    assert_eq!(r[0][4], "-", "not a late write: {table}");
    let json = t.ok_json(&env, &["state", "versions", "net"]);
    let items = json["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(items[0]["current"], true);
    assert_eq!(items[1]["current"], false);
    let checksum = items[0]["checksum"].as_str().unwrap();
    assert_eq!(r[0].last().unwrap(), &checksum[..12], "{table}");
    // Paging: one per page, and --all fetches both.
    let first = t.ok(&env, &["state", "versions", "net", "--limit", "1"]);
    assert_eq!(rows(&first).len(), 1, "{first}");
    let all = t.ok(&env, &["state", "versions", "net", "--limit", "1", "--all"]);
    assert_eq!(rows(&all).len(), 2, "{all}");

    // The current document, as stored (key order kept), pretty-printed.
    let shown = t.ok(&env, &["state", "show", "net"]);
    let doc: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(doc["serial"], 2);
    assert_eq!(doc["outputs"]["region"]["value"], "us-east-2");
    assert!(shown.starts_with("{\n  \"version\": 4,\n"), "{shown}");
    // An older version: its document, or with --json the whole detail.
    let old: Value =
        serde_json::from_str(&t.ok(&env, &["state", "show", "net", "--version", "1"])).unwrap();
    assert_eq!(old["serial"], 1);
    assert_eq!(old["outputs"]["region"]["value"], "eu-west-1");
    let detail = t.ok_json(&env, &["state", "show", "net", "--version", "1"]);
    assert_eq!(detail["version"], 1);
    assert_eq!(detail["current"], false);
    assert_eq!(detail["state"]["serial"], 1);
    let missing = t.fails(&env, &["state", "show", "net", "--version", "9"]);
    assert!(missing.contains("not_found"), "{missing}");

    // Outputs: the sensitive value hidden.
    let outputs = t.ok(&env, &["state", "show", "net", "--outputs"]);
    assert!(outputs.starts_with("NAME"), "{outputs}");
    assert!(
        outputs.contains("region") && outputs.contains("us-east-2"),
        "{outputs}"
    );
    let pw = outputs.lines().find(|l| l.starts_with("pw")).unwrap();
    assert!(
        pw.contains("(sensitive)") && pw.contains("yes"),
        "{outputs}"
    );
    let old_outputs = t.ok(
        &env,
        &["state", "show", "net", "--outputs", "--version", "1"],
    );
    assert!(old_outputs.contains("eu-west-1"), "{old_outputs}");
    let outputs_json = t.ok_json(&env, &["state", "show", "net", "--outputs"]);
    assert_eq!(outputs_json["pw"]["sensitive"], true);
    assert_eq!(outputs_json["pw"]["value"], Value::Null);

    // The lock.
    assert_eq!(t.ok(&env, &["state", "lock", "net"]).trim(), "unlocked");
    let (status, body) = http(addr, "LOCK", STATE_PATH, &env.admin, Some(LOCK));
    assert_eq!(status, 200, "{body}");
    let lock = t.ok(&env, &["state", "lock", "net"]);
    let field = |key: &str| {
        lock.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}:")).map(str::trim))
            .unwrap_or_else(|| panic!("no {key} in:\n{lock}"))
            .to_string()
    };
    assert_eq!(field("id"), "lock-1");
    assert_eq!(field("operation"), "OperationTypeApply");
    assert_eq!(field("who"), "alice@laptop");
    assert_eq!(field("holder"), "user:admin");
    assert_eq!(field("holder status"), "person");
    assert_eq!(field("version"), "1.0.3");
    assert_eq!(field("info"), "-");
    let age = field("age");
    assert!(age.ends_with('s') || age.ends_with('m'), "{lock}");
    let lock_json = t.ok_json(&env, &["state", "lock", "net"]);
    assert_eq!(lock_json["locked"], true);
    assert_eq!(lock_json["lock"]["holder"]["status"], "person");

    // Force-unlock: a wrong id names the holder and releases nothing.
    let err = t.fails(&env, &["state", "force-unlock", "net", "lock-2"]);
    assert!(
        err.contains("alice@laptop") && err.contains("lock-1") && err.contains("lock_mismatch"),
        "{err}"
    );
    assert!(t.ok(&env, &["state", "lock", "net"]).contains("lock-1"));
    let released = t.ok(&env, &["state", "force-unlock", "net", "lock-1"]);
    assert_eq!(
        released.trim(),
        "released lock lock-1 held by alice@laptop (user:admin)"
    );
    assert_eq!(t.ok(&env, &["state", "lock", "net"]).trim(), "unlocked");
    let err = t.fails(&env, &["state", "force-unlock", "net", "lock-1"]);
    assert!(err.contains("not_locked"), "{err}");
    let err = t.fails(&env, &["state", "lock", "nope"]);
    assert!(err.contains("not_found"), "{err}");

    // The sensitive value shows only in the raw documents.
    for (args, text) in &t.0 {
        let raw_document = args.len() >= 3
            && args[..2] == ["state", "show"]
            && !args.contains(&"--outputs".into());
        if !raw_document {
            assert!(
                !text.contains("hunter2"),
                "bosun {args:?} leaked the secret:\n{text}"
            );
        }
    }
    assert!(shown.contains("hunter2"), "the raw document is shown whole");

    // Deleting a stack keeps its state unless asked to drop it.
    let err = t.fails(&env, &["stack", "delete", "net"]);
    assert!(err.contains("has_state"), "{err}");
    assert!(
        t.ok(&env, &["state", "show", "net"]).contains("hunter2"),
        "nothing lost"
    );
    t.ok(&env, &["stack", "delete", "net", "--delete-state"]);
    let err = t.fails(&env, &["stack", "show", "net"]);
    assert!(err.contains("not_found"), "{err}");
}
