//! [`GithubDouble`]: a stand-in for GitHub on a loopback port, serving at its root both
//! the REST API (as `https://api.github.com` would) and git smart HTTP (as
//! `https://github.com` would). It runs on its own thread with its own tokio runtime and
//! stops on drop; its state is set up and inspected through a plain sync API.
//!
//! The REST calls are in `rest.rs` (the gate every REST request passes, App and
//! installation-token calls), `checks.rs` (check runs) and `comments.rs` (issue comments);
//! git smart HTTP in `smart_http.rs`. Every REST request is first checked against GitHub's
//! own OpenAPI description (`contract.rs`); what does not conform is refused and listed by
//! [`GithubDouble::contract_violations`]. This module holds the double's lifecycle, its
//! shared state (installations and their permissions, tokens, check runs, comments, armed
//! faults, rate-limit counts), the records tests inspect, and the dispatch of a request to
//! REST or git.

mod checks;
mod comments;
pub mod contract;
mod rest;
mod smart_http;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::IntoFuture;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use axum::body::Body;
use axum::extract::{Request, State as AxState};
use axum::response::Response;
use chrono::{DateTime, Utc};
use jsonwebtoken::DecodingKey;
use rand::Rng;

use crate::keys::app_public_key_pem;

use contract::Contract;

/// The App's slug: check runs and comments made with its tokens are by `bosun-test[bot]`.
pub const APP_SLUG: &str = "bosun-test";

/// What [`GithubDouble::add_installation`] grants: read the code, write checks and pull
/// request comments.
pub fn default_permissions() -> serde_json::Value {
    serde_json::json!({
        "contents": "read",
        "metadata": "read",
        "checks": "write",
        "pull_requests": "write",
    })
}

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
    /// The permissions it carries, e.g. `{"contents": "read"}`.
    pub permissions: serde_json::Value,
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
    /// The path and query, e.g. `/repos/acme/infra/check-runs`.
    pub path: String,
    pub accept: Option<String>,
    pub user_agent: Option<String>,
    /// The credentials of `Authorization` (after the scheme): an App JWT or a `ghs_` token.
    pub token: Option<String>,
    /// The body, when it was JSON.
    pub body: Option<serde_json::Value>,
    /// The `operationId` of GitHub's description the request is (e.g. `checks/create`),
    /// `None` when it is none or the description is not installed.
    pub operation: Option<String>,
    pub status: u16,
}

/// A check run as it stands now (after every accepted `PATCH`).
#[derive(Debug, Clone, PartialEq)]
pub struct CheckRun {
    /// From 1000, increasing.
    pub id: i64,
    /// `owner/repo`.
    pub repository: String,
    pub name: String,
    pub head_sha: String,
    pub external_id: Option<String>,
    pub details_url: Option<String>,
    /// `queued`, `in_progress` or `completed`.
    pub status: String,
    pub conclusion: Option<String>,
    pub started_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    pub output_title: Option<String>,
    pub output_summary: Option<String>,
    pub output_text: Option<String>,
    /// Annotations sent so far (each request's are appended, as GitHub does).
    pub annotations: u32,
    /// One suite per (repository, head_sha).
    pub check_suite: i64,
    /// `PATCH`es applied.
    pub updates: u32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// An issue (or pull request) comment.
#[derive(Debug, Clone, PartialEq)]
pub struct Comment {
    /// From 5000, increasing.
    pub id: i64,
    /// `owner/repo`.
    pub repository: String,
    /// The issue or pull request number.
    pub issue: u64,
    /// The author's login: `bosun-test[bot]` for comments made through the API.
    pub user: String,
    /// Made through the API with one of the App's tokens (rather than by a person).
    pub via_app: bool,
    pub body: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// `PATCH`es applied.
    pub edits: u32,
}

/// A failure GitHub answers now and then, armed with [`GithubDouble::fail_next`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// 403 with `retry-after: <secs>` and GitHub's secondary-rate-limit message.
    SecondaryRateLimit { retry_after_secs: u64 },
    /// 403 with `x-ratelimit-remaining: 0` and `x-ratelimit-reset: now + <secs>`.
    PrimaryRateLimit { reset_in_secs: u64 },
    /// 502 `{"message": "Server Error"}`.
    ServerError,
}

/// A fault waiting for requests: `left` more `method` requests whose path starts with
/// `prefix`.
#[derive(Debug, Clone)]
struct ArmedFault {
    method: String,
    prefix: String,
    left: u32,
    fault: Fault,
}

#[derive(Debug, Clone)]
struct Installation {
    account: String,
    /// `owner/repo`, in the order given.
    repos: Vec<String>,
    /// Granted permissions: `{"contents": "read", ...}`.
    permissions: serde_json::Value,
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
    /// The base URL, for the URLs in answers.
    url: String,
    /// GitHub's description, `None` when it is not installed (then nothing is checked).
    contract: Option<&'static Contract>,
    contract_violations: Vec<String>,
    check_runs: Vec<CheckRun>,
    /// `(owner/repo, head_sha)` → check suite id.
    check_suites: BTreeMap<(String, String), i64>,
    comments: Vec<Comment>,
    faults: VecDeque<ArmedFault>,
    /// Requests so far per credentials (`""` for none), for `x-ratelimit-*`.
    rate_used: HashMap<String, u64>,
    /// When the rate-limit window ends (epoch seconds).
    rate_reset: i64,
    /// Requests served, for `x-github-request-id`.
    requests_served: u64,
}

impl Inner {
    /// A new token for `repository` of `installation` carrying `permissions`, valid for an
    /// hour.
    fn mint(
        &mut self,
        installation: i64,
        repository: &str,
        permissions: serde_json::Value,
    ) -> IssuedToken {
        let suffix: String = rand::thread_rng()
            .sample_iter(&rand::distributions::Alphanumeric)
            .take(36)
            .map(char::from)
            .collect();
        let issued = IssuedToken {
            token: format!("ghs_{suffix}"),
            installation,
            repository: repository.to_string(),
            permissions,
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

    /// A new comment (ids from 5000).
    fn add_comment(
        &mut self,
        repository: &str,
        issue: u64,
        login: &str,
        via_app: bool,
        body: &str,
    ) -> Comment {
        let id = self.comments.iter().map(|c| c.id + 1).max().unwrap_or(5000);
        let now = Utc::now();
        let comment = Comment {
            id,
            repository: repository.to_string(),
            issue,
            user: login.to_string(),
            via_app,
            body: body.to_string(),
            created_at: now,
            updated_at: now,
            edits: 0,
        };
        self.comments.push(comment.clone());
        comment
    }

    /// The first armed fault for `method path`, consumed.
    fn take_fault(&mut self, method: &str, path: &str) -> Option<Fault> {
        let i = self
            .faults
            .iter()
            .position(|f| f.method.eq_ignore_ascii_case(method) && path.starts_with(&f.prefix))?;
        let armed = &mut self.faults[i];
        armed.left -= 1;
        let fault = armed.fault.clone();
        if armed.left == 0 {
            self.faults.remove(i);
        }
        Some(fault)
    }

    /// Counts a request made with `credentials` (`""` for none): `(used, reset)` of its
    /// rate-limit window, which rolls over after an hour.
    fn count_request(&mut self, credentials: &str) -> (u64, i64) {
        let now = Utc::now().timestamp();
        if now >= self.rate_reset {
            self.rate_used.clear();
            self.rate_reset = now + 3600;
        }
        let used = self.rate_used.entry(credentials.to_string()).or_insert(0);
        *used += 1;
        (*used, self.rate_reset)
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
    ///
    /// Reads GitHub's OpenAPI description (once per process) to check requests against.
    /// When it is not installed the double serves unchecked after a `SKIPPED (tool
    /// missing)` line on stderr, or panics under `BOSUN_REQUIRE_TOOLS=1`.
    pub fn start(app_id: i64, repos_root: &Path) -> GithubDouble {
        GithubDouble::start_with_key(app_id, repos_root, app_public_key_pem())
    }

    /// As [`GithubDouble::start`], with another App public key (PEM).
    pub fn start_with_key(app_id: i64, repos_root: &Path, public_key_pem: &str) -> GithubDouble {
        let app_key =
            DecodingKey::from_rsa_pem(public_key_pem.as_bytes()).expect("RSA public key PEM");
        let repos_root = std::fs::canonicalize(repos_root)
            .unwrap_or_else(|e| panic!("repos root {}: {e}", repos_root.display()));
        let contract = contract::require_contract();

        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binding 127.0.0.1:0");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let addr = listener.local_addr().expect("listener address");
        let url = format!("http://{addr}");
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
            url: url.clone(),
            contract,
            contract_violations: Vec::new(),
            check_runs: Vec::new(),
            check_suites: BTreeMap::new(),
            comments: Vec::new(),
            faults: VecDeque::new(),
            rate_used: HashMap::new(),
            rate_reset: Utc::now().timestamp() + 3600,
            requests_served: 0,
        })));
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
            url,
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
    /// (`owner/repo` each), granted [`default_permissions`].
    pub fn add_installation(&self, id: i64, account: &str, repos: &[&str]) {
        self.shared.lock().installations.insert(
            id,
            Installation {
                account: account.to_string(),
                repos: repos.iter().map(|r| r.to_string()).collect(),
                permissions: default_permissions(),
            },
        );
    }

    /// Replaces the permissions granted to `installation` (e.g.
    /// `{"contents": "read", "checks": "read"}`). Tokens already issued keep theirs.
    pub fn set_permissions(&self, installation: i64, permissions: serde_json::Value) {
        let mut inner = self.shared.lock();
        let inst = inner
            .installations
            .get_mut(&installation)
            .unwrap_or_else(|| panic!("no installation {installation}"));
        inst.permissions = permissions;
    }

    /// Mints an installation token for `repository` (`owner/repo`) directly, without an
    /// HTTP request (so not in [`GithubDouble::token_requests`]), carrying every
    /// permission the installation is granted (as GitHub does when a request names none;
    /// [`default_permissions`] for an installation the double does not know).
    pub fn issue_token(&self, installation: i64, repository: &str) -> String {
        let mut inner = self.shared.lock();
        let permissions = inner
            .installations
            .get(&installation)
            .map_or_else(default_permissions, |i| i.permissions.clone());
        inner.mint(installation, repository, permissions).token
    }

    /// As [`GithubDouble::issue_token`], carrying exactly `permissions` (granted or not).
    pub fn issue_token_with(
        &self,
        installation: i64,
        repository: &str,
        permissions: serde_json::Value,
    ) -> String {
        self.shared
            .lock()
            .mint(installation, repository, permissions)
            .token
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

    /// Every REST request that did not conform to GitHub's description, in order, as
    /// `METHOD /path: what is wrong` (empty when the description is not installed).
    pub fn contract_violations(&self) -> Vec<String> {
        self.shared.lock().contract_violations.clone()
    }

    /// Every check run created, as it stands now, in creation order.
    pub fn check_runs(&self) -> Vec<CheckRun> {
        self.shared.lock().check_runs.clone()
    }

    /// Adds a comment by a person (`login`, not through the API) on issue or pull request
    /// `issue` of `repository` (`owner/repo`); returns its id.
    pub fn add_comment(&self, repository: &str, issue: u64, login: &str, body: &str) -> i64 {
        self.shared
            .lock()
            .add_comment(repository, issue, login, false, body)
            .id
    }

    /// The comments on issue or pull request `issue` of `repository`, oldest first.
    pub fn comments(&self, repository: &str, issue: u64) -> Vec<Comment> {
        self.shared
            .lock()
            .comments
            .iter()
            .filter(|c| c.repository.eq_ignore_ascii_case(repository) && c.issue == issue)
            .cloned()
            .collect()
    }

    /// Answers the next `count` REST requests with method `method` whose path (and query)
    /// starts with `path_prefix` with `fault` instead of serving them. Armed faults are
    /// consumed in the order they were armed; faulted requests are still recorded in
    /// [`GithubDouble::api_requests`] (and checked against the description).
    pub fn fail_next(&self, method: &str, path_prefix: &str, count: u32, fault: Fault) {
        if count == 0 {
            return;
        }
        self.shared.lock().faults.push_back(ArmedFault {
            method: method.to_ascii_uppercase(),
            prefix: path_prefix.to_string(),
            left: count,
            fault,
        });
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
