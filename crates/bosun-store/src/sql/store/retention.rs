//! [`RetentionStore`] for both backends: each method delegates to `sql/retention.rs`.

use super::super::*;

#[async_trait]
impl RetentionStore for db::Store {
    async fn prune_state_versions(
        &self,
        keep: u32,
        before: DateTime<Utc>,
        batch: u32,
    ) -> Result<u64> {
        let (keep, before, batch) = (keep.max(1), millis(before), batch.max(1));
        let stacks = self
            .read(move |c| retention::stacks_with_old_versions(c, keep, before))
            .await?;
        let mut deleted = 0;
        for (org, stack) in stacks {
            loop {
                let (o, s) = (org.clone(), stack.clone());
                let n = self
                    .write(move |tx| {
                        retention::prune_state_versions(tx, &o, &s, keep, before, batch)
                    })
                    .await?;
                deleted += n;
                if n < u64::from(batch) {
                    break;
                }
            }
        }
        Ok(deleted)
    }

    async fn compress_run_logs(
        &self,
        ended_before: DateTime<Utc>,
        batch: u32,
    ) -> Result<(u64, u64)> {
        /// Runs looked up at a time.
        const RUNS: u32 = 100;
        let (ended_before, batch) = (millis(ended_before), batch.max(1));
        let mut packed = [0, 0];
        for (i, of) in [logs::LogOf::StackRun, logs::LogOf::PlanRun]
            .into_iter()
            .enumerate()
        {
            let mut after = String::new();
            loop {
                let from = after.clone();
                let ids = self
                    .read(move |c| logs::ended_with_rows(c, of, ended_before, &from, RUNS))
                    .await?;
                if let Some(last) = ids.last() {
                    after = last.clone();
                }
                for id in &ids {
                    loop {
                        let id = id.clone();
                        let n = self.write(move |tx| logs::pack(tx, of, &id, batch)).await?;
                        packed[i] += n;
                        if n < u64::from(batch) {
                            break;
                        }
                    }
                }
                if ids.len() < RUNS as usize {
                    break;
                }
            }
        }
        Ok((packed[0], packed[1]))
    }

    async fn summarise_runs(&self, ended_before: DateTime<Utc>, batch: u32) -> Result<u64> {
        let (ended_before, batch) = (millis(ended_before), batch.max(1));
        in_batches(self, move |tx| {
            let n = retention::summarise_runs(tx, ended_before, batch)?;
            Ok((n, n == u64::from(batch)))
        })
        .await
    }

    async fn summarise_plan_runs(&self, ended_before: DateTime<Utc>, batch: u32) -> Result<u64> {
        let (ended_before, batch) = (millis(ended_before), batch.max(1));
        in_batches(self, move |tx| {
            let n = retention::summarise_plan_runs(tx, ended_before, batch)?;
            Ok((n, n == u64::from(batch)))
        })
        .await
    }

    async fn prune_deliveries(&self, before: DateTime<Utc>, batch: u32) -> Result<u64> {
        let (before, batch) = (millis(before), batch.max(1));
        in_batches(self, move |tx| {
            retention::prune_deliveries(tx, before, batch)
        })
        .await
    }

    async fn prune_sessions(&self, before: DateTime<Utc>, batch: u32) -> Result<u64> {
        let (before, batch) = (millis(before), batch.max(1));
        self.write(sign_in::prune_attempts).await?;
        in_batches(self, move |tx| sign_in::prune_sessions(tx, before, batch)).await
    }
}

/// Runs `step` in one write transaction after another while it answers a full batch:
/// `(how many it did, whether the batch was full)`; the sum of what all of them did.
async fn in_batches<F>(store: &db::Store, step: F) -> Result<u64>
where
    F: Fn(&Transaction<'_>) -> Result<(u64, bool)> + Clone + Send + 'static,
{
    let mut done = 0;
    loop {
        let step = step.clone();
        let (n, full) = store.write(move |tx| step(tx)).await?;
        done += n;
        if !full {
            return Ok(done);
        }
    }
}
