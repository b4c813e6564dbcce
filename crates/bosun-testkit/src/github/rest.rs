//! The double's REST API, the calls Bosun's GitHub App integration makes, checked the way
//! GitHub checks them (and a little stricter where Bosun promises more, e.g. one
//! repository and `contents: read` per token):
//!
//! - `POST /app/installations/{id}/access_tokens` — App JWT; one repository; exactly
//!   `{"contents": "read"}`. Refusals are answered GitHub-style and recorded.
//! - `DELETE /installation/token` — revokes the installation token that authenticates it.
//! - `GET /repos/{owner}/{repo}/installation` — App JWT; the installation covering it.
//!
//! Every request must carry `User-Agent` (GitHub refuses requests without one) and
//! `Accept` (Bosun sends `application/vnd.github+json`); both are recorded.

use axum::body::Body;
use axum::extract::Request;
use axum::http::header::{ACCEPT, AUTHORIZATION, USER_AGENT};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{SecondsFormat, Utc};
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{json, Value};

use super::{github_error, ApiRequest, Inner, InstallationLookup, Shared, TokenRequest};

/// The most a JWT may live, as GitHub enforces: `exp - iat <= 10 minutes`.
const MAX_JWT_LIFETIME_SECS: i64 = 600;
/// Slack for an `iat` a moment ahead of our clock (same machine: rounding only).
const IAT_SLACK_SECS: i64 = 5;

/// A refused request: the status and the `message` to answer with.
struct Refusal {
    status: StatusCode,
    message: String,
}

impl Refusal {
    fn new(status: StatusCode, message: impl Into<String>) -> Refusal {
        Refusal {
            status,
            message: message.into(),
        }
    }

    fn response(&self) -> Response {
        github_error(self.status, &self.message)
    }
}

/// Serves one REST request and records it in `api_requests`.
pub(super) async fn serve(shared: &Shared, req: Request<Body>) -> Response {
    let method = req.method().as_str().to_string();
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| req.uri().path().to_string());
    let accept = header(req.headers(), ACCEPT.as_str());
    let user_agent = header(req.headers(), USER_AGENT.as_str());
    let route = req.uri().path().trim_start_matches('/').to_string();
    let segments: Vec<&str> = route.split('/').collect();

    let response = match (method.as_str(), segments.as_slice()) {
        ("POST", ["app", "installations", id, "access_tokens"]) => match id.parse::<i64>() {
            Ok(id) => access_tokens(shared, id, req).await,
            Err(_) => github_error(StatusCode::NOT_FOUND, "Not Found"),
        },
        ("DELETE", ["installation", "token"]) => revoke(shared, req.headers()),
        ("GET", ["repos", owner, repo, "installation"]) => {
            lookup(shared, owner, repo, req.headers())
        }
        _ => github_error(StatusCode::NOT_FOUND, "Not Found"),
    };

    shared.lock().api_requests.push(ApiRequest {
        method,
        path,
        accept,
        user_agent,
        status: response.status().as_u16(),
    });
    response
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// GitHub refuses a request without `User-Agent`; the double also wants `Accept`.
fn check_headers(headers: &HeaderMap) -> Result<(), Refusal> {
    if header(headers, USER_AGENT.as_str()).is_none_or(|v| v.trim().is_empty()) {
        return Err(Refusal::new(
            StatusCode::FORBIDDEN,
            "Request forbidden by administrative rules. Please make sure your request has a User-Agent header",
        ));
    }
    if header(headers, ACCEPT.as_str()).is_none_or(|v| v.trim().is_empty()) {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "Missing Accept header (send Accept: application/vnd.github+json)",
        ));
    }
    Ok(())
}

/// The credentials of `Authorization: <scheme> <credentials>` when the scheme is one of
/// `schemes` (case-insensitive).
fn credentials<'a>(headers: &'a HeaderMap, schemes: &[&str]) -> Option<&'a str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, creds) = value.split_once(' ')?;
    schemes
        .iter()
        .any(|s| s.eq_ignore_ascii_case(scheme))
        .then_some(creds.trim())
}

/// Verifies `Authorization: Bearer <App JWT>`: RS256 signed by the App's key, `iss` the
/// App id (string or integer), integer `iat` and `exp`, at most 10 minutes apart, not
/// expired, not issued in the future.
fn verify_app_jwt(inner: &Inner, headers: &HeaderMap) -> Result<(), Refusal> {
    let unauthorized = |m: String| Refusal::new(StatusCode::UNAUTHORIZED, m);
    let jwt = credentials(headers, &["Bearer"]).ok_or_else(|| {
        unauthorized(
            "A JSON web token could not be decoded (no Authorization: Bearer <JWT>)".into(),
        )
    })?;
    let mut validation = Validation::new(Algorithm::RS256);
    validation.algorithms = vec![Algorithm::RS256];
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    validation.required_spec_claims.clear();
    let claims = jsonwebtoken::decode::<Value>(jwt, &inner.app_key, &validation)
        .map_err(|e| unauthorized(format!("A JSON web token could not be decoded ({e})")))?
        .claims;

    let iss_ok = match &claims["iss"] {
        Value::String(s) => s.parse::<i64>().ok() == Some(inner.app_id),
        Value::Number(n) => n.as_i64() == Some(inner.app_id),
        _ => false,
    };
    if !iss_ok {
        return Err(unauthorized(format!(
            "'Issuer' claim ('iss') must be the App id {} (got {})",
            inner.app_id, claims["iss"]
        )));
    }
    let now = Utc::now().timestamp();
    let iat = claims["iat"]
        .as_i64()
        .filter(|iat| *iat <= now + IAT_SLACK_SECS);
    let Some(iat) = iat else {
        return Err(unauthorized(format!(
            "'Issued at' claim ('iat') must be an Integer representing a time in the past (got {})",
            claims["iat"]
        )));
    };
    let Some(exp) = claims["exp"].as_i64() else {
        return Err(unauthorized(format!(
            "'Expiration time' claim ('exp') must be an Integer (got {})",
            claims["exp"]
        )));
    };
    if exp - iat > MAX_JWT_LIFETIME_SECS {
        return Err(unauthorized(format!(
            "'Expiration time' claim ('exp') is too far in the future (exp - iat = {} s > {MAX_JWT_LIFETIME_SECS} s)",
            exp - iat
        )));
    }
    if exp <= now {
        return Err(unauthorized(
            "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires".into(),
        ));
    }
    Ok(())
}

/// `POST /app/installations/{id}/access_tokens`.
async fn access_tokens(shared: &Shared, installation: i64, req: Request<Body>) -> Response {
    let headers = req.headers().clone();
    let body = axum::body::to_bytes(req.into_body(), 1 << 20).await;
    let parsed: Result<Value, String> = match &body {
        Ok(bytes) => serde_json::from_slice(bytes).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };

    let mut record = TokenRequest {
        installation,
        repositories: Vec::new(),
        permissions: Value::Null,
        accepted: false,
        status: 0,
        refusal: None,
    };
    if let Ok(v) = &parsed {
        record.repositories = v["repositories"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|r| r.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        record.permissions = v.get("permissions").cloned().unwrap_or(Value::Null);
    }

    let mut inner = shared.lock();
    let outcome = decide_token(&inner, installation, &headers, &parsed);
    let response = match outcome {
        Ok(repository) => {
            let issued = inner.mint(installation, &repository);
            let name = repository.split_once('/').map_or("", |(_, n)| n);
            record.accepted = true;
            record.status = StatusCode::CREATED.as_u16();
            let body = json!({
                "token": issued.token,
                "expires_at": issued.expires_at.to_rfc3339_opts(SecondsFormat::Secs, true),
                "permissions": {"contents": "read"},
                "repository_selection": "selected",
                "repositories": [{
                    "name": name,
                    "full_name": repository,
                    "private": true,
                }],
            });
            (StatusCode::CREATED, axum::Json(body)).into_response()
        }
        Err(refusal) => {
            record.status = refusal.status.as_u16();
            record.refusal = Some(refusal.message.clone());
            refusal.response()
        }
    };
    inner.token_requests.push(record);
    response
}

/// Whether the token request is granted; on success, the `owner/repo` the token is for.
fn decide_token(
    inner: &Inner,
    installation: i64,
    headers: &HeaderMap,
    body: &Result<Value, String>,
) -> Result<String, Refusal> {
    check_headers(headers)?;
    verify_app_jwt(inner, headers)?;
    let inst = inner
        .installations
        .get(&installation)
        .ok_or_else(|| Refusal::new(StatusCode::NOT_FOUND, "Not Found"))?;
    let unprocessable = |m: String| Refusal::new(StatusCode::UNPROCESSABLE_ENTITY, m);
    let body = body.as_ref().map_err(|e| {
        Refusal::new(
            StatusCode::BAD_REQUEST,
            format!("Problems parsing JSON ({e})"),
        )
    })?;
    let Some(fields) = body.as_object() else {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "Problems parsing JSON (the body is not an object)",
        ));
    };
    let unexpected: Vec<&str> = fields
        .keys()
        .map(String::as_str)
        .filter(|k| !matches!(*k, "repositories" | "permissions"))
        .collect();
    if !unexpected.is_empty() {
        return Err(unprocessable(format!(
            "Unexpected field(s) {unexpected:?}: Bosun sends only repositories and permissions"
        )));
    }
    let name = match fields.get("repositories").and_then(Value::as_array) {
        Some(list) if list.len() == 1 => match list[0].as_str() {
            Some(name) => name,
            None => return Err(unprocessable("repositories must be a list of names".into())),
        },
        Some(list) => {
            return Err(unprocessable(format!(
                "repositories must name exactly one repository (got {})",
                list.len()
            )))
        }
        None => {
            return Err(unprocessable(
                "repositories is required: Bosun asks for a token scoped to one repository".into(),
            ))
        }
    };
    if name.contains('/') {
        return Err(unprocessable(format!(
            "repositories takes repository names without the owner (got {name:?})"
        )));
    }
    let Some(repository) = inst
        .repos
        .iter()
        .find(|full| full.split_once('/').is_some_and(|(_, n)| n == name))
    else {
        return Err(unprocessable(
            "There is at least one repository that does not exist or is not accessible to the parent installation.".into(),
        ));
    };
    let permissions = fields.get("permissions").cloned().unwrap_or(Value::Null);
    if permissions != json!({"contents": "read"}) {
        return Err(unprocessable(format!(
            "The permissions requested are not granted to this installation: Bosun asks for exactly {{\"contents\":\"read\"}} (got {permissions})"
        )));
    }
    Ok(repository.clone())
}

/// `DELETE /installation/token`, authenticated by the installation token itself.
fn revoke(shared: &Shared, headers: &HeaderMap) -> Response {
    if let Err(refusal) = check_headers(headers) {
        return refusal.response();
    }
    let Some(token) = credentials(headers, &["Bearer", "token"]) else {
        return github_error(StatusCode::UNAUTHORIZED, "Requires authentication");
    };
    let mut inner = shared.lock();
    if inner.live_token(token).is_none() {
        return github_error(StatusCode::UNAUTHORIZED, "Bad credentials");
    }
    for t in inner.tokens.iter_mut().filter(|t| t.token == token) {
        t.revoked = true;
    }
    StatusCode::NO_CONTENT.into_response()
}

/// `GET /repos/{owner}/{repo}/installation`, authenticated by an App JWT.
fn lookup(shared: &Shared, owner: &str, repo: &str, headers: &HeaderMap) -> Response {
    let repository = format!("{owner}/{repo}");
    let mut inner = shared.lock();
    let outcome = check_headers(headers)
        .and_then(|()| verify_app_jwt(&inner, headers))
        .and_then(|()| {
            inner
                .installations
                .iter()
                .find(|(_, inst)| inst.repos.contains(&repository))
                .map(|(id, inst)| (*id, inst.account.clone()))
                .ok_or_else(|| Refusal::new(StatusCode::NOT_FOUND, "Not Found"))
        });
    let (response, installation) = match outcome {
        Ok((id, account)) => {
            let body = json!({
                "id": id,
                "account": {"login": account, "type": "Organization"},
                "app_id": inner.app_id,
                "target_type": "Organization",
                "repository_selection": "selected",
            });
            (axum::Json(body).into_response(), Some(id))
        }
        Err(refusal) => (refusal.response(), None),
    };
    inner.installation_lookups.push(InstallationLookup {
        repository,
        installation,
        status: response.status().as_u16(),
    });
    response
}
