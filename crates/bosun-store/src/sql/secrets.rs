//! Secrets at rest, OIDC signing keys, ID-token request tokens, and re-sealing every
//! sealed value under a new secrets key.

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
        }));
    }
    Ok(())
}
