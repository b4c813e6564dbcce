//! Terraform state: versions and their outputs, a stack's head (current version and lock),
//! and locking.

use super::audit::append_audit;
use super::*;

pub(super) const VERSION_COLUMNS: &str =
    "v.org_id, v.stack_id, v.version, v.serial, v.lineage, v.checksum,
    v.size, v.writer_kind, v.writer_id, v.token_id, v.created_at, v.late_write, v.forced,
    v.outputs, (h.current_version IS NOT DISTINCT FROM v.version), v.recovery_reason";

pub(super) type VersionRow = (
    String,
    String,
    i64,
    i64,
    String,
    String,
    i64,
    String,
    String,
    Option<String>,
    i64,
    bool,
    bool,
    String,
    bool,
    Option<String>,
);

/// A row decodes into a tuple of its columns, in `SELECT` order.
pub(super) fn version_row(r: &Row<'_>) -> db::Result<VersionRow> {
    VersionRow::try_from(r)
}

/// A state version's `outputs` column: name → value and sensitivity.
pub(super) fn decode_outputs(raw: &str) -> Result<BTreeMap<String, Output>> {
    let outputs: Value = serde_json::from_str(raw).map_err(|e| corrupt("outputs", e))?;
    Ok(outputs
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, o)| {
                    (
                        k.clone(),
                        Output {
                            value: o.get("value").cloned().unwrap_or(Value::Null),
                            sensitive: o.get("sensitive").and_then(Value::as_bool).unwrap_or(false),
                        },
                    )
                })
                .collect()
        })
        .unwrap_or_default())
}

pub(super) fn version_meta(v: VersionRow) -> Result<StateVersionMeta> {
    let outputs = decode_outputs(&v.13)?;
    Ok(StateVersionMeta {
        org: v.0,
        stack: v.1,
        version: v.2,
        serial: u64::try_from(v.3).map_err(|e| corrupt("serial", e))?,
        lineage: v.4,
        checksum: v.5,
        size: u64::try_from(v.6).map_err(|e| corrupt("size", e))?,
        writer: Writer::from_parts(&v.7, v.8).ok_or_else(|| corrupt("writer_kind", &v.7))?,
        token_id: v.9,
        created_at: from_millis(v.10)?,
        late_write: v.11,
        forced: v.12,
        current: v.14,
        outputs,
        recovery_reason: v.15,
    })
}

pub(super) fn read_version(
    conn: &Connection,
    org: &str,
    stack: &str,
    version: Option<i64>,
) -> Result<Option<(StateVersionMeta, Vec<u8>)>> {
    let sql = format!(
        "SELECT {VERSION_COLUMNS}, v.body FROM state_versions v
         LEFT JOIN state_heads h ON h.org_id = v.org_id AND h.stack_id = v.stack_id
         WHERE v.org_id = ?1 AND v.stack_id = ?2
           AND v.version = COALESCE(?3, h.current_version)"
    );
    let row = conn
        .prepare_cached(&sql)?
        .query_row(params![org, stack, version], |r| {
            Ok((version_row(r)?, r.get::<_, Vec<u8>>(16)?))
        })
        .optional()?;
    row.map(|(meta, body)| Ok((version_meta(meta)?, body)))
        .transpose()
}

/// A lock's columns of `state_heads`, read by [`lock_row`].
pub(super) const LOCK_COLUMNS: &str =
    "lock_id, lock_operation, lock_info, lock_who, lock_version, lock_created,
     lock_path, lock_holder_kind, lock_holder_id, lock_acquired_at";

type LockRow = (
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    i64,
);

/// The [`LOCK_COLUMNS`] starting at column `at`.
pub(super) fn lock_row(r: &Row<'_>, at: usize) -> db::Result<LockRow> {
    Ok((
        r.get(at)?,
        r.get(at + 1)?,
        r.get(at + 2)?,
        r.get(at + 3)?,
        r.get(at + 4)?,
        r.get(at + 5)?,
        r.get(at + 6)?,
        r.get(at + 7)?,
        r.get(at + 8)?,
        r.get(at + 9)?,
    ))
}

pub(super) fn lock_record(l: LockRow) -> Result<Lock> {
    Ok(Lock {
        id: l.0,
        operation: l.1,
        info: l.2,
        who: l.3,
        version: l.4,
        created: l.5,
        path: l.6,
        holder: Writer::from_parts(&l.7, l.8).ok_or_else(|| corrupt("lock_holder_kind", &l.7))?,
        acquired_at: from_millis(l.9)?,
    })
}

pub(super) fn read_lock(conn: &Connection, org: &str, stack: &str) -> Result<Option<Lock>> {
    let row = conn
        .prepare_cached(&format!(
            "SELECT {LOCK_COLUMNS}
             FROM state_heads WHERE org_id = ?1 AND stack_id = ?2 AND lock_id IS NOT NULL"
        ))?
        .query_row(params![org, stack], |r| lock_row(r, 0))
        .optional()?;
    row.map(lock_record).transpose()
}

pub(super) fn read_head(conn: &Connection, org: &str, stack: &str) -> Result<StateHead> {
    Ok(StateHead {
        current: read_version(conn, org, stack, None)?.map(|(m, _)| m),
        lock: read_lock(conn, org, stack)?,
    })
}

pub(super) fn ensure_stack(tx: &Transaction<'_>, org: &str, stack: &str) -> Result<()> {
    if !exists(
        tx,
        "SELECT 1 FROM stacks WHERE org_id = ?1 AND id = ?2",
        params![org, stack],
    )? {
        return Err(StoreError::NotFound(format!(
            "stack {stack:?} in org {org:?}"
        )));
    }
    tx.prepare_cached("INSERT OR IGNORE INTO state_heads (org_id, stack_id) VALUES (?1, ?2)")?
        .execute(params![org, stack])?;
    Ok(())
}

pub(super) fn outputs_json(doc: &StateDoc) -> String {
    let map: serde_json::Map<String, Value> = doc
        .outputs
        .iter()
        .map(|(k, o)| {
            (
                k.clone(),
                json!({"value": o.value, "sensitive": o.sensitive}),
            )
        })
        .collect();
    Value::Object(map).to_string()
}

pub(super) fn sha256_hex(body: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(body))
}

pub(super) fn clear_lock(tx: &Transaction<'_>, org: &str, stack: &str) -> Result<()> {
    tx.prepare_cached(
        "UPDATE state_heads SET lock_id = NULL, lock_operation = NULL,
            lock_info = NULL, lock_who = NULL, lock_version = NULL,
            lock_created = NULL, lock_path = NULL, lock_holder_kind = NULL,
            lock_holder_id = NULL, lock_acquired_at = NULL
         WHERE org_id = ?1 AND stack_id = ?2",
    )?
    .execute(params![org, stack])?;
    Ok(())
}

pub(super) fn lock_json(l: &Lock) -> Value {
    json!({
        "ID": l.id, "Operation": l.operation, "Info": l.info, "Who": l.who,
        "Version": l.version, "Created": l.created, "Path": l.path,
    })
}

pub(super) fn locks_between(
    c: &Connection,
    org: &str,
    first: &str,
    last: &str,
) -> Result<Vec<(String, bosun_core::state::Lock)>> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT stack_id, {LOCK_COLUMNS} FROM state_heads
         WHERE org_id = ?1 AND stack_id >= ?2 AND stack_id <= ?3
           AND lock_id IS NOT NULL
         ORDER BY stack_id"
    ))?;
    let rows = stmt.query_map(params![org, first, last], |r| {
        Ok((r.get::<_, String>(0)?, lock_row(r, 1)?))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (stack, lock) = row?;
        out.push((stack, lock_record(lock)?));
    }
    Ok(out)
}

pub(super) fn list_versions(
    c: &Connection,
    org: &str,
    stack: &str,
    before: Option<i64>,
    limit: u32,
) -> Result<Vec<StateVersionMeta>> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT {VERSION_COLUMNS} FROM state_versions v
         LEFT JOIN state_heads h ON h.org_id = v.org_id AND h.stack_id = v.stack_id
         WHERE v.org_id = ?1 AND v.stack_id = ?2 AND v.version < ?3
         ORDER BY v.version DESC LIMIT ?4"
    ))?;
    let rows = stmt.query_map(
        params![org, stack, before.unwrap_or(i64::MAX), limit],
        version_row,
    )?;
    let mut out = Vec::new();
    for row in rows {
        out.push(version_meta(row?)?);
    }
    Ok(out)
}

pub(super) fn write(
    tx: &Transaction<'_>,
    org: &str,
    stack: &str,
    new: &NewStateVersion,
    audit: Option<&Audit>,
) -> Result<StateVersionMeta> {
    ensure_stack(tx, org, stack)?;
    let checksum = sha256_hex(&new.body);
    // A runner delivers a recovered state until it hears back: the same state from
    // the same run again is the version already stored.
    if new.request.liveness == bosun_core::state::WriterLiveness::Recovery {
        let stored: Option<i64> = tx
            .prepare_cached(
                "SELECT version FROM state_versions
                 WHERE org_id = ?1 AND stack_id = ?2 AND writer_kind = ?3
                   AND writer_id = ?4 AND checksum = ?5
                   AND recovery_reason IS NOT NULL
                 ORDER BY version DESC LIMIT 1",
            )?
            .query_row(
                params![
                    org,
                    stack,
                    new.request.writer.kind(),
                    new.request.writer.id(),
                    checksum
                ],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(version) = stored {
            return read_version(tx, org, stack, Some(version))?
                .map(|(m, _)| m)
                .ok_or_else(|| StoreError::Backend("stored version vanished".into()));
        }
    }
    let head = read_head(tx, org, stack)?;
    let current = head.current.as_ref().map(|c| Current {
        serial: c.serial,
        lineage: c.lineage.clone(),
    });
    let outcome = decide_write(&new.request, head.lock.as_ref(), current.as_ref(), &new.doc)
        .map_err(StoreError::StateRefused)?;
    let version: i64 = tx
        .prepare_cached(
            "SELECT COALESCE(MAX(version), 0) + 1 FROM state_versions
             WHERE org_id = ?1 AND stack_id = ?2",
        )?
        .query_row(params![org, stack], |r| r.get(0))?;
    let serial = i64::try_from(new.doc.serial)
        .map_err(|_| StoreError::Backend("serial out of range".into()))?;
    let recovery_reason = outcome.recovered.then(|| {
        new.recovery_reason
            .clone()
            .unwrap_or_else(|| "the engine could not write it".to_string())
    });
    tx.prepare_cached(
        "INSERT INTO state_versions (org_id, stack_id, version, serial, lineage, checksum,
            size, writer_kind, writer_id, token_id, created_at, late_write, forced,
            outputs, body, recovery_reason)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
    )?
    .execute(params![
        org,
        stack,
        version,
        serial,
        new.doc.lineage,
        checksum,
        new.body.len() as i64,
        new.request.writer.kind(),
        new.request.writer.id(),
        new.token_id,
        millis(Utc::now()),
        outcome.late_write,
        new.request.force,
        outputs_json(&new.doc),
        new.body,
        recovery_reason,
    ])?;
    if outcome.current {
        tx.prepare_cached(
            "UPDATE state_heads SET current_version = ?3 WHERE org_id = ?1 AND stack_id = ?2",
        )?
        .execute(params![org, stack, version])?;
    }
    if outcome.late_write {
        notify::late_write(tx, org, stack, version, &new.request.writer)?;
    }
    if let Some(audit) = &audit {
        append_audit(tx, audit)?;
    }
    read_version(tx, org, stack, Some(version))?
        .map(|(m, _)| m)
        .ok_or_else(|| StoreError::Backend("written version vanished".into()))
}

pub(super) fn lock(tx: &Transaction<'_>, org: &str, stack: &str, lock: &Lock) -> Result<()> {
    ensure_stack(tx, org, stack)?;
    let held = read_lock(tx, org, stack)?;
    decide_lock(held.as_ref(), lock).map_err(StoreError::StateLocked)?;
    if held.is_some() {
        return Ok(());
    }
    tx.prepare_cached(
        "UPDATE state_heads SET lock_id = ?3, lock_operation = ?4, lock_info = ?5,
            lock_who = ?6, lock_version = ?7, lock_created = ?8, lock_path = ?9,
            lock_holder_kind = ?10, lock_holder_id = ?11, lock_acquired_at = ?12
         WHERE org_id = ?1 AND stack_id = ?2",
    )?
    .execute(params![
        org,
        stack,
        lock.id,
        lock.operation,
        lock.info,
        lock.who,
        lock.version,
        lock.created,
        lock.path,
        lock.holder.kind(),
        lock.holder.id(),
        millis(lock.acquired_at),
    ])?;
    Ok(())
}

pub(super) fn unlock(
    tx: &Transaction<'_>,
    org: &str,
    stack: &str,
    request: &UnlockRequest,
    audit: &Audit,
) -> Result<UnlockDecision> {
    if !exists(
        tx,
        "SELECT 1 FROM stacks WHERE org_id = ?1 AND id = ?2",
        params![org, stack],
    )? {
        return Err(StoreError::NotFound(format!(
            "stack {stack:?} in org {org:?}"
        )));
    }
    let held = read_lock(tx, org, stack)?;
    let decision = decide_unlock(held.as_ref(), request);
    if let UnlockDecision::Release { lock, forced } = &decision {
        tx.prepare_cached(
            "UPDATE state_heads SET lock_id = NULL, lock_operation = NULL,
                lock_info = NULL, lock_who = NULL, lock_version = NULL,
                lock_created = NULL, lock_path = NULL, lock_holder_kind = NULL,
                lock_holder_id = NULL, lock_acquired_at = NULL
             WHERE org_id = ?1 AND stack_id = ?2",
        )?
        .execute(params![org, stack])?;
        if *forced {
            let mut audit = audit.clone();
            if let Value::Object(m) = &mut audit.detail {
                m.insert(
                    "released".into(),
                    json!({
                        "lock_id": lock.id,
                        "operation": lock.operation,
                        "who": lock.who,
                        "holder": format!("{}:{}", lock.holder.kind(), lock.holder.id()),
                        "acquired_at": lock.acquired_at.to_rfc3339(),
                    }),
                );
            }
            append_audit(tx, &audit)?;
        }
    }
    Ok(decision)
}
