//! The approvals inbox (pending runs, decisions) and plan schedules.

use chrono::{DateTime, Utc};

use crate::{Audit, NewPlanRun, PlanRunRecord, RunRecord};

/// A run waiting in the approvals inbox.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingApproval {
    pub kind: bosun_core::approval::SubjectKind,
    /// The plan run or stack run id.
    pub subject: String,
    pub org: String,
    /// The plan (plan run) or stack (stack run).
    pub target: String,
    /// The gated environments the approval covers.
    pub environments: Vec<String>,
    pub requested_by: String,
    /// Waiting since (a plan run's creation, a stack run's entry into `unconfirmed`).
    pub since: DateTime<Utc>,
    /// The run's creation, in milliseconds since the epoch: the inbox's order.
    pub created_at: i64,
    /// A plan run's preview: the dry run of it created with it.
    pub preview: Option<String>,
    /// A stack run's plan summary, as the runner reported it: what approving would apply.
    pub plan_summary: Option<serde_json::Value>,
}

/// A decision on a pending run, applied with the run's transition in one transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalDecisionInput {
    pub org: String,
    pub subject: String,
    pub decision: bosun_core::approval::Decision,
    pub decided_by: String,
    pub comment: Option<String>,
    pub audit: Audit,
}

/// A recorded decision.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRecord {
    pub kind: bosun_core::approval::SubjectKind,
    pub subject: String,
    pub org: String,
    pub target: String,
    pub environments: Vec<String>,
    pub requested_by: String,
    pub decision: bosun_core::approval::Decision,
    pub decided_by: String,
    pub comment: Option<String>,
    pub decided_at: DateTime<Utc>,
}

/// What a decision did to its run.
#[derive(Debug, Clone, PartialEq)]
pub enum ApprovalOutcome {
    PlanRun(Box<PlanRunRecord>),
    StackRun(Box<RunRecord>),
}

/// A plan's schedule as set through the API.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanScheduleInput {
    pub org: String,
    pub plan: String,
    pub cron: String,
    pub timezone: String,
    pub inputs: std::collections::BTreeMap<String, serde_json::Value>,
    pub updated_by: String,
}

/// A plan's schedule with the scheduler's bookkeeping.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanScheduleRecord {
    pub org: String,
    pub plan: String,
    pub cron: String,
    pub timezone: String,
    pub inputs: std::collections::BTreeMap<String, serde_json::Value>,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
    /// Set by the plan's file (`schedule:`), not through the API.
    pub from_file: bool,
    /// `None` until the scheduler armed it.
    pub armed: Option<PlanScheduleArmed>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PlanScheduleArmed {
    pub cron: String,
    pub timezone: String,
    pub since: DateTime<Utc>,
    pub next_at: DateTime<Utc>,
    pub last_fire_at: Option<DateTime<Utc>>,
    pub last_fire_run: Option<String>,
    pub last_fire_note: Option<String>,
}

/// One scheduler decision about a plan schedule, applied only while the stored
/// `next_at` is still `expected_next` (two servers never fire one schedule twice).
#[derive(Debug, Clone, PartialEq)]
pub struct PlanScheduleFire {
    pub org: String,
    pub plan: String,
    pub cron: String,
    pub timezone: String,
    pub expected_next: Option<DateTime<Utc>>,
    pub next_at: DateTime<Utc>,
    /// When arming: the moment the schedule takes effect.
    pub since: Option<DateTime<Utc>>,
    /// The run to create now (none when arming, or when it could not be resolved — then
    /// `note` says why).
    pub run: Option<NewPlanRun>,
    pub note: Option<String>,
    pub now: DateTime<Utc>,
}

/// What a [`PlanScheduleFire`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum PlanScheduleFired {
    Armed,
    Started(Box<PlanRunRecord>),
    /// No run: the reason (the concurrency guard's refusal, or `note`) is recorded.
    Skipped {
        reason: String,
    },
    /// Another pass moved the schedule first: nothing written.
    Raced,
}

impl PendingApproval {
    /// The inbox's position after this run, in (creation, id) order.
    pub fn cursor(&self) -> crate::KeyCursor {
        crate::KeyCursor {
            key: self.created_at,
            id: self.subject.clone(),
        }
    }
}
