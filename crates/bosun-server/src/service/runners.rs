//! Runners as an org sees them: each with its status (online, busy, dark, drained) —
//! the work behind the API's list and the console's runners page, the status rule
//! `/metrics` counts by, and how a run whose runner fell silent is settled (by the stale
//! sweep, the start-up reconciliation and a restarted runner handing its lease back).
//! Also each runner's egress mode as it registered it, and this process's count of the
//! connections runners reported their egress policy refused.

use std::sync::atomic::AtomicU64;

use bosun_api::RunnerEgress;
use bosun_core::run::Event;
use bosun_core::runner::Egress;
use bosun_store::{KeyCursor, RunnerRecord};
use bosun_store::{RunEventInput, RunUpdate};
use chrono::Utc;

use crate::app::AppState;
use crate::error::ApiError;
use crate::paging::{key_cursor, next_cursor, PageQuery};

/// What runners reported to this process, for `/metrics`.
#[derive(Default)]
pub struct Counters {
    /// Connections from engines that the egress policy refused, summed over the phase
    /// reports this process accepted.
    pub egress_refused: AtomicU64,
}

/// A registered egress mode as the store keeps it.
pub(crate) fn egress_record(e: RunnerEgress) -> Egress {
    match e {
        RunnerEgress::Restricted => Egress::Restricted,
        RunnerEgress::Unrestricted => Egress::Unrestricted,
        RunnerEgress::OptedOut => Egress::OptedOut,
    }
}

/// A stored egress mode as the API shows it.
pub(crate) fn egress_view(e: Egress) -> RunnerEgress {
    match e {
        Egress::Restricted => RunnerEgress::Restricted,
        Egress::Unrestricted => RunnerEgress::Unrestricted,
        Egress::OptedOut => RunnerEgress::OptedOut,
    }
}

/// Every status [`runner_status`] gives.
pub(crate) const RUNNER_STATUSES: [&str; 4] = ["online", "busy", "dark", "drained"];

/// How long a runner may be silent before it counts as dark: the stale sweep's limit.
pub(crate) fn dark_after(state: &AppState) -> chrono::Duration {
    chrono::Duration::from_std(state.config.runs.stale_after)
        .unwrap_or(chrono::Duration::seconds(60))
}

/// A runner's status as the runner list shows it (and `/metrics` counts it): drained,
/// dark (silent past `dark_after`), busy (`is_busy`: it holds a lease on a run), or
/// online.
pub(crate) fn runner_status(
    r: &RunnerRecord,
    now: chrono::DateTime<Utc>,
    dark_after: chrono::Duration,
    is_busy: impl Fn(&str) -> bool,
) -> &'static str {
    if r.drained {
        "drained"
    } else if now - r.last_seen > dark_after {
        "dark"
    } else if is_busy(&r.id) {
        "busy"
    } else {
        "online"
    }
}

/// A page of the runners serving `org` as the API lists them, in registration order,
/// after `q.cursor` (the previous page's `next_cursor`, `<registered ms>:<runner>`).
pub async fn page(
    state: &AppState,
    org: &str,
    q: &PageQuery,
) -> Result<bosun_api::Page<bosun_api::RunnerView>, ApiError> {
    let limit = q.limit()?;
    let after = key_cursor(q.cursor.as_deref(), "the runners list")?;
    let (items, next) = list(state, org, after.as_ref(), limit).await?;
    Ok(bosun_api::Page {
        items,
        next_cursor: next,
    })
}

/// At most `limit` of the runners serving `org` after `after`, in registration order,
/// with their status; and the cursor of the next page while this one is full.
pub async fn list(
    state: &AppState,
    org: &str,
    after: Option<&KeyCursor>,
    limit: u32,
) -> Result<(Vec<bosun_api::RunnerView>, Option<String>), ApiError> {
    let runners = state.store.list_runners(org, after, limit).await?;
    let next = next_cursor(&runners, limit, |r| r.cursor().encode());
    let busy = state.store.busy_runners().await?;
    let dark_after = dark_after(state);
    let now = Utc::now();
    let views = runners
        .into_iter()
        .map(|r| {
            let status = runner_status(&r, now, dark_after, |id| busy.contains(id));
            bosun_api::RunnerView {
                status: status.into(),
                last_seen: r.last_seen,
                id: r.id,
                pool: r.pool,
                name: r.name,
                version: r.version,
                egress: r.egress.map(egress_view),
            }
        })
        .collect();
    Ok((views, next))
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
