//! The drift dashboard: every stack with drift detection — its schedule and zone, the
//! next check, the last check (result and run), the last successful one and its age —
//! stale stacks first and highlighted, a page at a time.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use serde::Deserialize;

use super::audit::When;
use super::stacks::DriftBadge;
use super::{duration_text, render, Layout, PageError, Session};
use crate::server::AppState;

pub fn router() -> Router<AppState> {
    Router::new().route("/orgs/{org}/drift", get(dashboard))
}

/// Stacks per page.
const PAGE: usize = 50;

#[derive(Deserialize)]
pub struct DriftQuery {
    /// The sort key of the last row of the previous page (`stale:<id>` / `fresh:<id>`).
    after: Option<String>,
}

struct Check {
    run: String,
    result: String,
    at: When,
}

struct DriftRow {
    stack: String,
    schedule: String,
    timezone: String,
    reconcile: bool,
    next: Option<When>,
    last: Option<Check>,
    last_success: Option<Check>,
    /// Since the last successful check (or since checking began).
    age: Option<String>,
    stale: bool,
    badge: DriftBadge,
    open_run: Option<String>,
    note: Option<String>,
}

#[derive(askama::Template)]
#[template(path = "console/drift.html")]
struct DriftPage {
    layout: Layout,
    rows: Vec<DriftRow>,
    stale_count: usize,
    next: Option<String>,
    first_page: bool,
}

/// Stale stacks first, then by id; the pager's cursor is this key.
fn sort_key(stale: bool, stack: &str) -> String {
    format!("{}:{stack}", if stale { "stale" } else { "fresh" })
}

fn check(c: bosun_api::DriftCheck) -> Check {
    Check {
        run: c.run,
        result: c.result.replace('_', " "),
        at: When::of(c.checked_at),
    }
}

async fn dashboard(
    State(state): State<AppState>,
    session: Session,
    Path(org): Path<String>,
    Query(q): Query<DriftQuery>,
) -> Result<Response, PageError> {
    let layout = Layout::new(session, &org, "drift", "Drift", "/orgs/{org}/stacks")?;
    // Two reads for the whole org, whatever its size: the statuses and the schedules.
    let status = crate::drift::org_status(&state, &org).await?;
    let schedules: HashMap<String, bosun_core::stack::DriftDetection> = state
        .store
        .drift_schedules(Some(&org), None)
        .await?
        .into_iter()
        .map(|r| (r.stack, r.drift))
        .collect();
    let stale_count = status.values().filter(|s| s.stale).count();
    let mut all: Vec<(String, String, bosun_api::StackDriftStatus)> = status
        .into_iter()
        .map(|(stack, s)| (sort_key(s.stale, &stack), stack, s))
        .collect();
    // "fresh" < "stale": reverse the flag's order by sorting stale keys first.
    all.sort_by(|a, b| (!a.2.stale, &a.1).cmp(&(!b.2.stale, &b.1)));
    let start = match q.after.as_deref() {
        None => 0,
        Some(after) => all
            .iter()
            .position(|(k, _, _)| k == after)
            .map(|i| i + 1)
            .unwrap_or(0),
    };
    let page: Vec<_> = all.into_iter().skip(start).take(PAGE + 1).collect();
    let next = (page.len() > PAGE).then(|| page[PAGE - 1].0.clone());
    let rows = page
        .into_iter()
        .take(PAGE)
        .map(|(_, stack, s)| {
            let d = schedules.get(&stack);
            DriftRow {
                schedule: d.map(|d| d.schedule.clone()).unwrap_or_default(),
                timezone: d.map(|d| d.timezone.clone()).unwrap_or_default(),
                reconcile: d.is_some_and(|d| d.reconcile),
                badge: DriftBadge::of(&s),
                next: s.next_check_at.map(When::of),
                age: s.age_seconds.map(duration_text),
                stale: s.stale,
                open_run: s.open_run,
                note: s.last_fire_note,
                last: s.last_check.map(check),
                last_success: s.last_success.map(check),
                stack,
            }
        })
        .collect();
    let flash = layout.flash.clone();
    render(
        flash.as_ref(),
        &DriftPage {
            layout,
            rows,
            stale_count,
            next,
            first_page: q.after.is_none(),
        },
    )
}
