//! `bosun policy test` end to end: the real binary on a folder of Rego policies and their
//! `_test.rego` tests, with no server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_bosun");

const POLICY: &str = r#"package bosun.sudoers

import rego.v1

require_approval contains msg if {
    some change in input.changes
    startswith(change.path, "/etc/sudoers.d/")
    msg := sprintf("%s would change on %s", [change.path, change.host])
}
"#;

const TESTS: &str = r#"package bosun.sudoers_test

import rego.v1
import data.bosun.sudoers

test_a_sudoers_change_needs_approval if {
    count(sudoers.require_approval) == 1 with input as {"changes": [
        {"host": "web-1", "path": "/etc/sudoers.d/deploy"}
    ]}
}

test_other_files_do_not if {
    count(sudoers.require_approval) == 0 with input as {"changes": [
        {"host": "web-1", "path": "/etc/motd"}
    ]}
}
"#;

fn policy_test(dir: &std::path::Path, json: bool) -> std::process::Output {
    let mut cmd = Command::new(BIN);
    if json {
        cmd.arg("--json");
    }
    cmd.args(["policy", "test"])
        .arg(dir)
        .env_remove("BOSUN_URL")
        .env_remove("BOSUN_TOKEN")
        .output()
        .unwrap()
}

#[test]
fn policy_test_runs_a_folders_tests_and_fails_when_one_does() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("sudoers.rego"), POLICY).unwrap();
    std::fs::write(dir.path().join("sudoers_test.rego"), TESTS).unwrap();
    let out = policy_test(dir.path(), false);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("PASS data.bosun.sudoers_test.test_a_sudoers_change_needs_approval"),
        "{stdout}"
    );
    assert!(stdout.contains("2 test(s) passed"), "{stdout}");

    // The policy breaks: the test that relied on it fails, and the command says so.
    std::fs::write(
        dir.path().join("sudoers.rego"),
        POLICY.replace("/etc/sudoers.d/", "/etc/nothing/"),
    )
    .unwrap();
    let out = policy_test(dir.path(), true);
    assert_eq!(out.status.code(), Some(1));
    let results: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let failed: Vec<&str> = results
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["passed"] == false)
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        failed,
        ["data.bosun.sudoers_test.test_a_sudoers_change_needs_approval"]
    );

    // A syntax error names the file.
    std::fs::write(
        dir.path().join("sudoers.rego"),
        "package bosun.sudoers\n\nx := {\n",
    )
    .unwrap();
    let out = policy_test(dir.path(), false);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("sudoers.rego"), "{stderr}");
}

#[test]
fn policy_eval_prints_the_decision_and_fails_on_a_deny() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("sudoers.rego"), POLICY).unwrap();
    std::fs::write(
        dir.path().join("deny.rego"),
        "package bosun.deny\n\nimport rego.v1\n\ndeny contains \"no changes on Fridays\" if input.friday\n",
    )
    .unwrap();
    let eval = |input: &str| {
        let file = dir.path().join("input.json");
        std::fs::write(&file, input).unwrap();
        Command::new(BIN)
            .args(["policy", "eval"])
            .arg(dir.path())
            .arg("--input")
            .arg(&file)
            .output()
            .unwrap()
    };
    let out =
        eval(r#"{"friday": false, "changes": [{"host": "web-1", "path": "/etc/sudoers.d/x"}]}"#);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("require approval: /etc/sudoers.d/x would change on web-1"),
        "{stdout}"
    );
    let out = eval(r#"{"friday": true, "changes": []}"#);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("deny: no changes on Fridays"), "{stdout}");
    let out = eval("{not json");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a JSON document"));
}
