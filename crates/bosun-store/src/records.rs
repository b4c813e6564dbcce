//! The values the store takes and returns.

use bosun_core::stack::StackSpec;
use bosun_core::token::TokenKind;
use chrono::{DateTime, Utc};

/// One audit-log entry, written with the change it describes.
#[derive(Debug, Clone, PartialEq)]
pub struct Audit {
    pub org: Option<String>,
    /// `user:alice`, `pool:acme/edge`, `run:<id>` or `system`.
    pub actor: String,
    pub token_id: Option<String>,
    /// Dotted verb: `stack.create`, `token.revoke`, …
    pub action: String,
    pub target: String,
    pub detail: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AuditRecord {
    pub seq: i64,
    pub at: DateTime<Utc>,
    pub entry: Audit,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOrg {
    pub id: String,
    pub name: String,
    /// The user who becomes the new org's first admin.
    pub admin: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrgRecord {
    pub id: String,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewUser {
    pub id: String,
    pub server_admin: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRecord {
    pub id: String,
    pub server_admin: bool,
    pub created_at: DateTime<Utc>,
}

/// A token to store. Only the hash of its secret is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewToken {
    pub id: String,
    pub kind: TokenKind,
    pub secret_hash: String,
    pub description: String,
    pub user: Option<String>,
    pub org: Option<String>,
    pub pool: Option<String>,
    pub run: Option<String>,
    pub stack: Option<String>,
    /// Run tokens: upstream stacks whose state the run may read.
    pub read_stacks: Vec<String>,
    pub expires_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRecord {
    pub id: String,
    pub kind: TokenKind,
    pub description: String,
    pub user: Option<String>,
    pub org: Option<String>,
    pub pool: Option<String>,
    pub run: Option<String>,
    pub stack: Option<String>,
    pub read_stacks: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

impl TokenRecord {
    /// Whether the token may authenticate at `now`.
    pub fn is_active(&self, now: DateTime<Utc>) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|e| e > now)
    }
}

/// A token with what it grants: for personal tokens, the user and their org roles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenGrant {
    pub token: TokenRecord,
    pub user: Option<UserRecord>,
    pub roles: std::collections::BTreeMap<String, bosun_core::Role>,
}

/// Which tokens to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenFilter {
    User(String),
    Org {
        org: String,
        kind: TokenKind,
    },
    /// The server's own hosted-pool tokens (no org).
    HostedPool,
}

/// The first-start seed (`BOSUN_BOOTSTRAP_TOKEN` or a generated admin token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bootstrap {
    pub org: String,
    pub user: String,
    pub token: NewToken,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StackRecord {
    pub org: String,
    pub spec: StackSpec,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// One stored state version, without its body.
#[derive(Debug, Clone, PartialEq)]
pub struct StateVersionMeta {
    pub org: String,
    pub stack: String,
    pub version: i64,
    pub serial: u64,
    pub lineage: String,
    pub checksum: String,
    pub size: u64,
    pub writer: bosun_core::state::Writer,
    pub token_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub late_write: bool,
    pub forced: bool,
    pub current: bool,
    pub outputs: std::collections::BTreeMap<String, bosun_core::state::Output>,
}

/// A stack's current state version and lock.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StateHead {
    pub current: Option<StateVersionMeta>,
    pub lock: Option<bosun_core::state::Lock>,
}

/// A state write: the body, what was parsed from it, and who is writing.
#[derive(Debug, Clone, PartialEq)]
pub struct NewStateVersion {
    pub body: Vec<u8>,
    pub doc: bosun_core::state::StateDoc,
    pub request: bosun_core::state::WriteRequest,
    pub token_id: Option<String>,
}

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
    pub late_write: bool,
    pub runner_id: Option<String>,
    pub fencing: i64,
    pub last_heartbeat: Option<DateTime<Utc>>,
    pub phase_started_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
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
}

/// One state a run passed through.
#[derive(Debug, Clone, PartialEq)]
pub struct RunPhaseRecord {
    pub state: bosun_core::run::RunState,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
}

/// What to record with a run event besides the state change.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunUpdate {
    pub reason: Option<String>,
    pub commit: Option<String>,
    pub plan_summary: Option<serde_json::Value>,
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

#[derive(Debug, Clone, PartialEq)]
pub struct RunnerRecord {
    pub id: String,
    pub org: Option<String>,
    pub pool: String,
    pub name: String,
    pub version: String,
    pub drained: bool,
    pub last_seen: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
}

/// What `/metrics` reads from the store.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StoreMetrics {
    /// Run state → number of runs in it.
    pub runs_by_state: std::collections::BTreeMap<String, i64>,
    /// State versions written late by ended runs.
    pub late_writes: i64,
}
