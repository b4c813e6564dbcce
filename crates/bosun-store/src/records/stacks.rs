//! A stored stack: its definition and timestamps.

use bosun_core::stack::StackSpec;
use chrono::{DateTime, Utc};

#[derive(Debug, Clone, PartialEq)]
pub struct StackRecord {
    pub org: String,
    pub spec: StackSpec,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}
