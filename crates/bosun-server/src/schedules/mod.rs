//! The scheduler: one background duty that fires cron schedules (drift checks and plan
//! schedules — `crate::plans::schedule`) from the time its [`Clock`] reads, settles ended
//! drift runs and raises stale-drift alerts.
//!
//! A schedule is armed with its first fire time after the moment it is first seen (or
//! its settings change). When a pass finds it due, it fires **once**, however many fire
//! times passed — a server that was down over several runs one check when it is back,
//! and the fire records how many it missed — then re-arms at the first fire time after
//! now. The store applies each fire only if the schedule's `next_at` is still the one
//! the pass read, so two servers sharing a store never both fire it.

pub mod clock;
pub mod rule;

use crate::app::AppState;
use crate::error::ApiError;
use rule::fire_due;

/// The scheduler duty: a pass every `schedules.interval`.
pub(crate) fn schedule_duty(state: &AppState) -> crate::duties::Duty {
    crate::duties::Duty::new(
        "schedules",
        Some(state.config.schedules.interval),
        |state| {
            let state = state.clone();
            Box::pin(async move {
                pass(&state).await?;
                Ok(None)
            })
        },
    )
}

/// One pass at the clock's current time.
pub async fn pass(state: &AppState) -> Result<(), ApiError> {
    let now = state.config.schedules.clock.now();
    crate::drift::fire_pass(state, now).await?;
    fire_due(state, state.store.plan_schedules(None, None).await?, now).await?;
    crate::drift::settle_ended(state).await?;
    crate::drift::fill_stale_at(state).await?;
    crate::drift::alert_stale(state, now).await?;
    Ok(())
}
