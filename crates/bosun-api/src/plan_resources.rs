//! Wire types of what plans run against: hosts, environments (with grants), plan files
//! and inventory imports.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::nullable;

/// The body of `POST /orgs/{org}/hosts`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HostCreate {
    /// `[a-z0-9][a-z0-9._-]*`, at most 63 characters.
    pub name: String,
    /// DNS name or IP address; default: the name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Default 22.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i64>,
    /// Default: the runner's local user name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// `ssh` (default) or `local`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// An object of variables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub vars: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    /// Private key path on the runner's machine; default: the agent, then `~/.ssh/id_*`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_file: Option<String>,
    /// A pinned host key (`ssh-ed25519 AAAA…`), checked instead of known_hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_key: Option<String>,
    /// known_hosts path on the runner's machine; default `~/.ssh/known_hosts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub known_hosts: Option<String>,
    /// The bastion the host is reached through: another `ssh` host of the org, by name
    /// (itself maybe behind one, at most 8 in a chain); default: connected to directly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_jump: Option<String>,
}

/// The body of `PATCH /orgs/{org}/hosts/{host}`: only the given fields change; `null`
/// clears an optional one.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HostPatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i64>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub user: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection: Option<String>,
    /// Replaces the labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
    /// Replaces the variables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub vars: Option<serde_json::Value>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub environment: Option<Option<String>>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub identity_file: Option<Option<String>>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub host_key: Option<Option<String>>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub known_hosts: Option<Option<String>>,
    /// The bastion, by name; `null`: connected to directly.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub proxy_jump: Option<Option<String>>,
}

/// A host as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct HostInfo {
    pub name: String,
    pub address: String,
    pub port: u16,
    pub user: Option<String>,
    /// `ssh` or `local`.
    pub connection: String,
    pub labels: Vec<String>,
    #[schema(value_type = Object)]
    pub vars: BTreeMap<String, serde_json::Value>,
    pub environment: Option<String>,
    pub identity_file: Option<String>,
    pub host_key: Option<String>,
    pub known_hosts: Option<String>,
    /// The bastion the host is reached through, by name; `null`: connected to directly.
    #[serde(default)]
    pub proxy_jump: Option<String>,
    /// A host taken from a stack's output: `{environment, stack, output, version}` (the
    /// state version a plan run's start read); `null`: added by hand or imported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub source: Option<serde_json::Value>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The body of `POST /orgs/{org}/environments`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnvironmentCreate {
    /// A slug: `staging`, `prod`.
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub vars: Option<serde_json::Value>,
    /// Runs touching it wait for an approver (operator or above).
    #[serde(default)]
    pub requires_approval: bool,
    /// Approvers additionally need a grant on it.
    #[serde(default)]
    pub protected: bool,
    /// Hosts taken from stacks' outputs, resolved when a plan run starts: a list of
    /// `{stack, output, name, address, port?, user?, labels?, vars?, host_key?}`, each
    /// field but `stack` and `output` a template over `item` (an entry of the output)
    /// and `key` (its index or key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub hosts_from: Option<serde_json::Value>,
}

/// The body of `PATCH /orgs/{org}/environments/{env}`: only the given fields change.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnvironmentPatch {
    /// Replaces the variables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub vars: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requires_approval: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protected: Option<bool>,
    /// Replaces the sources of hosts (`[]`: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub hosts_from: Option<serde_json::Value>,
}

/// An environment as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EnvironmentInfo {
    pub id: String,
    #[schema(value_type = Object)]
    pub vars: BTreeMap<String, serde_json::Value>,
    pub requires_approval: bool,
    pub protected: bool,
    /// Users granted approval on it (what a protected environment's approvers need).
    pub grants: Vec<String>,
    /// The hosts in it, by name.
    pub hosts: Vec<String>,
    /// Where it takes hosts from (see `EnvironmentCreate::hosts_from`); empty: nowhere.
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    pub hosts_from: Vec<serde_json::Value>,
    /// One environment shown alone: what each source gives now, from its stack's current
    /// state (`{stack, output, version, hosts: [{name, address, port, user, labels}]}`, or
    /// `{stack, output, error}`). A plan run's start resolves them the same way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub hosts_from_preview: Option<Vec<serde_json::Value>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The body of `POST /orgs/{org}/plans` (store or update by the plan's `name`) and of
/// `POST /orgs/{org}/plans/lint`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanSource {
    /// The plan YAML, stored exactly as given.
    pub source: String,
    /// The file name errors and findings name (default `plan.yaml`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// A lint finding: where, and what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PlanFinding {
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// One step of a plan, summarized.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PlanStepSummary {
    pub name: String,
    /// `command`, `shell`, `script`, `file.lineinfile`, …
    pub module: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    pub sudo: bool,
    pub continue_on_error: bool,
}

/// What a plan file says, parsed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PlanFileSummary {
    pub target_hosts: Vec<String>,
    pub target_labels: Vec<String>,
    pub target_environments: Vec<String>,
    /// The org's hosts it targets now, by name.
    pub hosts: Vec<String>,
    /// Input names with their defaults (`null`: none).
    #[schema(value_type = Object)]
    pub inputs: BTreeMap<String, serde_json::Value>,
    pub steps: Vec<PlanStepSummary>,
    pub concurrent_runs: bool,
    pub strict_vars: bool,
    /// The file's `schedule:`, which uploading the file makes the plan's schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<PlanFileSchedule>,
}

/// A plan file's `schedule:` as the server reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PlanFileSchedule {
    /// Five-field cron or an `@daily`-style macro.
    pub cron: String,
    /// IANA time zone (`UTC` when the file names none).
    pub timezone: String,
    /// Inputs of every scheduled run.
    #[schema(value_type = Object)]
    pub inputs: BTreeMap<String, serde_json::Value>,
}

/// A stored plan, as the list shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PlanListItem {
    pub name: String,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
}

/// A stored plan: its source, version and parsed summary. Uploads also carry the lint
/// warnings found against the org's hosts and environments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PlanInfo {
    pub name: String,
    /// 1 on create, +1 per update.
    pub version: i64,
    pub source: String,
    pub summary: PlanFileSummary,
    #[serde(default)]
    pub warnings: Vec<PlanFinding>,
    /// On upload: whether this created the plan (version 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<bool>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
}

/// The answer of `POST /orgs/{org}/plans/lint`: nothing is stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PlanLintAnswer {
    pub name: String,
    pub summary: PlanFileSummary,
    pub warnings: Vec<PlanFinding>,
}

/// The body of `POST /orgs/{org}/inventory`: an inventory file, as `bosun plan exec
/// --inventory` reads it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InventoryImportRequest {
    pub source: String,
    /// The file name errors name (default `inventory.yaml`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// What an inventory import created and updated, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct InventoryImportAnswer {
    pub environments_created: Vec<String>,
    pub environments_updated: Vec<String>,
    pub hosts_created: Vec<String>,
    pub hosts_updated: Vec<String>,
}
