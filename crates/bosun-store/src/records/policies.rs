//! Policies as code: an org's policies and their evaluations on runs.

use std::collections::BTreeMap;

use bosun_core::policy::{Attachment, Mode, OnError, Outcome, Point};
use chrono::{DateTime, Utc};

/// Where a policy's Rego files come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicySource {
    /// Uploaded through the API: file name → text.
    Files(BTreeMap<String, String>),
    /// The `.rego` files of a folder of a git repository, at the branch's head when the
    /// policy is evaluated (the evaluation records the commit).
    Git {
        repository: String,
        branch: String,
        path: String,
    },
}

/// A policy as saved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySpec {
    pub name: String,
    pub mode: Mode,
    pub on_error: OnError,
    pub points: Vec<Point>,
    pub attachment: Attachment,
    pub source: PolicySource,
}

/// A policy as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyRecord {
    pub org: String,
    pub spec: PolicySpec,
    /// Uploaded files: `sha256:` and the start of their digest; a git source: its branch
    /// (the commit is known when the policy is evaluated).
    pub version: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
}

/// One policy's evaluation on a run, to record with the run's event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPolicyEvaluation {
    pub point: Point,
    pub policy: String,
    /// The digest or commit evaluated (empty when the files could not be read).
    pub version: String,
    pub mode: Mode,
    pub outcome: Outcome,
    pub deny: Vec<String>,
    pub warn: Vec<String>,
    pub require_approval: Vec<String>,
    /// The trigger point's `skip` messages.
    pub skip: Vec<String>,
    /// The trigger point's `trigger` messages.
    pub trigger: Vec<String>,
    pub errors: Vec<String>,
    pub duration_ms: u64,
}

/// An org admin's override of a soft-mandatory deny.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyOverride {
    pub by: String,
    pub reason: String,
    pub at: DateTime<Utc>,
}

/// A recorded evaluation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyEvaluationRecord {
    pub id: i64,
    pub subject: String,
    pub evaluation: NewPolicyEvaluation,
    pub evaluated_at: DateTime<Utc>,
    pub overridden: Option<PolicyOverride>,
}
