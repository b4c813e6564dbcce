//! Runs through the API: trigger, list, show (with phase timings), confirm, discard,
//! cancel, retry, and logs (a page, or live over SSE).

use std::convert::Infallible;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::Json;
use bosun_api::{LogChunk, Page, Run, RunCreate};
use bosun_core::authz::Access;
use bosun_core::Role;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::logs::{log_stream, LogsQuery, RunProgress};
use crate::paging::PageQuery;
use crate::route::{endpoint, route, Endpoint, Route};
use crate::service::runs as service;

/// Served by [`trigger`].
pub const TRIGGER: Endpoint = endpoint!(Access::Org(Role::Operator), trigger);

/// Served by [`show`].
pub const SHOW: Endpoint = endpoint!(Access::Org(Role::Viewer), show);

/// Served by [`confirm`].
pub const CONFIRM: Endpoint = endpoint!(Access::Org(Role::Operator), confirm);

/// Served by [`discard`].
pub const DISCARD: Endpoint = endpoint!(Access::Org(Role::Operator), discard);

/// Served by [`cancel`].
pub const CANCEL: Endpoint = endpoint!(Access::Org(Role::Operator), cancel);

/// Served by [`retry`].
pub const RETRY: Endpoint = endpoint!(Access::Org(Role::Operator), retry);

/// Served by [`logs`].
pub const LOGS: Endpoint = endpoint!(Access::Org(Role::Viewer), logs);

/// Served by [`logs_stream`].
pub const LOGS_STREAM: Endpoint = endpoint!(Access::Org(Role::Viewer), logs_stream);

pub fn routes() -> Vec<Route> {
    vec![
        TRIGGER.route(),
        route!(Access::Org(Role::Viewer), list),
        SHOW.route(),
        CONFIRM.route(),
        DISCARD.route(),
        CANCEL.route(),
        RETRY.route(),
        LOGS.route(),
        LOGS_STREAM.route(),
    ]
}

/// Start a run of a stack (operator+): tracked by default, at the branch head.
#[utoipa::path(post, path = "/api/v1/orgs/{org}/stacks/{stack}/runs", tag = "runs",
    params(("org" = String, Path), ("stack" = String, Path)),
    request_body = RunCreate,
    responses((status = 201, body = Run), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn trigger(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, stack)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<RunCreate>,
) -> Result<(StatusCode, Json<Run>), ApiError> {
    let run = service::trigger(&state, &caller, &org, &stack, body).await?;
    Ok((StatusCode::CREATED, Json(run)))
}

/// A stack's runs, newest first, a page at a time.
///
/// Paged: `next_cursor` is the page's last run's id while the page is full; a cursor that
/// is no run of the stack is refused.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/stacks/{stack}/runs", tag = "runs",
    params(("org" = String, Path), ("stack" = String, Path), PageQuery),
    responses((status = 200, body = Page<Run>)))]
pub async fn list(
    State(state): State<AppState>,
    ApiPath((org, stack)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> Result<Json<Page<Run>>, ApiError> {
    Ok(Json(service::list(&state, &org, &stack, &q).await?))
}

/// One run: state, reason, plan summary, phases with timings, what blocks it.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/runs/{run}", tag = "runs",
    params(("org" = String, Path), ("run" = String, Path)),
    responses((status = 200, body = Run), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn show(
    State(state): State<AppState>,
    ApiPath((org, id)): ApiPath<(String, String)>,
) -> Result<Json<Run>, ApiError> {
    Ok(Json(service::show(&state, &org, &id).await?))
}

/// Confirm an unconfirmed run: its plan is applied. A run whose stack's environment
/// requires approval is refused (409 `approval_required`): it waits in the approvals inbox.
#[utoipa::path(post, path = "/api/v1/orgs/{org}/runs/{run}/confirm", tag = "runs",
    params(("org" = String, Path), ("run" = String, Path)),
    responses((status = 200, body = Run), (status = 409, body = bosun_api::ErrorBody)))]
pub async fn confirm(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id)): ApiPath<(String, String)>,
) -> Result<Json<Run>, ApiError> {
    Ok(Json(service::confirm(&state, &caller, &org, &id).await?))
}

/// Discard an unconfirmed run's plan.
#[utoipa::path(post, path = "/api/v1/orgs/{org}/runs/{run}/discard", tag = "runs",
    params(("org" = String, Path), ("run" = String, Path)),
    responses((status = 200, body = Run), (status = 409, body = bosun_api::ErrorBody)))]
pub async fn discard(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id)): ApiPath<(String, String)>,
) -> Result<Json<Run>, ApiError> {
    Ok(Json(service::discard(&state, &caller, &org, &id).await?))
}

/// Cancel a run: waiting runs end at once; an executing run's runner interrupts the
/// engine, then kills its process group after a grace period.
#[utoipa::path(post, path = "/api/v1/orgs/{org}/runs/{run}/cancel", tag = "runs",
    params(("org" = String, Path), ("run" = String, Path)),
    responses((status = 200, body = Run), (status = 409, body = bosun_api::ErrorBody)))]
pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id)): ApiPath<(String, String)>,
) -> Result<Json<Run>, ApiError> {
    Ok(Json(service::cancel(&state, &caller, &org, &id).await?))
}

/// A fresh run over the same source (repository and commit) as this one.
#[utoipa::path(post, path = "/api/v1/orgs/{org}/runs/{run}/retry", tag = "runs",
    params(("org" = String, Path), ("run" = String, Path)),
    responses((status = 201, body = Run), (status = 409, body = bosun_api::ErrorBody)))]
pub async fn retry(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id)): ApiPath<(String, String)>,
) -> Result<(StatusCode, Json<Run>), ApiError> {
    let run = service::retry(&state, &caller, &org, &id).await?;
    Ok((StatusCode::CREATED, Json(run)))
}

/// A page of the run's log, in order; `410 gone` once retention summarised the run.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/runs/{run}/logs", tag = "runs",
    params(("org" = String, Path), ("run" = String, Path), LogsQuery),
    responses((status = 200, body = Vec<LogChunk>)))]
pub async fn logs(
    State(state): State<AppState>,
    ApiPath((org, id)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<LogsQuery>,
) -> Result<Json<Vec<LogChunk>>, ApiError> {
    Ok(Json(service::logs(&state, &org, &id, &q).await?))
}

/// The run's log as server-sent events (`chunk` events carrying a LogChunk, then an
/// `end` event with the run's final state). Follows the run until it ends.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/runs/{run}/logs/stream", tag = "runs",
    params(("org" = String, Path), ("run" = String, Path), LogsQuery),
    responses((status = 200, description = "text/event-stream")))]
pub async fn logs_stream(
    State(state): State<AppState>,
    ApiPath((org, id)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<LogsQuery>,
) -> Result<Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    service::load_with_log(&state, &org, &id).await?;
    let read_id = id.clone();
    Ok(log_stream(
        state,
        id.clone(),
        q.after,
        move |state| {
            let id = id.clone();
            async move {
                Ok(match state.store.get_run(&id).await? {
                    None => RunProgress::Gone,
                    Some(r) if r.state.is_terminal() => RunProgress::Ended(r.state.as_str()),
                    Some(_) => RunProgress::Going,
                })
            }
        },
        move |state, after| {
            let id = read_id.clone();
            async move { state.store.read_logs(&id, after, 1000).await }
        },
    ))
}
