//! Hosts from stacks' outputs: an environment's `hosts_from` checked when it is saved,
//! previewed when it is shown, and resolved when a plan run starts. Resolving a source
//! reads its stack (of the same org) and that stack's current state's output, renders
//! each entry into a host (`bosun_plans::host_source`), and checks each host as one
//! added by hand. The hosts are then kept as the environment's sourced hosts: the store
//! adds, updates and removes them in one transaction. The run records what it read.
//!
//! A source that gives no hosts — a missing stack, state or output, a sensitive output,
//! an entry that does not render or is not a valid host — refuses the run, naming the
//! environment, the source and why. A sensitive output is never read: its values would
//! become host names, addresses and labels.

use bosun_api::ErrorCode;
use bosun_core::plan_resources as rules;
use bosun_plans::host_source::{self, HostsFrom};
use bosun_store::{Audit, EnvironmentRecord, NewHost, SourcedHosts, StoreError};
use serde_json::{json, Value};

use crate::app::AppState;
use crate::error::ApiError;
use crate::service::hosts::check_host;

/// Checks an environment's `hosts_from` as given (`null` or `[]`: none); the sources as
/// stored, or `None`.
pub fn check(raw: Option<&Value>) -> Result<Option<Value>, ApiError> {
    let Some(raw) = raw.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let sources =
        host_source::parse(raw).map_err(|e| crate::service::invalid(e.field, e.message))?;
    for (i, s) in sources.iter().enumerate() {
        bosun_core::Slug::parse(&format!("hosts_from[{i}].stack"), &s.stack)?;
    }
    if sources.is_empty() {
        return Ok(None);
    }
    Ok(Some(serde_json::to_value(&sources).unwrap_or(Value::Null)))
}

/// An environment's sources as stored (checked when saved).
pub fn sources_of(env: &EnvironmentRecord) -> Vec<HostsFrom> {
    env.hosts_from
        .as_ref()
        .and_then(|v| host_source::parse(v).ok())
        .unwrap_or_default()
}

/// What one source gives now.
pub struct Resolved {
    pub stack: String,
    pub output: String,
    /// The state version read.
    pub version: i64,
    pub hosts: Vec<NewHost>,
}

/// Resolves one source of environment `env` (`None`: a plan's targets) from its stack's
/// current state, or says why it gives no hosts.
pub async fn resolve(
    state: &AppState,
    org: &str,
    env: Option<&str>,
    source: &HostsFrom,
) -> Result<Result<Resolved, String>, ApiError> {
    let (stack, output) = (&source.stack, &source.output);
    if state.store.get_stack(org, stack).await?.is_none() {
        return Ok(Err(format!(
            "stack {stack:?} does not exist in org {org:?}"
        )));
    }
    // The current version's outputs, without reading its body.
    let Some(meta) = state.store.state_head(org, stack).await?.current else {
        return Ok(Err(format!(
            "stack {stack:?} has no state yet: its output {output:?} cannot be read"
        )));
    };
    let Some(value) = meta.outputs.get(output) else {
        let names: Vec<&str> = meta.outputs.keys().map(String::as_str).collect();
        return Ok(Err(format!(
            "stack {stack:?} has no output {output:?} in state version {} (its outputs: {})",
            meta.version,
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        )));
    };
    if value.sensitive {
        return Ok(Err(format!(
            "output {output:?} of stack {stack:?} is sensitive: its values would show as host \
             names, addresses and labels, so it is not read"
        )));
    }
    let rendered = match host_source::render(source, &value.value) {
        Ok(r) => r,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let mut hosts: Vec<NewHost> = Vec::with_capacity(rendered.len());
    for (i, r) in rendered.into_iter().enumerate() {
        let port = match &r.port {
            None => 22,
            Some(p) => match p.parse::<i64>() {
                Ok(n) => match rules::port("port", n) {
                    Ok(p) => p,
                    Err(e) => return Ok(Err(format!("entry {i}: {e}"))),
                },
                Err(_) => return Ok(Err(format!("entry {i}: port: {p:?} is not a number"))),
            },
        };
        let host = NewHost {
            org: org.to_string(),
            name: r.name,
            address: r.address,
            port,
            user: r.user,
            connection: "ssh".into(),
            labels: r.labels,
            vars: r
                .vars
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect(),
            environment: env.map(str::to_string),
            identity_file: r.identity_file,
            host_key: r.host_key,
            known_hosts: r.known_hosts,
            proxy_jump: None,
        };
        if let Err(e) = check_host("", &host) {
            return Ok(Err(format!("entry {i}: {e}")));
        }
        if hosts.iter().any(|h| h.name == host.name) {
            return Ok(Err(format!(
                "entry {i}: the host name {:?} is given twice",
                host.name
            )));
        }
        hosts.push(host);
    }
    Ok(Ok(Resolved {
        stack: stack.clone(),
        output: output.clone(),
        version: meta.version,
        hosts,
    }))
}

/// What `env show` previews of each source of `env`: the hosts it gives now, or why none.
pub async fn preview(state: &AppState, env: &EnvironmentRecord) -> Result<Vec<Value>, ApiError> {
    let mut out = Vec::new();
    for s in sources_of(env) {
        out.push(match resolve(state, &env.org, Some(&env.id), &s).await? {
            Ok(r) => json!({"stack": r.stack, "output": r.output, "version": r.version,
                "hosts": r.hosts.iter().map(|h| json!({"name": h.name, "address": h.address,
                    "port": h.port, "user": h.user, "labels": h.labels})).collect::<Vec<_>>()}),
            Err(why) => json!({"stack": s.stack, "output": s.output, "error": why}),
        });
    }
    Ok(out)
}

/// Who takes hosts from stacks' outputs: an environment, or a plan's own targets.
#[derive(Clone, Copy)]
enum Owner<'a> {
    Environment(&'a str),
    Plan(&'a str),
}

impl<'a> Owner<'a> {
    /// The store's owner key: the environment's id, or `plan:<name>`.
    fn key(self) -> String {
        match self {
            Owner::Environment(id) => id.to_string(),
            Owner::Plan(name) => format!("plan:{name}"),
        }
    }

    /// `environment "web"`, `plan "direct"`: how refusals name it.
    fn named(self) -> String {
        match self {
            Owner::Environment(id) => format!("environment {id:?}"),
            Owner::Plan(name) => format!("plan {name:?}"),
        }
    }

    /// Where its sources are written.
    fn field(self) -> &'static str {
        match self {
            Owner::Environment(_) => "hosts_from",
            Owner::Plan(_) => "targets.hosts_from",
        }
    }

    /// `{"environment": id}` or `{"plan": name}`, extended with `rest`.
    fn tag(self, rest: Value) -> Value {
        let mut v = match self {
            Owner::Environment(id) => json!({"environment": id}),
            Owner::Plan(name) => json!({"plan": name}),
        };
        if let (Value::Object(m), Value::Object(r)) = (&mut v, rest) {
            m.extend(r);
        }
        v
    }

    fn environment(self) -> Option<&'a str> {
        match self {
            Owner::Environment(id) => Some(id),
            Owner::Plan(_) => None,
        }
    }
}

/// Resolves `owner`'s sources and keeps their hosts (added, updated, removed) in one
/// store transaction; what was read, per source: `{environment | plan, stack, output,
/// version, hosts}`. A source that gives no hosts refuses the run
/// (`409 host_source_unresolved`), naming it.
async fn keep(
    state: &AppState,
    org: &str,
    owner: Owner<'_>,
    sources: &[HostsFrom],
    actor: &str,
) -> Result<Vec<Value>, ApiError> {
    let mut record = Vec::new();
    let mut hosts: Vec<(NewHost, Value)> = Vec::new();
    for (i, s) in sources.iter().enumerate() {
        let r = match resolve(state, org, owner.environment(), s).await? {
            Ok(r) => r,
            Err(why) => {
                return Err(unresolved(format!(
                    "{}, {}[{i}] (stack {:?}, output {:?}): {why}",
                    owner.named(),
                    owner.field(),
                    s.stack,
                    s.output
                )))
            }
        };
        let from = owner.tag(json!({"stack": r.stack, "output": r.output, "version": r.version}));
        record.push(owner.tag(json!({"stack": r.stack, "output": r.output,
            "version": r.version,
            "hosts": r.hosts.iter().map(|h| h.name.clone()).collect::<Vec<_>>()})));
        for h in r.hosts {
            if hosts.iter().any(|(other, _)| other.name == h.name) {
                return Err(unresolved(format!(
                    "{}: the host name {:?} is given by two sources",
                    owner.named(),
                    h.name
                )));
            }
            hosts.push((h, from.clone()));
        }
    }
    let audit = Audit {
        org: Some(org.to_string()),
        actor: actor.to_string(),
        token_id: None,
        action: "host.sync".into(),
        target: match owner {
            Owner::Environment(id) => format!("environment:{id}"),
            Owner::Plan(name) => format!("plan:{name}"),
        },
        detail: json!({}),
    };
    let sourced = SourcedHosts {
        org: org.to_string(),
        owner: owner.key(),
        environment: owner.environment().map(str::to_string),
        hosts,
    };
    match state.store.sync_sourced_hosts(&sourced, &audit).await {
        Ok(_) => Ok(record),
        Err(StoreError::AlreadyExists(what)) => Err(unresolved(format!(
            "{}: a stack's output gives {what}, which exists already",
            owner.named()
        ))),
        Err(e) => Err(e.into()),
    }
}

/// Resolves every environment's sources of `org` and keeps their hosts, before a plan
/// run's targets are chosen. `None` when no environment takes hosts from a stack; else
/// what was read, for the run's record.
pub async fn sync(
    state: &AppState,
    org: &str,
    environments: &[EnvironmentRecord],
    actor: &str,
) -> Result<Option<Value>, ApiError> {
    let mut record = Vec::new();
    for env in environments {
        let sources = sources_of(env);
        if !sources.is_empty() {
            record.extend(keep(state, org, Owner::Environment(&env.id), &sources, actor).await?);
        }
    }
    Ok((!record.is_empty()).then_some(Value::Array(record)))
}

/// Resolves a plan's own `targets.hosts_from` and keeps their hosts (in no environment;
/// owned by `plan:<name>`, removed with the plan). The hosts' names, and what was read
/// for the run's record.
pub async fn sync_plan(
    state: &AppState,
    org: &str,
    plan: &str,
    sources: &[HostsFrom],
    actor: &str,
) -> Result<(Vec<String>, Vec<Value>), ApiError> {
    let record = keep(state, org, Owner::Plan(plan), sources, actor).await?;
    let names = record
        .iter()
        .flat_map(|r| r["hosts"].as_array().cloned().unwrap_or_default())
        .filter_map(|h| h.as_str().map(str::to_string))
        .collect();
    Ok((names, record))
}

fn unresolved(message: String) -> ApiError {
    ApiError::Conflict {
        code: ErrorCode::HostSourceUnresolved,
        message,
    }
}
