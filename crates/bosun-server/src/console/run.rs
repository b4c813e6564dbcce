//! The run page: state, what started it, phases with timings, the plan, the state it
//! wrote, what it waits for, and its live log; confirm, discard, cancel and retry by role.

use axum::extract::{Form, Path, Query, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use bosun_core::run::RunState;
use serde::Deserialize;

use super::log::{page_log, PageLog};
use super::session::redirect_with_flash;
use super::{age, duration_text, render, urlencode, Layout, PageError, Session, StreamQuery};
use crate::app::AppState;
use crate::extract::ApiPath;
use crate::service::runs;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/orgs/{org}/runs/{run}", get(show))
        .route("/orgs/{org}/runs/{run}/action", post(action))
        .route("/orgs/{org}/runs/{run}/log/stream", get(log_stream))
        .route("/orgs/{org}/runs/{run}/log.txt", get(log_text))
}

/// Log chunks shown in the page itself; the rest follows live or in `log.txt`.
const LOG_PAGE: u32 = 1000;
/// State versions looked through for the ones a run wrote (newest first, stopping at
/// the run's creation).
const VERSION_SCAN: u32 = 100;
const VERSION_PAGES: usize = 10;

pub struct PhaseRow {
    pub state: String,
    pub started: String,
    pub ended: String,
    pub duration: String,
}

pub struct ChangeRow {
    pub address: String,
    pub action: String,
    /// `add`, `chg` or `del`: the colour.
    pub class: &'static str,
}

pub struct PlanView {
    pub has_changes: bool,
    pub add: u32,
    pub change: u32,
    pub destroy: u32,
    pub resources: Vec<ChangeRow>,
    pub outputs: Vec<ChangeRow>,
}

pub struct WrittenVersion {
    pub version: i64,
    pub serial: u64,
    pub late: bool,
    pub at: String,
    /// Why the version was recovered from an engine that could not write it.
    pub recovered: Option<String>,
}

pub struct ConsumedRow {
    pub stack: String,
    pub version: i64,
    pub output: String,
    pub variable: String,
    pub sensitive: bool,
}

#[derive(askama::Template)]
#[template(path = "console/run.html")]
struct RunPage {
    layout: Layout,
    id: String,
    stack: String,
    state: String,
    kind: String,
    reason: String,
    ended: bool,
    /// Who or what started it, in words.
    started_by: String,
    trigger: String,
    commit: String,
    branch: String,
    pull_request: Option<i64>,
    retry_of: Option<String>,
    upstream_run: Option<String>,
    reconciles: Option<String>,
    drift: Option<String>,
    runner: String,
    /// Who acted on the run by hand, oldest first ("approve by user:bob, …: “comment”").
    decisions: Vec<String>,
    created: String,
    created_age: String,
    phases: Vec<PhaseRow>,
    plan: Option<PlanView>,
    written: Vec<WrittenVersion>,
    late_write: bool,
    blocked_by: Option<String>,
    /// The state locks the run waited behind, as sentences.
    lock_waits: Vec<String>,
    /// What the run waits for when it waits for an approver, and this user's part.
    approval: Option<ApprovalBanner>,
    /// The policies evaluated on its plan, and what they hold it for, in words.
    policies: Vec<super::policies::PolicyRow>,
    policy_hold: Option<String>,
    consumed: Vec<ConsumedRow>,
    /// The buttons shown: (action, label, class).
    actions: Vec<(&'static str, &'static str, &'static str)>,
    log: PageLog,
    log_after: Option<i64>,
    log_more: bool,
    /// Why there is no log: retention summarised the run.
    log_removed: Option<String>,
}

/// A run waiting for an approval, as its page shows it.
struct ApprovalBanner {
    environments: String,
    requested_by: String,
    since: String,
    approvers: String,
    /// This user may approve or reject it here.
    can_decide: bool,
    /// Why this user may not approve it (the approval rule's words), when the API would
    /// let them try.
    refusal: Option<String>,
}

fn change_class(action: &str) -> &'static str {
    match action {
        "create" => "add",
        "delete" => "del",
        _ => "chg",
    }
}

fn trigger_words(r: &bosun_api::Run) -> String {
    match r.trigger.as_str() {
        "push" => format!(
            "a push to {} by {}{}",
            r.branch,
            r.triggered_by,
            r.commit
                .as_deref()
                .map(|c| format!(" (commit {c})"))
                .unwrap_or_default()
        ),
        "pull_request" => format!(
            "pull request{} by {}",
            r.pull_request.map(|n| format!(" #{n}")).unwrap_or_default(),
            r.triggered_by
        ),
        "manual" => format!("started by hand by {}", r.triggered_by),
        "retry" => format!(
            "a retry by {} of run {}",
            r.triggered_by,
            r.retry_of.as_deref().unwrap_or("?")
        ),
        "dependency" => format!(
            "upstream {} (run {})",
            r.triggered_by,
            r.upstream_run.as_deref().unwrap_or("?")
        ),
        "schedule" => format!("the drift-check schedule ({})", r.triggered_by),
        other => format!("{other} by {}", r.triggered_by),
    }
}

fn time_text(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

async fn show(
    State(state): State<AppState>,
    session: Session,
    Path((org, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    let layout = Layout::new(session, &org, "stacks", &id, crate::runs::SHOW)?;
    let r = runs::show(&state, &org, &id).await?;
    let run_state: RunState = r.state.parse().map_err(crate::error::ApiError::from)?;
    let ended = run_state.is_terminal();

    // A run waiting for an approver is approved or rejected, not confirmed.
    let approval = match &r.approval {
        None => None,
        Some(a) => {
            let (can_decide, refusal) =
                super::approvals::page_decision(&state, &layout, &a.environments, &a.requested_by)
                    .await?;
            Some(ApprovalBanner {
                environments: a.environments.join(", "),
                requested_by: a.requested_by.clone(),
                since: age(a.since),
                approvers: a.approvers.clone(),
                can_decide,
                refusal,
            })
        }
    };
    let mut actions = Vec::new();
    let allowed = [
        (
            ("confirm", "Confirm and apply", "primary"),
            crate::runs::CONFIRM,
            run_state == RunState::Unconfirmed && approval.is_none() && r.policy_hold.is_none(),
        ),
        (
            ("discard", "Discard the plan", ""),
            crate::runs::DISCARD,
            run_state == RunState::Unconfirmed,
        ),
        (("cancel", "Cancel", "danger"), crate::runs::CANCEL, !ended),
        (("retry", "Retry", ""), crate::runs::RETRY, ended),
    ];
    for (button, endpoint, now) in allowed {
        if now && layout.can(endpoint) {
            actions.push(button);
        }
    }

    let phases = r
        .phases
        .iter()
        .map(|p| PhaseRow {
            state: p.state.clone(),
            started: time_text(p.started_at),
            ended: p.ended_at.map(time_text).unwrap_or_else(|| "—".into()),
            duration: match p.seconds {
                Some(s) if s < 10.0 => format!("{s:.1}s"),
                Some(s) => duration_text(s.round() as i64),
                None => format!("{} so far", age(p.started_at)),
            },
        })
        .collect();

    let plan = r.plan.as_ref().map(|p| PlanView {
        has_changes: p.has_changes,
        add: p.add,
        change: p.change,
        destroy: p.destroy,
        resources: p
            .resource_changes
            .iter()
            .filter(|c| c.action != "no-op")
            .map(|c| ChangeRow {
                address: c.address.clone(),
                action: c.action.clone(),
                class: change_class(&c.action),
            })
            .collect(),
        outputs: p
            .output_changes
            .iter()
            .filter(|(_, action)| action.as_str() != "no-op")
            .map(|(name, action)| ChangeRow {
                address: name.clone(),
                action: action.clone(),
                class: change_class(action),
            })
            .collect(),
    });

    // The versions this run wrote: newer than the run itself, so the scan stops there.
    let mut written = Vec::new();
    if layout.can(crate::state::LIST_VERSIONS) {
        let mut cursor = None;
        for _ in 0..VERSION_PAGES {
            let query = crate::paging::PageQuery {
                cursor: cursor.map(|c: i64| c.to_string()),
                limit: Some(VERSION_SCAN),
            };
            let page = crate::service::state::list_versions(&state, &org, &r.stack, &query).await?;
            let mut older = false;
            for v in &page.items {
                if v.created_at < r.created_at {
                    older = true;
                    break;
                }
                if v.writer.kind == "run" && v.writer.id == r.id {
                    written.push(WrittenVersion {
                        version: v.version,
                        serial: v.serial,
                        late: v.late_write,
                        at: time_text(v.created_at),
                        recovered: v.recovered.clone(),
                    });
                }
            }
            match page.next_cursor.and_then(|c| c.parse().ok()) {
                Some(c) if !older => cursor = Some(c),
                _ => break,
            }
        }
    }

    let first = crate::logs::LogsQuery {
        after: None,
        limit: Some(LOG_PAGE),
    };
    let (log, log_removed) = match runs::logs(&state, &org, &id, &first).await {
        Ok(log) => (log, None),
        Err(crate::error::ApiError::Gone(why)) => (Vec::new(), Some(why)),
        Err(e) => return Err(e.into()),
    };
    let log_more = log.len() == LOG_PAGE as usize;
    let log_after = log.last().map(|c| c.seq);
    let log = page_log(&log);

    let flash = layout.flash.clone();
    render(
        flash.as_ref(),
        &RunPage {
            started_by: trigger_words(&r),
            blocked_by: r.blocked_by.as_ref().map(|b| {
                format!(
                    "waiting for the state lock {} held by {} ({}{})",
                    b.id,
                    b.who,
                    b.operation,
                    if b.created.is_empty() {
                        String::new()
                    } else {
                        format!(", since {}", b.created)
                    }
                ) + &r
                    .blocked_since
                    .map(|t| format!("; the run has waited {}", age(t)))
                    .unwrap_or_default()
            }),
            lock_waits: r
                .lock_waits
                .iter()
                .map(|w| {
                    let why = match w.holder.info.as_str() {
                        "" => String::new(),
                        info => format!(" ({info:?})"),
                    };
                    format!(
                        "{} for the state lock held by {}{why}, {} to {} UTC",
                        duration_text((w.until - w.from).num_seconds()),
                        w.holder.who,
                        w.from.format("%Y-%m-%d %H:%M:%S"),
                        w.until.format("%H:%M:%S"),
                    )
                })
                .collect(),
            consumed: r
                .consumed
                .iter()
                .map(|c| ConsumedRow {
                    stack: c.stack.clone(),
                    version: c.version,
                    output: c.output.clone(),
                    variable: c.variable.clone(),
                    sensitive: c.sensitive,
                })
                .collect(),
            drift: r.drift.as_ref().map(|d| {
                let mut s = d.result.replace('_', " ");
                if let Some(rr) = &d.reconcile_run {
                    s.push_str(&format!("; reconciled by run {rr}"));
                }
                s
            }),
            id: r.id.clone(),
            stack: r.stack.clone(),
            state: r.state.clone(),
            kind: r.kind.clone(),
            reason: r.reason.clone().unwrap_or_default(),
            ended,
            trigger: r.trigger.clone(),
            commit: r.commit.clone().unwrap_or_default(),
            branch: r.branch.clone(),
            pull_request: r.pull_request,
            retry_of: r.retry_of.clone(),
            upstream_run: r.upstream_run.clone(),
            reconciles: r.reconciles.clone(),
            runner: match (&r.runner_name, &r.runner) {
                (Some(name), Some(id)) => format!("{name} ({id})"),
                (_, id) => id.clone().unwrap_or_default(),
            },
            decisions: r
                .decisions
                .iter()
                .map(|d| {
                    let comment = d
                        .comment
                        .as_deref()
                        .map(|c| format!(": “{c}”"))
                        .unwrap_or_default();
                    format!("{} by {}, {}{comment}", d.action, d.by, time_text(d.at))
                })
                .collect(),
            created: time_text(r.created_at),
            created_age: age(r.created_at),
            phases,
            plan,
            written,
            late_write: r.late_write,
            approval,
            policies: super::policies::rows(&r.policies),
            policy_hold: super::policies::hold_words(r.policy_hold.as_deref(), &r.id),
            actions,
            log,
            log_after,
            log_removed,
            log_more,
            layout,
        },
    )
}

#[derive(Deserialize)]
pub struct ActionForm {
    /// Missing is refused like wrong, by the session's check.
    #[serde(default)]
    csrf: String,
    action: String,
}

/// `POST /orgs/{org}/runs/{run}/action`: confirm, discard, cancel or retry through the
/// API's handlers, back to the run (a retry: to the new run) with what happened or why not.
async fn action(
    State(state): State<AppState>,
    session: Session,
    Path((org, id)): Path<(String, String)>,
    Form(form): Form<ActionForm>,
) -> Result<Response, PageError> {
    session.check_csrf(&form.csrf)?;
    let back = format!("/orgs/{}/runs/{}", urlencode(&org), urlencode(&id));
    let layout = Layout::new(session, &org, "stacks", "", crate::runs::SHOW)?;
    let route = match form.action.as_str() {
        "confirm" => crate::runs::CONFIRM,
        "discard" => crate::runs::DISCARD,
        "cancel" => crate::runs::CANCEL,
        "retry" => crate::runs::RETRY,
        other => {
            return Ok(redirect_with_flash(
                &back,
                false,
                &format!("unknown run action {other:?}: use confirm, discard, cancel or retry"),
            ))
        }
    };
    if let Err(e) = layout.require(route) {
        return Ok(redirect_with_flash(&back, false, &super::refusal(e)));
    }
    let caller = layout.caller();
    let done = match form.action.as_str() {
        "confirm" => runs::confirm(&state, &caller, &org, &id).await,
        "discard" => runs::discard(&state, &caller, &org, &id).await,
        "cancel" => runs::cancel(&state, &caller, &org, &id).await,
        _ => runs::retry(&state, &caller, &org, &id).await,
    };
    Ok(match done {
        Err(e) => redirect_with_flash(&back, false, &super::refusal(PageError::Api(e))),
        Ok(run) if form.action == "retry" => redirect_with_flash(
            &format!("/orgs/{}/runs/{}", urlencode(&org), urlencode(&run.id)),
            true,
            &format!("run {} retries run {id}: {}", run.id, run.state),
        ),
        Ok(run) => redirect_with_flash(
            &back,
            true,
            &format!("run {id}: {} done; it is now {}", form.action, run.state),
        ),
    })
}

/// `GET /orgs/{org}/runs/{run}/log/stream`: the API's log stream, for a session.
async fn log_stream(
    State(state): State<AppState>,
    session: Session,
    Path((org, id)): Path<(String, String)>,
    Query(q): Query<StreamQuery>,
) -> Result<Response, PageError> {
    Layout::new(session, &org, "stacks", "", crate::runs::LOGS_STREAM)?;
    let sse = crate::runs::logs_stream(State(state), ApiPath((org, id)), q.into_api()).await?;
    Ok(sse.into_response())
}

/// `GET /orgs/{org}/runs/{run}/log.txt`: the whole log so far as plain text.
async fn log_text(
    State(state): State<AppState>,
    session: Session,
    Path((org, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    Layout::new(session, &org, "stacks", "", crate::runs::LOGS)?;
    let mut text = String::new();
    let mut after = None;
    loop {
        let q = crate::logs::LogsQuery {
            after,
            limit: Some(LOG_PAGE),
        };
        let page = runs::logs(&state, &org, &id, &q).await?;
        let full = page.len() == LOG_PAGE as usize;
        for c in page {
            after = Some(c.seq);
            text.push_str(&c.text);
        }
        if !full {
            break;
        }
    }
    let mut resp = text.into_response();
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(resp)
}
