//! Secrets at rest, OIDC signing keys and ID-token request tokens.

use chrono::{DateTime, Utc};

/// A value sealed with the server's secrets key (AEAD). The store never sees plaintext.
#[derive(Clone, PartialEq, Eq)]
pub struct Sealed {
    pub ciphertext: Vec<u8>,
    pub nonce: Vec<u8>,
    /// Which secrets key sealed it (a fingerprint, not the key).
    pub key_id: String,
}

impl std::fmt::Debug for Sealed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Sealed(key {}, {} bytes)",
            self.key_id,
            self.ciphertext.len()
        )
    }
}

/// A secret's metadata (never its value).
#[derive(Debug, Clone, PartialEq)]
pub struct SecretMeta {
    pub org: String,
    pub namespace: String,
    pub key: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// `user:alice`, …: who last set it.
    pub updated_by: String,
}

/// What a sealed row is, for re-sealing everything under a new secrets key.
#[derive(Debug, Clone, PartialEq)]
pub enum SealedOwner {
    Secret {
        org: String,
        namespace: String,
        key: String,
    },
    SigningKey {
        kid: String,
    },
    /// A notification target's HMAC secret.
    NotificationTarget {
        org: String,
        id: String,
    },
    /// A console session's refresh token from its identity provider.
    SessionRefresh {
        session: String,
    },
}

/// An OIDC signing key: its private half sealed, its public half as a JWK.
#[derive(Debug, Clone, PartialEq)]
pub struct SigningKeyRecord {
    pub kid: String,
    /// The RSA private key (PKCS#1 DER), sealed.
    pub private_key: Sealed,
    /// The public JWK (`kty`, `n`, `e`, `kid`, `alg`, `use`), as published.
    pub public_jwk: serde_json::Value,
    pub created_at: DateTime<Utc>,
    /// When a newer key replaced it; it stays published while tokens it signed live.
    pub retired_at: Option<DateTime<Utc>>,
}

/// A token that lets one executing phase of a run request OIDC identity tokens. It is
/// valid only while that run still executes that phase under that lease.
#[derive(Debug, Clone, PartialEq)]
pub struct IdRequestToken {
    /// SHA-256 of the secret, hex.
    pub secret_hash: String,
    pub run_id: String,
    pub phase: bosun_core::run::Phase,
    pub fencing: i64,
    pub expires_at: DateTime<Utc>,
}
