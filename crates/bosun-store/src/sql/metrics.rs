//! What `/metrics` reads from the store: every figure a bounded query, all of them from one
//! read snapshot.

use super::runners::{runner_record, runner_row, RUNNER_COLUMNS};
use super::*;
use std::collections::HashMap;

/// Everything `/metrics` reads, from the same snapshot.
pub(super) fn read(c: &Connection) -> Result<StoreMetrics> {
    // Every figure from the same snapshot.
    db::snapshot(c, |tx| {
        let since = millis(Utc::now()) - METRICS_WINDOW.as_millis() as i64;
        let counts = counts(tx)?;
        let timings = metrics_window_timings(tx, since)?;
        let metrics = StoreMetrics {
            runs: metrics_runs(&counts),
            late_writes: metrics_late_writes(tx)?,
            window: METRICS_WINDOW,
            window_runs: METRICS_WINDOW_RUNS,
            queue_waits_ms: timings.queue_waits_ms,
            phase_durations_ms: timings.phase_durations_ms,
            runners: metrics_runners(tx)?,
            busy_runners: runners::busy(tx)?,
            locks_held: by_org(&counts, LOCKS),
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

/// A per-org count the triggers of migration 0035 keep: metrics named `prefix` then the
/// org, all sorting before `end`.
pub(super) struct PerOrg {
    prefix: &'static str,
    end: &'static str,
}

/// Held state locks.
pub(super) const LOCKS: PerOrg = PerOrg {
    prefix: "locks:",
    end: "locks;",
};

/// Stacks whose stale-check alert was raised for the current episode.
pub(super) const DRIFT_STALE: PerOrg = PerOrg {
    prefix: "drift_stale:",
    end: "drift_stale;",
};

/// One per-org count read alone, through the `metric_counts_metric` index: org → count,
/// orgs at zero left out.
pub(super) fn counts_by_org(c: &Connection, of: PerOrg) -> Result<BTreeMap<String, i64>> {
    let mut stmt = c.prepare_cached(
        "SELECT metric, CAST(SUM(n) AS BIGINT) FROM metric_counts
         WHERE metric >= ?1 AND metric < ?2 GROUP BY metric",
    )?;
    let rows = stmt.query_map(params![of.prefix, of.end], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(by_org(&rows.collect::<db::Result<_>>()?, of))
}

/// One org's figure of a per-org count, read through the `metric_counts_metric` index.
pub(super) fn count_of(c: &Connection, of: PerOrg, org: &str) -> Result<i64> {
    let mut stmt = c.prepare_cached(
        "SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) FROM metric_counts WHERE metric = ?1",
    )?;
    Ok(stmt.query_row(params![format!("{}{org}", of.prefix)], |r| r.get(0))?)
}

/// Org → count of one per-org metric (orgs at zero left out).
fn by_org(counts: &BTreeMap<String, i64>, of: PerOrg) -> BTreeMap<String, i64> {
    counts
        .iter()
        .filter(|(_, n)| **n != 0)
        .filter_map(|(metric, n)| Some((metric.strip_prefix(of.prefix)?.to_string(), *n)))
        .collect()
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

/// The window's timings in one pass over its runs' phases: creation to first lease (the
/// first `preparing` stint) of each run leased at least once, and every ended stint by
/// the state it was in. One walk of the `run_phases_run` index per run: the two figures
/// used to read the same phases twice.
fn metrics_window_timings(c: &Connection, since: i64) -> Result<WindowTimings> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT r.id, r.created_at, p.state, p.started_at, p.ended_at
         FROM {window} JOIN run_phases p ON p.run_id = r.id",
        window = window_runs()
    ))?;
    let rows = stmt.query_map(params![since], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, i64>(3)?,
            r.get::<_, Option<i64>>(4)?,
        ))
    })?;
    let mut out = WindowTimings::default();
    // Each run's creation and first lease so far.
    let mut first_lease: HashMap<String, (i64, Option<i64>)> = HashMap::new();
    for row in rows {
        let (run, created, state, started, ended) = row?;
        let (_, first) = first_lease.entry(run).or_insert((created, None));
        if state == "preparing" && first.is_none_or(|f| started < f) {
            *first = Some(started);
        }
        if let Some(ended) = ended {
            out.phase_durations_ms
                .entry(state)
                .or_default()
                .push((ended - started).max(0));
        }
    }
    // A run never leased has no `preparing` stint: no wait yet.
    out.queue_waits_ms = first_lease
        .into_values()
        .filter_map(|(created, first)| first.map(|f| (f - created).max(0)))
        .collect();
    Ok(out)
}

/// What [`metrics_window_timings`] gathers.
#[derive(Default)]
struct WindowTimings {
    queue_waits_ms: Vec<i64>,
    phase_durations_ms: BTreeMap<String, Vec<i64>>,
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
