//! Wire types of plan runs, and the protocol a runner executes them by.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::runners::Lease;

/// `POST /api/v1/orgs/{org}/plans/{plan}/runs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanRunCreate {
    /// Predict instead of acting.
    #[serde(default)]
    pub dry_run: bool,
    /// Run overrides; each must be one of the plan's `inputs`.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub inputs: BTreeMap<String, serde_json::Value>,
}

/// One step's result on one host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PlanHostResult {
    /// 1-based.
    pub step: i64,
    pub step_name: String,
    pub module: String,
    pub host: String,
    /// `ok`, `changed`, `unknown`, `failed`, `timed_out` or `skipped`.
    pub status: String,
    /// A failure the step's `continue_on_error` tolerated.
    #[serde(default)]
    pub ignored: bool,
    pub changed: Option<bool>,
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub stdout: String,
    #[serde(default)]
    pub stderr: String,
    pub duration_ms: i64,
    pub message: String,
    /// Dry run of a file step that would change something: the unified diff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

impl PlanHostResult {
    /// `(host, status, ignored)`: what a preview's summary is made of.
    pub fn outcome(&self) -> (&str, &str, bool) {
        (&self.host, &self.status, self.ignored)
    }
}

/// A plan run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PlanRunView {
    pub id: String,
    pub org: String,
    pub plan: String,
    /// The version of the plan file the run executes.
    pub plan_version: i64,
    /// `queued`, `paused`, `running`, `succeeded`, `failed`, `rejected`, `aborted` or
    /// `interrupted`.
    pub state: String,
    pub reason: Option<String>,
    pub dry_run: bool,
    #[schema(value_type = Object)]
    pub inputs: BTreeMap<String, serde_json::Value>,
    /// `manual` or `schedule`.
    pub trigger: String,
    pub requested_by: String,
    /// The target hosts, in inventory order.
    pub hosts: Vec<String>,
    /// Target environments that require approval (the run started paused).
    pub gated_environments: Vec<String>,
    /// A run that started paused: its preview, the dry run of the same plan version,
    /// hosts and inputs created with it and queued at once, so whoever decides sees what
    /// the run would change. Deciding (or aborting) the run while its preview is still
    /// queued or running aborts the preview.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
    /// A preview: the paused run it was created with (and predicts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview_of: Option<String>,
    /// What the policies hold a paused run for: `check` (their verdict on its dry run is
    /// not in yet), `override` (a soft-mandatory deny: an org admin overrides it) or
    /// `approval` (it waits in the approvals inbox).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_hold: Option<String>,
    /// The policies evaluated on its dry run (`plan_run` point), oldest first. Filled on
    /// one run, empty in lists.
    #[serde(default)]
    pub policies: Vec<crate::PolicyEvaluationView>,
    /// The hosts its start took from stacks' outputs: `[{environment, stack, output,
    /// version, hosts}]` (the state version read, the host names it gave).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub sources: Option<serde_json::Value>,
    /// A run a stack's change started (trigger `stack`): `{stack, run, outputs}` — the
    /// stack's tracked run and the watched outputs it changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub upstream: Option<serde_json::Value>,
    pub runner_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    /// Per-host results by step (empty in lists).
    #[serde(default)]
    pub results: Vec<PlanHostResult>,
    /// The runner's final report: for a dry run, predictions and every unresolved
    /// reference (`unresolved`); warnings; where the run halted.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub report: Option<serde_json::Value>,
    /// Set when retention summarised the run (it ended longer ago than the server's run
    /// retention): its log and what each step printed on each host (stdout, stderr, diff)
    /// were deleted; this record, each result's status and message, and the report are
    /// kept. Its log answers `410 gone` saying so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summarised_at: Option<DateTime<Utc>>,
}

/// A leased plan run: everything a runner needs to execute it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PlanRunLease {
    /// `prun-…`; its calls go to `/api/v1/runner/plan-runs/{id}/…`.
    pub run_id: String,
    /// Fencing number: every later call about this lease carries it.
    pub fencing: i64,
    pub org: String,
    pub plan: String,
    /// The plan YAML (parse it with `bosun_plans::model::parse_plan`).
    pub source: String,
    /// An inventory YAML of the target hosts and their environments, and of the bastions
    /// they are reached through (`proxy_jump`), which are no targets.
    pub inventory: String,
    /// The run's target hosts, by name: the hosts it was created for, exactly. The
    /// runner runs the plan on these and no other host of `inventory` (whatever the
    /// plan's `targets` would match there: a bastion's labels may match them too). Empty
    /// from an older server: the plan's `targets` pick from `inventory`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    #[schema(value_type = Object)]
    pub inputs: BTreeMap<String, serde_json::Value>,
    pub dry_run: bool,
    /// At most this many hosts at once.
    pub forks: u32,
    pub heartbeat_seconds: u64,
    /// Values the runner masks (`***`) in every log line and result.
    #[serde(default)]
    pub mask: Vec<String>,
    /// Resolved `secret://namespace/key` references (key: the reference as written) the
    /// engine substitutes in a real run; empty for dry runs. Never logged, never stored.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(value_type = Object)]
    pub secrets: BTreeMap<String, String>,
}

/// The lease answer that carries a plan run: `{"plan_run": {…}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PlanRunLeaseAnswer {
    pub plan_run: PlanRunLease,
}

/// What a lease answer holds, for runners that asked for plan runs too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AnyLease {
    PlanRun(Box<PlanRunLeaseAnswer>),
    Stack(Box<Lease>),
}

/// `POST /api/v1/runner/plan-runs/{run}/results`: per-host results of finished steps
/// (resending one replaces it).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanResultsAppend {
    pub fencing: i64,
    pub results: Vec<PlanHostResult>,
}

/// `POST /api/v1/runner/plan-runs/{run}/report`.
// No `deny_unknown_fields`: serde cannot combine it with the flattened event.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PlanRunnerReport {
    pub fencing: i64,
    #[serde(flatten)]
    pub event: PlanRunnerEvent,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum PlanRunnerEvent {
    /// The runner parsed the plan and inventory and begins the first step.
    Started,
    /// Every step ran (`ok`: none failed, or each failure was tolerated). `reason` says
    /// why it failed; `report` is the run's report (dry run: predictions, diffs,
    /// unresolved references).
    Finished {
        ok: bool,
        #[serde(default)]
        reason: Option<String>,
        #[serde(default)]
        #[schema(value_type = Option<Object>)]
        report: Option<serde_json::Value>,
    },
    /// Stopped after an abort.
    Aborted,
}
