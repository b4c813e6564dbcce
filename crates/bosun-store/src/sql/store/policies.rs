//! [`PolicyStore`] for both backends: each method delegates to `sql/policies.rs`.

use super::super::*;

#[async_trait]
impl PolicyStore for db::Store {
    async fn put_policy(
        &self,
        org: &str,
        spec: &PolicySpec,
        version: &str,
        audit: &Audit,
    ) -> Result<(PolicyRecord, bool)> {
        let (org, spec, version, audit) = (
            org.to_string(),
            spec.clone(),
            version.to_string(),
            audit.clone(),
        );
        self.write(move |tx| policies::put(tx, &org, &spec, &version, &audit))
            .await
    }

    async fn get_policy(&self, org: &str, name: &str) -> Result<Option<PolicyRecord>> {
        let (org, name) = (org.to_string(), name.to_string());
        self.read(move |c| policies::get(c, &org, &name)).await
    }

    async fn list_policies(&self, org: &str) -> Result<Vec<PolicyRecord>> {
        let org = org.to_string();
        self.read(move |c| policies::list(c, &org)).await
    }

    async fn delete_policy(&self, org: &str, name: &str, audit: &Audit) -> Result<bool> {
        let (org, name, audit) = (org.to_string(), name.to_string(), audit.clone());
        self.write(move |tx| policies::delete(tx, &org, &name, &audit))
            .await
    }

    async fn policy_evaluations(&self, subject: &str) -> Result<Vec<PolicyEvaluationRecord>> {
        let subject = subject.to_string();
        self.read(move |c| policies::evaluations(c, &subject)).await
    }

    async fn override_run_policies(
        &self,
        org: &str,
        run: &str,
        by: &str,
        reason: &str,
        audit: &Audit,
    ) -> Result<RunEventResult> {
        let (org, run, by, reason, audit) = (
            org.to_string(),
            run.to_string(),
            by.to_string(),
            reason.to_string(),
            audit.clone(),
        );
        self.write(move |tx| policies::override_run(tx, &org, &run, &by, &reason, &audit))
            .await
    }

    async fn settle_plan_run_policies(
        &self,
        org: &str,
        run: &str,
        evaluations: &[NewPolicyEvaluation],
        overridden: Option<(&str, &str)>,
        reason: Option<&str>,
        audit: Option<&Audit>,
    ) -> Result<PlanRunRecord> {
        let (org, run, evaluations) = (org.to_string(), run.to_string(), evaluations.to_vec());
        let overridden = overridden.map(|(b, r)| (b.to_string(), r.to_string()));
        let (reason, audit) = (reason.map(str::to_string), audit.cloned());
        self.write(move |tx| {
            policies::settle_plan_run(
                tx,
                &org,
                &run,
                &evaluations,
                overridden.as_ref().map(|(b, r)| (b.as_str(), r.as_str())),
                reason.as_deref(),
                audit.as_ref(),
            )
        })
        .await
    }

    async fn record_policy_evaluations(
        &self,
        org: &str,
        subject: &str,
        evaluations: &[NewPolicyEvaluation],
    ) -> Result<()> {
        let (org, subject, evaluations) =
            (org.to_string(), subject.to_string(), evaluations.to_vec());
        self.write(move |tx| {
            policies::insert_evaluations(tx, &org, &subject, &evaluations, millis(Utc::now()))
        })
        .await
    }

    async fn put_run_plan_json(&self, run: &str, fencing: i64, body: &[u8]) -> Result<()> {
        let (id, body) = (run.to_string(), body.to_vec());
        self.write(move |tx| policies::put_plan_json(tx, &id, fencing, &body))
            .await
    }

    async fn get_run_plan_json(&self, run: &str) -> Result<Option<Vec<u8>>> {
        let id = run.to_string();
        self.read(move |c| policies::get_plan_json(c, &id)).await
    }
}
