//! [`NotificationStore`] for both backends: each method delegates to `sql/notify.rs`.

use super::super::*;

#[async_trait]
impl NotificationStore for db::Store {
    async fn create_notification_target(
        &self,
        t: &NewNotificationTarget,
        audit: &Audit,
    ) -> Result<NotificationTargetRecord> {
        let (t, audit) = (t.clone(), audit.clone());
        self.write(move |tx| notify::create_target(tx, &t, &audit))
            .await
    }

    async fn update_notification_target(
        &self,
        t: &NewNotificationTarget,
        audit: &Audit,
    ) -> Result<NotificationTargetRecord> {
        let (t, audit) = (t.clone(), audit.clone());
        self.write(move |tx| notify::update_target(tx, &t, &audit))
            .await
    }

    async fn get_notification_target(
        &self,
        org: &str,
        id: &str,
    ) -> Result<Option<NotificationTargetRecord>> {
        let (org, id) = (org.to_string(), id.to_string());
        self.read(move |c| notify::load_target(c, &org, &id)).await
    }

    async fn list_notification_targets(&self, org: &str) -> Result<Vec<NotificationTargetRecord>> {
        let org = org.to_string();
        self.read(move |c| notify::list_targets(c, &org)).await
    }

    async fn delete_notification_target(&self, org: &str, id: &str, audit: &Audit) -> Result<bool> {
        let (org, id, audit) = (org.to_string(), id.to_string(), audit.clone());
        self.write(move |tx| notify::delete_target(tx, &org, &id, &audit))
            .await
    }

    async fn add_notification_event(
        &self,
        org: &str,
        event: &NewNotificationEvent,
    ) -> Result<Option<i64>> {
        let (org, event) = (org.to_string(), event.clone());
        self.write(move |tx| notify::add_event(tx, &org, &event))
            .await
    }

    async fn notify_old_locks(&self, acquired_before: DateTime<Utc>) -> Result<u64> {
        // Most passes find nothing: look without the write lock first.
        if !self
            .read(move |c| notify::any_old_locks(c, acquired_before))
            .await?
        {
            return Ok(0);
        }
        self.write(move |tx| notify::write_old_locks(tx, acquired_before))
            .await
    }

    async fn due_notifications(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<DueNotification>> {
        self.read(move |c| notify::due(c, now, limit)).await
    }

    async fn record_notification_attempt(
        &self,
        delivery: i64,
        attempt: &NotificationAttempt,
    ) -> Result<()> {
        let a = attempt.clone();
        self.write(move |tx| notify::record_attempt(tx, delivery, &a))
            .await
    }

    async fn list_notification_deliveries(
        &self,
        org: &str,
        target: &str,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<NotificationDeliveryRecord>> {
        let (org, target) = (org.to_string(), target.to_string());
        self.read(move |c| notify::list_deliveries(c, &org, &target, before, limit))
            .await
    }

    async fn prune_notifications(&self, before: DateTime<Utc>, batch: u32) -> Result<(u64, u64)> {
        // `batch` rows per write transaction, so a large backlog never holds the write lock
        // for long.
        let (before, batch) = (millis(before), batch.max(1));
        let mut deliveries = 0;
        loop {
            let n = self
                .write(move |tx| notify::prune_deliveries(tx, before, batch))
                .await?;
            deliveries += n;
            if n < u64::from(batch) {
                break;
            }
        }
        let mut events = 0;
        loop {
            let n = self
                .write(move |tx| notify::prune_events(tx, before, batch))
                .await?;
            events += n;
            if n < u64::from(batch) {
                break;
            }
        }
        Ok((deliveries, events))
    }
}
