//! The control plane survives its PostgreSQL database going away mid-run: the real
//! `bosun server` on a PostgreSQL server of this test's own (never the shared test server
//! other tests use), an embedded runner applying a stack with the real Terraform 1.0.3,
//! and, while the apply holds the stack's state lock, first `pg_ctl restart -m fast`, then
//! `pg_ctl stop -m fast`, ten seconds without a database, and `pg_ctl start`.
//!
//! The server process stays up and reconnects by itself; `/healthz` answers throughout;
//! `/readyz` is 503 `store_unavailable` (with `Retry-After`) while the database is away and
//! 200 once it is back; API calls meanwhile get 503, never 500; the in-flight run is not
//! force-failed (the outage outlasts the stale window on purpose: heartbeats the database
//! could not keep are no runner's silence) and finishes with its state version stored; and
//! afterwards every request path works: a new stack, another run to the end, state reads.
//!
//! The slow apply is a wrapper around the real engine (no providers can be downloaded
//! here): for `apply`, `terraform console` holds the state lock until the test drops a `go`
//! file, then the real apply runs.
//!
//! Without PostgreSQL's server binaries or Terraform the test prints `SKIPPED (tool
//! missing): …` and passes, unless `BOSUN_REQUIRE_TOOLS=1`, where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{
    bosun, probe, terraform_or_skip, try_http, write_executable, OwnPostgres, ServerProcess,
};

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

/// The stale window the server is given: shorter than the outage.
const STALE_AFTER: Duration = Duration::from_secs(5);
/// How long the database stays stopped.
const OUTAGE: Duration = Duration::from_secs(10);

const TERMINAL: &[&str] = &[
    "finished",
    "failed",
    "discarded",
    "canceled",
    "interrupted",
    "force_failed",
    "skipped",
];

struct Env<'a> {
    server: &'a ServerProcess,
    admin: String,
    pg: &'a OwnPostgres,
}

impl Env<'_> {
    fn context(&self) -> String {
        format!(
            "\nserver log (tail):\n{}\nPostgreSQL log (tail):\n{}",
            support::log_tail(self.server, 60),
            tail(&self.pg.log(), 20)
        )
    }

    fn ok_json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = bosun(self.server, &self.admin, &all);
        assert!(
            out.status.success(),
            "bosun {args:?} failed\nstdout:\n{}\nstderr:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.context()
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn run(&self, id: &str) -> Value {
        self.ok_json(&["run", "show", id])
    }

    /// Polls the run until `pred` holds; fails at once if it ends otherwise.
    fn wait_run(&self, id: &str, what: &str, timeout: Duration, pred: impl Fn(&Value) -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            let r = self.run(id);
            if pred(&r) {
                return;
            }
            let state = r["state"].as_str().unwrap_or_default();
            if TERMINAL.contains(&state) || Instant::now() > deadline {
                let logs = bosun(self.server, &self.admin, &["run", "logs", id]);
                panic!(
                    "run {id}: wanted {what} within {timeout:?}; it is:\n{r:#}\nrun log:\n{}{}",
                    String::from_utf8_lossy(&logs.stdout),
                    self.context()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Polls `/readyz` until it answers `want`; returns its body and `Retry-After`.
    fn wait_ready(&self, want: u16, timeout: Duration) -> (String, Option<String>) {
        let deadline = Instant::now() + timeout;
        loop {
            let (status, body, retry) = probe(self.server.addr, "/readyz")
                .unwrap_or_else(|e| panic!("the server stopped answering: {e}{}", self.context()));
            if status == want {
                return (body, retry);
            }
            assert!(
                Instant::now() < deadline,
                "/readyz still {status} ({body}) after {timeout:?}, wanted {want}{}",
                self.context()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn healthy(&self) {
        let (status, body, _) = probe(self.server.addr, "/healthz").unwrap();
        assert_eq!(status, 200, "/healthz: {body}{}", self.context());
    }

    fn versions(&self, stack: &str) -> Vec<Value> {
        self.ok_json(&["state", "versions", stack])["items"]
            .as_array()
            .unwrap()
            .clone()
    }
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The engine for the `slow` stack: `apply` first holds the state lock with `terraform
/// console` until `<dir>/go` exists (at most two minutes), then the real apply runs.
fn slow_apply_engine(dir: &Path, tf: &Path) -> std::path::PathBuf {
    let path = dir.join("slow-apply-engine.sh");
    let script = r#"#!/bin/sh
# bosun faults_store engine wrapper
if [ "$1" = apply ]; then
  echo $$ > "@DIR@/apply.pid"
  i=0
  while [ ! -e "@DIR@/go" ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done | "@TF@" console >"@DIR@/console.log" 2>&1
fi
exec "@TF@" "$@"
"#
    .replace("@DIR@", &dir.display().to_string())
    .replace("@TF@", &tf.display().to_string());
    write_executable(&path, &script);
    path
}

#[test]
fn a_postgresql_restart_and_a_ten_second_outage_mid_apply_are_ridden_out() {
    let Some(tf) = terraform_or_skip() else {
        return;
    };
    let Some(pg) = OwnPostgres::start_or_skip() else {
        return;
    };
    let workspace = Workspace(
        tempfile::Builder::new()
            .prefix("bosun-faults-store-")
            .tempdir()
            .unwrap(),
    );
    let root = &workspace.0;
    let repo = support::bare_repository(root.path(), MAIN_TF);
    let engine = slow_apply_engine(root.path(), &tf);
    let url = pg.url();
    let stale = format!("{}s", STALE_AFTER.as_secs());
    let server = ServerProcess::start(
        &root.path().join("data"),
        &[
            "--database-url",
            url.as_str(),
            "--local-runners",
            "1",
            "--run-heartbeat",
            "1s",
            "--run-stale-after",
            stale.as_str(),
            // The sweep keeps its duty lease through the outage and passes again within a
            // tenth of a second of the database's return, mostly before the runner's next
            // heartbeat (one a second): it must not take the refused ones for silence.
            "--run-sweep-interval",
            "100ms",
            "--duty-lease",
            "60s",
        ],
        &[],
    );
    let env = Env {
        admin: server.admin_token(),
        server: &server,
        pg: &pg,
    };
    let create = |id: &str, engine: &Path| {
        env.ok_json(&[
            "stack",
            "create",
            id,
            "--repository",
            &repo,
            "--engine",
            "terraform",
            "--engine-binary",
            engine.to_str().unwrap(),
            "--var",
            "TF_VAR_replicas=3",
            "--autodeploy",
        ]);
    };
    create("slow", &engine);
    let run = env.ok_json(&["run", "trigger", "slow"])["id"]
        .as_str()
        .unwrap()
        .to_string();
    // Planned, applied automatically, and the apply holds the state lock.
    env.wait_run(&run, "applying", Duration::from_secs(60), |r| {
        r["state"] == "applying"
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let l = env.ok_json(&["state", "lock", "slow"]);
        if l["locked"] == true && l["lock"]["holder"]["id"] == run.as_str() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the apply never took the lock: {l:#}{}",
            env.context()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    env.wait_ready(200, Duration::from_secs(10));

    // (a) A fast restart: every connection of the pool and the listener is cut.
    pg.ctl(&["-m", "fast", "restart"]);
    env.healthy();
    env.wait_ready(200, Duration::from_secs(30));
    assert_eq!(env.run(&run)["state"], "applying");

    // (b) Ten seconds without a database.
    pg.ctl(&["-m", "fast", "stop"]);
    let stopped = Instant::now();
    let (body, retry) = env.wait_ready(503, Duration::from_secs(10));
    let reason: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(reason["error"]["code"], "store_unavailable", "{body}");
    assert!(
        reason["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the database is unavailable"),
        "{body}"
    );
    assert!(retry.is_some(), "/readyz 503 without Retry-After");
    env.healthy();
    // API calls are refused as unavailable, never as internal errors.
    let (status, body) = try_http(
        server.addr,
        "GET",
        &format!("/api/v1/orgs/default/runs/{run}"),
        &env.admin,
        None,
    )
    .unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("store_unavailable"), "{body}");
    let left = OUTAGE.saturating_sub(stopped.elapsed());
    std::thread::sleep(left);
    env.healthy();
    pg.ctl(&["start"]);
    let back = Instant::now();
    env.wait_ready(200, Duration::from_secs(30));

    // The run outlives a stale window after the outage (ten seconds of refused heartbeats
    // are not silence), then finishes once its engine goes on.
    while back.elapsed() < STALE_AFTER + Duration::from_secs(2) {
        let r = env.run(&run);
        assert_eq!(
            r["state"],
            "applying",
            "the run did not survive the outage:\n{r:#}{}",
            env.context()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    std::fs::write(root.path().join("go"), "").unwrap();
    env.wait_run(&run, "finished", Duration::from_secs(60), |r| {
        r["state"] == "finished"
    });
    let r = env.run(&run);
    assert_eq!(r["late_write"], false, "{r:#}");
    let vs = env.versions("slow");
    assert_eq!(vs.len(), 1, "{vs:#?}");
    assert_eq!(vs[0]["writer"]["id"], run.as_str(), "{vs:#?}");
    assert_eq!(vs[0]["outputs"]["greeting"]["value"], "hello-3", "{vs:#?}");
    assert_eq!(env.ok_json(&["state", "lock", "slow"])["locked"], false);

    // Every request path works after the outage: a new stack, a run to its end, state.
    create("after", &tf);
    let second = env.ok_json(&["run", "trigger", "after"])["id"]
        .as_str()
        .unwrap()
        .to_string();
    env.wait_run(&second, "finished", Duration::from_secs(60), |r| {
        r["state"] == "finished"
    });
    let doc = env.ok_json(&["state", "show", "after"]);
    assert_eq!(doc["outputs"]["greeting"]["value"], "hello-3", "{doc:#}");
    let doc = env.ok_json(&["state", "show", "slow"]);
    assert_eq!(doc["outputs"]["replicas"]["value"], 3, "{doc:#}");
    assert!(
        env.server
            .log_text()
            .contains("signal listener reconnected"),
        "the signal listener did not reconnect{}",
        env.context()
    );
}

/// A temp dir whose processes (engines, and the console holding the lock) are killed
/// with it, also when the test fails.
struct Workspace(tempfile::TempDir);

impl Drop for Workspace {
    fn drop(&mut self) {
        support::kill_processes_under(self.0.path());
    }
}
