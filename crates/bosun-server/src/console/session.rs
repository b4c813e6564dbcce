//! Console sessions: logging in with a personal token, the session cookie, and the CSRF
//! token every console form carries.
//!
//! The cookie holds the token sealed with the server's secrets key (so any replica opens
//! it, and the browser's copy reveals nothing), plus when the session began. Every request
//! authenticates the token again exactly as the API does, so a revoked or expired token
//! ends its sessions at once. The CSRF token is derived from the cookie's value, which a
//! page of another site can neither read nor send along a form it submits (the cookie is
//! `HttpOnly; SameSite=Strict`, and `Secure` when the public URL is `https`), and console
//! POSTs are also refused when their `Origin` is not the configured public URL's (the
//! `Host` header proves nothing: whoever sends the request chooses it). After login the
//! browser goes back only to a path of this site; a `next` holding a control character is
//! refused before any session is made.

use axum::extract::{Form, FromRequestParts, Query, State};
use axum::http::header::{COOKIE, LOCATION, ORIGIN, SET_COOKIE};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bosun_api::ErrorCode;
use bosun_core::authz::{Principal, PrincipalKind};
use bosun_core::ValidationError;
use bosun_store::{NewSession, SessionGrant, SessionMethod};
use chrono::Utc;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::page::{render, Flash, PageError};
use crate::app::AppState;
use crate::error::ApiError;
use crate::sign_in::RefreshError;
use crate::web_headers::secure_cookies;

const COOKIE_NAME: &str = "bosun_session";
/// The org whose page this browser showed last (not a secret: `/` goes back to it).
const LAST_ORG_COOKIE: &str = "bosun_org";
const FLASH_COOKIE: &str = "bosun_flash";
/// A session's last use is written down at most this often (the idle timeout counts
/// from it).
const TOUCH_EVERY_SECONDS: i64 = 60;

/// The person looking at a console page: their principal and the CSRF token their
/// forms carry.
pub struct Session {
    pub principal: Principal,
    pub csrf: String,
    /// A message left by the action that redirected here (shown once).
    pub flash: Option<Flash>,
    /// The session's id (`ses-…`).
    pub session_id: String,
    /// The identity provider it was signed in with, if any, and its last ID token (sent
    /// back when signing out there too).
    provider: Option<String>,
    id_token: Option<String>,
}

impl Session {
    /// The user id behind the session (console sessions are personal tokens only).
    pub fn user(&self) -> &str {
        self.principal.user().unwrap_or_default()
    }

    /// The orgs this person is a member of, sorted.
    pub fn orgs(&self) -> Vec<String> {
        match &self.principal.kind {
            PrincipalKind::User { roles, .. } => roles.keys().cloned().collect(),
            _ => Vec::new(),
        }
    }

    /// Refuses a form whose CSRF token is not this session's.
    pub fn check_csrf(&self, presented: &str) -> Result<(), PageError> {
        if constant_eq(presented.as_bytes(), self.csrf.as_bytes()) {
            Ok(())
        } else {
            Err(PageError::Api(ApiError::Forbidden(
                "the form's CSRF token does not match this session; reload the page and try again"
                    .into(),
            )))
        }
    }
}

/// Constant-time comparison, so a guess (a CSRF token, a nonce) learns nothing from
/// timing.
pub(crate) fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The value of one cookie in the request.
pub(super) fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The org this browser last looked at, as `remember_org` kept it.
pub(super) fn last_org(headers: &HeaderMap) -> Option<&str> {
    cookie(headers, LAST_ORG_COOKIE).filter(|org| plain_org(org))
}

/// An org name that goes into a cookie and a path as it is (org names are slugs).
fn plain_org(org: &str) -> bool {
    !org.is_empty()
        && org.len() <= 64
        && org
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// Middleware: a page of an org that was shown (`GET /orgs/{org}/…` answered 200)
/// remembers that org in a cookie, so `/` lands there next time. Refused pages and
/// other orgs' names are never remembered, and `/` checks membership again anyway.
pub(super) async fn remember_org(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let org = match (req.method(), req.uri().path().strip_prefix("/orgs/")) {
        (&axum::http::Method::GET, Some(rest)) => rest
            .split('/')
            .next()
            .filter(|org| plain_org(org))
            .map(str::to_string),
        _ => None,
    };
    let mut resp = next.run(req).await;
    if let Some(org) = org.filter(|_| resp.status() == StatusCode::OK) {
        let seen =
            format!("{LAST_ORG_COOKIE}={org}; Path=/; Max-Age=31536000; HttpOnly; SameSite=Strict");
        if let Ok(v) = HeaderValue::from_str(&seen) {
            resp.headers_mut().append(SET_COOKIE, v);
        }
    }
    resp
}

fn csrf_of(cookie_value: &str) -> String {
    let digest = Sha256::new()
        .chain_update(b"bosun-console-csrf\0")
        .chain_update(cookie_value.as_bytes())
        .finalize();
    hex::encode(&digest[..16])
}

/// The hash a session's cookie secret is kept as.
fn secret_hash(secret: &str) -> String {
    hex::encode(
        Sha256::new()
            .chain_update(b"bosun-console-session\0")
            .chain_update(secret.as_bytes())
            .finalize(),
    )
}

/// A new session's public id, its cookie secret and that secret's hash.
pub(crate) fn new_session_secret() -> (String, String, String) {
    let id: [u8; 9] = rand::random();
    let secret = crate::sign_in::oidc::random_text();
    let hash = secret_hash(&secret);
    (format!("ses-{}", hex::encode(id)), secret, hash)
}

/// The `Set-Cookie` that gives this browser a session, for as long as it may last.
pub(super) fn session_cookie(
    state: &AppState,
    secret: &str,
    max_age: i64,
) -> Result<HeaderValue, ApiError> {
    let secure = if secure_cookies(&state.config.public_url) {
        "; Secure"
    } else {
        ""
    };
    HeaderValue::from_str(&format!(
        "{COOKIE_NAME}={secret}; Path=/; Max-Age={}; HttpOnly; SameSite=Strict{secure}",
        max_age.max(0)
    ))
    .map_err(|_| ApiError::Internal("cannot build the session cookie".into()))
}

/// Why a session can no longer be used, when it cannot; ends it in the store (so its
/// list shows why). A provider session due for it is vouched for again first: `Ok(true)`
/// when it was (its person's roles may have changed).
async fn check_session(state: &AppState, grant: &SessionGrant) -> Result<bool, String> {
    let s = &grant.session;
    let now = Utc::now();
    if let Some(reason) = &s.ended_reason {
        return Err(format!("your session ended ({reason}); sign in again"));
    }
    if s.ended_at.is_some() {
        return Err("your session ended; sign in again".into());
    }
    let sign_in = &state.config.sign_in;
    let idle = chrono::Duration::from_std(sign_in.session_idle).unwrap_or(chrono::Duration::MAX);
    let mut refreshed = false;
    let why = if now >= s.expires_at {
        Some("it reached its longest life".to_string())
    } else if now - s.last_seen_at > idle {
        Some(format!(
            "unused for more than {}",
            humantime::format_duration(sign_in.session_idle)
        ))
    } else {
        match s.method {
            SessionMethod::Token => match &grant.token {
                None => Some("its token no longer exists".to_string()),
                Some(t) if t.revoked_at.is_some() => Some(format!("token {} was revoked", t.id)),
                Some(t) if t.expires_at.is_some_and(|e| e <= now) => {
                    Some(format!("token {} expired", t.id))
                }
                Some(_) => None,
            },
            SessionMethod::Provider => {
                let every = chrono::Duration::from_std(sign_in.refresh_every)
                    .unwrap_or(chrono::Duration::MAX);
                if now - s.refreshed_at < every {
                    None
                } else {
                    match crate::sign_in::refresh(state, grant).await {
                        Ok(()) => {
                            refreshed = true;
                            None
                        }
                        Err(RefreshError::Unavailable(why)) => {
                            tracing::warn!(session = %s.id,
                                "session not refreshed, kept until its provider answers: {why}");
                            None
                        }
                        Err(RefreshError::Refused(why)) => Some(format!(
                            "the identity provider no longer vouches for you: {why}"
                        )),
                    }
                }
            }
        }
    };
    if let Some(why) = why {
        let _ = state.store.end_session(&s.id, &why, None).await;
        return Err(format!("your session ended: {why}; sign in again"));
    }
    if now - s.last_seen_at > chrono::Duration::seconds(TOUCH_EVERY_SECONDS) {
        state
            .store
            .touch_session(&s.id, now)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(refreshed)
}

/// Refuses a POST whose `Origin` is not this server's public URL. Browsers send `Origin`
/// on every POST; a request without one is no browser's form (the CSRF token and the
/// `SameSite` cookie still stand).
fn check_origin(headers: &HeaderMap, public_url: &str) -> Result<(), PageError> {
    let Some(origin) = headers.get(ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or("(not text)");
    if same_origin(origin, public_url) {
        return Ok(());
    }
    Err(PageError::Api(ApiError::Forbidden(format!(
        "a console form was posted from {origin}, not from this server's public URL {public_url}; \
         open the console at {public_url}/ (or set --public-url to the address browsers use)"
    ))))
}

/// Scheme, host (lowercase) and port of an origin or URL.
fn origin_parts(url: &str) -> Option<(String, String, u16)> {
    let uri: Uri = url.parse().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let host = uri.host()?.to_ascii_lowercase();
    let port = uri.port_u16().or(match scheme.as_str() {
        "https" => Some(443),
        "http" => Some(80),
        _ => None,
    })?;
    Some((scheme, host, port))
}

/// Whether `origin` is the origin of `public_url`. Loopback names stand for each other
/// (a server on 127.0.0.1 opened as `localhost`): only a page of this machine has them.
fn same_origin(origin: &str, public_url: &str) -> bool {
    let (Some(o), Some(p)) = (origin_parts(origin), origin_parts(public_url)) else {
        return false;
    };
    let loopback = |h: &str| {
        h == "localhost"
            || h == "[::1]"
            || h.parse::<std::net::Ipv4Addr>()
                .is_ok_and(|a| a.is_loopback())
    };
    o.0 == p.0 && o.2 == p.2 && (o.1 == p.1 || (loopback(&o.1) && loopback(&p.1)))
}

/// A 303 to `to`, or a 400 when `to` cannot be a `Location` (a control character from a
/// decoded path segment), never a response that would carry it.
pub fn see_other(to: &str) -> Result<Response, ApiError> {
    let location = HeaderValue::from_str(to).map_err(|_| ApiError::BadRequest {
        code: ErrorCode::InvalidPath,
        message: format!("{to:?} holds characters no URL may hold"),
    })?;
    Ok((StatusCode::SEE_OTHER, [(LOCATION, location)]).into_response())
}

impl FromRequestParts<AppState> for Session {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, PageError> {
        let login = || {
            let next = parts
                .uri
                .path_and_query()
                .map(|p| p.as_str())
                .unwrap_or("/");
            PageError::Login {
                next: next.to_string(),
                reason: None,
            }
        };
        let value = cookie(&parts.headers, COOKIE_NAME).ok_or_else(login)?;
        let ended = |reason: String| PageError::Login {
            next: parts.uri.path().to_string(),
            reason: Some(reason),
        };
        let mut grant = state
            .store
            .open_session(&secret_hash(value))
            .await
            .map_err(ApiError::from)?
            .ok_or_else(|| ended("your session has ended; sign in again".into()))?;
        // A refresh may have changed the person's roles: read them as they now are.
        if check_session(state, &grant).await.map_err(ended)? {
            grant = state
                .store
                .open_session(&secret_hash(value))
                .await
                .map_err(ApiError::from)?
                .ok_or_else(|| ended("your session has ended; sign in again".into()))?;
        }
        let principal = Principal {
            token_id: grant
                .session
                .token_id
                .clone()
                .unwrap_or_else(|| grant.session.id.clone()),
            kind: PrincipalKind::User {
                roles: grant.roles,
                user: grant.user.id,
                server_admin: grant.user.server_admin,
            },
        };
        if parts.method == axum::http::Method::POST {
            check_origin(&parts.headers, &state.config.public_url)?;
        }
        let flash = cookie(&parts.headers, FLASH_COOKIE).and_then(|v| {
            let bytes = crate::b64url::decode(v)?;
            let text = String::from_utf8(bytes).ok()?;
            let (kind, text) = text.split_once(':')?;
            Some(Flash {
                ok: kind == "ok",
                text: text.to_string(),
            })
        });
        Ok(Session {
            principal,
            csrf: csrf_of(value),
            flash,
            session_id: grant.session.id,
            provider: grant.session.provider,
            id_token: grant.session.id_token,
        })
    }
}

/// A redirect after a form that leaves a one-time message for the next page.
pub fn redirect_with_flash(to: &str, ok: bool, text: &str) -> Response {
    let value =
        crate::b64url::encode(format!("{}:{text}", if ok { "ok" } else { "error" }).as_bytes());
    let mut resp = match see_other(to) {
        Ok(r) => r,
        Err(e) => return PageError::Api(e).into_response(),
    };
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{FLASH_COOKIE}={value}; Path=/; Max-Age=60; HttpOnly; SameSite=Strict"
    )) {
        resp.headers_mut().append(SET_COOKIE, v);
    }
    resp
}

#[derive(Deserialize)]
pub struct LoginQuery {
    next: Option<String>,
    reason: Option<String>,
}

#[derive(askama::Template)]
#[template(path = "console/login.html")]
struct LoginPage {
    next: String,
    reason: Option<String>,
    /// The identity providers to sign in with: (id, button label).
    providers: Vec<(String, String)>,
    token_login: bool,
}

impl LoginPage {
    fn new(state: &AppState, next: String, reason: Option<String>) -> Self {
        LoginPage {
            next,
            reason,
            providers: state
                .sign_in
                .all()
                .iter()
                .map(|p| (p.config.id.clone(), p.config.name.clone()))
                .collect(),
            token_login: state.config.sign_in.token_login,
        }
    }
}

/// The login page again, saying why, answered `401`.
pub(super) fn login_again(
    state: &AppState,
    next: String,
    reason: String,
) -> Result<Response, PageError> {
    render(None, &LoginPage::new(state, next, Some(reason))).map(|mut r| {
        *r.status_mut() = StatusCode::UNAUTHORIZED;
        r
    })
}

/// Where the browser goes after login: a path of this site, never another host. A `next`
/// that is not a plain same-site path (`//host`, `/\host`, `https://…`, spaces,
/// non-ASCII) becomes `/`; one holding a control character is refused, since browsers
/// drop tabs and newlines from a URL (`/\t/evil.example` is `//evil.example` to them) and
/// no page of the console has one in its address.
pub(super) fn safe_next(next: Option<&str>) -> Result<String, ApiError> {
    let Some(n) = next else {
        return Ok("/".to_string());
    };
    if n.chars().any(char::is_control) {
        return Err(ApiError::Validation(ValidationError::new(
            "next",
            "the page to return to after login holds a control character; \
             log in from the login page again",
        )));
    }
    let plain = n.bytes().all(|b| b.is_ascii_graphic() && b != b'\\');
    let local = n.starts_with('/') && !n.starts_with("//");
    let parsed = n
        .parse::<Uri>()
        .is_ok_and(|u| u.scheme().is_none() && u.authority().is_none());
    Ok(if plain && local && parsed {
        n.to_string()
    } else {
        "/".to_string()
    })
}

/// `GET /login`: a button per identity provider, and the token form unless token login
/// is off.
pub async fn login_form(
    State(state): State<AppState>,
    Query(q): Query<LoginQuery>,
) -> Result<Response, PageError> {
    let next = safe_next(q.next.as_deref()).unwrap_or_else(|_| "/".to_string());
    render(None, &LoginPage::new(&state, next, q.reason))
}

#[derive(Deserialize)]
pub struct LoginForm {
    token: String,
    next: Option<String>,
}

/// `POST /login`: checks the token like the API would and starts a session (break-glass
/// beside the identity providers; refused when `token_login` is off).
pub async fn login(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Result<Response, PageError> {
    check_origin(&headers, &state.config.public_url)?;
    let next = safe_next(form.next.as_deref())?;
    if !state.config.sign_in.token_login {
        return login_again(
            &state,
            next,
            "logging in with a personal token is turned off on this server (sign_in.token_login); \
             sign in with your identity provider"
                .into(),
        );
    }
    let token = form.token.trim();
    if token.is_empty() {
        return login_again(
            &state,
            next,
            "enter a personal token (bosun token create prints one)".into(),
        );
    }
    let principal = match crate::auth::authenticate_token(state.store.as_ref(), token).await {
        Ok(p) => p,
        Err(ApiError::Unauthenticated(reason)) => return login_again(&state, next, reason),
        Err(e) => return Err(PageError::Api(e)),
    };
    let Some(user) = principal.user().map(str::to_string) else {
        return login_again(
            &state,
            next,
            format!(
                "token {} is not a personal token; the console takes personal tokens only",
                principal.token_id
            ),
        );
    };
    let token_expiry = state
        .store
        .token_by_hash(&bosun_core::token::hash_token(token))
        .await
        .map_err(ApiError::from)?
        .and_then(|t| t.expires_at);
    let longest = Utc::now()
        + chrono::Duration::from_std(state.config.sign_in.session_max)
            .unwrap_or(chrono::Duration::days(1));
    let expires_at = token_expiry.map_or(longest, |t| t.min(longest));
    let (id, secret, hash) = new_session_secret();
    let audit = bosun_store::Audit {
        org: None,
        actor: format!("user:{user}"),
        token_id: Some(principal.token_id.clone()),
        action: "session.create".into(),
        target: format!("user:{user}"),
        detail: serde_json::json!({"session": id, "method": "token"}),
    };
    state
        .store
        .open_token_session(
            &NewSession {
                id,
                secret_hash: hash,
                user,
                method: SessionMethod::Token,
                provider: None,
                subject: None,
                token_id: Some(principal.token_id),
                id_token: None,
                refresh: None,
                expires_at,
            },
            &audit,
        )
        .await
        .map_err(ApiError::from)?;
    let mut resp = see_other(&next)?;
    resp.headers_mut().append(
        SET_COOKIE,
        session_cookie(&state, &secret, (expires_at - Utc::now()).num_seconds())?,
    );
    Ok(resp)
}

#[derive(askama::Template)]
#[template(path = "console/signed_out.html")]
struct SignedOutPage {
    provider: String,
    to: String,
}

#[derive(Deserialize)]
pub struct CsrfOnly {
    pub csrf: String,
}

/// `POST /logout`: ends the session, here and (for a provider's sign-in whose provider
/// offers it) at the identity provider too: the browser goes to its end-session endpoint
/// with the session's ID token, and comes back to the login page.
pub async fn logout(
    State(state): State<AppState>,
    session: Session,
    Form(form): Form<CsrfOnly>,
) -> Result<Response, PageError> {
    session.check_csrf(&form.csrf)?;
    let user = session.user().to_string();
    let audit = bosun_store::Audit {
        org: None,
        actor: format!("user:{user}"),
        token_id: Some(session.principal.token_id.clone()),
        action: "session.end".into(),
        target: format!("session:{}", session.session_id),
        detail: serde_json::json!({"reason": "signed out"}),
    };
    state
        .store
        .end_session(&session.session_id, "signed out", Some(&audit))
        .await
        .map_err(ApiError::from)?;
    let back = format!("{}/login", state.config.public_url.trim_end_matches('/'));
    let provider = session
        .provider
        .as_deref()
        .and_then(|p| state.sign_in.get(p));
    let at_provider = match &provider {
        // A provider that cannot be asked still leaves this session ended.
        Some(p) => p
            .end_session_url(session.id_token.as_deref(), &back)
            .await
            .ok()
            .flatten()
            .map(|url| (p.config.name.clone(), url)),
        None => None,
    };
    // To the provider by a page of this site moving on (the console's CSP keeps form
    // posts, and their redirects, on this site).
    let mut resp = match at_provider {
        Some((provider, to)) => render(None, &SignedOutPage { provider, to })?,
        None => see_other("/login")?,
    };
    resp.headers_mut().append(
        SET_COOKIE,
        HeaderValue::from_static("bosun_session=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"),
    );
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_stays_on_this_site() {
        let next = |n| safe_next(n).unwrap();
        assert_eq!(next(Some("/orgs/a/stacks?x=1")), "/orgs/a/stacks?x=1");
        assert_eq!(next(Some("//evil.example/")), "/");
        assert_eq!(next(Some("https://evil.example/")), "/");
        assert_eq!(next(Some("/\\evil.example")), "/");
        assert_eq!(next(Some("/a\\b")), "/");
        assert_eq!(next(Some("/ /evil.example")), "/");
        assert_eq!(next(Some("/\u{3000}/evil.example")), "/");
        assert_eq!(next(Some("evil.example")), "/");
        assert_eq!(next(None), "/");
        for bad in [
            "/\t/evil.example",
            "/\r\nSet-Cookie: x=1",
            "/\u{7f}",
            "/\u{85}",
        ] {
            assert!(safe_next(Some(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn origins_compare_with_the_public_url() {
        assert!(same_origin(
            "https://bosun.example",
            "https://bosun.example"
        ));
        assert!(same_origin(
            "https://BOSUN.example:443",
            "https://bosun.example"
        ));
        assert!(same_origin(
            "http://localhost:8080",
            "http://127.0.0.1:8080"
        ));
        assert!(!same_origin(
            "http://localhost:8081",
            "http://127.0.0.1:8080"
        ));
        assert!(!same_origin(
            "http://bosun.example",
            "https://bosun.example"
        ));
        assert!(!same_origin(
            "https://evil.example",
            "https://bosun.example"
        ));
        assert!(!same_origin("null", "https://bosun.example"));
        assert!(secure_cookies("HTTPS://bosun.example"));
        assert!(!secure_cookies("http://bosun.example"));
    }

    #[test]
    fn csrf_differs_per_session_and_compares_exactly() {
        assert_ne!(csrf_of("a"), csrf_of("b"));
        assert!(constant_eq(b"abc", b"abc"));
        assert!(!constant_eq(b"abc", b"abd"));
        assert!(!constant_eq(b"abc", b"ab"));
    }
}
