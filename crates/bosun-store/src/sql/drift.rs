//! Drift detection (one source for both backends; see `super::db`): each stack's schedule bookkeeping (`drift_schedules`) and
//! the settled result of every ended drift run (`drift_checks`). A fire — start the
//! drift run, or record why not, and move `next_at` — is one transaction guarded by the
//! `next_at` the scheduler read, so two servers never fire one schedule twice.

use bosun_core::drift::DriftResult;

use super::audit::append_audit;
use super::runs::{insert_run, load_run, query_runs, RUN_COLUMNS};
use super::*;

const CHECK_COLUMNS: &str = "run_id, org_id, stack_id, result, checked_at, reconcile_run";

type CheckRow = (String, String, String, String, i64, Option<String>);

fn check_row(r: &Row<'_>) -> db::Result<CheckRow> {
    CheckRow::try_from(r)
}

fn check_record(r: CheckRow) -> Result<DriftCheckRecord> {
    Ok(DriftCheckRecord {
        result: DriftResult::parse(&r.3).ok_or_else(|| corrupt("drift result", &r.3))?,
        run: r.0,
        org: r.1,
        stack: r.2,
        checked_at: from_millis(r.4)?,
        reconcile_run: r.5,
    })
}

type ScheduleRow = (
    String,
    String,
    i64,
    i64,
    Option<i64>,
    Option<String>,
    Option<String>,
    Option<i64>,
    Option<i64>,
);

fn schedule_state_of(r: ScheduleRow) -> Result<DriftScheduleState> {
    Ok(DriftScheduleState {
        schedule: r.0,
        timezone: r.1,
        since: from_millis(r.2)?,
        next_at: from_millis(r.3)?,
        last_fire_at: opt_from_millis(r.4)?,
        last_fire_run: r.5,
        last_fire_note: r.6,
        stale_at: r.7,
        alert_at: r.8,
    })
}

fn schedule_state(conn: &Connection, org: &str, stack: &str) -> Result<Option<DriftScheduleState>> {
    let row: Option<ScheduleRow> = conn
        .prepare_cached(
            "SELECT schedule, timezone, since, next_at, last_fire_at, last_fire_run,
                    last_fire_note, stale_at, alert_at
             FROM drift_schedules WHERE org_id = ?1 AND stack_id = ?2",
        )?
        .query_row(params![org, stack], |r| ScheduleRow::try_from(r))
        .optional()?;
    row.map(schedule_state_of).transpose()
}

/// Recomputes when a stack's checking turns stale — from its latest successful check,
/// or the schedule's `since` — after either changed; a new value re-arms its alert.
fn refresh_stale_at(conn: &Connection, org: &str, stack: &str) -> Result<()> {
    let Some(state) = schedule_state(conn, org, stack)? else {
        return Ok(());
    };
    let success: Option<i64> = conn
        .prepare_cached(
            "SELECT checked_at FROM drift_checks
             WHERE org_id = ?1 AND stack_id = ?2 AND result IN ('no_drift', 'drift_detected')
             ORDER BY checked_at DESC LIMIT 1",
        )?
        .query_row(params![org, stack], |r| r.get(0))
        .optional()?;
    let base = match success {
        Some(at) => from_millis(at)?,
        None => state.since,
    };
    let stale_at = bosun_core::cron::Schedule::parse(&state.schedule, &state.timezone)
        .ok()
        .and_then(|s| bosun_core::drift::stale_at(&s, base))
        .map_or(NEVER_STALE, millis);
    if state.stale_at == Some(stale_at) {
        return Ok(());
    }
    let alert_at = (stale_at != NEVER_STALE).then_some(stale_at);
    conn.prepare_cached(
        "UPDATE drift_schedules SET stale_at = ?3, alert_at = ?4
         WHERE org_id = ?1 AND stack_id = ?2",
    )?
    .execute(params![org, stack, stale_at, alert_at])?;
    Ok(())
}

/// Keeps a stack's drift bookkeeping in step with its saved settings: without drift
/// detection it has no schedule; with settings other than the armed ones (or none armed
/// yet) it waits in `drift_arming` for the scheduler's next pass.
pub(super) fn settings_saved(
    tx: &Transaction<'_>,
    org: &str,
    spec: &bosun_core::stack::StackSpec,
    at: i64,
) -> Result<()> {
    let Some(d) = &spec.drift_detection else {
        tx.prepare_cached("DELETE FROM drift_schedules WHERE org_id = ?1 AND stack_id = ?2")?
            .execute(params![org, spec.id.as_str()])?;
        tx.prepare_cached("DELETE FROM drift_arming WHERE org_id = ?1 AND stack_id = ?2")?
            .execute(params![org, spec.id.as_str()])?;
        return Ok(());
    };
    let armed = schedule_state(tx, org, spec.id.as_str())?;
    let same = bosun_core::cron::Schedule::parse(&d.schedule, &d.timezone).is_ok_and(|p| {
        armed
            .as_ref()
            .is_some_and(|a| a.schedule == p.expression() && a.timezone == p.timezone().name())
    });
    if !same {
        tx.prepare_cached(
            "INSERT INTO drift_arming (org_id, stack_id, queued_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (org_id, stack_id) DO UPDATE SET queued_at = CASE
                WHEN excluded.queued_at > drift_arming.queued_at THEN excluded.queued_at
                ELSE drift_arming.queued_at + 1 END",
        )?
        .execute(params![org, spec.id.as_str(), at])?;
    }
    Ok(())
}

/// The open drift run of a stack, if any.
fn open_drift_run(conn: &Connection, org: &str, stack: &str) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT id FROM runs WHERE org_id = ?1 AND stack_id = ?2 AND kind = 'drift'
               AND state NOT IN {TERMINAL_STATES}
             ORDER BY created_at LIMIT 1"
        ))?
        .query_row(params![org, stack], |r| r.get(0))
        .optional()?)
}

pub(super) fn schedules(
    conn: &Connection,
    org: Option<&str>,
    stack: Option<&str>,
) -> Result<Vec<DriftScheduleRecord>> {
    schedules_in(conn, org, stack, None, None)
}

fn query_schedules(
    conn: &Connection,
    sql: &str,
    args: &[&dyn db::ToSql],
) -> Result<Vec<DriftScheduleRecord>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map(args, schedule_row)?;
    let mut out = Vec::new();
    for r in rows {
        out.push(schedule_record(r?)?);
    }
    Ok(out)
}

/// Armed schedules from `drift_schedules`' own indexes, stacks joined per row.
const BY_SCHEDULE: &str =
    "drift_schedules ds JOIN stacks s ON s.org_id = ds.org_id AND s.id = ds.stack_id";

pub(super) fn due(conn: &Connection, now: i64, limit: u32) -> Result<Vec<DriftScheduleRecord>> {
    query_schedules(
        conn,
        &schedules_select(BY_SCHEDULE, "ds.next_at <= ?1", "ds.next_at LIMIT ?2"),
        params![now, limit],
    )
}

pub(super) fn alerts_due(
    conn: &Connection,
    now: i64,
    limit: u32,
) -> Result<Vec<DriftScheduleRecord>> {
    query_schedules(
        conn,
        &schedules_select(BY_SCHEDULE, "ds.alert_at < ?1", "ds.alert_at LIMIT ?2"),
        params![now, limit],
    )
}

pub(super) fn dashboard(
    conn: &Connection,
    org: &str,
    after: Option<&KeyCursor>,
    limit: u32,
) -> Result<Vec<DriftScheduleRecord>> {
    // The page's schedules are chosen first, in the index's order, and only they are
    // joined to their checks and open runs: a planner that misjudges how many rows the
    // joins yield cannot decide to join every drift-checked stack of the org and sort.
    let page = |filter: &str| {
        format!(
            "(SELECT d.* FROM drift_schedules d
                  JOIN stacks t ON t.org_id = d.org_id AND t.id = d.stack_id
              WHERE t.drift_detection IS NOT NULL AND {filter}
              ORDER BY d.stale_at, d.stack_id LIMIT ?4) ds
             JOIN stacks s ON s.org_id = ds.org_id AND s.id = ds.stack_id"
        )
    };
    let order = "ds.stale_at, ds.stack_id";
    match after {
        None => query_schedules(
            conn,
            &schedules_select(
                &page("d.org_id = ?1 AND d.stale_at IS NOT NULL AND ?2 IS NULL AND ?3 IS NULL"),
                "1 = 1",
                order,
            ),
            params![org, None::<i64>, None::<String>, limit],
        ),
        Some(c) => query_schedules(
            conn,
            &schedules_select(
                &page("d.org_id = ?1 AND (d.stale_at, d.stack_id) > (?2, ?3)"),
                "1 = 1",
                order,
            ),
            params![org, c.key, c.id, limit],
        ),
    }
}

/// The drift-checked stacks stale at `now` (`stale_at` before it): counted per org, and
/// the `limit` that turned stale first with what their check age is measured from.
///
/// The count reads no more rows than there are stale stacks not alerted yet: those whose
/// alert the scheduler raised for their current episode (they were stale at that pass,
/// and a success since would have moved `stale_at` on and re-armed the alert) are kept per
/// org in `metric_counts` by the triggers of migration 0035; the others are the few whose
/// `alert_at` has passed, read from its index. The named ones come from the
/// `drift_schedules_stale_by_age` index: `limit` rows however many are stale.
pub(super) fn stale_checks(conn: &Connection, now: i64, limit: u32) -> Result<StaleDriftChecks> {
    db::snapshot(conn, |tx| {
        let mut by_org = super::metrics::counts_by_org(tx, super::metrics::DRIFT_STALE)?;
        for org in pending_alerts(tx, now)? {
            *by_org.entry(org).or_default() += 1;
        }
        let oldest = most_overdue(tx, now, limit)?;
        Ok(StaleDriftChecks { by_org, oldest })
    })
}

/// The `limit` stale stacks that turned stale first, with what their check age is
/// measured from.
fn most_overdue(conn: &Connection, now: i64, limit: u32) -> Result<Vec<DriftCheckBase>> {
    let mut stmt = conn.prepare_cached(
        "SELECT ds.org_id, ds.stack_id, ds.since,
                (SELECT c.checked_at FROM drift_checks c
                 WHERE c.org_id = ds.org_id AND c.stack_id = ds.stack_id
                   AND c.result IN ('no_drift', 'drift_detected')
                 ORDER BY c.checked_at DESC LIMIT 1)
         FROM drift_schedules ds
         WHERE ds.stale_at < ?1
         ORDER BY ds.stale_at, ds.org_id, ds.stack_id LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![now, limit], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, i64>(2)?,
            r.get::<_, Option<i64>>(3)?,
        ))
    })?;
    let mut oldest = Vec::new();
    for row in rows {
        let (org, stack, since, last) = row?;
        oldest.push(DriftCheckBase {
            org,
            stack,
            since: from_millis(since)?,
            last_success_at: opt_from_millis(last)?,
        });
    }
    Ok(oldest)
}

/// How many of an org's drift-checked stacks are stale at `now`, up to `cap`: its alerted
/// ones from `metric_counts` and its pending ones (`alert_at` passed) from their
/// `(org_id, alert_at)` index, no more than `cap` of them read: after the scheduler was
/// down, every stale stack of every org is pending at once.
pub(super) fn count_stale(conn: &Connection, org: &str, now: i64, cap: u32) -> Result<u64> {
    db::snapshot(conn, |tx| {
        let alerted = super::metrics::count_of(tx, super::metrics::DRIFT_STALE, org)?;
        let pending: i64 = tx
            .prepare_cached(
                "SELECT COUNT(*) FROM (SELECT 1 FROM drift_schedules
                 WHERE org_id = ?1 AND alert_at < ?2 LIMIT ?3) p",
            )?
            .query_row(params![org, now, cap], |r| r.get(0))?;
        Ok((alerted + pending).clamp(0, i64::from(cap)) as u64)
    })
}

/// The org of each drift-checked stack stale at `now` whose alert is not raised yet: the
/// schedules whose `alert_at` has passed, read from its index — a pass of the scheduler's
/// behind, not every stale stack. Listed rather than grouped in SQL: grouped, SQLite would
/// walk the (org, stack) key for its order rather than the `alert_at` range.
fn pending_alerts(conn: &Connection, now: i64) -> Result<Vec<String>> {
    Ok(conn
        .prepare_cached("SELECT org_id FROM drift_schedules WHERE alert_at < ?1")?
        .query_map(params![now], |r| r.get::<_, String>(0))?
        .collect::<db::Result<Vec<String>>>()?)
}

pub(super) fn alert_raised(
    tx: &Transaction<'_>,
    org: &str,
    stack: &str,
    alert_at: i64,
) -> Result<()> {
    tx.prepare_cached(
        "UPDATE drift_schedules SET alert_at = NULL
         WHERE org_id = ?1 AND stack_id = ?2 AND alert_at = ?3",
    )?
    .execute(params![org, stack, alert_at])?;
    Ok(())
}

pub(super) fn arming(conn: &Connection, limit: u32) -> Result<Vec<DriftArming>> {
    let mut stmt = conn.prepare_cached(
        "SELECT org_id, stack_id, queued_at FROM drift_arming
         ORDER BY org_id, stack_id LIMIT ?1",
    )?;
    let rows = stmt.query_map(params![limit], |r| {
        Ok(DriftArming {
            org: r.get(0)?,
            stack: r.get(1)?,
            queued_at: r.get(2)?,
        })
    })?;
    Ok(rows.collect::<db::Result<Vec<_>>>()?)
}

pub(super) fn armed(tx: &Transaction<'_>, tickets: &[DriftArming]) -> Result<()> {
    let mut stmt = tx.prepare_cached(
        "DELETE FROM drift_arming WHERE org_id = ?1 AND stack_id = ?2 AND queued_at = ?3",
    )?;
    for t in tickets {
        stmt.execute(params![t.org, t.stack, t.queued_at])?;
    }
    Ok(())
}

pub(super) fn fill_stale_at(tx: &Transaction<'_>, limit: u32) -> Result<usize> {
    let keys: Vec<(String, String)> = tx
        .prepare_cached(
            "SELECT org_id, stack_id FROM drift_schedules WHERE stale_at IS NULL
             ORDER BY org_id, stack_id LIMIT ?1",
        )?
        .query_map(params![limit], |r| <(String, String)>::try_from(r))?
        .collect::<db::Result<_>>()?;
    for (org, stack) in &keys {
        refresh_stale_at(tx, org, stack)?;
    }
    Ok(keys.len())
}

/// The latest check of the stack `s` in one `drift_checks` row, by run id (`filter`
/// narrows the results counted).
fn latest_check_join(alias: &str, filter: &str) -> String {
    format!(
        "LEFT JOIN drift_checks {alias} ON {alias}.run_id = (
            SELECT c.run_id FROM drift_checks c
            WHERE c.org_id = s.org_id AND c.stack_id = s.id {filter}
            ORDER BY c.checked_at DESC, c.run_id DESC LIMIT 1)"
    )
}

/// Drift-checked stacks (of an org, one stack, or ids `first..=last`) with their
/// bookkeeping, latest checks and open drift run: one statement, whatever their number.
pub(super) fn schedules_in(
    conn: &Connection,
    org: Option<&str>,
    stack: Option<&str>,
    first: Option<&str>,
    last: Option<&str>,
) -> Result<Vec<DriftScheduleRecord>> {
    let sql = schedules_sql([org, stack, first, last].map(|p| p.is_some()));
    query_schedules(conn, &sql, params![org, stack, first, last])
}

/// [`schedules_in`]'s statement for the filters given (org, stack, first, last). A filter
/// not given is `?N IS NULL`, never `(?N IS NULL OR column = ?N)`: that form hides the
/// stacks index from the planner, which then reads every stack to return one.
pub(crate) fn schedules_sql([org, stack, first, last]: [bool; 4]) -> String {
    schedules_select(
        "stacks s LEFT JOIN drift_schedules ds ON ds.org_id = s.org_id AND ds.stack_id = s.id",
        &format!(
            "{} AND {} AND {} AND {}",
            filter_if(org, "s.org_id = ?1", 1),
            filter_if(stack, "s.id = ?2", 2),
            filter_if(first, "s.id >= ?3", 3),
            filter_if(last, "s.id <= ?4", 4),
        ),
        "s.org_id, s.id",
    )
}

/// The drift-checked stacks `from` reads (aliases `s` for stacks and `ds` for their
/// schedules) that `filter` keeps, in `order`, each with its bookkeeping, latest checks
/// and open drift run: the columns [`schedule_row`] reads.
fn schedules_select(from: &str, filter: &str, order: &str) -> String {
    format!(
        "SELECT s.org_id, s.id, s.drift_detection,
                ds.schedule, ds.timezone, ds.since, ds.next_at, ds.last_fire_at,
                ds.last_fire_run, ds.last_fire_note, ds.stale_at, ds.alert_at,
                ls.run_id, ls.result, ls.checked_at, ls.reconcile_run,
                lc.run_id, lc.result, lc.checked_at, lc.reconcile_run,
                (SELECT r.id FROM runs r WHERE r.org_id = s.org_id AND r.stack_id = s.id
                   AND r.kind = 'drift' AND r.state NOT IN {TERMINAL_STATES}
                 ORDER BY r.created_at LIMIT 1)
         FROM {from}
         {success}
         {any}
         WHERE s.drift_detection IS NOT NULL AND {filter}
         ORDER BY {order}",
        success = latest_check_join("ls", "AND c.result IN ('no_drift', 'drift_detected')"),
        any = latest_check_join("lc", ""),
    )
}

/// The raw columns of [`schedules_in`]'s statement.
struct ScheduleJoinRow {
    org: String,
    stack: String,
    drift: String,
    state: Option<ScheduleRow>,
    last_success: Option<CheckRow>,
    last_check: Option<CheckRow>,
    open_run: Option<String>,
}

fn schedule_row(r: &Row<'_>) -> db::Result<ScheduleJoinRow> {
    let (org, stack): (String, String) = (r.get(0)?, r.get(1)?);
    let state = match r.get::<_, Option<String>>(3)? {
        Some(schedule) => Some((
            schedule,
            r.get(4)?,
            r.get(5)?,
            r.get(6)?,
            r.get(7)?,
            r.get(8)?,
            r.get(9)?,
            r.get(10)?,
            r.get(11)?,
        )),
        None => None,
    };
    let check = |at: usize| -> db::Result<Option<CheckRow>> {
        Ok(match r.get::<_, Option<String>>(at)? {
            Some(run) => Some((
                run,
                org.clone(),
                stack.clone(),
                r.get(at + 1)?,
                r.get(at + 2)?,
                r.get(at + 3)?,
            )),
            None => None,
        })
    };
    Ok(ScheduleJoinRow {
        drift: r.get(2)?,
        state,
        last_success: check(12)?,
        last_check: check(16)?,
        open_run: r.get(20)?,
        org,
        stack,
    })
}

fn schedule_record(r: ScheduleJoinRow) -> Result<DriftScheduleRecord> {
    // Parsed as loading a stack does (`DriftDetection::from_input`): a hand-edited row
    // is refused, and the schedule and zone read in their normal form.
    let d: serde_json::Value =
        serde_json::from_str(&r.drift).map_err(|e| corrupt("drift_detection", e))?;
    let parsed = bosun_core::cron::Schedule::parse(
        d["schedule"].as_str().unwrap_or_default(),
        d["timezone"].as_str().unwrap_or("UTC"),
    )
    .map_err(|e| corrupt("drift_detection", e))?;
    let drift = bosun_core::stack::DriftDetection {
        schedule: parsed.expression().to_string(),
        reconcile: d["reconcile"].as_bool().unwrap_or(false),
        timezone: parsed.timezone().name().to_string(),
    };
    let state = r.state.map(schedule_state_of).transpose()?;
    Ok(DriftScheduleRecord {
        org: r.org,
        stack: r.stack,
        drift,
        state,
        last_success: r.last_success.map(check_record).transpose()?,
        last_check: r.last_check.map(check_record).transpose()?,
        open_run: r.open_run,
    })
}

fn run_audit(run: &NewRun) -> Audit {
    Audit {
        org: Some(run.org.clone()),
        actor: "system".into(),
        token_id: None,
        action: "run.create".into(),
        target: format!("run:{}", run.id),
        detail: json!({
            "stack": run.stack,
            "kind": run.kind.as_str(),
            "trigger": run.trigger.as_str(),
        }),
    }
}

pub(super) fn fire(tx: &Transaction<'_>, f: &DriftFire) -> Result<DriftFired> {
    let current = schedule_state(tx, &f.org, &f.stack)?;
    if current.as_ref().map(|c| millis(c.next_at)) != f.expected_next.map(millis) {
        return Ok(DriftFired::Raced);
    }
    let now = millis(f.now);
    let Some(run) = &f.run else {
        // Arming: a new schedule (or changed settings) starts counting from `since`.
        let since = millis(f.since.unwrap_or(f.now));
        tx.prepare_cached(
            "INSERT INTO drift_schedules (org_id, stack_id, schedule, timezone, since, next_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (org_id, stack_id) DO UPDATE SET
                schedule = excluded.schedule, timezone = excluded.timezone,
                since = excluded.since, next_at = excluded.next_at",
        )?
        .execute(params![
            f.org,
            f.stack,
            f.schedule,
            f.timezone,
            since,
            millis(f.next_at)
        ])?;
        refresh_stale_at(tx, &f.org, &f.stack)?;
        return Ok(DriftFired::Armed);
    };
    let (outcome, started, note) = match open_drift_run(tx, &f.org, &f.stack)? {
        Some(open_run) => {
            let note = format!("skipped: drift run {open_run} is still open");
            (DriftFired::Skipped { open_run }, None, Some(note))
        }
        None => {
            let created = insert_run(tx, run, None)?;
            append_audit(tx, &run_audit(run))?;
            let id = created.id.clone();
            (
                DriftFired::Started(Box::new(created)),
                Some(id),
                f.note.clone(),
            )
        }
    };
    tx.prepare_cached(
        "UPDATE drift_schedules SET next_at = ?3, last_fire_at = ?4, last_fire_run = ?5,
            last_fire_note = ?6
         WHERE org_id = ?1 AND stack_id = ?2",
    )?
    .execute(params![
        f.org,
        f.stack,
        millis(f.next_at),
        now,
        started,
        note
    ])?;
    Ok(outcome)
}

pub(super) fn start_check(tx: &Transaction<'_>, run: &NewRun, audit: &Audit) -> Result<RunRecord> {
    if let Some(open) = open_drift_run(tx, &run.org, &run.stack)? {
        return Err(StoreError::HasOpenRuns {
            stack: run.stack.clone(),
            runs: vec![open],
        });
    }
    let created = insert_run(tx, run, None)?;
    append_audit(tx, audit)?;
    Ok(created)
}

pub(super) fn unsettled(conn: &Connection, limit: u32) -> Result<Vec<RunRecord>> {
    query_runs(
        conn,
        &format!(
            "SELECT {RUN_COLUMNS} FROM runs r WHERE r.kind = 'drift'
               AND r.state IN {TERMINAL_STATES}
               AND NOT EXISTS (SELECT 1 FROM drift_checks c WHERE c.run_id = r.id)
             ORDER BY r.updated_at, r.id LIMIT ?1"
        ),
        params![limit],
    )
}

pub(super) fn settle(
    tx: &Transaction<'_>,
    run: &str,
    result: DriftResult,
    reconcile: Option<&NewRun>,
) -> Result<Option<DriftCheckRecord>> {
    if result == DriftResult::Pending {
        return Err(StoreError::Backend(format!(
            "drift run {run} has not ended: nothing to settle"
        )));
    }
    if exists(
        tx,
        "SELECT 1 FROM drift_checks WHERE run_id = ?1",
        params![run],
    )? {
        return Ok(None);
    }
    let ended = load_run(tx, run)?.ok_or_else(|| StoreError::NotFound(format!("run {run:?}")))?;
    let reconcile_run = match reconcile {
        Some(r) => {
            let created = insert_run(tx, r, None)?;
            let mut audit = run_audit(r);
            audit.actor = format!("run:{run}");
            audit.detail["reconciles"] = json!(run);
            append_audit(tx, &audit)?;
            Some(created.id)
        }
        None => None,
    };
    tx.prepare_cached(&format!(
        "INSERT INTO drift_checks ({CHECK_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
    ))?
    .execute(params![
        run,
        ended.org,
        ended.stack,
        result.as_str(),
        millis(ended.updated_at),
        reconcile_run
    ])?;
    refresh_stale_at(tx, &ended.org, &ended.stack)?;
    Ok(Some(DriftCheckRecord {
        run: run.to_string(),
        org: ended.org,
        stack: ended.stack,
        result,
        checked_at: ended.updated_at,
        reconcile_run,
    }))
}

pub(super) fn check(conn: &Connection, run: &str) -> Result<Option<DriftCheckRecord>> {
    Ok(query_decoded(
        conn,
        &format!(
            "SELECT {CHECK_COLUMNS} FROM drift_checks WHERE run_id = ?1 OR reconcile_run = ?1
             LIMIT 1"
        ),
        params![run],
        check_row,
        check_record,
    )?
    .pop())
}
