//! Runners, as registered.

use chrono::{DateTime, Utc};

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
