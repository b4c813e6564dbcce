//! The retention part of the store contract: [`RetentionStore`], one of the traits
//! [`Store`](crate::Store) is made of.

use async_trait::async_trait;

use crate::Result;

/// Retention: what keeps a long-lived store bounded — old state versions deleted, ended
/// runs' logs compressed, old stack and plan runs summarised — each done `batch` rows per write
/// transaction, so a large
/// backlog never holds the write lock for long.
#[async_trait]
pub trait RetentionStore: Send + Sync {
    /// Deletes state versions created before `before` that are not among the newest
    /// `keep` (at least 1) of their stack, oldest first. Never deleted: a stack's current
    /// version, a late or recovered write (its run names it), a version a run consumed
    /// upstream outputs from; and nothing of a stack while one of its runs executes (its
    /// end compares the versions it wrote with the one before). Returns how many went.
    async fn prune_state_versions(
        &self,
        keep: u32,
        before: chrono::DateTime<chrono::Utc>,
        batch: u32,
    ) -> Result<u64>;
    /// Packs the log chunks of runs (stack runs and plan runs) that ended before
    /// `ended_before` into compressed blocks, `batch` chunks per write transaction; every
    /// log read answers the same chunks before and after. Returns how many chunks of stack
    /// runs and of plan runs were packed.
    async fn compress_run_logs(
        &self,
        ended_before: chrono::DateTime<chrono::Utc>,
        batch: u32,
    ) -> Result<(u64, u64)>;
    /// Summarises up to `batch` stack runs per write transaction that ended before
    /// `ended_before`: their log (rows and blocks), saved plan file, the resource and
    /// output changes of their plan summary (its counts stay) and the upstream outputs
    /// they consumed are deleted, and `summarised_at` set; the run's record stays. Never
    /// summarised: a run not ended, the latest run of its stack, the writer of its stack's
    /// current state version, a run whose held dependents wait for its outcome. Returns
    /// how many runs were summarised.
    async fn summarise_runs(
        &self,
        ended_before: chrono::DateTime<chrono::Utc>,
        batch: u32,
    ) -> Result<u64>;
    /// Summarises up to `batch` plan runs per write transaction that ended before
    /// `ended_before`: their log (rows and blocks) is deleted and what each step printed
    /// on each host (stdout, stderr, diff) blanked, and `summarised_at` set; the record,
    /// each result's status, exit code, message and duration, and the run's report stay.
    /// Never summarised: a run not ended, the latest run of its plan, the preview of a
    /// run still waiting for its decision. Returns how many runs were summarised.
    async fn summarise_plan_runs(
        &self,
        ended_before: chrono::DateTime<chrono::Utc>,
        batch: u32,
    ) -> Result<u64>;
    /// Deletes the VCS deliveries received before `before`, oldest first, `batch` per
    /// write transaction, with their trigger decisions and the redeliveries that repeat
    /// them (however young). Runs they started stay. Returns how many deliveries went.
    async fn prune_deliveries(
        &self,
        before: chrono::DateTime<chrono::Utc>,
        batch: u32,
    ) -> Result<u64>;
    /// Deletes the console sessions that ended, or expired unended, before `before`,
    /// oldest first, `batch` per write transaction, and every sign-in begun and past its
    /// expiry. Returns how many sessions went.
    async fn prune_sessions(
        &self,
        before: chrono::DateTime<chrono::Utc>,
        batch: u32,
    ) -> Result<u64>;
}
