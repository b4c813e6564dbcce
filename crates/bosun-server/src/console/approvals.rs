//! The approvals inbox: every run waiting for an approver (paused plan runs with a line
//! on their preview, gated stack runs) with whether this user may approve it — the
//! approval rule's own answer, from `bosun_core::approval::decide` — the approve/reject
//! forms, and recent decisions.
//! Decisions are made only through the API's handlers, so roles, grants, self-approval,
//! the record and the audit are the API's.

use axum::extract::{Form, Path, Query, State};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use bosun_api::ApprovalDecide;
use bosun_core::approval::{decide, Approver, Decision, GatedEnvironment};
use serde::Deserialize;

use super::audit::When;
use super::session::redirect_with_flash;
use super::{render, Layout, PageError, Session};
use crate::app::AppState;
use crate::error::ApiError;
use crate::service::approvals;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/orgs/{org}/approvals", get(inbox))
        .route("/orgs/{org}/approvals/{subject}/approve", post(approve))
        .route("/orgs/{org}/approvals/{subject}/reject", post(reject))
}

/// Decisions shown under the inbox.
const RECENT_DECISIONS: u32 = 20;

struct PendingRow {
    subject: String,
    /// "plan run" or "stack run".
    kind: String,
    /// The run's page.
    href: String,
    /// "plan app-config" / "stack net".
    what: String,
    environments: String,
    requested_by: String,
    since: When,
    /// May this user press approve (the API's route policy)?
    can_decide: bool,
    /// The approval rule's answer for this user: `None` when they may approve.
    refusal: Option<String>,
    /// The rule's answer for a rejection: `None` when they may reject.
    reject_refusal: Option<String>,
    /// A plan run's preview: its id and one line on what it predicts (or that it runs).
    preview: Option<PreviewLine>,
    /// A stack run's plan, in one line (`+1 ~0 -0, 1 output to change`).
    plan: Option<String>,
    /// Who may approve or reject it, in the approval rule's words.
    approvers: Option<String>,
}

struct PreviewLine {
    id: String,
    /// `preview: 2 hosts would change, 1 no change`, `preview: running`.
    line: String,
}

/// One line on a paused plan run's preview, as the inbox shows it beside the run;
/// `None` for a preview that is gone.
async fn preview_line(
    state: &AppState,
    org: &str,
    preview: &str,
) -> Result<Option<PreviewLine>, PageError> {
    let view = match crate::service::plan_runs::show(state, org, preview).await {
        Ok(v) => v,
        Err(ApiError::NotFound(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    Ok(Some(PreviewLine {
        line: format!(
            "preview: {}",
            crate::service::plan_runs::preview_outcome(&view)
        ),
        id: view.id,
    }))
}

struct DecisionRow {
    subject: String,
    href: String,
    what: String,
    decision: String,
    decided_by: String,
    requested_by: String,
    comment: Option<String>,
    at: When,
}

#[derive(askama::Template)]
#[template(path = "console/approvals.html")]
struct ApprovalsPage {
    layout: Layout,
    pending: Vec<PendingRow>,
    decisions: Vec<DecisionRow>,
    /// The cursor of the next page of waiting runs, while this one is full.
    next: Option<String>,
    first_page: bool,
}

/// Waiting runs per inbox page.
const PAGE: u32 = 50;

#[derive(Deserialize)]
pub struct InboxQuery {
    /// The previous page's last waiting run (`KeyCursor::encode`).
    after: Option<String>,
}

fn run_link(
    org: &str,
    kind: &str,
    subject: &str,
    plan: Option<&str>,
    stack: Option<&str>,
) -> (String, String) {
    if kind == "plan_run" {
        (
            format!("/orgs/{org}/plan-runs/{subject}"),
            format!("plan {}", plan.unwrap_or_default()),
        )
    } else {
        (
            format!("/orgs/{org}/runs/{subject}"),
            format!("stack {}", stack.unwrap_or_default()),
        )
    }
}

/// The approval rule's answer for the person looking at `layout` taking `decision` on a
/// run waiting for `waits_for` (environment ids) requested by `requested_by`: `None`
/// when they may, else the refusal in the API's words. `environments` are the org's.
pub(super) fn rule_refusal(
    state: &AppState,
    layout: &Layout,
    decision: Decision,
    environments: &[bosun_store::EnvironmentRecord],
    waits_for: &[String],
    requested_by: &str,
) -> Option<String> {
    let principal = layout.caller().0;
    let actor = principal.actor();
    let approver = Approver {
        user: principal.user().unwrap_or_default(),
        actor: &actor,
        role: principal.role_in(&layout.org),
    };
    // A gated environment deleted since the run started protects nothing.
    let gated: Vec<GatedEnvironment<'_>> = environments
        .iter()
        .filter(|e| waits_for.contains(&e.id))
        .map(|e| GatedEnvironment {
            id: &e.id,
            protected: e.protected,
            grants: &e.grants,
        })
        .collect();
    decide(
        approver,
        decision,
        requested_by,
        &gated,
        state.config.allow_self_approval,
    )
    .err()
    .map(|r| ApiError::from(r).body().error.message)
}

/// What the person looking at `layout` may do about a run waiting for `waits_for`
/// (environment ids) requested by `requested_by`, as its own page offers it: whether they
/// may approve (and reject) it there, and otherwise why not, in the approval rule's words
/// (`None` when the API would not let them try at all).
pub(super) async fn page_decision(
    state: &AppState,
    layout: &Layout,
    waits_for: &[String],
    requested_by: &str,
) -> Result<(bool, Option<String>), PageError> {
    if !layout.can(crate::approvals::APPROVE) {
        return Ok((false, None));
    }
    let environments = state.store.list_environments(&layout.org).await?;
    let refusal = rule_refusal(
        state,
        layout,
        Decision::Approve,
        &environments,
        waits_for,
        requested_by,
    );
    Ok((refusal.is_none(), refusal))
}

async fn inbox(
    State(state): State<AppState>,
    session: Session,
    Path(org): Path<String>,
    Query(q): Query<InboxQuery>,
) -> Result<Response, PageError> {
    let layout = Layout::new(
        session,
        &org,
        "approvals",
        "Approvals",
        crate::approvals::LIST,
    )?;
    let waiting = approvals::pending_page(
        &state,
        &org,
        &crate::paging::PageQuery {
            cursor: q.after.clone(),
            limit: Some(PAGE),
        },
    )
    .await?;
    let (pending, next) = (waiting.items, waiting.next_cursor);
    let recent = crate::paging::PageQuery {
        cursor: None,
        limit: Some(RECENT_DECISIONS),
    };
    let decisions = approvals::decisions(&state, &org, &recent).await?.items;
    let can_decide = layout.can(crate::approvals::APPROVE);
    // The org's environments, read once, for who may decide each row and the approval
    // rule's answer on it.
    let environments = if !pending.is_empty() {
        state.store.list_environments(&org).await?
    } else {
        Vec::new()
    };
    // One read per paused plan run with a preview: the inbox lists the runs waiting now.
    // A stack run's plan summary comes with the inbox's own rows.
    let mut previews = std::collections::HashMap::new();
    for p in &pending {
        if let Some(id) = &p.preview {
            previews.insert(p.subject.clone(), preview_line(&state, &org, id).await?);
        }
    }
    let rows = pending
        .into_iter()
        .map(|p| {
            let answer = |decision| {
                can_decide
                    .then(|| {
                        rule_refusal(
                            &state,
                            &layout,
                            decision,
                            &environments,
                            &p.environments,
                            &p.requested_by,
                        )
                    })
                    .flatten()
            };
            let refusal = answer(Decision::Approve);
            let reject_refusal = answer(Decision::Reject);
            let approvers = Some(approvals::approvers(
                &state,
                &org,
                &p.environments,
                &p.requested_by,
                &environments,
            ));
            let (href, what) = run_link(
                &org,
                &p.kind,
                &p.subject,
                p.plan.as_deref(),
                p.stack.as_deref(),
            );
            PendingRow {
                kind: p.kind.replace('_', " "),
                href,
                what,
                environments: p.environments.join(", "),
                requested_by: p.requested_by,
                since: When::of(p.since),
                can_decide,
                refusal,
                reject_refusal,
                preview: previews.remove(&p.subject).flatten(),
                plan: p.plan_summary.as_ref().map(|plan| plan.short_text()),
                approvers,
                subject: p.subject,
            }
        })
        .collect();
    let decisions = decisions
        .into_iter()
        .map(|d| {
            let (href, what) = run_link(
                &org,
                &d.kind,
                &d.subject,
                d.plan.as_deref(),
                d.stack.as_deref(),
            );
            DecisionRow {
                href,
                what,
                decision: d.decision,
                decided_by: d.decided_by,
                requested_by: d.requested_by,
                comment: d.comment,
                at: When::of(d.decided_at),
                subject: d.subject,
            }
        })
        .collect();
    let flash = layout.flash.clone();
    render(
        flash.as_ref(),
        &ApprovalsPage {
            layout,
            pending: rows,
            decisions,
            next,
            first_page: q.after.is_none(),
        },
    )
}

#[derive(Deserialize)]
pub struct DecideForm {
    csrf: String,
    #[serde(default)]
    comment: String,
    /// The page the form was on, to return to: `run` (a stack run's page), `plan-run`,
    /// or anything else for the inbox.
    #[serde(default)]
    from: String,
}

async fn approve(
    State(state): State<AppState>,
    session: Session,
    Path((org, subject)): Path<(String, String)>,
    Form(form): Form<DecideForm>,
) -> Result<Response, PageError> {
    decide_form(state, session, org, subject, Decision::Approve, form).await
}

async fn reject(
    State(state): State<AppState>,
    session: Session,
    Path((org, subject)): Path<(String, String)>,
    Form(form): Form<DecideForm>,
) -> Result<Response, PageError> {
    decide_form(state, session, org, subject, Decision::Reject, form).await
}

/// A decision through the API's handler; the inbox shows what happened, or the refusal.
async fn decide_form(
    state: AppState,
    session: Session,
    org: String,
    subject: String,
    decision: Decision,
    form: DecideForm,
) -> Result<Response, PageError> {
    session.check_csrf(&form.csrf)?;
    let layout = Layout::new(
        session,
        &org,
        "approvals",
        "Approvals",
        crate::approvals::LIST,
    )?;
    let back = match form.from.as_str() {
        "run" => format!(
            "/orgs/{}/runs/{}",
            super::urlencode(&org),
            super::urlencode(&subject)
        ),
        "plan-run" => format!(
            "/orgs/{}/plan-runs/{}",
            super::urlencode(&org),
            super::urlencode(&subject)
        ),
        _ => format!("/orgs/{}/approvals", super::urlencode(&org)),
    };
    let (route, verb) = match decision {
        Decision::Approve => (crate::approvals::APPROVE, "approved"),
        Decision::Reject => (crate::approvals::REJECT, "rejected"),
    };
    if let Err(e) = layout.require(route) {
        return Ok(redirect_with_flash(&back, false, &super::refusal(e)));
    }
    let comment = Some(form.comment).filter(|c| !c.trim().is_empty());
    let body = ApprovalDecide { comment };
    let answer = approvals::decide(&state, &layout.caller(), &org, &subject, decision, body).await;
    Ok(match answer {
        Ok(d) => {
            let now = d
                .run_state
                .map(|s| format!("; the run is now {s}"))
                .unwrap_or_default();
            redirect_with_flash(&back, true, &format!("{verb} {}{now}", d.subject))
        }
        Err(e) => redirect_with_flash(&back, false, &e.body().error.message),
    })
}
