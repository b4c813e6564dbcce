//! The runners page: the runners serving the org (its pools' runners and the server's
//! hosted ones), 50 to a page in registration order, each with its status, pool, last
//! heartbeat and the runs it holds; runners gone silent (the API's `dark`) are
//! highlighted as stale. Each shows how its engines
//! reach the network; a runner opted out of the egress sandbox is marked as a warning.

use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use bosun_api::RunnerEgress;
use serde::Deserialize;

use super::audit::When;
use super::{render, Layout, PageError, Session};
use crate::app::AppState;

pub fn router() -> Router<AppState> {
    Router::new().route("/orgs/{org}/runners", get(list))
}

/// Runners per page.
const PAGE: u32 = 50;

#[derive(Deserialize)]
pub struct ListQuery {
    /// The previous page's last runner (`KeyCursor::encode`).
    after: Option<String>,
}

/// Recent plan runs read to find the ones runners hold (held runs are recent).
const PLAN_RUNS_SCANNED: u32 = 200;

/// A run a runner holds now, linked to its page.
struct HeldRun {
    href: String,
    id: String,
    state: String,
    what: String,
}

/// How a runner's engines reach the network, as the page shows it.
struct EgressCell {
    /// `restricted`, `unrestricted`, `opted_out`, or `unknown` (not reported).
    mode: &'static str,
    /// The badge's classes; empty: no badge (not reported).
    badge: &'static str,
    text: &'static str,
    detail: &'static str,
}

impl EgressCell {
    fn of(egress: Option<RunnerEgress>) -> EgressCell {
        let (mode, badge, text, detail) = match egress {
            Some(RunnerEgress::Restricted) => (
                "restricted",
                "badge ok",
                "egress restricted",
                "engines run in the egress sandbox",
            ),
            Some(RunnerEgress::Unrestricted) => (
                "unrestricted",
                "badge",
                "egress open",
                "no sandbox: engines reach what this runner's network reaches",
            ),
            Some(RunnerEgress::OptedOut) => (
                "opted_out",
                "badge warn",
                "egress unrestricted (opted out)",
                "started with --egress-unrestricted: engines run without the egress sandbox",
            ),
            None => (
                "unknown",
                "",
                "",
                "not reported (a runner version before it)",
            ),
        };
        EgressCell {
            mode,
            badge,
            text,
            detail,
        }
    }
}

struct RunnerRow {
    id: String,
    name: String,
    pool: String,
    version: String,
    /// `online`, `busy`, `dark` or `drained`, as the API says.
    status: String,
    /// In words: what the status means for this runner.
    status_text: String,
    stale: bool,
    egress: EgressCell,
    last_seen: When,
    runs: Vec<HeldRun>,
    /// Runs it holds for other orgs (a hosted runner serves every org): counted only.
    elsewhere: usize,
}

#[derive(askama::Template)]
#[template(path = "console/runners.html")]
struct RunnersPage {
    layout: Layout,
    rows: Vec<RunnerRow>,
    /// The cursor of the next page, while this one is full.
    next: Option<String>,
    first_page: bool,
}

async fn list(
    State(state): State<AppState>,
    session: Session,
    Path(org): Path<String>,
    Query(q): Query<ListQuery>,
) -> Result<Response, PageError> {
    let layout = Layout::new(session, &org, "runners", "Runners", crate::runners::LIST)?;
    let after = crate::paging::key_cursor(q.after.as_deref(), "the runners list")?;
    let (runners, next) = crate::service::runners::list(&state, &org, after.as_ref(), PAGE).await?;
    // One read each for the runs held now, not one per runner.
    let held = state.store.executing_runs().await?;
    let plan_runs = state
        .store
        .list_plan_runs(&org, None, None, PLAN_RUNS_SCANNED)
        .await?;
    let rows = runners
        .into_iter()
        .map(|r| {
            let mine = |id: &Option<String>| id.as_deref() == Some(r.id.as_str());
            let mut runs: Vec<HeldRun> = held
                .iter()
                .filter(|run| mine(&run.runner_id) && run.org == org)
                .map(|run| HeldRun {
                    href: format!("/orgs/{org}/runs/{}", run.id),
                    id: run.id.clone(),
                    state: run.state.to_string(),
                    what: format!("{} run of stack {}", run.kind, run.stack),
                })
                .collect();
            runs.extend(
                plan_runs
                    .iter()
                    .filter(|p| p.leased && mine(&p.runner_id))
                    .map(|p| HeldRun {
                        href: format!("/orgs/{org}/plan-runs/{}", p.id),
                        id: p.id.clone(),
                        state: p.state.to_string(),
                        what: format!("run of plan {}", p.plan),
                    }),
            );
            let elsewhere = held
                .iter()
                .filter(|run| mine(&run.runner_id) && run.org != org)
                .count();
            let seen = When::of(r.last_seen);
            let status = r.status;
            let status_text = match status.as_str() {
                "dark" => format!("stale: no heartbeat since {}", seen.text),
                "drained" => "drained: takes no new work".to_string(),
                "busy" => "busy with the runs listed".to_string(),
                "online" => "idle: waiting for work".to_string(),
                other => other.to_string(),
            };
            RunnerRow {
                stale: status == "dark",
                status_text,
                egress: EgressCell::of(r.egress),
                last_seen: seen,
                status,
                runs,
                elsewhere,
                id: r.id,
                name: r.name,
                pool: r.pool,
                version: r.version,
            }
        })
        .collect();
    let flash = layout.flash.clone();
    render(
        flash.as_ref(),
        &RunnersPage {
            layout,
            rows,
            next,
            first_page: q.after.is_none(),
        },
    )
}
