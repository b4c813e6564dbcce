//! This process's retention counters, shown in `/metrics`.

use std::sync::atomic::AtomicU64;

/// What the retention duty of this process deleted or compressed, for `/metrics`.
#[derive(Default)]
pub struct Counters {
    /// State versions deleted as older than the retention.
    pub state_versions_pruned: AtomicU64,
    /// Log chunks of ended runs packed into compressed blocks, of stack runs and of plan
    /// runs.
    pub log_chunks_compressed_stack_runs: AtomicU64,
    pub log_chunks_compressed_plan_runs: AtomicU64,
    /// Runs summarised as ended longer ago than the run retention, stack runs and plan
    /// runs.
    pub runs_summarised: AtomicU64,
    pub plan_runs_summarised: AtomicU64,
    /// VCS deliveries (webhooks, polls) deleted with their trigger decisions.
    pub deliveries_pruned: AtomicU64,
    /// Console sessions deleted as ended (or expired) longer ago than
    /// `sign_in.keep_ended_sessions`.
    pub sessions_pruned: AtomicU64,
}
