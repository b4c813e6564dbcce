//! The drift dashboard: every stack with drift detection — its schedule and zone, the
//! next check, the last check (result and run), the last successful one and its age —
//! stale stacks first (the most overdue first) and highlighted, a page at a time.

use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use bosun_store::KeyCursor;
use serde::Deserialize;

use super::audit::When;
use super::stacks::DriftBadge;
use super::{duration_text, render, Layout, PageError, Session};
use crate::app::AppState;

pub fn router() -> Router<AppState> {
    Router::new().route("/orgs/{org}/drift", get(dashboard))
}

/// Stacks per page.
const PAGE: usize = 50;

#[derive(Deserialize)]
pub struct DriftQuery {
    /// The last row of the previous page (`KeyCursor::encode`).
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
    /// How many stacks are stale, as the banner says it; none, no banner.
    stale: Option<String>,
    next: Option<String>,
    first_page: bool,
}

/// The banner's count of stale stacks: the dashboard counts up to one past its cap.
fn stale_text(count: u64) -> Option<String> {
    let cap = u64::from(crate::drift::STALE_COUNT_CAP);
    match count {
        0 => None,
        n if n > cap => Some(format!("More than {cap}")),
        n => Some(n.to_string()),
    }
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
    let layout = Layout::new(session, &org, "drift", "Drift", crate::stacks::LIST)?;
    let after = match q.after.as_deref() {
        None => None,
        Some(a) => Some(KeyCursor::decode(a).ok_or_else(|| {
            crate::error::ApiError::Validation(bosun_core::ValidationError::new(
                "after",
                format!("{a:?} is not a drift dashboard cursor (use the page links)"),
            ))
        })?),
    };
    // One page from the index of when each stack turns stale: stale first, the most
    // overdue first, then the ones turning stale soonest.
    let mut page =
        crate::drift::dashboard_page(&state, &org, after.as_ref(), PAGE as u32 + 1).await?;
    let next = (page.rows.len() > PAGE)
        .then(|| page.rows[PAGE - 1].3.as_ref().map(KeyCursor::encode))
        .flatten();
    page.rows.truncate(PAGE);
    let rows = page
        .rows
        .into_iter()
        .map(|(stack, d, s, _)| DriftRow {
            schedule: d.schedule,
            timezone: d.timezone,
            reconcile: d.reconcile,
            badge: DriftBadge::of(&s),
            next: s.next_check_at.map(When::of),
            age: s.age_seconds.map(duration_text),
            stale: s.stale,
            open_run: s.open_run,
            note: s.last_fire_note,
            last: s.last_check.map(check),
            last_success: s.last_success.map(check),
            stack,
        })
        .collect();
    let flash = layout.flash.clone();
    render(
        flash.as_ref(),
        &DriftPage {
            layout,
            rows,
            stale: stale_text(page.stale_count),
            next,
            first_page: q.after.is_none(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::stale_text;
    use crate::drift::STALE_COUNT_CAP;

    #[test]
    fn the_banner_counts_up_to_the_cap_then_says_more_than() {
        let cap = u64::from(STALE_COUNT_CAP);
        assert_eq!(stale_text(0), None);
        assert_eq!(stale_text(1).as_deref(), Some("1"));
        assert_eq!(stale_text(cap).as_deref(), Some(cap.to_string().as_str()));
        assert_eq!(
            stale_text(cap + 1),
            Some(format!("More than {cap}")),
            "one past the cap is all the dashboard counts"
        );
    }
}
