//! The health checks' answers.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Health {
    pub status: String,
    /// `/readyz` only: every background duty of this server process.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub duties: Vec<DutyHealth>,
}

/// One background duty of a server process, as `/readyz` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DutyHealth {
    pub name: String,
    /// When it last completed a pass on this process (absent before its first; a duty
    /// whose lease another replica holds passes there, not here).
    pub last_pass_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Whether this process holds the duty's cluster-wide lease now.
    pub lease_held: bool,
}
