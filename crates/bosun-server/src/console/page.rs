//! What every console page shares to be shown: rendering a page, the page error (the
//! login redirect or the API's own error, as an error page), the one-time message a form
//! leaves, and query encoding — a leaf the session and the pages both use.

use axum::http::header::{CACHE_CONTROL, SET_COOKIE};
use axum::http::HeaderValue;
use axum::response::{Html, IntoResponse, Redirect, Response};

use crate::error::ApiError;

/// Why a page was not shown: not logged in (→ the login page), or the API's own error.
#[derive(Debug)]
pub enum PageError {
    Login {
        next: String,
        reason: Option<String>,
    },
    Api(ApiError),
}

impl From<ApiError> for PageError {
    fn from(e: ApiError) -> Self {
        PageError::Api(e)
    }
}

impl From<bosun_store::StoreError> for PageError {
    fn from(e: bosun_store::StoreError) -> Self {
        PageError::Api(e.into())
    }
}

#[derive(askama::Template)]
#[template(path = "console/error.html")]
struct ErrorPage {
    status: u16,
    reason: String,
    code: String,
    message: String,
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        match self {
            PageError::Login { next, reason } => {
                let mut to = format!("/login?next={}", urlencode(&next));
                if let Some(r) = reason {
                    to.push_str(&format!("&reason={}", urlencode(&r)));
                }
                Redirect::to(&to).into_response()
            }
            PageError::Api(e) => {
                let status = e.status();
                if status.is_server_error() {
                    tracing::error!(error = %e, "console page failed");
                }
                let body = e.body().error;
                let page = ErrorPage {
                    status: status.as_u16(),
                    reason: status.canonical_reason().unwrap_or("Error").to_string(),
                    code: body.code.to_string(),
                    message: body.message,
                };
                match askama::Template::render(&page) {
                    Ok(html) => (status, Html(html)).into_response(),
                    Err(_) => (status, page.message).into_response(),
                }
            }
        }
    }
}

/// Why an action was refused, in the API's own words (for a form's one-time message).
pub fn refusal(e: PageError) -> String {
    match e {
        PageError::Api(e) => e.body().error.message,
        PageError::Login { reason, .. } => {
            reason.unwrap_or_else(|| "your session is over; log in again".into())
        }
    }
}

/// Percent-encodes a query value.
pub fn urlencode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Renders a page; a page shown after a form clears that form's one-time message.
pub fn render<T: askama::Template>(
    flash_shown: Option<&Flash>,
    page: &T,
) -> Result<Response, PageError> {
    let html = page
        .render()
        .map_err(|e| ApiError::Internal(format!("cannot render a console page: {e}")))?;
    let mut resp = Html(html).into_response();
    let headers = resp.headers_mut();
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if flash_shown.is_some() {
        headers.append(SET_COOKIE, clear_flash());
    }
    Ok(resp)
}

/// A one-time message after a form: what happened, or why it was refused.
#[derive(Debug, Clone)]
pub struct Flash {
    pub ok: bool,
    pub text: String,
}

/// The header that clears the one-time message once a page has shown it.
pub fn clear_flash() -> HeaderValue {
    HeaderValue::from_static("bosun_flash=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict")
}
