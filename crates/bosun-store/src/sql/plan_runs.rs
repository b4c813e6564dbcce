//! Plan runs (one source for both backends; see `super::db`): the record and its lease
//! fields (the same fencing scheme as stack runs), per-host results, and logs. Every state
//! change goes through `bosun_core::plan_run::transition`. A paused run's preview (a dry
//! run of it) is created with it and ends when the paused run is decided or aborted, in
//! the same transactions. The concurrency guard reads the active runs of the plan inside
//! the creating write transaction: on SQLite a `BEGIN IMMEDIATE` one, so two racing
//! requests are serialized and the second sees the first; on PostgreSQL a serializable
//! one, so of two racing requests one is rolled back and tried again, and then sees the
//! other's run.

use bosun_core::plan_run::{
    initial, overlap, preview_decided_reason, transition, PlanRunEvent, PlanRunState, STALE_REASON,
};

use bosun_core::policy::PlanRunHold;

use super::audit::append_audit;
use super::logs::{self, LogOf};
use super::*;

const COLUMNS: &str = "id, org_id, plan, plan_version, source, inputs, dry_run, state, reason,
    requested_by, trigger, hosts, gated_environments, concurrent, needs_lease, leased, started,
    cancel_requested, runner_id, fencing, last_heartbeat, report, created_at, updated_at, ended_at,
    preview, preview_of, summarised_at, policy_hold, sources, upstream";

fn record(r: &Row<'_>) -> db::Result<PlanRunRecordRow> {
    Ok(PlanRunRecordRow {
        id: r.get(0)?,
        org: r.get(1)?,
        plan: r.get(2)?,
        plan_version: r.get(3)?,
        source: r.get(4)?,
        inputs: r.get(5)?,
        dry_run: r.get(6)?,
        state: r.get(7)?,
        reason: r.get(8)?,
        requested_by: r.get(9)?,
        trigger: r.get(10)?,
        hosts: r.get(11)?,
        gated: r.get(12)?,
        concurrent: r.get(13)?,
        needs_lease: r.get(14)?,
        leased: r.get(15)?,
        started: r.get(16)?,
        cancel_requested: r.get(17)?,
        runner_id: r.get(18)?,
        fencing: r.get(19)?,
        last_heartbeat: r.get(20)?,
        report: r.get(21)?,
        created_at: r.get(22)?,
        updated_at: r.get(23)?,
        ended_at: r.get(24)?,
        preview: r.get(25)?,
        preview_of: r.get(26)?,
        summarised_at: r.get(27)?,
        policy_hold: r.get(28)?,
        sources: r.get(29)?,
        upstream: r.get(30)?,
    })
}

struct PlanRunRecordRow {
    id: String,
    org: String,
    plan: String,
    plan_version: i64,
    source: String,
    inputs: String,
    dry_run: bool,
    state: String,
    reason: Option<String>,
    requested_by: String,
    trigger: String,
    hosts: String,
    gated: String,
    concurrent: bool,
    needs_lease: bool,
    leased: bool,
    started: bool,
    cancel_requested: bool,
    runner_id: Option<String>,
    fencing: i64,
    last_heartbeat: Option<i64>,
    report: Option<String>,
    created_at: i64,
    updated_at: i64,
    ended_at: Option<i64>,
    preview: Option<String>,
    preview_of: Option<String>,
    summarised_at: Option<i64>,
    policy_hold: Option<String>,
    sources: Option<String>,
    upstream: Option<String>,
}

fn decode(r: PlanRunRecordRow) -> Result<PlanRunRecord> {
    let upstream: Option<Value> = r
        .upstream
        .as_deref()
        .map(serde_json::from_str)
        .transpose()
        .map_err(|e| corrupt("plan run upstream", e))?;
    Ok(PlanRunRecord {
        inputs: serde_json::from_str(&r.inputs).map_err(|e| corrupt("plan run inputs", e))?,
        state: r.state.parse().map_err(|e| corrupt("plan run state", e))?,
        // A stack-started run keeps 'manual' in the column (see migration 41).
        trigger: match &upstream {
            Some(_) => bosun_core::plan_run::PlanTrigger::Stack,
            None => r
                .trigger
                .parse()
                .map_err(|e| corrupt("plan run trigger", e))?,
        },
        upstream,
        hosts: serde_json::from_str(&r.hosts).map_err(|e| corrupt("plan run hosts", e))?,
        gated_environments: serde_json::from_str(&r.gated)
            .map_err(|e| corrupt("plan run environments", e))?,
        report: r
            .report
            .map(|t| serde_json::from_str(&t))
            .transpose()
            .map_err(|e| corrupt("plan run report", e))?,
        last_heartbeat: opt_from_millis(r.last_heartbeat)?,
        created_at: from_millis(r.created_at)?,
        updated_at: from_millis(r.updated_at)?,
        ended_at: opt_from_millis(r.ended_at)?,
        summarised_at: opt_from_millis(r.summarised_at)?,
        policy_hold: r
            .policy_hold
            .map(|h| h.parse())
            .transpose()
            .map_err(|e| corrupt("plan run policy_hold", e))?,
        sources: r
            .sources
            .map(|t| serde_json::from_str(&t))
            .transpose()
            .map_err(|e| corrupt("plan run sources", e))?,
        id: r.id,
        org: r.org,
        plan: r.plan,
        plan_version: r.plan_version,
        source: r.source,
        dry_run: r.dry_run,
        reason: r.reason,
        requested_by: r.requested_by,
        concurrent: r.concurrent,
        preview: r.preview,
        preview_of: r.preview_of,
        needs_lease: r.needs_lease,
        leased: r.leased,
        started: r.started,
        cancel_requested: r.cancel_requested,
        runner_id: r.runner_id,
        fencing: r.fencing,
    })
}

fn query(conn: &Connection, sql: &str, args: &[&dyn db::ToSql]) -> Result<Vec<PlanRunRecord>> {
    query_decoded(conn, sql, args, record, decode)
}

pub(super) fn load(conn: &Connection, id: &str) -> Result<Option<PlanRunRecord>> {
    Ok(query(
        conn,
        &format!("SELECT {COLUMNS} FROM plan_runs WHERE id = ?1"),
        params![id],
    )?
    .pop())
}

fn json_text<T: Into<Value> + Clone>(v: &T) -> String {
    v.clone().into().to_string()
}

/// The concurrency guard: refuses `run` while an active run of the same plan targets
/// one of its hosts. Previews are not counted: a preview is active only while its run is
/// paused, on the same hosts, so its run already holds them (and the refusal names the
/// run people decide, not its dry run).
fn guard(tx: &Transaction<'_>, run: &NewPlanRun) -> Result<()> {
    let active: Vec<(String, String, String)> = {
        let mut stmt = tx.prepare_cached(
            "SELECT id, state, hosts FROM plan_runs WHERE org_id = ?1 AND plan = ?2
             AND state IN ('queued', 'paused', 'running') AND preview_of IS NULL
             ORDER BY created_at, id",
        )?;
        let rows = stmt.query_map(params![run.org, run.plan], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
        rows.collect::<db::Result<_>>()?
    };
    let mut held_by = Vec::new();
    let mut held = Vec::new();
    for (id, state, hosts) in active {
        let hosts: Vec<String> =
            serde_json::from_str(&hosts).map_err(|e| corrupt("plan run hosts", e))?;
        if !overlap([hosts.as_slice()], &run.hosts).is_empty() {
            held_by.push((id, state));
            held.push(hosts);
        }
    }
    let hosts = overlap(held.iter().map(Vec::as_slice), &run.hosts);
    if !hosts.is_empty() {
        return Err(StoreError::RunInProgress { hosts, held_by });
    }
    Ok(())
}

/// Writes a new run's row, created at `now`: `preview` is the id of its preview,
/// `preview_of` the run a preview was created with.
fn insert(
    tx: &Transaction<'_>,
    run: &NewPlanRun,
    now: i64,
    preview: Option<&str>,
    preview_of: Option<&str>,
) -> Result<()> {
    let checked = run.policy_check && !run.dry_run && run.failed.is_none();
    let start = initial(!run.gated_environments.is_empty() || checked);
    let (state, needs_lease, ended) = match &run.failed {
        Some(_) => (PlanRunState::Failed.as_str(), false, Some(now)),
        None => (start.state.as_str(), start.needs_lease, None),
    };
    // The column's CHECK predates `stack`: such a run is known by its `upstream`.
    let trigger = match run.trigger {
        bosun_core::plan_run::PlanTrigger::Stack => "manual",
        other => other.as_str(),
    };
    tx.prepare_cached(
        "INSERT INTO plan_runs (id, org_id, plan, plan_version, source, inputs, dry_run, state,
            requested_by, trigger, hosts, gated_environments, concurrent, needs_lease,
            created_at, updated_at, preview, preview_of, policy_hold, sources, upstream, reason,
            ended_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?15, ?16, ?17,
            ?18, ?19, ?20, ?21, ?22)",
    )?
    .execute(params![
        run.id,
        run.org,
        run.plan,
        run.plan_version,
        run.source,
        Value::Object(run.inputs.clone().into_iter().collect()).to_string(),
        run.dry_run,
        state,
        run.requested_by,
        trigger,
        json_text(&run.hosts),
        json_text(&run.gated_environments),
        run.concurrent,
        needs_lease,
        now,
        preview,
        preview_of,
        checked.then_some(PlanRunHold::Check.as_str()),
        run.sources.as_ref().map(Value::to_string),
        run.upstream.as_ref().map(Value::to_string),
        run.failed,
        ended,
    ])
    .map_err(|e| exists_or(e, || format!("plan run {:?}", run.id)))?;
    Ok(())
}

/// Creates a run behind the concurrency guard; a real run that starts paused gets its
/// preview (when `run.preview` names one) in the same transaction: a dry run of the same
/// plan version, hosts and inputs, not gated, so queued at once, and not checked by the
/// guard (its own run holds its hosts).
pub(super) fn create(
    tx: &Transaction<'_>,
    run: &NewPlanRun,
    audit: &Audit,
) -> Result<PlanRunRecord> {
    if let Some(trigger) = run.settles_trigger {
        let n = tx
            .prepare_cached("DELETE FROM plan_triggers WHERE id = ?1")?
            .execute(params![trigger])?;
        if n == 0 {
            return Err(StoreError::AlreadyExists(format!(
                "a run for plan trigger {trigger}"
            )));
        }
    }
    if !run.concurrent && run.failed.is_none() {
        guard(tx, run)?;
    }
    let paused = initial(!run.gated_environments.is_empty() || run.policy_check).state
        == PlanRunState::Paused;
    let preview = run.preview.as_deref().filter(|_| paused && !run.dry_run);
    // One creation time for a run and its preview.
    let now = millis(Utc::now());
    insert(tx, run, now, preview, None)?;
    if let Some(id) = preview {
        let dry = NewPlanRun {
            id: id.to_string(),
            dry_run: true,
            gated_environments: Vec::new(),
            preview: None,
            policy_check: false,
            settles_trigger: None,
            ..run.clone()
        };
        insert(tx, &dry, now, None, Some(&run.id))?;
    }
    append_audit(tx, audit)?;
    load(tx, &run.id)?.ok_or_else(|| StoreError::NotFound(format!("plan run {:?}", run.id)))
}

/// Newest first, by creation then id; `before` is the previous page's last run, which
/// must be one of the org's (else the page is empty, never the list restarted).
pub(super) fn list(
    conn: &Connection,
    org: &str,
    plan: Option<&str>,
    before: Option<&str>,
    limit: u32,
) -> Result<Vec<PlanRunRecord>> {
    let before_created: Option<i64> = match before {
        Some(id) => {
            let found = conn
                .prepare_cached("SELECT created_at FROM plan_runs WHERE org_id = ?1 AND id = ?2")?
                .query_row(params![org, id], |r| r.get(0))
                .optional()?;
            match found {
                Some(at) => Some(at),
                None => return Ok(Vec::new()),
            }
        }
        None => None,
    };
    query(
        conn,
        &newest_first_sql(
            COLUMNS,
            "plan_runs",
            "plan",
            plan.is_some(),
            before_created.is_some(),
        ),
        params![org, plan, before_created, before, limit],
    )
}

pub(super) fn event(
    tx: &Transaction<'_>,
    id: &str,
    input: &PlanRunEventInput,
) -> Result<PlanRunRecord> {
    let run = load(tx, id)?.ok_or_else(|| StoreError::NotFound(format!("plan run {id:?}")))?;
    if let Some(fencing) = input.fencing {
        if fencing != run.fencing || !run.leased {
            return Err(StoreError::Fenced {
                run: id.to_string(),
                fencing,
            });
        }
    }
    let next = transition(run.state, run.facts(), input.event)?;
    let now = millis(Utc::now());
    let reason = match (&input.reason, input.event, next.state) {
        (Some(r), _, _) => Some(r.clone()),
        (None, PlanRunEvent::Stale, PlanRunState::Interrupted) => Some(STALE_REASON.to_string()),
        _ => None,
    };
    let ended = next.state.is_terminal() && run.state.is_active();
    crate::signal::emit(Signal::Run(id.to_string()));
    tx.prepare_cached(
        "UPDATE plan_runs SET state = ?2, needs_lease = ?3, leased = ?4, started = ?5,
            cancel_requested = CASE WHEN ?6 <> 0 THEN 1 ELSE cancel_requested END,
            reason = COALESCE(?7, reason), report = COALESCE(?8, report), updated_at = ?9,
            ended_at = CASE WHEN ?10 <> 0 THEN ?9 ELSE ended_at END,
            policy_hold = CASE WHEN ?2 = 'paused' THEN policy_hold END
         WHERE id = ?1",
    )?
    .execute(params![
        id,
        next.state.as_str(),
        next.needs_lease,
        next.leased,
        next.started,
        next.stop_runner,
        reason,
        input.report.as_ref().map(Value::to_string),
        now,
        ended
    ])?;
    if let Some(audit) = &input.audit {
        append_audit(tx, audit)?;
    }
    if run.state == PlanRunState::Paused && next.state != PlanRunState::Paused {
        if let Some(preview) = &run.preview {
            end_preview(tx, preview, id, input.event)?;
        }
    }
    load(tx, id)?.ok_or_else(|| StoreError::NotFound(format!("plan run {id:?}")))
}

/// A paused run was decided (approved, rejected) or aborted: its preview, when still
/// queued or running, is aborted in the same transaction with a reason saying so, so the
/// real run never runs beside it (a runner executing it is told through its heartbeat,
/// and the run is not leased until that runner lets go: see [`lease`]).
fn end_preview(
    tx: &Transaction<'_>,
    preview: &str,
    run: &str,
    decided: PlanRunEvent,
) -> Result<()> {
    let Some(current) = load(tx, preview)? else {
        return Ok(());
    };
    if !current.state.is_active() {
        return Ok(());
    }
    let abort = PlanRunEventInput {
        event: PlanRunEvent::Abort,
        fencing: None,
        reason: preview_decided_reason(run, decided),
        report: None,
        audit: None,
    };
    event(tx, preview, &abort)?;
    Ok(())
}

/// Which runs waiting for a runner may be leased now: not a run whose preview is still
/// held by a runner (an approval aborted it, and that runner has not stopped yet) — the
/// real run never runs beside its preview.
const LEASABLE: &str = "needs_lease = 1 AND NOT EXISTS (SELECT 1 FROM plan_runs held
    WHERE held.id = plan_runs.preview AND held.leased = 1)";

pub(super) fn lease(tx: &Transaction<'_>, runner: &RunnerRecord) -> Result<Option<PlanRunRecord>> {
    let candidates = query(
        tx,
        &format!(
            "SELECT {COLUMNS} FROM plan_runs WHERE {LEASABLE}
             AND (?1 IS NULL OR org_id = ?1) ORDER BY created_at, id LIMIT 1{}",
            db::SKIP_LOCKED
        ),
        params![runner.org],
    )?;
    let Some(run) = candidates.into_iter().next() else {
        return Ok(None);
    };
    let next = transition(run.state, run.facts(), PlanRunEvent::Leased)?;
    let now = millis(Utc::now());
    crate::signal::emit(Signal::Run(run.id.clone()));
    tx.prepare_cached(
        "UPDATE plan_runs SET state = ?2, needs_lease = 0, leased = 1, started = 0,
            runner_id = ?3, fencing = fencing + 1, last_heartbeat = ?4, updated_at = ?4
         WHERE id = ?1",
    )?
    .execute(params![run.id, next.state.as_str(), runner.id, now])?;
    tx.prepare_cached("UPDATE runners SET last_seen = ?2 WHERE id = ?1")?
        .execute(params![runner.id, now])?;
    load(tx, &run.id)
}

pub(super) fn any_waiting(conn: &Connection) -> Result<bool> {
    exists(
        conn,
        &format!("SELECT 1 FROM plan_runs WHERE {LEASABLE} LIMIT 1"),
        params![],
    )
}

pub(super) fn heartbeat(tx: &Transaction<'_>, id: &str, fencing: i64) -> Result<bool> {
    let now = millis(Utc::now());
    let n = tx
        .prepare_cached(
            "UPDATE plan_runs SET last_heartbeat = ?3 WHERE id = ?1 AND fencing = ?2 AND leased = 1",
        )?
        .execute(params![id, fencing, now])?;
    if n == 0 {
        return Err(StoreError::Fenced {
            run: id.to_string(),
            fencing,
        });
    }
    tx.prepare_cached(
        "UPDATE runners SET last_seen = ?2 WHERE id = (SELECT runner_id FROM plan_runs WHERE id = ?1)",
    )?
    .execute(params![id, now])?;
    Ok(tx
        .prepare_cached("SELECT cancel_requested FROM plan_runs WHERE id = ?1")?
        .query_row([id], |r| r.get(0))?)
}

pub(super) fn stale(conn: &Connection, before: DateTime<Utc>) -> Result<Vec<PlanRunRecord>> {
    query(
        conn,
        &format!("SELECT {COLUMNS} FROM plan_runs WHERE leased = 1 AND last_heartbeat < ?1"),
        params![millis(before)],
    )
}

fn check_lease(tx: &Transaction<'_>, id: &str, fencing: i64) -> Result<()> {
    if exists(
        tx,
        "SELECT 1 FROM plan_runs WHERE id = ?1 AND fencing = ?2 AND leased = 1",
        params![id, fencing],
    )? {
        Ok(())
    } else {
        Err(StoreError::Fenced {
            run: id.to_string(),
            fencing,
        })
    }
}

pub(super) fn put_results(
    tx: &Transaction<'_>,
    id: &str,
    fencing: i64,
    results: &[PlanHostResultRecord],
) -> Result<()> {
    check_lease(tx, id, fencing)?;
    let mut insert = tx.prepare_cached(
        "INSERT INTO plan_run_results (run_id, step, step_name, module, host, status,
            ignored, changed, exit_code, stdout, stderr, duration_ms, message, diff)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
         ON CONFLICT (run_id, step, host) DO UPDATE SET step_name = excluded.step_name,
            module = excluded.module, status = excluded.status, ignored = excluded.ignored,
            changed = excluded.changed, exit_code = excluded.exit_code,
            stdout = excluded.stdout, stderr = excluded.stderr,
            duration_ms = excluded.duration_ms, message = excluded.message,
            diff = excluded.diff",
    )?;
    for r in results {
        insert.execute(params![
            id,
            r.step,
            r.step_name,
            r.module,
            r.host,
            r.status,
            r.ignored,
            r.changed,
            r.exit_code,
            r.stdout,
            r.stderr,
            r.duration_ms,
            r.message,
            r.diff
        ])?;
    }
    Ok(())
}

pub(super) fn results(conn: &Connection, id: &str) -> Result<Vec<PlanHostResultRecord>> {
    let hosts: Vec<String> = match load(conn, id)? {
        Some(run) => run.hosts,
        None => return Ok(Vec::new()),
    };
    let mut stmt = conn.prepare_cached(
        "SELECT step, step_name, module, host, status, ignored, changed, exit_code, stdout,
                stderr, duration_ms, message, diff
         FROM plan_run_results WHERE run_id = ?1 ORDER BY step",
    )?;
    let rows = stmt.query_map([id], |r| {
        Ok(PlanHostResultRecord {
            step: r.get(0)?,
            step_name: r.get(1)?,
            module: r.get(2)?,
            host: r.get(3)?,
            status: r.get(4)?,
            ignored: r.get(5)?,
            changed: r.get(6)?,
            exit_code: r.get(7)?,
            stdout: r.get(8)?,
            stderr: r.get(9)?,
            duration_ms: r.get(10)?,
            message: r.get(11)?,
            diff: r.get(12)?,
        })
    })?;
    let mut out = rows.collect::<db::Result<Vec<_>>>()?;
    let order = |h: &str| hosts.iter().position(|x| x == h).unwrap_or(usize::MAX);
    out.sort_by_key(|r| (r.step, order(&r.host)));
    Ok(out)
}

pub(super) fn append_logs(
    tx: &Transaction<'_>,
    id: &str,
    fencing: i64,
    chunks: &[(i64, String)],
) -> Result<()> {
    // Published only if this commits: a fenced append's signal is dropped.
    crate::signal::emit(Signal::Run(id.to_string()));
    let current: Option<i64> = tx
        .prepare_cached("SELECT fencing FROM plan_runs WHERE id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?;
    if current != Some(fencing) {
        return Err(StoreError::Fenced {
            run: id.to_string(),
            fencing,
        });
    }
    // Each chunk is stamped with when it arrived.
    logs::append(tx, LogOf::PlanRun, id, chunks, millis(Utc::now()))
}

pub(super) fn read_logs(
    conn: &Connection,
    id: &str,
    after: Option<i64>,
    limit: u32,
) -> Result<Vec<LogRecord>> {
    logs::read(conn, LogOf::PlanRun, id, after, limit)
}

pub(super) fn next_log_seq(conn: &Connection, id: &str) -> Result<i64> {
    logs::next_seq(conn, LogOf::PlanRun, id)
}

/// After the tracked run `run` ended in `state`: when it finished having changed outputs
/// a plan of its org watches (`on_stack_change`), a trigger for that plan is recorded in
/// the same transaction, naming the watched outputs it changed.
pub(super) fn stack_run_ended(
    tx: &Transaction<'_>,
    run: &crate::RunRecord,
    state: bosun_core::run::RunState,
) -> Result<()> {
    if state != bosun_core::run::RunState::Finished || run.kind != bosun_core::run::RunKind::Tracked
    {
        return Ok(());
    }
    let watching = super::graph::plans_fed_by(tx, &run.org, &run.stack)?;
    if watching.is_empty() {
        return Ok(());
    }
    let changed = super::deps::changed_outputs(tx, run)?;
    if changed.is_empty() {
        return Ok(());
    }
    let now = millis(Utc::now());
    for edge in watching {
        let bosun_core::graph::Link::Feeds { outputs: watched } = &edge.link else {
            continue;
        };
        let plan = edge.downstream.id();
        let hit: Vec<&String> = changed
            .iter()
            .filter(|c| watched.is_empty() || watched.contains(c))
            .collect();
        if hit.is_empty() {
            continue;
        }
        tx.prepare_cached(
            "INSERT INTO plan_triggers (org_id, plan, stack, run_id, outputs, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(params![
            run.org,
            plan,
            run.stack,
            run.id,
            json!(hit).to_string(),
            now
        ])?;
        crate::signal::emit(Signal::Run(run.id.clone()));
    }
    Ok(())
}

/// Plan triggers no run was started for yet (the others are gone), oldest first.
pub(super) fn pending_triggers(conn: &Connection, limit: u32) -> Result<Vec<PlanTriggerRecord>> {
    let rows: Vec<(i64, String, String, String, String, String, i64)> = conn
        .prepare_cached(
            "SELECT id, org_id, plan, stack, run_id, outputs, created_at FROM plan_triggers
             ORDER BY id LIMIT ?1",
        )?
        .query_map(params![limit], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
            ))
        })?
        .collect::<db::Result<_>>()?;
    rows.into_iter()
        .map(|(id, org, plan, stack, run, outputs, at)| {
            Ok(PlanTriggerRecord {
                id,
                org,
                plan,
                stack,
                run,
                outputs: serde_json::from_str(&outputs)
                    .map_err(|e| corrupt("plan trigger outputs", e))?,
                created_at: from_millis(at)?,
            })
        })
        .collect()
}

/// Settles a trigger without a run: its plan is gone, or no longer watches the stack.
pub(super) fn drop_trigger(tx: &Transaction<'_>, id: i64) -> Result<()> {
    tx.prepare_cached("DELETE FROM plan_triggers WHERE id = ?1")?
        .execute(params![id])?;
    Ok(())
}
