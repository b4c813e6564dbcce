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
        let counts = counts(tx)?;
        let metrics = StoreMetrics {
            runs: metrics_runs(&counts),
            late_writes: metrics_late_writes(tx)?,
            window: METRICS_WINDOW,
            window_runs: METRICS_WINDOW_RUNS,
            queue_waits_ms: metrics_queue_waits(tx, since)?,
            phase_durations_ms: metrics_phase_durations(tx, since)?,
            runners: metrics_runners(tx)?,
            busy_runners: runners::busy(tx)?,
            locks_held: metrics_locks_held(tx)?,
            locks: metrics_locks(tx)?,
            stack_series: METRICS_STACK_SERIES,
            trigger_decisions: metrics_trigger_decisions(&counts),
        };
        Ok(metrics)
    })
}

/// At most this many stacks are named by a per-stack series (the oldest held locks); the
/// per-org counts cover every one.
const METRICS_STACK_SERIES: u32 = 1000;

/// How far back `/metrics` timings reach (runs created within it).
const METRICS_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// At most this many of the window's newest runs are timed (and as many of those still
/// waiting for a lease): a scrape reads a bounded number of runs and phases however busy
/// the store is.
const METRICS_WINDOW_RUNS: u32 = 1000;

/// The window's newest runs, at most [`METRICS_WINDOW_RUNS`] of each `needs_lease` value,
/// each read backwards along the `runs_dispatch (needs_lease, created_at)` index from the
/// newest (`?1`: the window's start). The limit is written into the statement, not bound:
/// a planner that knows it joins a thousand runs looks their phases up by index instead of
/// reading every phase.
fn window_runs() -> String {
    let n = METRICS_WINDOW_RUNS;
    format!(
        "(SELECT id, created_at FROM (
            SELECT id, created_at FROM runs WHERE needs_lease = 0 AND created_at >= ?1
            ORDER BY created_at DESC LIMIT {n}) newest_leased
        UNION ALL SELECT id, created_at FROM (
            SELECT id, created_at FROM runs WHERE needs_lease = 1 AND created_at >= ?1
            ORDER BY created_at DESC LIMIT {n}) newest_waiting) r"
    )
}

/// The counts the store's triggers keep in `metric_counts` (migration 0026), by metric:
/// a few rows per metric, folded by [`fold_counts`].
fn counts(c: &Connection) -> Result<BTreeMap<String, i64>> {
    let mut stmt = c.prepare_cached(
        "SELECT metric, CAST(SUM(n) AS BIGINT) FROM metric_counts GROUP BY metric",
    )?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<db::Result<_>>()?)
}

/// Runs by kind and state (those with any).
fn metrics_runs(counts: &BTreeMap<String, i64>) -> BTreeMap<(String, String), i64> {
    counts
        .iter()
        .filter(|(_, n)| **n != 0)
        .filter_map(|(metric, n)| {
            let (kind, state) = metric.strip_prefix("runs:")?.split_once(':')?;
            Some(((kind.to_string(), state.to_string()), *n))
        })
        .collect()
}

/// Folds the deltas present now into one row per metric (a metric at zero keeps none).
/// A delta a concurrent transaction commits later is not in this transaction's snapshot:
/// it is neither deleted nor counted here, and the next fold takes it.
pub(super) fn fold_counts(tx: &Transaction<'_>) -> Result<usize> {
    let last: Option<i64> = tx
        .prepare_cached("SELECT MAX(id) FROM metric_counts")?
        .query_row([], |r| r.get(0))?;
    let Some(last) = last else { return Ok(0) };
    let sums: Vec<(String, i64)> = tx
        .prepare_cached(
            "SELECT metric, CAST(SUM(n) AS BIGINT) FROM metric_counts WHERE id <= ?1
             GROUP BY metric",
        )?
        .query_map(params![last], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<db::Result<_>>()?;
    let folded = tx
        .prepare_cached("DELETE FROM metric_counts WHERE id <= ?1")?
        .execute(params![last])?;
    let mut insert = tx.prepare_cached("INSERT INTO metric_counts (metric, n) VALUES (?1, ?2)")?;
    for (metric, n) in sums.iter().filter(|(_, n)| *n != 0) {
        insert.execute(params![metric, n])?;
    }
    Ok(folded)
}

fn metrics_late_writes(c: &Connection) -> Result<i64> {
    let mut stmt = c.prepare_cached("SELECT COUNT(*) FROM state_versions WHERE late_write = 1")?;
    Ok(stmt.query_row([], |r| r.get(0))?)
}

/// Creation to first lease (the first `preparing` stint), of the window's newest leased
/// runs. Each run's first stint is looked up by the run (a correlated subquery): joined
/// instead, PostgreSQL may hash every `preparing` stint of the store to find these.
fn metrics_queue_waits(c: &Connection, since: i64) -> Result<Vec<i64>> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT (SELECT MIN(p.started_at) FROM run_phases p
                 WHERE p.run_id = r.id AND p.state = 'preparing') - r.created_at
         FROM {window}",
        window = window_runs()
    ))?;
    // A run never leased has no `preparing` stint: no wait yet.
    let rows = stmt.query_map(params![since], |r| r.get::<_, Option<i64>>(0))?;
    let mut out = Vec::new();
    for wait in rows {
        out.extend(wait?.map(|ms| ms.max(0)));
    }
    Ok(out)
}

/// Every ended stint of the window's newest runs, by the state it was in.
fn metrics_phase_durations(c: &Connection, since: i64) -> Result<BTreeMap<String, Vec<i64>>> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT p.state, {GREATEST}(0, p.ended_at - p.started_at)
         FROM {window} JOIN run_phases p ON p.run_id = r.id
         WHERE p.ended_at IS NOT NULL",
        window = window_runs()
    ))?;
    let rows = stmt.query_map(params![since], |r| {
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

/// Held state locks per org, counted in the held locks' own index.
fn metrics_locks_held(c: &Connection) -> Result<BTreeMap<String, i64>> {
    let mut stmt = c.prepare_cached(
        "SELECT org_id, COUNT(*) FROM state_heads WHERE lock_id IS NOT NULL GROUP BY org_id",
    )?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<db::Result<_>>()?)
}

/// The [`METRICS_STACK_SERIES`] oldest held locks, from the `state_heads_lock_age` index.
fn metrics_locks(c: &Connection) -> Result<Vec<HeldLock>> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT org_id, stack_id, lock_acquired_at FROM state_heads
         WHERE lock_id IS NOT NULL
         ORDER BY lock_acquired_at, org_id, stack_id LIMIT {METRICS_STACK_SERIES}"
    ))?;
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
/// Counted when made: a stack deleted later does not take its decisions back.
fn metrics_trigger_decisions(counts: &BTreeMap<String, i64>) -> DecisionCounts {
    let of = |outcome: &str| {
        counts
            .get(&format!("decisions:{outcome}"))
            .copied()
            .unwrap_or(0)
    };
    DecisionCounts {
        triggered: of("triggered"),
        ignored: of("ignored"),
        duplicate: of("duplicate"),
    }
}
