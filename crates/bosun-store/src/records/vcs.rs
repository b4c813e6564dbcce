//! VCS: GitHub App bindings, webhook deliveries and their decisions, VCS tokens, polling.

use chrono::{DateTime, Utc};

use crate::{NewRun, RunRecord};

/// A change to the GitHub App's installations, as its webhooks report it.
#[derive(Debug, Clone, PartialEq)]
pub enum InstallationChange {
    /// `installation.created` (or a re-sync): the installation and all its repositories
    /// (`owner/repo`, any case), replacing what was known of it.
    Created {
        installation: i64,
        account: String,
        repositories: Vec<String>,
    },
    /// `installation.deleted`: every binding of it goes.
    Deleted { installation: i64 },
    /// `installation.suspend` / `unsuspend`: its repositories read as not connected while
    /// suspended.
    Suspended { installation: i64, suspended: bool },
    /// `installation_repositories.added`.
    RepositoriesAdded {
        installation: i64,
        account: String,
        repositories: Vec<String>,
    },
    /// `installation_repositories.removed`.
    RepositoriesRemoved {
        installation: i64,
        repositories: Vec<String>,
    },
}

/// Which installation of the GitHub App covers a repository.
#[derive(Debug, Clone, PartialEq)]
pub struct GithubBinding {
    /// `owner/repo` in lower case.
    pub repository: String,
    pub installation: i64,
    pub account: String,
    pub suspended: bool,
    pub updated_at: DateTime<Utc>,
}

/// Where a delivery came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliverySource {
    /// A GitHub webhook (`guid` is `X-GitHub-Delivery`).
    Github,
    /// The git poller saw a branch move (`guid` is generated).
    Poll,
}

impl DeliverySource {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliverySource::Github => "github",
            DeliverySource::Poll => "poll",
        }
    }
}

/// The verdict on one stack for one delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct TriggerDecision {
    pub org: String,
    pub stack: String,
    /// The run it started, when it started one (must be one of the delivery's `runs`).
    pub run_id: Option<String>,
    /// Why it triggered (the first matching changed file) or why not.
    pub reason: String,
}

/// Proposed runs to cancel in the same transaction: the older runs of a pull request
/// (superseded by a newer commit, or the pull request closed).
#[derive(Debug, Clone, PartialEq)]
pub struct CancelProposed {
    /// Stacks (org, stack) whose proposed runs of this pull request are canceled.
    pub stacks: Vec<(String, String)>,
    pub pull_request: i64,
    /// Recorded as the canceled runs' reason.
    pub reason: String,
}

/// A delivery with everything decided about it, recorded in one transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct NewDelivery {
    pub source: DeliverySource,
    pub guid: String,
    /// `push`, `pull_request`, `ping`, `installation`, …, or `poll`.
    pub event: String,
    pub action: Option<String>,
    /// The repository key (`github:owner/repo` lower case, or a git URL).
    pub repository: Option<String>,
    pub git_ref: Option<String>,
    pub before: Option<String>,
    pub after: Option<String>,
    pub pull_request: Option<i64>,
    /// One line for people: what the delivery was and what came of it.
    pub summary: String,
    pub decisions: Vec<TriggerDecision>,
    /// Runs to create (ids referenced by `decisions`).
    pub runs: Vec<NewRun>,
    pub cancel: Option<CancelProposed>,
    /// The trigger point's policy evaluations, recorded on the run each started (a run
    /// of `runs`).
    pub evaluations: Vec<RunEvaluations>,
}

/// The policy evaluations that decided a delivery's run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEvaluations {
    pub run_id: String,
    pub evaluations: Vec<crate::NewPolicyEvaluation>,
}

/// What recording a delivery did.
#[derive(Debug, Clone, PartialEq)]
pub enum DeliveryOutcome {
    Recorded {
        id: i64,
        runs: Vec<RunRecord>,
        /// Ids of the proposed runs it canceled.
        canceled: Vec<String>,
    },
    /// The guid was seen before: nothing of the input was applied; a duplicate delivery
    /// row was recorded with a `duplicate delivery` decision for every stack the first
    /// one decided on.
    Duplicate {
        id: i64,
        first_id: i64,
        first_received_at: DateTime<Utc>,
    },
}

/// One stored delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryRecord {
    pub id: i64,
    pub source: DeliverySource,
    pub guid: String,
    pub event: String,
    pub action: Option<String>,
    pub repository: Option<String>,
    pub git_ref: Option<String>,
    pub before: Option<String>,
    pub after: Option<String>,
    pub pull_request: Option<i64>,
    pub summary: String,
    /// The first delivery with this guid, when this one is a duplicate.
    pub duplicate_of: Option<i64>,
    pub received_at: DateTime<Utc>,
}

/// One line of a stack's trigger history: a delivery and its verdict on the stack.
#[derive(Debug, Clone, PartialEq)]
pub struct TriggerRecord {
    pub delivery: DeliveryRecord,
    pub run_id: Option<String>,
    pub reason: String,
}

/// A short-lived credential handed to one run, revoked when the run ends.
#[derive(Debug, Clone, PartialEq)]
pub struct VcsTokenRecord {
    pub run_id: String,
    /// The token itself: revoking it at GitHub needs it.
    pub token: String,
    pub expires_at: DateTime<Utc>,
}

/// The last commit the poller saw on a git remote's branch.
#[derive(Debug, Clone, PartialEq)]
pub struct PollHead {
    pub repository: String,
    pub branch: String,
    pub commit: String,
    pub checked_at: DateTime<Utc>,
}
