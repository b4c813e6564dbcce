//! The drift dashboard: every stack with drift detection — its schedule and zone, the
//! next check, the last check (result and run), the last successful one and its age —
//! stale stacks first and highlighted, a page at a time.

use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use bosun_core::stack::DriftDetection;
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
    /// The sort key of the last row of the previous page (see [`sort_key`]).
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

/// Stale stacks first, then by id: the rows' order and the pager's cursor
/// (`0:<id>` stale, `1:<id>` not).
fn sort_key(stale: bool, stack: &str) -> String {
    format!("{}:{stack}", if stale { 0 } else { 1 })
}

/// The page after `after` (a sort key) of rows keyed by [`sort_key`], and the cursor of
/// the next page when there is one.
fn page_after<T>(
    mut all: Vec<(String, T)>,
    after: Option<&str>,
    size: usize,
) -> (Vec<(String, T)>, Option<String>) {
    // Only the rows after the cursor, and of those only the page's are sorted.
    all.retain(|(k, _)| after.is_none_or(|a| k.as_str() > a));
    if all.len() > size + 1 {
        all.select_nth_unstable_by(size, |a, b| a.0.cmp(&b.0));
        all.truncate(size + 1);
    }
    all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut page = all;
    let next = (page.len() > size).then(|| page[size - 1].0.clone());
    page.truncate(size);
    (page, next)
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
    // One read for the whole org: each drift-checked stack's settings and status.
    let entries = crate::drift::org_entries(&state, &org).await?;
    let stale_count = entries.iter().filter(|(_, _, s)| s.stale).count();
    let all: Vec<(
        String,
        (String, DriftDetection, bosun_api::StackDriftStatus),
    )> = entries
        .into_iter()
        .map(|(stack, d, s)| (sort_key(s.stale, &stack), (stack, d, s)))
        .collect();
    let (page, next) = page_after(all, q.after.as_deref(), PAGE);
    let rows = page
        .into_iter()
        .map(|(_, (stack, d, s))| DriftRow {
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
            stale_count,
            next,
            first_page: q.after.is_none(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_stacks_come_first_and_pages_follow_on() {
        let rows = |ids: &[(&str, bool)]| -> Vec<(String, ())> {
            ids.iter()
                .map(|(id, stale)| (sort_key(*stale, id), ()))
                .collect()
        };
        let all = [
            ("a", false),
            ("b", true),
            ("c", false),
            ("d", true),
            ("e", false),
        ];
        let (first, next) = page_after(rows(&all), None, 2);
        let keys: Vec<_> = first.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(keys, ["0:b", "0:d"]);
        let (second, next) = page_after(rows(&all), next.as_deref(), 2);
        let keys: Vec<_> = second.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(keys, ["1:a", "1:c"]);
        let (last, next) = page_after(rows(&all), next.as_deref(), 2);
        assert_eq!(last.len(), 1);
        assert_eq!(next, None);
        // A stack that turned stale since keeps its place out of the later pages.
        let (after, _) = page_after(rows(&[("a", true), ("z", false)]), Some("0:b"), 2);
        assert_eq!(after.len(), 1);
    }
}
