//! The notification API: targets (org admins manage, members read), each target's
//! delivery log, and test events; the work is `service::notify`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use bosun_api::{
    NotificationDeliveryInfo, NotificationTargetCreate, NotificationTargetInfo,
    NotificationTargetPatch, Page,
};

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::paging::PageQuery;
use crate::service::notify as service;

/// The org's notification targets (never their secrets).
///
/// Answered whole, as one page: `next_cursor` is always null; `limit` is checked
/// (1–1000) but does not shorten the page, and a `cursor` is refused.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/notifications/targets", tag = "notifications",
    params(("org" = String, Path), PageQuery),
    responses((status = 200, body = Page<NotificationTargetInfo>), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> Result<Json<Page<NotificationTargetInfo>>, ApiError> {
    Ok(Json(service::list(&state, &org, &q).await?))
}

/// Add a notification target (org admin). A webhook's secret is sealed at rest and never
/// shown again.
#[utoipa::path(post, path = "/api/v1/orgs/{org}/notifications/targets", tag = "notifications",
    params(("org" = String, Path)),
    request_body = NotificationTargetCreate,
    responses((status = 201, body = NotificationTargetInfo), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(org): ApiPath<String>,
    ApiJson(body): ApiJson<NotificationTargetCreate>,
) -> Result<(StatusCode, Json<NotificationTargetInfo>), ApiError> {
    let created = service::create(&state, &caller, &org, body).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// One notification target.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/notifications/targets/{id}", tag = "notifications",
    params(("org" = String, Path), ("id" = String, Path)),
    responses((status = 200, body = NotificationTargetInfo), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn show(
    State(state): State<AppState>,
    ApiPath((org, id)): ApiPath<(String, String)>,
) -> Result<Json<NotificationTargetInfo>, ApiError> {
    Ok(Json(service::show(&state, &org, &id).await?))
}

/// Change a target's URL, secret, rules or enabled flag (org admin).
#[utoipa::path(patch, path = "/api/v1/orgs/{org}/notifications/targets/{id}", tag = "notifications",
    params(("org" = String, Path), ("id" = String, Path)),
    request_body = NotificationTargetPatch,
    responses((status = 200, body = NotificationTargetInfo), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn update(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<NotificationTargetPatch>,
) -> Result<Json<NotificationTargetInfo>, ApiError> {
    Ok(Json(
        service::update(&state, &caller, &org, &id, body).await?,
    ))
}

/// Delete a target and its delivery log (org admin).
#[utoipa::path(delete, path = "/api/v1/orgs/{org}/notifications/targets/{id}", tag = "notifications",
    params(("org" = String, Path), ("id" = String, Path)),
    responses((status = 204), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    service::delete(&state, &caller, &org, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A target's delivery log, newest first: the event, attempts, the last status code or
/// error, the next attempt, and when it was delivered.
///
/// Paged: `next_cursor` is the page's last delivery's id while the page is full.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/notifications/targets/{id}/deliveries", tag = "notifications",
    params(("org" = String, Path), ("id" = String, Path), PageQuery),
    responses((status = 200, body = Page<NotificationDeliveryInfo>), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn deliveries(
    State(state): State<AppState>,
    ApiPath((org, id)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> Result<Json<Page<NotificationDeliveryInfo>>, ApiError> {
    Ok(Json(service::deliveries(&state, &org, &id, &q).await?))
}

/// Send a test event to this target (org admin), whatever its rules and even when
/// disabled. Answers with the pending delivery; its log entry shows the outcome.
#[utoipa::path(post, path = "/api/v1/orgs/{org}/notifications/targets/{id}/test", tag = "notifications",
    params(("org" = String, Path), ("id" = String, Path)),
    responses((status = 202, body = NotificationDeliveryInfo), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn test(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id)): ApiPath<(String, String)>,
) -> Result<(StatusCode, Json<NotificationDeliveryInfo>), ApiError> {
    let delivery = service::test(&state, &caller, &org, &id).await?;
    Ok((StatusCode::ACCEPTED, Json(delivery)))
}
