//! Retention: the duty that keeps a long-lived store bounded. Once an hour (on the replica
//! holding its lease) it deletes the state versions of each stack past both the newest
//! `--state-keep-versions` and `--state-keep-for` — never a stack's current version, a late
//! or recovered write, nor a version a run took its inputs from — compresses the logs of
//! runs that have ended, and summarises stack runs and plan runs that ended longer ago than
//! `--run-retention` (their log, and a stack run's plan detail or a plan run's step output,
//! deleted, their record kept), and deletes
//! the VCS deliveries received longer ago than `--delivery-retention` with their trigger
//! decisions, and the console sessions ended longer ago than
//! `sign_in.keep_ended_sessions`, a batch per transaction, logging what it did and counting it for `/metrics`. What is kept is the store's rule (`bosun_store::RetentionStore`); this
//! module only decides when and with which settings.

pub mod counters;

use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::Utc;

use crate::app::AppState;
use crate::duties::{Duty, PassError};

/// State versions deleted per write transaction: a version's document may weigh
/// megabytes, so fewer than the thousand rows other prunes take.
const STATE_BATCH: u32 = 100;
/// Log chunks per write transaction.
const BATCH: u32 = 1000;
/// Runs summarised per write transaction: each deletes its log, plan file and inputs.
const RUN_BATCH: u32 = 100;

/// The retention duty, passing every `retention.every` (an hour). Each rule runs even when
/// one before it failed; the pass reports the first failure.
pub fn duty(state: &AppState) -> Duty {
    Duty::new("retention", Some(state.config.retention.every), |state| {
        let state = state.clone();
        Box::pin(async move {
            let done = [
                prune_state_versions(&state).await,
                compress_logs(&state).await,
                summarise_runs(&state).await,
                prune_deliveries(&state).await,
                prune_sessions(&state).await,
            ];
            done.into_iter().collect::<Result<Vec<()>, _>>()?;
            Ok(None)
        })
    })
}

/// The moment `age` before now; `None` when `age` is zero (keep forever) or reaches
/// past the clock's range.
fn cutoff(age: Duration) -> Option<chrono::DateTime<Utc>> {
    if age.is_zero() {
        return None;
    }
    Utc::now().checked_sub_signed(chrono::Duration::from_std(age).ok()?)
}

/// Deletes the state versions retention lets go, and says how many.
async fn prune_state_versions(state: &AppState) -> Result<(), PassError> {
    let config = &state.config.retention;
    let Some(before) = cutoff(config.state_keep_for) else {
        return Ok(());
    };
    let pruned = state
        .store
        .prune_state_versions(config.state_keep_versions, before, STATE_BATCH)
        .await?;
    state
        .retention
        .state_versions_pruned
        .fetch_add(pruned, Ordering::Relaxed);
    if pruned > 0 {
        tracing::info!(
            duty = "retention",
            versions = pruned,
            keep_versions = config.state_keep_versions,
            keep_for = %humantime::format_duration(config.state_keep_for),
            "pruned state versions past the retention"
        );
    }
    Ok(())
}

/// Compresses the logs of runs that ended `compress_logs_after` ago, and says how many
/// chunks were packed.
async fn compress_logs(state: &AppState) -> Result<(), PassError> {
    let Some(ended_before) = cutoff(state.config.retention.compress_logs_after) else {
        return Ok(());
    };
    let (stack_runs, plan_runs) = state.store.compress_run_logs(ended_before, BATCH).await?;
    let counters = &state.retention;
    counters
        .log_chunks_compressed_stack_runs
        .fetch_add(stack_runs, Ordering::Relaxed);
    counters
        .log_chunks_compressed_plan_runs
        .fetch_add(plan_runs, Ordering::Relaxed);
    if stack_runs + plan_runs > 0 {
        tracing::info!(
            duty = "retention",
            stack_run_chunks = stack_runs,
            plan_run_chunks = plan_runs,
            "compressed the logs of ended runs"
        );
    }
    Ok(())
}

/// Deletes the VCS deliveries received longer ago than the delivery retention (with their
/// trigger decisions), and says how many.
async fn prune_deliveries(state: &AppState) -> Result<(), PassError> {
    let retention = state.config.retention.delivery_retention;
    let Some(before) = cutoff(retention) else {
        return Ok(());
    };
    let pruned = state.store.prune_deliveries(before, BATCH).await?;
    state
        .retention
        .deliveries_pruned
        .fetch_add(pruned, Ordering::Relaxed);
    if pruned > 0 {
        tracing::info!(
            duty = "retention",
            deliveries = pruned,
            retention = %humantime::format_duration(retention),
            "deleted VCS deliveries and their trigger decisions past the delivery retention"
        );
    }
    Ok(())
}

/// Deletes the console sessions ended (or expired) longer ago than
/// `sign_in.keep_ended_sessions`, and the sign-ins begun and never finished; says how many
/// sessions went.
async fn prune_sessions(state: &AppState) -> Result<(), PassError> {
    let keep = state.config.sign_in.keep_ended_sessions;
    let Some(before) = cutoff(keep) else {
        return Ok(());
    };
    let pruned = state.store.prune_sessions(before, BATCH).await?;
    state
        .retention
        .sessions_pruned
        .fetch_add(pruned, Ordering::Relaxed);
    if pruned > 0 {
        tracing::info!(
            duty = "retention",
            sessions = pruned,
            keep = %humantime::format_duration(keep),
            "deleted console sessions ended longer ago than sign_in.keep_ended_sessions"
        );
    }
    Ok(())
}

/// Summarises the stack runs and the plan runs that ended longer ago than the run
/// retention, and says how many.
async fn summarise_runs(state: &AppState) -> Result<(), PassError> {
    let retention = state.config.retention.run_retention;
    let Some(ended_before) = cutoff(retention) else {
        return Ok(());
    };
    let runs = state.store.summarise_runs(ended_before, RUN_BATCH).await?;
    let plan_runs = state
        .store
        .summarise_plan_runs(ended_before, RUN_BATCH)
        .await?;
    let counters = &state.retention;
    counters.runs_summarised.fetch_add(runs, Ordering::Relaxed);
    counters
        .plan_runs_summarised
        .fetch_add(plan_runs, Ordering::Relaxed);
    if runs + plan_runs > 0 {
        tracing::info!(
            duty = "retention",
            runs,
            plan_runs,
            retention = %humantime::format_duration(retention),
            "summarised runs past the run retention: their logs, plans and step output deleted"
        );
    }
    Ok(())
}
