//! `bosun stack outputs` end to end: the real binary against a real `bosun server` child
//! process, with two state versions written over the `http` backend protocol.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Output;

use serde_json::Value;
use support::{bosun, http, ServerProcess};
use tempfile::TempDir;

const STATE_PATH: &str = "/api/v1/orgs/default/stacks/net/state";

/// Sensitive in version 2 (or the value of an output that became sensitive in it).
const SECRETS: [&str; 3] = ["hunter2", "hunter3", "public-then-secret"];

const V1: &str = r#"{"version":4,"terraform_version":"1.9.0","serial":1,"lineage":"abc","outputs":{
  "region":{"value":"eu-west-1","type":"string"},
  "pw":{"value":"hunter2","type":"string","sensitive":true},
  "count":{"value":1,"type":"number"},
  "gone":{"value":"bye","type":"string"},
  "flag":{"value":"public-then-secret","type":"string"},
  "tags":{"value":{"env":"prod"},"type":["map","string"]}
},"resources":[]}"#;

const V2: &str = r#"{"version":4,"terraform_version":"1.9.0","serial":2,"lineage":"abc","outputs":{
  "region":{"value":"us-east-2","type":"string"},
  "pw":{"value":"hunter3","type":"string","sensitive":true},
  "count":{"value":"1","type":"string"},
  "flag":{"value":"public-then-secret","type":"string","sensitive":true},
  "tags":{"value":{"env":"prod"},"type":["map","string"]},
  "zones":{"value":["a","b"],"type":["list","string"]}
},"resources":[]}"#;

fn describe(out: &Output) -> String {
    format!(
        "status: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

struct Env {
    server: ServerProcess,
    admin: String,
    /// Every command's stdout and stderr, to check that no secret leaked.
    transcript: Vec<(String, String)>,
    _dir: TempDir,
}

impl Env {
    fn run(&mut self, args: &[&str]) -> Output {
        let out = bosun(&self.server, &self.admin, args);
        self.transcript.push((
            args.join(" "),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        ));
        out
    }

    fn ok(&mut self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "bosun {args:?} failed\n{}",
            describe(&out)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn ok_json(&mut self, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.push("--json");
        let text = self.ok(&args);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
    }
}

#[test]
fn stack_outputs_table_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &[], &[]);
    let admin = server.admin_token();
    let mut env = Env {
        server,
        admin,
        transcript: Vec::new(),
        _dir: dir,
    };
    for id in ["net", "empty"] {
        env.ok(&["stack", "create", id, "--repository", "github:acme/infra"]);
    }

    // No state yet.
    assert_eq!(
        env.ok(&["stack", "outputs", "empty"]),
        "Stack empty has no state yet.\n"
    );
    let none = env.ok_json(&["stack", "outputs", "empty"]);
    assert_eq!(none["version"], Value::Null);
    assert_eq!(none["outputs"], serde_json::json!({}));
    assert_eq!(none["changes"], serde_json::json!([]));

    for doc in [V1, V2] {
        let (status, body) = http(env.server.addr, "POST", STATE_PATH, &env.admin, Some(doc));
        assert_eq!(status, 200, "{body}");
    }

    // The current version against the one before: removed outputs too, by name.
    assert_eq!(
        env.ok(&["stack", "outputs", "net"]),
        "\
Stack net, state version 2 (serial 2), compared with version 1.
NAME    VALUE           CHANGE
count   1               changed
flag    (sensitive)     became sensitive
gone    -               removed
pw      (sensitive)     changed
region  us-east-2       changed
tags    {\"env\":\"prod\"}  unchanged
zones   [\"a\",\"b\"]       added
"
    );
    // The first version: nothing before it.
    assert_eq!(
        env.ok(&["stack", "outputs", "net", "--version", "1"]),
        "\
Stack net, state version 1 (serial 1), the first version.
NAME    VALUE               CHANGE
count   1                   added
flag    public-then-secret  added
gone    bye                 added
pw      (sensitive)         added
region  eu-west-1           added
tags    {\"env\":\"prod\"}      added
"
    );

    // --json passes the API's answer through.
    let json = env.ok_json(&["stack", "outputs", "net"]);
    assert_eq!(json["version"], 2);
    assert_eq!(json["previous_version"], 1);
    assert_eq!(json["changed"], true);
    assert_eq!(json["outputs"]["pw"]["value"], Value::Null);
    assert_eq!(json["outputs"]["count"]["type"], "string");
    let count = json["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "count")
        .unwrap();
    assert_eq!(
        (&count["previous"], &count["current"]),
        (&1.into(), &"1".into())
    );

    // Errors name the problem.
    for args in [
        &["stack", "outputs", "ghost"][..],
        &["stack", "outputs", "net", "--version", "9"][..],
    ] {
        let out = env.run(args);
        assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("not_found"),
            "{}",
            describe(&out)
        );
    }

    // No command printed a value that is sensitive in the current version, except the
    // first version's (when `flag` was still public).
    for (args, text) in &env.transcript {
        let secrets: &[&str] = if args.contains("--version 1") {
            &SECRETS[..2]
        } else {
            &SECRETS
        };
        for s in secrets {
            assert!(!text.contains(s), "bosun {args} leaked {s:?}:\n{text}");
        }
    }
}
