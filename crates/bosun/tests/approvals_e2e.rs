//! Approvals and secrets in plans end to end: the real `bosun server` with its embedded
//! runner, two real sshd hosts on loopback in a `requires_approval` environment, a
//! secret set with the CLI and used by a plan's steps. Dry runs change nothing and do not
//! wait; real runs start `paused`, wait in the
//! inbox (`bosun approvals list`), and run once approved (`bosun approvals approve`);
//! the secret reaches the hosts in the real run, and never appears in the run's log,
//! its per-host results, `plan-run show`, or the dry run's report (`secret://[redacted]`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use bosun_testkit::sshd::{require_sshd, SshdFleet};
use serde_json::{json, Value};
use support::{bosun, http, ServerProcess};

const SECRET: &str = "zq-7f3d9-secret-value";

fn ok(server: &ServerProcess, token: &str, args: &[&str]) -> String {
    let out = bosun(server, token, args);
    assert!(
        out.status.success(),
        "bosun {args:?} failed\nstdout:\n{}\nstderr:\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        server.log_text()
    );
    String::from_utf8(out.stdout).unwrap()
}

fn json_of(server: &ServerProcess, token: &str, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let text = ok(server, token, &all);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

fn wait_state(server: &ServerProcess, token: &str, run: &str, want: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = json_of(server, token, &["plan-run", "show", run]);
        if r["state"] == want {
            return r;
        }
        assert!(
            Instant::now() < deadline && !matches!(r["state"].as_str(), Some("failed" | "aborted")),
            "plan run {run} never became {want}: {r:#}\nserver log:\n{}",
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_gated_plan_waits_for_approval_and_its_secret_never_shows() {
    if !require_sshd() {
        return;
    }
    let fleet = SshdFleet::start(2);
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    // Self-approval on: one admin token drives the whole test (the rule itself is tested
    // through the API, role by role).
    let server = ServerProcess::start(&dir.path().join("data"), &["--allow-self-approval"], &[]);
    let admin = server.admin_token();

    let mut inv = String::from("environments:\n  prod: { requires_approval: true }\nhosts:\n");
    for (i, h) in fleet.hosts().iter().enumerate() {
        inv.push_str(&format!(
            "  h{i}: {{ address: \"{}\", port: {}, user: \"{}\", identity_file: \"{}\", known_hosts: \"{}\", labels: [fleet], environment: prod }}\n",
            h.address(),
            h.port(),
            h.user(),
            fleet.client_key_path().display(),
            fleet.known_hosts_path().display()
        ));
    }
    let (status, answer) = http(
        server.addr,
        "POST",
        "/api/v1/orgs/default/inventory",
        &admin,
        Some(&json!({ "source": inv }).to_string()),
    );
    assert_eq!(status, 200, "inventory import: {answer}");
    ok(
        &server,
        &admin,
        &["secret", "set", "app/token", "--value", SECRET],
    );

    let plan = format!(
        r#"name: deploy
targets:
  labels: [fleet]
vars:
  token: secret://app/token
steps:
  - name: write the token
    file.copy:
      path: "{w}/{{{{ host.name }}}}.conf"
      content: "token={{{{ vars.token }}}}\n"
  - name: say it
    shell: "echo using {{{{ vars.token }}}}; echo {{{{ vars.token }}}} >&2"
"#,
        w = work.display()
    );
    let file = dir.path().join("deploy.yaml");
    std::fs::write(&file, &plan).unwrap();
    ok(&server, &admin, &["plan", "apply", file.to_str().unwrap()]);

    // A dry run changes no host: it does not wait for an approval, and its report shows
    // the reference redacted.
    let dry = json_of(
        &server,
        &admin,
        &["plan-run", "start", "deploy", "--dry-run"],
    );
    assert_ne!(dry["state"], "paused", "{dry:#}");
    assert_eq!(dry["gated_environments"], json!([]), "{dry:#}");
    let dry_id = dry["id"].as_str().unwrap().to_string();
    let shown = wait_state(&server, &admin, &dry_id, "succeeded");
    let text = shown.to_string();
    assert!(text.contains("secret://[redacted]"), "{shown:#}");
    assert!(!text.contains(SECRET), "{shown:#}");
    assert!(!work.join("h0.conf").exists());
    let inbox = ok(&server, &admin, &["approvals", "list"]);
    assert!(!inbox.contains(&dry_id), "{inbox}");

    // The real run: paused, then approved, then the hosts get the value.
    let real = bosun(&server, &admin, &["plan-run", "start", "deploy"]);
    assert!(real.status.success(), "{real:?}");
    let id = String::from_utf8_lossy(&real.stdout).trim().to_string();
    // It says it is paused, for what, and how to decide it.
    let said = String::from_utf8_lossy(&real.stderr);
    assert!(
        said.contains(&format!(
            "paused: waiting for approval in prod; `bosun approvals approve {id}`"
        )),
        "{said}"
    );
    let inbox = ok(&server, &admin, &["approvals", "list"]);
    assert!(inbox.contains(&id) && inbox.contains("prod"), "{inbox}");
    // A second start while it waits is refused by the guard.
    let again = bosun(&server, &admin, &["plan-run", "start", "deploy"]);
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        err.contains(&format!(
            "Already has a run in progress on the same targets: h0, h1 — held by run {id} \
             (paused, waiting for approval: `bosun plan-run show {id}`)"
        )),
        "{err}"
    );
    json_of(
        &server,
        &admin,
        &["approvals", "approve", &id, "--comment", "go"],
    );
    let shown = wait_state(&server, &admin, &id, "succeeded");
    for h in ["h0", "h1"] {
        assert_eq!(
            std::fs::read_to_string(work.join(format!("{h}.conf"))).unwrap(),
            format!("token={SECRET}\n")
        );
    }
    // Per-host results, the run and its log: masked.
    let text = shown.to_string();
    assert!(!text.contains(SECRET), "{shown:#}");
    let said: Vec<&Value> = shown["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["step"] == 2)
        .collect();
    assert_eq!(said.len(), 2, "{shown:#}");
    for r in said {
        assert_eq!(r["stdout"], "using ***\n", "{r:#}");
        assert_eq!(r["stderr"], "***\n", "{r:#}");
    }
    let logs = ok(&server, &admin, &["plan-run", "logs", &id]);
    assert!(!logs.contains(SECRET), "{logs}");
    let decisions = ok(&server, &admin, &["approvals", "decisions"]);
    assert!(
        decisions.contains(&id) && decisions.contains("go"),
        "{decisions}"
    );
    assert!(!server.log_text().contains(SECRET));

    // The plan's schedule through the CLI: set, shown, a bad zone refused, cleared.
    let set = json_of(
        &server,
        &admin,
        &[
            "plan",
            "schedule",
            "deploy",
            "--cron",
            "0 2 * * *",
            "--timezone",
            "Europe/Berlin",
        ],
    );
    assert_eq!(set["cron"], "0 2 * * *");
    assert_eq!(set["timezone"], "Europe/Berlin");
    let shown = ok(&server, &admin, &["plan", "schedule", "deploy"]);
    assert!(
        shown.contains("0 2 * * *") && shown.contains("Europe/Berlin"),
        "{shown}"
    );
    let bad = bosun(
        &server,
        &admin,
        &[
            "plan",
            "schedule",
            "deploy",
            "--cron",
            "0 2 * * *",
            "--timezone",
            "Mars/Base",
        ],
    );
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("timezone"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    ok(&server, &admin, &["plan", "schedule", "deploy", "--clear"]);
    let gone = bosun(&server, &admin, &["plan", "schedule", "deploy"]);
    assert!(!gone.status.success());
}
