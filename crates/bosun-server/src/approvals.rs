//! The approvals inbox: one list of runs waiting for an
//! approver — plan runs that started `paused` because a target environment requires
//! approval, and tracked stack runs waiting in `unconfirmed` because their stack's
//! environment requires approval (such stacks never autodeploy) — and the decisions.
//!
//! Who may decide is `bosun_core::approval::decide`: operator or above, an explicit grant
//! on every protected environment, and the requester's own approval only with
//! `--allow-self-approval`. A decision moves its run (approve: a plan run to `queued`, a
//! stack run confirmed and applied; reject: a plan run `rejected`, a stack run discarded,
//! with the reason) and is recorded and audited in the same store transaction.
//!
//! The plain confirm of a gated stack run is refused, pointing here: an approval is
//! recorded and judged by the approval rule, a confirm would bypass both.

use axum::extract::State;
use axum::Json;
use bosun_api::{ApprovalDecide, ApprovalDecisionView, ErrorCode, PendingApprovalView};
use bosun_core::approval::{decide, Approver, Decision, GatedEnvironment, SubjectKind};
use bosun_core::authz::Access;
use bosun_core::Role;
use bosun_store::{ApprovalDecisionInput, ApprovalOutcome, ApprovalRecord, PendingApproval};
use serde_json::json;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::route::{Endpoint, Route};

/// Comments are kept short: they land in the run's reason and the audit record.
const MAX_COMMENT: usize = 2000;

/// `GET /orgs/{org}/approvals`
pub const LIST: Endpoint = Endpoint::get("/orgs/{org}/approvals", Access::Org(Role::Viewer));

/// `POST /orgs/{org}/approvals/{subject}/approve`
pub const APPROVE: Endpoint = Endpoint::post(
    "/orgs/{org}/approvals/{subject}/approve",
    Access::Org(Role::Operator),
);

/// `POST /orgs/{org}/approvals/{subject}/reject`
pub const REJECT: Endpoint = Endpoint::post(
    "/orgs/{org}/approvals/{subject}/reject",
    Access::Org(Role::Operator),
);

pub fn routes() -> Vec<Route> {
    let viewer = Access::Org(Role::Viewer);
    vec![
        LIST.route(list),
        Route::get("/orgs/{org}/approvals/decisions", viewer, decisions),
        APPROVE.route(approve),
        REJECT.route(reject),
    ]
}

fn split_target(kind: SubjectKind, target: String) -> (Option<String>, Option<String>) {
    match kind {
        SubjectKind::PlanRun => (Some(target), None),
        SubjectKind::StackRun => (None, Some(target)),
    }
}

fn pending_to_wire(p: PendingApproval) -> PendingApprovalView {
    let (plan, stack) = split_target(p.kind, p.target);
    PendingApprovalView {
        kind: p.kind.as_str().to_string(),
        subject: p.subject,
        plan,
        stack,
        environments: p.environments,
        requested_by: p.requested_by,
        since: p.since,
    }
}

fn decision_to_wire(r: ApprovalRecord, run_state: Option<String>) -> ApprovalDecisionView {
    let (plan, stack) = split_target(r.kind, r.target);
    ApprovalDecisionView {
        kind: r.kind.as_str().to_string(),
        subject: r.subject,
        plan,
        stack,
        environments: r.environments,
        requested_by: r.requested_by,
        decision: r.decision.as_str().to_string(),
        decided_by: r.decided_by,
        comment: r.comment,
        decided_at: r.decided_at,
        run_state,
    }
}

/// Runs waiting for an approval, oldest first.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/approvals", tag = "approvals",
    params(("org" = String, Path)),
    responses((status = 200, body = Vec<PendingApprovalView>)))]
pub async fn list(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
) -> Result<Json<Vec<PendingApprovalView>>, ApiError> {
    let pending = state.store.pending_approvals(&org).await?;
    Ok(Json(pending.into_iter().map(pending_to_wire).collect()))
}

#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DecisionsQuery {
    /// Page size, 1–1000 (default 100).
    pub limit: Option<u32>,
}

/// Recorded decisions, newest first.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/approvals/decisions", tag = "approvals",
    params(("org" = String, Path), DecisionsQuery),
    responses((status = 200, body = Vec<ApprovalDecisionView>)))]
pub async fn decisions(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
    ApiQuery(q): ApiQuery<DecisionsQuery>,
) -> Result<Json<Vec<ApprovalDecisionView>>, ApiError> {
    let limit = crate::paging::page_limit(q.limit)?;
    let records = state.store.approval_decisions(&org, limit).await?;
    Ok(Json(
        records
            .into_iter()
            .map(|r| decision_to_wire(r, None))
            .collect(),
    ))
}

/// Approve a waiting run: a plan run is queued for a runner, a stack run's plan is
/// applied. Needs operator or above, a grant on every protected environment of the run,
/// and (unless the server allows self-approval) someone other than the requester.
#[utoipa::path(post, path = "/api/v1/orgs/{org}/approvals/{subject}/approve", tag = "approvals",
    params(("org" = String, Path), ("subject" = String, Path)), request_body = ApprovalDecide,
    responses((status = 200, body = ApprovalDecisionView),
        (status = 403, body = bosun_api::ErrorBody, description = "the approval rule refused, saying why"),
        (status = 409, body = bosun_api::ErrorBody, description = "the run does not wait for an approval")))]
pub async fn approve(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, subject)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<ApprovalDecide>,
) -> Result<Json<ApprovalDecisionView>, ApiError> {
    decide_one(&state, &caller, &org, &subject, Decision::Approve, body).await
}

/// Reject a waiting run: a plan run ends `rejected`, a stack run is discarded; the
/// reason names the approver and the comment. The requester may always reject their own.
#[utoipa::path(post, path = "/api/v1/orgs/{org}/approvals/{subject}/reject", tag = "approvals",
    params(("org" = String, Path), ("subject" = String, Path)), request_body = ApprovalDecide,
    responses((status = 200, body = ApprovalDecisionView),
        (status = 403, body = bosun_api::ErrorBody), (status = 409, body = bosun_api::ErrorBody)))]
pub async fn reject(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, subject)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<ApprovalDecide>,
) -> Result<Json<ApprovalDecisionView>, ApiError> {
    decide_one(&state, &caller, &org, &subject, Decision::Reject, body).await
}

async fn decide_one(
    state: &AppState,
    caller: &Caller,
    org: &str,
    subject: &str,
    decision: Decision,
    body: ApprovalDecide,
) -> Result<Json<ApprovalDecisionView>, ApiError> {
    let comment = body
        .comment
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty());
    if comment.as_ref().is_some_and(|c| c.len() > MAX_COMMENT) {
        return Err(bosun_core::ValidationError::new(
            "comment",
            format!("at most {MAX_COMMENT} bytes"),
        )
        .into());
    }
    let pending = state.store.pending_approval(org, subject).await?;
    let mut environments = Vec::new();
    for id in &pending.environments {
        // A gated environment deleted since the run started protects nothing any more.
        if let Some(e) = state.store.get_environment(org, id).await? {
            environments.push(e);
        }
    }
    let gated: Vec<GatedEnvironment<'_>> = environments
        .iter()
        .map(|e| GatedEnvironment {
            id: &e.id,
            protected: e.protected,
            grants: &e.grants,
        })
        .collect();
    let actor = caller.0.actor();
    let approver = Approver {
        user: caller.0.user().unwrap_or_default(),
        actor: &actor,
        role: caller.0.role_in(org),
    };
    decide(
        approver,
        decision,
        &pending.requested_by,
        &gated,
        state.config.allow_self_approval,
    )?;
    let verb = match decision {
        Decision::Approve => "approval.approve",
        Decision::Reject => "approval.reject",
    };
    let target = match pending.kind {
        SubjectKind::PlanRun => format!("plan_run:{subject}"),
        SubjectKind::StackRun => format!("run:{subject}"),
    };
    let audit = caller.audit(
        Some(org),
        verb,
        target,
        json!({"kind": pending.kind.as_str(), "environments": pending.environments,
            "requested_by": pending.requested_by, "comment": comment}),
    );
    let input = ApprovalDecisionInput {
        org: org.to_string(),
        subject: subject.to_string(),
        decision,
        decided_by: actor.clone(),
        comment,
        audit,
    };
    let (record, outcome) = state.store.decide_approval(&input).await?;
    let run_state = match outcome {
        ApprovalOutcome::PlanRun(r) => r.state.to_string(),
        ApprovalOutcome::StackRun(r) => r.state.to_string(),
    };
    state.wake_dispatch();
    Ok(Json(decision_to_wire(record, Some(run_state))))
}

/// The confirm of a stack run whose stack's environment requires approval is refused:
/// it waits in the approvals inbox, where the approval rule applies and the decision is
/// recorded.
pub async fn refuse_gated_confirm(state: &AppState, org: &str, run: &str) -> Result<(), ApiError> {
    let Some(record) = state.store.get_run(run).await?.filter(|r| r.org == org) else {
        return Ok(());
    };
    let Some(stack) = state.store.get_stack(org, &record.stack).await? else {
        return Ok(());
    };
    let Some(env) = stack.spec.environment.as_ref() else {
        return Ok(());
    };
    let env = env.to_string();
    let gated = state
        .store
        .get_environment(org, &env)
        .await?
        .is_some_and(|e| e.requires_approval);
    if gated {
        return Err(ApiError::Conflict {
            code: ErrorCode::ApprovalRequired,
            message: format!(
                "stack {:?} is in environment {env:?}, which requires approval: this run waits in the approvals inbox — approve it there (`bosun approvals approve {run}`, POST /api/v1/orgs/{org}/approvals/{run}/approve)",
                record.stack
            ),
        });
    }
    Ok(())
}
