//! The double's REST API gate and the App's own calls. Every REST request is counted for
//! `x-ratelimit-*` (every answer carries them) and checked against GitHub's OpenAPI
//! description (`contract.rs`), a violation recorded; then the first of these answers it:
//! an armed [`Fault`] that matches; `400 Problems parsing JSON` for a body that is not
//! JSON; the violation (422, or 404 for a route GitHub does not have); a refusal for a
//! missing `User-Agent` (GitHub's rule) or `Accept` (Bosun sends
//! `application/vnd.github+json`). Only a request none of them answers is routed:
//!
//! - `POST /app/installations/{id}/access_tokens` — App JWT; exactly one repository of the
//!   installation (Bosun's promise; `repository_ids` refused); a non-empty `permissions`,
//!   each granted to the installation (`write` covers `read`), as GitHub checks.
//! - `DELETE /installation/token` — revokes the installation token that authenticates it.
//! - `GET /repos/{owner}/{repo}/installation` — App JWT; the installation covering it.
//! - check runs (`checks.rs`) and issue comments (`comments.rs`), with installation tokens.
//!
//! Refusals are answered GitHub-style; token requests and installation lookups are
//! recorded whether or not they reached their handler.

use axum::body::Body;
use axum::extract::Request;
use axum::http::header::{ACCEPT, AUTHORIZATION, USER_AGENT};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, SecondsFormat, Utc};
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{json, Map, Value};

use super::contract::{Violation, ViolationKind};
use super::{
    checks, comments, ApiRequest, Fault, Inner, InstallationLookup, IssuedToken, Shared,
    TokenRequest,
};

/// The most a JWT may live, as GitHub enforces: `exp - iat <= 10 minutes`.
const MAX_JWT_LIFETIME_SECS: i64 = 600;
/// Slack for an `iat` a moment ahead of our clock (same machine: rounding only).
const IAT_SLACK_SECS: i64 = 5;
/// GitHub's primary rate limit for an installation: requests per hour.
const RATE_LIMIT: u64 = 5000;
/// The largest body the double reads.
const MAX_BODY: usize = 8 << 20;
const DOCS: &str = "https://docs.github.com/rest";
const RATE_LIMIT_DOCS: &str =
    "https://docs.github.com/rest/using-the-rest-api/rate-limits-for-the-rest-api";

/// A refused request: the status, the `message` to answer with, and what else to send.
pub(super) struct Refusal {
    pub(super) status: StatusCode,
    pub(super) message: String,
    documentation_url: Option<String>,
    /// A whole body instead of the usual `{message, documentation_url, status}`.
    body: Option<Value>,
    headers: Vec<(&'static str, String)>,
}

impl Refusal {
    pub(super) fn new(status: StatusCode, message: impl Into<String>) -> Refusal {
        Refusal {
            status,
            message: message.into(),
            documentation_url: None,
            body: None,
            headers: Vec::new(),
        }
    }

    /// `404 Not Found`.
    pub(super) fn not_found() -> Refusal {
        Refusal::new(StatusCode::NOT_FOUND, "Not Found")
    }

    /// `422 {"message": "Invalid request.\n\n<what>"}`, GitHub's answer to a body its
    /// schema (or a rule beside it) refuses.
    pub(super) fn invalid(what: impl std::fmt::Display) -> Refusal {
        Refusal::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("Invalid request.\n\n{what}"),
        )
    }

    /// `422 {"message": "Validation Failed", "errors": [error]}`.
    pub(super) fn validation_failed(error: Value) -> Refusal {
        let mut r = Refusal::new(StatusCode::UNPROCESSABLE_ENTITY, "Validation Failed");
        r.body = Some(json!({
            "message": "Validation Failed",
            "errors": [error],
            "documentation_url": DOCS,
            "status": "422",
        }));
        r
    }

    pub(super) fn response(&self) -> Response {
        let body = self.body.clone().unwrap_or_else(|| {
            json!({
                "message": self.message,
                "documentation_url": self.documentation_url.as_deref().unwrap_or(DOCS),
                "status": self.status.as_u16().to_string(),
            })
        });
        let mut response = (self.status, axum::Json(body)).into_response();
        for (name, value) in &self.headers {
            if let Ok(value) = HeaderValue::from_str(value) {
                response
                    .headers_mut()
                    .insert(HeaderName::from_static(name), value);
            }
        }
        response
    }
}

/// One REST request as the handlers see it: its body already read and parsed.
pub(super) struct Call {
    pub(super) method: String,
    /// The path without the query.
    pub(super) path: String,
    pub(super) query: Option<String>,
    pub(super) headers: HeaderMap,
    /// The body, when there was one (the gate refuses one that is not JSON).
    pub(super) body: Option<Value>,
}

impl Call {
    /// The value of query parameter `name`, if given.
    pub(super) fn query_param(&self, name: &str) -> Option<&str> {
        self.query.as_deref()?.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (k == name).then_some(v)
        })
    }

    /// The body's fields; a missing body or one that is not an object is GitHub's 422.
    pub(super) fn fields(&self) -> Result<&Map<String, Value>, Refusal> {
        self.body
            .as_ref()
            .and_then(Value::as_object)
            .ok_or_else(|| Refusal::invalid("The request body must be a JSON object."))
    }
}

/// A JSON answer.
pub(super) fn json(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

/// GitHub's timestamp form, `2024-01-02T03:04:05Z`.
pub(super) fn timestamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Serves one REST request through the gate (see the module docs) and records it in
/// `api_requests`.
pub(super) async fn serve(shared: &Shared, req: Request<Body>) -> Response {
    let (parts, body) = req.into_parts();
    let method = parts.method.as_str().to_string();
    let path = parts.uri.path().to_string();
    let path_and_query = parts
        .uri
        .path_and_query()
        .map_or_else(|| path.clone(), |p| p.as_str().to_string());
    let headers = parts.headers;
    let accept = header(&headers, ACCEPT.as_str());
    let user_agent = header(&headers, USER_AGENT.as_str());
    let token = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .map(|(_, creds)| creds.trim().to_string());
    let (bytes, too_large) = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(bytes) => (bytes, false),
        Err(_) => (Default::default(), true),
    };
    let parsed: Result<Option<Value>, String> = if bytes.trim_ascii().is_empty() {
        Ok(None)
    } else {
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| e.to_string())
    };
    // Outside the lock: the first request of an operation compiles its schema.
    let contract = shared.lock().contract;
    let checked = contract.map(|c| c.check_request(&method, &path, &bytes));
    let call = Call {
        method,
        path,
        query: parts.uri.query().map(str::to_string),
        headers,
        body: parsed.clone().ok().flatten(),
    };

    let (refused, used, reset, request_id) = {
        let mut inner = shared.lock();
        inner.requests_served += 1;
        let request_id = format!(
            "B05E:{:04X}:{:08X}",
            std::process::id() & 0xFFFF,
            inner.requests_served
        );
        let (used, reset) = inner.count_request(token.as_deref().unwrap_or(""));
        if let Some(Err(violation)) = &checked {
            let line = format!("{} {}: {}", call.method, call.path, violation.message);
            inner.contract_violations.push(line);
        }
        let refused = if let Some(fault) = inner.take_fault(&call.method, &path_and_query) {
            Some(fault_refusal(&inner, &fault, token.as_deref(), &request_id))
        } else if too_large {
            Some(Refusal::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("The request body is larger than the double reads ({MAX_BODY} bytes)"),
            ))
        } else if let Err(e) = &parsed {
            Some(Refusal::new(
                StatusCode::BAD_REQUEST,
                format!("Problems parsing JSON ({e})"),
            ))
        } else if let Some(Err(violation)) = &checked {
            Some(violation_refusal(violation))
        } else {
            check_headers(&call.headers).err()
        };
        if let Some(refusal) = &refused {
            record_unreached(&mut inner, &call, refusal);
        }
        (refused, used, reset, request_id)
    };

    let mut response = match refused {
        Some(refusal) => refusal.response(),
        None => route(shared, &call),
    };
    let rate_headers = [
        ("x-ratelimit-limit", RATE_LIMIT.to_string()),
        (
            "x-ratelimit-remaining",
            RATE_LIMIT.saturating_sub(used).to_string(),
        ),
        ("x-ratelimit-reset", reset.to_string()),
        ("x-ratelimit-used", used.to_string()),
        ("x-ratelimit-resource", "core".to_string()),
        ("x-github-request-id", request_id),
    ];
    for (name, value) in rate_headers {
        let name = HeaderName::from_static(name);
        if !response.headers().contains_key(&name) {
            if let Ok(value) = HeaderValue::from_str(&value) {
                response.headers_mut().insert(name, value);
            }
        }
    }

    shared.lock().api_requests.push(ApiRequest {
        method: call.method,
        path: path_and_query,
        accept,
        user_agent,
        token,
        body: call.body,
        operation: checked.and_then(|c| c.ok()).map(|m| m.operation_id),
        status: response.status().as_u16(),
    });
    response
}

/// The request routed to its handler (the gate passed).
fn route(shared: &Shared, call: &Call) -> Response {
    let route = call.path.trim_start_matches('/');
    let segments: Vec<&str> = route.split('/').collect();
    let id = |s: &str| s.parse::<i64>().ok();
    let outcome = match (call.method.as_str(), segments.as_slice()) {
        ("POST", ["app", "installations", installation, "access_tokens"]) => {
            match id(installation) {
                Some(installation) => return access_tokens(shared, installation, call),
                None => Err(Refusal::not_found()),
            }
        }
        ("DELETE", ["installation", "token"]) => revoke(shared, call),
        ("GET", ["repos", owner, repo, "installation"]) => {
            return lookup(shared, owner, repo, call)
        }
        ("POST", ["repos", owner, repo, "check-runs"]) => {
            checks::create(&mut shared.lock(), owner, repo, call)
        }
        ("GET" | "PATCH", ["repos", owner, repo, "check-runs", run]) => match id(run) {
            Some(run) if call.method == "GET" => {
                checks::get(&shared.lock(), owner, repo, run, call)
            }
            Some(run) => checks::update(&mut shared.lock(), owner, repo, run, call),
            None => Err(Refusal::not_found()),
        },
        ("GET" | "PATCH", ["repos", owner, repo, "issues", "comments", comment]) => {
            match id(comment) {
                Some(comment) if call.method == "GET" => {
                    comments::get(&shared.lock(), owner, repo, comment, call)
                }
                Some(comment) => comments::update(&mut shared.lock(), owner, repo, comment, call),
                None => Err(Refusal::not_found()),
            }
        }
        ("GET" | "POST", ["repos", owner, repo, "issues", issue, "comments"]) => {
            match issue.parse::<u64>() {
                Ok(issue) if call.method == "GET" => {
                    comments::list(&shared.lock(), owner, repo, issue, call)
                }
                Ok(issue) => comments::create(&mut shared.lock(), owner, repo, issue, call),
                Err(_) => Err(Refusal::not_found()),
            }
        }
        _ => Err(Refusal::not_found()),
    };
    outcome.unwrap_or_else(|refusal| refusal.response())
}

/// How GitHub answers a request that does not conform to its description.
fn violation_refusal(violation: &Violation) -> Refusal {
    let mut refusal = match violation.kind {
        ViolationKind::NoRoute => Refusal::not_found(),
        ViolationKind::NotJson => Refusal::new(
            StatusCode::BAD_REQUEST,
            format!("Problems parsing JSON ({})", violation.message),
        ),
        ViolationKind::Body => Refusal::invalid(&violation.message),
    };
    refusal.documentation_url = violation.documentation_url.clone();
    refusal
}

/// The answer of an armed fault.
fn fault_refusal(inner: &Inner, fault: &Fault, token: Option<&str>, request_id: &str) -> Refusal {
    match fault {
        Fault::SecondaryRateLimit { retry_after_secs } => {
            let mut r = Refusal::new(
                StatusCode::FORBIDDEN,
                format!(
                    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. If you reach out to GitHub Support for help, please include the request ID {request_id}."
                ),
            );
            r.documentation_url = Some(format!("{RATE_LIMIT_DOCS}#about-secondary-rate-limits"));
            r.headers
                .push(("retry-after", retry_after_secs.to_string()));
            r
        }
        Fault::PrimaryRateLimit { reset_in_secs } => {
            let now = Utc::now();
            let reset = now.timestamp() + i64::try_from(*reset_in_secs).unwrap_or(i64::MAX / 2);
            let whom = match token.and_then(|t| inner.live_token(t)) {
                Some(issued) => format!("installation ID {}", issued.installation),
                None => "127.0.0.1".to_string(),
            };
            let mut r = Refusal::new(
                StatusCode::FORBIDDEN,
                format!(
                    "API rate limit exceeded for {whom}. If you reach out to GitHub Support for help, please include the request ID {request_id} and timestamp {} UTC.",
                    now.format("%Y-%m-%d %H:%M:%S")
                ),
            );
            r.documentation_url = Some(format!("{RATE_LIMIT_DOCS}#about-primary-rate-limits"));
            r.headers.push(("x-ratelimit-remaining", "0".into()));
            r.headers.push(("x-ratelimit-used", RATE_LIMIT.to_string()));
            r.headers.push(("x-ratelimit-reset", reset.to_string()));
            r
        }
        Fault::ServerError => {
            let mut r = Refusal::new(StatusCode::BAD_GATEWAY, "Server Error");
            r.body = Some(json!({"message": "Server Error"}));
            r
        }
    }
}

/// Records a token request or installation lookup refused before its handler.
fn record_unreached(inner: &mut Inner, call: &Call, refusal: &Refusal) {
    let route = call.path.trim_start_matches('/');
    let segments: Vec<&str> = route.split('/').collect();
    match (call.method.as_str(), segments.as_slice()) {
        ("POST", ["app", "installations", installation, "access_tokens"]) => {
            if let Ok(installation) = installation.parse() {
                let mut record = token_request(installation, call.body.as_ref());
                record.status = refusal.status.as_u16();
                record.refusal = Some(refusal.message.clone());
                inner.token_requests.push(record);
            }
        }
        ("GET", ["repos", owner, repo, "installation"]) => {
            inner.installation_lookups.push(InstallationLookup {
                repository: format!("{owner}/{repo}"),
                installation: None,
                status: refusal.status.as_u16(),
            });
        }
        _ => {}
    }
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

/// Whether a granted permission level covers a wanted one (`write` covers `read`).
pub(super) fn covers(granted: &str, wanted: &str) -> bool {
    let rank = |level: &str| match level {
        "read" => 1,
        "write" => 2,
        "admin" => 3,
        _ => 0,
    };
    rank(wanted) > 0 && rank(granted) >= rank(wanted)
}

/// The live installation token authenticating `call` (`Authorization: token ghs_…` or
/// `Bearer ghs_…`) for `repository`, carrying one of `permissions` at `level` or better.
/// No or an unknown, expired or revoked token: 401 `Bad credentials`; a token for another
/// repository or without the permission: 403 `Resource not accessible by integration`.
pub(super) fn installation_token<'a>(
    inner: &'a Inner,
    call: &Call,
    repository: &str,
    permissions: &[&str],
    level: &str,
) -> Result<&'a IssuedToken, Refusal> {
    let bad = || Refusal::new(StatusCode::UNAUTHORIZED, "Bad credentials");
    let token = credentials(&call.headers, &["token", "Bearer"]).ok_or_else(bad)?;
    let issued = inner.live_token(token).ok_or_else(bad)?;
    let granted = permissions.iter().any(|p| {
        issued.permissions[*p]
            .as_str()
            .is_some_and(|g| covers(g, level))
    });
    if !issued.repository.eq_ignore_ascii_case(repository) || !granted {
        return Err(Refusal::new(
            StatusCode::FORBIDDEN,
            "Resource not accessible by integration",
        ));
    }
    Ok(issued)
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

/// The record of a token request, from its body (if any).
fn token_request(installation: i64, body: Option<&Value>) -> TokenRequest {
    let repositories = body
        .and_then(|v| v["repositories"].as_array())
        .map(|a| {
            a.iter()
                .filter_map(|r| r.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    TokenRequest {
        installation,
        repositories,
        permissions: body
            .and_then(|v| v.get("permissions"))
            .cloned()
            .unwrap_or(Value::Null),
        accepted: false,
        status: 0,
        refusal: None,
    }
}

/// `POST /app/installations/{id}/access_tokens`.
fn access_tokens(shared: &Shared, installation: i64, call: &Call) -> Response {
    let mut record = token_request(installation, call.body.as_ref());
    let mut inner = shared.lock();
    let outcome = decide_token(&inner, installation, &call.headers, call.body.as_ref());
    let response = match outcome {
        Ok((repository, permissions)) => {
            let issued = inner.mint(installation, &repository, permissions);
            let name = repository.split_once('/').map_or("", |(_, n)| n);
            record.accepted = true;
            record.status = StatusCode::CREATED.as_u16();
            let body = json!({
                "token": issued.token,
                "expires_at": timestamp(issued.expires_at),
                "permissions": issued.permissions,
                "repository_selection": "selected",
                "repositories": [{
                    "name": name,
                    "full_name": repository,
                    "private": true,
                }],
            });
            json(StatusCode::CREATED, body)
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

/// Whether the token request is granted; on success, the `owner/repo` the token is for
/// and the permissions it carries.
fn decide_token(
    inner: &Inner,
    installation: i64,
    headers: &HeaderMap,
    body: Option<&Value>,
) -> Result<(String, Value), Refusal> {
    verify_app_jwt(inner, headers)?;
    let inst = inner
        .installations
        .get(&installation)
        .ok_or_else(Refusal::not_found)?;
    let unprocessable = |m: String| Refusal::new(StatusCode::UNPROCESSABLE_ENTITY, m);
    let empty = Map::new();
    let fields = match body {
        None => &empty,
        Some(Value::Object(fields)) => fields,
        Some(_) => {
            return Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                "Problems parsing JSON (the body is not an object)",
            ))
        }
    };
    if fields.contains_key("repository_ids") {
        return Err(unprocessable(
            "repository_ids: Bosun names its one repository in repositories".into(),
        ));
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
    let not_granted =
        || unprocessable("The permissions requested are not granted to this installation.".into());
    let requested = fields
        .get("permissions")
        .and_then(Value::as_object)
        .filter(|p| !p.is_empty())
        .ok_or_else(not_granted)?;
    for (permission, level) in requested {
        let granted = inst.permissions[permission.as_str()].as_str();
        let wanted = level.as_str();
        if !granted.zip(wanted).is_some_and(|(g, w)| covers(g, w)) {
            return Err(not_granted());
        }
    }
    Ok((repository.clone(), Value::Object(requested.clone())))
}

/// `DELETE /installation/token`, authenticated by the installation token itself.
fn revoke(shared: &Shared, call: &Call) -> Result<Response, Refusal> {
    let token = credentials(&call.headers, &["Bearer", "token"])
        .ok_or_else(|| Refusal::new(StatusCode::UNAUTHORIZED, "Requires authentication"))?;
    let mut inner = shared.lock();
    if inner.live_token(token).is_none() {
        return Err(Refusal::new(StatusCode::UNAUTHORIZED, "Bad credentials"));
    }
    for t in inner.tokens.iter_mut().filter(|t| t.token == token) {
        t.revoked = true;
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET /repos/{owner}/{repo}/installation`, authenticated by an App JWT.
fn lookup(shared: &Shared, owner: &str, repo: &str, call: &Call) -> Response {
    let repository = format!("{owner}/{repo}");
    let mut inner = shared.lock();
    let outcome = verify_app_jwt(&inner, &call.headers).and_then(|()| {
        inner
            .installations
            .iter()
            .find(|(_, inst)| inst.repos.contains(&repository))
            .map(|(id, inst)| (*id, inst.account.clone()))
            .ok_or_else(Refusal::not_found)
    });
    let (response, installation) = match outcome {
        Ok((id, account)) => {
            let body = json!({
                "id": id,
                "account": {"login": account, "type": "Organization"},
                "app_id": inner.app_id,
                "app_slug": super::APP_SLUG,
                "target_type": "Organization",
                "repository_selection": "selected",
                "permissions": inner.installations[&id].permissions,
            });
            (json(StatusCode::OK, body), Some(id))
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
