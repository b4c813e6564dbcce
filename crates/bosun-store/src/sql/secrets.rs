//! Secrets at rest, OIDC signing keys, ID-token request tokens, and re-sealing every
//! sealed value under a new secrets key.

use super::audit::append_audit;
use super::runs::{run_record, run_row, RUN_COLUMNS};
use super::*;

pub(super) fn secret_name(org: &str, namespace: &str, key: &str) -> String {
    format!("secret {org}/{namespace}/{key}")
}

pub(super) const SECRET_META_COLUMNS: &str =
    "org_id, namespace, key, created_at, updated_at, updated_by";

/// Raw secret metadata columns in `SECRET_META_COLUMNS` order.
pub(super) type SecretMetaRow = (String, String, String, i64, i64, Option<String>);

pub(super) fn secret_meta_row(r: &Row<'_>) -> db::Result<SecretMetaRow> {
    SecretMetaRow::try_from(r)
}

pub(super) fn secret_meta(r: SecretMetaRow) -> Result<SecretMeta> {
    let (org, namespace, key, created, updated, updated_by) = r;
    let Some(updated_by) = updated_by else {
        return Err(StoreError::Corrupt(format!(
            "{} has no updated_by",
            secret_name(&org, &namespace, &key)
        )));
    };
    Ok(SecretMeta {
        org,
        namespace,
        key,
        created_at: from_millis(created)?,
        updated_at: from_millis(updated)?,
        updated_by,
    })
}

pub(super) const SIGNING_KEY_COLUMNS: &str =
    "kid, private_ciphertext, private_nonce, key_id, public_jwk, created_at, retired_at";

/// Raw signing key columns in `SIGNING_KEY_COLUMNS` order.
pub(super) type SigningKeyRow = (
    String,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Option<String>,
    String,
    i64,
    Option<i64>,
);

pub(super) fn signing_key_row(r: &Row<'_>) -> db::Result<SigningKeyRow> {
    SigningKeyRow::try_from(r)
}

/// The sealed private half of a signing key row; every key the store writes has one.
pub(super) fn signing_key_sealed(
    kid: &str,
    ciphertext: Option<Vec<u8>>,
    nonce: Option<Vec<u8>>,
    key_id: Option<String>,
) -> Result<Sealed> {
    match (ciphertext, nonce, key_id) {
        (Some(ciphertext), Some(nonce), Some(key_id)) => Ok(Sealed {
            ciphertext,
            nonce,
            key_id,
        }),
        _ => Err(StoreError::Corrupt(format!(
            "signing key {kid:?} has no sealed private key"
        ))),
    }
}

pub(super) fn signing_key_record(r: SigningKeyRow) -> Result<SigningKeyRecord> {
    let (kid, ciphertext, nonce, key_id, jwk, created, retired) = r;
    Ok(SigningKeyRecord {
        private_key: signing_key_sealed(&kid, ciphertext, nonce, key_id)?,
        public_jwk: serde_json::from_str(&jwk).map_err(|e| corrupt("public_jwk", e))?,
        created_at: from_millis(created)?,
        retired_at: opt_from_millis(retired)?,
        kid,
    })
}

/// Replaces one sealed value in the caller's write transaction; `NotFound` when its owner
/// no longer exists.
pub(super) fn reseal_one(tx: &Transaction<'_>, owner: &SealedOwner, value: &Sealed) -> Result<()> {
    let changed = match owner {
        SealedOwner::Secret {
            org,
            namespace,
            key,
        } => tx
            .prepare_cached(
                "UPDATE secrets SET ciphertext = ?4, nonce = ?5, key_id = ?6
                 WHERE org_id = ?1 AND namespace = ?2 AND key = ?3",
            )?
            .execute(params![
                org,
                namespace,
                key,
                value.ciphertext,
                value.nonce,
                value.key_id
            ])?,
        SealedOwner::SigningKey { kid } => tx
            .prepare_cached(
                "UPDATE oidc_signing_keys
                 SET private_ciphertext = ?2, private_nonce = ?3, key_id = ?4 WHERE kid = ?1",
            )?
            .execute(params![kid, value.ciphertext, value.nonce, value.key_id])?,
        SealedOwner::NotificationTarget { org, id } => notify::reseal_secret(tx, org, id, value)?,
        // A session that ended meanwhile dropped its token: nothing to re-seal, no error.
        SealedOwner::SessionRefresh { session } => {
            super::sign_in::reseal_refresh(tx, session, value)?;
            return Ok(());
        }
    };
    if changed == 0 {
        return Err(StoreError::NotFound(match owner {
            SealedOwner::Secret {
                org,
                namespace,
                key,
            } => secret_name(org, namespace, key),
            SealedOwner::SigningKey { kid } => format!("signing key {kid:?}"),
            SealedOwner::NotificationTarget { org, id } => {
                format!("notification target {org}/{id}")
            }
            SealedOwner::SessionRefresh { session } => format!("session {session:?}"),
        }));
    }
    Ok(())
}

pub(super) fn put(
    tx: &Transaction<'_>,
    org: &str,
    namespace: &str,
    key: &str,
    value: &Sealed,
    audit: &Audit,
) -> Result<SecretMeta> {
    let now = millis(Utc::now());
    let created: Option<i64> = tx
        .prepare_cached(
            "SELECT created_at FROM secrets
             WHERE org_id = ?1 AND namespace = ?2 AND key = ?3",
        )?
        .query_row(params![org, namespace, key], |r| r.get(0))
        .optional()?;
    let created = created.unwrap_or(now);
    let updated = now.max(created);
    tx.prepare_cached(
        "INSERT INTO secrets (org_id, namespace, key, ciphertext, nonce, key_id,
                              created_at, updated_at, updated_by)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
         ON CONFLICT (org_id, namespace, key) DO UPDATE SET
            ciphertext = excluded.ciphertext, nonce = excluded.nonce,
            key_id = excluded.key_id, updated_at = excluded.updated_at,
            updated_by = excluded.updated_by",
    )?
    .execute(params![
        org,
        namespace,
        key,
        value.ciphertext,
        value.nonce,
        value.key_id,
        created,
        updated,
        audit.actor,
    ])
    .map_err(|e| {
        if is_foreign_key_violation(&e) {
            StoreError::NotFound(format!("org {org:?}"))
        } else {
            e.into()
        }
    })?;
    append_audit(tx, audit)?;
    Ok(SecretMeta {
        org: org.to_string(),
        namespace: namespace.to_string(),
        key: key.to_string(),
        created_at: from_millis(created)?,
        updated_at: from_millis(updated)?,
        updated_by: audit.actor.clone(),
    })
}

pub(super) fn delete(
    tx: &Transaction<'_>,
    org: &str,
    namespace: &str,
    key: &str,
    audit: &Audit,
) -> Result<bool> {
    let done = tx
        .prepare_cached("DELETE FROM secrets WHERE org_id = ?1 AND namespace = ?2 AND key = ?3")?
        .execute(params![org, namespace, key])?
        > 0;
    if done {
        append_audit(tx, audit)?;
    }
    Ok(done)
}

pub(super) fn list(c: &Connection, org: &str, namespace: Option<&str>) -> Result<Vec<SecretMeta>> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT {SECRET_META_COLUMNS} FROM secrets
         WHERE org_id = ?1 AND (?2 IS NULL OR namespace = ?2)
         ORDER BY namespace, key"
    ))?;
    let rows = stmt.query_map(params![org, namespace], secret_meta_row)?;
    let mut out = Vec::new();
    for row in rows {
        out.push(secret_meta(row?)?);
    }
    Ok(out)
}

pub(super) fn get(c: &Connection, org: &str, namespace: &str, key: &str) -> Result<Option<Sealed>> {
    // Rows are keyed by org: another org's namespace of the same name is not read.
    let row = c
        .prepare_cached(
            "SELECT ciphertext, nonce, key_id FROM secrets
             WHERE org_id = ?1 AND namespace = ?2 AND key = ?3",
        )?
        .query_row(params![org, namespace, key], |r| {
            <(Vec<u8>, Vec<u8>, String)>::try_from(r)
        })
        .optional()?;
    Ok(row.map(|(ciphertext, nonce, key_id)| Sealed {
        ciphertext,
        nonce,
        key_id,
    }))
}

pub(super) fn sealed_values(c: &Connection) -> Result<Vec<(SealedOwner, Sealed)>> {
    let mut out = Vec::new();
    let mut stmt = c.prepare_cached(
        "SELECT org_id, namespace, key, ciphertext, nonce, key_id FROM secrets
         ORDER BY org_id, namespace, key",
    )?;
    let rows = stmt.query_map([], |r| {
        <(String, String, String, Vec<u8>, Vec<u8>, String)>::try_from(r)
    })?;
    for row in rows {
        let (org, namespace, key, ciphertext, nonce, key_id) = row?;
        out.push((
            SealedOwner::Secret {
                org,
                namespace,
                key,
            },
            Sealed {
                ciphertext,
                nonce,
                key_id,
            },
        ));
    }
    let mut stmt = c.prepare_cached(
        "SELECT kid, private_ciphertext, private_nonce, key_id FROM oidc_signing_keys
         ORDER BY created_at, rowid",
    )?;
    let rows = stmt.query_map([], |r| {
        <(String, Option<Vec<u8>>, Option<Vec<u8>>, Option<String>)>::try_from(r)
    })?;
    for row in rows {
        let (kid, ciphertext, nonce, key_id) = row?;
        let sealed = signing_key_sealed(&kid, ciphertext, nonce, key_id)?;
        out.push((SealedOwner::SigningKey { kid }, sealed));
    }
    out.extend(notify::sealed_secrets(c)?);
    out.extend(super::sign_in::sealed_refresh_tokens(c)?);
    Ok(out)
}

pub(super) fn reseal(
    tx: &Transaction<'_>,
    values: &[(SealedOwner, Sealed)],
    audit: &Audit,
) -> Result<()> {
    // Any owner gone fails the whole transaction: all values change or none.
    for (owner, value) in values {
        reseal_one(tx, owner, value)?;
    }
    append_audit(tx, audit)
}

pub(super) fn add_signing_key(
    tx: &Transaction<'_>,
    key: &SigningKeyRecord,
    audit: &Audit,
) -> Result<()> {
    let now = millis(Utc::now());
    tx.prepare_cached("UPDATE oidc_signing_keys SET retired_at = ?1 WHERE retired_at IS NULL")?
        .execute([now])?;
    tx.prepare_cached(&format!(
        "INSERT INTO oidc_signing_keys ({SIGNING_KEY_COLUMNS})
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
    ))?
    .execute(params![
        key.kid,
        key.private_key.ciphertext,
        key.private_key.nonce,
        key.private_key.key_id,
        key.public_jwk.to_string(),
        millis(key.created_at),
        key.retired_at.map(millis),
    ])
    .map_err(|e| exists_or(e, || format!("signing key {:?}", key.kid)))?;
    append_audit(tx, audit)
}

pub(super) fn signing_keys(c: &Connection) -> Result<Vec<SigningKeyRecord>> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT {SIGNING_KEY_COLUMNS} FROM oidc_signing_keys
         ORDER BY created_at DESC, rowid DESC"
    ))?;
    let rows = stmt.query_map([], signing_key_row)?;
    let mut out = Vec::new();
    for row in rows {
        out.push(signing_key_record(row?)?);
    }
    Ok(out)
}

pub(super) fn prune_signing_keys(tx: &Transaction<'_>, before: DateTime<Utc>) -> Result<u64> {
    let deleted = tx
        .prepare_cached(
            "DELETE FROM oidc_signing_keys
             WHERE retired_at IS NOT NULL AND retired_at < ?1",
        )?
        .execute([millis(before)])?;
    Ok(deleted as u64)
}

pub(super) fn add_id_request_token(tx: &Transaction<'_>, token: &IdRequestToken) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO id_request_tokens (secret_hash, run_id, phase, fencing, expires_at)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![
        token.secret_hash,
        token.run_id,
        token.phase.as_str(),
        token.fencing,
        millis(token.expires_at),
    ])
    .map_err(|e| {
        if is_foreign_key_violation(&e) {
            StoreError::NotFound(format!("run {:?}", token.run_id))
        } else if is_unique_violation(&e) {
            StoreError::AlreadyExists("ID-token request token".into())
        } else {
            e.into()
        }
    })?;
    Ok(())
}

pub(super) fn id_request_token(
    c: &Connection,
    hash: &str,
) -> Result<Option<(IdRequestToken, RunRecord)>> {
    // One statement, so the token and its run come from the same snapshot. The
    // token's columns are renamed: `phase` and `fencing` are also the run's.
    let row = c
        .prepare_cached(&format!(
            "SELECT {RUN_COLUMNS}, t_phase, t_fencing, t_expires_at FROM runs
             JOIN (SELECT run_id AS t_run, phase AS t_phase, fencing AS t_fencing,
                          expires_at AS t_expires_at
                   FROM id_request_tokens WHERE secret_hash = ?1) t ON id = t_run"
        ))?
        .query_row([&hash], |r| {
            // The token's columns follow the run's.
            let n = RUN_COLUMNS.split(',').count();
            Ok((
                run_row(r)?,
                r.get::<_, String>(n)?,
                r.get::<_, i64>(n + 1)?,
                r.get::<_, i64>(n + 2)?,
            ))
        })
        .optional()?;
    let Some((run, phase, fencing, expires)) = row else {
        return Ok(None);
    };
    let run = run_record(run)?;
    let token = IdRequestToken {
        secret_hash: hash.to_string(),
        run_id: run.id.clone(),
        phase: phase.parse().map_err(|e| corrupt("phase", e))?,
        fencing,
        expires_at: from_millis(expires)?,
    };
    Ok(Some((token, run)))
}
