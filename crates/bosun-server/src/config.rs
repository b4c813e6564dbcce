//! Server configuration: built-in defaults < TOML file (`--config`) < `BOSUN_*`
//! environment variables < command-line flags.
//!
//! The binary's clap layer resolves flags and env vars into [`ConfigOverrides`] (clap
//! gives flags precedence over env); [`ServerConfig::resolve`] lays them over the file.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The settings a TOML config file may hold. Unknown keys are refused.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<SocketAddr>,
    pub data_dir: Option<PathBuf>,
    pub database_url: Option<String>,
    pub public_url: Option<String>,
    pub max_body_bytes: Option<usize>,
    pub max_state_bytes: Option<usize>,
    /// Largest GitHub webhook delivery accepted, in bytes.
    pub webhook_max_bytes: Option<usize>,
    /// `[notify]`: notification settings.
    pub notify: Option<NotifyFile>,
    /// `[retention]`: what the retention duty keeps.
    pub retention: Option<RetentionFile>,
    /// TLS on the listener: the certificate chain and its private key (PEM files).
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
    /// Listener timeouts, humantime (`10s`, `2m`).
    pub header_read_timeout: Option<String>,
    pub idle_timeout: Option<String>,
    pub request_timeout: Option<String>,
    pub max_connections: Option<usize>,
    /// `/metrics` on its own listener (and not on the main one).
    pub metrics_listen: Option<SocketAddr>,
    /// A file holding the bearer token `/metrics` requires.
    pub metrics_token_file: Option<PathBuf>,
    /// `[sign_in]`: identity providers, token login and session lifetimes.
    pub sign_in: Option<crate::sign_in::config::SignInFile>,
}

/// The `[notify]` table of the config file.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NotifyFile {
    /// How long sent and given-up deliveries (and their events) are kept, humantime
    /// (`30days`, `12h`); `0s` keeps them forever.
    pub retention: Option<String>,
}

/// The `[retention]` table of the config file.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RetentionFile {
    /// State versions kept per stack however old: the newest N (at least 1).
    pub state_keep_versions: Option<u32>,
    /// State versions younger than this are kept, humantime (`90days`); `0s` keeps every
    /// version forever.
    pub state_keep_for: Option<String>,
    /// Runs that ended longer ago than this are summarised, humantime (`400days`); `0s`
    /// keeps every run whole.
    pub runs: Option<String>,
    /// A run's log is compressed this long after the run ended, humantime (`10m`); `0s`
    /// never compresses.
    pub compress_logs_after: Option<String>,
    /// VCS deliveries received longer ago than this are deleted with their trigger
    /// decisions, humantime (`90days`); `0s` keeps them forever.
    pub deliveries: Option<String>,
}

/// Values from flags or the environment; `None` where neither was given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConfigOverrides {
    pub config_file: Option<PathBuf>,
    pub listen: Option<SocketAddr>,
    pub data_dir: Option<PathBuf>,
    pub database_url: Option<String>,
    pub public_url: Option<String>,
    pub max_body_bytes: Option<usize>,
    pub max_state_bytes: Option<usize>,
    /// `--webhook-max-bytes` / `BOSUN_WEBHOOK_MAX_BYTES`.
    pub webhook_max_bytes: Option<usize>,
    /// `--notify-retention` / `BOSUN_NOTIFY_RETENTION`.
    pub notify_retention: Option<std::time::Duration>,
    /// `--state-keep-versions` / `BOSUN_STATE_KEEP_VERSIONS`.
    pub state_keep_versions: Option<u32>,
    /// `--state-keep-for` / `BOSUN_STATE_KEEP_FOR`.
    pub state_keep_for: Option<std::time::Duration>,
    /// `--run-retention` / `BOSUN_RUN_RETENTION`.
    pub run_retention: Option<std::time::Duration>,
    /// `--log-compress-after` / `BOSUN_LOG_COMPRESS_AFTER`.
    pub compress_logs_after: Option<std::time::Duration>,
    /// `--delivery-retention` / `BOSUN_DELIVERY_RETENTION`.
    pub delivery_retention: Option<std::time::Duration>,
    /// `BOSUN_BOOTSTRAP_TOKEN`: the first admin's token on an empty store.
    pub bootstrap_token: Option<String>,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
    pub header_read_timeout: Option<std::time::Duration>,
    pub idle_timeout: Option<std::time::Duration>,
    pub request_timeout: Option<std::time::Duration>,
    pub max_connections: Option<usize>,
    pub metrics_listen: Option<SocketAddr>,
    /// `--metrics-token` / `BOSUN_METRICS_TOKEN`.
    pub metrics_token: Option<String>,
    pub metrics_token_file: Option<PathBuf>,
}

/// The resolved configuration the server runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    /// `sqlite://PATH`; defaults to `<data_dir>/bosun.db`.
    pub database_url: Option<String>,
    /// The URL clients and runners reach this server at.
    pub public_url: String,
    pub max_body_bytes: usize,
    /// Largest state document the backend accepts.
    pub max_state_bytes: usize,
    /// Largest GitHub webhook delivery accepted: anyone may post to the webhook, and its
    /// body is read before the signature can be checked.
    pub webhook_max_bytes: usize,
    /// Runs: how often runners heartbeat, when a silent run is stale, how often the
    /// sweep looks, and (tests only) a phase timeout that replaces the tiers'.
    pub runs: RunTimings,
    /// GitHub App, webhooks and git polling.
    pub vcs: VcsConfig,
    /// The key that seals secrets and signing keys at rest.
    pub secrets: SecretsConfig,
    /// The OIDC issuer: token lifetime and signing-key rotation.
    pub oidc: OidcConfig,
    /// Notification delivery: retries, timeouts, the old-lock threshold.
    pub notify: NotifyConfig,
    /// What the retention duty keeps, and when it compresses run logs.
    pub retention: RetentionConfig,
    /// The scheduler (drift checks): how often it looks, and the clock it reads.
    pub schedules: crate::schedules::clock::ScheduleConfig,
    /// Whether the requester of a run waiting for approval may approve it themselves
    /// (off by default: another approver must).
    pub allow_self_approval: bool,
    /// Whether a policy may be read from a `file://` repository on the server's disk
    /// (off by default: an org could read any repository the server can).
    pub allow_file_policy_repositories: bool,
    pub bootstrap_token: Option<String>,
    /// This replica's id among the servers sharing one database (`--replica-id`): the
    /// holder of its duty leases and the owner of its embedded runners. `None`: the id in
    /// `<data-dir>/replica-id`, written at random on first start.
    pub replica_id: Option<String>,
    /// How long a duty lease lasts unrenewed (renewed every third of it): about how long
    /// a dead replica's duties take to move to another.
    pub duty_lease: std::time::Duration,
    /// The listener: TLS, timeouts, the connection cap.
    pub listener: ListenerConfig,
    /// Who may read `/metrics`, and where.
    pub metrics: MetricsConfig,
    /// How people sign in to the console: identity providers, token login, sessions.
    pub sign_in: crate::sign_in::config::SignInConfig,
}

/// The listener's TLS, timeouts and connection cap.
#[derive(Debug, Clone, PartialEq)]
pub struct ListenerConfig {
    /// Serve HTTPS with this certificate and key; `None`: plain HTTP.
    pub tls: Option<TlsFiles>,
    /// How often the certificate files are checked for a renewal (SIGHUP reloads at once).
    pub tls_reload_interval: std::time::Duration,
    /// A connection's request head (and a TLS handshake) must arrive within this of the
    /// connection opening or of the head's first byte.
    pub header_read_timeout: std::time::Duration,
    /// A keep-alive connection with no request in flight and no traffic for this long is
    /// closed.
    pub idle_timeout: std::time::Duration,
    /// A request's body must have arrived within this of its head. Only the reading of
    /// the request is bounded: a long-poll or a log stream answers for as long as it needs.
    pub request_timeout: std::time::Duration,
    /// Connections served at once; more are answered 503 (plain HTTP) or closed (TLS).
    pub max_connections: usize,
}

/// The listener's certificate chain and key, PEM files re-read on change.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsFiles {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

pub const DEFAULT_HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
pub const DEFAULT_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
pub const DEFAULT_REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
pub const DEFAULT_TLS_RELOAD_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

impl Default for ListenerConfig {
    fn default() -> Self {
        ListenerConfig {
            tls: None,
            tls_reload_interval: DEFAULT_TLS_RELOAD_INTERVAL,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Access to `/metrics`: with a token, only `Authorization: Bearer <token>` reads it;
/// with a listen address, it is served there and not on the main listener; with
/// neither, the main listener serves it only when that listener is on loopback.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsConfig {
    pub token: Option<Secret>,
    pub listen: Option<SocketAddr>,
}

/// The default duty lease: 15 s.
pub const DEFAULT_DUTY_LEASE: std::time::Duration = std::time::Duration::from_secs(15);

/// Where stacks' code comes from: the GitHub App (webhooks, installation tokens) and
/// the poller for plain git remotes.
#[derive(Debug, Clone, PartialEq)]
pub struct VcsConfig {
    /// The webhook secret GitHub signs deliveries with; without it `/webhooks/github`
    /// refuses every delivery.
    pub webhook_secret: Option<Secret>,
    /// The App's id and private key, for installation tokens.
    pub app: Option<GithubAppConfig>,
    /// REST API base: `https://api.github.com`, or `https://HOST/api/v3` for GitHub
    /// Enterprise Server.
    pub api_url: String,
    /// Where repositories are cloned from: `https://github.com` or `https://HOST`.
    pub web_url: String,
    /// How often plain git remotes are polled for new commits; zero turns polling off.
    pub poll_interval: std::time::Duration,
}

impl Default for VcsConfig {
    fn default() -> Self {
        VcsConfig {
            webhook_secret: None,
            app: None,
            api_url: "https://api.github.com".into(),
            web_url: "https://github.com".into(),
            poll_interval: std::time::Duration::from_secs(60),
        }
    }
}

/// Where the secrets key comes from; `None`: `<data-dir>/secrets.key`, written on first
/// start while nothing is sealed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SecretsConfig {
    pub key: Option<KeySource>,
    /// The key values were sealed with before a rotation: on start, everything sealed
    /// with it is re-sealed with `key`.
    pub previous_key: Option<KeySource>,
}

/// The OIDC issuer's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct OidcConfig {
    /// Lifetime of an identity token (10 minutes).
    pub token_ttl: std::time::Duration,
    /// Rotate the signing key when the active one is this old; zero: only by command.
    pub rotate_every: std::time::Duration,
}

impl Default for OidcConfig {
    fn default() -> Self {
        OidcConfig {
            token_ttl: std::time::Duration::from_secs(600),
            rotate_every: std::time::Duration::from_secs(30 * 24 * 3600),
        }
    }
}

/// Notification delivery settings.
#[derive(Debug, Clone, PartialEq)]
pub struct NotifyConfig {
    /// A state lock held this long notifies (once per lock); zero turns it off.
    pub lock_age: std::time::Duration,
    /// The first retry's delay; each further one is three times the last.
    pub retry_base: std::time::Duration,
    /// Attempts before a delivery is given up.
    pub max_attempts: u32,
    /// Per-request timeout.
    pub timeout: std::time::Duration,
    /// The longest the delivery duty sleeps between looks (it also wakes on new events).
    pub poll_interval: std::time::Duration,
    /// Sent and given-up deliveries older than this are deleted, then events left without
    /// deliveries; zero keeps them forever. Pending deliveries are always kept.
    pub retention: std::time::Duration,
    /// How often the delivery duty prunes by `retention` (tests shorten it).
    pub prune_every: std::time::Duration,
}

/// The default notification retention: 30 days.
pub const DEFAULT_NOTIFY_RETENTION: std::time::Duration =
    std::time::Duration::from_secs(30 * 24 * 3600);

impl Default for NotifyConfig {
    fn default() -> Self {
        NotifyConfig {
            lock_age: std::time::Duration::from_secs(3600),
            retry_base: std::time::Duration::from_secs(10),
            max_attempts: 8,
            timeout: std::time::Duration::from_secs(10),
            poll_interval: std::time::Duration::from_secs(30),
            retention: DEFAULT_NOTIFY_RETENTION,
            prune_every: std::time::Duration::from_secs(3600),
        }
    }
}

/// What the retention duty keeps, and how often it looks.
#[derive(Debug, Clone, PartialEq)]
pub struct RetentionConfig {
    /// Per stack, the newest this many state versions are kept however old (at least 1).
    pub state_keep_versions: u32,
    /// State versions younger than this are kept; zero keeps every version forever.
    pub state_keep_for: std::time::Duration,
    /// Runs that ended longer ago than this are summarised (log, saved plan and plan
    /// detail deleted, the record kept); zero keeps every run whole.
    pub run_retention: std::time::Duration,
    /// A run's log is compressed once the run ended this long ago (late chunks of a
    /// force-failed run's engine may still come); zero never compresses.
    pub compress_logs_after: std::time::Duration,
    /// VCS deliveries (webhooks, polls) received longer ago than this are deleted with
    /// their trigger decisions; zero keeps them forever.
    pub delivery_retention: std::time::Duration,
    /// How often the duty passes (tests shorten it).
    pub every: std::time::Duration,
}

/// The default number of state versions kept per stack: 100.
pub const DEFAULT_STATE_KEEP_VERSIONS: u32 = 100;
/// The default age under which VCS deliveries and their trigger decisions are kept: 90
/// days (a provider redelivers a webhook within days).
pub const DEFAULT_DELIVERY_RETENTION: std::time::Duration =
    std::time::Duration::from_secs(90 * 24 * 3600);
/// The default age under which state versions are kept: 90 days.
pub const DEFAULT_STATE_KEEP_FOR: std::time::Duration =
    std::time::Duration::from_secs(90 * 24 * 3600);

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            state_keep_versions: DEFAULT_STATE_KEEP_VERSIONS,
            state_keep_for: DEFAULT_STATE_KEEP_FOR,
            run_retention: std::time::Duration::ZERO,
            compress_logs_after: std::time::Duration::from_secs(600),
            delivery_retention: DEFAULT_DELIVERY_RETENTION,
            every: std::time::Duration::from_secs(3600),
        }
    }
}

/// A GitHub App's credentials.
#[derive(Debug, Clone, PartialEq)]
pub struct GithubAppConfig {
    pub app_id: i64,
    /// The App's RSA private key, PEM.
    pub private_key_pem: Secret,
}

/// A secret setting: compared and cloned like a string, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// Timings of the run machinery.
#[derive(Debug, Clone, PartialEq)]
pub struct RunTimings {
    pub heartbeat: std::time::Duration,
    pub stale_after: std::time::Duration,
    pub sweep_interval: std::time::Duration,
    pub phase_timeout: Option<std::time::Duration>,
}

impl Default for RunTimings {
    fn default() -> Self {
        RunTimings {
            heartbeat: std::time::Duration::from_secs(10),
            stale_after: std::time::Duration::from_secs(60),
            sweep_interval: std::time::Duration::from_secs(5),
            phase_timeout: None,
        }
    }
}

pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
pub const DEFAULT_MAX_BODY: usize = 1024 * 1024;
pub const DEFAULT_MAX_STATE: usize = 64 * 1024 * 1024;
/// 5 MiB: GitHub caps deliveries at 25 MB, but the push, pull request and installation
/// events Bosun reads weigh kilobytes to a few hundred; the cap bounds what an unsigned
/// post can make the server hold.
pub const DEFAULT_WEBHOOK_MAX: usize = 5 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid setting {key}: {message}")]
    Invalid { key: &'static str, message: String },
}

impl FileConfig {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    }
}

impl ServerConfig {
    /// Reads the config file named in `overrides` (if any) and lays the overrides on it.
    pub fn resolve(overrides: ConfigOverrides) -> Result<Self, ConfigError> {
        let file = match &overrides.config_file {
            Some(p) => FileConfig::load(p)?,
            None => FileConfig::default(),
        };
        Self::merge(overrides, file)
    }

    pub fn merge(o: ConfigOverrides, f: FileConfig) -> Result<Self, ConfigError> {
        let listener = listener_config(&o, &f)?;
        let metrics = metrics_config(&o, &f)?;
        let retention = retention_config(&o, &f)?;
        let listen = match o.listen.or(f.listen) {
            Some(l) => l,
            None => DEFAULT_LISTEN.parse().map_err(|e| ConfigError::Invalid {
                key: "listen",
                message: format!("{e}"),
            })?,
        };
        let max_body_bytes = o
            .max_body_bytes
            .or(f.max_body_bytes)
            .unwrap_or(DEFAULT_MAX_BODY);
        if max_body_bytes < 1024 {
            return Err(ConfigError::Invalid {
                key: "max_body_bytes",
                message: "must be at least 1024".into(),
            });
        }
        let max_state_bytes = o
            .max_state_bytes
            .or(f.max_state_bytes)
            .unwrap_or(DEFAULT_MAX_STATE);
        if max_state_bytes < 1024 {
            return Err(ConfigError::Invalid {
                key: "max_state_bytes",
                message: "must be at least 1024".into(),
            });
        }
        let webhook_max_bytes = o
            .webhook_max_bytes
            .or(f.webhook_max_bytes)
            .unwrap_or(DEFAULT_WEBHOOK_MAX);
        if webhook_max_bytes < 1024 {
            return Err(ConfigError::Invalid {
                key: "webhook_max_bytes",
                message: "must be at least 1024".into(),
            });
        }
        let database_url = o.database_url.or(f.database_url);
        if let Some(url) = &database_url {
            if !url.starts_with("sqlite://") && !is_postgres_url(url) {
                return Err(ConfigError::Invalid {
                    key: "database_url",
                    message: format!(
                        "unsupported database {url:?}; this build supports sqlite://PATH and \
                         postgres://USER@HOST:PORT/DATABASE"
                    ),
                });
            }
        }
        if let Some(t) = &o.bootstrap_token {
            bosun_core::token::check_bootstrap_token(t).map_err(|e| ConfigError::Invalid {
                key: "BOSUN_BOOTSTRAP_TOKEN",
                message: e.message,
            })?;
        }
        let file_retention = file_duration(
            "notify.retention",
            f.notify.as_ref().and_then(|n| n.retention.as_deref()),
        )?;
        let notify = NotifyConfig {
            retention: o
                .notify_retention
                .or(file_retention)
                .unwrap_or(DEFAULT_NOTIFY_RETENTION),
            ..NotifyConfig::default()
        };
        let scheme = if listener.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let public_url = o
            .public_url
            .or(f.public_url)
            .unwrap_or_else(|| format!("{scheme}://{listen}"))
            .trim_end_matches('/')
            .to_string();
        Ok(ServerConfig {
            listen,
            data_dir: o
                .data_dir
                .or(f.data_dir)
                .unwrap_or_else(|| PathBuf::from(".bosun")),
            database_url,
            public_url,
            max_body_bytes,
            max_state_bytes,
            webhook_max_bytes,
            runs: RunTimings::default(),
            vcs: VcsConfig::default(),
            secrets: SecretsConfig::default(),
            oidc: OidcConfig::default(),
            notify,
            retention,
            schedules: crate::schedules::clock::ScheduleConfig::default(),
            allow_self_approval: false,
            allow_file_policy_repositories: false,
            bootstrap_token: o.bootstrap_token,
            replica_id: None,
            duty_lease: DEFAULT_DUTY_LEASE,
            listener,
            metrics,
            sign_in: crate::sign_in::config::SignInConfig::from_file(f.sign_in.as_ref())?,
        })
    }

    /// The PostgreSQL URL this server uses, if `database_url` names one.
    pub fn postgres_url(&self) -> Option<&str> {
        self.database_url.as_deref().filter(|u| is_postgres_url(u))
    }

    /// The SQLite file this server uses (when it uses no PostgreSQL database).
    pub fn sqlite_path(&self) -> PathBuf {
        match &self.database_url {
            Some(url) => PathBuf::from(url.trim_start_matches("sqlite://")),
            None => self.data_dir.join("bosun.db"),
        }
    }
}

/// A duration key of the config file, humantime text. Whether zero may stand is the
/// caller's to say: it turns a listener's protection off (refused), and keeps retained
/// rows forever (allowed).
fn file_duration(
    key: &'static str,
    text: Option<&str>,
) -> Result<Option<std::time::Duration>, ConfigError> {
    let Some(text) = text else { return Ok(None) };
    humantime::parse_duration(text)
        .map(Some)
        .map_err(|e| ConfigError::Invalid {
            key,
            message: format!("{text:?} is not a duration like 10s or 2m: {e}"),
        })
}

fn retention_config(o: &ConfigOverrides, f: &FileConfig) -> Result<RetentionConfig, ConfigError> {
    let d = RetentionConfig::default();
    let file = f.retention.clone().unwrap_or_default();
    let state_keep_versions = o
        .state_keep_versions
        .or(file.state_keep_versions)
        .unwrap_or(d.state_keep_versions);
    if state_keep_versions == 0 {
        return Err(ConfigError::Invalid {
            key: "state_keep_versions",
            message: "must be at least 1: a stack's newest state version is always kept".into(),
        });
    }
    let state_keep_for = o
        .state_keep_for
        .or(file_duration(
            "retention.state_keep_for",
            file.state_keep_for.as_deref(),
        )?)
        .unwrap_or(d.state_keep_for);
    let run_retention = o
        .run_retention
        .or(file_duration("retention.runs", file.runs.as_deref())?)
        .unwrap_or(d.run_retention);
    let compress_logs_after = o
        .compress_logs_after
        .or(file_duration(
            "retention.compress_logs_after",
            file.compress_logs_after.as_deref(),
        )?)
        .unwrap_or(d.compress_logs_after);
    let delivery_retention = o
        .delivery_retention
        .or(file_duration(
            "retention.deliveries",
            file.deliveries.as_deref(),
        )?)
        .unwrap_or(d.delivery_retention);
    Ok(RetentionConfig {
        state_keep_versions,
        state_keep_for,
        run_retention,
        compress_logs_after,
        delivery_retention,
        ..d
    })
}

fn listener_config(o: &ConfigOverrides, f: &FileConfig) -> Result<ListenerConfig, ConfigError> {
    let d = ListenerConfig::default();
    let positive = |key: &'static str, value: std::time::Duration| {
        if value.is_zero() {
            Err(ConfigError::Invalid {
                key,
                message: "must be more than 0s".into(),
            })
        } else {
            Ok(value)
        }
    };
    let header_read_timeout = o
        .header_read_timeout
        .or(file_duration(
            "header_read_timeout",
            f.header_read_timeout.as_deref(),
        )?)
        .unwrap_or(d.header_read_timeout);
    let idle_timeout = o
        .idle_timeout
        .or(file_duration("idle_timeout", f.idle_timeout.as_deref())?)
        .unwrap_or(d.idle_timeout);
    let request_timeout = o
        .request_timeout
        .or(file_duration(
            "request_timeout",
            f.request_timeout.as_deref(),
        )?)
        .unwrap_or(d.request_timeout);
    let max_connections = o
        .max_connections
        .or(f.max_connections)
        .unwrap_or(d.max_connections);
    if max_connections == 0 {
        return Err(ConfigError::Invalid {
            key: "max_connections",
            message: "must be at least 1".into(),
        });
    }
    let cert = o.tls_cert_file.clone().or_else(|| f.tls_cert_file.clone());
    let key = o.tls_key_file.clone().or_else(|| f.tls_key_file.clone());
    let tls = match (cert, key) {
        (Some(cert_file), Some(key_file)) => Some(TlsFiles {
            cert_file,
            key_file,
        }),
        (None, None) => None,
        (Some(_), None) => {
            return Err(ConfigError::Invalid {
                key: "tls_key_file",
                message: "a TLS certificate needs its private key: set tls_key_file too".into(),
            })
        }
        (None, Some(_)) => {
            return Err(ConfigError::Invalid {
                key: "tls_cert_file",
                message: "a TLS key needs its certificate: set tls_cert_file too".into(),
            })
        }
    };
    Ok(ListenerConfig {
        tls,
        tls_reload_interval: d.tls_reload_interval,
        header_read_timeout: positive("header_read_timeout", header_read_timeout)?,
        idle_timeout: positive("idle_timeout", idle_timeout)?,
        request_timeout: positive("request_timeout", request_timeout)?,
        max_connections,
    })
}

fn metrics_config(o: &ConfigOverrides, f: &FileConfig) -> Result<MetricsConfig, ConfigError> {
    let token = match (
        &o.metrics_token,
        o.metrics_token_file
            .as_ref()
            .or(f.metrics_token_file.as_ref()),
    ) {
        (Some(t), _) if !t.trim().is_empty() => Some(t.trim().to_string()),
        (_, Some(path)) => {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.clone(),
                source,
            })?;
            Some(text.trim().to_string())
        }
        _ => None,
    };
    if let Some(t) = &token {
        // A short token is guessable by any scraper that can reach the listener.
        if t.len() < 16 {
            return Err(ConfigError::Invalid {
                key: "metrics_token",
                message: format!("must be at least 16 characters (it has {})", t.len()),
            });
        }
    }
    Ok(MetricsConfig {
        token: token.map(Secret),
        listen: o.metrics_listen.or(f.metrics_listen),
    })
}

/// `postgres://…` or `postgresql://…`: the PostgreSQL store.
fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn precedence_flags_over_file_over_defaults() {
        let file = FileConfig::parse(
            Path::new("t.toml"),
            "listen = \"127.0.0.1:9000\"\ndata_dir = \"/var/lib/bosun\"\nmax_body_bytes = 4096\n",
        )
        .unwrap();
        let c = ServerConfig::merge(ConfigOverrides::default(), file.clone()).unwrap();
        assert_eq!(c.listen.port(), 9000);
        assert_eq!(c.data_dir, PathBuf::from("/var/lib/bosun"));
        assert_eq!(c.max_body_bytes, 4096);
        assert_eq!(c.public_url, "http://127.0.0.1:9000");
        let o = ConfigOverrides {
            listen: Some("127.0.0.1:7000".parse().unwrap()),
            ..Default::default()
        };
        let c = ServerConfig::merge(o, file).unwrap();
        assert_eq!(c.listen.port(), 7000);
        assert_eq!(c.data_dir, PathBuf::from("/var/lib/bosun"));
        let d = ServerConfig::merge(ConfigOverrides::default(), FileConfig::default()).unwrap();
        assert_eq!(d.listen.to_string(), DEFAULT_LISTEN);
        assert_eq!(d.sqlite_path(), PathBuf::from(".bosun/bosun.db"));
    }

    #[test]
    fn unknown_keys_and_bad_values_refused() {
        let e = FileConfig::parse(Path::new("t.toml"), "listn = \"127.0.0.1:1\"\n").unwrap_err();
        assert!(e.to_string().contains("unknown field `listn`"), "{e}");
        let e = FileConfig::parse(Path::new("t.toml"), "listen = 5\n").unwrap_err();
        assert!(e.to_string().contains("t.toml"), "{e}");
        let o = ConfigOverrides {
            bootstrap_token: Some("short".into()),
            ..Default::default()
        };
        assert!(ServerConfig::merge(o, FileConfig::default()).is_err());
        let o = ConfigOverrides {
            database_url: Some("mysql://x".into()),
            ..Default::default()
        };
        assert!(ServerConfig::merge(o, FileConfig::default()).is_err());
    }

    #[test]
    fn notify_retention_from_flag_over_file_over_default() {
        let d = ServerConfig::merge(ConfigOverrides::default(), FileConfig::default()).unwrap();
        assert_eq!(d.notify.retention, DEFAULT_NOTIFY_RETENTION);
        let file =
            FileConfig::parse(Path::new("t.toml"), "[notify]\nretention = \"12h\"\n").unwrap();
        let c = ServerConfig::merge(ConfigOverrides::default(), file.clone()).unwrap();
        assert_eq!(
            c.notify.retention,
            std::time::Duration::from_secs(12 * 3600)
        );
        let o = ConfigOverrides {
            notify_retention: Some(std::time::Duration::ZERO),
            ..Default::default()
        };
        let c = ServerConfig::merge(o, file).unwrap();
        assert_eq!(c.notify.retention, std::time::Duration::ZERO);
        let bad =
            FileConfig::parse(Path::new("t.toml"), "[notify]\nretention = \"soon\"\n").unwrap();
        let e = ServerConfig::merge(ConfigOverrides::default(), bad).unwrap_err();
        assert!(e.to_string().contains("notify.retention"), "{e}");
        let e =
            FileConfig::parse(Path::new("t.toml"), "[notify]\nretension = \"1d\"\n").unwrap_err();
        assert!(e.to_string().contains("unknown field `retension`"), "{e}");
    }

    #[test]
    fn retention_from_flag_over_file_over_default() {
        let d = ServerConfig::merge(ConfigOverrides::default(), FileConfig::default()).unwrap();
        assert_eq!(d.retention, RetentionConfig::default());
        assert_eq!(d.retention.state_keep_versions, 100);
        assert_eq!(
            d.retention.state_keep_for,
            std::time::Duration::from_secs(90 * 24 * 3600)
        );
        let file = FileConfig::parse(
            Path::new("t.toml"),
            "[retention]\nstate_keep_versions = 7\nstate_keep_for = \"12h\"\n",
        )
        .unwrap();
        let c = ServerConfig::merge(ConfigOverrides::default(), file.clone()).unwrap();
        assert_eq!(c.retention.state_keep_versions, 7);
        assert_eq!(
            c.retention.state_keep_for,
            std::time::Duration::from_secs(12 * 3600)
        );
        let o = ConfigOverrides {
            state_keep_versions: Some(3),
            state_keep_for: Some(std::time::Duration::ZERO),
            ..Default::default()
        };
        let c = ServerConfig::merge(o, file).unwrap();
        assert_eq!(c.retention.state_keep_versions, 3);
        assert_eq!(c.retention.state_keep_for, std::time::Duration::ZERO);
        let o = ConfigOverrides {
            state_keep_versions: Some(0),
            ..Default::default()
        };
        let e = ServerConfig::merge(o, FileConfig::default()).unwrap_err();
        assert!(e.to_string().contains("state_keep_versions"), "{e}");
        let zero = FileConfig::parse(
            Path::new("t.toml"),
            "[retention]\nstate_keep_versions = 0\n",
        )
        .unwrap();
        let e = ServerConfig::merge(ConfigOverrides::default(), zero).unwrap_err();
        assert!(e.to_string().contains("at least 1"), "{e}");
        let bad = FileConfig::parse(
            Path::new("t.toml"),
            "[retention]\nstate_keep_for = \"a while\"\n",
        )
        .unwrap();
        let e = ServerConfig::merge(ConfigOverrides::default(), bad).unwrap_err();
        assert!(e.to_string().contains("retention.state_keep_for"), "{e}");
        assert_eq!(
            d.retention.compress_logs_after,
            std::time::Duration::from_secs(600)
        );
        let never = FileConfig::parse(
            Path::new("t.toml"),
            "[retention]\ncompress_logs_after = \"0s\"\n",
        )
        .unwrap();
        let c = ServerConfig::merge(ConfigOverrides::default(), never.clone()).unwrap();
        assert_eq!(c.retention.compress_logs_after, std::time::Duration::ZERO);
        let o = ConfigOverrides {
            compress_logs_after: Some(std::time::Duration::from_secs(60)),
            ..Default::default()
        };
        let c = ServerConfig::merge(o, never).unwrap();
        assert_eq!(
            c.retention.compress_logs_after,
            std::time::Duration::from_secs(60)
        );
        assert_eq!(
            d.retention.delivery_retention,
            std::time::Duration::from_secs(90 * 24 * 3600)
        );
        let keep =
            FileConfig::parse(Path::new("t.toml"), "[retention]\ndeliveries = \"0s\"\n").unwrap();
        let c = ServerConfig::merge(ConfigOverrides::default(), keep.clone()).unwrap();
        assert_eq!(c.retention.delivery_retention, std::time::Duration::ZERO);
        let o = ConfigOverrides {
            delivery_retention: Some(std::time::Duration::from_secs(3600)),
            ..Default::default()
        };
        let c = ServerConfig::merge(o, keep).unwrap();
        assert_eq!(
            c.retention.delivery_retention,
            std::time::Duration::from_secs(3600)
        );
        let bad =
            FileConfig::parse(Path::new("t.toml"), "[retention]\ndeliveries = \"soon\"\n").unwrap();
        let e = ServerConfig::merge(ConfigOverrides::default(), bad).unwrap_err();
        assert!(e.to_string().contains("retention.deliveries"), "{e}");
        assert_eq!(d.retention.run_retention, std::time::Duration::ZERO);
        let runs =
            FileConfig::parse(Path::new("t.toml"), "[retention]\nruns = \"400days\"\n").unwrap();
        let c = ServerConfig::merge(ConfigOverrides::default(), runs.clone()).unwrap();
        assert_eq!(
            c.retention.run_retention,
            std::time::Duration::from_secs(400 * 24 * 3600)
        );
        let o = ConfigOverrides {
            run_retention: Some(std::time::Duration::ZERO),
            ..Default::default()
        };
        assert_eq!(
            ServerConfig::merge(o, runs)
                .unwrap()
                .retention
                .run_retention,
            std::time::Duration::ZERO
        );
        let bad =
            FileConfig::parse(Path::new("t.toml"), "[retention]\nruns = \"forever\"\n").unwrap();
        let e = ServerConfig::merge(ConfigOverrides::default(), bad).unwrap_err();
        assert!(e.to_string().contains("retention.runs"), "{e}");
        let e =
            FileConfig::parse(Path::new("t.toml"), "[retention]\nstate_keep = 1\n").unwrap_err();
        assert!(e.to_string().contains("unknown field `state_keep`"), "{e}");
        let e = FileConfig::parse(
            Path::new("t.toml"),
            "[retention]\nstate_keep_versions = -1\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("t.toml"), "{e}");
    }

    #[test]
    fn webhook_cap_from_flag_over_file_over_default() {
        let d = ServerConfig::merge(ConfigOverrides::default(), FileConfig::default()).unwrap();
        assert_eq!(d.webhook_max_bytes, DEFAULT_WEBHOOK_MAX);
        let file = FileConfig::parse(Path::new("t.toml"), "webhook_max_bytes = 65536\n").unwrap();
        let c = ServerConfig::merge(ConfigOverrides::default(), file.clone()).unwrap();
        assert_eq!(c.webhook_max_bytes, 65536);
        let o = ConfigOverrides {
            webhook_max_bytes: Some(4096),
            ..Default::default()
        };
        assert_eq!(
            ServerConfig::merge(o, file).unwrap().webhook_max_bytes,
            4096
        );
        let o = ConfigOverrides {
            webhook_max_bytes: Some(10),
            ..Default::default()
        };
        let e = ServerConfig::merge(o, FileConfig::default()).unwrap_err();
        assert!(e.to_string().contains("webhook_max_bytes"), "{e}");
    }

    #[test]
    fn listener_and_metrics_settings_are_checked() {
        let d = ServerConfig::merge(ConfigOverrides::default(), FileConfig::default()).unwrap();
        assert_eq!(d.listener, ListenerConfig::default());
        assert_eq!(d.metrics, MetricsConfig::default());
        let file = FileConfig::parse(
            Path::new("t.toml"),
            "tls_cert_file = \"/c.pem\"\ntls_key_file = \"/k.pem\"\nidle_timeout = \"90s\"\n\
             max_connections = 10\nmetrics_listen = \"127.0.0.1:9100\"\n",
        )
        .unwrap();
        let c = ServerConfig::merge(ConfigOverrides::default(), file).unwrap();
        assert_eq!(
            c.public_url, "https://127.0.0.1:8080",
            "TLS makes the default https"
        );
        assert_eq!(c.listener.idle_timeout, std::time::Duration::from_secs(90));
        assert_eq!(c.listener.max_connections, 10);
        assert_eq!(c.metrics.listen, Some("127.0.0.1:9100".parse().unwrap()));
        for (o, key) in [
            (
                ConfigOverrides {
                    tls_cert_file: Some("/c.pem".into()),
                    ..Default::default()
                },
                "tls_key_file",
            ),
            (
                ConfigOverrides {
                    max_connections: Some(0),
                    ..Default::default()
                },
                "max_connections",
            ),
            (
                ConfigOverrides {
                    header_read_timeout: Some(std::time::Duration::ZERO),
                    ..Default::default()
                },
                "header_read_timeout",
            ),
            (
                ConfigOverrides {
                    metrics_token: Some("short".into()),
                    ..Default::default()
                },
                "metrics_token",
            ),
        ] {
            let e = ServerConfig::merge(o, FileConfig::default()).unwrap_err();
            assert!(e.to_string().contains(key), "{e}");
        }
        let bad = FileConfig::parse(Path::new("t.toml"), "request_timeout = \"soon\"\n").unwrap();
        let e = ServerConfig::merge(ConfigOverrides::default(), bad).unwrap_err();
        assert!(e.to_string().contains("request_timeout"), "{e}");
    }

    #[test]
    fn database_url_picks_the_store() {
        for url in [
            "postgres://bosun@db:5432/bosun",
            "postgresql://bosun@db/bosun",
        ] {
            let o = ConfigOverrides {
                database_url: Some(url.into()),
                ..Default::default()
            };
            let c = ServerConfig::merge(o, FileConfig::default()).unwrap();
            assert_eq!(c.postgres_url(), Some(url));
        }
        let o = ConfigOverrides {
            database_url: Some("sqlite:///var/lib/bosun/b.db".into()),
            ..Default::default()
        };
        let c = ServerConfig::merge(o, FileConfig::default()).unwrap();
        assert_eq!(c.postgres_url(), None);
        assert_eq!(c.sqlite_path(), PathBuf::from("/var/lib/bosun/b.db"));
    }
}

/// Where the secrets key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// A file holding the base64 of 32 random bytes.
    File(PathBuf),
    /// The base64 itself (`BOSUN_SECRETS_KEY`).
    Value(Secret),
}
