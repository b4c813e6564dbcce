//! Drift checks: what a drift run's end means, when a schedule is due (and what it
//! missed), and when a stack's last successful check has gone stale.

use chrono::{DateTime, Duration, Utc};

use crate::cron::Schedule;
use crate::run::RunState;

/// The outcome of a drift run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DriftResult {
    /// The run has not ended yet.
    Pending,
    /// The plan proposed nothing: the infrastructure matches the code.
    NoDrift,
    /// The plan proposed changes: something changed behind Bosun's back.
    DriftDetected,
    /// The check did not complete — for any reason, before or during the plan.
    Failed,
}

impl DriftResult {
    pub fn as_str(self) -> &'static str {
        match self {
            DriftResult::Pending => "pending",
            DriftResult::NoDrift => "no_drift",
            DriftResult::DriftDetected => "drift_detected",
            DriftResult::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<DriftResult> {
        [
            DriftResult::Pending,
            DriftResult::NoDrift,
            DriftResult::DriftDetected,
            DriftResult::Failed,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }

    /// A check that completed (whatever it found).
    pub fn is_success(self) -> bool {
        matches!(self, DriftResult::NoDrift | DriftResult::DriftDetected)
    }
}

/// A drift run's result from its state and its plan (`changes`: the plan summary's
/// `has_changes`, when the plan finished). Every end but a finished plan is `Failed`:
/// an integration or clone that failed before the plan, an engine error, a timeout, a
/// runner that went dark, a cancel — a check that did not happen is never "fine".
pub fn result_of(state: RunState, changes: Option<bool>) -> DriftResult {
    match state {
        RunState::Finished => match changes {
            Some(true) => DriftResult::DriftDetected,
            Some(false) => DriftResult::NoDrift,
            // A finished drift run always carries its plan; without one nothing proves
            // the check ran.
            None => DriftResult::Failed,
        },
        s if s.is_terminal() => DriftResult::Failed,
        _ => DriftResult::Pending,
    }
}

/// What a schedule pass decides for one stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// Fire times that passed since the last one fired, besides the one firing now
    /// (the server was down or the pass was late). They are not fired: a check is run
    /// once, and the count recorded.
    pub missed: u32,
    /// The next fire time after `now`.
    pub next: DateTime<Utc>,
}

/// Whether a schedule whose next fire time is `next_at` is due at `now`: `None` when not
/// yet; otherwise one check fires now, however many fire times passed (counted in
/// `missed`, at most `cap`), and the next is the first fire time after `now`.
pub fn due(schedule: &Schedule, next_at: DateTime<Utc>, now: DateTime<Utc>) -> Option<Due> {
    if next_at > now {
        return None;
    }
    const CAP: u32 = 10_000;
    let mut missed = 0;
    let mut t = next_at;
    loop {
        let n = schedule.next_after(t)?;
        if n > now {
            return Some(Due { missed, next: n });
        }
        missed += 1;
        t = n;
        if missed >= CAP {
            return Some(Due {
                missed,
                next: schedule.next_after(now)?,
            });
        }
    }
}

/// How stale a stack's drift checking is at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Staleness {
    /// Since the last successful check (or since checking began, when none succeeded).
    pub age: Duration,
    /// The schedule's interval after that point: the gap between two consecutive fires.
    pub interval: Duration,
    /// `age` exceeds twice `interval`.
    pub stale: bool,
}

/// The stale rule: the last successful check (or, with none, the moment the schedule
/// took effect — `since`) is older than twice the schedule's interval, measured as the
/// gap between the first two fire times after it.
pub fn staleness(
    schedule: &Schedule,
    last_success: Option<DateTime<Utc>>,
    since: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Option<Staleness> {
    let base = last_success.unwrap_or(since);
    let interval = schedule.interval_after(base)?;
    let age = now - base;
    Some(Staleness {
        stale: now > base + interval * 2,
        age,
        interval,
    })
}

/// The moment checking counted from `base` (the last successful check, or `since`)
/// turns stale under [`staleness`]: stale at any `now` after it. `None` for a schedule
/// with no two fire times after `base` (never stale).
pub fn stale_at(schedule: &Schedule, base: DateTime<Utc>) -> Option<DateTime<Utc>> {
    Some(base + schedule.interval_after(base)? * 2)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn results() {
        use DriftResult::*;
        assert_eq!(result_of(RunState::Finished, Some(true)), DriftDetected);
        assert_eq!(result_of(RunState::Finished, Some(false)), NoDrift);
        assert_eq!(result_of(RunState::Finished, None), Failed);
        for s in RunState::ALL {
            let r = result_of(s, Some(false));
            if !s.is_terminal() {
                assert_eq!(r, Pending, "{s}");
            } else if s != RunState::Finished {
                assert_eq!(r, Failed, "{s} must fail the check");
            }
        }
        for r in [Pending, NoDrift, DriftDetected, Failed] {
            assert_eq!(DriftResult::parse(r.as_str()), Some(r));
        }
        assert!(NoDrift.is_success() && DriftDetected.is_success());
        assert!(!Failed.is_success() && !Pending.is_success());
    }

    #[test]
    fn due_fires_once_and_counts_missed() {
        let s = Schedule::parse("0 * * * *", "UTC").unwrap();
        let next_at = utc("2024-01-01T10:00:00Z");
        assert_eq!(due(&s, next_at, utc("2024-01-01T09:59:59Z")), None);
        assert_eq!(
            due(&s, next_at, utc("2024-01-01T10:00:00Z")),
            Some(Due {
                missed: 0,
                next: utc("2024-01-01T11:00:00Z")
            })
        );
        // Down from 09:30 to 13:20: 10, 11, 12 and 13 o'clock passed; one check, 3 missed.
        assert_eq!(
            due(&s, next_at, utc("2024-01-01T13:20:00Z")),
            Some(Due {
                missed: 3,
                next: utc("2024-01-01T14:00:00Z")
            })
        );
    }

    #[test]
    fn stale_after_twice_the_interval() {
        let s = Schedule::parse("0 */6 * * *", "UTC").unwrap();
        let since = utc("2024-01-01T00:00:00Z");
        let ok = utc("2024-01-01T06:00:00Z");
        let st = staleness(&s, Some(ok), since, utc("2024-01-01T18:00:00Z")).unwrap();
        assert_eq!(st.interval, Duration::hours(6));
        assert!(!st.stale, "exactly twice is not yet stale");
        let st = staleness(&s, Some(ok), since, utc("2024-01-01T18:00:01Z")).unwrap();
        assert!(st.stale);
        // Never succeeded: measured from when checking began.
        let st = staleness(&s, None, since, utc("2024-01-01T12:30:00Z")).unwrap();
        assert!(st.stale && st.age == Duration::minutes(750));
        // The moment it turns stale, as the store keeps it for the dashboard's index.
        assert_eq!(stale_at(&s, ok), Some(utc("2024-01-01T18:00:00Z")));
        assert_eq!(stale_at(&s, since), Some(utc("2024-01-01T12:00:00Z")));
    }
}
