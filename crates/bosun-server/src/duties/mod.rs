//! Background duties: every periodic job of the server is a [`Duty`] — a name, a cadence,
//! the store signals that wake it early, and a pass — run by one loop ([`run`]) that
//! handles the cadence, the duty's cluster-wide lease (`leases`), shutdown, failures
//! (logged, tried again next time) and the name-keyed record of each duty's last pass
//! ([`DutyStatus`], shown in `/metrics` and `/readyz`). The server's start lists its
//! duties in one place (`server.rs`); each duty's pass lives with its capability.

mod leases;
mod sweep;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use futures_util::future::BoxFuture;

use crate::server::AppState;

pub use leases::{holds_duty, lease_keeper, replica_id};
pub use sweep::reconcile_on_start;
pub(crate) use sweep::{settle_silent_run, stale_sweep};

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

/// Lists `duty` in this process's [`DutyStatus`] (with no pass yet) and runs it until
/// shutdown on a task of its own.
pub fn spawn(state: &AppState, duty: Duty) -> tokio::task::JoinHandle<()> {
    state.duties.register(duty.name);
    tokio::spawn(run(state.clone(), duty))
}

/// Runs `duty` until shutdown: a pass at start and then at its cadence (or when a signal
/// wakes it), each only while this replica holds the duty's lease. A replica that does
/// not hold it looks again within a third of the lease, so a lease that moves here is
/// used at once.
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
        match (duty.pass)(&state).await {
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

/// Every duty of this server process and when it last completed a pass, for probes and
/// metrics; and the duty leases this replica holds.
#[derive(Default)]
pub struct DutyStatus {
    /// Each duty's last completed pass (Unix ms; 0 before its first).
    passes: Mutex<BTreeMap<&'static str, i64>>,
    leases: Mutex<Leases>,
}

/// The duties this replica runs, and until when (this process's clock) it may pass each
/// one it holds: a renewal's start plus two thirds of the lease, so a replica whose
/// renewals stall stops passing before its lease can be taken.
#[derive(Default)]
struct Leases {
    duties: BTreeSet<&'static str>,
    held_until: BTreeMap<&'static str, tokio::time::Instant>,
}

impl DutyStatus {
    fn register(&self, duty: &'static str) {
        let mut passes = self.passes.lock().unwrap_or_else(|e| e.into_inner());
        passes.entry(duty).or_insert(0);
    }

    fn passed(&self, duty: &'static str) {
        let mut passes = self.passes.lock().unwrap_or_else(|e| e.into_inner());
        passes.insert(duty, Utc::now().timestamp_millis());
    }

    /// When `duty` last completed a pass (Unix ms; 0 before its first, or when this
    /// process does not run it).
    pub fn last_pass(&self, duty: &str) -> i64 {
        let passes = self.passes.lock().unwrap_or_else(|e| e.into_inner());
        passes.get(duty).copied().unwrap_or(0)
    }

    /// Every duty of this process, by name, with its last pass (Unix ms; 0 before its
    /// first).
    pub fn last_passes(&self) -> Vec<(&'static str, i64)> {
        let passes = self.passes.lock().unwrap_or_else(|e| e.into_inner());
        passes.iter().map(|(d, at)| (*d, *at)).collect()
    }

    fn valid(&self, duty: &'static str) -> Option<bool> {
        let leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        leases.duties.contains(duty).then(|| {
            leases
                .held_until
                .get(duty)
                .is_some_and(|until| tokio::time::Instant::now() < *until)
        })
    }

    fn record(&self, duty: &'static str, held: Option<tokio::time::Instant>) {
        let mut leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        leases.duties.insert(duty);
        match held {
            Some(until) => leases.held_until.insert(duty, until),
            None => leases.held_until.remove(duty),
        };
    }

    fn duties(&self) -> Vec<&'static str> {
        let leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        leases.duties.iter().copied().collect()
    }

    /// Each duty this replica runs, and whether it holds the duty's lease now.
    pub fn leases_held(&self) -> Vec<(&'static str, bool)> {
        self.duties()
            .into_iter()
            .map(|d| (d, self.valid(d).unwrap_or(false)))
            .collect()
    }
}

pub fn new_status() -> Arc<DutyStatus> {
    Arc::new(DutyStatus::default())
}
