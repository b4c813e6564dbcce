//! Runners, as registered.

use bosun_core::runner::Egress;
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
    /// How its engines reach the network, as it registered; `None`: it did not say.
    pub egress: Option<Egress>,
}

impl RunnerRecord {
    /// A runners list's position after this runner, in registration (creation, id) order.
    pub fn cursor(&self) -> crate::KeyCursor {
        crate::KeyCursor {
            key: self.created_at.timestamp_millis(),
            id: self.id.clone(),
        }
    }
}
