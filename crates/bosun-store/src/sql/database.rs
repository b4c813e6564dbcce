//! What the database says about itself: the schema version it is at, and that it answers
//! at all (`/readyz`).

use super::*;

pub(super) fn schema_version(c: &Connection) -> Result<i64> {
    let v: Option<i64> = c.query_row("SELECT MAX(version) FROM bosun_schema", [], |r| r.get(0))?;
    Ok(v.unwrap_or(0))
}

pub(super) fn ping(c: &Connection) -> Result<()> {
    Ok(c.query_row("SELECT 1", [], |_| Ok(()))?)
}
