//! [`DriftStore`] for both backends: each method delegates to `sql/drift.rs`.

use super::super::*;

#[async_trait]
impl DriftStore for db::Store {
    async fn drift_schedules(
        &self,
        org: Option<&str>,
        stack: Option<&str>,
    ) -> Result<Vec<DriftScheduleRecord>> {
        let (org, stack) = (org.map(str::to_string), stack.map(str::to_string));
        self.read(move |c| drift::schedules(c, org.as_deref(), stack.as_deref()))
            .await
    }

    async fn drift_schedules_due(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<DriftScheduleRecord>> {
        self.read(move |c| drift::due(c, millis(now), limit)).await
    }

    async fn drift_arming(&self, limit: u32) -> Result<Vec<DriftArming>> {
        self.read(move |c| drift::arming(c, limit)).await
    }

    async fn drift_armed(&self, tickets: &[DriftArming]) -> Result<()> {
        if tickets.is_empty() {
            return Ok(());
        }
        let tickets = tickets.to_vec();
        self.write(move |tx| drift::armed(tx, &tickets)).await
    }

    async fn drift_dashboard(
        &self,
        org: &str,
        after: Option<&KeyCursor>,
        limit: u32,
    ) -> Result<Vec<DriftScheduleRecord>> {
        let (org, after) = (org.to_string(), after.cloned());
        self.read(move |c| drift::dashboard(c, &org, after.as_ref(), limit))
            .await
    }

    async fn stale_drift_checks(&self, now: DateTime<Utc>, limit: u32) -> Result<StaleDriftChecks> {
        self.read(move |c| drift::stale_checks(c, millis(now), limit))
            .await
    }

    async fn count_stale_drift(&self, org: &str, now: DateTime<Utc>, cap: u32) -> Result<u64> {
        let org = org.to_string();
        self.read(move |c| drift::count_stale(c, &org, millis(now), cap))
            .await
    }

    async fn drift_alerts_due(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<DriftScheduleRecord>> {
        self.read(move |c| drift::alerts_due(c, millis(now), limit))
            .await
    }

    async fn drift_alert_raised(&self, org: &str, stack: &str, alert_at: i64) -> Result<()> {
        let (org, stack) = (org.to_string(), stack.to_string());
        self.write(move |tx| drift::alert_raised(tx, &org, &stack, alert_at))
            .await
    }

    async fn fill_drift_stale_at(&self, limit: u32) -> Result<usize> {
        self.write(move |tx| drift::fill_stale_at(tx, limit)).await
    }

    async fn fire_drift_schedule(&self, fire: &DriftFire) -> Result<DriftFired> {
        let fire = fire.clone();
        self.write(move |tx| drift::fire(tx, &fire)).await
    }

    async fn start_drift_check(&self, run: &NewRun, audit: &Audit) -> Result<RunRecord> {
        let (run, audit) = (run.clone(), audit.clone());
        self.write(move |tx| drift::start_check(tx, &run, &audit))
            .await
    }

    async fn unsettled_drift_runs(&self, limit: u32) -> Result<Vec<RunRecord>> {
        self.read(move |c| drift::unsettled(c, limit)).await
    }

    async fn settle_drift_run(
        &self,
        run: &str,
        result: bosun_core::drift::DriftResult,
        reconcile: Option<&NewRun>,
    ) -> Result<Option<DriftCheckRecord>> {
        let (run, reconcile) = (run.to_string(), reconcile.cloned());
        self.write(move |tx| drift::settle(tx, &run, result, reconcile.as_ref()))
            .await
    }

    async fn drift_check(&self, run: &str) -> Result<Option<DriftCheckRecord>> {
        let run = run.to_string();
        self.read(move |c| drift::check(c, &run)).await
    }
}
