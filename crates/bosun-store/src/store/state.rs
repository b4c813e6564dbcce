//! The state part of the store contract: [`StateStore`], one of the traits [`Store`](crate::Store)
//! is made of.

use async_trait::async_trait;

use crate::{Audit, NewStateVersion, Result, StateHead, StateVersionMeta};

/// Terraform state: versions, the current head, writes judged against the lock, and
/// locking.
#[async_trait]
pub trait StateStore: Send + Sync {
    /// The current version and lock of a stack's state (both empty when it has none).
    async fn state_head(&self, org: &str, stack: &str) -> Result<StateHead>;
    /// A version with its body; `None` for the current one.
    async fn state_version(
        &self,
        org: &str,
        stack: &str,
        version: Option<i64>,
    ) -> Result<Option<(StateVersionMeta, Vec<u8>)>>;
    /// Versions, newest first, strictly before `before`, at most `limit`.
    async fn list_state_versions(
        &self,
        org: &str,
        stack: &str,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<StateVersionMeta>>;
    /// Stores a new version in one transaction, judged by
    /// [`bosun_core::state::decide_write`] against the lock and current version held at
    /// that moment. `audit` is written with it when given (forced and late writes).
    async fn write_state(
        &self,
        org: &str,
        stack: &str,
        new: &NewStateVersion,
        audit: Option<&Audit>,
    ) -> Result<StateVersionMeta>;
    /// Takes the lock, or fails with `StateLocked` and the holder.
    async fn lock_state(
        &self,
        org: &str,
        stack: &str,
        lock: &bosun_core::state::Lock,
    ) -> Result<()>;
    /// Releases the lock as [`bosun_core::state::decide_unlock`] decides; a forced release
    /// writes `audit` (with the released lock added to its detail).
    async fn unlock_state(
        &self,
        org: &str,
        stack: &str,
        request: &bosun_core::state::UnlockRequest,
        audit: &Audit,
    ) -> Result<bosun_core::state::UnlockDecision>;
}
