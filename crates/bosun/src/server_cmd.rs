//! `bosun server`: resolve configuration, start, and stop gracefully on SIGTERM/SIGINT.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use bosun_server::{ConfigOverrides, RunningServer, ServerConfig};
use clap::Args;
use tracing_subscriber::EnvFilter;

/// Flags win over `BOSUN_*` environment variables, which win over the `--config` file.
#[derive(Args, Debug)]
pub struct ServerArgs {
    /// TOML config file (keys: listen, data_dir, database_url, public_url, max_body_bytes,
    /// max_state_bytes).
    #[arg(long, env = "BOSUN_CONFIG")]
    config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:8080].
    #[arg(long, env = "BOSUN_LISTEN")]
    listen: Option<SocketAddr>,
    /// Data directory [default: ./.bosun].
    #[arg(long, env = "BOSUN_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Database URL [default: sqlite://<data-dir>/bosun.db].
    #[arg(long, env = "BOSUN_DATABASE_URL")]
    database_url: Option<String>,
    /// The URL clients and runners reach this server at [default: http://<listen>].
    #[arg(long, env = "BOSUN_PUBLIC_URL")]
    public_url: Option<String>,
    /// Largest accepted request body, in bytes [default: 1048576].
    #[arg(long, env = "BOSUN_MAX_BODY_BYTES")]
    max_body_bytes: Option<usize>,
    /// Largest state document the state backend accepts, in bytes [default: 67108864].
    #[arg(long, env = "BOSUN_MAX_STATE_BYTES")]
    max_state_bytes: Option<usize>,
}

pub async fn run(args: ServerArgs) -> anyhow::Result<ExitCode> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("BOSUN_LOG").unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let config = ServerConfig::resolve(ConfigOverrides {
        config_file: args.config,
        listen: args.listen,
        data_dir: args.data_dir,
        database_url: args.database_url,
        public_url: args.public_url,
        max_body_bytes: args.max_body_bytes,
        max_state_bytes: args.max_state_bytes,
        bootstrap_token: std::env::var("BOSUN_BOOTSTRAP_TOKEN")
            .ok()
            .filter(|t| !t.is_empty()),
    })?;
    let server = RunningServer::start(config).await?;
    if let Some(file) = &server.admin_token_file {
        eprintln!("bosun: admin token written to {}", file.display());
    }
    // Tests and scripts read this line to find the port when listening on port 0.
    eprintln!("bosun: listening on http://{}", server.local_addr);
    wait_for_signal()
        .await
        .context("waiting for a shutdown signal")?;
    tracing::info!("shutdown signal received; finishing in-flight requests");
    server.shutdown().await?;
    Ok(ExitCode::SUCCESS)
}

async fn wait_for_signal() -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {},
        _ = int.recv() => {},
    }
    Ok(())
}
