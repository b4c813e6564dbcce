//! The notifications part of the store contract: [`NotificationStore`], one of the traits
//! [`Store`](crate::Store) is made of.

use async_trait::async_trait;

use crate::{
    Audit, DueNotification, NewNotificationEvent, NewNotificationTarget, NotificationAttempt,
    NotificationDeliveryRecord, NotificationTargetRecord, Result,
};

/// Notifications: targets, the outbox of events and their deliveries, and retention.
#[async_trait]
pub trait NotificationStore: Send + Sync {
    /// Creates a target (`AlreadyExists` for a taken id), with its audit.
    async fn create_notification_target(
        &self,
        target: &NewNotificationTarget,
        audit: &Audit,
    ) -> Result<NotificationTargetRecord>;
    /// Replaces a target's url, rules and enabled flag, and its secret when one is given.
    async fn update_notification_target(
        &self,
        target: &NewNotificationTarget,
        audit: &Audit,
    ) -> Result<NotificationTargetRecord>;
    async fn get_notification_target(
        &self,
        org: &str,
        id: &str,
    ) -> Result<Option<NotificationTargetRecord>>;
    /// The org's targets by id.
    async fn list_notification_targets(&self, org: &str) -> Result<Vec<NotificationTargetRecord>>;
    /// Deletes a target and its delivery log; false when there was none.
    async fn delete_notification_target(&self, org: &str, id: &str, audit: &Audit) -> Result<bool>;
    /// Writes an event to the outbox and, in the same transaction, one delivery for each
    /// enabled target of the org whose rules select it (or for `only_target` alone).
    /// Returns the event id; `None` when its dedup key was already recorded. Run endings,
    /// late writes and old locks are written by the store itself; other causes (stale
    /// drift checks, tests) call this.
    async fn add_notification_event(
        &self,
        org: &str,
        event: &NewNotificationEvent,
    ) -> Result<Option<i64>>;
    /// Writes one `old_lock` event per state lock acquired before `acquired_before`, once
    /// per lock id. Returns how many it wrote.
    async fn notify_old_locks(&self, acquired_before: chrono::DateTime<chrono::Utc>)
        -> Result<u64>;
    /// Deliveries whose next attempt is due at `now`, oldest first, with their targets.
    async fn due_notifications(
        &self,
        now: chrono::DateTime<chrono::Utc>,
        limit: u32,
    ) -> Result<Vec<DueNotification>>;
    /// Records one attempt of a delivery: delivered, to retry at a time, or given up.
    async fn record_notification_attempt(
        &self,
        delivery: i64,
        attempt: &NotificationAttempt,
    ) -> Result<()>;
    /// A target's delivery log, newest first, ids below `before`.
    async fn list_notification_deliveries(
        &self,
        org: &str,
        target: &str,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<NotificationDeliveryRecord>>;
    /// Retention: deletes settled deliveries (delivered or given up) created before
    /// `before`, then events created before it that have no delivery left (but not the
    /// `old_lock` event of a lock still held), `batch` rows per write transaction.
    /// Pending deliveries are never deleted. Returns (deliveries, events) deleted.
    async fn prune_notifications(
        &self,
        before: chrono::DateTime<chrono::Utc>,
        batch: u32,
    ) -> Result<(u64, u64)>;
}
