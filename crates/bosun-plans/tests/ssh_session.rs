//! The remote session every command of an SSH connection goes through, against a real
//! OpenSSH server whose login shell is bash reading a `~/.bashrc` (as sshd's bash does for
//! every command): one login shell for many commands; output byte-exact however it is
//! shaped (binary, 50 MiB, stdout closed early, a banner from the login shell, late
//! output of a process a command left behind); stdin read whole or in part; a timeout in
//! the middle of output; the session killed from the host side; a host that cannot run
//! a session. Skipped loudly when sshd is missing, unless `BOSUN_REQUIRE_TOOLS=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use bosun_plans::connection::{ConnError, Connection, RunRequest, Stream};
use bosun_testkit::sshd::{require_sshd, SshdHost, SshdOptions};
use common::{argv, connect, host_for, read_pid, run_ok, script, shell, text, wait_gone};
use tempfile::TempDir;

/// An sshd whose sessions' `~/.bashrc` counts its runs in `~/logins` (one line per login
/// shell) and also runs `extra`.
fn sshd_counting_logins(extra: &str) -> Option<(TempDir, SshdHost)> {
    if !require_sshd() {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join(".bashrc"),
        format!("echo login >> \"$HOME/logins\"\n{extra}\n"),
    )
    .unwrap();
    let sshd = SshdHost::start_with(
        &dir.path().join("sshd"),
        SshdOptions {
            session_env: vec![("HOME".into(), home.display().to_string())],
            ..SshdOptions::default()
        },
    );
    Some((dir, sshd))
}

fn logins(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("home/logins"))
        .unwrap_or_default()
        .lines()
        .count()
}

fn with_stdin(mut request: RunRequest, bytes: Vec<u8>) -> RunRequest {
    request.stdin = Some(bytes);
    request
}

/// Every byte value, many times over, with the framing's own nonce prefix mixed in.
fn binary(len: usize) -> Vec<u8> {
    let mut bytes: Vec<u8> = (0..len).map(|i| (i * 7 % 256) as u8).collect();
    for (i, chunk) in bytes.chunks_mut(4096).enumerate() {
        if i % 3 == 0 && chunk.len() > 10 {
            chunk[..6].copy_from_slice(b"bosun-");
        }
    }
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_login_shell_serves_every_command_of_a_connection() {
    let Some((dir, sshd)) = sshd_counting_logins("") else {
        return;
    };
    let conn = connect(&sshd, &host_for(&sshd)).await;
    for i in 0..20 {
        let out = run_ok(&conn, &argv(&["echo", &format!("{i}")])).await;
        assert_eq!(text(&out.stdout), format!("{i}\n"));
        let out = run_ok(
            &conn,
            &with_stdin(shell("cat; echo \" $0\" >&2"), b"in".to_vec()),
        )
        .await;
        assert_eq!(text(&out.stdout), "in");
        assert_eq!(text(&out.stderr), " sh\n");
    }
    assert!(conn.uses_sessions());
    assert_eq!(
        logins(dir.path()),
        1,
        "40 commands on one connection started one login shell"
    );
    // Each command is a process of its own: what one sets does not reach the next.
    let out = run_ok(&conn, &shell("cd /; X=1; export Y=2; pwd")).await;
    assert_eq!(text(&out.stdout), "/\n");
    let out = run_ok(&conn, &shell("echo \"[$X][$Y]\"; pwd")).await;
    assert_ne!(text(&out.stdout), "[1][2]\n/\n");
    assert!(
        text(&out.stdout).starts_with("[][]\n"),
        "{:?}",
        text(&out.stdout)
    );
    conn.close().await;
}

/// A login shell slower than the connect timeout (start-up files on a loaded host) still
/// gets its session: falling back to a channel per command would pay it every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_shell_slower_than_the_connect_timeout_still_serves_every_command() {
    let Some((dir, sshd)) = sshd_counting_logins("sleep 1.5") else {
        return;
    };
    let options = bosun_plans::connection::ConnectOptions {
        connect_timeout: Duration::from_millis(700),
    };
    let conn = match bosun_plans::connection::ssh::SshConnection::connect(
        &host_for(&sshd),
        &options,
    )
    .await
    {
        Ok(c) => c,
        Err(e) => panic!("connect failed: {e}\nsshd log:\n{}", sshd.log()),
    };
    for i in 0..3 {
        let out = run_ok(&conn, &argv(&["echo", &format!("{i}")])).await;
        assert_eq!(text(&out.stdout), format!("{i}\n"));
    }
    assert!(conn.uses_sessions());
    assert_eq!(logins(dir.path()), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_banner_does_not_reach_any_command_output() {
    let Some((_dir, sshd)) = sshd_counting_logins(
        "echo 'Welcome to prod-db-1'; printf 'no newline'; echo 'motd on stderr' >&2",
    ) else {
        return;
    };
    let conn = connect(&sshd, &host_for(&sshd)).await;
    for _ in 0..3 {
        let out = run_ok(&conn, &argv(&["printf", "%s", "exact"])).await;
        assert_eq!(text(&out.stdout), "exact");
        assert_eq!(text(&out.stderr), "");
        assert_eq!(out.exit_code, Some(0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_output_and_stdin_are_byte_exact() {
    let Some((_dir, sshd)) = sshd_counting_logins("") else {
        return;
    };
    let conn = connect(&sshd, &host_for(&sshd)).await;
    let bytes = binary(300_000);
    let out = run_ok(&conn, &with_stdin(argv(&["cat"]), bytes.clone())).await;
    assert!(
        out.stdout == bytes,
        "stdout differs ({} bytes)",
        out.stdout.len()
    );
    let out = run_ok(
        &conn,
        &with_stdin(shell("cat >&2; printf x"), bytes.clone()),
    )
    .await;
    assert!(
        out.stderr == bytes,
        "stderr differs ({} bytes)",
        out.stderr.len()
    );
    assert_eq!(text(&out.stdout), "x");
    // NUL bytes and no final newline, on both streams at once.
    let out = run_ok(
        &conn,
        &shell("printf 'a\\000b'; printf 'c\\000' >&2; exit 7"),
    )
    .await;
    assert_eq!(out.stdout, b"a\0b");
    assert_eq!(out.stderr, b"c\0");
    assert_eq!(out.exit_code, Some(7));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_read_whole_or_in_part_keeps_the_session_in_step() {
    let Some((_dir, sshd)) = sshd_counting_logins("") else {
        return;
    };
    let conn = connect(&sshd, &host_for(&sshd)).await;
    let five_mib = vec![b'z'; 5 << 20];
    let out = run_ok(&conn, &with_stdin(argv(&["wc", "-c"]), five_mib.clone())).await;
    assert_eq!(text(&out.stdout).trim(), (5 << 20).to_string());
    // Reads 3 bytes of 5 MiB and exits: the rest must not reach the next command.
    let out = run_ok(&conn, &with_stdin(argv(&["head", "-c", "3"]), five_mib)).await;
    assert_eq!(text(&out.stdout), "zzz");
    // Does not read stdin at all.
    let out = run_ok(
        &conn,
        &with_stdin(argv(&["true"]), b"echo injected\n".to_vec()),
    )
    .await;
    assert_eq!(out.exit_code, Some(0));
    let out = run_ok(&conn, &shell("read x; echo \"rc=$? x=[$x]\"")).await;
    assert_eq!(text(&out.stdout), "rc=1 x=[]\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_closes_stdout_early() {
    let Some((_dir, sshd)) = sshd_counting_logins("") else {
        return;
    };
    let conn = connect(&sshd, &host_for(&sshd)).await;
    let out = run_ok(
        &conn,
        &shell("echo before; exec >&-; sleep 0.2; echo after >&2; exit 3"),
    )
    .await;
    assert_eq!(text(&out.stdout), "before\n");
    assert_eq!(text(&out.stderr), "after\n");
    assert_eq!(out.exit_code, Some(3));
    let out = run_ok(&conn, &shell("exec 2>&-; echo still")).await;
    assert_eq!(text(&out.stdout), "still\n");
    let out = run_ok(&conn, &argv(&["echo", "next"])).await;
    assert_eq!(text(&out.stdout), "next\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_mib_of_output() {
    let Some((_dir, sshd)) = sshd_counting_logins("") else {
        return;
    };
    let conn = connect(&sshd, &host_for(&sshd)).await;
    let len = 50usize << 20;
    let started = Instant::now();
    let out = run_ok(
        &conn,
        &shell(&format!(
            "head -c {len} /dev/zero | tr '\\000' 'a'; echo done >&2"
        )),
    )
    .await;
    let took = started.elapsed();
    assert_eq!(out.stdout.len(), len);
    assert!(out.stdout.iter().all(|&b| b == b'a'));
    assert_eq!(text(&out.stderr), "done\n");
    let _ = std::io::Write::write_fmt(
        &mut std::io::stderr(),
        format_args!(
            "50 MiB through the session in {:.2} s\n",
            took.as_secs_f64()
        ),
    );
    let out = run_ok(&conn, &argv(&["echo", "next"])).await;
    assert_eq!(text(&out.stdout), "next\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_in_the_middle_of_output() {
    let Some((dir, sshd)) = sshd_counting_logins("") else {
        return;
    };
    let conn = connect(&sshd, &host_for(&sshd)).await;
    let pid_file = dir.path().join("writer.pid");
    let mut request = shell(&format!(
        "echo $$ > {}; i=0; while :; do echo line $i; echo err $i >&2; i=$((i+1)); sleep 0.01; done",
        pid_file.display()
    ));
    request.timeout = Some(Duration::from_secs(1));
    let started = Instant::now();
    let out = conn.run(&request).await.unwrap();
    assert!(out.timed_out && out.exit_code.is_none(), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(4));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("line 0\nline 1\n"), "{stdout:?}");
    // Whole lines in order, nothing else.
    for (i, line) in stdout.lines().enumerate() {
        assert_eq!(line, format!("line {i}"));
    }
    assert!(text(&out.stderr).starts_with("err 0\n"));
    assert!(wait_gone(read_pid(&pid_file), Duration::from_secs(2)));
    // The session is still in step: the next command's output is its own.
    let out = run_ok(&conn, &argv(&["echo", "next"])).await;
    assert_eq!(text(&out.stdout), "next\n");
    assert_eq!(text(&out.stderr), "");
    assert_eq!(logins(dir.path()), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_output_of_a_process_left_behind_is_nobody_s() {
    let Some((dir, sshd)) = sshd_counting_logins("") else {
        return;
    };
    let conn = connect(&sshd, &host_for(&sshd)).await;
    let flag = dir.path().join("late-done");
    let started = Instant::now();
    let out = run_ok(
        &conn,
        &shell(&format!(
            "(sleep 0.5; echo late; echo late-err >&2; touch {}) & echo now",
            flag.display()
        )),
    )
    .await;
    assert_eq!(text(&out.stdout), "now\n");
    // The command is done when it exits, not when its background process is.
    assert!(started.elapsed() < Duration::from_millis(500));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !flag.exists() {
        assert!(
            Instant::now() < deadline,
            "the background process never finished"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let out = run_ok(&conn, &argv(&["echo", "next"])).await;
    assert_eq!(text(&out.stdout), "next\n");
    assert_eq!(text(&out.stderr), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_killed_from_the_host_side() {
    let Some((dir, sshd)) = sshd_counting_logins("") else {
        return;
    };
    let conn = connect(&sshd, &host_for(&sshd)).await;
    // The session's shell is the command's parent. The command's own pid is written
    // first: the session is killed as soon as its pid appears.
    let session_pid = dir.path().join("session.pid");
    let child_pid = dir.path().join("child.pid");
    let running = shell(&format!(
        "echo $$ > {}; echo $PPID > {}; echo working; exec sleep 60",
        child_pid.display(),
        session_pid.display()
    ));
    let killer = {
        let session_pid = session_pid.clone();
        tokio::spawn(async move {
            let pid = read_pid(&session_pid);
            // SAFETY: a plain kill(2) of a process this test's command named.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        })
    };
    let started = Instant::now();
    let err = conn.run(&running).await.unwrap_err();
    killer.await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    match &err {
        ConnError::Lost { reason, .. } => assert!(
            reason.contains("remote shell") && reason.contains("while the command was running"),
            "{reason}"
        ),
        other => panic!("expected Lost, got {other:?}"),
    }
    // What the command left is stopped.
    let child = read_pid(&child_pid);
    assert!(
        wait_gone(child, Duration::from_secs(5)),
        "{child} still runs"
    );
    // The connection goes on with a new session.
    let out = run_ok(&conn, &argv(&["echo", "next"])).await;
    assert_eq!(text(&out.stdout), "next\n");
    // The first session, the channel that stopped the command, the new session.
    assert_eq!(logins(dir.path()), 3);

    // A session that ends between commands: the next command gets a new one.
    let out = run_ok(&conn, &shell("echo $PPID")).await;
    let pid: i32 = text(&out.stdout).trim().parse().unwrap();
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(wait_gone(pid as u32, Duration::from_secs(5)));
    let out = run_ok(&conn, &argv(&["echo", "after"])).await;
    assert_eq!(text(&out.stdout), "after\n");
    assert_eq!(logins(dir.path()), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_is_seen_while_the_command_runs_in_the_session() {
    let Some((dir, sshd)) = sshd_counting_logins("") else {
        return;
    };
    let conn = connect(&sshd, &host_for(&sshd)).await;
    let go = dir.path().join("go");
    let request = shell(&format!(
        "echo first; echo first-err >&2; while [ ! -e {} ]; do sleep 0.02; done; echo second",
        go.display()
    ));
    let seen = std::sync::Mutex::new(Vec::<(Stream, Vec<u8>)>::new());
    let live = |stream: Stream, bytes: &[u8]| seen.lock().unwrap().push((stream, bytes.to_vec()));
    let watch = async {
        // Both first lines arrive while the command still waits for `go`.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let got: Vec<_> = seen.lock().unwrap().clone();
            let out: Vec<u8> = got
                .iter()
                .filter(|(s, _)| *s == Stream::Stdout)
                .flat_map(|(_, b)| b.clone())
                .collect();
            let err: Vec<u8> = got
                .iter()
                .filter(|(s, _)| *s == Stream::Stderr)
                .flat_map(|(_, b)| b.clone())
                .collect();
            if out == b"first\n" && err == b"first-err\n" {
                break;
            }
            assert!(Instant::now() < deadline, "not seen while running: {got:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        std::fs::write(&go, "").unwrap();
    };
    let (out, ()) = tokio::join!(conn.run_live(&request, &live), watch);
    let out = out.unwrap();
    assert_eq!(text(&out.stdout), "first\nsecond\n");
    let all: Vec<u8> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(s, _)| *s == Stream::Stdout)
        .flat_map(|(_, b)| b.clone())
        .collect();
    assert_eq!(all, out.stdout, "the watcher saw every byte once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_without_setsid_runs_each_command_on_its_own_channel() {
    if !require_sshd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A PATH with a shell and the usual tools, but no `setsid`.
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["sh", "head", "cat", "echo", "timeout"] {
        let target = ["/bin", "/usr/bin"]
            .iter()
            .map(|d| Path::new(d).join(tool))
            .find(|p| p.exists())
            .unwrap();
        std::os::unix::fs::symlink(target, bin.join(tool)).unwrap();
    }
    script(&bin.join("probe"), "#!/bin/sh\necho probed\n");
    let sshd = SshdHost::start_with(
        &dir.path().join("sshd"),
        SshdOptions {
            session_env: vec![("PATH".into(), bin.display().to_string())],
            ..SshdOptions::default()
        },
    );
    let conn = connect(&sshd, &host_for(&sshd)).await;
    let started = Instant::now();
    let out = run_ok(&conn, &argv(&["probe"])).await;
    assert_eq!(text(&out.stdout), "probed\n");
    assert!(!conn.uses_sessions());
    // The host said so at once: no waiting out the hello.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let out = run_ok(&conn, &with_stdin(argv(&["cat"]), b"abc".to_vec())).await;
    assert_eq!(text(&out.stdout), "abc");
}

/// `sudo` commands go to one session started under `sudo -n` (one sudo for the
/// connection, not one per command) when sudo allows it; when sudo allows only some
/// commands, each runs under `sudo -n` itself and the rule still matches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sudo_commands_share_one_sudo_session_when_sudo_allows_it() {
    use bosun_testkit::sshd::{ensure_sudo_user, require_sudo_users};
    if !require_sshd() || !require_sudo_users() {
        return;
    }
    let sudo = |words: &[&str]| RunRequest {
        sudo: true,
        ..argv(words)
    };
    let user = "bosun-test-ssh-sudo-all";
    ensure_sudo_user(user, "ALL=(ALL) NOPASSWD: ALL");
    let dir = tempfile::tempdir().unwrap();
    let sshd = SshdHost::start_with(
        &dir.path().join("sshd"),
        SshdOptions {
            login_user: Some(user.into()),
            ..SshdOptions::default()
        },
    );
    let conn = connect(&sshd, &host_for(&sshd)).await;
    let parents: Vec<String> = {
        let mut seen = Vec::new();
        for _ in 0..3 {
            let out = run_ok(&conn, &sudo(&["sh", "-c", "echo $PPID; id -u"])).await;
            let stdout = text(&out.stdout);
            let (ppid, uid) = stdout.split_once('\n').unwrap();
            assert_eq!(uid, "0\n");
            seen.push(ppid.to_string());
        }
        seen
    };
    assert!(conn.uses_sudo_sessions());
    assert!(parents.windows(2).all(|w| w[0] == w[1]), "{parents:?}");
    // The login user's commands are not root's.
    let out = run_ok(&conn, &argv(&["id", "-un"])).await;
    assert_eq!(text(&out.stdout), format!("{user}\n"));
    // stdin and a timeout under the sudo'd session.
    let mut request = sudo(&["cat"]);
    request.stdin = Some(b"as root".to_vec());
    request.timeout = Some(Duration::from_secs(5));
    let out = run_ok(&conn, &request).await;
    assert_eq!(text(&out.stdout), "as root");

    let user = "bosun-test-ssh-sudo-id";
    ensure_sudo_user(user, "ALL=(ALL) NOPASSWD: /usr/bin/id");
    let dir = tempfile::tempdir().unwrap();
    let sshd = SshdHost::start_with(
        &dir.path().join("sshd"),
        SshdOptions {
            login_user: Some(user.into()),
            ..SshdOptions::default()
        },
    );
    let conn = connect(&sshd, &host_for(&sshd)).await;
    let out = run_ok(&conn, &sudo(&["/usr/bin/id", "-u"])).await;
    assert_eq!(text(&out.stdout), "0\n");
    assert!(!conn.uses_sudo_sessions());
    assert!(conn.uses_sessions());
    let out = run_ok(&conn, &sudo(&["sh", "-c", "true"])).await;
    assert_eq!(out.exit_code, Some(1), "{}", text(&out.stderr));
}
