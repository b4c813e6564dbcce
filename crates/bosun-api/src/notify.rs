//! Wire types of notification targets and their delivery log.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A rule of a notification target: an event is sent when its kind is in `events` and,
/// for `run_ended`, the run's kind and final state are listed (an empty list: any).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NotificationRule {
    /// `run_ended`, `late_write`, `old_lock`, `stale_drift_check`.
    pub events: Vec<String>,
    /// `tracked`, `proposed`, `drift`.
    #[serde(default)]
    pub run_kinds: Vec<String>,
    /// Terminal run states: `failed`, `force_failed`, `interrupted`, `finished`, …
    #[serde(default)]
    pub run_states: Vec<String>,
}

/// The body of `POST /orgs/{org}/notifications/targets`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NotificationTargetCreate {
    pub id: String,
    /// `webhook` (JSON, HMAC-signed) or `slack` (incoming webhook).
    pub kind: String,
    /// `http://` or `https://`.
    pub url: String,
    /// The webhook's HMAC-SHA256 key (required for `webhook`, refused for `slack`);
    /// write-only.
    #[serde(default)]
    pub secret: Option<String>,
    /// None or empty: the defaults (failed, force-failed and interrupted runs of every
    /// kind, late writes, old locks, stale drift checks).
    #[serde(default)]
    pub rules: Option<Vec<NotificationRule>>,
    #[serde(default)]
    pub enabled: Option<bool>,
}

/// The body of `PATCH /orgs/{org}/notifications/targets/{id}`: only the given fields
/// change (`rules: []` returns to the defaults).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NotificationTargetPatch {
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub secret: Option<String>,
    #[serde(default)]
    pub rules: Option<Vec<NotificationRule>>,
    #[serde(default)]
    pub enabled: Option<bool>,
}

/// A notification target as the API shows it (never its secret).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct NotificationTargetInfo {
    pub id: String,
    pub kind: String,
    pub url: String,
    /// Whether an HMAC secret is set.
    pub has_secret: bool,
    /// The rules in force (the defaults when `default_rules`).
    pub rules: Vec<NotificationRule>,
    pub default_rules: bool,
    pub enabled: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
}

/// One entry of a target's delivery log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct NotificationDeliveryInfo {
    /// Also sent as `X-Bosun-Delivery`.
    pub id: i64,
    pub event_id: i64,
    /// `run_ended`, `late_write`, `old_lock`, `stale_drift_check` or `test`.
    pub event: String,
    /// The event's details (org, stack, run, state, …).
    pub data: serde_json::Value,
    pub attempts: i64,
    /// `pending`, `delivered` or `failed` (gave up after the last attempt).
    pub status: String,
    pub last_status_code: Option<i64>,
    pub last_error: Option<String>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}
