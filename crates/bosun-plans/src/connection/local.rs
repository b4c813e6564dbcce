//! The `local` connection: commands as child processes of this machine.
//!
//! An argv is spawned directly, a command line through `sh -c`; `sudo` prefixes
//! `sudo -n --` (never prompts: a sudo that wants a password fails at once and the output
//! says so). Every command runs in its own process group with stdin closed or fed only
//! the request's bytes, and a timeout kills the whole group. Output goes to anonymous
//! temporary files rather than pipes, so a background process the command leaves behind
//! (a daemon it started) cannot hold the run open by keeping a pipe alive; a watched
//! command's files are read as they grow (every [`LIVE_POLL`]).

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::{CommandSpec, ConnError, Connection, Output, OutputTap, RunRequest, Stream};

/// How often a watched command's output files are read for what it printed since.
const LIVE_POLL: Duration = Duration::from_millis(100);
/// The most of one stream read per look; more waits for the next look.
const LIVE_READ: usize = 64 * 1024;

/// Runs commands on this machine.
#[derive(Debug, Clone)]
pub struct LocalConnection {
    /// The `sudo` program (looked up on PATH by default).
    sudo_program: PathBuf,
}

impl Default for LocalConnection {
    fn default() -> Self {
        LocalConnection::new()
    }
}

impl LocalConnection {
    pub fn new() -> Self {
        LocalConnection {
            sudo_program: PathBuf::from("sudo"),
        }
    }

    /// A connection that runs `program` for `sudo` (tests use a stand-in).
    pub fn with_sudo_program(program: impl Into<PathBuf>) -> Self {
        LocalConnection {
            sudo_program: program.into(),
        }
    }

    /// The program and arguments for `request`.
    fn argv(&self, request: &RunRequest) -> Result<(PathBuf, Vec<String>), ConnError> {
        let mut argv: Vec<String> = match &request.command {
            CommandSpec::Argv(argv) => argv.clone(),
            CommandSpec::Shell(line) => vec!["sh".into(), "-c".into(), line.clone()],
        };
        if argv.is_empty() {
            return Err(ConnError::Other("empty command".into()));
        }
        if request.sudo {
            let mut args = vec!["-n".to_string(), "--".to_string()];
            args.append(&mut argv);
            return Ok((self.sudo_program.clone(), args));
        }
        let program = PathBuf::from(argv.remove(0));
        Ok((program, argv))
    }
}

/// Whether a `sudo -n` failure means it wanted a password (or a terminal to ask on).
pub(crate) fn sudo_wants_password(exit_code: Option<i32>, stderr: &[u8]) -> bool {
    if exit_code != Some(1) {
        return false;
    }
    let text = String::from_utf8_lossy(stderr);
    text.contains("a password is required") || text.contains("a terminal is required")
}

/// Sends SIGKILL to process group `pgid`; a group that is already gone is fine.
fn kill_group(pgid: i32) {
    if pgid <= 1 {
        return;
    }
    // SAFETY: killpg has no memory-safety preconditions; a stale or empty group only makes
    // it fail with ESRCH, which is ignored.
    unsafe {
        libc::killpg(pgid, libc::SIGKILL);
    }
}

/// Kills the command's group when dropped unless disarmed: a cancelled run (the future
/// dropped, e.g. by the executor's step timeout) leaves nothing running.
struct GroupGuard {
    pgid: i32,
    armed: bool,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            kill_group(self.pgid);
        }
    }
}

fn io_error(what: &str, e: std::io::Error) -> ConnError {
    ConnError::Other(format!("{what}: {e}"))
}

/// Reads a whole output file from its start.
fn read_all(mut file: std::fs::File) -> std::io::Result<Vec<u8>> {
    file.seek(SeekFrom::Start(0))?;
    let mut buf = Vec::new();
    file.read_to_end(&mut buf)?;
    Ok(buf)
}

/// A watched command's output files, read as they grow; each stream's bytes go to the
/// tap once, in order.
struct Tail<'a> {
    tap: &'a OutputTap<'a>,
    files: [(Stream, std::fs::File, usize); 2],
    buf: Vec<u8>,
}

impl<'a> Tail<'a> {
    fn new(
        tap: &'a OutputTap<'a>,
        stdout: &std::fs::File,
        stderr: &std::fs::File,
    ) -> Result<Self, ConnError> {
        let clone = |f: &std::fs::File| {
            f.try_clone()
                .map_err(|e| io_error("cannot share an output file", e))
        };
        Ok(Tail {
            tap,
            files: [
                (Stream::Stdout, clone(stdout)?, 0),
                (Stream::Stderr, clone(stderr)?, 0),
            ],
            buf: vec![0; LIVE_READ],
        })
    }

    /// Hands over what each file gained since the last look (at most [`LIVE_READ`]
    /// each). A short positional read of a file just written, so it does not leave the
    /// task; a failed read only delays the bytes to the end ([`Tail::rest`]).
    fn look(&mut self) {
        let buf = &mut self.buf;
        for (stream, file, offset) in &mut self.files {
            if let Ok(n) = file.read_at(buf, *offset as u64) {
                if n > 0 {
                    (self.tap)(*stream, &buf[..n]);
                    *offset += n;
                }
            }
        }
    }

    /// Hands over what the last look had not, from the whole output.
    fn rest(&self, stdout: &[u8], stderr: &[u8]) {
        for (stream, _, offset) in &self.files {
            let all = match stream {
                Stream::Stdout => stdout,
                Stream::Stderr => stderr,
            };
            if let Some(new) = all.get(*offset..).filter(|b| !b.is_empty()) {
                (self.tap)(*stream, new);
            }
        }
    }
}

#[async_trait]
impl Connection for LocalConnection {
    async fn run(&self, request: &RunRequest) -> Result<Output, ConnError> {
        self.execute(request, None).await
    }

    async fn run_live(
        &self,
        request: &RunRequest,
        live: &OutputTap<'_>,
    ) -> Result<Output, ConnError> {
        self.execute(request, Some(live)).await
    }

    async fn close(&self) {}
}

impl LocalConnection {
    async fn execute(
        &self,
        request: &RunRequest,
        live: Option<&OutputTap<'_>>,
    ) -> Result<Output, ConnError> {
        let (program, args) = self.argv(request)?;
        let stdout_file =
            tempfile::tempfile().map_err(|e| io_error("cannot create an output file", e))?;
        let stderr_file =
            tempfile::tempfile().map_err(|e| io_error("cannot create an output file", e))?;
        let mut cmd = Command::new(&program);
        cmd.args(&args)
            .stdin(if request.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::from(
                stdout_file
                    .try_clone()
                    .map_err(|e| io_error("cannot share an output file", e))?,
            ))
            .stderr(Stdio::from(
                stderr_file
                    .try_clone()
                    .map_err(|e| io_error("cannot share an output file", e))?,
            ))
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .map_err(|e| io_error(&format!("cannot start {}", program.display()), e))?;
        let pgid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .unwrap_or(0);
        let mut guard = GroupGuard { pgid, armed: true };

        // Feed stdin from its own task, then close it; a command that never reads it
        // (or exits early) only makes the write fail, which is not an error of the run.
        let feeder = match (child.stdin.take(), &request.stdin) {
            (Some(mut pipe), Some(bytes)) => {
                let bytes = bytes.clone();
                Some(tokio::spawn(async move {
                    let _ = pipe.write_all(&bytes).await;
                    let _ = pipe.shutdown().await;
                    drop(pipe);
                }))
            }
            _ => None,
        };

        let mut tail = match live {
            Some(tap) => Some(Tail::new(tap, &stdout_file, &stderr_file)?),
            None => None,
        };
        let wait = async {
            match request.timeout {
                Some(limit) => tokio::time::timeout(limit, child.wait()).await.ok(),
                None => Some(child.wait().await),
            }
        };
        let waited = match &mut tail {
            None => wait.await,
            Some(tail) => {
                tokio::pin!(wait);
                let mut looks = tokio::time::interval(LIVE_POLL);
                looks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        waited = &mut wait => break waited,
                        _ = looks.tick() => tail.look(),
                    }
                }
            }
        };
        let (exit_code, timed_out) = match waited {
            Some(status) => {
                let status = status.map_err(|e| io_error("waiting for the command", e))?;
                (status.code(), false)
            }
            None => {
                kill_group(pgid);
                let _ = child.wait().await;
                (None, true)
            }
        };
        // Background processes it started may stay (a service it launched): only a
        // timeout or a cancelled run takes the group down.
        guard.armed = timed_out;
        drop(guard);
        if let Some(feeder) = feeder {
            feeder.abort();
        }
        let (stdout, stderr) = tokio::task::spawn_blocking(move || {
            Ok::<_, std::io::Error>((read_all(stdout_file)?, read_all(stderr_file)?))
        })
        .await
        .map_err(|e| ConnError::Other(format!("reading the command's output: {e}")))?
        .map_err(|e| io_error("reading the command's output", e))?;
        if let Some(tail) = &tail {
            tail.rest(&stdout, &stderr);
        }
        let sudo_password_required = request.sudo && sudo_wants_password(exit_code, &stderr);
        Ok(Output {
            exit_code,
            stdout,
            stderr,
            timed_out,
            sudo_password_required,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    fn req(command: CommandSpec) -> RunRequest {
        RunRequest {
            command,
            sudo: false,
            stdin: None,
            timeout: None,
        }
    }

    fn argv(a: &[&str]) -> CommandSpec {
        CommandSpec::Argv(a.iter().map(|s| s.to_string()).collect())
    }

    #[tokio::test]
    async fn argv_runs_without_a_shell() {
        let out = LocalConnection::new()
            .run(&req(argv(&["printf", "%s|", "a b", "$HOME", "*"])))
            .await
            .unwrap();
        assert_eq!(out.exit_code, Some(0));
        assert_eq!(out.stdout, b"a b|$HOME|*|");
    }

    #[tokio::test]
    async fn shell_lines_go_through_sh() {
        let out = LocalConnection::new()
            .run(&req(CommandSpec::Shell(
                "echo out; echo err >&2; exit 7".into(),
            )))
            .await
            .unwrap();
        assert_eq!(out.exit_code, Some(7));
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
        assert!(!out.timed_out);
    }

    #[tokio::test]
    async fn stdin_is_closed_or_fed_then_closed() {
        let conn = LocalConnection::new();
        let out = conn.run(&req(argv(&["cat"]))).await.unwrap();
        assert_eq!(out.exit_code, Some(0));
        assert!(out.stdout.is_empty());
        let mut r = req(argv(&["cat"]));
        r.stdin = Some(b"hello\nworld".to_vec());
        let out = conn.run(&r).await.unwrap();
        assert_eq!(out.stdout, b"hello\nworld");
        // A command that does not read its stdin still finishes.
        let mut r = req(argv(&["true"]));
        r.stdin = Some(vec![b'x'; 1 << 20]);
        let out = conn.run(&r).await.unwrap();
        assert_eq!(out.exit_code, Some(0));
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("survived");
        let line = format!("(sleep 2; touch '{}') & sleep 30", marker.to_str().unwrap());
        let mut r = req(CommandSpec::Shell(line));
        r.timeout = Some(Duration::from_millis(300));
        let started = Instant::now();
        let out = LocalConnection::new().run(&r).await.unwrap();
        assert!(out.timed_out);
        assert_eq!(out.exit_code, None);
        assert!(started.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(
            !marker.exists(),
            "the background child outlived the timeout"
        );
    }

    #[tokio::test]
    async fn a_background_process_does_not_hold_the_command_open() {
        let started = Instant::now();
        let out = LocalConnection::new()
            .run(&req(CommandSpec::Shell("sleep 5 & echo started".into())))
            .await
            .unwrap();
        assert_eq!(out.exit_code, Some(0));
        assert_eq!(out.stdout, b"started\n");
        assert!(started.elapsed() < Duration::from_secs(4));
    }

    #[tokio::test]
    async fn a_watched_command_is_seen_while_it_runs() {
        let dir = tempfile::tempdir().unwrap();
        let go = dir.path().join("go");
        // The command goes on only once the test has seen its first line.
        let mut r = req(CommandSpec::Shell(format!(
            "echo first; echo oops >&2; while [ ! -e '{}' ]; do sleep 0.02; done; echo second",
            go.display()
        )));
        r.timeout = Some(Duration::from_secs(60));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let tap = move |stream: Stream, bytes: &[u8]| {
            let _ = tx.send((stream, bytes.to_vec()));
        };
        let conn = LocalConnection::new();
        let mut seen: Vec<(Stream, Vec<u8>)> = Vec::new();
        let watch = async {
            let printed = |seen: &[(Stream, Vec<u8>)], stream| {
                seen.iter()
                    .filter(|(s, _)| *s == stream)
                    .flat_map(|(_, b)| b.clone())
                    .collect::<Vec<u8>>()
            };
            while printed(&seen, Stream::Stdout) != b"first\n" {
                let got = tokio::time::timeout(Duration::from_secs(20), rx.recv())
                    .await
                    .expect("the first line is seen while the command waits")
                    .unwrap();
                seen.push(got);
            }
            std::fs::write(&go, "").unwrap();
        };
        let (out, ()) = tokio::join!(conn.run_live(&r, &tap), watch);
        let out = out.unwrap();
        assert_eq!(out.exit_code, Some(0));
        assert_eq!(out.stdout, b"first\nsecond\n");
        drop(tap);
        while let Some(got) = rx.recv().await {
            seen.push(got);
        }
        // Every byte once, in order, per stream.
        let all = |stream| {
            seen.iter()
                .filter(|(s, _)| *s == stream)
                .flat_map(|(_, b)| b.clone())
                .collect::<Vec<u8>>()
        };
        assert_eq!(all(Stream::Stdout), out.stdout);
        assert_eq!(all(Stream::Stderr), b"oops\n");
    }

    #[tokio::test]
    async fn a_missing_program_is_an_error() {
        let err = LocalConnection::new()
            .run(&req(argv(&["/nonexistent/bosun-test-program"])))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("cannot start"), "{err}");
    }

    #[tokio::test]
    async fn sudo_is_non_interactive_and_a_password_prompt_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        // A stand-in for sudo: records its arguments, then refuses like `sudo -n` does.
        let fake = dir.path().join("sudo");
        let args_file = dir.path().join("args");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\necho 'sudo: a password is required' >&2\nexit 1\n",
                args_file.to_str().unwrap()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let conn = LocalConnection::with_sudo_program(&fake);
        let mut r = req(CommandSpec::Shell("id -u".into()));
        r.sudo = true;
        let out = conn.run(&r).await.unwrap();
        assert!(out.sudo_password_required);
        assert_eq!(out.exit_code, Some(1));
        assert_eq!(
            std::fs::read_to_string(&args_file).unwrap(),
            "-n\n--\nsh\n-c\nid -u\n"
        );
        // The same words from a command without sudo are just output.
        let out = conn
            .run(&req(CommandSpec::Shell(
                "echo 'a password is required' >&2; exit 1".into(),
            )))
            .await
            .unwrap();
        assert!(!out.sudo_password_required);
    }
}
