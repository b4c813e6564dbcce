//! The protocol between a runner and the server for stack runs, and runners as an org sees them.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[cfg(doc)]
use crate::plan_runs::PlanRunLeaseAnswer;
use crate::runs::{LogChunk, PlanSummary};

/// `POST /api/v1/runner/register`, with a pool token.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunnerRegister {
    pub name: String,
    #[serde(default)]
    pub version: String,
    /// How the runner's engines reach the network. Absent from runners that predate it
    /// (and not sent when `None`, so a server that predates it still registers the
    /// runner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<RunnerEgress>,
}

/// How a runner's engines reach the network, as the runner registers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunnerEgress {
    /// Engines run in the egress sandbox: their own network namespace, reaching out only
    /// through the runner's egress proxy, which refuses what the policy does not allow.
    Restricted,
    /// No sandbox: the engines reach whatever the runner's host reaches. A self-hosted
    /// runner's default — its point is the operator's network.
    Unrestricted,
    /// No sandbox on a runner that should have one (a hosted runner): its operator
    /// started it with `--egress-unrestricted`.
    OptedOut,
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
    /// A plan phase whose plan the server's policies read: upload the plan's JSON
    /// (`terraform show -json`) after the plan file (`PUT /runner/runs/{run}/plan-json`).
    /// Absent (an older server): upload it.
    #[serde(default = "upload_by_default")]
    pub plan_json: bool,
}

fn upload_by_default() -> bool {
    true
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
    /// Connections the phase's engine tried that the egress policy refused (0: none, or
    /// no sandbox; then not sent).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub egress_refusals: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
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
    /// How its engines reach the network, as it registered; `None`: it did not say (a
    /// runner version that predates the egress sandbox).
    #[serde(default)]
    pub egress: Option<RunnerEgress>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn egress_reads_and_writes_its_snake_case_names() {
        for (mode, text) in [
            (RunnerEgress::Restricted, "\"restricted\""),
            (RunnerEgress::Unrestricted, "\"unrestricted\""),
            (RunnerEgress::OptedOut, "\"opted_out\""),
        ] {
            assert_eq!(serde_json::to_string(&mode).unwrap(), text);
            assert_eq!(serde_json::from_str::<RunnerEgress>(text).unwrap(), mode);
        }
        // A runner that predates it registers as before, and says nothing it need not.
        let r: RunnerRegister = serde_json::from_str(r#"{"name": "r1"}"#).unwrap();
        assert_eq!(r.egress, None);
        let sent = serde_json::to_value(&r).unwrap();
        assert!(sent.get("egress").is_none(), "{sent}");
        let r: RunnerRegister =
            serde_json::from_str(r#"{"name": "r1", "egress": "opted_out"}"#).unwrap();
        assert_eq!(r.egress, Some(RunnerEgress::OptedOut));
    }

    #[test]
    fn egress_refusals_are_sent_only_when_there_were_some() {
        let mut report = RunnerReport {
            fencing: 2,
            event: RunnerEvent::Applied,
            egress_refusals: 0,
        };
        let sent = serde_json::to_value(&report).unwrap();
        assert_eq!(sent, serde_json::json!({"fencing": 2, "event": "applied"}));
        report.egress_refusals = 3;
        let sent = serde_json::to_value(&report).unwrap();
        assert_eq!(sent["egress_refusals"], 3);
        let back: RunnerReport = serde_json::from_value(sent).unwrap();
        assert_eq!(
            (back.egress_refusals, back.event),
            (3, RunnerEvent::Applied)
        );
        let old: RunnerReport =
            serde_json::from_str(r#"{"fencing": 2, "event": "failed", "reason": "x"}"#).unwrap();
        assert_eq!(old.egress_refusals, 0);
    }
}
