//! Runners: registration, liveness and draining.

use super::audit::append_audit;
use super::*;

/// Raw runner columns in `RUNNER_COLUMNS` order.
pub(super) type RunnerRow = (
    String,
    Option<String>,
    String,
    String,
    String,
    bool,
    i64,
    i64,
    Option<String>,
);

/// A row decodes into a tuple of its columns, in `SELECT` order.
pub(super) fn runner_row(r: &Row<'_>) -> db::Result<RunnerRow> {
    RunnerRow::try_from(r)
}

pub(super) fn runner_record(r: RunnerRow) -> Result<RunnerRecord> {
    Ok(RunnerRecord {
        id: r.0,
        org: r.1,
        pool: r.2,
        name: r.3,
        version: r.4,
        drained: r.5,
        last_seen: from_millis(r.6)?,
        created_at: from_millis(r.7)?,
        egress: r
            .8
            .map(|e| e.parse().map_err(|e| corrupt("egress", e)))
            .transpose()?,
    })
}

pub(super) const RUNNER_COLUMNS: &str =
    "id, org_id, pool, name, version, drained, last_seen, created_at, egress";

pub(super) fn register(tx: &Transaction<'_>, runner: &RunnerRecord) -> Result<RunnerRecord> {
    tx.prepare_cached(&format!(
        "INSERT INTO runners ({RUNNER_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6, ?6, ?7)"
    ))?
    .execute(params![
        runner.id,
        runner.org,
        runner.pool,
        runner.name,
        runner.version,
        millis(Utc::now()),
        runner.egress.map(|e| e.as_str()),
    ])?;
    let row = tx
        .prepare_cached(&format!(
            "SELECT {RUNNER_COLUMNS} FROM runners WHERE id = ?1"
        ))?
        .query_row([&runner.id], runner_row)?;
    runner_record(row)
}

pub(super) fn get(c: &Connection, id: &str) -> Result<Option<RunnerRecord>> {
    c.prepare_cached(&format!(
        "SELECT {RUNNER_COLUMNS} FROM runners WHERE id = ?1"
    ))?
    .query_row([&id], runner_row)
    .optional()?
    .map(runner_record)
    .transpose()
}

pub(super) fn touch(tx: &Transaction<'_>, id: &str) -> Result<()> {
    tx.prepare_cached("UPDATE runners SET last_seen = ?2 WHERE id = ?1")?
        .execute(params![id, millis(Utc::now())])?;
    Ok(())
}

pub(super) fn list(
    c: &Connection,
    org: &str,
    after: Option<&KeyCursor>,
    limit: u32,
) -> Result<Vec<RunnerRecord>> {
    let (key, id) = after.map_or((i64::MIN, ""), |a| (a.key, a.id.as_str()));
    let mut stmt = c.prepare_cached(&format!(
        "SELECT {RUNNER_COLUMNS} FROM runners
         WHERE (org_id IS NULL OR org_id = ?1)
           AND (created_at > ?2 OR (created_at = ?2 AND id > ?3))
         ORDER BY created_at, id LIMIT ?4"
    ))?;
    let rows = stmt.query_map(params![org, key, id, limit], runner_row)?;
    let mut out = Vec::new();
    for row in rows {
        out.push(runner_record(row?)?);
    }
    Ok(out)
}

pub(super) fn drain(tx: &Transaction<'_>, id: &str, audit: &Audit) -> Result<bool> {
    let n = tx
        .prepare_cached("UPDATE runners SET drained = 1 WHERE id = ?1 AND drained = 0")?
        .execute([&id])?;
    if n > 0 {
        append_audit(tx, audit)?;
    }
    Ok(n > 0)
}

/// The runners holding a lease on a stack run or a plan run.
pub(super) fn busy(c: &Connection) -> Result<std::collections::BTreeSet<String>> {
    let mut stmt = c.prepare_cached(
        "SELECT runner_id FROM runs WHERE leased = 1 AND runner_id IS NOT NULL
         UNION SELECT runner_id FROM plan_runs WHERE leased = 1 AND runner_id IS NOT NULL",
    )?;
    let rows = stmt.query_map([], |r| r.get(0))?;
    Ok(rows.collect::<db::Result<_>>()?)
}
