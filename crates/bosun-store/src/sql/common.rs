//! The helpers every domain's SQL uses: timestamps as milliseconds, the terminal run
//! states as an SQL list, rows decoded into records, existence checks, and the errors
//! they raise.

use super::*;

/// The terminal run states (`RunState::is_terminal`) as an SQL list, for `state IN …`.
pub(super) const TERMINAL_STATES: &str =
    "('finished', 'failed', 'discarded', 'canceled', 'interrupted', 'force_failed', 'skipped')";

pub(crate) fn closed() -> StoreError {
    StoreError::Backend("the store is closed".into())
}

pub(super) fn millis(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

pub(super) fn from_millis(ms: i64) -> Result<DateTime<Utc>> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .ok_or_else(|| StoreError::Corrupt(format!("timestamp {ms} out of range")))
}

pub(super) fn opt_from_millis(ms: Option<i64>) -> Result<Option<DateTime<Utc>>> {
    ms.map(from_millis).transpose()
}

pub(super) fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}"))
}

/// Runs a query and decodes each row in two steps: the raw columns (`row`), then the
/// validated record (`record`), whose errors name the corrupt field.
pub(super) fn query_decoded<R, T>(
    conn: &Connection,
    sql: &str,
    args: &[&dyn db::ToSql],
    row: fn(&Row<'_>) -> db::Result<R>,
    record: fn(R) -> Result<T>,
) -> Result<Vec<T>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map(args, row)?;
    let mut out = Vec::new();
    for r in rows {
        out.push(record(r?)?);
    }
    Ok(out)
}

pub(crate) fn exists(conn: &Connection, sql: &str, args: &[&dyn db::ToSql]) -> Result<bool> {
    Ok(conn
        .prepare_cached(sql)?
        .query_row(args, |_| Ok(()))
        .optional()?
        .is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_states_sql_matches_the_rules() {
        let want: Vec<String> = RunState::ALL
            .into_iter()
            .filter(|s| s.is_terminal())
            .map(|s| format!("'{}'", s.as_str()))
            .collect();
        assert_eq!(TERMINAL_STATES, format!("({})", want.join(", ")));
    }
}
