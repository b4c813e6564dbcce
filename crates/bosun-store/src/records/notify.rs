//! Notifications: targets and their rules, the outbox of events, deliveries and attempts.

use chrono::{DateTime, Utc};

use crate::Sealed;

/// What a notification is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NotificationEventKind {
    /// A run reached a terminal state.
    RunEnded,
    /// An ended run wrote state.
    LateWrite,
    /// A state lock has been held longer than the server's threshold.
    OldLock,
    /// A stack's last successful drift check is older than twice its interval.
    StaleDriftCheck,
    /// Sent on request to one target (`bosun notify target test`).
    Test,
}

impl NotificationEventKind {
    pub const ALL: [NotificationEventKind; 5] = [
        NotificationEventKind::RunEnded,
        NotificationEventKind::LateWrite,
        NotificationEventKind::OldLock,
        NotificationEventKind::StaleDriftCheck,
        NotificationEventKind::Test,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NotificationEventKind::RunEnded => "run_ended",
            NotificationEventKind::LateWrite => "late_write",
            NotificationEventKind::OldLock => "old_lock",
            NotificationEventKind::StaleDriftCheck => "stale_drift_check",
            NotificationEventKind::Test => "test",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// A notification event to write to the outbox. The store fans it out, in the same
/// transaction, to every enabled target of the org whose rules match it (or only to
/// `only_target`).
#[derive(Debug, Clone, PartialEq)]
pub struct NewNotificationEvent {
    pub kind: NotificationEventKind,
    /// For run events: what the rules look at.
    pub run_kind: Option<bosun_core::run::RunKind>,
    pub run_state: Option<bosun_core::run::RunState>,
    /// The event's details, sent as the webhook's `data` (org and stack included).
    pub payload: serde_json::Value,
    /// An event with a key already recorded for the org is not written again.
    pub dedup_key: Option<String>,
    /// Deliver to this target only, regardless of its rules (test events).
    pub only_target: Option<String>,
}

/// One rule of a target: an event matches when its kind is listed and, for run events,
/// its run kind and state are listed (an empty list matches any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotificationRule {
    pub events: Vec<String>,
    pub run_kinds: Vec<String>,
    pub run_states: Vec<String>,
}

impl NotificationRule {
    /// Whether this rule selects an event of `kind` (about a run of `run_kind` that
    /// ended `run_state`, for run events).
    pub fn matches(
        &self,
        kind: NotificationEventKind,
        run_kind: Option<&str>,
        run_state: Option<&str>,
    ) -> bool {
        let listed = |list: &[String], v: Option<&str>| {
            list.is_empty() || v.is_some_and(|v| list.iter().any(|x| x == v))
        };
        self.events.iter().any(|e| e == kind.as_str())
            && (kind != NotificationEventKind::RunEnded
                || (listed(&self.run_kinds, run_kind) && listed(&self.run_states, run_state)))
    }

    /// The rules of a target that gives none: every failed, force-failed or
    /// interrupted run of any kind (drift runs included), late writes, old locks and
    /// stale drift checks.
    pub fn defaults() -> Vec<NotificationRule> {
        vec![
            NotificationRule {
                events: vec!["run_ended".into()],
                run_kinds: vec![],
                run_states: vec!["failed".into(), "force_failed".into(), "interrupted".into()],
            },
            NotificationRule {
                events: vec![
                    "late_write".into(),
                    "old_lock".into(),
                    "stale_drift_check".into(),
                ],
                run_kinds: vec![],
                run_states: vec![],
            },
        ]
    }

    /// Whether `rules` (the defaults when empty) select the event.
    pub fn any_matches(
        rules: &[NotificationRule],
        kind: NotificationEventKind,
        run_kind: Option<&str>,
        run_state: Option<&str>,
    ) -> bool {
        if rules.is_empty() {
            return Self::defaults()
                .iter()
                .any(|r| r.matches(kind, run_kind, run_state));
        }
        rules.iter().any(|r| r.matches(kind, run_kind, run_state))
    }
}

/// A notification target to create, or the new definition of one.
#[derive(Debug, Clone, PartialEq)]
pub struct NewNotificationTarget {
    pub org: String,
    pub id: String,
    /// `webhook` or `slack`.
    pub kind: String,
    pub url: String,
    /// The webhook's HMAC secret, sealed. On update, `None` keeps the stored one.
    pub secret: Option<Sealed>,
    /// Empty: the defaults.
    pub rules: Vec<NotificationRule>,
    pub enabled: bool,
}

/// A stored notification target (its secret only as sealed bytes).
#[derive(Debug, Clone, PartialEq)]
pub struct NotificationTargetRecord {
    pub org: String,
    pub id: String,
    pub kind: String,
    pub url: String,
    pub secret: Option<Sealed>,
    pub rules: Vec<NotificationRule>,
    pub enabled: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
}

/// One delivery of an event to a target, as the delivery log shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct NotificationDeliveryRecord {
    pub id: i64,
    pub event_id: i64,
    pub org: String,
    pub target: String,
    pub event: NotificationEventKind,
    pub payload: serde_json::Value,
    pub event_created_at: DateTime<Utc>,
    pub attempts: i64,
    /// `None` once settled (delivered or given up).
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub last_status: Option<i64>,
    pub last_error: Option<String>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// A delivery due now, with its target, for the delivery duty.
#[derive(Debug, Clone, PartialEq)]
pub struct DueNotification {
    pub delivery: NotificationDeliveryRecord,
    pub target: NotificationTargetRecord,
}

/// The outcome of one delivery attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct NotificationAttempt {
    pub status: Option<i64>,
    pub error: Option<String>,
    pub delivered: bool,
    /// When to try again; `None` with `delivered: false` gives up.
    pub retry_at: Option<DateTime<Utc>>,
}
