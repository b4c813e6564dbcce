//! [`FeedbackStore`] for both backends: each method delegates to `sql/feedback.rs`.

use super::super::*;

#[async_trait]
impl FeedbackStore for db::Store {
    async fn due_checks(&self, now: DateTime<Utc>, limit: u32) -> Result<Vec<DueCheck>> {
        self.read(move |c| feedback::due_checks(c, now, limit))
            .await
    }

    async fn record_check_report(&self, run: &str, report: &FeedbackReport) -> Result<()> {
        let (run, report) = (run.to_string(), report.clone());
        self.write(move |tx| feedback::record_check(tx, &run, &report))
            .await
    }

    async fn due_pr_comments(&self, now: DateTime<Utc>, limit: u32) -> Result<Vec<DuePrComment>> {
        self.read(move |c| feedback::due_comments(c, now, limit))
            .await
    }

    async fn record_pr_comment_report(
        &self,
        org: &str,
        repository: &str,
        pull_request: i64,
        report: &FeedbackReport,
    ) -> Result<()> {
        let (org, repository, report) = (org.to_string(), repository.to_string(), report.clone());
        self.write(move |tx| feedback::record_comment(tx, &org, &repository, pull_request, &report))
            .await
    }

    async fn mark_pr_comment_creating(
        &self,
        org: &str,
        repository: &str,
        pull_request: i64,
    ) -> Result<()> {
        let (org, repository) = (org.to_string(), repository.to_string());
        self.write(move |tx| feedback::comment_creating(tx, &org, &repository, pull_request))
            .await
    }

    async fn checks_of_commit(
        &self,
        repository: &str,
        head_sha: &str,
    ) -> Result<Vec<CheckFeedback>> {
        let (repository, head_sha) = (repository.to_string(), head_sha.to_string());
        self.read(move |c| feedback::checks_of_commit(c, &repository, &head_sha))
            .await
    }

    async fn set_feedback_refusal(
        &self,
        repository: &str,
        kind: &str,
        refusal: Option<(&str, DateTime<Utc>)>,
    ) -> Result<()> {
        let (repository, kind) = (repository.to_string(), kind.to_string());
        let refusal = refusal.map(|(m, at)| (m.to_string(), at));
        self.write(move |tx| {
            feedback::set_refusal(
                tx,
                &repository,
                &kind,
                refusal.as_ref().map(|(m, at)| (m.as_str(), *at)),
            )
        })
        .await
    }

    async fn feedback_refusals(&self, repository: &str) -> Result<Vec<FeedbackRefusal>> {
        let repository = repository.to_string();
        self.read(move |c| feedback::refusals(c, &repository)).await
    }
}
