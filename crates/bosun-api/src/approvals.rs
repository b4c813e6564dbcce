//! Wire types of the approvals inbox and its decisions.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A run waiting in the approvals inbox (`GET /orgs/{org}/approvals`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PendingApprovalView {
    /// `plan_run` (a paused plan run) or `stack_run` (a tracked stack run waiting in
    /// `unconfirmed` because its stack's environment requires approval).
    pub kind: String,
    /// The run id: what `approve` and `reject` take.
    pub subject: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<String>,
    /// The environments whose approval the run waits for.
    pub environments: Vec<String>,
    pub requested_by: String,
    /// Waiting since.
    pub since: DateTime<Utc>,
    /// A plan run's preview: the dry run of it created with it, which shows what the run
    /// would change (`GET …/plan-runs/{preview}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
    /// A stack run's plan: what approving it would apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_summary: Option<crate::runs::PlanSummary>,
}

/// What a run waiting for an approval waits for, shown on the run itself (`Run.approval`,
/// `PlanRunView.approval`): the same wait the approvals inbox lists.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ApprovalWait {
    /// The gated environments whose approval the run waits for.
    pub environments: Vec<String>,
    pub requested_by: String,
    /// Waiting since.
    pub since: DateTime<Utc>,
    /// Who may approve or reject it, in words (the approval rule's own).
    pub approvers: String,
}

/// The body of `POST /orgs/{org}/approvals/{subject}/approve|reject` (`{}` for none).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalDecide {
    /// Kept with the decision (and, for a rejection, in the run's reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

/// A recorded decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ApprovalDecisionView {
    pub kind: String,
    pub subject: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<String>,
    pub environments: Vec<String>,
    pub requested_by: String,
    /// `approved` or `rejected`.
    pub decision: String,
    pub decided_by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    pub decided_at: DateTime<Utc>,
    /// The run's state after the decision (answers to approve/reject only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_state: Option<String>,
}
