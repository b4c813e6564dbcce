//! One worker: registers with the server, then leases one phase at a time, runs it with a
//! heartbeat and a timeout watching over it, ships its log and reports what happened.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bosun_api::{
    AnyLease, Lease, LeaseRequest, RunnerEvent, RunnerRegister, RunnerRegistered, RunnerReport,
};
use reqwest::StatusCode;
use tokio::task::JoinHandle;
use tracing::Instrument as _;

use crate::client::{retry, Backoff, ClientError, ServerClient};
use crate::control::{Level, Shutdown, Stop, StopSignal};
use crate::egress::Refusals;
use crate::logs::{spawn_shipper, ShipEnd};
use crate::phase::{self, PhaseContext, PhaseEnd};
use crate::workspace::lease_secrets;
use crate::{RunnerConfig, RunnerError};

/// How long one lease request waits for work on the server.
pub(crate) const LEASE_WAIT_SECONDS: u64 = 20;
/// An empty lease answer sooner than this is followed by a pause, so a server that does
/// not hold the request open does not get a busy loop of requests.
const MIN_EMPTY_POLL: Duration = Duration::from_secs(1);

pub(crate) struct Worker {
    pub(crate) client: Arc<ServerClient>,
    pub(crate) config: Arc<RunnerConfig>,
    pub(crate) name: String,
    pub(crate) shutdown: Shutdown,
}

/// Aborts a background task when dropped, so no way out of a phase leaves its heartbeat
/// running.
pub(crate) struct AbortOnDrop(pub(crate) JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Worker {
    /// Registers, then leases and executes phases until the runner drains. `Err` when the
    /// server refuses this runner (a bad or revoked token).
    pub(crate) async fn run(self) -> Result<(), RunnerError> {
        let Some(mut registered) = self.register().await? else {
            return Ok(());
        };
        let mut backoff = Backoff::new();
        while self.shutdown.level() == Level::Running {
            let request = LeaseRequest {
                runner_id: registered.runner_id.clone(),
                wait_seconds: LEASE_WAIT_SECONDS,
                plan_runs: true,
            };
            let asked = Instant::now();
            let leased = tokio::select! {
                r = self.client.lease(&request) => r,
                () = self.shutdown.reached(Level::Draining) => break,
            };
            match leased {
                Ok(Some(AnyLease::Stack(lease))) => {
                    backoff.reset();
                    self.handle(*lease, registered.heartbeat_seconds).await;
                }
                Ok(Some(AnyLease::PlanRun(answer))) => {
                    backoff.reset();
                    crate::plan_run::handle(&self, answer.plan_run, registered.heartbeat_seconds)
                        .await;
                }
                Ok(None) => {
                    backoff.reset();
                    if asked.elapsed() < MIN_EMPTY_POLL {
                        self.pause(MIN_EMPTY_POLL).await;
                    }
                }
                Err(e) if is_refusal(&e) => return Err(self.refused(&e)),
                Err(e) if e.status() == Some(StatusCode::NOT_FOUND) => {
                    tracing::warn!(runner = %self.name, error = %e,
                        "the server does not know this runner; registering again");
                    match self.register().await? {
                        Some(r) => registered = r,
                        None => break,
                    }
                }
                Err(e) => {
                    let delay = backoff.next_delay();
                    tracing::warn!(runner = %self.name, error = %e, retry_in = ?delay,
                        "leasing failed");
                    self.pause(delay).await;
                }
            }
        }
        tracing::info!(runner = %self.name, "worker stopped");
        Ok(())
    }

    fn refused(&self, e: &ClientError) -> RunnerError {
        RunnerError::Refused {
            name: self.name.clone(),
            reason: e.to_string(),
        }
    }

    /// Registers, retrying while the server is unreachable; `None` if the runner shuts
    /// down first.
    async fn register(&self) -> Result<Option<RunnerRegistered>, RunnerError> {
        let body = RunnerRegister {
            name: self.name.clone(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            egress: Some(self.config.egress.registered()),
        };
        let registered = tokio::select! {
            r = retry("registering", std::future::pending(), || self.client.register(&body)) => r,
            () = self.shutdown.reached(Level::Draining) => return Ok(None),
        };
        match registered {
            Ok(r) => {
                tracing::info!(runner = %self.name, runner_id = %r.runner_id,
                    heartbeat_seconds = r.heartbeat_seconds, "registered");
                Ok(Some(r))
            }
            Err(e) => Err(self.refused(&e)),
        }
    }

    /// Sleeps for `delay`, or less if the runner starts draining.
    async fn pause(&self, delay: Duration) {
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = self.shutdown.reached(Level::Draining) => {}
        }
    }

    /// Executes one leased phase and reports it (unless the lease was fenced).
    async fn handle(&self, lease: Lease, registered_heartbeat: u64) {
        let span = tracing::info_span!("phase", runner = %self.name, run = %lease.run_id,
            phase = %lease.phase, fencing = lease.fencing);
        self.handle_inner(lease, registered_heartbeat)
            .instrument(span)
            .await;
    }

    async fn handle_inner(&self, lease: Lease, registered_heartbeat: u64) {
        tracing::info!(stack = %format!("{}/{}", lease.org, lease.stack), "leased");
        let stop = StopSignal::new();
        let heartbeat_seconds = if lease.heartbeat_seconds > 0 {
            lease.heartbeat_seconds
        } else {
            registered_heartbeat
        };
        let _heartbeat = AbortOnDrop(tokio::spawn(
            heartbeat_loop(
                Arc::clone(&self.client),
                lease.run_id.clone(),
                lease.fencing,
                heartbeat_interval(heartbeat_seconds),
                stop.clone(),
            )
            .in_current_span(),
        ));
        let timeout =
            (lease.timeout_seconds > 0).then(|| Duration::from_secs(lease.timeout_seconds));
        let _watchdog = AbortOnDrop(tokio::spawn(
            watchdog(timeout, self.shutdown.clone(), stop.clone()).in_current_span(),
        ));

        let next_seq = retry(
            "asking where the log continues",
            self.shutdown.give_up(),
            || self.client.next_log_seq(&lease.run_id, lease.fencing),
        )
        .await;
        let next_seq = match next_seq {
            Ok(seq) => seq,
            Err(ClientError::Fenced) => {
                tracing::info!("the lease was fenced before the phase started; dropping it");
                return;
            }
            Err(ClientError::GaveUp) => {
                tracing::warn!("the runner shut down before the phase started");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot learn where the run's log continues; \
                    numbering from 0");
                0
            }
        };
        let (log, shipper) = spawn_shipper(
            Arc::clone(&self.client),
            lease.run_id.clone(),
            lease.fencing,
            next_seq,
            lease_secrets(&lease),
            stop.clone(),
            self.shutdown.clone(),
        );
        let refusals = Refusals::default();
        let end = {
            let ctx = PhaseContext {
                client: &self.client,
                config: &self.config,
                runner_name: &self.name,
                lease: &lease,
                stop: &stop,
                shutdown: &self.shutdown,
                log: &log,
                refusals: &refusals,
            };
            phase::execute(&ctx).await
        };
        // The log is complete once the last sender is gone and the shipper is through.
        drop(log);
        let shipped = shipper.await;
        if let Ok(ShipEnd::GaveUp) = shipped {
            tracing::warn!("the end of the log could not be delivered before shutdown");
        }
        let end = if matches!(shipped, Ok(ShipEnd::Fenced)) || stop.current() == Some(Stop::Fenced)
        {
            PhaseEnd::Fenced
        } else {
            end
        };
        let event = match end {
            PhaseEnd::Fenced => {
                tracing::warn!(
                    "the lease was fenced (the run was force-failed or requeued); \
                    dropped the phase without reporting"
                );
                return;
            }
            PhaseEnd::Report(event) => event,
        };
        let name = event_name(&event);
        let report = RunnerReport {
            fencing: lease.fencing,
            event,
            egress_refusals: refusals.count(),
        };
        let reported = retry("reporting the phase", self.shutdown.give_up(), || {
            self.client.report(&lease.run_id, &report)
        })
        .await;
        match reported {
            Ok(()) => tracing::info!(event = name, "reported"),
            Err(ClientError::Fenced) => {
                tracing::warn!(event = name, "the lease was fenced; the report was refused")
            }
            Err(e) => tracing::error!(event = name, error = %e, "cannot report the phase"),
        }
    }
}

fn is_refusal(e: &ClientError) -> bool {
    matches!(
        e.status(),
        Some(StatusCode::UNAUTHORIZED) | Some(StatusCode::FORBIDDEN)
    )
}

fn event_name(event: &RunnerEvent) -> &'static str {
    match event {
        RunnerEvent::Started { .. } => "started",
        RunnerEvent::Planned { .. } => "planned",
        RunnerEvent::Applied => "applied",
        RunnerEvent::Failed { .. } => "failed",
        RunnerEvent::Canceled => "canceled",
        RunnerEvent::TimedOut => "timed_out",
    }
}

/// A third of the server's heartbeat period, at least a second.
pub(crate) fn heartbeat_interval(heartbeat_seconds: u64) -> Duration {
    Duration::from_millis(heartbeat_seconds.saturating_mul(1000) / 3).max(Duration::from_secs(1))
}

/// Beats for as long as the phase holds its lease, independent of engine output. A
/// `cancel` answer raises `Stop::Canceled`; a fenced one raises `Stop::Fenced` and ends
/// the beat.
pub(crate) async fn heartbeat_loop(
    client: Arc<ServerClient>,
    run_id: String,
    fencing: i64,
    every: Duration,
    stop: StopSignal,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let request_timeout = (every * 2).clamp(Duration::from_secs(2), Duration::from_secs(30));
    loop {
        tick.tick().await;
        match client.heartbeat(&run_id, fencing, request_timeout).await {
            Ok(reply) => {
                if reply.cancel && stop.stop(Stop::Canceled) {
                    tracing::info!("the server asked to cancel the phase; interrupting the engine");
                }
            }
            Err(ClientError::Fenced) => {
                if stop.stop(Stop::Fenced) {
                    tracing::warn!("heartbeat fenced: the lease is gone; stopping the engine");
                }
                return;
            }
            Err(e) => tracing::warn!(error = %e, "heartbeat failed"),
        }
    }
}

/// Raises `TimedOut` when the phase outlives its timeout, `Abandoned` when the runner
/// abandons its work.
async fn watchdog(timeout: Option<Duration>, shutdown: Shutdown, stop: StopSignal) {
    let expired = async {
        match timeout {
            Some(timeout) => tokio::time::sleep(timeout).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = expired => {
            if stop.stop(Stop::TimedOut) {
                tracing::warn!(timeout = ?timeout, "the phase timed out; stopping the engine");
            }
        }
        () = shutdown.reached(Level::Abandoning) => {
            if stop.stop(Stop::Abandoned) {
                tracing::warn!("the runner is shutting down; abandoning the phase");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeats_come_three_times_a_period() {
        assert_eq!(heartbeat_interval(30), Duration::from_secs(10));
        assert_eq!(heartbeat_interval(10), Duration::from_millis(3333));
        assert_eq!(heartbeat_interval(2), Duration::from_secs(1));
        assert_eq!(heartbeat_interval(0), Duration::from_secs(1));
    }
}
