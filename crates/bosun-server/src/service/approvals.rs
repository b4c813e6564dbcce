//! The approvals inbox: the runs waiting for an approver and the decisions — who may
//! decide is `bosun_core::approval::decide`; a decision moves its run and is recorded and
//! audited in the same store transaction. The work behind the API's handlers and the
//! console's inbox, and the refusal of a plain confirm of a gated stack run.

use bosun_api::{
    ApprovalDecide, ApprovalDecisionView, ApprovalWait, ErrorCode, Page, PendingApprovalView,
};
use bosun_core::approval::{self, Approver, Decision, GatedEnvironment, SubjectKind};
use bosun_store::{
    ApprovalDecisionInput, ApprovalOutcome, ApprovalRecord, PendingApproval, StoreError,
};
use serde_json::json;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::paging::{key_cursor, next_cursor, page, require_known_cursor, PageQuery};

/// Comments are kept short: they land in the run's reason and the audit record.
const MAX_COMMENT: usize = 2000;

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
        preview: p.preview,
        plan_summary: p.plan_summary.and_then(super::runs::plan_summary),
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

/// A page of the runs waiting for an approval in `org`, oldest first (by creation, then
/// id), after `q.cursor` (the previous page's `next_cursor`, `<created ms>:<run>`).
pub async fn pending_page(
    state: &AppState,
    org: &str,
    q: &PageQuery,
) -> Result<Page<PendingApprovalView>, ApiError> {
    let limit = q.limit()?;
    let after = key_cursor(q.cursor.as_deref(), "the approvals inbox")?;
    let records = state
        .store
        .pending_approvals(org, after.as_ref(), limit)
        .await?;
    let next_cursor = next_cursor(&records, limit, |p| p.cursor().encode());
    Ok(Page {
        items: records.into_iter().map(pending_to_wire).collect(),
        next_cursor,
    })
}

/// A page of the recorded decisions of `org`, newest first; the cursor is the last
/// decision's run.
pub async fn decisions(
    state: &AppState,
    org: &str,
    q: &PageQuery,
) -> Result<Page<ApprovalDecisionView>, ApiError> {
    let limit = q.limit()?;
    let records = match state
        .store
        .approval_decisions(org, q.cursor.as_deref(), limit)
        .await
    {
        Err(StoreError::NotFound(_)) => {
            let cursor = q.cursor.as_deref().unwrap_or_default();
            require_known_cursor(cursor, false, &format!("org {org:?}'s decisions"))?;
            Vec::new()
        }
        other => other?,
    };
    Ok(page(
        records
            .into_iter()
            .map(|r| decision_to_wire(r, None))
            .collect(),
        limit,
        |d| d.subject.clone(),
    ))
}

/// What the run `subject` of `org` waits for, when it waits for an approval: its gated
/// environments, who asked, since when, and who may decide. `None` for a run that does
/// not wait for one.
pub async fn wait_of(
    state: &AppState,
    org: &str,
    subject: &str,
) -> Result<Option<ApprovalWait>, ApiError> {
    let pending = match state.store.pending_approval(org, subject).await {
        Ok(p) => p,
        Err(bosun_store::StoreError::NotAwaitingApproval { .. })
        | Err(bosun_store::StoreError::NotFound(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mut gated = Vec::new();
    for id in &pending.environments {
        gated.extend(state.store.get_environment(org, id).await?);
    }
    Ok(Some(ApprovalWait {
        approvers: approvers(
            state,
            org,
            &pending.environments,
            &pending.requested_by,
            &gated,
        ),
        environments: pending.environments,
        requested_by: pending.requested_by,
        since: pending.since,
    }))
}

/// Who may decide a run of `org` waiting on the `waits_on` environments, asked by
/// `requested_by`, in words — from `environments`, which hold at least those the run
/// waits on (the org's, read once for a whole inbox page).
pub fn approvers(
    state: &AppState,
    org: &str,
    waits_on: &[String],
    requested_by: &str,
    environments: &[bosun_store::EnvironmentRecord],
) -> String {
    let mut granted: Option<Vec<String>> = None;
    let mut protected = Vec::new();
    for e in environments
        .iter()
        .filter(|e| e.protected && waits_on.contains(&e.id))
    {
        protected.push(e.id.clone());
        granted = Some(match granted {
            None => e.grants.clone(),
            Some(g) => g.into_iter().filter(|u| e.grants.contains(u)).collect(),
        });
    }
    let not_self = if state.config.allow_self_approval {
        String::new()
    } else {
        format!(", other than {requested_by}")
    };
    match granted {
        None => format!("an operator or admin of org {org}{not_self}"),
        Some(users) if users.is_empty() => format!(
            "nobody yet: no user is granted approval on {} (an org admin grants it with \
             `bosun env grant`)",
            protected.join(" and ")
        ),
        Some(users) => format!(
            "an operator or admin granted approval on {}{not_self}: {}",
            protected.join(" and "),
            users.join(", ")
        ),
    }
}

/// `caller` approves or rejects the run `subject` waits with.
pub async fn decide(
    state: &AppState,
    caller: &Caller,
    org: &str,
    subject: &str,
    decision: Decision,
    body: ApprovalDecide,
) -> Result<ApprovalDecisionView, ApiError> {
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
    approval::decide(
        approver,
        decision,
        &pending.requested_by,
        &gated,
        state.config.allow_self_approval,
    )?;
    if decision == Decision::Approve {
        let approver = json!({"actor": actor, "user": caller.0.user(),
            "role": caller.0.role_in(org).map(|r| r.to_string())});
        crate::service::policies::check_approval(state, org, &pending, approver).await?;
    }
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
    Ok(decision_to_wire(record, Some(run_state)))
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
