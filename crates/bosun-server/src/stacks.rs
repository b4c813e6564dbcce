//! Stacks over the API: created, listed, shown, changed and deleted; the work (the wire
//! types to and from the validated [`StackSpec`](bosun_core::stack::StackSpec)) is
//! `service::stacks`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use bosun_api::{Page, Stack, StackCreate, StackPatch};
use bosun_core::authz::Access;
use bosun_core::Role;
use serde::Deserialize;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::paging::PageQuery;
use crate::route::{endpoint, route, Endpoint, Route};
use crate::service::stacks as service;

/// Served by [`list`].
pub const LIST: Endpoint = endpoint!(Access::Org(Role::Viewer), list);

/// Served by [`show`].
pub const SHOW: Endpoint = endpoint!(Access::Org(Role::Viewer), show);

pub fn routes() -> Vec<Route> {
    vec![
        LIST.route(),
        route!(Access::Org(Role::Admin), create),
        SHOW.route(),
        route!(Access::Org(Role::Admin), update),
        route!(Access::Org(Role::Admin), delete),
    ]
}

/// List the org's stacks, ordered by id, a page at a time.
///
/// Paged by id: `next_cursor` is the page's last stack's id while the page is full.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/stacks", tag = "stacks",
    params(("org" = String, Path), PageQuery),
    responses((status = 200, body = Page<Stack>), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> Result<Json<Page<Stack>>, ApiError> {
    Ok(Json(service::list(&state, &org, &q).await?))
}

/// Create a stack.
#[utoipa::path(post, path = "/api/v1/orgs/{org}/stacks", tag = "stacks",
    params(("org" = String, Path)),
    request_body = StackCreate,
    responses((status = 201, body = Stack), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(org): ApiPath<String>,
    ApiJson(body): ApiJson<StackCreate>,
) -> Result<(StatusCode, Json<Stack>), ApiError> {
    let stack = service::create(&state, &caller, &org, body).await?;
    Ok((StatusCode::CREATED, Json(stack)))
}

/// Show one stack.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/stacks/{stack}", tag = "stacks",
    params(("org" = String, Path), ("stack" = String, Path)),
    responses((status = 200, body = Stack), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn show(
    State(state): State<AppState>,
    ApiPath((org, id)): ApiPath<(String, String)>,
) -> Result<Json<Stack>, ApiError> {
    Ok(Json(service::show(&state, &org, &id).await?))
}

/// Change a stack's fields. The id never changes; `name` renames it.
#[utoipa::path(patch, path = "/api/v1/orgs/{org}/stacks/{stack}", tag = "stacks",
    params(("org" = String, Path), ("stack" = String, Path)),
    request_body = StackPatch,
    responses((status = 200, body = Stack), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn update(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id)): ApiPath<(String, String)>,
    ApiJson(patch): ApiJson<StackPatch>,
) -> Result<Json<Stack>, ApiError> {
    Ok(Json(
        service::update(&state, &caller, &org, &id, patch).await?,
    ))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DeleteQuery {
    /// Also delete the stack's state versions (refused without it when it has state).
    #[serde(default)]
    pub delete_state: bool,
}

/// Delete a stack. Refused while other stacks depend on it or runs of it are open, and —
/// unless `delete_state=true` — while it has state versions.
#[utoipa::path(delete, path = "/api/v1/orgs/{org}/stacks/{stack}", tag = "stacks",
    params(("org" = String, Path), ("stack" = String, Path), DeleteQuery),
    responses((status = 204), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<DeleteQuery>,
) -> Result<StatusCode, ApiError> {
    service::delete(&state, &caller, &org, &id, q.delete_state).await?;
    Ok(StatusCode::NO_CONTENT)
}
