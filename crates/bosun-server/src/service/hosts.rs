//! Hosts: each checked by `bosun_core::plan_resources` before it is stored — listed,
//! shown, created, changed and deleted; the work behind the API's host handlers, and the
//! host check the inventory import applies to every host of a file.

use bosun_api::{HostCreate, HostInfo, HostPatch, Page};
use bosun_core::plan_resources as rules;
use bosun_store::{HostRecord, NewHost};
use serde_json::{json, Value};

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::paging::{page, PageQuery};
use crate::service::{deleted, invalid, vars_of};

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
pub(crate) fn check_host(prefix: &str, h: &NewHost) -> Result<(), ApiError> {
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

/// A page of the org's hosts, by name; the cursor is the last host's name.
pub async fn list(state: &AppState, org: &str, q: &PageQuery) -> Result<Page<HostInfo>, ApiError> {
    let limit = q.limit()?;
    let hosts = state
        .store
        .list_hosts_page(org, q.cursor.as_deref(), limit)
        .await?;
    Ok(page(
        hosts.into_iter().map(host_wire).collect(),
        limit,
        |h| h.name.clone(),
    ))
}

/// Adds a host for `caller`: port 22, connection `ssh` and the name as its address
/// unless given; checked against the rules before it is stored.
pub async fn create(
    state: &AppState,
    caller: &Caller,
    org: &str,
    body: HostCreate,
) -> Result<HostInfo, ApiError> {
    let port = match body.port {
        Some(p) => rules::port("port", p)?,
        None => 22,
    };
    let host = NewHost {
        org: org.to_string(),
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
        Some(org),
        "host.create",
        format!("host:{}", host.name),
        host_detail(&host),
    );
    let created = state.store.create_host(&host, &audit).await?;
    Ok(host_wire(created))
}

/// One host of `org`.
pub async fn show(state: &AppState, org: &str, name: &str) -> Result<HostInfo, ApiError> {
    Ok(host_wire(load_host(state, org, name).await?))
}

/// Changes a host for `caller`: only the given fields; `null` clears an optional one.
/// The host as changed is checked against the rules before it is stored.
pub async fn update(
    state: &AppState,
    caller: &Caller,
    org: &str,
    name: &str,
    body: HostPatch,
) -> Result<HostInfo, ApiError> {
    let current = load_host(state, org, name).await?;
    let port = match body.port {
        Some(p) => rules::port("port", p)?,
        None => current.port,
    };
    let vars = match &body.vars {
        Some(v) => vars_of("vars", Some(v))?,
        None => current.vars,
    };
    let host = NewHost {
        org: org.to_string(),
        name: name.to_string(),
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
        Some(org),
        "host.update",
        format!("host:{name}"),
        host_detail(&host),
    );
    Ok(host_wire(state.store.update_host(&host, &audit).await?))
}

/// Deletes a host for `caller`.
pub async fn delete(
    state: &AppState,
    caller: &Caller,
    org: &str,
    name: &str,
) -> Result<(), ApiError> {
    let audit = caller.audit(Some(org), "host.delete", format!("host:{name}"), json!({}));
    let done = state.store.delete_host(org, name, &audit).await?;
    deleted(done, "host", name, org)
}
