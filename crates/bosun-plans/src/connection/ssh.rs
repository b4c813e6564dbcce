//! The `ssh` connection, on [`russh`] (async, pure Rust): one TCP connection and SSH
//! session per host, reused across steps, one channel per command — so a run over 1,000
//! hosts is 1,000 tokio tasks, not 1,000 `ssh` processes, and concurrent `run`s on one
//! connection share it.
//!
//! **Host keys are always verified.** A pinned `host_key` must equal the server's key;
//! otherwise the server's key must be in `known_hosts` (the host's file, or by default
//! `~/.ssh/known_hosts` then `/etc/ssh/ssh_known_hosts`) under the name OpenSSH would use
//! — `address` on port 22, `[address]:port` otherwise — as a plain, wildcard (`*`, `?`,
//! `!` negation) or hashed (`|1|salt|hash`) entry. An unknown key and a changed key are
//! both refused ([`ConnError::HostKey`]), as is a key marked `@revoked`. The key types a
//! host is known by are offered first, so a host known only by its RSA key is asked
//! for that one.
//!
//! **Authentication** uses `identity_file` (unencrypted ed25519/ECDSA/RSA) if set; else
//! the agent (`SSH_AUTH_SOCK`) if there is one, then `~/.ssh/id_ed25519`, `id_ecdsa`,
//! `id_rsa`. The user is `user` or the local user. Nothing ever prompts.
//!
//! **Commands**: an argv is single-quoted word by word (POSIX: `'` becomes `'\''`) into
//! one command line, a shell command becomes `sh -c '<line>'`, `sudo` prefixes
//! `sudo -n --` (a sudo that wants a password fails at once: exit 1 with "a password is
//! required" or "a terminal is required" sets `sudo_password_required`). The remote shell
//! first writes its pid to stderr (`bosun-pgid:<pid>`, [`PGID_MARKER`]; the client cuts
//! that line out, so stderr stays byte-exact), then `exec`s the command: the command
//! keeps that pid, which is also its process group's id, since OpenSSH starts every
//! session's shell with `setsid`. No extra process and no extra round trip. stdin gets
//! the request's bytes then EOF, or EOF at once, so nothing can wait on a prompt.
//!
//! **Stopping a command** — its `run` future dropped (a cancelled or aborted run), or a
//! timeout the host could not enforce — is done from a second channel on the same
//! session: [`kill_line`] sends `TERM` to the command's process group, then `KILL` to
//! whatever of it is left after 2 s; through `sudo -n` when the command ran with sudo
//! (falling back to the login user, whose `TERM` sudo relays to its command). This works
//! for any login, root included: OpenSSH refuses signal requests in root sessions and
//! does not kill a command without a PTY when its channel closes, so neither is relied
//! on (a `TERM` signal request remains the fallback when a host's shell never said its
//! pid). A drop cannot wait, so the stop runs as a task on the runtime that holds the
//! session open (and the command's place among [`MAX_CHANNELS`]) until it is done; one
//! session is kept free of commands so a stop always finds one. A cancel that lands
//! before the pid arrived reads the channel for it first. Processes the command moved
//! to other process groups or sessions (daemons) are not reached — except under sudo's
//! `use_pty` (Debian's default), where the command runs in a session of its own: sudo
//! relays the `TERM` to it, and once `KILL` ends sudo its pty hangs the command up.
//!
//! **Timeouts** are enforced on the host, where the processes are: a command with a
//! timeout runs under coreutils' `timeout -k 5 <T>` when the host has it. `timeout`
//! signals the command's whole process group at `T` (`TERM`, then `KILL` 5 s on), so
//! nothing the command started lingers, and exits 124, which — once `T` has passed — is
//! reported as `timed_out` with no exit code (output so far is kept). The client waits
//! [`TIMEOUT_GRACE`] longer; if the command is still running then (no `timeout` on the
//! host), the client stops it as above, closes the channel and reports `timed_out`. With
//! `sudo`, `timeout` wraps `sudo` (so sudoers rules written for the command itself still
//! match) and sudo relays the signal to the command.
//!
//! **Output**: stdout, stderr and the exit status, read until the server closes the
//! channel. A command that exits while a background process it started still holds its
//! output open is not waited for beyond [`LINGER_AFTER_EXIT`] of silence.
//!
//! At most [`MAX_CHANNELS`] − 1 commands run at once on one connection (OpenSSH's
//! default `MaxSessions`, less the one kept for stops); more wait their turn, and a
//! channel the server still refuses for lack of sessions is retried briefly. A
//! connection that drops fails its commands with [`ConnError::Lost`]; keepalives notice
//! a silent peer.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use base64::Engine as _;
use hmac::Mac as _;
use russh::client::{self, Handle};
use russh::keys::ssh_key::PublicKey;
use russh::keys::{Algorithm, HashAlg, PrivateKeyWithHashAlg, PublicKeyOrCertificate};
use russh::{ChannelMsg, ChannelOpenFailure, ChannelWriteHalf, Sig};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{CommandSpec, ConnError, ConnectOptions, Connection, Output, RunRequest};
use crate::model::Host;

/// Channels open at once on one connection: OpenSSH's default `MaxSessions`. Commands get
/// one fewer: the last is kept for stopping them.
pub const MAX_CHANNELS: usize = 10;

/// After a command's exit status, how long a still-open channel may stay silent before
/// the command is considered done (a background process holding its output open).
pub const LINGER_AFTER_EXIT: Duration = Duration::from_secs(2);

/// The grace `timeout -k` gives a command between `TERM` and `KILL`.
const KILL_AFTER_SECS: u64 = 5;

/// How long past a request's timeout the client waits for the host's `timeout` to
/// report before it gives up on the command itself.
pub const TIMEOUT_GRACE: Duration = Duration::from_secs(2);

/// coreutils `timeout`'s exit status when it stopped the command.
const TIMEOUT_EXIT: i32 = 124;

/// How long to keep retrying a channel the server refuses for lack of sessions.
const CHANNEL_RETRY_FOR: Duration = Duration::from_secs(10);

/// What the remote shell writes to stderr before it becomes the command:
/// `bosun-pgid:<its pid>\n`. The client strips it from the output.
pub const PGID_MARKER: &str = "bosun-pgid:";

/// How long a cancelled command's channel is read for its process group id (a cancel
/// that lands before the remote shell reported it).
const PGID_WAIT: Duration = Duration::from_secs(5);

/// How long a stop (a second channel running `kill`) may take before it is given up on.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// An open, authenticated SSH connection to one host.
pub struct SshConnection {
    /// The host's name, for errors.
    host: String,
    /// Shared with the stops of cancelled commands, which outlive their `run`.
    handle: Arc<Handle<ClientHandler>>,
    /// Permits for commands: one session fewer than [`MAX_CHANNELS`], so a stop always
    /// finds a free session even when every command is stuck.
    channels: Arc<Semaphore>,
}

impl std::fmt::Debug for SshConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshConnection")
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

impl SshConnection {
    /// Resolves, connects, verifies the host key and authenticates, each stage within
    /// `options.connect_timeout`.
    pub async fn connect(host: &Host, options: &ConnectOptions) -> Result<Self, ConnError> {
        let addrs = resolve(host, options.connect_timeout).await?;
        let (stream, _addr) = tcp_connect(host, &addrs, options.connect_timeout).await?;
        let (mut handle, _trust) = handshake(host, stream, options.connect_timeout).await?;
        authenticate(host, &mut handle, options.connect_timeout).await?;
        Ok(SshConnection::from_handle(host, handle))
    }

    /// Wraps an authenticated session (the host check builds one stage by stage).
    pub(crate) fn from_handle(host: &Host, handle: Handle<ClientHandler>) -> Self {
        SshConnection {
            host: host.name.clone(),
            handle: Arc::new(handle),
            channels: Arc::new(Semaphore::new(MAX_CHANNELS - 1)),
        }
    }

    fn lost(&self, reason: impl Into<String>) -> ConnError {
        lost(&self.host, reason)
    }
}

fn lost(host: &str, reason: impl Into<String>) -> ConnError {
    ConnError::Lost {
        host: host.to_string(),
        reason: reason.into(),
    }
}

/// Opens a session channel, retrying while the server refuses for lack of sessions: its
/// `MaxSessions` may be lower than ours, and OpenSSH frees a session slot only after it
/// has sent the channel's close (it then refuses with "connect failed").
async fn open_channel(
    handle: &Handle<ClientHandler>,
    host: &str,
) -> Result<russh::Channel<client::Msg>, ConnError> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(20);
    loop {
        if handle.is_closed() {
            return Err(lost(host, "the SSH session has ended"));
        }
        match handle.channel_open_session().await {
            Ok(channel) => return Ok(channel),
            Err(russh::Error::ChannelOpenFailure(
                ChannelOpenFailure::AdministrativelyProhibited
                | ChannelOpenFailure::ResourceShortage
                | ChannelOpenFailure::ConnectFailed,
            )) if started.elapsed() < CHANNEL_RETRY_FOR => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(500));
            }
            Err(russh::Error::ChannelOpenFailure(reason)) => {
                return Err(ConnError::Other(format!(
                    "{host}: the server refused a session channel ({reason:?})"
                )))
            }
            Err(e) => return Err(lost(host, format!("cannot open a channel: {e}"))),
        }
    }
}

#[async_trait]
impl Connection for SshConnection {
    async fn run(&self, request: &RunRequest) -> Result<Output, ConnError> {
        let line = command_line(request)?;
        let permit = Arc::clone(&self.channels)
            .acquire_owned()
            .await
            .map_err(|_| self.lost("connection closed"))?;
        let channel = open_channel(&self.handle, &self.host).await?;
        let (rx, tx) = channel.split();
        let tx = Arc::new(tx);
        // From here on, a dropped future stops the command (see `Running`'s `Drop`).
        let mut running = Running {
            handle: Arc::clone(&self.handle),
            tx: Arc::clone(&tx),
            rx: Some(rx),
            got: Collected::default(),
            sudo: request.sudo,
            armed: true,
            permit: Some(permit),
        };
        if let Err(e) = tx.exec(true, line.into_bytes()).await {
            running.armed = false;
            return Err(self.lost(format!("cannot start the command: {e}")));
        }

        let feed = async {
            if let Some(bytes) = &request.stdin {
                // A command that exits without reading its stdin closes the channel
                // under us; that is its business, not an error.
                let _ = tx.data(&bytes[..]).await;
            }
            let _ = tx.eof().await;
        };
        let Running {
            rx: Some(rx), got, ..
        } = &mut running
        else {
            // Set above; only a stop takes it.
            return Err(self.lost("the command's channel is gone"));
        };
        let work = async {
            // Feeding stops when the command is done (it may never read all of stdin).
            tokio::pin!(feed);
            let collecting = collect(rx, got);
            tokio::pin!(collecting);
            let mut fed = false;
            loop {
                tokio::select! {
                    () = &mut feed, if !fed => fed = true,
                    () = &mut collecting => break,
                }
            }
        };
        let started = Instant::now();
        let gave_up = match request.timeout {
            Some(limit) => tokio::time::timeout(limit + TIMEOUT_GRACE, work)
                .await
                .is_err(),
            None => {
                work.await;
                false
            }
        };
        if gave_up {
            // The host's `timeout` did not end it (missing, or the command outlived the
            // KILL grace): stop its process group ourselves, then let the channel go
            // (still armed: dropped meanwhile, the stop is finished from a task).
            let rx = running.rx.take();
            stop(&self.handle, &tx, rx, &mut running.got, request.sudo).await;
        }
        running.armed = false;
        let got = std::mem::take(&mut running.got);
        // `timeout` exits 124 when it had to stop the command.
        let stopped_by_timeout = request
            .timeout
            .is_some_and(|limit| got.exit_code == Some(TIMEOUT_EXIT) && started.elapsed() >= limit);
        if gave_up || stopped_by_timeout {
            return Ok(Output {
                exit_code: None,
                stdout: got.stdout,
                stderr: got.stderr,
                timed_out: true,
                sudo_password_required: false,
            });
        }
        if got.refused {
            return Err(ConnError::Other(format!(
                "{}: the server refused to run the command",
                self.host
            )));
        }
        if !got.closed && got.exit_code.is_none() && got.signal.is_none() {
            // The channel vanished without a word: the session is gone.
            return Err(self.lost("the connection dropped while a command was running"));
        }
        if !got.closed {
            // Exited, but a leftover process keeps the channel open: let it be.
            let _ = tx.close().await;
        }
        let sudo_password_required =
            request.sudo && super::local::sudo_wants_password(got.exit_code, &got.stderr);
        Ok(Output {
            exit_code: got.exit_code,
            stdout: got.stdout,
            stderr: got.stderr,
            timed_out: false,
            sudo_password_required,
        })
    }

    async fn close(&self) {
        let _ = self
            .handle
            .disconnect(russh::Disconnect::ByApplication, "", "en")
            .await;
    }
}

/// What a channel said.
#[derive(Debug, Default)]
struct Collected {
    stdout: Vec<u8>,
    /// The command's stderr, without the [`PGID_MARKER`] line.
    stderr: Vec<u8>,
    exit_code: Option<i32>,
    signal: Option<String>,
    /// The server answered the exec request with a failure.
    refused: bool,
    /// The server closed the channel (as opposed to the session vanishing).
    closed: bool,
    /// The remote shell's pid, which is its process group's id: OpenSSH starts every
    /// session's shell with `setsid`, and the shell `exec`s the command.
    pgid: Option<u32>,
    /// How far stderr has been searched for the marker.
    scanned: usize,
}

impl Collected {
    /// Appends stderr bytes; until the [`PGID_MARKER`] line has been seen, looks for it
    /// and cuts it out. Anything before it (a shell start-up file's chatter) is kept.
    fn push_stderr(&mut self, data: &[u8]) {
        self.stderr.extend_from_slice(data);
        let marker = PGID_MARKER.as_bytes();
        while self.pgid.is_none() {
            let Some(at) = find(&self.stderr[self.scanned..], marker).map(|i| self.scanned + i)
            else {
                // A marker split across chunks starts in the last few bytes.
                self.scanned = self
                    .scanned
                    .max(self.stderr.len().saturating_sub(marker.len() - 1));
                return;
            };
            let digits = at + marker.len();
            let Some(len) = self.stderr[digits..].iter().position(|&b| b == b'\n') else {
                // The rest of the line has not arrived yet.
                self.scanned = at;
                return;
            };
            let pid = std::str::from_utf8(&self.stderr[digits..digits + len])
                .ok()
                .filter(|s| !s.is_empty() && s.len() <= 10 && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u32>().ok())
                .filter(|&pid| pid > 1);
            match pid {
                Some(pid) => {
                    self.pgid = Some(pid);
                    self.stderr.drain(at..digits + len + 1);
                    self.scanned = at;
                }
                // Not ours after all: look further on.
                None => self.scanned = digits,
            }
        }
    }

    /// Records one message; `true` once the channel has ended.
    fn take(&mut self, msg: Option<ChannelMsg>) -> bool {
        match msg {
            Some(ChannelMsg::Data { data }) => self.stdout.extend_from_slice(&data),
            Some(ChannelMsg::ExtendedData { data, ext: 1 }) => self.push_stderr(&data),
            Some(ChannelMsg::ExitStatus { exit_status }) => {
                self.exit_code = Some(i32::try_from(exit_status).unwrap_or(i32::MAX));
            }
            Some(ChannelMsg::ExitSignal { signal_name, .. }) => {
                self.signal = Some(format!("{signal_name:?}"));
            }
            Some(ChannelMsg::Failure) => {
                self.refused = true;
                self.closed = true;
                return true;
            }
            Some(ChannelMsg::Close) => {
                self.closed = true;
                return true;
            }
            Some(_) => {}
            None => return true,
        }
        false
    }

    fn exited(&self) -> bool {
        self.exit_code.is_some() || self.signal.is_some()
    }
}

/// Where `needle` first occurs in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Reads a channel until the server closes it, or until it has been silent for
/// [`LINGER_AFTER_EXIT`] after the exit status.
async fn collect(rx: &mut russh::ChannelReadHalf, got: &mut Collected) {
    loop {
        let msg = if got.exited() {
            match tokio::time::timeout(LINGER_AFTER_EXIT, rx.wait()).await {
                Ok(msg) => msg,
                Err(_) => return,
            }
        } else {
            rx.wait().await
        };
        if got.take(msg) {
            return;
        }
    }
}

/// A started command. Dropped while armed (its `run` future dropped: a cancelled run),
/// it stops the command on the host from a task of its own.
struct Running {
    handle: Arc<Handle<ClientHandler>>,
    tx: Arc<ChannelWriteHalf<client::Msg>>,
    /// `None` once handed to a stop.
    rx: Option<russh::ChannelReadHalf>,
    got: Collected,
    sudo: bool,
    armed: bool,
    /// The command's place among the connection's commands, held until it is stopped.
    permit: Option<OwnedSemaphorePermit>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // A drop cannot wait: the stop runs on the runtime, holding the session open.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let handle = Arc::clone(&self.handle);
        let tx = Arc::clone(&self.tx);
        let rx = self.rx.take();
        let got = std::mem::take(&mut self.got);
        let sudo = self.sudo;
        let permit = self.permit.take();
        runtime.spawn(async move {
            let mut got = got;
            stop(&handle, &tx, rx, &mut got, sudo).await;
            // The command's session slot is free again only now.
            drop(permit);
        });
    }
}

/// Stops a command that is still running: learns its process group id if the channel
/// has not said it yet (reading at most [`PGID_WAIT`]), then kills the group from a
/// second channel on the same session ([`kill_line`]: `TERM`, `KILL` if it lingers)
/// and closes the command's channel. Without a process group id (a host whose shell
/// printed none) it falls back to a `TERM` signal request, which OpenSSH honours for
/// non-root logins only.
async fn stop(
    handle: &Handle<ClientHandler>,
    tx: &ChannelWriteHalf<client::Msg>,
    rx: Option<russh::ChannelReadHalf>,
    got: &mut Collected,
    sudo: bool,
) {
    if got.pgid.is_none() && !got.closed {
        if let Some(mut rx) = rx {
            let deadline = tokio::time::Instant::now() + PGID_WAIT;
            while got.pgid.is_none() {
                match tokio::time::timeout_at(deadline, rx.wait()).await {
                    Ok(msg) => {
                        if got.take(msg) {
                            // The command ended on its own: nothing to stop.
                            return;
                        }
                    }
                    Err(_) => break,
                }
            }
        }
    }
    let killed = match got.pgid {
        Some(pgid) => kill_group(handle, pgid, sudo).await,
        None => false,
    };
    if !killed {
        let _ = tx.signal(Sig::TERM).await;
    }
    let _ = tx.close().await;
}

/// Runs [`kill_line`] for `pgid` on a new channel and waits for it to end (within
/// [`STOP_WAIT`]); `false` if that could not be done.
async fn kill_group(handle: &Handle<ClientHandler>, pgid: u32, sudo: bool) -> bool {
    let attempt = async {
        let mut channel = open_channel(handle, "").await.ok()?;
        channel
            .exec(true, kill_line(pgid, sudo).into_bytes())
            .await
            .ok()?;
        let _ = channel.eof().await;
        let mut got = Collected::default();
        while !got.take(channel.wait().await) {}
        (!got.refused).then_some(())
    };
    matches!(tokio::time::timeout(STOP_WAIT, attempt).await, Ok(Some(())))
}

/// The remote command line that stops process group `pgid`: `TERM` to the group, then,
/// every 0.1 s for 2 s, whether any of it is left, and `KILL` to what is. With `sudo`
/// the same runs through `sudo -n` (root-owned processes of the group), or as the login
/// user when sudo refuses (sudo itself relays the `TERM` to its command). The pid itself
/// is signalled too if it leads no group (a server that did not `setsid` the session).
pub fn kill_line(pgid: u32, sudo: bool) -> String {
    let p = pgid;
    let script = format!(
        "kill -s TERM -- -{p} 2>/dev/null || kill -s TERM {p} 2>/dev/null || exit 0; \
         n=0; \
         while kill -s 0 -- -{p} 2>/dev/null || kill -s 0 {p} 2>/dev/null; do \
         if [ $n -ge 20 ]; then kill -s KILL -- -{p} 2>/dev/null; kill -s KILL {p} 2>/dev/null; exit 0; fi; \
         n=$((n+1)); sleep 0.1 2>/dev/null || {{ sleep 1 2>/dev/null; n=$((n+9)); }}; \
         done"
    );
    if sudo {
        format!(
            "sudo -n -- sh -c {} 2>/dev/null || {{ {script}; }}",
            shell_quote(&script)
        )
    } else {
        script
    }
}

// ---- command lines ---------------------------------------------------------------------

/// Quotes one word for a POSIX shell: left as is when it is made only of characters no
/// shell treats specially, else single-quoted with each `'` written `'\''`.
pub fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:,+@%".contains(&b));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The remote command line for `request` (see the module docs).
pub fn command_line(request: &RunRequest) -> Result<String, ConnError> {
    let program = match &request.command {
        CommandSpec::Argv(argv) => {
            if argv.is_empty() {
                return Err(ConnError::Other("empty command".into()));
            }
            argv.iter()
                .map(|w| shell_quote(w))
                .collect::<Vec<_>>()
                .join(" ")
        }
        CommandSpec::Shell(line) => format!("sh -c {}", shell_quote(line)),
    };
    if program.contains('\0') {
        return Err(ConnError::Other(
            "a command cannot contain a NUL byte".into(),
        ));
    }
    let program = if request.sudo {
        format!("sudo -n -- {program}")
    } else {
        program
    };
    // The shell says its pid (its process group's id, see `Collected::pgid`) on stderr,
    // then becomes the command: no process more than the command itself.
    let announce = format!("echo {PGID_MARKER}$$ >&2; ");
    Ok(match request.timeout {
        None => format!("{announce}exec {program}"),
        Some(limit) => {
            let secs = format!("{}.{:03}", limit.as_secs(), limit.subsec_millis());
            format!(
                "{announce}if command -v timeout >/dev/null 2>&1; then exec timeout -k {KILL_AFTER_SECS} {secs} {program}; else exec {program}; fi"
            )
        }
    })
}

// ---- the stages of a connection, also used by the host check ---------------------------

/// Resolves the host's address to socket addresses.
pub(crate) async fn resolve(host: &Host, limit: Duration) -> Result<Vec<SocketAddr>, ConnError> {
    let address = host_address(host);
    let port = host_port(host);
    let fail = |reason: String| ConnError::Resolve {
        host: address.to_string(),
        reason,
    };
    if address.is_empty() {
        return Err(fail("the host has no address".into()));
    }
    let lookup = tokio::net::lookup_host((address.to_string(), port));
    match tokio::time::timeout(limit, lookup).await {
        Err(_) => Err(fail(format!("no answer in {}", secs(limit)))),
        Ok(Err(e)) => Err(fail(e.to_string())),
        Ok(Ok(addrs)) => {
            let addrs: Vec<SocketAddr> = addrs.collect();
            if addrs.is_empty() {
                Err(fail("no addresses".into()))
            } else {
                Ok(addrs)
            }
        }
    }
}

/// Opens a TCP connection to the first address that answers.
pub(crate) async fn tcp_connect(
    host: &Host,
    addrs: &[SocketAddr],
    limit: Duration,
) -> Result<(TcpStream, SocketAddr), ConnError> {
    let mut last = String::from("no address to try");
    for addr in addrs {
        match tokio::time::timeout(limit, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok((stream, *addr));
            }
            Ok(Err(e)) => last = format!("{addr}: {e}"),
            Err(_) => last = format!("{addr}: no answer in {}", secs(limit)),
        }
    }
    Err(ConnError::Connect {
        addr: format!("{}:{}", host_address(host), host_port(host)),
        reason: last,
    })
}

/// Runs the SSH handshake on `stream`, verifying the host key. Returns the session and
/// how the key was trusted ("matches the pinned host_key", "known_hosts FILE line N").
pub(crate) async fn handshake(
    host: &Host,
    stream: TcpStream,
    limit: Duration,
) -> Result<(Handle<ClientHandler>, String), ConnError> {
    let policy = HostKeyPolicy::for_host(host)?;
    let mut config = client::Config {
        keepalive_interval: Some(Duration::from_secs(15)),
        keepalive_max: 4,
        nodelay: true,
        ..client::Config::default()
    };
    config.preferred.key = Cow::Owned(policy.preferred_algorithms());
    let trust = Arc::new(std::sync::Mutex::new(String::new()));
    let handler = ClientHandler {
        host: host.name.clone(),
        policy,
        trust: Arc::clone(&trust),
    };
    let connect = client::connect_stream(Arc::new(config), stream, handler);
    let handle = match tokio::time::timeout(limit, connect).await {
        Err(_) => {
            return Err(ConnError::Connect {
                addr: format!("{}:{}", host_address(host), host_port(host)),
                reason: format!("no SSH handshake in {}", secs(limit)),
            })
        }
        Ok(Err(HandshakeError::HostKey(reason))) => {
            return Err(ConnError::HostKey {
                host: host.name.clone(),
                reason,
            })
        }
        Ok(Err(HandshakeError::Ssh(e))) => {
            return Err(ConnError::Connect {
                addr: format!("{}:{}", host_address(host), host_port(host)),
                reason: format!("SSH handshake failed: {e}"),
            })
        }
        Ok(Ok(handle)) => handle,
    };
    let trust = trust.lock().map(|t| t.clone()).unwrap_or_default();
    Ok((handle, trust))
}

/// Authenticates (see the module docs for the order of keys). Returns what worked.
pub(crate) async fn authenticate(
    host: &Host,
    handle: &mut Handle<ClientHandler>,
    limit: Duration,
) -> Result<String, ConnError> {
    let user = match &host.user {
        Some(user) if !user.is_empty() => user.clone(),
        _ => local_user().ok_or_else(|| ConnError::Auth {
            host: host.name.clone(),
            user: "?".into(),
            reason: "no user given and the local user name is unknown".into(),
        })?,
    };
    let fail = |reason: String| ConnError::Auth {
        host: host.name.clone(),
        user: user.clone(),
        reason,
    };
    match tokio::time::timeout(limit, try_keys(host, handle, &user)).await {
        Err(_) => Err(fail(format!("no answer in {}", secs(limit)))),
        Ok(Err(reason)) => Err(fail(reason)),
        Ok(Ok(how)) => Ok(format!("as {user} {how}")),
    }
}

async fn try_keys(
    host: &Host,
    handle: &mut Handle<ClientHandler>,
    user: &str,
) -> Result<String, String> {
    if let Some(path) = &host.identity_file {
        let path = expand_home(path);
        let key = load_key(&path)?;
        return match offer_key(handle, user, key).await? {
            Some(fp) => Ok(format!("with key {} ({fp})", path.display())),
            None => Err(format!("the server refused the key in {}", path.display())),
        };
    }

    let mut tried = Vec::new();
    if std::env::var_os("SSH_AUTH_SOCK").is_some_and(|s| !s.is_empty()) {
        match offer_agent(handle, user).await {
            Ok(Some(how)) => return Ok(how),
            Ok(None) => tried.push("the agent's keys".to_string()),
            Err(e) => tried.push(format!("the agent ({e})")),
        }
    }
    if let Some(home) = home_dir() {
        for name in ["id_ed25519", "id_ecdsa", "id_rsa"] {
            let path = home.join(".ssh").join(name);
            if !path.is_file() {
                continue;
            }
            match load_key(&path) {
                Err(e) => tried.push(e),
                Ok(key) => match offer_key(handle, user, key).await? {
                    Some(fp) => return Ok(format!("with key {} ({fp})", path.display())),
                    None => tried.push(format!("{} (refused)", path.display())),
                },
            }
        }
    }
    if tried.is_empty() {
        Err("no key to offer: no identity_file, no ssh-agent (SSH_AUTH_SOCK unset) and no ~/.ssh/id_ed25519, id_ecdsa or id_rsa".into())
    } else {
        Err(format!("no key was accepted; tried {}", tried.join(", ")))
    }
}

fn load_key(path: &Path) -> Result<russh::keys::PrivateKey, String> {
    match russh::keys::load_secret_key(path, None) {
        Ok(key) => Ok(key),
        Err(russh::keys::Error::KeyIsEncrypted) => Err(format!(
            "{} is encrypted: a run cannot type a passphrase (load it into ssh-agent and leave identity_file unset)",
            path.display()
        )),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// Offers one private key. `Some(fingerprint)` if accepted.
async fn offer_key(
    handle: &mut Handle<ClientHandler>,
    user: &str,
    key: russh::keys::PrivateKey,
) -> Result<Option<String>, String> {
    let fingerprint = key.public_key().fingerprint(HashAlg::Sha256).to_string();
    let hash = if key.algorithm().is_rsa() {
        rsa_hash(handle).await
    } else {
        None
    };
    let key = PrivateKeyWithHashAlg::new(Arc::new(key), hash);
    let result = handle
        .authenticate_publickey(user, key)
        .await
        .map_err(|e| format!("the connection failed during authentication: {e}"))?;
    Ok(result.success().then_some(fingerprint))
}

async fn offer_agent(
    handle: &mut Handle<ClientHandler>,
    user: &str,
) -> Result<Option<String>, String> {
    let mut agent = russh::keys::agent::client::AgentClient::connect_env()
        .await
        .map_err(|e| e.to_string())?;
    let identities = agent
        .request_identities()
        .await
        .map_err(|e| e.to_string())?;
    for identity in identities {
        let russh::keys::agent::AgentIdentity::PublicKey { key, comment } = identity else {
            continue;
        };
        let hash = if key.algorithm().is_rsa() {
            rsa_hash(handle).await
        } else {
            None
        };
        let fingerprint = key.fingerprint(HashAlg::Sha256).to_string();
        match handle
            .authenticate_publickey_with(user, key, hash, &mut agent)
            .await
        {
            Ok(result) if result.success() => {
                return Ok(Some(format!(
                    "with the agent's key {comment} ({fingerprint})"
                )))
            }
            Ok(_) => {}
            Err(e) => return Err(format!("signing with {comment}: {e}")),
        }
    }
    Ok(None)
}

/// The RSA signature hash the server accepts (SHA-2 unless it says otherwise).
async fn rsa_hash(handle: &Handle<ClientHandler>) -> Option<HashAlg> {
    match handle.best_supported_rsa_hash().await {
        Ok(Some(hash)) => hash,
        _ => Some(HashAlg::Sha256),
    }
}

fn host_address(host: &Host) -> &str {
    if host.address.is_empty() {
        &host.name
    } else {
        &host.address
    }
}

fn host_port(host: &Host) -> u16 {
    if host.port == 0 {
        22
    } else {
        host.port
    }
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

// ---- host key verification -------------------------------------------------------------

/// The russh handler: it only verifies the server's key.
pub(crate) struct ClientHandler {
    host: String,
    policy: HostKeyPolicy,
    /// How the key was trusted, for the host check's report.
    trust: Arc<std::sync::Mutex<String>>,
}

/// A handshake failure: a refused host key (with the reason) or anything else.
#[derive(Debug)]
pub(crate) enum HandshakeError {
    HostKey(String),
    Ssh(russh::Error),
}

impl From<russh::Error> for HandshakeError {
    fn from(e: russh::Error) -> Self {
        HandshakeError::Ssh(e)
    }
}

impl client::Handler for ClientHandler {
    type Error = HandshakeError;

    async fn check_server_key(
        &mut self,
        server_key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let key = match server_key {
            PublicKeyOrCertificate::PublicKey { key, .. } => key,
            PublicKeyOrCertificate::Certificate(_) => {
                return Err(HandshakeError::HostKey(
                    "the server presented a host certificate, which Bosun does not verify; pin its host key instead".into(),
                ))
            }
        };
        match self.policy.verify(key) {
            Ok(how) => {
                if let Ok(mut trust) = self.trust.lock() {
                    *trust = how;
                }
                Ok(true)
            }
            Err(reason) => {
                tracing::warn!(host = %self.host, "refusing host key: {reason}");
                Err(HandshakeError::HostKey(reason))
            }
        }
    }
}

/// How a host's key is judged.
#[derive(Debug)]
enum HostKeyPolicy {
    Pinned(PublicKey),
    KnownHosts {
        /// The name OpenSSH looks up: `address` or `[address]:port`.
        name: String,
        /// `ssh-keyscan` arguments for the advice.
        keyscan: String,
        files: Vec<PathBuf>,
        /// The entries for `name`, in file order.
        entries: Vec<KnownHost>,
    },
}

#[derive(Debug, Clone)]
struct KnownHost {
    file: PathBuf,
    line: usize,
    revoked: bool,
    key: PublicKey,
}

impl HostKeyPolicy {
    fn for_host(host: &Host) -> Result<Self, ConnError> {
        if let Some(pinned) = &host.host_key {
            let key = PublicKey::from_openssh(pinned.trim()).map_err(|e| ConnError::HostKey {
                host: host.name.clone(),
                reason: format!(
                    "the pinned host_key is not an OpenSSH public key (`ssh-ed25519 AAAA…`): {e}"
                ),
            })?;
            return Ok(HostKeyPolicy::Pinned(key));
        }
        let address = host_address(host);
        let port = host_port(host);
        let name = if port == 22 {
            address.to_string()
        } else {
            format!("[{address}]:{port}")
        };
        let keyscan = if port == 22 {
            address.to_string()
        } else {
            format!("-p {port} {address}")
        };
        let files = match &host.known_hosts {
            Some(path) => vec![expand_home(path)],
            None => {
                let mut files = Vec::new();
                if let Some(home) = home_dir() {
                    files.push(home.join(".ssh").join("known_hosts"));
                }
                files.push(PathBuf::from("/etc/ssh/ssh_known_hosts"));
                files
            }
        };
        let mut entries = Vec::new();
        for file in &files {
            // A missing or unreadable file knows no host; the refusal names it.
            if let Ok(text) = std::fs::read_to_string(file) {
                entries.extend(known_hosts_entries(&text, &name, file));
            }
        }
        Ok(HostKeyPolicy::KnownHosts {
            name,
            keyscan,
            files,
            entries,
        })
    }

    /// The default host key algorithms, those this host is known by first.
    fn preferred_algorithms(&self) -> Vec<Algorithm> {
        let known: Vec<&PublicKey> = match self {
            HostKeyPolicy::Pinned(key) => vec![key],
            HostKeyPolicy::KnownHosts { entries, .. } => entries
                .iter()
                .filter(|e| !e.revoked)
                .map(|e| &e.key)
                .collect(),
        };
        let defaults = russh::Preferred::DEFAULT.key.to_vec();
        let (mut first, rest): (Vec<Algorithm>, Vec<Algorithm>) = defaults
            .into_iter()
            .partition(|alg| known.iter().any(|k| same_type(&k.algorithm(), alg)));
        first.extend(rest);
        first
    }

    /// `Ok(how it is trusted)` or `Err(why not)`.
    fn verify(&self, key: &PublicKey) -> Result<String, String> {
        let presented = describe(key);
        match self {
            HostKeyPolicy::Pinned(pinned) => {
                if pinned.key_data() == key.key_data() {
                    Ok(format!("{presented} matches the pinned host_key"))
                } else {
                    Err(format!(
                        "the server's key {presented} does not match the pinned host_key {}: possible man-in-the-middle (if the host was rebuilt, pin its new key)",
                        describe(pinned)
                    ))
                }
            }
            HostKeyPolicy::KnownHosts {
                name,
                keyscan,
                files,
                entries,
            } => {
                if let Some(e) = entries
                    .iter()
                    .find(|e| e.revoked && e.key.key_data() == key.key_data())
                {
                    return Err(format!(
                        "the server's key {presented} is marked @revoked in {} line {}",
                        e.file.display(),
                        e.line
                    ));
                }
                if let Some(e) = entries
                    .iter()
                    .find(|e| !e.revoked && e.key.key_data() == key.key_data())
                {
                    return Ok(format!(
                        "{presented} matches {} line {}",
                        e.file.display(),
                        e.line
                    ));
                }
                if let Some(e) = entries
                    .iter()
                    .find(|e| !e.revoked && same_type(&e.key.algorithm(), &key.algorithm()))
                {
                    return Err(format!(
                        "the server's key {presented} for {name} does not match the one in {} line {} ({}): possible man-in-the-middle (if the host was rebuilt, check the new key and replace that line)",
                        e.file.display(),
                        e.line,
                        describe(&e.key)
                    ));
                }
                let file = files
                    .first()
                    .map(|f| f.display().to_string())
                    .unwrap_or_else(|| "~/.ssh/known_hosts".into());
                let others = if entries.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (it is known there only by other key types: {})",
                        entries
                            .iter()
                            .map(|e| e.key.algorithm().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                };
                Err(format!(
                    "the server's key {presented} for {name} is not in known_hosts ({}){others}: add it with `ssh-keyscan {keyscan} >> {file}` after checking its fingerprint, or pin host_key",
                    files
                        .iter()
                        .map(|f| f.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            }
        }
    }
}

/// `ssh-ed25519 SHA256:…`.
fn describe(key: &PublicKey) -> String {
    format!("{} {}", key.algorithm(), key.fingerprint(HashAlg::Sha256))
}

/// Whether two algorithms are the same key type (every RSA signature hash is one type).
fn same_type(a: &Algorithm, b: &Algorithm) -> bool {
    match (a, b) {
        (Algorithm::Rsa { .. }, Algorithm::Rsa { .. }) => true,
        _ => a == b,
    }
}

/// The entries of a known_hosts file that apply to `name`. Lines that do not parse are
/// skipped (as OpenSSH does); `@cert-authority` lines are ignored (certificates are not
/// accepted anyway).
fn known_hosts_entries(text: &str, name: &str, file: &Path) -> Vec<KnownHost> {
    let mut found = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.split_whitespace();
        let mut first = fields.next().unwrap_or_default();
        let mut revoked = false;
        if first.starts_with('@') {
            match first {
                "@revoked" => revoked = true,
                _ => continue,
            }
            first = fields.next().unwrap_or_default();
        }
        let (Some(kind), Some(data)) = (fields.next(), fields.next()) else {
            continue;
        };
        if !patterns_match(first, name) {
            continue;
        }
        let Ok(key) = PublicKey::from_openssh(&format!("{kind} {data}")) else {
            continue;
        };
        found.push(KnownHost {
            file: file.to_path_buf(),
            line: index + 1,
            revoked,
            key,
        });
    }
    found
}

/// OpenSSH's host pattern list: comma-separated patterns with `*` and `?`, `!` negating
/// (a negated match excludes the line), or one hashed `|1|salt|hash` name.
fn patterns_match(patterns: &str, name: &str) -> bool {
    if let Some(hashed) = patterns.strip_prefix("|1|") {
        return hashed_match(hashed, name);
    }
    let mut matched = false;
    for pattern in patterns.split(',') {
        if let Some(negated) = pattern.strip_prefix('!') {
            if glob(negated.as_bytes(), name.as_bytes()) {
                return false;
            }
        } else if glob(pattern.as_bytes(), name.as_bytes()) {
            matched = true;
        }
    }
    matched
}

fn hashed_match(hashed: &str, name: &str) -> bool {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut parts = hashed.splitn(2, '|');
    let (Some(salt), Some(hash)) = (parts.next(), parts.next()) else {
        return false;
    };
    let (Ok(salt), Ok(hash)) = (b64.decode(salt), b64.decode(hash)) else {
        return false;
    };
    let Ok(mut mac) = hmac::Hmac::<sha1::Sha1>::new_from_slice(&salt) else {
        return false;
    };
    mac.update(name.as_bytes());
    mac.verify_slice(&hash).is_ok()
}

/// Case-insensitive glob with `*` and `?` (host names are case-insensitive).
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || text.get(t).is_some_and(|x| x.eq_ignore_ascii_case(&c)) => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern
        .get(p..)
        .is_some_and(|rest| rest.iter().all(|&c| c == b'*'))
}

// ---- the local user ----------------------------------------------------------------------

/// `~/…` → `$HOME/…`.
fn expand_home(path: &Path) -> PathBuf {
    match (path.strip_prefix("~"), home_dir()) {
        (Ok(rest), Some(home)) => home.join(rest),
        _ => path.to_path_buf(),
    }
}

fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(|| passwd_entry().map(|(_, home)| home))
}

/// The name of the user running Bosun (from the password database, as OpenSSH does).
pub(crate) fn local_user() -> Option<String> {
    passwd_entry().map(|(name, _)| name).or_else(|| {
        ["USER", "LOGNAME"]
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
    })
}

/// This process's user's name and home directory.
fn passwd_entry() -> Option<(String, PathBuf)> {
    use std::ffi::CStr;
    use std::os::unix::ffi::OsStrExt as _;
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: getpwuid_r writes only into `pwd` and `buf` (whose length we pass); the
    // strings it points `pwd` at live in `buf`, which outlives every use below.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(
            libc::getuid(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        );
        if rc != 0 || result.is_null() || pwd.pw_name.is_null() || pwd.pw_dir.is_null() {
            return None;
        }
        let name = CStr::from_ptr(pwd.pw_name).to_string_lossy().into_owned();
        let home = PathBuf::from(std::ffi::OsStr::from_bytes(
            CStr::from_ptr(pwd.pw_dir).to_bytes(),
        ));
        Some((name, home))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_is_posix_single_quotes() {
        assert_eq!(shell_quote("plain-word_1.txt"), "plain-word_1.txt");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote("$HOME"), "'$HOME'");
        assert_eq!(shell_quote("FOO=bar"), "'FOO=bar'");
        assert_eq!(shell_quote("~"), "'~'");
    }

    #[test]
    fn command_lines() {
        let req = |command, sudo, timeout| RunRequest {
            command,
            sudo,
            stdin: None,
            timeout,
        };
        let argv = CommandSpec::Argv(vec!["echo".into(), "a b".into()]);
        assert_eq!(
            command_line(&req(argv.clone(), false, None)).unwrap(),
            "echo bosun-pgid:$$ >&2; exec echo 'a b'"
        );
        assert_eq!(
            command_line(&req(argv, true, None)).unwrap(),
            "echo bosun-pgid:$$ >&2; exec sudo -n -- echo 'a b'"
        );
        assert_eq!(
            command_line(&req(CommandSpec::Shell("echo $x".into()), false, None)).unwrap(),
            "echo bosun-pgid:$$ >&2; exec sh -c 'echo $x'"
        );
        assert_eq!(
            command_line(&req(
                CommandSpec::Shell("true".into()),
                true,
                Some(Duration::from_millis(1500))
            ))
            .unwrap(),
            "echo bosun-pgid:$$ >&2; if command -v timeout >/dev/null 2>&1; then exec timeout -k 5 1.500 sudo -n -- sh -c true; else exec sudo -n -- sh -c true; fi"
        );
        assert!(command_line(&req(CommandSpec::Argv(vec![]), false, None)).is_err());
    }

    #[test]
    fn the_process_group_marker_is_cut_from_stderr() {
        let pushed = |chunks: &[&[u8]]| {
            let mut got = Collected::default();
            for chunk in chunks {
                got.push_stderr(chunk);
            }
            (got.pgid, String::from_utf8_lossy(&got.stderr).into_owned())
        };
        assert_eq!(
            pushed(&[b"bosun-pgid:4242\nerr"]),
            (Some(4242), "err".into())
        );
        // Split anywhere, even inside the marker or the number.
        let all = b"bosun-pgid:4242\nerr\nbosun-pgid:7\n";
        for at in 0..all.len() {
            let (a, b) = all.split_at(at);
            assert_eq!(
                pushed(&[a, b]),
                (Some(4242), "err\nbosun-pgid:7\n".into()),
                "split at {at}"
            );
        }
        // A start-up file's chatter before it is kept; a marker that is not one is skipped.
        assert_eq!(
            pushed(&[b"motd\nbosun-pgid:x\n", b"bosun-pgid:99\n"]),
            (Some(99), "motd\nbosun-pgid:x\n".into())
        );
        // No marker (yet): nothing is cut.
        assert_eq!(pushed(&[b"bosun-pgid:12"]), (None, "bosun-pgid:12".into()));
        assert_eq!(pushed(&[b""]), (None, String::new()));
    }

    #[test]
    fn kill_lines() {
        let line = kill_line(4242, false);
        assert!(
            line.starts_with("kill -s TERM -- -4242 2>/dev/null ||"),
            "{line}"
        );
        assert!(line.contains("kill -s KILL -- -4242"), "{line}");
        let sudo = kill_line(4242, true);
        assert!(
            sudo.starts_with("sudo -n -- sh -c 'kill -s TERM -- -4242"),
            "{sudo}"
        );
        assert!(sudo.ends_with(&format!("|| {{ {line}; }}")), "{sudo}");
    }

    #[test]
    fn host_patterns() {
        assert!(patterns_match("web-1,10.0.0.1", "10.0.0.1"));
        assert!(patterns_match("[127.0.0.1]:2222", "[127.0.0.1]:2222"));
        assert!(!patterns_match("127.0.0.1", "[127.0.0.1]:2222"));
        assert!(patterns_match("*.example.com", "web.EXAMPLE.com"));
        assert!(!patterns_match(
            "*.example.com,!bad.example.com",
            "bad.example.com"
        ));
        assert!(patterns_match("web-?", "web-7"));
        assert!(!patterns_match("web-?", "web-17"));
        // `ssh-keygen -H` of "example.com" (from OpenSSH's own format).
        assert!(patterns_match(
            "|1|O33ESRMWPVkMYIwJ1Uw+n877jTo=|nuuC5vEqXlEZ/8BXQR7m619W6Ak=",
            "example.com"
        ));
        assert!(!patterns_match(
            "|1|O33ESRMWPVkMYIwJ1Uw+n877jTo=|nuuC5vEqXlEZ/8BXQR7m619W6Ak=",
            "example.org"
        ));
    }

    #[test]
    fn known_hosts_lines() {
        let text = "\
# comment
@cert-authority *.example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJdD7y3aLq454yWBdwLWbieU1ebz9/cu7/QEXn9OIeZJ
[h]:2222\tssh-ed25519   AAAAC3NzaC1lZDI1NTE5AAAAIJdD7y3aLq454yWBdwLWbieU1ebz9/cu7/QEXn9OIeZJ comment
[h]:2222 ssh-ed25519 not-base64
@revoked [h]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA6rWI3G1sz07DnfFlrouTcysQlj2P+jpNSOEWD9OJ3X
h ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILIG2T/B0l0gaqj3puu510tu9N1OkQ4znY3LYuEm5zCF
";
        let found = known_hosts_entries(text, "[h]:2222", Path::new("kh"));
        assert_eq!(
            found
                .iter()
                .map(|e| (e.line, e.revoked))
                .collect::<Vec<_>>(),
            vec![(3, false), (5, true)]
        );
    }
}
