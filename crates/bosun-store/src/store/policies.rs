//! The policies part of the store contract: [`PolicyStore`], one of the traits
//! [`Store`](crate::Store) is made of.

use async_trait::async_trait;

use crate::{
    Audit, NewPolicyEvaluation, PlanRunRecord, PolicyEvaluationRecord, PolicyRecord, PolicySpec,
    Result, RunEventResult,
};

/// Policies as code: an org's policies, their evaluations on runs, overrides, and the
/// plan JSON a runner uploads for them.
#[async_trait]
pub trait PolicyStore: Send + Sync {
    /// Creates or replaces a policy (audited); true when it was created.
    async fn put_policy(
        &self,
        org: &str,
        spec: &PolicySpec,
        version: &str,
        audit: &Audit,
    ) -> Result<(PolicyRecord, bool)>;
    async fn get_policy(&self, org: &str, name: &str) -> Result<Option<PolicyRecord>>;
    /// The org's policies, by name.
    async fn list_policies(&self, org: &str) -> Result<Vec<PolicyRecord>>;
    /// Deletes a policy (audited); false when there was none. Its recorded evaluations
    /// stay on their runs.
    async fn delete_policy(&self, org: &str, name: &str, audit: &Audit) -> Result<bool>;
    /// The evaluations recorded on a run (stack run or plan run), oldest first.
    async fn policy_evaluations(&self, subject: &str) -> Result<Vec<PolicyEvaluationRecord>>;
    /// An org admin overrides the soft-mandatory denies holding run `run`: they are marked
    /// overridden and the run moves on (`Event::PolicyOverride`) in one transaction with
    /// `audit`.
    async fn override_run_policies(
        &self,
        org: &str,
        run: &str,
        by: &str,
        reason: &str,
        audit: &Audit,
    ) -> Result<RunEventResult>;
    /// Settles a paused plan run held by its policies: records `evaluations` (made on its
    /// dry run), or marks its soft-mandatory denies overridden (`overridden`: by, reason),
    /// then moves it as the verdict says (rejected, held, left for its approver, or
    /// queued) in one transaction with `audit`.
    async fn settle_plan_run_policies(
        &self,
        org: &str,
        run: &str,
        evaluations: &[NewPolicyEvaluation],
        overridden: Option<(&str, &str)>,
        reason: Option<&str>,
        audit: Option<&Audit>,
    ) -> Result<PlanRunRecord>;
    /// Records evaluations on `subject` (a run) that move nothing (the `approval` point's).
    async fn record_policy_evaluations(
        &self,
        org: &str,
        subject: &str,
        evaluations: &[NewPolicyEvaluation],
    ) -> Result<()>;
    /// Saves the plan's JSON (`show -json`) of the leased plan phase `fencing`.
    async fn put_run_plan_json(&self, run: &str, fencing: i64, body: &[u8]) -> Result<()>;
    /// The plan JSON uploaded for a run's plan, until the plan is reported.
    async fn get_run_plan_json(&self, run: &str) -> Result<Option<Vec<u8>>>;
}
