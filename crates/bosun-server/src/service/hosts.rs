//! Hosts: each checked by `bosun_core::plan_resources` before it is stored — listed,
//! shown, created, changed and deleted; the work behind the API's host handlers, and the
//! host check the inventory import applies to every host of a file.
//!
//! A host's bastion (`proxy_jump`) names another host of the org. Every change that
//! sets one is checked against the org's hosts as they would be once it is written —
//! with `bosun-plans`' own resolution of bastion chains, the one the runner's inventory
//! parse applies — and refused naming the `proxy_jump` at fault: a bastion the org does
//! not have, a `local` one, a chain that goes round in a cycle or passes 8 bastions. The
//! store checks the same chains again inside its transaction, and refuses deleting (or
//! making `local`) a host that others jump through, naming them.

use std::collections::{BTreeMap, HashMap};

use bosun_api::{HostCreate, HostInfo, HostPatch, Page};
use bosun_core::plan_resources as rules;
use bosun_plans::model::{self as engine, JumpError};
use bosun_store::{HostRecord, NewHost, StoreError};
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
        proxy_jump: h.proxy_jump,
        source: h.source,
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
    if let Some(b) = &h.proxy_jump {
        let field = f("proxy_jump");
        rules::host_name(&field, b)?;
        if b == "none" {
            return Err(invalid(
                field,
                "a host named `none` cannot be a bastion (in an inventory, `proxy_jump: none` means \"connect directly\"); to connect directly, leave proxy_jump out",
            ));
        }
        if *b == h.name {
            return Err(invalid(
                field,
                format!("host `{}` cannot jump through itself", h.name),
            ));
        }
        if h.connection == "local" {
            return Err(invalid(
                field,
                "a host with `connection: local` is this machine: it has no `proxy_jump`",
            ));
        }
    }
    Ok(())
}

/// A host a request writes, for [`check_bastions`]: where a refusal names its fields.
pub(crate) struct Written<'a> {
    pub host: &'a NewHost,
    /// The fields' prefix: `""` in the API's body, `hosts.web-1.` in an inventory.
    pub prefix: String,
    /// Where its `proxy_jump` was written, when not at `{prefix}proxy_jump` (an
    /// inventory's `defaults.proxy_jump`).
    pub written_at: Option<String>,
}

/// Checks the org's bastion chains as they would be once `written` hosts replace (or
/// join) the `stored` ones: resolved as the runner's inventory parse resolves them
/// (`bosun_plans::model::resolve_jumps`). Refused with a 400 naming the `proxy_jump` of
/// the written host at fault — its own, or the one a chain through it breaks at (a cycle,
/// more than 8 bastions) — and why; a written host made `local` while stored hosts jump
/// through it is a 409 `host_in_use` naming them. `unknown` says where a bastion is looked
/// for (`this org`), in the message for one that is nowhere.
pub(crate) fn check_bastions(
    stored: &[HostRecord],
    written: &[Written<'_>],
    unknown: &str,
) -> Result<(), ApiError> {
    struct Entry<'a> {
        name: &'a str,
        connection: &'a str,
        jump: Option<&'a str>,
        /// Its index in `written`; `None`: a stored host the request leaves as it is.
        written: Option<usize>,
    }
    let mut entries: Vec<Entry<'_>> = stored
        .iter()
        .filter(|h| !written.iter().any(|w| w.host.name == h.name))
        .map(|h| Entry {
            name: &h.name,
            connection: &h.connection,
            jump: h.proxy_jump.as_deref(),
            written: None,
        })
        .collect();
    entries.extend(written.iter().enumerate().map(|(k, w)| Entry {
        name: &w.host.name,
        connection: &w.host.connection,
        jump: w.host.proxy_jump.as_deref(),
        written: Some(k),
    }));
    if entries.iter().all(|e| e.jump.is_none()) {
        return Ok(());
    }
    // Only names and connections matter to a chain.
    let hosts: Vec<engine::Host> = entries
        .iter()
        .map(|e| engine::Host {
            name: e.name.to_string(),
            address: e.name.to_string(),
            port: 22,
            user: None,
            connection: if e.connection == "local" {
                engine::ConnectionKind::Local
            } else {
                engine::ConnectionKind::Ssh
            },
            labels: Vec::new(),
            vars: BTreeMap::new(),
            environment: None,
            identity_file: None,
            known_hosts: None,
            host_key: None,
            proxy_jump: None,
        })
        .collect();
    let jumps: Vec<Option<String>> = entries.iter().map(|e| e.jump.map(str::to_string)).collect();
    let Err((i, why)) = engine::resolve_jumps(hosts, &jumps, |i, why| (i, why)) else {
        return Ok(());
    };
    let by_name: HashMap<&str, usize> = entries
        .iter()
        .enumerate()
        .map(|(k, e)| (e.name, k))
        .collect();
    if let JumpError::LocalBastion { bastion } = &why {
        if entries[i].written.is_none() {
            // A written host made local while stored hosts jump through it.
            let mut hosts: Vec<String> = entries
                .iter()
                .filter(|e| e.written.is_none() && e.jump == Some(bastion.as_str()))
                .map(|e| e.name.to_string())
                .collect();
            hosts.sort();
            return Err(StoreError::HostInUse {
                host: bastion.clone(),
                hosts,
            }
            .into());
        }
    }
    // The written host at fault: host `i`, or the first written host along its chain
    // (a cycle or a chain too long that a written host's bastion made).
    let mut at = i;
    let mut fault = None;
    for _ in 0..=entries.len() {
        if let Some(k) = entries[at].written {
            fault = Some(k);
            break;
        }
        match entries[at].jump.and_then(|j| by_name.get(j)) {
            Some(&next) => at = next,
            None => break,
        }
    }
    let Some(k) = fault else {
        return Err(ApiError::Internal(format!(
            "the org's stored bastions do not resolve: {why}"
        )));
    };
    let w = &written[k];
    let field = w
        .written_at
        .clone()
        .unwrap_or_else(|| format!("{}proxy_jump", w.prefix));
    let message = match &why {
        JumpError::Unknown { bastion } => {
            format!("`proxy_jump` names no host of {unknown}: `{bastion}`")
        }
        other => other.to_string(),
    };
    Err(invalid(field, message))
}

/// [`check_bastions`] of one host the API writes, against the org's stored hosts.
async fn check_org_bastions(state: &AppState, org: &str, host: &NewHost) -> Result<(), ApiError> {
    let touches_bastions = host.proxy_jump.is_some() || host.connection == "local";
    if !touches_bastions {
        return Ok(());
    }
    let stored = state.store.list_hosts(org).await?;
    check_bastions(
        &stored,
        &[Written {
            host,
            prefix: String::new(),
            written_at: None,
        }],
        "this org",
    )
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
        "environment": h.environment, "labels": h.labels, "proxy_jump": h.proxy_jump,
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
        proxy_jump: body.proxy_jump,
    };
    check_host("", &host)?;
    check_org_bastions(state, org, &host).await?;
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
    refuse_sourced(&current)?;
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
        proxy_jump: body.proxy_jump.unwrap_or(current.proxy_jump),
    };
    check_host("", &host)?;
    check_org_bastions(state, org, &host).await?;
    let audit = caller.audit(
        Some(org),
        "host.update",
        format!("host:{name}"),
        host_detail(&host),
    );
    Ok(host_wire(state.store.update_host(&host, &audit).await?))
}

/// A host taken from a stack's output is the stack's to change: refused, saying where
/// it comes from.
fn refuse_sourced(h: &HostRecord) -> Result<(), ApiError> {
    let Some(s) = &h.source else {
        return Ok(());
    };
    Err(ApiError::Conflict {
        code: bosun_api::ErrorCode::HostFromStack,
        message: format!(
            "host {:?} comes from output {} of stack {} (environment {}'s hosts_from): change \
             the stack's output, or the environment's hosts_from",
            h.name, s["output"], s["stack"], s["environment"]
        ),
    })
}

/// Deletes a host for `caller`.
pub async fn delete(
    state: &AppState,
    caller: &Caller,
    org: &str,
    name: &str,
) -> Result<(), ApiError> {
    if let Some(current) = state.store.get_host(org, name).await? {
        refuse_sourced(&current)?;
    }
    let audit = caller.audit(Some(org), "host.delete", format!("host:{name}"), json!({}));
    let done = state.store.delete_host(org, name, &audit).await?;
    deleted(done, "host", name, org)
}
