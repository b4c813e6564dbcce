//! [`RunStore`] for both backends: each method delegates to `sql/runs.rs`.

use super::super::*;

#[async_trait]
impl RunStore for db::Store {
    async fn create_run(&self, run: &NewRun, audit: Option<&Audit>) -> Result<RunRecord> {
        let (run, audit) = (run.clone(), audit.cloned());
        self.write(move |tx| runs::create(tx, &run, audit.as_ref()))
            .await
    }

    async fn get_run(&self, id: &str) -> Result<Option<RunRecord>> {
        let id = id.to_string();
        self.read(move |c| runs::load_run(c, &id)).await
    }

    async fn get_run_in_context(
        &self,
        org: &str,
        id: &str,
        audit_limit: u32,
    ) -> Result<Option<(RunRecord, RunContext)>> {
        let (org, id) = (org.to_string(), id.to_string());
        self.read(move |c| {
            let Some(run) = runs::load_run(c, &id)?.filter(|r| r.org == org) else {
                return Ok(None);
            };
            let context = runs::context(c, &run, audit_limit)?;
            Ok(Some((run, context)))
        })
        .await
    }

    async fn list_runs(
        &self,
        org: &str,
        stack: Option<&str>,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<RunRecord>> {
        let (org, stack, before) = (
            org.to_string(),
            stack.map(str::to_string),
            before.map(str::to_string),
        );
        self.read(move |c| runs::list(c, &org, stack.as_deref(), before.as_deref(), limit))
            .await
    }

    async fn run_phases(&self, run: &str) -> Result<Vec<RunPhaseRecord>> {
        let run = run.to_string();
        self.read(move |c| runs::phases(c, &run)).await
    }

    async fn run_phases_of(
        &self,
        runs: &[String],
    ) -> Result<BTreeMap<String, Vec<RunPhaseRecord>>> {
        let runs = runs.to_vec();
        self.read(move |c| runs::phases_of(c, &runs)).await
    }

    async fn run_event(&self, run: &str, input: &RunEventInput) -> Result<RunEventResult> {
        let (id, input) = (run.to_string(), input.clone());
        self.write(move |tx| runs::event(tx, &id, &input)).await
    }

    async fn cancel_run(&self, run: &str, audit: &Audit) -> Result<RunEventResult> {
        let (id, audit) = (run.to_string(), audit.clone());
        self.write(move |tx| runs::cancel(tx, &id, &audit)).await
    }

    async fn lease_run(&self, runner: &RunnerRecord) -> Result<Option<RunRecord>> {
        // Idle runners poll often: look without the write lock first.
        if !self.read(runs::any_waiting).await? {
            return Ok(None);
        }
        let runner = runner.clone();
        self.write(move |tx| runs::lease(tx, &runner)).await
    }

    async fn heartbeat(&self, run: &str, fencing: i64) -> Result<bool> {
        let id = run.to_string();
        self.write(move |tx| runs::heartbeat(tx, &id, fencing))
            .await
    }

    async fn stale_runs(&self, before: DateTime<Utc>) -> Result<Vec<RunRecord>> {
        self.read(move |c| runs::stale(c, before)).await
    }

    async fn executing_runs(&self) -> Result<Vec<RunRecord>> {
        self.read(runs::executing).await
    }

    async fn flag_late_write(&self, run: &str) -> Result<()> {
        let id = run.to_string();
        self.write(move |tx| runs::flag_late_write(tx, &id)).await
    }

    async fn set_run_consumed(&self, run: &str, consumed: &Value) -> Result<bool> {
        let (run, consumed) = (run.to_string(), consumed.clone());
        self.write(move |tx| deps::set_consumed(tx, &run, &consumed))
            .await
    }

    async fn append_logs(&self, run: &str, fencing: i64, chunks: &[(i64, String)]) -> Result<()> {
        let (id, chunks) = (run.to_string(), chunks.to_vec());
        self.write(move |tx| runs::append_logs(tx, &id, fencing, &chunks))
            .await
    }

    async fn read_logs(&self, run: &str, after: Option<i64>, limit: u32) -> Result<Vec<LogRecord>> {
        let id = run.to_string();
        self.read(move |c| runs::read_logs(c, &id, after, limit))
            .await
    }

    async fn next_log_seq(&self, run: &str) -> Result<i64> {
        let id = run.to_string();
        self.read(move |c| runs::next_log_seq(c, &id)).await
    }

    async fn put_run_plan(&self, run: &str, fencing: i64, body: &[u8]) -> Result<()> {
        let (id, body) = (run.to_string(), body.to_vec());
        self.write(move |tx| runs::put_plan(tx, &id, fencing, &body))
            .await
    }

    async fn get_run_plan(&self, run: &str) -> Result<Option<Vec<u8>>> {
        let id = run.to_string();
        self.read(move |c| runs::get_plan(c, &id)).await
    }
}
