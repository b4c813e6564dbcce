//! The `bosun` client commands end to end: each test runs the real binary against a real
//! `bosun server` child process with its own data dir.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};
use support::{bosun, ServerProcess};
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

/// Runs a command that must succeed; returns its stdout.
fn ok(env: &Env, token: &str, args: &[&str]) -> String {
    let out = bosun(&env.server, token, args);
    assert!(
        out.status.success(),
        "bosun {args:?} failed\n{}",
        describe(&out)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs a command with `--json` that must succeed; returns the parsed JSON.
fn ok_json(env: &Env, token: &str, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let text = ok(env, token, &args);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

/// Runs a command that must fail with exit code 1; returns its stderr.
fn fails(env: &Env, token: &str, args: &[&str]) -> String {
    let out = bosun(&env.server, token, args);
    assert_eq!(
        out.status.code(),
        Some(1),
        "bosun {args:?} should have failed\n{}",
        describe(&out)
    );
    String::from_utf8(out.stderr).unwrap()
}

/// Runs a command clap refuses (exit code 2); returns its stderr.
fn usage_error(env: &Env, token: &str, args: &[&str]) -> String {
    let out = bosun(&env.server, token, args);
    assert_eq!(
        out.status.code(),
        Some(2),
        "bosun {args:?} should have been refused\n{}",
        describe(&out)
    );
    String::from_utf8(out.stderr).unwrap()
}

/// The value of `key` in a `key: value` block.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(str::trim)
}

/// Creates a user in org `default` with `role` and returns a personal token for them.
fn member_with_token(env: &Env, user: &str, role: &str) -> String {
    ok(env, &env.admin, &["user", "create", user]);
    ok(
        env,
        &env.admin,
        &["org", "set-member", user, "--role", role],
    );
    let created = ok_json(env, &env.admin, &["token", "create", "--user", user]);
    created["secret"].as_str().unwrap().to_string()
}

/// Replaces RFC 3339 second-precision timestamps (`2025-01-02T03:04:05Z`) with
/// `[timestamp]` so output can be compared literally.
fn redact_timestamps(text: &str) -> String {
    const MASK: &[u8] = b"dddd-dd-ddTdd:dd:ddZ";
    let bytes = text.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < bytes.len() {
        let is_ts = bytes.len() - i >= MASK.len()
            && MASK.iter().zip(&bytes[i..]).all(|(m, b)| match m {
                b'd' => b.is_ascii_digit(),
                other => other == b,
            });
        if is_ts {
            out.push_str("[timestamp]");
            i += MASK.len();
        } else {
            let ch = text[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

const FULL_STACK: &[&str] = &[
    "stack",
    "create",
    "web",
    "--repository",
    "https://github.com/acme/infra.git",
    "--name",
    "Web frontend",
    "--branch",
    "prod",
    "--path",
    "envs/web",
    "--watch-path",
    "modules/net",
    "--watch-path",
    "modules/dns",
    "--engine",
    "terraform",
    "--engine-binary",
    "/usr/local/bin/terraform",
    "--engine-version",
    "1.5.7",
    "--tier",
    "medium",
    "--autodeploy",
    "--environment",
    "production",
    "--var",
    "region=eu-west-1",
    "--var",
    "replicas=3",
    "--depends-on",
    "network",
    "--drift-schedule",
    "0 3 * * *",
    "--drift-reconcile",
    "--runner-pool",
    "edge",
    "--pr-feedback",
    "comment",
    "--label",
    "frontend",
    "--label",
    "prod",
];

#[test]
fn stack_create_with_every_flag_round_trips_through_show() {
    let env = start();
    ok(
        &env,
        &env.admin,
        &[
            "stack",
            "create",
            "network",
            "--repository",
            "https://github.com/acme/net.git",
        ],
    );
    let created = ok_json(&env, &env.admin, FULL_STACK);
    let shown = ok_json(&env, &env.admin, &["stack", "show", "web"]);
    assert_eq!(created, shown);
    let mut expected = json!({
        "id": "web",
        "name": "Web frontend",
        "repository": "https://github.com/acme/infra.git",
        "branch": "prod",
        "path": "envs/web",
        "engine": "terraform",
        "engine_binary": "/usr/local/bin/terraform",
        "engine_version": "1.5.7",
        "tier": "medium",
        "autodeploy": true,
        "environment": "production",
        "variables": {"region": "eu-west-1", "replicas": "3"},
        "depends_on": [{"stack": "network", "outputs": {}, "trigger_always": false}],
        "drift_detection": {"schedule": "0 3 * * *", "reconcile": true, "timezone": "UTC"},
        "runner_pool": "edge",
        "pr_feedback": "comment",
        "pr_feedback_effective": "comment",
        "labels": ["frontend", "prod"],
    });
    assert_eq!(shown["watch_paths"], json!(["modules/net", "modules/dns"]));
    for (key, want) in expected.as_object_mut().unwrap() {
        assert_eq!(&shown[key], want, "field {key}");
    }
}

#[test]
fn human_stack_show_snapshot() {
    let env = start();
    ok(
        &env,
        &env.admin,
        &[
            "stack",
            "create",
            "network",
            "--repository",
            "https://github.com/acme/net.git",
        ],
    );
    ok(&env, &env.admin, FULL_STACK);
    let text = redact_timestamps(&ok(&env, &env.admin, &["stack", "show", "web"]));
    let expected = "\
id:               web
name:             Web frontend
repository:       https://github.com/acme/infra.git
branch:           prod
path:             envs/web
watch paths:      modules/net
                  modules/dns
engine:           terraform
engine binary:    /usr/local/bin/terraform
engine version:   1.5.7
tier:             medium
autodeploy:       yes
environment:      production
labels:           frontend, prod
variables:        region=eu-west-1
                  replicas=3
depends on:       network
drift detection:  0 3 * * * in UTC (reconcile)
next drift check: - (not scheduled yet)
last good check:  never
runner pool:      edge
aws:              -
pr feedback:      comment
connection:       connected (plain git remote, polled every 60s; not polled yet)
created:          [timestamp]
updated:          [timestamp]
";
    assert_eq!(text, expected);
    // The upstream shows its downstream, from the same dependency graph.
    let network = ok(&env, &env.admin, &["stack", "show", "network"]);
    assert!(
        network
            .lines()
            .any(|l| l.starts_with("downstream stacks:") && l.ends_with(" web")),
        "{network}"
    );
    assert!(!text.contains("downstream stacks"), "web has none");
}

#[test]
fn stack_create_from_file() {
    let env = start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("stack.json");
    std::fs::write(
        &file,
        json!({
            "id": "from-file",
            "repository": "https://github.com/acme/infra.git",
            "path": "envs/staging",
            "variables": {"a": "1"},
        })
        .to_string(),
    )
    .unwrap();
    let created = ok_json(
        &env,
        &env.admin,
        &["stack", "create", "--file", file.to_str().unwrap()],
    );
    assert_eq!(created["id"], "from-file");
    assert_eq!(created["path"], "envs/staging");
    assert_eq!(created["variables"], json!({"a": "1"}));

    std::fs::write(&file, r#"{"id": "typo", "repository": "r", "nmae": "x"}"#).unwrap();
    let err = fails(
        &env,
        &env.admin,
        &["stack", "create", "--file", file.to_str().unwrap()],
    );
    assert!(
        err.contains("not a valid stack definition") && err.contains("nmae"),
        "{err}"
    );
}

#[test]
fn human_stack_list_is_a_table_of_ids() {
    let env = start();
    for id in ["alpha", "beta"] {
        ok(
            &env,
            &env.admin,
            &[
                "stack",
                "create",
                id,
                "--repository",
                "https://github.com/acme/infra.git",
            ],
        );
    }
    let text = ok(&env, &env.admin, &["stack", "list"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[0].starts_with("ID ") && lines[0].contains("NAME"),
        "{text}"
    );
    assert!(lines[1].starts_with("alpha "), "{text}");
    assert!(lines[2].starts_with("beta "), "{text}");
    // Aligned: the NAME column starts at the same offset on every line.
    let col = lines[0].find("NAME").unwrap();
    assert!(
        lines[1..].iter().all(|l| l[..col].ends_with("  ")),
        "{text}"
    );
}

/// `--label` sets a stack's labels on create and replaces them on update; `stack show`
/// and `stack list` show them; a bad one is refused naming it; `--clear-labels` removes
/// them.
#[test]
fn stack_labels_are_set_shown_listed_and_replaced() {
    let env = start();
    let created = ok_json(
        &env,
        &env.admin,
        &[
            "stack",
            "create",
            "web",
            "--repository",
            "https://github.com/acme/infra.git",
            "--label",
            "prod",
            "--label",
            "team-net",
        ],
    );
    assert_eq!(created["labels"], json!(["prod", "team-net"]));
    ok(
        &env,
        &env.admin,
        &[
            "stack",
            "create",
            "plain",
            "--repository",
            "https://github.com/acme/infra.git",
        ],
    );
    let shown = ok(&env, &env.admin, &["stack", "show", "web"]);
    assert_eq!(field(&shown, "labels"), Some("prod, team-net"), "{shown}");
    let shown = ok(&env, &env.admin, &["stack", "show", "plain"]);
    assert_eq!(field(&shown, "labels"), Some("-"), "{shown}");

    let text = ok(&env, &env.admin, &["stack", "list"]);
    let lines: Vec<&str> = text.lines().collect();
    let col = lines[0].find("LABELS").unwrap_or_else(|| panic!("{text}"));
    let web = lines.iter().find(|l| l.starts_with("web ")).unwrap();
    assert!(web[col..].starts_with("prod,team-net "), "{text}");
    let plain = lines.iter().find(|l| l.starts_with("plain ")).unwrap();
    assert!(plain[col..].starts_with("- "), "{text}");

    let replaced = ok_json(
        &env,
        &env.admin,
        &["stack", "update", "web", "--label", "eu-1"],
    );
    assert_eq!(replaced["labels"], json!(["eu-1"]));
    let renamed = ok_json(
        &env,
        &env.admin,
        &["stack", "update", "web", "--name", "Web"],
    );
    assert_eq!(renamed["labels"], json!(["eu-1"]), "kept when not named");

    let err = fails(
        &env,
        &env.admin,
        &[
            "stack", "update", "web", "--label", "eu-1", "--label", "EU 2",
        ],
    );
    assert!(err.contains("labels[1]"), "{err}");
    let err = fails(
        &env,
        &env.admin,
        &[
            "stack",
            "create",
            "bad",
            "--repository",
            "https://github.com/acme/infra.git",
            "--label",
            "web",
            "--label",
            "web",
        ],
    );
    assert!(err.contains("labels[1]") && err.contains("twice"), "{err}");
    assert_eq!(
        ok_json(&env, &env.admin, &["stack", "show", "web"])["labels"],
        json!(["eu-1"])
    );

    let cleared = ok_json(
        &env,
        &env.admin,
        &["stack", "update", "web", "--clear-labels"],
    );
    assert_eq!(cleared["labels"], json!([]));
    usage_error(
        &env,
        &env.admin,
        &["stack", "update", "web", "--label", "x1", "--clear-labels"],
    );
}

#[test]
fn stack_list_all_follows_every_page() {
    let env = start();
    let ids = ["s1", "s2", "s3", "s4", "s5"];
    for id in ids {
        ok(
            &env,
            &env.admin,
            &[
                "stack",
                "create",
                id,
                "--repository",
                "https://github.com/acme/infra.git",
            ],
        );
    }
    let first = ok_json(&env, &env.admin, &["stack", "list", "--limit", "2"]);
    assert_eq!(first["items"].as_array().unwrap().len(), 2);
    assert_eq!(first["next_cursor"], "s2");

    let all = ok_json(
        &env,
        &env.admin,
        &["stack", "list", "--limit", "2", "--all"],
    );
    let got: Vec<&str> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(got, ids);
    assert_eq!(all["next_cursor"], Value::Null);

    let text = ok(
        &env,
        &env.admin,
        &["stack", "list", "--limit", "2", "--all"],
    );
    for id in ids {
        assert!(
            text.lines().any(|l| l.starts_with(&format!("{id} "))),
            "{text}"
        );
    }
}

#[test]
fn stack_update_changes_only_named_fields() {
    let env = start();
    ok(
        &env,
        &env.admin,
        &[
            "stack",
            "create",
            "web",
            "--repository",
            "https://github.com/acme/infra.git",
            "--environment",
            "staging",
            "--var",
            "a=1",
        ],
    );
    let renamed = ok_json(
        &env,
        &env.admin,
        &["stack", "update", "web", "--name", "Renamed"],
    );
    assert_eq!(renamed["id"], "web");
    assert_eq!(renamed["name"], "Renamed");
    assert_eq!(renamed["environment"], "staging");
    assert_eq!(renamed["variables"], json!({"a": "1"}));

    let cleared = ok_json(
        &env,
        &env.admin,
        &[
            "stack",
            "update",
            "web",
            "--clear-environment",
            "--autodeploy",
        ],
    );
    assert_eq!(cleared["environment"], Value::Null);
    assert_eq!(cleared["autodeploy"], true);
    assert_eq!(cleared["name"], "Renamed");

    let drift = ok_json(
        &env,
        &env.admin,
        &["stack", "update", "web", "--drift-schedule", "*/5 * * * *"],
    );
    assert_eq!(
        drift["drift_detection"],
        json!({"schedule": "*/5 * * * *", "reconcile": false, "timezone": "UTC"})
    );
    // One drift flag alone keeps the other part as stored.
    let drift = ok_json(
        &env,
        &env.admin,
        &["stack", "update", "web", "--drift-reconcile"],
    );
    assert_eq!(
        drift["drift_detection"],
        json!({"schedule": "*/5 * * * *", "reconcile": true, "timezone": "UTC"})
    );
    let drift = ok_json(
        &env,
        &env.admin,
        &[
            "stack",
            "update",
            "web",
            "--drift-timezone",
            "America/New_York",
        ],
    );
    assert_eq!(
        drift["drift_detection"],
        json!({"schedule": "*/5 * * * *", "reconcile": true, "timezone": "America/New_York"})
    );
    let off = ok_json(
        &env,
        &env.admin,
        &["stack", "update", "web", "--clear-drift-detection"],
    );
    assert_eq!(off["drift_detection"], Value::Null);

    // Feedback on GitHub: the stack's own, then the org's again.
    let own = ok_json(
        &env,
        &env.admin,
        &["stack", "update", "web", "--pr-feedback", "none"],
    );
    assert_eq!(
        (&own["pr_feedback"], &own["pr_feedback_effective"]),
        (&json!("none"), &json!("none"))
    );
    assert_eq!(
        field(
            &ok(&env, &env.admin, &["stack", "show", "web"]),
            "pr feedback"
        ),
        Some("none")
    );
    let inherited = ok_json(
        &env,
        &env.admin,
        &["stack", "update", "web", "--pr-feedback", "org"],
    );
    assert_eq!(
        (
            &inherited["pr_feedback"],
            &inherited["pr_feedback_effective"]
        ),
        (&Value::Null, &json!("both"))
    );
    assert_eq!(
        field(
            &ok(&env, &env.admin, &["stack", "show", "web"]),
            "pr feedback"
        ),
        Some("both (org default)")
    );
    let err = usage_error(
        &env,
        &env.admin,
        &["stack", "update", "web", "--pr-feedback", "always"],
    );
    assert!(
        err.contains("expected both, checks, comment, none or org"),
        "{err}"
    );

    let err = fails(&env, &env.admin, &["stack", "update", "web"]);
    assert!(err.contains("nothing to change"), "{err}");
    let shown = ok_json(&env, &env.admin, &["stack", "show", "web"]);
    assert_eq!(shown["name"], "Renamed");
}

#[test]
fn stack_delete_removes_it_and_respects_dependents() {
    let env = start();
    let repo = "https://github.com/acme/infra.git";
    ok(
        &env,
        &env.admin,
        &["stack", "create", "net", "--repository", repo],
    );
    ok(
        &env,
        &env.admin,
        &[
            "stack",
            "create",
            "app",
            "--repository",
            repo,
            "--depends-on",
            "net",
        ],
    );
    let err = fails(&env, &env.admin, &["stack", "delete", "net"]);
    assert!(
        err.starts_with("error: ") && err.contains("has_dependents"),
        "{err}"
    );

    let text = ok(&env, &env.admin, &["stack", "delete", "app"]);
    assert!(text.contains("Deleted stack app"), "{text}");
    let err = fails(&env, &env.admin, &["stack", "show", "app"]);
    assert!(
        err.contains("not found") && err.contains("not_found"),
        "{err}"
    );
    ok(&env, &env.admin, &["stack", "delete", "net"]);
    let list = ok_json(&env, &env.admin, &["stack", "list"]);
    assert_eq!(list["items"], json!([]));
}

#[test]
fn validation_error_names_the_field_and_stores_nothing() {
    let env = start();
    let out = bosun(
        &env.server,
        &env.admin,
        &[
            "stack",
            "create",
            "bad",
            "--repository",
            "https://github.com/acme/infra.git",
            "--path",
            "/abs",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(out.stdout.is_empty(), "{}", describe(&out));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.starts_with("error: path: "), "{err}");
    assert!(
        err.contains("field: path") && err.contains("validation_failed"),
        "{err}"
    );
    let list = ok_json(&env, &env.admin, &["stack", "list"]);
    assert_eq!(list["items"], json!([]));
    fails(&env, &env.admin, &["stack", "show", "bad"]);
}

#[test]
fn missing_token_and_unreachable_server_are_clear_errors() {
    let env = start();
    let out = Command::new(support::BIN)
        .args(["stack", "list"])
        .env("BOSUN_URL", env.server.url())
        .env_remove("BOSUN_TOKEN")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no API token") && err.contains("BOSUN_TOKEN"),
        "{err}"
    );

    let err = fails(&env, "bosun_pat_not-a-real-token", &["whoami"]);
    assert!(
        err.contains("invalid token") && err.contains("unauthenticated"),
        "{err}"
    );

    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let out = Command::new(support::BIN)
        .args(["whoami"])
        .env("BOSUN_URL", &url)
        .env("BOSUN_TOKEN", &env.admin)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot connect") && err.contains(&url),
        "{err}"
    );
}

#[test]
fn personal_token_create_use_and_revoke() {
    let env = start();
    let created = ok_json(
        &env,
        &env.admin,
        &[
            "token",
            "create",
            "--description",
            "laptop",
            "--expires-in",
            "30d",
        ],
    );
    let secret = created["secret"].as_str().unwrap().to_string();
    let id = created["token"]["id"].as_str().unwrap().to_string();
    assert_eq!(created["token"]["kind"], "personal");
    assert!(created["token"]["expires_at"].is_string());

    let me = ok_json(&env, &secret, &["whoami"]);
    assert_eq!(me["user"], "admin");
    assert_eq!(me["token_id"], id.as_str());
    let human = ok(&env, &secret, &["whoami"]);
    assert!(
        human.contains("user:") && human.contains("admin"),
        "{human}"
    );

    let list = ok(&env, &env.admin, &["token", "list"]);
    assert!(
        list.lines()
            .any(|l| l.starts_with(&id) && l.contains("laptop")),
        "{list}"
    );

    let text = ok(&env, &env.admin, &["token", "revoke", &id]);
    assert!(text.contains(&id), "{text}");
    let err = fails(&env, &secret, &["whoami"]);
    assert!(
        err.contains("revoked") && err.contains("unauthenticated"),
        "{err}"
    );

    // The human form prints the secret with its one-time warning.
    let text = ok(&env, &env.admin, &["token", "create"]);
    assert!(
        text.contains("secret:") && text.contains("bosun_"),
        "{text}"
    );
    assert!(text.contains("will not be shown again"), "{text}");

    let err = fails(&env, &env.admin, &["token", "create", "--expires-in", "1s"]);
    assert!(err.contains("field: expires_in_seconds"), "{err}");
}

#[test]
fn pool_tokens_create_list_revoke() {
    let env = start();
    let created = ok_json(
        &env,
        &env.admin,
        &[
            "token",
            "create",
            "--pool",
            "edge",
            "--description",
            "edge runners",
        ],
    );
    let id = created["token"]["id"].as_str().unwrap().to_string();
    let secret = created["secret"].as_str().unwrap().to_string();
    assert_eq!(created["token"]["kind"], "pool");
    assert_eq!(created["token"]["pool"], "edge");
    assert_eq!(created["token"]["org"], "default");

    let listed = ok_json(&env, &env.admin, &["token", "list", "--pool"]);
    let ids: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [id.as_str()]);
    let text = ok(&env, &env.admin, &["token", "list", "--pool"]);
    assert!(
        text.contains(&id) && text.contains("pool default/edge"),
        "{text}"
    );
    // Personal listing does not include pool tokens.
    assert!(!ok(&env, &env.admin, &["token", "list"]).contains(&id));

    // A pool token is not a user's credential.
    let err = fails(&env, &secret, &["whoami"]);
    assert!(err.contains("forbidden"), "{err}");

    ok(&env, &env.admin, &["token", "revoke", "--pool", &id]);
    let listed = ok_json(&env, &env.admin, &["token", "list", "--pool"]);
    assert!(listed["items"][0]["revoked_at"].is_string(), "{listed}");
}

#[test]
fn orgs_users_and_roles() {
    let env = start();
    let org = ok_json(
        &env,
        &env.admin,
        &["org", "create", "acme", "--name", "Acme Corp"],
    );
    assert_eq!(org["id"], "acme");
    assert_eq!(org["name"], "Acme Corp");
    let shown = ok(&env, &env.admin, &["org", "show", "acme"]);
    assert!(shown.contains("Acme Corp"), "{shown}");
    assert_eq!(field(&shown, "pr feedback"), Some("both"), "{shown}");
    let list = ok(&env, &env.admin, &["org", "list"]);
    assert!(list.lines().any(|l| l.starts_with("acme ")), "{list}");
    assert!(list.lines().any(|l| l.starts_with("default ")), "{list}");

    // The org's feedback on GitHub, which its stacks follow unless they say otherwise.
    let updated = ok_json(
        &env,
        &env.admin,
        &["org", "update", "acme", "--pr-feedback", "checks"],
    );
    assert_eq!(updated["pr_feedback"], "checks");
    let shown = ok(&env, &env.admin, &["org", "show", "acme"]);
    assert_eq!(field(&shown, "pr feedback"), Some("checks"), "{shown}");
    let err = usage_error(
        &env,
        &env.admin,
        &["org", "update", "acme", "--pr-feedback", "org"],
    );
    assert!(
        err.contains("expected both, checks, comment or none"),
        "{err}"
    );
    let err = fails(&env, &env.admin, &["org", "update", "acme"]);
    assert!(err.contains("nothing to change"), "{err}");

    // --org scopes stack commands.
    ok(
        &env,
        &env.admin,
        &[
            "--org",
            "acme",
            "stack",
            "create",
            "acme-web",
            "--repository",
            "https://github.com/acme/infra.git",
        ],
    );
    let acme = ok_json(&env, &env.admin, &["stack", "list", "--org", "acme"]);
    assert_eq!(acme["items"][0]["id"], "acme-web");
    let default = ok_json(&env, &env.admin, &["stack", "list"]);
    assert_eq!(default["items"], json!([]));

    let user = ok_json(&env, &env.admin, &["user", "create", "bob"]);
    assert_eq!(user["id"], "bob");
    assert_eq!(user["server_admin"], false);
    let member = ok_json(
        &env,
        &env.admin,
        &["org", "set-member", "bob", "--role", "viewer"],
    );
    assert_eq!(
        member,
        json!({"user": "bob", "role": "viewer", "source": "manual"})
    );
    let members = ok(&env, &env.admin, &["org", "members"]);
    assert!(
        members
            .lines()
            .any(|l| l.starts_with("bob ") && l.contains(" viewer ") && l.ends_with("manual")),
        "{members}"
    );

    let bob = ok_json(&env, &env.admin, &["token", "create", "--user", "bob"]);
    let bob = bob["secret"].as_str().unwrap();
    let me = ok_json(&env, bob, &["whoami"]);
    assert_eq!(me["orgs"], json!([{"org": "default", "role": "viewer"}]));

    // A viewer reads but may not create.
    ok(&env, bob, &["stack", "list"]);
    let err = fails(
        &env,
        bob,
        &[
            "stack",
            "create",
            "nope",
            "--repository",
            "https://github.com/acme/infra.git",
        ],
    );
    assert!(
        err.contains("your role in org \"default\" is viewer"),
        "{err}"
    );
    assert!(err.contains("code: forbidden"), "{err}");
    // Creating orgs needs a server admin.
    let err = fails(&env, bob, &["org", "create", "bobs"]);
    assert!(err.contains("server administrator"), "{err}");

    let err = fails(
        &env,
        &env.admin,
        &["org", "set-member", "bob", "--role", "chief"],
    );
    assert!(err.contains("field: role"), "{err}");

    ok(&env, &env.admin, &["org", "remove-member", "bob"]);
    let err = fails(&env, bob, &["stack", "list"]);
    assert!(err.contains("not a member"), "{err}");
}

#[test]
fn operator_is_refused_stack_create() {
    let env = start();
    let carol = member_with_token(&env, "carol", "operator");
    let err = fails(
        &env,
        &carol,
        &[
            "stack",
            "create",
            "x",
            "--repository",
            "https://github.com/acme/infra.git",
        ],
    );
    assert!(
        err.contains("is operator; this action needs admin"),
        "{err}"
    );
}

#[test]
fn audit_lists_stack_create() {
    let env = start();
    ok(
        &env,
        &env.admin,
        &[
            "stack",
            "create",
            "web",
            "--repository",
            "https://github.com/acme/infra.git",
        ],
    );
    let events = ok_json(&env, &env.admin, &["audit", "--limit", "10"]);
    let create = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "stack.create")
        .unwrap_or_else(|| panic!("no stack.create in {events}"));
    assert_eq!(create["target"], "stack:web");
    assert_eq!(create["actor"], "user:admin");

    let text = ok(&env, &env.admin, &["audit"]);
    assert!(
        text.lines()
            .any(|l| l.contains("stack.create") && l.contains("stack:web")),
        "{text}"
    );
    let one = ok_json(&env, &env.admin, &["audit", "--limit", "1"]);
    assert_eq!(one["items"].as_array().unwrap().len(), 1);
    // Filtered by target, action (a word and what is under it) and actor.
    ok(
        &env,
        &env.admin,
        &[
            "stack",
            "create",
            "db",
            "--repository",
            "https://github.com/acme/infra.git",
        ],
    );
    let web = ok_json(&env, &env.admin, &["audit", "--target", "stack:web"]);
    let actions: Vec<&str> = web["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["stack.create"], "{web}");
    let stacks = ok_json(
        &env,
        &env.admin,
        &["audit", "--action", "stack", "--actor", "user:admin"],
    );
    assert_eq!(stacks["items"].as_array().unwrap().len(), 2, "{stacks}");
    let none = ok_json(&env, &env.admin, &["audit", "--actor", "user:nobody"]);
    assert_eq!(none["items"], serde_json::json!([]));

    // Server-level events (a user created) appear only in the server-wide log.
    ok(&env, &env.admin, &["user", "create", "carol"]);
    let org_log = ok_json(&env, &env.admin, &["audit"]);
    assert!(!org_log.to_string().contains("user:carol"), "{org_log}");
    let server_log = ok(&env, &env.admin, &["audit", "--server"]);
    assert!(
        server_log
            .lines()
            .any(|l| l.contains("user.create") && l.contains("user:carol")),
        "{server_log}"
    );
}

/// Runs a command with `--json` that must fail with exit code `code`: stdout stays empty
/// and stderr is exactly one JSON object, returned.
fn json_error(env: &Env, token: &str, args: &[&str], code: i32) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let out = bosun(&env.server, token, &args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "bosun {args:?}\n{}",
        describe(&out)
    );
    assert!(out.stdout.is_empty(), "bosun {args:?}\n{}", describe(&out));
    serde_json::from_slice(&out.stderr).unwrap_or_else(|e| {
        panic!(
            "bosun {args:?}: stderr is not one JSON object ({e})\n{}",
            describe(&out)
        )
    })
}

#[test]
fn errors_under_json_are_one_json_object_on_stderr() {
    let env = start();
    // The server's error body, as the server sent it.
    let err = json_error(&env, &env.admin, &["stack", "show", "nosuch"], 1);
    let (status, body) = support::http(
        env.server.addr,
        "GET",
        "/api/v1/orgs/default/stacks/nosuch",
        &env.admin,
        None,
    );
    assert_eq!(status, 404);
    assert_eq!(err, serde_json::from_str::<Value>(&body).unwrap());
    assert_eq!(err["error"]["code"], "not_found");
    // With the field at fault.
    let err = json_error(&env, &env.admin, &["host", "list", "--limit", "0"], 1);
    assert_eq!(
        (&err["error"]["code"], &err["error"]["field"]),
        (&json!("validation_failed"), &json!("limit")),
        "{err}"
    );
    // An error of the client itself: client_error, same exit code as without --json.
    let out = Command::new(support::BIN)
        .args(["stack", "list", "--json"])
        .env("BOSUN_URL", env.server.url())
        .env_remove("BOSUN_TOKEN")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err: Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(err["error"]["code"], "client_error", "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("BOSUN_TOKEN"),
        "{err}"
    );
    assert_eq!(err["error"].as_object().unwrap().len(), 2, "{err}");
    // A usage error keeps clap's exit code (2).
    let err = json_error(&env, &env.admin, &["stack", "show"], 2);
    assert_eq!(err["error"]["code"], "client_error", "{err}");
    assert!(
        err["error"]["message"].as_str().unwrap().contains("<ID>"),
        "{err}"
    );
    // Without --json, errors stay text.
    let text = fails(&env, &env.admin, &["stack", "show", "nosuch"]);
    assert!(
        text.starts_with("error: ") && text.contains("code: not_found"),
        "{text}"
    );
}

#[test]
fn an_unknown_org_is_named_as_such_to_a_server_admin_only() {
    let env = start();
    let err = fails(&env, &env.admin, &["--org", "nosuch", "stack", "list"]);
    assert!(
        err.contains("org \"nosuch\" not found") && err.contains("code: not_found"),
        "{err}"
    );
    let err = json_error(&env, &env.admin, &["--org", "nosuch", "stack", "list"], 1);
    assert_eq!(err["error"]["code"], "not_found", "{err}");
    // A member of another org learns nothing about which orgs exist.
    let viewer = member_with_token(&env, "vic", "viewer");
    let err = fails(&env, &viewer, &["--org", "nosuch", "stack", "list"]);
    assert!(
        err.contains("you are not a member of org \"nosuch\""),
        "{err}"
    );
}

#[test]
fn every_list_prints_items_and_next_cursor() {
    let env = start();
    for name in ["c-1", "a-1", "b-1"] {
        ok(&env, &env.admin, &["host", "add", name]);
    }
    let names = |page: &Value| -> Vec<String> {
        page["items"]
            .as_array()
            .unwrap_or_else(|| panic!("{page}"))
            .iter()
            .map(|h| h["name"].as_str().unwrap().to_string())
            .collect()
    };
    // Hosts page by name: one page, the cursor to continue, or every page.
    let first = ok_json(&env, &env.admin, &["host", "list", "--limit", "2"]);
    assert_eq!(names(&first), ["a-1", "b-1"]);
    assert_eq!(first["next_cursor"], "b-1");
    let rest = ok_json(
        &env,
        &env.admin,
        &["host", "list", "--limit", "2", "--cursor", "b-1"],
    );
    assert_eq!(names(&rest), ["c-1"]);
    assert_eq!(rest["next_cursor"], Value::Null);
    let all = ok_json(&env, &env.admin, &["host", "list", "--limit", "2", "--all"]);
    assert_eq!(names(&all), ["a-1", "b-1", "c-1"]);
    assert_eq!(all["next_cursor"], Value::Null);
    let out = bosun(&env.server, &env.admin, &["host", "list", "--limit", "2"]);
    assert!(out.status.success(), "{}", describe(&out));
    let hint = String::from_utf8_lossy(&out.stderr);
    assert!(hint.contains("--cursor b-1"), "{hint}");

    // The lists the server answers whole print the same shape.
    for list in [
        &["org", "list"][..],
        &["org", "members"],
        &["env", "list"],
        &["plan", "list"],
        &["secret", "list"],
        &["token", "list"],
        &["token", "list", "--pool"],
        &["runners", "list"],
        &["approvals", "list"],
        &["approvals", "decisions"],
        &["notify", "target", "list"],
        &["stack", "list"],
    ] {
        let page = ok_json(&env, &env.admin, list);
        assert!(page["items"].is_array(), "{list:?}: {page}");
        assert_eq!(page["next_cursor"], Value::Null, "{list:?}: {page}");
        assert_eq!(page.as_object().unwrap().len(), 2, "{list:?}: {page}");
    }
    let members = ok_json(&env, &env.admin, &["org", "members"]);
    assert_eq!(
        members["items"],
        json!([{"user": "admin", "role": "admin", "source": "manual"}])
    );
}

#[test]
fn sessions_are_listed_and_ended_from_the_cli() {
    let env = start();
    // A console login (curl posting the login form) opens a session for the admin.
    let login = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--data-urlencode",
        ])
        .arg(format!("token={}", env.admin))
        .args(["--data-urlencode", "next=/"])
        .arg(format!("http://{}/login", env.server.addr))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&login.stdout), "303");
    let listed = ok_json(&env, &env.admin, &["session", "list"]);
    let id = listed["items"][0]["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("ses-"), "{listed}");
    let text = ok(&env, &env.admin, &["session", "list"]);
    assert!(
        text.lines()
            .any(|l| l.starts_with(&id) && l.contains("admin") && l.ends_with("open")),
        "{text}"
    );
    let ended = ok(&env, &env.admin, &["session", "revoke", &id]);
    assert!(
        ended.contains(&format!("Ended session {id} of admin.")),
        "{ended}"
    );
    let text = ok(&env, &env.admin, &["session", "list", "--user", "admin"]);
    assert!(text.contains("ended: revoked by user:admin"), "{text}");
    // Two more console logins, ended at once.
    for _ in 0..2 {
        let login = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "--data-urlencode"])
            .arg(format!("token={}", env.admin))
            .args(["--data-urlencode", "next=/"])
            .arg(format!("http://{}/login", env.server.addr))
            .output()
            .unwrap();
        assert!(login.status.success());
    }
    let ended = ok(
        &env,
        &env.admin,
        &["session", "revoke-all", "--user", "admin"],
    );
    assert!(
        ended.contains("Ended 2 open session(s) of admin."),
        "{ended}"
    );
    let listed = ok_json(&env, &env.admin, &["session", "list"]);
    assert!(
        listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["ended_at"].is_string()),
        "{listed}"
    );
}

#[test]
fn a_user_is_linked_to_an_identity_and_unlinked_from_the_cli() {
    // A provider configured (linking needs only its issuer: nothing is asked of it).
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bosun.toml");
    std::fs::write(
        &config,
        r#"[sign_in]
[[sign_in.providers]]
id = "corp"
issuer = "http://127.0.0.1:9"
client_id = "bosun"
"#,
    )
    .unwrap();
    let server = ServerProcess::start(
        &dir.path().join("data"),
        &["--config", config.to_str().unwrap()],
        &[],
    );
    let env = Env {
        admin: server.admin_token(),
        server,
        _dir: dir,
    };
    ok(&env, &env.admin, &["user", "create", "robert"]);
    let linked = ok(
        &env,
        &env.admin,
        &[
            "user",
            "link",
            "robert",
            "--provider",
            "corp",
            "--subject",
            "00u/42",
        ],
    );
    assert!(
        linked.contains("robert")
            && linked.contains("00u/42")
            && linked.contains("http://127.0.0.1:9"),
        "{linked}"
    );
    // Linked once: the server's refusal names who has it.
    let refused = fails(
        &env,
        &env.admin,
        &[
            "user",
            "link",
            "admin",
            "--provider",
            "corp",
            "--subject",
            "00u/42",
        ],
    );
    assert!(refused.contains("linked to user robert"), "{refused}");
    let listed = ok_json(
        &env,
        &env.admin,
        &["user", "identities", "--user", "robert"],
    );
    assert_eq!(listed["items"][0]["subject"], "00u/42", "{listed}");
    assert_eq!(
        listed["items"][0]["last_sign_in_at"],
        Value::Null,
        "{listed}"
    );
    let text = ok(
        &env,
        &env.admin,
        &["user", "identities", "--user", "robert"],
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("robert") && l.contains("corp") && l.contains("00u/42")),
        "{text}"
    );
    // A subject with a slash reaches the server whole.
    let unlinked = ok(
        &env,
        &env.admin,
        &[
            "user",
            "unlink",
            "--provider",
            "corp",
            "--subject",
            "00u/42",
        ],
    );
    assert!(
        unlinked.contains("Unlinked 00u/42 at corp from user robert."),
        "{unlinked}"
    );
    let listed = ok_json(
        &env,
        &env.admin,
        &["user", "identities", "--user", "robert"],
    );
    assert_eq!(listed["items"], json!([]), "{listed}");
}
