//! The approvals and plan schedules part of the store contract: [`ApprovalStore`], one of
//! the traits [`Store`](crate::Store) is made of.

use async_trait::async_trait;

use crate::{
    ApprovalDecisionInput, ApprovalOutcome, ApprovalRecord, Audit, KeyCursor, PendingApproval,
    PlanScheduleFire, PlanScheduleFired, PlanScheduleInput, PlanScheduleRecord, Result,
};

/// The approvals inbox and plan schedules.
#[async_trait]
pub trait ApprovalStore: Send + Sync {
    /// Runs of `org` waiting for an approval, oldest first (by creation, then id): paused
    /// plan runs, and tracked stack runs in `unconfirmed` whose stack's environment
    /// requires approval — at most `limit`, those after `after`.
    async fn pending_approvals(
        &self,
        org: &str,
        after: Option<&KeyCursor>,
        limit: u32,
    ) -> Result<Vec<PendingApproval>>;
    /// One waiting run; `NotFound` for a run the org does not have, `NotAwaitingApproval`
    /// (saying why) for one that does not wait.
    async fn pending_approval(&self, org: &str, subject: &str) -> Result<PendingApproval>;
    /// Decides a waiting run: approve (a plan run → `queued`, a stack run confirmed) or
    /// reject (a plan run → `rejected`, a stack run discarded, with the reason), the
    /// decision and `input.audit` written in the same transaction.
    async fn decide_approval(
        &self,
        input: &ApprovalDecisionInput,
    ) -> Result<(ApprovalRecord, ApprovalOutcome)>;
    /// Recorded decisions, newest first: at most `limit`, those decided before the
    /// decision on run `before` (the previous page's last). `NotFound` when `before` is
    /// no decision of the org, so a bad cursor is never taken for the first page.
    async fn approval_decisions(
        &self,
        org: &str,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<ApprovalRecord>>;
    /// Sets a plan's schedule (`NotFound` for an unknown plan).
    async fn put_plan_schedule(
        &self,
        input: &PlanScheduleInput,
        audit: &Audit,
    ) -> Result<PlanScheduleRecord>;
    /// Removes a plan's schedule; false when it had none.
    async fn delete_plan_schedule(&self, org: &str, plan: &str, audit: &Audit) -> Result<bool>;
    async fn plan_schedules(
        &self,
        org: Option<&str>,
        plan: Option<&str>,
    ) -> Result<Vec<PlanScheduleRecord>>;
    /// Arms a schedule or fires it (creating the run in the same transaction, or recording
    /// why none was created), only while its `next_at` is still `fire.expected_next`.
    async fn fire_plan_schedule(&self, fire: &PlanScheduleFire) -> Result<PlanScheduleFired>;
}
