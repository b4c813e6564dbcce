//! Environments over the API, with their approval grants: listed and shown to members,
//! created, changed, deleted, granted and revoked by admins.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use bosun_api::{EnvironmentCreate, EnvironmentInfo, EnvironmentPatch};
use bosun_core::plan_resources as rules;
use bosun_core::Role;
use bosun_store::{EnvironmentRecord, HostRecord, NewEnvironment};
use serde_json::json;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath};

use super::*;
use crate::service::vars_of;

fn environment_wire(e: EnvironmentRecord, hosts: &[HostRecord]) -> EnvironmentInfo {
    EnvironmentInfo {
        hosts: hosts
            .iter()
            .filter(|h| h.environment.as_deref() == Some(e.id.as_str()))
            .map(|h| h.name.clone())
            .collect(),
        id: e.id,
        vars: e.vars,
        requires_approval: e.requires_approval,
        protected: e.protected,
        grants: e.grants,
        created_at: e.created_at,
        updated_at: e.updated_at,
    }
}

async fn environment_answer(
    state: &AppState,
    org: &str,
    e: EnvironmentRecord,
) -> Result<EnvironmentInfo, ApiError> {
    let hosts = state.store.list_hosts(org).await?;
    Ok(environment_wire(e, &hosts))
}

async fn load_environment(
    state: &AppState,
    org: &str,
    id: &str,
) -> Result<EnvironmentRecord, ApiError> {
    state
        .store
        .get_environment(org, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("environment {id:?} in org {org:?}")))
}

/// The org's environments, by id, each with its grants and hosts.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/environments", tag = "plans",
    params(("org" = String, Path)),
    responses((status = 200, body = Vec<EnvironmentInfo>)))]
pub async fn list_environments(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
) -> Result<Json<Vec<EnvironmentInfo>>, ApiError> {
    let envs = state.store.list_environments(&org).await?;
    let hosts = state.store.list_hosts(&org).await?;
    Ok(Json(
        envs.into_iter()
            .map(|e| environment_wire(e, &hosts))
            .collect(),
    ))
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
    rules::environment_id("id", &body.id)?;
    let env = NewEnvironment {
        org: org.clone(),
        id: body.id.clone(),
        vars: vars_of("vars", body.vars.as_ref())?,
        requires_approval: body.requires_approval,
        protected: body.protected,
    };
    let audit = caller.audit(
        Some(&org),
        "environment.create",
        format!("environment:{}", env.id),
        json!({"requires_approval": env.requires_approval, "protected": env.protected}),
    );
    let created = state.store.create_environment(&env, &audit).await?;
    Ok((
        StatusCode::CREATED,
        Json(environment_answer(&state, &org, created).await?),
    ))
}

/// One environment, with its grants and hosts.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/environments/{env}", tag = "plans",
    params(("org" = String, Path), ("env" = String, Path)),
    responses((status = 200, body = EnvironmentInfo), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn show_environment(
    State(state): State<AppState>,
    ApiPath((org, id)): ApiPath<(String, String)>,
) -> Result<Json<EnvironmentInfo>, ApiError> {
    let env = load_environment(&state, &org, &id).await?;
    Ok(Json(environment_answer(&state, &org, env).await?))
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
    let current = load_environment(&state, &org, &id).await?;
    let vars = match &body.vars {
        Some(v) => vars_of("vars", Some(v))?,
        None => current.vars,
    };
    let env = NewEnvironment {
        org: org.clone(),
        id: id.clone(),
        vars,
        requires_approval: body.requires_approval.unwrap_or(current.requires_approval),
        protected: body.protected.unwrap_or(current.protected),
    };
    let audit = caller.audit(
        Some(&org),
        "environment.update",
        format!("environment:{id}"),
        json!({"requires_approval": env.requires_approval, "protected": env.protected,
            "vars_changed": body.vars.is_some()}),
    );
    let updated = state.store.update_environment(&env, &audit).await?;
    Ok(Json(environment_answer(&state, &org, updated).await?))
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
    let audit = caller.audit(
        Some(&org),
        "environment.delete",
        format!("environment:{id}"),
        json!({}),
    );
    if state.store.delete_environment(&org, &id, &audit).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!(
            "environment {id:?} in org {org:?}"
        )))
    }
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
    load_environment(&state, &org, &id).await?;
    let roles = state.store.roles_of(&user).await?;
    match roles.get(&org) {
        None => {
            return Err(invalid(
                "user",
                format!("user {user:?} is not a member of org {org:?}: add them first"),
            ))
        }
        Some(role) if *role < Role::Operator => {
            return Err(invalid(
                "user",
                format!(
                    "user {user:?} is a {role} of org {org:?}: approving needs operator or above, so a grant would not let them approve"
                ),
            ))
        }
        Some(_) => {}
    }
    let audit = caller.audit(
        Some(&org),
        "environment.grant",
        format!("environment:{id}"),
        json!({"user": user}),
    );
    state
        .store
        .grant_environment(&org, &id, &user, &audit)
        .await?;
    let env = load_environment(&state, &org, &id).await?;
    Ok(Json(environment_answer(&state, &org, env).await?))
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
    let audit = caller.audit(
        Some(&org),
        "environment.revoke",
        format!("environment:{id}"),
        json!({"user": user}),
    );
    if state
        .store
        .revoke_environment_grant(&org, &id, &user, &audit)
        .await?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!(
            "a grant for user {user:?} on environment {id:?}"
        )))
    }
}
