//! [`VcsStore`] for both backends: each method delegates to `sql/vcs.rs`.

use super::super::*;

#[async_trait]
impl VcsStore for db::Store {
    async fn stacks_for_repository(
        &self,
        repository: &str,
        branch: Option<&str>,
    ) -> Result<Vec<StackRecord>> {
        let (repository, branch) = (repository.to_string(), branch.map(str::to_string));
        self.read(move |c| vcs::stacks_for_repository(c, &repository, branch.as_deref()))
            .await
    }

    async fn git_remote_stacks(&self) -> Result<Vec<StackRecord>> {
        self.read(vcs::git_remote_stacks).await
    }

    async fn apply_installation(&self, change: &InstallationChange, audit: &Audit) -> Result<()> {
        let (change, audit) = (change.clone(), audit.clone());
        self.write(move |tx| vcs::apply_installation(tx, &change, &audit))
            .await
    }

    async fn github_binding(&self, repository: &str) -> Result<Option<GithubBinding>> {
        let repository = repository.to_string();
        self.read(move |c| vcs::binding(c, &repository)).await
    }

    async fn record_delivery(&self, delivery: &NewDelivery) -> Result<DeliveryOutcome> {
        let delivery = delivery.clone();
        self.write(move |tx| vcs::record_delivery(tx, &delivery))
            .await
    }

    async fn find_delivery(
        &self,
        source: DeliverySource,
        guid: &str,
    ) -> Result<Option<DeliveryRecord>> {
        let guid = guid.to_string();
        self.read(move |c| vcs::find_delivery(c, source, &guid))
            .await
    }

    async fn list_triggers(
        &self,
        org: &str,
        stack: &str,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<TriggerRecord>> {
        let (org, stack) = (org.to_string(), stack.to_string());
        self.read(move |c| vcs::triggers(c, &org, &stack, before, limit))
            .await
    }

    async fn add_vcs_token(&self, token: &VcsTokenRecord) -> Result<()> {
        let token = token.clone();
        self.write(move |tx| vcs::add_token(tx, &token)).await
    }

    async fn vcs_tokens_due(&self) -> Result<Vec<VcsTokenRecord>> {
        self.read(vcs::tokens_due).await
    }

    async fn remove_vcs_token(&self, token: &str) -> Result<()> {
        let token = token.to_string();
        self.write(move |tx| vcs::remove_token(tx, &token)).await
    }

    async fn poll_head(&self, repository: &str, branch: &str) -> Result<Option<PollHead>> {
        let (repository, branch) = (repository.to_string(), branch.to_string());
        self.read(move |c| vcs::poll_head(c, &repository, &branch))
            .await
    }

    async fn set_poll_head(&self, head: &PollHead) -> Result<()> {
        let head = head.clone();
        self.write(move |tx| vcs::set_poll_head(tx, &head)).await
    }
}
