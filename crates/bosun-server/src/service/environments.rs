//! Environments with their approval grants: listed and shown with the hosts in them,
//! created, changed and deleted, and a grant given only to a member who may approve —
//! the work behind the API's environment handlers.

use bosun_api::{EnvironmentCreate, EnvironmentInfo, EnvironmentPatch, Page};
use bosun_core::plan_resources as rules;
use bosun_core::Role;
use bosun_store::{EnvironmentRecord, HostRecord, NewEnvironment};
use serde_json::{json, Value};

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::paging::{whole, PageQuery};
use crate::service::{deleted, invalid, vars_of};

fn environment_wire(e: EnvironmentRecord, hosts: &[HostRecord]) -> EnvironmentInfo {
    EnvironmentInfo {
        hosts: hosts
            .iter()
            .filter(|h| h.environment.as_deref() == Some(e.id.as_str()))
            .map(|h| h.name.clone())
            .collect(),
        hosts_from: e
            .hosts_from
            .as_ref()
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        hosts_from_preview: None,
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

/// The org's environments, by id, each with its grants and hosts: a small list,
/// answered whole as one page.
pub async fn list(
    state: &AppState,
    org: &str,
    q: &PageQuery,
) -> Result<Page<EnvironmentInfo>, ApiError> {
    q.whole()?;
    let envs = state.store.list_environments(org).await?;
    let hosts = state.store.list_hosts(org).await?;
    Ok(whole(
        envs.into_iter()
            .map(|e| environment_wire(e, &hosts))
            .collect(),
    ))
}

/// Adds an environment for `caller`, its id and variables checked.
pub async fn create(
    state: &AppState,
    caller: &Caller,
    org: &str,
    body: EnvironmentCreate,
) -> Result<EnvironmentInfo, ApiError> {
    rules::environment_id("id", &body.id)?;
    let env = NewEnvironment {
        org: org.to_string(),
        id: body.id.clone(),
        vars: vars_of("vars", body.vars.as_ref())?,
        requires_approval: body.requires_approval,
        protected: body.protected,
        hosts_from: crate::service::host_sources::check(body.hosts_from.as_ref())?,
    };
    let audit = caller.audit(
        Some(org),
        "environment.create",
        format!("environment:{}", env.id),
        json!({"requires_approval": env.requires_approval, "protected": env.protected,
            "hosts_from": env.hosts_from}),
    );
    let created = state.store.create_environment(&env, &audit).await?;
    environment_answer(state, org, created).await
}

/// One environment of `org`, with its grants and hosts, and what each of its sources of
/// hosts gives now.
pub async fn show(state: &AppState, org: &str, id: &str) -> Result<EnvironmentInfo, ApiError> {
    let env = load_environment(state, org, id).await?;
    let preview = crate::service::host_sources::preview(state, &env).await?;
    let mut info = environment_answer(state, org, env).await?;
    if !info.hosts_from.is_empty() {
        info.hosts_from_preview = Some(preview);
    }
    Ok(info)
}

/// Changes an environment's variables or flags for `caller`; grants stay.
pub async fn update(
    state: &AppState,
    caller: &Caller,
    org: &str,
    id: &str,
    body: EnvironmentPatch,
) -> Result<EnvironmentInfo, ApiError> {
    let current = load_environment(state, org, id).await?;
    let vars = match &body.vars {
        Some(v) => vars_of("vars", Some(v))?,
        None => current.vars,
    };
    let env = NewEnvironment {
        org: org.to_string(),
        id: id.to_string(),
        vars,
        requires_approval: body.requires_approval.unwrap_or(current.requires_approval),
        protected: body.protected.unwrap_or(current.protected),
        hosts_from: match &body.hosts_from {
            Some(raw) => crate::service::host_sources::check(Some(raw))?,
            None => current.hosts_from,
        },
    };
    let audit = caller.audit(
        Some(org),
        "environment.update",
        format!("environment:{id}"),
        json!({"requires_approval": env.requires_approval, "protected": env.protected,
            "vars_changed": body.vars.is_some(), "hosts_from": env.hosts_from}),
    );
    let updated = state.store.update_environment(&env, &audit).await?;
    environment_answer(state, org, updated).await
}

/// Deletes an environment and its grants for `caller`; the store refuses while hosts
/// are in it.
pub async fn delete(
    state: &AppState,
    caller: &Caller,
    org: &str,
    id: &str,
) -> Result<(), ApiError> {
    let audit = caller.audit(
        Some(org),
        "environment.delete",
        format!("environment:{id}"),
        json!({}),
    );
    let done = state.store.delete_environment(org, id, &audit).await?;
    deleted(done, "environment", id, org)
}

/// Grants `user` approval on an environment for `caller`: refused unless `user` is a
/// member of the org with operator or above, since approving needs that role too.
/// Idempotent.
pub async fn grant(
    state: &AppState,
    caller: &Caller,
    org: &str,
    id: &str,
    user: &str,
) -> Result<EnvironmentInfo, ApiError> {
    load_environment(state, org, id).await?;
    let roles = state.store.roles_of(user).await?;
    match roles.get(org) {
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
        Some(org),
        "environment.grant",
        format!("environment:{id}"),
        json!({"user": user}),
    );
    state.store.grant_environment(org, id, user, &audit).await?;
    let env = load_environment(state, org, id).await?;
    environment_answer(state, org, env).await
}

/// Revokes `user`'s grant on an environment for `caller`.
pub async fn revoke(
    state: &AppState,
    caller: &Caller,
    org: &str,
    id: &str,
    user: &str,
) -> Result<(), ApiError> {
    let audit = caller.audit(
        Some(org),
        "environment.revoke",
        format!("environment:{id}"),
        json!({"user": user}),
    );
    if state
        .store
        .revoke_environment_grant(org, id, user, &audit)
        .await?
    {
        Ok(())
    } else {
        Err(ApiError::NotFound(format!(
            "a grant for user {user:?} on environment {id:?}"
        )))
    }
}
