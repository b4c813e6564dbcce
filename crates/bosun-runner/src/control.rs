//! The signals that end work early: why a leased phase stops (`Stop`, per phase) and how
//! far the runner as a whole is winding down (`Shutdown`, shared by every worker).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// Why a phase stops before its engine finished on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The server asked for it (a heartbeat said `cancel`): report `canceled`.
    Canceled,
    /// The phase ran past its timeout: report `timed_out`.
    TimedOut,
    /// The runner is shutting down and gives the phase up: report `failed`.
    Abandoned,
    /// The lease is no longer ours: kill the engine at once and report nothing.
    Fenced,
}

impl Stop {
    /// Whether the engine gets an interrupt and a grace period before the kill. A fenced
    /// phase does not: someone else may already own the run.
    pub(crate) fn is_graceful(self) -> bool {
        !matches!(self, Stop::Fenced)
    }
}

/// The stop flag of one leased phase. The first reason wins, except that `Fenced` always
/// overrides: once the lease is gone, nothing may be reported and no grace is due.
#[derive(Clone)]
pub(crate) struct StopSignal {
    tx: Arc<watch::Sender<Option<Stop>>>,
}

impl StopSignal {
    pub(crate) fn new() -> Self {
        StopSignal {
            tx: Arc::new(watch::channel(None).0),
        }
    }

    /// Raise `reason`; returns whether this changed the flag.
    pub(crate) fn stop(&self, reason: Stop) -> bool {
        self.tx.send_if_modified(|current| match current {
            None => {
                *current = Some(reason);
                true
            }
            Some(Stop::Fenced) => false,
            Some(_) if reason == Stop::Fenced => {
                *current = Some(reason);
                true
            }
            Some(_) => false,
        })
    }

    pub(crate) fn current(&self) -> Option<Stop> {
        *self.tx.borrow()
    }

    /// Resolves once a stop is raised, with its reason.
    pub(crate) async fn stopped(&self) -> Stop {
        let mut rx = self.tx.subscribe();
        let reason = match rx.wait_for(Option::is_some).await {
            Ok(reason) => *reason,
            // Unreachable: `self` holds the sender.
            Err(_) => None,
        };
        match reason {
            Some(reason) => reason,
            None => std::future::pending().await,
        }
    }

    /// Resolves once the lease is fenced.
    pub(crate) async fn fenced(&self) {
        let mut rx = self.tx.subscribe();
        if rx.wait_for(|s| *s == Some(Stop::Fenced)).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// How far the runner is winding down; levels only go up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    Running,
    /// Lease nothing new; phases in flight finish.
    Draining,
    /// Lease nothing new; phases in flight are interrupted and reported as failed.
    Abandoning,
}

/// How long network retries keep going once the runner abandons its work: enough to flush
/// the log and report the phase, never a hang on an unreachable server.
const ABANDON_NETWORK_BUDGET: Duration = Duration::from_secs(15);

/// A worker's view of the runner's shutdown level.
#[derive(Clone)]
pub(crate) struct Shutdown {
    rx: watch::Receiver<Level>,
}

impl Shutdown {
    pub(crate) fn new(rx: watch::Receiver<Level>) -> Self {
        Shutdown { rx }
    }

    pub(crate) fn level(&self) -> Level {
        *self.rx.borrow()
    }

    /// Resolves once the level is at least `level` (or the pool dropped its sender, which
    /// only happens when it is gone: treat that as the strongest level).
    pub(crate) async fn reached(&self, level: Level) {
        let mut rx = self.rx.clone();
        let _ = rx.wait_for(|l| *l >= level).await;
    }

    /// Resolves when network retries should stop trying: a while after an abandon.
    pub(crate) async fn give_up(&self) {
        self.reached(Level::Abandoning).await;
        tokio::time::sleep(ABANDON_NETWORK_BUDGET).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_reason_wins_but_fenced_overrides() {
        let s = StopSignal::new();
        assert_eq!(s.current(), None);
        assert!(s.stop(Stop::Canceled));
        assert!(!s.stop(Stop::TimedOut));
        assert_eq!(s.current(), Some(Stop::Canceled));
        assert!(s.stop(Stop::Fenced));
        assert!(!s.stop(Stop::Canceled));
        assert_eq!(s.current(), Some(Stop::Fenced));
    }

    #[tokio::test]
    async fn stopped_resolves_with_the_reason() {
        let s = StopSignal::new();
        let waiter = {
            let s = s.clone();
            tokio::spawn(async move { s.stopped().await })
        };
        s.stop(Stop::TimedOut);
        assert_eq!(waiter.await.unwrap(), Stop::TimedOut);
    }
}
