//! A stack's trigger history: what each delivery or poll did to it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One line of a stack's trigger history: a delivery and its verdict on this stack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TriggerEntry {
    /// The delivery id (`X-GitHub-Delivery`, or a poll's id).
    pub delivery: String,
    /// `github` or `poll`.
    pub source: String,
    pub event: String,
    pub action: Option<String>,
    pub git_ref: Option<String>,
    pub before: Option<String>,
    pub after: Option<String>,
    pub pull_request: Option<i64>,
    /// What the delivery was and what came of it.
    pub summary: String,
    /// A repeat of an earlier delivery id: nothing was done.
    pub duplicate: bool,
    pub received_at: DateTime<Utc>,
    /// Whether it started a run on this stack.
    pub triggered: bool,
    pub run: Option<String>,
    /// Why it triggered, or why not.
    pub reason: String,
}
