//! The duty leases part of the store contract: [`DutyStore`], one of the traits
//! [`Store`](crate::Store) is made of.

use async_trait::async_trait;

use crate::Result;

/// Duty leases: one background duty's pass at a time across replicas.
#[async_trait]
pub trait DutyStore: Send + Sync {
    /// Takes `duty`'s lease for `holder` until `now + ttl` when it is free or expired at
    /// `now`, renews it when `holder` already holds it, and refuses (false) while another
    /// holder's lease is live — one compare-and-set in a write transaction.
    async fn try_duty_lease(
        &self,
        duty: &str,
        holder: &str,
        now: chrono::DateTime<chrono::Utc>,
        ttl: std::time::Duration,
    ) -> Result<bool>;
    /// Gives up every duty lease `holder` holds (a replica shutting down), so other
    /// replicas take the duties at once; returns how many.
    async fn release_duty_leases(&self, holder: &str) -> Result<u64>;
}
