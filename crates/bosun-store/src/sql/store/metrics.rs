//! [`MetricsStore`] for both backends: each method delegates to `sql/metrics.rs`.

use super::super::*;

#[async_trait]
impl MetricsStore for db::Store {
    async fn metrics(&self) -> Result<StoreMetrics> {
        self.read(metrics::read).await
    }

    async fn fold_metric_counts(&self) -> Result<usize> {
        self.write(metrics::fold_counts).await
    }
}
