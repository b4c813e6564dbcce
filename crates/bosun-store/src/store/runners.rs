//! The runners part of the store contract: [`RunnerStore`], one of the traits
//! [`Store`](crate::Store) is made of.

use async_trait::async_trait;

use crate::{Audit, KeyCursor, Result, RunnerRecord};

/// Runners: registered, seen, listed, drained, and which hold a lease now.
#[async_trait]
pub trait RunnerStore: Send + Sync {
    async fn register_runner(&self, runner: &RunnerRecord) -> Result<RunnerRecord>;
    async fn get_runner(&self, id: &str) -> Result<Option<RunnerRecord>>;
    async fn touch_runner(&self, id: &str) -> Result<()>;
    /// Runners of an org's pools and the server's hosted runners, in registration order
    /// (`created_at`, then id), after `after` (a runner's [`RunnerRecord::cursor`]), at
    /// most `limit`.
    async fn list_runners(
        &self,
        org: &str,
        after: Option<&KeyCursor>,
        limit: u32,
    ) -> Result<Vec<RunnerRecord>>;
    async fn drain_runner(&self, id: &str, audit: &Audit) -> Result<bool>;
    /// The runners holding a lease now, on a stack run or a plan run.
    async fn busy_runners(&self) -> Result<std::collections::BTreeSet<String>>;
}
