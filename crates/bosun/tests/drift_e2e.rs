//! Drift checks end to end: the real `bosun server` with its embedded runners, a real git
//! repository served as `file://` and the real Terraform 1.0.3 (outputs only: no
//! providers). An applied stack checks clean; its state changed behind Bosun's back is
//! `drift_detected`; with `reconcile` a tracked run (naming the drift run) restores it;
//! a check whose secret is missing fails before the plan and is `failed`, never skipped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::{bosun, git, http, terraform_or_skip, ServerProcess};

const MAIN_TF: &str = r#"variable "replicas" {
  type    = number
  default = 1
}

output "greeting" {
  value = "hello-${var.replicas}"
}
"#;

struct Env {
    server: ServerProcess,
    admin: String,
}

impl Env {
    fn ok(&self, args: &[&str]) -> String {
        let out = bosun(&self.server, &self.admin, args);
        assert!(
            out.status.success(),
            "bosun {args:?} failed: {}{}\nserver log:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.server.log_text()
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.push("--json");
        let text = self.ok(&args);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    }

    /// Polls `bosun run show RUN` until `pred` holds (deadline 120 s).
    fn wait_run(&self, run: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let r = self.json(&["run", "show", run]);
            if pred(&r) {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "run {run} never {what}: {r}\nlogs:\n{}",
                self.ok(&["run", "logs", run])
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn wait_stack(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let s = self.json(&["stack", "show", "net"]);
            if pred(&s) {
                return s;
            }
            assert!(Instant::now() < deadline, "stack never showed {what}: {s}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Starts a drift check and waits for its outcome.
    fn drift_check(&self) -> Value {
        let r = self.json(&["stack", "drift-check", "net"]);
        assert_eq!(
            (&r["kind"], &r["trigger"]),
            (&Value::from("drift"), &Value::from("manual"))
        );
        let id = r["id"].as_str().unwrap().to_string();
        self.wait_run(&id, "ended", |r| r["drift"]["result"] != "pending")
    }
}

#[test]
fn drift_checks_with_real_terraform() {
    let Some(tf) = terraform_or_skip() else {
        return;
    };
    let dir = tempfile::Builder::new()
        .prefix("bosun-drift-e2e-")
        .tempdir()
        .unwrap();
    let work = dir.path().join("src");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "--quiet", "--initial-branch=main"]);
    std::fs::write(work.join("main.tf"), MAIN_TF).unwrap();
    git(&work, &["add", "--all"]);
    git(&work, &["commit", "--quiet", "-m", "hello"]);
    let repo = format!("file://{}", work.display());

    let server = ServerProcess::start(
        &dir.path().join("data"),
        &["--local-runners", "1"],
        &[("BOSUN_SCHEDULE_INTERVAL", "100ms")],
    );
    let admin = server.admin_token();
    let env = Env { server, admin };
    let tf = tf.to_str().unwrap();
    env.ok(&[
        "stack",
        "create",
        "net",
        "--repository",
        &repo,
        "--engine",
        "terraform",
        "--engine-binary",
        tf,
        "--var",
        "TF_VAR_replicas=3",
        "--autodeploy",
        "--drift-schedule",
        "0 0 1 1 *",
        "--drift-timezone",
        "Pacific/Auckland",
    ]);

    // Apply it: state with greeting = hello-3.
    let run = env.json(&["run", "trigger", "net"]);
    let id = run["id"].as_str().unwrap().to_string();
    env.wait_run(&id, "finished", |r| r["state"] == "finished");

    // Nothing changed: no drift, and the stack shows the check.
    let clean = env.drift_check();
    assert_eq!(
        (&clean["state"], &clean["drift"]["result"]),
        (&Value::from("finished"), &Value::from("no_drift")),
        "{clean}"
    );
    let s = env.wait_stack("the clean check", |s| {
        s["drift_status"]["last_success"]["run"] == clean["id"]
    });
    assert_eq!(s["drift_status"]["last_success"]["result"], "no_drift");
    assert!(
        s["drift_status"]["next_check_at"]
            .as_str()
            .unwrap()
            .ends_with("-12-31T11:00:00Z"),
        "midnight on 1 January in Auckland (summer time, UTC+13): {s}"
    );
    let text = env.ok(&["stack", "show", "net"]);
    assert!(text.contains("0 0 1 1 * in Pacific/Auckland\n"), "{text}");
    assert!(
        text.contains(&format!("no_drift ({})", clean["id"].as_str().unwrap())),
        "{text}"
    );

    // Someone writes the state behind Bosun's back: the output no longer matches.
    let path = "/api/v1/orgs/default/stacks/net/state";
    let (status, body) = http(env.server.addr, "GET", path, &env.admin, None);
    assert_eq!(status, 200, "{body}");
    let mut doc: Value = serde_json::from_str(&body).unwrap();
    doc["serial"] = Value::from(doc["serial"].as_i64().unwrap() + 1);
    doc["outputs"]["greeting"]["value"] = Value::from("tampered");
    let (status, body) = http(
        env.server.addr,
        "POST",
        path,
        &env.admin,
        Some(&doc.to_string()),
    );
    assert_eq!(status, 200, "{body}");

    let drifted = env.drift_check();
    assert_eq!(drifted["drift"]["result"], "drift_detected", "{drifted}");
    assert_eq!(drifted["drift"]["reconcile_run"], Value::Null);
    assert_eq!(
        drifted["plan"]["output_changes"]["greeting"], "update",
        "{drifted}"
    );
    let drifted_id = drifted["id"].as_str().unwrap().to_string();
    let text = env.ok(&["run", "show", &drifted_id]);
    assert!(
        text.contains("drift:") && text.contains("drift_detected"),
        "{text}"
    );

    // The scheduler settles the detection (without reconcile: no tracked run) before
    // reconcile is turned on — a check still unsettled then is settled under the new
    // setting, and its reconcile run would put the output back before the next check.
    let s = env.wait_stack("the detection settled", |s| {
        s["drift_status"]["last_check"]["run"] == drifted["id"]
    });
    assert_eq!(
        s["drift_status"]["last_check"]["reconcile_run"],
        Value::Null,
        "{s}"
    );

    // With reconcile: the next detection starts a tracked run naming it, which (with
    // autodeploy) puts the output back; the check after that is clean again.
    env.ok(&["stack", "update", "net", "--drift-reconcile"]);
    let drifted = env.drift_check();
    assert_eq!(drifted["drift"]["result"], "drift_detected", "{drifted}");
    let drifted_id = drifted["id"].as_str().unwrap().to_string();
    let with_reconcile = env.wait_run(&drifted_id, "got its reconcile run", |r| {
        r["drift"]["reconcile_run"].is_string()
    });
    let tracked = with_reconcile["drift"]["reconcile_run"]
        .as_str()
        .unwrap()
        .to_string();
    let t = env.wait_run(&tracked, "finished", |r| r["state"] == "finished");
    assert_eq!(
        (&t["kind"], &t["trigger"], &t["reconciles"]),
        (
            &Value::from("tracked"),
            &Value::from("schedule"),
            &Value::from(drifted_id.clone())
        )
    );
    assert_eq!(t["triggered_by"], format!("run:{drifted_id}"));
    let (_, body) = http(env.server.addr, "GET", path, &env.admin, None);
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["outputs"]["greeting"]["value"], "hello-3");
    assert_eq!(env.drift_check()["drift"]["result"], "no_drift");

    // A secret the stack needs is gone: the check fails before the plan, and says why.
    env.ok(&[
        "stack",
        "update",
        "net",
        "--var",
        "TF_VAR_replicas=secret://ops/replicas",
    ]);
    let failed = env.drift_check();
    assert_eq!(
        (&failed["state"], &failed["drift"]["result"]),
        (&Value::from("failed"), &Value::from("failed")),
        "{failed}"
    );
    assert!(
        failed["reason"].as_str().unwrap().contains("ops/replicas"),
        "{failed}"
    );
    let s = env.wait_stack("the failed check", |s| {
        s["drift_status"]["last_check"]["run"] == failed["id"]
    });
    assert_eq!(s["drift_status"]["last_check"]["result"], "failed");
    assert_eq!(
        s["drift_status"]["last_success"]["result"], "no_drift",
        "a failure is never a success"
    );
}
