//! The GitHub App client: the App's JWT (RS256), installation tokens scoped to one
//! repository (`contents: read` for a run; `checks: write` or `pull_requests: write` for
//! feedback, cached while they live), their revocation, finding the installation that
//! covers a repository, and the feedback calls — check runs and issue comments — with
//! GitHub's rate limits read from every answer. Talks to any API base URL (GitHub
//! Enterprise Server).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::config::VcsConfig;

/// What can go wrong talking to GitHub; the text is shown to people (run reasons).
#[derive(Debug, thiserror::Error)]
pub enum GithubError {
    #[error("the GitHub App is not configured on this server (--github-app-id and --github-app-key-file)")]
    NotConfigured,
    #[error("the GitHub App private key is not a usable RSA PEM key: {0}")]
    BadKey(String),
    #[error("GitHub API {what}: {message}")]
    Api { what: String, message: String },
    /// GitHub asked us to wait (a primary or secondary rate limit) until `until`.
    #[error("GitHub API {what}: rate limited until {until}: {message}")]
    RateLimited {
        what: String,
        until: DateTime<Utc>,
        message: String,
    },
    /// The installation may not do this (a permission it lacks, or a repository it does
    /// not cover): trying again will not help.
    #[error("GitHub API {what}: refused ({status}): {message}")]
    Refused {
        what: String,
        status: u16,
        message: String,
    },
    #[error("GitHub API {what}: not found")]
    NotFound { what: String },
}

/// The most of an answer read from GitHub: a page of 100 comments of 65,536 characters
/// each fits; anything larger is refused rather than held in memory.
pub const MAX_REPLY_BYTES: usize = 16 * 1024 * 1024;

/// The least a secondary rate limit without `Retry-After` is waited out, as GitHub asks.
const SECONDARY_LIMIT_WAIT_SECS: i64 = 60;
/// A cached feedback token is used until this long before it expires.
const TOKEN_MARGIN_SECS: i64 = 300;

/// A short-lived installation token.
#[derive(Debug, Clone)]
pub struct InstallationToken {
    pub token: String,
    pub expires_at: DateTime<Utc>,
}

struct App {
    id: i64,
    key: EncodingKey,
}

/// The App client, cheap to share.
pub struct Github {
    http: reqwest::Client,
    api_url: String,
    web_url: String,
    app: Option<App>,
    /// Feedback tokens by (installation, repository, permission), reused while they live.
    feedback_tokens: Mutex<HashMap<(i64, String, &'static str), InstallationToken>>,
    /// Until when GitHub asked us to wait; no feedback call is made before.
    paused_until: Mutex<Option<DateTime<Utc>>>,
    /// Feedback calls made (check runs, comments and their tokens), for `/metrics`.
    pub feedback_calls: AtomicU64,
}

#[derive(Serialize)]
struct Claims {
    iat: i64,
    exp: i64,
    iss: String,
}

#[derive(Deserialize)]
struct TokenReply {
    token: String,
    expires_at: DateTime<Utc>,
}

#[derive(Deserialize)]
struct InstallationReply {
    id: i64,
    account: Option<Account>,
}

#[derive(Deserialize)]
struct Account {
    login: String,
}

impl Github {
    pub fn new(config: &VcsConfig) -> Result<Self, GithubError> {
        let app = match &config.app {
            Some(a) => Some(App {
                id: a.app_id,
                key: EncodingKey::from_rsa_pem(a.private_key_pem.0.as_bytes())
                    .map_err(|e| GithubError::BadKey(e.to_string()))?,
            }),
            None => None,
        };
        let http = reqwest::Client::builder()
            .user_agent(concat!("bosun/", env!("CARGO_PKG_VERSION")))
            .timeout(Duration::from_secs(20))
            .build()
            .map_err(|e| GithubError::Api {
                what: "client".into(),
                message: e.to_string(),
            })?;
        Ok(Github {
            http,
            api_url: config.api_url.trim_end_matches('/').to_string(),
            web_url: config.web_url.trim_end_matches('/').to_string(),
            app,
            feedback_tokens: Mutex::default(),
            paused_until: Mutex::default(),
            feedback_calls: AtomicU64::new(0),
        })
    }

    pub fn app_configured(&self) -> bool {
        self.app.is_some()
    }

    /// The HTTPS address a repository (`owner/repo`) is cloned from.
    pub fn clone_url(&self, full_name: &str) -> String {
        format!("{}/{full_name}.git", self.web_url)
    }

    /// The App's JWT: valid for 9 minutes, issued a minute in the past for clock skew.
    fn app_jwt(&self) -> Result<String, GithubError> {
        let app = self.app.as_ref().ok_or(GithubError::NotConfigured)?;
        let now = Utc::now().timestamp();
        let claims = Claims {
            iat: now - 60,
            exp: now + 9 * 60,
            iss: app.id.to_string(),
        };
        jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims, &app.key)
            .map_err(|e| GithubError::BadKey(e.to_string()))
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.api_url))
            .header("Accept", "application/vnd.github+json")
            .header("X-GitHub-Api-Version", "2022-11-28")
    }

    /// An installation token for exactly one repository (`owner/repo`), `contents: read`.
    pub async fn installation_token(
        &self,
        installation: i64,
        full_name: &str,
    ) -> Result<InstallationToken, GithubError> {
        let what = format!("installation token for {full_name}");
        let jwt = self.app_jwt()?;
        let repo = full_name.rsplit('/').next().unwrap_or(full_name);
        let reply = self
            .request(
                reqwest::Method::POST,
                &format!("/app/installations/{installation}/access_tokens"),
            )
            .bearer_auth(jwt)
            .json(&json!({"repositories": [repo], "permissions": {"contents": "read"}}))
            .send()
            .await
            .map_err(|e| api_error(&what, e))?;
        let reply: TokenReply = parse(&what, reply).await?;
        Ok(InstallationToken {
            token: reply.token,
            expires_at: reply.expires_at,
        })
    }

    /// Revokes an installation token. A token GitHub no longer knows (expired, already
    /// revoked) counts as revoked.
    pub async fn revoke(&self, token: &str) -> Result<(), GithubError> {
        let what = "token revocation".to_string();
        let reply = self
            .request(reqwest::Method::DELETE, "/installation/token")
            .bearer_auth(token)
            .send()
            .await
            .map_err(|e| api_error(&what, e))?;
        let status = reply.status();
        if status.is_success() || status == reqwest::StatusCode::UNAUTHORIZED {
            return Ok(());
        }
        Err(GithubError::Api {
            what,
            message: format!("HTTP {status}"),
        })
    }

    /// The installation of this App covering `owner/repo`, if any: `(id, account)`.
    pub async fn find_installation(
        &self,
        full_name: &str,
    ) -> Result<Option<(i64, String)>, GithubError> {
        let what = format!("installation lookup for {full_name}");
        let jwt = self.app_jwt()?;
        let reply = self
            .request(
                reqwest::Method::GET,
                &format!("/repos/{full_name}/installation"),
            )
            .bearer_auth(jwt)
            .send()
            .await
            .map_err(|e| api_error(&what, e))?;
        if reply.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let reply: InstallationReply = parse(&what, reply).await?;
        let account = reply
            .account
            .map(|a| a.login)
            .unwrap_or_else(|| full_name.split('/').next().unwrap_or("").to_string());
        Ok(Some((reply.id, account)))
    }
}

/// A permission a feedback token asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedbackPermission {
    /// `checks: write`: check runs.
    Checks,
    /// `pull_requests: write`: the pull request's comment.
    PullRequests,
}

impl FeedbackPermission {
    pub fn name(self) -> &'static str {
        match self {
            FeedbackPermission::Checks => "checks",
            FeedbackPermission::PullRequests => "pull_requests",
        }
    }
}

/// The marker that finds Bosun's comment on a pull request again.
pub fn comment_marker(org: &str) -> String {
    format!("<!-- bosun:pr-comment org={org} -->")
}

impl Github {
    /// Until when GitHub asked us to wait, if that is still ahead.
    pub fn paused_until(&self) -> Option<DateTime<Utc>> {
        let until = *self.paused_until.lock().unwrap_or_else(|e| e.into_inner());
        until.filter(|u| *u > Utc::now())
    }

    /// An installation token for `full_name` with one write permission, reused while it
    /// has more than five minutes to live.
    pub async fn feedback_token(
        &self,
        installation: i64,
        full_name: &str,
        permission: FeedbackPermission,
    ) -> Result<String, GithubError> {
        let key = (installation, full_name.to_string(), permission.name());
        {
            let cache = self
                .feedback_tokens
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if let Some(t) = cache.get(&key) {
                if t.expires_at > Utc::now() + chrono::Duration::seconds(TOKEN_MARGIN_SECS) {
                    return Ok(t.token.clone());
                }
            }
        }
        let what = format!("{} token for {full_name}", permission.name());
        let jwt = self.app_jwt()?;
        let repo = full_name.rsplit('/').next().unwrap_or(full_name);
        let reply = self
            .send(
                &what,
                self.request(
                    reqwest::Method::POST,
                    &format!("/app/installations/{installation}/access_tokens"),
                )
                .bearer_auth(jwt)
                .json(&json!({
                    "repositories": [repo],
                    "permissions": {permission.name(): "write"},
                })),
            )
            .await?;
        let reply: TokenReply = serde_json::from_value(reply).map_err(|e| GithubError::Api {
            what: what.clone(),
            message: format!("unexpected reply: {e}"),
        })?;
        let token = reply.token.clone();
        self.feedback_tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                key,
                InstallationToken {
                    token: reply.token,
                    expires_at: reply.expires_at,
                },
            );
        Ok(token)
    }

    /// Forgets a cached feedback token GitHub no longer takes.
    pub fn forget_feedback_token(&self, token: &str) {
        self.feedback_tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, t| t.token != token);
    }

    /// Creates a check run; its id.
    pub async fn create_check_run(
        &self,
        token: &str,
        full_name: &str,
        body: &Value,
    ) -> Result<i64, GithubError> {
        let what = format!("check run on {full_name}");
        let reply = self
            .send(
                &what,
                self.request(
                    reqwest::Method::POST,
                    &format!("/repos/{full_name}/check-runs"),
                )
                .bearer_auth(token)
                .json(body),
            )
            .await?;
        id_of(&what, &reply)
    }

    pub async fn update_check_run(
        &self,
        token: &str,
        full_name: &str,
        id: i64,
        body: &Value,
    ) -> Result<(), GithubError> {
        let what = format!("check run {id} on {full_name}");
        self.send(
            &what,
            self.request(
                reqwest::Method::PATCH,
                &format!("/repos/{full_name}/check-runs/{id}"),
            )
            .bearer_auth(token)
            .json(body),
        )
        .await
        .map(|_| ())
    }

    /// The id of the pull request's comment that carries `marker` and was written by a
    /// bot (this App), if any: at most `max_pages` pages of 100, oldest first.
    pub async fn find_comment(
        &self,
        token: &str,
        full_name: &str,
        issue: i64,
        marker: &str,
        max_pages: u32,
    ) -> Result<Option<i64>, GithubError> {
        let what = format!("comments of #{issue} on {full_name}");
        for page in 1..=max_pages {
            let reply = self
                .send(
                    &what,
                    self.request(
                        reqwest::Method::GET,
                        &format!(
                            "/repos/{full_name}/issues/{issue}/comments?per_page=100&page={page}"
                        ),
                    )
                    .bearer_auth(token),
                )
                .await?;
            let comments = reply.as_array().cloned().unwrap_or_default();
            let found = comments.iter().find(|c| {
                c.pointer("/user/type").and_then(Value::as_str) == Some("Bot")
                    && c.get("body")
                        .and_then(Value::as_str)
                        .is_some_and(|b| b.contains(marker))
            });
            if let Some(c) = found {
                return Ok(c.get("id").and_then(Value::as_i64));
            }
            if comments.len() < 100 {
                break;
            }
        }
        Ok(None)
    }

    pub async fn create_comment(
        &self,
        token: &str,
        full_name: &str,
        issue: i64,
        body: &str,
    ) -> Result<i64, GithubError> {
        let what = format!("comment on #{issue} of {full_name}");
        let reply = self
            .send(
                &what,
                self.request(
                    reqwest::Method::POST,
                    &format!("/repos/{full_name}/issues/{issue}/comments"),
                )
                .bearer_auth(token)
                .json(&json!({"body": body})),
            )
            .await?;
        id_of(&what, &reply)
    }

    pub async fn update_comment(
        &self,
        token: &str,
        full_name: &str,
        id: i64,
        body: &str,
    ) -> Result<(), GithubError> {
        let what = format!("comment {id} on {full_name}");
        self.send(
            &what,
            self.request(
                reqwest::Method::PATCH,
                &format!("/repos/{full_name}/issues/comments/{id}"),
            )
            .bearer_auth(token)
            .json(&json!({"body": body})),
        )
        .await
        .map(|_| ())
    }

    /// Sends a feedback call and classifies its answer: the JSON of a success, or why
    /// not — a rate limit (GitHub's pause is kept for every later call), a refusal that
    /// retrying will not change, a missing thing, or another failure.
    async fn send(
        &self,
        what: &str,
        request: reqwest::RequestBuilder,
    ) -> Result<Value, GithubError> {
        self.feedback_calls.fetch_add(1, Ordering::Relaxed);
        let reply = request.send().await.map_err(|e| api_error(what, e))?;
        let status = reply.status();
        let headers = reply.headers().clone();
        let body = bounded_body(what, reply).await?;
        if status.is_success() {
            if body.is_empty() {
                return Ok(Value::Null);
            }
            return serde_json::from_slice(&body).map_err(|e| GithubError::Api {
                what: what.to_string(),
                message: format!("unexpected reply: {e}"),
            });
        }
        let message = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(String::from))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).chars().take(200).collect());
        if let Some(until) = rate_limited_until(status, &headers, &message) {
            let mut paused = self.paused_until.lock().unwrap_or_else(|e| e.into_inner());
            *paused = Some(paused.map_or(until, |p| p.max(until)));
            return Err(GithubError::RateLimited {
                what: what.to_string(),
                until,
                message,
            });
        }
        Err(match status.as_u16() {
            404 => GithubError::NotFound {
                what: what.to_string(),
            },
            401 | 403 | 422 => GithubError::Refused {
                what: what.to_string(),
                status: status.as_u16(),
                message,
            },
            _ => GithubError::Api {
                what: what.to_string(),
                message: format!("HTTP {status}: {message}"),
            },
        })
    }
}

/// When a refused call may be made again, if GitHub's answer is a rate limit: a
/// `Retry-After` (secondary limits), an exhausted quota until `X-RateLimit-Reset`, or a
/// secondary limit named only in the message (then at least a minute).
fn rate_limited_until(
    status: reqwest::StatusCode,
    headers: &reqwest::header::HeaderMap,
    message: &str,
) -> Option<DateTime<Utc>> {
    if status != reqwest::StatusCode::FORBIDDEN && status != reqwest::StatusCode::TOO_MANY_REQUESTS
    {
        return None;
    }
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<i64>().ok())
    };
    let now = Utc::now();
    if let Some(secs) = header("retry-after") {
        return Some(now + chrono::Duration::seconds(secs.clamp(1, 3600)));
    }
    if header("x-ratelimit-remaining") == Some(0) {
        let reset = header("x-ratelimit-reset")
            .and_then(|at| DateTime::<Utc>::from_timestamp(at, 0))
            .unwrap_or(now + chrono::Duration::seconds(SECONDARY_LIMIT_WAIT_SECS));
        return Some(reset.max(now + chrono::Duration::seconds(1)));
    }
    if status == reqwest::StatusCode::TOO_MANY_REQUESTS
        || message.to_ascii_lowercase().contains("rate limit")
    {
        return Some(now + chrono::Duration::seconds(SECONDARY_LIMIT_WAIT_SECS));
    }
    None
}

/// An answer's body, read a chunk at a time up to [`MAX_REPLY_BYTES`].
async fn bounded_body(what: &str, reply: reqwest::Response) -> Result<Vec<u8>, GithubError> {
    use crate::http_out::{read_bounded, ReadError};
    read_bounded(reply, MAX_REPLY_BYTES)
        .await
        .map_err(|e| match e {
            ReadError::TooLarge => GithubError::Api {
                what: what.to_string(),
                message: format!("the answer is larger than {MAX_REPLY_BYTES} bytes"),
            },
            ReadError::Transport(e) => api_error(what, e),
        })
}

fn id_of(what: &str, reply: &Value) -> Result<i64, GithubError> {
    reply
        .get("id")
        .and_then(Value::as_i64)
        .ok_or_else(|| GithubError::Api {
            what: what.to_string(),
            message: "the reply has no id".into(),
        })
}

fn api_error(what: &str, e: reqwest::Error) -> GithubError {
    GithubError::Api {
        what: what.to_string(),
        message: e.to_string(),
    }
}

async fn parse<T: serde::de::DeserializeOwned>(
    what: &str,
    reply: reqwest::Response,
) -> Result<T, GithubError> {
    let status = reply.status();
    let body = bounded_body(what, reply).await?;
    if !status.is_success() {
        let message = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(String::from))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).chars().take(200).collect());
        return Err(GithubError::Api {
            what: what.to_string(),
            message: format!("HTTP {status}: {message}"),
        });
    }
    serde_json::from_slice(&body).map_err(|e| GithubError::Api {
        what: what.to_string(),
        message: format!("unexpected reply: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loopback server answering every request with `body_len` bytes of JSON-ish text,
    /// chunked (no Content-Length), so only the reader's own count can stop it.
    async fn serve_big(body_len: usize) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = sock.read(&mut buf).await;
                    let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
                    if sock.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    let chunk = vec![b' '; 64 * 1024];
                    let mut sent = 0;
                    while sent < body_len {
                        let n = chunk.len().min(body_len - sent);
                        let frame = format!("{n:x}\r\n");
                        if sock.write_all(frame.as_bytes()).await.is_err()
                            || sock.write_all(&chunk[..n]).await.is_err()
                            || sock.write_all(b"\r\n").await.is_err()
                        {
                            return;
                        }
                        sent += n;
                    }
                    let _ = sock.write_all(b"0\r\n\r\n").await;
                });
            }
        });
        format!("http://{addr}")
    }

    fn client(url: &str) -> Github {
        let config = crate::config::VcsConfig {
            api_url: url.to_string(),
            web_url: url.to_string(),
            ..Default::default()
        };
        Github::new(&config).unwrap()
    }

    #[tokio::test]
    async fn an_answer_larger_than_the_bound_is_refused_not_held() {
        let url = serve_big(MAX_REPLY_BYTES + 1).await;
        let err = client(&url)
            .update_comment("ghs_x", "acme/infra", 1, "body")
            .await
            .unwrap_err();
        assert!(err.to_string().contains("larger than"), "{err}");
        // Within the bound, the same answer is read (and is not JSON: a clear error).
        let url = serve_big(1024).await;
        let err = client(&url)
            .create_comment("ghs_x", "acme/infra", 1, "body")
            .await
            .unwrap_err();
        assert!(err.to_string().contains("unexpected reply"), "{err}");
    }
}
