//! The GitHub feedback part of the store contract: [`FeedbackStore`], one of the traits
//! [`Store`](crate::Store) is made of.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::{CheckFeedback, DueCheck, DuePrComment, FeedbackRefusal, FeedbackReport, Result};

/// The outbox of feedback on GitHub. Its rows are written by the store itself, in the
/// transaction that changes a run (or records a pull request's delivery): a run of a
/// `github:` stack with a commit, tracked or proposed, whose stack (or org) wants
/// feedback, gets a check row. Each change of the run marks the row due — at once when
/// the run comes to rest (waiting for someone, or ended), a second later while it is
/// still moving, so quick successive changes are reported together — and a run's
/// creation and its coming to rest mark its pull request's comment row due too.
#[async_trait]
pub trait FeedbackStore: Send + Sync {
    /// Check rows due at `now` (a change not yet reported, or a retry fallen due),
    /// oldest due first, with their runs.
    async fn due_checks(&self, now: DateTime<Utc>, limit: u32) -> Result<Vec<DueCheck>>;
    /// Records a report of a run's check run. A success stores GitHub's id and the
    /// changes it showed (due again at once if the run changed meanwhile); a failure
    /// counts an attempt and is due again at `retry_at`, or never.
    async fn record_check_report(&self, run: &str, report: &FeedbackReport) -> Result<()>;
    /// Comment rows due at `now`, with what each shows.
    async fn due_pr_comments(&self, now: DateTime<Utc>, limit: u32) -> Result<Vec<DuePrComment>>;
    /// Records a report of a pull request's comment, like [`Self::record_check_report`].
    async fn record_pr_comment_report(
        &self,
        org: &str,
        repository: &str,
        pull_request: i64,
        report: &FeedbackReport,
    ) -> Result<()>;
    /// Records that the pull request's comment is about to be created.
    async fn mark_pr_comment_creating(
        &self,
        org: &str,
        repository: &str,
        pull_request: i64,
    ) -> Result<()>;
    /// The check rows of a commit of `owner/repo`, oldest first: what a re-run requested
    /// on GitHub starts again.
    async fn checks_of_commit(
        &self,
        repository: &str,
        head_sha: &str,
    ) -> Result<Vec<CheckFeedback>>;
    /// Records (or, with `None` message, clears) a refusal of a kind of feedback.
    async fn set_feedback_refusal(
        &self,
        repository: &str,
        kind: &str,
        refusal: Option<(&str, DateTime<Utc>)>,
    ) -> Result<()>;
    /// The refusals on record for `owner/repo`, by kind.
    async fn feedback_refusals(&self, repository: &str) -> Result<Vec<FeedbackRefusal>>;
}
