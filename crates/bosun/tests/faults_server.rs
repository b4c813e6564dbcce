//! Faults of the control plane under a run: the server killed (`kill -9`) while an
//! engine's state write is on its way, a runner killed while it still holds a state the
//! server has not taken, and network partitions between a runner and the server. The
//! real `bosun server` and `bosun runner` binaries, real git repositories and the real
//! Terraform 1.0.3; a loopback proxy (`support::proxy`) stands where the network would
//! and holds, stalls or cuts traffic when the test says.
//!
//! The engine reaches the server through the proxy (the server's `--public-url` is the
//! proxy's, and the lease's state URL is built from it); the runner talks to the server
//! directly unless the test partitions it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::proxy::Proxy;
use support::{bosun, terraform_or_skip, wait_for, KillOnDrop, ServerProcess, BIN};
use tempfile::TempDir;

const MAIN_TF: &str = r#"variable "replicas" {
  type    = number
  default = 1
}

output "greeting" {
  value = "hello-${var.replicas}"
}
"#;

/// The state write of the http backend: `POST /api/v1/orgs/…/state?ID=…`.
const STATE_WRITE: &str = "POST /api/v1/orgs/default/stacks/";

const WAIT: Duration = Duration::from_secs(60);

struct World {
    dir: TempDir,
    tf: PathBuf,
    repo_url: String,
    /// Where the engine's state requests go: in front of the server's port.
    proxy: Proxy,
    listen: String,
    server_args: Vec<String>,
    server: Option<ServerProcess>,
    admin: String,
    pool_token: String,
}

impl World {
    /// A server with no embedded runner on a fixed port, its public URL behind a proxy,
    /// and a stack `net` of the `edge` pool. `None` when Terraform is missing.
    fn start(extra: &[&str]) -> Option<World> {
        let tf = terraform_or_skip()?;
        let dir = tempfile::Builder::new()
            .prefix("bosun-faults-")
            .tempdir()
            .unwrap();
        let repo_url = support::bare_repository(dir.path(), MAIN_TF);
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let proxy = Proxy::start(listen.parse().unwrap());
        let mut server_args: Vec<String> = [
            "--local-runners",
            "0",
            "--public-url",
            &proxy.url(),
            "--run-heartbeat",
            "1s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        server_args.extend(extra.iter().map(|s| s.to_string()));
        let mut world = World {
            tf,
            repo_url,
            proxy,
            listen,
            server_args,
            server: None,
            admin: String::new(),
            pool_token: String::new(),
            dir,
        };
        world.start_server();
        world.admin = world.server().admin_token();
        world.ok(&[
            "stack",
            "create",
            "net",
            "--repository",
            &world.repo_url.clone(),
            "--engine",
            "terraform",
            "--engine-binary",
            &world.tf.display().to_string(),
            "--var",
            "TF_VAR_replicas=3",
            "--runner-pool",
            "edge",
            "--autodeploy",
        ]);
        world.pool_token = world.json(&["token", "create", "--pool", "edge"])["secret"]
            .as_str()
            .unwrap()
            .to_string();
        Some(world)
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn server(&self) -> &ServerProcess {
        self.server.as_ref().expect("the server is running")
    }

    fn start_server(&mut self) {
        let args: Vec<&str> = self.server_args.iter().map(String::as_str).collect();
        self.server = Some(ServerProcess::start_listening(
            &self.path().join("data"),
            &self.listen,
            &args,
            &[],
        ));
    }

    fn kill_server(&mut self) {
        let mut server = self.server.take().expect("the server is running");
        server.signal(libc::SIGKILL);
        server.wait_exit(Duration::from_secs(10)).expect("exits");
    }

    /// A `bosun runner` of the `edge` pool on `work`, talking to `server_url`.
    fn runner(&self, server_url: &str, work: &str, extra: &[&str]) -> KillOnDrop {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path().join(format!("{work}.log")))
            .unwrap();
        let child = Command::new(BIN)
            .args([
                "runner",
                "--server",
                server_url,
                "--token",
                &self.pool_token,
            ])
            .arg("--work-dir")
            .arg(self.path().join(work))
            .args(["--name", work])
            .args(extra)
            .env_remove("BOSUN_TOKEN")
            .env_remove("BOSUN_URL")
            .env_remove("BOSUN_RUNNER_TOKEN")
            .env("BOSUN_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        KillOnDrop(child)
    }

    /// Triggers a run of `net` and waits until its engine's state write is held at the
    /// proxy (the apply is done; its state is on its way). Returns the run.
    fn run_to_the_state_write(&self) -> String {
        self.proxy.hold(STATE_WRITE);
        let run = self.trigger();
        assert!(
            self.proxy.wait_held(1, WAIT),
            "the engine's state write never reached the proxy\nrunner log:\n{}",
            self.runner_log("edge-1")
        );
        run
    }

    /// Kills the server under a held state write, then lets the write go on to meet the
    /// dead server.
    fn kill_server_under_the_write(&mut self) {
        self.kill_server();
        self.proxy.release();
    }

    /// Waits until the runner `edge-1` retries delivering a state its engine gave up on.
    fn wait_for_undelivered_state(&self) {
        wait_for("the runner to hold an errored state", WAIT, || {
            self.runner_log("edge-1")
                .contains("delivering a recovered state failed")
                .then_some(())
        });
    }

    fn runner_log(&self, work: &str) -> String {
        std::fs::read_to_string(self.path().join(format!("{work}.log"))).unwrap_or_default()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = bosun(self.server(), &self.admin, args);
        assert!(
            out.status.success(),
            "bosun {args:?} failed: {}\n{}\nserver log (tail):\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            support::log_tail(self.server(), 40)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        serde_json::from_str(&self.ok(&all)).unwrap()
    }

    fn trigger(&self) -> String {
        self.json(&["run", "trigger", "net"])["id"]
            .as_str()
            .unwrap()
            .to_string()
    }

    fn run(&self, id: &str) -> Value {
        self.json(&["run", "show", id])
    }

    fn versions(&self) -> Vec<Value> {
        self.json(&["state", "versions", "net"])["items"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// Waits until the run is in `want`; fails at once when it ends otherwise.
    fn wait_state(&self, id: &str, want: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let r = self.run(id);
            let state = r["state"].as_str().unwrap().to_string();
            if state == want {
                return r;
            }
            let ended = [
                "finished",
                "failed",
                "canceled",
                "discarded",
                "force_failed",
                "interrupted",
            ]
            .contains(&state.as_str());
            if ended || Instant::now() > deadline {
                let logs = bosun(self.server(), &self.admin, &["run", "logs", id]);
                panic!(
                    "run {id}: wanted {want} within {timeout:?}, it is {state}:\n{r:#}\nrun log:\n{}\nserver log (tail):\n{}",
                    String::from_utf8_lossy(&logs.stdout),
                    support::log_tail(self.server(), 40)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        support::kill_processes_under(self.dir.path());
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The workspaces under a runner's work dir.
fn workspaces(work: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(work)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default()
}

/// The server is killed while the engine's final state write is on its way and comes
/// back 10 s later on the same data dir and port: the engine's http backend retries the
/// write (the runner's state retry window), the run finishes, and the state is Bosun's.
#[test]
fn a_state_write_outlives_a_server_killed_mid_apply() {
    let Some(mut w) = World::start(&[]) else {
        return;
    };
    let _runner = w.runner(&w.server().url(), "edge-1", &[]);
    let run = w.run_to_the_state_write();
    w.kill_server_under_the_write();
    // The write meets a dead server; the outage lasts 10 s.
    std::thread::sleep(Duration::from_secs(10));
    w.start_server();

    let r = w.wait_state(&run, "finished", WAIT);
    assert_eq!(r["late_write"], false, "{r:#}");
    let versions = w.versions();
    assert_eq!(versions.len(), 1, "{versions:#?}");
    let v = &versions[0];
    assert_eq!(v["writer"]["id"], run.as_str(), "{v:#}");
    assert_eq!(v["current"], true, "{v:#}");
    assert!(
        v.get("recovered").is_none(),
        "written by the engine itself: {v:#}"
    );
    assert_eq!(v["outputs"]["greeting"]["value"], "hello-3");
    let lock = w.json(&["state", "lock", "net"]);
    assert_eq!(lock["locked"], false, "{lock:#}");
    // The write was tried more than once: it met the dead server first.
    let writes = w
        .proxy
        .forwarded()
        .iter()
        .filter(|l| l.starts_with(STATE_WRITE))
        .count();
    assert!(writes >= 1, "{:#?}", w.proxy.forwarded());
}

/// The server stays away longer than the engine retries: the engine gives up and leaves
/// `errored.tfstate`; the runner delivers it as a recovered version once the server is
/// back, before it reports the phase, and only then removes the workspace. The run's
/// failure names the version, and the next run plans against that state: no changes.
#[test]
fn a_state_the_engine_could_not_write_is_delivered_as_recovered() {
    let Some(mut w) = World::start(&[]) else {
        return;
    };
    let _runner = w.runner(&w.server().url(), "edge-1", &["--state-retry-window", "2s"]);
    let run = w.run_to_the_state_write();
    w.kill_server_under_the_write();
    w.wait_for_undelivered_state();
    let work = w.path().join("edge-1");
    let kept = workspaces(&work);
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(
        kept[0].join("src/errored.tfstate").is_file(),
        "the engine left its state in the workspace"
    );
    w.start_server();

    let r = w.wait_state(&run, "failed", WAIT);
    let reason = r["reason"].as_str().unwrap();
    assert!(
        reason.contains("recovered as version 1"),
        "the failure names the recovered version: {reason}"
    );
    let versions = w.versions();
    assert_eq!(versions.len(), 1, "{versions:#?}");
    let v = &versions[0];
    assert_eq!(v["writer"]["id"], run.as_str(), "{v:#}");
    assert_eq!(v["current"], true, "it follows nothing: current: {v:#}");
    assert_eq!(v["outputs"]["greeting"]["value"], "hello-3");
    let why = v["recovered"].as_str().expect("flagged as recovered");
    assert!(why.contains("could not write the state"), "{why}");
    assert!(
        workspaces(&work).is_empty(),
        "the workspace went once delivered"
    );
    let out = bosun(w.server(), &w.admin, &["state", "versions", "net"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.lines().nth(1).unwrap().contains("RECOVERED"),
        "{table}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("1 version(s) marked RECOVERED"),
        "{out:?}"
    );
    let lock = w.json(&["state", "lock", "net"]);
    assert_eq!(lock["locked"], false, "{lock:#}");
    let audit = w.ok(&["audit", "--action", "state.recovered"]);
    assert!(audit.contains("stack:net"), "{audit}");

    // The next run knows what the failed apply created.
    let next = w.trigger();
    let r = w.wait_state(&next, "finished", WAIT);
    assert_eq!(r["plan"]["has_changes"], false, "{r:#}");
}

/// A runner killed while it still holds a state the server has not taken leaves its
/// workspace; started again on the same work dir, it delivers that state first.
#[test]
fn a_restarted_runner_delivers_what_its_work_dir_holds() {
    let Some(mut w) = World::start(&["--run-stale-after", "3s", "--run-sweep-interval", "200ms"])
    else {
        return;
    };
    let mut runner = w.runner(&w.server().url(), "edge-1", &["--state-retry-window", "2s"]);
    let run = w.run_to_the_state_write();
    w.kill_server_under_the_write();
    w.wait_for_undelivered_state();
    runner.kill();
    let work = w.path().join("edge-1");
    assert_eq!(workspaces(&work).len(), 1);

    // The server comes back; nobody executes the run any more: force-failed.
    w.start_server();
    let r = w.wait_state(&run, "force_failed", WAIT);
    assert!(w.versions().is_empty(), "{r:#}");

    let _runner = w.runner(&w.server().url(), "edge-1", &[]);
    let v = wait_for("the leftover state delivered", WAIT, || {
        w.versions().into_iter().next()
    });
    assert_eq!(v["writer"]["id"], run.as_str(), "{v:#}");
    assert_eq!(v["current"], true, "{v:#}");
    let why = v["recovered"].as_str().expect("flagged as recovered");
    assert!(why.contains("when the runner started again"), "{why}");
    wait_for("the delivered workspace removed", WAIT, || {
        workspaces(&work).is_empty().then_some(())
    });
}

/// A partition between the runner's host (runner and engine) and the server that heals
/// before the stale window: heartbeats, log chunks and the engine's state write wait in
/// the network, then arrive; the run finishes as if nothing happened.
#[test]
fn a_partition_shorter_than_the_stale_window_is_ridden_out() {
    let Some(w) = World::start(&["--run-stale-after", "8s", "--run-sweep-interval", "200ms"])
    else {
        return;
    };
    let _runner = w.runner(&w.proxy.url(), "edge-1", &[]);
    let run = w.run_to_the_state_write();
    w.proxy.stall();
    w.proxy.release();
    // The partition lasts 4 s: half the stale window.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(w.run(&run)["state"], "applying");
    w.proxy.heal();

    let r = w.wait_state(&run, "finished", WAIT);
    assert_eq!(r["late_write"], false, "{r:#}");
    let versions = w.versions();
    assert_eq!(versions.len(), 1, "{versions:#?}");
    assert_eq!(versions[0]["late_write"], false, "{versions:#?}");
    assert_eq!(versions[0]["current"], true, "{versions:#?}");
}

/// A partition longer than the stale window: the server force-fails the run and releases
/// its lock; when the partition heals, the runner learns it was fenced, interrupts the
/// engine instead of killing it, and the engine's state write lands late and flagged —
/// the state of what the apply changed is not lost.
#[test]
fn a_partition_longer_than_the_stale_window_force_fails_and_flags_the_late_write() {
    let Some(w) = World::start(&["--run-stale-after", "3s", "--run-sweep-interval", "200ms"])
    else {
        return;
    };
    let _runner = w.runner(&w.proxy.url(), "edge-1", &[]);
    let run = w.run_to_the_state_write();
    w.proxy.cut();
    let r = w.wait_state(&run, "force_failed", WAIT);
    let reason = r["reason"].as_str().unwrap();
    assert!(reason.contains("runner timed out"), "{reason}");
    assert!(reason.contains("released state lock"), "{reason}");
    let lock = w.json(&["state", "lock", "net"]);
    assert_eq!(lock["locked"], false, "{lock:#}");
    assert!(w.versions().is_empty());

    // The network comes back, the engine's write still on its way: the runner hears
    // it was fenced first, and must not kill an engine that may hold applied state.
    w.proxy.heal();
    wait_for("the runner to learn it was fenced", WAIT, || {
        w.runner_log("edge-1")
            .contains("heartbeat fenced")
            .then_some(())
    });
    w.proxy.release();
    let v = wait_for("the engine's late state write", WAIT, || {
        w.versions().into_iter().next()
    });
    assert_eq!(v["writer"]["id"], run.as_str(), "{v:#}");
    assert_eq!(v["late_write"], true, "flagged: {v:#}");
    assert_eq!(v["current"], true, "nobody else holds the lock: {v:#}");
    assert_eq!(v["outputs"]["greeting"]["value"], "hello-3");
    let r = w.run(&run);
    assert_eq!(r["late_write"], true, "{r:#}");
    assert_eq!(r["state"], "force_failed");
    wait_for("the runner to let the workspace go", WAIT, || {
        workspaces(&w.path().join("edge-1"))
            .is_empty()
            .then_some(())
    });
}

/// How many processes work in `root` (their working directory is in it).
fn processes_under(root: &Path) -> usize {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| n.parse::<u32>().is_ok())
                        && std::fs::read_link(e.path().join("cwd"))
                            .is_ok_and(|c| c.starts_with(root))
                })
                .count()
        })
        .unwrap_or(0)
}

/// The runner's host goes down mid-apply — the runner and its engine die — and the runner
/// comes back on the same work dir: it hands the lease its dead process held back to the
/// server, which settles the run at once instead of after the stale window (10 minutes
/// here), releasing its lock, and the workspace goes.
#[test]
fn a_restarted_runner_hands_back_the_lease_its_dead_process_held() {
    let Some(w) = World::start(&["--run-stale-after", "10m"]) else {
        return;
    };
    let mut runner = w.runner(&w.server().url(), "edge-1", &[]);
    let run = w.run_to_the_state_write();
    let lock = w.json(&["state", "lock", "net"]);
    assert_eq!(lock["locked"], true, "{lock:#}");
    runner.kill();
    let work = w.path().join("edge-1");
    wait_for("the engine to die with its host", WAIT, || {
        support::kill_processes_under(&work);
        (processes_under(&work) == 0).then_some(())
    });
    assert_eq!(workspaces(&work).len(), 1);

    let _runner = w.runner(&w.server().url(), "edge-1", &[]);
    let r = w.wait_state(&run, "force_failed", Duration::from_secs(30));
    let reason = r["reason"].as_str().unwrap();
    assert!(reason.contains("released state lock"), "{reason}");
    let lock = w.json(&["state", "lock", "net"]);
    assert_eq!(lock["locked"], false, "{lock:#}");
    wait_for("the abandoned workspace removed", WAIT, || {
        workspaces(&work).is_empty().then_some(())
    });
    assert!(
        w.runner_log("edge-1").contains("handed back the lease"),
        "{}",
        w.runner_log("edge-1")
    );
}

/// Only the runner dies mid-apply; its engine lives on, its state write on its way. The
/// runner started again waits for that engine instead of handing back a lease whose
/// engine may still write: the write lands, then the lease is handed back — the run is
/// force-failed at once (its end went unreported) and its state is kept.
#[test]
fn a_restarted_runner_waits_for_an_engine_its_dead_process_left() {
    let Some(w) = World::start(&["--run-stale-after", "10m"]) else {
        return;
    };
    let mut runner = w.runner(&w.server().url(), "edge-1", &[]);
    let run = w.run_to_the_state_write();
    runner.kill();
    let work = w.path().join("edge-1");
    assert!(processes_under(&work) > 0, "the engine outlives its runner");

    let _runner = w.runner(&w.server().url(), "edge-1", &[]);
    wait_for("the new runner to wait for the engine", WAIT, || {
        w.runner_log("edge-1")
            .contains("still works here; waiting for it")
            .then_some(())
    });
    assert_eq!(w.run(&run)["state"], "applying");
    w.proxy.release();
    let r = w.wait_state(&run, "force_failed", Duration::from_secs(30));
    let versions = w.versions();
    assert_eq!(versions.len(), 1, "{versions:#?}");
    assert_eq!(versions[0]["writer"]["id"], run.as_str());
    assert_eq!(
        versions[0]["late_write"], false,
        "written while the run lived: {r:#}"
    );
    wait_for("the workspace removed", WAIT, || {
        workspaces(&work).is_empty().then_some(())
    });
}
