//! A plan's schedule: set (its cron and zone checked, every input one the stored plan
//! declares) and cleared, and as people read it — its cron, zone and inputs, and, while
//! the armed schedule is the one set, the next run and the last fire's outcome.

use bosun_api::{ErrorCode, PlanScheduleSet, PlanScheduleView};
use bosun_core::cron::Schedule;
use bosun_core::ValidationError;
use bosun_store::{PlanScheduleInput, PlanScheduleRecord};
use serde_json::json;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;

/// The schedule of a plan of `org`.
pub async fn show(state: &AppState, org: &str, plan: &str) -> Result<PlanScheduleView, ApiError> {
    Ok(to_wire(load(state, org, plan).await?))
}

/// Sets (or replaces) a plan's schedule for `caller`. The cron and zone are checked, and
/// every input must be one the stored plan declares; the scheduler arms it on its next
/// pass.
pub async fn set(
    state: &AppState,
    caller: &Caller,
    org: &str,
    plan: &str,
    body: PlanScheduleSet,
) -> Result<PlanScheduleView, ApiError> {
    let timezone = body.timezone.as_deref().unwrap_or("UTC");
    let schedule = Schedule::parse(&body.cron, timezone).map_err(|e| {
        // The cron module names its field `schedule`; here it is `cron`.
        if e.field == "schedule" {
            ValidationError::new("cron", e.message)
        } else {
            e
        }
    })?;
    let stored = state
        .store
        .get_plan(org, plan)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("plan {plan:?}")))?;
    let parsed = bosun_plans::model::parse_plan(
        std::path::Path::new(&format!("{plan}.yaml")),
        &stored.source,
    )
    .map_err(|e| ApiError::Conflict {
        code: ErrorCode::InvalidPlan,
        message: format!("the stored plan {plan:?} no longer parses: {e}"),
    })?;
    if let Some(unknown) = body.inputs.keys().find(|k| !parsed.inputs.contains_key(*k)) {
        let declared: Vec<&str> = parsed.inputs.keys().map(String::as_str).collect();
        return Err(ValidationError::new(
            format!("inputs.{unknown}"),
            format!(
                "the plan {plan:?} has no input {unknown:?} (it declares: {})",
                if declared.is_empty() {
                    "none".to_string()
                } else {
                    declared.join(", ")
                }
            ),
        )
        .into());
    }
    let input = PlanScheduleInput {
        org: org.to_string(),
        plan: plan.to_string(),
        cron: schedule.expression().to_string(),
        timezone: schedule.timezone().name().to_string(),
        inputs: body.inputs,
        updated_by: caller.0.actor(),
    };
    let audit = caller.audit(
        Some(org),
        "plan.schedule.set",
        format!("plan:{plan}"),
        json!({"cron": input.cron, "timezone": input.timezone,
            "inputs": input.inputs.keys().collect::<Vec<_>>()}),
    );
    let record = state.store.put_plan_schedule(&input, &audit).await?;
    Ok(to_wire(record))
}

/// Removes a plan's schedule for `caller`; runs it created stay.
pub async fn clear(
    state: &AppState,
    caller: &Caller,
    org: &str,
    plan: &str,
) -> Result<(), ApiError> {
    let audit = caller.audit(
        Some(org),
        "plan.schedule.delete",
        format!("plan:{plan}"),
        json!({}),
    );
    if state.store.delete_plan_schedule(org, plan, &audit).await? {
        Ok(())
    } else {
        Err(ApiError::NotFound(format!("a schedule of plan {plan:?}")))
    }
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
