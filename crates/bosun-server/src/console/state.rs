//! The state page of a stack: its versions (who wrote each, forced or late) and its lock
//! (who holds it, for what, since when, whether that holder is alive), with a force-unlock
//! that asks for the exact lock ID.

use axum::extract::{Form, Path, Query, State};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;

use super::session::redirect_with_flash;
use super::{age, duration_text, render, urlencode, Layout, PageError, Session};
use crate::app::AppState;
use crate::service::state as service;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/orgs/{org}/stacks/{stack}/state", get(show))
        .route(
            "/orgs/{org}/stacks/{stack}/state/force-unlock",
            post(force_unlock),
        )
}

/// Versions per page.
const PAGE: u32 = 50;

#[derive(Deserialize)]
pub struct StateQuery {
    before: Option<i64>,
}

pub struct VersionRow {
    pub version: i64,
    pub serial: u64,
    pub lineage: String,
    /// `run` or `user`.
    pub writer_kind: String,
    pub writer: String,
    pub at: String,
    pub age: String,
    pub size: String,
    pub forced: bool,
    pub late: bool,
    pub current: bool,
    /// Why the version was recovered from an engine that could not write it.
    pub recovered: Option<String>,
}

pub struct LockRow {
    pub id: String,
    pub holder_kind: String,
    pub holder: String,
    /// `live_run`, `dead_run` or `person`.
    pub status: String,
    /// The status in words.
    pub liveness: String,
    pub operation: String,
    pub who: String,
    pub info: String,
    pub age: String,
    pub since: String,
}

#[derive(askama::Template)]
#[template(path = "console/state.html")]
struct StatePage {
    layout: Layout,
    stack: String,
    versions: Vec<VersionRow>,
    next: Option<String>,
    first_page: bool,
    lock: Option<LockRow>,
    can_force: bool,
}

fn size_text(bytes: u64) -> String {
    match bytes {
        b if b < 1024 => format!("{b} B"),
        b if b < 1024 * 1024 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0)),
    }
}

async fn show(
    State(state): State<AppState>,
    session: Session,
    Path((org, stack)): Path<(String, String)>,
    Query(q): Query<StateQuery>,
) -> Result<Response, PageError> {
    let layout = Layout::new(
        session,
        &org,
        "stacks",
        format!("State of {stack}"),
        crate::state::LIST_VERSIONS,
    )?;
    layout.require(crate::state::SHOW_LOCK)?;
    let query = crate::paging::PageQuery {
        cursor: q.before.map(|c| c.to_string()),
        limit: Some(PAGE),
    };
    let page = service::list_versions(&state, &org, &stack, &query).await?;
    let versions = page
        .items
        .into_iter()
        .map(|v| VersionRow {
            version: v.version,
            serial: v.serial,
            lineage: v.lineage,
            writer_kind: v.writer.kind,
            writer: v.writer.id,
            at: v.created_at.to_rfc3339(),
            age: age(v.created_at),
            size: size_text(v.size),
            forced: v.forced,
            late: v.late_write,
            current: v.current,
            recovered: v.recovered,
        })
        .collect();
    let lock = service::lock_status(&state, &org, &stack)
        .await?
        .lock
        .map(|l| LockRow {
            liveness: match l.holder.status.as_str() {
                "live_run" => format!(
                    "held by run {}, which is still going: unlocking would let another writer in under it",
                    l.holder.id
                ),
                "dead_run" => format!(
                    "held by run {}, which has ended: the lock was left behind",
                    l.holder.id
                ),
                _ => format!("held by {} (a person, e.g. a laptop's terraform)", l.holder.id),
            },
            id: l.id,
            holder_kind: l.holder.kind,
            holder: l.holder.id,
            status: l.holder.status,
            operation: l.operation,
            who: l.who,
            info: l.info,
            age: duration_text(l.age_seconds),
            since: l.acquired_at.to_rfc3339(),
        });
    let can_force = layout.can(crate::state::FORCE_UNLOCK);
    let flash = layout.flash.clone();
    render(
        flash.as_ref(),
        &StatePage {
            layout,
            stack,
            versions,
            next: page.next_cursor,
            first_page: q.before.is_none(),
            lock,
            can_force,
        },
    )
}

#[derive(Deserialize)]
pub struct UnlockForm {
    /// Missing is refused like wrong, by the session's check.
    #[serde(default)]
    csrf: String,
    lock_id: String,
}

/// `POST /orgs/{org}/stacks/{stack}/state/force-unlock`: the API's force-unlock of the
/// lock with exactly the typed ID; back to the state page with what happened or why not.
async fn force_unlock(
    State(state): State<AppState>,
    session: Session,
    Path((org, stack)): Path<(String, String)>,
    Form(form): Form<UnlockForm>,
) -> Result<Response, PageError> {
    session.check_csrf(&form.csrf)?;
    let back = format!(
        "/orgs/{}/stacks/{}/state",
        urlencode(&org),
        urlencode(&stack)
    );
    let layout = Layout::new(session, &org, "stacks", "", crate::stacks::SHOW)?;
    if let Err(e) = layout.require(crate::state::FORCE_UNLOCK) {
        return Ok(redirect_with_flash(&back, false, &super::refusal(e)));
    }
    let result = service::force_unlock(&state, &layout.caller(), &org, &stack, &form.lock_id).await;
    Ok(match result {
        Ok(l) => redirect_with_flash(
            &back,
            true,
            &format!(
                "released lock {} of stack {stack}, held by {} ({}) for {}",
                l.id,
                l.who,
                l.operation,
                duration_text(l.age_seconds)
            ),
        ),
        Err(e) => redirect_with_flash(&back, false, &super::refusal(PageError::Api(e))),
    })
}
