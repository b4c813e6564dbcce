//! The approvals inbox over HTTP: the API's handlers, adapters over
//! `crate::service::approvals` (the waiting runs, the decisions, approve and reject).

use axum::extract::State;
use axum::Json;
use bosun_api::{ApprovalDecide, ApprovalDecisionView, Page, PendingApprovalView};
use bosun_core::approval::Decision;
use bosun_core::authz::Access;
use bosun_core::Role;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::paging::PageQuery;
use crate::route::{endpoint, route, Endpoint, Route};
use crate::service::approvals as service;

/// Served by [`list`].
pub const LIST: Endpoint = endpoint!(Access::Org(Role::Viewer), list);

/// Served by [`approve`].
pub const APPROVE: Endpoint = endpoint!(Access::Org(Role::Operator), approve);

/// Served by [`reject`].
pub const REJECT: Endpoint = endpoint!(Access::Org(Role::Operator), reject);

pub fn routes() -> Vec<Route> {
    let viewer = Access::Org(Role::Viewer);
    vec![
        LIST.route(),
        route!(viewer, decisions),
        APPROVE.route(),
        REJECT.route(),
    ]
}

/// Runs waiting for an approval, oldest first (by creation, then run id), a page at a
/// time.
///
/// Paged: `next_cursor` (`<created ms>:<run>`) continues after the page's last run while
/// the page is full; a cursor that is not one is refused.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/approvals", tag = "approvals",
    params(("org" = String, Path), PageQuery),
    responses((status = 200, body = Page<PendingApprovalView>), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> Result<Json<Page<PendingApprovalView>>, ApiError> {
    Ok(Json(service::pending_page(&state, &org, &q).await?))
}

/// Recorded decisions, newest first, a page at a time.
///
/// Paged: `next_cursor` is the run of the page's last decision while the page is full; a
/// cursor that is no decision of the org is refused.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/approvals/decisions", tag = "approvals",
    params(("org" = String, Path), PageQuery),
    responses((status = 200, body = Page<ApprovalDecisionView>), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn decisions(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> Result<Json<Page<ApprovalDecisionView>>, ApiError> {
    Ok(Json(service::decisions(&state, &org, &q).await?))
}

/// Approve a waiting run: a plan run is queued for a runner, a stack run's plan is
/// applied. Needs operator or above, a grant on every protected environment of the run,
/// and (unless the server allows self-approval) someone other than the requester.
#[utoipa::path(post, path = "/api/v1/orgs/{org}/approvals/{subject}/approve", tag = "approvals",
    params(("org" = String, Path), ("subject" = String, Path)), request_body = ApprovalDecide,
    responses((status = 200, body = ApprovalDecisionView),
        (status = 403, body = bosun_api::ErrorBody, description = "the approval rule refused, saying why"),
        (status = 409, body = bosun_api::ErrorBody, description = "the run does not wait for an approval")))]
pub async fn approve(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, subject)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<ApprovalDecide>,
) -> Result<Json<ApprovalDecisionView>, ApiError> {
    Ok(Json(
        service::decide(&state, &caller, &org, &subject, Decision::Approve, body).await?,
    ))
}

/// Reject a waiting run: a plan run ends `rejected`, a stack run is discarded; the
/// reason names the approver and the comment. The requester may always reject their own.
#[utoipa::path(post, path = "/api/v1/orgs/{org}/approvals/{subject}/reject", tag = "approvals",
    params(("org" = String, Path), ("subject" = String, Path)), request_body = ApprovalDecide,
    responses((status = 200, body = ApprovalDecisionView),
        (status = 403, body = bosun_api::ErrorBody), (status = 409, body = bosun_api::ErrorBody)))]
pub async fn reject(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, subject)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<ApprovalDecide>,
) -> Result<Json<ApprovalDecisionView>, ApiError> {
    Ok(Json(
        service::decide(&state, &caller, &org, &subject, Decision::Reject, body).await?,
    ))
}
