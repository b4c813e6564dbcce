//! Retention: the rows the retention duty deletes to keep a long-lived store bounded —
//! old state versions of each stack — a batch per write transaction.

use super::*;

/// The stacks with more than `keep` state versions, the oldest created before `before`:
/// the only ones a prune can find anything in.
pub(super) fn stacks_with_old_versions(
    c: &Connection,
    keep: u32,
    before: i64,
) -> Result<Vec<(String, String)>> {
    let mut stmt = c.prepare_cached(
        "SELECT org_id, stack_id FROM state_versions
         GROUP BY org_id, stack_id
         HAVING COUNT(*) > ?1 AND MIN(created_at) < ?2
         ORDER BY org_id, stack_id",
    )?;
    let rows = stmt.query_map(params![keep, before], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let mut out = Vec::new();
    for row in rows {
        out.push(row?);
    }
    Ok(out)
}

/// Deletes up to `batch` of one stack's versions that retention lets go (see
/// [`RetentionStore::prune_state_versions`]), oldest first; how many went.
pub(super) fn prune_state_versions(
    tx: &Transaction<'_>,
    org: &str,
    stack: &str,
    keep: u32,
    before: i64,
    batch: u32,
) -> Result<u64> {
    // A run executing now compares, when it ends, the versions it wrote with the one
    // before them: the stack waits for the next pass.
    if exists(
        tx,
        "SELECT 1 FROM runs WHERE org_id = ?1 AND stack_id = ?2 AND leased = 1",
        params![org, stack],
    )? {
        return Ok(0);
    }
    // The oldest of the newest `keep` versions: everything from it up stays.
    let kept_from: Option<i64> = tx
        .prepare_cached(
            "SELECT version FROM state_versions WHERE org_id = ?1 AND stack_id = ?2
             ORDER BY version DESC LIMIT 1 OFFSET ?3",
        )?
        .query_row(params![org, stack, keep.max(1) - 1], |r| r.get(0))
        .optional()?;
    let Some(kept_from) = kept_from else {
        return Ok(0);
    };
    let n = tx
        .prepare_cached(
            "DELETE FROM state_versions WHERE org_id = ?1 AND stack_id = ?2 AND version IN (
                SELECT v.version FROM state_versions v
                WHERE v.org_id = ?1 AND v.stack_id = ?2
                  AND v.version < ?3 AND v.created_at < ?4
                  AND v.late_write = 0 AND v.recovery_reason IS NULL
                  AND NOT EXISTS (SELECT 1 FROM state_heads h
                                  WHERE h.org_id = ?1 AND h.stack_id = ?2
                                    AND h.current_version = v.version)
                  AND NOT EXISTS (SELECT 1 FROM state_version_refs r
                                  WHERE r.org_id = ?1 AND r.stack_id = ?2
                                    AND r.version = v.version)
                ORDER BY v.version LIMIT ?5)",
        )?
        .execute(params![org, stack, kept_from, before, batch])?;
    Ok(n as u64)
}
