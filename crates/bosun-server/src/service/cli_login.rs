//! `bosun login`: people sign the CLI in at their identity provider, and it holds a
//! short-lived personal token instead of a long-lived one. Two ways in:
//!
//! - **The device authorization grant** (RFC 8628), where the provider offers it. The
//!   server begins the grant at the provider and hands the CLI the device code sealed with
//!   its secrets key (so any replica can poll, and nothing is kept for a login never
//!   finished); polling relays the provider's "not yet".
//! - **This machine's browser** (RFC 8252's loopback redirect), where the provider lacks
//!   the device flow or the CLI asks for it. The CLI listens on loopback and sends the PKCE
//!   challenge of a verifier only it holds; the server begins a sign-in like the console's
//!   (`console/sign_in.rs`), bound to that challenge instead of a cookie. Its callback
//!   signs the person in and sends the browser on to the CLI's loopback with a `code`: the
//!   new token sealed with the challenge, which [`exchange`] opens only for the verifier.
//!
//! Either way, once the person approved, the ID token is validated, the person vouched for
//! like a console sign-in (user made on first sign-in, memberships from the rules) and a
//! provider session opened holding a personal token of [`CLI_TOKEN_LIFETIME`]. A refresh
//! asks the provider again (so roles follow it) and replaces the token; ending the session
//! revokes it.

use bosun_api::{
    CliLoginExchange, CliLoginMethod, CliLoginStart, CliLoginStarted, CliLoginStatus, CliLoopback,
    TokenCreated,
};
use bosun_core::token::TokenKind;
use bosun_store::{NewSession, SessionMethod, SignInBinding};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::app::AppState;
use crate::auth::Caller;
use crate::b64url;
use crate::error::ApiError;
use crate::service::tokens::{new_token, to_wire, TokenOwner};
use crate::sign_in::oidc::{pkce_challenge, Challenge, OidcClient, OidcError};
use crate::sign_in::{RefreshError, Way};

/// How long a CLI login's token lives before `bosun login --refresh` replaces it.
pub const CLI_TOKEN_LIFETIME: chrono::Duration = chrono::Duration::hours(1);
/// The longest `login` handle or `code` read back.
const MAX_HANDLE: usize = 8 * 1024;
/// The longest loopback redirect a CLI may give.
const MAX_REDIRECT: usize = 256;
/// How long the CLI has to exchange the `code` its loopback received.
const HAND_OFF_FOR: chrono::Duration = chrono::Duration::minutes(2);

/// What the CLI's opaque `login` handle holds, sealed.
#[derive(Serialize, Deserialize)]
struct Handle {
    provider: String,
    device_code: String,
    expires_at: DateTime<Utc>,
}

/// What the `code` sent to the CLI's loopback holds, sealed: the token made for it, given
/// only for the verifier behind `code_challenge`.
#[derive(Serialize, Deserialize)]
struct HandOff {
    token_id: String,
    secret: String,
    session: String,
    code_challenge: String,
    expires_at: DateTime<Utc>,
}

fn seal(state: &AppState, h: &impl Serialize) -> Result<String, ApiError> {
    let plain = serde_json::to_vec(h).map_err(|e| ApiError::Internal(e.to_string()))?;
    let sealed = state
        .secrets_key
        .seal(&plain)
        .map_err(|e| ApiError::Internal(format!("cannot seal a CLI login: {e}")))?;
    Ok(format!(
        "{}.{}.{}",
        sealed.key_id,
        b64url::encode(&sealed.nonce),
        b64url::encode(&sealed.ciphertext)
    ))
}

/// Opens what [`seal`] made; anything else is refused naming `field`.
fn open<T: serde::de::DeserializeOwned>(
    state: &AppState,
    field: &'static str,
    text: &str,
) -> Result<T, ApiError> {
    let bad = || {
        ApiError::Validation(bosun_core::ValidationError::new(
            field,
            "is not a login this server began (or was begun before its secrets key changed); run bosun login again",
        ))
    };
    if text.len() > MAX_HANDLE {
        return Err(bad());
    }
    let mut parts = text.split('.');
    let (Some(key_id), Some(nonce), Some(ct), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    let sealed = bosun_store::Sealed {
        key_id: key_id.to_string(),
        nonce: b64url::decode(nonce).ok_or_else(bad)?,
        ciphertext: b64url::decode(ct).ok_or_else(bad)?,
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

/// Begins a CLI login at the provider: the device flow where it offers one (unless the
/// CLI asks for the browser), else a sign-in through the browser coming back to the CLI's
/// loopback.
pub async fn start(state: &AppState, req: &CliLoginStart) -> Result<CliLoginStarted, ApiError> {
    let client = provider(state, req.provider.as_deref())?;
    state
        .sign_in
        .begin_start()
        .map_err(|retry_after| ApiError::TooManyRequests {
            message: "too many sign-ins are beginning on this server".into(),
            retry_after,
        })?;
    let device = !req.browser && client.offers_device_flow().await.map_err(provider_error)?;
    if !device {
        let Some(loopback) = &req.loopback else {
            let why = if req.browser {
                "a login through the browser was asked for".to_string()
            } else {
                format!(
                    "identity provider {} offers no device flow",
                    client.config.id
                )
            };
            return Err(ApiError::Validation(bosun_core::ValidationError::new(
                "loopback",
                format!(
                    "{why}, so the login goes through this machine's browser: give the CLI's loopback redirect (a bosun CLI of this version does)"
                ),
            )));
        };
        return start_in_browser(state, &client, loopback).await;
    }
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
        method: CliLoginMethod::Device,
        login: Some(handle),
        provider: client.config.id.clone(),
        user_code: Some(device.user_code),
        verification_uri: device.verification_uri,
        verification_uri_complete: device.verification_uri_complete,
        expires_at,
        interval: Some(device.interval.unwrap_or(5).clamp(1, 60)),
    })
}

/// The CLI's loopback redirect, if it is one: plain http to 127.0.0.1, [::1] or
/// localhost on an explicit port, with no query, fragment or credentials.
fn loopback_redirect(text: &str) -> Result<reqwest::Url, ApiError> {
    let bad = |why: &str| {
        ApiError::Validation(bosun_core::ValidationError::new(
            "loopback.redirect_uri",
            why,
        ))
    };
    if text.len() > MAX_REDIRECT {
        return Err(bad(&format!("is longer than {MAX_REDIRECT} bytes")));
    }
    let url = reqwest::Url::parse(text).map_err(|e| bad(&format!("is no URL: {e}")))?;
    let loopback = url.host_str().is_some_and(|h| {
        h == "localhost"
            || h.trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    });
    if url.scheme() != "http" || !loopback {
        return Err(bad(
            "must be http to this machine's loopback (127.0.0.1, [::1] or localhost)",
        ));
    }
    if url.port().is_none() {
        return Err(bad("must name the port the CLI listens on"));
    }
    if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
        return Err(bad("must hold no query, fragment or credentials"));
    }
    Ok(url)
}

/// A PKCE S256 challenge: 43 characters of base64url.
fn code_challenge(text: &str) -> Result<&str, ApiError> {
    let ok = text.len() == 43
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(text)
    } else {
        Err(ApiError::Validation(bosun_core::ValidationError::new(
            "loopback.code_challenge",
            "must be a PKCE S256 challenge (43 characters of base64url)",
        )))
    }
}

async fn start_in_browser(
    state: &AppState,
    client: &OidcClient,
    loopback: &CliLoopback,
) -> Result<CliLoginStarted, ApiError> {
    let redirect = loopback_redirect(&loopback.redirect_uri)?;
    let code_challenge = code_challenge(&loopback.code_challenge)?;
    let challenge = Challenge::new();
    let url = client
        .authorization_url(
            &challenge,
            &crate::console::sign_in::redirect_uri(state, &client.config.id),
        )
        .await
        .map_err(provider_error)?;
    crate::console::sign_in::keep_attempt(
        state,
        &client.config.id,
        &challenge,
        SignInBinding::Cli {
            redirect_uri: redirect.to_string(),
            code_challenge: code_challenge.to_string(),
        },
        "/".into(),
    )
    .await?;
    Ok(CliLoginStarted {
        method: CliLoginMethod::Browser,
        login: None,
        provider: client.config.id.clone(),
        user_code: None,
        verification_uri: url,
        verification_uri_complete: None,
        expires_at: Utc::now()
            + chrono::Duration::seconds(crate::console::sign_in::ATTEMPT_SECONDS),
        interval: None,
    })
}

/// Asks whether the person approved; once they have, signs them in and answers the token.
pub async fn poll(state: &AppState, login: &str) -> Result<CliLoginStatus, ApiError> {
    let handle: Handle = open(state, "login", login)?;
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
        Err(e) => {
            state.sign_in.count(&handle.provider, Way::CliDevice, false);
            return Err(provider_error(e));
        }
    };
    let vouched = crate::sign_in::from_tokens(state, &client, &tokens, None).await;
    state
        .sign_in
        .count(&handle.provider, Way::CliDevice, vouched.is_ok());
    let vouched = vouched.map_err(ApiError::Unauthenticated)?;
    let (token, session) = open_session(state, &client, vouched).await?;
    Ok(CliLoginStatus {
        status: "done".into(),
        interval: None,
        token: Some(token),
        session: Some(session),
    })
}

/// Signs the vouched person in for the CLI: a provider session holding a new short-lived
/// personal token; the token (with its secret) and the session's id.
async fn open_session(
    state: &AppState,
    client: &OidcClient,
    vouched: crate::sign_in::Vouched,
) -> Result<(TokenCreated, String), ApiError> {
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
    // The CLI's session opens by no cookie: its secret is dropped, kept by no one.
    let (session_id, _, secret_hash) = crate::console::session::new_session_secret();
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
    let (_, session) = state
        .store
        .sign_in(
            &who,
            &NewSession {
                id: session_id,
                secret_hash,
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
    Ok((
        TokenCreated {
            token: to_wire(record),
            secret,
        },
        session.id,
    ))
}

/// For a login through the browser: signs the vouched person in for the CLI and answers
/// the `code` the browser carries to the CLI's loopback (the token sealed with the CLI's
/// challenge, for a short while).
pub async fn hand_off(
    state: &AppState,
    client: &OidcClient,
    vouched: crate::sign_in::Vouched,
    code_challenge: &str,
) -> Result<String, ApiError> {
    let (created, session) = open_session(state, client, vouched).await?;
    seal(
        state,
        &HandOff {
            token_id: created.token.id,
            secret: created.secret,
            session,
            code_challenge: code_challenge.to_string(),
            expires_at: Utc::now() + HAND_OFF_FOR,
        },
    )
}

/// Gives the CLI the token its loopback's `code` holds, for the verifier behind the
/// challenge it began with.
pub async fn exchange(
    state: &AppState,
    req: &CliLoginExchange,
) -> Result<CliLoginStatus, ApiError> {
    let hand_off: HandOff = open(state, "code", &req.code)?;
    if hand_off.expires_at <= Utc::now() {
        return Err(ApiError::Unauthenticated(
            "this login's code expired before the CLI exchanged it; run bosun login again".into(),
        ));
    }
    let answered = req.verifier.len() <= 128
        && crate::console::constant_eq(
            pkce_challenge(&req.verifier).as_bytes(),
            hand_off.code_challenge.as_bytes(),
        );
    if !answered {
        return Err(ApiError::Unauthenticated(
            "the verifier does not answer the challenge this login began with".into(),
        ));
    }
    let record = state
        .store
        .get_token(&hand_off.token_id)
        .await?
        .filter(|t| t.revoked_at.is_none())
        .ok_or_else(|| {
            ApiError::Unauthenticated(
                "this login's token was revoked before the CLI took it; run bosun login again"
                    .into(),
            )
        })?;
    Ok(CliLoginStatus {
        status: "done".into(),
        interval: None,
        token: Some(TokenCreated {
            token: to_wire(record),
            secret: hand_off.secret,
        }),
        session: Some(hand_off.session),
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
    if let Err(e) = crate::sign_in::refresh(state, &grant).await {
        let why = match e {
            RefreshError::Unavailable(why) => {
                return Err(ApiError::Unavailable(format!(
                    "{why}; your login stays as it is: try again shortly"
                )))
            }
            RefreshError::Refused(why) => why,
        };
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
