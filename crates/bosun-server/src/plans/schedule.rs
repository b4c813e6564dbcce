//! Plan schedules: one cron schedule per plan, in an IANA time
//! zone, with the inputs of its runs — set, shown and cleared through the API, or written
//! in the plan file (`schedule:`, saved with each upload; the API then refuses to change
//! it) — fired by the scheduler duty (`crate::schedules`) with the same rule as drift
//! checks.
//!
//! When a schedule is due, the pass creates a plan run (trigger `schedule`, requested by
//! `schedule`) in the store transaction that moves the schedule on. A plan whose targets
//! include a `requires_approval` environment gets a **paused run at its time**, waiting
//! in the approvals inbox, with its preview (a dry run of it) queued at once. A run the
//! concurrency guard refuses, or one that cannot be resolved (the plan no longer parses,
//! it targets no host), is not created: the reason is the schedule's last note. Missed
//! fire times (the server was down) give **one catch-up run** when the server is back,
//! and the note says how many were missed.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use bosun_api::{PlanScheduleSet, PlanScheduleView};
use bosun_core::authz::Access;
use bosun_core::cron::Schedule;
use bosun_core::plan_run::PlanTrigger;
use bosun_core::Role;
use bosun_store::{NewPlanRun, PlanScheduleFire, PlanScheduleFired, PlanScheduleRecord};
use serde_json::Value;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath};
use crate::route::{route, Route};
use crate::schedules::rule::{Armed, Cron, Due, Fire};
use crate::service::plan_schedules as service;

/// Who requests scheduled runs.
pub const REQUESTER: &str = "schedule";

pub fn routes() -> Vec<Route> {
    let op = Access::Org(Role::Operator);
    let viewer = Access::Org(Role::Viewer);
    vec![route!(viewer, show), route!(op, set), route!(op, clear)]
}

/// A plan's schedule, its next run time and the last fire's outcome.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/plans/{plan}/schedule", tag = "plans",
    params(("org" = String, Path), ("plan" = String, Path)),
    responses((status = 200, body = PlanScheduleView), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn show(
    State(state): State<AppState>,
    ApiPath((org, plan)): ApiPath<(String, String)>,
) -> Result<Json<PlanScheduleView>, ApiError> {
    Ok(Json(service::show(&state, &org, &plan).await?))
}

/// Set (or replace) a plan's schedule (operator+). The cron and zone are checked, and
/// every input must be one the stored plan declares; the schedule is armed on the
/// scheduler's next pass (its first run is the first fire time after that).
#[utoipa::path(put, path = "/api/v1/orgs/{org}/plans/{plan}/schedule", tag = "plans",
    params(("org" = String, Path), ("plan" = String, Path)), request_body = PlanScheduleSet,
    responses((status = 200, body = PlanScheduleView), (status = 400, body = bosun_api::ErrorBody),
        (status = 404, body = bosun_api::ErrorBody)))]
pub async fn set(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, plan)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<PlanScheduleSet>,
) -> Result<Json<PlanScheduleView>, ApiError> {
    Ok(Json(
        service::set(&state, &caller, &org, &plan, body).await?,
    ))
}

/// Remove a plan's schedule (operator+); runs it created stay.
#[utoipa::path(delete, path = "/api/v1/orgs/{org}/plans/{plan}/schedule", tag = "plans",
    params(("org" = String, Path), ("plan" = String, Path)),
    responses((status = 204), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn clear(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, plan)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    service::clear(&state, &caller, &org, &plan).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A plan's schedule, fired by the scheduler: a due fire creates a plan run with the
/// schedule's inputs, or records why it could not (the plan gone or refused, its targets
/// unresolvable, the concurrency guard).
#[async_trait::async_trait]
impl Cron for PlanScheduleRecord {
    type Run = NewPlanRun;
    const MISSED: &'static str = "scheduled run(s)";

    fn schedule(&self) -> Option<Schedule> {
        Schedule::parse(&self.cron, &self.timezone).ok()
    }

    fn armed(&self) -> Option<Armed<'_>> {
        self.armed.as_ref().map(|a| Armed {
            expression: &a.cron,
            timezone: &a.timezone,
            next_at: a.next_at,
        })
    }

    async fn due(&self, state: &AppState) -> Result<Due<NewPlanRun>, ApiError> {
        let Some(plan) = state.store.get_plan(&self.org, &self.plan).await? else {
            return Ok(Due::Skip(format!("plan {:?} no longer exists", self.plan)));
        };
        let inputs: BTreeMap<String, Value> = self.inputs.clone();
        match crate::service::plan_runs::resolve(
            state,
            &self.org,
            &self.plan,
            &plan.source,
            &inputs,
            REQUESTER,
        )
        .await
        {
            Ok(resolved) => {
                let (id, preview) = crate::service::plan_runs::new_run_ids(
                    false,
                    &resolved.gated,
                    resolved.policy_check,
                );
                Ok(Due::Run(NewPlanRun {
                    id,
                    preview,
                    org: self.org.clone(),
                    plan: self.plan.clone(),
                    plan_version: plan.version,
                    source: plan.source,
                    inputs,
                    dry_run: false,
                    requested_by: REQUESTER.to_string(),
                    trigger: PlanTrigger::Schedule,
                    hosts: resolved.hosts,
                    sources: resolved.sources,
                    upstream: None,
                    settles_trigger: None,
                    failed: None,
                    gated_environments: resolved.gated,
                    concurrent: resolved.plan.concurrent_runs,
                    policy_check: resolved.policy_check,
                }))
            }
            // Refusals of the plan or its targets are the schedule's business: recorded.
            Err(ApiError::Validation(e)) => Ok(Due::Skip(e.to_string())),
            Err(ApiError::Conflict { message, .. }) => Ok(Due::Skip(message)),
            Err(e) => Err(e),
        }
    }

    async fn store(&self, state: &AppState, fire: Fire<NewPlanRun>) -> Result<(), ApiError> {
        let fire = PlanScheduleFire {
            org: self.org.clone(),
            plan: self.plan.clone(),
            cron: fire.expression,
            timezone: fire.timezone,
            expected_next: fire.expected_next,
            next_at: fire.next_at,
            since: fire.since,
            run: fire.run,
            note: fire.note,
            now: fire.now,
        };
        match state.store.fire_plan_schedule(&fire).await? {
            PlanScheduleFired::Started(run) => {
                tracing::info!(org = %self.org, plan = %self.plan, run = %run.id, state = %run.state,
                    "scheduled plan run created");
                if run.needs_lease || run.preview.is_some() {
                    state.wake_dispatch();
                }
            }
            PlanScheduleFired::Skipped { reason } => {
                tracing::info!(org = %self.org, plan = %self.plan, %reason, "scheduled plan run skipped");
            }
            PlanScheduleFired::Armed | PlanScheduleFired::Raced => {}
        }
        Ok(())
    }
}
