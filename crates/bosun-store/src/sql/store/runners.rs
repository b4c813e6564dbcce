//! [`RunnerStore`] for both backends: each method delegates to `sql/runners.rs`.

use super::super::*;

#[async_trait]
impl RunnerStore for db::Store {
    async fn busy_runners(&self) -> Result<std::collections::BTreeSet<String>> {
        self.read(runners::busy).await
    }

    async fn register_runner(&self, runner: &RunnerRecord) -> Result<RunnerRecord> {
        let runner = runner.clone();
        self.write(move |tx| runners::register(tx, &runner)).await
    }

    async fn get_runner(&self, id: &str) -> Result<Option<RunnerRecord>> {
        let id = id.to_string();
        self.read(move |c| runners::get(c, &id)).await
    }

    async fn touch_runner(&self, id: &str) -> Result<()> {
        let id = id.to_string();
        self.write(move |tx| runners::touch(tx, &id)).await
    }

    async fn list_runners(
        &self,
        org: &str,
        after: Option<&KeyCursor>,
        limit: u32,
    ) -> Result<Vec<RunnerRecord>> {
        let (org, after) = (org.to_string(), after.cloned());
        self.read(move |c| runners::list(c, &org, after.as_ref(), limit))
            .await
    }

    async fn drain_runner(&self, id: &str, audit: &Audit) -> Result<bool> {
        let (id, audit) = (id.to_string(), audit.clone());
        self.write(move |tx| runners::drain(tx, &id, &audit)).await
    }
}
