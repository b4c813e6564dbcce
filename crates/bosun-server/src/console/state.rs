//! The state page of a stack: its versions (who wrote each, forced or late) and its lock
//! (who holds it, for what, since when, whether that holder is alive), with a force-unlock
//! that asks for the exact lock ID; and a page per version: its document, what changed
//! from the version before, and a download of the file.

use axum::extract::{Form, Path, Query, State};
use axum::response::{IntoResponse, Response};
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
        .route(
            "/orgs/{org}/stacks/{stack}/state/versions/{version}",
            get(version_page),
        )
        .route(
            "/orgs/{org}/stacks/{stack}/state/versions/{version}/download",
            get(download),
        )
}

/// The most lines of a version's document, or of its diff, a page shows.
const MAX_LINES: usize = 5000;

#[derive(askama::Template)]
#[template(path = "console/state_version.html")]
struct VersionPage {
    layout: Layout,
    stack: String,
    version: i64,
    serial: u64,
    writer: String,
    at: String,
    /// The version before it, when there is one.
    previous: Option<i64>,
    /// The version before it was deleted by retention: nothing to diff against.
    previous_pruned: bool,
    /// Its diff from the previous version's document: (class, line).
    diff: Vec<(&'static str, String)>,
    /// The document, pretty-printed.
    document: String,
    cut: bool,
}

/// The document as the page shows it: pretty-printed, sensitive outputs' values hidden
/// (the download has them, like `terraform state pull`).
fn pretty(doc: &serde_json::Value) -> String {
    let mut shown = doc.clone();
    if let Some(outputs) = shown["outputs"].as_object_mut() {
        for output in outputs.values_mut() {
            if output["sensitive"] == serde_json::Value::Bool(true) {
                output["value"] = serde_json::Value::String("(sensitive)".into());
            }
        }
    }
    serde_json::to_string_pretty(&shown).unwrap_or_default()
}

/// The lines that differ between `before` and `after`, with a little context, each
/// with its class (`add`, `del`, or `` for context and `@@` separators).
fn line_diff(before: &str, after: &str) -> Vec<(&'static str, String)> {
    // Bounded in time: two large, very different documents get a coarser diff, not a
    // page that never answers.
    let diff = similar::TextDiff::configure()
        .timeout(std::time::Duration::from_millis(500))
        .diff_lines(before, after);
    let mut out = Vec::new();
    for group in diff.grouped_ops(3) {
        out.push(("hunk", "@@".to_string()));
        for op in group {
            for change in diff.iter_changes(&op) {
                let (class, sign) = match change.tag() {
                    similar::ChangeTag::Delete => ("del", '-'),
                    similar::ChangeTag::Insert => ("add", '+'),
                    similar::ChangeTag::Equal => ("", ' '),
                };
                out.push((
                    class,
                    format!("{sign}{}", change.value().trim_end_matches('\n')),
                ));
            }
        }
    }
    out
}

/// `GET …/state/versions/{version}`: one version — who wrote it, its document, and what
/// changed from the version before.
async fn version_page(
    State(state): State<AppState>,
    session: Session,
    Path((org, stack, version)): Path<(String, String, i64)>,
) -> Result<Response, PageError> {
    let layout = Layout::new(
        session,
        &org,
        "stacks",
        format!("{stack}: state version {version}"),
        crate::state::SHOW_VERSION,
    )?;
    let this = service::show_version(&state, &org, &stack, version).await?;
    // Versions are numbered without gaps, so a missing one before this was deleted by
    // retention.
    let previous = if version > 1 {
        match service::show_version(&state, &org, &stack, version - 1).await {
            Ok(p) => Some(p),
            Err(crate::error::ApiError::NotFound(_)) => None,
            Err(e) => return Err(e.into()),
        }
    } else {
        None
    };
    let previous_pruned = version > 1 && previous.is_none();
    let document = pretty(&this.state);
    let mut diff = match &previous {
        Some(p) => line_diff(&pretty(&p.state), &document),
        None => Vec::new(),
    };
    let mut lines: Vec<&str> = document.lines().collect();
    let cut = lines.len() > MAX_LINES || diff.len() > MAX_LINES;
    lines.truncate(MAX_LINES);
    diff.truncate(MAX_LINES);
    let m = this.meta;
    let flash = layout.flash.clone();
    render(
        flash.as_ref(),
        &VersionPage {
            layout,
            stack,
            version,
            serial: m.serial,
            writer: format!("{} {}", m.writer.kind, m.writer.id),
            at: m.created_at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
            previous: previous.map(|p| p.meta.version),
            previous_pruned,
            diff,
            document: lines.join("\n"),
            cut,
        },
    )
}

/// `GET …/state/versions/{version}/download`: the version's document as a file.
async fn download(
    State(state): State<AppState>,
    session: Session,
    Path((org, stack, version)): Path<(String, String, i64)>,
) -> Result<Response, PageError> {
    Layout::new(session, &org, "stacks", "", crate::state::SHOW_VERSION)?;
    let this = service::show_version(&state, &org, &stack, version).await?;
    let body = serde_json::to_vec_pretty(&this.state).unwrap_or_default();
    let name = format!("{stack}-v{version}.tfstate");
    Ok((
        [
            (
                axum::http::header::CONTENT_TYPE,
                "application/json".to_string(),
            ),
            (
                axum::http::header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        body,
    )
        .into_response())
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
