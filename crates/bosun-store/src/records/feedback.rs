//! Feedback on GitHub: the outbox rows of what Bosun owes GitHub — a run's check run and
//! a pull request's comment — and the outcome of one report.

use chrono::{DateTime, Utc};

use crate::RunRecord;

/// A run's check run as the outbox keeps it: reported while `changes > synced`.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckFeedback {
    pub run_id: String,
    pub org: String,
    pub stack: String,
    /// `owner/repo`, lower case.
    pub repository: String,
    pub head_sha: String,
    pub pull_request: Option<i64>,
    /// A check run is posted for this run.
    pub checks: bool,
    /// The pull request's comment lists this run.
    pub comment: bool,
    /// GitHub's id of the check run, once created.
    pub check_run_id: Option<i64>,
    /// Bumped by every change of the run.
    pub changes: i64,
    /// The `changes` the last successful report showed.
    pub synced: i64,
    /// Failed attempts since the last success.
    pub attempts: i64,
    /// `None`: nothing due (reported, or given up).
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// A check run due, with its run as it is now.
#[derive(Debug, Clone, PartialEq)]
pub struct DueCheck {
    pub check: CheckFeedback,
    pub run: RunRecord,
}

/// A pull request's comment (one per org) as the outbox keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct PrCommentFeedback {
    pub org: String,
    /// `owner/repo`, lower case.
    pub repository: String,
    pub pull_request: i64,
    /// The pull request's latest delivery: its decisions name the stacks not triggered.
    pub delivery_id: Option<i64>,
    /// GitHub's id of the comment, once found or created.
    pub comment_id: Option<i64>,
    pub changes: i64,
    pub synced: i64,
    pub attempts: i64,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    /// A create was attempted: its answer may have been lost, so the comment is looked
    /// for by its marker before another is created.
    pub create_started: bool,
}

/// A comment due, with what it shows: the latest run of each stack the pull request
/// touched (by stack id), and the stacks its latest delivery did not trigger, with why.
#[derive(Debug, Clone, PartialEq)]
pub struct DuePrComment {
    pub comment: PrCommentFeedback,
    pub runs: Vec<RunRecord>,
    /// `(stack, reason)`, by stack id.
    pub not_triggered: Vec<(String, String)>,
}

/// The outcome of reporting one check run or comment.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedbackReport {
    /// The `changes` the report showed (read with the row).
    pub changes: i64,
    /// GitHub's id of what was created or updated.
    pub remote_id: Option<i64>,
    /// Why it failed; `None`: reported.
    pub error: Option<String>,
    /// When to try again after a failure; `None` with an error: given up.
    pub retry_at: Option<DateTime<Utc>>,
}

impl FeedbackReport {
    pub fn reported(changes: i64, remote_id: i64) -> FeedbackReport {
        FeedbackReport {
            changes,
            remote_id: Some(remote_id),
            error: None,
            retry_at: None,
        }
    }

    pub fn failed(changes: i64, error: String, retry_at: Option<DateTime<Utc>>) -> FeedbackReport {
        FeedbackReport {
            changes,
            remote_id: None,
            error: Some(error),
            retry_at,
        }
    }
}

/// A kind of feedback (`checks`, `comment`) a repository's installation refused for
/// want of a permission: not tried again before `until`.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedbackRefusal {
    pub repository: String,
    pub kind: String,
    pub message: String,
    pub until: DateTime<Utc>,
}
