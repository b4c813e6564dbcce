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

/// What a page of stacks shows of each stack's activity, read with the page by
/// [`crate::StackStore::list_stacks_with_activity`]: the latest run (newest `created_at`,
/// then id) of each stack that has runs, and the state lock held on each locked one, by
/// stack id.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StackActivity {
    pub last_runs: std::collections::BTreeMap<String, crate::RunRecord>,
    pub locks: std::collections::BTreeMap<String, bosun_core::state::Lock>,
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
    /// One stack shown alone: its neighbours in the org's dependency graph (the stacks it
    /// depends on, the stacks that depend on it, the plans it feeds).
    pub graph: bosun_core::graph::Graph,
}
