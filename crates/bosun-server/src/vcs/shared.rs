//! The VCS side of the server's process state: the GitHub client, the repository
//! mirrors, and the webhook and feedback counters.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{github, mirror};

/// The VCS side of the server: the GitHub client, the mirrors and delivery counters.
pub struct Vcs {
    pub github: github::Github,
    pub mirrors: mirror::Mirrors,
    pub counters: Counters,
}

/// Webhook deliveries by outcome, for `/metrics` (refused ones are stored nowhere else),
/// and this process's feedback reports by kind and outcome.
#[derive(Default)]
pub struct Counters {
    pub accepted: AtomicU64,
    pub duplicate: AtomicU64,
    pub rejected: AtomicU64,
    pub feedback_checks: FeedbackCounters,
    pub feedback_comment: FeedbackCounters,
}

/// Reports of one kind of feedback (check runs, comments) by outcome.
#[derive(Default)]
pub struct FeedbackCounters {
    pub reported: AtomicU64,
    /// Failed for a rate limit: waited out.
    pub rate_limited: AtomicU64,
    /// Refused for a permission (or no installation): not tried again for a while.
    pub refused: AtomicU64,
    /// Failed otherwise: retried with backoff, or given up.
    pub failed: AtomicU64,
}

impl FeedbackCounters {
    pub const OUTCOMES: [&'static str; 4] = ["reported", "rate_limited", "refused", "failed"];

    pub fn get(&self, outcome: &str) -> &AtomicU64 {
        match outcome {
            "reported" => &self.reported,
            "rate_limited" => &self.rate_limited,
            "refused" => &self.refused,
            _ => &self.failed,
        }
    }
}

impl Counters {
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The feedback counters of `kind` (`checks` or `comment`).
    pub fn feedback(&self, kind: &str) -> &FeedbackCounters {
        match kind {
            "checks" => &self.feedback_checks,
            _ => &self.feedback_comment,
        }
    }
}

impl Vcs {
    pub fn new(config: &crate::config::ServerConfig) -> Result<Self, github::GithubError> {
        Ok(Vcs {
            github: github::Github::new(&config.vcs)?,
            mirrors: mirror::Mirrors::new(config.data_dir.join("mirrors")),
            counters: Counters::default(),
        })
    }
}
