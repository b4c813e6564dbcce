//! What `/metrics` reads from the store: every figure a bounded query, all of them from one
//! read snapshot.

use super::db::GREATEST;
use super::runners::{runner_record, runner_row, RUNNER_COLUMNS};
use super::*;

/// Everything `/metrics` reads, from the same snapshot.
pub(super) fn read(c: &Connection) -> Result<StoreMetrics> {
    // Every figure from the same snapshot.
    db::snapshot(c, |tx| {
        let since = millis(Utc::now()) - METRICS_WINDOW.as_millis() as i64;
        let metrics = StoreMetrics {
            runs: metrics_runs(tx)?,
            late_writes: metrics_late_writes(tx)?,
            window: METRICS_WINDOW,
            queue_waits_ms: metrics_queue_waits(tx, since)?,
            phase_durations_ms: metrics_phase_durations(tx, since)?,
            runners: metrics_runners(tx)?,
            busy_runners: runners::busy(tx)?,
            locks: metrics_locks(tx)?,
            trigger_decisions: metrics_trigger_decisions(tx)?,
        };
        Ok(metrics)
    })
}

/// How far back `/metrics` timings reach (runs created within it).
const METRICS_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// The window's runs, found through the `runs_dispatch (needs_lease, created_at)` index:
/// `needs_lease IN (0, 1)` names every run and lets the database seek on `created_at`.
const METRICS_WINDOW_RUNS: &str = "r.needs_lease IN (0, 1) AND r.created_at >= ?1";

fn metrics_runs(c: &Connection) -> Result<BTreeMap<(String, String), i64>> {
    let mut stmt =
        c.prepare_cached("SELECT kind, state, COUNT(*) FROM runs GROUP BY kind, state")?;
    let rows = stmt.query_map([], |r| Ok(((r.get(0)?, r.get(1)?), r.get(2)?)))?;
    Ok(rows.collect::<db::Result<_>>()?)
}

fn metrics_late_writes(c: &Connection) -> Result<i64> {
    let mut stmt = c.prepare_cached("SELECT COUNT(*) FROM state_versions WHERE late_write = 1")?;
    Ok(stmt.query_row([], |r| r.get(0))?)
}

/// Creation to first lease (the first `preparing` stint), of the window's leased runs.
fn metrics_queue_waits(c: &Connection, since: i64) -> Result<Vec<i64>> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT {GREATEST}(0, MIN(p.started_at) - r.created_at)
         FROM runs r JOIN run_phases p ON p.run_id = r.id
         WHERE {METRICS_WINDOW_RUNS} AND p.state = 'preparing'
         GROUP BY r.id"
    ))?;
    let rows = stmt.query_map([since], |r| r.get(0))?;
    Ok(rows.collect::<db::Result<_>>()?)
}

/// Every ended stint of the window's runs, by the state it was in.
fn metrics_phase_durations(c: &Connection, since: i64) -> Result<BTreeMap<String, Vec<i64>>> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT p.state, {GREATEST}(0, p.ended_at - p.started_at)
         FROM runs r JOIN run_phases p ON p.run_id = r.id
         WHERE {METRICS_WINDOW_RUNS} AND p.ended_at IS NOT NULL"
    ))?;
    let rows = stmt.query_map([since], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
    })?;
    let mut out: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for row in rows {
        let (state, ms) = row?;
        out.entry(state).or_default().push(ms);
    }
    Ok(out)
}

fn metrics_runners(c: &Connection) -> Result<Vec<RunnerRecord>> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT {RUNNER_COLUMNS} FROM runners ORDER BY created_at, id"
    ))?;
    let rows = stmt.query_map([], runner_row)?;
    let mut out = Vec::new();
    for row in rows {
        out.push(runner_record(row?)?);
    }
    Ok(out)
}

fn metrics_locks(c: &Connection) -> Result<Vec<HeldLock>> {
    let mut stmt = c.prepare_cached(
        "SELECT org_id, stack_id, lock_acquired_at FROM state_heads
         WHERE lock_id IS NOT NULL ORDER BY org_id, stack_id",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, i64>(2)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (org, stack, at) = row?;
        out.push(HeldLock {
            org,
            stack,
            acquired_at: from_millis(at)?,
        });
    }
    Ok(out)
}

/// A decision on a repeated delivery is `duplicate`; otherwise it started a run or not.
fn metrics_trigger_decisions(c: &Connection) -> Result<DecisionCounts> {
    Ok(c.prepare_cached(
        "SELECT
            COALESCE(SUM(CASE WHEN d.duplicate_of IS NULL AND t.run_id IS NOT NULL
                THEN 1 ELSE 0 END), 0),
            COALESCE(SUM(CASE WHEN d.duplicate_of IS NULL AND t.run_id IS NULL
                THEN 1 ELSE 0 END), 0),
            COALESCE(SUM(CASE WHEN d.duplicate_of IS NOT NULL THEN 1 ELSE 0 END), 0)
         FROM trigger_decisions t JOIN deliveries d ON d.id = t.delivery_id",
    )?
    .query_row([], |r| {
        Ok(DecisionCounts {
            triggered: r.get(0)?,
            ignored: r.get(1)?,
            duplicate: r.get(2)?,
        })
    })?)
}
