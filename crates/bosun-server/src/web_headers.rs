//! The headers every response carries for browsers: a Content-Security-Policy that lets
//! the console run only its own script and stylesheet and never be framed, no MIME
//! sniffing, no referrer to other sites, and — when the public URL is `https` — HSTS and
//! `Secure` on every cookie.
//!
//! They are set once here, around the whole router, so a console page, an error page
//! and an API reply cannot differ; a handler that sets one of them itself keeps its own.

use axum::extract::{Request, State};
use axum::http::header::{
    CONTENT_SECURITY_POLICY, REFERRER_POLICY, SET_COOKIE, STRICT_TRANSPORT_SECURITY,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

use crate::app::AppState;

/// The console's scripts and styles are files under `/console/static/` (no inline code,
/// no `style=` attributes, no event-handler attributes); its live logs and refreshes
/// fetch from this origin; its forms post to it.
pub const CONTENT_SECURITY_POLICY_VALUE: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; \
     frame-ancestors 'none'; base-uri 'none'";

/// `same-origin`, not `no-referrer`: under `no-referrer` browsers send `Origin: null` on
/// a form's POST, which the console's CSRF check refuses.
const REFERRER: &str = "same-origin";

/// One year, the usual HSTS lifetime; not `includeSubDomains` (other hosts are not ours).
const HSTS: &str = "max-age=31536000";

/// Whether cookies get `Secure` (and responses HSTS): only when browsers reach the server
/// over https — a `Secure` cookie is never sent back over plain http.
pub fn secure_cookies(public_url: &str) -> bool {
    public_url
        .get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
}

/// The middleware: adds what the response does not already say.
pub async fn security_headers(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let https = secure_cookies(&state.config.public_url);
    let mut resp = next.run(req).await;
    let headers = resp.headers_mut();
    let fixed: [(HeaderName, &'static str); 4] = [
        (CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY_VALUE),
        (X_FRAME_OPTIONS, "DENY"),
        (X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (REFERRER_POLICY, REFERRER),
    ];
    for (name, value) in fixed {
        if !headers.contains_key(&name) {
            headers.insert(name, HeaderValue::from_static(value));
        }
    }
    if https {
        if !headers.contains_key(STRICT_TRANSPORT_SECURITY) {
            headers.insert(STRICT_TRANSPORT_SECURITY, HeaderValue::from_static(HSTS));
        }
        secure_every_cookie(headers);
    }
    resp
}

/// Adds `Secure` to each `Set-Cookie` without it (the one-time form messages and the
/// cookies that clear a session are set by many console handlers).
fn secure_every_cookie(headers: &mut HeaderMap) {
    let cookies: Vec<HeaderValue> = headers.get_all(SET_COOKIE).iter().cloned().collect();
    if cookies.is_empty() {
        return;
    }
    headers.remove(SET_COOKIE);
    for cookie in cookies {
        let secured = cookie.to_str().ok().and_then(|text| {
            let has_secure = text
                .split(';')
                .any(|attr| attr.trim().eq_ignore_ascii_case("secure"));
            if has_secure {
                None
            } else {
                HeaderValue::from_str(&format!("{text}; Secure")).ok()
            }
        });
        headers.append(SET_COOKIE, secured.unwrap_or(cookie));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn cookies_gain_secure_once() {
        let mut h = HeaderMap::new();
        h.append(
            SET_COOKIE,
            HeaderValue::from_static("a=1; Path=/; HttpOnly"),
        );
        h.append(SET_COOKIE, HeaderValue::from_static("b=2; Path=/; Secure"));
        secure_every_cookie(&mut h);
        let all: Vec<&str> = h
            .get_all(SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(
            all,
            ["a=1; Path=/; HttpOnly; Secure", "b=2; Path=/; Secure"]
        );
    }
}
