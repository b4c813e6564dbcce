//! [`GithubDouble`]: a stand-in for GitHub on a loopback port, serving at its root both
//! the REST API (as `https://api.github.com` would) and git smart HTTP (as
//! `https://github.com` would). It runs on its own thread with its own tokio runtime and
//! stops on drop; its state is set up and inspected through a plain sync API.
//!
//! The REST calls are in `rest.rs`, git smart HTTP in `smart_http.rs`. This module holds the
//! double's lifecycle, its shared state, the records tests inspect, and the dispatch of a
//! request to one of the two.

mod rest;
mod smart_http;

use std::collections::BTreeMap;
use std::future::IntoFuture;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use axum::body::Body;
use axum::extract::{Request, State as AxState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use jsonwebtoken::DecodingKey;
use rand::Rng;

use crate::keys::app_public_key_pem;

/// One call to `POST /app/installations/{id}/access_tokens`, accepted or refused.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenRequest {
    /// The installation id from the path.
    pub installation: i64,
    /// `repositories` as sent (empty when absent or not a list of strings).
    pub repositories: Vec<String>,
    /// `permissions` as sent (`Null` when absent or the body was not JSON).
    pub permissions: serde_json::Value,
    pub accepted: bool,
    /// The HTTP status answered (201 when accepted).
    pub status: u16,
    /// Why it was refused (the `message` answered), `None` when accepted.
    pub refusal: Option<String>,
}

/// An installation token the double issued.
#[derive(Debug, Clone, PartialEq)]
pub struct IssuedToken {
    /// `ghs_` followed by 36 alphanumerics.
    pub token: String,
    pub installation: i64,
    /// `owner/repo`: the only repository the token may read.
    pub repository: String,
    pub expires_at: DateTime<Utc>,
    /// Revoked through `DELETE /installation/token`.
    pub revoked: bool,
}

/// One git smart-HTTP request.
#[derive(Debug, Clone, PartialEq)]
pub struct GitRequest {
    /// `GET` or `POST`.
    pub method: String,
    /// The path and query, e.g. `/acme/infra.git/info/refs?service=git-upload-pack`.
    pub path: String,
    /// `owner/repo` from the path.
    pub repository: String,
    /// The password of the basic credentials, if any were sent.
    pub token: Option<String>,
    /// The request's `Content-Encoding` (git gzips larger fetch negotiations).
    pub content_encoding: Option<String>,
    pub status: u16,
    /// Why it was refused, `None` when it was served.
    pub refusal: Option<String>,
}

/// One call to `GET /repos/{owner}/{repo}/installation`.
#[derive(Debug, Clone, PartialEq)]
pub struct InstallationLookup {
    /// `owner/repo` from the path.
    pub repository: String,
    /// The installation answered, `None` on 404 or a refusal.
    pub installation: Option<i64>,
    pub status: u16,
}

/// Every REST API request (not git), with the headers GitHub cares about.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiRequest {
    pub method: String,
    pub path: String,
    pub accept: Option<String>,
    pub user_agent: Option<String>,
    pub status: u16,
}

#[derive(Debug, Clone)]
struct Installation {
    account: String,
    /// `owner/repo`, in the order given.
    repos: Vec<String>,
}

/// Everything the double knows and has seen; one lock, held only briefly.
struct Inner {
    app_id: i64,
    app_key: DecodingKey,
    repos_root: PathBuf,
    installations: BTreeMap<i64, Installation>,
    tokens: Vec<IssuedToken>,
    token_requests: Vec<TokenRequest>,
    git_requests: Vec<GitRequest>,
    installation_lookups: Vec<InstallationLookup>,
    api_requests: Vec<ApiRequest>,
}

impl Inner {
    /// A new token for `repository` of `installation`, valid for an hour.
    fn mint(&mut self, installation: i64, repository: &str) -> IssuedToken {
        let suffix: String = rand::thread_rng()
            .sample_iter(&rand::distributions::Alphanumeric)
            .take(36)
            .map(char::from)
            .collect();
        let issued = IssuedToken {
            token: format!("ghs_{suffix}"),
            installation,
            repository: repository.to_string(),
            expires_at: Utc::now() + chrono::Duration::hours(1),
            revoked: false,
        };
        self.tokens.push(issued.clone());
        issued
    }

    /// The issued token `token`, if it exists and is neither revoked nor expired.
    fn live_token(&self, token: &str) -> Option<&IssuedToken> {
        self.tokens
            .iter()
            .find(|t| t.token == token && !t.revoked && t.expires_at > Utc::now())
    }
}

#[derive(Clone)]
struct Shared(Arc<Mutex<Inner>>);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panicking handler must not hide the records from the test.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A GitHub double on `127.0.0.1:<free port>`. See the module docs.
pub struct GithubDouble {
    url: String,
    repos_root: PathBuf,
    shared: Shared,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl GithubDouble {
    /// Starts the double for App `app_id`, verifying App JWTs with the fixture public key
    /// ([`crate::app_public_key_pem`]) and serving bare repositories from
    /// `<repos_root>/<owner>/<repo>.git` (`repos_root` must exist). No installation
    /// exists until [`GithubDouble::add_installation`].
    pub fn start(app_id: i64, repos_root: &Path) -> GithubDouble {
        GithubDouble::start_with_key(app_id, repos_root, app_public_key_pem())
    }

    /// As [`GithubDouble::start`], with another App public key (PEM).
    pub fn start_with_key(app_id: i64, repos_root: &Path, public_key_pem: &str) -> GithubDouble {
        let app_key =
            DecodingKey::from_rsa_pem(public_key_pem.as_bytes()).expect("RSA public key PEM");
        let repos_root = std::fs::canonicalize(repos_root)
            .unwrap_or_else(|e| panic!("repos root {}: {e}", repos_root.display()));
        let shared = Shared(Arc::new(Mutex::new(Inner {
            app_id,
            app_key,
            repos_root: repos_root.clone(),
            installations: BTreeMap::new(),
            tokens: Vec::new(),
            token_requests: Vec::new(),
            git_requests: Vec::new(),
            installation_lookups: Vec::new(),
            api_requests: Vec::new(),
        })));

        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binding 127.0.0.1:0");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let addr = listener.local_addr().expect("listener address");
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let app = axum::Router::new()
            .fallback(dispatch)
            .with_state(shared.clone());
        let thread = std::thread::Builder::new()
            .name("github-double".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("tokio runtime");
                rt.block_on(async move {
                    let listener =
                        tokio::net::TcpListener::from_std(listener).expect("tokio listener");
                    let serve = axum::serve(listener, app).into_future();
                    tokio::select! {
                        _ = serve => {}
                        _ = stop_rx => {}
                    }
                });
                // Requests still in flight are cancelled (their git children killed).
                rt.shutdown_timeout(std::time::Duration::from_secs(2));
            })
            .expect("spawning the github-double thread");

        GithubDouble {
            url: format!("http://{addr}"),
            repos_root,
            shared,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    /// The base URL, `http://127.0.0.1:PORT` (no trailing slash): both the REST API root
    /// and the git host.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `{url}/{owner}/{repo}.git`, the clone URL of `full_name`.
    pub fn clone_url(&self, full_name: &str) -> String {
        format!("{}/{full_name}.git", self.url)
    }

    /// The directory bare repositories are served from (canonicalized).
    pub fn repos_root(&self) -> &Path {
        &self.repos_root
    }

    /// Adds (or replaces) installation `id` of the App on `account`, covering `repos`
    /// (`owner/repo` each).
    pub fn add_installation(&self, id: i64, account: &str, repos: &[&str]) {
        self.shared.lock().installations.insert(
            id,
            Installation {
                account: account.to_string(),
                repos: repos.iter().map(|r| r.to_string()).collect(),
            },
        );
    }

    /// Mints an installation token for `repository` (`owner/repo`) directly, without an
    /// HTTP request (so not in [`GithubDouble::token_requests`]), for tests of git access
    /// that do not exercise token minting.
    pub fn issue_token(&self, installation: i64, repository: &str) -> String {
        self.shared.lock().mint(installation, repository).token
    }

    /// Makes `token` expired from now on (as if its hour had passed).
    pub fn expire_token(&self, token: &str) {
        let mut inner = self.shared.lock();
        let t = inner
            .tokens
            .iter_mut()
            .find(|t| t.token == token)
            .unwrap_or_else(|| panic!("no issued token {token:?}"));
        t.expires_at = Utc::now() - chrono::Duration::seconds(1);
    }

    /// Every access-token request, in order.
    pub fn token_requests(&self) -> Vec<TokenRequest> {
        self.shared.lock().token_requests.clone()
    }

    /// Every token issued, in order, with its current revoked flag.
    pub fn issued_tokens(&self) -> Vec<IssuedToken> {
        self.shared.lock().tokens.clone()
    }

    /// Every git smart-HTTP request, in order.
    pub fn git_requests(&self) -> Vec<GitRequest> {
        self.shared.lock().git_requests.clone()
    }

    /// Every `GET /repos/{owner}/{repo}/installation`, in order.
    pub fn installation_lookups(&self) -> Vec<InstallationLookup> {
        self.shared.lock().installation_lookups.clone()
    }

    /// Every REST request (including unknown routes), in order.
    pub fn api_requests(&self) -> Vec<ApiRequest> {
        self.shared.lock().api_requests.clone()
    }
}

impl Drop for GithubDouble {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for GithubDouble {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GithubDouble")
            .field("url", &self.url)
            .field("repos_root", &self.repos_root)
            .finish_non_exhaustive()
    }
}

/// A GitHub-style error: `{"message", "documentation_url", "status"}`.
fn github_error(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({
        "message": message,
        "documentation_url": "https://docs.github.com/rest",
        "status": status.as_u16().to_string(),
    });
    (status, axum::Json(body)).into_response()
}

/// Routes a request: git smart HTTP for `/{owner}/{repo}[.git]/(info/refs|git-*-pack)`,
/// the REST API for everything else.
async fn dispatch(AxState(shared): AxState<Shared>, req: Request<Body>) -> Response {
    let path = req.uri().path().to_string();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    if let [owner, repo, "info", "refs"] | [owner, repo, "git-upload-pack" | "git-receive-pack"] =
        segments.as_slice()
    {
        let (owner, repo) = (owner.to_string(), repo.to_string());
        return smart_http::serve(&shared, req, &owner, &repo).await;
    }
    rest::serve(&shared, req).await
}
