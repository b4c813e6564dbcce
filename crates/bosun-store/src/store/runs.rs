//! The runs part of the store contract: [`RunStore`], one of the traits [`Store`](crate::Store)
//! is made of.

use async_trait::async_trait;

use crate::{
    Audit, LogRecord, NewRun, Result, RunContext, RunEventInput, RunEventResult, RunPhaseRecord,
    RunRecord, RunnerRecord,
};

/// Stack runs: created, listed, moved through the run state machine, leased and fenced,
/// with their logs and saved plans.
#[async_trait]
pub trait RunStore: Send + Sync {
    async fn create_run(&self, run: &NewRun, audit: Option<&Audit>) -> Result<RunRecord>;
    async fn get_run(&self, id: &str) -> Result<Option<RunRecord>>;
    /// Run `id` of `org` (none when it is another org's) and its [`RunContext`], with at
    /// most `audit_limit` audit records, in one call.
    async fn get_run_in_context(
        &self,
        org: &str,
        id: &str,
        audit_limit: u32,
    ) -> Result<Option<(RunRecord, RunContext)>>;
    /// Runs of an org (or one stack), newest first, created strictly before `before`.
    async fn list_runs(
        &self,
        org: &str,
        stack: Option<&str>,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<RunRecord>>;
    async fn run_phases(&self, run: &str) -> Result<Vec<RunPhaseRecord>>;
    /// The phases of each of `runs`, in one read (a run with none is absent).
    async fn run_phases_of(
        &self,
        runs: &[String],
    ) -> Result<std::collections::BTreeMap<String, Vec<RunPhaseRecord>>>;
    /// Applies an event through [`bosun_core::run::transition`] in one transaction. A
    /// run that ends releases any state lock it still holds (returned, and recorded).
    async fn run_event(&self, run: &str, input: &RunEventInput) -> Result<RunEventResult>;
    /// Requests a cancel: queued/unconfirmed runs end now; executing ones are flagged so
    /// their runner stops.
    async fn cancel_run(&self, run: &str, audit: &Audit) -> Result<RunEventResult>;
    /// Leases the oldest dispatchable run for this runner, if any: a proposed run, or the
    /// oldest open tracked run of its stack when nobody else holds the stack's lock.
    /// Queued tracked runs blocked by someone's lock record the holder.
    async fn lease_run(&self, runner: &RunnerRecord) -> Result<Option<RunRecord>>;
    /// Records a heartbeat; `Fenced` when the lease is no longer this one. Returns
    /// whether a cancel was requested.
    async fn heartbeat(&self, run: &str, fencing: i64) -> Result<bool>;
    /// Executing runs whose last heartbeat is older than `before`.
    async fn stale_runs(&self, before: chrono::DateTime<chrono::Utc>) -> Result<Vec<RunRecord>>;
    /// Runs executing a phase that started before `before` (for phase timeouts).
    async fn executing_runs(&self) -> Result<Vec<RunRecord>>;
    /// Marks the run as having written late state.
    async fn flag_late_write(&self, run: &str) -> Result<()>;
    /// Records the upstream outputs (stack, state version, output, variable) a run was
    /// given; only the first call per run counts (`false` after that).
    async fn set_run_consumed(&self, run: &str, consumed: &serde_json::Value) -> Result<bool>;
    /// Stores log chunks; a seq already stored keeps its first text.
    async fn append_logs(&self, run: &str, fencing: i64, chunks: &[(i64, String)]) -> Result<()>;
    async fn read_logs(&self, run: &str, after: Option<i64>, limit: u32) -> Result<Vec<LogRecord>>;
    /// The next log seq to write (one past the highest stored).
    async fn next_log_seq(&self, run: &str) -> Result<i64>;
    /// A stack run's saved Terraform plan file.
    async fn put_run_plan(&self, run: &str, fencing: i64, body: &[u8]) -> Result<()>;
    async fn get_run_plan(&self, run: &str) -> Result<Option<Vec<u8>>>;
}
