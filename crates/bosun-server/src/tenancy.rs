//! Tenancy over the API: orgs, users, org membership and roles, "who am I", and the audit
//! log; the work is `service::tenancy`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use bosun_api::{
    AuditEvent, Member, MemberPut, Org, OrgCreate, OrgPatch, Page, User, UserCreate, Whoami,
};
use bosun_core::authz::Access;
use bosun_core::Role;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::paging::PageQuery;
use crate::route::{endpoint, route, Endpoint, Route};
use crate::service::tenancy::{self as service, AuditQuery};

/// Served by [`list_audit`].
pub const LIST_AUDIT: Endpoint = endpoint!(Access::Org(Role::Admin), list_audit);

pub fn routes() -> Vec<Route> {
    vec![
        route!(Access::User, whoami),
        route!(Access::User, list_orgs),
        route!(Access::ServerAdmin, create_org),
        route!(Access::Org(Role::Viewer), get_org),
        route!(Access::Org(Role::Admin), update_org),
        route!(Access::ServerAdmin, create_user),
        route!(Access::Org(Role::Viewer), list_members),
        route!(Access::Org(Role::Admin), put_member),
        route!(Access::Org(Role::Admin), delete_member),
        LIST_AUDIT.route(),
        route!(Access::ServerAdmin, list_server_audit),
    ]
}

/// The caller's identity and roles.
#[utoipa::path(get, path = "/api/v1/whoami", tag = "tenancy",
    responses((status = 200, body = Whoami), (status = 401, body = bosun_api::ErrorBody)))]
pub async fn whoami(caller: Caller) -> Result<Json<Whoami>, ApiError> {
    Ok(Json(service::whoami(&caller)?))
}

/// The orgs the caller belongs to.
///
/// Answered whole, as one page: `next_cursor` is always null; `limit` is checked
/// (1–1000) but does not shorten the page, and a `cursor` is refused.
#[utoipa::path(get, path = "/api/v1/orgs", tag = "tenancy",
    params(PageQuery),
    responses((status = 200, body = Page<Org>), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn list_orgs(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> Result<Json<Page<Org>>, ApiError> {
    Ok(Json(service::list_orgs(&state, &caller, &q).await?))
}

/// Create an org; the creator becomes its first admin.
#[utoipa::path(post, path = "/api/v1/orgs", tag = "tenancy",
    request_body = OrgCreate,
    responses((status = 201, body = Org), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn create_org(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<OrgCreate>,
) -> Result<(StatusCode, Json<Org>), ApiError> {
    let org = service::create_org(&state, &caller, body).await?;
    Ok((StatusCode::CREATED, Json(org)))
}

/// One org.
#[utoipa::path(get, path = "/api/v1/orgs/{org}", tag = "tenancy",
    params(("org" = String, Path)),
    responses((status = 200, body = Org), (status = 403, body = bosun_api::ErrorBody)))]
pub async fn get_org(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
) -> Result<Json<Org>, ApiError> {
    Ok(Json(service::get_org(&state, &org).await?))
}

/// Change an org's settings (org admins): `pr_feedback`, what its stacks' runs report on
/// GitHub unless a stack says otherwise. Audited as `org.update` with the old and new
/// values.
#[utoipa::path(patch, path = "/api/v1/orgs/{org}", tag = "tenancy",
    params(("org" = String, Path)),
    request_body = OrgPatch,
    responses((status = 200, body = Org), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn update_org(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(org): ApiPath<String>,
    ApiJson(body): ApiJson<OrgPatch>,
) -> Result<Json<Org>, ApiError> {
    Ok(Json(
        service::update_org(&state, &caller, &org, body).await?,
    ))
}

/// Create a user (then add them to orgs and give them a token).
#[utoipa::path(post, path = "/api/v1/users", tag = "tenancy",
    request_body = UserCreate,
    responses((status = 201, body = User), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn create_user(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<UserCreate>,
) -> Result<(StatusCode, Json<User>), ApiError> {
    let user = service::create_user(&state, &caller, body).await?;
    Ok((StatusCode::CREATED, Json(user)))
}

/// The org's members and their roles.
///
/// Answered whole, as one page: `next_cursor` is always null; `limit` is checked
/// (1–1000) but does not shorten the page, and a `cursor` is refused.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/members", tag = "tenancy",
    params(("org" = String, Path), PageQuery),
    responses((status = 200, body = Page<Member>), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn list_members(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> Result<Json<Page<Member>>, ApiError> {
    Ok(Json(service::list_members(&state, &org, &q).await?))
}

/// Add a member or change their role.
#[utoipa::path(put, path = "/api/v1/orgs/{org}/members/{user}", tag = "tenancy",
    params(("org" = String, Path), ("user" = String, Path)),
    request_body = MemberPut,
    responses((status = 200, body = Member), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn put_member(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, user)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<MemberPut>,
) -> Result<Json<Member>, ApiError> {
    Ok(Json(
        service::put_member(&state, &caller, &org, &user, body).await?,
    ))
}

/// Remove a member from the org.
#[utoipa::path(delete, path = "/api/v1/orgs/{org}/members/{user}", tag = "tenancy",
    params(("org" = String, Path), ("user" = String, Path)),
    responses((status = 204), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn delete_member(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, user)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    service::delete_member(&state, &caller, &org, &user).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The org's audit log, newest first; `actor`, `action` (itself or the actions under
/// it) and `target` narrow it.
///
/// Paged: `next_cursor` is the page's last event's `seq` while the page is full.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/audit", tag = "tenancy",
    params(("org" = String, Path), AuditQuery),
    responses((status = 200, body = Page<AuditEvent>)))]
pub async fn list_audit(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> Result<Json<Page<AuditEvent>>, ApiError> {
    service::audit_page(&state, Some(&org), &q).await.map(Json)
}

/// The whole server's audit log, newest first: every org's records and server-level
/// ones (users, personal tokens).
///
/// Paged: `next_cursor` is the page's last event's `seq` while the page is full.
#[utoipa::path(get, path = "/api/v1/audit", tag = "tenancy",
    params(AuditQuery),
    responses((status = 200, body = Page<AuditEvent>)))]
pub async fn list_server_audit(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> Result<Json<Page<AuditEvent>>, ApiError> {
    service::audit_page(&state, None, &q).await.map(Json)
}
