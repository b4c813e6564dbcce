//! `bosun host`, `bosun env` and `bosun plan apply|list|show|lint|delete` end to end: the
//! real binary against a real `bosun server` child process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Output;

use serde_json::Value;
use support::{bosun, ServerProcess};

fn describe(out: &Output) -> String {
    format!(
        "status: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

const INVENTORY: &str = "environments:
  staging: { vars: { app_port: 8080 } }
  prod:    { requires_approval: true, protected: true }
defaults:
  identity_file: ~/.ssh/id_ed25519
hosts:
  web-1: { address: 10.1.0.11, environment: prod, labels: [web] }
  build: { connection: local, environment: staging, labels: [ci] }
";

const PLAN: &str = "name: app-config
targets:
  labels: [web]
  hosts: [ghost-1]
steps:
  - name: restart
    command: [\"true\"]
    when: 'vars.x =='
";

#[test]
fn hosts_environments_and_stored_plans() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &["--local-runners", "0"], &[]);
    let admin = server.admin_token();
    let run = |args: &[&str]| bosun(&server, &admin, args);
    let ok = |args: &[&str]| {
        let out = run(args);
        assert!(out.status.success(), "bosun {args:?}\n{}", describe(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    let fails = |args: &[&str]| {
        let out = run(args);
        assert!(
            !out.status.success(),
            "bosun {args:?} succeeded\n{}",
            describe(&out)
        );
        String::from_utf8(out.stderr).unwrap()
    };
    let inv = dir.path().join("inventory.yaml");
    std::fs::write(&inv, INVENTORY).unwrap();
    let plan = dir.path().join("app.yaml");
    std::fs::write(&plan, PLAN).unwrap();

    // Import, then see it.
    let out = ok(&["host", "import", inv.to_str().unwrap()]);
    assert!(out.starts_with("imported "), "{out}");
    assert!(out.contains("web-1, build"), "{out}");
    assert!(
        out.contains("staging, prod") || out.contains("prod, staging"),
        "{out}"
    );
    let v: Value = serde_json::from_str(&ok(&["--json", "host", "show", "web-1"])).unwrap();
    assert_eq!(v["identity_file"], "~/.ssh/id_ed25519");
    assert_eq!(v["environment"], "prod");

    // Add, update, list, show.
    let out = ok(&[
        "host",
        "add",
        "db-1",
        "--address",
        "10.1.0.21",
        "--port",
        "2222",
        "--label",
        "db",
        "--var",
        "weight=3",
        "--var",
        "role=primary",
        "--environment",
        "staging",
    ]);
    assert!(out.starts_with("added host db-1\n"), "{out}");
    assert!(out.contains("10.1.0.21:2222"), "{out}");
    let err = fails(&["host", "add", "bad", "--port", "0"]);
    assert!(err.contains("field: port"), "{err}");
    let err = fails(&["host", "add", "db-2", "--environment", "nowhere"]);
    assert!(
        err.contains("field: environment") && err.contains("nowhere"),
        "{err}"
    );
    let out = ok(&[
        "host",
        "update",
        "db-1",
        "--var",
        "weight=5",
        "--unset-var",
        "role",
        "--clear",
        "environment",
    ]);
    assert!(out.contains("weight=5"), "{out}");
    assert!(!out.contains("role="), "{out}");
    let v: Value = serde_json::from_str(&ok(&["--json", "host", "show", "db-1"])).unwrap();
    assert_eq!(v["environment"], Value::Null);
    assert_eq!(v["vars"], serde_json::json!({"weight": 5}));
    let list = ok(&["host", "list"]);
    let names: Vec<&str> = list
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(names, ["build", "db-1", "web-1"], "{list}");

    // Environments and grants.
    let out = ok(&["env", "show", "prod"]);
    assert!(out.contains("requires approval: yes"), "{out}");
    assert!(out.contains("web-1"), "{out}");
    ok(&["env", "create", "qa", "--var", "app_port=9090"]);
    let out = ok(&[
        "env",
        "update",
        "qa",
        "--protected",
        "true",
        "--var",
        "debug=true",
    ]);
    assert!(out.contains("protected:         yes"), "{out}");
    assert!(
        out.contains("app_port=9090") && out.contains("debug=true"),
        "{out}"
    );
    let out = ok(&["env", "grant", "prod", "admin"]);
    assert!(out.contains("admin may approve runs on prod"), "{out}");
    let err = fails(&["env", "grant", "prod", "nobody"]);
    assert!(err.contains("field: user"), "{err}");
    ok(&["env", "revoke", "prod", "admin"]);
    let err = fails(&["env", "delete", "prod"]);
    assert!(
        err.contains("web-1") && err.contains("environment_in_use"),
        "{err}"
    );
    ok(&["env", "delete", "qa"]);
    let list = ok(&["env", "list"]);
    assert!(list.contains("prod") && !list.contains("qa"), "{list}");

    // Plans: lint against the server's hosts (no --inventory), apply, show, list, delete.
    let out = run(&["plan", "lint", plan.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(
        text.contains("app.yaml:4:") && text.contains("ghost-1"),
        "{text}"
    );
    assert!(text.contains("malformed condition"), "{text}");
    let out = ok(&["plan", "apply", plan.to_str().unwrap()]);
    assert!(
        out.starts_with("created plan app-config (version 1)\n"),
        "{out}"
    );
    assert!(out.contains("hosts now:") && out.contains("web-1"), "{out}");
    assert!(out.contains("warning(s):"), "{out}");
    let out = ok(&["plan", "apply", plan.to_str().unwrap()]);
    assert!(
        out.starts_with("updated plan app-config to version 2\n"),
        "{out}"
    );
    let out = ok(&["plan", "show", "app-config", "--source"]);
    assert_eq!(out, PLAN);
    let v: Value = serde_json::from_str(&ok(&["--json", "plan", "show", "app-config"])).unwrap();
    assert_eq!(v["version"], 2);
    assert_eq!(v["summary"]["hosts"], serde_json::json!(["web-1"]));
    let list = ok(&["plan", "list"]);
    assert!(
        list.contains("app-config") && list.contains(" 2 "),
        "{list}"
    );
    let broken = dir.path().join("broken.yaml");
    std::fs::write(&broken, "name: broken\nsteps: nope\n").unwrap();
    let err = fails(&["plan", "apply", broken.to_str().unwrap()]);
    assert!(err.contains("broken.yaml:2:"), "{err}");
    ok(&["plan", "delete", "app-config"]);
    let err = fails(&["plan", "show", "app-config"]);
    assert!(err.contains("not found"), "{err}");

    // Offline lint still works with no token at all.
    let out = std::process::Command::new(support::BIN)
        .args([
            "plan",
            "lint",
            plan.to_str().unwrap(),
            "--inventory",
            inv.to_str().unwrap(),
        ])
        .env_remove("BOSUN_TOKEN")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ghost-1"),
        "{}",
        describe(&out)
    );

    // host check: the server's record of a local host, checked from this machine.
    let out = ok(&["--json", "host", "check", "build"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["host"], "build");
    assert_eq!(v["ok"], true, "{out}");
    let err = fails(&["host", "check", "ghost"]);
    assert!(err.contains("ghost"), "{err}");

    ok(&["host", "delete", "db-1"]);
    let err = fails(&["host", "delete", "db-1"]);
    assert!(err.contains("not found"), "{err}");
}

/// `bosun host add|update --proxy-jump`, `--clear proxy-jump`, `show` and `list` with
/// the bastion; a refused bastion names the field; deleting a bastion in use names the
/// hosts behind it.
#[test]
fn hosts_with_bastions() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &["--local-runners", "0"], &[]);
    let admin = server.admin_token();
    let run = |args: &[&str]| bosun(&server, &admin, args);
    let ok = |args: &[&str]| {
        let out = run(args);
        assert!(out.status.success(), "bosun {args:?}\n{}", describe(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    let fails = |args: &[&str]| {
        let out = run(args);
        assert!(
            !out.status.success(),
            "bosun {args:?} succeeded\n{}",
            describe(&out)
        );
        String::from_utf8(out.stderr).unwrap()
    };
    ok(&["host", "add", "edge", "--address", "192.0.2.1"]);
    let out = ok(&[
        "host",
        "add",
        "db-1",
        "--address",
        "10.2.0.8",
        "--proxy-jump",
        "edge",
    ]);
    let jump_row = |out: &str| {
        out.lines()
            .find(|l| l.starts_with("proxy jump"))
            .map(|l| l.split_whitespace().last().unwrap().to_string())
    };
    assert_eq!(jump_row(&out).as_deref(), Some("edge"), "{out}");
    let list = ok(&["host", "list"]);
    assert!(
        list.lines().next().unwrap().contains("PROXY JUMP"),
        "{list}"
    );
    let row = list.lines().find(|l| l.starts_with("db-1 ")).unwrap();
    assert!(row.trim_end().ends_with(" edge"), "{list}");
    let err = fails(&["host", "add", "db-2", "--proxy-jump", "ghost"]);
    assert!(
        err.contains("field: proxy_jump") && err.contains("ghost"),
        "{err}"
    );
    let err = fails(&["host", "update", "edge", "--proxy-jump", "db-1"]);
    assert!(err.contains("cycle"), "{err}");
    let err = fails(&["host", "delete", "edge"]);
    assert!(err.contains("host_in_use") && err.contains("db-1"), "{err}");
    let err = fails(&[
        "host",
        "update",
        "db-1",
        "--proxy-jump",
        "edge",
        "--clear",
        "proxy-jump",
    ]);
    assert!(err.contains("choose one"), "{err}");
    let out = ok(&["host", "update", "db-1", "--clear", "proxy-jump"]);
    assert_eq!(jump_row(&out).as_deref(), Some("-"), "{out}");
    let v: Value = serde_json::from_str(&ok(&["--json", "host", "show", "db-1"])).unwrap();
    assert_eq!(v["proxy_jump"], Value::Null);
    ok(&["host", "delete", "edge"]);
}

const SCHEDULED_PLAN: &str = "name: nightly
targets:
  labels: [web]
inputs:
  release: { default: \"1.0\" }
steps:
  - name: restart
    command: [\"true\"]
";

/// `bosun plan show` with the plan's schedule: none, set and armed, fired (a paused run:
/// its target is in a `requires_approval` environment), cleared.
#[test]
fn plan_show_includes_its_schedule() {
    let dir = tempfile::tempdir().unwrap();
    // The scheduler looks often, so arming and the minute's fire are seen soon after.
    let server = ServerProcess::start(
        dir.path(),
        &["--local-runners", "0"],
        &[("BOSUN_SCHEDULE_INTERVAL", "100ms")],
    );
    let admin = server.admin_token();
    let ok = |args: &[&str]| {
        let out = bosun(&server, &admin, args);
        assert!(out.status.success(), "bosun {args:?}\n{}", describe(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    let json = |args: &[&str]| -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        serde_json::from_str(&ok(&all)).unwrap()
    };
    // Polls `plan show --json` until its schedule satisfies `done`.
    let wait_schedule =
        |what: &str, timeout: std::time::Duration, done: &dyn Fn(&Value) -> bool| {
            let deadline = std::time::Instant::now() + timeout;
            loop {
                let v = json(&["plan", "show", "nightly"]);
                if done(&v["schedule"]) {
                    return v["schedule"].clone();
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "{what}: not within {timeout:?}: {v}\n{}",
                    server.log_text()
                );
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        };
    let inv = dir.path().join("inventory.yaml");
    std::fs::write(&inv, INVENTORY).unwrap();
    let plan = dir.path().join("nightly.yaml");
    std::fs::write(&plan, SCHEDULED_PLAN).unwrap();
    ok(&["host", "import", inv.to_str().unwrap()]);
    ok(&["plan", "apply", plan.to_str().unwrap()]);

    // No schedule: nothing about one, and `schedule: null` for scripts.
    let out = ok(&["plan", "show", "nightly"]);
    assert!(out.contains("plan:") && out.contains("nightly"), "{out}");
    assert!(
        !out.contains("scheduled") && !out.contains("next run"),
        "{out}"
    );
    let v = json(&["plan", "show", "nightly"]);
    assert_eq!(v["version"], 1);
    assert_eq!(v["schedule"], Value::Null, "{v}");

    // Set: every minute in Berlin, with an input for its runs.
    ok(&[
        "plan",
        "schedule",
        "nightly",
        "--cron",
        "* * * * *",
        "--timezone",
        "Europe/Berlin",
        "--input",
        "release=2.1",
    ]);
    let armed = wait_schedule("armed", std::time::Duration::from_secs(20), &|s| {
        !s["next_run_at"].is_null()
    });
    assert_eq!(armed["cron"], "* * * * *");
    assert_eq!(armed["timezone"], "Europe/Berlin");
    assert_eq!(armed["inputs"], serde_json::json!({"release": 2.1}));
    let out = ok(&["plan", "show", "nightly"]);
    assert!(out.contains("scheduled:"), "{out}");
    assert!(out.contains("* * * * * (Europe/Berlin)"), "{out}");
    let next_line = out
        .lines()
        .find(|l| l.starts_with("next run:"))
        .unwrap_or_else(|| panic!("no next run line\n{out}"));
    assert!(
        !next_line.contains("armed on the scheduler's next pass"),
        "{out}"
    );
    assert!(out.contains("release=2.1"), "{out}");
    // (The minute may have turned in between: then it names the run.)
    let outcome = out
        .lines()
        .find(|l| l.starts_with("last outcome:"))
        .unwrap_or_else(|| panic!("no last outcome line\n{out}"));
    assert!(
        outcome.contains("- (not fired yet)") || outcome.contains("started prun-"),
        "{out}"
    );

    // At the next minute it fires: a run paused for approval, named as the last outcome.
    let fired = wait_schedule("fired", std::time::Duration::from_secs(90), &|s| {
        s["last_run"].is_string()
    });
    let run = fired["last_run"].as_str().unwrap().to_string();
    assert!(run.starts_with("prun-"), "{fired}");
    let out = ok(&["plan", "show", "nightly"]);
    let outcome = out
        .lines()
        .find(|l| l.starts_with("last outcome:"))
        .unwrap_or_else(|| panic!("no last outcome line\n{out}"));
    assert!(outcome.contains(&format!("started {run}")), "{out}");
    let pending = ok(&["approvals", "list"]);
    assert!(pending.contains(&run), "{pending}");
    // The row names the run's preview, the dry run that shows what it would change.
    let preview = json(&["plan-run", "show", &run])["preview"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let row = pending
        .lines()
        .find(|l| l.starts_with(run.as_str()))
        .unwrap_or_default();
    assert!(
        preview.starts_with("prun-") && row.trim_end().ends_with(&preview),
        "{pending}"
    );

    // Cleared: gone from the plan again.
    ok(&["plan", "schedule", "nightly", "--clear"]);
    let out = ok(&["plan", "show", "nightly"]);
    assert!(!out.contains("scheduled"), "{out}");
    assert_eq!(json(&["plan", "show", "nightly"])["schedule"], Value::Null);
}
