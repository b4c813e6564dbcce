//! The double's git smart HTTP, read-only: `GET /{owner}/{repo}.git/info/refs?service=
//! git-upload-pack` and `POST /{owner}/{repo}.git/git-upload-pack`, served by the real
//! `git http-backend` CGI over `<repos_root>/<owner>/<repo>.git`.
//!
//! Access is GitHub's for a private repository and an installation token: HTTP basic
//! auth `x-access-token:<token>` with a token the double issued, not revoked, not
//! expired, and minted for exactly this repository. Anything else is 401 with
//! `WWW-Authenticate: Basic realm="GitHub"`, so git fails cleanly instead of hanging.
//! Pushes are refused (403).

use std::process::Stdio;

use axum::body::Body;
use axum::extract::Request;
use axum::http::header::{AUTHORIZATION, CONTENT_ENCODING, CONTENT_TYPE, WWW_AUTHENTICATE};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use tokio::io::AsyncWriteExt;

use super::{GitRequest, Shared};

/// The largest request body (a fetch negotiation) the double buffers.
const MAX_BODY: usize = 256 << 20;

/// Serves one git request for `owner`/`repo_seg` (`repo` or `repo.git`) and records it.
pub(super) async fn serve(
    shared: &Shared,
    req: Request<Body>,
    owner: &str,
    repo_seg: &str,
) -> Response {
    let repo = repo_seg.strip_suffix(".git").unwrap_or(repo_seg);
    let repository = format!("{owner}/{repo}");
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let method = req.method().as_str().to_string();
    let (username, token) = basic_credentials(&req);
    let content_encoding = req
        .headers()
        .get(CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);

    let (response, refusal) =
        match authorize(shared, &repository, username.as_deref(), token.as_deref()) {
            Err(reason) => (unauthorized(&reason), Some(reason)),
            Ok(()) => match service_of(&req) {
                Err((status, reason)) => (
                    (status, format!("{reason}\n")).into_response(),
                    Some(reason),
                ),
                Ok(()) => {
                    let repos_root = shared.lock().repos_root.clone();
                    let dir = repos_root.join(owner).join(format!("{repo}.git"));
                    if !dir.is_dir() {
                        let reason = "Repository not found.".to_string();
                        (
                            (StatusCode::NOT_FOUND, format!("{reason}\n")).into_response(),
                            Some(reason),
                        )
                    } else {
                        let path_info = format!("/{owner}/{repo}.git{}", rest_of_path(&req));
                        match http_backend(&repos_root, &path_info, req).await {
                            Ok(response) => (response, None),
                            Err(e) => {
                                let reason = format!("git http-backend: {e}");
                                (
                                    (StatusCode::INTERNAL_SERVER_ERROR, format!("{reason}\n"))
                                        .into_response(),
                                    Some(reason),
                                )
                            }
                        }
                    }
                }
            },
        };

    shared.lock().git_requests.push(GitRequest {
        method,
        path,
        repository,
        token,
        content_encoding,
        status: response.status().as_u16(),
        refusal,
    });
    response
}

/// The user name and password of `Authorization: Basic …`, if well-formed.
fn basic_credentials(req: &Request<Body>) -> (Option<String>, Option<String>) {
    let decoded = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("basic"))
        .and_then(|(_, b64)| {
            base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .ok()
        })
        .and_then(|bytes| String::from_utf8(bytes).ok());
    match decoded.as_deref().and_then(|s| s.split_once(':')) {
        Some((user, pass)) => (Some(user.to_string()), Some(pass.to_string())),
        None => (None, None),
    }
}

/// Whether the credentials may read `repository`; the refusal reason otherwise.
fn authorize(
    shared: &Shared,
    repository: &str,
    username: Option<&str>,
    token: Option<&str>,
) -> Result<(), String> {
    let (Some(username), Some(token)) = (username, token) else {
        return Err("no basic credentials".into());
    };
    if username != "x-access-token" {
        return Err(format!("user name {username:?} is not x-access-token"));
    }
    let inner = shared.lock();
    let Some(issued) = inner.tokens.iter().find(|t| t.token == token) else {
        return Err("token was never issued".into());
    };
    if issued.revoked {
        return Err("token is revoked".into());
    }
    if issued.expires_at <= chrono::Utc::now() {
        return Err("token is expired".into());
    }
    if issued.repository != repository {
        return Err(format!(
            "token was minted for {}, not {repository}",
            issued.repository
        ));
    }
    Ok(())
}

fn unauthorized(reason: &str) -> Response {
    let mut response = (
        StatusCode::UNAUTHORIZED,
        format!("Invalid username or token ({reason}).\n"),
    )
        .into_response();
    response.headers_mut().insert(
        WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"GitHub\""),
    );
    response
}

/// The part of the path after `/{owner}/{repo}[.git]`: `/info/refs` or `/git-…-pack`.
fn rest_of_path(req: &Request<Body>) -> String {
    let path = req.uri().path().trim_start_matches('/');
    let mut parts = path.splitn(3, '/');
    let _owner = parts.next();
    let _repo = parts.next();
    format!("/{}", parts.next().unwrap_or(""))
}

/// Only fetching is served: `GET info/refs?service=git-upload-pack` and
/// `POST git-upload-pack`.
fn service_of(req: &Request<Body>) -> Result<(), (StatusCode, String)> {
    let rest = rest_of_path(req);
    let query = req.uri().query().unwrap_or("");
    let service = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("service="))
        .unwrap_or("");
    let forbidden = || {
        Err((
            StatusCode::FORBIDDEN,
            "Write access to repository not granted.".to_string(),
        ))
    };
    match (req.method(), rest.as_str()) {
        (&Method::GET, "/info/refs") if service == "git-upload-pack" => Ok(()),
        (&Method::GET, "/info/refs") if service == "git-receive-pack" => forbidden(),
        (&Method::GET, "/info/refs") => Err((
            StatusCode::FORBIDDEN,
            "only the smart HTTP protocol is served".to_string(),
        )),
        (&Method::POST, "/git-upload-pack") => Ok(()),
        (_, "/git-receive-pack") => forbidden(),
        _ => Err((
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed".to_string(),
        )),
    }
}

/// Runs `git http-backend` for the request and turns its CGI response into an HTTP one.
async fn http_backend(
    repos_root: &std::path::Path,
    path_info: &str,
    req: Request<Body>,
) -> Result<Response, String> {
    let method = req.method().as_str().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let headers = req.headers();
    let header_str = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let content_type = header_str(CONTENT_TYPE.as_str());
    let content_encoding = header_str(CONTENT_ENCODING.as_str());
    let git_protocol = header_str("git-protocol");
    let body = axum::body::to_bytes(req.into_body(), MAX_BODY)
        .await
        .map_err(|e| format!("reading the request body: {e}"))?;

    let mut cmd = tokio::process::Command::new("git");
    cmd.arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_PROJECT_ROOT", repos_root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env("SERVER_PROTOCOL", "HTTP/1.1")
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("REMOTE_USER", "x-access-token")
        .env("PATH_INFO", path_info)
        .env("REQUEST_METHOD", &method)
        .env("QUERY_STRING", &query)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if method == "POST" {
        cmd.env("CONTENT_LENGTH", body.len().to_string());
    }
    if let Some(ct) = &content_type {
        cmd.env("CONTENT_TYPE", ct);
    }
    if let Some(enc) = content_encoding
        .filter(|e| e.eq_ignore_ascii_case("gzip") || e.eq_ignore_ascii_case("x-gzip"))
    {
        cmd.env("HTTP_CONTENT_ENCODING", enc);
    }
    if let Some(proto) = &git_protocol {
        cmd.env("GIT_PROTOCOL", proto);
    }

    let mut child = cmd.spawn().map_err(|e| format!("spawning: {e}"))?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let writer = tokio::spawn(async move {
        // http-backend may stop reading early on a bad request; its answer says why.
        let _ = stdin.write_all(&body).await;
        let _ = stdin.shutdown().await;
    });
    let output = child
        .wait_with_output()
        .await
        .map_err(|e| format!("waiting: {e}"))?;
    let _ = writer.await;
    if output.stdout.is_empty() {
        return Err(format!(
            "no output ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    cgi_response(&output.stdout)
}

/// Parses a CGI response: header lines (a `Status:` line sets the status), a blank line,
/// the body.
fn cgi_response(out: &[u8]) -> Result<Response, String> {
    let (head_len, sep_len) = find_header_end(out).ok_or("CGI response has no end of headers")?;
    let head = std::str::from_utf8(&out[..head_len]).map_err(|_| "CGI headers are not UTF-8")?;
    let body = out[head_len + sep_len..].to_vec();
    let mut response = Response::new(Body::from(body));
    for line in head
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| !l.is_empty())
    {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| format!("bad CGI header line {line:?}"))?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code = value
                .split_whitespace()
                .next()
                .and_then(|c| c.parse::<u16>().ok())
                .and_then(|c| StatusCode::from_u16(c).ok())
                .ok_or_else(|| format!("bad CGI status {value:?}"))?;
            *response.status_mut() = code;
        } else {
            let name = HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|e| format!("bad CGI header name {name:?}: {e}"))?;
            let value = HeaderValue::from_str(value)
                .map_err(|e| format!("bad CGI header value {value:?}: {e}"))?;
            response.headers_mut().append(name, value);
        }
    }
    Ok(response)
}

/// Where the CGI headers end: (length of the header block, length of the blank-line
/// separator), for `\r\n\r\n` or `\n\n`.
fn find_header_end(out: &[u8]) -> Option<(usize, usize)> {
    let crlf = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4));
    let lf = out.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_cgi_response_with_status_and_crlf() {
        let resp =
            cgi_response(b"Status: 404 Not Found\r\nContent-Type: text/plain\r\n\r\nnope\n\nmore")
                .unwrap();
        assert_eq!(resp.status(), StatusCode::NOT_FOUND);
        assert_eq!(resp.headers()["content-type"], "text/plain");
    }

    #[test]
    fn a_cgi_response_without_status_is_200() {
        let resp =
            cgi_response(b"Content-Type: application/x-git-upload-pack-advertisement\n\nbody")
                .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
    }
}
