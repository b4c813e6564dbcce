//! Stack runs: their rows, the run state machine applied to them (with what a run's end
//! releases), leases, phases, logs and saved plans.

use super::audit::append_audit;
use super::logs::{self, LogOf};
use super::stacks::stack_autodeploy;
use super::state::{clear_lock, lock_json, read_lock};
use super::*;
use bosun_core::policy::Verdict;

pub(super) const RUN_COLUMNS: &str =
    "id, org_id, stack_id, kind, trigger, state, phase, needs_lease, leased,
    started, cancel_requested, reason, triggered_by, commit_sha, branch, retry_of, plan_summary,
    blocked_by, late_write, runner_id, fencing, last_heartbeat, phase_started_at, created_at,
    updated_at, pull_request, delivery_id, upstream_run, held, consumed, blocked_since,
    lock_waits, summarised_at, policy_hold";

/// Raw run columns in `RUN_COLUMNS` order.
pub(super) struct RunRow {
    id: String,
    org: String,
    stack: String,
    kind: String,
    trigger: String,
    state: String,
    phase: String,
    needs_lease: bool,
    leased: bool,
    started: bool,
    cancel_requested: bool,
    reason: Option<String>,
    triggered_by: String,
    commit: Option<String>,
    branch: String,
    retry_of: Option<String>,
    plan_summary: Option<String>,
    blocked_by: Option<String>,
    late_write: bool,
    runner_id: Option<String>,
    fencing: i64,
    last_heartbeat: Option<i64>,
    phase_started_at: Option<i64>,
    created_at: i64,
    updated_at: i64,
    pull_request: Option<i64>,
    delivery: Option<i64>,
    upstream_run: Option<String>,
    held: bool,
    consumed: Option<String>,
    blocked_since: Option<i64>,
    lock_waits: Option<String>,
    summarised_at: Option<i64>,
    policy_hold: Option<String>,
}

pub(super) fn run_row(r: &Row<'_>) -> db::Result<RunRow> {
    Ok(RunRow {
        id: r.get(0)?,
        org: r.get(1)?,
        stack: r.get(2)?,
        kind: r.get(3)?,
        trigger: r.get(4)?,
        state: r.get(5)?,
        phase: r.get(6)?,
        needs_lease: r.get(7)?,
        leased: r.get(8)?,
        started: r.get(9)?,
        cancel_requested: r.get(10)?,
        reason: r.get(11)?,
        triggered_by: r.get(12)?,
        commit: r.get(13)?,
        branch: r.get(14)?,
        retry_of: r.get(15)?,
        plan_summary: r.get(16)?,
        blocked_by: r.get(17)?,
        late_write: r.get(18)?,
        runner_id: r.get(19)?,
        fencing: r.get(20)?,
        last_heartbeat: r.get(21)?,
        phase_started_at: r.get(22)?,
        created_at: r.get(23)?,
        updated_at: r.get(24)?,
        pull_request: r.get(25)?,
        delivery: r.get(26)?,
        upstream_run: r.get(27)?,
        held: r.get(28)?,
        consumed: r.get(29)?,
        blocked_since: r.get(30)?,
        lock_waits: r.get(31)?,
        summarised_at: r.get(32)?,
        policy_hold: r.get(33)?,
    })
}

pub(super) fn run_record(r: RunRow) -> Result<RunRecord> {
    let json = |col: &str, s: Option<String>| -> Result<Option<Value>> {
        s.map(|s| serde_json::from_str(&s).map_err(|e| corrupt(col, e)))
            .transpose()
    };
    Ok(RunRecord {
        kind: r.kind.parse().map_err(|e| corrupt("kind", e))?,
        trigger: r.trigger.parse().map_err(|e| corrupt("trigger", e))?,
        state: r.state.parse().map_err(|e| corrupt("state", e))?,
        phase: r.phase.parse().map_err(|e| corrupt("phase", e))?,
        plan_summary: json("plan_summary", r.plan_summary)?,
        blocked_by: json("blocked_by", r.blocked_by)?,
        consumed: json("consumed", r.consumed)?,
        lock_waits: json("lock_waits", r.lock_waits)?,
        blocked_since: opt_from_millis(r.blocked_since)?,
        summarised_at: opt_from_millis(r.summarised_at)?,
        policy_hold: match r.policy_hold {
            Some(h) => h.parse().map_err(|e| corrupt("policy_hold", e))?,
            None => bosun_core::policy::Verdict::Pass,
        },
        last_heartbeat: opt_from_millis(r.last_heartbeat)?,
        phase_started_at: opt_from_millis(r.phase_started_at)?,
        created_at: from_millis(r.created_at)?,
        updated_at: from_millis(r.updated_at)?,
        id: r.id,
        org: r.org,
        stack: r.stack,
        needs_lease: r.needs_lease,
        leased: r.leased,
        started: r.started,
        cancel_requested: r.cancel_requested,
        reason: r.reason,
        triggered_by: r.triggered_by,
        commit: r.commit,
        branch: r.branch,
        retry_of: r.retry_of,
        pull_request: r.pull_request,
        delivery: r.delivery,
        upstream_run: r.upstream_run,
        held: r.held,
        late_write: r.late_write,
        runner_id: r.runner_id,
        fencing: r.fencing,
    })
}

pub(super) fn query_runs(
    conn: &Connection,
    sql: &str,
    args: &[&dyn db::ToSql],
) -> Result<Vec<RunRecord>> {
    query_decoded(conn, sql, args, run_row, run_record)
}

pub(super) fn load_run(conn: &Connection, id: &str) -> Result<Option<RunRecord>> {
    Ok(query_runs(
        conn,
        &format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"),
        params![id],
    )?
    .pop())
}

/// Closes the open phase row and opens one for `state` (none for terminal states).
pub(super) fn enter_state(
    tx: &Transaction<'_>,
    run: &str,
    from: RunState,
    to: RunState,
    now: i64,
) -> Result<()> {
    if from == to {
        return Ok(());
    }
    tx.prepare_cached(
        "UPDATE run_phases SET ended_at = ?2 WHERE run_id = ?1 AND ended_at IS NULL",
    )?
    .execute(params![run, now])?;
    if !to.is_terminal() {
        tx.prepare_cached(
            "INSERT INTO run_phases (run_id, state, started_at) VALUES (?1, ?2, ?3)",
        )?
        .execute(params![run, to.as_str(), now])?;
    }
    Ok(())
}

/// Applies a decided transition to the stored run.
pub(super) fn apply_event(
    tx: &Transaction<'_>,
    run: &RunRecord,
    input: &RunEventInput,
) -> Result<RunEventResult> {
    if let Some(f) = input.fencing {
        if f != run.fencing || !run.leased {
            return Err(StoreError::Fenced {
                run: run.id.clone(),
                fencing: f,
            });
        }
    }
    let autodeploy = stack_autodeploy(tx, &run.org, &run.stack)?;
    let next = transition(run.state, run.facts(autodeploy), &input.event)?;
    let now = millis(Utc::now());
    let mut leased = run.leased;
    let mut started = run.started;
    let mut phase_started = run.phase_started_at.map(millis);
    let mut runner_id = run.runner_id.clone();
    match &input.event {
        Event::PhaseStarted => {
            started = true;
            phase_started = Some(now);
        }
        Event::PlanFinished { .. } | Event::Requeue => {
            leased = false;
            started = false;
            phase_started = None;
            if input.event == Event::Requeue {
                runner_id = None;
            }
        }
        _ => {}
    }
    let mut reason = input.update.reason.clone().or(run.reason.clone());
    if input.event == Event::Stale {
        reason = Some(STALE_REASON.to_string());
    }
    let mut released_lock = None;
    if next.state.is_terminal() {
        leased = false;
        if let Some(l) = read_lock(tx, &run.org, &run.stack)? {
            if l.holder == Writer::Run(run.id.clone()) {
                clear_lock(tx, &run.org, &run.stack)?;
                let note = format!("released state lock {} held by this run", l.id);
                reason = Some(match reason {
                    Some(r) => format!("{r}; {note}"),
                    None => note,
                });
                append_audit(
                    tx,
                    &Audit {
                        org: Some(run.org.clone()),
                        actor: "system".into(),
                        token_id: None,
                        action: "state.lock_released".into(),
                        target: format!("stack:{}", run.stack),
                        detail: json!({"run": run.id, "run_state": next.state.as_str(), "released": lock_json(&l)}),
                    },
                )?;
                released_lock = Some(l);
            }
        }
        // An ended run's token dies with it — except after a force-fail or timeout, when
        // the engine may still be out there: its late state writes must be recorded.
        if !matches!(next.state, RunState::ForceFailed | RunState::Interrupted) {
            tx.prepare_cached(
                "UPDATE tokens SET revoked_at = ?2 WHERE run_id = ?1 AND revoked_at IS NULL",
            )?
            .execute(params![run.id, now])?;
        }
    }
    let commit = run.commit.clone().or(input.update.commit.clone());
    let plan = input
        .update
        .plan_summary
        .as_ref()
        .or(run.plan_summary.as_ref())
        .map(|v| v.to_string());
    let cancel_requested = run.cancel_requested || next.stop_runner;
    // A run that no longer waits for a lease stops waiting for a lock too (kept on record).
    let lock_waits = match next.needs_lease {
        true => None,
        false => end_lock_wait(run, now).map(|(waits, _)| waits),
    };
    // A tracked run waiting for a confirmation its environment's approval must give, or a
    // policy asks for, is in the approvals inbox (`sql/approvals.rs`): its gate is the
    // gated environment, or "" when only a policy asks.
    // Not while a soft-mandatory deny holds it: an override comes first.
    let waits = next.state == RunState::Unconfirmed
        && run.kind == RunKind::Tracked
        && next.policy_hold != Verdict::Override;
    let gate = match waits {
        true => super::approvals::stack_gate(tx, &run.org, &run.stack)?
            .or((next.policy_hold == Verdict::Approval).then(String::new)),
        false => None,
    };
    let policy_hold = (next.policy_hold != Verdict::Pass).then(|| next.policy_hold.as_str());
    if !input.update.policy_evaluations.is_empty() {
        super::policies::insert_evaluations(
            tx,
            &run.org,
            &run.id,
            &input.update.policy_evaluations,
            now,
        )?;
    }
    if let Event::PlanFinished { .. } = input.event {
        // The plan's JSON is read by the policies when the plan is reported, and only then.
        tx.prepare_cached("DELETE FROM run_plan_json WHERE run_id = ?1")?
            .execute([&run.id])?;
    }
    crate::signal::emit(Signal::Run(run.id.clone()));
    tx.prepare_cached(
        "UPDATE runs SET state = ?2, phase = ?3, needs_lease = ?4, leased = ?5, started = ?6,
            cancel_requested = ?7, reason = ?8, commit_sha = ?9, plan_summary = ?10,
            runner_id = ?11, phase_started_at = ?12, updated_at = ?13,
            blocked_by = CASE WHEN ?4 <> 0 THEN blocked_by ELSE NULL END,
            blocked_since = CASE WHEN ?4 <> 0 THEN blocked_since ELSE NULL END,
            lock_waits = COALESCE(?14, lock_waits), gate = ?15, policy_hold = ?16
         WHERE id = ?1",
    )?
    .execute(params![
        run.id,
        next.state.as_str(),
        next.phase.as_str(),
        next.needs_lease,
        leased,
        started,
        cancel_requested,
        reason,
        commit,
        plan,
        runner_id,
        phase_started,
        now,
        lock_waits,
        gate,
        policy_hold,
    ])?;
    enter_state(tx, &run.id, run.state, next.state, now)?;
    // An operator's event (confirm, discard, an approval) is audited with the change.
    if let Some(audit) = &input.audit {
        append_audit(tx, audit)?;
    }
    if next.state.is_terminal() {
        deps::upstream_ended(tx, run, next.state)?;
        super::plan_runs::stack_run_ended(tx, run, next.state)?;
    }
    let had_commit = run.commit.is_some();
    let run =
        load_run(tx, &run.id)?.ok_or_else(|| StoreError::NotFound(format!("run {:?}", run.id)))?;
    if next.state.is_terminal() {
        notify::run_ended(tx, &run)?;
    }
    // GitHub hears of the change; a run whose commit became known only now (a manual
    // run resolves its branch's head when it prepares) is reported from here on.
    if !feedback::run_changed(tx, &run)? && !had_commit && run.commit.is_some() {
        feedback::run_created_late(tx, &run)?;
    }
    Ok(RunEventResult {
        run,
        stop_runner: next.stop_runner,
        released_lock,
    })
}

/// Inserts a queued run of an existing stack (with its first phase row) and returns it,
/// with the runs it holds for the stacks downstream of its own ([`deps::hold_downstream`]).
pub(super) fn insert_run(
    tx: &Transaction<'_>,
    run: &NewRun,
    delivery: Option<i64>,
) -> Result<RunRecord> {
    let created = insert_queued_run(tx, run, delivery)?;
    deps::hold_downstream(tx, &created)?;
    Ok(created)
}

/// Inserts a queued run of an existing stack (with its first phase row), holding nothing.
pub(super) fn insert_queued_run(
    tx: &Transaction<'_>,
    run: &NewRun,
    delivery: Option<i64>,
) -> Result<RunRecord> {
    // The stack's runner pool goes on the run: what a lease looks it up by. Its
    // repository and feedback setting say whether GitHub hears of the run.
    let Some((pool, repository, feedback)) = tx
        .prepare_cached(
            "SELECT s.runner_pool, s.repo_key, COALESCE(s.pr_feedback, o.pr_feedback)
             FROM stacks s JOIN orgs o ON o.id = s.org_id
             WHERE s.org_id = ?1 AND s.id = ?2",
        )?
        .query_row(params![run.org, run.stack], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })
        .optional()?
    else {
        return Err(StoreError::NotFound(format!(
            "stack {:?} in org {:?}",
            run.stack, run.org
        )));
    };
    let now = millis(Utc::now());
    tx.prepare_cached(
        "INSERT INTO runs (id, org_id, stack_id, kind, trigger, state, phase, needs_lease,
            triggered_by, commit_sha, branch, retry_of, pull_request, delivery_id, created_at,
            updated_at, pool)
         VALUES (?1, ?2, ?3, ?4, ?5, 'queued', 'plan', 1, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?12,
            ?13)",
    )?
    .execute(params![
        run.id,
        run.org,
        run.stack,
        run.kind.as_str(),
        run.trigger.as_str(),
        run.triggered_by,
        run.commit,
        run.branch,
        run.retry_of,
        run.pull_request,
        delivery,
        now,
        pool,
    ])
    .map_err(|e| exists_or(e, || format!("run {:?}", run.id)))?;
    tx.prepare_cached(
        "INSERT INTO run_phases (run_id, state, started_at) VALUES (?1, 'queued', ?2)",
    )?
    .execute(params![run.id, now])?;
    let created =
        load_run(tx, &run.id)?.ok_or_else(|| StoreError::Backend("created run vanished".into()))?;
    feedback::run_created(tx, &created, &repository, &feedback)?;
    Ok(created)
}

/// Sets the pool of the stack's runs not yet over to the stack's runner pool, after the
/// stack was saved: a run waiting for a runner is leased by the pool its stack names now.
pub(super) fn repool_stack(tx: &Transaction<'_>, org: &str, stack: &str, pool: &str) -> Result<()> {
    tx.prepare_cached(&format!(
        "UPDATE runs SET pool = ?3
         WHERE org_id = ?1 AND stack_id = ?2 AND state NOT IN {TERMINAL_STATES}"
    ))?
    .execute(params![org, stack, pool])?;
    Ok(())
}

/// Requests a cancel of `run` through [`transition`] (queued and unconfirmed runs end,
/// executing ones are flagged for their runner), recording `reason` and `audit`.
pub(super) fn cancel_in_tx(
    tx: &Transaction<'_>,
    run: &RunRecord,
    reason: String,
    audit: &Audit,
) -> Result<RunEventResult> {
    let input = RunEventInput {
        event: Event::Cancel,
        fencing: None,
        update: RunUpdate {
            reason: Some(reason),
            ..Default::default()
        },
        audit: None,
    };
    let out = apply_event(tx, run, &input)?;
    append_audit(tx, audit)?;
    Ok(out)
}

pub(super) fn last_between(
    c: &Connection,
    org: &str,
    first: &str,
    last: &str,
) -> Result<Vec<RunRecord>> {
    query_runs(
        c,
        &format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE id IN (
                SELECT (SELECT r.id FROM runs r
                        WHERE r.org_id = s.org_id AND r.stack_id = s.id
                        ORDER BY r.created_at DESC, r.id DESC LIMIT 1)
                FROM stacks s WHERE s.org_id = ?1 AND s.id >= ?2 AND s.id <= ?3)
             ORDER BY stack_id"
        ),
        params![org, first, last],
    )
}

pub(super) fn create(
    tx: &Transaction<'_>,
    run: &NewRun,
    audit: Option<&Audit>,
) -> Result<RunRecord> {
    let created = insert_run(tx, run, None)?;
    if let Some(audit) = &audit {
        append_audit(tx, audit)?;
    }
    Ok(created)
}

pub(super) fn list(
    c: &Connection,
    org: &str,
    stack: Option<&str>,
    before: Option<&str>,
    limit: u32,
) -> Result<Vec<RunRecord>> {
    // A cursor that is no run of the org lists nothing: never the list restarted.
    let before_created: Option<i64> = match &before {
        Some(b) => match c
            .prepare_cached("SELECT created_at FROM runs WHERE org_id = ?1 AND id = ?2")?
            .query_row(params![org, b], |r| r.get(0))
            .optional()?
        {
            Some(at) => Some(at),
            None => return Ok(Vec::new()),
        },
        None => None,
    };
    query_runs(
        c,
        &newest_first_sql(
            RUN_COLUMNS,
            "runs",
            "stack_id",
            stack.is_some(),
            before_created.is_some(),
        ),
        params![org, stack, before_created, before, limit],
    )
}

/// What is shown beside `run` (see [`RunContext`]), with at most `audit_limit` audit
/// records. Only a drift run or a scheduled run can have a drift check, so only theirs is
/// looked for.
pub(super) fn context(c: &Connection, run: &RunRecord, audit_limit: u32) -> Result<RunContext> {
    let drift_check =
        if run.kind == RunKind::Drift || run.trigger == bosun_core::run::Trigger::Schedule {
            super::drift::check(c, &run.id)?
        } else {
            None
        };
    let about_run = AuditFilter {
        target: Some(format!("run:{}", run.id)),
        ..Default::default()
    };
    let runner_name = match &run.runner_id {
        Some(r) => super::runners::get(c, r)?.map(|r| r.name),
        None => None,
    };
    Ok(RunContext {
        phases: phases(c, &run.id)?,
        drift_check,
        audit: super::audit::search(c, Some(&run.org), &about_run, None, audit_limit)?,
        runner_name,
        policy_evaluations: super::policies::evaluations(c, &run.id)?,
    })
}

pub(super) fn phases(c: &Connection, run: &str) -> Result<Vec<RunPhaseRecord>> {
    Ok(phases_of(c, &[run.to_string()])?
        .remove(run)
        .unwrap_or_default())
}

/// The phases of each of `runs` (at most [`MAX_PHASE_RUNS`], a page), in one statement.
pub(super) fn phases_of(
    c: &Connection,
    runs: &[String],
) -> Result<BTreeMap<String, Vec<RunPhaseRecord>>> {
    let mut out: BTreeMap<String, Vec<RunPhaseRecord>> = BTreeMap::new();
    for page in runs.chunks(MAX_PHASE_RUNS) {
        let marks: Vec<String> = (1..=page.len()).map(|i| format!("?{i}")).collect();
        let mut stmt = c.prepare_cached(&format!(
            "SELECT run_id, state, started_at, ended_at FROM run_phases
             WHERE run_id IN ({}) ORDER BY run_id, rowid",
            marks.join(", ")
        ))?;
        let args: Vec<&dyn db::ToSql> = page.iter().map(|r| r as &dyn db::ToSql).collect();
        let rows = stmt.query_map(&args[..], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, Option<i64>>(3)?,
            ))
        })?;
        for row in rows {
            let (run, state, started, ended) = row?;
            out.entry(run).or_default().push(RunPhaseRecord {
                state: state.parse().map_err(|e| corrupt("phase state", e))?,
                started_at: from_millis(started)?,
                ended_at: opt_from_millis(ended)?,
            });
        }
    }
    Ok(out)
}

/// The most runs [`phases_of`] asks for in one statement: the largest page of runs.
const MAX_PHASE_RUNS: usize = 100;

pub(super) fn event(
    tx: &Transaction<'_>,
    id: &str,
    input: &RunEventInput,
) -> Result<RunEventResult> {
    let run = load_run(tx, id)?.ok_or_else(|| StoreError::NotFound(format!("run {id:?}")))?;
    apply_event(tx, &run, input)
}

pub(super) fn cancel(tx: &Transaction<'_>, id: &str, audit: &Audit) -> Result<RunEventResult> {
    let run = load_run(tx, id)?.ok_or_else(|| StoreError::NotFound(format!("run {id:?}")))?;
    let reason = format!("canceled by {}", audit.actor);
    cancel_in_tx(tx, &run, reason, audit)
}

/// Whether any run waits for a runner (idle runners poll often: a cheap read first).
pub(super) fn any_waiting(c: &Connection) -> Result<bool> {
    exists(
        c,
        "SELECT 1 FROM runs WHERE needs_lease = 1 LIMIT 1",
        params![],
    )
}

/// Leases the oldest run this runner may take: see [`RunStore::lease_run`].
/// Waiting runs of a pool read at once by a lease.
const LEASE_PAGE: usize = 100;

/// The pool's waiting runs, oldest first, a page at a time: the first page, then those
/// after `after` (`created_at`, `id`).
fn lease_candidates(
    tx: &Transaction<'_>,
    runner: &RunnerRecord,
    after: Option<&RunRecord>,
) -> Result<Vec<RunRecord>> {
    match after {
        None => query_runs(
            tx,
            &format!(
                "SELECT {RUN_COLUMNS} FROM runs r WHERE r.needs_lease = 1 AND r.pool = ?2
                 AND (?1 IS NULL OR r.org_id = ?1)
                 ORDER BY r.created_at, r.id LIMIT {LEASE_PAGE}"
            ),
            params![runner.org, runner.pool],
        ),
        Some(last) => query_runs(
            tx,
            &format!(
                "SELECT {RUN_COLUMNS} FROM runs r WHERE r.needs_lease = 1 AND r.pool = ?2
                 AND (?1 IS NULL OR r.org_id = ?1)
                 AND (r.created_at > ?3 OR (r.created_at = ?3 AND r.id > ?4))
                 ORDER BY r.created_at, r.id LIMIT {LEASE_PAGE}"
            ),
            params![runner.org, runner.pool, millis(last.created_at), last.id],
        ),
    }
}

/// Leases the pool's oldest dispatchable run to `runner`. Runs that cannot go yet (behind
/// an earlier run of their stack, or a lock) are passed over page after page, so however
/// many wait, a dispatchable run behind them is found.
pub(super) fn lease(tx: &Transaction<'_>, runner: &RunnerRecord) -> Result<Option<RunRecord>> {
    let mut after: Option<RunRecord> = None;
    loop {
        let candidates = lease_candidates(tx, runner, after.as_ref())?;
        let full = candidates.len() == LEASE_PAGE;
        after = candidates.last().cloned();
        if let Some(leased) = lease_first(tx, runner, candidates)? {
            return Ok(Some(leased));
        }
        if !full {
            return Ok(None);
        }
    }
}

/// Leases the first dispatchable run of `candidates`, if any.
fn lease_first(
    tx: &Transaction<'_>,
    runner: &RunnerRecord,
    candidates: Vec<RunRecord>,
) -> Result<Option<RunRecord>> {
    for run in candidates {
        // Claim the row where the backend needs to: a run another dispatcher is
        // leasing right now is skipped, not waited for.
        if !db::claim_lease(tx, &run.id)? {
            continue;
        }
        if run.kind == RunKind::Tracked {
            let earlier = exists(
                tx,
                &format!(
                    "SELECT 1 FROM runs WHERE org_id = ?1 AND stack_id = ?2
                     AND kind = 'tracked' AND state NOT IN {TERMINAL_STATES}
                     AND held = 0 AND id <> ?4
                     AND (state <> 'queued' OR created_at < ?3
                          OR (created_at = ?3 AND id < ?4))"
                ),
                params![run.org, run.stack, millis(run.created_at), run.id],
            )?;
            if earlier {
                continue;
            }
            if let Some(l) = read_lock(tx, &run.org, &run.stack)? {
                if l.holder != Writer::Run(run.id.clone()) {
                    let holder = lock_json(&l);
                    if run.blocked_by.as_ref() != Some(&holder) {
                        // A new blocker: the wait behind the previous one (if any) ends.
                        let now = millis(Utc::now());
                        let waits = end_lock_wait(&run, now).map(|(waits, _)| waits);
                        tx.prepare_cached(
                            "UPDATE runs SET blocked_by = ?2, blocked_since = ?3,
                                lock_waits = COALESCE(?4, lock_waits)
                             WHERE id = ?1",
                        )?
                        .execute(params![
                            run.id,
                            holder.to_string(),
                            now,
                            waits
                        ])?;
                        crate::signal::emit(Signal::Run(run.id.clone()));
                    }
                    continue;
                }
            }
        }
        let autodeploy = stack_autodeploy(tx, &run.org, &run.stack)?;
        let next = transition(run.state, run.facts(autodeploy), &Event::Leased)?;
        let now = millis(Utc::now());
        let ended_wait = end_lock_wait(&run, now);
        crate::signal::emit(Signal::Run(run.id.clone()));
        tx.prepare_cached(
            "UPDATE runs SET state = ?2, phase = ?3, needs_lease = 0, leased = 1,
                started = 0, runner_id = ?4, fencing = fencing + 1, last_heartbeat = ?5,
                phase_started_at = NULL, blocked_by = NULL, blocked_since = NULL,
                lock_waits = COALESCE(?6, lock_waits), updated_at = ?5
             WHERE id = ?1",
        )?
        .execute(params![
            run.id,
            next.state.as_str(),
            next.phase.as_str(),
            runner.id,
            now,
            ended_wait.as_ref().map(|(waits, _)| waits),
        ])?;
        // The run's log says why it started late, before anything its runner writes.
        enter_state(tx, &run.id, run.state, next.state, now)?;
        if let Some((_, line)) = ended_wait {
            // Stamped with the phase just leased (the run row holds it now).
            let seq = logs::next_seq(tx, LogOf::StackRun, &run.id)?;
            logs::append(tx, LogOf::StackRun, &run.id, &[(seq, line)], now)?;
        }
        tx.prepare_cached("UPDATE runners SET last_seen = ?2 WHERE id = ?1")?
            .execute(params![runner.id, now])?;
        return load_run(tx, &run.id);
    }
    Ok(None)
}

/// The run's lock waits with its current wait (if it waits behind a lock) ended at `now`,
/// as the JSON to store (the latest [`MAX_LOCK_WAITS`]), and the log line that says so.
fn end_lock_wait(run: &RunRecord, now: i64) -> Option<(String, String)> {
    let holder = run.blocked_by.as_ref()?;
    let from = run.blocked_since.map(millis).unwrap_or(now);
    let mut waits = match &run.lock_waits {
        Some(Value::Array(waits)) => waits.clone(),
        _ => Vec::new(),
    };
    waits.push(json!({"holder": holder, "from": from, "until": now}));
    let extra = waits.len().saturating_sub(MAX_LOCK_WAITS);
    waits.drain(..extra);
    let who = holder["Who"]
        .as_str()
        .filter(|w| !w.is_empty())
        .unwrap_or("an unnamed writer");
    let why = match holder["Info"].as_str() {
        Some(info) if !info.is_empty() => format!(" ({info:?})"),
        _ => String::new(),
    };
    let waited = std::time::Duration::from_secs(((now - from).max(0) / 1000) as u64);
    let line = format!(
        "bosun: waited {} for the state lock held by {who}{why}, until it was released\n",
        humantime::format_duration(waited)
    );
    Some((Value::Array(waits).to_string(), line))
}

pub(super) fn heartbeat(tx: &Transaction<'_>, id: &str, fencing: i64) -> Result<bool> {
    let now = millis(Utc::now());
    let n = tx
        .prepare_cached(
            "UPDATE runs SET last_heartbeat = ?3 WHERE id = ?1 AND fencing = ?2 AND leased = 1",
        )?
        .execute(params![id, fencing, now])?;
    if n == 0 {
        return Err(StoreError::Fenced {
            run: id.to_string(),
            fencing,
        });
    }
    tx.prepare_cached(
        "UPDATE runners SET last_seen = ?2 WHERE id = (SELECT runner_id FROM runs WHERE id = ?1)",
    )?
    .execute(params![id, now])?;
    let cancel: bool = tx
        .prepare_cached("SELECT cancel_requested FROM runs WHERE id = ?1")?
        .query_row([&id], |r| r.get(0))?;
    Ok(cancel)
}

pub(super) fn stale(c: &Connection, before: DateTime<Utc>) -> Result<Vec<RunRecord>> {
    query_runs(
        c,
        &format!("SELECT {RUN_COLUMNS} FROM runs WHERE leased = 1 AND last_heartbeat < ?1"),
        params![millis(before)],
    )
}

pub(super) fn executing(c: &Connection) -> Result<Vec<RunRecord>> {
    query_runs(
        c,
        &format!("SELECT {RUN_COLUMNS} FROM runs WHERE leased = 1"),
        params![],
    )
}

pub(super) fn flag_late_write(tx: &Transaction<'_>, id: &str) -> Result<()> {
    tx.prepare_cached("UPDATE runs SET late_write = 1 WHERE id = ?1")?
        .execute([&id])?;
    Ok(())
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
        .prepare_cached("SELECT fencing FROM runs WHERE id = ?1")?
        .query_row([&id], |r| r.get(0))
        .optional()?;
    if current != Some(fencing) {
        return Err(StoreError::Fenced {
            run: id.to_string(),
            fencing,
        });
    }
    // Each chunk is stamped with when it arrived and the phase the run is in.
    logs::append(tx, LogOf::StackRun, id, chunks, millis(Utc::now()))
}

pub(super) fn read_logs(
    c: &Connection,
    id: &str,
    after: Option<i64>,
    limit: u32,
) -> Result<Vec<LogRecord>> {
    logs::read(c, LogOf::StackRun, id, after, limit)
}

pub(super) fn next_log_seq(c: &Connection, id: &str) -> Result<i64> {
    logs::next_seq(c, LogOf::StackRun, id)
}

pub(super) fn put_plan(tx: &Transaction<'_>, id: &str, fencing: i64, body: &[u8]) -> Result<()> {
    put_leased_blob(tx, "run_plans", id, fencing, body)
}

/// Saves `body` as run `id`'s row of `table` (`run_plans`, `run_plan_json`), for the
/// holder of its lease `fencing` only.
pub(super) fn put_leased_blob(
    tx: &Transaction<'_>,
    table: &str,
    id: &str,
    fencing: i64,
    body: &[u8],
) -> Result<()> {
    if !exists(
        tx,
        "SELECT 1 FROM runs WHERE id = ?1 AND fencing = ?2 AND leased = 1",
        params![id, fencing],
    )? {
        return Err(StoreError::Fenced {
            run: id.to_string(),
            fencing,
        });
    }
    tx.prepare_cached(&format!(
        "INSERT INTO {table} (run_id, body) VALUES (?1, ?2)
         ON CONFLICT (run_id) DO UPDATE SET body = excluded.body"
    ))?
    .execute(params![id, body])?;
    Ok(())
}

pub(super) fn get_plan(c: &Connection, id: &str) -> Result<Option<Vec<u8>>> {
    Ok(
        c.prepare_cached("SELECT body FROM run_plans WHERE run_id = ?1")?
            .query_row([&id], |r| r.get(0))
            .optional()?,
    )
}
