//! Two `bosun server` replicas on one PostgreSQL database, under load: the real
//! server binary twice on a scratch database of the PostgreSQL test server
//! (`BOSUN_TEST_DATABASE_URL`), runners attached to both — each replica's embedded
//! runners (the `hosted` pool) and a separate `bosun runner` process per replica (the
//! `edge` pool) — and real git repositories.
//!
//! The engine is a test double, not Terraform: dispatch is under test here. The load uses
//! bench/runs/noop-engine.sh (it records each start, with the run's workspace, and
//! answers init/plan at once: a tracked run with no changes finishes after its plan);
//! the force-fail race uses a script that takes the stack's state lock through the run's
//! backend and then hangs.
//!
//! 1. 500 tracked runs across 50 stacks, created alternately through both replicas, all
//!    finish; no run is dispatched twice (one engine start per run, one lease — fencing 1
//!    — and one `preparing` phase each) and each stack's runs execute in creation order,
//!    never overlapping.
//! 2. `kill -9` of one replica mid-load (its embedded runners die with it; its separate
//!    runner is left running against the dead address, and a replacement joins the
//!    survivor, as behind a load balancer): every run still ends, none twice dispatched,
//!    order kept; state versions written all along through both replicas' state backends
//!    are all there.
//! 3. Two replicas racing to force-fail the same stale runs — the survivor's stale sweep
//!    against the restarted replica's start-up reconciliation, plus both replicas' sweeps
//!    at a 20 ms interval — end each run exactly once: one `force_failed`, one audit entry
//!    for the state lock it released, one `run_ended` event, one "settled" log line.
//!
//! Without `BOSUN_TEST_DATABASE_URL` the tests print `SKIPPED (tool missing): …` and pass,
//! unless `BOSUN_REQUIRE_TOOLS=1`, where they fail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{bosun, log_tail, postgres_or_skip, try_http, PgScratch, ServerProcess, BIN};

/// One scenario at a time: each loads both CPUs, and the stale timeouts of the others
/// assume a machine that is not twice as busy.
static SERIAL: Mutex<()> = Mutex::new(());

const STACKS: usize = 50;
const RUNS: usize = 500;
const TERMINAL: &str =
    "('finished','failed','discarded','canceled','interrupted','force_failed','skipped')";

/// A `bosun runner` child process, killed on drop; its stderr goes to `log`.
struct Runner {
    child: Child,
    log: PathBuf,
}

impl Runner {
    fn start(root: &Path, name: &str, server: &str, token: &str, workers: u32) -> Runner {
        let log = root.join(format!("runner-{name}.log"));
        let child = Command::new(BIN)
            .args([
                "runner", "--server", server, "--token", token, "--name", name,
            ])
            .args(["--workers", &workers.to_string()])
            .arg("--work-dir")
            .arg(root.join(format!("runner-{name}-work")))
            .env_remove("BOSUN_TOKEN")
            .env_remove("BOSUN_URL")
            .env_remove("BOSUN_RUNNER_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Runner { child, log }
    }

    fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A bare repository with a one-output module, as a `file://` URL.
fn repository(root: &Path) -> String {
    support::bare_repository(root, "output \"hello\" {\n  value = \"replicas\"\n}\n")
}

/// bench/runs/noop-engine.sh, copied into `dir`: its log of starts lands next to it.
fn noop_engine(dir: &Path) -> (PathBuf, PathBuf) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/runs/noop-engine.sh");
    std::fs::create_dir_all(dir).unwrap();
    let engine = dir.join("noop-engine.sh");
    std::fs::copy(&src, &engine).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    (engine, dir.join("engine-starts.log"))
}

/// Run id → how many times the engine started for it, from the no-op engine's log (the
/// working directory is `<work dir>/<run id>-plan-<fencing>/src`).
fn engine_starts(log: &Path) -> HashMap<String, usize> {
    let mut starts = HashMap::new();
    for line in std::fs::read_to_string(log).unwrap_or_default().lines() {
        let cols: Vec<&str> = line.split('\t').collect();
        if cols.len() < 3 || !cols[2].starts_with("init") {
            continue;
        }
        let ws = Path::new(cols[1])
            .parent()
            .and_then(|p| p.file_name())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let (run, _) = ws.rsplit_once("-plan-").unwrap_or((&ws, ""));
        *starts.entry(run.to_string()).or_default() += 1;
    }
    starts
}

/// The two replicas' shared settings: the database, one secrets key, the timings.
struct Cluster {
    root: PathBuf,
    db_url: String,
    timings: Vec<String>,
}

impl Cluster {
    /// Starts replica `name` (`--replica-id name`, data dir `<root>/<name>`) with
    /// `local_runners` embedded runners. The first replica makes the secrets key; the
    /// others use that file.
    fn replica(&self, name: &str, local_runners: u32) -> ServerProcess {
        self.replica_on(name, local_runners, "127.0.0.1:0")
    }

    fn replica_on(&self, name: &str, local_runners: u32, listen: &str) -> ServerProcess {
        let key = self.root.join("secrets.key");
        let runners = local_runners.to_string();
        let mut args: Vec<&str> = vec![
            "--database-url",
            &self.db_url,
            "--replica-id",
            name,
            "--local-runners",
            &runners,
            "--git-poll-interval",
            "0s",
        ];
        args.extend(self.timings.iter().map(String::as_str));
        let key_arg = key.to_str().unwrap().to_string();
        if key.exists() {
            args.extend(["--secrets-key-file", &key_arg]);
        }
        let data = self.root.join(name);
        let server = ServerProcess::start_listening(&data, listen, &args, &[]);
        if !key.exists() {
            std::fs::copy(data.join("secrets.key"), &key).unwrap();
        }
        server
    }
}

/// `METHOD path` on `server`; the JSON answer, or a panic with the server's log tail.
fn api(server: &ServerProcess, token: &str, method: &str, path: &str, body: Value) -> Value {
    let body = body.to_string();
    let (status, text) = try_http(server.addr, method, path, token, Some(&body))
        .unwrap_or_else(|e| panic!("{method} {path}: {e}\n{}", log_tail(server, 30)));
    assert!(
        (200..300).contains(&status),
        "{method} {path}: HTTP {status}: {text}\nserver log:\n{}",
        log_tail(server, 30)
    );
    if text.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap()
    }
}

fn create_stack(
    server: &ServerProcess,
    token: &str,
    id: &str,
    repo: &str,
    engine: &Path,
    pool: &str,
) {
    api(
        server,
        token,
        "POST",
        "/api/v1/orgs/default/stacks",
        json!({
            "id": id, "repository": repo, "engine": "terraform",
            "engine_binary": engine.to_str().unwrap(), "autodeploy": true, "runner_pool": pool,
        }),
    );
}

fn trigger(server: &ServerProcess, token: &str, stack: &str) -> String {
    let run = api(
        server,
        token,
        "POST",
        &format!("/api/v1/orgs/default/stacks/{stack}/runs"),
        json!({"kind": "tracked"}),
    );
    run["id"].as_str().unwrap().to_string()
}

fn pool_token(server: &ServerProcess, admin: &str, pool: &str) -> String {
    let out = bosun(
        server,
        admin,
        &["--json", "token", "create", "--pool", pool],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["secret"].as_str().unwrap().to_string()
}

/// A run as the database has it: state, lease count and phases (state, start, end ms).
#[derive(Debug)]
struct RunRow {
    state: String,
    fencing: i64,
    phases: Vec<(String, i64, Option<i64>)>,
    /// Why it ended, and the runner that held it: what a failure message needs.
    reason: String,
    runner: String,
}

fn run_rows(db: &PgScratch) -> HashMap<String, RunRow> {
    let rows = db.rows(
        "SELECT r.id, r.state, r.fencing, COALESCE((SELECT string_agg(p.state || ':' || \
         p.started_at || ':' || COALESCE(p.ended_at, -1), ',' ORDER BY p.rowid) \
         FROM run_phases p WHERE p.run_id = r.id), ''), \
         translate(COALESCE(r.reason, ''), E'|\\n\\t', '   '), \
         COALESCE((SELECT w.name FROM runners w WHERE w.id = r.runner_id), '') FROM runs r",
    );
    rows.into_iter()
        .map(|r| {
            let phases = r[3]
                .split(',')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let f: Vec<&str> = p.split(':').collect();
                    let end: i64 = f[2].parse().unwrap();
                    (
                        f[0].to_string(),
                        f[1].parse().unwrap(),
                        (end >= 0).then_some(end),
                    )
                })
                .collect();
            let row = RunRow {
                state: r[1].clone(),
                fencing: r[2].parse().unwrap(),
                phases,
                reason: r[4].clone(),
                runner: r[5].clone(),
            };
            (r[0].clone(), row)
        })
        .collect()
}

/// How many runs are not yet in a terminal state, by state.
fn unfinished(db: &PgScratch) -> BTreeMap<String, usize> {
    db.rows(&format!(
        "SELECT state, COUNT(*) FROM runs WHERE state NOT IN {TERMINAL} GROUP BY state"
    ))
    .into_iter()
    .map(|r| (r[0].clone(), r[1].parse().unwrap()))
    .collect()
}

/// Polls until every run has ended, up to `limit`; on timeout panics with `context()`.
fn wait_all_ended(db: &PgScratch, limit: Duration, context: impl Fn() -> String) {
    let deadline = Instant::now() + limit;
    loop {
        let left = unfinished(db);
        if left.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "runs still not ended after {limit:?}: {left:?}\n{}",
                context()
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn terminal_count(db: &PgScratch) -> usize {
    db.value(&format!(
        "SELECT COUNT(*) FROM runs WHERE state IN {TERMINAL}"
    ))
    .parse()
    .unwrap()
}

/// The load's checks: each run's engine started at most once (exactly once when it
/// finished), each run leased once — more only when `requeues` and its earlier leases
/// never started — and each stack's runs executed in creation order without overlapping.
fn check_dispatch(
    db: &PgScratch,
    created: &[(String, String)],
    engine_log: &Path,
    allowed: &[&str],
    requeues: bool,
) -> BTreeMap<String, usize> {
    let rows = run_rows(db);
    let starts = engine_starts(engine_log);
    let mut states = BTreeMap::new();
    for (stack, id) in created {
        let r = rows
            .get(id)
            .unwrap_or_else(|| panic!("run {id} of {stack} missing"));
        *states.entry(r.state.clone()).or_insert(0) += 1;
        assert!(
            allowed.contains(&r.state.as_str()),
            "run {id} of {stack} ended {} (reason: {:?}, runner: {:?}): {r:?}",
            r.state,
            r.reason,
            r.runner
        );
        let n = starts.get(id).copied().unwrap_or(0);
        let preparing = r.phases.iter().filter(|p| p.0 == "preparing").count();
        // Each lease enters `preparing` once; a lease whose runner died before starting
        // the phase is requeued (nothing ran) and leased again.
        assert_eq!(
            preparing, r.fencing as usize,
            "run {id}: {preparing} preparing phases for {} leases: {r:?}",
            r.fencing
        );
        if r.fencing > 1 {
            *states.entry("(requeued)".to_string()).or_insert(0) += 1;
            assert!(requeues, "run {id} leased {} times: {r:?}", r.fencing);
        }
        if r.state == "finished" {
            assert_eq!(n, 1, "run {id}: the engine started {n} times: {r:?}");
        } else {
            assert!(n <= 1, "run {id}: the engine started {n} times: {r:?}");
        }
    }
    assert_eq!(
        starts.values().sum::<usize>(),
        starts.len(),
        "some engine started twice for one run"
    );
    // Per stack, in creation order: a run's first executing phase starts after the
    // previous run of the stack ended (its last phase closed).
    let mut last_end: HashMap<&str, (i64, &str)> = HashMap::new();
    for (stack, id) in created {
        let r = &rows[id];
        let first = r.phases.iter().find(|p| p.0 != "queued");
        let end = r.phases.iter().filter_map(|p| p.2).max().unwrap_or(0);
        if let (Some(first), Some((prev_end, prev))) = (first, last_end.get(stack.as_str())) {
            assert!(
                first.1 >= *prev_end,
                "stack {stack}: run {id} started at {} before run {prev} ended at {prev_end}\n\
                 {id}: {r:?}\n{prev}: {:?}",
                first.1,
                rows[*prev]
            );
        }
        if first.is_some() {
            last_end.insert(stack, (end, id));
        }
    }
    states
}

/// What a state writer did: the serials whose write was acknowledged (HTTP 200), and the
/// serials sent twice because the first replica failed mid-request (the first attempt
/// may have been stored too).
#[derive(Default)]
struct Written {
    acked: Vec<i64>,
    resent: Vec<i64>,
}

/// Writes state versions to `stack` until `stop`, alternating between the replicas (LOCK
/// on one, POST on the other, UNLOCK on the first) and falling over to the other when one
/// is gone.
fn state_writer(
    addrs: [SocketAddr; 2],
    token: String,
    stack: String,
    stop: Arc<AtomicBool>,
) -> Written {
    let path = format!("/api/v1/orgs/default/stacks/{stack}/state");
    // One request: on a connection failure, the other replica. Also whether it fell over.
    let send = |first: usize, method: &str, p: &str, body: &str| -> ((u16, String), bool) {
        for (n, i) in [first, 1 - first].into_iter().enumerate() {
            if let Ok(r) = try_http(addrs[i], method, p, &token, Some(body)) {
                return (r, n > 0);
            }
        }
        panic!("{method} {p}: neither replica answered");
    };
    let mut out = Written::default();
    let mut serial = 0;
    while !stop.load(Ordering::Relaxed) {
        serial += 1;
        let first = (serial % 2) as usize;
        let id = format!("{stack}-{serial}");
        let info = json!({"ID": id, "Operation": "OperationTypeApply", "Who": "writer",
            "Version": "1.0.3", "Created": "2026-01-01T00:00:00Z", "Path": ""})
        .to_string();
        let ((status, body), _) = send(first, "LOCK", &path, &info);
        // 423 naming our own lock: an earlier attempt took it and its answer was lost.
        assert!(
            status == 200 || (status == 423 && body.contains(&id)),
            "LOCK {stack}: HTTP {status}: {body}"
        );
        let state = json!({"version": 4, "terraform_version": "1.0.3", "serial": serial,
            "lineage": format!("lineage-{stack}"),
            "outputs": {"serial": {"value": serial, "type": "number"}}, "resources": []})
        .to_string();
        let ((status, body), resent) = send(1 - first, "POST", &format!("{path}?ID={id}"), &state);
        if resent {
            out.resent.push(serial);
        }
        if status == 200 {
            out.acked.push(serial);
        } else {
            eprintln!("POST {stack} serial {serial}: HTTP {status}: {body} (not acknowledged)");
        }
        let ((status, body), _) = send(first, "UNLOCK", &path, &info);
        assert_eq!(status, 200, "UNLOCK {stack}: {body}");
        // Pacing, not waiting: leave the CPUs to the runs.
        std::thread::sleep(Duration::from_millis(30));
    }
    out
}

/// 500 tracked runs across 50 stacks (25 on the embedded runners of both replicas, 25
/// on a separate runner per replica), created alternately through the replicas. With
/// `kill`, replica A is killed (-9) once 150 runs have ended, and state versions are
/// written through both replicas all along.
fn load(kill: bool) {
    let Some(admin_url) = postgres_or_skip() else {
        return;
    };
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let db = PgScratch::create(&admin_url, "bosun_replicas");
    let tmp = tempfile::Builder::new()
        .prefix("bosun-replicas-")
        .tempdir()
        .unwrap();
    let root = tmp.path().to_path_buf();
    let repo = repository(&root);
    let (engine, engine_log) = noop_engine(&root.join("engine"));
    // Killed runs are force-failed after 3 s of silence; without a kill nothing may be.
    let stale = if kill { "3s" } else { "60s" };
    let cluster = Cluster {
        root: root.clone(),
        db_url: db.url.clone(),
        timings: ["--run-heartbeat", "500ms", "--run-stale-after", stale]
            .into_iter()
            .chain(["--run-sweep-interval", "200ms", "--duty-lease", "1s"])
            .map(String::from)
            .collect(),
    };
    let mut a = cluster.replica("a", 2);
    let b = cluster.replica("b", 2);
    let admin = a.admin_token();

    for s in 0..STACKS {
        let pool = if s % 2 == 0 { "hosted" } else { "edge" };
        create_stack(&a, &admin, &format!("s{s:02}"), &repo, &engine, pool);
    }
    let edge = pool_token(&b, &admin, "edge");
    let runner_a = Runner::start(&root, "edge-a", &a.url(), &edge, 2);
    let runner_b = Runner::start(&root, "edge-b", &b.url(), &edge, 2);

    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = if kill {
        (0..3)
            .map(|i| {
                let stack = format!("state-{i}");
                create_stack(&b, &admin, &stack, &repo, &engine, "hosted");
                let (addrs, token, stop) = ([a.addr, b.addr], admin.clone(), stop.clone());
                let st = stack.clone();
                (
                    stack,
                    std::thread::spawn(move || state_writer(addrs, token, st, stop)),
                )
            })
            .collect()
    } else {
        Vec::new()
    };

    let started = Instant::now();
    let mut created = Vec::with_capacity(RUNS);
    for i in 0..RUNS {
        let stack = format!("s{:02}", i % STACKS);
        let via = if (i / STACKS + i).is_multiple_of(2) {
            &a
        } else {
            &b
        };
        created.push((stack.clone(), trigger(via, &admin, &stack)));
    }
    eprintln!("created {RUNS} runs in {:?}", started.elapsed());

    let context = |servers: &[&ServerProcess], runners: &[&Runner]| {
        let mut s = String::new();
        for server in servers {
            s += &format!(
                "--- server {} log tail:\n{}\n",
                server.url(),
                log_tail(server, 25)
            );
        }
        for r in runners {
            s += &format!("--- {} tail:\n{}\n", r.log.display(), r.tail());
        }
        s
    };

    let mut replacement = None;
    if kill {
        let deadline = Instant::now() + Duration::from_secs(180);
        while terminal_count(&db) < 150 {
            assert!(
                Instant::now() < deadline,
                "150 runs did not end within 180 s: {:?}\n{}",
                unfinished(&db),
                context(&[&a, &b], &[&runner_a, &runner_b])
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let executing = db.value("SELECT COUNT(*) FROM runs WHERE leased = 1");
        a.signal(libc::SIGKILL);
        a.wait_exit(Duration::from_secs(10))
            .expect("replica a exits");
        eprintln!(
            "killed replica a after {:?} with {} runs ended, {executing} leased",
            started.elapsed(),
            terminal_count(&db)
        );
        // The separate runner of replica a stays, retrying its dead address; a
        // replacement joins replica b (a load balancer's other backend).
        replacement = Some(Runner::start(&root, "edge-a2", &b.url(), &edge, 2));
    }

    wait_all_ended(&db, Duration::from_secs(300), || {
        let mut rs = vec![&runner_a, &runner_b];
        rs.extend(replacement.as_ref());
        context(&[&a, &b], &rs)
    });
    eprintln!("all {RUNS} runs ended after {:?}", started.elapsed());
    stop.store(true, Ordering::Relaxed);

    let allowed: &[&str] = if kill {
        &["finished", "force_failed"]
    } else {
        &["finished"]
    };
    let states = check_dispatch(&db, &created, &engine_log, allowed, kill);
    eprintln!("run states: {states:?}");
    if !kill {
        assert_eq!(states.get("finished"), Some(&RUNS));
        // Both replicas' embedded runners, and both separate runners, took part.
        let by_runner = db.rows(
            "SELECT w.name, COUNT(*) FROM runs r JOIN runners w ON w.id = r.runner_id \
             GROUP BY w.name ORDER BY w.name",
        );
        eprintln!("runs per runner: {by_runner:?}");
        for name in ["edge-a", "edge-b", "local@a", "local@b"] {
            assert!(
                by_runner.iter().any(|r| r[0].starts_with(name)),
                "no run on {name}: {by_runner:?}"
            );
        }
    }

    // Every acknowledged state version is there, in order, and nothing else was made.
    for (stack, writer) in writers {
        let Written { acked, resent } = writer.join().expect("state writer");
        assert!(acked.len() >= 5, "{stack}: only {} writes", acked.len());
        let stored: Vec<i64> = db
            .rows(&format!(
                "SELECT serial FROM state_versions WHERE stack_id = '{stack}' ORDER BY version"
            ))
            .into_iter()
            .map(|r| r[0].parse().unwrap())
            .collect();
        for s in &acked {
            assert!(
                stored.contains(s),
                "{stack}: acknowledged serial {s} lost: {stored:?}"
            );
        }
        // Serials only grow; one repeats only where a write was resent to the survivor.
        assert!(
            stored
                .windows(2)
                .all(|w| w[0] < w[1] || (w[0] == w[1] && resent.contains(&w[0]))),
            "{stack}: versions out of order: {stored:?} (resent: {resent:?})"
        );
        eprintln!(
            "{stack}: {} versions acknowledged, {} stored",
            acked.len(),
            stored.len()
        );
    }
    drop((runner_a, runner_b, replacement));
    drop((a, b));
    drop(db);
}

#[test]
fn two_replicas_run_500_runs_across_50_stacks_once_each_in_order() {
    load(false);
}

#[test]
fn killing_a_replica_mid_load_ends_every_run_and_keeps_every_state_version() {
    load(true);
}

/// A stand-in engine that takes the stack's state lock through the run's backend (the
/// address from the runner's backend override, the run token as password), records the
/// run, and hangs until `<dir>/release` exists.
fn hanging_engine(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let script = r#"#!/usr/bin/env bash
case "${1:-}" in
init)
    addr=$(sed -n 's/^ *address *= *"\(.*\)"$/\1/p' bosun_backend_override.tf | head -n 1)
    ws=$(basename "$(dirname "$PWD")")
    run=${ws%-plan-*}
    info="{\"ID\":\"lock-$run\",\"Operation\":\"OperationTypePlan\",\"Who\":\"hang\",\"Version\":\"1.0.3\",\"Created\":\"2026-01-01T00:00:00Z\",\"Path\":\"\"}"
    curl -sf -X LOCK -u "bosun:$TF_HTTP_PASSWORD" -H 'Content-Type: application/json' \
        -d "$info" "$addr" >/dev/null || { echo "lock failed" >&2; exit 1; }
    echo "$run" >>"@DIR@/locked"
    i=0
    while [ ! -e "@DIR@/release" ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done
    ;;
esac
exit 0
"#
    .replace("@DIR@", dir.to_str().unwrap());
    let path = dir.join("hang-engine.sh");
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Count of `needle` lines mentioning `run` in the given logs.
fn log_mentions(logs: &[String], needle: &str, run: &str) -> usize {
    logs.iter()
        .flat_map(|l| l.lines())
        .filter(|l| l.contains(needle) && l.contains(run))
        .count()
}

#[test]
fn two_replicas_racing_to_force_fail_a_stale_run_end_it_once() {
    let Some(admin_url) = postgres_or_skip() else {
        return;
    };
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let db = PgScratch::create(&admin_url, "bosun_race");
    let tmp = tempfile::Builder::new()
        .prefix("bosun-race-")
        .tempdir()
        .unwrap();
    let root = tmp.path().to_path_buf();
    let repo = repository(&root);
    let hang_dir = root.join("hang");
    let engine = hanging_engine(&hang_dir);
    let stale_after = Duration::from_secs(2);
    let cluster = Cluster {
        root: root.clone(),
        db_url: db.url.clone(),
        timings: [
            "--run-heartbeat",
            "300ms",
            "--run-stale-after",
            "2s",
            "--run-sweep-interval",
            "20ms",
            "--duty-lease",
            "1s",
        ]
        .into_iter()
        .map(String::from)
        .collect(),
    };
    let mut a = cluster.replica("a", 4);
    let b_started = Instant::now();
    let b = cluster.replica("b", 0);
    // How long a replica takes to start on an existing database: the restart below aims
    // its reconciliation at the moment b's sweep finds the same runs stale.
    let start_time = b_started.elapsed();
    let admin = a.admin_token();
    let edge = pool_token(&b, &admin, "edge");
    let mut runner = Runner::start(&root, "edge-b", &b.url(), &edge, 4);

    // Four runs on replica a's embedded runners, four on the separate runner of b; each
    // holds its stack's state lock and hangs.
    let mut runs = Vec::new();
    for s in 0..8 {
        let stack = format!("r{s}");
        let pool = if s < 4 { "hosted" } else { "edge" };
        create_stack(&a, &admin, &stack, &repo, &engine, pool);
        let via = if s % 2 == 0 { &a } else { &b };
        runs.push((stack.clone(), trigger(via, &admin, &stack)));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let locked = std::fs::read_to_string(hang_dir.join("locked")).unwrap_or_default();
        if runs.iter().all(|(_, id)| locked.lines().any(|l| l == id)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the runs did not all take their lock within 60 s (locked: {locked:?}): {:?}\n\
             a:\n{}\nb:\n{}\nrunner:\n{}",
            unfinished(&db),
            log_tail(&a, 25),
            log_tail(&b, 25),
            runner.tail()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let leased: usize = db
        .value("SELECT COUNT(*) FROM runs WHERE leased = 1 AND started = 1")
        .parse()
        .unwrap();
    assert_eq!(leased, 8, "{:?}", run_rows(&db));

    // Nothing reports any more: the separate runner and replica a (with its embedded
    // runners) are killed; the engines hang on.
    runner.child.kill().unwrap();
    runner.child.wait().unwrap();
    let a_addr = a.addr.to_string();
    a.signal(libc::SIGKILL);
    a.wait_exit(Duration::from_secs(10))
        .expect("replica a exits");
    let first_log = a.log_text();
    drop(a);
    // Restart replica a (same id, same data dir) as the first of its embedded runners'
    // runs goes stale for replica b's sweep: its start-up reconciliation settles them at once
    // while b's sweep, every 20 ms, reaches for the same runs.
    let first_beat: i64 = db
        .value(
            "SELECT MIN(r.last_heartbeat) FROM runs r JOIN runners w ON w.id = r.runner_id \
             WHERE r.leased = 1 AND w.name LIKE 'local@a-%'",
        )
        .parse()
        .unwrap();
    let now_ms = chrono::Utc::now().timestamp_millis();
    let stale_at = first_beat + stale_after.as_millis() as i64;
    let lead = start_time.as_millis() as i64;
    if stale_at - lead > now_ms {
        std::thread::sleep(Duration::from_millis((stale_at - lead - now_ms) as u64));
    }
    let restart = chrono::Utc::now().timestamp_millis();
    let a = cluster.replica_on("a", 4, &a_addr);
    eprintln!(
        "replica a restarted {} ms before its first run went stale, up after {} ms",
        stale_at - restart,
        chrono::Utc::now().timestamp_millis() - restart
    );

    let deadline = Instant::now() + Duration::from_secs(30);
    while !unfinished(&db).is_empty() {
        assert!(
            Instant::now() < deadline,
            "runs not settled within 30 s: {:?}\na:\n{}\nb:\n{}",
            run_rows(&db),
            log_tail(&a, 25),
            log_tail(&b, 25)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Let the sweep look again several times before counting — a second transition would
    // show up now: wait until the stale sweep's lease (1 s, renewed every third of it; its
    // holder sweeps every 20 ms) has been renewed 200 ms after every run had ended.
    let ended = chrono::Utc::now().timestamp_millis();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let expires: i64 = db
            .value(
                "SELECT COALESCE(MAX(expires_at), 0) FROM duty_leases WHERE duty = 'stale_sweep'",
            )
            .parse()
            .unwrap();
        if expires >= ended + 1_200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no stale sweep pass after the runs ended (lease expires at {expires})\na:\n{}\nb:\n{}",
            log_tail(&a, 25),
            log_tail(&b, 25)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(hang_dir.join("release"), "").unwrap();

    let logs = [first_log, a.log_text(), b.log_text()];
    let rows = run_rows(&db);
    let mut by_reconcile = 0;
    for (stack, id) in &runs {
        let r = &rows[id];
        assert_eq!(r.state, "force_failed", "{id}: {r:?}");
        let released = db.value(&format!(
            "SELECT COUNT(*) FROM audit_log WHERE action = 'state.lock_released' \
             AND detail LIKE '%\"run\":\"{id}\"%'"
        ));
        assert_eq!(
            released, "1",
            "run {id}: lock releases audited {released} times"
        );
        let events = db.value(&format!(
            "SELECT COUNT(*) FROM notification_events WHERE kind = 'run_ended' \
             AND payload LIKE '%\"run\":\"{id}\"%'"
        ));
        assert_eq!(events, "1", "run {id}: {events} run_ended events");
        let settled = log_mentions(&logs, "silent run settled", id);
        assert_eq!(
            settled, 1,
            "run {id} settled {settled} times\na:\n{}\nb:\n{}",
            logs[1], logs[2]
        );
        // Exactly one phase row closed by the force-fail; none opened after it.
        let open = r.phases.iter().filter(|p| p.2.is_none()).count();
        assert_eq!(open, 0, "{id}: {r:?}");
        let locked = db.value(&format!(
            "SELECT COUNT(*) FROM state_heads WHERE stack_id = '{stack}' AND lock_id IS NOT NULL"
        ));
        assert_eq!(locked, "0", "{stack}: the force-fail released the lock");
        if log_mentions(&logs[1..2], "silent run settled", id) == 1 {
            by_reconcile += 1;
        }
    }
    eprintln!(
        "settled by replica a's restart: {by_reconcile}, by the stale sweeps: {}",
        runs.len() - by_reconcile
    );
    drop((a, b));
    drop(db);
}
