//! Wire types of drift detection: a stack's settings and status, a drift run's outcome.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DriftDetection {
    /// Cron expression.
    pub schedule: String,
    /// Start a tracked run when drift is found.
    #[serde(default)]
    pub reconcile: bool,
    /// IANA time zone the schedule is read in [default: `UTC`]; answers always carry it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
}

/// A drift run's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunDrift {
    /// `pending` (not ended), `no_drift`, `drift_detected` or `failed` (ended any other
    /// way than a finished plan: before the plan too — integrations, clone, engine).
    pub result: String,
    /// The tracked run `reconcile` started for detected drift.
    pub reconcile_run: Option<String>,
}

/// One completed or failed drift check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DriftCheck {
    pub run: String,
    /// `no_drift`, `drift_detected` or `failed`.
    pub result: String,
    /// When the drift run ended.
    pub checked_at: DateTime<Utc>,
    pub reconcile_run: Option<String>,
}

/// A stack's drift checking: the next check and how the last ones went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StackDriftStatus {
    /// The next scheduled check (absent until the scheduler has armed the schedule).
    pub next_check_at: Option<DateTime<Utc>>,
    /// The latest check that completed (`no_drift` or `drift_detected`).
    pub last_success: Option<DriftCheck>,
    /// The latest check whatever its result.
    pub last_check: Option<DriftCheck>,
    /// A drift run of the stack that has not ended.
    pub open_run: Option<String>,
    /// Seconds since the last successful check (or, with none, since checking began).
    pub age_seconds: Option<i64>,
    /// The last successful check is older than twice the schedule's interval.
    pub stale: bool,
    /// What the last scheduled check noted: fire times missed while the server was down,
    /// or why it started no run.
    pub last_fire_note: Option<String>,
}
