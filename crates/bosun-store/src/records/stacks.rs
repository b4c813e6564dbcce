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

/// What is shown beside stacks' definitions, read with them in one store call: their
/// org's feedback setting, how their repositories are reached, and their drift schedules.
/// [`crate::StackStore::stack_context`] and the `*_in_context` reads fill it for the stacks
/// they return, and only for those.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StackContext {
    /// The org's `pr_feedback` (`None` when the org is gone).
    pub org_pr_feedback: Option<bosun_core::feedback::PrFeedback>,
    /// The GitHub App binding of each GitHub repository that has one, by its key
    /// (`github:owner/name` in lower case), with the feedback GitHub refused it.
    pub github:
        std::collections::BTreeMap<String, (crate::GithubBinding, Vec<crate::FeedbackRefusal>)>,
    /// The last head polled on each plain git remote's branch, by (repository key,
    /// branch); missing until the poller has seen it.
    pub poll_heads: std::collections::BTreeMap<(String, String), crate::PollHead>,
    /// The drift schedule of each stack with drift detection, by stack id.
    pub drift: std::collections::BTreeMap<String, crate::DriftScheduleRecord>,
}
