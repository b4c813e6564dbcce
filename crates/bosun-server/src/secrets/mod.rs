//! The built-in secret store: values sealed at rest (`seal`), set and listed through the
//! API (values are never returned; the work is `service::secrets`), and resolved for runs from
//! `secret://<namespace>/<key>` references. Namespaces are per org: a reference always
//! resolves among the referencing org's own secrets, two orgs may each have a namespace
//! `aws`, and nothing one org stores is observable by another. `mask` masks the values a
//! lease carried in the log chunks runners send back.

pub mod mask;
pub mod seal;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use bosun_api::{Page, SecretInfo, SecretPut};
use bosun_core::authz::Access;
use bosun_core::Role;
use bosun_store::{Audit, Store};
use serde::Deserialize;
use serde_json::json;

use crate::app::AppState;
use crate::auth::Caller;
use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::paging::PageQuery;
use crate::route::{route, Route};
use crate::service::secrets as service;
use seal::{KeySource, SealError, SecretsKey};

pub fn routes() -> Vec<Route> {
    vec![
        route!(Access::Org(Role::Operator), list),
        route!(Access::Org(Role::Admin), put),
        route!(Access::Org(Role::Admin), delete),
    ]
}

/// Why the server cannot use its secrets key.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error(transparent)]
    Seal(#[from] SealError),
    #[error(transparent)]
    Store(#[from] bosun_store::StoreError),
    #[error("the store holds {count} sealed value(s) but no secrets key is configured and {default} does not exist: give the key with --secrets-key-file or BOSUN_SECRETS_KEY")]
    Missing { count: usize, default: String },
    #[error("{count} sealed value(s) were sealed with secrets key {sealed_with}, not the configured key {configured}: configure the right key, or pass the old one with --secrets-previous-key-file to re-encrypt")]
    Mismatch {
        count: usize,
        sealed_with: String,
        configured: String,
    },
}

/// Loads (or, on a store with nothing sealed, creates) the secrets key, checks that every
/// sealed value opens with it, and re-seals values sealed with the previous key.
pub async fn open_key(config: &ServerConfig, store: &dyn Store) -> Result<SecretsKey, KeyError> {
    let sealed = store.sealed_values().await?;
    let default = config.data_dir.join("secrets.key");
    let key = match &config.secrets.key {
        Some(source) => SecretsKey::load(source)?,
        None if default.exists() => SecretsKey::load(&KeySource::File(default.clone()))?,
        None if sealed.is_empty() => {
            let key = SecretsKey::generate_into(&default)?;
            tracing::warn!(
                path = %default.display(),
                "generated a secrets key next to the database; keep a copy apart from it (--secrets-key-file) for encryption at rest to mean something"
            );
            key
        }
        None => {
            return Err(KeyError::Missing {
                count: sealed.len(),
                default: default.display().to_string(),
            })
        }
    };
    let previous = config
        .secrets
        .previous_key
        .as_ref()
        .map(SecretsKey::load)
        .transpose()?;
    let mut resealed = Vec::new();
    for (owner, value) in &sealed {
        if value.key_id == key.id() {
            key.open(value)?;
            continue;
        }
        match &previous {
            Some(prev) if value.key_id == prev.id() => {
                let plain = prev.open(value)?;
                resealed.push((owner.clone(), key.seal(&plain)?));
            }
            _ => {
                return Err(KeyError::Mismatch {
                    count: sealed.iter().filter(|(_, v)| v.key_id != key.id()).count(),
                    sealed_with: value.key_id.clone(),
                    configured: key.id().to_string(),
                })
            }
        }
    }
    if !resealed.is_empty() {
        let audit = Audit {
            org: None,
            actor: "system".into(),
            token_id: None,
            action: "secrets.rekey".into(),
            target: "secrets-key".into(),
            detail: json!({"resealed": resealed.len(), "key": key.id()}),
        };
        store.reseal(&resealed, &audit).await?;
        tracing::info!(
            count = resealed.len(),
            key = key.id(),
            "re-sealed values with the new secrets key"
        );
    }
    Ok(key)
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Refused: this list is answered whole, as one page (see the description).
    pub cursor: Option<String>,
    /// Page size, 1–1000 (default 100): checked, but the one page holds every secret.
    pub limit: Option<u32>,
}

/// The org's secrets (names only, never values), by namespace then key.
///
/// Answered whole, as one page: `next_cursor` is always null; `limit` is checked
/// (1–1000) but does not shorten the page, and a `cursor` is refused.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/secrets", tag = "secrets",
    params(("org" = String, Path), ListQuery),
    responses((status = 200, body = Page<SecretInfo>), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<Page<SecretInfo>>, ApiError> {
    let page = PageQuery {
        cursor: q.cursor,
        limit: q.limit,
    };
    Ok(Json(
        service::list(&state, &org, q.namespace.as_deref(), &page).await?,
    ))
}

/// Set a secret (org admin). The value is sealed before it is stored and never shown
/// again. Namespaces are the org's own: another org's namespace of the same name is
/// another namespace.
#[utoipa::path(put, path = "/api/v1/orgs/{org}/secrets/{namespace}/{key}", tag = "secrets",
    params(("org" = String, Path), ("namespace" = String, Path), ("key" = String, Path)),
    request_body = SecretPut,
    responses((status = 200, body = SecretInfo), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn put(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, namespace, key)): ApiPath<(String, String, String)>,
    ApiJson(body): ApiJson<SecretPut>,
) -> Result<Json<SecretInfo>, ApiError> {
    Ok(Json(
        service::put(&state, &caller, &org, &namespace, &key, body).await?,
    ))
}

/// Delete a secret (org admin).
#[utoipa::path(delete, path = "/api/v1/orgs/{org}/secrets/{namespace}/{key}", tag = "secrets",
    params(("org" = String, Path), ("namespace" = String, Path), ("key" = String, Path)),
    responses((status = 204), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, namespace, key)): ApiPath<(String, String, String)>,
) -> Result<StatusCode, ApiError> {
    service::delete(&state, &caller, &org, &namespace, &key).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Splits `secret://ns/key`; `None` for a plain value.
pub fn parse_ref(value: &str) -> Option<(&str, &str)> {
    value.strip_prefix("secret://")?.split_once('/')
}

/// The value of a reference for a run of `org`: `Err` says why it cannot be used.
pub async fn resolve(state: &AppState, org: &str, value: &str) -> Result<String, String> {
    let Some((ns, key)) = parse_ref(value) else {
        return Ok(value.to_string());
    };
    let sealed = state
        .store
        .get_secret(org, ns, key)
        .await
        .map_err(|e| format!("cannot read {value}: {e}"))?;
    // Looked up among this org's secrets only: whether another org has a namespace of the
    // same name must not change the answer.
    let Some(sealed) = sealed else {
        return Err(format!("{value} does not exist"));
    };
    let plain = state
        .secrets_key
        .open(&sealed)
        .map_err(|e| format!("cannot open {value}: {e}"))?;
    String::from_utf8(plain).map_err(|_| format!("{value} is not UTF-8 text"))
}
