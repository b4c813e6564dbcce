//! Background duties: every periodic job of the server is a [`Duty`] — a name, a cadence,
//! the store signals that wake it early, and a pass — run by one loop ([`run`]) that
//! handles the cadence, the duty's cluster-wide lease (`leases`), shutdown, failures
//! (logged, tried again next time) and the name-keyed record of each duty's last pass
//! ([`status::DutyStatus`], shown in `/metrics` and `/readyz`). The server's start lists its
//! duties in one place (`server.rs`); each duty's pass lives with its capability.

pub mod leases;
pub mod status;
pub mod sweep;

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::app::AppState;
use leases::holds_duty;
use status::DutyStatus;

/// Why a pass failed: logged, and the duty passes again at its next time.
pub type PassError = Box<dyn std::error::Error + Send + Sync>;

/// What a pass returns: `Ok(None)` to pass again `every` after this pass began,
/// `Ok(Some(wait))` to pass again `wait` after it ended (a duty that knows when its
/// next work falls due).
pub type PassResult = Result<Option<Duration>, PassError>;

type PassFn = Box<dyn FnMut(&AppState) -> BoxFuture<'static, PassResult> + Send>;

/// One background duty.
pub struct Duty {
    /// Its name: the lease's key, the log's `duty` field and the metric's label.
    pub name: &'static str,
    /// How often it passes; `None` when it is configured off (it is still listed, with
    /// no pass).
    pub every: Option<Duration>,
    /// Store signals that start a pass before `every` is up.
    pub wake: Option<fn(&bosun_store::Signal) -> bool>,
    pass: PassFn,
}

impl Duty {
    /// A duty passing every `every` (`None`: off) by calling `pass`, which gets the
    /// server's state and returns the pass as a future.
    pub fn new<F>(name: &'static str, every: Option<Duration>, pass: F) -> Self
    where
        F: FnMut(&AppState) -> BoxFuture<'static, PassResult> + Send + 'static,
    {
        Duty {
            name,
            every,
            wake: None,
            pass: Box::new(pass),
        }
    }

    /// Also passes as soon as the store publishes a signal `wake` accepts (from any
    /// replica).
    pub fn woken_by(mut self, wake: fn(&bosun_store::Signal) -> bool) -> Self {
        self.wake = Some(wake);
        self
    }
}

/// Lists `duty` in this process's [`status::DutyStatus`] (with no pass yet) and runs it until
/// shutdown on a task of its own.
pub fn spawn(state: &AppState, duty: Duty) -> tokio::task::JoinHandle<()> {
    state.duties.register(duty.name);
    tokio::spawn(run(state.clone(), duty))
}

/// How long shutdown waits for a pass in progress before dropping it.
const PASS_GRACE: Duration = Duration::from_secs(5);

/// Runs `duty` until shutdown: a pass at start and then at its cadence (or when a signal
/// wakes it), each only while this replica holds the duty's lease. A replica that does
/// not hold it looks again within a third of the lease, so a lease that moves here is
/// used at once. At shutdown a pass in progress gets [`PASS_GRACE`] to end.
async fn run(state: AppState, mut duty: Duty) {
    let Some(every) = duty.every else {
        return;
    };
    let mut stopping = state.stopping.subscribe();
    // Subscribed before the first pass: a signal sent meanwhile wakes the next wait.
    let mut signals = duty.wake.map(|_| state.store.subscribe());
    let not_held_wait = every.min((state.config.duty_lease / 3).max(Duration::from_millis(100)));
    let mut next = tokio::time::Instant::now();
    loop {
        let wake = duty.wake;
        let heard = async {
            match (signals.as_mut(), wake) {
                (Some(rx), Some(wake)) => while !wake(&bosun_store::signal::next(rx).await) {},
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = heard => {}
            _ = stopped(&mut stopping) => return,
        }
        let began = tokio::time::Instant::now();
        if !holds_duty(&state, duty.name).await {
            next = began + not_held_wait;
            continue;
        }
        let pass = (duty.pass)(&state);
        tokio::pin!(pass);
        let outcome = tokio::select! {
            outcome = &mut pass => outcome,
            _ = stopped(&mut stopping) => {
                // A pass may be long (a first retention pass over a large store): it
                // gets a moment to finish, then is dropped at its next await. Each store
                // call is a transaction of its own, so what it did so far stays done and
                // the next pass, here or on another replica, carries on from there.
                if tokio::time::timeout(PASS_GRACE, &mut pass).await.is_err() {
                    tracing::warn!(
                        duty = duty.name,
                        grace = ?PASS_GRACE,
                        "shutdown cut the pass short; the next pass carries on from where it stopped"
                    );
                }
                return;
            }
        };
        match outcome {
            Ok(wait) => {
                state.duties.passed(duty.name);
                next = match wait {
                    Some(wait) => tokio::time::Instant::now() + wait,
                    None => began + every,
                };
            }
            Err(e) => {
                tracing::warn!(duty = duty.name, error = %e, "pass failed");
                next = began + every;
            }
        }
    }
}

/// Resolves once shutdown has begun — also when it began before this receiver was made
/// (`changed()` alone would miss a signal sent before the subscription).
pub async fn stopped(stopping: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stopping.wait_for(|s| *s).await;
}

pub fn new_status() -> Arc<DutyStatus> {
    Arc::new(DutyStatus::default())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::config::{ConfigOverrides, FileConfig, ServerConfig};
    use crate::server::RunningServer;

    async fn server(dir: &std::path::Path) -> RunningServer {
        let config = ServerConfig::merge(
            ConfigOverrides {
                listen: Some("127.0.0.1:0".parse().unwrap()),
                data_dir: Some(dir.to_path_buf()),
                ..Default::default()
            },
            FileConfig::default(),
        )
        .unwrap();
        RunningServer::start(config).await.unwrap()
    }

    /// Spawns a duty whose pass sets `began` and then takes `pass_takes`, and sets `ended`
    /// when it ends; returns once the pass has begun.
    async fn duty_in_a_pass(
        state: &AppState,
        pass_takes: Duration,
    ) -> (tokio::task::JoinHandle<()>, Arc<AtomicBool>) {
        let began = Arc::new(AtomicBool::new(false));
        let ended = Arc::new(AtomicBool::new(false));
        let (b, e) = (began.clone(), ended.clone());
        let duty = Duty::new(
            "test_long_pass",
            Some(Duration::from_secs(3600)),
            move |_| {
                let (b, e) = (b.clone(), e.clone());
                Box::pin(async move {
                    b.store(true, Ordering::SeqCst);
                    tokio::time::sleep(pass_takes).await;
                    e.store(true, Ordering::SeqCst);
                    Ok(None)
                })
            },
        );
        let handle = spawn(state, duty);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !began.load(Ordering::SeqCst) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the pass never began"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (handle, ended)
    }

    #[tokio::test]
    async fn shutdown_drops_a_pass_that_outlasts_the_grace() {
        let dir = tempfile::tempdir().unwrap();
        let server = server(dir.path()).await;
        let (handle, ended) = duty_in_a_pass(server.state(), Duration::from_secs(3600)).await;
        let asked = tokio::time::Instant::now();
        server.state().stopping.send_replace(true);
        tokio::time::timeout(PASS_GRACE + Duration::from_secs(10), handle)
            .await
            .expect("the duty did not stop within its grace: shutdown would hang on it")
            .unwrap();
        assert!(
            !ended.load(Ordering::SeqCst),
            "an hour-long pass cannot have ended"
        );
        assert!(
            asked.elapsed() >= PASS_GRACE,
            "the pass was dropped before its grace was up ({:?})",
            asked.elapsed()
        );
        server.shutdown().await.unwrap();
    }

    #[tokio::test]
    async fn shutdown_lets_a_pass_within_the_grace_end() {
        let dir = tempfile::tempdir().unwrap();
        let server = server(dir.path()).await;
        let (handle, ended) = duty_in_a_pass(server.state(), Duration::from_millis(300)).await;
        server.state().stopping.send_replace(true);
        tokio::time::timeout(PASS_GRACE + Duration::from_secs(10), handle)
            .await
            .expect("the duty did not stop")
            .unwrap();
        assert!(ended.load(Ordering::SeqCst), "the short pass was cut short");
        server.shutdown().await.unwrap();
    }
}
