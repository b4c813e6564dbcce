//! The `ssh` connection, on [`russh`] (async, pure Rust): one TCP connection and SSH
//! session per host, reused across steps, and on it one long-lived remote shell that
//! runs every command as a framed request ([`session`]) — so a run over 1,000 hosts is
//! 1,000 tokio tasks, not 1,000 `ssh` processes, and a host's login shell is started
//! once per connection, not once per command. Concurrent `run`s on one connection each
//! get a session of their own (at most [`MAX_CHANNELS`] − 1). A host that cannot run a
//! session gets one channel per command instead.
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
//! **Commands** (in a session or on a channel of their own alike): an argv is
//! single-quoted word by word (POSIX: `'` becomes `'\''`) into
//! one command line, a shell command becomes `sh -c '<line>'`, `sudo` prefixes
//! `sudo -n --` (a sudo that wants a password fails at once: exit 1 with "a password is
//! required" or "a terminal is required" sets `sudo_password_required`). The remote shell
//! first writes its pid to stderr (`bosun-pgid:<pid>`, [`PGID_MARKER`]; the client cuts
//! that line out, so stderr stays byte-exact), then `exec`s the command: the command
//! keeps that pid, which is also its process group's id: OpenSSH starts a channel's shell
//! with `setsid`, and a session starts each command under `setsid`. stdin gets
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
//!
//! **Bastions** (`proxy_jump`): a host behind one is reached over a `direct-tcpip`
//! channel of the bastion's connection, its key verified and its login done as for any
//! host; the hosts of a run behind one bastion share its connection ([`jump`]).
//!
//! The parts: `connect.rs` (the stages of a connection, which the host check runs one
//! by one), `jump.rs` (bastions), `host_keys.rs` (host key verification), `command.rs`
//! (the remote command line), `session.rs` (the remote shell and its framing),
//! `output.rs` (reading a command's channel), `stop.rs` (stopping a command) and
//! `local_user.rs` (the local user's name and home folder).

mod command;
mod connect;
mod host_keys;
mod jump;
mod local_user;
mod output;
mod session;
mod stop;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use russh::client::{self, Handle};
use russh::ChannelOpenFailure;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{ConnError, ConnectOptions, Connection, Output, OutputTap, RunRequest};
use crate::model::Host;
use command::command_line_as;
pub use command::{command_line, shell_quote};
pub(crate) use connect::{authenticate, handshake, host_address, host_port, resolve, tcp_connect};
pub(crate) use host_keys::ClientHandler;
pub use jump::Jumps;
pub(crate) use jump::{reach, release, tunnel, Hop};
use output::{collect, Collected};
use session::{Frame, Kind, Read, Session};
pub use stop::kill_line;
use stop::{stop, Running};

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
    /// Sessions between commands ([`session`]).
    /// Per [`Kind`].
    idle: Mutex<[Vec<Session>; 2]>,
    /// Per [`Kind`], whether commands go through such sessions: off once the host failed
    /// one's hello.
    sessions: [AtomicBool; 2],
    /// How long a new session may take to answer its hello.
    hello_limit: Duration,
    /// The bastion this host is reached through, held until the connection is closed.
    via: Mutex<Option<Arc<Hop>>>,
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
    /// `options.connect_timeout`. A host behind a bastion gets a bastion connection of
    /// its own, closed with it.
    pub async fn connect(host: &Host, options: &ConnectOptions) -> Result<Self, ConnError> {
        SshConnection::connect_via(host, options, &Jumps::new()).await
    }

    /// [`SshConnection::connect`], reaching a host behind a bastion over the bastion
    /// connection `jumps` holds for it (opened there if it is not yet).
    pub async fn connect_via(
        host: &Host,
        options: &ConnectOptions,
        jumps: &Jumps,
    ) -> Result<Self, ConnError> {
        let limit = options.connect_timeout;
        let via = match &host.proxy_jump {
            Some(bastion) => Some(jumps.bastion(bastion, options).await?),
            None => None,
        };
        let reached = async {
            let (mut handle, _trust) = reach(host, via.as_deref(), limit).await?;
            authenticate(host, &mut handle, limit).await?;
            Ok(handle)
        };
        match reached.await {
            Ok(handle) => Ok(SshConnection::from_handle(host, handle, limit).through(via)),
            Err(e) => {
                if let Some(via) = via {
                    release(via).await;
                }
                Err(e)
            }
        }
    }

    /// Wraps an authenticated session (the host check builds one stage by stage); a new
    /// remote session must answer within `hello_limit`.
    pub(crate) fn from_handle(
        host: &Host,
        handle: Handle<ClientHandler>,
        hello_limit: Duration,
    ) -> Self {
        SshConnection {
            host: host.name.clone(),
            handle: Arc::new(handle),
            channels: Arc::new(Semaphore::new(MAX_CHANNELS - 1)),
            idle: Mutex::new([Vec::new(), Vec::new()]),
            sessions: [AtomicBool::new(true), AtomicBool::new(true)],
            hello_limit,
            via: Mutex::new(None),
        }
    }

    /// This connection, holding `via` (the bastion it runs through) until it is closed.
    pub(crate) fn through(self, via: Option<Arc<Hop>>) -> Self {
        *self
            .via
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = via;
        self
    }

    /// Whether commands still go through remote sessions (`false` once this host
    /// failed a session's hello: each command then has a channel of its own).
    pub fn uses_sessions(&self) -> bool {
        self.sessions[Kind::Login as usize].load(Ordering::Relaxed)
    }

    /// Whether `sudo` commands still go through a session started under `sudo -n`
    /// (`false` once sudo refused to start one: each then runs under `sudo -n` itself).
    pub fn uses_sudo_sessions(&self) -> bool {
        self.sessions[Kind::Sudo as usize].load(Ordering::Relaxed)
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
        self.execute(request, None).await
    }

    async fn run_live(
        &self,
        request: &RunRequest,
        live: &OutputTap<'_>,
    ) -> Result<Output, ConnError> {
        self.execute(request, Some(live)).await
    }

    async fn close(&self) {
        let _ = self
            .handle
            .disconnect(russh::Disconnect::ByApplication, "", "en")
            .await;
        let via = self
            .via
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(via) = via {
            release(via).await;
        }
    }
}

impl SshConnection {
    /// Runs one command — in a session ([`session`]) unless this host cannot run them,
    /// then on a channel of its own; `live` sees its output as it arrives.
    async fn execute(
        &self,
        request: &RunRequest,
        live: Option<&OutputTap<'_>>,
    ) -> Result<Output, ConnError> {
        let line = command_line(request)?;
        let mut permit = Some(
            Arc::clone(&self.channels)
                .acquire_owned()
                .await
                .map_err(|_| self.lost("connection closed"))?,
        );
        // A sudo command goes to the sudo'd session, else (sudo refused to start one) to
        // the login session under `sudo -n`. An idle session may have ended meanwhile;
        // the command did not start on it then, and gets one more (fresh) session.
        for _ in 0..3 {
            let kind = if request.sudo && self.uses_sudo_sessions() {
                Kind::Sudo
            } else {
                Kind::Login
            };
            if !self.sessions[kind as usize].load(Ordering::Relaxed) {
                break;
            }
            let Some(session) = self.session(kind).await? else {
                continue;
            };
            let line = match kind {
                Kind::Login => line.clone(),
                // Already root: the command line without its own `sudo -n`.
                Kind::Sudo => command_line_as(request, false)?,
            };
            match self
                .execute_in_session(session, request, &line, live, &mut permit)
                .await
            {
                InSession::Ran(result) => return result,
                InSession::NotStarted => {}
            }
        }
        let permit = match permit {
            Some(permit) => permit,
            None => Arc::clone(&self.channels)
                .acquire_owned()
                .await
                .map_err(|_| self.lost("connection closed"))?,
        };
        self.execute_on_channel(request, line, live, permit).await
    }

    /// An idle session of `kind`, or a new one; `None` (and such sessions off for this
    /// connection) when the host cannot run them.
    async fn session(&self, kind: Kind) -> Result<Option<Session>, ConnError> {
        if let Some(session) = self.idle_sessions()[kind as usize].pop() {
            return Ok(Some(session));
        }
        let opened = session::open(&self.handle, &self.host, self.hello_limit, kind).await?;
        if opened.is_none() {
            self.sessions[kind as usize].store(false, Ordering::Relaxed);
        }
        Ok(opened)
    }

    fn idle_sessions(&self) -> std::sync::MutexGuard<'_, [Vec<Session>; 2]> {
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs one command as a request on `session`, which goes back to the idle ones when
    /// the command's answer was read whole. `permit` is taken (and held by the command
    /// until it is done or stopped) unless the command never started.
    async fn execute_in_session(
        &self,
        session: Session,
        request: &RunRequest,
        line: &str,
        live: Option<&OutputTap<'_>>,
        permit: &mut Option<OwnedSemaphorePermit>,
    ) -> InSession {
        let Session { rx, tx, kind } = session;
        let nonce = session::nonce();
        let code = session::request_code(&nonce, line, request.stdin.as_ref().map(Vec::len));
        let input = session::request_bytes(&code);
        // From here on, a dropped future stops the command and ends the session.
        let mut running = Running::new(&self.handle, &tx, rx, request.sudo, permit.take());
        let mut frame = Frame::new(nonce);
        let feed = async {
            // A session that has ended refuses the bytes; the reading side says how.
            if tx.data(&input[..]).await.is_ok() {
                if let Some(bytes) = &request.stdin {
                    let _ = tx.data(&bytes[..]).await;
                }
            }
        };
        let Running {
            rx: Some(rx), got, ..
        } = &mut running
        else {
            return InSession::Ran(Err(self.lost("the session's channel is gone")));
        };
        let work = async {
            tokio::pin!(feed);
            let mut fed = false;
            loop {
                tokio::select! {
                    () = &mut feed, if !fed => fed = true,
                    read = frame.read(rx, got, live) => match read {
                        Read::Done => return None,
                        Read::More => {}
                        Read::Ended(why) => return Some(why),
                    },
                }
            }
        };
        let started = Instant::now();
        let (gave_up, ended) = match request.timeout {
            Some(limit) => match tokio::time::timeout(limit + TIMEOUT_GRACE, work).await {
                Ok(ended) => (false, ended),
                Err(_) => (true, None),
            },
            None => (false, work.await),
        };
        if let Some(why) = ended {
            if !frame.started() {
                // The session had ended before the command could start.
                running.armed = false;
                *permit = running.permit.take();
                let _ = tx.close().await;
                return InSession::NotStarted;
            }
            // Whatever of the command is left is stopped; the session is not reused.
            let rx = running.rx.take();
            stop(&self.handle, &tx, rx, &mut running.got, request.sudo).await;
            running.armed = false;
            return InSession::Ran(Err(
                self.lost(format!("{why} while the command was running"))
            ));
        }
        if gave_up {
            // As on a channel of its own (see `execute_on_channel`); the session ends.
            let rx = running.rx.take();
            stop(&self.handle, &tx, rx, &mut running.got, request.sudo).await;
        }
        running.armed = false;
        let got = std::mem::take(&mut running.got);
        if !gave_up {
            if let Some(rx) = running.rx.take() {
                self.idle_sessions()[kind as usize].push(Session { rx, tx, kind });
            }
        }
        InSession::Ran(Ok(finish(request, got, started, gave_up)))
    }

    /// Runs one command on its own channel; `live` sees its output as it arrives.
    async fn execute_on_channel(
        &self,
        request: &RunRequest,
        line: String,
        live: Option<&OutputTap<'_>>,
        permit: OwnedSemaphorePermit,
    ) -> Result<Output, ConnError> {
        let channel = open_channel(&self.handle, &self.host).await?;
        let (rx, tx) = channel.split();
        let tx = Arc::new(tx);
        // From here on, a dropped future stops the command (see `Running`'s `Drop`).
        let mut running = Running::new(&self.handle, &tx, rx, request.sudo, Some(permit));
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
            let collecting = collect(rx, got, live);
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
        let mut got = std::mem::take(&mut running.got);
        if let Some(live) = live {
            got.show(live, true);
        }
        if !gave_up {
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
        }
        Ok(finish(request, got, started, gave_up))
    }
}

/// How a command given to a session went.
enum InSession {
    Ran(Result<Output, ConnError>),
    /// The session had ended before the command started: it may be tried elsewhere.
    NotStarted,
}

/// A command's [`Output`] from what its channel or session said: timed out when the
/// client gave up on it, or when the host's `timeout` stopped it (exit 124 once the
/// limit has passed; output so far is kept).
fn finish(request: &RunRequest, got: Collected, started: Instant, gave_up: bool) -> Output {
    let stopped_by_timeout = request
        .timeout
        .is_some_and(|limit| got.exit_code == Some(TIMEOUT_EXIT) && started.elapsed() >= limit);
    if gave_up || stopped_by_timeout {
        return Output {
            exit_code: None,
            stdout: got.stdout,
            stderr: got.stderr,
            timed_out: true,
            sudo_password_required: false,
        };
    }
    let sudo_password_required =
        request.sudo && super::local::sudo_wants_password(got.exit_code, &got.stderr);
    Output {
        exit_code: got.exit_code,
        stdout: got.stdout,
        stderr: got.stderr,
        timed_out: false,
        sudo_password_required,
    }
}
