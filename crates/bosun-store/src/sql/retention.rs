//! Retention: the rows the retention duty deletes to keep a long-lived store bounded —
//! old state versions of each stack, the logs and plan details of old finished runs — a
//! batch per write transaction. (Compressing ended runs' logs is `logs::pack`.)

use super::logs::{self, LogOf};
use super::*;

/// The stacks a prune can delete something of: those that have written more than `keep`
/// state versions (their head's version number, versions being numbered 1, 2, 3… per
/// stack, found in the `state_heads_versions` index rather than by counting every version
/// of the store) and still hold a version older than `before`, past the newest `keep`, and
/// not kept for a reason of its own (a late or recovered write, a run's input). A stack
/// pruned before is found again only once it has something new to let go, so a pass does
/// not open a write transaction per stack that has nothing. (Versions deleted from the
/// middle make this a superset: the prune itself applies the exact rule.)
pub(super) fn stacks_with_old_versions(
    c: &Connection,
    keep: u32,
    before: i64,
) -> Result<Vec<(String, String)>> {
    let mut stmt = c.prepare_cached(
        "SELECT h.org_id, h.stack_id FROM state_heads h
         WHERE h.current_version > ?1
           AND EXISTS (SELECT 1 FROM state_versions v
                       WHERE v.org_id = h.org_id AND v.stack_id = h.stack_id
                         AND v.version <= h.current_version - ?1 AND v.created_at < ?2
                         AND v.late_write = 0 AND v.recovery_reason IS NULL
                         AND NOT EXISTS (SELECT 1 FROM state_version_refs r
                                         WHERE r.org_id = v.org_id AND r.stack_id = v.stack_id
                                           AND r.version = v.version))",
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

/// Summarises up to `batch` stack runs that ended before `ended_before` (see
/// [`RetentionStore::summarise_runs`]), oldest first; how many.
pub(super) fn summarise_runs(tx: &Transaction<'_>, ended_before: i64, batch: u32) -> Result<u64> {
    // Ended (so no approval is pending: a gated run waits unconfirmed), not the latest of
    // its stack, not the writer of its stack's current version, holding no run that
    // still waits for its outcome.
    let ids: Vec<(String, Option<String>)> = tx
        .prepare_cached(&format!(
            "SELECT r.id, r.plan_summary FROM runs r
             WHERE r.summarised_at IS NULL AND r.updated_at < ?1
               AND r.state IN {TERMINAL_STATES}
               AND EXISTS (SELECT 1 FROM runs n
                           WHERE n.org_id = r.org_id AND n.stack_id = r.stack_id
                             AND (n.created_at > r.created_at
                                  OR (n.created_at = r.created_at AND n.id > r.id)))
               AND NOT EXISTS (SELECT 1 FROM state_heads h
                               JOIN state_versions v ON v.org_id = h.org_id
                                    AND v.stack_id = h.stack_id
                                    AND v.version = h.current_version
                               WHERE h.org_id = r.org_id AND h.stack_id = r.stack_id
                                 AND v.writer_kind = 'run' AND v.writer_id = r.id)
               AND NOT EXISTS (SELECT 1 FROM run_holds h
                               WHERE h.upstream_run_id = r.id AND h.outcome IS NULL)
             ORDER BY r.updated_at, r.id LIMIT ?2"
        ))?
        .query_map(params![ended_before, batch], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<db::Result<_>>()?;
    let now = millis(Utc::now());
    for (id, summary) in &ids {
        logs::delete(tx, LogOf::StackRun, id)?;
        tx.prepare_cached("DELETE FROM run_plans WHERE run_id = ?1")?
            .execute([id])?;
        tx.prepare_cached("DELETE FROM run_plan_json WHERE run_id = ?1")?
            .execute([id])?;
        tx.prepare_cached("DELETE FROM state_version_refs WHERE run_id = ?1")?
            .execute([id])?;
        tx.prepare_cached(
            "UPDATE runs SET summarised_at = ?2, plan_summary = ?3, consumed = NULL
             WHERE id = ?1",
        )?
        .execute(params![id, now, summary.as_deref().map(summary_counts)])?;
    }
    Ok(ids.len() as u64)
}

/// Summarises up to `batch` plan runs that ended before `ended_before` (see
/// [`RetentionStore::summarise_plan_runs`]), oldest first; how many.
pub(super) fn summarise_plan_runs(
    tx: &Transaction<'_>,
    ended_before: i64,
    batch: u32,
) -> Result<u64> {
    // Ended, not the latest run of its plan, not the preview of a run still waiting for
    // its decision.
    let ids: Vec<String> = tx
        .prepare_cached(
            "SELECT r.id FROM plan_runs r
             WHERE r.summarised_at IS NULL AND r.ended_at < ?1
               AND EXISTS (SELECT 1 FROM plan_runs n
                           WHERE n.org_id = r.org_id AND n.plan = r.plan
                             AND (n.created_at > r.created_at
                                  OR (n.created_at = r.created_at AND n.id > r.id)))
               AND NOT EXISTS (SELECT 1 FROM plan_runs p
                               WHERE p.id = r.preview_of AND p.ended_at IS NULL)
             ORDER BY r.ended_at, r.id LIMIT ?2",
        )?
        .query_map(params![ended_before, batch], |r| r.get(0))?
        .collect::<db::Result<_>>()?;
    let now = millis(Utc::now());
    for id in &ids {
        logs::delete(tx, LogOf::PlanRun, id)?;
        tx.prepare_cached(
            "UPDATE plan_run_results SET stdout = '', stderr = '', diff = NULL
             WHERE run_id = ?1",
        )?
        .execute([id])?;
        tx.prepare_cached("UPDATE plan_runs SET summarised_at = ?2 WHERE id = ?1")?
            .execute(params![id, now])?;
    }
    Ok(ids.len() as u64)
}

/// A plan summary reduced to what a summarised run keeps: whether it changed anything and
/// its counts, without the resources and outputs it named.
fn summary_counts(summary: &str) -> String {
    let full: Value = serde_json::from_str(summary).unwrap_or(Value::Null);
    json!({
        "has_changes": full["has_changes"].as_bool().unwrap_or(false),
        "add": full["add"].as_u64().unwrap_or(0),
        "change": full["change"].as_u64().unwrap_or(0),
        "destroy": full["destroy"].as_u64().unwrap_or(0),
        "resource_changes": [],
        "output_changes": {},
    })
    .to_string()
}

/// Deletes up to `batch` VCS deliveries received before `before` (see
/// [`RetentionStore::prune_deliveries`]), oldest first: how many deliveries went (their
/// redeliveries counted), and whether the batch was full.
pub(super) fn prune_deliveries(
    tx: &Transaction<'_>,
    before: i64,
    batch: u32,
) -> Result<(u64, bool)> {
    let ids: Vec<i64> = tx
        .prepare_cached(
            "SELECT id FROM deliveries WHERE received_at < ?1 ORDER BY received_at, id LIMIT ?2",
        )?
        .query_map(params![before, batch], |r| r.get(0))?
        .collect::<db::Result<_>>()?;
    let mut deleted = 0;
    // A redelivery names the delivery it repeats: it goes first, then the delivery; their
    // trigger decisions go with them (`ON DELETE CASCADE`).
    let mut repeats = tx.prepare_cached("DELETE FROM deliveries WHERE duplicate_of = ?1")?;
    let mut delivery = tx.prepare_cached("DELETE FROM deliveries WHERE id = ?1")?;
    for id in &ids {
        deleted += repeats.execute(params![id])?;
        deleted += delivery.execute(params![id])?;
    }
    Ok((deleted as u64, ids.len() == batch as usize))
}
