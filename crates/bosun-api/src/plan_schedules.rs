//! Wire types of plan schedules: a schedule's settings, next fire and last outcome.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The body of `PUT /orgs/{org}/plans/{plan}/schedule`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanScheduleSet {
    /// Five-field cron (or `@daily`-style macros).
    pub cron: String,
    /// IANA time zone the cron is read in (default `UTC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// Inputs of every scheduled run (each one of the plan's inputs).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(value_type = Object)]
    pub inputs: BTreeMap<String, serde_json::Value>,
}

/// A plan's schedule: its settings, next fire time and the last fire's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PlanScheduleView {
    pub plan: String,
    pub cron: String,
    pub timezone: String,
    #[schema(value_type = Object)]
    pub inputs: BTreeMap<String, serde_json::Value>,
    pub updated_by: String,
    pub updated_at: DateTime<Utc>,
    /// Set by the plan's file (`schedule:`): it changes when the file does, and the API
    /// refuses to change or clear it.
    #[serde(default)]
    pub from_file: bool,
    /// When the next scheduled run is created (none until the scheduler armed it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_run_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fire_at: Option<DateTime<Utc>>,
    /// The run the last fire created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<String>,
    /// Why the last fire created no run, or how many fire times it caught up on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_note: Option<String>,
}
