//! What plans run against: environments, hosts, plan files and inventory imports.

use chrono::{DateTime, Utc};

/// An environment to create, or the new definition of one (grants are set apart).
#[derive(Debug, Clone, PartialEq)]
pub struct NewEnvironment {
    pub org: String,
    pub id: String,
    pub vars: std::collections::BTreeMap<String, serde_json::Value>,
    pub requires_approval: bool,
    pub protected: bool,
    /// Where it takes hosts from: stacks' outputs (a JSON list of sources, checked by the
    /// server); `None`: nowhere.
    pub hosts_from: Option<serde_json::Value>,
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
    pub hosts_from: Option<serde_json::Value>,
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
    /// The bastion the host is reached through: another host of the org, by name.
    pub proxy_jump: Option<String>,
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
    /// The bastion the host is reached through (`proxy_jump`): another host of the org,
    /// by name; `None`: connected to directly.
    pub proxy_jump: Option<String>,
    /// Where a host taken from a stack's output came from (`{environment, stack, output,
    /// version}`); `None`: added by hand or by an inventory import.
    pub source: Option<serde_json::Value>,
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
    /// The file's `on_stack_change`: (stack, outputs; empty: any output).
    pub on_stack_change: Option<(String, Vec<String>)>,
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

/// The hosts an environment (or a plan's targets) takes from stacks' outputs, as a plan
/// run's start resolved them: each with its `source` (`{environment | plan, stack,
/// output, version}`).
#[derive(Debug, Clone, PartialEq)]
pub struct SourcedHosts {
    pub org: String,
    /// Who takes them: an environment's id, or `plan:<name>` for a plan's targets.
    pub owner: String,
    /// The environment they are in (an environment's own; `None` for a plan's).
    pub environment: Option<String>,
    pub hosts: Vec<(NewHost, serde_json::Value)>,
}

/// What syncing an environment's sourced hosts changed, by host name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourcedSync {
    pub added: Vec<String>,
    pub updated: Vec<String>,
    pub removed: Vec<String>,
}
