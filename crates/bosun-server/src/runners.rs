//! The runner protocol: runners register, long-poll for a lease, heartbeat, stream log
//! chunks, move plan files, and report what happened — every call about a lease carries
//! its fencing number, so a runner that lost its lease can never move the run again.
//! Also the org's view of runners (online, busy, dark, drained) and draining.

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bosun_api::{
    Heartbeat, HeartbeatReply, Lease, LeaseRequest, LogAppend, RunnerEgress, RunnerEvent,
    RunnerRegister, RunnerRegistered, RunnerReport,
};
use bosun_core::authz::{Access, PrincipalKind};
use bosun_core::run::{Event, Phase};
use bosun_core::stack::Tier;
use bosun_core::token::TokenKind;
use bosun_core::Role;
use bosun_store::{
    RunEventInput, RunRecord, RunUpdate, RunnerRecord, Store, StoreError, TokenFilter,
};
use chrono::Utc;
use rand::RngCore;
use serde_json::json;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{read_body, ApiJson, ApiPath, ApiQuery};
pub use crate::fencing::{FencingQuery, NextSeq};
use crate::route::{endpoint, route, BodyLimitKind, Endpoint, Route};
use crate::secrets::mask::LogKind;
use crate::service::tokens::{mint_run_token, new_token, TokenOwner};

/// Served by [`list`].
pub const LIST: Endpoint = endpoint!(Access::Org(Role::Viewer), list);

pub fn routes() -> Vec<Route> {
    vec![
        route!(Access::Runner, register),
        route!(Access::Runner, lease),
        route!(Access::Runner, heartbeat),
        route!(Access::Runner, next_log_seq),
        route!(Access::Runner, append_logs),
        route!(Access::Runner, put_plan).with_body_limit(BodyLimitKind::State),
        route!(Access::Runner, put_plan_json).with_body_limit(BodyLimitKind::State),
        route!(Access::Runner, get_plan),
        route!(Access::Runner, report),
        route!(Access::Runner, abandon),
        LIST.route(),
        route!(Access::Org(Role::Admin), drain),
    ]
}

/// The name a replica's embedded runners register under (each worker as `<name>-<i>`),
/// so the start-up reconciliation settles only this replica's previous runs.
pub fn embedded_runner_name(replica: &str) -> String {
    format!("local@{replica}")
}

/// Whether a hosted-pool runner named `name` is one of `replica`'s embedded runners.
pub fn is_replicas_runner(name: &str, replica: &str) -> bool {
    let base = embedded_runner_name(replica);
    match name.strip_prefix(&base) {
        Some("") => true,
        Some(rest) => rest
            .strip_prefix('-')
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())),
        None => false,
    }
}

/// Mints the pool token the server's own hosted runners use (no org: they serve every
/// org's `hosted` stacks). This replica's earlier starts' tokens are revoked.
pub async fn hosted_pool_token(store: &dyn Store, replica: &str) -> Result<String, StoreError> {
    let mine = format!("the embedded runners of server replica {replica}");
    let (secret, token) = new_token(
        TokenKind::Pool,
        TokenOwner::Pool {
            org: None,
            pool: "hosted".into(),
        },
        mine.clone(),
        None,
    );
    // Only this replica's earlier tokens (and those of servers before replica ids): the
    // other replicas' embedded runners keep theirs.
    for old in store.list_tokens(&TokenFilter::HostedPool).await? {
        let ours = old.description == mine || old.description == "the server's embedded runners";
        if old.revoked_at.is_none() && ours {
            store.revoke_token(&old.id, None).await?;
        }
    }
    store.create_token(&token, None).await?;
    Ok(secret)
}

fn pool_of(caller: &Caller) -> Result<(Option<String>, String), ApiError> {
    match &caller.0.kind {
        PrincipalKind::Pool { org, pool } => Ok((org.clone(), pool.clone())),
        _ => Err(ApiError::Forbidden(
            "this endpoint needs a runner-pool token".into(),
        )),
    }
}

/// The runner named in a call, checked to belong to the caller's pool.
async fn own_runner(state: &AppState, caller: &Caller, id: &str) -> Result<RunnerRecord, ApiError> {
    let (org, pool) = pool_of(caller)?;
    state
        .store
        .get_runner(id)
        .await?
        .filter(|r| r.org == org && r.pool == pool)
        .ok_or_else(|| ApiError::NotFound(format!("runner {id:?} in this pool")))
}

/// A run the caller's pool may act on.
pub(crate) async fn pool_run(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<RunRecord, ApiError> {
    let (org, _) = pool_of(caller)?;
    state
        .store
        .get_run(id)
        .await?
        .filter(|r| org.as_ref().is_none_or(|o| *o == r.org))
        .ok_or_else(|| ApiError::NotFound(format!("run {id:?}")))
}

/// Register a runner of the caller's pool.
#[utoipa::path(post, path = "/api/v1/runner/register", tag = "runners",
    request_body = RunnerRegister, responses((status = 200, body = RunnerRegistered)))]
pub async fn register(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<RunnerRegister>,
) -> Result<Json<RunnerRegistered>, ApiError> {
    let (org, pool) = pool_of(&caller)?;
    let name = body.name.trim();
    if name.is_empty() || name.len() > 100 || name.chars().any(char::is_control) {
        return Err(
            bosun_core::ValidationError::new("name", "1 to 100 printable characters").into(),
        );
    }
    let mut id = [0u8; 8];
    rand::thread_rng().fill_bytes(&mut id);
    let runner = state
        .store
        .register_runner(&RunnerRecord {
            id: format!("rnr_{}", hex::encode(id)),
            org,
            pool,
            name: name.to_string(),
            version: body.version.chars().take(50).collect(),
            drained: false,
            last_seen: Utc::now(),
            created_at: Utc::now(),
            egress: body.egress.map(crate::service::runners::egress_record),
        })
        .await?;
    // An opted-out runner runs engines outside the sandbox its kind should have: said
    // where operators look, not only on the runners page.
    if body.egress == Some(RunnerEgress::OptedOut) {
        tracing::info!(
            runner = %runner.id,
            pool = %runner.pool,
            "runner {} runs engines without the egress sandbox (--egress-unrestricted)",
            runner.name
        );
    }
    Ok(Json(RunnerRegistered {
        runner_id: runner.id,
        heartbeat_seconds: state.config.runs.heartbeat.as_secs().max(1),
    }))
}

fn phase_timeout(state: &AppState, tier: Tier, phase: Phase) -> Duration {
    state.config.runs.phase_timeout.unwrap_or(match phase {
        Phase::Plan => tier.plan_timeout(),
        Phase::Apply => tier.apply_timeout(),
    })
}

/// What a runner needs to execute the leased phase; mints the phase's run token and,
/// for a GitHub repository, its installation token. `None`: the run cannot reach its
/// code and was failed with the reason (its engine never starts).
async fn build_lease(state: &AppState, run: &RunRecord) -> Result<Option<Lease>, ApiError> {
    let stack = state
        .store
        .get_stack(&run.org, &run.stack)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("stack {:?}", run.stack)))?
        .spec;
    let source = match crate::vcs::source::for_run(state, run, &stack).await? {
        Ok(source) => source,
        Err(reason) => {
            fail_before_start(state, run, reason, &[]).await?;
            return Ok(None);
        }
    };
    let timeout = phase_timeout(state, stack.tier, run.phase);
    let lease_ttl = timeout + state.config.runs.stale_after * 2;
    let prepared = match crate::prepare::prepare(state, run, &stack, lease_ttl).await? {
        Ok(p) => p,
        Err(unprepared) => {
            fail_before_start(state, run, unprepared.reason, &unprepared.log).await?;
            return Ok(None);
        }
    };
    append_server_log(state, run, &prepared.log).await?;
    let upstreams: Vec<String> = stack
        .depends_on
        .iter()
        .map(|d| d.stack.to_string())
        .collect();
    let ttl = chrono::Duration::from_std(lease_ttl).unwrap_or(chrono::Duration::hours(4));
    let (run_token, _) =
        mint_run_token(state, &run.org, &run.id, &run.stack, ttl, &upstreams).await?;
    // Everything secret the lease hands out, masked in the chunks its runner sends back.
    let mut mask = prepared.mask.clone();
    mask.extend(source.clone_token.iter().cloned());
    mask.push(prepared.id_token_request_token.clone());
    mask.push(run_token.clone());
    state
        .lease_masks
        .register(LogKind::StackRun, &run.id, run.fencing, mask);
    // The plan's JSON is uploaded only for the policies that read it.
    let plan_json = run.phase == Phase::Plan
        && !crate::service::policies::plan_policies(state, run, &stack)
            .await?
            .is_empty();
    Ok(Some(Lease {
        plan_json,
        run_id: run.id.clone(),
        fencing: run.fencing,
        org: run.org.clone(),
        stack: run.stack.clone(),
        kind: run.kind.to_string(),
        phase: run.phase.to_string(),
        repository: stack.repository.to_string(),
        clone_url: source.clone_url,
        clone_token: source.clone_token,
        branch: run.branch.clone(),
        commit: run.commit.clone(),
        path: stack.path.to_string(),
        engine: stack.engine.kind.as_str().to_string(),
        engine_binary: stack.engine.binary.clone(),
        env: prepared.env,
        state_url: format!(
            "{}/api/v1/orgs/{}/stacks/{}/state",
            state.config.public_url, run.org, run.stack
        ),
        run_token,
        timeout_seconds: timeout.as_secs(),
        heartbeat_seconds: state.config.runs.heartbeat.as_secs().max(1),
        id_token_request_url: prepared.id_token_request_url,
        id_token_request_token: prepared.id_token_request_token,
        integrations: prepared.integrations,
        mask: prepared.mask,
    }))
}

/// Lines the server itself adds to a run's log (what it resolved before the runner).
pub(crate) async fn append_server_log(
    state: &AppState,
    run: &RunRecord,
    lines: &[String],
) -> Result<(), ApiError> {
    if lines.is_empty() {
        return Ok(());
    }
    let first = state.store.next_log_seq(&run.id).await?;
    let chunks: Vec<(i64, String)> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| (first + i as i64, l.clone()))
        .collect();
    state
        .store
        .append_logs(&run.id, run.fencing, &chunks)
        .await?;
    Ok(())
}

/// Fails a leased run that cannot start (its code or an integration is out of reach):
/// the reason is kept, the engine never runs.
async fn fail_before_start(
    state: &AppState,
    run: &RunRecord,
    reason: String,
    log: &[String],
) -> Result<(), ApiError> {
    if log.is_empty() {
        append_server_log(state, run, &[format!("bosun: {reason}\n")]).await?;
    } else {
        append_server_log(state, run, log).await?;
    }
    let input = RunEventInput {
        event: Event::PhaseFailed,
        fencing: Some(run.fencing),
        update: RunUpdate {
            reason: Some(reason),
            ..RunUpdate::default()
        },
        audit: None,
    };
    state.store.run_event(&run.id, &input).await?;
    Ok(())
}

/// Wait up to `wait_seconds` (at most 30) for a run phase to execute.
#[utoipa::path(post, path = "/api/v1/runner/lease", tag = "runners",
    request_body = LeaseRequest,
    responses((status = 200, body = Lease, description = "a stack run's phase; a runner that asked for `plan_runs` may get a `PlanRunLeaseAnswer` instead"),
        (status = 204, description = "no work within the wait")))]
pub async fn lease(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<LeaseRequest>,
) -> Result<Response, ApiError> {
    let runner = own_runner(&state, &caller, &body.runner_id).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(body.wait_seconds.min(30));
    let mut stopping = state.stopping.subscribe();
    // Seen now; a lease or a heartbeat marks it again.
    state.store.touch_runner(&runner.id).await?;
    loop {
        let current = state.store.get_runner(&runner.id).await?;
        if current.as_ref().is_none_or(|r| r.drained) || *stopping.borrow() {
            return Ok(StatusCode::NO_CONTENT.into_response());
        }
        // Register interest before looking, so a run queued meanwhile wakes this poll.
        let woken = state.dispatch.notified();
        if let Some(run) = state.store.lease_run(&runner).await? {
            match build_lease(&state, &run).await? {
                Some(lease) => return Ok((StatusCode::OK, Json(lease)).into_response()),
                // Failed before it started: look for other work at once.
                None => continue,
            }
        }
        // Plan runs go only to runners that said they execute them.
        if body.plan_runs {
            if let Some(run) = state.store.lease_plan_run(&runner).await? {
                let Some(plan_run) = crate::plans::runs::build_lease(&state, &run).await? else {
                    // Failed before it started (a secret out of reach): look again.
                    continue;
                };
                let answer = bosun_api::PlanRunLeaseAnswer { plan_run };
                return Ok((StatusCode::OK, Json(answer)).into_response());
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(StatusCode::NO_CONTENT.into_response());
        }
        // Locks released by laptops or runs waiting on time do not notify: look again
        // at least every second.
        tokio::select! {
            _ = woken => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = tokio::time::sleep_until(deadline) => {}
            _ = crate::duties::stopped(&mut stopping) => {}
        }
    }
}

/// Liveness of a leased run, independent of its output. Answers whether to cancel.
#[utoipa::path(post, path = "/api/v1/runner/runs/{run}/heartbeat", tag = "runners",
    params(("run" = String, Path)), request_body = Heartbeat,
    responses((status = 200, body = HeartbeatReply), (status = 409, body = bosun_api::ErrorBody, description = "fenced")))]
pub async fn heartbeat(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<Heartbeat>,
) -> Result<Json<HeartbeatReply>, ApiError> {
    pool_run(&state, &caller, &id).await?;
    let cancel = state.store.heartbeat(&id, body.fencing).await?;
    Ok(Json(HeartbeatReply { cancel }))
}

/// Where a runner continues the run's log.
#[utoipa::path(get, path = "/api/v1/runner/runs/{run}/logs/next", tag = "runners",
    params(("run" = String, Path), FencingQuery), responses((status = 200, body = NextSeq)))]
pub async fn next_log_seq(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<FencingQuery>,
) -> Result<Json<NextSeq>, ApiError> {
    let run = pool_run(&state, &caller, &id).await?;
    if run.fencing != q.fencing {
        return Err(StoreError::Fenced {
            run: id,
            fencing: q.fencing,
        }
        .into());
    }
    Ok(Json(NextSeq {
        next_seq: state.store.next_log_seq(&id).await?,
    }))
}

/// Append log chunks; a chunk whose seq is already stored is ignored. Every secret value
/// the lease carried is masked (`***`) before a chunk is stored, even split across chunks.
#[utoipa::path(post, path = "/api/v1/runner/runs/{run}/logs", tag = "runners",
    params(("run" = String, Path)), request_body = LogAppend, responses((status = 204)))]
pub async fn append_logs(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<LogAppend>,
) -> Result<StatusCode, ApiError> {
    let run = pool_run(&state, &caller, &id).await?;
    let (fencing, store, id) = (body.fencing, &state.store, id.as_str());
    state
        .lease_masks
        .append_masked(
            LogKind::StackRun,
            id,
            fencing,
            body.chunks,
            || crate::prepare::lease_mask_again(&state, &run),
            |chunks| async move {
                store.append_logs(id, fencing, &chunks).await?;
                Ok(())
            },
        )
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Stores what the log masking still held back when the lease `fencing` ends (the
/// beginning of a value nothing completed), as the log's last chunk. Best effort: the
/// report that follows decides the run, and a refused append only loses that end.
async fn flush_masked_tail(state: &AppState, run: &RunRecord, fencing: i64) {
    let Some(tail) = state
        .lease_masks
        .take_tail(LogKind::StackRun, &run.id, fencing)
        .await
    else {
        return;
    };
    let appended = async {
        let seq = state.store.next_log_seq(&run.id).await?;
        state
            .store
            .append_logs(&run.id, fencing, &[(seq, tail)])
            .await
    };
    if let Err(e) = appended.await {
        tracing::warn!(run = %run.id, error = %e, "could not store the end of a run's log");
    }
}

/// A runner started again hands back a lease its earlier process held and left with
/// nothing executing it (its workspace holds no engine and no state to deliver): settled
/// at once as the stale sweep would after its window — requeued when the phase never
/// started, force-failed (its lock released) otherwise. A lease that is no longer the
/// one named is refused as fenced.
#[utoipa::path(post, path = "/api/v1/runner/runs/{run}/abandon", tag = "runners",
    params(("run" = String, Path), FencingQuery), responses((status = 204)))]
pub async fn abandon(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<FencingQuery>,
) -> Result<StatusCode, ApiError> {
    let run = pool_run(&state, &caller, &id).await?;
    let fenced = || StoreError::Fenced {
        run: id.clone(),
        fencing: q.fencing,
    };
    if !run.leased || run.fencing != q.fencing {
        return Err(fenced().into());
    }
    // Only a runner of the pool that holds the lease hands it back.
    let holder = match run.runner_id.as_deref() {
        Some(runner) => state.store.get_runner(runner).await?,
        None => None,
    };
    let (org, pool) = pool_of(&caller)?;
    if !holder.is_some_and(|r| r.org == org && r.pool == pool) {
        return Err(ApiError::Forbidden(format!(
            "run {id} is leased by a runner of another pool"
        )));
    }
    if !crate::service::runners::settle_silent_run(&state, &run).await? {
        return Err(fenced().into());
    }
    tracing::warn!(run = %id, fencing = q.fencing, "a restarted runner handed back a lease its earlier process held");
    state.wake_dispatch();
    Ok(StatusCode::NO_CONTENT)
}

/// Upload the saved plan file of the plan phase.
#[utoipa::path(put, path = "/api/v1/runner/runs/{run}/plan", tag = "runners",
    params(("run" = String, Path), FencingQuery), responses((status = 204)))]
pub async fn put_plan(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<FencingQuery>,
    req: Request,
) -> Result<StatusCode, ApiError> {
    pool_run(&state, &caller, &id).await?;
    let body = read_body(req, &state).await?;
    state.store.put_run_plan(&id, q.fencing, &body).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Upload the plan's JSON (`show -json` of the plan file) of the plan phase, for the
/// policies evaluated when the plan is reported; deleted once they have read it.
#[utoipa::path(put, path = "/api/v1/runner/runs/{run}/plan-json", tag = "runners",
    params(("run" = String, Path), FencingQuery), responses((status = 204)))]
pub async fn put_plan_json(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<FencingQuery>,
    req: Request,
) -> Result<StatusCode, ApiError> {
    pool_run(&state, &caller, &id).await?;
    let body = read_body(req, &state).await?;
    state.store.put_run_plan_json(&id, q.fencing, &body).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Download the saved plan file for the apply phase.
#[utoipa::path(get, path = "/api/v1/runner/runs/{run}/plan", tag = "runners",
    params(("run" = String, Path), FencingQuery), responses((status = 200, description = "the plan file")))]
pub async fn get_plan(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<FencingQuery>,
) -> Result<Response, ApiError> {
    let run = pool_run(&state, &caller, &id).await?;
    if run.fencing != q.fencing || !run.leased {
        return Err(StoreError::Fenced {
            run: id,
            fencing: q.fencing,
        }
        .into());
    }
    let plan = state
        .store
        .get_run_plan(&id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("the plan file of run {id:?}")))?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/octet-stream")],
        Body::from(plan),
    )
        .into_response())
}

/// Report what happened to the leased phase.
#[utoipa::path(post, path = "/api/v1/runner/runs/{run}/report", tag = "runners",
    params(("run" = String, Path)), request_body = RunnerReport,
    responses((status = 204), (status = 409, body = bosun_api::ErrorBody)))]
pub async fn report(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<RunnerReport>,
) -> Result<StatusCode, ApiError> {
    let run = pool_run(&state, &caller, &id).await?;
    // A failure reason is the engine's output too: masked like the log, with the masker
    // taken before the log's tail is flushed (which forgets the lease).
    let masker = match body.event {
        RunnerEvent::Failed { .. } => Some(
            state
                .lease_masks
                .report_masker(LogKind::StackRun, &id, body.fencing, || {
                    crate::prepare::lease_mask_again(&state, &run)
                })
                .await,
        ),
        _ => None,
    };
    if !matches!(body.event, RunnerEvent::Started { .. }) {
        flush_masked_tail(&state, &run, body.fencing).await;
    }
    let mut update = RunUpdate::default();
    let event = match body.event {
        RunnerEvent::Started { commit } => {
            update.commit = Some(commit);
            Event::PhaseStarted
        }
        RunnerEvent::Planned { summary } => {
            let changes = summary.has_changes;
            update.plan_summary = Some(json!(summary));
            // The `plan` decision point: recorded with the event, which it decides.
            let (evaluations, policy) =
                crate::service::policies::evaluate_plan(&state, &run).await?;
            update.reason = crate::service::policies::reason(&id, policy, &evaluations);
            update.policy_evaluations = evaluations;
            Event::PlanFinished { changes, policy }
        }
        RunnerEvent::Applied => Event::ApplyFinished,
        RunnerEvent::Failed { reason } => {
            let masker = masker.unwrap_or_default();
            update.reason = Some(masker.redact(&reason).chars().take(2000).collect());
            Event::PhaseFailed
        }
        RunnerEvent::Canceled => Event::CancelAcknowledged,
        RunnerEvent::TimedOut => {
            update.reason =
                Some("the phase ran past its tier's timeout; the engine was stopped".into());
            Event::Timeout
        }
    };
    let out = state
        .store
        .run_event(
            &id,
            &RunEventInput {
                event,
                fencing: Some(body.fencing),
                update,
                audit: None,
            },
        )
        .await?;
    // Counted once the report is taken: a retried copy of an accepted report is refused
    // (fenced or out of turn) and adds nothing.
    if body.egress_refusals > 0 {
        state
            .runner_counters
            .egress_refused
            .fetch_add(u64::from(body.egress_refusals), Ordering::Relaxed);
    }
    if out.run.needs_lease || out.run.state.is_terminal() {
        // A next phase to lease, or a stack queue that just moved on.
        state.wake_dispatch();
    }
    Ok(StatusCode::NO_CONTENT)
}

/// The runners serving this org, with their state.
///
/// Paged in registration order (oldest first, then id); the cursor is
/// `<registered ms>:<runner id>` of the last runner.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/runners", tag = "runners",
    params(("org" = String, Path), crate::paging::PageQuery),
    responses((status = 200, body = bosun_api::Page<bosun_api::RunnerView>),
        (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
    ApiQuery(q): ApiQuery<crate::paging::PageQuery>,
) -> Result<Json<bosun_api::Page<bosun_api::RunnerView>>, ApiError> {
    Ok(Json(crate::service::runners::page(&state, &org, &q).await?))
}

/// Stop giving a runner new work; it finishes what it holds.
#[utoipa::path(post, path = "/api/v1/orgs/{org}/runners/{runner}/drain", tag = "runners",
    params(("org" = String, Path), ("runner" = String, Path)), responses((status = 204)))]
pub async fn drain(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let runner = state
        .store
        .get_runner(&id)
        .await?
        .filter(|r| r.org.as_deref() == Some(org.as_str()) || r.org.is_none())
        .ok_or_else(|| ApiError::NotFound(format!("runner {id:?}")))?;
    if runner.org.is_none() && caller.0.role_in(&org) != Some(Role::Admin) {
        return Err(ApiError::Forbidden("only admins drain runners".into()));
    }
    let audit = caller.audit(
        Some(&org),
        "runner.drain",
        format!("runner:{id}"),
        json!({}),
    );
    state.store.drain_runner(&id, &audit).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_runners_are_attributed_to_their_replica() {
        assert!(is_replicas_runner("local@a1", "a1"));
        assert!(is_replicas_runner("local@a1-2", "a1"));
        assert!(!is_replicas_runner("local@a1-x", "a1"));
        assert!(!is_replicas_runner("local@a1-", "a1"));
        assert!(!is_replicas_runner("local@a1-2", "a"));
        assert!(!is_replicas_runner("local@b-1", "a1"));
        assert!(!is_replicas_runner("local-1", "a1"));
    }
}
