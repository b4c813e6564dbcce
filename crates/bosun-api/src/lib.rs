//! Bosun's wire format: the JSON request and response bodies of the HTTP API.
//!
//! Only these types are serialized on the wire. Requests deny unknown fields so a typo is
//! an error, not a silently ignored setting. Domain types live in `bosun-core`.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;

mod approvals;
mod plan_resources;
pub use approvals::*;
pub use plan_resources::*;

/// Every error response: `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable, machine-readable code (`validation_failed`, `not_found`, …).
    pub code: String,
    /// What went wrong, for people.
    pub message: String,
    /// The offending request field, when one is at fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// A page of a list. Pass `next_cursor` back as `cursor` for the next page.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Page<T> {
    pub items: Vec<T>,
    #[serde(default)]
    pub next_cursor: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Health {
    pub status: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Org {
    pub id: String,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OrgCreate {
    /// Immutable slug.
    pub id: String,
    /// Display name (defaults to the id).
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct User {
    pub id: String,
    pub server_admin: bool,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UserCreate {
    pub id: String,
    #[serde(default)]
    pub server_admin: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Member {
    pub user: String,
    pub role: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemberPut {
    /// `viewer`, `operator` or `admin`.
    pub role: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Whoami {
    pub user: String,
    pub server_admin: bool,
    pub token_id: String,
    pub orgs: Vec<OrgRole>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct OrgRole {
    pub org: String,
    pub role: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Token {
    pub id: String,
    /// `personal`, `pool` or `run`.
    pub kind: String,
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub org: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A token as created: the only response that ever carries its secret.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TokenCreated {
    pub token: Token,
    /// The bearer secret. Shown once; only its hash is stored.
    pub secret: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PersonalTokenCreate {
    #[serde(default)]
    pub description: String,
    /// Lifetime in seconds; none means no expiry.
    #[serde(default)]
    pub expires_in_seconds: Option<u64>,
    /// Create the token for another user (server admins only).
    #[serde(default)]
    pub user: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PoolTokenCreate {
    /// The runner pool the token joins (`hosted` or a pool slug).
    pub pool: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub expires_in_seconds: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditEvent {
    pub seq: i64,
    pub at: DateTime<Utc>,
    pub org: Option<String>,
    /// `user:alice`, `pool:acme/edge`, `run:<id>` or `system`.
    pub actor: String,
    pub token_id: Option<String>,
    /// `stack.create`, `token.revoke`, …
    pub action: String,
    pub target: String,
    pub detail: serde_json::Value,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Dependency {
    /// Upstream stack id.
    pub stack: String,
    /// Upstream output name → downstream input variable (passed as `TF_VAR_<name>`).
    #[serde(default)]
    pub outputs: BTreeMap<String, String>,
    /// Trigger downstream after every successful upstream apply, not only on change.
    #[serde(default)]
    pub trigger_always: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DriftDetection {
    /// Cron expression.
    pub schedule: String,
    /// Start a tracked run when drift is found.
    #[serde(default)]
    pub reconcile: bool,
    /// IANA time zone the schedule is read in [default: `UTC`]; answers always carry it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
}

/// AWS credentials through the run's OIDC identity: the role each phase assumes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AwsIntegration {
    /// `arn:aws:iam::<account>:role/<name>`, assumed by plan phases.
    pub plan_role_arn: String,
    /// Assumed by apply phases [default: the plan role].
    #[serde(default)]
    pub apply_role_arn: Option<String>,
    /// The identity token's audience [default: `sts.amazonaws.com`].
    #[serde(default)]
    pub audience: Option<String>,
}

/// A stack as the API returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Stack {
    pub id: String,
    pub name: String,
    pub repository: String,
    pub branch: String,
    pub path: String,
    pub watch_paths: Vec<String>,
    pub engine: String,
    pub engine_binary: Option<String>,
    pub engine_version: Option<String>,
    pub tier: String,
    pub autodeploy: bool,
    pub environment: Option<String>,
    pub variables: BTreeMap<String, String>,
    pub depends_on: Vec<Dependency>,
    pub drift_detection: Option<DriftDetection>,
    pub runner_pool: String,
    pub aws: Option<AwsIntegration>,
    /// Whether Bosun can reach the stack's repository.
    pub connection: StackConnection,
    /// How drift checking goes, for a stack with drift detection.
    #[serde(default)]
    pub drift_status: Option<StackDriftStatus>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// How a stack's repository is reached, and whether it is connected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StackConnection {
    /// `github` (through the GitHub App) or `git` (a plain remote, polled).
    pub kind: String,
    /// `github`: an installation of the App covers the repository (and is not suspended).
    /// `git`: always true (reachability shows in runs and polls).
    pub connected: bool,
    /// The GitHub App installation, when connected through it.
    pub installation: Option<i64>,
    /// One line for people: what is connected, or what to do about it.
    pub detail: String,
}

/// One line of a stack's trigger history: a delivery and its verdict on this stack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TriggerEntry {
    /// The delivery id (`X-GitHub-Delivery`, or a poll's id).
    pub delivery: String,
    /// `github` or `poll`.
    pub source: String,
    pub event: String,
    pub action: Option<String>,
    pub git_ref: Option<String>,
    pub before: Option<String>,
    pub after: Option<String>,
    pub pull_request: Option<i64>,
    /// What the delivery was and what came of it.
    pub summary: String,
    /// A repeat of an earlier delivery id: nothing was done.
    pub duplicate: bool,
    pub received_at: DateTime<Utc>,
    /// Whether it started a run on this stack.
    pub triggered: bool,
    pub run: Option<String>,
    /// Why it triggered, or why not.
    pub reason: String,
}

/// The body of `POST /stacks`. Only `id` and `repository` are required.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StackCreate {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    pub repository: String,
    #[serde(default)]
    pub branch: Option<String>,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub watch_paths: Vec<String>,
    #[serde(default)]
    pub engine: Option<String>,
    #[serde(default)]
    pub engine_binary: Option<String>,
    #[serde(default)]
    pub engine_version: Option<String>,
    #[serde(default)]
    pub tier: Option<String>,
    #[serde(default)]
    pub autodeploy: bool,
    #[serde(default)]
    pub environment: Option<String>,
    #[serde(default)]
    pub variables: BTreeMap<String, String>,
    #[serde(default)]
    pub depends_on: Vec<Dependency>,
    #[serde(default)]
    pub drift_detection: Option<DriftDetection>,
    #[serde(default)]
    pub aws: Option<AwsIntegration>,
    #[serde(default)]
    pub runner_pool: Option<String>,
}

/// The body of `PATCH /stacks/{id}`: fields present are changed; `null` clears an
/// optional field. `id` may be sent only with the stack's own id: ids are immutable.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StackPatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch_paths: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub engine_binary: Option<Option<String>>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub engine_version: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autodeploy: Option<bool>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub environment: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variables: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<Vec<Dependency>>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<DriftDetection>)]
    pub drift_detection: Option<Option<DriftDetection>>,
    /// `null` removes the AWS integration.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<AwsIntegration>)]
    pub aws: Option<Option<AwsIntegration>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_pool: Option<String>,
}

/// Tells "absent" (outer `None`, via `default`) from "null" (`Some(None)`).
fn nullable<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_tells_null_from_absent() {
        let p: StackPatch = serde_json::from_str(r#"{"environment": null}"#).unwrap();
        assert_eq!(p.environment, Some(None));
        assert_eq!(p.engine_binary, None);
        let p: StackPatch = serde_json::from_str(r#"{"environment": "prod"}"#).unwrap();
        assert_eq!(p.environment, Some(Some("prod".into())));
        assert!(serde_json::from_str::<StackPatch>(r#"{"nmae": "x"}"#).is_err());
    }
}

/// Terraform/OpenTofu's lock-info JSON, as the `http` backend sends it with `LOCK` and
/// expects back in a 423.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TfLockInfo {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Operation", default)]
    pub operation: String,
    #[serde(rename = "Info", default)]
    pub info: String,
    #[serde(rename = "Who", default)]
    pub who: String,
    #[serde(rename = "Version", default)]
    pub version: String,
    #[serde(rename = "Created", default)]
    pub created: String,
    #[serde(rename = "Path", default)]
    pub path: String,
}

/// Who wrote a version or holds a lock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StateWriter {
    /// `user` or `run`.
    pub kind: String,
    pub id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StateOutput {
    /// `null` when the output is sensitive: values of sensitive outputs never leave the
    /// state document itself.
    pub value: serde_json::Value,
    pub sensitive: bool,
}

/// One stored state version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StateVersion {
    pub version: i64,
    pub serial: u64,
    pub lineage: String,
    /// SHA-256 of the document, hex.
    pub checksum: String,
    pub size: u64,
    pub writer: StateWriter,
    pub token_id: Option<String>,
    pub created_at: DateTime<Utc>,
    /// Written by a Run that had already ended (force-failed or interrupted).
    pub late_write: bool,
    /// Stored with an admin's override of the serial/lineage checks.
    pub forced: bool,
    pub current: bool,
    pub outputs: BTreeMap<String, StateOutput>,
    /// Set on a version a runner recovered after its engine could not write it (the
    /// engine's `errored.tfstate`, delivered once the server answered again): why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered: Option<String>,
}

/// A version with its document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StateVersionDetail {
    #[serde(flatten)]
    pub meta: StateVersion,
    pub state: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LockHolder {
    pub kind: String,
    pub id: String,
    /// `person`, `live_run` or `dead_run` (a run whose tokens are all revoked or expired).
    pub status: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StateLockView {
    pub id: String,
    pub operation: String,
    pub who: String,
    pub info: String,
    pub version: String,
    pub created: String,
    pub path: String,
    pub holder: LockHolder,
    pub acquired_at: DateTime<Utc>,
    pub age_seconds: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StateLockStatus {
    pub locked: bool,
    pub lock: Option<StateLockView>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForceUnlock {
    /// The exact ID of the lock to release.
    pub lock_id: String,
}

// ---- Runs -----------------------------------------------------------------------------

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
    pub plan: Option<PlanSummary>,
    /// The state versions this run wrote, flagged when late.
    pub late_write: bool,
    pub runner: Option<String>,
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

/// A chunk of a run's log. Chunks are numbered from 0 without gaps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LogChunk {
    pub seq: i64,
    pub text: String,
}

// ---- Runners (the protocol between `bosun runner` and the server) ------------------------

/// `POST /api/v1/runner/register`, with a pool token.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunnerRegister {
    pub name: String,
    #[serde(default)]
    pub version: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunnerRegistered {
    pub runner_id: String,
    /// Send a heartbeat at least this often while holding a lease.
    pub heartbeat_seconds: u64,
}

/// `POST /api/v1/runner/lease`: waits up to `wait_seconds` for work.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LeaseRequest {
    pub runner_id: String,
    #[serde(default)]
    pub wait_seconds: u64,
    /// The runner executes plan runs too: the answer may then be a
    /// [`PlanRunLeaseAnswer`] instead of a [`Lease`] (older runners never get one).
    #[serde(default)]
    pub plan_runs: bool,
}

/// A leased phase of a run: everything the runner needs to execute it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Lease {
    pub run_id: String,
    /// Fencing number: every later call about this lease carries it; a stale one is refused.
    pub fencing: i64,
    pub org: String,
    pub stack: String,
    pub kind: String,
    /// `plan` or `apply`.
    pub phase: String,
    pub repository: String,
    /// What to `git clone`, when it differs from `repository` (a `github:` repository
    /// resolved to its HTTPS address).
    #[serde(default)]
    pub clone_url: Option<String>,
    /// A short-lived token for the clone (a GitHub App installation token for this one
    /// repository), sent as HTTP basic auth `x-access-token:<token>`. Never logged; it
    /// is revoked when the run ends.
    #[serde(default)]
    pub clone_token: Option<String>,
    pub branch: String,
    /// The commit to check out; `None`: the branch head (report it with `started`).
    pub commit: Option<String>,
    pub path: String,
    /// `tofu` or `terraform`.
    pub engine: String,
    pub engine_binary: Option<String>,
    /// Environment for the engine: stack variables (`TF_VAR_*` and others).
    pub env: BTreeMap<String, String>,
    /// The http backend address of this stack's state.
    pub state_url: String,
    /// The run token (the backend password), valid while the run executes.
    pub run_token: String,
    /// Phase timeout, seconds.
    pub timeout_seconds: u64,
    pub heartbeat_seconds: u64,
    /// Run identity: the engine gets `BOSUN_ID_TOKEN_REQUEST_URL` and
    /// `BOSUN_ID_TOKEN_REQUEST_TOKEN`; `GET URL?audience=AUD` with the bearer token answers
    /// `{"value": "<jwt>", "expires_at": <unix seconds>}`. The token dies with this phase.
    #[serde(default)]
    pub id_token_request_url: String,
    #[serde(default)]
    pub id_token_request_token: String,
    /// Integrations the runner resolves, in this order, after the checkout and before the
    /// engine starts; the first that fails fails the phase, naming it.
    #[serde(default)]
    pub integrations: Vec<RunnerIntegration>,
    /// Values the runner masks (`***`) in every log line and report: resolved secrets.
    #[serde(default)]
    pub mask: Vec<String>,
}

/// A step of a run's environment the runner resolves itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RunnerIntegration {
    /// AWS through web identity: an OIDC token for `audience` is written to a file in the
    /// workspace (and rewritten before it expires while the phase runs);
    /// `AWS_WEB_IDENTITY_TOKEN_FILE`, `AWS_ROLE_ARN` and `AWS_ROLE_SESSION_NAME` are set
    /// for the engine.
    AwsWebIdentity {
        /// How failures name it, e.g. `aws (apply role)`.
        name: String,
        role_arn: String,
        audience: String,
        session_name: String,
    },
}

/// `POST /api/v1/runner/runs/{run}/heartbeat`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    pub fencing: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct HeartbeatReply {
    /// Stop the engine (process group) and report `canceled`.
    pub cancel: bool,
}

/// `POST /api/v1/runner/runs/{run}/logs`: chunks numbered from 0; resending a chunk is
/// harmless (the server keeps the first copy of each `seq`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LogAppend {
    pub fencing: i64,
    pub chunks: Vec<LogChunk>,
}

/// `POST /api/v1/runner/runs/{run}/report`: what happened to the leased phase.
// No `deny_unknown_fields`: serde cannot combine it with the flattened event.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunnerReport {
    pub fencing: i64,
    #[serde(flatten)]
    pub event: RunnerEvent,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum RunnerEvent {
    /// The engine is about to start; `commit` is the checked-out commit.
    Started {
        commit: String,
    },
    /// The plan finished; the plan file was uploaded first.
    Planned {
        summary: PlanSummary,
    },
    Applied,
    Failed {
        reason: String,
    },
    /// Stopped after a cancel.
    Canceled,
    /// The phase ran past its timeout and the engine was killed.
    TimedOut,
}

/// A runner as the org sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunnerView {
    pub id: String,
    pub pool: String,
    pub name: String,
    pub version: String,
    /// `online`, `busy`, `dark` (missed heartbeats) or `drained`.
    pub status: String,
    pub last_seen: DateTime<Utc>,
}

/// A secret as the API shows it: never its value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SecretInfo {
    pub namespace: String,
    pub key: String,
    /// How stacks and plans refer to it: `secret://<namespace>/<key>`.
    pub reference: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
}

/// The body of `PUT /orgs/{org}/secrets/{namespace}/{key}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretPut {
    pub value: String,
}

/// An identity token, as the ID-token request URL answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct IdToken {
    /// The signed JWT.
    pub value: String,
    /// Unix seconds.
    pub expires_at: i64,
}

/// The OIDC issuer's signing keys after a rotation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SigningKeys {
    /// The key new tokens are signed with.
    pub active: String,
    /// Every key still published in the JWKS (the active one and retired ones whose
    /// tokens may still be valid).
    pub published: Vec<String>,
}

/// A stack's outputs as of one state version, compared with the version before it
/// (`GET /orgs/{org}/stacks/{stack}/outputs`). Values of sensitive outputs never appear.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StackOutputs {
    /// The state version the outputs come from; `null` when the stack has no state.
    pub version: Option<i64>,
    /// That version's serial.
    pub serial: Option<u64>,
    /// The version compared with: the one numbered just before (`null` when there is
    /// none, and every output is `added`).
    pub previous_version: Option<i64>,
    pub outputs: BTreeMap<String, StackOutput>,
    /// Every output of either version, ordered by name.
    pub changes: Vec<StackOutputChange>,
    /// Whether anything changed at all: an output added or removed, a value, or a
    /// sensitive flag.
    pub changed: bool,
}

/// One output of a state version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StackOutput {
    /// The type the state records for it (`"string"`, `["list", "string"]`, …); `null`
    /// when the state does not say.
    #[serde(rename = "type")]
    pub output_type: Option<serde_json::Value>,
    pub sensitive: bool,
    /// `null` when the output is sensitive.
    pub value: serde_json::Value,
}

/// What happened to one output since the previous version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutputChangeKind {
    Added,
    Removed,
    /// The value differs (the sensitive flag may have flipped too).
    Changed,
    /// Same value; only the sensitive flag flipped.
    SensitivityChanged,
    Unchanged,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutputSensitivityChange {
    BecameSensitive,
    NoLongerSensitive,
}

/// One output compared with the previous version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StackOutputChange {
    pub name: String,
    pub change: OutputChangeKind,
    /// Set when the sensitive flag flipped.
    pub sensitivity: Option<OutputSensitivityChange>,
    /// Sensitive in either version: then no value of it is shown, here or before.
    pub sensitive: bool,
    /// The previous value, for a `changed` or `removed` output that is not sensitive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<serde_json::Value>,
    /// The current value, for a `changed` or `added` output that is not sensitive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<serde_json::Value>,
}

// ---- Notifications ----

/// A rule of a notification target: an event is sent when its kind is in `events` and,
/// for `run_ended`, the run's kind and final state are listed (an empty list: any).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NotificationRule {
    /// `run_ended`, `late_write`, `old_lock`, `stale_drift_check`.
    pub events: Vec<String>,
    /// `tracked`, `proposed`, `drift`.
    #[serde(default)]
    pub run_kinds: Vec<String>,
    /// Terminal run states: `failed`, `force_failed`, `interrupted`, `finished`, …
    #[serde(default)]
    pub run_states: Vec<String>,
}

/// The body of `POST /orgs/{org}/notifications/targets`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NotificationTargetCreate {
    pub id: String,
    /// `webhook` (JSON, HMAC-signed) or `slack` (incoming webhook).
    pub kind: String,
    /// `http://` or `https://`.
    pub url: String,
    /// The webhook's HMAC-SHA256 key (required for `webhook`, refused for `slack`);
    /// write-only.
    #[serde(default)]
    pub secret: Option<String>,
    /// None or empty: the defaults (failed, force-failed and interrupted runs of every
    /// kind, late writes, old locks, stale drift checks).
    #[serde(default)]
    pub rules: Option<Vec<NotificationRule>>,
    #[serde(default)]
    pub enabled: Option<bool>,
}

/// The body of `PATCH /orgs/{org}/notifications/targets/{id}`: only the given fields
/// change (`rules: []` returns to the defaults).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NotificationTargetPatch {
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub secret: Option<String>,
    #[serde(default)]
    pub rules: Option<Vec<NotificationRule>>,
    #[serde(default)]
    pub enabled: Option<bool>,
}

/// A notification target as the API shows it (never its secret).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct NotificationTargetInfo {
    pub id: String,
    pub kind: String,
    pub url: String,
    /// Whether an HMAC secret is set.
    pub has_secret: bool,
    /// The rules in force (the defaults when `default_rules`).
    pub rules: Vec<NotificationRule>,
    pub default_rules: bool,
    pub enabled: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
}

/// One entry of a target's delivery log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct NotificationDeliveryInfo {
    /// Also sent as `X-Bosun-Delivery`.
    pub id: i64,
    pub event_id: i64,
    /// `run_ended`, `late_write`, `old_lock`, `stale_drift_check` or `test`.
    pub event: String,
    /// The event's details (org, stack, run, state, …).
    pub data: serde_json::Value,
    pub attempts: i64,
    /// `pending`, `delivered` or `failed` (gave up after the last attempt).
    pub status: String,
    pub last_status_code: Option<i64>,
    pub last_error: Option<String>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

// ---- Drift detection ----

/// A drift run's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunDrift {
    /// `pending` (not ended), `no_drift`, `drift_detected` or `failed` (ended any other
    /// way than a finished plan: before the plan too — integrations, clone, engine).
    pub result: String,
    /// The tracked run `reconcile` started for detected drift.
    pub reconcile_run: Option<String>,
}

/// One completed or failed drift check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DriftCheck {
    pub run: String,
    /// `no_drift`, `drift_detected` or `failed`.
    pub result: String,
    /// When the drift run ended.
    pub checked_at: DateTime<Utc>,
    pub reconcile_run: Option<String>,
}

/// A stack's drift checking: the next check and how the last ones went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StackDriftStatus {
    /// The next scheduled check (absent until the scheduler has armed the schedule).
    pub next_check_at: Option<DateTime<Utc>>,
    /// The latest check that completed (`no_drift` or `drift_detected`).
    pub last_success: Option<DriftCheck>,
    /// The latest check whatever its result.
    pub last_check: Option<DriftCheck>,
    /// A drift run of the stack that has not ended.
    pub open_run: Option<String>,
    /// Seconds since the last successful check (or, with none, since checking began).
    pub age_seconds: Option<i64>,
    /// The last successful check is older than twice the schedule's interval.
    pub stale: bool,
    /// What the last scheduled check noted: fire times missed while the server was down,
    /// or why it started no run.
    pub last_fire_note: Option<String>,
}

// ---- Plan runs ----

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
    /// An inventory YAML of the target hosts and their environments.
    pub inventory: String,
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
