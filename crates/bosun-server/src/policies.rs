//! Policies as code over HTTP: the API's handlers, adapters over `crate::service::policies`
//! (an org's policies; an org admin's override of a soft-mandatory deny on a run).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use bosun_api::{PolicyOverrideBody, PolicyPut, PolicyView, Run};
use bosun_core::authz::Access;
use bosun_core::Role;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::paging::PageQuery;
use crate::route::{route, Route};
use crate::service::policies as service;

pub fn routes() -> Vec<Route> {
    vec![
        route!(Access::Org(Role::Viewer), list),
        route!(Access::Org(Role::Viewer), get),
        route!(Access::Org(Role::Admin), put),
        route!(Access::Org(Role::Admin), delete),
        route!(Access::Org(Role::Admin), override_run),
        route!(Access::Org(Role::Admin), override_plan_run),
    ]
}

/// The org's policies, by name (uploaded files are named, not shown).
///
/// Answered whole, as one page (an org has at most 100): `limit` is checked, a `cursor`
/// is refused.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/policies", tag = "policies",
    params(("org" = String, Path), PageQuery),
    responses((status = 200, body = bosun_api::Page<PolicyView>), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> Result<Json<bosun_api::Page<PolicyView>>, ApiError> {
    Ok(Json(service::list(&state, &org, &q).await?))
}

/// One policy, with its uploaded files' texts.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/policies/{name}", tag = "policies",
    params(("org" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = PolicyView), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn get(
    State(state): State<AppState>,
    ApiPath((org, name)): ApiPath<(String, String)>,
) -> Result<Json<PolicyView>, ApiError> {
    Ok(Json(service::get(&state, &org, &name).await?))
}

/// Create or replace a policy (org admin): its Rego files (uploaded, checked by the
/// engine, or a git repository's folder read at the branch head on every evaluation),
/// decision points, mode and attachment. Audited.
#[utoipa::path(put, path = "/api/v1/orgs/{org}/policies/{name}", tag = "policies",
    params(("org" = String, Path), ("name" = String, Path)), request_body = PolicyPut,
    responses((status = 200, body = PolicyView), (status = 201, body = PolicyView),
        (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn put(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, name)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<PolicyPut>,
) -> Result<(StatusCode, Json<PolicyView>), ApiError> {
    let (view, created) = service::put(&state, &caller, &org, &name, body).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(view)))
}

/// Delete a policy (org admin). Its evaluations stay on the runs they were made on.
#[utoipa::path(delete, path = "/api/v1/orgs/{org}/policies/{name}", tag = "policies",
    params(("org" = String, Path), ("name" = String, Path)),
    responses((status = 204), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, name)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    service::delete(&state, &caller, &org, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Override the soft-mandatory policy denies holding an unconfirmed run (org admin),
/// with a reason: audited and kept on each overridden evaluation. The run then moves on
/// as its other policies allow: it applies (autodeploy), waits for a confirm, or waits
/// in the approvals inbox when a policy asked for approval. Hard-mandatory denies have no
/// override.
#[utoipa::path(post, path = "/api/v1/orgs/{org}/runs/{run}/override", tag = "policies",
    params(("org" = String, Path), ("run" = String, Path)), request_body = PolicyOverrideBody,
    responses((status = 200, body = Run), (status = 409, body = bosun_api::ErrorBody,
        description = "no soft-mandatory deny holds the run")))]
pub async fn override_run(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<PolicyOverrideBody>,
) -> Result<Json<Run>, ApiError> {
    Ok(Json(
        service::override_run(&state, &caller, &org, &id, &body.reason).await?,
    ))
}

/// Override the soft-mandatory policy denies holding a paused plan run (org admin), with
/// a reason: audited and kept on each overridden evaluation. The run then goes on as its
/// other policies and gated environments allow.
#[utoipa::path(post, path = "/api/v1/orgs/{org}/plan-runs/{run}/override", tag = "policies",
    params(("org" = String, Path), ("run" = String, Path)), request_body = PolicyOverrideBody,
    responses((status = 200, body = bosun_api::PlanRunView), (status = 409, body = bosun_api::ErrorBody,
        description = "no soft-mandatory deny holds the run")))]
pub async fn override_plan_run(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<PolicyOverrideBody>,
) -> Result<Json<bosun_api::PlanRunView>, ApiError> {
    Ok(Json(
        service::override_plan_run(&state, &caller, &org, &id, &body.reason).await?,
    ))
}
