//! Wire types of the approvals inbox and plan schedules.

use std::collections::BTreeMap;

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

/// The body of `PUT /orgs/{org}/plans/{plan}/schedule`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanScheduleSet {
    /// Five-field cron (or `@daily`-style macros).
    pub cron: String,
    /// IANA time zone the cron is read in (default `UTC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// Inputs of every scheduled run (each one of the plan's inputs).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(value_type = Object)]
    pub inputs: BTreeMap<String, serde_json::Value>,
}

/// A plan's schedule: its settings, next fire time and the last fire's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PlanScheduleView {
    pub plan: String,
    pub cron: String,
    pub timezone: String,
    #[schema(value_type = Object)]
    pub inputs: BTreeMap<String, serde_json::Value>,
    pub updated_by: String,
    pub updated_at: DateTime<Utc>,
    /// Set by the plan's file (`schedule:`): it changes when the file does, and the API
    /// refuses to change or clear it.
    #[serde(default)]
    pub from_file: bool,
    /// When the next scheduled run is created (none until the scheduler armed it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_run_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fire_at: Option<DateTime<Utc>>,
    /// The run the last fire created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<String>,
    /// Why the last fire created no run, or how many fire times it caught up on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_note: Option<String>,
}
