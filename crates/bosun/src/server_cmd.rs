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
    /// max_state_bytes, webhook_max_bytes, tls_cert_file, tls_key_file,
    /// header_read_timeout, idle_timeout, request_timeout, max_connections, metrics_listen,
    /// metrics_token_file; [notify] retention; [retention] state_keep_versions,
    /// state_keep_for, runs).
    #[arg(long, env = "BOSUN_CONFIG")]
    config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:8080].
    #[arg(long, env = "BOSUN_LISTEN")]
    listen: Option<SocketAddr>,
    /// Data directory [default: ./.bosun].
    #[arg(long, env = "BOSUN_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Database URL: sqlite://PATH, or postgres://USER@HOST:PORT/DATABASE for several
    /// replicas on one PostgreSQL database [default: sqlite://<data-dir>/bosun.db].
    #[arg(long, env = "BOSUN_DATABASE_URL")]
    database_url: Option<String>,
    /// The URL clients and runners reach this server at [default: http://<listen>].
    #[arg(long, env = "BOSUN_PUBLIC_URL")]
    public_url: Option<String>,
    /// Largest accepted request body, in bytes [default: 1048576].
    #[arg(long, env = "BOSUN_MAX_BODY_BYTES")]
    max_body_bytes: Option<usize>,
    /// How often runners heartbeat while executing.
    #[arg(long, env = "BOSUN_RUN_HEARTBEAT", value_parser = humantime::parse_duration, default_value = "10s")]
    run_heartbeat: std::time::Duration,
    /// An executing run with no heartbeat for this long is force-failed (or requeued if
    /// it never started).
    #[arg(long, env = "BOSUN_RUN_STALE_AFTER", value_parser = humantime::parse_duration, default_value = "60s")]
    run_stale_after: std::time::Duration,
    /// How often the stale sweep looks.
    #[arg(long, env = "BOSUN_RUN_SWEEP_INTERVAL", value_parser = humantime::parse_duration, default_value = "5s")]
    run_sweep_interval: std::time::Duration,
    /// One phase timeout for every tier (for tests; tiers set it otherwise).
    #[arg(long, env = "BOSUN_RUN_PHASE_TIMEOUT", value_parser = humantime::parse_duration, hide = true)]
    run_phase_timeout: Option<std::time::Duration>,
    /// Runners embedded in the server for the `hosted` pool (0: none).
    #[arg(long, env = "BOSUN_LOCAL_RUNNERS", default_value_t = 2)]
    local_runners: usize,
    /// How long the embedded runners' engines keep retrying state requests to a server
    /// that does not answer (a database outage) before they give up; the state they could
    /// not write is then delivered as a recovered version.
    #[arg(long, env = "BOSUN_RUNNER_STATE_RETRY_WINDOW", default_value = "5m",
          value_parser = humantime::parse_duration)]
    runner_state_retry_window: std::time::Duration,
    /// A destination the embedded (hosted) runners' engines may reach besides the public
    /// internet, through the egress sandbox: `host:port`, an address, or `addr/prefix`
    /// (a public mirror on a private address). Repeat the flag, or separate with commas.
    #[arg(long = "egress-allow", env = "BOSUN_EGRESS_ALLOW", value_delimiter = ',',
          value_parser = parse_allow_rule)]
    egress_allow: Vec<bosun_runner::egress::AllowRule>,
    /// Run the embedded runners' engines without the egress sandbox, with this machine's
    /// whole network (private addresses, the database, cloud metadata). Said at every
    /// start and shown on the runners; only for a platform that cannot make network
    /// namespaces.
    #[arg(long, env = "BOSUN_EGRESS_UNRESTRICTED")]
    egress_unrestricted: bool,
    /// Largest state document the state backend accepts, in bytes [default: 67108864].
    #[arg(long, env = "BOSUN_MAX_STATE_BYTES")]
    max_state_bytes: Option<usize>,
    /// Largest GitHub webhook delivery accepted, in bytes; a larger one is refused (413)
    /// before its body is read [default: 5242880].
    #[arg(long, env = "BOSUN_WEBHOOK_MAX_BYTES")]
    webhook_max_bytes: Option<usize>,
    /// The secret GitHub signs webhook deliveries with (`X-Hub-Signature-256`).
    #[arg(long, env = "BOSUN_GITHUB_WEBHOOK_SECRET", hide_env_values = true)]
    github_webhook_secret: Option<String>,
    /// The GitHub App's id (with --github-app-key-file).
    #[arg(long, env = "BOSUN_GITHUB_APP_ID")]
    github_app_id: Option<i64>,
    /// The GitHub App's private key (PEM file).
    #[arg(long, env = "BOSUN_GITHUB_APP_KEY_FILE")]
    github_app_key_file: Option<PathBuf>,
    /// GitHub's REST API base (GitHub Enterprise Server: https://HOST/api/v3).
    #[arg(
        long,
        env = "BOSUN_GITHUB_API_URL",
        default_value = "https://api.github.com"
    )]
    github_api_url: String,
    /// Where GitHub repositories are cloned from (GitHub Enterprise Server: https://HOST).
    #[arg(long, env = "BOSUN_GITHUB_URL", default_value = "https://github.com")]
    github_url: String,
    /// The secrets key file (base64 of 32 random bytes) that seals secrets and signing
    /// keys at rest [default: <data-dir>/secrets.key, created on first start].
    #[arg(long, env = "BOSUN_SECRETS_KEY_FILE", conflicts_with = "secrets_key")]
    secrets_key_file: Option<PathBuf>,
    /// The secrets key itself (base64), instead of a file.
    #[arg(long, env = "BOSUN_SECRETS_KEY", hide_env_values = true)]
    secrets_key: Option<String>,
    /// The previous secrets key file: on start, everything sealed with it is re-sealed
    /// with the current key.
    #[arg(long, env = "BOSUN_SECRETS_PREVIOUS_KEY_FILE")]
    secrets_previous_key_file: Option<PathBuf>,
    /// Rotate the OIDC signing key when it is this old (0s: only `bosun oidc rotate`).
    #[arg(long, env = "BOSUN_OIDC_KEY_ROTATION", value_parser = humantime::parse_duration, default_value = "30days")]
    oidc_key_rotation: std::time::Duration,
    /// Lifetime of run identity tokens (tests only; 10 minutes otherwise).
    #[arg(long, env = "BOSUN_OIDC_TOKEN_TTL", value_parser = humantime::parse_duration, default_value = "10m", hide = true)]
    oidc_token_ttl: std::time::Duration,
    /// A state lock held this long sends an `old_lock` notification, once per lock (0s:
    /// never).
    #[arg(long, env = "BOSUN_NOTIFY_LOCK_AGE", value_parser = humantime::parse_duration, default_value = "1h")]
    notify_lock_age: std::time::Duration,
    /// The first notification retry's delay; each further one is three times the last
    /// (8 attempts in all).
    #[arg(long, env = "BOSUN_NOTIFY_RETRY_BASE", value_parser = humantime::parse_duration, default_value = "10s")]
    notify_retry_base: std::time::Duration,
    /// How long sent and given-up notification deliveries (and their events) are kept;
    /// pending ones are always kept (0s: forever) [default: 30days].
    #[arg(long, env = "BOSUN_NOTIFY_RETENTION", value_parser = humantime::parse_duration)]
    notify_retention: Option<std::time::Duration>,
    /// Per stack, the newest this many state versions are kept however old (at least 1)
    /// [default: 100].
    #[arg(long, env = "BOSUN_STATE_KEEP_VERSIONS")]
    state_keep_versions: Option<u32>,
    /// State versions younger than this are kept; older ones past the newest
    /// --state-keep-versions are deleted, except a stack's current version, late or
    /// recovered writes and versions a run took inputs from (0s: keep every version
    /// forever) [default: 90days].
    #[arg(long, env = "BOSUN_STATE_KEEP_FOR", value_parser = humantime::parse_duration)]
    state_keep_for: Option<std::time::Duration>,
    /// Runs that ended longer ago than this are summarised: their log, saved plan file and
    /// plan detail deleted, the record kept with its counts; never a stack's latest run or
    /// the writer of its current state (0s: keep every run whole) [default: 0s].
    #[arg(long, env = "BOSUN_RUN_RETENTION", value_parser = humantime::parse_duration)]
    run_retention: Option<std::time::Duration>,
    /// An ended run's log is compressed at rest this long after the run ended (0s: never)
    /// [default: 10m].
    #[arg(long, env = "BOSUN_LOG_COMPRESS_AFTER", value_parser = humantime::parse_duration)]
    log_compress_after: Option<std::time::Duration>,
    /// VCS deliveries (webhooks, polls) received longer ago than this are deleted with
    /// their trigger decisions; a redelivery goes with the delivery it repeats (0s: keep
    /// them forever) [default: 90days].
    #[arg(long, env = "BOSUN_DELIVERY_RETENTION", value_parser = humantime::parse_duration)]
    delivery_retention: Option<std::time::Duration>,
    /// How often stacks on plain git remotes are polled for new commits (0s: never).
    #[arg(long, env = "BOSUN_GIT_POLL_INTERVAL", value_parser = humantime::parse_duration, default_value = "60s")]
    git_poll_interval: std::time::Duration,
    /// How often the scheduler looks for due drift checks and settles ended ones.
    #[arg(long, env = "BOSUN_SCHEDULE_INTERVAL", value_parser = humantime::parse_duration, default_value = "15s", hide = true)]
    schedule_interval: std::time::Duration,
    /// Let the requester of a run waiting for approval approve it themselves (default:
    /// another approver must).
    #[arg(long, env = "BOSUN_ALLOW_SELF_APPROVAL")]
    allow_self_approval: bool,
    /// Let orgs read policies from `file://` repositories on the server's own disk (off
    /// by default: an org could read any repository the server can, its mirrors of other
    /// orgs' repositories included). For single-tenant servers and tests.
    #[arg(long, env = "BOSUN_ALLOW_FILE_POLICY_REPOSITORIES")]
    allow_file_policy_repositories: bool,
    /// This replica's id among servers sharing one database: it holds the background
    /// duties' leases and owns its embedded runners [default: random, kept in
    /// <data-dir>/replica-id].
    #[arg(long, env = "BOSUN_REPLICA_ID")]
    replica_id: Option<String>,
    /// How long a background duty's cluster-wide lease lasts unrenewed (renewed every
    /// third of it): about how long a dead replica's duties take to move to another.
    #[arg(long, env = "BOSUN_DUTY_LEASE", value_parser = humantime::parse_duration, default_value = "15s")]
    duty_lease: std::time::Duration,
    /// Serve HTTPS with this certificate chain (PEM; re-read on SIGHUP or when it changes).
    #[arg(long, env = "BOSUN_TLS_CERT_FILE", requires = "tls_key_file")]
    tls_cert_file: Option<PathBuf>,
    /// The TLS certificate's private key (PEM).
    #[arg(long, env = "BOSUN_TLS_KEY_FILE", requires = "tls_cert_file")]
    tls_key_file: Option<PathBuf>,
    /// How often the TLS files are checked for a renewal.
    #[arg(long, env = "BOSUN_TLS_RELOAD_INTERVAL", value_parser = humantime::parse_duration, hide = true)]
    tls_reload_interval: Option<std::time::Duration>,
    /// A request head (and the TLS handshake) must arrive within this of connecting or of
    /// its first byte [default: 10s].
    #[arg(long, env = "BOSUN_HEADER_READ_TIMEOUT", value_parser = humantime::parse_duration)]
    header_read_timeout: Option<std::time::Duration>,
    /// Close a connection with no request in flight and no traffic for this long
    /// [default: 60s].
    #[arg(long, env = "BOSUN_IDLE_TIMEOUT", value_parser = humantime::parse_duration)]
    idle_timeout: Option<std::time::Duration>,
    /// A request's body must arrive within this of its head; answering is not bounded
    /// (long-polls, log streams) [default: 120s].
    #[arg(long, env = "BOSUN_REQUEST_TIMEOUT", value_parser = humantime::parse_duration)]
    request_timeout: Option<std::time::Duration>,
    /// Connections served at once; more are refused [default: 1024].
    #[arg(long, env = "BOSUN_MAX_CONNECTIONS")]
    max_connections: Option<usize>,
    /// Serve /metrics on this address only (plain HTTP), not on the main listener.
    #[arg(long, env = "BOSUN_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// The bearer token /metrics requires (at least 16 characters).
    #[arg(
        long,
        env = "BOSUN_METRICS_TOKEN",
        hide_env_values = true,
        conflicts_with = "metrics_token_file"
    )]
    metrics_token: Option<String>,
    /// A file holding the bearer token /metrics requires.
    #[arg(long, env = "BOSUN_METRICS_TOKEN_FILE")]
    metrics_token_file: Option<PathBuf>,
}

/// Runs the server. `ca_file` is the global `--ca-file`: what the embedded runners trust
/// for this server's certificate when its chain alone does not lead to a trusted root.
pub async fn run(args: ServerArgs, ca_file: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("BOSUN_LOG").unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let vcs = vcs_config(&args)?;
    let secrets = secrets_config(&args);
    let egress = hosted_egress(&args)?;
    let config = ServerConfig::resolve(ConfigOverrides {
        config_file: args.config,
        listen: args.listen,
        data_dir: args.data_dir,
        database_url: args.database_url,
        public_url: args.public_url,
        max_body_bytes: args.max_body_bytes,
        max_state_bytes: args.max_state_bytes,
        webhook_max_bytes: args.webhook_max_bytes,
        notify_retention: args.notify_retention,
        state_keep_versions: args.state_keep_versions,
        state_keep_for: args.state_keep_for,
        run_retention: args.run_retention,
        compress_logs_after: args.log_compress_after,
        delivery_retention: args.delivery_retention,
        bootstrap_token: std::env::var("BOSUN_BOOTSTRAP_TOKEN")
            .ok()
            .filter(|t| !t.is_empty()),
        tls_cert_file: args.tls_cert_file.clone(),
        tls_key_file: args.tls_key_file.clone(),
        header_read_timeout: args.header_read_timeout,
        idle_timeout: args.idle_timeout,
        request_timeout: args.request_timeout,
        max_connections: args.max_connections,
        metrics_listen: args.metrics_listen,
        metrics_token: args.metrics_token.clone().filter(|t| !t.is_empty()),
        metrics_token_file: args.metrics_token_file.clone(),
    })?;
    let mut config = config;
    config.runs = bosun_server::config::RunTimings {
        heartbeat: args.run_heartbeat,
        stale_after: args.run_stale_after,
        sweep_interval: args.run_sweep_interval,
        phase_timeout: args.run_phase_timeout,
    };
    config.vcs = vcs;
    config.secrets = secrets;
    config.notify = bosun_server::config::NotifyConfig {
        lock_age: args.notify_lock_age,
        retry_base: args.notify_retry_base,
        ..config.notify
    };
    config.oidc = bosun_server::config::OidcConfig {
        token_ttl: args.oidc_token_ttl,
        rotate_every: args.oidc_key_rotation,
    };
    config.schedules.interval = args
        .schedule_interval
        .max(std::time::Duration::from_millis(10));
    config.allow_self_approval = args.allow_self_approval;
    config.allow_file_policy_repositories = args.allow_file_policy_repositories;
    config.replica_id = args.replica_id.clone();
    config.duty_lease = args.duty_lease.max(std::time::Duration::from_millis(300));
    if let Some(every) = args.tls_reload_interval {
        config.listener.tls_reload_interval = every.max(std::time::Duration::from_millis(100));
    }
    let server = RunningServer::start(config).await?;
    if let Some(file) = &server.admin_token_file {
        eprintln!("bosun: admin token written to {}", file.display());
    }
    let tls = server.state().config.listener.tls.clone();
    let scheme = if tls.is_some() { "https" } else { "http" };
    // Tests and scripts read this line to find the port when listening on port 0.
    eprintln!("bosun: listening on {scheme}://{}", server.local_addr);
    eprintln!(
        "bosun: console at {}/ (log in with a personal token)",
        server.state().config.public_url.trim_end_matches('/')
    );
    if let Some(addr) = server.metrics_addr {
        eprintln!("bosun: metrics on http://{addr}/metrics");
    }
    // The embedded hosted pool: the same runner agent, talking to this server over HTTP.
    let (stop_runners, runners_stopped) = tokio::sync::oneshot::channel::<()>();
    let runners = (args.local_runners > 0).then(|| {
        let mut config = bosun_runner::RunnerConfig::new(
            embedded_url(&server, tls.is_some()),
            server.hosted_runner_token.clone(),
            server.embedded_runner_name.clone(),
            server.state().config.data_dir.join("runner"),
        );
        config.state_retry_window = args.runner_state_retry_window;
        config.egress = egress.clone();
        if let Some(tls) = &tls {
            // Over loopback, under the public URL's name, trusting the public roots and
            // the CA file, or else the chain the server serves (its CA or intermediate
            // as an anchor): the runners check their own server's certificate like any
            // other client.
            let trust = ca_file.as_deref().unwrap_or(&tls.cert_file);
            config.ca_file = Some(absolute(trust));
            config.connect_to = Some(server.local_addr);
        }
        tokio::spawn(bosun_runner::run_workers(
            config,
            args.local_runners,
            async {
                let _ = runners_stopped.await;
            },
        ))
    });
    wait_for_signal()
        .await
        .context("waiting for a shutdown signal")?;
    tracing::info!("shutdown signal received; finishing in-flight requests");
    // Runners first: they stop leasing and settle what they hold while the server still
    // answers them.
    let _ = stop_runners.send(());
    if let Some(runners) = runners {
        match runners.await {
            Ok(Err(e)) => tracing::warn!(error = %e, "embedded runners stopped with an error"),
            Err(e) => tracing::warn!(error = %e, "embedded runners task failed"),
            Ok(Ok(())) => {}
        }
    }
    server.shutdown().await?;
    Ok(ExitCode::SUCCESS)
}

/// How the embedded runners' engines reach the network: in the egress sandbox, unless
/// the operator opted out. A platform that cannot make the sandbox stops the server here,
/// before it serves anything, rather than run hosted engines unsandboxed.
fn hosted_egress(args: &ServerArgs) -> anyhow::Result<bosun_runner::egress::EgressMode> {
    use bosun_runner::egress::{probe, EgressMode, EgressPolicy};
    if args.local_runners == 0 {
        return Ok(EgressMode::Restricted(EgressPolicy::default()));
    }
    if args.egress_unrestricted {
        if !args.egress_allow.is_empty() {
            anyhow::bail!("--egress-allow has no effect with --egress-unrestricted: pass one");
        }
        eprintln!(
            "bosun: WARNING: --egress-unrestricted: the embedded runners' engines run without \
             the egress sandbox and reach every network this machine reaches"
        );
        return Ok(EgressMode::OptedOut);
    }
    probe().context("the embedded runners cannot start")?;
    Ok(EgressMode::Restricted(EgressPolicy {
        allow: args.egress_allow.clone(),
    }))
}

fn parse_allow_rule(raw: &str) -> Result<bosun_runner::egress::AllowRule, String> {
    raw.parse()
}

/// The URL the embedded runners use: over TLS, the public URL's host (the name the
/// certificate is for) on the bound port, resolved to the bound address.
fn embedded_url(server: &RunningServer, tls: bool) -> String {
    if !tls {
        return format!("http://{}", server.local_addr);
    }
    let public = &server.state().config.public_url;
    let host = reqwest::Url::parse(public)
        .ok()
        .and_then(|u| u.host_str().map(str::to_string))
        .unwrap_or_else(|| server.local_addr.ip().to_string());
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host
    };
    format!("https://{host}:{}", server.local_addr.port())
}

/// `path` from the root: the engine runs in its own workspace directory.
fn absolute(path: &std::path::Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

fn secrets_config(args: &ServerArgs) -> bosun_server::config::SecretsConfig {
    use bosun_server::config::Secret;
    use bosun_server::secrets::seal::KeySource;
    let key = match (&args.secrets_key_file, &args.secrets_key) {
        (Some(f), _) => Some(KeySource::File(f.clone())),
        (None, Some(v)) if !v.is_empty() => Some(KeySource::Value(Secret(v.clone()))),
        _ => None,
    };
    bosun_server::config::SecretsConfig {
        key,
        previous_key: args.secrets_previous_key_file.clone().map(KeySource::File),
    }
}

fn vcs_config(args: &ServerArgs) -> anyhow::Result<bosun_server::config::VcsConfig> {
    use bosun_server::config::{GithubAppConfig, Secret, VcsConfig};
    let app = match (args.github_app_id, &args.github_app_key_file) {
        (Some(app_id), Some(file)) => {
            let pem = std::fs::read_to_string(file).with_context(|| {
                format!("reading the GitHub App private key {}", file.display())
            })?;
            Some(GithubAppConfig {
                app_id,
                private_key_pem: Secret(pem),
            })
        }
        (None, None) => None,
        _ => anyhow::bail!(
            "--github-app-id and --github-app-key-file go together: give both or neither"
        ),
    };
    let secret = args
        .github_webhook_secret
        .clone()
        .filter(|s| !s.is_empty())
        .map(Secret);
    Ok(VcsConfig {
        webhook_secret: secret,
        app,
        api_url: args.github_api_url.trim_end_matches('/').to_string(),
        web_url: args.github_url.trim_end_matches('/').to_string(),
        poll_interval: args.git_poll_interval,
    })
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
