//! Plan runs end to end: the real `bosun server` (with its embedded runner, or a separate
//! `bosun runner` process), three real sshd hosts on loopback (`SshdFleet`: their own host
//! keys checked against a known_hosts file, one client identity file), the hosts and the
//! plan stored through the API, runs started, followed, shown and aborted with the CLI.
//! A run over three hosts with per-host results and its file edits on every host; what
//! a step prints followed live with `start --wait` while the step still runs (masked),
//! then shown per host by `plan-run show`; a failing step halting the run; a dry run's report changing nothing; an abort killing
//! the remote commands; and restarts: the server killed mid-run while its separate runner
//! goes on (the run completes), the server and the runner both killed (the run is
//! `interrupted` with its progress), and the server killed with its embedded runner (the
//! run is settled before the restarted server answers anything). A run gated by an
//! environment that requires approval gets its preview, a dry run shown where people
//! decide (CLI, the console's run page and inbox over a real session); approving before
//! the preview ran aborts it.
//!
//! The sshd hosts run as the current user, so their commands are processes of ours: the
//! long ones sleep for a duration unique to the test (`sleep 30.<marker>`), found and
//! counted by that command line, and killed when the test ends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bosun_testkit::sshd::{require_sshd, SshdFleet};
use serde_json::{json, Value};
use support::{bosun, http, wait_for, KillOnDrop, ServerProcess, BIN};
use tempfile::TempDir;

/// Short liveness timings, so a silent runner is noticed within seconds.
const TIMING: &[&str] = &[
    "--run-heartbeat",
    "1s",
    "--run-stale-after",
    "3s",
    "--run-sweep-interval",
    "200ms",
];

/// How long a run of a few quick steps over three loopback hosts may take.
const RUN_WAIT: Duration = Duration::from_secs(60);

// ---- processes ---------------------------------------------------------------------------

/// Live (not zombie) processes whose command line contains `needle`: pid and command line.
fn processes_with(needle: &str) -> Vec<(i32, String)> {
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
        let zombie = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|s| s == "Z" || s == "X");
        if zombie {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        if cmdline.contains(needle) {
            out.push((pid, cmdline));
        }
    }
    out
}

// ---- one test's world --------------------------------------------------------------------

/// Three sshd hosts, a temp dir (the server's data, the hosts' work dir, a runner's work
/// dir and log), the server, and maybe a separate runner.
struct World {
    fleet: SshdFleet,
    dir: TempDir,
    server: ServerProcess,
    admin: String,
    runner: Option<KillOnDrop>,
    /// In the duration of every long `sleep` this test's plans run on the hosts.
    marker: String,
}

impl World {
    /// `None` when sshd is missing (the skip is announced). `args` go to `bosun server`.
    fn new(args: &[&str]) -> Option<World> {
        if !require_sshd() {
            return None;
        }
        let fleet = SshdFleet::start(3);
        let dir = tempfile::Builder::new()
            .prefix("bosun-plan-runs-e2e-")
            .tempdir()
            .unwrap();
        std::fs::create_dir(dir.path().join("work")).unwrap();
        let mut all = args.to_vec();
        all.extend_from_slice(TIMING);
        let server = ServerProcess::start(&dir.path().join("data"), &all, &[]);
        let admin = server.admin_token();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let marker = format!("{:05}{:04}", std::process::id() % 100_000, nanos % 10_000);
        let world = World {
            fleet,
            dir,
            server,
            admin,
            runner: None,
            marker,
        };
        world.import_hosts();
        Some(world)
    }

    fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// `sleep` for `secs` seconds and a fraction that is this test's marker.
    fn sleep_command(&self, secs: u32) -> String {
        format!("[\"sleep\", \"{secs}.{}\"]", self.marker)
    }

    /// This test's long remote sleeps still running.
    fn sleeps(&self) -> Vec<(i32, String)> {
        processes_with(&format!(".{}", self.marker))
            .into_iter()
            .filter(|(_, cmd)| cmd.starts_with("sleep "))
            .collect()
    }

    /// Kills this test's remote sleeps: a runner killed with SIGKILL leaves its remote
    /// commands running (sshd does not signal a command whose client vanished).
    fn kill_sleeps(&self) {
        for (pid, _) in self.sleeps() {
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }

    /// h0, h1, h2: the fleet's hosts, labelled `fleet`, with the fleet's identity file and
    /// known_hosts, imported as an inventory through the API.
    fn import_hosts(&self) {
        let mut inv = String::from("hosts:\n");
        for i in 0..self.fleet.hosts().len() {
            inv.push_str(&self.host_entry(i, "labels: [fleet]"));
        }
        let answer = self.import(&inv);
        assert_eq!(
            answer["hosts_created"],
            json!(["h0", "h1", "h2"]),
            "{answer:#}"
        );
    }

    /// The inventory line of fleet host `i` (`hi`), with `extra` keys.
    fn host_entry(&self, i: usize, extra: &str) -> String {
        let h = &self.fleet.hosts()[i];
        format!(
            "  h{i}: {{ address: \"{}\", port: {}, user: \"{}\", identity_file: \"{}\", known_hosts: \"{}\", {extra} }}\n",
            h.address(),
            h.port(),
            h.user(),
            self.fleet.client_key_path().display(),
            self.fleet.known_hosts_path().display()
        )
    }

    /// Imports inventory `inv` through the API, which must take it; its answer.
    fn import(&self, inv: &str) -> Value {
        let body = json!({ "source": inv }).to_string();
        let (status, answer) = http(
            self.server.addr,
            "POST",
            "/api/v1/orgs/default/inventory",
            &self.admin,
            Some(&body),
        );
        assert_eq!(status, 200, "inventory import: {answer}");
        serde_json::from_str(&answer).unwrap()
    }

    /// Stores a plan (`W` in `source` becomes the hosts' work dir).
    fn upload_plan(&self, source: &str) {
        let source = source.replace("W/", &format!("{}/", self.work().display()));
        let body = json!({ "source": source }).to_string();
        let (status, answer) = http(
            self.server.addr,
            "POST",
            "/api/v1/orgs/default/plans",
            &self.admin,
            Some(&body),
        );
        assert!(
            status == 201 || status == 200,
            "plan upload: {status} {answer}"
        );
    }

    /// Starts a separate `bosun runner` with a pool token of the org (it serves plan runs).
    fn start_runner(&mut self) {
        let token = self.json(&["token", "create", "--pool", "edge"])["secret"]
            .as_str()
            .unwrap()
            .to_string();
        let log = std::fs::File::create(self.dir.path().join("runner.log")).unwrap();
        let child = Command::new(BIN)
            .args(["runner", "--server", &self.server.url(), "--token", &token])
            .arg("--work-dir")
            .arg(self.dir.path().join("runner-work"))
            .args(["--name", "edge-1"])
            .env_remove("BOSUN_TOKEN")
            .env_remove("BOSUN_URL")
            .env_remove("BOSUN_RUNNER_TOKEN")
            .env("BOSUN_LOG", "info,bosun_runner=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.runner = Some(KillOnDrop(child));
    }

    fn runner_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("runner.log")).unwrap_or_default()
    }

    /// What to print when something is not as expected.
    fn diagnostics(&self) -> String {
        let log = self.server.log.lock().unwrap();
        let from = log.len().saturating_sub(40);
        let runner = self.runner_log();
        let runner_tail: Vec<&str> = runner.lines().rev().take(30).collect();
        format!(
            "server log (tail):\n{}\nrunner log (tail):\n{}",
            log[from..].join("\n"),
            runner_tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )
    }

    /// `bosun ARGS`, which must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = bosun(&self.server, &self.admin, args);
        assert!(
            out.status.success(),
            "bosun {args:?} failed: {:?}\nstdout:\n{}\nstderr:\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.diagnostics()
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `bosun --json ARGS`, parsed.
    fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let text = self.ok(&all);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
    }

    /// Starts a run of `plan` with extra CLI args; its id.
    fn start_run(&self, plan: &str, extra: &[&str]) -> String {
        let mut args = vec!["plan-run", "start", plan];
        args.extend_from_slice(extra);
        let run = self.json(&args);
        run["id"].as_str().unwrap().to_string()
    }

    fn show(&self, run: &str) -> Value {
        self.json(&["plan-run", "show", run])
    }

    /// Polls the run until `pred` holds; fails at once (with the run, its log and the
    /// processes' logs) if it ends otherwise.
    fn wait_run(
        &self,
        run: &str,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let r = self.show(run);
            if pred(&r) {
                return r;
            }
            let ended = !matches!(state(&r), "queued" | "paused" | "running");
            if ended || Instant::now() > deadline {
                let logs = bosun(&self.server, &self.admin, &["plan-run", "logs", run]);
                panic!(
                    "plan run {run}: wanted {what} within {timeout:?}; it is:\n{r:#}\nrun log:\n{}\n{}",
                    String::from_utf8_lossy(&logs.stdout),
                    self.diagnostics()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn wait_state(&self, run: &str, want: &str, timeout: Duration) -> Value {
        self.wait_run(run, want, timeout, |r| state(r) == want)
    }

    /// The server killed with SIGKILL, then started again on the same data dir and
    /// address (runners find it where it was) with `args`.
    fn kill_server(&mut self) {
        self.server.signal(libc::SIGKILL);
        assert!(
            self.server.wait_exit(Duration::from_secs(10)).is_some(),
            "the server did not die"
        );
    }

    fn restart_server(&mut self, args: &[&str]) {
        let mut all = args.to_vec();
        all.extend_from_slice(TIMING);
        let listen = self.server.addr.to_string();
        self.server = ServerProcess::start_listening(&self.data_dir(), &listen, &all, &[]);
    }
}

impl Drop for World {
    fn drop(&mut self) {
        // Nothing this test started may linger.
        self.kill_sleeps();
    }
}

fn state(run: &Value) -> &str {
    run["state"].as_str().unwrap()
}

fn results(run: &Value) -> &Vec<Value> {
    run["results"].as_array().unwrap()
}

/// The result of `step` on `host`.
fn result<'a>(run: &'a Value, step: i64, host: &str) -> &'a Value {
    results(run)
        .iter()
        .find(|r| r["step"] == step && r["host"] == host)
        .unwrap_or_else(|| panic!("no result of step {step} on {host}: {run:#}"))
}

const HOSTS: [&str; 3] = ["h0", "h1", "h2"];

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

// ---- tests -------------------------------------------------------------------------------

/// A run over three hosts, followed with `start --wait` (the log's event stream): every
/// host's result for every step, and the files really written on every host.
#[test]
fn a_run_over_three_hosts_succeeds_with_per_host_results_and_its_edits() {
    let Some(w) = World::new(&["--local-runners", "1"]) else {
        return;
    };
    w.upload_plan(
        r#"name: fleet-config
targets: { labels: [fleet] }
inputs:
  release: { default: "1.0" }
steps:
  - name: config
    file.copy:
      path: "W/{{ host.name }}.conf"
      content: "host={{ host.name }}\nrelease={{ inputs.release }}\n"
      mode: "0640"
  - name: pin
    file.lineinfile:
      path: "W/{{ host.name }}.env"
      line: "RELEASE={{ inputs.release }}"
      create: true
  - name: greet
    command: ["sh", "-c", "echo hello from {{ host.name }}"]
"#,
    );
    let out = w.ok(&[
        "plan-run",
        "start",
        "fleet-config",
        "--input",
        "release=2.0",
        "--wait",
    ]);
    let id = out.split_whitespace().next().unwrap().to_string();
    assert!(id.starts_with("prun-"), "{out}");
    // The log, as it streamed: each step, each host's end, the summary line.
    assert!(out.contains("step 1: config"), "{out}");
    assert!(out.contains("step 3: greet"), "{out}");
    for h in HOSTS {
        assert!(out.contains(&format!("  {h} changed:")), "{out}");
    }
    assert!(
        out.contains("bosun: run succeeded — ok 0, changed 9, failed 0"),
        "{out}"
    );

    let run = w.show(&id);
    assert_eq!(state(&run), "succeeded", "{run:#}");
    assert_eq!(run["hosts"], json!(HOSTS), "{run:#}");
    assert_eq!(run["inputs"]["release"], "2.0");
    assert!(run["ended_at"].is_string(), "{run:#}");
    assert_eq!(results(&run).len(), 9, "{run:#}");
    for h in HOSTS {
        let config = result(&run, 1, h);
        assert_eq!(config["status"], "changed", "{config:#}");
        assert_eq!(config["changed"], true);
        assert_eq!(config["module"], "file.copy");
        assert!(config["duration_ms"].as_i64().unwrap() >= 0);
        let greet = result(&run, 3, h);
        assert_eq!(greet["exit_code"], 0, "{greet:#}");
        assert_eq!(greet["stdout"], format!("hello from {h}\n"), "{greet:#}");
        assert_eq!(greet["changed"], true, "{greet:#}");
        assert_eq!(greet["module"], "command");

        let conf = w.work().join(format!("{h}.conf"));
        assert_eq!(
            read(&conf).as_deref(),
            Some(format!("host={h}\nrelease=2.0\n").as_str())
        );
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&conf).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640, "{h}.conf mode");
        assert_eq!(
            read(&w.work().join(format!("{h}.env"))).as_deref(),
            Some("RELEASE=2.0\n")
        );
    }

    // The same run again: the files are as wanted, only the raw command changes.
    let again = w.start_run("fleet-config", &["--input", "release=2.0"]);
    let run = w.wait_state(&again, "succeeded", RUN_WAIT);
    for h in HOSTS {
        assert_eq!(result(&run, 1, h)["status"], "ok", "{run:#}");
        assert_eq!(result(&run, 2, h)["changed"], false, "{run:#}");
        assert_eq!(result(&run, 3, h)["status"], "changed", "{run:#}");
    }
    let listed = w.json(&["plan-run", "list", "fleet-config"]);
    let ids: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [again.as_str(), id.as_str()], "newest first");
}

/// A host behind a bastion, end to end: h1 is imported with `proxy_jump: h0`; `bosun
/// host check h1` reads both from the server and checks h0's stages, then h1's through
/// it. A plan targeting a label only h1 has runs on h1 alone — even when h0 is given that
/// label after the run was created and before a runner took it (the runner's inventory
/// holds h0 as a bastion, and the lease names the run's hosts) — through h0, whose sshd
/// sees the runner's login while h2's sees none; with h1's port closed, h1's step fails
/// naming the bastion that could not reach it.
#[test]
fn a_host_behind_a_bastion_runs_through_it_and_the_bastion_is_no_target() {
    let Some(mut w) = World::new(&["--local-runners", "0"]) else {
        return;
    };
    let answer = w.import(&format!(
        "hosts:\n{}{}",
        w.host_entry(0, "labels: [edge]"),
        w.host_entry(1, "labels: [app], proxy_jump: h0")
    ));
    assert_eq!(answer["hosts_updated"], json!(["h0", "h1"]), "{answer:#}");
    let shown = w.json(&["host", "show", "h1"]);
    assert_eq!(shown["proxy_jump"], "h0", "{shown:#}");
    let list = w.ok(&["host", "list"]);
    assert!(
        list.lines()
            .any(|l| l.starts_with("h1 ") && l.trim_end().ends_with(" h0")),
        "{list}"
    );

    // host check through the server: h0's stages, then h1's, reached through h0.
    // Logins each fleet host's sshd accepted so far.
    let logins = |w: &World, i: usize| w.fleet.hosts()[i].logins();
    let before = logins(&w, 0);
    let check = w.json(&["host", "check", "h1"]);
    assert_eq!(check["ok"], true, "{check:#}");
    let stages: Vec<(String, String)> = check["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["bastion"].as_str().unwrap_or("").to_string(),
                s["stage"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut expected = Vec::new();
    for host in ["h0", ""] {
        for stage in ["resolve", "connect", "host key", "authenticate"] {
            expected.push((host.to_string(), stage.to_string()));
        }
    }
    assert_eq!(stages[..8], expected[..], "{check:#}");
    let text = w.ok(&["host", "check", "h1"]);
    let through = text
        .lines()
        .find(|l| l.starts_with("h1: connect "))
        .unwrap_or_else(|| panic!("no row for h1's connect: {text}"));
    assert!(through.contains("through bastion \"h0\""), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("h0: authenticate ")),
        "{text}"
    );
    assert!(logins(&w, 0) > before, "host check logged in to h0");

    w.upload_plan(
        r#"name: behind
targets: { labels: [app] }
steps:
  - name: mark
    command: ["sh", "-c", "echo on {{ host.name }} > W/{{ host.name }}.behind; echo done"]
"#,
    );
    // Created with no runner: it targets h1 alone, and waits.
    let id = w.start_run("behind", &[]);
    assert_eq!(w.show(&id)["hosts"], json!(["h1"]));
    // The bastion now has the plan's label too: it still is no target of this run.
    w.ok(&["host", "update", "h0", "--label", "edge", "--label", "app"]);
    let before = [logins(&w, 0), logins(&w, 1), logins(&w, 2)];
    w.start_runner();
    let run = w.wait_state(&id, "succeeded", RUN_WAIT);
    assert_eq!(run["hosts"], json!(["h1"]), "{run:#}");
    assert!(
        results(&run).iter().all(|r| r["host"] == "h1"),
        "only h1 has results: {run:#}"
    );
    assert_eq!(result(&run, 1, "h1")["stdout"], "done\n", "{run:#}");
    assert_eq!(
        read(&w.work().join("h1.behind")).as_deref(),
        Some("on h1\n")
    );
    assert_eq!(read(&w.work().join("h0.behind")), None, "nothing ran on h0");
    assert!(
        logins(&w, 0) > before[0],
        "the runner logged in to the bastion h0:\n{}",
        w.fleet.hosts()[0].log()
    );
    assert!(logins(&w, 1) > before[1], "{}", w.fleet.hosts()[1].log());
    assert_eq!(logins(&w, 2), before[2], "h2 is not involved");

    // h1 where nothing listens: the bastion cannot reach it, and the step says so. (h0
    // loses the plan's label first: a run created now would target it.)
    w.ok(&["host", "update", "h0", "--label", "edge"]);
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    w.ok(&["host", "update", "h1", "--port", &closed.to_string()]);
    let id = w.start_run("behind", &[]);
    assert_eq!(w.show(&id)["hosts"], json!(["h1"]));
    let run = w.wait_state(&id, "failed", RUN_WAIT);
    let failed = result(&run, 1, "h1");
    assert_eq!(failed["status"], "failed", "{run:#}");
    let message = failed["message"].as_str().unwrap();
    assert!(
        message.contains(&format!(
            "bastion \"h0\" could not open a channel to 127.0.0.1:{closed}"
        )),
        "{run:#}"
    );
    assert!(results(&run).iter().all(|r| r["host"] == "h1"), "{run:#}");
}

/// Reads a child's stdout line by line on a thread, so a test can wait for a line with a
/// deadline while the child goes on.
struct Lines {
    child: KillOnDrop,
    rx: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Lines {
    fn spawn(mut command: Command) -> Lines {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines {
            child: KillOnDrop(child),
            rx,
            seen: Vec::new(),
        }
    }

    /// Reads until a line equal to `want` arrives; `false` at the deadline or at the
    /// end of the output.
    fn wait_for(&mut self, want: &str, deadline: Instant) -> bool {
        while !self.seen.iter().any(|l| l == want) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => return false,
            }
        }
        true
    }

    /// Reads to the end of the output (within `timeout`); the child's exit status.
    fn finish(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    panic!(
                        "the output did not end within {timeout:?}:\n{}",
                        self.text()
                    )
                }
            }
        }
        self.child.0.wait().unwrap()
    }

    fn text(&self) -> String {
        let mut text = self.seen.join("\n");
        text.push('\n');
        text
    }
}

/// What a step prints reaches the run's log while the step runs, each line prefixed by
/// its host: every host's command prints a line (with a secret the server resolved),
/// then waits for a file the test creates only once `plan-run start --wait` has printed
/// that host's line — a log that carried the output only when the step ends would never
/// show it (the hosts' commands give up after 60 s, the test after 60 s). The secret is
/// masked in the live lines and in the results; afterwards `plan-run show` prints each
/// host's output.
#[test]
fn a_steps_output_is_followed_live_and_shown_per_host_afterwards() {
    let Some(w) = World::new(&["--local-runners", "1"]) else {
        return;
    };
    w.ok(&["secret", "set", "app/token", "--value", "hunter2-live"]);
    w.upload_plan(
        r#"name: talk
targets: { labels: [fleet] }
vars:
  token: secret://app/token
steps:
  - name: talk
    shell: 'echo "ready {{ host.name }} token={{ vars.token }}"; echo "warming {{ host.name }}" >&2; i=0; while [ ! -e W/{{ host.name }}.go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; echo "done {{ host.name }}"'
"#,
    );
    let mut command = Command::new(BIN);
    command
        .args(["plan-run", "start", "talk", "--wait"])
        .env("BOSUN_URL", w.server.url())
        .env("BOSUN_TOKEN", &w.admin)
        .env_remove("BOSUN_ORG");
    let mut follow = Lines::spawn(command);
    let deadline = Instant::now() + Duration::from_secs(60);
    for h in HOSTS {
        let seen = follow.wait_for(&format!("[{h}] ready {h} token=***"), deadline);
        if !seen {
            for h in HOSTS {
                std::fs::write(w.work().join(format!("{h}.go")), "").unwrap();
            }
            panic!(
                "{h}'s first line was not followed while its step waited:\n{}\n{}",
                follow.text(),
                w.diagnostics()
            );
        }
        // The step is still running on that host: it cannot end before the file exists.
        std::fs::write(w.work().join(format!("{h}.go")), "").unwrap();
    }
    let status = follow.finish(RUN_WAIT);
    let out = follow.text();
    assert!(status.success(), "{out}\n{}", w.diagnostics());
    for h in HOSTS {
        assert!(
            out.contains(&format!("[{h} stderr] warming {h}\n")),
            "{out}"
        );
        let done = out.find(&format!("[{h}] done {h}\n")).expect(&out);
        let finished = out.find(&format!("  {h} changed: ran: ")).expect(&out);
        assert!(
            done < finished,
            "a host's lines come before its result:\n{out}"
        );
        // After the log, the run as it ended, with each host's output.
        assert!(
            out.contains(&format!(
                "--- step 1 talk on {h}: stdout (changed, exit code 0)\n  ready {h} token=***\n  done {h}\n"
            )),
            "{out}"
        );
    }
    assert!(!out.contains("hunter2-live"), "{out}");

    let id = out.split_whitespace().next().unwrap().to_string();
    let shown = w.ok(&["plan-run", "show", &id]);
    for h in HOSTS {
        assert!(
            shown.contains(&format!(
                "--- step 1 talk on {h}: stdout (changed, exit code 0)\n  ready {h} token=***\n  done {h}\n"
            )),
            "{shown}"
        );
        assert!(
            shown.contains(&format!(
                "--- step 1 talk on {h}: stderr (changed, exit code 0)\n  warming {h}\n"
            )),
            "{shown}"
        );
    }
    assert!(!shown.contains("hunter2-live"), "{shown}");
    // `--json` is the server's view, unchanged: the whole output of each stream.
    let run = w.show(&id);
    assert_eq!(
        result(&run, 1, "h1")["stdout"],
        "ready h1 token=***\ndone h1\n",
        "{run:#}"
    );
    let log = w.ok(&["plan-run", "logs", &id]);
    assert!(log.contains("[h2] done h2\n"), "{log}");
    assert!(!log.contains("hunter2-live"), "{log}");
}

/// A step failing on one host halts the run: every host finishes that step, every later
/// step is skipped on every host, and the run is `failed` naming the step and the host.
#[test]
fn a_failing_step_halts_the_run_and_skips_every_later_step() {
    let Some(w) = World::new(&["--local-runners", "1"]) else {
        return;
    };
    w.upload_plan(
        r#"name: halting
targets: { labels: [fleet] }
steps:
  - name: mark
    shell: "touch W/{{ host.name }}.marked"
  - name: fails on h1
    shell: 'test "{{ host.name }}" != h1 && touch W/{{ host.name }}.passed'
  - name: never
    shell: "touch W/{{ host.name }}.never"
  - name: nor this
    file.copy:
      path: "W/{{ host.name }}.nor"
      content: "x\n"
"#,
    );
    let id = w.start_run("halting", &[]);
    let run = w.wait_state(&id, "failed", RUN_WAIT);
    assert_eq!(
        run["reason"], "step 2 (\"fails on h1\") failed on h1",
        "{run:#}"
    );
    assert_eq!(results(&run).len(), 12, "{run:#}");
    let failed = result(&run, 2, "h1");
    assert_eq!(failed["status"], "failed", "{failed:#}");
    assert_eq!(failed["exit_code"], 1, "{failed:#}");
    for h in ["h0", "h2"] {
        // The others finished the failing step.
        let r = result(&run, 2, h);
        assert_eq!(r["status"], "changed", "{r:#}");
        assert_eq!(r["exit_code"], 0, "{r:#}");
        assert!(w.work().join(format!("{h}.passed")).exists());
    }
    for h in HOSTS {
        assert_eq!(result(&run, 1, h)["status"], "changed");
        assert!(w.work().join(format!("{h}.marked")).exists());
        for step in [3, 4] {
            let r = result(&run, step, h);
            assert_eq!(r["status"], "skipped", "{r:#}");
            assert!(
                r["message"].as_str().unwrap().contains("halted at step 2"),
                "{r:#}"
            );
        }
        assert!(!w.work().join(format!("{h}.never")).exists());
        assert!(!w.work().join(format!("{h}.nor")).exists());
    }
    assert_eq!(run["report"]["halted"]["hosts"], json!(["h1"]), "{run:#}");

    // `logs --follow` of the ended run prints its log and says how it ended.
    let out = bosun(&w.server, &w.admin, &["plan-run", "logs", &id, "--follow"]);
    assert!(!out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout
            .contains("bosun: step 2 (\"fails on h1\") failed on h1: every later step is skipped"),
        "{stdout}"
    );
    assert!(
        stderr.contains(&format!("plan run {id} ended failed: step 2")),
        "{stderr}"
    );
}

/// A rolling run through the server: batches of two, a handler notified by a file step.
/// The results carry the handler (numbered after the steps), the log names each batch
/// and the handler, the report lists the batches, and the console's run page shows them.
#[test]
fn a_rolling_run_with_a_handler_shows_its_batches_and_handlers() {
    let Some(w) = World::new(&["--local-runners", "1"]) else {
        return;
    };
    w.upload_plan(
        r#"name: rolling
targets: { labels: [fleet] }
serial: 2
steps:
  - name: config
    file.copy:
      path: "W/{{ host.name }}.conf"
      content: "v1\n"
    notify: reload
handlers:
  - name: reload
    shell: "touch W/{{ host.name }}.reloaded"
"#,
    );
    let id = w.start_run("rolling", &[]);
    let run = w.wait_state(&id, "succeeded", RUN_WAIT);
    assert_eq!(results(&run).len(), 6, "{run:#}");
    for h in HOSTS {
        let r = result(&run, 2, h);
        assert_eq!(
            (
                r["step_name"].as_str(),
                r["module"].as_str(),
                r["status"].as_str()
            ),
            (Some("reload"), Some("shell"), Some("changed")),
            "{r:#}"
        );
        assert!(w.work().join(format!("{h}.reloaded")).exists());
    }
    let batches: Vec<Value> = run["report"]["batches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| json!([b["hosts"], b["status"]]))
        .collect();
    assert_eq!(
        batches,
        [
            json!([["h0", "h1"], "succeeded"]),
            json!([["h2"], "succeeded"])
        ],
        "{run:#}"
    );
    let log = w.ok(&["plan-run", "logs", &id]);
    assert!(log.contains("bosun: batch 1 of 2: h0, h1"), "{log}");
    assert!(log.contains("bosun: batch 2 of 2: h2"), "{log}");
    assert!(log.contains("handler 2: reload"), "{log}");

    let cookie = console_session(&w, &w.admin);
    let page = console_page(&w, &cookie, &format!("/orgs/default/plan-runs/{id}"));
    let section = element(&page, "section", "batches");
    assert!(section.contains("data-batch=\"2\""), "{section}");
    assert!(section.contains("<td>h0, h1</td>"), "{section}");
    assert!(section.contains("succeeded"), "{section}");
}

/// A dry run stores its report — per host and step what would change, with a diff for
/// the file step, raw commands unknown, unresolved references at the bottom of `show` —
/// and changes nothing on the hosts.
#[test]
fn a_dry_run_reports_diffs_and_unresolved_references_and_changes_nothing() {
    let Some(w) = World::new(&["--local-runners", "1"]) else {
        return;
    };
    for h in HOSTS {
        std::fs::write(w.work().join(format!("{h}.conf")), "colour=red\n").unwrap();
    }
    w.upload_plan(
        r#"name: preview
targets: { labels: [fleet] }
steps:
  - name: config
    file.copy:
      path: "W/{{ host.name }}.conf"
      content: "colour=blue\nowner={{ vars.owner }}\n"
  - name: restart
    command: ["touch", "W/{{ host.name }}.restarted"]
  - name: new file
    file.copy:
      path: "W/{{ host.name }}.new"
      content: "fresh\n"
"#,
    );
    let id = w.start_run("preview", &["--dry-run"]);
    let run = w.wait_state(&id, "succeeded", RUN_WAIT);
    assert_eq!(run["dry_run"], true);
    for h in HOSTS {
        let config = result(&run, 1, h);
        assert_eq!(config["status"], "changed", "{config:#}");
        let diff = config["diff"].as_str().unwrap_or_default();
        assert!(
            diff.contains("-colour=red") && diff.contains("+colour=blue"),
            "{config:#}"
        );
        assert_eq!(result(&run, 2, h)["status"], "unknown", "{run:#}");
        let new = result(&run, 3, h);
        assert_eq!(new["status"], "changed", "{new:#}");
        assert!(
            new["diff"].as_str().unwrap_or_default().contains("+fresh"),
            "{new:#}"
        );
        // Nothing changed on the host.
        assert_eq!(
            read(&w.work().join(format!("{h}.conf"))).as_deref(),
            Some("colour=red\n")
        );
        assert!(!w.work().join(format!("{h}.restarted")).exists());
        assert!(!w.work().join(format!("{h}.new")).exists());
    }
    let unresolved = run["report"]["unresolved"].as_array().unwrap();
    assert_eq!(unresolved.len(), 3, "{run:#}");
    assert!(
        unresolved
            .iter()
            .all(|u| u["reference"].as_str().unwrap().contains("vars.owner") && u["step"] == 1),
        "{run:#}"
    );

    let text = w.ok(&["plan-run", "show", &id]);
    let (_, bottom) = text
        .rsplit_once("Unresolved references: 3\n")
        .unwrap_or_else(|| panic!("no unresolved section at the bottom:\n{text}"));
    let mut lines: Vec<&str> = bottom.lines().collect();
    lines.sort();
    assert_eq!(lines.len(), 3, "{text}");
    for (line, h) in lines.iter().zip(HOSTS) {
        assert!(
            line.trim_start()
                .starts_with(&format!("{h} step 1 (config): "))
                && line.contains("vars.owner"),
            "{text}"
        );
    }
    assert!(text.contains("mode:") && text.contains("dry run"), "{text}");
}

/// Abort of a running run: `aborted` at once in the answer, the remote commands gone
/// from the hosts shortly after, and a follower of the log told how it ended. The hosts
/// log in the current user — root in CI and here, whose sessions OpenSSH lets no client
/// signal: the runner stops each remote command's process group with `kill` from a
/// second channel.
#[test]
fn abort_settles_at_once_and_kills_the_remote_commands() {
    let Some(w) = World::new(&["--local-runners", "1"]) else {
        return;
    };
    w.upload_plan(&format!(
        r#"name: long
targets: {{ labels: [fleet] }}
steps:
  - name: hold
    command: {}
  - name: after
    shell: "touch W/{{{{ host.name }}}}.after"
"#,
        w.sleep_command(60)
    ));
    let id = w.start_run("long", &[]);
    w.wait_state(&id, "running", RUN_WAIT);
    let sleeping = wait_for("a remote sleep on every host", RUN_WAIT, || {
        let s = w.sleeps();
        (s.len() == 3).then_some(s)
    });
    let follower = Command::new(BIN)
        .args(["plan-run", "logs", &id, "--follow"])
        .env("BOSUN_URL", w.server.url())
        .env("BOSUN_TOKEN", &w.admin)
        .env_remove("BOSUN_ORG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let follower = KillOnDrop(follower);

    let asked = Instant::now();
    let aborted = w.json(&["plan-run", "abort", &id]);
    assert_eq!(state(&aborted), "aborted", "at once: {aborted:#}");
    assert!(
        aborted["reason"]
            .as_str()
            .unwrap()
            .starts_with("aborted by"),
        "{aborted:#}"
    );
    wait_for(
        &format!("the remote sleeps end (were: {sleeping:?})"),
        Duration::from_secs(15),
        || w.sleeps().is_empty().then_some(()),
    );
    eprintln!("remote commands gone {:?} after the abort", asked.elapsed());

    // The follower saw the runner's last line, then the end.
    let mut follower = follower;
    let done = wait_for("the log follower ends", Duration::from_secs(30), || {
        follower.0.try_wait().unwrap()
    });
    assert!(!done.success());
    let child = std::mem::replace(&mut follower.0, Command::new("true").spawn().unwrap());
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("step 1: hold"), "{stdout}");
    assert!(
        stdout.contains("bosun: the run was aborted"),
        "{stdout}\n{}",
        w.diagnostics()
    );
    assert!(stderr.contains("ended aborted"), "{stderr}");

    let run = w.show(&id);
    assert_eq!(state(&run), "aborted");
    for h in HOSTS {
        assert!(!w.work().join(format!("{h}.after")).exists());
    }
    // The hosts are free again: a new run is not refused by the guard.
    let next = w.start_run("long", &[]);
    w.wait_state(&next, "running", RUN_WAIT);
    w.json(&["plan-run", "abort", &next]);
}

/// A plan of three steps whose second sleeps for `secs` on every host.
fn three_steps(w: &World, name: &str, secs: u32) -> String {
    format!(
        r#"name: {name}
targets: {{ labels: [fleet] }}
steps:
  - name: first
    file.copy:
      path: "W/{{{{ host.name }}}}.first"
      content: "1\n"
  - name: wait
    command: {}
  - name: last
    file.copy:
      path: "W/{{{{ host.name }}}}.last"
      content: "3\n"
"#,
        w.sleep_command(secs)
    )
}

/// Waits until the run is in its sleeping step: step 1's results reported on every host
/// and the sleeps running.
fn wait_in_step_two(w: &World, id: &str) -> Value {
    let run = w.wait_run(id, "step 1 reported on every host", RUN_WAIT, |r| {
        state(r) == "running" && results(r).iter().filter(|x| x["step"] == 1).count() == 3
    });
    wait_for("a remote sleep on every host", RUN_WAIT, || {
        (w.sleeps().len() == 3).then_some(())
    });
    run
}

/// The server killed with SIGKILL mid-run while its separate runner goes on: restarted
/// on the same address, it hears from the runner again and the run completes.
#[test]
fn a_server_killed_mid_run_hears_from_its_runner_again_and_the_run_succeeds() {
    let Some(mut w) = World::new(&["--local-runners", "0"]) else {
        return;
    };
    w.upload_plan(&three_steps(&w, "resumed", 5));
    w.start_runner();
    let id = w.start_run("resumed", &[]);
    wait_in_step_two(&w, &id);

    w.kill_server();
    let killed = Instant::now();
    w.restart_server(&["--local-runners", "0"]);
    let run = w.wait_state(&id, "succeeded", RUN_WAIT);
    eprintln!("succeeded {:?} after the kill", killed.elapsed());
    assert_eq!(results(&run).len(), 9, "{run:#}");
    for h in HOSTS {
        assert_eq!(result(&run, 1, h)["status"], "changed", "{run:#}");
        assert_eq!(result(&run, 2, h)["exit_code"], 0, "{run:#}");
        assert_eq!(result(&run, 3, h)["status"], "changed", "{run:#}");
        assert_eq!(
            read(&w.work().join(format!("{h}.last"))).as_deref(),
            Some("3\n")
        );
    }
    let log = w.ok(&["plan-run", "logs", &id]);
    assert!(log.contains("step 3: last"), "{log}");
    assert!(log.contains("bosun: run succeeded"), "{log}");
    assert!(
        !w.server.log_text().contains("silent plan run settled"),
        "the restarted server never gave the run up:\n{}",
        w.diagnostics()
    );
}

/// The server and its separate runner both killed mid-run: after the restart nothing
/// executes the run, so it is settled `interrupted` within the heartbeat limit, keeping
/// the per-host progress reported before; no run is left `running`.
#[test]
fn a_server_and_runner_killed_mid_run_leave_it_interrupted_with_its_progress() {
    let Some(mut w) = World::new(&["--local-runners", "0"]) else {
        return;
    };
    w.upload_plan(&three_steps(&w, "stranded", 60));
    w.start_runner();
    let id = w.start_run("stranded", &[]);
    wait_in_step_two(&w, &id);

    let mut runner = w.runner.take().unwrap();
    runner.0.kill().unwrap();
    runner.0.wait().unwrap();
    w.kill_server();
    w.kill_sleeps();
    w.restart_server(&["--local-runners", "0"]);
    let restarted = Instant::now();
    // The runner might still be alive as far as the server knows: it gets one
    // heartbeat limit (3 s) from the restart before the run is given up.
    let run = w.wait_state(&id, "interrupted", Duration::from_secs(15));
    let took = restarted.elapsed();
    assert!(
        took >= Duration::from_secs(2),
        "given up before the heartbeat limit: {took:?}"
    );
    eprintln!("interrupted {took:?} after the restart");
    assert_eq!(
        run["reason"],
        "the runner stopped reporting; the per-host progress it reported is kept"
    );
    assert_eq!(results(&run).len(), 3, "step 1's results only: {run:#}");
    for h in HOSTS {
        assert_eq!(result(&run, 1, h)["status"], "changed", "{run:#}");
        assert!(!w.work().join(format!("{h}.last")).exists());
    }
    let runs = w.json(&["plan-run", "list", "stranded"]);
    assert!(
        runs["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["state"] != "running"),
        "{runs:#}"
    );
}

/// The server killed with its embedded runner mid-run: that runner cannot be alive any
/// more, so the restarted server settles the run `interrupted` before it answers
/// anything, with the progress reported; its new embedded runner does not take it up.
#[test]
fn a_server_killed_with_its_embedded_runner_settles_the_run_at_restart() {
    let Some(mut w) = World::new(&["--local-runners", "1"]) else {
        return;
    };
    w.upload_plan(&three_steps(&w, "embedded", 60));
    let id = w.start_run("embedded", &[]);
    wait_in_step_two(&w, &id);

    w.kill_server();
    w.kill_sleeps();
    w.restart_server(&["--local-runners", "1"]);
    // The first answer of the restarted server already has it settled.
    let run = w.show(&id);
    assert_eq!(state(&run), "interrupted", "{run:#}\n{}", w.diagnostics());
    assert_eq!(
        run["reason"],
        "the server restarted while its embedded runner executed the run; the per-host progress it reported is kept"
    );
    assert_eq!(results(&run).len(), 3, "{run:#}");
    for h in HOSTS {
        assert_eq!(result(&run, 1, h)["status"], "changed", "{run:#}");
    }
    // A new run of the plan is not refused: nothing holds the hosts.
    let next = w.start_run("embedded", &[]);
    wait_in_step_two(&w, &next);
    w.json(&["plan-run", "abort", &next]);
}

/// The plan commands drive stored plans: `bosun plan dry-run` and `plan run`
/// (`--wait` follows to the end), `plan runs` lists them, and `bosun run show|logs`
/// take a plan run's id like a stack run's.
#[test]
fn plan_run_and_dry_run_commands_and_run_show_for_plan_runs() {
    let Some(w) = World::new(&["--local-runners", "1"]) else {
        return;
    };
    w.upload_plan(
        r#"name: stamp
targets: { labels: [fleet] }
steps:
  - name: stamp
    file.copy:
      path: "W/{{ host.name }}.stamp"
      content: "stamped\n"
"#,
    );
    let dry = w.json(&["plan", "dry-run", "stamp", "--wait"]);
    assert_eq!(
        (&dry["state"], &dry["dry_run"]),
        (&json!("succeeded"), &json!(true)),
        "{dry:#}"
    );
    for h in HOSTS {
        assert!(
            !w.work().join(format!("{h}.stamp")).exists(),
            "a dry run wrote {h}"
        );
    }
    let real = w.json(&["plan", "run", "stamp", "--wait"]);
    assert_eq!(
        (&real["state"], &real["dry_run"]),
        (&json!("succeeded"), &json!(false)),
        "{real:#}"
    );
    for h in HOSTS {
        assert_eq!(
            read(&w.work().join(format!("{h}.stamp"))).as_deref(),
            Some("stamped\n")
        );
    }
    let id = real["id"].as_str().unwrap();
    let runs = w.json(&["plan", "runs", "stamp"]);
    let ids: Vec<&str> = runs["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [id, dry["id"].as_str().unwrap()], "newest first");
    // Paged: one at a time, the next page after the cursor.
    let newest = w.json(&["plan", "runs", "stamp", "--limit", "1"]);
    assert_eq!(newest["items"].as_array().unwrap().len(), 1);
    assert_eq!(newest["items"][0]["id"], id);
    let next = w.json(&["plan-run", "list", "stamp", "--cursor", id]);
    assert_eq!(next["items"].as_array().unwrap().len(), 1);
    assert_eq!(next["items"][0]["id"], dry["id"]);
    // `bosun run show|logs` answer for plan runs too.
    assert_eq!(w.json(&["run", "show", id]), w.show(id));
    let log = w.ok(&["run", "logs", id]);
    assert!(log.contains("stamp"), "{log}");
    let out = bosun(
        &w.server,
        &w.admin,
        &["run", "abort", "run-0123456789abcdef"],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("bosun run cancel"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---- previews of gated runs --------------------------------------------------------------

/// Puts h0 and h1 in a `requires_approval` environment `prod` (h2 stays outside it) and
/// stores a plan writing each host's `W/<host>.conf`, its release an input.
fn gated_world(w: &World, plan: &str) {
    w.ok(&["env", "create", "prod", "--requires-approval"]);
    for h in ["h0", "h1"] {
        w.ok(&["host", "update", h, "--environment", "prod"]);
    }
    w.upload_plan(&format!(
        r#"name: {plan}
targets: {{ labels: [fleet] }}
inputs:
  release: {{ default: "1.0" }}
steps:
  - name: config
    file.copy:
      path: "W/{{{{ host.name }}}}.conf"
      content: "release={{{{ inputs.release }}}}\n"
"#
    ));
}

/// Starts a real run of `plan` with `release=2.0` through the CLI, which must say it
/// waits; the run, and what the CLI said on stderr.
fn start_gated(w: &World, plan: &str) -> (Value, String) {
    let out = bosun(
        &w.server,
        &w.admin,
        &["plan-run", "start", plan, "--input", "release=2.0"],
    );
    assert!(out.status.success(), "{out:?}\n{}", w.diagnostics());
    let id = String::from_utf8(out.stdout).unwrap().trim().to_string();
    (w.show(&id), String::from_utf8(out.stderr).unwrap())
}

/// A console session for `token`: `POST /login` as the login form sends it; the session
/// cookie (`name=value`).
fn console_session(w: &World, token: &str) -> String {
    let body = format!("token={token}&next=%2F");
    let mut s = std::net::TcpStream::connect(w.server.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    use std::io::{Read, Write};
    write!(
        s,
        "POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 303"), "login: {out}");
    out.lines()
        .filter_map(|l| {
            l.strip_prefix("set-cookie: ")
                .or(l.strip_prefix("Set-Cookie: "))
        })
        .map(|c| c.split(';').next().unwrap().to_string())
        .find(|c| c.starts_with("bosun_session="))
        .unwrap_or_else(|| panic!("no session cookie: {out}"))
}

/// A console page read with a session; its HTML.
fn console_page(w: &World, cookie: &str, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(w.server.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    use std::io::{Read, Write};
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (status, body) = support::parse_response(&out);
    assert_eq!(status, 200, "GET {path}: {body}");
    body
}

/// The `<tag>` element of `html` whose id is `id`, up to its closing `</tag>` (no
/// element of the same tag nested inside).
fn element<'a>(html: &'a str, tag: &str, id: &str) -> &'a str {
    let at = html
        .find(&format!(" id=\"{id}\""))
        .unwrap_or_else(|| panic!("no <{tag} id={id:?}> in:\n{html}"));
    let start = html[..at]
        .rfind(&format!("<{tag}"))
        .unwrap_or_else(|| panic!("id {id:?} is not on a <{tag}> in:\n{html}"));
    let close = format!("</{tag}>");
    let end = html[start..].find(&close).unwrap() + start + close.len();
    &html[start..end]
}

/// A real run that waits for an approval gets its preview — a dry run of the same
/// version, hosts and inputs, run at once by the runner — and whoever decides sees it:
/// the CLI names it, `plan-run show` sums it up, the run's console page shows each
/// host's result and the file step's diff in the approval card, the inbox sums it up
/// in a line. Approving then runs the real run; the preview, already ended, keeps its
/// outcome.
#[test]
fn a_gated_run_is_previewed_and_its_diff_shown_where_people_decide() {
    let Some(w) = World::new(&["--local-runners", "1", "--allow-self-approval"]) else {
        return;
    };
    gated_world(&w, "gated-config");
    // h2 already holds what the run would write.
    std::fs::write(w.work().join("h2.conf"), "release=2.0\n").unwrap();
    let (run, said) = start_gated(&w, "gated-config");
    let id = run["id"].as_str().unwrap().to_string();
    assert_eq!(state(&run), "paused", "{run:#}");
    assert_eq!(run["gated_environments"], json!(["prod"]), "{run:#}");
    let preview_id = run["preview"]
        .as_str()
        .unwrap_or_else(|| panic!("no preview: {run:#}"))
        .to_string();
    assert!(
        said.contains(&format!("`bosun approvals approve {id}`"))
            && said.contains(&format!("its preview {preview_id}"))
            && said.contains(&format!("`bosun plan-run show {preview_id}`")),
        "{said}"
    );

    // The preview: a dry run of the same hosts and inputs, not gated, and run at once.
    let preview = w.wait_state(&preview_id, "succeeded", RUN_WAIT);
    assert_eq!(preview["dry_run"], true, "{preview:#}");
    assert_eq!(preview["preview_of"], id.as_str(), "{preview:#}");
    assert_eq!(preview["hosts"], run["hosts"], "{preview:#}");
    assert_eq!(preview["hosts"], json!(HOSTS), "{preview:#}");
    assert_eq!(preview["inputs"], run["inputs"], "{preview:#}");
    assert_eq!(preview["plan_version"], run["plan_version"], "{preview:#}");
    assert_eq!(preview["gated_environments"], json!([]), "{preview:#}");
    for h in ["h0", "h1"] {
        let r = result(&preview, 1, h);
        assert_eq!(r["status"], "changed", "{r:#}");
        let diff = r["diff"].as_str().unwrap_or_default();
        assert!(
            diff.contains(&format!("+++ {}/{h}.conf (after)", w.work().display()))
                && diff.contains("+release=2.0"),
            "{r:#}"
        );
    }
    assert_eq!(result(&preview, 1, "h2")["status"], "ok", "{preview:#}");
    assert!(!w.work().join("h0.conf").exists(), "the preview wrote h0");
    // The run still waits.
    assert_eq!(state(&w.show(&id)), "paused");

    // `plan-run show` sums the preview up; the preview says whose it is.
    let text = w.ok(&["plan-run", "show", &id]);
    assert!(
        text.contains(&format!(
            "{preview_id} — 2 hosts would change, 1 no change (`bosun plan-run show {preview_id}`"
        )),
        "{text}"
    );
    let text = w.ok(&["plan-run", "show", &preview_id]);
    assert!(
        text.contains(&format!(
            "run {id}: this dry run shows what that run would change"
        )),
        "{text}"
    );

    // The console, as a person with a session reads it: the approval card shows the
    // preview's per-host results and the diff; the inbox sums it up in a line.
    let cookie = console_session(&w, &w.admin);
    let page = console_page(&w, &cookie, &format!("/orgs/default/plan-runs/{id}"));
    let card = element(&page, "section", "run-approval");
    assert!(
        card.contains("2 hosts would change, 1 no change")
            && card.contains(&format!("href=\"/orgs/default/plan-runs/{preview_id}\"")),
        "{card}"
    );
    let hosts = element(card, "table", "preview-hosts");
    for h in HOSTS {
        assert!(
            hosts.contains(&format!("<tr data-host=\"{h}\">")),
            "{hosts}"
        );
    }
    assert!(
        hosts.contains("state-changed") && hosts.contains("state-ok"),
        "{hosts}"
    );
    let diffs = element(card, "div", "preview-predictions");
    assert!(
        diffs.contains("<span class=\"add\">+release=2.0</span>")
            && diffs.contains("data-host=\"h0\"")
            && diffs.contains("data-host=\"h1\""),
        "{diffs}"
    );
    assert!(!card.contains("id=\"run-preview-running\""), "{card}");
    let preview_page = console_page(
        &w,
        &cookie,
        &format!("/orgs/default/plan-runs/{preview_id}"),
    );
    assert!(
        element(&preview_page, "dd", "preview-of").contains(&format!("/plan-runs/{id}\"")),
        "{preview_page}"
    );
    let inbox = console_page(&w, &cookie, "/orgs/default/approvals");
    assert!(
        inbox.contains(&format!(
            "data-preview=\"{preview_id}\"><a href=\"/orgs/default/plan-runs/{preview_id}\">preview: 2 hosts would change, 1 no change</a>"
        )),
        "{inbox}"
    );

    // Approved: the real run runs and writes; the ended preview keeps its outcome.
    w.ok(&["approvals", "approve", &id]);
    w.wait_state(&id, "succeeded", RUN_WAIT);
    for h in HOSTS {
        assert_eq!(
            read(&w.work().join(format!("{h}.conf"))).as_deref(),
            Some("release=2.0\n")
        );
    }
    let preview = w.show(&preview_id);
    assert_eq!(state(&preview), "succeeded", "{preview:#}");
    assert!(preview["reason"].is_null(), "{preview:#}");
}

/// Approving while the preview has not run yet (no runner serves the org) aborts the
/// preview, saying why, so the real run never runs beside it; the runner that comes
/// then runs the approved run alone. Until then the console says the preview is still
/// waiting, with a link to it, and keeps the card refreshing.
#[test]
fn approving_before_the_preview_ran_aborts_it() {
    let Some(mut w) = World::new(&["--local-runners", "0", "--allow-self-approval"]) else {
        return;
    };
    gated_world(&w, "early");
    let (run, _) = start_gated(&w, "early");
    let id = run["id"].as_str().unwrap().to_string();
    let preview_id = run["preview"].as_str().unwrap().to_string();
    // No runner: the preview waits in the queue.
    assert_eq!(state(&w.show(&preview_id)), "queued");
    let cookie = console_session(&w, &w.admin);
    let page = console_page(&w, &cookie, &format!("/orgs/default/plan-runs/{id}"));
    let card = element(&page, "section", "run-approval");
    assert!(card.contains("data-poll="), "the card refreshes: {card}");
    let waiting = element(card, "p", "run-preview-running");
    assert!(
        waiting.contains("still queued")
            && waiting.contains(&format!("href=\"/orgs/default/plan-runs/{preview_id}\"")),
        "{waiting}"
    );
    let inbox = console_page(&w, &cookie, "/orgs/default/approvals");
    assert!(
        inbox.contains("preview: queued, waiting for a runner"),
        "{inbox}"
    );

    w.ok(&["approvals", "approve", &id]);
    let preview = w.show(&preview_id);
    assert_eq!(state(&preview), "aborted", "{preview:#}");
    assert_eq!(
        preview["reason"],
        format!("its run {id} was approved before this preview ended"),
        "{preview:#}"
    );
    assert_eq!(state(&w.show(&id)), "queued");
    let page = console_page(&w, &cookie, &format!("/orgs/default/plan-runs/{id}"));
    assert!(
        !page.contains("data-poll="),
        "nothing left to refresh for: {page}"
    );

    // A runner comes: it runs the approved run, never the aborted preview.
    w.start_runner();
    let done = w.wait_state(&id, "succeeded", RUN_WAIT);
    assert_eq!(done["dry_run"], false);
    for h in HOSTS {
        assert_eq!(
            read(&w.work().join(format!("{h}.conf"))).as_deref(),
            Some("release=2.0\n")
        );
    }
    let preview = w.show(&preview_id);
    assert_eq!(state(&preview), "aborted", "{preview:#}");
    assert!(results(&preview).is_empty(), "{preview:#}");
    assert!(preview["runner_id"].is_null(), "{preview:#}");
}
