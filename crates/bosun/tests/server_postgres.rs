//! `bosun server --database-url postgres://…` end to end: the real server binary on a
//! scratch database of the PostgreSQL test server (`BOSUN_TEST_DATABASE_URL`, started by
//! scripts/test.sh), the real Terraform 1.0.3 writing state through its `http` backend,
//! and a run of the embedded runner planned and applied to the end — everything kept in
//! PostgreSQL (no SQLite file), and still there after a restart.
//!
//! Without `BOSUN_TEST_DATABASE_URL` (or Terraform) the test prints `SKIPPED (tool
//! missing): …` and passes, unless `BOSUN_REQUIRE_TOOLS=1`, where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{bosun, postgres_or_skip, terraform_or_skip, PgScratch, ServerProcess};

/// The module: one variable, a local and two outputs (no providers).
const MAIN_TF: &str = r#"variable "replicas" {
  type    = number
  default = 1
}

locals {
  greeting = "hello-${var.replicas}"
}

output "greeting" {
  value = local.greeting
}

output "replicas" {
  value = var.replicas
}
"#;

/// A bare repository holding `MAIN_TF`, as a `file://` URL.
fn repository(root: &Path) -> String {
    support::bare_repository(root, MAIN_TF)
}

fn ok_json(server: &ServerProcess, token: &str, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = bosun(server, token, &all);
    assert!(
        out.status.success(),
        "bosun {args:?} failed\nstdout:\n{}\nstderr:\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        server.log_text()
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Terraform on a laptop: the module with the `http` backend pointed at the stack's state.
fn laptop_apply(tf: &Path, root: &Path, server: &ServerProcess, token: &str, replicas: u32) {
    let dir = root.join("laptop");
    std::fs::create_dir_all(dir.join("home")).unwrap();
    std::fs::write(dir.join("terraformrc"), "").unwrap();
    let address = format!("{}/api/v1/orgs/default/stacks/web/state", server.url());
    std::fs::write(
        dir.join("main.tf"),
        format!(
            r#"terraform {{
  backend "http" {{
    address        = "{address}"
    lock_address   = "{address}"
    unlock_address = "{address}"
    lock_method    = "LOCK"
    unlock_method  = "UNLOCK"
    username       = "bosun"
  }}
}}

{MAIN_TF}"#
        ),
    )
    .unwrap();
    for args in [
        vec!["init", "-input=false", "-no-color"],
        vec![
            "apply",
            "-auto-approve",
            "-input=false",
            "-no-color",
            "-var",
            &format!("replicas={replicas}"),
        ],
    ] {
        let out = Command::new(tf)
            .args(&args)
            .current_dir(&dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", dir.join("home"))
            .env("TF_CLI_CONFIG_FILE", dir.join("terraformrc"))
            .env("TF_IN_AUTOMATION", "1")
            .env("CHECKPOINT_DISABLE", "1")
            .env("TF_HTTP_PASSWORD", token)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "terraform {args:?} failed:\n{}{}\nserver log:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            server.log_text()
        );
    }
}

fn versions(server: &ServerProcess, token: &str) -> Vec<Value> {
    ok_json(server, token, &["state", "versions", "web"])["items"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn a_server_on_postgresql_keeps_state_and_runs_a_run_to_the_end() {
    let Some(admin_url) = postgres_or_skip() else {
        return;
    };
    let Some(tf) = terraform_or_skip() else {
        return;
    };
    // Dropped last: the servers below stop before their database goes.
    let db = PgScratch::create(&admin_url, "bosun_server");
    let root = tempfile::Builder::new()
        .prefix("bosun-server-postgres-")
        .tempdir()
        .unwrap();
    let repo = repository(root.path());
    let data = root.path().join("data");
    let args = ["--database-url", db.url.as_str(), "--local-runners", "1"];
    let server = ServerProcess::start(&data, &args, &[]);
    let admin = server.admin_token();

    let tf_bin = tf.to_str().unwrap();
    ok_json(
        &server,
        &admin,
        &[
            "stack",
            "create",
            "web",
            "--repository",
            &repo,
            "--engine",
            "terraform",
            "--engine-binary",
            tf_bin,
            "--var",
            "TF_VAR_replicas=3",
            "--autodeploy",
        ],
    );

    // State written by Terraform's own http backend (lock, write, unlock).
    laptop_apply(&tf, root.path(), &server, &admin, 2);
    let vs = versions(&server, &admin);
    assert_eq!(vs.len(), 1, "{vs:#?}");
    assert_eq!(vs[0]["writer"]["kind"], "user", "{vs:#?}");
    assert_eq!(vs[0]["outputs"]["greeting"]["value"], "hello-2", "{vs:#?}");
    assert_eq!(
        ok_json(&server, &admin, &["state", "lock", "web"])["locked"],
        false,
        "terraform released its lock"
    );

    // A run of the embedded runner: planned and, with autodeploy, applied.
    let run = ok_json(&server, &admin, &["run", "trigger", "web"])["id"]
        .as_str()
        .unwrap()
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    let finished = loop {
        let r = ok_json(&server, &admin, &["run", "show", &run]);
        match r["state"].as_str().unwrap() {
            "finished" => break r,
            "failed" | "discarded" | "canceled" | "interrupted" | "force_failed" | "skipped" => {
                let logs = bosun(&server, &admin, &["run", "logs", &run]);
                panic!(
                    "run ended {}:\n{r:#}\nrun log:\n{}\nserver log:\n{}",
                    r["state"],
                    String::from_utf8_lossy(&logs.stdout),
                    server.log_text()
                );
            }
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "run still {} after 120 s:\n{r:#}\nserver log:\n{}",
            r["state"],
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(finished["plan"]["has_changes"], true, "{finished:#}");

    let vs = versions(&server, &admin);
    assert_eq!(vs.len(), 2, "{vs:#?}");
    assert_eq!(vs[0]["writer"]["kind"], "run", "{vs:#?}");
    assert_eq!(vs[0]["writer"]["id"], run.as_str(), "{vs:#?}");
    assert_eq!(vs[0]["outputs"]["greeting"]["value"], "hello-3", "{vs:#?}");
    assert_eq!(
        vs[0]["lineage"], vs[1]["lineage"],
        "the run continued the state"
    );

    // All of it lives in PostgreSQL: the rows are there, and no SQLite file was made.
    assert_eq!(
        db.value("SELECT COUNT(*) FROM state_versions WHERE stack_id = 'web'"),
        "2"
    );
    assert_eq!(
        db.value(&format!("SELECT state FROM runs WHERE id = '{run}'")),
        "finished"
    );
    assert!(!data.join("bosun.db").exists(), "no SQLite database");

    // A restart on the same database finds everything.
    drop(server);
    let server = ServerProcess::start(&data, &args, &[]);
    let vs = versions(&server, &admin);
    assert_eq!(vs.len(), 2, "after restart: {vs:#?}");
    let r = ok_json(&server, &admin, &["run", "show", &run]);
    assert_eq!(r["state"], "finished", "{r:#}");
    drop(server);
    drop(db);
}

/// Live events cross replicas: two servers on one database, the only runner embedded in
/// replica A, and everything done through replica B. The run triggered through B is
/// leased by A's runner (woken by B's `NOTIFY`), and `bosun run logs --follow` attached to
/// B prints the log lines A's runner writes and exits when the run ends — B's stream hears
/// A's commits through its `LISTEN` connection.
#[test]
fn a_run_queued_on_one_replica_runs_on_another_and_its_log_streams_across() {
    let Some(admin_url) = postgres_or_skip() else {
        return;
    };
    let Some(tf) = terraform_or_skip() else {
        return;
    };
    let db = PgScratch::create(&admin_url, "bosun_server");
    let root = tempfile::Builder::new()
        .prefix("bosun-replicas-live-")
        .tempdir()
        .unwrap();
    let repo = repository(root.path());
    let (data_a, data_b) = (root.path().join("a"), root.path().join("b"));
    let a = ServerProcess::start(
        &data_a,
        &["--database-url", db.url.as_str(), "--local-runners", "1"],
        &[],
    );
    let admin = a.admin_token();
    // One secrets key for both replicas, as a deployment shares it.
    let key = data_a.join("secrets.key");
    let b = ServerProcess::start(
        &data_b,
        &[
            "--database-url",
            db.url.as_str(),
            "--local-runners",
            "0",
            "--secrets-key-file",
            key.to_str().unwrap(),
        ],
        &[],
    );

    ok_json(
        &b,
        &admin,
        &[
            "stack",
            "create",
            "web",
            "--repository",
            &repo,
            "--engine",
            "terraform",
            "--engine-binary",
            tf.to_str().unwrap(),
            "--var",
            "TF_VAR_replicas=4",
            "--autodeploy",
        ],
    );
    let run = ok_json(&b, &admin, &["run", "trigger", "web"])["id"]
        .as_str()
        .unwrap()
        .to_string();

    // Follow the log through B while A's runner executes the run.
    let follow = {
        let (url, token, run) = (b.url(), admin.clone(), run.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let out = Command::new(support::BIN)
                .args(["run", "logs", "--follow", &run])
                .env("BOSUN_URL", url)
                .env("BOSUN_TOKEN", token)
                .env_remove("BOSUN_ORG")
                .stdin(Stdio::null())
                .output()
                .expect("run bosun");
            let _ = tx.send(out);
        });
        rx
    };
    let out = follow
        .recv_timeout(Duration::from_secs(180))
        .unwrap_or_else(|_| {
            panic!(
                "`run logs --follow` on replica B did not end within 180 s\nreplica A log:\n{}\nreplica B log:\n{}",
                a.log_text(),
                b.log_text()
            )
        });
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "follow failed: {}\nstdout:\n{printed}\nstderr:\n{}\nreplica A log:\n{}\nreplica B log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        a.log_text(),
        b.log_text()
    );
    for line in ["Apply complete!", "hello-4"] {
        assert!(
            printed.contains(line),
            "the followed log lacks {line:?}:\n{printed}"
        );
    }

    // The run ended finished, executed by replica A's runner (B has none).
    let shown = ok_json(&b, &admin, &["run", "show", &run]);
    assert_eq!(shown["state"], "finished", "{shown:#}");
    let runner = db.value(&format!(
        "SELECT name FROM runners WHERE id = (SELECT runner_id FROM runs WHERE id = '{run}')"
    ));
    let replica_a = std::fs::read_to_string(data_a.join("replica-id")).unwrap();
    let base = format!("local@{}", replica_a.trim());
    assert!(
        runner == base || runner.starts_with(&format!("{base}-")),
        "leased by {runner:?}, not replica A's runner"
    );
    drop(b);
    drop(a);
    drop(db);
}
