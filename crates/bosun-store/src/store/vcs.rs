//! The VCS part of the store contract: [`VcsStore`], one of the traits [`Store`](crate::Store)
//! is made of.

use async_trait::async_trait;

use crate::{
    Audit, DeliveryOutcome, DeliveryRecord, DeliverySource, GithubBinding, InstallationChange,
    NewDelivery, PollHead, Result, StackRecord, TriggerRecord, VcsTokenRecord,
};

/// VCS: stacks by repository, GitHub App bindings, deliveries and their decisions, VCS
/// tokens, and the poller's heads.
#[async_trait]
pub trait VcsStore: Send + Sync {
    /// Stacks of every org whose repository key (`Repository::key`) is `repository`,
    /// through an index on (repository key, branch); `branch: None` for every branch.
    async fn stacks_for_repository(
        &self,
        repository: &str,
        branch: Option<&str>,
    ) -> Result<Vec<StackRecord>>;
    /// Stacks of every org on plain git remotes (not `github:`), for the poller.
    async fn git_remote_stacks(&self) -> Result<Vec<StackRecord>>;
    /// Applies an installation change to the repository bindings, with its audit.
    async fn apply_installation(&self, change: &InstallationChange, audit: &Audit) -> Result<()>;
    /// The binding of `owner/repo` (any case), if an installation covers it.
    async fn github_binding(&self, repository: &str) -> Result<Option<GithubBinding>>;
    /// Records a delivery in one transaction: refuses nothing, but a guid seen before
    /// (same source) records a duplicate instead and applies none of the input. Otherwise
    /// creates the runs (with `delivery` set), cancels superseded proposed runs (through
    /// `run::transition`, each with a `run.cancel` audit by `system`), and writes the
    /// decisions.
    async fn record_delivery(&self, delivery: &NewDelivery) -> Result<DeliveryOutcome>;
    /// A delivery by source and guid (the first one, not its duplicates).
    async fn find_delivery(
        &self,
        source: DeliverySource,
        guid: &str,
    ) -> Result<Option<DeliveryRecord>>;
    /// A stack's trigger history, newest first, deliveries with id < `before`.
    async fn list_triggers(
        &self,
        org: &str,
        stack: &str,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<TriggerRecord>>;
    /// Keeps a VCS token handed to a run, to revoke it when the run ends.
    async fn add_vcs_token(&self, token: &VcsTokenRecord) -> Result<()>;
    /// Tokens whose run has ended (or that expired): due for revocation.
    async fn vcs_tokens_due(&self) -> Result<Vec<VcsTokenRecord>>;
    /// Forgets a token (revoked, or expired).
    async fn remove_vcs_token(&self, token: &str) -> Result<()>;
    /// The poller's last seen commit of a remote's branch.
    async fn poll_head(&self, repository: &str, branch: &str) -> Result<Option<PollHead>>;
    async fn set_poll_head(&self, head: &PollHead) -> Result<()>;
}
