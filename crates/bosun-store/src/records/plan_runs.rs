//! Plan runs: the stored run (and a paused run's preview), per-host results, and the events
//! that move it.

use chrono::{DateTime, Utc};

use crate::Audit;

/// A plan run to create (the concurrency guard is checked in the same transaction).
#[derive(Debug, Clone, PartialEq)]
pub struct NewPlanRun {
    /// `prun-…`.
    pub id: String,
    pub org: String,
    pub plan: String,
    pub plan_version: i64,
    /// The plan YAML the run executes (a snapshot: later uploads do not change it).
    pub source: String,
    pub inputs: std::collections::BTreeMap<String, serde_json::Value>,
    pub dry_run: bool,
    pub requested_by: String,
    pub trigger: bosun_core::plan_run::PlanTrigger,
    /// The target hosts, in inventory order.
    pub hosts: Vec<String>,
    /// The target hosts' environments that require approval: non-empty starts it paused.
    pub gated_environments: Vec<String>,
    /// The plan says `concurrent_runs: true`: the guard lets it overlap.
    pub concurrent: bool,
    /// The id of its preview, for a real run that starts paused (it has gated
    /// environments): a dry run of the same plan version, hosts and inputs, created in
    /// the same transaction (past the guard, which the run itself passed) and queued at
    /// once, with the run's creation time. Ignored for any other run; `None`: no preview.
    pub preview: Option<String>,
    /// Policies of the `plan_run` point attach to a real run: it starts paused, with its
    /// preview, held until they are evaluated on the preview's report.
    pub policy_check: bool,
    /// The hosts its start took from stacks' outputs: `[{environment, stack, output,
    /// version, hosts}]`; `None`: none.
    pub sources: Option<serde_json::Value>,
    /// A run a stack's change started (trigger `stack`): `{stack, run, outputs}`.
    pub upstream: Option<serde_json::Value>,
    /// The plan trigger this run settles, in its creating transaction (a run whose
    /// trigger was settled already is refused `AlreadyExists`).
    pub settles_trigger: Option<i64>,
    /// Created ended: `failed` with this reason before any step (a stack-started run
    /// whose hosts could not be resolved). Not guarded, never leased.
    pub failed: Option<String>,
}

/// A plan run as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanRunRecord {
    pub id: String,
    pub org: String,
    pub plan: String,
    pub plan_version: i64,
    pub source: String,
    pub inputs: std::collections::BTreeMap<String, serde_json::Value>,
    pub dry_run: bool,
    pub state: bosun_core::plan_run::PlanRunState,
    pub reason: Option<String>,
    pub requested_by: String,
    pub trigger: bosun_core::plan_run::PlanTrigger,
    pub hosts: Vec<String>,
    pub gated_environments: Vec<String>,
    pub concurrent: bool,
    /// A paused run's preview: the dry run created with it.
    pub preview: Option<String>,
    /// A preview's run: the paused run it was created with.
    pub preview_of: Option<String>,
    pub needs_lease: bool,
    pub leased: bool,
    pub started: bool,
    pub cancel_requested: bool,
    pub runner_id: Option<String>,
    pub fencing: i64,
    pub last_heartbeat: Option<DateTime<Utc>>,
    /// What the runner reported at the end: the dry-run report (predictions, diffs,
    /// unresolved references) or the run's summary.
    pub report: Option<serde_json::Value>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    /// When retention summarised the ended run: its log deleted and what each step
    /// printed (stdout, stderr, diff) blanked; statuses and report kept.
    pub summarised_at: Option<DateTime<Utc>>,
    /// What the policies hold it for while it is paused.
    pub policy_hold: Option<bosun_core::policy::PlanRunHold>,
    /// The hosts its start took from stacks' outputs (see [`NewPlanRun::sources`]).
    pub sources: Option<serde_json::Value>,
    /// See [`NewPlanRun::upstream`].
    pub upstream: Option<serde_json::Value>,
}

impl PlanRunRecord {
    pub fn facts(&self) -> bosun_core::plan_run::PlanRunFacts {
        bosun_core::plan_run::PlanRunFacts {
            leased: self.leased,
            started: self.started,
        }
    }
}

/// One step's result on one host of a plan run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanHostResultRecord {
    /// 1-based.
    pub step: i64,
    pub step_name: String,
    pub module: String,
    pub host: String,
    /// `ok`, `changed`, `unknown`, `failed`, `timed_out` or `skipped`.
    pub status: String,
    /// A failure the step's `continue_on_error` tolerated.
    pub ignored: bool,
    pub changed: Option<bool>,
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub duration_ms: i64,
    pub message: String,
    pub diff: Option<String>,
}

/// Something that happens to a plan run, with what it records.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanRunEventInput {
    pub event: bosun_core::plan_run::PlanRunEvent,
    /// A runner's call carries its lease's fencing number; people's calls do not.
    pub fencing: Option<i64>,
    pub reason: Option<String>,
    pub report: Option<serde_json::Value>,
    pub audit: Option<Audit>,
}

/// A stack's tracked run changed outputs a plan watches: a run of the plan to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanTriggerRecord {
    pub id: i64,
    pub org: String,
    pub plan: String,
    pub stack: String,
    /// The stack's run.
    pub run: String,
    /// The watched outputs it changed.
    pub outputs: Vec<String>,
    pub created_at: DateTime<Utc>,
}
