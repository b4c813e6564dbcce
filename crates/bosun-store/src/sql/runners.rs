//! Runners: registration, liveness and draining.

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
    })
}

pub(super) const RUNNER_COLUMNS: &str =
    "id, org_id, pool, name, version, drained, last_seen, created_at";
