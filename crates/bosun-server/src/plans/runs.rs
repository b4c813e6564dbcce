//! Plan runs: creating one (the stored plan parsed with `bosun-plans`, its
//! target hosts resolved from the org's hosts, inputs checked, the approval gate, and the
//! concurrency guard inside the store's creating transaction), showing, listing, logs
//! and their SSE stream, abort; and the runner protocol for plan runs — the lease (plan
//! source plus an inventory of only the target hosts), heartbeat (answering abort),
//! logs, per-host results after each step, and the final report, each keyed by run id
//! and fencing number. The stale sweep's plan-run pass lives here too: a run whose
//! runner stopped reporting is `interrupted` with the progress it reported, a lease that
//! never started is requeued.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::Path;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::Json;
use bosun_api::{
    ErrorCode, Heartbeat, HeartbeatReply, LogAppend, LogChunk, PlanHostResult, PlanResultsAppend,
    PlanRunCreate, PlanRunLease, PlanRunView, PlanRunnerEvent, PlanRunnerReport,
};
use bosun_core::authz::{Access, PrincipalKind};
use bosun_core::plan_run::{gated_environments, PlanRunEvent, PlanRunState, PlanTrigger};
use bosun_core::{Role, ValidationError};
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
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::paging::{page, PageQuery};
use crate::route::{Endpoint, Route};
use crate::runners::{FencingQuery, NextSeq};
use crate::runs::{log_page, log_stream, LogsQuery, RunProgress};
use crate::secrets::mask::LogKind;
use bosun_api::Page;

/// At most this many hosts of a run work at once.
const FORKS: u32 = 20;
/// A plan run's results, logs and texts are capped per field (a runaway command must not
/// fill the database).
const MAX_OUTPUT: usize = 64 * 1024;

/// `POST /orgs/{org}/plans/{plan}/runs`
pub const CREATE: Endpoint =
    Endpoint::post("/orgs/{org}/plans/{plan}/runs", Access::Org(Role::Operator));

/// `GET /orgs/{org}/plan-runs/{run}`
pub const SHOW: Endpoint = Endpoint::get("/orgs/{org}/plan-runs/{run}", Access::Org(Role::Viewer));

/// `POST /orgs/{org}/plan-runs/{run}/abort`
pub const ABORT: Endpoint = Endpoint::post(
    "/orgs/{org}/plan-runs/{run}/abort",
    Access::Org(Role::Operator),
);

/// `GET /orgs/{org}/plan-runs/{run}/logs/stream`
pub const LOGS_STREAM: Endpoint = Endpoint::get(
    "/orgs/{org}/plan-runs/{run}/logs/stream",
    Access::Org(Role::Viewer),
);

pub fn routes() -> Vec<Route> {
    let viewer = Access::Org(Role::Viewer);
    vec![
        CREATE.route(create),
        Route::get("/orgs/{org}/plans/{plan}/runs", viewer, list),
        SHOW.route(show),
        ABORT.route(abort),
        Route::get("/orgs/{org}/plan-runs/{run}/logs", viewer, logs),
        LOGS_STREAM.route(logs_stream),
        Route::post(
            "/runner/plan-runs/{run}/heartbeat",
            Access::Runner,
            runner_heartbeat,
        ),
        Route::get(
            "/runner/plan-runs/{run}/logs/next",
            Access::Runner,
            runner_next_log_seq,
        ),
        Route::post("/runner/plan-runs/{run}/logs", Access::Runner, runner_logs),
        Route::post(
            "/runner/plan-runs/{run}/results",
            Access::Runner,
            runner_results,
        ),
        Route::post(
            "/runner/plan-runs/{run}/report",
            Access::Runner,
            runner_report,
        ),
    ]
}

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

fn to_wire(r: PlanRunRecord, results: Vec<PlanHostResultRecord>) -> PlanRunView {
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
        runner_id: r.runner_id,
        created_at: r.created_at,
        updated_at: r.updated_at,
        ended_at: r.ended_at,
        report: r.report,
    }
}

async fn load(state: &AppState, org: &str, id: &str) -> Result<PlanRunRecord, ApiError> {
    state
        .store
        .get_plan_run(id)
        .await?
        .filter(|r| r.org == org)
        .ok_or_else(|| ApiError::NotFound(format!("plan run {id:?}")))
}

/// The inventory document (JSON, which is YAML) of `hosts` and their environments, for
/// `bosun_plans::model::parse_inventory`.
fn inventory_document(hosts: &[&HostRecord], environments: &[EnvironmentRecord]) -> String {
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
        ] {
            if let Some(v) = value {
                host.insert(key.into(), json!(v));
            }
        }
        entries.insert(h.name.clone(), Value::Object(host));
    }
    json!({"environments": envs, "hosts": entries}).to_string()
}

/// Resolves what a new run of `plan` targets: the stored source parsed, the org's hosts as
/// an inventory, inputs checked against the plan's. Refusals name the field.
pub struct Resolved {
    pub plan: bosun_plans::model::Plan,
    pub hosts: Vec<String>,
    pub gated: Vec<String>,
}

pub async fn resolve(
    state: &AppState,
    org: &str,
    name: &str,
    source: &str,
    inputs: &BTreeMap<String, Value>,
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
    let hosts = state.store.list_hosts(org).await?;
    let environments = state.store.list_environments(org).await?;
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
    Ok(Resolved {
        plan,
        hosts: targets,
        gated,
    })
}

/// Creates a run of a stored plan (queued, or paused when a target environment requires
/// approval) and wakes waiting runners. The concurrency guard answers 409 naming the
/// overlapping hosts.
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
    let resolved = resolve(state, org, name, &plan.source, &body.inputs).await?;
    let run = NewPlanRun {
        id: new_plan_run_id(),
        org: org.to_string(),
        plan: name.to_string(),
        plan_version: plan.version,
        source: plan.source,
        inputs: body.inputs,
        dry_run: body.dry_run,
        requested_by,
        trigger,
        hosts: resolved.hosts,
        gated_environments: resolved.gated,
        concurrent: resolved.plan.concurrent_runs,
    };
    let created = state.store.create_plan_run(&run, &audit).await?;
    if created.needs_lease {
        state.wake_dispatch();
    }
    Ok(created)
}

/// Run a stored plan (or dry-run it).
#[utoipa::path(post, path = "/api/v1/orgs/{org}/plans/{plan}/runs", tag = "plan-runs",
    params(("org" = String, Path), ("plan" = String, Path)), request_body = PlanRunCreate,
    responses((status = 201, body = PlanRunView), (status = 400, body = bosun_api::ErrorBody),
        (status = 409, body = bosun_api::ErrorBody, description = "a run is in progress on the same targets")))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, plan)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<PlanRunCreate>,
) -> Result<(StatusCode, Json<PlanRunView>), ApiError> {
    let audit = caller.audit(
        Some(&org),
        "plan_run.create",
        format!("plan:{plan}"),
        json!({"dry_run": body.dry_run, "inputs": body.inputs.keys().collect::<Vec<_>>()}),
    );
    let run = start(
        &state,
        &org,
        &plan,
        body,
        PlanTrigger::Manual,
        caller.0.actor(),
        audit,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(to_wire(run, Vec::new()))))
}

/// A plan's runs, newest first; `cursor` (the last run's id) pages back.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/plans/{plan}/runs", tag = "plan-runs",
    params(("org" = String, Path), ("plan" = String, Path), PageQuery),
    responses((status = 200, body = Page<PlanRunView>)))]
pub async fn list(
    State(state): State<AppState>,
    ApiPath((org, plan)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> Result<Json<Page<PlanRunView>>, ApiError> {
    let limit = q.limit()?;
    if let Some(cursor) = &q.cursor {
        let known = state
            .store
            .get_plan_run(cursor)
            .await?
            .is_some_and(|r| r.org == org && r.plan == plan);
        if !known {
            return Err(ValidationError::new(
                "cursor",
                format!(
                    "no run {cursor:?} of plan {plan:?}: pass the id of the last run of the previous page"
                ),
            )
            .into());
        }
    }
    let runs = state
        .store
        .list_plan_runs(&org, Some(&plan), q.cursor.as_deref(), limit)
        .await?;
    let items = runs.into_iter().map(|r| to_wire(r, Vec::new())).collect();
    Ok(Json(page(items, limit, |r: &PlanRunView| r.id.clone())))
}

/// One plan run: state, reason, per-host results by step, the report (a dry run's
/// predictions and unresolved references).
#[utoipa::path(get, path = "/api/v1/orgs/{org}/plan-runs/{run}", tag = "plan-runs",
    params(("org" = String, Path), ("run" = String, Path)),
    responses((status = 200, body = PlanRunView), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn show(
    State(state): State<AppState>,
    ApiPath((org, id)): ApiPath<(String, String)>,
) -> Result<Json<PlanRunView>, ApiError> {
    let run = load(&state, &org, &id).await?;
    let results = state.store.plan_run_results(&id).await?;
    Ok(Json(to_wire(run, results)))
}

/// Abort a run: settled `aborted` at once; a runner executing it is told through its
/// heartbeat answer and stops (running remote commands are killed with the connection).
#[utoipa::path(post, path = "/api/v1/orgs/{org}/plan-runs/{run}/abort", tag = "plan-runs",
    params(("org" = String, Path), ("run" = String, Path)),
    responses((status = 200, body = PlanRunView), (status = 409, body = bosun_api::ErrorBody)))]
pub async fn abort(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id)): ApiPath<(String, String)>,
) -> Result<Json<PlanRunView>, ApiError> {
    load(&state, &org, &id).await?;
    let input = PlanRunEventInput {
        event: PlanRunEvent::Abort,
        fencing: None,
        reason: Some(format!("aborted by {}", caller.0.actor())),
        report: None,
        audit: Some(caller.audit(
            Some(&org),
            "plan_run.abort",
            format!("plan_run:{id}"),
            json!({}),
        )),
    };
    let run = state.store.plan_run_event(&id, &input).await?;
    let results = state.store.plan_run_results(&id).await?;
    Ok(Json(to_wire(run, results)))
}

/// A page of the run's log, in order.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/plan-runs/{run}/logs", tag = "plan-runs",
    params(("org" = String, Path), ("run" = String, Path), LogsQuery),
    responses((status = 200, body = Vec<LogChunk>)))]
pub async fn logs(
    State(state): State<AppState>,
    ApiPath((org, id)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<LogsQuery>,
) -> Result<Json<Vec<LogChunk>>, ApiError> {
    load(&state, &org, &id).await?;
    let limit = crate::paging::page_limit(q.limit.or(Some(1000)))?;
    Ok(log_page(
        state.store.read_plan_run_logs(&id, q.after, limit).await?,
    ))
}

/// The run's log as server-sent events, like a stack run's: `chunk` events carrying a
/// LogChunk, then an `end` event with the run's final state once it ended and every
/// chunk was sent.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/plan-runs/{run}/logs/stream", tag = "plan-runs",
    params(("org" = String, Path), ("run" = String, Path), LogsQuery),
    responses((status = 200, description = "text/event-stream")))]
pub async fn logs_stream(
    State(state): State<AppState>,
    ApiPath((org, id)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<LogsQuery>,
) -> Result<Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    load(&state, &org, &id).await?;
    let read_id = id.clone();
    Ok(log_stream(
        state,
        id.clone(),
        q.after,
        move |state| {
            let id = id.clone();
            async move {
                Ok(match state.store.get_plan_run(&id).await? {
                    None => RunProgress::Gone,
                    // An aborted run may still be held by its runner until it stops: its
                    // last lines are worth waiting for.
                    Some(r) if r.state.is_terminal() && !r.leased => {
                        RunProgress::Ended(r.state.as_str())
                    }
                    Some(_) => RunProgress::Going,
                })
            }
        },
        move |state, after| {
            let id = read_id.clone();
            async move { state.store.read_plan_run_logs(&id, after, 1000).await }
        },
    ))
}

// ---- The runner protocol ----

/// What a runner needs to execute a leased plan run: the plan source it was created
/// with, an inventory of only its target hosts (as they are now) and their environments,
/// and its resolved secrets (`super::secrets`). `None`: a secret could not be resolved
/// and the run was failed with the reason.
pub async fn build_lease(
    state: &AppState,
    run: &PlanRunRecord,
) -> Result<Option<PlanRunLease>, ApiError> {
    let hosts = state.store.list_hosts(&run.org).await?;
    let environments = state.store.list_environments(&run.org).await?;
    let targets = targets(run, &hosts);
    let secrets = match super::secrets::for_lease(state, run, &targets, &environments).await? {
        Ok(s) => s,
        Err(reason) => {
            super::secrets::fail_before_start(state, run, reason).await?;
            return Ok(None);
        }
    };
    state
        .lease_masks
        .register(LogKind::PlanRun, &run.id, run.fencing, secrets.mask.clone());
    Ok(Some(PlanRunLease {
        run_id: run.id.clone(),
        fencing: run.fencing,
        org: run.org.clone(),
        plan: run.plan.clone(),
        source: run.source.clone(),
        inventory: inventory_document(&targets, &environments),
        inputs: run.inputs.clone(),
        dry_run: run.dry_run,
        forks: FORKS,
        heartbeat_seconds: state.config.runs.heartbeat.as_secs().max(1),
        mask: secrets.mask,
        secrets: secrets.secrets,
    }))
}

/// The run's target hosts among `hosts`, in the run's order (a host deleted since is
/// left out).
pub(super) fn targets<'a>(run: &PlanRunRecord, hosts: &'a [HostRecord]) -> Vec<&'a HostRecord> {
    run.hosts
        .iter()
        .filter_map(|name| hosts.iter().find(|h| &h.name == name))
        .collect()
}

/// A plan run the caller's pool may act on.
async fn pool_plan_run(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<PlanRunRecord, ApiError> {
    let org = match &caller.0.kind {
        PrincipalKind::Pool { org, .. } => org.clone(),
        _ => {
            return Err(ApiError::Forbidden(
                "this endpoint needs a runner-pool token".into(),
            ))
        }
    };
    state
        .store
        .get_plan_run(id)
        .await?
        .filter(|r| org.as_ref().is_none_or(|o| *o == r.org))
        .ok_or_else(|| ApiError::NotFound(format!("plan run {id:?}")))
}

/// Liveness of a leased plan run; `cancel` answers an abort.
#[utoipa::path(post, path = "/api/v1/runner/plan-runs/{run}/heartbeat", tag = "runners",
    params(("run" = String, Path)), request_body = Heartbeat,
    responses((status = 200, body = HeartbeatReply), (status = 409, body = bosun_api::ErrorBody, description = "fenced")))]
pub async fn runner_heartbeat(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<Heartbeat>,
) -> Result<Json<HeartbeatReply>, ApiError> {
    pool_plan_run(&state, &caller, &id).await?;
    let cancel = state.store.plan_run_heartbeat(&id, body.fencing).await?;
    Ok(Json(HeartbeatReply { cancel }))
}

/// Where a runner continues the plan run's log.
#[utoipa::path(get, path = "/api/v1/runner/plan-runs/{run}/logs/next", tag = "runners",
    params(("run" = String, Path), FencingQuery), responses((status = 200, body = NextSeq)))]
pub async fn runner_next_log_seq(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<FencingQuery>,
) -> Result<Json<NextSeq>, ApiError> {
    let run = pool_plan_run(&state, &caller, &id).await?;
    if run.fencing != q.fencing || !run.leased {
        return Err(StoreError::Fenced {
            run: id,
            fencing: q.fencing,
        }
        .into());
    }
    Ok(Json(NextSeq {
        next_seq: state.store.next_plan_run_log_seq(&id).await?,
    }))
}

/// Append log chunks; a chunk whose seq is already stored is ignored.
#[utoipa::path(post, path = "/api/v1/runner/plan-runs/{run}/logs", tag = "runners",
    params(("run" = String, Path)), request_body = LogAppend, responses((status = 204)))]
pub async fn runner_logs(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<LogAppend>,
) -> Result<StatusCode, ApiError> {
    let run = pool_plan_run(&state, &caller, &id).await?;
    let (fencing, store, id) = (body.fencing, &state.store, id.as_str());
    state
        .lease_masks
        .append_masked(
            LogKind::PlanRun,
            id,
            fencing,
            body.chunks,
            || super::secrets::lease_mask_again(&state, &run),
            |chunks| async move {
                store.append_plan_run_logs(id, fencing, &chunks).await?;
                Ok(())
            },
        )
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

fn capped(text: String) -> String {
    if text.len() <= MAX_OUTPUT {
        return text;
    }
    let mut end = MAX_OUTPUT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n… [truncated: {} bytes in all]",
        &text[..end],
        text.len()
    )
}

/// Per-host results of finished steps (so an interrupted run keeps its progress).
#[utoipa::path(post, path = "/api/v1/runner/plan-runs/{run}/results", tag = "runners",
    params(("run" = String, Path)), request_body = PlanResultsAppend, responses((status = 204)))]
pub async fn runner_results(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<PlanResultsAppend>,
) -> Result<StatusCode, ApiError> {
    let run = pool_plan_run(&state, &caller, &id).await?;
    // The lease's secret values are masked here too, as in the log: a runner that does
    // not mask them is not trusted to.
    let masker = state
        .lease_masks
        .masker(LogKind::PlanRun, &id, body.fencing, || {
            super::secrets::lease_mask_again(&state, &run)
        })
        .await?;
    let mask = |text: String| capped(masker.redact(&text).into_owned());
    let results: Vec<PlanHostResultRecord> = body
        .results
        .into_iter()
        .map(|r| PlanHostResultRecord {
            step: r.step,
            step_name: r.step_name,
            module: r.module,
            host: r.host,
            status: r.status,
            ignored: r.ignored,
            changed: r.changed,
            exit_code: r.exit_code,
            stdout: mask(r.stdout),
            stderr: mask(r.stderr),
            duration_ms: r.duration_ms,
            message: mask(r.message),
            diff: r.diff.map(mask),
        })
        .collect();
    state
        .store
        .put_plan_run_results(&id, body.fencing, &results)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// What happened to the leased plan run: started, finished (with its report), aborted.
#[utoipa::path(post, path = "/api/v1/runner/plan-runs/{run}/report", tag = "runners",
    params(("run" = String, Path)), request_body = PlanRunnerReport,
    responses((status = 204), (status = 409, body = bosun_api::ErrorBody)))]
pub async fn runner_report(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<PlanRunnerReport>,
) -> Result<StatusCode, ApiError> {
    let run = pool_plan_run(&state, &caller, &id).await?;
    // Taken before the log's tail is flushed, which forgets the lease.
    let masker = match body.event {
        PlanRunnerEvent::Finished { .. } => Some(
            state
                .lease_masks
                .report_masker(LogKind::PlanRun, &id, body.fencing, || {
                    super::secrets::lease_mask_again(&state, &run)
                })
                .await,
        ),
        _ => None,
    };
    if !matches!(body.event, PlanRunnerEvent::Started) {
        flush_masked_tail(&state, &run, body.fencing).await;
    }
    let (event, reason, report) = match body.event {
        PlanRunnerEvent::Started => (PlanRunEvent::Started, None, None),
        PlanRunnerEvent::Finished { ok, reason, report } => {
            let masker = masker.unwrap_or_default();
            let reason = reason.map(|r| masker.redact(&r).chars().take(2000).collect());
            let report = report.map(|mut r| {
                masker.redact_json(&mut r);
                r
            });
            (PlanRunEvent::Finished { ok }, reason, report)
        }
        PlanRunnerEvent::Aborted => (PlanRunEvent::AbortAcknowledged, None, None),
    };
    let input = PlanRunEventInput {
        event,
        fencing: Some(body.fencing),
        reason,
        report,
        audit: None,
    };
    state.store.plan_run_event(&id, &input).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Stores what the log masking still held back when the lease `fencing` ends (the
/// beginning of a value nothing completed), as the log's last chunk. Best effort: the
/// report that follows decides the run, and a refused append only loses that end.
async fn flush_masked_tail(state: &AppState, run: &PlanRunRecord, fencing: i64) {
    let Some(tail) = state
        .lease_masks
        .take_tail(LogKind::PlanRun, &run.id, fencing)
        .await
    else {
        return;
    };
    let appended = async {
        let seq = state.store.next_plan_run_log_seq(&run.id).await?;
        state
            .store
            .append_plan_run_logs(&run.id, fencing, &[(seq, tail)])
            .await
    };
    if let Err(e) = appended.await {
        tracing::warn!(run = %run.id, error = %e, "could not store the end of a plan run's log");
    }
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
            Ok(true)
        }
        // The runner reported meanwhile: nothing to settle.
        Err(StoreError::Fenced { .. }) | Err(StoreError::InvalidPlanTransition(_)) => Ok(false),
        Err(e) => Err(e),
    }
}
