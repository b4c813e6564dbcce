//! The metrics part of the store contract: [`MetricsStore`], one of the traits
//! [`Store`](crate::Store) is made of.

use async_trait::async_trait;

use crate::{Result, StoreMetrics};

/// What `/metrics` reads from the store.
#[async_trait]
pub trait MetricsStore: Send + Sync {
    /// Everything `/metrics` reads from the store, in one read transaction.
    async fn metrics(&self) -> Result<StoreMetrics>;
    /// Folds the run and trigger-decision count deltas the store's triggers wrote into one
    /// row per metric; returns how many rows it folded.
    async fn fold_metric_counts(&self) -> Result<usize>;
}
