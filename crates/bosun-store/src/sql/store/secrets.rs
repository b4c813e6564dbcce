//! [`SecretStore`] for both backends: each method delegates to `sql/secrets.rs`.

use super::super::*;

#[async_trait]
impl SecretStore for db::Store {
    async fn put_secret(
        &self,
        org: &str,
        namespace: &str,
        key: &str,
        value: &Sealed,
        audit: &Audit,
    ) -> Result<SecretMeta> {
        let (org, namespace, key) = (org.to_string(), namespace.to_string(), key.to_string());
        let (value, audit) = (value.clone(), audit.clone());
        self.write(move |tx| secrets::put(tx, &org, &namespace, &key, &value, &audit))
            .await
    }

    async fn delete_secret(
        &self,
        org: &str,
        namespace: &str,
        key: &str,
        audit: &Audit,
    ) -> Result<bool> {
        let (org, namespace, key) = (org.to_string(), namespace.to_string(), key.to_string());
        let audit = audit.clone();
        self.write(move |tx| secrets::delete(tx, &org, &namespace, &key, &audit))
            .await
    }

    async fn list_secrets(&self, org: &str, namespace: Option<&str>) -> Result<Vec<SecretMeta>> {
        let (org, namespace) = (org.to_string(), namespace.map(str::to_string));
        self.read(move |c| secrets::list(c, &org, namespace.as_deref()))
            .await
    }

    async fn get_secret(&self, org: &str, namespace: &str, key: &str) -> Result<Option<Sealed>> {
        let (org, namespace, key) = (org.to_string(), namespace.to_string(), key.to_string());
        self.read(move |c| secrets::get(c, &org, &namespace, &key))
            .await
    }

    async fn sealed_values(&self) -> Result<Vec<(SealedOwner, Sealed)>> {
        self.read(secrets::sealed_values).await
    }

    async fn reseal(&self, values: &[(SealedOwner, Sealed)], audit: &Audit) -> Result<()> {
        let (values, audit) = (values.to_vec(), audit.clone());
        self.write(move |tx| secrets::reseal(tx, &values, &audit))
            .await
    }

    async fn add_signing_key(&self, key: &SigningKeyRecord, audit: &Audit) -> Result<()> {
        let (key, audit) = (key.clone(), audit.clone());
        self.write(move |tx| secrets::add_signing_key(tx, &key, &audit))
            .await
    }

    async fn signing_keys(&self) -> Result<Vec<SigningKeyRecord>> {
        self.read(secrets::signing_keys).await
    }

    async fn prune_signing_keys(&self, before: DateTime<Utc>) -> Result<u64> {
        self.write(move |tx| secrets::prune_signing_keys(tx, before))
            .await
    }

    async fn add_id_request_token(&self, token: &IdRequestToken) -> Result<()> {
        let token = token.clone();
        self.write(move |tx| secrets::add_id_request_token(tx, &token))
            .await
    }

    async fn id_request_token(
        &self,
        secret_hash: &str,
    ) -> Result<Option<(IdRequestToken, RunRecord)>> {
        let hash = secret_hash.to_string();
        self.read(move |c| secrets::id_request_token(c, &hash))
            .await
    }
}
