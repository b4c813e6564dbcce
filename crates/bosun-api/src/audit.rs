//! The audit log's entries.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

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
