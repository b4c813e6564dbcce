//! The stale sweep: settles runs whose runner stopped reporting, and runs past their
//! phase timeout; and, at start, the runs of this replica's previous process's embedded
//! runners, at once.

use bosun_core::run::Event;
use bosun_store::{RunEventInput, RunUpdate};
use chrono::Utc;

use super::Duty;
use crate::app::AppState;
use crate::service::runners::settle_silent_run;

/// The sweep duty: force-fails executing runs with no heartbeat for `stale_after`,
/// requeues leased runs whose runner never started them, and interrupts runs past their
/// phase timeout; a pass every `runs.sweep_interval`.
pub(crate) fn stale_sweep(state: &AppState) -> Duty {
    // Silence while this server was down is not a runner's: it is counted from here.
    let started = Utc::now();
    let every = state.config.runs.sweep_interval;
    Duty::new("stale_sweep", Some(every), move |state| {
        let state = state.clone();
        Box::pin(async move {
            if sweep_once(&state, silence_counts_from(&state, started)).await? > 0 {
                state.wake_dispatch();
            }
            Ok(None)
        })
    })
}

/// Where the sweep starts counting a run's silence: the server's start (`started`), or
/// the last time a store call failed because the database was unavailable, if later.
/// Heartbeats sent while the database was down or its disk full were answered 503 and
/// not stored; that is the store's silence, not the runner's, and the runner's retries
/// reach it once it is back.
pub fn silence_counts_from(
    state: &AppState,
    started: chrono::DateTime<Utc>,
) -> chrono::DateTime<Utc> {
    match state.store.last_unavailable() {
        Some(outage) if outage > started => outage,
        _ => started,
    }
}

/// One pass; returns how many runs it settled or requeued. A run is stale after
/// `stale_after` without a heartbeat counted from `since` at the earliest (the server's
/// start, or the end of the last store outage: [`silence_counts_from`]): a separate
/// runner that kept working while the server or its database was down gets a whole
/// stale period to reach it again.
pub async fn sweep_once(
    state: &AppState,
    since: chrono::DateTime<Utc>,
) -> Result<usize, bosun_store::StoreError> {
    let stale_after = chrono::Duration::from_std(state.config.runs.stale_after)
        .unwrap_or(chrono::Duration::seconds(60));
    let mut settled = 0;
    let before = Utc::now() - stale_after;
    if before >= since {
        for run in state.store.stale_runs(before).await? {
            if settle_silent_run(state, &run).await? {
                settled += 1;
            }
        }
        settled += crate::service::plan_runs::sweep_stale(state, before).await?;
    }
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

/// Whether a runner was one of this replica's embedded runners: runners of the org-less
/// `hosted` pool (`runners::hosted_pool_token`) registered under this replica's name
/// (`runners::embedded_runner_name`). Another replica's embedded runners are alive with
/// it: their runs are not this start's to settle.
fn is_embedded(runner: &bosun_store::RunnerRecord, replica: &str) -> bool {
    runner.org.is_none()
        && runner.pool == "hosted"
        && crate::runners::is_replicas_runner(&runner.name, replica)
}

/// Reconciles, before the server serves, the
/// runs that were executing in the runners embedded in this replica's earlier process
/// (runners are attributed by name: `local@<replica>-<i>`): those runners died with it — and their pool token was revoked when this start minted its
/// own — so nothing executes such a run any more. A stack run is settled as the stale
/// sweep would (force-failed, or requeued if its phase never started); a plan run is
/// `interrupted` at once with the per-host progress it reported (requeued if it never
/// started). Runs leased by separate runners keep their lease: their runner resumes
/// heart-beating and reporting once it reaches this server, and the stale sweep counts
/// their silence from this start only. Returns how many runs it settled.
pub async fn reconcile_on_start(state: &AppState) -> Result<usize, bosun_store::StoreError> {
    let mut embedded = std::collections::HashMap::<String, bool>::new();
    let mut settled = 0;
    for run in state.store.executing_runs().await? {
        if ran_embedded(state, &mut embedded, run.runner_id.as_deref()).await?
            && settle_silent_run(state, &run).await?
        {
            settled += 1;
        }
    }
    // Every leased plan run: heartbeats are never in the future.
    let leased = state
        .store
        .stale_plan_runs(Utc::now() + chrono::Duration::days(1))
        .await?;
    for run in leased {
        if !ran_embedded(state, &mut embedded, run.runner_id.as_deref()).await? {
            continue;
        }
        let reason = "the server restarted while its embedded runner executed the run; \
            the per-host progress it reported is kept";
        if crate::service::plan_runs::settle_silent(state, &run, Some(reason.into())).await? {
            settled += 1;
        }
    }
    if settled > 0 {
        tracing::warn!(
            runs = settled,
            "settled the runs of the previous process's embedded runners"
        );
    }
    Ok(settled)
}

/// Whether `runner` (looked up once per id in `seen`) was an embedded runner.
async fn ran_embedded(
    state: &AppState,
    seen: &mut std::collections::HashMap<String, bool>,
    runner: Option<&str>,
) -> Result<bool, bosun_store::StoreError> {
    let Some(id) = runner else {
        return Ok(false);
    };
    if let Some(known) = seen.get(id) {
        return Ok(*known);
    }
    let is = state
        .store
        .get_runner(id)
        .await?
        .is_some_and(|r| is_embedded(&r, &state.replica));
    seen.insert(id.to_string(), is);
    Ok(is)
}
