//! Drift detection: schedules, settled checks, and the scheduler's decisions.

use chrono::{DateTime, Utc};

use crate::{NewRun, RunRecord};

/// Where a stack's drift schedule stands (one row per armed stack).
#[derive(Debug, Clone, PartialEq)]
pub struct DriftScheduleState {
    /// The schedule and zone `next_at` was computed from.
    pub schedule: String,
    pub timezone: String,
    /// When this schedule took effect: the stale rule's starting point until a check
    /// succeeds.
    pub since: DateTime<Utc>,
    pub next_at: DateTime<Utc>,
    pub last_fire_at: Option<DateTime<Utc>>,
    /// The drift run the last fire started, if it started one.
    pub last_fire_run: Option<String>,
    /// Fire times missed (server down), or why the last fire started no run.
    pub last_fire_note: Option<String>,
    /// When checking turns stale, in milliseconds since the epoch ([`NEVER_STALE`] for a
    /// schedule that never does; `None` until computed): the drift dashboard's order.
    pub stale_at: Option<i64>,
    /// `stale_at` while the stale-check alert of that episode is still to be raised.
    pub alert_at: Option<i64>,
}

/// [`DriftScheduleState::stale_at`] of a schedule that never turns stale.
pub const NEVER_STALE: i64 = i64::MAX;

impl DriftScheduleRecord {
    /// The drift dashboard's position after this row, in (`stale_at`, stack) order
    /// (`None` before its `stale_at` is computed: no page lists it).
    pub fn cursor(&self) -> Option<crate::KeyCursor> {
        Some(crate::KeyCursor {
            key: self.state.as_ref()?.stale_at?,
            id: self.stack.clone(),
        })
    }
}

/// What a drift-checked stack's check age is measured from: when its schedule was armed,
/// and its latest successful check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriftCheckBase {
    pub org: String,
    pub stack: String,
    /// When checking began (the schedule was armed).
    pub since: DateTime<Utc>,
    /// When its latest successful check (`no_drift` or `drift_detected`) settled.
    pub last_success_at: Option<DateTime<Utc>>,
}

/// The drift-checked stacks whose checking is stale at a given time: how many per org, and
/// the most overdue of them (at most the limit asked for), most overdue first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StaleDriftChecks {
    /// Org → its stale drift-checked stacks (orgs with none are absent).
    pub by_org: std::collections::BTreeMap<String, i64>,
    /// The most overdue, by the time each turned stale.
    pub oldest: Vec<DriftCheckBase>,
}

/// A stack whose drift settings were saved and that the scheduler has not armed since.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriftArming {
    pub org: String,
    pub stack: String,
    /// Tells this ticket from a later save of the same stack.
    pub queued_at: i64,
}

/// The settled result of an ended drift run.
#[derive(Debug, Clone, PartialEq)]
pub struct DriftCheckRecord {
    pub run: String,
    pub org: String,
    pub stack: String,
    pub result: bosun_core::drift::DriftResult,
    /// When the run ended.
    pub checked_at: DateTime<Utc>,
    /// The tracked run a reconcile started.
    pub reconcile_run: Option<String>,
}

/// A stack with drift detection, its schedule's bookkeeping and its latest checks.
#[derive(Debug, Clone, PartialEq)]
pub struct DriftScheduleRecord {
    pub org: String,
    pub stack: String,
    pub drift: bosun_core::stack::DriftDetection,
    /// `None` until the scheduler first armed this stack.
    pub state: Option<DriftScheduleState>,
    /// The latest check that completed (`no_drift` or `drift_detected`).
    pub last_success: Option<DriftCheckRecord>,
    /// The latest settled check, whatever its result.
    pub last_check: Option<DriftCheckRecord>,
    /// An open (not ended) drift run of the stack.
    pub open_run: Option<String>,
}

/// One scheduler decision about a stack, applied in one transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct DriftFire {
    pub org: String,
    pub stack: String,
    pub schedule: String,
    pub timezone: String,
    /// The `next_at` the scheduler read (`None`: the stack was not armed). The fire
    /// applies only while it is still the stored one, so two servers never both fire.
    pub expected_next: Option<DateTime<Utc>>,
    pub next_at: DateTime<Utc>,
    /// When arming: the moment the schedule takes effect.
    pub since: Option<DateTime<Utc>>,
    /// The drift run to start now (none when only arming).
    pub run: Option<NewRun>,
    /// Kept with the fire (missed fire times).
    pub note: Option<String>,
    pub now: DateTime<Utc>,
}

/// What a [`DriftFire`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum DriftFired {
    /// The schedule was (re)armed; nothing started.
    Armed,
    Started(Box<RunRecord>),
    /// A drift run of the stack is still open: none started, the skip recorded.
    Skipped {
        open_run: String,
    },
    /// Another pass moved the schedule first: nothing written.
    Raced,
}
