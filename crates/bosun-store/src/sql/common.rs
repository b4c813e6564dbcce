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

/// A page of runs newest first (`created_at DESC, id DESC`) from `table`, of an org
/// (`?1`), within one `group` (`?2`: a stack's runs, a plan's) when `grouped`, after the
/// cursor `(?3 created_at, ?4 id)` when `after`, at most `?5`. Only the filters given are
/// conditions (`?N IS NULL` stands for the others): `(?N IS NULL OR column = ?N)` would hide
/// the `(org_id, group, created_at)` index, and one group's page would be read and sorted
/// from all of the org's runs.
pub(crate) fn newest_first_sql(
    columns: &str,
    table: &str,
    group: &str,
    grouped: bool,
    after: bool,
) -> String {
    let group = match grouped {
        true => format!("{group} = ?2"),
        false => "?2 IS NULL".into(),
    };
    let after = match after {
        true => "created_at <= ?3 AND (created_at < ?3 OR id < ?4)",
        false => "?3 IS NULL AND ?4 IS NULL",
    };
    format!(
        "SELECT {columns} FROM {table} WHERE org_id = ?1 AND {group} AND {after}
         ORDER BY created_at DESC, id DESC LIMIT ?5"
    )
}

/// A filter of a statement whose parameter `?n` may be NULL (not given): `cond` when it is
/// given, else `?n IS NULL` (true, and the parameter still bound). Each shape is its own
/// statement, so a given filter searches its index; `(?n IS NULL OR cond)` would make
/// every shape scan.
pub(crate) fn filter_if(given: bool, cond: &str, n: u8) -> String {
    match given {
        true => cond.to_string(),
        false => format!("?{n} IS NULL"),
    }
}

pub(crate) fn exists(conn: &Connection, sql: &str, args: &[&dyn db::ToSql]) -> Result<bool> {
    Ok(conn
        .prepare_cached(sql)?
        .query_row(args, |_| Ok(()))
        .optional()?
        .is_some())
}

/// A row this transaction just wrote could not be read back.
pub(crate) fn vanished(what: &str) -> StoreError {
    StoreError::Backend(format!("the {what} just written vanished"))
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
