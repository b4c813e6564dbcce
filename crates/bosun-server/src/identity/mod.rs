//! Run identity: Bosun as an OIDC issuer. The discovery document and JWKS, RS256 signing
//! keys sealed at rest and rotated with overlap (a retired key stays published until every
//! token it signed has expired), and the ID-token request endpoint an executing phase
//! calls with its request token — which is valid only while that run still executes that
//! phase under that lease, so a plan phase can never mint an apply identity.

pub mod issuer;
pub use issuer::Issuer;

use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::Json;
use bosun_api::{IdToken, SigningKeys};
use bosun_core::authz::Access;
use bosun_core::run::Phase;
use bosun_store::{IdRequestToken, RunRecord, SigningKeyRecord};
use chrono::Utc;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::ApiQuery;
use crate::route::{route, Route};
use crate::service::identity as service;

/// Where executing phases ask for identity tokens (outside `/api/v1`: its bearer is a
/// request token, not an API token).
pub const TOKEN_PATH: &str = "/oidc/token";

pub fn routes() -> Vec<Route> {
    vec![route!(Access::ServerAdmin, rotate)]
}

#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    aud: &'a str,
    sub: String,
    iat: i64,
    nbf: i64,
    exp: i64,
    jti: String,
    run_id: &'a str,
    run_kind: String,
    repository: String,
    commit: Option<&'a str>,
    branch: &'a str,
    trigger: String,
}

/// `org:<org>:stack:<stack-id>:run_phase:<phase>` — the stack's id, never its name.
pub fn subject(org: &str, stack: &str, phase: Phase) -> String {
    format!("org:{org}:stack:{stack}:run_phase:{phase}")
}

/// The active signing key, made on first use.
async fn active_key(state: &AppState) -> Result<(String, EncodingKey), ApiError> {
    let find = |keys: Vec<SigningKeyRecord>| keys.into_iter().find(|k| k.retired_at.is_none());
    let mut key = find(state.store.signing_keys().await?);
    if key.is_none() {
        let _one = state.issuer.keygen.lock().await;
        key = find(state.store.signing_keys().await?);
        if key.is_none() {
            service::new_key(state, "oidc.key.create", "system").await?;
            key = find(state.store.signing_keys().await?);
        }
    }
    let key = key.ok_or_else(|| ApiError::Internal("no signing key after creating one".into()))?;
    let der = state
        .secrets_key
        .open(&key.private_key)
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok((key.kid, EncodingKey::from_rsa_der(&der)))
}

/// `/.well-known/openid-configuration`.
pub async fn discovery(State(state): State<AppState>) -> Json<Value> {
    let iss = &state.config.public_url;
    Json(json!({
        "issuer": iss,
        "jwks_uri": format!("{iss}/.well-known/jwks.json"),
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"],
        "scopes_supported": ["openid"],
        "claims_supported": ["iss", "aud", "sub", "iat", "nbf", "exp", "jti", "run_id",
            "run_kind", "repository", "commit", "branch", "trigger"],
    }))
}

/// `/.well-known/jwks.json`.
pub async fn jwks(State(state): State<AppState>) -> Result<(HeaderMap, Json<Value>), ApiError> {
    let mut keys = service::published(&state).await?;
    if keys.is_empty() {
        active_key(&state).await?;
        keys = service::published(&state).await?;
    }
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("public, max-age=60"),
    );
    Ok((
        headers,
        Json(json!({"keys": keys.into_iter().map(|k| k.public_jwk).collect::<Vec<_>>()})),
    ))
}

/// Mints the request token of a leased phase.
pub async fn mint_request_token(
    state: &AppState,
    run: &RunRecord,
    ttl: Duration,
) -> Result<String, ApiError> {
    let mut random = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut random);
    let secret = format!("bosun_idr_{}", hex::encode(random));
    let token = IdRequestToken {
        secret_hash: bosun_core::token::hash_token(&secret),
        run_id: run.id.clone(),
        phase: run.phase,
        fencing: run.fencing,
        expires_at: Utc::now()
            + chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::hours(4)),
    };
    state.store.add_id_request_token(&token).await?;
    Ok(secret)
}

/// The request URL handed to phases.
pub fn request_url(state: &AppState) -> String {
    format!("{}{TOKEN_PATH}", state.config.public_url)
}

#[derive(Deserialize)]
pub struct TokenQuery {
    pub audience: Option<String>,
}

/// `GET /oidc/token?audience=AUD` with the phase's request token: a 10-minute identity
/// token for that phase.
pub async fn token(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<TokenQuery>,
) -> Result<Json<IdToken>, ApiError> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| {
            ApiError::Unauthenticated("missing Authorization: Bearer <request token>".into())
        })?;
    let audience = q.audience.filter(|a| !a.trim().is_empty()).ok_or_else(|| {
        bosun_core::ValidationError::new("audience", "is required: ?audience=<the relying party>")
    })?;
    if audience.len() > 255 || audience.chars().any(char::is_control) {
        return Err(bosun_core::ValidationError::new(
            "audience",
            "must be at most 255 characters without control characters",
        )
        .into());
    }
    let refused = || {
        ApiError::Unauthenticated(
            "the identity request token is not valid: it is unknown, or its phase has ended".into(),
        )
    };
    let (grant, run) = state
        .store
        .id_request_token(&bosun_core::token::hash_token(bearer.trim()))
        .await?
        .ok_or_else(refused)?;
    // Valid only while the run executes the same phase under the same lease.
    if grant.expires_at <= Utc::now()
        || run.state.is_terminal()
        || !run.leased
        || run.fencing != grant.fencing
        || run.phase != grant.phase
    {
        return Err(refused());
    }
    let repository = state
        .store
        .get_stack(&run.org, &run.stack)
        .await?
        .map(|s| s.spec.repository.to_string())
        .unwrap_or_default();
    let (kid, key) = active_key(&state).await?;
    let now = Utc::now().timestamp();
    let exp = now + state.config.oidc.token_ttl.as_secs() as i64;
    let mut jti = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut jti);
    let claims = Claims {
        iss: &state.config.public_url,
        aud: &audience,
        sub: subject(&run.org, &run.stack, grant.phase),
        iat: now,
        nbf: now,
        exp,
        jti: hex::encode(jti),
        run_id: &run.id,
        run_kind: run.kind.to_string(),
        repository,
        commit: run.commit.as_deref(),
        branch: &run.branch,
        trigger: run.trigger.to_string(),
    };
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(kid);
    let value = jsonwebtoken::encode(&header, &claims, &key)
        .map_err(|e| ApiError::Internal(format!("signing an identity token: {e}")))?;
    Ok(Json(IdToken {
        value,
        expires_at: exp,
    }))
}

/// Rotate the OIDC signing key now (server admin). The old key stays published until
/// every token it signed has expired.
#[utoipa::path(post, path = "/api/v1/oidc/rotate", tag = "identity",
    responses((status = 200, body = SigningKeys), (status = 403, body = bosun_api::ErrorBody)))]
pub async fn rotate(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<SigningKeys>, ApiError> {
    Ok(Json(service::rotate(&state, &caller).await?))
}

/// Rotates the key when it is older than `rotate_every`, and forgets keys no token can
/// need any more. Runs hourly (and at start).
pub fn rotation_duty(state: &AppState) -> crate::duties::Duty {
    let every = state.config.oidc.rotate_every;
    let hour = Duration::from_secs(3600);
    let period = if every.is_zero() {
        hour
    } else {
        every.min(hour)
    };
    crate::duties::Duty::new("oidc_key_rotation", Some(period), move |state| {
        let state = state.clone();
        Box::pin(async move {
            rotation_pass(&state, every).await?;
            Ok(None)
        })
    })
}

async fn rotation_pass(state: &AppState, every: Duration) -> Result<(), ApiError> {
    let keys = state.store.signing_keys().await?;
    let active = keys.iter().find(|k| k.retired_at.is_none());
    if !every.is_zero() {
        if let Some(a) = active {
            let age = (Utc::now() - a.created_at).to_std().unwrap_or_default();
            if age >= every {
                let _one = state.issuer.keygen.lock().await;
                service::new_key(state, "oidc.key.rotate", "system").await?;
            }
        }
    }
    state
        .store
        .prune_signing_keys(service::keep_since(state))
        .await?;
    Ok(())
}
