//! Plan files over the API: uploaded (parsed and linted against the org's hosts and
//! environments, stored as written), linted without storing, listed, shown with their
//! targets and schedule, and deleted.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use bosun_api::{PlanInfo, PlanLintAnswer, PlanListItem, PlanSource};
use bosun_store::NewPlan;
use serde_json::json;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath};
use crate::service::plans::{self as service, *};

/// The org's plans, by name.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/plans", tag = "plans",
    params(("org" = String, Path)),
    responses((status = 200, body = Vec<PlanListItem>)))]
pub async fn list_plans(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
) -> Result<Json<Vec<PlanListItem>>, ApiError> {
    let plans = state.store.list_plans(&org).await?;
    Ok(Json(
        plans
            .into_iter()
            .map(|p| PlanListItem {
                name: p.name,
                version: p.version,
                created_at: p.created_at,
                updated_at: p.updated_at,
                updated_by: p.updated_by,
            })
            .collect(),
    ))
}

/// Store a plan file under its `name` (org admin): version 1 when new, the next version
/// when it exists. A file that does not parse is refused (file, line, column); lint
/// findings against the org's hosts and environments come back as `warnings`.
#[utoipa::path(post, path = "/api/v1/orgs/{org}/plans", tag = "plans",
    params(("org" = String, Path)),
    request_body = PlanSource,
    responses((status = 201, description = "created", body = PlanInfo),
        (status = 200, description = "updated to a new version", body = PlanInfo),
        (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn upload_plan(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(org): ApiPath<String>,
    ApiJson(body): ApiJson<PlanSource>,
) -> Result<(StatusCode, Json<PlanInfo>), ApiError> {
    let checked = check_plan(&state, &org, &body).await?;
    let name = checked.plan.name.clone();
    let audit = caller.audit(
        Some(&org),
        "plan.save",
        format!("plan:{name}"),
        json!({"warnings": checked.warnings.len()}),
    );
    let saved = state
        .store
        .save_plan(
            &NewPlan {
                org: org.clone(),
                name,
                source: body.source,
                schedule: checked.summary.schedule.as_ref().map(|s| {
                    bosun_store::PlanFileSchedule {
                        cron: s.cron.clone(),
                        timezone: s.timezone.clone(),
                        inputs: s.inputs.clone(),
                    }
                }),
            },
            &audit,
        )
        .await?;
    let created = saved.version == 1;
    let mut info = plan_wire(saved, checked.summary, checked.warnings);
    info.created = Some(created);
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(info)))
}

/// Lint a plan file against the org's hosts and environments without storing it.
#[utoipa::path(post, path = "/api/v1/orgs/{org}/plans/lint", tag = "plans",
    params(("org" = String, Path)),
    request_body = PlanSource,
    responses((status = 200, body = PlanLintAnswer), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn lint_plan(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
    ApiJson(body): ApiJson<PlanSource>,
) -> Result<Json<PlanLintAnswer>, ApiError> {
    let checked = check_plan(&state, &org, &body).await?;
    Ok(Json(PlanLintAnswer {
        name: checked.plan.name,
        summary: checked.summary,
        warnings: checked.warnings,
    }))
}

/// One plan: its source as uploaded, version, parsed summary (with the hosts it targets
/// now) and lint findings against the org's current hosts.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/plans/{plan}", tag = "plans",
    params(("org" = String, Path), ("plan" = String, Path)),
    responses((status = 200, body = PlanInfo), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn show_plan(
    State(state): State<AppState>,
    ApiPath((org, name)): ApiPath<(String, String)>,
) -> Result<Json<PlanInfo>, ApiError> {
    Ok(Json(service::show(&state, &org, &name).await?))
}

/// Delete a plan (org admin). Runs already started keep the plan file they run.
#[utoipa::path(delete, path = "/api/v1/orgs/{org}/plans/{plan}", tag = "plans",
    params(("org" = String, Path), ("plan" = String, Path)),
    responses((status = 204), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn delete_plan(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, name)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let audit = caller.audit(Some(&org), "plan.delete", format!("plan:{name}"), json!({}));
    if state.store.delete_plan(&org, &name, &audit).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("plan {name:?} in org {org:?}")))
    }
}
