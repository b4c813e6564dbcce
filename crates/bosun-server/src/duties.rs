//! Background duties: named workers with an interval and a shutdown signal. The stale
//! sweep settles runs whose runner stopped reporting, and runs past their phase timeout.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use bosun_core::run::Event;
use bosun_store::{RunEventInput, RunUpdate};
use chrono::Utc;

use crate::server::AppState;

/// When each duty last completed a pass (Unix ms), for probes and metrics.
#[derive(Default)]
pub struct DutyStatus {
    pub stale_sweep_last_pass: AtomicI64,
    pub git_poll_last_pass: AtomicI64,
    pub notify_last_pass: AtomicI64,
}

/// Resolves once shutdown has begun — also when it began before this receiver was made
/// (`changed()` alone would miss a signal sent before the subscription).
pub async fn stopped(stopping: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stopping.wait_for(|s| *s).await;
}

/// Force-fails executing runs with no heartbeat for `stale_after`, requeues leased runs
/// whose runner never started them, and interrupts runs past their phase timeout.
pub async fn stale_sweep(state: AppState) {
    let mut stopping = state.stopping.subscribe();
    let mut tick = tokio::time::interval(state.config.runs.sweep_interval);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = crate::duties::stopped(&mut stopping) => return,
        }
        match sweep_once(&state).await {
            Ok(n) => {
                state
                    .duties
                    .stale_sweep_last_pass
                    .store(Utc::now().timestamp_millis(), Ordering::Relaxed);
                if n > 0 {
                    state.dispatch.notify_waiters();
                }
            }
            Err(e) => tracing::warn!(duty = "stale_sweep", error = %e, "pass failed"),
        }
    }
}

/// One pass; returns how many runs it settled or requeued.
pub async fn sweep_once(state: &AppState) -> Result<usize, bosun_store::StoreError> {
    let stale_after = chrono::Duration::from_std(state.config.runs.stale_after)
        .unwrap_or(chrono::Duration::seconds(60));
    let mut settled = 0;
    for run in state.store.stale_runs(Utc::now() - stale_after).await? {
        // Nothing ran if the runner never started the phase: safe to hand to another.
        let event = if run.started {
            Event::Stale
        } else {
            Event::Requeue
        };
        let input = RunEventInput {
            event: event.clone(),
            fencing: Some(run.fencing),
            update: RunUpdate::default(),
            audit: None,
        };
        match state.store.run_event(&run.id, &input).await {
            Ok(out) => {
                settled += 1;
                tracing::warn!(run = %run.id, state = %out.run.state, "stale run settled");
            }
            // The runner reported meanwhile: nothing to settle.
            Err(bosun_store::StoreError::Fenced { .. })
            | Err(bosun_store::StoreError::InvalidTransition(_)) => {}
            Err(e) => return Err(e),
        }
    }
    settled += crate::plans::runs::sweep_stale(state, Utc::now() - stale_after).await?;
    for run in state.store.executing_runs().await? {
        let (Some(started), true) = (run.phase_started_at, run.started) else {
            continue;
        };
        let Some(stack) = state.store.get_stack(&run.org, &run.stack).await? else {
            continue;
        };
        let timeout = state.config.runs.phase_timeout.unwrap_or(match run.phase {
            bosun_core::run::Phase::Plan => stack.spec.tier.plan_timeout(),
            bosun_core::run::Phase::Apply => stack.spec.tier.apply_timeout(),
        });
        // The runner enforces the timeout itself; the server steps in only when it has
        // not, with a margin of one stale period.
        let limit =
            chrono::Duration::from_std(timeout).unwrap_or(chrono::Duration::hours(3)) + stale_after;
        if Utc::now() - started > limit {
            let input = RunEventInput {
                event: Event::Timeout,
                fencing: Some(run.fencing),
                update: RunUpdate {
                    reason: Some("the phase ran past its tier's timeout".into()),
                    ..Default::default()
                },
                audit: None,
            };
            if state.store.run_event(&run.id, &input).await.is_ok() {
                settled += 1;
            }
        }
    }
    Ok(settled)
}

pub fn new_status() -> Arc<DutyStatus> {
    Arc::new(DutyStatus::default())
}
