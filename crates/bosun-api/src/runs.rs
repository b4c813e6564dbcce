//! Wire types of stack runs: their creation, phases, plan summaries and logs.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::drift::RunDrift;
use crate::state::TfLockInfo;

/// The body of `POST /orgs/{org}/stacks/{stack}/runs` (a manual run).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCreate {
    /// `tracked` (default) or `proposed`.
    #[serde(default)]
    pub kind: Option<String>,
    /// A commit to run; default: the tracked branch's head, resolved by the runner.
    #[serde(default)]
    pub commit: Option<String>,
}

/// Timings of one phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PhaseTiming {
    /// `queued`, `preparing`, `planning`, `unconfirmed`, `applying`.
    pub state: String,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    pub seconds: Option<f64>,
}

/// A change the plan proposes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ResourceChange {
    pub address: String,
    /// `create`, `update`, `delete`, `replace`, `read`, `no-op`.
    pub action: String,
}

/// What a plan proposes, from `show -json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PlanSummary {
    pub has_changes: bool,
    pub add: u32,
    pub change: u32,
    pub destroy: u32,
    pub resource_changes: Vec<ResourceChange>,
    /// Output name → action (`create`, `update`, `delete`).
    pub output_changes: BTreeMap<String, String>,
}

impl PlanSummary {
    /// `+1 ~2 -0`, with the outputs it changes (`, 1 output to change`) and `(no changes)`
    /// when it changes nothing: the one line the CLI and the console show for a plan.
    pub fn short_text(&self) -> String {
        let mut text = format!("+{} ~{} -{}", self.add, self.change, self.destroy);
        let outputs = self
            .output_changes
            .values()
            .filter(|action| action.as_str() != "no-op")
            .count();
        if outputs > 0 {
            let s = if outputs == 1 { "" } else { "s" };
            text.push_str(&format!(", {outputs} output{s} to change"));
        }
        if !self.has_changes {
            text.push_str(" (no changes)");
        }
        text
    }
}

/// A run as the API returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Run {
    pub id: String,
    pub org: String,
    pub stack: String,
    pub kind: String,
    pub trigger: String,
    pub state: String,
    /// Why the run is where it is: a failure, a force-fail, what it waits for.
    pub reason: Option<String>,
    pub triggered_by: String,
    pub commit: Option<String>,
    pub branch: String,
    /// A queued run blocked by someone else's state lock: the holder.
    pub blocked_by: Option<TfLockInfo>,
    /// Since when `blocked_by` holds the run back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_since: Option<DateTime<Utc>>,
    /// Every state lock the run waited behind before it could start a phase, oldest
    /// first (the latest 20): who held it, from when, until when. Kept after the wait.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lock_waits: Vec<LockWait>,
    /// An unconfirmed run whose stack's environment requires approval: it waits for an
    /// approver (approve or reject it through the approvals API), not for a confirm.
    #[serde(default)]
    pub approval: Option<crate::ApprovalWait>,
    pub plan: Option<PlanSummary>,
    /// What the policies evaluated on its plan hold it for: `override` (a soft-mandatory
    /// deny: an org admin overrides it with a reason) or `approval` (it waits in the
    /// approvals inbox).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_hold: Option<String>,
    /// The policies evaluated on it, oldest first. Filled on one run
    /// (`GET …/runs/{run}`), empty in lists.
    #[serde(default)]
    pub policies: Vec<crate::PolicyEvaluationView>,
    /// The state versions this run wrote, flagged when late.
    pub late_write: bool,
    /// The runner holding or last holding the run (its id).
    pub runner: Option<String>,
    /// That runner's name, as it registered. Filled on one run (`GET …/runs/{run}`),
    /// absent in lists.
    #[serde(default)]
    pub runner_name: Option<String>,
    /// Who acted on this run by hand — confirmed, discarded, cancelled, approved or
    /// rejected it — oldest first, with the comment they gave. Filled on one run
    /// (`GET …/runs/{run}`), empty in lists. (A retry is a new run: `retry_of`.)
    #[serde(default)]
    pub decisions: Vec<RunDecision>,
    pub retry_of: Option<String>,
    /// The pull request a proposed run plans.
    pub pull_request: Option<i64>,
    /// A dependency run: the upstream run that started it.
    #[serde(default)]
    pub upstream_run: Option<String>,
    /// The upstream outputs this run was given, and from which state versions.
    #[serde(default)]
    pub consumed: Vec<ConsumedOutput>,
    /// A drift run's outcome.
    #[serde(default)]
    pub drift: Option<RunDrift>,
    /// A tracked run a drift run's reconcile started: that drift run.
    #[serde(default)]
    pub reconciles: Option<String>,
    pub phases: Vec<PhaseTiming>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Set when retention summarised the run (it ended longer ago than the server's run
    /// retention): its log, its saved plan file, the resource and output changes of its
    /// plan (the counts stay) and its upstream outputs were deleted; this record is kept.
    /// Its log answers `410 gone` saying so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summarised_at: Option<DateTime<Utc>>,
}

/// One upstream output a run was given as `TF_VAR_<variable>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ConsumedOutput {
    /// The upstream stack.
    pub stack: String,
    /// The upstream state version the value came from.
    pub version: i64,
    pub output: String,
    pub variable: String,
    pub sensitive: bool,
}

/// A state lock a run waited behind (`Run.lock_waits`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LockWait {
    /// The lock's holder, as the engines' lock info has it.
    pub holder: TfLockInfo,
    /// When the run found the lock held.
    pub from: DateTime<Utc>,
    /// When the wait ended: the lock was released, another took it, or the run ended.
    pub until: DateTime<Utc>,
}

/// A chunk of a run's log. Chunks are numbered from 0 without gaps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LogChunk {
    pub seq: i64,
    pub text: String,
    /// When the server received the chunk (a runner sends its lines within 200 ms).
    /// Set by the server: a runner's value is ignored. Absent on chunks stored before
    /// Bosun recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<DateTime<Utc>>,
    /// The stack-run phase that wrote the chunk: `plan` or `apply` (absent for plan runs).
    /// Set by the server, like `at`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
}

impl LogChunk {
    /// A chunk as a runner sends it: the server stamps the rest.
    pub fn new(seq: i64, text: impl Into<String>) -> Self {
        LogChunk {
            seq,
            text: text.into(),
            at: None,
            phase: None,
        }
    }
}

/// One person's action on a run (`Run.decisions`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunDecision {
    /// `confirm`, `discard`, `cancel`, `approve` or `reject`.
    pub action: String,
    /// Who: `user:alice`, or a token's actor.
    pub by: String,
    pub at: DateTime<Utc>,
    /// The approver's comment, when they gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}
