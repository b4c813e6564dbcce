//! `bosun run` and `bosun stack runs` end to end: the real binary against a real
//! `bosun server` child process, with the test acting as the runner over HTTP (a pool
//! token of pool `edge`, whose stacks no embedded runner serves) to put runs in the
//! states it needs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::SocketAddr;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{bosun, http, ServerProcess, BIN};
use tempfile::TempDir;

struct Env {
    server: ServerProcess,
    admin: String,
    _dir: TempDir,
}

/// Whether this `bosun server` has `--local-runners` (the embedded runners' count).
fn has_local_runners_flag() -> bool {
    let out = Command::new(BIN)
        .args(["server", "--help"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).contains("--local-runners")
}

fn start() -> Env {
    let dir = tempfile::tempdir().unwrap();
    // No embedded runners: the test is the only runner, so states are deterministic.
    let args: &[&str] = if has_local_runners_flag() {
        // Kept for binaries built before the flag existed.
        &["--local-runners", "0"]
    } else {
        &[]
    };
    let server = ServerProcess::start(dir.path(), args, &[]);
    let admin = server.admin_token();
    Env {
        server,
        admin,
        _dir: dir,
    }
}

/// The test's runner: a registered runner of pool `edge`, driven by hand.
struct Runner {
    addr: SocketAddr,
    token: String,
    id: String,
}

/// A leased phase: the run and its fencing number.
struct Leased {
    run: String,
    fencing: i64,
    phase: String,
}

impl Runner {
    fn register(env: &Env) -> Runner {
        let created = ok_json(env, &["token", "create", "--pool", "edge"]);
        let token = created["secret"].as_str().unwrap().to_string();
        let (status, body) = http(
            env.server.addr,
            "POST",
            "/api/v1/runner/register",
            &token,
            Some(r#"{"name":"t"}"#),
        );
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        Runner {
            addr: env.server.addr,
            token,
            id: v["runner_id"].as_str().unwrap().to_string(),
        }
    }

    fn post(&self, path: &str, body: Value) -> (u16, String) {
        http(
            self.addr,
            "POST",
            path,
            &self.token,
            Some(&body.to_string()),
        )
    }

    /// Leases the next phase, waiting for one up to `wait` seconds; `None` when none came.
    fn try_lease(&self, wait: u64) -> Option<Leased> {
        let (status, body) = self.post(
            "/api/v1/runner/lease",
            json!({"runner_id": self.id, "wait_seconds": wait}),
        );
        if status == 204 {
            return None;
        }
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        Some(Leased {
            run: v["run_id"].as_str().unwrap().to_string(),
            fencing: v["fencing"].as_i64().unwrap(),
            phase: v["phase"].as_str().unwrap().to_string(),
        })
    }

    fn lease(&self) -> Leased {
        self.try_lease(10).expect("a run to lease")
    }

    fn report(&self, l: &Leased, event: Value) {
        let mut body = event;
        body["fencing"] = json!(l.fencing);
        let (status, text) = self.post(&format!("/api/v1/runner/runs/{}/report", l.run), body);
        assert_eq!(status, 204, "report: {text}");
    }

    fn started(&self, l: &Leased) {
        self.report(l, json!({"event": "started", "commit": "abcdef0"}));
    }

    fn planned(&self, l: &Leased, add: u32) {
        self.report(
            l,
            json!({"event": "planned", "summary": {
                "has_changes": add > 0, "add": add, "change": 0, "destroy": 0,
                "resource_changes": if add > 0 {
                    json!([{"address": "null_resource.a", "action": "create"}])
                } else {
                    json!([])
                },
                "output_changes": if add > 0 { json!({"url": "create"}) } else { json!({}) },
            }}),
        );
    }

    /// Appends a line where the run's log continues (the server writes its own lines
    /// about the phase's integrations first), as a real runner does.
    fn log(&self, l: &Leased, text: &str) {
        let (status, next) = http(
            self.addr,
            "GET",
            &format!(
                "/api/v1/runner/runs/{}/logs/next?fencing={}",
                l.run, l.fencing
            ),
            &self.token,
            None,
        );
        assert_eq!(status, 200, "logs/next: {next}");
        let seq = serde_json::from_str::<Value>(&next).unwrap()["next_seq"]
            .as_i64()
            .unwrap();
        let (status, body) = self.post(
            &format!("/api/v1/runner/runs/{}/logs", l.run),
            json!({"fencing": l.fencing, "chunks": [{"seq": seq, "text": text}]}),
        );
        assert_eq!(status, 204, "logs: {body}");
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
fn ok(env: &Env, args: &[&str]) -> String {
    let out = bosun(&env.server, &env.admin, args);
    assert!(
        out.status.success(),
        "bosun {args:?} failed\n{}",
        describe(&out)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs a command with `--json` that must succeed; returns the parsed JSON.
fn ok_json(env: &Env, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let text = ok(env, &args);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

/// Runs a command that must fail with exit code 1; returns its stderr.
fn fails(env: &Env, args: &[&str]) -> String {
    let out = bosun(&env.server, &env.admin, args);
    assert_eq!(
        out.status.code(),
        Some(1),
        "bosun {args:?} should have failed\n{}",
        describe(&out)
    );
    String::from_utf8(out.stderr).unwrap()
}

/// Starts `bosun ARGS` in the background.
fn spawn(env: &Env, args: &[&str]) -> Child {
    Command::new(BIN)
        .args(args)
        .env("BOSUN_URL", env.server.url())
        .env("BOSUN_TOKEN", &env.admin)
        .env_remove("BOSUN_ORG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for a background command to exit (up to 60 s); its output.
fn finish(mut child: Child) -> Output {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("command did not finish\n{}", describe(&out));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether a background command is still running.
fn running(child: &mut Child) -> bool {
    child.try_wait().unwrap().is_none()
}

/// What the server logs for each phase it prepares (a stack without secrets or AWS).
const PREPARED: &str = "bosun: integration identity: ok\nbosun: integration variables: ok\n";

fn create_stack(env: &Env, id: &str) {
    ok(
        env,
        &[
            "stack",
            "create",
            id,
            "--repository",
            "file:///srv/git/infra",
            "--runner-pool",
            "edge",
        ],
    );
}

/// The one line a command printed: a run id.
fn run_id(stdout: &str) -> String {
    let id = stdout.trim();
    assert!(
        id.starts_with("run-") && !id.contains('\n'),
        "not a run id: {stdout:?}"
    );
    id.to_string()
}

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

fn state_of(env: &Env, run: &str) -> String {
    ok_json(env, &["run", "show", run])["state"]
        .as_str()
        .unwrap()
        .to_string()
}

const STATE_PATH: &str = "/api/v1/orgs/default/stacks/net/state";
const LOCK: &str = r#"{"ID":"lock-1","Operation":"OperationTypeApply","Who":"alice@laptop","Version":"1.0.3","Created":"2026-11-30T00:00:00Z","Path":"","Info":""}"#;

#[test]
fn trigger_show_logs_confirm_discard_cancel_retry_and_stack_runs() {
    let env = start();
    create_stack(&env, "web");
    let runner = Runner::register(&env);

    // Trigger prints the run's id; the run waits in the queue.
    let r1 = run_id(&ok(&env, &["run", "trigger", "web"]));
    let shown = ok(&env, &["run", "show", &r1]);
    for want in [
        format!("id:           {r1}\n"),
        "stack:        web\n".into(),
        "kind:         tracked\n".into(),
        "trigger:      manual\n".into(),
        "state:        queued\n".into(),
        "commit:       -\n".into(),
        "late write:   no\n".into(),
        "plan:         -\n".into(),
        "\nSTATE   STARTED".into(),
    ] {
        assert!(shown.contains(&want), "missing {want:?} in:\n{shown}");
    }
    assert!(shown.contains("triggered by: "), "{shown}");

    // The runner plans it: unconfirmed, with the plan summary and phases.
    let l = runner.lease();
    assert_eq!((l.run.as_str(), l.phase.as_str()), (r1.as_str(), "plan"));
    runner.started(&l);
    runner.log(&l, "hello\n");
    runner.log(&l, "planning...\n");
    runner.planned(&l, 1);
    let shown = ok(&env, &["run", "show", &r1]);
    for want in [
        "state:            unconfirmed\n",
        "commit:           abcdef0\n",
        "plan:             +1 ~0 -0, 1 output to change\n",
        "resource changes: create null_resource.a\n",
        "output changes:   create url\n",
    ] {
        assert!(shown.contains(want), "missing {want:?} in:\n{shown}");
    }
    let (_, table) = shown.split_once("\n\n").unwrap();
    let phases = rows(table);
    assert!(table.starts_with("STATE "), "{shown}");
    let states: Vec<&str> = phases.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(
        states,
        ["queued", "preparing", "planning", "unconfirmed"],
        "{shown}"
    );
    // Ended phases have seconds; the current one not yet.
    assert_eq!(phases[0].len(), 3, "{shown}");
    assert_eq!(phases[3][2], "-", "{shown}");
    let v = ok_json(&env, &["run", "show", &r1]);
    assert_eq!(v["state"], "unconfirmed");
    assert_eq!(v["plan"]["add"], 1);

    // Logs: the text as written, under the phase that wrote it; --json the chunks, each
    // with when it arrived and its phase.
    assert_eq!(
        ok(&env, &["run", "logs", &r1]),
        format!("── plan ──\n{PREPARED}hello\nplanning...\n")
    );
    let mut chunks = ok_json(&env, &["run", "logs", &r1]);
    for c in chunks.as_array_mut().unwrap() {
        let at = c.as_object_mut().unwrap().remove("at").unwrap_or_default();
        assert!(
            chrono::DateTime::parse_from_rfc3339(at.as_str().unwrap_or_default()).is_ok(),
            "{at}"
        );
    }
    assert_eq!(
        chunks,
        json!([{"seq": 0, "text": "bosun: integration identity: ok\n", "phase": "plan"},
               {"seq": 1, "text": "bosun: integration variables: ok\n", "phase": "plan"},
               {"seq": 2, "text": "hello\n", "phase": "plan"},
               {"seq": 3, "text": "planning...\n", "phase": "plan"}])
    );

    // Confirm moves it to applying; the runner applies it.
    let out = ok(&env, &["run", "confirm", &r1]);
    assert_eq!(out, format!("Confirmed run {r1}: it is now applying.\n"));
    assert_eq!(state_of(&env, &r1), "applying");
    let l = runner.lease();
    assert_eq!((l.run.as_str(), l.phase.as_str()), (r1.as_str(), "apply"));
    runner.started(&l);
    runner.log(&l, "applied\n");
    runner.report(&l, json!({"event": "applied"}));

    // Following an ended run prints the whole log and stops at the end event.
    assert_eq!(
        ok(&env, &["run", "logs", &r1, "--follow"]),
        format!("── plan ──\n{PREPARED}hello\nplanning...\n── apply ──\n{PREPARED}applied\n")
    );
    let lines = ok(&env, &["run", "logs", &r1, "--follow", "--json"]);
    let events: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 8, "seven chunks and the end: {lines}");
    assert_eq!(events[7], json!({"state": "finished"}));

    // Confirming a finished run says why it cannot.
    let err = fails(&env, &["run", "confirm", &r1]);
    assert!(
        err.contains("cannot confirm a run that is finished"),
        "{err}"
    );

    // Retry: a new run over the same commit.
    let r2 = run_id(&ok(&env, &["run", "retry", &r1]));
    assert_ne!(r1, r2);
    let shown = ok(&env, &["run", "show", &r2]);
    for want in [
        "trigger:      retry\n".to_string(),
        "state:        queued\n".into(),
        "commit:       abcdef0\n".into(),
        format!("retry of:     {r1}\n"),
    ] {
        assert!(shown.contains(&want), "missing {want:?} in:\n{shown}");
    }
    // Only ended runs can be retried.
    let err = fails(&env, &["run", "retry", &r2]);
    assert!(err.contains("only ended runs can be retried"), "{err}");

    // Cancel of a queued run ends it at once; following its log then fails.
    let out = ok(&env, &["run", "cancel", &r2]);
    assert_eq!(out, format!("Canceled run {r2}.\n"));
    let shown = ok(&env, &["run", "show", &r2]);
    assert!(shown.contains("state:        canceled\n"), "{shown}");
    assert!(shown.contains("reason:       canceled by "), "{shown}");
    let out = bosun(&env.server, &env.admin, &["run", "logs", &r2, "--follow"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("run {r2} ended canceled")),
        "{}",
        describe(&out)
    );
    // An empty log prints nothing.
    assert_eq!(ok(&env, &["run", "logs", &r2]), "");

    // Discard an unconfirmed plan.
    let r3 = run_id(&ok(&env, &["run", "trigger", "web"]));
    let l = runner.lease();
    assert_eq!(l.run, r3);
    runner.started(&l);
    runner.planned(&l, 2);
    let out = ok(&env, &["run", "discard", &r3]);
    assert_eq!(out, format!("Discarded run {r3}: it is now discarded.\n"));
    let err = fails(&env, &["run", "discard", &r3]);
    assert!(
        err.contains("cannot discard a run that is discarded"),
        "{err}"
    );

    // A proposed run at a given commit.
    let sha = "0123456789abcdef0123456789abcdef01234567";
    let v = ok_json(
        &env,
        &["run", "trigger", "web", "--proposed", "--commit", sha],
    );
    let r4 = v["id"].as_str().unwrap().to_string();
    assert_eq!(
        (v["kind"].as_str(), v["commit"].as_str()),
        (Some("proposed"), Some(sha))
    );
    let shown = ok(&env, &["run", "show", &r4]);
    assert!(shown.contains("kind:         proposed\n"), "{shown}");
    assert!(shown.contains(&format!("commit:       {sha}\n")), "{shown}");
    ok(&env, &["run", "cancel", &r4, "--json"]);

    // The stack's runs, newest first.
    let table = ok(&env, &["stack", "runs", "web"]);
    assert!(
        table.starts_with("RUN ") && table.lines().next().unwrap().ends_with("CREATED"),
        "{table}"
    );
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["RUN", "KIND", "TRIGGER", "STATE", "PLAN", "DURATION", "COMMIT", "CREATED"]
    );
    let got = rows(&table);
    let ids: Vec<&str> = got.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(ids, [&r4, &r3, &r2, &r1], "{table}");
    let cells = |r: &Vec<String>| [r[1].clone(), r[2].clone(), r[3].clone(), r[6].clone()];
    assert_eq!(
        cells(&got[0]),
        ["proposed", "manual", "canceled", "01234567"]
    );
    assert_eq!(
        cells(&got[1]),
        ["tracked", "manual", "discarded", "abcdef0"]
    );
    assert_eq!(cells(&got[2]), ["tracked", "retry", "canceled", "abcdef0"]);
    assert_eq!(cells(&got[3]), ["tracked", "manual", "finished", "abcdef0"]);
    // The finished run shows its plan and how long it took.
    assert!(got[3][4].starts_with('+'), "{table}");
    assert!(got[3][5].ends_with('s'), "{table}");
    let out = bosun(
        &env.server,
        &env.admin,
        &["stack", "runs", "web", "--limit", "1"],
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(rows(&String::from_utf8_lossy(&out.stdout)).len(), 1);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("--cursor {r4}")),
        "{}",
        describe(&out)
    );
    let page = ok_json(&env, &["stack", "runs", "web", "--limit", "2", "--all"]);
    assert_eq!(page["items"].as_array().unwrap().len(), 4);
    assert_eq!(page["next_cursor"], Value::Null);
    create_stack(&env, "quiet");
    assert_eq!(
        ok(&env, &["stack", "runs", "quiet"]),
        "Stack quiet has no runs yet.\n"
    );

    // A queued run blocked by someone's state lock says who holds it.
    create_stack(&env, "net");
    let (status, body) = http(env.server.addr, "LOCK", STATE_PATH, &env.admin, Some(LOCK));
    assert_eq!(status, 200, "{body}");
    let r5 = run_id(&ok(&env, &["run", "trigger", "net"]));
    assert!(runner.try_lease(1).is_none());
    let shown = ok(&env, &["run", "show", &r5]);
    assert!(
        shown.contains(
            "blocked by:   alice@laptop holds the state lock (lock-1, OperationTypeApply), since "
        ),
        "{shown}"
    );
    ok(&env, &["run", "cancel", &r5]);
    // Canceled while it waited: the wait is kept on the run, the block is gone.
    let v = ok_json(&env, &["run", "show", &r5]);
    assert!(
        v["blocked_by"].is_null() && v["blocked_since"].is_null(),
        "{v:#}"
    );
    assert_eq!(v["lock_waits"][0]["holder"]["Who"], "alice@laptop", "{v:#}");

    // Errors carry the server's message.
    let err = fails(&env, &["run", "show", "run-nope"]);
    assert!(
        err.contains("run-nope") && err.contains("not_found"),
        "{err}"
    );
    let err = fails(&env, &["run", "logs", "run-nope", "--follow"]);
    assert!(err.contains("not_found"), "{err}");
    let err = fails(&env, &["run", "trigger", "nope"]);
    assert!(err.contains("stack \"nope\""), "{err}");
    let err = fails(&env, &["run", "trigger", "web", "--commit", "xyz"]);
    assert!(err.contains("must be a hex commit id"), "{err}");
    let err = fails(&env, &["stack", "runs", "web", "--limit", "0"]);
    assert!(err.contains("limit"), "{err}");
}

/// A run of a stack whose environment requires approval waits for an approver, and the
/// CLI says so — where, who asked, who may decide and the commands — instead of pointing
/// at a confirm the server refuses.
#[test]
fn a_gated_runs_wait_names_the_approval_it_waits_for() {
    let env = start();
    ok(&env, &["env", "create", "prod", "--requires-approval"]);
    ok(
        &env,
        &[
            "stack",
            "create",
            "gated",
            "--repository",
            "file:///srv/git/infra",
            "--runner-pool",
            "edge",
            "--environment",
            "prod",
        ],
    );
    let runner = Runner::register(&env);
    let waiting = spawn(&env, &["run", "trigger", "gated", "--wait"]);
    let l = runner.lease();
    runner.started(&l);
    runner.planned(&l, 1);
    let out = finish(waiting);
    assert!(out.status.success(), "{}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        stdout
            .lines()
            .any(|l| l == "state: unconfirmed (waiting for approval in prod)"),
        "{}",
        describe(&out)
    );
    assert!(
        stderr.contains(&format!(
            "`bosun approvals approve {0}` or `bosun approvals reject {0}`",
            l.run
        )),
        "{}",
        describe(&out)
    );
    assert!(
        stderr.contains("requested by user:admin"),
        "{}",
        describe(&out)
    );
    assert!(!stderr.contains("bosun run confirm"), "{}", describe(&out));
    let shown = ok(&env, &["run", "show", &l.run]);
    assert!(
        shown.contains("waiting for approval in prod (requested by user:admin); who may decide: an operator or admin of org default, other than user:admin"),
        "{shown}"
    );
}

/// `--wait` behind nothing that moves says how long the run has been where it is, and
/// `--timeout` stops waiting, saying where the run is; the run goes on.
#[test]
fn wait_says_how_long_and_gives_up_at_its_timeout() {
    let env = start();
    create_stack(&env, "slow");
    // No runner leases it: the run stays queued.
    let out = bosun(
        &env.server,
        &env.admin,
        &["run", "trigger", "slow", "--wait", "--timeout", "2s"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let id = stdout.lines().next().unwrap_or_default().to_string();
    assert!(stdout.contains("state: queued\n"), "{}", describe(&out));
    assert!(
        stderr.contains("(still queued after 1s)"),
        "{}",
        describe(&out)
    );
    assert!(
        stderr.contains(&format!(
            "stopped waiting after 2s: run {id} is still queued (it goes on; `bosun run show {id}` shows it)"
        )),
        "{}",
        describe(&out)
    );
    assert_eq!(state_of(&env, &id), "queued");
    // --timeout means nothing without --wait: refused.
    let usage = bosun(
        &env.server,
        &env.admin,
        &["run", "trigger", "slow", "--timeout", "2s"],
    );
    assert_eq!(usage.status.code(), Some(2), "{}", describe(&usage));
    assert!(
        String::from_utf8_lossy(&usage.stderr).contains("--wait"),
        "{}",
        describe(&usage)
    );
}

#[test]
fn trigger_wait_and_live_log_follow() {
    let env = start();
    create_stack(&env, "app");
    let runner = Runner::register(&env);

    // --wait follows the run until it waits for confirmation.
    let waiting = spawn(&env, &["run", "trigger", "app", "--wait"]);
    let l = runner.lease();
    let mut follow = spawn(&env, &["run", "logs", &l.run, "--follow"]);
    runner.started(&l);
    runner.log(&l, "line one\n");
    std::thread::sleep(Duration::from_millis(600));
    runner.log(&l, "line two\n");
    runner.planned(&l, 1);
    let out = finish(waiting);
    assert!(out.status.success(), "{}", describe(&out));
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some(l.run.as_str()), "{}", describe(&out));
    let rest: Vec<&str> = lines.collect();
    assert_eq!(rest.first(), Some(&"state: queued"), "{}", describe(&out));
    assert!(rest.contains(&"state: unconfirmed"), "{}", describe(&out));
    assert!(
        rest.contains(&"plan: +1 ~0 -0, 1 output to change"),
        "{}",
        describe(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("bosun run confirm {}", l.run)),
        "{}",
        describe(&out)
    );

    // The log follower keeps going while the run is unconfirmed, then through the
    // apply, and exits 1 when the run fails.
    std::thread::sleep(Duration::from_millis(500));
    assert!(running(&mut follow));
    ok(&env, &["run", "confirm", &l.run]);
    let a = runner.lease();
    assert_eq!(
        (a.run.as_str(), a.phase.as_str()),
        (l.run.as_str(), "apply")
    );
    runner.started(&a);
    runner.log(&a, "applying\n");
    runner.report(&a, json!({"event": "failed", "reason": "boom"}));
    let out = finish(follow);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("── plan ──\n{PREPARED}line one\nline two\n── apply ──\n{PREPARED}applying\n")
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("run {} ended failed: boom", l.run)),
        "{}",
        describe(&out)
    );

    // --wait exits 1 when the run fails, saying why.
    let waiting = spawn(&env, &["run", "trigger", "app", "--wait"]);
    let l = runner.lease();
    runner.started(&l);
    runner.report(
        &l,
        json!({"event": "failed", "reason": "no such repository"}),
    );
    let out = finish(waiting);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("state: failed: no such repository"),
        "{}",
        describe(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains(&format!("run {} ended failed: no such repository", l.run)),
        "{}",
        describe(&out)
    );

    // With --json, --wait prints only the final run.
    let waiting = spawn(
        &env,
        &["run", "trigger", "app", "--proposed", "--wait", "--json"],
    );
    let l = runner.lease();
    runner.started(&l);
    runner.planned(&l, 0);
    let out = finish(waiting);
    assert!(out.status.success(), "{}", describe(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["id"].as_str(), Some(l.run.as_str()));
    assert_eq!(v["state"], "finished");
    assert_eq!(v["plan"]["has_changes"], false);
}

#[test]
fn runners_list_and_drain() {
    let env = start();
    let runner = Runner::register(&env);
    let listed = ok_json(&env, &["runners", "list"]);
    let me = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == runner.id.as_str())
        .unwrap_or_else(|| panic!("{listed}"))
        .clone();
    assert_eq!(
        (me["pool"].as_str(), me["status"].as_str()),
        (Some("edge"), Some("online"))
    );
    // It said nothing of its egress (as a runner before the sandbox would).
    assert_eq!(me["egress"], Value::Null, "{me}");
    let table = ok(&env, &["runners", "list"]);
    assert!(
        table.contains(&runner.id) && table.contains("online"),
        "{table}"
    );
    // Its pool's other runners say how their engines reach the network.
    let mut egress_of = std::collections::BTreeMap::new();
    for (name, egress) in [
        ("sandboxed", "restricted"),
        ("open", "unrestricted"),
        ("opted", "opted_out"),
    ] {
        let (status, body) = runner.post(
            "/api/v1/runner/register",
            json!({"name": name, "egress": egress}),
        );
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        egress_of.insert(v["runner_id"].as_str().unwrap().to_string(), egress);
    }
    let listed = ok_json(&env, &["runners", "list"]);
    for r in listed["items"].as_array().unwrap() {
        if let Some(egress) = egress_of.get(r["id"].as_str().unwrap()) {
            assert_eq!(r["egress"], *egress, "{listed}");
        }
    }
    let table = ok(&env, &["runners", "list"]);
    let line_of = |id: &str| {
        table
            .lines()
            .find(|l| l.starts_with(id))
            .unwrap_or_else(|| panic!("no {id} in {table}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(table.lines().next().unwrap().contains("EGRESS"), "{table}");
    for (id, egress) in &egress_of {
        let shown = match *egress {
            "restricted" => " online restricted ",
            "unrestricted" => " online open ",
            _ => " online open (opted out) ",
        };
        assert!(line_of(id).contains(shown), "{id}: {table}");
    }
    assert!(line_of(&runner.id).contains(" online - "), "{table}");
    ok(&env, &["runners", "drain", &runner.id]);
    let listed = ok_json(&env, &["runners", "list"]);
    let me = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == runner.id.as_str())
        .unwrap()
        .clone();
    assert_eq!(me["status"], "drained");
    // A drained runner leases nothing, even with work queued.
    create_stack(&env, "net");
    ok(&env, &["run", "trigger", "net"]);
    assert!(runner.try_lease(1).is_none());
    let err = fails(&env, &["runners", "drain", "rnr_missing"]);
    assert!(err.contains("not found"), "{err}");
}
