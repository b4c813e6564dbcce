//! The stacks page: every stack of an org with its last run, connection, lock and drift
//! badge, a page at a time.

use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use serde::Deserialize;

use super::{age, render, Layout, PageError, Session};
use crate::app::AppState;

pub fn router() -> Router<AppState> {
    Router::new().route("/orgs/{org}/stacks", get(list))
}

/// Stacks per page: enough to scan, few enough to render in a few milliseconds.
const PAGE: u32 = 50;

#[derive(Deserialize)]
pub struct ListQuery {
    after: Option<String>,
}

/// One row of the stacks table, already in words.
pub struct StackRow {
    pub id: String,
    pub name: String,
    pub branch: String,
    pub last_run: Option<RunBadge>,
    pub connected: bool,
    pub connection: String,
    /// "locked by … for 3m" when the state is locked.
    pub lock: Option<String>,
    pub drift: Option<DriftBadge>,
}

/// A run named by id and state, for tables and banners.
pub struct RunBadge {
    pub id: String,
    pub state: String,
    pub kind: String,
    pub age: String,
}

impl RunBadge {
    pub fn of(r: &bosun_store::RunRecord) -> Self {
        RunBadge {
            id: r.id.clone(),
            state: r.state.to_string(),
            kind: r.kind.to_string(),
            age: age(r.created_at),
        }
    }
}

/// The drift column: the last result and whether the checks went stale.
pub struct DriftBadge {
    pub text: String,
    /// `ok`, `drift`, `failed`, `stale` or `pending`: the badge's colour.
    pub class: &'static str,
}

impl DriftBadge {
    pub fn of(d: &bosun_api::StackDriftStatus) -> Self {
        if d.stale {
            let since = d
                .last_success
                .as_ref()
                .map(|c| format!("last successful check {} ago", age(c.checked_at)))
                .unwrap_or_else(|| "no successful check yet".into());
            return DriftBadge {
                text: format!("stale: {since}"),
                class: "stale",
            };
        }
        match d.last_check.as_ref() {
            None => DriftBadge {
                text: "not checked yet".into(),
                class: "pending",
            },
            Some(c) => {
                let class = match c.result.as_str() {
                    "no_drift" => "ok",
                    "drift_detected" => "drift",
                    _ => "failed",
                };
                DriftBadge {
                    text: format!("{} {} ago", c.result.replace('_', " "), age(c.checked_at)),
                    class,
                }
            }
        }
    }
}

#[derive(askama::Template)]
#[template(path = "console/stacks.html")]
struct StacksPage {
    layout: Layout,
    rows: Vec<StackRow>,
    next: Option<String>,
    first_page: bool,
}

async fn list(
    State(state): State<AppState>,
    session: Session,
    Path(org): Path<String>,
    Query(q): Query<ListQuery>,
) -> Result<Response, PageError> {
    let layout = Layout::new(session, &org, "stacks", "Stacks", crate::stacks::LIST)?;
    let query = crate::paging::PageQuery {
        cursor: q.after.clone(),
        limit: Some(PAGE),
    };
    // The page, each stack's last run and held lock: one store call.
    let (page, mut activity) =
        crate::service::stacks::list_with_activity(&state, &org, &query).await?;
    let mut rows = Vec::with_capacity(page.items.len());
    for s in page.items {
        let last = activity.last_runs.remove(&s.id);
        let lock = activity.locks.remove(&s.id);
        rows.push(StackRow {
            last_run: last.as_ref().map(RunBadge::of),
            connected: s.connection.connected,
            connection: s.connection.detail.clone(),
            lock: lock.map(|l| {
                format!(
                    "locked by {} ({}) for {}",
                    l.who,
                    l.operation,
                    age(l.acquired_at)
                )
            }),
            drift: s.drift_status.as_ref().map(DriftBadge::of),
            id: s.id,
            name: s.name,
            branch: s.branch,
        });
    }
    let flash = layout.flash.clone();
    render(
        flash.as_ref(),
        &StacksPage {
            layout,
            rows,
            next: page.next_cursor,
            first_page: q.after.is_none(),
        },
    )
}
