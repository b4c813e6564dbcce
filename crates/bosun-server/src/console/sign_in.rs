//! Signing in at an identity provider from the console. `GET /login/{provider}` begins:
//! a fresh `state`, `nonce` and PKCE verifier are kept with the sign-in (the state
//! hashed), the browser is bound to it by a short-lived cookie, and it goes to the
//! provider. `GET /login/{provider}/callback` finishes: the sign-in is taken once (a
//! replayed state finds nothing), the binding cookie must match, the code is exchanged,
//! the ID token validated with the nonce sent, userinfo read, and the store links or
//! creates the user, brings their provider-given memberships in line with the rules and
//! opens the session, in one transaction. Every refusal lands on the login page, saying
//! why.
//!
//! The session cookie is `SameSite=Strict`, which a browser does not send on a navigation
//! another site began — the provider's redirect here is one. So the callback answers a
//! page of this site that moves on to `next` itself, and that navigation carries it.
//!
//! A `bosun login` through the browser comes back here too: its sign-in is bound to the
//! CLI's PKCE challenge instead of a cookie, and the callback sends the browser on to the
//! CLI's loopback, with a sealed code or the refusal (`service/cli_login.rs`).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::header::SET_COOKIE;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use bosun_store::{Audit, NewSession, SessionMethod, SignInAttempt, SignInBinding};
use chrono::Utc;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::page::{render, PageError};
use super::session::{
    cookie, login_again, new_session_secret, safe_next, see_other, session_cookie,
};
use crate::app::AppState;
use crate::error::ApiError;
use crate::sign_in::oidc::{random_text, Challenge, OidcClient};
use crate::sign_in::Way;
use crate::web_headers::secure_cookies;

/// Binds a sign-in to the browser that began it.
const BINDING_COOKIE: &str = "bosun_sign_in";
/// A sign-in must come back within this.
pub(crate) const ATTEMPT_SECONDS: i64 = 600;
/// The longest `code` or `state` read from a callback.
const MAX_PARAM: usize = 4096;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/login/{provider}", get(start))
        .route("/login/{provider}/callback", get(callback))
}

/// How a sign-in's `state` and binding cookie are kept.
fn hashed(text: &str) -> String {
    hex::encode(
        Sha256::new()
            .chain_update(b"bosun-sign-in\0")
            .chain_update(text.as_bytes())
            .finalize(),
    )
}

/// Where the provider sends the browser back to.
pub(crate) fn redirect_uri(state: &AppState, provider: &str) -> String {
    format!(
        "{}/login/{provider}/callback",
        state.config.public_url.trim_end_matches('/')
    )
}

fn binding_cookie(state: &AppState, value: &str, max_age: i64) -> Result<HeaderValue, ApiError> {
    let secure = if secure_cookies(&state.config.public_url) {
        "; Secure"
    } else {
        ""
    };
    // Lax: the provider's redirect back is a navigation another site began.
    HeaderValue::from_str(&format!(
        "{BINDING_COOKIE}={value}; Path=/login/; Max-Age={max_age}; HttpOnly; SameSite=Lax{secure}"
    ))
    .map_err(|_| ApiError::Internal("cannot build the sign-in cookie".into()))
}

#[derive(Deserialize)]
pub struct StartQuery {
    next: Option<String>,
}

/// `GET /login/{provider}`: begins a sign-in and sends the browser to the provider.
async fn start(
    State(state): State<AppState>,
    Path(provider): Path<String>,
    Query(q): Query<StartQuery>,
) -> Result<Response, PageError> {
    let next = safe_next(q.next.as_deref())?;
    let Some(client) = state.sign_in.get(&provider) else {
        return login_again(
            &state,
            next,
            format!("no identity provider {provider:?} is configured on this server"),
        );
    };
    if let Err(secs) = state.sign_in.begin_start() {
        return login_again(
            &state,
            next,
            format!("too many sign-ins are beginning on this server; try again in {secs}s"),
        );
    }
    let challenge = Challenge::new();
    let url = match client
        .authorization_url(&challenge, &redirect_uri(&state, &provider))
        .await
    {
        Ok(url) => url,
        Err(e) => {
            tracing::warn!(provider = %provider, "sign-in cannot begin: {e}");
            return login_again(&state, next, format!("cannot sign in now: {e}"));
        }
    };
    let binding = random_text();
    keep_attempt(
        &state,
        &provider,
        &challenge,
        SignInBinding::Browser {
            cookie_hash: hashed(&binding),
        },
        next,
    )
    .await?;
    let mut resp = see_other(&url)?;
    resp.headers_mut().append(
        SET_COOKIE,
        binding_cookie(&state, &binding, ATTEMPT_SECONDS)?,
    );
    Ok(resp)
}

/// Keeps a sign-in begun with `challenge` at `provider`, for its callback to take once.
pub(crate) async fn keep_attempt(
    state: &AppState,
    provider: &str,
    challenge: &Challenge,
    binding: SignInBinding,
    next: String,
) -> Result<(), ApiError> {
    state
        .store
        .begin_sign_in(&SignInAttempt {
            state_hash: hashed(&challenge.state),
            provider: provider.to_string(),
            binding,
            nonce: challenge.nonce.clone(),
            verifier: challenge.verifier.clone(),
            next,
            expires_at: Utc::now() + chrono::Duration::seconds(ATTEMPT_SECONDS),
        })
        .await?;
    Ok(())
}

#[derive(Deserialize)]
pub struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
    iss: Option<String>,
}

#[derive(askama::Template)]
#[template(path = "console/signed_in.html")]
struct SignedInPage {
    user: String,
    /// Where the page moves on to.
    to: String,
}

/// `GET /login/{provider}/callback`: finishes a sign-in (see the module's docs).
async fn callback(
    State(state): State<AppState>,
    Path(provider): Path<String>,
    headers: HeaderMap,
    Query(q): Query<CallbackQuery>,
) -> Result<Response, PageError> {
    let too_long = [&q.code, &q.state, &q.error, &q.error_description, &q.iss]
        .iter()
        .any(|p| p.as_ref().is_some_and(|v| v.len() > MAX_PARAM));
    if too_long {
        return refuse_in_browser(
            &state,
            &provider,
            "/",
            format!("the sign-in's answer has a parameter over {MAX_PARAM} bytes"),
        );
    }
    let Some(returned) = q.state.as_deref() else {
        return refuse_in_browser(
            &state,
            &provider,
            "/",
            "the identity provider came back without a state; sign in again".into(),
        );
    };
    // Taken once: from here the sign-in is spent, whatever happens next.
    let Some(attempt) = state
        .store
        .take_sign_in(&hashed(returned))
        .await
        .map_err(ApiError::from)?
    else {
        return refuse_in_browser(
            &state,
            &provider,
            "/",
            "this sign-in was already used or has expired (its state is unknown); sign in again"
                .into(),
        );
    };
    match &attempt.binding {
        SignInBinding::Browser { cookie_hash } => {
            let next = attempt.next.clone();
            let bound = cookie(&headers, BINDING_COOKIE).is_some_and(|b| {
                crate::console::constant_eq(hashed(b).as_bytes(), cookie_hash.as_bytes())
            });
            if !bound {
                state.sign_in.count(&attempt.provider, Way::Console, false);
                return refuse_in_browser(
                    &state,
                    &provider,
                    &next,
                    "this sign-in was begun in another browser (or its cookie is gone); sign in again from this one"
                        .into(),
                );
            }
            let vouched = vouch(&state, &provider, &q, &attempt).await;
            state
                .sign_in
                .count(&attempt.provider, Way::Console, vouched.is_ok());
            match vouched {
                Ok((_, vouched)) => open_console_session(&state, &provider, vouched, next).await,
                Err(why) => refuse_in_browser(&state, &provider, &next, why),
            }
        }
        SignInBinding::Cli {
            redirect_uri,
            code_challenge,
        } => {
            let vouched = vouch(&state, &provider, &q, &attempt).await;
            state
                .sign_in
                .count(&attempt.provider, Way::CliBrowser, vouched.is_ok());
            let answer = match vouched {
                Ok((client, vouched)) => {
                    let code = crate::service::cli_login::hand_off(
                        &state,
                        &client,
                        vouched,
                        code_challenge,
                    )
                    .await?;
                    ("code", code)
                }
                Err(why) => {
                    tracing::warn!(provider = %provider, "bosun login refused: {why}");
                    ("error", why)
                }
            };
            let mut to = reqwest::Url::parse(redirect_uri)
                .map_err(|e| ApiError::Internal(format!("a kept CLI redirect: {e}")))?;
            to.query_pairs_mut().append_pair(answer.0, &answer.1);
            Ok(see_other(to.as_str())?)
        }
    }
}

/// A refused sign-in in the console: the login page, saying why (the binding cookie
/// cleared).
fn refuse_in_browser(
    state: &AppState,
    provider: &str,
    next: &str,
    why: String,
) -> Result<Response, PageError> {
    tracing::warn!(provider = %provider, "sign-in refused: {why}");
    login_again(state, next.to_string(), why).map(|mut r| {
        if let Ok(v) = binding_cookie(state, "", 0) {
            r.headers_mut().append(SET_COOKIE, v);
        }
        r
    })
}

/// What the provider's answer to `attempt` makes of the person (with the provider), or
/// why it is refused.
async fn vouch(
    state: &AppState,
    provider: &str,
    q: &CallbackQuery,
    attempt: &SignInAttempt,
) -> Result<(Arc<OidcClient>, crate::sign_in::Vouched), String> {
    if attempt.provider != provider {
        return Err("this sign-in was begun with another provider".into());
    }
    if let Some(error) = &q.error {
        return Err(format!(
            "identity provider {provider} refused the sign-in: {error}{}",
            q.error_description
                .as_deref()
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        ));
    }
    let Some(client) = state.sign_in.get(provider) else {
        return Err(format!("no identity provider {provider:?} is configured"));
    };
    if let Some(iss) = &q.iss {
        if *iss != client.config.issuer {
            return Err(format!(
                "the answer names issuer {iss:?}, not this provider's {:?}",
                client.config.issuer
            ));
        }
    }
    let Some(code) = q.code.as_deref() else {
        return Err("the identity provider came back without a code".into());
    };
    let tokens = client
        .exchange_code(code, &attempt.verifier, &redirect_uri(state, provider))
        .await
        .map_err(|e| e.to_string())?;
    let vouched =
        crate::sign_in::from_tokens(state, &client, &tokens, Some(&attempt.nonce)).await?;
    Ok((client, vouched))
}

/// Signs the vouched person in to the console: the session opened, its cookie set, and a
/// page moving on to `next`.
async fn open_console_session(
    state: &AppState,
    provider: &str,
    vouched: crate::sign_in::Vouched,
    next: String,
) -> Result<Response, PageError> {
    let who = vouched.who;
    let (id, secret, hash) = new_session_secret();
    let max_age = chrono::Duration::from_std(state.config.sign_in.session_max)
        .unwrap_or(chrono::Duration::days(1));
    let audit = Audit {
        org: None,
        actor: format!("provider:{provider}"),
        token_id: None,
        action: "session.create".into(),
        target: String::new(),
        detail: serde_json::json!({
            "session": id,
            "method": "provider",
            "provider": provider,
            "subject": who.subject,
        }),
    };
    let (signed, _) = state
        .store
        .sign_in(
            &who,
            &NewSession {
                id,
                secret_hash: hash,
                user: String::new(),
                method: SessionMethod::Provider,
                provider: Some(provider.to_string()),
                subject: None,
                token_id: None,
                id_token: Some(vouched.id_token),
                refresh: vouched.refresh,
                expires_at: Utc::now() + max_age,
            },
            None,
            &audit,
        )
        .await
        .map_err(ApiError::from)?;
    let mut resp = render(
        None,
        &SignedInPage {
            user: signed.user.id,
            to: next,
        },
    )?;
    resp.headers_mut().append(
        SET_COOKIE,
        session_cookie(state, &secret, max_age.num_seconds())?,
    );
    resp.headers_mut()
        .append(SET_COOKIE, binding_cookie(state, "", 0)?);
    Ok(resp)
}
