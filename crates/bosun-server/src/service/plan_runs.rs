//! Plan runs: creating one (the stored plan parsed with `bosun-plans`, its target hosts
//! resolved from the org's hosts, inputs checked, the approval gate — a paused run gets
//! its preview, a dry run of it — and the concurrency guard inside the store's creating
//! transaction), listing, showing, aborting and reading their logs, what a preview
//! predicts, and settling runs nothing executes any more — the work behind the API's
//! handlers, the console's pages, the scheduler and the stale sweep.

use std::collections::BTreeMap;
use std::path::Path;

use bosun_api::{ErrorCode, LogChunk, Page, PlanHostResult, PlanRunCreate, PlanRunView};
use bosun_core::plan_run::{gated_environments, PlanRunEvent, PlanRunState, PlanTrigger};
use bosun_core::ValidationError;
use bosun_store::{
    EnvironmentRecord, HostRecord, NewPlanRun, PlanHostResultRecord, PlanRunEventInput,
    PlanRunRecord, StoreError,
};
use chrono::Utc;
use rand::RngCore;
use serde_json::{json, Value};

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::logs::LogsQuery;
use crate::paging::{page, require_known_cursor, PageQuery};
use crate::service::host_sources;

/// A new plan-run id: time-ordered like stack runs, `prun-` so the two never collide.
pub fn new_plan_run_id() -> String {
    let mut r = [0u8; 5];
    rand::thread_rng().fill_bytes(&mut r);
    format!(
        "prun-{:011x}{}",
        Utc::now().timestamp_millis(),
        hex::encode(r)
    )
}

pub(crate) fn to_wire(r: PlanRunRecord, results: Vec<PlanHostResultRecord>) -> PlanRunView {
    PlanRunView {
        state: r.state.to_string(),
        trigger: r.trigger.to_string(),
        results: results
            .into_iter()
            .map(|h| PlanHostResult {
                step: h.step,
                step_name: h.step_name,
                module: h.module,
                host: h.host,
                status: h.status,
                ignored: h.ignored,
                changed: h.changed,
                exit_code: h.exit_code,
                stdout: h.stdout,
                stderr: h.stderr,
                duration_ms: h.duration_ms,
                message: h.message,
                diff: h.diff,
            })
            .collect(),
        id: r.id,
        org: r.org,
        plan: r.plan,
        plan_version: r.plan_version,
        reason: r.reason,
        dry_run: r.dry_run,
        inputs: r.inputs,
        requested_by: r.requested_by,
        hosts: r.hosts,
        gated_environments: r.gated_environments,
        preview: r.preview,
        preview_of: r.preview_of,
        policy_hold: r.policy_hold.map(|h| h.to_string()),
        policies: Vec::new(),
        sources: r.sources,
        upstream: r.upstream,
        runner_id: r.runner_id,
        created_at: r.created_at,
        updated_at: r.updated_at,
        ended_at: r.ended_at,
        report: r.report,
        summarised_at: r.summarised_at,
    }
}

pub(crate) async fn load(state: &AppState, org: &str, id: &str) -> Result<PlanRunRecord, ApiError> {
    state
        .store
        .get_plan_run(id)
        .await?
        .filter(|r| r.org == org)
        .ok_or_else(|| ApiError::NotFound(format!("plan run {id:?}")))
}

/// The run, when its log is still there: a run retention summarised answers `Gone`,
/// saying so in words.
pub(crate) async fn load_with_log(
    state: &AppState,
    org: &str,
    id: &str,
) -> Result<PlanRunRecord, ApiError> {
    let run = load(state, org, id).await?;
    match run.summarised_at {
        Some(at) => Err(ApiError::Gone(format!(
            "the log of plan run {id} was deleted by retention on {} (the run ended longer \
             ago than the server's run retention); the run's record, each host's status and \
             its report are kept",
            at.format("%Y-%m-%d %H:%M UTC")
        ))),
        None => Ok(run),
    }
}

/// The inventory document (JSON, which is YAML) of `hosts` and their environments, for
/// `bosun_plans::model::parse_inventory`. A host's bastion (`proxy_jump`) is written by
/// name: it must be among `hosts` too.
pub(crate) fn inventory_document(
    hosts: &[&HostRecord],
    environments: &[EnvironmentRecord],
) -> String {
    let mut envs = serde_json::Map::new();
    for e in environments {
        if hosts
            .iter()
            .any(|h| h.environment.as_deref() == Some(e.id.as_str()))
        {
            envs.insert(
                e.id.clone(),
                json!({"vars": e.vars, "requires_approval": e.requires_approval,
                    "protected": e.protected}),
            );
        }
    }
    let mut entries = serde_json::Map::new();
    for h in hosts {
        let mut host = serde_json::Map::new();
        host.insert("address".into(), json!(h.address));
        host.insert("port".into(), json!(h.port));
        host.insert("connection".into(), json!(h.connection));
        host.insert("labels".into(), json!(h.labels));
        host.insert("vars".into(), json!(h.vars));
        for (key, value) in [
            ("user", &h.user),
            ("environment", &h.environment),
            ("identity_file", &h.identity_file),
            ("known_hosts", &h.known_hosts),
            ("host_key", &h.host_key),
            ("proxy_jump", &h.proxy_jump),
        ] {
            if let Some(v) = value {
                host.insert(key.into(), json!(v));
            }
        }
        entries.insert(h.name.clone(), Value::Object(host));
    }
    json!({"environments": envs, "hosts": entries}).to_string()
}

/// The inventory document a runner gets for a run on `targets`: those hosts, and every
/// host their bastion chains pass through (found among the org's `hosts`, transitively),
/// which are no targets. A bastion that is not a target is written as a bastion only,
/// without labels, variables or environment: nothing of the plan's `targets` can match
/// it, and none of its variables (or their secrets) go to the runner. The lease names
/// the run's hosts too, and the runner runs on those alone.
pub(crate) fn lease_inventory(
    targets: &[&HostRecord],
    hosts: &[HostRecord],
    environments: &[EnvironmentRecord],
) -> String {
    let mut bastions: Vec<HostRecord> = Vec::new();
    for target in targets {
        let mut next = target.proxy_jump.as_deref();
        // At most one step per host: a chain the store let through is never longer.
        for _ in 0..hosts.len() {
            let Some(name) = next else { break };
            let known =
                targets.iter().any(|t| t.name == name) || bastions.iter().any(|b| b.name == name);
            let Some(bastion) = hosts.iter().find(|h| h.name == name) else {
                break;
            };
            if !known {
                let mut only = bastion.clone();
                only.labels.clear();
                only.vars.clear();
                only.environment = None;
                bastions.push(only);
            }
            next = bastion.proxy_jump.as_deref();
        }
    }
    let all: Vec<&HostRecord> = targets.iter().copied().chain(bastions.iter()).collect();
    inventory_document(&all, environments)
}

/// Resolves what a new run of `plan` targets: the stored source parsed, the org's hosts as
/// an inventory, inputs checked against the plan's. Refusals name the field.
pub struct Resolved {
    pub plan: bosun_plans::model::Plan,
    pub hosts: Vec<String>,
    pub gated: Vec<String>,
    /// Policies of the `plan_run` point attach to its targets (their labels or
    /// environments, or the whole org): a real run waits for their verdict on its dry run.
    pub policy_check: bool,
    /// The hosts taken from stacks' outputs (see [`host_sources::sync`]).
    pub sources: Option<Value>,
}

/// Resolves a new run of `plan`: first the org's hosts taken from stacks' outputs, kept
/// as they stand now (`actor` is audited for the change), then the targets.
pub async fn resolve(
    state: &AppState,
    org: &str,
    name: &str,
    source: &str,
    inputs: &BTreeMap<String, Value>,
    actor: &str,
) -> Result<Resolved, ApiError> {
    let file = format!("{name}.yaml");
    let plan = bosun_plans::model::parse_plan(Path::new(&file), source).map_err(|e| {
        ApiError::Conflict {
            code: ErrorCode::InvalidPlan,
            message: format!("the stored plan {name:?} no longer parses: {e}"),
        }
    })?;
    if let Some(unknown) = inputs.keys().find(|k| !plan.inputs.contains_key(*k)) {
        let declared: Vec<&str> = plan.inputs.keys().map(String::as_str).collect();
        return Err(ValidationError::new(
            format!("inputs.{unknown}"),
            format!(
                "the plan {name:?} has no input {unknown:?} (it declares: {})",
                if declared.is_empty() {
                    "none".to_string()
                } else {
                    declared.join(", ")
                }
            ),
        )
        .into());
    }
    let environments = state.store.list_environments(org).await?;
    let mut sources = host_sources::sync(state, org, &environments, actor).await?;
    // The plan's own sources: their hosts are targets whatever their labels.
    let (own_hosts, own_record) = if plan.targets.hosts_from.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        host_sources::sync_plan(state, org, name, &plan.targets.hosts_from, actor).await?
    };
    if !own_record.is_empty() {
        let mut all = match sources.take() {
            Some(Value::Array(a)) => a,
            _ => Vec::new(),
        };
        all.extend(own_record);
        sources = Some(Value::Array(all));
    }
    let hosts = state.store.list_hosts(org).await?;
    let all: Vec<&HostRecord> = hosts.iter().collect();
    let inventory = bosun_plans::model::parse_inventory(
        Path::new("inventory"),
        &inventory_document(&all, &environments),
    )
    .map_err(|e| ApiError::Internal(format!("the org's hosts do not form an inventory: {e}")))?;
    let targets: Vec<String> = plan
        .target_hosts(&inventory)
        .into_iter()
        .map(|h| h.name.clone())
        .filter(|h| !own_hosts.contains(h))
        .chain(own_hosts.iter().cloned())
        .collect();
    if targets.is_empty() {
        return Err(ValidationError::new(
            "targets",
            format!(
                "the plan {name:?} targets no host of this org (hosts: {:?}, labels: {:?}, environments: {:?})",
                plan.targets.hosts, plan.targets.labels, plan.targets.environments
            ),
        )
        .into());
    }
    let gated = gated_environments(targets.iter().filter_map(|t| {
        let env = hosts
            .iter()
            .find(|h| &h.name == t)?
            .environment
            .as_deref()?;
        let record = environments.iter().find(|e| e.id == env)?;
        Some((record.id.as_str(), record.requires_approval))
    }));
    let target_hosts: Vec<&HostRecord> =
        hosts.iter().filter(|h| targets.contains(&h.name)).collect();
    let mut labels: Vec<String> = target_hosts
        .iter()
        .flat_map(|h| h.labels.iter().cloned())
        .collect();
    labels.sort();
    labels.dedup();
    let mut envs: Vec<String> = target_hosts
        .iter()
        .filter_map(|h| h.environment.clone())
        .collect();
    envs.sort();
    envs.dedup();
    let policy_check = !crate::service::policies::attached(
        state,
        org,
        bosun_core::policy::Point::PlanRun,
        bosun_core::policy::Subject {
            labels: &labels,
            environments: &envs,
        },
    )
    .await?
    .is_empty();
    Ok(Resolved {
        plan,
        hosts: targets,
        gated,
        policy_check,
        sources,
    })
}

/// Creates a run of a stored plan (queued, or paused when a target environment requires
/// approval) and wakes waiting runners. A dry run changes no host, so it never waits for
/// an approval. A paused run is created with its preview, a dry run of it queued at once
/// ([`new_run_ids`]). The concurrency guard answers 409 naming the overlapping hosts and
/// the runs holding them.
pub async fn start(
    state: &AppState,
    org: &str,
    name: &str,
    body: PlanRunCreate,
    trigger: PlanTrigger,
    requested_by: String,
    audit: bosun_store::Audit,
) -> Result<PlanRunRecord, ApiError> {
    let plan = state
        .store
        .get_plan(org, name)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("plan {name:?}")))?;
    let resolved = resolve(state, org, name, &plan.source, &body.inputs, &requested_by).await?;
    let (id, preview) = new_run_ids(body.dry_run, &resolved.gated, resolved.policy_check);
    let run = NewPlanRun {
        id,
        org: org.to_string(),
        plan: name.to_string(),
        plan_version: plan.version,
        source: plan.source,
        inputs: body.inputs,
        dry_run: body.dry_run,
        requested_by,
        trigger,
        hosts: resolved.hosts,
        gated_environments: if body.dry_run {
            Vec::new()
        } else {
            resolved.gated
        },
        concurrent: resolved.plan.concurrent_runs,
        preview,
        policy_check: resolved.policy_check && !body.dry_run,
        sources: resolved.sources,
        upstream: None,
        settles_trigger: None,
        failed: None,
    };
    let created = state.store.create_plan_run(&run, &audit).await?;
    if created.needs_lease || created.preview.is_some() {
        state.wake_dispatch();
    }
    Ok(created)
}

/// The ids of a new run and of its preview: a real run gated by `gated` environments, or
/// checked by policies on its dry run, starts paused, and the store creates a dry run of it beside it (same creation time),
/// so whoever decides sees what it would change; `None` for a dry run or a run that is
/// not gated. The preview's id sorts before the run's, so lists (newest first, then by
/// id) show the run, then its preview, and a plan's last run is the run.
pub fn new_run_ids(
    dry_run: bool,
    gated: &[String],
    policy_check: bool,
) -> (String, Option<String>) {
    let run = new_plan_run_id();
    if dry_run || (gated.is_empty() && !policy_check) {
        return (run, None);
    }
    let other = new_plan_run_id();
    if other < run {
        (run, Some(other))
    } else {
        (other, Some(run))
    }
}

/// Runs a stored plan (or dry-runs it) for `caller`, audited as `plan_run.create`.
pub async fn create(
    state: &AppState,
    caller: &Caller,
    org: &str,
    plan: &str,
    body: PlanRunCreate,
) -> Result<PlanRunView, ApiError> {
    let audit = caller.audit(
        Some(org),
        "plan_run.create",
        format!("plan:{plan}"),
        json!({"dry_run": body.dry_run, "inputs": body.inputs.keys().collect::<Vec<_>>()}),
    );
    let run = start(
        state,
        org,
        plan,
        body,
        PlanTrigger::Manual,
        caller.0.actor(),
        audit,
    )
    .await?;
    Ok(to_wire(run, Vec::new()))
}

/// Where a preview is, for whoever decides its run: what it predicts per host once it
/// ended (`2 hosts would change, 1 no change`), else `running` or `queued, waiting for a
/// runner` — `bosun_core::plan_run::describe_preview` over its results.
pub fn preview_outcome(preview: &PlanRunView) -> String {
    bosun_core::plan_run::describe_preview(
        &preview.state,
        &preview.hosts,
        preview.results.iter().map(PlanHostResult::outcome),
    )
}

/// A page of a plan's runs, newest first; the cursor is the last run's id.
pub async fn list(
    state: &AppState,
    org: &str,
    plan: &str,
    q: &PageQuery,
) -> Result<Page<PlanRunView>, ApiError> {
    let limit = q.limit()?;
    if let Some(cursor) = &q.cursor {
        let found = state.store.get_plan_run(cursor).await?;
        let known = found.is_some_and(|r| r.org == org && r.plan == plan);
        require_known_cursor(cursor, known, &format!("plan {plan:?}"))?;
    }
    let runs = state
        .store
        .list_plan_runs(org, Some(plan), q.cursor.as_deref(), limit)
        .await?;
    let items = runs.into_iter().map(|r| to_wire(r, Vec::new())).collect();
    Ok(page(items, limit, |r: &PlanRunView| r.id.clone()))
}

/// One plan run with its per-host results.
pub async fn show(state: &AppState, org: &str, id: &str) -> Result<PlanRunView, ApiError> {
    let run = load(state, org, id).await?;
    let results = state.store.plan_run_results(id).await?;
    let mut wire = to_wire(run, results);
    wire.policies = state
        .store
        .policy_evaluations(id)
        .await?
        .into_iter()
        .map(crate::service::policies::evaluation_view)
        .collect();
    Ok(wire)
}

/// Aborts a run for `caller`: settled `aborted` at once; its runner stops when its next
/// heartbeat hears of it.
pub async fn abort(
    state: &AppState,
    caller: &Caller,
    org: &str,
    id: &str,
) -> Result<PlanRunView, ApiError> {
    load(state, org, id).await?;
    let input = PlanRunEventInput {
        event: PlanRunEvent::Abort,
        fencing: None,
        reason: Some(format!("aborted by {}", caller.0.actor())),
        report: None,
        audit: Some(caller.audit(
            Some(org),
            "plan_run.abort",
            format!("plan_run:{id}"),
            json!({}),
        )),
    };
    let run = state.store.plan_run_event(id, &input).await?;
    // An aborted preview settles the run it previews, when policies wait for it.
    crate::service::policies::after_preview(state, &run).await?;
    let results = state.store.plan_run_results(id).await?;
    Ok(to_wire(run, results))
}

/// A page of a run's log, in order: chunks after `q.after`.
pub async fn logs(
    state: &AppState,
    org: &str,
    id: &str,
    q: &LogsQuery,
) -> Result<Vec<LogChunk>, ApiError> {
    load_with_log(state, org, id).await?;
    let limit = crate::paging::page_limit(q.limit.or(Some(1000)))?;
    Ok(crate::logs::log_page(
        state.store.read_plan_run_logs(id, q.after, limit).await?,
    ))
}

/// The stale sweep's pass over plan runs: a leased run with no heartbeat since
/// `before` is settled by [`settle_silent`]. Returns how many it moved.
pub async fn sweep_stale(
    state: &AppState,
    before: chrono::DateTime<Utc>,
) -> Result<usize, StoreError> {
    let mut moved = 0;
    for run in state.store.stale_plan_runs(before).await? {
        if settle_silent(state, &run, None).await? {
            moved += 1;
        }
    }
    Ok(moved)
}

/// Settles a leased plan run nothing executes any more (its runner went silent, or died
/// with an earlier server process): requeued when it never started (nothing ran), else
/// `interrupted` keeping its per-host progress, with `reason` or the stale reason; an
/// aborted run's lease is released. `false` when the runner reported meanwhile.
pub async fn settle_silent(
    state: &AppState,
    run: &PlanRunRecord,
    reason: Option<String>,
) -> Result<bool, StoreError> {
    let (event, reason) = if run.state == PlanRunState::Aborted {
        // Settled already: only the lease is released, the abort's reason stays.
        (PlanRunEvent::Stale, None)
    } else if run.started {
        (PlanRunEvent::Stale, reason)
    } else {
        (PlanRunEvent::Requeue, None)
    };
    let input = PlanRunEventInput {
        event,
        fencing: Some(run.fencing),
        reason,
        report: None,
        audit: None,
    };
    match state.store.plan_run_event(&run.id, &input).await {
        Ok(out) => {
            tracing::warn!(plan_run = %run.id, state = %out.state, "silent plan run settled");
            // An interrupted preview settles the run whose policies wait for it.
            if let Err(e) = crate::service::policies::after_preview(state, &out).await {
                tracing::warn!(plan_run = %run.id, error = %e, "could not settle the run this preview was for");
            }
            Ok(true)
        }
        // The runner reported meanwhile: nothing to settle.
        Err(StoreError::Fenced { .. }) | Err(StoreError::InvalidPlanTransition(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The run's target hosts among `hosts`, in the run's order (a host deleted since is
/// left out).
pub(crate) fn targets<'a>(run: &PlanRunRecord, hosts: &'a [HostRecord]) -> Vec<&'a HostRecord> {
    run.hosts
        .iter()
        .filter_map(|name| hosts.iter().find(|h| &h.name == name))
        .collect()
}
