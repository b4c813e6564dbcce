//! The runner's side of the runner protocol: one method per endpoint, the pool token on
//! every request, error bodies turned into `ClientError`s (with `fenced` singled out), and
//! the retry-with-backoff loop the calls that must not be lost go through.

use std::future::Future;
use std::time::Duration;

use bosun_api::{
    AnyLease, ErrorBody, ErrorCode, Heartbeat, HeartbeatReply, LeaseRequest, LogAppend,
    PlanResultsAppend, PlanRunnerReport, RunnerRegister, RunnerRegistered, RunnerReport,
};
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use reqwest::{Method, RequestBuilder, Response, StatusCode, Url};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::RunnerError;

/// Timeout of an ordinary request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Timeout of a plan file upload or download.
const PLAN_TIMEOUT: Duration = Duration::from_secs(300);
/// Added to the lease's own wait so a long poll is not cut short by the client.
const LEASE_SLACK: Duration = Duration::from_secs(30);
/// How long an unused pooled connection is kept.
const POOL_IDLE: Duration = Duration::from_secs(30);

/// The certificates of a PEM file, each one trusted as a root.
fn read_ca_file(path: &std::path::Path) -> Result<Vec<reqwest::Certificate>, RunnerError> {
    let fail = |reason: String| RunnerError::CaFile {
        path: path.to_path_buf(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|e| fail(e.to_string()))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| fail(e.to_string()))?;
    if certs.is_empty() {
        return Err(fail("no PEM CERTIFICATE block in it".to_string()));
    }
    Ok(certs)
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientError {
    #[error("cannot reach the server: {}", error_chain(.0))]
    Transport(#[source] reqwest::Error),
    #[error("the lease is no longer this runner's (fenced)")]
    Fenced,
    #[error(
        "the server answered {status}: {message} (code: {})",
        code.as_ref().map_or("", ErrorCode::as_str)
    )]
    Api {
        status: StatusCode,
        /// `None` when the body is not a Bosun error body.
        code: Option<ErrorCode>,
        message: String,
    },
    #[error("unexpected response from the server: {0}")]
    Protocol(String),
    #[error("gave up retrying: the runner is shutting down")]
    GaveUp,
}

/// An error with its causes, `outer: inner: innermost` (reqwest's own message names only
/// the URL; the cause says what went wrong).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

impl ClientError {
    /// Whether the same request may succeed later: transport failures and the statuses of
    /// a server that is busy, restarting or behind a proxy that is.
    pub(crate) fn is_retryable(&self) -> bool {
        match self {
            ClientError::Transport(_) => true,
            ClientError::Api { status, .. } => {
                status.is_server_error()
                    || *status == StatusCode::TOO_MANY_REQUESTS
                    || *status == StatusCode::REQUEST_TIMEOUT
            }
            ClientError::Fenced | ClientError::Protocol(_) | ClientError::GaveUp => false,
        }
    }

    /// The status of an error response, if the server sent one.
    pub(crate) fn status(&self) -> Option<StatusCode> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }
}

#[derive(Deserialize)]
struct NextSeq {
    next_seq: i64,
}

/// An OIDC ID token of the run, as the ID-token request URL answers it.
#[derive(Deserialize)]
pub(crate) struct IdToken {
    pub(crate) value: String,
    /// When it expires, unix seconds.
    pub(crate) expires_at: i64,
}

impl std::fmt::Debug for IdToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdToken")
            .field("value", &"<redacted>")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

#[derive(Serialize)]
struct FencingQuery {
    fencing: i64,
}

/// A client of one server, authenticated with one pool token. Cheap to share: it wraps a
/// connection pool.
pub(crate) struct ServerClient {
    http: reqwest::Client,
    base: Url,
}

impl ServerClient {
    #[cfg(test)]
    pub(crate) fn new(server: &str, token: &str) -> Result<Self, RunnerError> {
        Self::with_tls(server, token, None, None)
    }

    /// A client that also trusts the certificates in `ca_file` and, with `connect_to`,
    /// connects there whatever the URL's host resolves to.
    pub(crate) fn with_tls(
        server: &str,
        token: &str,
        ca_file: Option<&std::path::Path>,
        connect_to: Option<std::net::SocketAddr>,
    ) -> Result<Self, RunnerError> {
        let base = Url::parse(server.trim())
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.has_host())
            .filter(|u| !u.cannot_be_a_base())
            .ok_or_else(|| RunnerError::InvalidServerUrl(server.to_string()))?;
        let token = token.trim();
        if token.is_empty() {
            return Err(RunnerError::MissingToken);
        }
        let mut auth = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| RunnerError::InvalidToken)?;
        // Keeps the secret out of any debug output of a request.
        auth.set_sensitive(true);
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, auth);
        let mut builder = reqwest::Client::builder()
            .default_headers(headers)
            .user_agent(concat!("bosun-runner/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(10))
            // Below the server's default idle timeout (60 s), so a pooled connection is
            // not reused just as the server closes it.
            .pool_idle_timeout(POOL_IDLE);
        if let Some(path) = ca_file {
            for cert in read_ca_file(path)? {
                builder = builder.add_root_certificate(cert);
            }
        }
        if let (Some(addr), Some(host)) = (connect_to, base.host_str()) {
            builder = builder.resolve(host, addr);
        }
        let http = builder.build().map_err(RunnerError::HttpClient)?;
        Ok(ServerClient { http, base })
    }

    /// `<base>/api/v1/runner/<segments…>`, each segment percent-encoded.
    fn url(&self, segments: &[&str]) -> Result<Url, ClientError> {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|()| ClientError::Protocol("the server URL cannot take a path".into()))?
            .pop_if_empty()
            .extend(["api", "v1", "runner"])
            .extend(segments);
        Ok(url)
    }

    fn request(&self, method: Method, segments: &[&str]) -> Result<RequestBuilder, ClientError> {
        Ok(self
            .http
            .request(method, self.url(segments)?)
            .timeout(REQUEST_TIMEOUT))
    }

    pub(crate) async fn register(
        &self,
        body: &RunnerRegister,
    ) -> Result<RunnerRegistered, ClientError> {
        let resp = send(self.request(Method::POST, &["register"])?.json(body)).await?;
        json(resp).await
    }

    /// Waits up to `wait_seconds` for work; `None` when none came.
    pub(crate) async fn lease(&self, body: &LeaseRequest) -> Result<Option<AnyLease>, ClientError> {
        let timeout = Duration::from_secs(body.wait_seconds) + LEASE_SLACK;
        let req = self
            .request(Method::POST, &["lease"])?
            .timeout(timeout)
            .json(body);
        let resp = send(req).await?;
        if resp.status() == StatusCode::NO_CONTENT {
            return Ok(None);
        }
        json(resp).await.map(Some)
    }

    pub(crate) async fn heartbeat(
        &self,
        run: &str,
        fencing: i64,
        timeout: Duration,
    ) -> Result<HeartbeatReply, ClientError> {
        let req = self
            .request(Method::POST, &[runs_of(run), run, "heartbeat"])?
            .timeout(timeout)
            .json(&Heartbeat { fencing });
        json(send(req).await?).await
    }

    /// The `seq` the run's next log chunk gets.
    pub(crate) async fn next_log_seq(&self, run: &str, fencing: i64) -> Result<i64, ClientError> {
        let req = self
            .request(Method::GET, &[runs_of(run), run, "logs", "next"])?
            .query(&FencingQuery { fencing });
        let next: NextSeq = json(send(req).await?).await?;
        Ok(next.next_seq)
    }

    pub(crate) async fn append_logs(&self, run: &str, body: &LogAppend) -> Result<(), ClientError> {
        let req = self
            .request(Method::POST, &[runs_of(run), run, "logs"])?
            .json(body);
        send(req).await.map(drop)
    }

    pub(crate) async fn put_plan(
        &self,
        run: &str,
        fencing: i64,
        plan: Vec<u8>,
    ) -> Result<(), ClientError> {
        let req = self
            .request(Method::PUT, &["runs", run, "plan"])?
            .timeout(PLAN_TIMEOUT)
            .query(&FencingQuery { fencing })
            .header(CONTENT_TYPE, "application/octet-stream")
            .body(plan);
        send(req).await.map(drop)
    }

    /// Uploads the plan's JSON (`show -json`), which the server's policies read.
    pub(crate) async fn put_plan_json(
        &self,
        run: &str,
        fencing: i64,
        json: Vec<u8>,
    ) -> Result<(), ClientError> {
        let req = self
            .request(Method::PUT, &["runs", run, "plan-json"])?
            .timeout(PLAN_TIMEOUT)
            .query(&FencingQuery { fencing })
            .header(CONTENT_TYPE, "application/json")
            .body(json);
        send(req).await.map(drop)
    }

    /// Hands back the lease `fencing` of `run`, which an earlier process of this runner
    /// held and left with nothing executing it.
    pub(crate) async fn abandon(&self, run: &str, fencing: i64) -> Result<(), ClientError> {
        let req = self
            .request(Method::POST, &["runs", run, "abandon"])?
            .query(&FencingQuery { fencing });
        send(req).await.map(drop)
    }

    /// Delivers the state the engine of `run`'s lease `fencing` could not write (its
    /// `errored.tfstate`); the server stores it once, flagged as recovered with `reason`,
    /// and answers the version.
    pub(crate) async fn put_recovered_state(
        &self,
        run: &str,
        fencing: i64,
        reason: &str,
        state: Vec<u8>,
    ) -> Result<bosun_api::StateVersion, ClientError> {
        #[derive(Serialize)]
        struct Query<'a> {
            fencing: i64,
            reason: &'a str,
        }
        let req = self
            .request(Method::PUT, &["runs", run, "recovered-state"])?
            .timeout(PLAN_TIMEOUT)
            .query(&Query { fencing, reason })
            .header(CONTENT_TYPE, "application/json")
            .body(state);
        json(send(req).await?).await
    }

    pub(crate) async fn get_plan(&self, run: &str, fencing: i64) -> Result<Vec<u8>, ClientError> {
        let req = self
            .request(Method::GET, &["runs", run, "plan"])?
            .timeout(PLAN_TIMEOUT)
            .query(&FencingQuery { fencing });
        let resp = send(req).await?;
        let bytes = resp.bytes().await.map_err(ClientError::Transport)?;
        Ok(bytes.to_vec())
    }

    /// Asks the run's ID-token request URL (`url`, from the lease) for an ID token for
    /// `audience`, with the lease's request `token` as the bearer token — in place of the
    /// pool token, which this request never carries.
    pub(crate) async fn id_token(
        &self,
        url: &Url,
        token: &str,
        audience: &str,
    ) -> Result<IdToken, ClientError> {
        let mut auth = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
            ClientError::Protocol(
                "the ID-token request token cannot be sent in an HTTP header".to_string(),
            )
        })?;
        auth.set_sensitive(true);
        let req = self
            .http
            .get(url.clone())
            .timeout(REQUEST_TIMEOUT)
            // A request's own header wins over the client's default (the pool token).
            .header(AUTHORIZATION, auth)
            .query(&[("audience", audience)]);
        let id: IdToken = json(send(req).await?).await?;
        if id.value.trim().is_empty() {
            return Err(ClientError::Protocol(
                "the server sent an empty ID token".to_string(),
            ));
        }
        Ok(id)
    }

    /// Per-host results of a plan run's finished steps.
    pub(crate) async fn plan_results(
        &self,
        run: &str,
        body: &PlanResultsAppend,
    ) -> Result<(), ClientError> {
        let req = self
            .request(Method::POST, &["plan-runs", run, "results"])?
            .json(body);
        send(req).await.map(drop)
    }

    pub(crate) async fn plan_report(
        &self,
        run: &str,
        body: &PlanRunnerReport,
    ) -> Result<(), ClientError> {
        let req = self
            .request(Method::POST, &["plan-runs", run, "report"])?
            .json(body);
        send(req).await.map(drop)
    }

    pub(crate) async fn report(&self, run: &str, body: &RunnerReport) -> Result<(), ClientError> {
        let req = self
            .request(Method::POST, &["runs", run, "report"])?
            .json(body);
        send(req).await.map(drop)
    }
}

/// Where a run's heartbeat and log calls go: plan runs (`prun-…`) under `plan-runs`,
/// stack runs under `runs` — so the heartbeat loop and the log shipper serve both.
fn runs_of(run: &str) -> &'static str {
    if run.starts_with("prun-") {
        "plan-runs"
    } else {
        "runs"
    }
}

/// Sends a request; a non-2xx answer becomes the error its body describes.
async fn send(req: RequestBuilder) -> Result<Response, ClientError> {
    let resp = req.send().await.map_err(ClientError::Transport)?;
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let text = resp.text().await.unwrap_or_default();
    let (code, message) = match serde_json::from_str::<ErrorBody>(&text) {
        Ok(body) => (Some(body.error.code), body.error.message),
        Err(_) => (
            None,
            text.chars()
                .take(300)
                .collect::<String>()
                .trim()
                .to_string(),
        ),
    };
    if status == StatusCode::CONFLICT && code == Some(ErrorCode::Fenced) {
        return Err(ClientError::Fenced);
    }
    Err(ClientError::Api {
        status,
        code,
        message,
    })
}

async fn json<T: DeserializeOwned>(resp: Response) -> Result<T, ClientError> {
    let bytes = resp.bytes().await.map_err(ClientError::Transport)?;
    serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol(e.to_string()))
}

/// Exponential backoff: 0.2 s, doubling, at most 5 s.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    next: Duration,
}

impl Backoff {
    pub(crate) const FIRST: Duration = Duration::from_millis(200);
    pub(crate) const MAX: Duration = Duration::from_secs(5);

    pub(crate) fn new() -> Self {
        Backoff { next: Self::FIRST }
    }

    /// The delay before the next attempt.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        delay
    }

    pub(crate) fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

/// Runs `op` until it succeeds, fails for good (not `is_retryable`, `Fenced` included), or
/// `give_up` resolves (then `GaveUp`). Retries back off exponentially.
pub(crate) async fn retry<T, F, Fut>(
    what: &str,
    give_up: impl Future<Output = ()>,
    mut op: F,
) -> Result<T, ClientError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    tokio::pin!(give_up);
    let mut backoff = Backoff::new();
    loop {
        let result = tokio::select! {
            r = op() => r,
            () = &mut give_up => return Err(ClientError::GaveUp),
        };
        match result {
            Ok(value) => return Ok(value),
            Err(e) if e.is_retryable() => {
                let delay = backoff.next_delay();
                tracing::warn!(error = %e, retry_in = ?delay, "{what} failed; retrying");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = &mut give_up => return Err(ClientError::GaveUp),
                }
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_five_seconds() {
        let mut b = Backoff::new();
        let delays: Vec<u64> = (0..8).map(|_| b.next_delay().as_millis() as u64).collect();
        assert_eq!(delays, [200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(200));
    }

    #[test]
    fn urls_keep_a_base_path_and_encode_segments() {
        let c = ServerClient::new("http://example.test/bosun/", "t").unwrap();
        let url = c.url(&["runs", "r 1", "logs", "next"]).unwrap();
        assert_eq!(
            url.as_str(),
            "http://example.test/bosun/api/v1/runner/runs/r%201/logs/next"
        );
        let c = ServerClient::new("http://127.0.0.1:8080", "t").unwrap();
        assert_eq!(
            c.url(&["lease"]).unwrap().as_str(),
            "http://127.0.0.1:8080/api/v1/runner/lease"
        );
    }

    #[test]
    fn bad_urls_and_tokens_are_refused() {
        assert!(matches!(
            ServerClient::new("ftp://x", "t"),
            Err(RunnerError::InvalidServerUrl(_))
        ));
        assert!(matches!(
            ServerClient::new("localhost:8080", "t"),
            Err(RunnerError::InvalidServerUrl(_))
        ));
        assert!(matches!(
            ServerClient::new("http://x", " "),
            Err(RunnerError::MissingToken)
        ));
        assert!(matches!(
            ServerClient::new("http://x", "a\nb"),
            Err(RunnerError::InvalidToken)
        ));
    }
}
