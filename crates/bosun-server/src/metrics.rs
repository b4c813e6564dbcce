//! Prometheus metrics at `/metrics`, read from the store on each scrape (so they survive
//! restarts and agree across replicas) plus this process's duty status.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use bosun_core::run::RunState;

use crate::error::ApiError;
use crate::server::AppState;

pub async fn serve(State(state): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    let m = state.store.metrics().await?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP bosun_runs Runs by state.\n# TYPE bosun_runs gauge"
    );
    for s in RunState::ALL {
        let n = m.runs_by_state.get(s.as_str()).copied().unwrap_or(0);
        let _ = writeln!(out, "bosun_runs{{state=\"{s}\"}} {n}");
    }
    let _ = writeln!(
        out,
        "# HELP bosun_state_late_writes_total State versions written by runs that had already ended.\n# TYPE bosun_state_late_writes_total counter\nbosun_state_late_writes_total {}",
        m.late_writes
    );
    let _ = writeln!(
        out,
        "# HELP bosun_duty_last_pass_timestamp_seconds When a background duty last completed a pass.\n# TYPE bosun_duty_last_pass_timestamp_seconds gauge"
    );
    for (duty, last) in [
        ("stale_sweep", &state.duties.stale_sweep_last_pass),
        ("git_poll", &state.duties.git_poll_last_pass),
    ] {
        let _ = writeln!(
            out,
            "bosun_duty_last_pass_timestamp_seconds{{duty=\"{duty}\"}} {}",
            last.load(Ordering::Relaxed) as f64 / 1000.0
        );
    }
    let c = &state.vcs.counters;
    let _ = writeln!(
        out,
        "# HELP bosun_webhook_deliveries_total GitHub webhook deliveries by outcome (rejected: bad or missing signature).\n# TYPE bosun_webhook_deliveries_total counter"
    );
    for (outcome, n) in [
        ("accepted", &c.accepted),
        ("duplicate", &c.duplicate),
        ("rejected", &c.rejected),
    ] {
        let _ = writeln!(
            out,
            "bosun_webhook_deliveries_total{{outcome=\"{outcome}\"}} {}",
            n.load(Ordering::Relaxed)
        );
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out))
}
