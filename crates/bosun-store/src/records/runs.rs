//! Stack runs: the stored run, a new run, its phases, and the events that move it.

use chrono::{DateTime, Utc};

use crate::Audit;

/// A run as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    pub id: String,
    pub org: String,
    pub stack: String,
    pub kind: bosun_core::run::RunKind,
    pub trigger: bosun_core::run::Trigger,
    pub state: bosun_core::run::RunState,
    pub phase: bosun_core::run::Phase,
    pub needs_lease: bool,
    pub leased: bool,
    pub started: bool,
    pub cancel_requested: bool,
    pub reason: Option<String>,
    pub triggered_by: String,
    pub commit: Option<String>,
    pub branch: String,
    pub retry_of: Option<String>,
    /// JSON of the plan summary, kept as the runner reported it.
    pub plan_summary: Option<serde_json::Value>,
    /// JSON lock info of whoever blocks a queued tracked run.
    pub blocked_by: Option<serde_json::Value>,
    /// Since when `blocked_by` holds the run back.
    pub blocked_since: Option<DateTime<Utc>>,
    /// Every lock the run waited behind, oldest first: a JSON list of
    /// `{"holder": lock info, "from": ms, "until": ms}` (at most [`MAX_LOCK_WAITS`]).
    pub lock_waits: Option<serde_json::Value>,
    pub late_write: bool,
    pub runner_id: Option<String>,
    pub fencing: i64,
    pub last_heartbeat: Option<DateTime<Utc>>,
    pub phase_started_at: Option<DateTime<Utc>>,
    /// The pull request a proposed run plans.
    pub pull_request: Option<i64>,
    /// The delivery (webhook or poll) that started it.
    pub delivery: Option<i64>,
    /// A dependency run: the upstream run that started it.
    pub upstream_run: Option<String>,
    /// A dependency run still waiting for its upstream run to end (never leased meanwhile).
    pub held: bool,
    /// JSON list of the upstream outputs the run was given: stack, state version, output,
    /// variable (fixed when its first phase was leased).
    pub consumed: Option<serde_json::Value>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// When retention summarised the ended run: its log, saved plan file, the detail of
    /// its plan summary (only the counts are kept) and its consumed outputs deleted.
    pub summarised_at: Option<DateTime<Utc>>,
    /// What the policies evaluated on its plan hold it for (`Pass`: nothing).
    pub policy_hold: bosun_core::policy::Verdict,
}

impl RunRecord {
    pub fn facts(&self, autodeploy: bool) -> bosun_core::run::RunFacts {
        bosun_core::run::RunFacts {
            kind: self.kind,
            autodeploy,
            trigger: self.trigger,
            phase: self.phase,
            leased: self.leased,
            started: self.started,
            policy_hold: self.policy_hold,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewRun {
    pub id: String,
    pub org: String,
    pub stack: String,
    pub kind: bosun_core::run::RunKind,
    pub trigger: bosun_core::run::Trigger,
    pub triggered_by: String,
    pub commit: Option<String>,
    pub branch: String,
    pub retry_of: Option<String>,
    /// The pull request a proposed run plans.
    pub pull_request: Option<i64>,
}

/// The most lock waits a run keeps (the latest ones).
pub const MAX_LOCK_WAITS: usize = 20;

/// A stored chunk of a run's log (stack run or plan run): when the server received it
/// and, for a stack run, the phase that wrote it. Both are `None` for chunks stored by a
/// server older than schema v19.
#[derive(Debug, Clone, PartialEq)]
pub struct LogRecord {
    pub seq: i64,
    pub text: String,
    pub at: Option<DateTime<Utc>>,
    pub phase: Option<bosun_core::run::Phase>,
}

/// One state a run passed through.
#[derive(Debug, Clone, PartialEq)]
pub struct RunPhaseRecord {
    pub state: bosun_core::run::RunState,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
}

/// What is shown beside a run, read with it in one store call by
/// [`crate::RunStore::get_run_in_context`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunContext {
    /// The states it passed through, oldest first.
    pub phases: Vec<RunPhaseRecord>,
    /// The drift check it is (a drift run) or reconciles (a scheduled tracked run) — the
    /// record keyed by this run's id, or by the drift run whose reconcile it is.
    pub drift_check: Option<crate::DriftCheckRecord>,
    /// The newest audit records about it (target `run:{id}`, in its org), newest first.
    pub audit: Vec<crate::AuditRecord>,
    /// The name of the runner that holds or held it, while that runner is registered.
    pub runner_name: Option<String>,
    /// The policies evaluated on it, oldest first.
    pub policy_evaluations: Vec<crate::PolicyEvaluationRecord>,
}

/// What to record with a run event besides the state change.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunUpdate {
    pub reason: Option<String>,
    pub commit: Option<String>,
    pub plan_summary: Option<serde_json::Value>,
    /// The policies evaluated on the plan, recorded with the event.
    pub policy_evaluations: Vec<crate::NewPolicyEvaluation>,
}

/// An event for a run, from a runner (with its fencing number) or from the server.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEventInput {
    pub event: bosun_core::run::Event,
    /// Runners' events must carry the run's current fencing number.
    pub fencing: Option<i64>,
    pub update: RunUpdate,
    /// Written with the change (operators' actions).
    pub audit: Option<Audit>,
}

/// The result of applying an event: the run after it, and whether a runner must stop.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEventResult {
    pub run: RunRecord,
    pub stop_runner: bool,
    /// The lock the run held, released because the run ended without its runner.
    pub released_lock: Option<bosun_core::state::Lock>,
}
