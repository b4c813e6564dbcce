//! The secrets part of the store contract: [`SecretStore`], one of the traits
//! [`Store`](crate::Store) is made of.

use async_trait::async_trait;

use crate::{
    Audit, IdRequestToken, Result, RunRecord, Sealed, SealedOwner, SecretMeta, SigningKeyRecord,
};

/// Secrets at rest, OIDC signing keys, ID-token request tokens, and re-sealing every
/// sealed value.
#[async_trait]
pub trait SecretStore: Send + Sync {
    /// Sets a secret (create or replace). Namespaces are per org: another org's namespace
    /// of the same name is another namespace, and nothing about it changes the answer.
    async fn put_secret(
        &self,
        org: &str,
        namespace: &str,
        key: &str,
        value: &Sealed,
        audit: &Audit,
    ) -> Result<SecretMeta>;
    /// Deletes a secret; false when there was none.
    async fn delete_secret(
        &self,
        org: &str,
        namespace: &str,
        key: &str,
        audit: &Audit,
    ) -> Result<bool>;
    /// The org's secrets (optionally one namespace), by namespace then key.
    async fn list_secrets(&self, org: &str, namespace: Option<&str>) -> Result<Vec<SecretMeta>>;
    /// The sealed value of one of the org's secrets; `None` if the org has none by that name.
    async fn get_secret(&self, org: &str, namespace: &str, key: &str) -> Result<Option<Sealed>>;
    /// Every sealed value (secrets and signing keys), for checking and re-sealing.
    async fn sealed_values(&self) -> Result<Vec<(SealedOwner, Sealed)>>;
    /// Replaces sealed values in one transaction (a secrets-key rotation), with its audit.
    async fn reseal(&self, values: &[(SealedOwner, Sealed)], audit: &Audit) -> Result<()>;
    /// Adds a signing key and, in the same transaction, retires the current one(s).
    async fn add_signing_key(&self, key: &SigningKeyRecord, audit: &Audit) -> Result<()>;
    /// Every signing key, newest first.
    async fn signing_keys(&self) -> Result<Vec<SigningKeyRecord>>;
    /// Deletes keys retired before `before` (no token they signed is still valid).
    async fn prune_signing_keys(&self, before: chrono::DateTime<chrono::Utc>) -> Result<u64>;
    async fn add_id_request_token(&self, token: &IdRequestToken) -> Result<()>;
    /// The request token with this hash and its run, if the token exists.
    async fn id_request_token(
        &self,
        secret_hash: &str,
    ) -> Result<Option<(IdRequestToken, RunRecord)>>;
}
