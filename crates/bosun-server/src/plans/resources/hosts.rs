//! Hosts over the API: listed and shown to members, created, changed and deleted by
//! admins; each host checked by `bosun_core::plan_resources` before it is stored.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use bosun_api::{HostCreate, HostInfo, HostPatch};
use bosun_core::plan_resources as rules;
use bosun_store::{HostRecord, NewHost};
use serde_json::{json, Value};

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath};

use super::*;

fn host_wire(h: HostRecord) -> HostInfo {
    HostInfo {
        name: h.name,
        address: h.address,
        port: h.port,
        user: h.user,
        connection: h.connection,
        labels: h.labels,
        vars: h.vars,
        environment: h.environment,
        identity_file: h.identity_file,
        host_key: h.host_key,
        known_hosts: h.known_hosts,
        created_at: h.created_at,
        updated_at: h.updated_at,
    }
}

/// Checks a host against the rules, every field prefixed with `prefix` (`""` for the
/// API body, `hosts.web-1.` in an inventory).
pub(super) fn check_host(prefix: &str, h: &NewHost) -> Result<(), ApiError> {
    let f = |name: &str| format!("{prefix}{name}");
    if prefix.is_empty() {
        rules::host_name(&f("name"), &h.name)?;
    } else {
        rules::host_name(prefix.trim_end_matches('.'), &h.name)?;
    }
    rules::address(&f("address"), &h.address)?;
    if h.port == 0 {
        return Err(invalid(f("port"), "must be 1 to 65535 (got 0)"));
    }
    rules::Connection::parse(&f("connection"), &h.connection)?;
    if let Some(u) = &h.user {
        rules::user(&f("user"), u)?;
    }
    rules::labels(&f("labels"), &h.labels)?;
    for k in h.vars.keys() {
        rules::var_name(&f(&format!("vars.{k}")), k)?;
    }
    if let Some(e) = &h.environment {
        rules::environment_id(&f("environment"), e)?;
    }
    if let Some(p) = &h.identity_file {
        rules::path(&f("identity_file"), p)?;
    }
    if let Some(p) = &h.known_hosts {
        rules::path(&f("known_hosts"), p)?;
    }
    if let Some(k) = &h.host_key {
        rules::host_key(&f("host_key"), k)?;
    }
    Ok(())
}

async fn load_host(state: &AppState, org: &str, name: &str) -> Result<HostRecord, ApiError> {
    state
        .store
        .get_host(org, name)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("host {name:?} in org {org:?}")))
}

fn host_detail(h: &NewHost) -> Value {
    json!({
        "address": h.address, "port": h.port, "connection": h.connection,
        "environment": h.environment, "labels": h.labels,
    })
}

/// The org's hosts, by name.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/hosts", tag = "plans",
    params(("org" = String, Path)),
    responses((status = 200, body = Vec<HostInfo>)))]
pub async fn list_hosts(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
) -> Result<Json<Vec<HostInfo>>, ApiError> {
    let hosts = state.store.list_hosts(&org).await?;
    Ok(Json(hosts.into_iter().map(host_wire).collect()))
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
    let port = match body.port {
        Some(p) => rules::port("port", p)?,
        None => 22,
    };
    let host = NewHost {
        org: org.clone(),
        address: body.address.clone().unwrap_or_else(|| body.name.clone()),
        name: body.name,
        port,
        user: body.user,
        connection: body.connection.unwrap_or_else(|| "ssh".into()),
        labels: body.labels,
        vars: vars_of("vars", body.vars.as_ref())?,
        environment: body.environment,
        identity_file: body.identity_file,
        host_key: body.host_key,
        known_hosts: body.known_hosts,
    };
    check_host("", &host)?;
    let audit = caller.audit(
        Some(&org),
        "host.create",
        format!("host:{}", host.name),
        host_detail(&host),
    );
    let created = state.store.create_host(&host, &audit).await?;
    Ok((StatusCode::CREATED, Json(host_wire(created))))
}

/// One host.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/hosts/{host}", tag = "plans",
    params(("org" = String, Path), ("host" = String, Path)),
    responses((status = 200, body = HostInfo), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn show_host(
    State(state): State<AppState>,
    ApiPath((org, name)): ApiPath<(String, String)>,
) -> Result<Json<HostInfo>, ApiError> {
    Ok(Json(host_wire(load_host(&state, &org, &name).await?)))
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
    let current = load_host(&state, &org, &name).await?;
    let port = match body.port {
        Some(p) => rules::port("port", p)?,
        None => current.port,
    };
    let vars = match &body.vars {
        Some(v) => vars_of("vars", Some(v))?,
        None => current.vars,
    };
    let host = NewHost {
        org: org.clone(),
        name: name.clone(),
        address: body.address.unwrap_or(current.address),
        port,
        user: body.user.unwrap_or(current.user),
        connection: body.connection.unwrap_or(current.connection),
        labels: body.labels.unwrap_or(current.labels),
        vars,
        environment: body.environment.unwrap_or(current.environment),
        identity_file: body.identity_file.unwrap_or(current.identity_file),
        host_key: body.host_key.unwrap_or(current.host_key),
        known_hosts: body.known_hosts.unwrap_or(current.known_hosts),
    };
    check_host("", &host)?;
    let audit = caller.audit(
        Some(&org),
        "host.update",
        format!("host:{name}"),
        host_detail(&host),
    );
    Ok(Json(host_wire(
        state.store.update_host(&host, &audit).await?,
    )))
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
    let audit = caller.audit(Some(&org), "host.delete", format!("host:{name}"), json!({}));
    if state.store.delete_host(&org, &name, &audit).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("host {name:?} in org {org:?}")))
    }
}
