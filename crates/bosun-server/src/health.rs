//! Liveness and readiness probes.

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::State;
use axum::Json;
use bosun_api::{DutyHealth, Health};
use bosun_store::StoreError;

use crate::app::AppState;
use crate::error::ApiError;

/// How long `/readyz` waits for the store: a hung database makes the probe answer 503,
/// not hang with it.
pub const PING_BUDGET: Duration = Duration::from_secs(3);

/// The process is up and serving HTTP.
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        duties: Vec::new(),
    })
}

/// The server can do useful work: its store answers within [`PING_BUDGET`], its last
/// write did not fail for want of the database (a full disk still reads: see
/// `Store::write_fault`), and it is not shutting down. A store that cannot serve is a 503
/// `store_unavailable` saying why, with `Retry-After`.
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    if !state.ready.load(Ordering::SeqCst) {
        return Err(ApiError::Unavailable("shutting down".into()));
    }
    match tokio::time::timeout(PING_BUDGET, state.store.ping()).await {
        Err(_) => {
            return Err(ApiError::StoreUnavailable(format!(
                "the database did not answer within {} s",
                PING_BUDGET.as_secs()
            )))
        }
        Ok(Err(StoreError::Unavailable(why))) => return Err(ApiError::StoreUnavailable(why)),
        Ok(Err(e)) => {
            return Err(ApiError::StoreUnavailable(format!(
                "store unavailable: {e}"
            )))
        }
        Ok(Ok(())) => {}
    }
    if let Some(why) = state.store.write_fault() {
        return Err(ApiError::StoreUnavailable(format!(
            "the database refuses writes: {why}"
        )));
    }
    Ok(Json(Health {
        status: "ready".into(),
        duties: duties(&state),
    }))
}

/// Every duty of this process: its last pass and whether it holds the duty's lease.
fn duties(state: &AppState) -> Vec<DutyHealth> {
    let held: std::collections::BTreeMap<&str, bool> =
        state.duties.leases_held().into_iter().collect();
    state
        .duties
        .last_passes()
        .into_iter()
        .map(|(name, at)| DutyHealth {
            name: name.to_string(),
            last_pass_at: (at > 0)
                .then(|| chrono::DateTime::from_timestamp_millis(at))
                .flatten(),
            lease_held: held.get(name).copied().unwrap_or(false),
        })
        .collect()
}
