//! `bosun login`: people sign the CLI in at their identity provider with the device
//! authorization grant (RFC 8628), and it holds a short-lived personal token instead of a
//! long-lived one. The server begins the grant at the provider and hands the CLI the
//! device code sealed with its secrets key (so any replica can poll, and nothing is kept
//! for a login never finished); polling relays the provider's "not yet"; once the person
//! approved, the ID token is validated, the person vouched for like a console sign-in
//! (user made on first sign-in, memberships from the rules) and a provider session opened
//! holding a personal token of [`CLI_TOKEN_LIFETIME`]. A refresh asks the provider again
//! (so roles follow it) and replaces the token; ending the session revokes it.

use base64::Engine as _;
use bosun_api::{CliLoginStarted, CliLoginStatus, TokenCreated};
use bosun_core::token::TokenKind;
use bosun_store::{NewSession, SessionMethod};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::Digest as _;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::service::tokens::{new_token, to_wire, TokenOwner};
use crate::sign_in::oidc::{OidcClient, OidcError};

/// How long a CLI login's token lives before `bosun login --refresh` replaces it.
pub const CLI_TOKEN_LIFETIME: chrono::Duration = chrono::Duration::hours(1);
/// The longest `login` handle read back.
const MAX_HANDLE: usize = 8 * 1024;

/// What the CLI's opaque `login` handle holds, sealed.
#[derive(Serialize, Deserialize)]
struct Handle {
    provider: String,
    device_code: String,
    expires_at: DateTime<Utc>,
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn seal(state: &AppState, h: &Handle) -> Result<String, ApiError> {
    let plain = serde_json::to_vec(h).map_err(|e| ApiError::Internal(e.to_string()))?;
    let sealed = state
        .secrets_key
        .seal(&plain)
        .map_err(|e| ApiError::Internal(format!("cannot seal a CLI login: {e}")))?;
    Ok(format!(
        "{}.{}.{}",
        sealed.key_id,
        b64(&sealed.nonce),
        b64(&sealed.ciphertext)
    ))
}

fn open(state: &AppState, text: &str) -> Result<Handle, ApiError> {
    let bad = || {
        ApiError::Validation(bosun_core::ValidationError::new(
            "login",
            "is not a login this server began (or was begun before its secrets key changed); run bosun login again",
        ))
    };
    if text.len() > MAX_HANDLE {
        return Err(bad());
    }
    let unb64 = |s: &str| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(s)
            .ok()
    };
    let mut parts = text.split('.');
    let (Some(key_id), Some(nonce), Some(ct), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    let sealed = bosun_store::Sealed {
        key_id: key_id.to_string(),
        nonce: unb64(nonce).ok_or_else(bad)?,
        ciphertext: unb64(ct).ok_or_else(bad)?,
    };
    let plain = state.secrets_key.open(&sealed).map_err(|_| bad())?;
    serde_json::from_slice(&plain).map_err(|_| bad())
}

/// The provider a CLI login uses: the one named, or the server's first.
fn provider(state: &AppState, id: Option<&str>) -> Result<std::sync::Arc<OidcClient>, ApiError> {
    let found = match id {
        Some(id) => state.sign_in.get(id),
        None => state.sign_in.all().first().cloned(),
    };
    found.ok_or_else(|| match id {
        Some(id) => ApiError::NotFound(format!("identity provider {id:?}")),
        None => ApiError::Conflict {
            code: bosun_api::ErrorCode::InvalidState,
            message: "this server has no identity provider to log in with ([sign_in.providers]); \
                      use a personal token (bosun token create)"
                .into(),
        },
    })
}

fn provider_error(e: OidcError) -> ApiError {
    match e {
        OidcError::Refused { .. } | OidcError::InvalidToken { .. } => {
            ApiError::Unauthenticated(e.to_string())
        }
        OidcError::Provider { .. } => ApiError::Unavailable(e.to_string()),
    }
}

/// Begins a CLI login at the provider.
pub async fn start(
    state: &AppState,
    provider_id: Option<&str>,
) -> Result<CliLoginStarted, ApiError> {
    let client = provider(state, provider_id)?;
    let device = client
        .device_authorization()
        .await
        .map_err(provider_error)?;
    let expires_at = Utc::now() + chrono::Duration::seconds(device.expires_in.min(3600) as i64);
    let handle = seal(
        state,
        &Handle {
            provider: client.config.id.clone(),
            device_code: device.device_code,
            expires_at,
        },
    )?;
    Ok(CliLoginStarted {
        login: handle,
        provider: client.config.id.clone(),
        user_code: device.user_code,
        verification_uri: device.verification_uri,
        verification_uri_complete: device.verification_uri_complete,
        expires_at,
        interval: device.interval.unwrap_or(5).clamp(1, 60),
    })
}

/// Asks whether the person approved; once they have, signs them in and answers the token.
pub async fn poll(state: &AppState, login: &str) -> Result<CliLoginStatus, ApiError> {
    let handle = open(state, login)?;
    if handle.expires_at <= Utc::now() {
        return Err(ApiError::Unauthenticated(
            "this login expired before it was approved; run bosun login again".into(),
        ));
    }
    let client = provider(state, Some(&handle.provider))?;
    let tokens = match client.poll_device(&handle.device_code).await {
        Ok(t) => t,
        Err(OidcError::Refused { error, .. })
            if error == "authorization_pending" || error == "slow_down" =>
        {
            return Ok(CliLoginStatus {
                status: "pending".into(),
                interval: Some(if error == "slow_down" { 10 } else { 5 }),
                token: None,
                session: None,
            });
        }
        Err(e) => return Err(provider_error(e)),
    };
    let vouched = crate::sign_in::from_tokens(state, &client, &tokens, None)
        .await
        .map_err(ApiError::Unauthenticated)?;
    let who = vouched.who;
    let session_max = chrono::Duration::from_std(state.config.sign_in.session_max)
        .unwrap_or(chrono::Duration::days(1));
    let now = Utc::now();
    let (secret, token) = new_token(
        TokenKind::Personal,
        TokenOwner::User(String::new()),
        format!("bosun login ({})", client.config.id),
        Some(now + CLI_TOKEN_LIFETIME.min(session_max)),
    );
    let id: [u8; 9] = rand::random();
    let session_id = format!("ses-{}", hex::encode(id));
    let audit = bosun_store::Audit {
        org: None,
        actor: format!("provider:{}", client.config.id),
        token_id: None,
        action: "session.create".into(),
        target: String::new(),
        detail: json!({
            "session": session_id,
            "method": "cli",
            "provider": client.config.id,
            "subject": who.subject,
            "token": token.id,
        }),
    };
    // The CLI's session holds no cookie: its secret is one nobody has.
    let unused = crate::sign_in::oidc::random_text();
    let (_, session) = state
        .store
        .sign_in(
            &who,
            &NewSession {
                id: session_id,
                secret_hash: format!(
                    "cli:{}",
                    hex::encode(sha2::Sha256::digest(unused.as_bytes()))
                ),
                user: String::new(),
                method: SessionMethod::Provider,
                provider: Some(client.config.id.clone()),
                subject: None,
                token_id: Some(token.id.clone()),
                id_token: Some(vouched.id_token),
                refresh: vouched.refresh,
                expires_at: now + session_max,
            },
            Some(&token),
            &audit,
        )
        .await?;
    let record = state
        .store
        .get_token(&token.id)
        .await?
        .ok_or_else(|| ApiError::Internal("the CLI's token vanished".into()))?;
    Ok(CliLoginStatus {
        status: "done".into(),
        interval: None,
        token: Some(TokenCreated {
            token: to_wire(record),
            secret,
        }),
        session: Some(session.id),
    })
}

/// Replaces a CLI login's token: the provider is asked again (roles follow it; a person
/// it no longer vouches for is signed out, the token revoked) and a new token made.
pub async fn refresh(state: &AppState, caller: &Caller) -> Result<TokenCreated, ApiError> {
    let token_id = caller.0.token_id.clone();
    let grant = state
        .store
        .session_of_token(&token_id)
        .await?
        .filter(|g| g.session.method == SessionMethod::Provider)
        .ok_or_else(|| {
            ApiError::Validation(bosun_core::ValidationError::new(
                "token",
                "this token is not a bosun login's; log in with bosun login",
            ))
        })?;
    if let Some(reason) = &grant.session.ended_reason {
        return Err(ApiError::Unauthenticated(format!(
            "this login ended ({reason}); run bosun login again"
        )));
    }
    if grant.session.expires_at <= Utc::now() {
        let _ = state
            .store
            .end_session(&grant.session.id, "it reached its longest life", None)
            .await;
        return Err(ApiError::Unauthenticated(
            "this login reached its longest life; run bosun login again".into(),
        ));
    }
    if let Err(why) = crate::sign_in::refresh(state, &grant).await {
        let reason = format!("the identity provider no longer vouches for you: {why}");
        let _ = state
            .store
            .end_session(&grant.session.id, &reason, None)
            .await;
        return Err(ApiError::Unauthenticated(format!(
            "{reason}; run bosun login again"
        )));
    }
    let (secret, token) = new_token(
        TokenKind::Personal,
        TokenOwner::User(grant.user.id.clone()),
        grant
            .session
            .provider
            .as_deref()
            .map(|p| format!("bosun login ({p})"))
            .unwrap_or_else(|| "bosun login".into()),
        Some((Utc::now() + CLI_TOKEN_LIFETIME).min(grant.session.expires_at)),
    );
    let audit = caller.audit(
        None,
        "token.refresh",
        format!("token:{}", token.id),
        json!({"session": grant.session.id, "replaces": token_id}),
    );
    let record = state
        .store
        .replace_session_token(&grant.session.id, &token, &audit)
        .await?;
    Ok(TokenCreated {
        token: to_wire(record),
        secret,
    })
}
