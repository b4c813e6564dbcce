//! The drift part of the store contract: [`DriftStore`], one of the traits [`Store`](crate::Store)
//! is made of.

use async_trait::async_trait;

use chrono::{DateTime, Utc};

use crate::{
    Audit, DriftArming, DriftCheckRecord, DriftFire, DriftFired, DriftScheduleRecord, KeyCursor,
    NewRun, Result, RunRecord, StaleDriftChecks,
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
    /// Armed schedules due at `now` (`next_at <= now`), soonest first, at most `limit`.
    async fn drift_schedules_due(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<DriftScheduleRecord>>;
    /// Stacks whose drift settings were saved since the scheduler last armed them,
    /// at most `limit`.
    async fn drift_arming(&self, limit: u32) -> Result<Vec<DriftArming>>;
    /// Takes the tickets a pass looked at off the arming queue (a ticket replaced by a
    /// later save of its stack stays).
    async fn drift_armed(&self, tickets: &[DriftArming]) -> Result<()>;
    /// One page of an org's drift dashboard: its armed schedules in (`stale_at`, stack)
    /// order — stale first, the most overdue first — after `after`, at most `limit`.
    async fn drift_dashboard(
        &self,
        org: &str,
        after: Option<&KeyCursor>,
        limit: u32,
    ) -> Result<Vec<DriftScheduleRecord>>;
    /// The drift-checked stacks of every org whose checking is stale at `now`: counted per
    /// org, and the `limit` most overdue with what their check age is measured from, read
    /// in the order they turned stale. The counts read no row per stale stack whose alert
    /// was raised (the store counts those as the alerts are raised and as checks succeed),
    /// so `now` must not be earlier than the alert passes already made: time goes forward.
    async fn stale_drift_checks(&self, now: DateTime<Utc>, limit: u32) -> Result<StaleDriftChecks>;
    /// How many of an org's drift-checked stacks are stale at `now`, up to `cap`: the
    /// answer is `min(stale, cap)`, counted as [`Self::stale_drift_checks`] counts.
    async fn count_stale_drift(&self, org: &str, now: DateTime<Utc>, cap: u32) -> Result<u64>;
    /// Schedules whose stale-check alert is due at `now` and not raised yet, at most
    /// `limit`.
    async fn drift_alerts_due(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<DriftScheduleRecord>>;
    /// Records that the alert of the episode turning stale at `alert_at` was raised.
    async fn drift_alert_raised(&self, org: &str, stack: &str, alert_at: i64) -> Result<()>;
    /// Computes `stale_at` for up to `limit` schedules stored before it was kept;
    /// returns how many it filled.
    async fn fill_drift_stale_at(&self, limit: u32) -> Result<usize>;
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
