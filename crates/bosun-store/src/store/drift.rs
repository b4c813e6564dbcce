//! The drift part of the store contract: [`DriftStore`], one of the traits [`Store`](crate::Store)
//! is made of.

use async_trait::async_trait;

use crate::{
    Audit, DriftCheckRecord, DriftFire, DriftFired, DriftScheduleRecord, NewRun, Result, RunRecord,
};

/// Drift detection: schedules, their fires, operators' checks, and settled results.
#[async_trait]
pub trait DriftStore: Send + Sync {
    /// Stacks with drift detection (of one org, or one stack, or every org), each with
    /// its schedule bookkeeping, latest successful and latest settled check, and open
    /// drift run.
    async fn drift_schedules(
        &self,
        org: Option<&str>,
        stack: Option<&str>,
    ) -> Result<Vec<DriftScheduleRecord>>;
    /// [`Store::drift_schedules`] of an org's stacks with an id in `first..=last` (one
    /// page of a stacks list), in one query.
    ///
    /// [`Store::drift_schedules`]: DriftStore::drift_schedules
    async fn drift_schedules_between(
        &self,
        org: &str,
        first: &str,
        last: &str,
    ) -> Result<Vec<DriftScheduleRecord>>;
    /// Applies a scheduler decision in one transaction: arms the schedule, or fires it —
    /// starting the drift run (with a `run.create` audit by `system`), or, while a drift
    /// run of the stack is open, recording the skip instead. `Raced` when the stored
    /// `next_at` is no longer `expected_next`.
    async fn fire_drift_schedule(&self, fire: &DriftFire) -> Result<DriftFired>;
    /// Starts an operator's drift check; `HasOpenRuns` while a drift run of the stack
    /// is open (never two at once).
    async fn start_drift_check(&self, run: &NewRun, audit: &Audit) -> Result<RunRecord>;
    /// Ended drift runs whose result is not settled yet, oldest first.
    async fn unsettled_drift_runs(&self, limit: u32) -> Result<Vec<RunRecord>>;
    /// Settles an ended drift run's result and, in the same transaction, creates the
    /// reconcile run when given. `None` when it was settled already (nothing written).
    async fn settle_drift_run(
        &self,
        run: &str,
        result: bosun_core::drift::DriftResult,
        reconcile: Option<&NewRun>,
    ) -> Result<Option<DriftCheckRecord>>;
    /// The settled check of a drift run, or the check whose reconcile started this run.
    async fn drift_check(&self, run: &str) -> Result<Option<DriftCheckRecord>>;
}
