//! A plan's schedule as people read it: its cron, zone and inputs, and — while the armed
//! schedule is the one set — the next run and the last fire's outcome.

use bosun_api::PlanScheduleView;
use bosun_store::PlanScheduleRecord;

use crate::app::AppState;
use crate::error::ApiError;

/// The schedule of a plan of `org`.
pub async fn show(state: &AppState, org: &str, plan: &str) -> Result<PlanScheduleView, ApiError> {
    Ok(to_wire(load(state, org, plan).await?))
}

/// The schedule as shown: the next run time only while the armed schedule is the one set.
pub fn to_wire(r: PlanScheduleRecord) -> PlanScheduleView {
    let armed = r
        .armed
        .filter(|a| a.cron == r.cron && a.timezone == r.timezone);
    PlanScheduleView {
        next_run_at: armed.as_ref().map(|a| a.next_at),
        last_fire_at: armed.as_ref().and_then(|a| a.last_fire_at),
        last_run: armed.as_ref().and_then(|a| a.last_fire_run.clone()),
        last_note: armed.and_then(|a| a.last_fire_note),
        plan: r.plan,
        cron: r.cron,
        timezone: r.timezone,
        inputs: r.inputs,
        updated_by: r.updated_by,
        updated_at: r.updated_at,
        from_file: r.from_file,
    }
}

pub(crate) async fn load(
    state: &AppState,
    org: &str,
    plan: &str,
) -> Result<PlanScheduleRecord, ApiError> {
    state
        .store
        .plan_schedules(Some(org), Some(plan))
        .await?
        .pop()
        .ok_or_else(|| ApiError::NotFound(format!("a schedule of plan {plan:?}")))
}
