//! The `ssh` connection and the host check against a real OpenSSH server
//! (`bosun_testkit::sshd`): quoting, stdin, exit codes, stderr byte-exact around the
//! process-group marker, output watched while the command runs, timeouts that leave nothing running, cancelled commands (the
//! `run` future dropped) stopped on the host with their children for a root login, a
//! non-root login and under a real sudo, concurrent commands on one connection, host-key verification (unknown,
//! changed, hashed, pinned), authentication (identity file, key types, agent, default
//! keys) and the check's stages. Skipped loudly (`SKIPPED (tool missing): sshd`) when
//! sshd is not installed, unless `BOSUN_REQUIRE_TOOLS=1`.
//!
//! sudo: the check's password detection is tested here against stand-in `sudo` scripts
//! put first on the sshd session's `PATH` (sshd `SetEnv`); a real sudo with real sudoers
//! rules, over sshd sessions of non-root users, is tested end to end in
//! `crates/bosun/tests/plan_exec.rs` (`sudo_over_ssh_with_a_real_sudoers_rule`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bosun_plans::connection::check::{check, Stage, StageStatus, SUDO_PASSWORD_WARNING};
use bosun_plans::connection::ssh::{SshConnection, TIMEOUT_GRACE};
use bosun_plans::connection::{open, ConnError, ConnectOptions, Connection, RunRequest, Stream};
use bosun_plans::model::{ConnectionKind, Host};
use bosun_testkit::sshd::{
    ensure_sudo_user, keygen, require_sshd, require_sudo_users, KeyType, SshdFleet, SshdHost,
    SshdOptions,
};

mod common;

use common::{
    argv, connect, host_for, options, process_gone, read_pid, run_ok, script, shell, sshd,
    sshd_with, text, wait_gone,
};

// ---- helpers ---------------------------------------------------------------------------

fn stage<'a>(stages: &'a [Stage], name: &str) -> &'a Stage {
    stages
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no stage {name} in {stages:#?}"))
}

fn statuses(stages: &[Stage]) -> Vec<(&'static str, StageStatus)> {
    stages.iter().map(|s| (s.name, s.status)).collect()
}

/// A dir with a stand-in `sudo` (and whatever else), to put first on the session PATH.
fn fake_bin(dir: &Path, sudo_body: Option<&str>) -> PathBuf {
    let bin = dir.join("fakebin");
    std::fs::create_dir_all(&bin).unwrap();
    if let Some(body) = sudo_body {
        script(&bin.join("sudo"), body);
    }
    bin
}

/// A sudo that accepts `-n --` and runs the command (passwordless sudo).
const SUDO_OK: &str = "#!/bin/sh\n\
while [ $# -gt 0 ]; do case \"$1\" in -n) shift;; --) shift; break;; *) break;; esac; done\n\
exec \"$@\"\n";

/// What sudo 1.9 prints with `-n` when the user's rule needs a password.
const SUDO_PASSWORD: &str = "#!/bin/sh\necho 'sudo: a password is required' >&2\nexit 1\n";

fn path_env(first: &Path) -> SshdOptions {
    SshdOptions {
        session_env: vec![(
            "PATH".into(),
            format!("{}:/usr/local/bin:/usr/bin:/bin", first.display()),
        )],
        ..SshdOptions::default()
    }
}

// ---- commands --------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn argv_words_arrive_exactly_as_given() {
    let Some((_dir, sshd)) = sshd() else { return };
    let conn = connect(&sshd, &host_for(&sshd)).await;
    let words = [
        "a b",
        "it's",
        "\"double\"",
        "$HOME",
        "`id`",
        "$(id)",
        "back\\slash",
        "",
        "*",
        "~",
        "semi;colon",
        "new\nline",
        "FOO=bar",
        "ünïcödé",
    ];
    let mut request = vec!["printf", "[%s]"];
    request.extend(words);
    let out = run_ok(&conn, &argv(&request)).await;
    let expected: String = words.iter().map(|w| format!("[{w}]")).collect();
    assert_eq!(text(&out.stdout), expected, "stderr: {}", text(&out.stderr));
    assert_eq!(out.exit_code, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_commands_run_through_sh() {
    let Some((_dir, sshd)) = sshd() else { return };
    let conn = connect(&sshd, &host_for(&sshd)).await;
    let out = run_ok(
        &conn,
        &shell("x='it'\"'\"'s'; echo \"$x $((1+2))\" | tr a-z A-Z; echo oops >&2; exit 3"),
    )
    .await;
    assert_eq!(text(&out.stdout), "IT'S 3\n");
    assert_eq!(text(&out.stderr), "oops\n");
    assert_eq!(out.exit_code, Some(3));
    assert!(!out.sudo_password_required);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_bytes_round_trip_then_eof() {
    let Some((_dir, sshd)) = sshd() else { return };
    let conn = connect(&sshd, &host_for(&sshd)).await;
    // Every byte value, and more than one channel window (2 MiB) so flow control on
    // both directions is exercised while output is read concurrently.
    let input: Vec<u8> = (0..3 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    let mut request = argv(&["cat"]);
    request.stdin = Some(input.clone());
    let out = run_ok(&conn, &request).await;
    assert_eq!(out.exit_code, Some(0));
    assert!(
        out.stdout == input,
        "stdout differs ({} bytes)",
        out.stdout.len()
    );

    let mut request = shell("wc -c; read -r x; echo \"rc=$?\"");
    request.stdin = Some(b"12345".to_vec());
    let out = run_ok(&conn, &request).await;
    assert_eq!(
        text(&out.stdout).split_whitespace().collect::<Vec<_>>(),
        ["5", "rc=1"]
    );

    // Stdin given to a command that never reads it is not an error, nor a hang when it
    // is more than the channel's window.
    let mut request = argv(&["true"]);
    request.stdin = Some(vec![b'x'; 5 * 1024 * 1024]);
    request.timeout = Some(Duration::from_secs(20));
    let started = Instant::now();
    assert_eq!(run_ok(&conn, &request).await.exit_code, Some(0));
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_is_closed_when_none_is_given() {
    let Some((_dir, sshd)) = sshd() else { return };
    let conn = connect(&sshd, &host_for(&sshd)).await;
    let started = Instant::now();
    let mut request = argv(&["cat"]);
    request.timeout = Some(Duration::from_secs(20));
    let out = run_ok(&conn, &request).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "cat waited on stdin"
    );
    assert_eq!(out.exit_code, Some(0));
    assert!(out.stdout.is_empty() && out.stderr.is_empty());

    let out = run_ok(&conn, &shell("read x; echo \"rc=$? x=[$x]\"")).await;
    assert_eq!(text(&out.stdout), "rc=1 x=[]\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_and_signals() {
    let Some((_dir, sshd)) = sshd() else { return };
    let conn = connect(&sshd, &host_for(&sshd)).await;
    for code in [0, 1, 2, 42, 127, 255] {
        let out = run_ok(&conn, &shell(&format!("exit {code}"))).await;
        assert_eq!(out.exit_code, Some(code));
    }
    let out = run_ok(&conn, &argv(&["false"])).await;
    assert_eq!(out.exit_code, Some(1));
    let out = run_ok(&conn, &argv(&["/no/such/program"])).await;
    assert_eq!(out.exit_code, Some(127));
    // Killed by a signal: 128 + its number, as a shell says it.
    let out = run_ok(&conn, &shell("kill -9 $$")).await;
    assert_eq!(out.exit_code, Some(128 + 9));
    assert!(!out.timed_out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_returns_promptly_and_leaves_nothing_running() {
    let Some((dir, sshd)) = sshd() else { return };
    let conn = connect(&sshd, &host_for(&sshd)).await;

    // The command itself, and a child it started (same process group).
    let me = dir.path().join("me.pid");
    let child = dir.path().join("child.pid");
    let mut request = shell(&format!(
        "sleep 30 & echo $! > {child}; echo $$ > {me}; echo started; wait",
        child = child.display(),
        me = me.display()
    ));
    request.timeout = Some(Duration::from_secs(1));
    let started = Instant::now();
    let out = conn.run(&request).await.unwrap();
    let took = started.elapsed();
    assert!(out.timed_out, "{out:?}");
    assert_eq!(out.exit_code, None);
    assert_eq!(
        text(&out.stdout),
        "started\n",
        "output before the deadline is kept"
    );
    assert!(took < Duration::from_secs(4), "took {took:?}");

    let (me, child) = (read_pid(&me), read_pid(&child));
    // The host's `timeout` stopped the whole group at the deadline (well before its
    // 5 s KILL, and the 30 s the commands wanted).
    assert!(
        wait_gone(me, Duration::from_secs(2)),
        "the shell {me} lingers"
    );
    assert!(
        wait_gone(child, Duration::from_secs(2)),
        "its child sleep {child} lingers"
    );

    // A plain `sleep 30` too, and the connection is still usable afterwards.
    let mut request = argv(&["sleep", "30"]);
    request.timeout = Some(Duration::from_secs(1));
    let started = Instant::now();
    let out = conn.run(&request).await.unwrap();
    assert!(out.timed_out && out.exit_code.is_none());
    assert!(started.elapsed() < Duration::from_secs(4));
    let out = run_ok(&conn, &argv(&["echo", "still here"])).await;
    assert_eq!(text(&out.stdout), "still here\n");

    // A command that finishes in time is not marked.
    let mut request = shell("sleep 0.2; exit 4");
    request.timeout = Some(Duration::from_secs(10));
    let out = run_ok(&conn, &request).await;
    assert_eq!(out.exit_code, Some(4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_without_timeout_on_the_host_still_returns() {
    if !require_sshd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A PATH with a shell and no `timeout`.
    let bin = fake_bin(dir.path(), None);
    std::os::unix::fs::symlink("/bin/sh", bin.join("sh")).unwrap();
    let sshd = SshdHost::start_with(
        &dir.path().join("sshd"),
        SshdOptions {
            session_env: vec![("PATH".into(), bin.display().to_string())],
            ..SshdOptions::default()
        },
    );
    let conn = connect(&sshd, &host_for(&sshd)).await;
    let pid_file = dir.path().join("sleep.pid");
    let mut request = shell(&format!(
        "echo $$ > {}; exec /bin/sleep 30",
        pid_file.display()
    ));
    request.timeout = Some(Duration::from_secs(1));
    let started = Instant::now();
    let out = conn.run(&request).await.unwrap();
    let took = started.elapsed();
    assert!(out.timed_out && out.exit_code.is_none(), "{out:?}");
    // The deadline plus the grace for the host's `timeout`, which is not there.
    assert!(
        took >= Duration::from_secs(1) + TIMEOUT_GRACE,
        "took {took:?}"
    );
    assert!(took < Duration::from_secs(6), "took {took:?}");
    // The client stopped it (its process group, from a second channel) before answering,
    // whoever the login is (root here and in CI).
    let pid = read_pid(&pid_file);
    let gone = wait_gone(pid, Duration::from_millis(500));
    if !gone {
        let _ = Command::new("kill").arg(pid.to_string()).status();
    }
    assert!(gone, "the timed-out command {pid} is still running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_commands_share_one_connection() {
    let Some((_dir, sshd)) = sshd() else { return };
    // More commands than sshd's MaxSessions (10): the connection queues the rest.
    let conn: Arc<dyn Connection> = Arc::new(connect(&sshd, &host_for(&sshd)).await);
    let started = Instant::now();
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let conn = Arc::clone(&conn);
            tokio::spawn(async move {
                let mut request = shell(&format!(
                    "sleep 0.5; echo {i}; echo e{i} >&2; exit {}",
                    i % 3
                ));
                request.timeout = Some(Duration::from_secs(30));
                (i, conn.run(&request).await)
            })
        })
        .collect();
    for task in tasks {
        let (i, out) = task.await.unwrap();
        let out = out.unwrap_or_else(|e| panic!("command {i}: {e}\nsshd log:\n{}", sshd.log()));
        assert_eq!(text(&out.stdout), format!("{i}\n"));
        assert_eq!(text(&out.stderr), format!("e{i}\n"));
        assert_eq!(out.exit_code, Some(i % 3));
    }
    let took = started.elapsed();
    // Run one at a time this would take 10 s.
    assert!(
        took < Duration::from_secs(6),
        "20 × 0.5 s commands took {took:?}"
    );
    // One TCP connection, one login, however many channels.
    let log = sshd.log();
    assert_eq!(log.matches("Accepted publickey").count(), 1, "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_throughput_on_one_connection() {
    let Some((_dir, sshd)) = sshd() else { return };
    let conn = connect(&sshd, &host_for(&sshd)).await;
    let n = 200;
    let started = Instant::now();
    for i in 0..n {
        let out = conn.run(&argv(&["true"])).await.unwrap();
        assert_eq!(out.exit_code, Some(0), "command {i}");
    }
    let took = started.elapsed();
    let _ = writeln!(
        std::io::stderr(),
        "ssh throughput: {n} sequential commands on one connection in {:.2} s ({:.1} ms each: one request on the connection's remote session)",
        took.as_secs_f64(),
        took.as_secs_f64() * 1000.0 / f64::from(n)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_connects_in_parallel() {
    if !require_sshd() {
        return;
    }
    let fleet = SshdFleet::start(5);
    let tasks: Vec<_> = fleet
        .hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let host = Host {
                name: format!("web-{i}"),
                address: h.address().into(),
                port: h.port(),
                user: Some(h.user().into()),
                identity_file: Some(fleet.client_key_path().into()),
                known_hosts: Some(fleet.known_hosts_path().into()),
                ..Host::default()
            };
            tokio::spawn(async move {
                let conn = open(&host, &options()).await.unwrap();
                let out = conn.run(&argv(&["echo", &host.name])).await.unwrap();
                conn.close().await;
                text(&out.stdout)
            })
        })
        .collect();
    for (i, task) in tasks.into_iter().enumerate() {
        assert_eq!(task.await.unwrap(), format!("web-{i}\n"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_is_lost() {
    let Some((dir, sshd)) = sshd() else { return };
    let conn = Arc::new(connect(&sshd, &host_for(&sshd)).await);
    // The shell's parent is the session's sshd process; its parent the connection's.
    let out = run_ok(
        conn.as_ref(),
        &shell("echo $PPID; set -- $(cat /proc/$PPID/stat); echo $4"),
    )
    .await;
    let pids: Vec<i32> = text(&out.stdout)
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let pid_file = dir.path().join("sleep.pid");
    let running = {
        let conn = Arc::clone(&conn);
        let line = format!("echo $$ > {}; exec sleep 20", pid_file.display());
        tokio::spawn(async move { conn.run(&shell(&line)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    for pid in &pids {
        Command::new("kill")
            .arg("-9")
            .arg(pid.to_string())
            .status()
            .unwrap();
    }
    let started = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("a command on a dead connection must not hang")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(matches!(result, Err(ConnError::Lost { .. })), "{result:?}");
    let again = conn.run(&argv(&["true"])).await;
    assert!(matches!(again, Err(ConnError::Lost { .. })), "{again:?}");
    // The orphaned command is the host's business; do not leave it behind here.
    let _ = Command::new("kill")
        .arg(read_pid(&pid_file).to_string())
        .status();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_connection_refuses_commands() {
    let Some((_dir, sshd)) = sshd() else { return };
    let conn = connect(&sshd, &host_for(&sshd)).await;
    conn.close().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let result = conn.run(&argv(&["true"])).await;
    assert!(matches!(result, Err(ConnError::Lost { .. })), "{result:?}");
}

// ---- cancel ------------------------------------------------------------------------------

/// Digits unique to this call, to find its remote processes by: `sleep 60.<marker>`.
fn marker() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{:05}{:04}{:03}",
        std::process::id() % 100_000,
        nanos % 10_000,
        NEXT.fetch_add(1, Ordering::Relaxed) % 1000
    )
}

/// Live processes of this machine (the sshd hosts are local) whose command line starts
/// with `prefix` and contains `needle`: pid and command line.
fn processes(prefix: &str, needle: &str) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
        if cmdline.starts_with(prefix) && cmdline.contains(needle) && !process_gone(pid) {
            found.push((pid, cmdline.trim_end().to_string()));
        }
    }
    found
}

/// Polls `probe` every 50 ms until it gives a value, for at most `within`.
async fn poll<T>(within: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = probe() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs `request` until `sleeps` processes `sleep …<needle>…` run on the host, then drops
/// the run's future (as an aborted plan run does) and waits until every process whose
/// command line has `needle` is gone; panics naming the survivors after 5 s.
async fn cancel_and_check(
    conn: &Arc<dyn Connection>,
    request: RunRequest,
    needle: &str,
    sleeps: usize,
) {
    let task = {
        let conn = Arc::clone(conn);
        tokio::spawn(async move { conn.run(&request).await })
    };
    let running = poll(Duration::from_secs(10), || {
        let found = processes("sleep ", needle);
        (found.len() >= sleeps).then_some(found)
    })
    .await;
    let Some(running) = running else {
        task.abort();
        panic!(
            "the command never ran its {sleeps} sleeps (found {:?})",
            processes("", needle)
        );
    };
    assert!(!task.is_finished(), "{running:?} ended by itself");
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    let dropped = Instant::now();
    let gone = poll(Duration::from_secs(5), || {
        processes("", needle).is_empty().then_some(())
    })
    .await;
    if gone.is_none() {
        let left = processes("", needle);
        for (pid, _) in &left {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
        panic!("after the cancel, still running on the host: {left:?} (were {running:?})");
    }
    eprintln!(
        "{needle}: {} processes gone {:?} after the cancel",
        running.len(),
        dropped.elapsed()
    );
}

/// The user every test of a non-root login shares (with passwordless sudo for all).
const STOP_USER: &str = "bosun-test-ssh-stop";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_command_stops_on_the_host() {
    let Some((_dir, sshd)) = sshd() else { return };
    // Logged in as the current user: root in CI and here, whose sessions OpenSSH does not
    // let a client signal.
    let conn: Arc<dyn Connection> = Arc::new(connect(&sshd, &host_for(&sshd)).await);

    let m = marker();
    cancel_and_check(&conn, argv(&["sleep", &format!("60.{m}")]), &m, 1).await;

    // Under the host's `timeout` (a step with a timeout cancelled before it).
    let m = marker();
    let mut request = argv(&["sleep", &format!("60.{m}")]);
    request.timeout = Some(Duration::from_secs(120));
    cancel_and_check(&conn, request, &m, 1).await;

    // Children in the command's process group, also one orphaned by its parent (a double
    // fork) and one in a shell that ignores TERM: KILL follows.
    let m = marker();
    let line = format!(
        "sleep 60.{m} & (sleep 61.{m} &); sh -c 'trap \"\" TERM; sleep 62.{m}; :' & sleep 63.{m}"
    );
    cancel_and_check(&conn, shell(&line), &m, 4).await;

    // The connection is still good, and the marker never shows in the output.
    let out = run_ok(conn.as_ref(), &shell("echo out; echo err >&2")).await;
    assert_eq!(
        (text(&out.stdout), text(&out.stderr)),
        ("out\n".into(), "err\n".into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_command_of_a_non_root_login_stops_with_or_without_sudo() {
    if !require_sshd() || !require_sudo_users() {
        return;
    }
    ensure_sudo_user(STOP_USER, "ALL=(ALL) NOPASSWD: ALL");
    let Some((_dir, sshd)) = sshd_with(SshdOptions {
        login_user: Some(STOP_USER.into()),
        ..SshdOptions::default()
    }) else {
        return;
    };
    let conn: Arc<dyn Connection> = Arc::new(connect(&sshd, &host_for(&sshd)).await);
    let out = run_ok(conn.as_ref(), &argv(&["id", "-un"])).await;
    assert_eq!(text(&out.stdout), format!("{STOP_USER}\n"));

    let m = marker();
    cancel_and_check(&conn, argv(&["sleep", &format!("60.{m}")]), &m, 1).await;

    // As root through sudo (sudo runs the command on a pty of its own: another session).
    let m = marker();
    let mut request = argv(&["sleep", &format!("60.{m}")]);
    request.sudo = true;
    cancel_and_check(&conn, request, &m, 1).await;

    let m = marker();
    let mut request = shell(&format!("sleep 60.{m} & (sleep 61.{m} &); sleep 62.{m}"));
    request.sudo = true;
    request.timeout = Some(Duration::from_secs(120));
    cancel_and_check(&conn, request, &m, 3).await;

    // A root command that ignores TERM: KILL follows (sudo dies, its pty hangs up).
    let m = marker();
    let mut request = shell(&format!("trap '' TERM; sleep 60.{m}; :"));
    request.sudo = true;
    cancel_and_check(&conn, request, &m, 1).await;

    let out = run_ok(
        conn.as_ref(),
        &RunRequest {
            sudo: true,
            ..argv(&["id", "-un"])
        },
    )
    .await;
    assert_eq!(
        (text(&out.stdout), text(&out.stderr)),
        ("root\n".into(), String::new())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_sudo_command_stops_when_sudo_allows_only_that_command() {
    if !require_sshd() || !require_sudo_users() {
        return;
    }
    // sudo may run `sleep` only: the stop's `sudo -n sh -c kill …` is refused, and the
    // login user's `TERM` to sudo itself is relayed to the command.
    let user = "bosun-test-ssh-stop-sleep";
    ensure_sudo_user(user, "ALL=(ALL) NOPASSWD: /bin/sleep, /usr/bin/sleep");
    let Some((_dir, sshd)) = sshd_with(SshdOptions {
        login_user: Some(user.into()),
        ..SshdOptions::default()
    }) else {
        return;
    };
    let conn: Arc<dyn Connection> = Arc::new(connect(&sshd, &host_for(&sshd)).await);
    let refused = conn
        .run(&RunRequest {
            sudo: true,
            ..argv(&["sh", "-c", "true"])
        })
        .await
        .unwrap();
    assert_eq!(refused.exit_code, Some(1), "{}", text(&refused.stderr));

    let m = marker();
    let mut request = argv(&["sleep", &format!("60.{m}")]);
    request.sudo = true;
    cancel_and_check(&conn, request, &m, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stderr_is_byte_exact_around_the_process_group_marker() {
    let Some((_dir, sshd)) = sshd() else { return };
    let conn = connect(&sshd, &host_for(&sshd)).await;
    // A command that prints the marker itself keeps it; binary bytes go through.
    let out = run_ok(
        &conn,
        &shell("printf 'bosun-pgid:42\\n' >&2; printf '\\001\\377no newline' >&2; printf out"),
    )
    .await;
    assert_eq!(out.stderr, b"bosun-pgid:42\n\x01\xffno newline");
    assert_eq!(out.stdout, b"out");
    // Nothing on stderr is nothing.
    let out = run_ok(&conn, &argv(&["true"])).await;
    assert!(out.stderr.is_empty(), "{:?}", text(&out.stderr));
    // Under the `timeout` wrapper, the same.
    let mut request = shell("echo e >&2; exit 3");
    request.timeout = Some(Duration::from_secs(10));
    let out = run_ok(&conn, &request).await;
    assert_eq!((out.exit_code, text(&out.stderr)), (Some(3), "e\n".into()));
}

/// A watched command's output arrives while it runs: the command prints, then waits for
/// a file the test creates only once it has seen that output (an output handed over
/// only at the end would never come; the command gives up after 60 s, the test after
/// 20 s). The watcher sees every byte once, stderr without the process group marker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_command_is_seen_while_it_runs() {
    let Some((dir, sshd)) = sshd() else { return };
    let conn = connect(&sshd, &host_for(&sshd)).await;
    let go = dir.path().join("go");
    let mut request = shell(&format!(
        "echo first; echo oops >&2; i=0; while [ ! -e '{}' ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; echo second",
        go.display()
    ));
    request.timeout = Some(Duration::from_secs(90));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let tap = move |stream: Stream, bytes: &[u8]| {
        let _ = tx.send((stream, bytes.to_vec()));
    };
    let mut seen: Vec<(Stream, Vec<u8>)> = Vec::new();
    let of = |seen: &[(Stream, Vec<u8>)], stream: Stream| -> Vec<u8> {
        seen.iter()
            .filter(|(s, _)| *s == stream)
            .flat_map(|(_, b)| b.clone())
            .collect()
    };
    let watch = async {
        while of(&seen, Stream::Stdout) != b"first\n" || of(&seen, Stream::Stderr) != b"oops\n" {
            let got = tokio::time::timeout(Duration::from_secs(20), rx.recv())
                .await
                .expect("the output is seen while the command waits")
                .unwrap();
            seen.push(got);
        }
        std::fs::write(&go, "").unwrap();
    };
    let (out, ()) = tokio::join!(conn.run_live(&request, &tap), watch);
    let out = out.unwrap();
    assert_eq!(
        (out.exit_code, text(&out.stdout)),
        (Some(0), "first\nsecond\n".into())
    );
    assert_eq!(text(&out.stderr), "oops\n");
    drop(tap);
    while let Some(got) = rx.recv().await {
        seen.push(got);
    }
    assert_eq!(of(&seen, Stream::Stdout), out.stdout);
    assert_eq!(of(&seen, Stream::Stderr), out.stderr);
}

// ---- host keys -------------------------------------------------------------------------

fn host_key_error(result: Result<SshConnection, ConnError>) -> String {
    match result {
        Err(ConnError::HostKey { reason, .. }) => reason,
        Err(e) => panic!("expected a host key error, got {e}"),
        Ok(_) => panic!("expected a host key error, but the connection was accepted"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_host_key_is_refused() {
    let Some((dir, sshd)) = sshd() else { return };
    let mut host = host_for(&sshd);

    // A missing file, and a file that knows only other hosts.
    for contents in [None, Some("[127.0.0.1]:1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJdD7y3aLq454yWBdwLWbieU1ebz9/cu7/QEXn9OIeZJ\n127.0.0.1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJdD7y3aLq454yWBdwLWbieU1ebz9/cu7/QEXn9OIeZJ\n")] {
        let path = dir.path().join("known_hosts.other");
        let _ = std::fs::remove_file(&path);
        if let Some(c) = contents {
            std::fs::write(&path, c).unwrap();
        }
        host.known_hosts = Some(path.clone());
        let reason = host_key_error(SshConnection::connect(&host, &options()).await);
        assert!(reason.contains("is not in known_hosts"), "{reason}");
        assert!(reason.contains(&path.display().to_string()), "{reason}");
        assert!(
            reason.contains(&format!("ssh-keyscan -p {} 127.0.0.1", sshd.port())),
            "{reason}"
        );
        assert!(reason.contains("pin host_key"), "{reason}");
    }
    // Refused during the handshake: the server never saw a login attempt.
    assert!(!sshd.log().contains("Accepted publickey"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_host_key_is_refused() {
    let Some((dir, sshd)) = sshd() else { return };
    let other = keygen(&dir.path().join("other_host_key"), KeyType::Ed25519);
    let path = dir.path().join("known_hosts.changed");
    std::fs::write(
        &path,
        format!(
            "# an old entry\n[127.0.0.1]:{} {}\n",
            sshd.port(),
            other.public_key()
        ),
    )
    .unwrap();
    let mut host = host_for(&sshd);
    host.known_hosts = Some(path.clone());
    let reason = host_key_error(SshConnection::connect(&host, &options()).await);
    assert!(reason.contains("does not match"), "{reason}");
    assert!(reason.contains("man-in-the-middle"), "{reason}");
    assert!(reason.contains("line 2"), "{reason}");
    assert!(!sshd.log().contains("Accepted publickey"));

    // The right key on another line of the same type still wins (OpenSSH's rule).
    std::fs::write(
        &path,
        format!(
            "[127.0.0.1]:{port} {}\n{}\n",
            other.public_key(),
            sshd.known_hosts_line(),
            port = sshd.port()
        ),
    )
    .unwrap();
    connect(&sshd, &host).await.close().await;

    // A key marked @revoked is refused even with a good line beside it.
    std::fs::write(
        &path,
        format!(
            "@revoked * {}\n{}\n",
            sshd.host_public_key(),
            sshd.known_hosts_line()
        ),
    )
    .unwrap();
    let reason = host_key_error(SshConnection::connect(&host, &options()).await);
    assert!(reason.contains("@revoked"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hashed_and_wildcard_known_hosts_entries_are_accepted() {
    let Some((dir, sshd)) = sshd() else { return };
    let mut host = host_for(&sshd);

    // `ssh-keygen -H` hashes the harness's `[127.0.0.1]:PORT` line.
    let hashed = dir.path().join("known_hosts.hashed");
    std::fs::copy(sshd.known_hosts_path(), &hashed).unwrap();
    let out = Command::new("ssh-keygen")
        .arg("-H")
        .arg("-f")
        .arg(&hashed)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let contents = std::fs::read_to_string(&hashed).unwrap();
    assert!(contents.starts_with("|1|"), "{contents}");
    host.known_hosts = Some(hashed);
    connect(&sshd, &host).await.close().await;

    let wildcard = dir.path().join("known_hosts.wildcard");
    std::fs::write(
        &wildcard,
        format!("[127.0.0.*]:*,!nothing {}\n", sshd.host_public_key()),
    )
    .unwrap();
    host.known_hosts = Some(wildcard);
    connect(&sshd, &host).await.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_host_key_is_checked_instead_of_known_hosts() {
    let Some((dir, sshd)) = sshd() else { return };
    let mut host = host_for(&sshd);
    host.known_hosts = Some(dir.path().join("does-not-exist"));
    host.host_key = Some(format!("{} a comment", sshd.host_public_key()));
    let conn = connect(&sshd, &host).await;
    assert_eq!(run_ok(&conn, &argv(&["true"])).await.exit_code, Some(0));
    conn.close().await;

    let other = keygen(&dir.path().join("other_host_key"), KeyType::Ed25519);
    host.host_key = Some(other.public_key());
    // Even a known_hosts that trusts the server does not override a wrong pin.
    host.known_hosts = Some(sshd.known_hosts_path().into());
    let reason = host_key_error(SshConnection::connect(&host, &options()).await);
    assert!(
        reason.contains("does not match the pinned host_key"),
        "{reason}"
    );
    assert!(reason.contains("man-in-the-middle"), "{reason}");

    host.host_key = Some("ssh-ed25519 not-a-key".into());
    let reason = host_key_error(SshConnection::connect(&host, &options()).await);
    assert!(reason.contains("not an OpenSSH public key"), "{reason}");
}

// ---- authentication ----------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_client_key_is_an_auth_error() {
    let Some((dir, sshd)) = sshd() else { return };
    let stranger = keygen(&dir.path().join("stranger"), KeyType::Ed25519);
    let mut host = host_for(&sshd);
    host.identity_file = Some(stranger.private_key.clone());
    match SshConnection::connect(&host, &options()).await {
        Err(ConnError::Auth { user, reason, .. }) => {
            assert_eq!(user, sshd.user());
            assert!(reason.contains("refused the key"), "{reason}");
        }
        other => panic!("expected an auth error, got {:?}", other.map(|_| ())),
    }

    // A missing identity file, and an encrypted one, say so.
    host.identity_file = Some(dir.path().join("nope"));
    let err = SshConnection::connect(&host, &options()).await.unwrap_err();
    assert!(matches!(err, ConnError::Auth { .. }), "{err}");
    let encrypted = dir.path().join("encrypted");
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "secret", "-f"])
        .arg(&encrypted)
        .output()
        .unwrap();
    assert!(out.status.success());
    host.identity_file = Some(encrypted);
    let err = SshConnection::connect(&host, &options()).await.unwrap_err();
    assert!(
        matches!(&err, ConnError::Auth { reason, .. } if reason.contains("encrypted")),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rsa_and_ecdsa_client_keys_work() {
    let Some((dir, sshd)) = sshd() else { return };
    for kind in [KeyType::Rsa, KeyType::Ecdsa] {
        let key = keygen(&dir.path().join(format!("client_{kind:?}")), kind);
        sshd.authorize_key(&key.public_line);
        let mut host = host_for(&sshd);
        host.identity_file = Some(key.private_key.clone());
        let conn = connect(&sshd, &host).await;
        let out = run_ok(&conn, &argv(&["echo", "ok"])).await;
        assert_eq!(text(&out.stdout), "ok\n", "{kind:?}");
        conn.close().await;
    }
}

/// Runs one of the `#[ignore]`d child tests below in a fresh process of this test binary,
/// with its own environment (HOME, SSH_AUTH_SOCK), which a test must not change in-process.
fn run_child_test(name: &str, env: &[(&str, &std::ffi::OsStr)], remove: &[&str]) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        name,
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    for k in remove {
        cmd.env_remove(k);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success() && text(&out.stdout).contains("1 passed"),
        "child test {name} failed:\n{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// The child half of the default-key tests: connects with no identity file, using
/// `BOSUN_TEST_SSHD_PORT`, `_USER` and `_KNOWN_HOSTS` from the parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by a parent test in its own process"]
async fn child_connects_without_identity_file() {
    if std::env::var_os("BOSUN_TEST_SSHD_PORT").is_none() {
        return; // run directly (`--include-ignored`): nothing to connect to
    }
    let var = |k: &str| std::env::var(k).unwrap();
    let host = Host {
        name: "child".into(),
        address: "127.0.0.1".into(),
        port: var("BOSUN_TEST_SSHD_PORT").parse().unwrap(),
        // No user: the local user (the same one sshd runs as).
        user: None,
        identity_file: None,
        known_hosts: Some(var("BOSUN_TEST_SSHD_KNOWN_HOSTS").into()),
        ..Host::default()
    };
    let conn = SshConnection::connect(&host, &options()).await.unwrap();
    let out = conn.run(&argv(&["id", "-un"])).await.unwrap();
    assert_eq!(text(&out.stdout).trim(), var("BOSUN_TEST_SSHD_USER"));
}

#[test]
fn the_agent_is_used_when_no_identity_file_is_given() {
    let Some((dir, sshd)) = sshd() else { return };
    let sock = dir.path().join("agent.sock");
    let mut agent = Command::new("ssh-agent")
        .arg("-D")
        .arg("-a")
        .arg(&sock)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("ssh-agent (openssh-client)");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !sock.exists() {
        assert!(
            Instant::now() < deadline,
            "ssh-agent did not create its socket"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let added = Command::new("ssh-add")
        .arg(sshd.client_key_path())
        .env("SSH_AUTH_SOCK", &sock)
        .output()
        .unwrap();
    assert!(added.status.success(), "{}", text(&added.stderr));
    // HOME without keys: only the agent can log in.
    let home = dir.path().join("empty-home");
    std::fs::create_dir_all(&home).unwrap();
    let port = sshd.port().to_string();
    run_child_test(
        "child_connects_without_identity_file",
        &[
            ("SSH_AUTH_SOCK", sock.as_os_str()),
            ("HOME", home.as_os_str()),
            ("BOSUN_TEST_SSHD_PORT", port.as_ref()),
            ("BOSUN_TEST_SSHD_USER", sshd.user().as_ref()),
            (
                "BOSUN_TEST_SSHD_KNOWN_HOSTS",
                sshd.known_hosts_path().as_os_str(),
            ),
        ],
        &[],
    );
    let _ = agent.kill();
    let _ = agent.wait();
}

#[test]
fn default_keys_in_home_are_used_without_an_agent() {
    let Some((dir, sshd)) = sshd() else { return };
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    // An unusable id_ed25519 (not authorized) is passed over for an id_rsa that is.
    keygen(&home.join(".ssh/id_ed25519"), KeyType::Ed25519);
    let rsa = keygen(&home.join(".ssh/id_rsa"), KeyType::Rsa);
    sshd.authorize_key(&rsa.public_line);
    let port = sshd.port().to_string();
    run_child_test(
        "child_connects_without_identity_file",
        &[
            ("HOME", home.as_os_str()),
            ("BOSUN_TEST_SSHD_PORT", port.as_ref()),
            ("BOSUN_TEST_SSHD_USER", sshd.user().as_ref()),
            (
                "BOSUN_TEST_SSHD_KNOWN_HOSTS",
                sshd.known_hosts_path().as_os_str(),
            ),
        ],
        &["SSH_AUTH_SOCK"],
    );
}

// ---- sudo and the host check -------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_of_a_healthy_host_is_ok_at_every_stage() {
    if !require_sshd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_bin(dir.path(), Some(SUDO_OK));
    let sshd = SshdHost::start_with(&dir.path().join("sshd"), path_env(&bin));
    let stages = check(&host_for(&sshd), &options()).await;
    assert_eq!(
        statuses(&stages),
        [
            ("resolve", StageStatus::Ok),
            ("connect", StageStatus::Ok),
            ("host key", StageStatus::Ok),
            ("authenticate", StageStatus::Ok),
            ("sudo", StageStatus::Ok),
        ],
        "{stages:#?}\nsshd log:\n{}",
        sshd.log()
    );
    assert!(stage(&stages, "resolve")
        .detail
        .contains(&format!("127.0.0.1:{}", sshd.port())));
    assert!(
        stage(&stages, "host key").detail.contains("line 1"),
        "{stages:#?}"
    );
    assert!(
        stage(&stages, "authenticate").detail.contains(sshd.user()),
        "{stages:#?}"
    );

    // sudo: true runs through it.
    let conn = connect(&sshd, &host_for(&sshd)).await;
    let mut request = argv(&["echo", "as root"]);
    request.sudo = true;
    let out = run_ok(&conn, &request).await;
    assert_eq!(text(&out.stdout), "as root\n");
    assert!(!out.sudo_password_required);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sudo_that_wants_a_password_is_a_warning() {
    if !require_sshd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_bin(dir.path(), Some(SUDO_PASSWORD));
    let sshd = SshdHost::start_with(&dir.path().join("sshd"), path_env(&bin));
    let host = host_for(&sshd);
    let stages = check(&host, &options()).await;
    let sudo = stage(&stages, "sudo");
    assert_eq!(sudo.status, StageStatus::Warning, "{stages:#?}");
    assert_eq!(sudo.detail, SUDO_PASSWORD_WARNING);
    assert!(
        stages[..4].iter().all(|s| s.status == StageStatus::Ok),
        "{stages:#?}"
    );

    // A step with sudo fails fast and says why.
    let conn = connect(&sshd, &host).await;
    let mut request = argv(&["systemctl", "restart", "app"]);
    request.sudo = true;
    request.timeout = Some(Duration::from_secs(10));
    let out = run_ok(&conn, &request).await;
    assert_eq!(out.exit_code, Some(1));
    assert!(out.sudo_password_required, "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_sudo_is_a_warning() {
    if !require_sshd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A PATH with a shell and nothing else.
    let bin = fake_bin(dir.path(), None);
    std::os::unix::fs::symlink("/bin/sh", bin.join("sh")).unwrap();
    let sshd = SshdHost::start_with(
        &dir.path().join("sshd"),
        SshdOptions {
            session_env: vec![("PATH".into(), bin.display().to_string())],
            ..SshdOptions::default()
        },
    );
    let stages = check(&host_for(&sshd), &options()).await;
    let sudo = stage(&stages, "sudo");
    assert_eq!(sudo.status, StageStatus::Warning, "{stages:#?}");
    assert!(sudo.detail.contains("sudo is not installed"), "{stages:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_stops_at_the_first_failed_stage() {
    let Some((dir, sshd)) = sshd() else { return };

    // Unknown host key: connected, then refused; nothing after it is tried.
    let mut host = host_for(&sshd);
    host.known_hosts = Some(dir.path().join("empty"));
    let stages = check(&host, &options()).await;
    assert_eq!(
        statuses(&stages),
        [
            ("resolve", StageStatus::Ok),
            ("connect", StageStatus::Ok),
            ("host key", StageStatus::Failed),
            ("authenticate", StageStatus::Skipped),
            ("sudo", StageStatus::Skipped),
        ],
        "{stages:#?}"
    );
    assert!(stage(&stages, "host key")
        .detail
        .contains("not in known_hosts"));

    // Wrong key: authentication fails, sudo is skipped.
    let mut host = host_for(&sshd);
    host.identity_file = Some(keygen(&dir.path().join("stranger"), KeyType::Ed25519).private_key);
    let stages = check(&host, &options()).await;
    assert_eq!(stage(&stages, "host key").status, StageStatus::Ok);
    assert_eq!(
        stage(&stages, "authenticate").status,
        StageStatus::Failed,
        "{stages:#?}"
    );
    assert_eq!(stage(&stages, "sudo").status, StageStatus::Skipped);

    // Nothing listening: connect fails.
    let mut host = host_for(&sshd);
    host.port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let stages = check(&host, &options()).await;
    assert_eq!(stage(&stages, "resolve").status, StageStatus::Ok);
    assert_eq!(
        stage(&stages, "connect").status,
        StageStatus::Failed,
        "{stages:#?}"
    );
    assert_eq!(stage(&stages, "host key").status, StageStatus::Skipped);

    // Not an SSH server: connect fails (the handshake is part of it).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut host = host_for(&sshd);
    host.port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let stages = check(&host, &options()).await;
    assert_eq!(
        stage(&stages, "connect").status,
        StageStatus::Failed,
        "{stages:#?}"
    );

    // A name that does not resolve.
    let mut host = host_for(&sshd);
    host.address = "no-such-host.invalid".into();
    let short = ConnectOptions {
        connect_timeout: Duration::from_secs(3),
    };
    let stages = check(&host, &short).await;
    assert_eq!(
        stage(&stages, "resolve").status,
        StageStatus::Failed,
        "{stages:#?}"
    );
    assert!(stages[1..].iter().all(|s| s.status == StageStatus::Skipped));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_host_checks_only_sudo() {
    let host = Host {
        name: "build".into(),
        connection: ConnectionKind::Local,
        ..Host::default()
    };
    let stages = check(&host, &options()).await;
    assert_eq!(stages.len(), 5, "{stages:#?}");
    for s in &stages[..4] {
        assert_eq!(
            (s.status, s.detail.as_str()),
            (StageStatus::Ok, "local"),
            "{stages:#?}"
        );
    }
    // Whatever this machine's sudo is like, it is never a failure of the host.
    assert!(
        matches!(stages[4].status, StageStatus::Ok | StageStatus::Warning),
        "{stages:#?}"
    );
}
