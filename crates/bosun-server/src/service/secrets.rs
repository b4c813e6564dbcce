//! The org's secrets through the API: names checked as `secret://<namespace>/<key>`
//! references, values sealed before they are stored and never shown again, listed by
//! name only and deleted — the work behind the API's secret handlers.

use bosun_api::{Page, SecretInfo, SecretPut};
use bosun_core::stack::check_secret_ref;
use bosun_core::ValidationError;
use bosun_store::SecretMeta;
use serde_json::json;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::paging::{whole, PageQuery};

/// The largest secret value accepted.
pub const MAX_VALUE: usize = 64 * 1024;

fn check_name(namespace: &str, key: &str) -> Result<String, ApiError> {
    let reference = format!("secret://{namespace}/{key}");
    check_secret_ref(&reference)
        .map_err(|m| ApiError::Validation(ValidationError::new("reference", m)))?;
    Ok(reference)
}

fn to_wire(m: SecretMeta) -> SecretInfo {
    SecretInfo {
        reference: format!("secret://{}/{}", m.namespace, m.key),
        namespace: m.namespace,
        key: m.key,
        created_at: m.created_at,
        updated_at: m.updated_at,
        updated_by: m.updated_by,
    }
}

/// The org's secrets (names only, never values), by namespace then key; `namespace`
/// narrows them to one.
pub async fn list(
    state: &AppState,
    org: &str,
    namespace: Option<&str>,
    q: &PageQuery,
) -> Result<Page<SecretInfo>, ApiError> {
    q.whole()?;
    let items = state.store.list_secrets(org, namespace).await?;
    Ok(whole(items.into_iter().map(to_wire).collect()))
}

/// Sets a secret of the org: the value is sealed before it is stored and never shown
/// again.
pub async fn put(
    state: &AppState,
    caller: &Caller,
    org: &str,
    namespace: &str,
    key: &str,
    body: SecretPut,
) -> Result<SecretInfo, ApiError> {
    let reference = check_name(namespace, key)?;
    if body.value.is_empty() {
        return Err(ValidationError::new("value", "must not be empty").into());
    }
    if body.value.len() > MAX_VALUE {
        return Err(
            ValidationError::new("value", format!("must be at most {MAX_VALUE} bytes")).into(),
        );
    }
    let sealed = state
        .secrets_key
        .seal(body.value.as_bytes())
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let audit = caller.audit(Some(org), "secret.set", reference, json!({}));
    let meta = state
        .store
        .put_secret(org, namespace, key, &sealed, &audit)
        .await?;
    Ok(to_wire(meta))
}

/// Deletes a secret of the org ("not found" when it has none of that name).
pub async fn delete(
    state: &AppState,
    caller: &Caller,
    org: &str,
    namespace: &str,
    key: &str,
) -> Result<(), ApiError> {
    let reference = check_name(namespace, key)?;
    let audit = caller.audit(Some(org), "secret.delete", reference.clone(), json!({}));
    if state
        .store
        .delete_secret(org, namespace, key, &audit)
        .await?
    {
        Ok(())
    } else {
        Err(ApiError::NotFound(format!("{reference} in org {org:?}")))
    }
}
