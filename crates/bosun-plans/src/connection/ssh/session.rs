//! One long-lived remote shell per connection: every command of a run goes through it
//! as a framed request, so a host's login shell (its profile, `~/.bashrc`, pyenv or conda
//! init, motd) is paid once per connection instead of once per command.
//!
//! **The session** is a channel running `exec sh -c '<LOOP>'`: a POSIX `sh` loop that
//! reads a byte count, then that many bytes of shell code, and `eval`s them; end of input
//! ends it. Nothing is installed or left on the host.
//!
//! **A request** is code the client writes for one command ([`request_code`]): it prints
//! a fresh random nonce on stdout and on stderr (the *begin* marks), runs the command as
//! `setsid sh -c '<command line>'` — a process group of its own, whose leader says its
//! pid on stderr as the per-command channel does ([`super::PGID_MARKER`]), so a stop
//! kills the group exactly as before — then prints the nonce again on both streams, with
//! the exit status on stdout (the *end* marks). The command's stdin is `/dev/null`, or
//! `head -c N` of the bytes that follow the code on the session's input, piped in; what
//! the command leaves unread is drained, so the session's input stays in step. Each
//! command is its own process (its own environment and working directory), with its own
//! timeout (`timeout`, as before), under `sudo -n` when asked.
//!
//! **Framing back** ([`Frame`]): the command writes straight to the session's stdout and
//! stderr, byte for byte; the client keeps what lies between a stream's begin and end
//! marks. Anything before the begin mark — a login shell's banner, or the late output of
//! a process an earlier command left running — is not the command's and is dropped. The
//! nonce is new for every request, so no output can end a frame by accident.
//!
//! **sudo**: commands of a `sudo` step go to a second session whose loop runs under
//! `sudo -n` ([`Kind::Sudo`]): one sudo (its PAM session, its log line) per connection
//! instead of one per command. Where sudo will not start it — a password wanted, or
//! sudoers allowing only some commands — each such command runs in the login session
//! under `sudo -n` itself, so rules written for the commands still match.
//!
//! **Exit status**: as a shell reports it — a command killed by signal `N` exits
//! `128 + N`.
//!
//! **When it cannot be used**: the loop ends at once on a host without `setsid` or
//! `head`, and the first request ([`HELLO`]) checks that `head -c` reads no further than
//! asked; a host that fails either, or does not finish the hello within the connect
//! timeout of its begin mark, runs each command on a channel of its own instead (the
//! connection remembers). The login shell before that mark may take up to
//! [`LOGIN_WAIT`] (start-up files on a loaded host): a slow login is not a reason to
//! give sessions up, which would pay it again for every command. A session that ends while a command runs fails
//! that command ([`super::ConnError::Lost`], naming how it ended) and is not reused; the
//! next command opens a new one.

use std::hash::{BuildHasher as _, Hasher as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use russh::client::{self, Handle};
use russh::{ChannelMsg, ChannelWriteHalf};

use super::output::Collected;
use super::{lost, open_channel, shell_quote, ClientHandler};
use crate::connection::{ConnError, OutputTap};

/// The remote loop: a byte count on a line, then that much shell code, evaluated.
/// `read` takes one byte at a time from a pipe and `head -c` no more than it is asked,
/// so the code's own reads (a command's stdin bytes) start exactly after it. A host
/// without `head` or `setsid` ends it at once (status 97).
pub const LOOP: &str = r#"command -v head >/dev/null 2>&1 && command -v setsid >/dev/null 2>&1 || exit 97; while IFS= read -r n; do eval "$(head -c "$n")"; done"#;

/// The first request's code (after its begin marks): exit status 0 when `head -c 3`
/// followed by `read` splits `abcdef\n` exactly (a `head` that reads ahead would leave
/// `read` waiting, and the hello would time out).
pub const HELLO: &str = r#"a=$(head -c 3); IFS= read -r b; c=0; [ "$a$b" = abcdef ] || c=2"#;

/// The bytes that follow [`HELLO`] on the session's input.
const HELLO_INPUT: &[u8] = b"abcdef\n";

/// Which user a session's commands run as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// The login user.
    Login = 0,
    /// Root: the loop itself runs under `sudo -n`.
    Sudo = 1,
}

/// An open session: the channel running [`LOOP`], between requests.
pub(super) struct Session {
    pub(super) rx: russh::ChannelReadHalf,
    pub(super) tx: Arc<ChannelWriteHalf<client::Msg>>,
    pub(super) kind: Kind,
}

/// Opens a session of `kind` (under `sudo -n` for [`Kind::Sudo`]) and runs [`HELLO`] on
/// it within `limit`. `Ok(None)`: this host cannot run such sessions (its answer, or its
/// silence, said so; for sudo: sudo refused, wants a password, or allows only some
/// commands).
pub(super) async fn open(
    handle: &Handle<ClientHandler>,
    host: &str,
    limit: Duration,
    kind: Kind,
) -> Result<Option<Session>, ConnError> {
    let channel = open_channel(handle, host).await?;
    let (mut rx, tx) = channel.split();
    let sudo = match kind {
        Kind::Login => "",
        Kind::Sudo => "sudo -n -- ",
    };
    let line = format!("exec {sudo}sh -c {}", shell_quote(LOOP));
    if let Err(e) = tx.exec(true, line.into_bytes()).await {
        return Err(lost(host, format!("cannot start a remote shell: {e}")));
    }
    let nonce = nonce();
    let mut input = request_bytes(&framed(&nonce, HELLO));
    input.extend_from_slice(HELLO_INPUT);
    // The login shell may take long on a loaded host (its start-up files): that is no
    // reason to give up on sessions, so the hello's own limit starts at its begin mark.
    let hello = async {
        tx.data(&input[..]).await.ok()?;
        let mut frame = Frame::new(nonce);
        let mut got = Collected::default();
        let mut deadline = tokio::time::Instant::now() + LOGIN_WAIT;
        let mut begun = false;
        loop {
            let read = tokio::time::timeout_at(deadline, frame.read(&mut rx, &mut got, None));
            match read.await {
                Err(_) if !begun => return Some(Hello::NoLogin),
                Err(_) => return None,
                Ok(Read::Done) => return (got.exit_code == Some(0)).then_some(Hello::Ready),
                Ok(Read::More) => {
                    if !begun && frame.started() {
                        begun = true;
                        deadline = tokio::time::Instant::now() + limit;
                    }
                }
                Ok(Read::Ended(_)) => return None,
            }
        }
    };
    let outcome = hello.await;
    if let Some(Hello::Ready) = outcome {
        return Ok(Some(Session {
            rx,
            tx: Arc::new(tx),
            kind,
        }));
    }
    let _ = tx.eof().await;
    let _ = tx.close().await;
    match outcome {
        Some(Hello::NoLogin) => Err(lost(
            host,
            format!(
                "the login shell did not start within {} s",
                LOGIN_WAIT.as_secs()
            ),
        )),
        _ => Ok(None),
    }
}

/// How a hello went, when it did not show the host unable to run sessions.
enum Hello {
    Ready,
    /// Nothing came back at all: the login shell never finished starting.
    NoLogin,
}

/// How long a new session's login shell may take to start (its start-up files, on a
/// loaded host) before the connection is given up on.
pub const LOGIN_WAIT: Duration = Duration::from_secs(120);

/// A fresh nonce: `bosun-` and 32 hex digits, from the process's random hash keys and a
/// counter (it must only never occur in a command's output by chance).
pub(super) fn nonce() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let keys = std::collections::hash_map::RandomState::new();
    let half = |salt: u64| {
        let mut h = keys.build_hasher();
        h.write_u64(n);
        h.write_u64(salt);
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default(),
        );
        h.finish()
    };
    format!("bosun-{:016x}{:016x}", half(1), half(2))
}

/// `body` between the begin and end marks of `nonce`; `body` leaves the status in `c`.
fn framed(nonce: &str, body: &str) -> String {
    format!("{}; {body}; {}\n", begin_marks(nonce), end_marks(nonce))
}

/// The code that prints the begin marks: the nonce on stdout and on stderr.
fn begin_marks(nonce: &str) -> String {
    format!("printf %s {nonce}; printf %s {nonce} >&2")
}

/// The code that prints the end marks: the nonce and the status in `c` (then `;`) on
/// stdout, the nonce on stderr.
fn end_marks(nonce: &str) -> String {
    format!("printf '%s%s;' {nonce} \"$c\"; printf %s {nonce} >&2")
}

/// The code that runs `line` (a remote command line, see `command.rs`) with `stdin_len`
/// bytes of stdin following the code (`None`: stdin is `/dev/null`).
pub(super) fn request_code(nonce: &str, line: &str, stdin_len: Option<usize>) -> String {
    let run = format!("setsid sh -c {}", shell_quote(line));
    match stdin_len {
        None => framed(nonce, &format!("{run} </dev/null; c=$?")),
        // The group reads all the bytes whatever the command left, then reports.
        Some(n) => format!(
            "{}; head -c {n} | {{ {run}; c=$?; cat >/dev/null; {}; }}\n",
            begin_marks(nonce),
            end_marks(nonce)
        ),
    }
}

/// What the session's input gets for `code`: its length on a line, then the code.
pub(super) fn request_bytes(code: &str) -> Vec<u8> {
    let mut bytes = format!("{}\n", code.len()).into_bytes();
    bytes.extend_from_slice(code.as_bytes());
    bytes
}

/// Where one stream of a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    /// Before the begin mark: bytes here are not the command's.
    Before,
    /// Inside: the command's bytes, up to the end mark.
    Inside,
    /// Stdout only: past the end mark, reading the exit status up to its `;`.
    Status,
    /// Done: later bytes are not the command's.
    After,
}

/// What one read of a frame came to.
pub(super) enum Read {
    /// Both streams have reached their end marks.
    Done,
    More,
    /// The session ended (how, for the error).
    Ended(String),
}

/// The longest exit status an end mark carries (`-2147483648;` and then some).
const STATUS_MAX: usize = 12;

/// The reader of one request's answer: both streams' marks, the command's bytes handed
/// to [`Collected`] (which cuts the process group marker from stderr).
pub(super) struct Frame {
    nonce: Vec<u8>,
    /// Per stream: stdout, stderr.
    marks: [Mark; 2],
    /// Per stream: bytes not yet known not to start a mark.
    pending: [Vec<u8>; 2],
}

impl Frame {
    pub(super) fn new(nonce: String) -> Self {
        Frame {
            nonce: nonce.into_bytes(),
            marks: [Mark::Before; 2],
            pending: [Vec::new(), Vec::new()],
        }
    }

    /// Whether a begin mark has been read: the command has been started.
    pub(super) fn started(&self) -> bool {
        self.marks != [Mark::Before; 2]
    }

    pub(super) fn done(&self) -> bool {
        self.marks == [Mark::After; 2]
    }

    /// Reads one message; `live` sees the command's output as it comes.
    pub(super) async fn read(
        &mut self,
        rx: &mut russh::ChannelReadHalf,
        got: &mut Collected,
        live: Option<&OutputTap<'_>>,
    ) -> Read {
        let read = match rx.wait().await {
            Some(ChannelMsg::Data { data }) => {
                self.push(0, &data, got);
                Read::More
            }
            Some(ChannelMsg::ExtendedData { data, ext: 1 }) => {
                self.push(1, &data, got);
                Read::More
            }
            Some(ChannelMsg::ExitStatus { exit_status }) => {
                Read::Ended(format!("the remote shell exited with status {exit_status}"))
            }
            Some(ChannelMsg::ExitSignal { signal_name, .. }) => {
                Read::Ended(format!("the remote shell was killed ({signal_name:?})"))
            }
            Some(ChannelMsg::Eof | ChannelMsg::Close) | None => {
                Read::Ended("the remote shell ended".into())
            }
            Some(_) => Read::More,
        };
        if let Some(live) = live {
            got.show(live, self.done());
        }
        match read {
            Read::More if self.done() => Read::Done,
            other => other,
        }
    }

    /// Takes bytes of stream `i` (0 stdout, 1 stderr).
    pub(super) fn push(&mut self, i: usize, data: &[u8], got: &mut Collected) {
        let pending = &mut self.pending[i];
        pending.extend_from_slice(data);
        loop {
            match self.marks[i] {
                Mark::Before => match find(pending, &self.nonce) {
                    Some(at) => {
                        pending.drain(..at + self.nonce.len());
                        self.marks[i] = Mark::Inside;
                    }
                    None => {
                        let cut = pending.len() - partial_mark(pending, &self.nonce);
                        pending.drain(..cut);
                        return;
                    }
                },
                Mark::Inside => {
                    let found = find(pending, &self.nonce);
                    // Held back: only what could be the start of the end mark.
                    let take =
                        found.unwrap_or_else(|| pending.len() - partial_mark(pending, &self.nonce));
                    if i == 0 {
                        got.stdout.extend_from_slice(&pending[..take]);
                    } else {
                        got.push_stderr(&pending[..take]);
                    }
                    pending.drain(..take);
                    if found.is_none() {
                        return;
                    }
                    pending.drain(..self.nonce.len());
                    self.marks[i] = if i == 0 { Mark::Status } else { Mark::After };
                }
                Mark::Status => {
                    let Some(end) = pending.iter().position(|&b| b == b';') else {
                        if pending.len() > STATUS_MAX {
                            // Not a status: the frame is broken; report a failure.
                            got.exit_code = Some(255);
                            self.marks[i] = Mark::After;
                            continue;
                        }
                        return;
                    };
                    got.exit_code = std::str::from_utf8(&pending[..end])
                        .ok()
                        .and_then(|s| s.parse::<i32>().ok())
                        .or(Some(255));
                    self.marks[i] = Mark::After;
                }
                Mark::After => {
                    // Late bytes after the end mark are not the command's.
                    pending.clear();
                    return;
                }
            }
        }
    }
}

/// How many of the last bytes of `bytes` could begin `mark` (its longest prefix that
/// `bytes` ends with, shorter than `mark` itself).
fn partial_mark(bytes: &[u8], mark: &[u8]) -> usize {
    (1..mark.len().min(bytes.len() + 1))
        .rev()
        .find(|&k| bytes.ends_with(&mark[..k]))
        .unwrap_or(0)
}

/// Where `needle` first occurs in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
