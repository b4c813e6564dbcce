//! The firing rule every cron schedule follows — arm, fire once however many fire times
//! passed, re-arm — and the `Cron` trait the things with a cron implement.

use bosun_core::cron::Schedule;
use chrono::{DateTime, Utc};

use crate::app::AppState;
use crate::error::ApiError;

/// Where an armed schedule stands, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Armed<'a> {
    pub expression: &'a str,
    pub timezone: &'a str,
    pub next_at: DateTime<Utc>,
}

/// What a pass does with one schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Not armed, or its settings changed: arm it with this first fire time.
    Arm {
        next: DateTime<Utc>,
    },
    /// Due: fire once now; `missed` earlier fire times passed unfired.
    Fire {
        missed: u32,
        next: DateTime<Utc>,
    },
    Wait,
}

/// Decides one schedule at `now` (the generic cron-firing rule every schedule follows).
pub fn decide(schedule: &Schedule, armed: Option<Armed<'_>>, now: DateTime<Utc>) -> Decision {
    let current = armed.filter(|a| {
        a.expression == schedule.expression() && a.timezone == schedule.timezone().name()
    });
    match current {
        None => match schedule.next_after(now) {
            Some(next) => Decision::Arm { next },
            None => Decision::Wait,
        },
        Some(a) => match bosun_core::drift::due(schedule, a.next_at, now) {
            Some(d) => Decision::Fire {
                missed: d.missed,
                next: d.next,
            },
            None => Decision::Wait,
        },
    }
}

/// A thing with a cron that the scheduler fires: a stack's drift checks
/// (the drift module) and a plan's schedule (the plan schedules module). The firing rule
/// ([`fire_due`]) is the same for both; each says what a fire creates and how it is
/// stored.
#[async_trait::async_trait]
pub trait Cron: Send + Sync {
    /// What a due fire creates.
    type Run: Send;
    /// How a note counts the fire times a due fire passed over ("scheduled run(s)").
    const MISSED: &'static str;

    /// Its schedule; `None` for one this build cannot read (validated when saved, so
    /// left alone).
    fn schedule(&self) -> Option<Schedule>;

    /// Where it stands, as stored (`None` until first armed).
    fn armed(&self) -> Option<Armed<'_>>;

    /// What a due fire does now.
    async fn due(&self, state: &AppState) -> Result<Due<Self::Run>, ApiError>;

    /// Stores `fire` — applied only while the stored `next_at` is still
    /// `fire.expected_next` — and acts on what it did.
    async fn store(&self, state: &AppState, fire: Fire<Self::Run>) -> Result<(), ApiError>;
}

/// What a due fire does.
pub enum Due<R> {
    /// Creates this run.
    Run(R),
    /// Creates none, for this reason (kept with the fire).
    Skip(String),
    /// Nothing: what the schedule belonged to is gone.
    Gone,
}

/// One decision of a pass about one schedule, for the store to apply.
pub struct Fire<R> {
    pub expression: String,
    pub timezone: String,
    /// The `next_at` the pass read (`None`: not armed yet).
    pub expected_next: Option<DateTime<Utc>>,
    pub next_at: DateTime<Utc>,
    /// When arming: the moment the schedule takes effect.
    pub since: Option<DateTime<Utc>>,
    /// The run to create now (none when arming or skipping).
    pub run: Option<R>,
    /// Missed fire times, or why no run was created.
    pub note: Option<String>,
    pub now: DateTime<Utc>,
}

/// Arms new or changed schedules among `items` and fires the due ones, at `now`.
pub async fn fire_due<C: Cron>(
    state: &AppState,
    items: Vec<C>,
    now: DateTime<Utc>,
) -> Result<(), ApiError> {
    for item in items {
        let Some(schedule) = item.schedule() else {
            continue;
        };
        let armed = item.armed();
        let mut fire = Fire {
            expression: schedule.expression().to_string(),
            timezone: schedule.timezone().name().to_string(),
            expected_next: armed.as_ref().map(|a| a.next_at),
            next_at: now,
            since: None,
            run: None,
            note: None,
            now,
        };
        match decide(&schedule, armed, now) {
            Decision::Wait => continue,
            Decision::Arm { next } => {
                fire.next_at = next;
                fire.since = Some(now);
            }
            Decision::Fire { missed, next } => {
                fire.next_at = next;
                match item.due(state).await? {
                    Due::Run(run) => {
                        fire.run = Some(run);
                        fire.note = (missed > 0).then(|| {
                            format!(
                                "{missed} {} passed while the server was down or busy; ran one",
                                C::MISSED
                            )
                        });
                    }
                    Due::Skip(why) => fire.note = Some(format!("skipped: {why}")),
                    Due::Gone => continue,
                }
            }
        }
        item.store(state, fire).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::schedules::clock::Clock;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn arm_fire_wait_and_rearm_on_change() {
        let s = Schedule::parse("0 9 * * *", "Europe/Berlin").unwrap();
        let now = utc("2024-06-01T10:00:00Z");
        assert_eq!(
            decide(&s, None, now),
            Decision::Arm {
                next: utc("2024-06-02T07:00:00Z")
            }
        );
        let armed = |next_at| Armed {
            expression: "0 9 * * *",
            timezone: "Europe/Berlin",
            next_at,
        };
        assert_eq!(
            decide(&s, Some(armed(utc("2024-06-02T07:00:00Z"))), now),
            Decision::Wait
        );
        // Down for three days: one fire, two missed.
        assert_eq!(
            decide(
                &s,
                Some(armed(utc("2024-06-02T07:00:00Z"))),
                utc("2024-06-04T08:00:00Z")
            ),
            Decision::Fire {
                missed: 2,
                next: utc("2024-06-05T07:00:00Z")
            }
        );
        // Another zone is another schedule: re-armed, not fired.
        let tokyo = Schedule::parse("0 9 * * *", "Asia/Tokyo").unwrap();
        assert!(matches!(
            decide(&tokyo, Some(armed(utc("2024-06-01T07:00:00Z"))), now),
            Decision::Arm { .. }
        ));
    }

    #[test]
    fn manual_clock_moves_only_by_hand() {
        let c = Clock::manual(utc("2024-01-01T00:00:00Z"));
        assert_eq!(c.now(), utc("2024-01-01T00:00:00Z"));
        c.advance(chrono::Duration::hours(2));
        assert_eq!(c.now(), utc("2024-01-01T02:00:00Z"));
        assert_eq!(c.clone(), c);
        assert_ne!(c, Clock::system());
    }
}
