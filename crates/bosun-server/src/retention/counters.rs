//! This process's retention counters, shown in `/metrics`.

use std::sync::atomic::AtomicU64;

/// What the retention duty of this process deleted, for `/metrics`.
#[derive(Default)]
pub struct Counters {
    /// State versions deleted as older than the retention.
    pub state_versions_pruned: AtomicU64,
}
