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

/// Which audit records to list; every field given must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    /// Exactly this actor (`user:alice`, `system`, …).
    pub actor: Option<String>,
    /// This action (`state.force_unlock`) or every action under it (`state`, `plan.schedule`).
    pub action: Option<String>,
    /// Exactly this target (`stack:prod`, `plan:app-config`, …).
    pub target: Option<String>,
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
    /// Recovered from an engine that could not write it, and why (`None` for every other
    /// version).
    pub recovery_reason: Option<String>,
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
    /// Why the engine could not write this state itself; set with
    /// `WriterLiveness::Recovery` only.
    pub recovery_reason: Option<String>,
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
    /// The pull request a proposed run plans.
    pub pull_request: Option<i64>,
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

/// What `/metrics` reads from the store, in one read snapshot. Counts cover everything
/// stored; timings only the runs created within `window` of the read, so a scrape's cost
/// does not grow with history.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StoreMetrics {
    /// (run kind, run state) → number of runs, every run stored.
    pub runs: std::collections::BTreeMap<(String, String), i64>,
    /// State versions written late by ended runs.
    pub late_writes: i64,
    /// How far back the timings reach: runs created at most this long before the read.
    pub window: std::time::Duration,
    /// For each run of the window leased at least once: milliseconds from its creation to
    /// its first lease (entering `preparing`).
    pub queue_waits_ms: Vec<i64>,
    /// State (`run_phases.state`: queued, preparing, planning, …) → milliseconds spent
    /// in it, one entry per stint that has ended, of the window's runs.
    pub phase_durations_ms: std::collections::BTreeMap<String, Vec<i64>>,
    /// Every registered runner, oldest first.
    pub runners: Vec<RunnerRecord>,
    /// Ids of the runners holding a lease on a run.
    pub busy_runners: std::collections::BTreeSet<String>,
    /// Every held state lock.
    pub locks: Vec<HeldLock>,
    /// Every trigger decision stored (webhook and poll deliveries), by verdict.
    pub trigger_decisions: DecisionCounts,
}

/// A held state lock, for its age.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldLock {
    pub org: String,
    pub stack: String,
    pub acquired_at: DateTime<Utc>,
}

/// Trigger decisions by verdict: a run started, the stack left alone, or a repeat of a
/// delivery already received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DecisionCounts {
    pub triggered: i64,
    pub ignored: i64,
    pub duplicate: i64,
}

// ---- VCS: GitHub App bindings, webhook deliveries and their decisions, polling ----

/// A change to the GitHub App's installations, as its webhooks report it.
#[derive(Debug, Clone, PartialEq)]
pub enum InstallationChange {
    /// `installation.created` (or a re-sync): the installation and all its repositories
    /// (`owner/repo`, any case), replacing what was known of it.
    Created {
        installation: i64,
        account: String,
        repositories: Vec<String>,
    },
    /// `installation.deleted`: every binding of it goes.
    Deleted { installation: i64 },
    /// `installation.suspend` / `unsuspend`: its repositories read as not connected while
    /// suspended.
    Suspended { installation: i64, suspended: bool },
    /// `installation_repositories.added`.
    RepositoriesAdded {
        installation: i64,
        account: String,
        repositories: Vec<String>,
    },
    /// `installation_repositories.removed`.
    RepositoriesRemoved {
        installation: i64,
        repositories: Vec<String>,
    },
}

/// Which installation of the GitHub App covers a repository.
#[derive(Debug, Clone, PartialEq)]
pub struct GithubBinding {
    /// `owner/repo` in lower case.
    pub repository: String,
    pub installation: i64,
    pub account: String,
    pub suspended: bool,
    pub updated_at: DateTime<Utc>,
}

/// Where a delivery came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliverySource {
    /// A GitHub webhook (`guid` is `X-GitHub-Delivery`).
    Github,
    /// The git poller saw a branch move (`guid` is generated).
    Poll,
}

impl DeliverySource {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliverySource::Github => "github",
            DeliverySource::Poll => "poll",
        }
    }
}

/// The verdict on one stack for one delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct TriggerDecision {
    pub org: String,
    pub stack: String,
    /// The run it started, when it started one (must be one of the delivery's `runs`).
    pub run_id: Option<String>,
    /// Why it triggered (the first matching changed file) or why not.
    pub reason: String,
}

/// Proposed runs to cancel in the same transaction: the older runs of a pull request
/// (superseded by a newer commit, or the pull request closed).
#[derive(Debug, Clone, PartialEq)]
pub struct CancelProposed {
    /// Stacks (org, stack) whose proposed runs of this pull request are canceled.
    pub stacks: Vec<(String, String)>,
    pub pull_request: i64,
    /// Recorded as the canceled runs' reason.
    pub reason: String,
}

/// A delivery with everything decided about it, recorded in one transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct NewDelivery {
    pub source: DeliverySource,
    pub guid: String,
    /// `push`, `pull_request`, `ping`, `installation`, …, or `poll`.
    pub event: String,
    pub action: Option<String>,
    /// The repository key (`github:owner/repo` lower case, or a git URL).
    pub repository: Option<String>,
    pub git_ref: Option<String>,
    pub before: Option<String>,
    pub after: Option<String>,
    pub pull_request: Option<i64>,
    /// One line for people: what the delivery was and what came of it.
    pub summary: String,
    pub decisions: Vec<TriggerDecision>,
    /// Runs to create (ids referenced by `decisions`).
    pub runs: Vec<NewRun>,
    pub cancel: Option<CancelProposed>,
}

/// What recording a delivery did.
#[derive(Debug, Clone, PartialEq)]
pub enum DeliveryOutcome {
    Recorded {
        id: i64,
        runs: Vec<RunRecord>,
        /// Ids of the proposed runs it canceled.
        canceled: Vec<String>,
    },
    /// The guid was seen before: nothing of the input was applied; a duplicate delivery
    /// row was recorded with a `duplicate delivery` decision for every stack the first
    /// one decided on.
    Duplicate {
        id: i64,
        first_id: i64,
        first_received_at: DateTime<Utc>,
    },
}

/// One stored delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryRecord {
    pub id: i64,
    pub source: DeliverySource,
    pub guid: String,
    pub event: String,
    pub action: Option<String>,
    pub repository: Option<String>,
    pub git_ref: Option<String>,
    pub before: Option<String>,
    pub after: Option<String>,
    pub pull_request: Option<i64>,
    pub summary: String,
    /// The first delivery with this guid, when this one is a duplicate.
    pub duplicate_of: Option<i64>,
    pub received_at: DateTime<Utc>,
}

/// One line of a stack's trigger history: a delivery and its verdict on the stack.
#[derive(Debug, Clone, PartialEq)]
pub struct TriggerRecord {
    pub delivery: DeliveryRecord,
    pub run_id: Option<String>,
    pub reason: String,
}

/// A short-lived credential handed to one run, revoked when the run ends.
#[derive(Debug, Clone, PartialEq)]
pub struct VcsTokenRecord {
    pub run_id: String,
    /// The token itself: revoking it at GitHub needs it.
    pub token: String,
    pub expires_at: DateTime<Utc>,
}

/// The last commit the poller saw on a git remote's branch.
#[derive(Debug, Clone, PartialEq)]
pub struct PollHead {
    pub repository: String,
    pub branch: String,
    pub commit: String,
    pub checked_at: DateTime<Utc>,
}

// ---- Secrets at rest, OIDC signing keys, ID-token request tokens ----

/// A value sealed with the server's secrets key (AEAD). The store never sees plaintext.
#[derive(Clone, PartialEq, Eq)]
pub struct Sealed {
    pub ciphertext: Vec<u8>,
    pub nonce: Vec<u8>,
    /// Which secrets key sealed it (a fingerprint, not the key).
    pub key_id: String,
}

impl std::fmt::Debug for Sealed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Sealed(key {}, {} bytes)",
            self.key_id,
            self.ciphertext.len()
        )
    }
}

/// A secret's metadata (never its value).
#[derive(Debug, Clone, PartialEq)]
pub struct SecretMeta {
    pub org: String,
    pub namespace: String,
    pub key: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// `user:alice`, …: who last set it.
    pub updated_by: String,
}

/// What a sealed row is, for re-sealing everything under a new secrets key.
#[derive(Debug, Clone, PartialEq)]
pub enum SealedOwner {
    Secret {
        org: String,
        namespace: String,
        key: String,
    },
    SigningKey {
        kid: String,
    },
    /// A notification target's HMAC secret.
    NotificationTarget {
        org: String,
        id: String,
    },
}

/// An OIDC signing key: its private half sealed, its public half as a JWK.
#[derive(Debug, Clone, PartialEq)]
pub struct SigningKeyRecord {
    pub kid: String,
    /// The RSA private key (PKCS#1 DER), sealed.
    pub private_key: Sealed,
    /// The public JWK (`kty`, `n`, `e`, `kid`, `alg`, `use`), as published.
    pub public_jwk: serde_json::Value,
    pub created_at: DateTime<Utc>,
    /// When a newer key replaced it; it stays published while tokens it signed live.
    pub retired_at: Option<DateTime<Utc>>,
}

/// A token that lets one executing phase of a run request OIDC identity tokens. It is
/// valid only while that run still executes that phase under that lease.
#[derive(Debug, Clone, PartialEq)]
pub struct IdRequestToken {
    /// SHA-256 of the secret, hex.
    pub secret_hash: String,
    pub run_id: String,
    pub phase: bosun_core::run::Phase,
    pub fencing: i64,
    pub expires_at: DateTime<Utc>,
}

// ---- Notifications: targets, the outbox of events, deliveries ----

/// What a notification is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NotificationEventKind {
    /// A run reached a terminal state.
    RunEnded,
    /// An ended run wrote state.
    LateWrite,
    /// A state lock has been held longer than the server's threshold.
    OldLock,
    /// A stack's last successful drift check is older than twice its interval.
    StaleDriftCheck,
    /// Sent on request to one target (`bosun notify target test`).
    Test,
}

impl NotificationEventKind {
    pub const ALL: [NotificationEventKind; 5] = [
        NotificationEventKind::RunEnded,
        NotificationEventKind::LateWrite,
        NotificationEventKind::OldLock,
        NotificationEventKind::StaleDriftCheck,
        NotificationEventKind::Test,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NotificationEventKind::RunEnded => "run_ended",
            NotificationEventKind::LateWrite => "late_write",
            NotificationEventKind::OldLock => "old_lock",
            NotificationEventKind::StaleDriftCheck => "stale_drift_check",
            NotificationEventKind::Test => "test",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// A notification event to write to the outbox. The store fans it out, in the same
/// transaction, to every enabled target of the org whose rules match it (or only to
/// `only_target`).
#[derive(Debug, Clone, PartialEq)]
pub struct NewNotificationEvent {
    pub kind: NotificationEventKind,
    /// For run events: what the rules look at.
    pub run_kind: Option<bosun_core::run::RunKind>,
    pub run_state: Option<bosun_core::run::RunState>,
    /// The event's details, sent as the webhook's `data` (org and stack included).
    pub payload: serde_json::Value,
    /// An event with a key already recorded for the org is not written again.
    pub dedup_key: Option<String>,
    /// Deliver to this target only, regardless of its rules (test events).
    pub only_target: Option<String>,
}

/// One rule of a target: an event matches when its kind is listed and, for run events,
/// its run kind and state are listed (an empty list matches any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotificationRule {
    pub events: Vec<String>,
    pub run_kinds: Vec<String>,
    pub run_states: Vec<String>,
}

impl NotificationRule {
    /// Whether this rule selects an event of `kind` (about a run of `run_kind` that
    /// ended `run_state`, for run events).
    pub fn matches(
        &self,
        kind: NotificationEventKind,
        run_kind: Option<&str>,
        run_state: Option<&str>,
    ) -> bool {
        let listed = |list: &[String], v: Option<&str>| {
            list.is_empty() || v.is_some_and(|v| list.iter().any(|x| x == v))
        };
        self.events.iter().any(|e| e == kind.as_str())
            && (kind != NotificationEventKind::RunEnded
                || (listed(&self.run_kinds, run_kind) && listed(&self.run_states, run_state)))
    }

    /// The rules of a target that gives none: every failed, force-failed or
    /// interrupted run of any kind (drift runs included), late writes, old locks and
    /// stale drift checks.
    pub fn defaults() -> Vec<NotificationRule> {
        vec![
            NotificationRule {
                events: vec!["run_ended".into()],
                run_kinds: vec![],
                run_states: vec!["failed".into(), "force_failed".into(), "interrupted".into()],
            },
            NotificationRule {
                events: vec![
                    "late_write".into(),
                    "old_lock".into(),
                    "stale_drift_check".into(),
                ],
                run_kinds: vec![],
                run_states: vec![],
            },
        ]
    }

    /// Whether `rules` (the defaults when empty) select the event.
    pub fn any_matches(
        rules: &[NotificationRule],
        kind: NotificationEventKind,
        run_kind: Option<&str>,
        run_state: Option<&str>,
    ) -> bool {
        if rules.is_empty() {
            return Self::defaults()
                .iter()
                .any(|r| r.matches(kind, run_kind, run_state));
        }
        rules.iter().any(|r| r.matches(kind, run_kind, run_state))
    }
}

/// A notification target to create, or the new definition of one.
#[derive(Debug, Clone, PartialEq)]
pub struct NewNotificationTarget {
    pub org: String,
    pub id: String,
    /// `webhook` or `slack`.
    pub kind: String,
    pub url: String,
    /// The webhook's HMAC secret, sealed. On update, `None` keeps the stored one.
    pub secret: Option<Sealed>,
    /// Empty: the defaults.
    pub rules: Vec<NotificationRule>,
    pub enabled: bool,
}

/// A stored notification target (its secret only as sealed bytes).
#[derive(Debug, Clone, PartialEq)]
pub struct NotificationTargetRecord {
    pub org: String,
    pub id: String,
    pub kind: String,
    pub url: String,
    pub secret: Option<Sealed>,
    pub rules: Vec<NotificationRule>,
    pub enabled: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
}

/// One delivery of an event to a target, as the delivery log shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct NotificationDeliveryRecord {
    pub id: i64,
    pub event_id: i64,
    pub org: String,
    pub target: String,
    pub event: NotificationEventKind,
    pub payload: serde_json::Value,
    pub event_created_at: DateTime<Utc>,
    pub attempts: i64,
    /// `None` once settled (delivered or given up).
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub last_status: Option<i64>,
    pub last_error: Option<String>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// A delivery due now, with its target, for the delivery duty.
#[derive(Debug, Clone, PartialEq)]
pub struct DueNotification {
    pub delivery: NotificationDeliveryRecord,
    pub target: NotificationTargetRecord,
}

/// The outcome of one delivery attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct NotificationAttempt {
    pub status: Option<i64>,
    pub error: Option<String>,
    pub delivered: bool,
    /// When to try again; `None` with `delivered: false` gives up.
    pub retry_at: Option<DateTime<Utc>>,
}

// ---- Drift detection ----

/// Where a stack's drift schedule stands (one row per armed stack).
#[derive(Debug, Clone, PartialEq)]
pub struct DriftScheduleState {
    /// The schedule and zone `next_at` was computed from.
    pub schedule: String,
    pub timezone: String,
    /// When this schedule took effect: the stale rule's starting point until a check
    /// succeeds.
    pub since: DateTime<Utc>,
    pub next_at: DateTime<Utc>,
    pub last_fire_at: Option<DateTime<Utc>>,
    /// The drift run the last fire started, if it started one.
    pub last_fire_run: Option<String>,
    /// Fire times missed (server down), or why the last fire started no run.
    pub last_fire_note: Option<String>,
}

/// The settled result of an ended drift run.
#[derive(Debug, Clone, PartialEq)]
pub struct DriftCheckRecord {
    pub run: String,
    pub org: String,
    pub stack: String,
    pub result: bosun_core::drift::DriftResult,
    /// When the run ended.
    pub checked_at: DateTime<Utc>,
    /// The tracked run a reconcile started.
    pub reconcile_run: Option<String>,
}

/// A stack with drift detection, its schedule's bookkeeping and its latest checks.
#[derive(Debug, Clone, PartialEq)]
pub struct DriftScheduleRecord {
    pub org: String,
    pub stack: String,
    pub drift: bosun_core::stack::DriftDetection,
    /// `None` until the scheduler first armed this stack.
    pub state: Option<DriftScheduleState>,
    /// The latest check that completed (`no_drift` or `drift_detected`).
    pub last_success: Option<DriftCheckRecord>,
    /// The latest settled check, whatever its result.
    pub last_check: Option<DriftCheckRecord>,
    /// An open (not ended) drift run of the stack.
    pub open_run: Option<String>,
}

/// One scheduler decision about a stack, applied in one transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct DriftFire {
    pub org: String,
    pub stack: String,
    pub schedule: String,
    pub timezone: String,
    /// The `next_at` the scheduler read (`None`: the stack was not armed). The fire
    /// applies only while it is still the stored one, so two servers never both fire.
    pub expected_next: Option<DateTime<Utc>>,
    pub next_at: DateTime<Utc>,
    /// When arming: the moment the schedule takes effect.
    pub since: Option<DateTime<Utc>>,
    /// The drift run to start now (none when only arming).
    pub run: Option<NewRun>,
    /// Kept with the fire (missed fire times).
    pub note: Option<String>,
    pub now: DateTime<Utc>,
}

/// What a [`DriftFire`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum DriftFired {
    /// The schedule was (re)armed; nothing started.
    Armed,
    Started(Box<RunRecord>),
    /// A drift run of the stack is still open: none started, the skip recorded.
    Skipped {
        open_run: String,
    },
    /// Another pass moved the schedule first: nothing written.
    Raced,
}

// ---- Plans: environments, hosts, plan files ----

/// An environment to create, or the new definition of one (grants are set apart).
#[derive(Debug, Clone, PartialEq)]
pub struct NewEnvironment {
    pub org: String,
    pub id: String,
    pub vars: std::collections::BTreeMap<String, serde_json::Value>,
    pub requires_approval: bool,
    pub protected: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct EnvironmentRecord {
    pub org: String,
    pub id: String,
    pub vars: std::collections::BTreeMap<String, serde_json::Value>,
    pub requires_approval: bool,
    pub protected: bool,
    /// User ids granted approval on a protected environment, sorted.
    pub grants: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A host to create, or the new definition of one.
#[derive(Debug, Clone, PartialEq)]
pub struct NewHost {
    pub org: String,
    pub name: String,
    pub address: String,
    pub port: u16,
    pub user: Option<String>,
    /// `ssh` or `local`.
    pub connection: String,
    pub labels: Vec<String>,
    pub vars: std::collections::BTreeMap<String, serde_json::Value>,
    pub environment: Option<String>,
    pub identity_file: Option<String>,
    pub host_key: Option<String>,
    pub known_hosts: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HostRecord {
    pub org: String,
    pub name: String,
    pub address: String,
    pub port: u16,
    pub user: Option<String>,
    /// `ssh` or `local`.
    pub connection: String,
    pub labels: Vec<String>,
    pub vars: std::collections::BTreeMap<String, serde_json::Value>,
    pub environment: Option<String>,
    /// Private key path on the runner's machine; `None`: the agent, then `~/.ssh/id_*`.
    pub identity_file: Option<String>,
    /// Pinned host key (`ssh-ed25519 AAAA…`), checked instead of known_hosts.
    pub host_key: Option<String>,
    /// known_hosts path on the runner's machine; `None`: `~/.ssh/known_hosts`.
    pub known_hosts: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A plan file to store under its name (created, or updated to a new version).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPlan {
    pub org: String,
    pub name: String,
    /// The plan YAML exactly as uploaded.
    pub source: String,
    /// The file's `schedule:`, checked: saved as the plan's schedule (marked as the
    /// file's). `None` removes a schedule the file had set; one set through the API stays.
    pub schedule: Option<PlanFileSchedule>,
}

/// A plan file's schedule, as saved with the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanFileSchedule {
    pub cron: String,
    pub timezone: String,
    pub inputs: std::collections::BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanRecord {
    pub org: String,
    pub name: String,
    /// The plan YAML exactly as uploaded.
    pub source: String,
    /// 1 on create, +1 per update.
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
}

/// An inventory to merge into an org: every environment and host is created, or
/// replaced when it exists; nothing else is touched.
#[derive(Debug, Clone, PartialEq)]
pub struct InventoryImport {
    pub org: String,
    pub environments: Vec<NewEnvironment>,
    pub hosts: Vec<NewHost>,
}

/// What an inventory import changed, by name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InventoryImported {
    pub environments_created: Vec<String>,
    pub environments_updated: Vec<String>,
    pub hosts_created: Vec<String>,
    pub hosts_updated: Vec<String>,
}

// ---- Plan runs ----

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

// ---- The approvals inbox and plan schedules ----

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
