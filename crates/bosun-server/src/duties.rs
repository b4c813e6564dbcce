//! Background duties: named workers with an interval and a shutdown signal. The stale
//! sweep settles runs whose runner stopped reporting, and runs past their phase timeout;
//! at start, runs of this replica's previous process's embedded runners are reconciled at
//! once. With several replicas on one database, each duty's pass runs on one replica at a
//! time: the one holding the duty's lease (`holds_duty`).
//!
//! Leases are kept apart from the duties' own cadence (a pass every 5 s for the sweep,
//! every hour for key rotation): [`lease_keeper`] renews this replica's leases and tries
//! the others' every third of `duty_lease`, so a dead replica's duties move to a live one
//! within about `duty_lease` (15 s by default), however rarely the duty itself passes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bosun_core::run::Event;
use bosun_store::{RunEventInput, RunUpdate};
use chrono::Utc;

use crate::server::{AppState, StartError};

/// When each duty last completed a pass (Unix ms), for probes and metrics; and the duty
/// leases this replica holds.
#[derive(Default)]
pub struct DutyStatus {
    pub stale_sweep_last_pass: AtomicI64,
    pub git_poll_last_pass: AtomicI64,
    pub notify_last_pass: AtomicI64,
    pub key_rotation_last_pass: AtomicI64,
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

/// Resolves once shutdown has begun — also when it began before this receiver was made
/// (`changed()` alone would miss a signal sent before the subscription).
pub async fn stopped(stopping: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stopping.wait_for(|s| *s).await;
}

/// Whether this replica runs `duty`'s pass now: whether it holds the duty's cluster-wide
/// lease, as [`lease_keeper`] last found (the first call takes or looks at the lease
/// itself). False while another replica holds it — the pass is skipped — and when the
/// store could not be asked for longer than the lease's safe part.
pub async fn holds_duty(state: &AppState, duty: &'static str) -> bool {
    if let Some(held) = state.duties.valid(duty) {
        if !held {
            tracing::debug!(duty, "another replica holds the duty's lease; pass skipped");
        }
        return held;
    }
    try_lease(state, duty).await
}

/// Takes or renews `duty`'s lease for this replica (or finds another holds it) and
/// records the answer; false when the store cannot be asked.
async fn try_lease(state: &AppState, duty: &'static str) -> bool {
    let ttl = state.config.duty_lease.max(Duration::from_millis(300));
    let started = tokio::time::Instant::now();
    match state
        .store
        .try_duty_lease(duty, &state.replica, Utc::now(), ttl)
        .await
    {
        Ok(held) => {
            state
                .duties
                .record(duty, held.then(|| started + ttl * 2 / 3));
            held
        }
        Err(e) => {
            tracing::warn!(duty, error = %e, "cannot take the duty's lease");
            // What was held stays valid until its recorded end.
            state.duties.valid(duty).unwrap_or_else(|| {
                state.duties.record(duty, None);
                false
            })
        }
    }
}

/// Keeps this replica's duty leases: every third of `duty_lease` it renews those it
/// holds and tries those it does not (another replica's that lapsed when it died), for
/// every duty this replica runs.
pub async fn lease_keeper(state: AppState) {
    let mut stopping = state.stopping.subscribe();
    let every = (state.config.duty_lease / 3).max(Duration::from_millis(100));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopped(&mut stopping) => return,
        }
        for duty in state.duties.duties() {
            try_lease(&state, duty).await;
        }
    }
}

/// This replica's id: the configured one, else the one kept in `<data-dir>/replica-id`
/// (random, written on first start), so a restarted replica settles its own previous
/// process's runs (`reconcile_on_start`).
pub fn replica_id(config: &crate::config::ServerConfig) -> Result<String, StartError> {
    if let Some(id) = config
        .replica_id
        .as_deref()
        .filter(|id| !id.trim().is_empty())
    {
        return Ok(id.trim().to_string());
    }
    let path = config.data_dir.join("replica-id");
    let err = |source| StartError::ReplicaId {
        path: path.clone(),
        source,
    };
    match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => return Ok(id.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    let id = hex::encode(rand::random::<[u8; 6]>());
    crate::bootstrap::write_private(&path, &id).map_err(err)?;
    Ok(id)
}

/// Force-fails executing runs with no heartbeat for `stale_after`, requeues leased runs
/// whose runner never started them, and interrupts runs past their phase timeout.
pub async fn stale_sweep(state: AppState) {
    // Silence while this server was down is not a runner's: it is counted from here.
    let started = Utc::now();
    let mut stopping = state.stopping.subscribe();
    let mut tick = tokio::time::interval(state.config.runs.sweep_interval);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = crate::duties::stopped(&mut stopping) => return,
        }
        if !holds_duty(&state, "stale_sweep").await {
            continue;
        }
        match sweep_once(&state, silence_counts_from(&state, started)).await {
            Ok(n) => {
                state
                    .duties
                    .stale_sweep_last_pass
                    .store(Utc::now().timestamp_millis(), Ordering::Relaxed);
                if n > 0 {
                    state.wake_dispatch();
                }
            }
            Err(e) => tracing::warn!(duty = "stale_sweep", error = %e, "pass failed"),
        }
    }
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
        settled += crate::plans::runs::sweep_stale(state, before).await?;
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

/// Settles a leased stack run nothing executes any more: force-failed, or requeued when
/// its runner never started the phase (nothing ran: safe to hand to another). `false`
/// when the runner reported meanwhile.
pub(crate) async fn settle_silent_run(
    state: &AppState,
    run: &bosun_store::RunRecord,
) -> Result<bool, bosun_store::StoreError> {
    let event = if run.started {
        Event::Stale
    } else {
        Event::Requeue
    };
    let input = RunEventInput {
        event,
        fencing: Some(run.fencing),
        update: RunUpdate::default(),
        audit: None,
    };
    match state.store.run_event(&run.id, &input).await {
        Ok(out) => {
            tracing::warn!(run = %run.id, state = %out.run.state, "silent run settled");
            Ok(true)
        }
        // The runner reported meanwhile: nothing to settle.
        Err(bosun_store::StoreError::Fenced { .. })
        | Err(bosun_store::StoreError::InvalidTransition(_)) => Ok(false),
        Err(e) => Err(e),
    }
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
        if crate::plans::runs::settle_silent(state, &run, Some(reason.into())).await? {
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

pub fn new_status() -> Arc<DutyStatus> {
    Arc::new(DutyStatus::default())
}
