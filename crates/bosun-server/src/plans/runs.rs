//! Plan runs over HTTP: the API's handlers, adapters over `crate::service::plan_runs`
//! (create, list, show, abort, logs and their SSE stream); and the runner protocol for
//! plan runs — the lease (plan source plus an inventory of only the target hosts),
//! heartbeat (answering abort), logs, per-host results after each step, and the final
//! report, each keyed by run id and fencing number. A lease's inventory also holds the
//! bastions its hosts are reached through, and names the run's hosts: the runner runs
//! the plan on those alone.

use std::convert::Infallible;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::Json;
use bosun_api::{
    Heartbeat, HeartbeatReply, LogAppend, LogChunk, PlanResultsAppend, PlanRunCreate, PlanRunLease,
    PlanRunView, PlanRunnerEvent, PlanRunnerReport,
};
use bosun_core::authz::{Access, PrincipalKind};
use bosun_core::plan_run::PlanRunEvent;
use bosun_core::Role;
use bosun_store::{PlanHostResultRecord, PlanRunEventInput, PlanRunRecord, StoreError};

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::fencing::{FencingQuery, NextSeq};
use crate::logs::{log_stream, LogsQuery, RunProgress};
use crate::paging::PageQuery;
use crate::route::{endpoint, route, Endpoint, Route};
use crate::secrets::mask::LogKind;
use crate::service::plan_runs as service;
use bosun_api::Page;

/// At most this many hosts of a run work at once.
const FORKS: u32 = 20;

/// Served by [`create`].
pub const CREATE: Endpoint = endpoint!(Access::Org(Role::Operator), create);

/// Served by [`show`].
pub const SHOW: Endpoint = endpoint!(Access::Org(Role::Viewer), show);

/// Served by [`abort`].
pub const ABORT: Endpoint = endpoint!(Access::Org(Role::Operator), abort);

/// Served by [`logs_stream`].
pub const LOGS_STREAM: Endpoint = endpoint!(Access::Org(Role::Viewer), logs_stream);

pub fn routes() -> Vec<Route> {
    let viewer = Access::Org(Role::Viewer);
    vec![
        CREATE.route(),
        route!(viewer, list),
        SHOW.route(),
        ABORT.route(),
        route!(viewer, logs),
        LOGS_STREAM.route(),
        route!(Access::Runner, runner_heartbeat),
        route!(Access::Runner, runner_next_log_seq),
        route!(Access::Runner, runner_logs),
        route!(Access::Runner, runner_results),
        route!(Access::Runner, runner_report),
    ]
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
    let run = service::create(&state, &caller, &org, &plan, body).await?;
    Ok((StatusCode::CREATED, Json(run)))
}

/// A plan's runs, newest first, a page at a time.
///
/// Paged: `next_cursor` is the page's last run's id while the page is full; a cursor that
/// is no run of the plan is refused.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/plans/{plan}/runs", tag = "plan-runs",
    params(("org" = String, Path), ("plan" = String, Path), PageQuery),
    responses((status = 200, body = Page<PlanRunView>)))]
pub async fn list(
    State(state): State<AppState>,
    ApiPath((org, plan)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> Result<Json<Page<PlanRunView>>, ApiError> {
    Ok(Json(service::list(&state, &org, &plan, &q).await?))
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
    Ok(Json(service::show(&state, &org, &id).await?))
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
    Ok(Json(service::abort(&state, &caller, &org, &id).await?))
}

/// A page of the run's log, in order; `410 gone` once retention summarised the run.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/plan-runs/{run}/logs", tag = "plan-runs",
    params(("org" = String, Path), ("run" = String, Path), LogsQuery),
    responses((status = 200, body = Vec<LogChunk>)))]
pub async fn logs(
    State(state): State<AppState>,
    ApiPath((org, id)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<LogsQuery>,
) -> Result<Json<Vec<LogChunk>>, ApiError> {
    Ok(Json(service::logs(&state, &org, &id, &q).await?))
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
    service::load_with_log(&state, &org, &id).await?;
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
/// with, an inventory of only its target hosts (as they are now) and their environments
/// — and of the bastions they are reached through, as bastions only — the run's hosts by
/// name,
/// and its resolved secrets (`super::secrets`). `None`: a secret could not be resolved
/// and the run was failed with the reason.
pub async fn build_lease(
    state: &AppState,
    run: &PlanRunRecord,
) -> Result<Option<PlanRunLease>, ApiError> {
    let hosts = state.store.list_hosts(&run.org).await?;
    let environments = state.store.list_environments(&run.org).await?;
    let targets = service::targets(run, &hosts);
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
        inventory: service::lease_inventory(&targets, &hosts, &environments),
        hosts: targets.iter().map(|h| h.name.clone()).collect(),
        inputs: run.inputs.clone(),
        dry_run: run.dry_run,
        forks: FORKS,
        heartbeat_seconds: state.config.runs.heartbeat.as_secs().max(1),
        mask: secrets.mask,
        secrets: secrets.secrets,
    }))
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
    let mask = |text: String| bosun_plans::exec::capped_output(masker.redact(&text).into_owned());
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
    let out = state.store.plan_run_event(&id, &input).await?;
    // The `plan_run` decision point: a preview that ended is what its run's policies read.
    crate::service::policies::after_preview(&state, &out).await?;
    if out.preview_of.is_some() && !out.leased {
        // A preview's runner let go: its approved run may be leased now.
        state.wake_dispatch();
    }
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
