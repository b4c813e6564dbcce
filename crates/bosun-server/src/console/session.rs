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
use base64::Engine as _;
use bosun_api::ErrorCode;
use bosun_core::authz::{Principal, PrincipalKind};
use bosun_core::ValidationError;
use bosun_store::Sealed;
use chrono::Utc;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::page::{render, Flash, PageError};
use crate::app::AppState;
use crate::error::ApiError;
use crate::web_headers::secure_cookies;

const COOKIE_NAME: &str = "bosun_session";
/// The org whose page this browser showed last (not a secret: `/` goes back to it).
const LAST_ORG_COOKIE: &str = "bosun_org";
const FLASH_COOKIE: &str = "bosun_flash";
/// A session lasts at most this long, whatever the token's own expiry.
const SESSION_SECONDS: i64 = 12 * 3600;

/// The person looking at a console page: their principal and the CSRF token their
/// forms carry.
pub struct Session {
    pub principal: Principal,
    pub csrf: String,
    /// A message left by the action that redirected here (shown once).
    pub flash: Option<Flash>,
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
        use subtle_eq::eq;
        if eq(presented.as_bytes(), self.csrf.as_bytes()) {
            Ok(())
        } else {
            Err(PageError::Api(ApiError::Forbidden(
                "the form's CSRF token does not match this session; reload the page and try again"
                    .into(),
            )))
        }
    }
}

/// Constant-time comparison, so a CSRF guess learns nothing from timing.
mod subtle_eq {
    pub fn eq(a: &[u8], b: &[u8]) -> bool {
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
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

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn unb64(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .ok()
}

/// Seals `token` into a session cookie value.
fn seal_session(state: &AppState, token: &str) -> Result<String, ApiError> {
    let plain = format!("v1\n{}\n{token}", Utc::now().timestamp());
    let sealed = state
        .secrets_key
        .seal(plain.as_bytes())
        .map_err(|e| ApiError::Internal(format!("cannot seal a console session: {e}")))?;
    Ok(format!(
        "{}.{}.{}",
        sealed.key_id,
        b64(&sealed.nonce),
        b64(&sealed.ciphertext)
    ))
}

/// Opens a session cookie: the token inside, or why the session is over.
fn open_session(state: &AppState, value: &str) -> Result<String, &'static str> {
    let mut parts = value.split('.');
    let (Some(key_id), Some(nonce), Some(ct), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("the session cookie is malformed; log in again");
    };
    let sealed = Sealed {
        key_id: key_id.to_string(),
        nonce: unb64(nonce).ok_or("the session cookie is malformed; log in again")?,
        ciphertext: unb64(ct).ok_or("the session cookie is malformed; log in again")?,
    };
    let plain = state
        .secrets_key
        .open(&sealed)
        .map_err(|_| "the session was made with another secrets key; log in again")?;
    let plain = String::from_utf8(plain).map_err(|_| "the session cookie is malformed")?;
    let mut lines = plain.splitn(3, '\n');
    let (Some("v1"), Some(issued), Some(token)) = (lines.next(), lines.next(), lines.next()) else {
        return Err("the session cookie is malformed; log in again");
    };
    let issued: i64 = issued
        .parse()
        .map_err(|_| "the session cookie is malformed")?;
    if Utc::now().timestamp() - issued > SESSION_SECONDS {
        return Err("your session expired after 12 hours; log in again");
    }
    Ok(token.to_string())
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
        let token = open_session(state, value).map_err(|reason| PageError::Login {
            next: parts.uri.path().to_string(),
            reason: Some(reason.to_string()),
        })?;
        let principal = crate::auth::authenticate_token(state.store.as_ref(), &token)
            .await
            .map_err(|e| match e {
                ApiError::Unauthenticated(reason) => PageError::Login {
                    next: parts.uri.path().to_string(),
                    reason: Some(reason),
                },
                other => PageError::Api(other),
            })?;
        if parts.method == axum::http::Method::POST {
            check_origin(&parts.headers, &state.config.public_url)?;
        }
        let flash = cookie(&parts.headers, FLASH_COOKIE).and_then(|v| {
            let bytes = unb64(v)?;
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
        })
    }
}

/// A redirect after a form that leaves a one-time message for the next page.
pub fn redirect_with_flash(to: &str, ok: bool, text: &str) -> Response {
    let value = b64(format!("{}:{text}", if ok { "ok" } else { "error" }).as_bytes());
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
}

/// Where the browser goes after login: a path of this site, never another host. A `next`
/// that is not a plain same-site path (`//host`, `/\host`, `https://…`, spaces,
/// non-ASCII) becomes `/`; one holding a control character is refused, since browsers
/// drop tabs and newlines from a URL (`/\t/evil.example` is `//evil.example` to them) and
/// no page of the console has one in its address.
fn safe_next(next: Option<&str>) -> Result<String, ApiError> {
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

/// `GET /login`: the token form.
pub async fn login_form(Query(q): Query<LoginQuery>) -> Result<Response, PageError> {
    render(
        None,
        &LoginPage {
            next: safe_next(q.next.as_deref()).unwrap_or_else(|_| "/".to_string()),
            reason: q.reason,
        },
    )
}

#[derive(Deserialize)]
pub struct LoginForm {
    token: String,
    next: Option<String>,
}

/// `POST /login`: checks the token like the API would and starts a session.
pub async fn login(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Result<Response, PageError> {
    check_origin(&headers, &state.config.public_url)?;
    let next = safe_next(form.next.as_deref())?;
    let again = |reason: String| {
        render(
            None,
            &LoginPage {
                next: next.clone(),
                reason: Some(reason),
            },
        )
        .map(|mut r| {
            *r.status_mut() = axum::http::StatusCode::UNAUTHORIZED;
            r
        })
    };
    let token = form.token.trim();
    if token.is_empty() {
        return again("enter a personal token (bosun token create prints one)".into());
    }
    let principal = match crate::auth::authenticate_token(state.store.as_ref(), token).await {
        Ok(p) => p,
        Err(ApiError::Unauthenticated(reason)) => return again(reason),
        Err(e) => return Err(PageError::Api(e)),
    };
    if principal.user().is_none() {
        return again(format!(
            "token {} is not a personal token; the console takes personal tokens only",
            principal.token_id
        ));
    }
    let value = seal_session(&state, token)?;
    let mut resp = see_other(&next)?;
    let secure = if secure_cookies(&state.config.public_url) {
        "; Secure"
    } else {
        ""
    };
    let cookie = format!(
        "{COOKIE_NAME}={value}; Path=/; Max-Age={SESSION_SECONDS}; HttpOnly; SameSite=Strict{secure}"
    );
    let cookie = HeaderValue::from_str(&cookie)
        .map_err(|_| ApiError::Internal("cannot build the session cookie".into()))?;
    resp.headers_mut().append(SET_COOKIE, cookie);
    Ok(resp)
}

#[derive(Deserialize)]
pub struct CsrfOnly {
    pub csrf: String,
}

/// `POST /logout`: ends the session in this browser.
pub async fn logout(session: Session, Form(form): Form<CsrfOnly>) -> Result<Response, PageError> {
    session.check_csrf(&form.csrf)?;
    let mut resp = see_other("/login")?;
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
        assert!(subtle_eq::eq(b"abc", b"abc"));
        assert!(!subtle_eq::eq(b"abc", b"abd"));
        assert!(!subtle_eq::eq(b"abc", b"ab"));
    }
}
