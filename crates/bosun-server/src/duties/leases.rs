//! Duty leases: with several replicas on one database, each duty's pass runs on one
//! replica at a time — the one holding the duty's cluster-wide lease ([`holds_duty`]).
//! Leases are kept apart from the duties' own cadence (a pass every 5 s for the sweep,
//! every hour for key rotation): [`lease_keeper`] renews this replica's leases and tries
//! the others' every third of `duty_lease`, so a dead replica's duties move to a live one
//! within about `duty_lease` (15 s by default), however rarely the duty itself passes.
//! Also this replica's id, the leases' holder.

use std::time::Duration;

use chrono::Utc;

use super::stopped;
use crate::app::AppState;
use crate::start_error::StartError;

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
