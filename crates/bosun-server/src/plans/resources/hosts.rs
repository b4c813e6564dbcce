//! Hosts over the API: listed and shown to members, created, changed and deleted by
//! admins; each host checked by `bosun_core::plan_resources` before it is stored.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use bosun_api::{HostCreate, HostInfo, HostPatch, Page};

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::paging::PageQuery;
use crate::service::hosts as service;

/// The org's hosts, by name, a page at a time.
///
/// Paged by name: `next_cursor` is the last host's name while the page is full.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/hosts", tag = "plans",
    params(("org" = String, Path), PageQuery),
    responses((status = 200, body = Page<HostInfo>), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn list_hosts(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> Result<Json<Page<HostInfo>>, ApiError> {
    Ok(Json(service::list(&state, &org, &q).await?))
}

/// Add a host (org admin).
#[utoipa::path(post, path = "/api/v1/orgs/{org}/hosts", tag = "plans",
    params(("org" = String, Path)),
    request_body = HostCreate,
    responses((status = 201, body = HostInfo), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn create_host(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(org): ApiPath<String>,
    ApiJson(body): ApiJson<HostCreate>,
) -> Result<(StatusCode, Json<HostInfo>), ApiError> {
    let created = service::create(&state, &caller, &org, body).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// One host.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/hosts/{host}", tag = "plans",
    params(("org" = String, Path), ("host" = String, Path)),
    responses((status = 200, body = HostInfo), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn show_host(
    State(state): State<AppState>,
    ApiPath((org, name)): ApiPath<(String, String)>,
) -> Result<Json<HostInfo>, ApiError> {
    Ok(Json(service::show(&state, &org, &name).await?))
}

/// Change a host (org admin): only the given fields; `null` clears an optional one.
#[utoipa::path(patch, path = "/api/v1/orgs/{org}/hosts/{host}", tag = "plans",
    params(("org" = String, Path), ("host" = String, Path)),
    request_body = HostPatch,
    responses((status = 200, body = HostInfo), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn update_host(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, name)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<HostPatch>,
) -> Result<Json<HostInfo>, ApiError> {
    Ok(Json(
        service::update(&state, &caller, &org, &name, body).await?,
    ))
}

/// Delete a host (org admin).
#[utoipa::path(delete, path = "/api/v1/orgs/{org}/hosts/{host}", tag = "plans",
    params(("org" = String, Path), ("host" = String, Path)),
    responses((status = 204), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn delete_host(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, name)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    service::delete(&state, &caller, &org, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
