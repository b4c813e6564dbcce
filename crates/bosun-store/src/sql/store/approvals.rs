//! [`ApprovalStore`] for both backends: each method delegates to `sql/approvals.rs`.

use super::super::*;

#[async_trait]
impl ApprovalStore for db::Store {
    async fn pending_approvals(
        &self,
        org: &str,
        after: Option<&KeyCursor>,
        limit: u32,
    ) -> Result<Vec<PendingApproval>> {
        let (org, after) = (org.to_string(), after.cloned());
        self.read(move |c| approvals::pending(c, &org, after.as_ref(), limit))
            .await
    }

    async fn pending_approval(&self, org: &str, subject: &str) -> Result<PendingApproval> {
        let (org, subject) = (org.to_string(), subject.to_string());
        self.read(move |c| approvals::pending_one(c, &org, &subject))
            .await
    }

    async fn decide_approval(
        &self,
        input: &ApprovalDecisionInput,
    ) -> Result<(ApprovalRecord, ApprovalOutcome)> {
        let input = input.clone();
        self.write(move |tx| approvals::decide(tx, &input)).await
    }

    async fn approval_decisions(
        &self,
        org: &str,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<ApprovalRecord>> {
        let (org, before) = (org.to_string(), before.map(str::to_string));
        self.read(move |c| approvals::decisions(c, &org, before.as_deref(), limit))
            .await
    }

    async fn put_plan_schedule(
        &self,
        input: &PlanScheduleInput,
        audit: &Audit,
    ) -> Result<PlanScheduleRecord> {
        let (input, audit) = (input.clone(), audit.clone());
        self.write(move |tx| approvals::put_schedule(tx, &input, &audit))
            .await
    }

    async fn delete_plan_schedule(&self, org: &str, plan: &str, audit: &Audit) -> Result<bool> {
        let (org, plan, audit) = (org.to_string(), plan.to_string(), audit.clone());
        self.write(move |tx| approvals::delete_schedule(tx, &org, &plan, &audit))
            .await
    }

    async fn plan_schedules(
        &self,
        org: Option<&str>,
        plan: Option<&str>,
    ) -> Result<Vec<PlanScheduleRecord>> {
        let (org, plan) = (org.map(str::to_string), plan.map(str::to_string));
        self.read(move |c| approvals::schedules(c, org.as_deref(), plan.as_deref()))
            .await
    }

    async fn fire_plan_schedule(&self, fire: &PlanScheduleFire) -> Result<PlanScheduleFired> {
        let fire = fire.clone();
        self.write(move |tx| approvals::fire(tx, &fire)).await
    }
}
