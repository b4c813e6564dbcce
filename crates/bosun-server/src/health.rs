//! Liveness and readiness probes.

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::Json;
use bosun_api::Health;

use crate::error::ApiError;
use crate::server::AppState;

/// The process is up and serving HTTP.
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

/// The server can do useful work: its store answers and it is not shutting down.
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    if !state.ready.load(Ordering::SeqCst) {
        return Err(ApiError::Unavailable("shutting down".into()));
    }
    state
        .store
        .ping()
        .await
        .map_err(|e| ApiError::Unavailable(format!("store unavailable: {e}")))?;
    Ok(Json(Health {
        status: "ready".into(),
    }))
}
