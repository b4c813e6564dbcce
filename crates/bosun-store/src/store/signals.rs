//! The signals part of the store contract: [`SignalStore`], one of the traits
//! [`Store`](crate::Store) is made of.

use async_trait::async_trait;

use crate::Signal;

/// Signals between store instances (replicas included): publishing and subscribing.
#[async_trait]
pub trait SignalStore: Send + Sync {
    /// Publishes a signal to every subscriber of every store instance on this database
    /// (other replicas included): at once locally, and on PostgreSQL through `NOTIFY`.
    /// Write calls publish their own changes' signals when they commit (`Run(id)` for a
    /// run's or plan run's logs and state, `Notification` for new deliveries); callers
    /// publish what the store cannot know (`Dispatch`). Never fails: a lost signal costs
    /// only latency, since every waiter also polls.
    fn publish(&self, signal: Signal);
    /// Signals from now on, this instance's and (PostgreSQL) other instances'; a
    /// subscriber that falls behind gets [`Signal::Resync`] from [`signal::next`].
    ///
    /// [`signal::next`]: crate::signal::next
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Signal>;
}
