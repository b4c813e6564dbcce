//! `bosun runner`: flags/env → `RunnerConfig`, then workers until a signal. The first
//! SIGTERM/SIGINT drains (lease nothing new, let running phases finish); a second abandons
//! the running phases (interrupt the engine, report them failed) and exits.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use bosun_runner::{default_runner_name, run_workers_draining, RunnerConfig};
use clap::Args;
use tokio::sync::oneshot;
use tracing_subscriber::EnvFilter;

/// The runner's flags. Its pool token comes from the global `--token` flag or
/// `BOSUN_RUNNER_TOKEN` (`BOSUN_TOKEN`, a personal token's variable, is not used).
#[derive(Args, Debug)]
pub struct RunnerArgs {
    /// The Bosun server's URL.
    #[arg(long, env = "BOSUN_SERVER")]
    server: String,
    /// This runner's name, shown on the server [default: the host name].
    #[arg(long, env = "BOSUN_RUNNER_NAME")]
    name: Option<String>,
    /// How many phases this runner executes at once (one lease per worker).
    #[arg(long, env = "BOSUN_RUNNER_WORKERS", default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..=256))]
    workers: u16,
    /// Where phase workspaces are made [default: <temp dir>/bosun-runner].
    #[arg(long, env = "BOSUN_RUNNER_WORK_DIR")]
    work_dir: Option<PathBuf>,
    /// How long the engine gets to stop after an interrupt (cancel, timeout, shutdown)
    /// before its process group is killed.
    #[arg(long, env = "BOSUN_RUNNER_CANCEL_GRACE", default_value = "10s",
          value_parser = humantime::parse_duration)]
    cancel_grace: Duration,
    /// How long the engine's state requests (read, write, lock, unlock) keep retrying a
    /// server that does not answer (a restart, a database outage) before the engine gives
    /// up; the state it could not write is then delivered as a recovered version.
    #[arg(long, env = "BOSUN_RUNNER_STATE_RETRY_WINDOW", default_value = "5m",
          value_parser = humantime::parse_duration)]
    state_retry_window: Duration,
    /// Run the engines in the egress sandbox, as the server's hosted runners do: their own
    /// network namespace, out only through this runner's egress proxy, which refuses
    /// private, loopback and metadata addresses. A self-hosted runner is unrestricted by
    /// default (reaching your network is its point). Needs CAP_SYS_ADMIN.
    #[arg(long, env = "BOSUN_RUNNER_EGRESS_RESTRICTED")]
    egress_restricted: bool,
    /// With --egress-restricted: a destination the engines may reach besides the public
    /// internet (`host:port`, an address, or `addr/prefix`). Repeat, or separate with
    /// commas.
    #[arg(long = "egress-allow", env = "BOSUN_RUNNER_EGRESS_ALLOW", value_delimiter = ',',
          value_parser = |raw: &str| raw.parse::<bosun_runner::egress::AllowRule>())]
    egress_allow: Vec<bosun_runner::egress::AllowRule>,
}

/// Runs the runner. `token_flag` is the global `--token` when given on the command line;
/// `ca_file` the global `--ca-file` (`BOSUN_CA_FILE`).
pub async fn run(
    args: RunnerArgs,
    token_flag: Option<String>,
    ca_file: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("BOSUN_LOG").unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let token = token_flag
        .or_else(|| std::env::var("BOSUN_RUNNER_TOKEN").ok())
        .filter(|t| !t.trim().is_empty());
    let Some(token) = token else {
        bail!(
            "no runner token: pass --token or set BOSUN_RUNNER_TOKEN (a runner-pool token; \
             see `bosun token create --pool`)"
        );
    };
    let name = args
        .name
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(default_runner_name);
    let work_dir = args
        .work_dir
        .unwrap_or_else(|| std::env::temp_dir().join("bosun-runner"));
    let mut config = RunnerConfig::new(args.server.clone(), token, name.clone(), work_dir);
    config.cancel_grace = args.cancel_grace;
    config.state_retry_window = args.state_retry_window;
    config.egress = match (args.egress_restricted, args.egress_allow.is_empty()) {
        (true, _) => {
            bosun_runner::egress::EgressMode::Restricted(bosun_runner::egress::EgressPolicy {
                allow: args.egress_allow,
            })
        }
        (false, true) => bosun_runner::egress::EgressMode::Unrestricted,
        (false, false) => bail!(
            "--egress-allow opens destinations of the egress sandbox: pass --egress-restricted \
             too (an unrestricted runner reaches everything already)"
        ),
    };
    // Absolute: the engine, which is given it as SSL_CERT_FILE, runs in its workspace.
    config.ca_file = match ca_file {
        Some(path) => Some(
            std::path::absolute(&path)
                .with_context(|| format!("cannot use the CA file {}", path.display()))?,
        ),
        None => None,
    };

    let (drain_tx, drain_rx) = oneshot::channel::<()>();
    let (abandon_tx, abandon_rx) = oneshot::channel::<()>();
    let mut signals = Signals::new().context("cannot listen for signals")?;
    let signals = tokio::spawn(async move {
        signals.next().await;
        eprintln!("bosun: draining: finishing the running phases; signal again to abandon them");
        let _ = drain_tx.send(());
        signals.next().await;
        eprintln!("bosun: abandoning the running phases");
        let _ = abandon_tx.send(());
    });
    // A dropped sender (no signal handler) must not count as a signal.
    let drain = async {
        if drain_rx.await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let abandon = async {
        if abandon_rx.await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let egress = match &config.egress {
        bosun_runner::egress::EgressMode::Restricted(_) => "engines in the egress sandbox",
        _ => "engines unrestricted",
    };
    eprintln!(
        "bosun: runner {name} working for {} with {} worker(s), {egress}",
        args.server, args.workers
    );
    let result = run_workers_draining(config, usize::from(args.workers), drain, abandon).await;
    signals.abort();
    result.context("the runner stopped")?;
    Ok(ExitCode::SUCCESS)
}

/// SIGTERM and SIGINT, listened to from start to end (no signal slips between two waits).
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    async fn next(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {},
            _ = self.int.recv() => {},
        }
    }
}
