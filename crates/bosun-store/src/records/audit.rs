//! The audit log's records: an entry written with each change, and how the log is searched.

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
