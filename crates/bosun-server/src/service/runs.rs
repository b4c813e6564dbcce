//! Stack runs: triggering one (or a manual drift check), listing, showing (with phase
//! timings), the operator's confirm, discard, cancel and retry, and reading the log — the
//! work behind the API's handlers and the console's run pages; and the run id, queueing
//! and wire form every other capability that starts runs uses.

use bosun_api::{
    ConsumedOutput, ErrorCode, LockWait, LogChunk, Page, PhaseTiming, PlanSummary, Run, RunCreate,
    TfLockInfo,
};
use bosun_core::run::{Event, RunKind, RunState, Trigger};
use bosun_core::ValidationError;
use bosun_store::{NewRun, RunEventInput, RunRecord, RunUpdate};
use chrono::{DateTime, Utc};
use rand::RngCore;
use serde_json::json;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::logs::LogsQuery;
use crate::paging::{page, require_known_cursor, PageQuery};

/// A new run id: time-ordered, so ids sort by creation.
pub fn new_run_id() -> String {
    let mut r = [0u8; 5];
    rand::thread_rng().fill_bytes(&mut r);
    format!(
        "run-{:011x}{}",
        Utc::now().timestamp_millis(),
        hex::encode(r)
    )
}

/// Queues a run and wakes waiting runners.
pub async fn enqueue(
    state: &AppState,
    run: NewRun,
    caller: &Caller,
) -> Result<RunRecord, ApiError> {
    let audit = caller.audit(
        Some(&run.org),
        "run.create",
        format!("run:{}", run.id),
        json!({"stack": run.stack, "kind": run.kind.as_str(), "trigger": run.trigger.as_str()}),
    );
    let record = state.store.create_run(&run, Some(&audit)).await?;
    state.wake_dispatch();
    Ok(record)
}

/// Loads a run of this org (a run of another org is "not found").
pub(crate) async fn load(state: &AppState, org: &str, id: &str) -> Result<RunRecord, ApiError> {
    state
        .store
        .get_run(id)
        .await?
        .filter(|r| r.org == org)
        .ok_or_else(|| not_found(org, id))
}

fn not_found(org: &str, id: &str) -> ApiError {
    ApiError::NotFound(format!("run {id:?} in org {org:?}"))
}

pub async fn to_wire(state: &AppState, r: RunRecord) -> Result<Run, ApiError> {
    // Independent reads, made at once: a request waits for the slowest, not the sum.
    let (phases, extras) = tokio::try_join!(
        async { Ok::<_, ApiError>(state.store.run_phases(&r.id).await?) },
        extras_of(state, &r),
    )?;
    Ok(wire_of(r, phases, extras))
}

/// A page of runs on the wire: their phases read in one call, not one per run.
pub async fn page_to_wire(state: &AppState, runs: Vec<RunRecord>) -> Result<Vec<Run>, ApiError> {
    let ids: Vec<String> = runs.iter().map(|r| r.id.clone()).collect();
    let mut phases = state.store.run_phases_of(&ids).await?;
    let mut items = Vec::with_capacity(runs.len());
    for r in runs {
        let p = phases.remove(&r.id).unwrap_or_default();
        let extras = extras_of(state, &r).await?;
        items.push(wire_of(r, p, extras));
    }
    Ok(items)
}

/// A stored plan summary as the API shows it; none where it does not read as one.
pub fn plan_summary(stored: serde_json::Value) -> Option<PlanSummary> {
    serde_json::from_value(stored).ok()
}

/// What a wire run shows beyond its record and phases: its drift check (a drift run's
/// result, or the drift run a scheduled run reconciles) and, while it waits, who may
/// approve it.
struct Extras {
    drift: Option<bosun_api::RunDrift>,
    reconciles: Option<String>,
    approval: Option<bosun_api::ApprovalWait>,
}

async fn extras_of(state: &AppState, r: &RunRecord) -> Result<Extras, ApiError> {
    let (drift, reconciles) = crate::service::drift::run_fields(state, r).await?;
    let approval = approval_of(state, r).await?;
    Ok(Extras {
        drift,
        reconciles,
        approval,
    })
}

/// Who may approve run `r`, while it waits for an approval.
async fn approval_of(
    state: &AppState,
    r: &RunRecord,
) -> Result<Option<bosun_api::ApprovalWait>, ApiError> {
    if r.state == RunState::Unconfirmed {
        crate::service::approvals::wait_of(state, &r.org, &r.id).await
    } else {
        Ok(None)
    }
}

fn wire_of(r: RunRecord, phases: Vec<bosun_store::RunPhaseRecord>, extras: Extras) -> Run {
    let Extras {
        drift,
        reconciles,
        approval,
    } = extras;
    let phases = phases
        .into_iter()
        .map(|p| PhaseTiming {
            state: p.state.to_string(),
            started_at: p.started_at,
            ended_at: p.ended_at,
            seconds: p
                .ended_at
                .map(|e| (e - p.started_at).num_milliseconds() as f64 / 1000.0),
        })
        .collect();
    Run {
        plan: r.plan_summary.and_then(plan_summary),
        policy_hold: (r.policy_hold != bosun_core::policy::Verdict::Pass)
            .then(|| r.policy_hold.to_string()),
        policies: Vec::new(),
        blocked_by: r
            .blocked_by
            .and_then(|v| serde_json::from_value::<TfLockInfo>(v).ok()),
        blocked_since: r.blocked_since,
        lock_waits: r.lock_waits.map(lock_waits).unwrap_or_default(),
        approval,
        id: r.id,
        org: r.org,
        stack: r.stack,
        kind: r.kind.to_string(),
        trigger: r.trigger.to_string(),
        state: r.state.to_string(),
        reason: r.reason,
        triggered_by: r.triggered_by,
        commit: r.commit,
        branch: r.branch,
        late_write: r.late_write,
        runner_name: None,
        decisions: Vec::new(),
        runner: r.runner_id,
        retry_of: r.retry_of,
        pull_request: r.pull_request,
        upstream_run: r.upstream_run,
        consumed: r
            .consumed
            .and_then(|v| serde_json::from_value::<Vec<ConsumedOutput>>(v).ok())
            .unwrap_or_default(),
        drift,
        reconciles,
        phases,
        created_at: r.created_at,
        updated_at: r.updated_at,
        summarised_at: r.summarised_at,
    }
}

/// Starts a run of a stack for `caller`: tracked unless the body says `proposed`, at the
/// given commit or the branch head. Drift runs are refused here (they have their own
/// start).
pub async fn trigger(
    state: &AppState,
    caller: &Caller,
    org: &str,
    stack: &str,
    body: RunCreate,
) -> Result<Run, ApiError> {
    let kind = match body.kind.as_deref() {
        None => RunKind::Tracked,
        Some(k) => match k.parse()? {
            RunKind::Drift => {
                return Err(ValidationError::new(
                    "kind",
                    "drift runs start from the stack's schedule or from \
                     POST /api/v1/orgs/{org}/stacks/{stack}/drift-checks (bosun stack drift-check)",
                )
                .into())
            }
            k => k,
        },
    };
    if let Some(c) = &body.commit {
        if c.len() < 7 || c.len() > 64 || !c.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(
                ValidationError::new("commit", "must be a hex commit id (7 to 64 digits)").into(),
            );
        }
    }
    let run = manual_run(state, caller, org, stack, kind, body.commit).await?;
    let record = enqueue(state, run, caller).await?;
    to_wire(state, record).await
}

/// A run of the org's stack started by `caller` by hand, on the stack's branch (at
/// `commit`, or its head).
async fn manual_run(
    state: &AppState,
    caller: &Caller,
    org: &str,
    stack: &str,
    kind: RunKind,
    commit: Option<String>,
) -> Result<NewRun, ApiError> {
    let spec = state
        .store
        .get_stack(org, stack)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("stack {stack:?} in org {org:?}")))?
        .spec;
    Ok(NewRun {
        id: new_run_id(),
        org: org.to_string(),
        stack: stack.to_string(),
        kind,
        trigger: Trigger::Manual,
        triggered_by: caller.0.actor(),
        commit,
        branch: spec.branch,
        retry_of: None,
        pull_request: None,
    })
}

/// Starts a drift check of a stack now for `caller`: a drift run with trigger `manual`
/// at the branch head, refused (409 `has_open_runs`) while a drift run of the stack is
/// open.
pub async fn start_drift_check(
    state: &AppState,
    caller: &Caller,
    org: &str,
    stack: &str,
) -> Result<Run, ApiError> {
    let run = manual_run(state, caller, org, stack, RunKind::Drift, None).await?;
    let audit = caller.audit(
        Some(org),
        "run.create",
        format!("run:{}", run.id),
        json!({"stack": run.stack, "kind": "drift", "trigger": "manual"}),
    );
    let record = state.store.start_drift_check(&run, &audit).await?;
    state.wake_dispatch();
    to_wire(state, record).await
}

/// A page of a stack's runs, newest first; the cursor is the last run's id.
pub async fn list(
    state: &AppState,
    org: &str,
    stack: &str,
    q: &PageQuery,
) -> Result<Page<Run>, ApiError> {
    let records = list_records(state, org, stack, q).await?;
    let items = page_to_wire(state, records.items).await?;
    Ok(Page {
        items,
        next_cursor: records.next_cursor,
    })
}

/// A page of a stack's runs as stored, newest first (what [`list`] turns into wire
/// runs): for a reader that shows the runs' own fields only, with none of the per-run
/// reads a wire run needs (phases, drift check, approval wait).
pub async fn list_records(
    state: &AppState,
    org: &str,
    stack: &str,
    q: &PageQuery,
) -> Result<Page<RunRecord>, ApiError> {
    let limit = q.limit()?;
    if let Some(cursor) = &q.cursor {
        let found = state.store.get_run(cursor).await?;
        let known = found.is_some_and(|r| r.org == org && r.stack == stack);
        require_known_cursor(cursor, known, &format!("stack {stack:?}"))?;
    }
    let runs = state
        .store
        .list_runs(org, Some(stack), q.cursor.as_deref(), limit)
        .await?;
    Ok(page(runs, limit, |r: &RunRecord| r.id.clone()))
}

/// One run of the org.
pub async fn show(state: &AppState, org: &str, id: &str) -> Result<Run, ApiError> {
    // The run and all it shows in one store call; only a run waiting for an approval
    // reads more (who may approve it).
    let (run, context) = state
        .store
        .get_run_in_context(org, id, DECISIONS_READ)
        .await?
        .ok_or_else(|| not_found(org, id))?;
    let (drift, reconciles) = crate::service::drift::run_fields_of(&run, context.drift_check);
    let approval = approval_of(state, &run).await?;
    let mut wire = wire_of(
        run,
        context.phases,
        Extras {
            drift,
            reconciles,
            approval,
        },
    );
    wire.decisions = decisions_of(context.audit);
    wire.runner_name = context.runner_name;
    wire.policies = context
        .policy_evaluations
        .into_iter()
        .map(crate::service::policies::evaluation_view)
        .collect();
    Ok(wire)
}

/// The audit actions that are a person's decision on a run, with the word shown for each.
const DECISIONS: [(&str, &str); 6] = [
    ("run.confirm", "confirm"),
    ("run.discard", "discard"),
    ("run.cancel", "cancel"),
    ("approval.approve", "approve"),
    ("approval.reject", "reject"),
    ("run.policy_override", "override"),
];

/// How many of the newest audit records about a run are read for its decisions.
const DECISIONS_READ: u32 = 100;

/// Who acted on a run by hand, oldest first, from the newest audit records about it
/// (the org's audit log is the one record of it; at most [`DECISIONS_READ`]).
fn decisions_of(records: Vec<bosun_store::AuditRecord>) -> Vec<bosun_api::RunDecision> {
    let mut out: Vec<bosun_api::RunDecision> = records
        .into_iter()
        .filter_map(|r| {
            let (_, word) = DECISIONS.iter().find(|(a, _)| *a == r.entry.action)?;
            Some(bosun_api::RunDecision {
                action: word.to_string(),
                by: r.entry.actor,
                at: r.at,
                comment: r.entry.detail["comment"].as_str().map(str::to_string),
            })
        })
        .collect();
    out.reverse();
    out
}

/// An operator's event on a run (`action` is the audit action).
async fn operator_event(
    state: &AppState,
    caller: &Caller,
    org: &str,
    id: &str,
    event: Event,
    action: &str,
) -> Result<Run, ApiError> {
    load(state, org, id).await?;
    let out = state
        .store
        .run_event(
            id,
            &RunEventInput {
                event,
                fencing: None,
                update: RunUpdate::default(),
                audit: Some(caller.audit(Some(org), action, format!("run:{id}"), json!({}))),
            },
        )
        .await?;
    state.wake_dispatch();
    to_wire(state, out.run).await
}

/// Applies an unconfirmed run's plan; refused while it waits for an approval.
pub async fn confirm(
    state: &AppState,
    caller: &Caller,
    org: &str,
    id: &str,
) -> Result<Run, ApiError> {
    crate::service::approvals::refuse_gated_confirm(state, org, id).await?;
    refuse_policy_held_confirm(state, org, id).await?;
    operator_event(state, caller, org, id, Event::Confirm, "run.confirm").await
}

/// A confirm cannot lift what a policy holds a run for: an admin's override lifts a
/// soft-mandatory deny, an approver a policy's request for approval.
async fn refuse_policy_held_confirm(state: &AppState, org: &str, id: &str) -> Result<(), ApiError> {
    use bosun_core::policy::Verdict;
    let run = load(state, org, id).await?;
    let message = match run.policy_hold {
        Verdict::Pass | Verdict::Deny => return Ok(()),
        Verdict::Override => format!(
            "a soft-mandatory policy denied run {id}'s plan: an org admin overrides it with a reason (`bosun run override {id} --reason …`, POST /api/v1/orgs/{org}/runs/{id}/override), or discard the run"
        ),
        Verdict::Approval => format!(
            "a policy asks for approval of run {id}: it waits in the approvals inbox — approve it there (`bosun approvals approve {id}`, POST /api/v1/orgs/{org}/approvals/{id}/approve)"
        ),
    };
    Err(ApiError::Conflict {
        code: ErrorCode::ApprovalRequired,
        message,
    })
}

/// Throws an unconfirmed run's plan away.
pub async fn discard(
    state: &AppState,
    caller: &Caller,
    org: &str,
    id: &str,
) -> Result<Run, ApiError> {
    operator_event(state, caller, org, id, Event::Discard, "run.discard").await
}

/// Cancels a run: a waiting one ends at once; an executing one's runner stops the
/// engine first.
pub async fn cancel(
    state: &AppState,
    caller: &Caller,
    org: &str,
    id: &str,
) -> Result<Run, ApiError> {
    load(state, org, id).await?;
    let audit = caller.audit(Some(org), "run.cancel", format!("run:{id}"), json!({}));
    let out = state.store.cancel_run(id, &audit).await?;
    to_wire(state, out.run).await
}

/// Starts a new run over the same commit as an ended run.
pub async fn retry(
    state: &AppState,
    caller: &Caller,
    org: &str,
    id: &str,
) -> Result<Run, ApiError> {
    let old = load(state, org, id).await?;
    if !old.state.is_terminal() {
        return Err(ApiError::Conflict {
            code: ErrorCode::InvalidTransition,
            message: format!("run {id} is {}; only ended runs can be retried", old.state),
        });
    }
    let run = NewRun {
        id: new_run_id(),
        org: old.org,
        stack: old.stack,
        kind: old.kind,
        trigger: Trigger::Retry,
        triggered_by: caller.0.actor(),
        commit: old.commit,
        branch: old.branch,
        retry_of: Some(old.id),
        pull_request: old.pull_request,
    };
    let record = enqueue(state, run, caller).await?;
    to_wire(state, record).await
}

/// The stored lock waits (`{"holder", "from", "until"}` in ms) as the API shows them; an
/// entry that does not read is left out.
fn lock_waits(stored: serde_json::Value) -> Vec<LockWait> {
    let serde_json::Value::Array(waits) = stored else {
        return Vec::new();
    };
    let at = |v: &serde_json::Value| v.as_i64().and_then(DateTime::from_timestamp_millis);
    waits
        .into_iter()
        .filter_map(|w| {
            Some(LockWait {
                from: at(&w["from"])?,
                until: at(&w["until"])?,
                holder: serde_json::from_value(w["holder"].clone()).ok()?,
            })
        })
        .collect()
}

/// The run, when its log is still there: a run retention summarised answers `Gone`,
/// saying so in words.
pub(crate) async fn load_with_log(
    state: &AppState,
    org: &str,
    id: &str,
) -> Result<RunRecord, ApiError> {
    let run = load(state, org, id).await?;
    match run.summarised_at {
        Some(at) => Err(ApiError::Gone(format!(
            "the log of run {id} was deleted by retention on {} (the run ended longer ago \
             than the server's run retention); the run's record and its plan's counts are kept",
            at.format("%Y-%m-%d %H:%M UTC")
        ))),
        None => Ok(run),
    }
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
        state.store.read_logs(id, q.after, limit).await?,
    ))
}
