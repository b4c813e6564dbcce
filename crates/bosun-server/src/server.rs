//! Starting and stopping the server: data dir, store, bootstrap, listener (TLS, limits:
//! `listener.rs`, `tls.rs`; `/metrics` on its own listener when configured), and a
//! graceful shutdown that lets in-flight requests finish and closes the store cleanly.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bosun_store::{PostgresStore, SqliteStore, Store};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::app::AppState;
use crate::config::ServerConfig;
pub use crate::start_error::StartError;

/// Forwards the store's `Dispatch` signals (other replicas' runs queued, or a resync) to
/// this replica's waiting leases, until shutdown. The delivery duty and log streams
/// subscribe to the store themselves.
async fn forward_signals(state: AppState) {
    let mut stopping = state.stopping.subscribe();
    let mut signals = state.store.subscribe();
    loop {
        tokio::select! {
            signal = bosun_store::signal::next(&mut signals) => {
                if signal.concerns_dispatch() {
                    state.dispatch.notify_waiters();
                }
            }
            _ = crate::duties::stopped(&mut stopping) => return,
        }
    }
}

/// A server that is accepting connections.
pub struct RunningServer {
    pub local_addr: SocketAddr,
    /// Set when this start wrote a generated admin token to `<data-dir>/admin-token`.
    pub admin_token_file: Option<PathBuf>,
    /// A pool token for the server's own hosted runners (minted at each start).
    pub hosted_runner_token: String,
    /// The name this replica's embedded runners register under (`<name>-<i>` each).
    pub embedded_runner_name: String,
    /// Where `/metrics` is served when it has a listener of its own.
    pub metrics_addr: Option<SocketAddr>,
    state: AppState,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
    metrics_task: Option<JoinHandle<std::io::Result<()>>>,
    duties: Vec<JoinHandle<()>>,
}

impl RunningServer {
    pub async fn start(config: ServerConfig) -> Result<Self, StartError> {
        create_private_dir(&config.data_dir)?;
        let store: Arc<dyn Store> = match config.postgres_url() {
            Some(url) => Arc::new(PostgresStore::open(url).await?),
            None => Arc::new(SqliteStore::open(&config.sqlite_path()).await?),
        };
        let admin_token_file = crate::bootstrap::run(store.as_ref(), &config).await?;
        let secrets_key = Arc::new(crate::secrets::open_key(&config, store.as_ref()).await?);
        // A certificate that does not load stops the start, before anything listens.
        let tls = match &config.listener.tls {
            Some(files) => Some(Arc::new(crate::tls::Tls::new(files)?)),
            None => None,
        };
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| StartError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let local_addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: config.listen,
            source,
        })?;
        let metrics_listener = match config.metrics.listen {
            Some(addr) => {
                let bind_err = |source| StartError::Bind { addr, source };
                let l = TcpListener::bind(addr).await.map_err(bind_err)?;
                let bound = l.local_addr().map_err(bind_err)?;
                Some((l, bound))
            }
            None => None,
        };
        let mut config = config;
        let scheme = if tls.is_some() { "https" } else { "http" };
        if config.public_url == format!("{scheme}://{}", config.listen) {
            // The default public URL names the bound address: with port 0, the real port.
            config.public_url = format!("{scheme}://{local_addr}");
        }
        let vcs = Arc::new(crate::vcs::shared::Vcs::new(&config)?);
        let sign_in = Arc::new(crate::sign_in::Providers::new(&config.sign_in)?);
        let replica = crate::duties::leases::replica_id(&config)?;
        let hosted_runner_token =
            crate::runners::hosted_pool_token(store.as_ref(), &replica).await?;
        let state = AppState {
            store,
            config: Arc::new(config),
            ready: Arc::new(AtomicBool::new(true)),
            dispatch: Arc::new(tokio::sync::Notify::new()),
            stopping: Arc::new(tokio::sync::watch::channel(false).0),
            duties: crate::duties::new_status(),
            vcs,
            secrets_key,
            issuer: Arc::new(crate::identity::Issuer::default()),
            notifications: Arc::default(),
            retention: Arc::default(),
            runner_counters: Arc::default(),
            replica: replica.into(),
            lease_masks: Arc::default(),
            sign_in,
        };
        // Before anything is served: runs of the previous process's embedded runners
        // are settled, not left `running` with nothing executing them.
        crate::duties::sweep::reconcile_on_start(&state).await?;
        // Every background duty of the server, each run by `duties::spawn`.
        let background = [
            crate::duties::sweep::stale_sweep(&state),
            crate::vcs::source::revoke_duty(),
            crate::vcs::poller::poll_duty(&state),
            crate::identity::rotation_duty(&state),
            crate::notify::deliver::delivery_duty(&state),
            crate::vcs::feedback::feedback_duty(&state),
            crate::schedules::schedule_duty(&state),
            crate::plans::triggers::trigger_duty(),
            crate::retention::duty(&state),
            crate::metrics::fold_duty(),
        ];
        let mut duties: Vec<JoinHandle<()>> = background
            .into_iter()
            .map(|duty| crate::duties::spawn(&state, duty))
            .collect();
        duties.push(tokio::spawn(crate::duties::leases::lease_keeper(
            state.clone(),
        )));
        duties.push(tokio::spawn(forward_signals(state.clone())));
        crate::sign_in::probe(Arc::clone(&state.sign_in));
        if let Some(tls) = &tls {
            duties.push(tokio::spawn(crate::tls::watch(
                Arc::clone(tls),
                state.config.listener.tls_reload_interval,
                state.stopping.subscribe(),
            )));
        }
        let (stop, stopped) = oneshot::channel::<()>();
        let app = crate::routes::router(state.clone());
        let limits = state.config.listener.clone();
        let task = tokio::spawn(crate::listener::serve(
            listener,
            app,
            tls.clone(),
            limits.clone(),
            async move {
                let _ = stopped.await;
            },
        ));
        let (metrics_task, metrics_addr) = match metrics_listener {
            Some((l, addr)) => {
                let mut stopping = state.stopping.subscribe();
                let task = tokio::spawn(crate::listener::serve(
                    l,
                    crate::metrics::router(state.clone()),
                    None,
                    limits,
                    async move { crate::duties::stopped(&mut stopping).await },
                ));
                tracing::info!(addr = %addr, "serving /metrics");
                (Some(task), Some(addr))
            }
            None => (None, None),
        };
        tracing::info!(addr = %local_addr, tls = tls.is_some(), "listening");
        Ok(RunningServer {
            local_addr,
            admin_token_file,
            hosted_runner_token,
            embedded_runner_name: crate::runners::embedded_runner_name(&state.replica),
            metrics_addr,
            state,
            stop: Some(stop),
            task,
            metrics_task,
            duties,
        })
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Stops accepting connections, lets in-flight requests finish, then closes the store.
    pub async fn shutdown(mut self) -> Result<(), StartError> {
        self.state.ready.store(false, Ordering::SeqCst);
        self.state.stopping.send_replace(true);
        self.state.dispatch.notify_waiters();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let served = (&mut self.task).await;
        if let Some(metrics) = self.metrics_task.take() {
            let _ = metrics.await;
        }
        for duty in self.duties.drain(..) {
            let _ = duty.await;
        }
        // Every pass has ended: the other replicas may take the duties now rather than
        // when the leases run out.
        match self
            .state
            .store
            .release_duty_leases(&self.state.replica)
            .await
        {
            Ok(n) => tracing::info!(leases = n, "duty leases released"),
            Err(e) => tracing::warn!(error = %e, "could not release the duty leases"),
        }
        self.state.store.close().await;
        tracing::info!("store closed; shutdown complete");
        match served {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(StartError::Serve(e)),
            Err(e) => Err(StartError::Serve(std::io::Error::other(e.to_string()))),
        }
    }
}

/// Creates the data dir readable by this user only (0700), and takes group and other
/// access away from what is already in it — the database, the admin token, the secrets
/// key, the replica id, the mirrors — so a data dir made by an older version, or copied
/// with looser modes, is private from this start on. Files created later are created
/// private by their writers.
fn create_private_dir(path: &std::path::Path) -> Result<(), StartError> {
    let err = |source| StartError::DataDir {
        path: path.to_path_buf(),
        source,
    };
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        builder.mode(0o700);
        builder.create(path).map_err(err)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).map_err(err)?;
        for entry in std::fs::read_dir(path).map_err(err)? {
            let entry = entry.map_err(err)?;
            // `DirEntry::metadata` does not follow links: a symbolic link is left alone,
            // its target may be anyone's.
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            let mode = meta.permissions().mode();
            if meta.file_type().is_symlink() || mode & 0o077 == 0 {
                continue;
            }
            let private = std::fs::Permissions::from_mode(mode & 0o700);
            if let Err(e) = std::fs::set_permissions(entry.path(), private) {
                tracing::warn!(path = %entry.path().display(), error = %e,
                    "cannot make a file of the data dir private");
            }
        }
    }
    #[cfg(not(unix))]
    builder.create(path).map_err(err)?;
    Ok(())
}
