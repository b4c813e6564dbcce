//! Plan files over the API: uploaded (parsed and linted against the org's hosts and
//! environments, stored as written), linted without storing, listed, shown with their
//! targets and schedule, and deleted.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use bosun_api::{Page, PlanInfo, PlanLintAnswer, PlanListItem, PlanSource};

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::paging::PageQuery;
use crate::service::plans as service;

/// The org's plans, by name, a page at a time.
///
/// Paged by name: `next_cursor` is the last plan's name while the page is full.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/plans", tag = "plans",
    params(("org" = String, Path), PageQuery),
    responses((status = 200, body = Page<PlanListItem>), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn list_plans(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> Result<Json<Page<PlanListItem>>, ApiError> {
    Ok(Json(service::list(&state, &org, &q).await?))
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
    let info = service::upload(&state, &caller, &org, body).await?;
    let status = if info.created == Some(true) {
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
    Ok(Json(service::lint(&state, &org, &body).await?))
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
    service::delete(&state, &caller, &org, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
