//! Runs end to end: the real `bosun server` (with its embedded runners, or a separate
//! `bosun runner` process), real git repositories served as `file://` URLs and the real
//! Terraform 1.0.3 (a module of variables, locals and outputs only: no providers). Plan,
//! confirm and apply; autodeploy; proposed runs; cancel and phase timeouts that kill the
//! engine's process group; a runner killed mid-apply (force-fail, lock release, late
//! write); a laptop's state lock blocking the queue; a server killed mid-run.
//!
//! Slow engines are shell wrappers around the real binary, written into each test's
//! temp dir. Every process left working inside that dir is killed when the test ends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{
    bosun, deliver_webhook, git, http, terraform_or_skip, wait_for, KillOnDrop, ServerProcess, BIN,
};
use tempfile::TempDir;

// ---- tools, repositories, engine wrappers ------------------------------------------------

/// The module every stack runs: one variable, a local and two outputs.
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

/// One test's world: its temp dir, the engine, and a bare repository holding `MAIN_TF`.
struct Fixture {
    dir: TempDir,
    tf: PathBuf,
    repo_url: String,
}

impl Fixture {
    /// `None` when Terraform is missing (the skip is announced).
    fn new() -> Option<Fixture> {
        let tf = terraform_or_skip()?;
        let dir = tempfile::Builder::new()
            .prefix("bosun-runs-e2e-")
            .tempdir()
            .unwrap();
        let repo_url = support::bare_repository(dir.path(), MAIN_TF);
        Some(Fixture { repo_url, tf, dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn data_dir(&self) -> PathBuf {
        self.path().join("data")
    }

    /// Writes an engine wrapper: `plan` and `apply` first run their shell snippets, then
    /// every command execs the real engine. Each plan/apply invocation records its pid —
    /// the runner starts every command in a process group of its own, so that is also
    /// the group id — in `<name>.plan.pid` / `<name>.apply.pid`.
    fn wrapper(&self, name: &str, on_plan: &str, on_apply: &str) -> PathBuf {
        let path = self.path().join(format!("{name}-engine.sh"));
        let dir = self.path().display().to_string();
        let script = r#"#!/bin/sh
# bosun runs_e2e engine wrapper @NAME@
case "$1" in
  plan)
    echo $$ > "@DIR@/@NAME@.plan.pid"
    @ON_PLAN@
    ;;
  apply)
    echo $$ > "@DIR@/@NAME@.apply.pid"
    @ON_APPLY@
    ;;
esac
exec "@TF@" "$@"
"#
        .replace("@ON_PLAN@", if on_plan.is_empty() { ":" } else { on_plan })
        .replace(
            "@ON_APPLY@",
            if on_apply.is_empty() { ":" } else { on_apply },
        )
        .replace("@NAME@", name)
        .replace("@DIR@", &dir)
        .replace("@TF@", &self.tf.display().to_string());
        support::write_executable(&path, &script);
        path
    }

    /// A wrapper whose `plan` sleeps 30 s before running.
    fn slow_plan_wrapper(&self) -> PathBuf {
        self.wrapper("slowplan", "sleep 30", "")
    }

    /// The pid a wrapper recorded for `phase` (`plan`, `apply`), once it has.
    fn recorded_pid(&self, name: &str, phase: &str) -> Option<i32> {
        std::fs::read_to_string(self.path().join(format!("{name}.{phase}.pid")))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // Nothing the test started may outlive it: engines (and their sleeps) work in
        // runner workspaces inside the temp dir.
        support::kill_processes_under(self.dir.path());
    }
}

// ---- processes ---------------------------------------------------------------------------

/// A live (not zombie) process as /proc shows it.
struct Proc {
    pid: i32,
    pgrp: i32,
    cwd: Option<PathBuf>,
    cmdline: String,
}

fn processes() -> Vec<Proc> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp …`; comm may hold spaces and parentheses.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() < 3 || fields[0] == "Z" || fields[0] == "X" {
            continue;
        }
        let Ok(pgrp) = fields[2].parse() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        out.push(Proc {
            pid,
            pgrp,
            cwd: std::fs::read_link(entry.path().join("cwd")).ok(),
            cmdline,
        });
    }
    out
}

fn kill(pid: i32, sig: i32) {
    if pid > 1 {
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// Kills process group `pgid`, when it is one of ours: its members work inside `root`.
fn kill_group_in(pgid: i32, root: &Path) {
    for p in processes() {
        if p.pgrp == pgid && p.cwd.as_ref().is_some_and(|c| c.starts_with(root)) {
            kill(p.pid, libc::SIGKILL);
        }
    }
}

/// Live processes of group `pgid`, or whose command line mentions `marker`.
fn leftovers(pgid: i32, marker: &str) -> Vec<String> {
    processes()
        .into_iter()
        .filter(|p| p.pgrp == pgid || p.cmdline.contains(marker))
        .map(|p| format!("{} (group {}): {}", p.pid, p.pgrp, p.cmdline))
        .collect()
}

// ---- the server and the CLI --------------------------------------------------------------

struct Env {
    server: ServerProcess,
    admin: String,
}

fn start(fx: &Fixture, args: &[&str]) -> Env {
    let server = ServerProcess::start(&fx.data_dir(), args, &[]);
    let admin = server.admin_token();
    Env { server, admin }
}

fn describe(out: &std::process::Output) -> String {
    format!(
        "status: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs a command that must succeed; returns its stdout.
fn ok(env: &Env, args: &[&str]) -> String {
    let out = bosun(&env.server, &env.admin, args);
    assert!(
        out.status.success(),
        "bosun {args:?} failed\n{}\nserver log (tail):\n{}",
        describe(&out),
        log_tail(&env.server)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `bosun --json ARGS`, parsed.
fn ok_json(env: &Env, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let text = ok(env, &all);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

fn log_tail(server: &ServerProcess) -> String {
    let log = server.log.lock().unwrap();
    let from = log.len().saturating_sub(40);
    log[from..].join("\n")
}

fn create_stack(env: &Env, fx: &Fixture, id: &str, engine: &Path, extra: &[&str]) {
    let engine = engine.to_str().unwrap();
    let mut args = vec![
        "stack",
        "create",
        id,
        "--repository",
        &fx.repo_url,
        "--engine",
        "terraform",
        "--engine-binary",
        engine,
        "--var",
        "TF_VAR_replicas=3",
    ];
    args.extend_from_slice(extra);
    ok(env, &args);
}

fn trigger(env: &Env, stack: &str, extra: &[&str]) -> String {
    let mut args = vec!["run", "trigger", stack];
    args.extend_from_slice(extra);
    let run = ok_json(env, &args);
    run["id"].as_str().unwrap().to_string()
}

fn show(env: &Env, run: &str) -> Value {
    ok_json(env, &["run", "show", run])
}

fn state(run: &Value) -> &str {
    run["state"].as_str().unwrap()
}

const TERMINAL: &[&str] = &[
    "finished",
    "failed",
    "discarded",
    "canceled",
    "interrupted",
    "force_failed",
    "skipped",
];

/// Polls the run until `pred` holds, up to `timeout`. Fails at once (with the run and
/// its log) if the run ends in a way that does not satisfy `pred`.
fn wait_run(
    env: &Env,
    run: &str,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let r = show(env, run);
        if pred(&r) {
            return r;
        }
        if TERMINAL.contains(&state(&r)) || Instant::now() > deadline {
            let logs = bosun(&env.server, &env.admin, &["run", "logs", run]);
            panic!(
                "run {run}: wanted {what} within {timeout:?}; it is:\n{r:#}\nrun log:\n{}\nserver log (tail):\n{}",
                String::from_utf8_lossy(&logs.stdout),
                log_tail(&env.server)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn wait_state(env: &Env, run: &str, want: &str, timeout: Duration) -> Value {
    wait_run(env, run, want, timeout, |r| state(r) == want)
}

fn versions(env: &Env, stack: &str) -> Vec<Value> {
    ok_json(env, &["state", "versions", stack])["items"]
        .as_array()
        .unwrap()
        .clone()
}

fn lock_status(env: &Env, stack: &str) -> Value {
    ok_json(env, &["state", "lock", stack])
}

fn phase_states(run: &Value) -> Vec<String> {
    run["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["state"].as_str().unwrap().to_string())
        .collect()
}

const PLAN_WAIT: Duration = Duration::from_secs(60);

// ---- tests -------------------------------------------------------------------------------

#[test]
fn plan_waits_for_confirmation_then_applies_and_writes_state() {
    let Some(fx) = Fixture::new() else { return };
    let env = start(&fx, &["--local-runners", "1"]);
    create_stack(&env, &fx, "web", &fx.tf, &[]);

    let run = trigger(&env, "web", &[]);
    let r = wait_state(&env, &run, "unconfirmed", PLAN_WAIT);
    assert_eq!(r["kind"], "tracked");
    assert_eq!(r["plan"]["has_changes"], true, "{r:#}");
    assert_eq!(
        r["plan"]["output_changes"],
        serde_json::json!({"greeting": "create", "replicas": "create"}),
        "{r:#}"
    );
    assert!(r["commit"].as_str().is_some_and(|c| c.len() >= 7), "{r:#}");
    assert!(versions(&env, "web").is_empty(), "nothing applied yet");

    ok(&env, &["run", "confirm", &run]);
    let r = wait_state(&env, &run, "finished", PLAN_WAIT);
    assert_eq!(r["late_write"], false, "{r:#}");
    let phases = phase_states(&r);
    for want in ["queued", "preparing", "planning", "unconfirmed", "applying"] {
        assert!(phases.iter().any(|p| p == want), "phase {want}: {r:#}");
    }

    let vs = versions(&env, "web");
    assert_eq!(vs.len(), 1, "one version: {vs:#?}");
    let v = &vs[0];
    assert_eq!(v["current"], true);
    assert_eq!(v["late_write"], false);
    assert_eq!(v["writer"]["kind"], "run");
    assert_eq!(v["writer"]["id"], run.as_str());
    assert_eq!(v["outputs"]["greeting"]["value"], "hello-3", "{v:#}");
    assert_eq!(v["outputs"]["replicas"]["value"], 3, "{v:#}");
    // The stored document is what the version says.
    let doc = ok_json(&env, &["state", "show", "web"]);
    assert_eq!(doc["serial"], v["serial"], "{doc:#}");
    assert!(v["serial"].is_u64(), "{v:#}");
    assert_eq!(doc["lineage"], v["lineage"], "{doc:#}");
    assert_eq!(doc["outputs"]["greeting"]["value"], "hello-3");
    assert_eq!(doc["outputs"]["replicas"]["value"], 3);
    // The engine released its lock.
    assert_eq!(lock_status(&env, "web")["locked"], false);

    // Every chunk of the log says when it arrived and which phase wrote it, and the
    // printed log marks where the apply phase begins.
    let chunks = ok_json(&env, &["run", "logs", &run]);
    let chunks = chunks.as_array().unwrap();
    assert!(chunks.iter().all(|c| c["at"].is_string()), "{chunks:#?}");
    let phases: Vec<&str> = chunks.iter().filter_map(|c| c["phase"].as_str()).collect();
    assert_eq!(phases.len(), chunks.len(), "{chunks:#?}");
    let first_apply = phases
        .iter()
        .position(|p| *p == "apply")
        .expect("apply chunks");
    assert!(
        phases[..first_apply].iter().all(|p| *p == "plan"),
        "{phases:?}"
    );
    assert!(
        phases[first_apply..].iter().all(|p| *p == "apply"),
        "{phases:?}"
    );
    let text = ok(&env, &["run", "logs", &run]);
    let plan_at = text.find("── plan ──\n").expect(&text);
    let apply_at = text.find("── apply ──\n").expect(&text);
    assert!(plan_at == 0 && plan_at < apply_at, "{text}");
    assert!(text[apply_at..].contains("Apply complete!"), "{text}");
    let stamped = ok(&env, &["run", "logs", &run, "--timestamps"]);
    let line = stamped.lines().nth(1).unwrap_or_default();
    assert!(
        chrono::DateTime::parse_from_rfc3339(line.split(' ').next().unwrap_or_default()).is_ok(),
        "a line starts with its time: {line:?}"
    );
}

#[test]
fn autodeploy_applies_and_an_unchanged_rerun_stops_after_the_plan() {
    let Some(fx) = Fixture::new() else { return };
    let env = start(&fx, &["--local-runners", "1"]);
    create_stack(&env, &fx, "auto", &fx.tf, &["--autodeploy"]);

    let first = trigger(&env, "auto", &[]);
    let r = wait_state(&env, &first, "finished", PLAN_WAIT);
    assert_eq!(r["plan"]["has_changes"], true, "{r:#}");
    let phases = phase_states(&r);
    assert!(phases.iter().any(|p| p == "applying"), "{r:#}");
    assert!(!phases.iter().any(|p| p == "unconfirmed"), "{r:#}");
    let vs = versions(&env, "auto");
    assert_eq!(vs.len(), 1, "{vs:#?}");
    assert_eq!(vs[0]["writer"]["id"], first.as_str());

    // Nothing changed: the second run plans no changes and ends without applying.
    let second = trigger(&env, "auto", &[]);
    let r = wait_state(&env, &second, "finished", PLAN_WAIT);
    assert_eq!(r["plan"]["has_changes"], false, "{r:#}");
    assert!(
        !phase_states(&r).iter().any(|p| p == "applying"),
        "no apply: {r:#}"
    );
    let after = versions(&env, "auto");
    assert_eq!(after.len(), 1, "no new version: {after:#?}");
    assert_eq!(after[0]["version"], vs[0]["version"]);
}

#[test]
fn a_proposed_run_plans_and_never_writes_state() {
    let Some(fx) = Fixture::new() else { return };
    let env = start(&fx, &["--local-runners", "1"]);
    create_stack(&env, &fx, "prop", &fx.tf, &["--autodeploy"]);

    let run = trigger(&env, "prop", &["--proposed"]);
    let r = wait_state(&env, &run, "finished", PLAN_WAIT);
    assert_eq!(r["kind"], "proposed");
    assert_eq!(r["plan"]["has_changes"], true, "{r:#}");
    assert_eq!(r["plan"]["output_changes"]["greeting"], "create", "{r:#}");
    assert!(!phase_states(&r).iter().any(|p| p == "applying"), "{r:#}");
    assert!(
        versions(&env, "prop").is_empty(),
        "a proposed run wrote state"
    );
    assert_eq!(lock_status(&env, "prop")["locked"], false);
}

#[test]
fn cancel_during_plan_kills_the_engine_process_group() {
    let Some(fx) = Fixture::new() else { return };
    let engine = fx.slow_plan_wrapper();
    let env = start(&fx, &["--local-runners", "1"]);
    create_stack(&env, &fx, "slow", &engine, &[]);

    let run = trigger(&env, "slow", &[]);
    wait_state(&env, &run, "planning", PLAN_WAIT);
    // The wrapper is in its 30 s sleep before `plan`.
    let pgid = wait_for("the plan wrapper starts", PLAN_WAIT, || {
        fx.recorded_pid("slowplan", "plan")
    });
    assert!(
        processes().iter().any(|p| p.pgrp == pgid),
        "the wrapper's group is running"
    );

    let t0 = Instant::now();
    ok(&env, &["run", "cancel", &run]);
    let r = wait_state(&env, &run, "canceled", Duration::from_secs(20));
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(20), "canceled after {took:?}");
    assert!(versions(&env, "slow").is_empty());

    // The engine's whole group is gone: the shell and its sleep.
    let marker = engine.display().to_string();
    wait_for(
        "the wrapper's process group is gone",
        Duration::from_secs(10),
        || leftovers(pgid, &marker).is_empty().then_some(()),
    );
    eprintln!(
        "canceled in {took:?}; reason: {}",
        r["reason"].as_str().unwrap_or("-")
    );
}

#[test]
fn a_phase_past_its_timeout_is_interrupted() {
    let Some(fx) = Fixture::new() else { return };
    let engine = fx.slow_plan_wrapper();
    let env = start(&fx, &["--local-runners", "1", "--run-phase-timeout", "3s"]);
    create_stack(&env, &fx, "slow", &engine, &[]);

    let run = trigger(&env, "slow", &[]);
    let t0 = Instant::now();
    // Well before the wrapper's 30 s sleep would have ended.
    let r = wait_state(&env, &run, "interrupted", Duration::from_secs(25));
    assert!(versions(&env, "slow").is_empty());
    assert_eq!(lock_status(&env, "slow")["locked"], false);
    if let Some(pgid) = fx.recorded_pid("slowplan", "plan") {
        let marker = engine.display().to_string();
        wait_for(
            "the timed-out engine's group is gone",
            Duration::from_secs(15),
            || leftovers(pgid, &marker).is_empty().then_some(()),
        );
    }
    eprintln!(
        "interrupted after {:?}; reason: {}",
        t0.elapsed(),
        r["reason"].as_str().unwrap_or("-")
    );
}

#[test]
fn a_runner_killed_mid_apply_is_force_failed_and_its_late_write_is_flagged() {
    let Some(fx) = Fixture::new() else { return };
    // For `apply`, the engine first holds the stack's state lock — `terraform console`
    // locks the state while it waits for input — until the test drops a `go` file, then
    // applies. So the run is applying *and* holds the lock when its runner dies, and the
    // orphaned engine writes its state only after the run was force-failed. The late
    // apply writes to the output the runner gave it: the runner hands engines files, not
    // pipes, so they outlive it (a pipe would kill Terraform with SIGPIPE mid-apply).
    let dir = fx.path().display().to_string();
    let tf = fx.tf.display().to_string();
    let on_apply = r#"i=0
    while [ ! -e "@DIR@/go" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done | "@TF@" console >"@DIR@/console.log" 2>&1
    exec "@TF@" "$@""#
        .replace("@DIR@", &dir)
        .replace("@TF@", &tf);
    let engine = fx.wrapper("holdlock", "", &on_apply);
    let env = start(
        &fx,
        &[
            "--local-runners",
            "0",
            "--run-heartbeat",
            "1s",
            "--run-stale-after",
            "3s",
            "--run-sweep-interval",
            "200ms",
        ],
    );
    create_stack(&env, &fx, "edge", &engine, &["--runner-pool", "edge"]);
    let pool_token = ok_json(&env, &["token", "create", "--pool", "edge"])["secret"]
        .as_str()
        .unwrap()
        .to_string();

    let runner_log = std::fs::File::create(fx.path().join("runner.log")).unwrap();
    let runner = Command::new(BIN)
        .args([
            "runner",
            "--server",
            &env.server.url(),
            "--token",
            &pool_token,
        ])
        .arg("--work-dir")
        .arg(fx.path().join("runner-work"))
        .args(["--name", "edge-1"])
        .env_remove("BOSUN_TOKEN")
        .env_remove("BOSUN_URL")
        .env_remove("BOSUN_RUNNER_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(runner_log)
        .spawn()
        .unwrap();
    let mut runner = KillOnDrop(runner);

    let run = trigger(&env, "edge", &[]);
    wait_state(&env, &run, "unconfirmed", PLAN_WAIT);
    ok(&env, &["run", "confirm", &run]);
    wait_state(&env, &run, "applying", PLAN_WAIT);
    let lock = wait_for("the run holds the state lock", PLAN_WAIT, || {
        let l = lock_status(&env, "edge");
        (l["locked"] == true && l["lock"]["holder"]["kind"] == "run").then_some(l)
    });
    assert_eq!(lock["lock"]["holder"]["id"], run.as_str(), "{lock:#}");
    assert_eq!(state(&show(&env, &run)), "applying");

    // kill -9 the runner only; the engine, in its own process group, lives on.
    runner.0.kill().unwrap();
    runner.0.wait().unwrap();
    let killed = Instant::now();
    let apply_pgid = fx.recorded_pid("holdlock", "apply").unwrap();
    assert!(
        processes().iter().any(|p| p.pgrp == apply_pgid),
        "the orphaned engine is running"
    );

    // stale_after (3 s) + sweep and heartbeat slack.
    let r = wait_state(&env, &run, "force_failed", Duration::from_secs(10));
    let took = killed.elapsed();
    let reason = r["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("runner timed out or never reported"),
        "{reason}"
    );
    assert_eq!(r["late_write"], false);
    let l = lock_status(&env, "edge");
    assert_eq!(
        l["locked"], false,
        "the sweep released the run's lock: {l:#}"
    );
    assert!(versions(&env, "edge").is_empty());

    // Let the orphaned engine go on: it applies and writes its state late.
    std::fs::write(fx.path().join("go"), "").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let v = loop {
        if let Some(v) = versions(&env, "edge").into_iter().next() {
            break v;
        }
        if Instant::now() > deadline {
            let read = |f: &str| std::fs::read_to_string(fx.path().join(f)).unwrap_or_default();
            panic!(
                "no late write within 20 s\nconsole:\n{}\nlate apply:\n{}\nserver log (tail):\n{}",
                read("console.log"),
                read("late-apply.log"),
                log_tail(&env.server)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(v["late_write"], true, "{v:#}");
    assert_eq!(v["writer"]["kind"], "run");
    assert_eq!(v["writer"]["id"], run.as_str());
    assert_eq!(v["current"], true, "nobody else held the lock: {v:#}");
    assert_eq!(v["outputs"]["greeting"]["value"], "hello-3");
    let r = wait_run(
        &env,
        &run,
        "late_write on the run",
        Duration::from_secs(20),
        |r| r["late_write"] == true,
    );
    assert_eq!(state(&r), "force_failed");
    eprintln!("force-failed {took:?} after the kill; reason: {reason}");
}

const LAPTOP_LOCK: &str = r#"{"ID":"laptop-1","Operation":"OperationTypeApply","Who":"alice@laptop","Version":"1.0.3","Created":"","Path":"","Info":""}"#;

#[test]
fn a_laptop_lock_keeps_the_run_queued_until_unlocked() {
    let Some(fx) = Fixture::new() else { return };
    let env = start(&fx, &["--local-runners", "1"]);
    create_stack(&env, &fx, "net", &fx.tf, &[]);
    let path = "/api/v1/orgs/default/stacks/net/state";

    let (status, body) = http(env.server.addr, "LOCK", path, &env.admin, Some(LAPTOP_LOCK));
    assert_eq!(status, 200, "{body}");

    let run = trigger(&env, "net", &[]);
    let r = wait_run(
        &env,
        &run,
        "blocked by alice@laptop",
        Duration::from_secs(30),
        |r| r["blocked_by"]["Who"] == "alice@laptop",
    );
    assert_eq!(state(&r), "queued", "{r:#}");
    assert_eq!(r["blocked_by"]["ID"], "laptop-1", "{r:#}");
    assert_eq!(r["blocked_by"]["Operation"], "OperationTypeApply", "{r:#}");
    assert!(r["blocked_since"].is_string(), "{r:#}");

    let (status, body) = http(
        env.server.addr,
        "UNLOCK",
        path,
        &env.admin,
        Some(LAPTOP_LOCK),
    );
    assert_eq!(status, 200, "{body}");
    let r = wait_state(&env, &run, "unconfirmed", PLAN_WAIT);
    assert!(r["blocked_by"].is_null(), "{r:#}");
    assert_eq!(r["plan"]["has_changes"], true);
    // The wait is kept on the run, and its log begins with it.
    let waits = r["lock_waits"].as_array().expect("lock_waits");
    assert_eq!(waits.len(), 1, "{r:#}");
    assert_eq!(waits[0]["holder"]["Who"], "alice@laptop", "{r:#}");
    assert_eq!(waits[0]["holder"]["ID"], "laptop-1", "{r:#}");
    let at = |k: &str| chrono::DateTime::parse_from_rfc3339(waits[0][k].as_str().unwrap()).unwrap();
    assert!(at("from") <= at("until"), "{r:#}");
    let shown = ok(&env, &["run", "show", &run]);
    assert!(
        shown.contains("for the state lock laptop-1 held by alice@laptop ("),
        "{shown}"
    );
    let log = ok(&env, &["run", "logs", &run]);
    assert!(
        log.starts_with("── plan ──\nbosun: waited ")
            && log.contains("for the state lock held by alice@laptop, until it was released"),
        "{log}"
    );
}

#[test]
fn a_run_of_a_server_killed_mid_run_is_force_failed_after_restart() {
    let Some(fx) = Fixture::new() else { return };
    let engine = fx.slow_plan_wrapper();
    let timing = [
        "--run-heartbeat",
        "1s",
        "--run-stale-after",
        "3s",
        "--run-sweep-interval",
        "200ms",
    ];
    let mut args = vec!["--local-runners", "1"];
    args.extend_from_slice(&timing);
    let mut env = start(&fx, &args);
    create_stack(&env, &fx, "slow", &engine, &[]);

    let run = trigger(&env, "slow", &[]);
    wait_state(&env, &run, "planning", PLAN_WAIT);
    let pgid = wait_for("the plan wrapper starts", PLAN_WAIT, || {
        fx.recorded_pid("slowplan", "plan")
    });

    // kill -9 the server; its embedded runners die with it, the engine is orphaned.
    env.server.signal(libc::SIGKILL);
    assert!(env.server.wait_exit(Duration::from_secs(10)).is_some());
    kill_group_in(pgid, fx.path());
    let marker = engine.display().to_string();
    wait_for(
        "the orphaned wrapper is gone",
        Duration::from_secs(10),
        || leftovers(pgid, &marker).is_empty().then_some(()),
    );

    let mut args = vec!["--local-runners", "0"];
    args.extend_from_slice(&timing);
    env.server = ServerProcess::start(&fx.data_dir(), &args, &[]);
    let restarted = Instant::now();
    let r = wait_state(&env, &run, "force_failed", Duration::from_secs(15));
    let reason = r["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("runner timed out or never reported"),
        "{reason}"
    );
    assert!(versions(&env, "slow").is_empty());
    assert_eq!(lock_status(&env, "slow")["locked"], false);
    eprintln!("force-failed {:?} after the restart", restarted.elapsed());
}

#[test]
fn a_github_push_runs_with_its_own_installation_token_cloned_over_http() {
    let Some(fx) = Fixture::new() else { return };
    let Some(examples) = bosun_testkit::require_examples() else {
        return;
    };
    const SECRET: &str = "e2e-webhook-secret";
    let repos = fx.dir.path().join("github");
    std::fs::create_dir_all(&repos).unwrap();
    let gh = bosun_testkit::GithubDouble::start(4242, &repos);
    gh.add_installation(9, "acme", &["acme/infra"]);
    let repo = bosun_testkit::BareRepo::create(&repos, "acme/infra");
    let work = repo.work_tree();
    let before = work.commit(&[("README.md", "infra\n")], "init");
    work.push("main");
    let key = bosun_testkit::write_app_key(fx.dir.path());
    let env = start(
        &fx,
        &[
            "--local-runners",
            "1",
            "--github-webhook-secret",
            SECRET,
            "--github-app-id",
            "4242",
            "--github-app-key-file",
            key.to_str().unwrap(),
            "--github-api-url",
            gh.url(),
            "--github-url",
            gh.url(),
            "--git-poll-interval",
            "0s",
        ],
    );
    let tf = fx.tf.to_str().unwrap().to_string();
    ok(
        &env,
        &[
            "stack",
            "create",
            "web",
            "--repository",
            "github:acme/infra",
            "--path",
            "infra",
            "--engine",
            "terraform",
            "--engine-binary",
            &tf,
            "--var",
            "TF_VAR_replicas=2",
            "--autodeploy",
        ],
    );

    // A push touching the stack's folder, delivered as GitHub delivers it.
    let after = work.commit(&[("infra/main.tf", MAIN_TF)], "the module");
    work.push("main");
    let mut payload = examples.example("push", |p| {
        p["ref"]
            .as_str()
            .is_some_and(|r| r.starts_with("refs/heads/"))
    });
    payload["ref"] = "refs/heads/main".into();
    payload["before"] = before.clone().into();
    payload["after"] = after.clone().into();
    payload["repository"]["full_name"] = "acme/infra".into();
    payload["installation"] = serde_json::json!({"id": 9});
    let body = serde_json::to_vec(&payload).unwrap();
    let sig = bosun_testkit::sign(SECRET.as_bytes(), &body);
    let (status, reply) = deliver_webhook(env.server.addr, "push", "e2e-1", &body, &sig);
    assert_eq!(status, 200, "{reply}");
    let reply: Value = serde_json::from_str(&reply).unwrap();
    let run = reply["triggered"][0]["run"]
        .as_str()
        .expect("a run")
        .to_string();

    let r = wait_state(&env, &run, "finished", PLAN_WAIT);
    assert_eq!(
        (r["trigger"].as_str(), r["commit"].as_str()),
        (Some("push"), Some(after.as_str()))
    );
    let vs = versions(&env, "web");
    assert_eq!(vs.len(), 1, "the apply wrote state: {vs:#?}");

    // The runner cloned over HTTP with a token minted for this repository alone, read-only,
    // and the token was revoked once the run ended.
    let run_tokens: Vec<_> = gh
        .git_requests()
        .into_iter()
        .filter(|g| g.refusal.is_none())
        .filter_map(|g| g.token)
        .collect();
    assert!(
        !run_tokens.is_empty(),
        "the runner fetched over HTTP: {:?}",
        gh.git_requests()
    );
    // Every token is for this repository alone, with one permission: `contents: read`
    // for the run, or a write permission the check run and comment need (those are kept
    // by the server while they live; the run's are revoked when it ends).
    let feedback = [
        serde_json::json!({"checks": "write"}),
        serde_json::json!({"pull_requests": "write"}),
    ];
    for req in gh.token_requests() {
        assert!(req.accepted, "{req:?}");
        assert_eq!(req.repositories, ["infra"]);
        assert!(
            req.permissions == serde_json::json!({"contents": "read"})
                || feedback.contains(&req.permissions),
            "{req:?}"
        );
    }
    wait_for("every run token revoked", Duration::from_secs(20), || {
        let issued = gh.issued_tokens();
        issued
            .iter()
            .filter(|t| t.permissions.get("contents").is_some())
            .all(|t| t.revoked)
            .then_some(())
    });
    // The push's tracked run has its check run on the pushed commit, completed.
    wait_for("the check run completed", Duration::from_secs(20), || {
        let checks = gh.check_runs();
        (checks.len() == 1
            && checks[0].name == "bosun/web"
            && checks[0].head_sha == after
            && checks[0].conclusion.as_deref() == Some("success"))
        .then_some(())
    });
    assert!(
        gh.contract_violations().is_empty(),
        "{:?}",
        gh.contract_violations()
    );
    let logs = ok(&env, &["run", "logs", &run]);
    for t in gh.issued_tokens() {
        assert!(!logs.contains(&t.token), "a token leaked into the run log");
    }
}

/// PyJWT with its crypto extra, or `None` after announcing the skip.
fn pyjwt_or_skip() -> Option<()> {
    let ok = Command::new("python3")
        .args(["-c", "import jwt, cryptography"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some(());
    }
    if std::env::var("BOSUN_REQUIRE_TOOLS").as_deref() == Ok("1") {
        panic!("PyJWT is required (BOSUN_REQUIRE_TOOLS=1): pip install 'pyjwt[crypto]'");
    }
    let _ = writeln!(std::io::stderr(), "SKIPPED (tool missing): pyjwt");
    None
}

/// Runs the independent verifier on a token file: (exit code, output).
fn verify_jwt(issuer: &str, token_file: &Path, audience: &str) -> (i32, String) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/verify_jwt.py");
    let out = Command::new("python3")
        .args([script, issuer, token_file.to_str().unwrap(), audience])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn a_run_requests_its_identity_that_an_independent_verifier_accepts_and_secrets_are_masked() {
    let Some(fx) = Fixture::new() else { return };
    let Some(()) = pyjwt_or_skip() else { return };
    let tokens = fx.dir.path().join("tokens");
    std::fs::create_dir_all(&tokens).unwrap();
    // The engine: asks for an identity token the way a cloud SDK would, prints the
    // secret it was given, then runs the real Terraform.
    let wrapper = fx.dir.path().join("tf-with-identity.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nset -e\nn=$(ls {tokens} | wc -l)\ncurl -sSf -H \"Authorization: Bearer $BOSUN_ID_TOKEN_REQUEST_TOKEN\" \"$BOSUN_ID_TOKEN_REQUEST_URL?audience=bosun-e2e\" > {tokens}/reply-$n.json\necho \"the database password is $TF_VAR_db_password\" >&2\nexec {tf} \"$@\"\n",
            tokens = tokens.display(),
            tf = fx.tf.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let env = start(&fx, &["--local-runners", "1", "--oidc-token-ttl", "10s"]);
    let issuer = env.server.url();
    ok(
        &env,
        &["secret", "set", "db/password", "--value", "pa55-w0rd-e2e"],
    );
    create_stack(
        &env,
        &fx,
        "web",
        &wrapper,
        &["--var", "TF_VAR_db_password=secret://db/password"],
    );
    let run = trigger(&env, "web", &["--proposed"]);
    wait_state(&env, &run, "finished", PLAN_WAIT);

    // Each engine call got a token; the verifier accepts it with the right audience.
    let reply: Value =
        serde_json::from_str(&std::fs::read_to_string(tokens.join("reply-0.json")).unwrap())
            .unwrap();
    let token_file = tokens.join("token.jwt");
    std::fs::write(&token_file, reply["value"].as_str().unwrap()).unwrap();
    let (code, out) = verify_jwt(&issuer, &token_file, "bosun-e2e");
    assert_eq!(code, 0, "the verifier refused: {out}");
    let claims: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(claims["sub"], "org:default:stack:web:run_phase:plan");
    assert_eq!(claims["run_id"], run.as_str());
    assert_eq!(claims["exp"], reply["expires_at"]);
    assert_eq!(
        verify_jwt(&issuer, &token_file, "someone-else").0,
        4,
        "wrong audience refused"
    );

    // A rotation keeps the old key published: the token still verifies.
    let rotated = ok_json(&env, &["oidc", "rotate"]);
    assert_ne!(rotated["active"], Value::Null);
    let (code, out) = verify_jwt(&issuer, &token_file, "bosun-e2e");
    assert_eq!(code, 0, "after rotation: {out}");

    // The secret reached the engine but never the log.
    let log = ok(&env, &["run", "logs", &run]);
    assert!(log.contains("the database password is ***"), "{log}");
    assert!(
        !log.contains("pa55-w0rd-e2e"),
        "the secret leaked into the log"
    );

    // And once its lifetime is over, the token is refused as expired.
    let exp = claims["exp"].as_i64().unwrap();
    wait_for("the token to expire", Duration::from_secs(30), || {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        (now > exp).then_some(())
    });
    let (code, out) = verify_jwt(&issuer, &token_file, "bosun-e2e");
    assert_eq!(code, 3, "expired: {out}");
}

// ---- dependencies ------------------------------------------------------------------------

/// An upstream module: a required variable and outputs, no resources, so its outputs
/// change only through the variable.
const NET_TF: &str = r#"variable "vpc" {
  type = string
}

output "vpc_id" {
  value = "vpc-${var.vpc}"
}

output "region" {
  value = "eu-west-1"
}
"#;

/// A downstream module: what the upstream passes it, echoed as an output.
const APP_TF: &str = r#"variable "network_id" {
  type = string
}

output "seen" {
  value = var.network_id
}
"#;

/// A second bare repository beside the fixture's, holding `files`.
fn repo_with(fx: &Fixture, name: &str, files: &[(&str, &str)]) -> String {
    let work = fx.path().join(format!("{name}-src"));
    for (path, text) in files {
        let file = work.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, text).unwrap();
    }
    git(&work, &["init", "--quiet", "--initial-branch=main"]);
    git(&work, &["add", "--all"]);
    git(&work, &["commit", "--quiet", "-m", name]);
    let bare = fx.path().join(format!("{name}.git"));
    git(
        fx.path(),
        &[
            "clone",
            "--quiet",
            "--bare",
            work.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    );
    format!("file://{}", bare.display())
}

fn stack_runs(env: &Env, stack: &str) -> Vec<Value> {
    let v = ok_json(env, &["stack", "runs", stack]);
    v.as_array()
        .or_else(|| v["items"].as_array())
        .unwrap_or_else(|| panic!("stack runs {stack}: {v}"))
        .clone()
}

fn output_value(env: &Env, stack: &str, name: &str) -> Value {
    ok_json(env, &["stack", "outputs", stack])["outputs"][name]["value"].clone()
}

/// The one run of `stack` started by upstream run `upstream`, once it exists.
fn dependency_run(env: &Env, stack: &str, upstream: &str) -> Value {
    wait_for(
        &format!("a run of {stack} started by {upstream}"),
        PLAN_WAIT,
        || {
            stack_runs(env, stack)
                .into_iter()
                .find(|r| r["upstream_run"] == upstream)
        },
    )
}

#[test]
fn upstream_output_changes_reach_downstream_runs_and_failures_skip_them() {
    let Some(fx) = Fixture::new() else { return };
    let url = repo_with(
        &fx,
        "deps",
        &[("net/main.tf", NET_TF), ("app/main.tf", APP_TF)],
    );
    let env = start(&fx, &["--local-runners", "2"]);
    let tf = fx.tf.to_str().unwrap();
    let common = ["--repository", url.as_str(), "--engine", "terraform"];
    let mut net = vec!["stack", "create", "net", "--path", "net", "--autodeploy"];
    net.extend(common);
    net.extend(["--engine-binary", tf, "--var", "TF_VAR_vpc=one"]);
    ok(&env, &net);
    let mut app = vec!["stack", "create", "app", "--path", "app", "--autodeploy"];
    app.extend(common);
    app.extend([
        "--engine-binary",
        tf,
        "--depends-on",
        "net:vpc_id=network_id",
    ]);
    ok(&env, &app);
    // A cycle is refused when saved, naming it.
    let out = bosun(
        &env.server,
        &env.admin,
        &["stack", "update", "net", "--depends-on", "app"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("cycle"),
        "{}",
        describe(&out)
    );
    assert!(err.contains("net") && err.contains("app"), "{err}");

    // First apply of the upstream: its outputs are new, so the downstream runs with them.
    let n1 = trigger(&env, "net", &[]);
    wait_state(&env, &n1, "finished", PLAN_WAIT);
    let a1 = dependency_run(&env, "app", &n1);
    assert_eq!(a1["trigger"], "dependency");
    assert_eq!(a1["kind"], "tracked");
    let a1 = wait_state(&env, a1["id"].as_str().unwrap(), "finished", PLAN_WAIT);
    assert_eq!(output_value(&env, "app", "seen"), "vpc-one");
    assert_eq!(
        a1["consumed"],
        serde_json::json!([{"stack": "net", "version": 1, "output": "vpc_id",
                            "variable": "network_id", "sensitive": false}])
    );
    let log = ok(&env, &["run", "logs", a1["id"].as_str().unwrap()]);
    assert!(
        log.contains("upstream stack net, state version 1: vpc_id → TF_VAR_network_id"),
        "{log}"
    );

    // Same outputs: the upstream run ends with nothing to apply and no downstream run.
    let n2 = trigger(&env, "net", &[]);
    wait_state(&env, &n2, "finished", PLAN_WAIT);
    assert_eq!(
        stack_runs(&env, "app").len(),
        1,
        "unchanged outputs trigger nothing"
    );

    // The output changes through a variable alone — no resources at all.
    ok(&env, &["stack", "update", "net", "--var", "TF_VAR_vpc=two"]);
    let n3 = trigger(&env, "net", &[]);
    wait_state(&env, &n3, "finished", PLAN_WAIT);
    let a3 = dependency_run(&env, "app", &n3);
    let reason = a3["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("changed outputs: vpc_id"), "{a3:#}");
    wait_state(&env, a3["id"].as_str().unwrap(), "finished", PLAN_WAIT);
    assert_eq!(output_value(&env, "app", "seen"), "vpc-two");

    // trigger_always: a run even when nothing changed upstream.
    ok(
        &env,
        &[
            "stack",
            "update",
            "app",
            "--depends-on",
            "net:vpc_id=network_id",
            "--trigger-always",
            "net",
        ],
    );
    let n4 = trigger(&env, "net", &[]);
    wait_state(&env, &n4, "finished", PLAN_WAIT);
    let a4 = dependency_run(&env, "app", &n4);
    assert!(
        a4["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("trigger_always"),
        "{a4:#}"
    );
    wait_state(&env, a4["id"].as_str().unwrap(), "finished", PLAN_WAIT);

    // The upstream fails (its required variable is gone): the waiting run is skipped,
    // naming the upstream run, and never ran.
    ok(&env, &["stack", "update", "net", "--clear-vars"]);
    let n5 = trigger(&env, "net", &[]);
    wait_state(&env, &n5, "failed", PLAN_WAIT);
    let a5 = dependency_run(&env, "app", &n5);
    assert_eq!(a5["state"], "skipped", "{a5:#}");
    let reason = a5["reason"].as_str().unwrap();
    assert!(
        reason.contains(&n5) && reason.contains("failed"),
        "{reason}"
    );
    assert!(a5["runner"].is_null());
}

// ---- the egress sandbox of the hosted runners ---------------------------------------------

/// Reads the upstream stack's state from Bosun, as a `terraform_remote_state` (the run's
/// token is the backend password, from `TF_HTTP_PASSWORD`).
const READER_TF: &str = r#"variable "state_address" {
  type = string
}

data "terraform_remote_state" "net" {
  backend = "http"
  config = {
    address  = var.state_address
    username = "bosun"
  }
}

output "seen" {
  value = data.terraform_remote_state.net.outputs.vpc_id
}
"#;

/// Reads a "state" from the cloud metadata address: what a hostile module would do.
const METADATA_TF: &str = r#"data "terraform_remote_state" "creds" {
  backend = "http"
  config = {
    address = "http://169.254.169.254/latest/meta-data/iam/security-credentials/"
  }
}
"#;

/// `/metrics` of a server on loopback (served there without a token).
fn metrics(env: &Env) -> String {
    use std::io::Read as _;
    let mut conn = std::net::TcpStream::connect(env.server.addr).unwrap();
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: bosun\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    text
}

fn counter(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn hosted_runs_read_bosun_state_in_the_sandbox_and_a_metadata_read_is_refused_and_counted() {
    let Some(fx) = Fixture::new() else { return };
    let url = repo_with(
        &fx,
        "egress",
        &[
            ("net/main.tf", NET_TF),
            ("reader/main.tf", READER_TF),
            ("probe/main.tf", METADATA_TF),
        ],
    );
    let env = start(&fx, &["--local-runners", "2"]);
    let tf = fx.tf.to_str().unwrap();
    let common = [
        "--repository",
        url.as_str(),
        "--engine",
        "terraform",
        "--engine-binary",
        tf,
    ];
    let mut net = vec!["stack", "create", "net", "--path", "net", "--autodeploy"];
    net.extend(common);
    net.extend(["--var", "TF_VAR_vpc=one"]);
    ok(&env, &net);
    let n1 = trigger(&env, "net", &[]);
    let n1 = wait_state(&env, &n1, "finished", PLAN_WAIT);
    let org = n1["org"].as_str().unwrap();

    // The downstream stack may read the upstream's state: through the sandbox, Bosun's
    // state endpoint is reachable.
    let address = format!(
        "TF_VAR_state_address={}/api/v1/orgs/{org}/stacks/net/state",
        env.server.url()
    );
    let mut reader = vec![
        "stack",
        "create",
        "reader",
        "--path",
        "reader",
        "--autodeploy",
    ];
    reader.extend(common);
    reader.extend(["--depends-on", "net", "--var", &address]);
    ok(&env, &reader);
    let r1 = trigger(&env, "reader", &[]);
    wait_state(&env, &r1, "finished", PLAN_WAIT);
    assert_eq!(output_value(&env, "reader", "seen"), "vpc-one");
    let log = ok(&env, &["run", "logs", &r1]);
    assert!(
        !log.contains("blocked by the hosted egress policy"),
        "{log}"
    );
    let before = counter(&metrics(&env), "bosun_egress_refused_total");

    // The metadata address: refused by the proxy, in words, and counted.
    let mut probe = vec!["stack", "create", "probe", "--path", "probe"];
    probe.extend(common);
    ok(&env, &probe);
    let p1 = trigger(&env, "probe", &[]);
    let p1 = wait_state(&env, &p1, "failed", PLAN_WAIT);
    let log = ok(&env, &["run", "logs", p1["id"].as_str().unwrap()]);
    assert!(
        log.contains(
            "bosun: blocked by the hosted egress policy: 169.254.169.254:80 is the cloud \
             metadata address; use a self-hosted runner pool or a public mirror"
        ),
        "{log}"
    );
    let after = counter(&metrics(&env), "bosun_egress_refused_total");
    assert!(after >= before + 1.0, "refusals {before} -> {after}");

    // The hosted runners say they are sandboxed.
    let runners = ok(&env, &["runners", "list"]);
    assert!(runners.contains("restricted"), "{runners}");
}

#[test]
fn a_server_that_cannot_sandbox_refuses_to_start_unless_the_operator_opts_out() {
    let Some(fx) = Fixture::new() else { return };
    // Without CAP_SYS_ADMIN (dropped from the bounding set), no network namespace.
    if Command::new("setpriv").arg("--version").output().is_err() {
        assert!(
            std::env::var("BOSUN_REQUIRE_TOOLS").as_deref() != Ok("1"),
            "setpriv (util-linux) is required"
        );
        eprintln!("SKIPPED (tool missing): setpriv");
        return;
    }
    let out = Command::new("setpriv")
        .args(["--bounding-set", "-sys_admin", "--"])
        .arg(BIN)
        .args(["server", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(fx.data_dir())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(
        err.contains("the embedded runners cannot start")
            && err.contains("needs CAP_SYS_ADMIN")
            && err.contains("--egress-unrestricted"),
        "{err}"
    );

    // Opted out: it starts, says so, and its runners show it.
    let server = ServerProcess::start_wrapped(
        &fx.data_dir(),
        &["setpriv", "--bounding-set", "-sys_admin", "--"],
        &["--egress-unrestricted"],
    );
    assert!(server.wait_for_log("--egress-unrestricted", Duration::from_secs(10)));
    let env = Env {
        admin: server.admin_token(),
        server,
    };
    let runners = wait_for("the embedded runners to register", PLAN_WAIT, || {
        let text = ok(&env, &["runners", "list"]);
        text.contains("local@").then_some(text)
    });
    assert!(runners.contains("open (opted out)"), "{runners}");
}
