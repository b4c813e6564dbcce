//! Running one command of a phase (git or the engine): its own process group, stdin
//! closed, exactly the environment it is given, stdout and stderr streamed line by line
//! into the phase's log, and — when the phase is stopped — an interrupt to the whole
//! group, then a kill after the grace period (at once when the lease was fenced).
//!
//! The command writes its output to files that the runner follows, not to pipes: if the
//! runner itself dies, a pipe would kill the engine with SIGPIPE on its next line —
//! mid-apply, before it saved state. With files the engine finishes, and its state write
//! reaches the server as a flagged late write instead of being lost.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use crate::control::{Stop, StopSignal};
use crate::logs::LogSink;

/// A line longer than this is cut into several log lines (output without newlines must
/// not grow a buffer without bound).
const MAX_LINE_BYTES: usize = 64 * 1024;
/// After the command exits, how long its output readers may take to reach end of file.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// One command to run.
pub(crate) struct Step<'a> {
    /// What the log header calls the program (`git`, `terraform`).
    pub(crate) name: &'a str,
    pub(crate) program: &'a Path,
    pub(crate) args: Vec<OsString>,
    pub(crate) cwd: &'a Path,
    /// The complete environment (nothing of the runner's own is inherited).
    pub(crate) env: &'a [(String, String)],
    /// Keep stdout instead of logging it (`show -json`).
    pub(crate) capture_stdout: bool,
    /// The log's header line for the command, when `$ name args…` would show a secret.
    pub(crate) header: Option<String>,
    /// A command that may be changing infrastructure (an engine's `apply`) is not killed
    /// at once when the lease is fenced: it gets an interrupt and this long to write the
    /// state of what it changed — a late write, flagged, or its `errored.tfstate` —
    /// rather than die with that state in memory. `None`: killed at once.
    pub(crate) fenced_grace: Option<Duration>,
    /// The network namespace the command runs in (the egress sandbox's), entered between
    /// fork and exec; `None`: the runner's own.
    pub(crate) netns: Option<std::os::fd::RawFd>,
}

/// How a command ended.
#[derive(Debug)]
pub(crate) enum StepEnd {
    Exited(Exited),
    /// The phase was stopped while the command ran; its group is gone.
    Stopped(Stop),
}

#[derive(Debug)]
pub(crate) struct Exited {
    pub(crate) status: ExitStatus,
    /// The line of stderr that best says what went wrong: the last `Error:`-like line,
    /// else the last non-empty one.
    pub(crate) stderr_hint: Option<String>,
    /// Stdout, when captured.
    pub(crate) stdout: Vec<u8>,
}

impl Exited {
    pub(crate) fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// "exit code 1" or "killed by signal 9".
    pub(crate) fn describe(&self) -> String {
        use std::os::unix::process::ExitStatusExt as _;
        match (self.status.code(), self.status.signal()) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(sig)) => format!("killed by signal {sig}"),
            (None, None) => "unknown exit status".to_string(),
        }
    }
}

/// The command line as the log header shows it.
pub(crate) fn display_command(name: &str, args: &[OsString]) -> String {
    let mut line = format!("$ {name}");
    for arg in args {
        let arg = arg.to_string_lossy();
        line.push(' ');
        if !arg.is_empty()
            && arg
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_=./:@+,%".contains(c))
        {
            line.push_str(&arg);
        } else {
            line.push('\'');
            line.push_str(&arg.replace('\'', r"'\''"));
            line.push('\'');
        }
    }
    line
}

/// Sends `signal` to process group `pgid`; a group that is already gone is fine.
fn signal_group(pgid: i32, signal: i32) {
    if pgid <= 1 {
        return;
    }
    // SAFETY: killpg has no memory-safety preconditions; a stale or empty group only makes
    // it fail with ESRCH, which is ignored.
    unsafe {
        libc::killpg(pgid, signal);
    }
}

/// Kills the command's whole group when dropped: on every way out of `run_step`, an
/// early return or a cancelled future included, nothing of the group is left running.
struct GroupGuard(i32);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        signal_group(self.0, libc::SIGKILL);
    }
}

/// Runs `step`, logging its header, stderr and (unless captured) stdout through `log`.
/// When `stop` is raised: SIGINT to the group, SIGKILL after `grace` (or at once for a
/// fenced lease). `Err` only when the command could not be started.
pub(crate) async fn run_step(
    step: Step<'_>,
    log: &LogSink,
    stop: &StopSignal,
    grace: Duration,
) -> io::Result<StepEnd> {
    let header = step
        .header
        .clone()
        .unwrap_or_else(|| display_command(step.name, &step.args));
    log.line(header).await;
    let outputs = OutputFiles::create()?;
    let mut cmd = Command::new(step.program);
    cmd.args(&step.args)
        .current_dir(step.cwd)
        .env_clear()
        .envs(step.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::fs::File::create(&outputs.stdout)?))
        .stderr(Stdio::from(std::fs::File::create(&outputs.stderr)?))
        .process_group(0)
        .kill_on_drop(true);
    if let Some(ns) = step.netns {
        // SAFETY: between fork and exec only setns(2), which is async-signal-safe, runs;
        // `ns` is the sandbox's descriptor, open for as long as this step (the sandbox
        // outlives every step given its descriptor).
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(ns, libc::CLONE_NEWNET) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn()?;
    let pgid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .unwrap_or(0);
    let _guard = GroupGuard(pgid);

    let (exited, exited_rx) = tokio::sync::watch::channel(false);
    let stdout = Some(follow(outputs.stdout.clone(), exited_rx.clone()));
    let stderr = Some(follow(outputs.stderr.clone(), exited_rx));
    let out_task = stdout.map(|out| {
        let log = log.clone();
        let capture = step.capture_stdout;
        tokio::spawn(async move {
            if capture {
                let mut buf = Vec::new();
                let mut out = out;
                let _ = out.read_to_end(&mut buf).await;
                buf
            } else {
                pump_lines(out, &log, None).await;
                Vec::new()
            }
        })
    });
    let hint = Arc::new(std::sync::Mutex::new(Hint::default()));
    let err_task = stderr.map(|err| {
        let log = log.clone();
        let hint = Arc::clone(&hint);
        tokio::spawn(async move { pump_lines(err, &log, Some(&hint)).await })
    });

    let ended = tokio::select! {
        status = child.wait() => Ok(status?),
        reason = stop.stopped() => Err(reason),
    };
    let status = match ended {
        Ok(status) => status,
        Err(reason) => {
            let grace = if reason.is_graceful() {
                Some(grace)
            } else {
                step.fenced_grace
            };
            match grace {
                None => signal_group(pgid, libc::SIGKILL),
                Some(grace) => {
                    signal_group(pgid, libc::SIGINT);
                    let fence_kills = step.fenced_grace.is_none();
                    tokio::select! {
                        _ = child.wait() => {}
                        () = tokio::time::sleep(grace) => {
                            log.line(format!(
                                "bosun: {} did not stop within {:?} of the interrupt; killing it",
                                step.name,
                                grace
                            ))
                            .await;
                            signal_group(pgid, libc::SIGKILL);
                        }
                        () = stop.fenced(), if fence_kills => signal_group(pgid, libc::SIGKILL),
                    }
                }
            }
            let _ = child.wait().await;
            // Leftover members of the group (an engine's plugins) die with it.
            signal_group(pgid, libc::SIGKILL);
            exited.send_replace(true);
            drain(out_task).await;
            drain(err_task).await;
            return Ok(StepEnd::Stopped(stop.current().unwrap_or(reason)));
        }
    };
    // The command is done; anything it left behind in its group is not wanted.
    signal_group(pgid, libc::SIGKILL);
    exited.send_replace(true);
    let stdout = drain(out_task).await.unwrap_or_default();
    drain(err_task).await;
    let stderr_hint = hint.lock().ok().and_then(|h| h.best());
    Ok(StepEnd::Exited(Exited {
        status,
        stderr_hint,
        stdout,
    }))
}

/// The files a command's stdout and stderr go to; removed when the step is done.
struct OutputFiles {
    dir: PathBuf,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl OutputFiles {
    fn create() -> io::Result<Self> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "bosun-step-{}-{n}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        std::fs::create_dir_all(&dir)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok(OutputFiles {
            stdout: dir.join("stdout"),
            stderr: dir.join("stderr"),
            dir,
        })
    }
}

impl Drop for OutputFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Follows a file the command writes, like `tail -f`, until the command has exited and
/// everything it wrote was read; the returned reader then ends.
fn follow(
    path: PathBuf,
    mut exited: tokio::sync::watch::Receiver<bool>,
) -> tokio::io::DuplexStream {
    let (reader, mut writer) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let Ok(mut file) = tokio::fs::File::open(&path).await else {
            return;
        };
        let mut buf = vec![0u8; 64 * 1024];
        // Set once the exit is seen: from then on, read to the end once more and stop
        // (the last writes may have landed after the read that came back empty).
        let mut final_pass = false;
        loop {
            match file.read(&mut buf).await {
                Ok(0) => {
                    if final_pass {
                        return;
                    }
                    if *exited.borrow() {
                        final_pass = true;
                        continue;
                    }
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_millis(25)) => {}
                        changed = exited.changed() => {
                            if changed.is_err() {
                                return;
                            }
                        }
                    }
                }
                Ok(n) => {
                    if writer.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
    });
    reader
}

/// Waits (bounded) for a reader task to reach end of file.
async fn drain<T>(task: Option<tokio::task::JoinHandle<T>>) -> Option<T> {
    let mut task = task?;
    match tokio::time::timeout(DRAIN_TIMEOUT, &mut task).await {
        Ok(Ok(value)) => Some(value),
        Ok(Err(_)) => None,
        Err(_) => {
            // Something outside the group still holds the pipe open: stop reading it.
            task.abort();
            None
        }
    }
}

/// The best stderr line to quote in a failure reason.
#[derive(Default)]
struct Hint {
    last_error: Option<String>,
    last: Option<String>,
}

impl Hint {
    fn see(&mut self, line: &str) {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            return;
        }
        let lower = trimmed.to_ascii_lowercase();
        if lower.starts_with("error") || lower.starts_with("fatal:") {
            self.last_error = Some(trimmed.to_string());
        }
        self.last = Some(trimmed.to_string());
    }

    fn best(&self) -> Option<String> {
        self.last_error.clone().or_else(|| self.last.clone())
    }
}

/// Reads `reader` to its end, one log line per output line (`\r\n` and `\n` endings
/// removed, invalid UTF-8 replaced, overlong lines cut — a cut line goes through
/// `LogSink::fragment`, so a secret it splits is still masked).
async fn pump_lines(
    reader: impl AsyncRead + Unpin,
    log: &LogSink,
    hint: Option<&std::sync::Mutex<Hint>>,
) {
    let mut reader = BufReader::new(reader);
    let mut line: Vec<u8> = Vec::new();
    loop {
        // `cut`: the line ended for its length, not with a newline or the output.
        let (done, used, ended, cut) = match reader.fill_buf().await {
            Ok([]) | Err(_) => (true, 0, !line.is_empty(), false),
            Ok(buf) => {
                let room = MAX_LINE_BYTES.saturating_sub(line.len()).max(1);
                match buf.iter().take(room).position(|&b| b == b'\n') {
                    Some(i) => {
                        line.extend_from_slice(&buf[..i]);
                        (false, i + 1, true, false)
                    }
                    None => {
                        let n = buf.len().min(room);
                        line.extend_from_slice(&buf[..n]);
                        let full = line.len() >= MAX_LINE_BYTES;
                        (false, n, full, full)
                    }
                }
            }
        };
        reader.consume(used);
        if ended {
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let text = String::from_utf8_lossy(&line).into_owned();
            if let Some(hint) = hint {
                if let Ok(mut h) = hint.lock() {
                    h.see(&text);
                }
            }
            line.clear();
            if cut {
                let carry = log.fragment(&text).await;
                line.extend_from_slice(carry.as_bytes());
            } else {
                log.line(text).await;
            }
        }
        if done {
            return;
        }
    }
}

/// Finds `program` in the directories of `path` (a `PATH` value); a name with a slash is
/// taken as it is.
pub(crate) fn find_program(program: &str, path: &std::ffi::OsStr) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    std::env::split_paths(path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(program))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// A sink whose lines land in a channel the test reads.
    fn sink() -> (LogSink, tokio::sync::mpsc::Receiver<String>) {
        let (tx, rx) = tokio::sync::mpsc::channel(1024);
        (LogSink::for_test(tx, &[]), rx)
    }

    fn lines(rx: &mut tokio::sync::mpsc::Receiver<String>) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(l) = rx.try_recv() {
            out.push(l);
        }
        out
    }

    fn sh<'a>(script: &str, cwd: &'a Path, env: &'a [(String, String)]) -> Step<'a> {
        Step {
            name: "sh",
            program: Path::new("/bin/sh"),
            args: vec!["-c".into(), script.into()],
            cwd,
            env,
            capture_stdout: false,
            header: None,
            fenced_grace: None,
            netns: None,
        }
    }

    fn path_env() -> Vec<(String, String)> {
        vec![("PATH".into(), "/usr/bin:/bin".into())]
    }

    #[tokio::test]
    async fn streams_both_streams_and_reports_the_exit() {
        let dir = tempfile::tempdir().unwrap();
        let env = vec![
            ("PATH".to_string(), "/usr/bin:/bin".to_string()),
            ("ONLY".to_string(), "this".to_string()),
        ];
        let (log, mut rx) = sink();
        let step = sh(
            "echo out1; echo \"env:$ONLY:${HOME:-nohome}\"; echo 'Error: bad thing' >&2; \
             echo detail >&2; printf 'no newline'; exit 3",
            dir.path(),
            &env,
        );
        let end = run_step(step, &log, &StopSignal::new(), Duration::from_secs(1))
            .await
            .unwrap();
        let StepEnd::Exited(exited) = end else {
            panic!("expected an exit, got {end:?}")
        };
        assert_eq!(exited.code(), Some(3));
        assert_eq!(exited.describe(), "exit code 3");
        assert_eq!(exited.stderr_hint.as_deref(), Some("Error: bad thing"));
        let got = lines(&mut rx);
        assert!(got[0].starts_with("$ sh -c 'echo out1;"), "{got:?}");
        for want in [
            "out1",
            "env:this:nohome",
            "Error: bad thing",
            "detail",
            "no newline",
        ] {
            assert!(got.iter().any(|l| l == want), "missing {want:?} in {got:?}");
        }
    }

    #[tokio::test]
    async fn a_secret_in_output_is_masked_even_where_a_long_line_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let env = path_env();
        let (tx, mut rx) = tokio::sync::mpsc::channel(1024);
        let log = LogSink::for_test(tx, &["ghs_s3cret_token"]);
        // The overlong line is cut at MAX_LINE_BYTES, in the middle of the secret.
        let script = format!(
            "echo 'fatal: ghs_s3cret_token refused' >&2; \
             head -c {} /dev/zero | tr '\\0' a; echo ghs_s3cret_token; exit 1",
            MAX_LINE_BYTES - 6
        );
        let StepEnd::Exited(exited) = run_step(
            sh(&script, dir.path(), &env),
            &log,
            &StopSignal::new(),
            Duration::ZERO,
        )
        .await
        .unwrap() else {
            panic!("expected an exit")
        };
        assert_eq!(exited.code(), Some(1));
        let got = lines(&mut rx);
        assert!(
            got.iter().all(|l| !l.contains("s3cret")),
            "the secret leaked"
        );
        let short: Vec<&String> = got.iter().filter(|l| l.len() < 200).collect();
        assert!(got.iter().any(|l| l == "fatal: *** refused"), "{short:?}");
        assert!(got.iter().any(|l| l == "***"), "{short:?}");
        let a_line = got.iter().find(|l| l.starts_with('a')).unwrap();
        assert_eq!(a_line.len(), MAX_LINE_BYTES - 6);
    }

    #[tokio::test]
    async fn captures_stdout_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let env = path_env();
        let (log, mut rx) = sink();
        let mut step = sh("printf '{\"a\":1}'; echo note >&2", dir.path(), &env);
        step.capture_stdout = true;
        let StepEnd::Exited(exited) = run_step(step, &log, &StopSignal::new(), Duration::ZERO)
            .await
            .unwrap()
        else {
            panic!("expected an exit")
        };
        assert_eq!(exited.stdout, b"{\"a\":1}");
        let got = lines(&mut rx);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[1], "note");
    }

    #[tokio::test]
    async fn a_stop_interrupts_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let env = path_env();
        let (log, rx) = sink();
        // The shell traps SIGINT and says so; its background child is in the same group
        // and must not outlive the stop.
        let script = "trap 'echo interrupted; exit 130' INT; sleep 60 & echo \"child $!\"; \
                      echo ready; while true; do sleep 0.1; done";
        let stop = StopSignal::new();
        let watcher = stop_when_ready(rx, &stop, Stop::Canceled);
        let end = run_step(
            sh(script, dir.path(), &env),
            &log,
            &stop,
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        assert!(matches!(end, StepEnd::Stopped(Stop::Canceled)), "{end:?}");
        drop(log);
        let seen = watcher.await.unwrap();
        assert!(seen.iter().any(|l| l == "interrupted"), "{seen:?}");
        let child: u32 = seen
            .iter()
            .find_map(|l| l.strip_prefix("child "))
            .and_then(|pid| pid.parse().ok())
            .unwrap();
        // Gone, or a zombie waiting for a reaper: either way no longer running.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            let state = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .chars()
                .next();
            if stat.is_empty() || state == Some('Z') {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the group's child {child} survived the stop"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Raises `reason` on `stop` once the command logged `ready` (its trap is set by
    /// then); returns every line logged.
    fn stop_when_ready(
        mut rx: tokio::sync::mpsc::Receiver<String>,
        stop: &StopSignal,
        reason: Stop,
    ) -> tokio::task::JoinHandle<Vec<String>> {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Some(line) = rx.recv().await {
                if line == "ready" {
                    stop.stop(reason);
                }
                seen.push(line);
            }
            seen
        })
    }

    #[tokio::test]
    async fn an_ignored_interrupt_is_followed_by_a_kill_after_the_grace() {
        let dir = tempfile::tempdir().unwrap();
        let env = path_env();
        let (log, rx) = sink();
        let stop = StopSignal::new();
        let watcher = stop_when_ready(rx, &stop, Stop::TimedOut);
        let started = Instant::now();
        let end = run_step(
            sh(
                "trap '' INT; echo ready; while true; do sleep 0.1; done",
                dir.path(),
                &env,
            ),
            &log,
            &stop,
            Duration::from_millis(500),
        )
        .await
        .unwrap();
        assert!(matches!(end, StepEnd::Stopped(Stop::TimedOut)), "{end:?}");
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(500) && took < Duration::from_secs(5));
        drop(log);
        let seen = watcher.await.unwrap();
        assert!(seen.iter().any(|l| l.contains("killing it")), "{seen:?}");
    }

    #[tokio::test]
    async fn fenced_kills_without_grace() {
        let dir = tempfile::tempdir().unwrap();
        let env = path_env();
        let (log, rx) = sink();
        let stop = StopSignal::new();
        let _watcher = stop_when_ready(rx, &stop, Stop::Fenced);
        let started = Instant::now();
        let end = run_step(
            sh(
                "trap '' INT; echo ready; while true; do sleep 0.1; done",
                dir.path(),
                &env,
            ),
            &log,
            &stop,
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        assert!(matches!(end, StepEnd::Stopped(Stop::Fenced)));
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn a_fenced_apply_gets_an_interrupt_and_time_to_write_its_state() {
        let dir = tempfile::tempdir().unwrap();
        let env = path_env();
        let (log, rx) = sink();
        let stop = StopSignal::new();
        let _watcher = stop_when_ready(rx, &stop, Stop::Fenced);
        let saved = dir.path().join("saved");
        // The engine saves its state when interrupted, taking a moment to.
        let script = format!(
            "trap 'sleep 0.5; echo state > {}; exit 1' INT; echo ready; while true; do sleep 0.1; done",
            saved.display()
        );
        let step = Step {
            fenced_grace: Some(Duration::from_secs(20)),
            ..sh(&script, dir.path(), &env)
        };
        let end = run_step(step, &log, &stop, Duration::from_millis(100))
            .await
            .unwrap();
        assert!(matches!(end, StepEnd::Stopped(Stop::Fenced)));
        assert_eq!(std::fs::read_to_string(&saved).unwrap(), "state\n");
    }

    #[tokio::test]
    async fn a_missing_program_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let (log, _rx) = sink();
        let step = Step {
            name: "nope",
            program: Path::new("/nonexistent/bin/nope"),
            args: vec![],
            cwd: dir.path(),
            env: &[],
            capture_stdout: false,
            header: None,
            fenced_grace: None,
            netns: None,
        };
        assert!(run_step(step, &log, &StopSignal::new(), Duration::ZERO)
            .await
            .is_err());
    }

    #[test]
    fn header_quotes_what_a_shell_would_split() {
        let args: Vec<OsString> = vec!["plan".into(), "-out=plan.tfplan".into(), "a b".into()];
        assert_eq!(
            display_command("tofu", &args),
            "$ tofu plan -out=plan.tfplan 'a b'"
        );
    }

    #[test]
    fn finds_programs_on_a_path() {
        let found = find_program("sh", std::ffi::OsStr::new("/nonexistent:/bin:/usr/bin"));
        assert!(found.is_some_and(|p| p.ends_with("sh")));
        assert!(find_program("no-such-program-xyz", std::ffi::OsStr::new("/bin")).is_none());
        assert_eq!(
            find_program("/opt/tofu", std::ffi::OsStr::new("")),
            Some(PathBuf::from("/opt/tofu"))
        );
    }
}
