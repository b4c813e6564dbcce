//! [`StateStore`] for both backends: each method delegates to `sql/state.rs`.

use super::super::*;

#[async_trait]
impl StateStore for db::Store {
    async fn state_head(&self, org: &str, stack: &str) -> Result<StateHead> {
        let (org, stack) = (org.to_string(), stack.to_string());
        self.read(move |c| state::read_head(c, &org, &stack)).await
    }

    async fn state_version(
        &self,
        org: &str,
        stack: &str,
        version: Option<i64>,
    ) -> Result<Option<(StateVersionMeta, Vec<u8>)>> {
        let (org, stack) = (org.to_string(), stack.to_string());
        self.read(move |c| state::read_version(c, &org, &stack, version))
            .await
    }

    async fn list_state_versions(
        &self,
        org: &str,
        stack: &str,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<StateVersionMeta>> {
        let (org, stack) = (org.to_string(), stack.to_string());
        self.read(move |c| state::list_versions(c, &org, &stack, before, limit))
            .await
    }

    async fn write_state(
        &self,
        org: &str,
        stack: &str,
        new: &NewStateVersion,
        audit: Option<&Audit>,
    ) -> Result<StateVersionMeta> {
        let (org, stack, new, audit) = (
            org.to_string(),
            stack.to_string(),
            new.clone(),
            audit.cloned(),
        );
        self.write(move |tx| state::write(tx, &org, &stack, &new, audit.as_ref()))
            .await
    }

    async fn lock_state(&self, org: &str, stack: &str, lock: &Lock) -> Result<()> {
        let (org, stack, lock) = (org.to_string(), stack.to_string(), lock.clone());
        self.write(move |tx| state::lock(tx, &org, &stack, &lock))
            .await
    }

    async fn unlock_state(
        &self,
        org: &str,
        stack: &str,
        request: &UnlockRequest,
        audit: &Audit,
    ) -> Result<UnlockDecision> {
        let (org, stack, request, audit) = (
            org.to_string(),
            stack.to_string(),
            request.clone(),
            audit.clone(),
        );
        self.write(move |tx| state::unlock(tx, &org, &stack, &request, &audit))
            .await
    }
}
