//! The Bosun runner: the agent that leases run phases from a Bosun server and executes
//! them with the IaC engine, streaming logs and heartbeats.
//!
//! `run_workers` starts N workers against one server. Each registers, then loops: lease a
//! phase (long poll), execute it in a fresh workspace — clone, integrations, `started`,
//! `init`, `plan` or `apply` with the engine in its own process group and a minimal
//! environment — while a heartbeat task beats independently of output, then report. A
//! heartbeat's `cancel` or the phase timeout interrupts the engine's group (SIGINT,
//! SIGKILL after the grace period); a fenced lease kills it at once and nothing is
//! reported.
//!
//! Modules: `worker` (the lease loop, heartbeat, watchdog, report), `phase` (what a plan
//! or apply phase runs), `integrations` (what the runner resolves before the engine
//! starts: identity token files for AWS, kept fresh while the phase runs), `process` (one
//! command: process group, streaming, stopping), `workspace` (directory, environments —
//! the clone token reaches git only, the run identity the engine only —, backend
//! override, which lease values are secrets), `logs` (masking the phase's secrets, chunk
//! numbering, batching, shipping), `plan_summary` (`show -json` → `PlanSummary`),
//! `client` (the protocol's HTTP calls and retries), `control` (stop reasons and
//! shutdown levels), `recovery` (the state an engine could not write — its
//! `errored.tfstate` — delivered to the server as a recovered version, at the end of the
//! phase or when a runner starts on a work dir that still holds one), `egress` (the
//! sandbox a restricted runner's engines run in: their own network namespace whose only
//! way out is the runner's egress proxy, which refuses private addresses).

mod client;
mod control;
pub mod egress;
mod integrations;
mod logs;
mod phase;
mod plan_run;
mod plan_summary;
mod process;
mod recovery;
mod worker;
mod workspace;

#[cfg(test)]
mod pool_tests;
#[cfg(test)]
mod test_net;
#[cfg(test)]
mod test_support;

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::client::ServerClient;
use crate::control::{Level, Shutdown};
use crate::worker::Worker;

/// How one runner process reaches its server and where it works.
#[derive(Clone)]
pub struct RunnerConfig {
    /// The server's base URL (`http(s)://host[:port]`).
    pub server: String,
    /// A runner-pool token.
    pub token: String,
    /// The runner's name; with several workers each registers as `<name>-<i>`.
    pub name: String,
    /// Where phase workspaces are made (created 0700 if missing).
    pub work_dir: PathBuf,
    /// How long the engine gets to stop after an interrupt before its group is killed.
    pub cancel_grace: Duration,
    /// PEM certificates trusted for the server's TLS besides the built-in public roots
    /// (a private CA, or the server's own chain); given to the engine as `SSL_CERT_FILE`.
    pub ca_file: Option<PathBuf>,
    /// Connect here instead of resolving the server URL's host: the embedded runners
    /// reach their own server over loopback while checking its certificate under the
    /// name in the URL.
    pub connect_to: Option<std::net::SocketAddr>,
    /// How long the engine's state requests (read, write, lock, unlock) keep retrying a
    /// server that does not answer, through the http backend's `TF_HTTP_RETRY_*` settings.
    pub state_retry_window: Duration,
    /// Whether the engines run in the egress sandbox (`egress`).
    pub egress: egress::EgressMode,
}

impl RunnerConfig {
    pub const DEFAULT_CANCEL_GRACE: Duration = Duration::from_secs(10);
    pub const DEFAULT_STATE_RETRY_WINDOW: Duration = Duration::from_secs(300);

    /// A config with the default cancel grace.
    pub fn new(
        server: impl Into<String>,
        token: impl Into<String>,
        name: impl Into<String>,
        work_dir: impl Into<PathBuf>,
    ) -> Self {
        RunnerConfig {
            server: server.into(),
            token: token.into(),
            name: name.into(),
            work_dir: work_dir.into(),
            cancel_grace: Self::DEFAULT_CANCEL_GRACE,
            ca_file: None,
            connect_to: None,
            state_retry_window: Self::DEFAULT_STATE_RETRY_WINDOW,
            egress: egress::EgressMode::Unrestricted,
        }
    }
}

impl fmt::Debug for RunnerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunnerConfig")
            .field("server", &self.server)
            .field("token", &"<redacted>")
            .field("name", &self.name)
            .field("work_dir", &self.work_dir)
            .field("cancel_grace", &self.cancel_grace)
            .field("ca_file", &self.ca_file)
            .field("connect_to", &self.connect_to)
            .field("state_retry_window", &self.state_retry_window)
            .field("egress", &self.egress)
            .finish()
    }
}

/// The host's name, for a runner that was not given one.
pub fn default_runner_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|name| name.trim().to_string())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "runner".to_string())
}

#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error("invalid server URL {0:?}: expected http(s)://HOST[:PORT]")]
    InvalidServerUrl(String),
    #[error("no runner token: a runner-pool token is required")]
    MissingToken,
    #[error("the runner token contains characters that cannot be sent in an HTTP header")]
    InvalidToken,
    #[error("cannot set up the HTTP client: {0}")]
    HttpClient(#[source] reqwest::Error),
    #[error("cannot use the CA file {path}: {reason}")]
    CaFile { path: PathBuf, reason: String },
    #[error("cannot use the work directory {path}: {reason}")]
    WorkDir { path: PathBuf, reason: String },
    #[error("the server refused runner {name}: {reason}")]
    Refused { name: String, reason: String },
    #[error(transparent)]
    Sandbox(#[from] egress::SandboxUnavailable),
    #[error("a worker stopped unexpectedly: {0}")]
    WorkerPanicked(String),
}

/// Runs `workers` workers until `shutdown` resolves. Then they lease nothing new, and a
/// phase in flight is abandoned gracefully: the engine is interrupted (killed after the
/// cancel grace), the log flushed, and the phase reported as failed. Returns once every
/// worker has stopped; `Err` if one could not work (bad configuration, refused token).
pub async fn run_workers(
    config: RunnerConfig,
    workers: usize,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RunnerError> {
    run_pool(config, workers, std::future::pending(), shutdown).await
}

/// Like `run_workers`, with two stages of shutdown: after `drain` resolves workers lease
/// nothing new but let phases in flight finish; after `abandon` resolves those phases are
/// abandoned as `run_workers` does.
pub async fn run_workers_draining(
    config: RunnerConfig,
    workers: usize,
    drain: impl Future<Output = ()>,
    abandon: impl Future<Output = ()>,
) -> Result<(), RunnerError> {
    run_pool(config, workers, drain, abandon).await
}

async fn run_pool(
    config: RunnerConfig,
    workers: usize,
    drain: impl Future<Output = ()>,
    abandon: impl Future<Output = ()>,
) -> Result<(), RunnerError> {
    let client = Arc::new(ServerClient::with_tls(
        &config.server,
        &config.token,
        config.ca_file.as_deref(),
        config.connect_to,
    )?);
    prepare_work_dir(&config.work_dir).await?;
    // Never silently open: a runner that must sandbox its engines and cannot does not
    // start.
    match &config.egress {
        egress::EgressMode::Restricted(_) => {
            tokio::task::spawn_blocking(egress::probe)
                .await
                .map_err(|e| RunnerError::WorkerPanicked(e.to_string()))??;
        }
        egress::EgressMode::OptedOut => tracing::warn!(
            runner = %config.name,
            "engines run without the egress sandbox (--egress-unrestricted): they reach \
             every network this machine reaches"
        ),
        egress::EgressMode::Unrestricted => {}
    }
    let config = Arc::new(config);
    let (level_tx, level_rx) = watch::channel(Level::Running);
    let mut set = JoinSet::new();
    // What an earlier process left on this work dir is settled beside the workers (a
    // state to deliver, a lease to hand back); listed before any worker starts, so none
    // of this process's own workspaces is taken for one. It stops trying once the runner
    // drains (the files stay for the next start).
    let found = recovery::leftovers(&config.work_dir).await;
    let leftovers = Shutdown::new(level_rx.clone());
    let delivery = recovery::settle_leftovers(
        Arc::clone(&client),
        found,
        config.name.clone(),
        async move { leftovers.reached(Level::Draining).await },
    );
    set.spawn(async move {
        delivery.await;
        Ok(())
    });
    for i in 0..workers {
        let name = if workers == 1 {
            config.name.clone()
        } else {
            format!("{}-{}", config.name, i + 1)
        };
        let worker = Worker {
            client: Arc::clone(&client),
            config: Arc::clone(&config),
            name,
            shutdown: Shutdown::new(level_rx.clone()),
        };
        set.spawn(worker.run());
    }
    let raise = |level: Level| {
        level_tx.send_if_modified(|current| {
            let raised = level > *current;
            if raised {
                *current = level;
            }
            raised
        })
    };
    tokio::pin!(drain, abandon);
    let (mut drained, mut abandoned) = (false, false);
    let mut first_error = None;
    loop {
        tokio::select! {
            () = &mut drain, if !drained => {
                drained = true;
                if raise(Level::Draining) {
                    tracing::info!("draining: leasing nothing new; phases in flight finish");
                }
            }
            () = &mut abandon, if !abandoned => {
                abandoned = true;
                drained = true;
                if raise(Level::Abandoning) {
                    tracing::info!("stopping: phases in flight are interrupted and reported");
                }
            }
            joined = set.join_next() => match joined {
                None => break,
                Some(Ok(Ok(()))) => {}
                Some(Ok(Err(e))) => {
                    tracing::error!(error = %e, "a worker stopped");
                    first_error.get_or_insert(e);
                }
                Some(Err(e)) => {
                    tracing::error!(error = %e, "a worker task failed");
                    first_error.get_or_insert(RunnerError::WorkerPanicked(e.to_string()));
                }
            },
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Creates the work dir (0700) and makes sure it is a directory of this user: workspaces
/// hold the checkout, plan files and the engine's state of mind.
async fn prepare_work_dir(dir: &std::path::Path) -> Result<(), RunnerError> {
    use std::os::unix::fs::MetadataExt as _;
    let fail = |reason: String| RunnerError::WorkDir {
        path: dir.to_path_buf(),
        reason,
    };
    workspace::create_private_dir(dir)
        .await
        .map_err(|e| fail(e.to_string()))?;
    let meta = tokio::fs::symlink_metadata(dir)
        .await
        .map_err(|e| fail(e.to_string()))?;
    if !meta.is_dir() {
        return Err(fail("not a directory".to_string()));
    }
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    if meta.uid() != uid {
        return Err(fail(format!(
            "owned by uid {}, not by this runner's uid {uid}",
            meta.uid()
        )));
    }
    Ok(())
}
