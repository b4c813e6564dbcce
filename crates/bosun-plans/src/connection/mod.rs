//! How the engine reaches a host: one connection per host, reused across steps. Every
//! command runs with stdin closed (or fed only the bytes the engine sends), and `sudo`
//! is non-interactive: a sudo that wants a password fails fast, saying so. A command's
//! output can be watched as it is printed ([`Connection::run_live`]); the [`Output`] still
//! holds all of it.
//!
//! - `local`: processes on this machine.
//! - `ssh`: an SSH client that verifies host keys (known_hosts or a pinned key) and
//!   authenticates with keys or the agent; a host with `proxy_jump` is reached through
//!   its bastion(s), each hop verified the same way ([`Jumps`]).
//! - `check`: the staged connection check (resolve, connect, host key, authenticate,
//!   sudo).

pub mod check;
pub mod local;
pub mod ssh;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::model::{ConnectionKind, Host};
pub use ssh::Jumps;

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandSpec {
    /// An argv, run without a shell (quoted for the remote shell by the connection).
    Argv(Vec<String>),
    /// A command line for `sh -c`.
    Shell(String),
}

/// One command on a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRequest {
    pub command: CommandSpec,
    /// Run through `sudo -n` (never prompts).
    pub sudo: bool,
    /// Bytes fed to the command's stdin, then EOF; `None`: stdin closed at once.
    pub stdin: Option<Vec<u8>>,
    /// Kill the command after this long (`Output::timed_out`).
    pub timeout: Option<Duration>,
}

/// What a command did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Output {
    /// `None` when killed (timeout, signal).
    pub exit_code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub timed_out: bool,
    /// `sudo -n` refused because it needs a password.
    pub sudo_password_required: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnError {
    #[error("cannot resolve {host}: {reason}")]
    Resolve { host: String, reason: String },
    #[error("cannot connect to {addr}: {reason}")]
    Connect { addr: String, reason: String },
    #[error("host key of {host} is not trusted: {reason}")]
    HostKey { host: String, reason: String },
    #[error("authentication to {host} as {user} failed: {reason}")]
    Auth {
        host: String,
        user: String,
        reason: String,
    },
    #[error("connection to {host} lost: {reason}")]
    Lost { host: String, reason: String },
    /// A bastion on the way to the host failed (its own resolve, connect, host key or
    /// authentication).
    #[error("via bastion {bastion:?}: {error}")]
    Via {
        bastion: String,
        error: Box<ConnError>,
    },
    /// A bastion could not open a channel to the next hop (`address:port`).
    #[error("bastion {bastion:?} could not open a channel to {addr}: {reason}")]
    Tunnel {
        bastion: String,
        addr: String,
        reason: String,
    },
    #[error("{0}")]
    Other(String),
}

/// Settings shared by every connection of a run.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    pub connect_timeout: Duration,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// Which of a command's outputs some bytes came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Sees a command's output while it runs: every byte of each stream once, in order, as
/// soon as the connection has it. Called on the connection's task: it must not block.
pub type OutputTap<'a> = dyn Fn(Stream, &[u8]) + Send + Sync + 'a;

/// An open connection to one host.
#[async_trait]
pub trait Connection: Send + Sync {
    async fn run(&self, request: &RunRequest) -> Result<Output, ConnError>;
    /// [`Connection::run`], handing `live` the output as it arrives. A connection that
    /// cannot watch a command hands it over when the command has ended.
    async fn run_live(
        &self,
        request: &RunRequest,
        live: &OutputTap<'_>,
    ) -> Result<Output, ConnError> {
        let output = self.run(request).await?;
        live(Stream::Stdout, &output.stdout);
        live(Stream::Stderr, &output.stderr);
        Ok(output)
    }
    /// Closes the connection (best effort).
    async fn close(&self);
}

/// Opens a connection of the host's kind (one of its own to a bastion it is behind).
pub async fn open(host: &Host, options: &ConnectOptions) -> Result<Arc<dyn Connection>, ConnError> {
    open_via(host, options, &Jumps::new()).await
}

/// Opens a connection of the host's kind; a host behind a bastion is reached over the
/// bastion connection `jumps` holds (shared by the hosts of a run behind it).
pub async fn open_via(
    host: &Host,
    options: &ConnectOptions,
    jumps: &Jumps,
) -> Result<Arc<dyn Connection>, ConnError> {
    match host.connection {
        ConnectionKind::Local => Ok(Arc::new(local::LocalConnection::new())),
        ConnectionKind::Ssh => Ok(Arc::new(
            ssh::SshConnection::connect_via(host, options, jumps).await?,
        )),
    }
}
