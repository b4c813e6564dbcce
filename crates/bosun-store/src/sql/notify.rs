//! Notifications (one source for both backends; see `super::db`): targets, and the outbox — events written in the transaction
//! of their cause (a run ending, a late state write, an old lock) and fanned out, in that
//! same transaction, to one delivery row per matching target. The server's delivery duty
//! reads due deliveries and records each attempt.
//!
//! A write transaction that added an event emits `Signal::Notification`, published when it
//! commits (on every replica), so the delivery duty sends a new event at once instead of
//! at its next poll.

use super::audit::append_audit;
use super::*;

fn rules_json(rules: &[NotificationRule]) -> String {
    Value::Array(
        rules
            .iter()
            .map(|r| json!({"events": r.events, "run_kinds": r.run_kinds, "run_states": r.run_states}))
            .collect(),
    )
    .to_string()
}

fn parse_rules(text: &str) -> Result<Vec<NotificationRule>> {
    let v: Value = serde_json::from_str(text).map_err(|e| corrupt("notification rules", e))?;
    let list = |r: &Value, k: &str| -> Vec<String> {
        r.get(k)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    Ok(v.as_array()
        .map(|a| {
            a.iter()
                .map(|r| NotificationRule {
                    events: list(r, "events"),
                    run_kinds: list(r, "run_kinds"),
                    run_states: list(r, "run_states"),
                })
                .collect()
        })
        .unwrap_or_default())
}

const TARGET_COLUMNS: &str = "org_id, id, kind, url, secret_ciphertext, secret_nonce,
    secret_key_id, rules, enabled, created_at, updated_at, updated_by";

type TargetRow = (
    String,
    String,
    String,
    String,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Option<String>,
    String,
    bool,
    i64,
    i64,
    String,
);

fn target_row(r: &Row<'_>) -> db::Result<TargetRow> {
    TargetRow::try_from(r)
}

fn target_record(r: TargetRow) -> Result<NotificationTargetRecord> {
    let (org, id, kind, url, ct, nonce, key_id, rules, enabled, created, updated, by) = r;
    let secret = match (ct, nonce, key_id) {
        (Some(ciphertext), Some(nonce), Some(key_id)) => Some(Sealed {
            ciphertext,
            nonce,
            key_id,
        }),
        _ => None,
    };
    Ok(NotificationTargetRecord {
        org,
        id,
        kind,
        url,
        secret,
        rules: parse_rules(&rules)?,
        enabled,
        created_at: from_millis(created)?,
        updated_at: from_millis(updated)?,
        updated_by: by,
    })
}

pub(super) fn load_target(
    c: &Connection,
    org: &str,
    id: &str,
) -> Result<Option<NotificationTargetRecord>> {
    Ok(query_decoded(
        c,
        &format!("SELECT {TARGET_COLUMNS} FROM notification_targets WHERE org_id = ?1 AND id = ?2"),
        params![org, id],
        target_row,
        target_record,
    )?
    .pop())
}

const DELIVERY_COLUMNS: &str = "d.id, d.event_id, d.org_id, d.target_id, e.kind, e.payload,
    e.created_at, d.attempts, d.next_attempt_at, d.last_status, d.last_error, d.delivered_at,
    d.created_at";

type DeliveryRow = (
    i64,
    i64,
    String,
    String,
    String,
    String,
    i64,
    i64,
    Option<i64>,
    Option<i64>,
    Option<String>,
    Option<i64>,
    i64,
);

fn delivery_row(r: &Row<'_>) -> db::Result<DeliveryRow> {
    DeliveryRow::try_from(r)
}

fn delivery_record(r: DeliveryRow) -> Result<NotificationDeliveryRecord> {
    let (id, event_id, org, target, kind, payload, ev_at, attempts, next, status, error, done, at) =
        r;
    Ok(NotificationDeliveryRecord {
        id,
        event_id,
        org,
        target,
        event: NotificationEventKind::parse(&kind)
            .ok_or_else(|| corrupt("notification event kind", &kind))?,
        payload: serde_json::from_str(&payload).map_err(|e| corrupt("notification payload", e))?,
        event_created_at: from_millis(ev_at)?,
        attempts,
        next_attempt_at: opt_from_millis(next)?,
        last_status: status,
        last_error: error,
        delivered_at: opt_from_millis(done)?,
        created_at: from_millis(at)?,
    })
}

/// Writes an event and its deliveries in the caller's transaction. `None` when an event
/// with the same dedup key was already recorded for the org.
pub(super) fn insert_event(
    tx: &Transaction<'_>,
    org: &str,
    e: &NewNotificationEvent,
) -> Result<Option<i64>> {
    let now = millis(Utc::now());
    let (run_kind, run_state) = (
        e.run_kind.map(|k| k.as_str()),
        e.run_state.map(|s| s.as_str()),
    );
    let inserted = tx
        .prepare_cached(
            "INSERT INTO notification_events (org_id, kind, run_kind, run_state, payload,
                dedup_key, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT DO NOTHING",
        )?
        .execute(params![
            org,
            e.kind.as_str(),
            run_kind,
            run_state,
            e.payload.to_string(),
            e.dedup_key,
            now
        ])?;
    if inserted == 0 {
        return Ok(None);
    }
    let event_id = db::last_insert_id(tx)?;
    let targets = query_decoded(
        tx,
        &format!(
            "SELECT {TARGET_COLUMNS} FROM notification_targets
             WHERE org_id = ?1 AND (?2 IS NULL OR id = ?2) ORDER BY id"
        ),
        params![org, e.only_target],
        target_row,
        target_record,
    )?;
    let mut fanned = 0;
    for t in targets {
        let selected = match &e.only_target {
            Some(_) => true,
            None => {
                t.enabled && NotificationRule::any_matches(&t.rules, e.kind, run_kind, run_state)
            }
        };
        if !selected {
            continue;
        }
        tx.prepare_cached(
            "INSERT INTO notification_deliveries (event_id, org_id, target_id, next_attempt_at,
                created_at)
             VALUES (?1, ?2, ?3, ?4, ?4)",
        )?
        .execute(params![event_id, org, t.id, now])?;
        fanned += 1;
    }
    if fanned > 0 {
        crate::signal::emit(Signal::Notification);
    }
    Ok(Some(event_id))
}

/// The event of a run that has just ended (`run` as stored after the change).
pub(super) fn run_ended(tx: &Transaction<'_>, run: &RunRecord) -> Result<()> {
    let event = NewNotificationEvent {
        kind: NotificationEventKind::RunEnded,
        run_kind: Some(run.kind),
        run_state: Some(run.state),
        payload: json!({
            "org": run.org,
            "stack": run.stack,
            "run": run.id,
            "kind": run.kind.as_str(),
            "trigger": run.trigger.as_str(),
            "state": run.state.as_str(),
            "reason": run.reason,
            "url": format!("/api/v1/orgs/{}/runs/{}", run.org, run.id),
        }),
        dedup_key: Some(format!("run_ended:{}", run.id)),
        only_target: None,
    };
    insert_event(tx, &run.org, &event).map(|_| ())
}

/// The event of a state version written by an ended run.
pub(super) fn late_write(
    tx: &Transaction<'_>,
    org: &str,
    stack: &str,
    version: i64,
    writer: &Writer,
) -> Result<()> {
    let event = NewNotificationEvent {
        kind: NotificationEventKind::LateWrite,
        run_kind: None,
        run_state: None,
        payload: json!({
            "org": org,
            "stack": stack,
            "version": version,
            "writer": format!("{}:{}", writer.kind(), writer.id()),
            "run": match writer { Writer::Run(id) => Some(id.as_str()), _ => None },
            "url": format!("/api/v1/orgs/{org}/stacks/{stack}/state/versions/{version}"),
        }),
        dedup_key: None,
        only_target: None,
    };
    insert_event(tx, org, &event).map(|_| ())
}

/// Deletes up to `batch` settled deliveries (delivered, or given up: no next attempt)
/// created before `before`; how many went. Pending deliveries stay, whatever their age.
pub(super) fn prune_deliveries(tx: &Transaction<'_>, before: i64, batch: u32) -> Result<u64> {
    let n = tx
        .prepare_cached(
            "DELETE FROM notification_deliveries WHERE id IN (
                SELECT id FROM notification_deliveries
                WHERE next_attempt_at IS NULL AND created_at < ?1 LIMIT ?2)",
        )?
        .execute(params![before, batch])?;
    Ok(n as u64)
}

/// Deletes up to `batch` events created before `before` that have no delivery left; how
/// many went. The `old_lock` event of a lock still held stays: its dedup key is what keeps
/// the duty from notifying of the same lock again.
pub(super) fn prune_events(tx: &Transaction<'_>, before: i64, batch: u32) -> Result<u64> {
    let n = tx
        .prepare_cached(
            "DELETE FROM notification_events WHERE id IN (
                SELECT e.id FROM notification_events e
                WHERE e.created_at < ?1
                  AND NOT EXISTS (SELECT 1 FROM notification_deliveries d
                                  WHERE d.event_id = e.id)
                  AND NOT (e.kind = 'old_lock' AND EXISTS (
                      SELECT 1 FROM state_heads h
                      WHERE h.org_id = e.org_id AND h.lock_id IS NOT NULL
                        AND e.dedup_key = 'old_lock:' || h.stack_id || ':' || h.lock_id))
                LIMIT ?2)",
        )?
        .execute(params![before, batch])?;
    Ok(n as u64)
}

/// Every sealed target secret, for checking and re-sealing under a new secrets key.
pub(super) fn sealed_secrets(c: &Connection) -> Result<Vec<(SealedOwner, Sealed)>> {
    let mut stmt = c.prepare_cached(
        "SELECT org_id, id, secret_ciphertext, secret_nonce, secret_key_id
         FROM notification_targets WHERE secret_ciphertext IS NOT NULL ORDER BY org_id, id",
    )?;
    let rows = stmt.query_map([], |r| {
        <(String, String, Vec<u8>, Vec<u8>, String)>::try_from(r)
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (org, id, ciphertext, nonce, key_id) = row?;
        out.push((
            SealedOwner::NotificationTarget { org, id },
            Sealed {
                ciphertext,
                nonce,
                key_id,
            },
        ));
    }
    Ok(out)
}

/// Replaces a target's sealed secret in a re-seal transaction; the rows changed.
pub(super) fn reseal_secret(
    tx: &Transaction<'_>,
    org: &str,
    id: &str,
    v: &Sealed,
) -> Result<usize> {
    Ok(tx
        .prepare_cached(
            "UPDATE notification_targets
             SET secret_ciphertext = ?3, secret_nonce = ?4, secret_key_id = ?5
             WHERE org_id = ?1 AND id = ?2 AND secret_ciphertext IS NOT NULL",
        )?
        .execute(params![org, id, v.ciphertext, v.nonce, v.key_id])?)
}

pub(super) fn create_target(
    tx: &Transaction<'_>,
    t: &NewNotificationTarget,
    audit: &Audit,
) -> Result<NotificationTargetRecord> {
    if !exists(tx, "SELECT 1 FROM orgs WHERE id = ?1", params![t.org])? {
        return Err(StoreError::NotFound(format!("org {:?}", t.org)));
    }
    let now = millis(Utc::now());
    let s = t.secret.as_ref();
    tx.prepare_cached(
        "INSERT INTO notification_targets (org_id, id, kind, url, secret_ciphertext,
            secret_nonce, secret_key_id, rules, enabled, created_at, updated_at,
            updated_by)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11)",
    )?
    .execute(params![
        t.org,
        t.id,
        t.kind,
        t.url,
        s.map(|s| &s.ciphertext),
        s.map(|s| &s.nonce),
        s.map(|s| &s.key_id),
        rules_json(&t.rules),
        t.enabled,
        now,
        audit.actor,
    ])
    .map_err(|e| exists_or(e, || format!("notification target {:?}", t.id)))?;
    append_audit(tx, audit)?;
    load_target(tx, &t.org, &t.id)?
        .ok_or_else(|| StoreError::Backend("created target vanished".into()))
}

pub(super) fn update_target(
    tx: &Transaction<'_>,
    t: &NewNotificationTarget,
    audit: &Audit,
) -> Result<NotificationTargetRecord> {
    let s = t.secret.as_ref();
    let n = tx
        .prepare_cached(
            "UPDATE notification_targets SET url = ?3, rules = ?4, enabled = ?5,
                secret_ciphertext = COALESCE(?6, secret_ciphertext),
                secret_nonce = COALESCE(?7, secret_nonce),
                secret_key_id = COALESCE(?8, secret_key_id),
                updated_at = ?9, updated_by = ?10
             WHERE org_id = ?1 AND id = ?2",
        )?
        .execute(params![
            t.org,
            t.id,
            t.url,
            rules_json(&t.rules),
            t.enabled,
            s.map(|s| &s.ciphertext),
            s.map(|s| &s.nonce),
            s.map(|s| &s.key_id),
            millis(Utc::now()),
            audit.actor,
        ])?;
    if n == 0 {
        return Err(StoreError::NotFound(format!(
            "notification target {:?} in org {:?}",
            t.id, t.org
        )));
    }
    append_audit(tx, audit)?;
    load_target(tx, &t.org, &t.id)?
        .ok_or_else(|| StoreError::Backend("updated target vanished".into()))
}

pub(super) fn list_targets(c: &Connection, org: &str) -> Result<Vec<NotificationTargetRecord>> {
    query_decoded(
        c,
        &format!(
            "SELECT {TARGET_COLUMNS} FROM notification_targets WHERE org_id = ?1
             ORDER BY id"
        ),
        params![org],
        target_row,
        target_record,
    )
}

pub(super) fn delete_target(
    tx: &Transaction<'_>,
    org: &str,
    id: &str,
    audit: &Audit,
) -> Result<bool> {
    let n = tx
        .prepare_cached("DELETE FROM notification_targets WHERE org_id = ?1 AND id = ?2")?
        .execute(params![org, id])?;
    if n > 0 {
        append_audit(tx, audit)?;
    }
    Ok(n > 0)
}

pub(super) fn add_event(
    tx: &Transaction<'_>,
    org: &str,
    event: &NewNotificationEvent,
) -> Result<Option<i64>> {
    if let Some(t) = &event.only_target {
        if load_target(tx, org, t)?.is_none() {
            return Err(StoreError::NotFound(format!(
                "notification target {t:?} in org {org:?}"
            )));
        }
    }
    insert_event(tx, org, event)
}

pub(super) fn record_attempt(
    tx: &Transaction<'_>,
    delivery: i64,
    a: &NotificationAttempt,
) -> Result<()> {
    let now = millis(Utc::now());
    tx.prepare_cached(
        "UPDATE notification_deliveries SET attempts = attempts + 1, last_status = ?2,
            last_error = ?3, delivered_at = ?4, next_attempt_at = ?5
         WHERE id = ?1",
    )?
    .execute(params![
        delivery,
        a.status,
        a.error,
        a.delivered.then_some(now),
        if a.delivered {
            None
        } else {
            a.retry_at.map(millis)
        },
    ])?;
    Ok(())
}

pub(super) fn list_deliveries(
    c: &Connection,
    org: &str,
    target: &str,
    before: Option<i64>,
    limit: u32,
) -> Result<Vec<NotificationDeliveryRecord>> {
    query_decoded(
        c,
        &format!(
            "SELECT {DELIVERY_COLUMNS} FROM notification_deliveries d
             JOIN notification_events e ON e.id = d.event_id
             WHERE d.org_id = ?1 AND d.target_id = ?2 AND (?3 IS NULL OR d.id < ?3)
             ORDER BY d.id DESC LIMIT ?4"
        ),
        params![org, target, before, limit],
        delivery_row,
        delivery_record,
    )
}

/// Whether any lock is held since before `acquired_before`: most passes find none.
pub(super) fn any_old_locks(c: &Connection, acquired_before: DateTime<Utc>) -> Result<bool> {
    let before = millis(acquired_before);
    exists(
        c,
        "SELECT 1 FROM state_heads WHERE lock_id IS NOT NULL AND lock_acquired_at < ?1",
        params![before],
    )
}

/// One `old_lock` event per lock held since before `acquired_before`, never twice
/// for the same lock id. Returns how many it wrote.
pub(super) fn write_old_locks(tx: &Transaction<'_>, acquired_before: DateTime<Utc>) -> Result<u64> {
    let before = millis(acquired_before);
    let mut stmt = tx.prepare_cached(
        "SELECT org_id, stack_id, lock_id, lock_who, lock_operation, lock_holder_kind,
                lock_holder_id, lock_acquired_at
         FROM state_heads WHERE lock_id IS NOT NULL AND lock_acquired_at < ?1",
    )?;
    type LockRow = (
        String,
        String,
        String,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        i64,
    );
    let rows: Vec<LockRow> = stmt
        .query_map(params![before], |r| LockRow::try_from(r))?
        .collect::<db::Result<_>>()?;
    drop(stmt);
    let now = Utc::now();
    let mut written = 0;
    for (org, stack, lock_id, who, operation, hk, hid, acquired) in rows {
        let acquired = from_millis(acquired)?;
        let event = NewNotificationEvent {
            kind: NotificationEventKind::OldLock,
            run_kind: None,
            run_state: None,
            payload: json!({
                "org": org,
                "stack": stack,
                "lock_id": lock_id,
                "who": who,
                "operation": operation,
                "holder": format!("{}:{}", hk.unwrap_or_default(), hid.unwrap_or_default()),
                "acquired_at": acquired.to_rfc3339(),
                "age_seconds": (now - acquired).num_seconds(),
                "url": format!("/api/v1/orgs/{org}/stacks/{stack}/state/lock"),
            }),
            dedup_key: Some(format!("old_lock:{stack}:{lock_id}")),
            only_target: None,
        };
        if insert_event(tx, &org, &event)?.is_some() {
            written += 1;
        }
    }
    Ok(written)
}

pub(super) fn due(c: &Connection, now: DateTime<Utc>, limit: u32) -> Result<Vec<DueNotification>> {
    let now = millis(now);
    let deliveries = query_decoded(
        c,
        &format!(
            "SELECT {DELIVERY_COLUMNS} FROM notification_deliveries d
             JOIN notification_events e ON e.id = d.event_id
             WHERE d.next_attempt_at IS NOT NULL AND d.next_attempt_at <= ?1
             ORDER BY d.next_attempt_at, d.id LIMIT ?2"
        ),
        params![now, limit],
        delivery_row,
        delivery_record,
    )?;
    let mut out = Vec::with_capacity(deliveries.len());
    for delivery in deliveries {
        if let Some(target) = load_target(c, &delivery.org, &delivery.target)? {
            out.push(DueNotification { delivery, target });
        }
    }
    Ok(out)
}
