//! Integrations: steps of a phase's environment the runner resolves itself, strictly one
//! after the other in the lease's order, after the checkout and before `started` is
//! reported — so a failing one fails the phase while the run is still preparing, names
//! the integration (`integration <name> failed: <why>`), and the engine never starts.
//! Each that succeeds logs `bosun: integration <name>: ok` and adds variables to the
//! engine's environment (after the stack's own, so a later integration's value wins over
//! an earlier one's).
//!
//! `AwsWebIdentity`: an ID token of the run for the integration's audience, fetched from
//! the lease's ID-token request URL, is written to a 0600 file in the workspace's
//! `identity/` directory (beside the checkout, not in it); the engine gets
//! `AWS_WEB_IDENTITY_TOKEN_FILE`, `AWS_ROLE_ARN` and `AWS_ROLE_SESSION_NAME`, which the
//! AWS SDKs use to assume the role themselves. While the phase runs, a task per token
//! replaces the file (a temporary file renamed over it, so a reader never sees half a
//! token) at two thirds of the token's remaining lifetime; a failed refresh is logged and
//! retried, never fatal. Every token fetched is masked in the log before it is written.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bosun_api::RunnerIntegration;
use reqwest::Url;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::Instrument as _;

use crate::client::{Backoff, ClientError, IdToken, ServerClient};
use crate::control::{Stop, StopSignal};
use crate::logs::LogSink;
use crate::phase::{Halt, PhaseContext};
use crate::workspace::create_private_dir;

/// The workspace directory (beside `src/`) that holds identity token files.
pub(crate) const IDENTITY_DIR: &str = "identity";
/// How long the first fetch of a token retries a server that is unavailable (5xx,
/// unreachable) before the integration fails.
const FETCH_BUDGET: Duration = Duration::from_secs(60);
/// The soonest a token is refreshed after a fetch: a token that is about to expire, or
/// already has, must not make a busy loop of requests.
const MIN_REFRESH_DELAY: Duration = Duration::from_secs(1);
/// The latest a token is refreshed after a fetch, however long it lives.
const MAX_REFRESH_DELAY: Duration = Duration::from_secs(24 * 60 * 60);
/// After a failed refresh the next try comes after 1 s, doubling up to this.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(60);

/// What the integrations of a phase resolved. `stop` it when the phase ends (before the
/// workspace is removed): token refreshes stop with it.
pub(crate) struct Resolved {
    /// Variables for the engine, in lease order.
    pub(crate) env: Vec<(String, String)>,
    refreshers: Vec<Refresher>,
}

impl Resolved {
    /// Stops the refresh tasks and waits for them: a token file being written is finished
    /// first, nothing is written afterwards.
    pub(crate) async fn stop(self) {
        for refresher in self.refreshers {
            refresher.stop().await;
        }
    }
}

/// How one integration did not succeed.
enum Failure {
    /// Why it failed (the phase fails naming the integration).
    Failed(String),
    /// The phase was stopped while it ran.
    Stopped(Stop),
}

/// The name an integration goes by in the log and in failure reasons.
fn integration_name(integration: &RunnerIntegration) -> &str {
    match integration {
        RunnerIntegration::AwsWebIdentity { name, .. } => name,
    }
}

/// Resolves the lease's integrations in order; the first failure stops there (refreshes
/// already started are stopped) and fails the phase.
pub(crate) async fn resolve(ctx: &PhaseContext<'_>, workspace: &Path) -> Result<Resolved, Halt> {
    let mut resolved = Resolved {
        env: Vec::new(),
        refreshers: Vec::new(),
    };
    for (index, integration) in ctx.lease.integrations.iter().enumerate() {
        let name = integration_name(integration);
        let outcome = match ctx.stop.current() {
            Some(stop) => Err(Failure::Stopped(stop)),
            None => match integration {
                RunnerIntegration::AwsWebIdentity {
                    name,
                    role_arn,
                    audience,
                    session_name,
                } => {
                    let aws = AwsWebIdentity {
                        name,
                        role_arn,
                        audience,
                        session_name,
                    };
                    aws.resolve(ctx, workspace, index).await
                }
            },
        };
        match outcome {
            Ok((env, refresher)) => {
                resolved.env.extend(env);
                resolved.refreshers.push(refresher);
                ctx.log.line(format!("bosun: integration {name}: ok")).await;
            }
            Err(failure) => {
                resolved.stop().await;
                return Err(match failure {
                    Failure::Failed(why) => {
                        Halt::Failed(format!("integration {name} failed: {why}"))
                    }
                    Failure::Stopped(stop) => Halt::Stopped(stop),
                });
            }
        }
    }
    Ok(resolved)
}

struct AwsWebIdentity<'a> {
    name: &'a str,
    role_arn: &'a str,
    audience: &'a str,
    session_name: &'a str,
}

impl AwsWebIdentity<'_> {
    async fn resolve(
        &self,
        ctx: &PhaseContext<'_>,
        workspace: &Path,
        index: usize,
    ) -> Result<(Vec<(String, String)>, Refresher), Failure> {
        if self.role_arn.trim().is_empty() {
            return Err(Failure::Failed("it names no role ARN".to_string()));
        }
        if self.audience.trim().is_empty() {
            return Err(Failure::Failed("it names no token audience".to_string()));
        }
        let source = IdTokenSource::of_lease(ctx)?;
        let token = source
            .fetch_with_retries(self.audience, ctx.stop)
            .await
            .map_err(|failure| match failure {
                Failure::Failed(why) => Failure::Failed(format!(
                    "cannot get an ID token for audience {:?}: {why}",
                    self.audience
                )),
                stopped => stopped,
            })?;
        // Masked before it can reach anything the engine might print.
        ctx.log.add_secret(token.value.clone());
        let dir = workspace.join(IDENTITY_DIR);
        let file = dir.join(format!("aws-web-identity-{}.jwt", index + 1));
        let written = match create_private_dir(&dir).await {
            Ok(()) => write_token_file(&file, &token.value).await,
            Err(e) => Err(e),
        };
        written.map_err(|e| {
            Failure::Failed(format!(
                "cannot write the token file {}: {e}",
                file.display()
            ))
        })?;
        let refresher = Refresher::start(RefreshJob {
            name: self.name.to_string(),
            source,
            audience: self.audience.to_string(),
            file: file.clone(),
            log: ctx.log.clone(),
            expires_at: token.expires_at,
        });
        let env = vec![
            (
                "AWS_WEB_IDENTITY_TOKEN_FILE".to_string(),
                file.display().to_string(),
            ),
            ("AWS_ROLE_ARN".to_string(), self.role_arn.to_string()),
            (
                "AWS_ROLE_SESSION_NAME".to_string(),
                self.session_name.to_string(),
            ),
        ];
        Ok((env, refresher))
    }
}

/// Where the run's ID tokens come from: the lease's request URL and token, over the
/// runner's HTTP client.
#[derive(Clone)]
struct IdTokenSource {
    client: Arc<ServerClient>,
    url: Url,
    token: String,
}

impl IdTokenSource {
    fn of_lease(ctx: &PhaseContext<'_>) -> Result<Self, Failure> {
        let lease = ctx.lease;
        let url = lease.id_token_request_url.trim();
        if url.is_empty() {
            return Err(Failure::Failed(
                "the server gave this run no identity (the lease has no ID-token request URL)"
                    .to_string(),
            ));
        }
        let url = Url::parse(url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https"))
            .ok_or_else(|| Failure::Failed(format!("invalid ID-token request URL {url:?}")))?;
        Ok(IdTokenSource {
            client: Arc::clone(ctx.client),
            url,
            token: lease.id_token_request_token.clone(),
        })
    }

    async fn fetch(&self, audience: &str) -> Result<IdToken, ClientError> {
        self.client.id_token(&self.url, &self.token, audience).await
    }

    /// Fetches a token, retrying an unavailable server for up to `FETCH_BUDGET`; a stop of
    /// the phase ends the wait.
    async fn fetch_with_retries(
        &self,
        audience: &str,
        stop: &StopSignal,
    ) -> Result<IdToken, Failure> {
        let deadline = Instant::now() + FETCH_BUDGET;
        let mut backoff = Backoff::new();
        loop {
            let fetched = tokio::select! {
                r = self.fetch(audience) => r,
                stop = stop.stopped() => return Err(Failure::Stopped(stop)),
            };
            match fetched {
                Ok(token) => return Ok(token),
                Err(ClientError::Fenced) => return Err(Failure::Stopped(Stop::Fenced)),
                Err(e) if e.is_retryable() => {
                    let delay = backoff.next_delay();
                    if Instant::now() + delay > deadline {
                        return Err(Failure::Failed(e.to_string()));
                    }
                    tracing::warn!(error = %e, retry_in = ?delay,
                        "fetching an ID token failed; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        stop = stop.stopped() => return Err(Failure::Stopped(stop)),
                    }
                }
                Err(e) => return Err(Failure::Failed(e.to_string())),
            }
        }
    }
}

/// Keeps one token file fresh.
struct RefreshJob {
    /// The integration's name, for the log.
    name: String,
    source: IdTokenSource,
    audience: String,
    file: PathBuf,
    log: LogSink,
    /// When the token in the file expires, unix seconds.
    expires_at: i64,
}

/// A running refresh task. Stopping it waits for it; dropping it aborts it.
struct Refresher {
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Refresher {
    fn start(job: RefreshJob) -> Refresher {
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(refresh_loop(job, stopped).in_current_span());
        Refresher {
            stop: Some(stop),
            task: Some(task),
        }
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            if let Err(e) = task.await {
                tracing::warn!(error = %e, "an identity token refresh task failed");
            }
        }
    }
}

impl Drop for Refresher {
    fn drop(&mut self) {
        // Only on unusual ways out (a panic, a dropped future): the usual one is `stop`.
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Replaces the token file before its token expires, until told to stop. The stop is
/// heeded while waiting or fetching, never in the middle of writing the file.
async fn refresh_loop(mut job: RefreshJob, mut stopped: oneshot::Receiver<()>) {
    let mut delay = refresh_delay(job.expires_at, now_millis());
    let mut failures: u32 = 0;
    loop {
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            _ = &mut stopped => return,
        }
        let fetched = tokio::select! {
            r = job.source.fetch(&job.audience) => r,
            _ = &mut stopped => return,
        };
        let refreshed = match fetched {
            Ok(token) => {
                job.log.add_secret(token.value.clone());
                match write_token_file(&job.file, &token.value).await {
                    Ok(()) => Ok(token.expires_at),
                    Err(e) => Err(format!(
                        "cannot write the token file {}: {e}",
                        job.file.display()
                    )),
                }
            }
            Err(e) => Err(format!(
                "cannot get an ID token for audience {:?}: {e}",
                job.audience
            )),
        };
        match refreshed {
            Ok(expires_at) => {
                job.expires_at = expires_at;
                failures = 0;
                delay = refresh_delay(expires_at, now_millis());
                job.log
                    .line(format!(
                        "bosun: integration {}: identity token refreshed",
                        job.name
                    ))
                    .await;
            }
            Err(why) => {
                failures = failures.saturating_add(1);
                delay = retry_delay(failures);
                job.log
                    .line(format!(
                        "bosun: integration {}: refreshing the identity token failed \
                         (retrying in {delay:?}; the current token stays in place): {why}",
                        job.name
                    ))
                    .await;
            }
        }
    }
}

/// The wall clock, unix milliseconds.
fn now_millis() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i128::try_from(d.as_millis()).unwrap_or(i128::MAX))
}

/// When to refresh a token expiring at `expires_at` (unix seconds), at `now` (unix
/// milliseconds): after two thirds of its remaining lifetime, within
/// [`MIN_REFRESH_DELAY`, `MAX_REFRESH_DELAY`].
fn refresh_delay(expires_at: i64, now: i128) -> Duration {
    let remaining = i128::from(expires_at) * 1000 - now;
    let millis = (remaining * 2 / 3).clamp(
        MIN_REFRESH_DELAY.as_millis() as i128,
        MAX_REFRESH_DELAY.as_millis() as i128,
    );
    Duration::from_millis(u64::try_from(millis).unwrap_or(u64::MAX))
}

/// The wait before the next try after `failures` failed refreshes in a row: 1 s,
/// doubling, at most `MAX_RETRY_DELAY`.
fn retry_delay(failures: u32) -> Duration {
    let doubled = 1u64
        .checked_shl(failures.saturating_sub(1))
        .unwrap_or(u64::MAX);
    Duration::from_secs(doubled).min(MAX_RETRY_DELAY)
}

/// Writes `value` to `path`, readable by the runner's user only (0600), atomically: a
/// temporary file beside it, renamed over it.
async fn write_token_file(path: &Path, value: &str) -> io::Result<()> {
    let path = path.to_path_buf();
    let bytes = value.as_bytes().to_vec();
    match tokio::task::spawn_blocking(move || write_atomically(&path, &bytes)).await {
        Ok(result) => result,
        Err(join) => Err(io::Error::other(join)),
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let mut tmp_name = path
        .file_name()
        .ok_or_else(|| io::Error::other("a token file needs a file name"))?
        .to_os_string();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    // A leftover of an interrupted write is replaced, never reused with its mode.
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        // Whatever the umask, exactly 0600.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_refreshed_at_two_thirds_of_their_lifetime() {
        let now = 1_000_000_000_000; // unix ms
        let in_secs = |s: i64| now as i64 / 1000 + s;
        assert_eq!(refresh_delay(in_secs(3600), now), Duration::from_secs(2400));
        assert_eq!(refresh_delay(in_secs(3), now), Duration::from_secs(2));
        // Expired or about to: not sooner than a second.
        assert_eq!(refresh_delay(in_secs(1), now), MIN_REFRESH_DELAY);
        assert_eq!(refresh_delay(in_secs(-50), now), MIN_REFRESH_DELAY);
        assert_eq!(refresh_delay(i64::MIN, now), MIN_REFRESH_DELAY);
        // Very long-lived: at least once a day.
        assert_eq!(refresh_delay(i64::MAX, now), MAX_REFRESH_DELAY);
    }

    #[test]
    fn failed_refreshes_are_retried_with_backoff() {
        let delays: Vec<u64> = (1..=9).map(|n| retry_delay(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(retry_delay(u32::MAX), MAX_RETRY_DELAY);
    }

    #[test]
    fn token_files_are_private_and_replaced_whole() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t.jwt");
        write_atomically(&file, b"one").unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "one");
        // A leftover temporary file with loose permissions is not reused.
        let tmp = dir.path().join("t.jwt.tmp");
        std::fs::write(&tmp, "stale").unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_atomically(&file, b"two").unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "two");
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(!tmp.exists());
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["t.jwt"]);
    }
}
