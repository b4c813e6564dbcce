//! Environments over the API, with their approval grants: listed and shown to members,
//! created, changed, deleted, granted and revoked by admins.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use bosun_api::{EnvironmentCreate, EnvironmentInfo, EnvironmentPatch, Page};

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::paging::PageQuery;
use crate::service::environments as service;

/// The org's environments, by id, each with its grants and hosts.
///
/// Answered whole, as one page: `next_cursor` is always null; `limit` is checked
/// (1–1000) but does not shorten the page, and a `cursor` is refused.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/environments", tag = "plans",
    params(("org" = String, Path), PageQuery),
    responses((status = 200, body = Page<EnvironmentInfo>), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn list_environments(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> Result<Json<Page<EnvironmentInfo>>, ApiError> {
    Ok(Json(service::list(&state, &org, &q).await?))
}

/// Add an environment (org admin).
#[utoipa::path(post, path = "/api/v1/orgs/{org}/environments", tag = "plans",
    params(("org" = String, Path)),
    request_body = EnvironmentCreate,
    responses((status = 201, body = EnvironmentInfo), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn create_environment(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(org): ApiPath<String>,
    ApiJson(body): ApiJson<EnvironmentCreate>,
) -> Result<(StatusCode, Json<EnvironmentInfo>), ApiError> {
    let created = service::create(&state, &caller, &org, body).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// One environment, with its grants and hosts.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/environments/{env}", tag = "plans",
    params(("org" = String, Path), ("env" = String, Path)),
    responses((status = 200, body = EnvironmentInfo), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn show_environment(
    State(state): State<AppState>,
    ApiPath((org, id)): ApiPath<(String, String)>,
) -> Result<Json<EnvironmentInfo>, ApiError> {
    Ok(Json(service::show(&state, &org, &id).await?))
}

/// Change an environment's variables or flags (org admin); grants stay.
#[utoipa::path(patch, path = "/api/v1/orgs/{org}/environments/{env}", tag = "plans",
    params(("org" = String, Path), ("env" = String, Path)),
    request_body = EnvironmentPatch,
    responses((status = 200, body = EnvironmentInfo), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn update_environment(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<EnvironmentPatch>,
) -> Result<Json<EnvironmentInfo>, ApiError> {
    Ok(Json(
        service::update(&state, &caller, &org, &id, body).await?,
    ))
}

/// Delete an environment and its grants (org admin); refused while hosts are in it.
#[utoipa::path(delete, path = "/api/v1/orgs/{org}/environments/{env}", tag = "plans",
    params(("org" = String, Path), ("env" = String, Path)),
    responses((status = 204), (status = 404, body = bosun_api::ErrorBody),
        (status = 409, description = "hosts are in it (named)", body = bosun_api::ErrorBody)))]
pub async fn delete_environment(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    service::delete(&state, &caller, &org, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Grant a member approval on an environment (org admin): what a protected
/// environment's approvers need besides the operator role. Idempotent.
#[utoipa::path(put, path = "/api/v1/orgs/{org}/environments/{env}/grants/{user}", tag = "plans",
    params(("org" = String, Path), ("env" = String, Path), ("user" = String, Path)),
    responses((status = 200, body = EnvironmentInfo), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn grant(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id, user)): ApiPath<(String, String, String)>,
) -> Result<Json<EnvironmentInfo>, ApiError> {
    Ok(Json(
        service::grant(&state, &caller, &org, &id, &user).await?,
    ))
}

/// Revoke a member's grant on an environment (org admin).
#[utoipa::path(delete, path = "/api/v1/orgs/{org}/environments/{env}/grants/{user}", tag = "plans",
    params(("org" = String, Path), ("env" = String, Path), ("user" = String, Path)),
    responses((status = 204), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn revoke(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id, user)): ApiPath<(String, String, String)>,
) -> Result<StatusCode, ApiError> {
    service::revoke(&state, &caller, &org, &id, &user).await?;
    Ok(StatusCode::NO_CONTENT)
}
