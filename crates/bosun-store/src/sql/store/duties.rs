//! [`DutyStore`] for both backends: each method delegates to `sql/duties.rs`.

use super::super::*;

#[async_trait]
impl DutyStore for db::Store {
    async fn try_duty_lease(
        &self,
        duty: &str,
        holder: &str,
        now: DateTime<Utc>,
        ttl: Duration,
    ) -> Result<bool> {
        let (duty, holder) = (duty.to_string(), holder.to_string());
        self.write(move |tx| duties::try_lease(tx, &duty, &holder, now, ttl))
            .await
    }

    async fn release_duty_leases(&self, holder: &str) -> Result<u64> {
        let holder = holder.to_string();
        self.write(move |tx| duties::release(tx, &holder)).await
    }
}
