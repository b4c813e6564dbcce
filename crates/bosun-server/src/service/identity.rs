//! Run identity's signing keys: made (RS256, the private half sealed at rest), rotated on
//! a server admin's request with overlap, and published while a token they signed may
//! still be valid — the work behind the API's rotate handler, and the keys the issuer's
//! endpoints and its rotation duty use.

use std::time::Duration;

use base64::Engine as _;
use bosun_api::SigningKeys;
use bosun_store::{Audit, SigningKeyRecord};
use chrono::{DateTime, Utc};
use rsa::pkcs1::EncodeRsaPrivateKey;
use rsa::traits::PublicKeyParts;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;

/// Extra time a retired key stays published beyond the token lifetime (clock skew).
const PUBLISH_SLACK: Duration = Duration::from_secs(300);

/// A new RSA signing key: its record (private half sealed) and the key for signing.
fn generate(state: &AppState, rsa_key: &rsa::RsaPrivateKey) -> Result<SigningKeyRecord, ApiError> {
    let public = rsa_key.to_public_key();
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let n = public.n().to_bytes_be();
    let e = public.e().to_bytes_be();
    let kid = hex::encode(&Sha256::digest(&n)[..12]);
    let der = rsa_key
        .to_pkcs1_der()
        .map_err(|e| ApiError::Internal(format!("encoding a signing key: {e}")))?;
    let sealed = state
        .secrets_key
        .seal(der.as_bytes())
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(SigningKeyRecord {
        kid: kid.clone(),
        private_key: sealed,
        public_jwk: json!({"kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid,
            "n": b64.encode(n), "e": b64.encode(e)}),
        created_at: Utc::now(),
        retired_at: None,
    })
}

/// Makes a new signing key, which becomes the active one (the previous one retires),
/// with the audit record of `action` by `actor`; answers its key id.
pub(crate) async fn new_key(
    state: &AppState,
    action: &str,
    actor: &str,
) -> Result<String, ApiError> {
    let rsa_key =
        tokio::task::spawn_blocking(|| rsa::RsaPrivateKey::new(&mut rand::rngs::OsRng, 2048))
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))?
            .map_err(|e| ApiError::Internal(format!("generating a signing key: {e}")))?;
    let record = generate(state, &rsa_key)?;
    let audit = Audit {
        org: None,
        actor: actor.into(),
        token_id: None,
        action: action.into(),
        target: format!("signing-key:{}", record.kid),
        detail: json!({"kid": record.kid}),
    };
    state.store.add_signing_key(&record, &audit).await?;
    Ok(record.kid)
}

/// Rotates the signing key now, for `caller`: the new key becomes the active one and the
/// old one stays published until every token it signed has expired.
pub async fn rotate(state: &AppState, caller: &Caller) -> Result<SigningKeys, ApiError> {
    let _one = state.issuer.keygen.lock().await;
    let kid = new_key(state, "oidc.key.rotate", &caller.0.actor()).await?;
    Ok(SigningKeys {
        active: kid,
        published: published(state).await?.into_iter().map(|k| k.kid).collect(),
    })
}

/// Keys to publish: the active one and those retired recently enough that a token they
/// signed may still be valid.
pub(crate) async fn published(state: &AppState) -> Result<Vec<SigningKeyRecord>, ApiError> {
    let keep = keep_since(state);
    Ok(state
        .store
        .signing_keys()
        .await?
        .into_iter()
        .filter(|k| k.retired_at.is_none_or(|r| r > keep))
        .collect())
}

/// The oldest retirement whose key must still be published: a token it signed may still
/// be valid.
pub(crate) fn keep_since(state: &AppState) -> DateTime<Utc> {
    let window = state.config.oidc.token_ttl + PUBLISH_SLACK;
    Utc::now() - chrono::Duration::from_std(window).unwrap_or(chrono::Duration::hours(1))
}
