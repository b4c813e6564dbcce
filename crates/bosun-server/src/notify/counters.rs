//! This process's notification delivery counters, shown in `/metrics`.

use std::sync::atomic::AtomicU64;

/// This process's delivery counters, for `/metrics`.
#[derive(Default)]
pub struct Counters {
    pub delivered: AtomicU64,
    /// Failed attempts that will be retried.
    pub retried: AtomicU64,
    /// Failed last attempts: the delivery was given up.
    pub gave_up: AtomicU64,
    /// Failed attempts (retried or not), by target kind.
    pub failures_webhook: AtomicU64,
    pub failures_slack: AtomicU64,
    /// Deliveries and events deleted by retention.
    pub pruned_deliveries: AtomicU64,
    pub pruned_events: AtomicU64,
}

impl Counters {
    pub fn failures(&self, kind: &str) -> &AtomicU64 {
        if kind == "slack" {
            &self.failures_slack
        } else {
            &self.failures_webhook
        }
    }
}
