//! The database part of the store contract: [`DatabaseStore`], one of the traits
//! [`Store`](crate::Store) is made of.

use async_trait::async_trait;

use crate::Result;

/// The database behind a store: its schema version, whether it answers and writes now,
/// and closing it.
#[async_trait]
pub trait DatabaseStore: Send + Sync {
    /// The schema version the database is at.
    async fn schema_version(&self) -> Result<i64>;
    /// Checks the database answers (for `/readyz`).
    async fn ping(&self) -> Result<()>;
    /// When a call of this store last failed with [`StoreError::Unavailable`] (`None`:
    /// never, in this process). The stale sweep counts a run's silence from then at the
    /// earliest: heartbeats the store could not keep are not a runner's silence.
    ///
    /// [`StoreError::Unavailable`]: crate::StoreError::Unavailable
    fn last_unavailable(&self) -> Option<chrono::DateTime<chrono::Utc>>;
    /// Why writes fail now: the reason of the last write that failed with
    /// [`StoreError::Unavailable`], while none has committed since (`None` otherwise).
    /// A full disk still reads, so `/readyz` asks this besides [`Store::ping`].
    ///
    /// [`StoreError::Unavailable`]: crate::StoreError::Unavailable
    /// [`Store::ping`]: DatabaseStore::ping
    fn write_fault(&self) -> Option<String>;
    /// Finishes pending work and closes every connection.
    async fn close(&self);
}
