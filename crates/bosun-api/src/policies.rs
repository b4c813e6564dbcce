//! Wire types of policies as code: an org's policies, their evaluations on runs, and
//! the override of a soft-mandatory deny.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The body of `PUT /orgs/{org}/policies/{name}`: create or replace a policy. Give
/// either `files` (uploaded Rego, file name → text) or `repository` (with `branch` and
/// `path`: the folder whose `.rego` files are read at the branch's head on every
/// evaluation).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyPut {
    /// `advisory` (warn only), `soft_mandatory` (a deny holds the run until an org admin
    /// overrides it), `hard_mandatory` (a deny fails the run). Default `soft_mandatory`.
    #[serde(default)]
    pub mode: Option<String>,
    /// What an evaluation error counts as: `deny` (default) or `warn`.
    #[serde(default)]
    pub on_error: Option<String>,
    /// Where it is evaluated: `plan` (stack runs' plans; the default), `plan_run` (host
    /// plans' dry runs), `approval` (approvals), `trigger` (pushes, pull requests and
    /// polled commits).
    #[serde(default)]
    pub points: Option<Vec<String>>,
    /// Stacks with one of these labels. With `environments` empty too: the whole org.
    #[serde(default)]
    pub labels: Vec<String>,
    /// Stacks in one of these environments.
    #[serde(default)]
    pub environments: Vec<String>,
    #[serde(default)]
    pub files: Option<BTreeMap<String, String>>,
    /// A git URL (`https://`, `ssh://`, `git://`), or `github:owner/repo` read through the
    /// GitHub App.
    #[serde(default)]
    pub repository: Option<String>,
    #[serde(default)]
    pub branch: Option<String>,
    /// The folder in the repository; empty: its root.
    #[serde(default)]
    pub path: Option<String>,
}

/// A policy as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PolicyView {
    pub name: String,
    pub mode: String,
    pub on_error: String,
    pub points: Vec<String>,
    pub labels: Vec<String>,
    pub environments: Vec<String>,
    /// What it is attached to, in words.
    pub attached_to: String,
    /// `upload` or `git`.
    pub source: String,
    /// Uploaded files: their names (their texts in `GET …/policies/{name}`).
    pub files: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub texts: BTreeMap<String, String>,
    pub repository: Option<String>,
    pub branch: Option<String>,
    pub path: Option<String>,
    /// Uploaded files: `sha256:…` of their content; git: the branch (each evaluation
    /// records the commit it read).
    pub version: String,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
}

/// One policy's evaluation on a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PolicyEvaluationView {
    /// The decision point: `plan`, `plan_run`, `approval` or `trigger`.
    pub point: String,
    pub policy: String,
    /// The digest or commit evaluated.
    pub version: String,
    pub mode: String,
    /// After the mode: `pass`, `warn`, `require_approval` or `deny`; at the trigger point
    /// `skip` or `trigger`.
    pub outcome: String,
    pub deny: Vec<String>,
    pub warn: Vec<String>,
    pub require_approval: Vec<String>,
    /// The trigger point's `skip` messages.
    #[serde(default)]
    pub skip: Vec<String>,
    /// The trigger point's `trigger` messages.
    #[serde(default)]
    pub trigger: Vec<String>,
    /// Why the evaluation failed (counted as `on_error` says).
    pub errors: Vec<String>,
    pub duration_ms: u64,
    pub evaluated_at: DateTime<Utc>,
    /// A soft-mandatory deny an org admin overrode: who, why, when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overridden_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub override_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overridden_at: Option<DateTime<Utc>>,
}

/// The body of `POST /orgs/{org}/runs/{run}/override`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyOverrideBody {
    /// Why the deny is overridden (required; audited and kept on the evaluations).
    pub reason: String,
}
