//! The plan runs part of the store contract: [`PlanRunStore`], one of the traits
//! [`Store`](crate::Store) is made of.

use async_trait::async_trait;

use crate::{
    Audit, LogRecord, NewPlanRun, PlanHostResultRecord, PlanRunEventInput, PlanRunRecord,
    PlanTriggerRecord, Result, RunnerRecord,
};

/// Plan runs: created behind the concurrency guard, listed, moved through their state
/// machine, leased and fenced, with per-host results and logs.
#[async_trait]
pub trait PlanRunStore: Send + Sync {
    /// Creates a plan run — `queued`, or `paused` when it has gated environments — after
    /// the concurrency guard, in the same transaction: unless `concurrent`, refuses with
    /// `RunInProgress` (the overlapping hosts) while another run of the same plan is
    /// queued, paused or running on one of its hosts.
    async fn create_plan_run(&self, run: &NewPlanRun, audit: &Audit) -> Result<PlanRunRecord>;
    async fn get_plan_run(&self, id: &str) -> Result<Option<PlanRunRecord>>;
    /// Plan triggers (a stack's tracked run changed outputs a plan watches) no run was
    /// started for yet, oldest first. A run settles its trigger in its creating
    /// transaction ([`NewPlanRun::settles_trigger`]).
    async fn pending_plan_triggers(&self, limit: u32) -> Result<Vec<PlanTriggerRecord>>;
    /// Settles a trigger with no run (its plan is gone or watches another stack now).
    async fn drop_plan_trigger(&self, id: i64) -> Result<()>;
    /// The org's plan runs (of one plan), newest first.
    /// Plan runs of `org` (of one plan, when given), newest first; with `before`, only
    /// those older than that run (a page's cursor; a run not in the org lists nothing).
    async fn list_plan_runs(
        &self,
        org: &str,
        plan: Option<&str>,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<PlanRunRecord>>;
    /// Applies an event through `bosun_core::plan_run::transition`; a runner's event
    /// (`fencing: Some`) is refused with `Fenced` unless it holds the lease.
    async fn plan_run_event(&self, id: &str, input: &PlanRunEventInput) -> Result<PlanRunRecord>;
    /// Leases the oldest plan run waiting for a runner that serves its org (a pool of
    /// the org, or the hosted pool), with a new fencing number.
    async fn lease_plan_run(&self, runner: &RunnerRecord) -> Result<Option<PlanRunRecord>>;
    /// A runner's liveness beat; answers whether to stop (the run was aborted).
    async fn plan_run_heartbeat(&self, id: &str, fencing: i64) -> Result<bool>;
    /// Leased plan runs with no heartbeat since `before`.
    async fn stale_plan_runs(
        &self,
        before: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<PlanRunRecord>>;
    /// Stores per-host results (replacing the same step and host) for the lease holder.
    async fn put_plan_run_results(
        &self,
        id: &str,
        fencing: i64,
        results: &[PlanHostResultRecord],
    ) -> Result<()>;
    /// Per-host results ordered by step, then the run's host order.
    async fn plan_run_results(&self, id: &str) -> Result<Vec<PlanHostResultRecord>>;
    /// Numbered log chunks; a `seq` already stored is ignored. `Fenced` for a stale lease.
    async fn append_plan_run_logs(
        &self,
        id: &str,
        fencing: i64,
        chunks: &[(i64, String)],
    ) -> Result<()>;
    async fn read_plan_run_logs(
        &self,
        id: &str,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<LogRecord>>;
    async fn next_plan_run_log_seq(&self, id: &str) -> Result<i64>;
}
