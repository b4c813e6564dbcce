//! [`PlanRunStore`] for both backends: each method delegates to `sql/plan_runs.rs`.

use super::super::*;

#[async_trait]
impl PlanRunStore for db::Store {
    async fn create_plan_run(&self, run: &NewPlanRun, audit: &Audit) -> Result<PlanRunRecord> {
        let (run, audit) = (run.clone(), audit.clone());
        self.write(move |tx| plan_runs::create(tx, &run, &audit))
            .await
    }

    async fn get_plan_run(&self, id: &str) -> Result<Option<PlanRunRecord>> {
        let id = id.to_string();
        self.read(move |c| plan_runs::load(c, &id)).await
    }

    async fn pending_plan_triggers(&self, limit: u32) -> Result<Vec<PlanTriggerRecord>> {
        self.read(move |c| plan_runs::pending_triggers(c, limit))
            .await
    }

    async fn drop_plan_trigger(&self, id: i64) -> Result<()> {
        self.write(move |tx| plan_runs::drop_trigger(tx, id)).await
    }

    async fn list_plan_runs(
        &self,
        org: &str,
        plan: Option<&str>,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<PlanRunRecord>> {
        let (org, plan, before) = (
            org.to_string(),
            plan.map(str::to_string),
            before.map(str::to_string),
        );
        self.read(move |c| plan_runs::list(c, &org, plan.as_deref(), before.as_deref(), limit))
            .await
    }

    async fn plan_run_event(&self, id: &str, input: &PlanRunEventInput) -> Result<PlanRunRecord> {
        let (id, input) = (id.to_string(), input.clone());
        self.write(move |tx| plan_runs::event(tx, &id, &input))
            .await
    }

    async fn lease_plan_run(&self, runner: &RunnerRecord) -> Result<Option<PlanRunRecord>> {
        // Idle runners poll often: look without the write lock first.
        if !self.read(plan_runs::any_waiting).await? {
            return Ok(None);
        }
        let runner = runner.clone();
        self.write(move |tx| plan_runs::lease(tx, &runner)).await
    }

    async fn plan_run_heartbeat(&self, id: &str, fencing: i64) -> Result<bool> {
        let id = id.to_string();
        self.write(move |tx| plan_runs::heartbeat(tx, &id, fencing))
            .await
    }

    async fn stale_plan_runs(&self, before: DateTime<Utc>) -> Result<Vec<PlanRunRecord>> {
        self.read(move |c| plan_runs::stale(c, before)).await
    }

    async fn put_plan_run_results(
        &self,
        id: &str,
        fencing: i64,
        results: &[PlanHostResultRecord],
    ) -> Result<()> {
        let (id, results) = (id.to_string(), results.to_vec());
        self.write(move |tx| plan_runs::put_results(tx, &id, fencing, &results))
            .await
    }

    async fn plan_run_results(&self, id: &str) -> Result<Vec<PlanHostResultRecord>> {
        let id = id.to_string();
        self.read(move |c| plan_runs::results(c, &id)).await
    }

    async fn append_plan_run_logs(
        &self,
        id: &str,
        fencing: i64,
        chunks: &[(i64, String)],
    ) -> Result<()> {
        let (id, chunks) = (id.to_string(), chunks.to_vec());
        self.write(move |tx| plan_runs::append_logs(tx, &id, fencing, &chunks))
            .await
    }

    async fn read_plan_run_logs(
        &self,
        id: &str,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<LogRecord>> {
        let id = id.to_string();
        self.read(move |c| plan_runs::read_logs(c, &id, after, limit))
            .await
    }

    async fn next_plan_run_log_seq(&self, id: &str) -> Result<i64> {
        let id = id.to_string();
        self.read(move |c| plan_runs::next_log_seq(c, &id)).await
    }
}
