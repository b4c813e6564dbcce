//! `bosun login` and `bosun logout`: signing the CLI in at the server's identity provider
//! with the device authorization grant (open a URL, enter a code, approve) or, where the
//! provider lacks it (or `--browser` asks), through this machine's browser, which comes
//! back to a listener of the CLI on loopback (RFC 8252); and keeping the short-lived
//! personal token it gets in the credentials file, per server URL (mode 0600). Client commands use that token when neither --token nor BOSUN_TOKEN is given.
//! `bosun login --refresh` replaces it before it expires (the provider is asked again, so
//! roles follow it), and client commands do so themselves once less than
//! [`REFRESH_WHEN_LEFT`] of it is left; `bosun logout` ends the login on the server and
//! forgets the token.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, Context};
use bosun_api::{
    CliLoginExchange, CliLoginMethod, CliLoginPoll, CliLoginStart, CliLoginStarted, CliLoginStatus,
    CliLoopback, TokenCreated,
};
use chrono::{DateTime, Utc};
use clap::Args;
use serde::{Deserialize, Serialize};

use crate::client::{Client, ClientConfig};
use crate::output::timestamp;

#[derive(Args)]
pub struct LoginArgs {
    /// The identity provider to sign in with (its id on the server; default: its first).
    #[arg(long)]
    provider: Option<String>,
    /// Replace the token of an earlier `bosun login` with a new one.
    #[arg(long, conflicts_with_all = ["provider", "browser"])]
    refresh: bool,
    /// Sign in through this machine's browser even where the provider offers the device
    /// flow (the browser comes back to this command on 127.0.0.1).
    #[arg(long)]
    browser: bool,
}

/// The path the CLI's loopback listener answers the browser's return on.
const LOOPBACK_PATH: &str = "/bosun-login";
/// The longest request head the loopback listener reads.
const MAX_REQUEST_HEAD: usize = 16 * 1024;

/// A client command replaces a saved login's token once less than this is left of it.
pub const REFRESH_WHEN_LEFT: chrono::Duration = chrono::Duration::minutes(20);

/// One server's saved login.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Saved {
    token: String,
    token_id: String,
    expires_at: Option<DateTime<Utc>>,
    #[serde(default)]
    session: Option<String>,
}

/// Where logins are kept: `$BOSUN_CREDENTIALS`, else `$XDG_CONFIG_HOME/bosun/credentials.json`,
/// else `~/.config/bosun/credentials.json`.
fn credentials_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("BOSUN_CREDENTIALS").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(config.join("bosun").join("credentials.json"))
}

/// The server URL as a key: without a trailing slash.
fn key(url: &str) -> String {
    url.trim_end_matches('/').to_string()
}

fn load() -> BTreeMap<String, Saved> {
    credentials_path()
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

fn store(all: &BTreeMap<String, Saved>) -> anyhow::Result<PathBuf> {
    let path = credentials_path()
        .ok_or_else(|| anyhow!("no place for credentials: set BOSUN_CREDENTIALS or HOME"))?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        f.write_all(&serde_json::to_vec_pretty(all)?)?;
    }
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// The token of this server's saved login, while it has not expired.
pub fn stored_token(url: &str) -> Option<String> {
    load()
        .remove(&key(url))
        .filter(|s| s.expires_at.is_none_or(|e| e > Utc::now()))
        .map(|s| s.token)
}

fn keep(url: &str, created: &TokenCreated, session: Option<String>) -> anyhow::Result<PathBuf> {
    let mut all = load();
    all.insert(
        key(url),
        Saved {
            token: created.secret.clone(),
            token_id: created.token.id.clone(),
            expires_at: created.token.expires_at,
            session,
        },
    );
    store(&all)
}

fn say(json: bool, text: &str) {
    if !json {
        eprintln!("{text}");
    }
}

/// Replaces the saved login's token with a new one from the server; where it is kept.
async fn refresh(config: ClientConfig, saved: Saved) -> anyhow::Result<(TokenCreated, PathBuf)> {
    let url = config.url.clone();
    let client = Client::new(ClientConfig {
        token: Some(saved.token.clone()),
        ..config
    })?;
    let value = client
        .post(&["login", "refresh"], &serde_json::json!({}))
        .await?;
    let created: TokenCreated = serde_json::from_value(value)?;
    let path = keep(&url, &created, saved.session)?;
    Ok((created, path))
}

/// Before a client command: replaces this server's saved login token when less than
/// [`REFRESH_WHEN_LEFT`] of it is left (and it has not expired). A refusal is said on
/// stderr; the command goes on with the token it has.
pub async fn refresh_if_due(config: ClientConfig) {
    let Some(saved) = load().remove(&key(&config.url)) else {
        return;
    };
    let now = Utc::now();
    let due = saved
        .expires_at
        .is_some_and(|e| e > now && e - now < REFRESH_WHEN_LEFT);
    if !due {
        return;
    }
    if let Err(e) = refresh(config, saved).await {
        eprintln!("warning: could not refresh the bosun login token: {e}");
    }
}

pub async fn login(config: ClientConfig, args: LoginArgs, json: bool) -> anyhow::Result<()> {
    let url = config.url.clone();
    if args.refresh {
        let saved = load()
            .remove(&key(&url))
            .ok_or_else(|| anyhow!("no login to refresh for {url}: run bosun login first"))?;
        let (created, path) = refresh(config, saved).await?;
        return done(json, &url, &created, &path);
    }
    let client = Client::anonymous(config)?;
    // Listening before asking: the server may send the person through this machine's
    // browser, back to here. Where nothing can listen, only the device flow is offered.
    let listener = match tokio::net::TcpListener::bind(("127.0.0.1", 0)).await {
        Ok(l) => Some(l),
        Err(e) if !args.browser => {
            tracing::debug!("no loopback listener ({e}); the device flow only");
            None
        }
        Err(e) => {
            return Err(anyhow!(
                "cannot listen on 127.0.0.1 for the browser's return: {e}"
            ))
        }
    };
    let verifier = bosun_server::sign_in::oidc::random_text();
    let loopback = match &listener {
        Some(l) => Some(CliLoopback {
            redirect_uri: format!("http://127.0.0.1:{}{LOOPBACK_PATH}", l.local_addr()?.port()),
            code_challenge: bosun_server::sign_in::oidc::pkce_challenge(&verifier),
        }),
        None => None,
    };
    let started: CliLoginStarted = serde_json::from_value(
        client
            .post_outside_api(
                &["cli-login"],
                &CliLoginStart {
                    provider: args.provider,
                    loopback,
                    browser: args.browser,
                },
            )
            .await?,
    )?;
    let status = match started.method {
        CliLoginMethod::Device => {
            drop(listener);
            device_flow(&client, &url, &started).await?
        }
        CliLoginMethod::Browser => {
            let Some(listener) = listener else {
                anyhow::bail!("the server asked for a login through the browser, but nothing listens here for its return");
            };
            // Machine-readable even with --json: a script must be able to show it.
            eprintln!(
                "To log in to {url}, open this in a browser on this machine (it comes back here once you signed in; it expires at {}):\n{}",
                timestamp(&started.expires_at),
                started.verification_uri
            );
            eprintln!("verification: {}", started.verification_uri);
            open_browser(&started.verification_uri);
            let code = loopback_code(&listener, started.expires_at).await?;
            serde_json::from_value(
                client
                    .post_outside_api(
                        &["cli-login", "exchange"],
                        &CliLoginExchange { code, verifier },
                    )
                    .await?,
            )?
        }
    };
    let Some(created) = status.token else {
        anyhow::bail!("the server finished the login without a token");
    };
    let path = keep(&url, &created, status.session)?;
    done(json, &url, &created, &path)
}

/// Opens `url` in the person's browser when someone is at the terminal: `$BROWSER`, else
/// the desktop's opener (`xdg-open`, or `open` on macOS). Quietly nothing otherwise (the
/// URL is printed either way), and never in scripts or with `BOSUN_NO_BROWSER` set.
fn open_browser(url: &str) {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() || std::env::var_os("BOSUN_NO_BROWSER").is_some() {
        return;
    }
    let opener = std::env::var("BROWSER")
        .ok()
        .filter(|b| !b.trim().is_empty())
        .unwrap_or_else(|| {
            if cfg!(target_os = "macos") {
                "open".into()
            } else {
                "xdg-open".into()
            }
        });
    let spawned = std::process::Command::new(opener.trim())
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    // Reaped in the background: the opener returns at once, the browser lives on.
    if let Ok(mut child) = spawned {
        std::thread::spawn(move || child.wait());
    }
}

/// The device flow: the person confirms the code anywhere while this polls.
async fn device_flow(
    client: &Client,
    url: &str,
    started: &CliLoginStarted,
) -> anyhow::Result<CliLoginStatus> {
    let (Some(login), Some(user_code)) = (&started.login, &started.user_code) else {
        anyhow::bail!("the server began a device login without its login handle or code");
    };
    let open = started
        .verification_uri_complete
        .clone()
        .unwrap_or_else(|| started.verification_uri.clone());
    // Machine-readable even with --json: a script must be able to show it to the person.
    eprintln!(
        "To log in to {url}, open {open}\nand confirm the code {user_code} (it expires at {}).",
        timestamp(&started.expires_at)
    );
    eprintln!("verification: {open} code: {user_code}");
    let mut interval = Duration::from_secs(started.interval.unwrap_or(5).clamp(1, 60));
    loop {
        if Utc::now() > started.expires_at {
            anyhow::bail!("the login expired before it was approved; run bosun login again");
        }
        tokio::time::sleep(interval).await;
        let status: CliLoginStatus = serde_json::from_value(
            client
                .post_outside_api(
                    &["cli-login", "poll"],
                    &CliLoginPoll {
                        login: login.clone(),
                    },
                )
                .await?,
        )?;
        if status.status == "done" && status.token.is_some() {
            return Ok(status);
        }
        if let Some(s) = status.interval {
            interval = Duration::from_secs(s.clamp(1, 60));
        }
    }
}

/// How many requests to the loopback listener are read at once: a browser may hold a
/// preconnected socket idle beside the one it sends on.
const LOOPBACK_CONNECTIONS: usize = 8;

/// Waits on the loopback listener for the browser's return: the `code` it carries, or
/// the refusal it names. Other requests (a favicon, a stray visitor) are answered 404 and
/// waited past; each is read on its own within a bound of size and time, so an idle
/// socket holds nothing up.
async fn loopback_code(
    listener: &tokio::net::TcpListener,
    expires_at: DateTime<Utc>,
) -> anyhow::Result<String> {
    let left = (expires_at - Utc::now()).to_std().unwrap_or_default();
    let deadline = tokio::time::Instant::now() + left;
    let mut reading = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept(), if reading.len() < LOOPBACK_CONNECTIONS => {
                let (conn, _) = accepted.context("the loopback listener failed")?;
                reading.spawn(answer_loopback(conn));
            }
            Some(read) = reading.join_next() => match read {
                Ok(Some(Ok(code))) => return Ok(code),
                Ok(Some(Err(why))) => anyhow::bail!("the login was refused: {why}"),
                Ok(None) | Err(_) => {}
            },
            _ = tokio::time::sleep_until(deadline) => anyhow::bail!(
                "the login expired before the browser came back; run bosun login again"
            ),
        }
    }
}

/// Reads one request to the loopback listener (within 10 s) and answers it: what it says
/// (see [`loopback_answer`]), `None` for anything else.
async fn answer_loopback(mut conn: tokio::net::TcpStream) -> Option<Result<String, String>> {
    use tokio::io::AsyncWriteExt;
    let head = tokio::time::timeout(Duration::from_secs(10), read_head(&mut conn))
        .await
        .ok()?
        .ok()?;
    let answer = loopback_answer(&head);
    let (status, page) = match &answer {
        Some(Ok(_)) => (
            "200 OK",
            "Signed in to Bosun. You can close this tab and go back to the terminal.",
        ),
        Some(Err(_)) => (
            "200 OK",
            "Bosun could not sign you in; the terminal says why.",
        ),
        None => ("404 Not Found", "Not a Bosun login."),
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\ncache-control: no-store\r\nconnection: close\r\n\r\n{page}",
        page.len()
    );
    let _ = conn.write_all(reply.as_bytes()).await;
    let _ = conn.shutdown().await;
    answer
}

/// A request's head, up to the blank line (at most [`MAX_REQUEST_HEAD`] bytes).
async fn read_head(conn: &mut tokio::net::TcpStream) -> anyhow::Result<String> {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 2048];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        if buf.len() > MAX_REQUEST_HEAD {
            anyhow::bail!("request head over {MAX_REQUEST_HEAD} bytes");
        }
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// What a request to the loopback says: `None` when it is not the login's return,
/// else its `code`, or the refusal its `error` names.
fn loopback_answer(head: &str) -> Option<Result<String, String>> {
    let line = head.lines().next()?;
    let mut parts = line.split(' ');
    let (Some("GET"), Some(target)) = (parts.next(), parts.next()) else {
        return None;
    };
    let url = reqwest::Url::parse(&format!("http://127.0.0.1{target}")).ok()?;
    if url.path() != LOOPBACK_PATH {
        return None;
    }
    let mut code = None;
    let mut error = None;
    for (k, v) in url.query_pairs() {
        match k.as_ref() {
            "code" => code = Some(v.into_owned()),
            "error" => error = Some(v.into_owned()),
            _ => {}
        }
    }
    match (code, error) {
        (_, Some(why)) => Some(Err(why)),
        (Some(code), None) => Some(Ok(code)),
        (None, None) => None,
    }
}

fn done(
    json: bool,
    url: &str,
    created: &TokenCreated,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    if json {
        println!(
            "{}",
            serde_json::json!({
                "server": url,
                "token": created.token,
                "credentials": path,
            })
        );
    } else {
        say(
            json,
            &format!(
                "Logged in to {url} as {} (token {}, expires {}); kept in {}.",
                created.token.user.as_deref().unwrap_or("?"),
                created.token.id,
                created
                    .token
                    .expires_at
                    .as_ref()
                    .map(timestamp)
                    .unwrap_or_else(|| "never".into()),
                path.display()
            ),
        );
    }
    Ok(())
}

pub async fn logout(config: ClientConfig, json: bool) -> anyhow::Result<()> {
    let url = config.url.clone();
    let mut all = load();
    let Some(saved) = all.remove(&key(&url)) else {
        say(json, &format!("Not logged in to {url}."));
        return Ok(());
    };
    let client = Client::new(ClientConfig {
        token: Some(saved.token.clone()),
        ..config
    })?;
    // Ending the login's session revokes its token; without one, the token alone.
    let ended = match &saved.session {
        Some(s) => client.delete(&["sessions", s]).await.map(|_| ()),
        None => client
            .delete(&["tokens", &saved.token_id])
            .await
            .map(|_| ()),
    };
    store(&all)?;
    match ended {
        Ok(()) => say(json, &format!("Logged out of {url}.")),
        // Already ended or expired on the server: forgotten here all the same.
        Err(e) => say(
            json,
            &format!("Forgot the login to {url} (the server said: {e})."),
        ),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn only_the_logins_return_is_read_from_a_request() {
        let get = |target: &str| format!("GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        assert_eq!(
            loopback_answer(&get("/bosun-login?code=a%2Eb.c&state=x")),
            Some(Ok("a.b.c".to_string()))
        );
        assert_eq!(
            loopback_answer(&get("/bosun-login?error=access%20denied&code=c")),
            Some(Err("access denied".to_string()))
        );
        for stray in [
            get("/favicon.ico"),
            get("/bosun-login"),
            get("/elsewhere?code=c"),
            "POST /bosun-login?code=c HTTP/1.1\r\n\r\n".to_string(),
            "garbage".to_string(),
            String::new(),
        ] {
            assert_eq!(loopback_answer(&stray), None, "{stray:?}");
        }
    }

    async fn send(addr: std::net::SocketAddr, bytes: &[u8]) -> String {
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        // The listener may close as soon as it read a head past its bound.
        let _ = conn.write_all(bytes).await;
        let mut reply = String::new();
        let _ = conn.read_to_string(&mut reply).await;
        reply
    }

    #[tokio::test]
    async fn the_loopback_listener_waits_past_strays_and_oversized_requests() {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let waiting = tokio::spawn(async move {
            loopback_code(&listener, Utc::now() + chrono::Duration::minutes(1)).await
        });
        // A socket held open and idle (as a browser's preconnect) holds nothing up.
        let _idle = tokio::net::TcpStream::connect(addr).await.unwrap();
        // A head past the bound is dropped unanswered; a stray is answered 404.
        let huge = format!("GET /bosun-login?code={} HTTP/1.1\r\n", "x".repeat(40_000));
        assert_eq!(send(addr, huge.as_bytes()).await, "");
        let stray = send(addr, b"GET /favicon.ico HTTP/1.1\r\n\r\n").await;
        assert!(stray.starts_with("HTTP/1.1 404"), "{stray}");
        // Then the browser's return.
        // Answered while the idle socket is still open: well inside its 10 s read bound.
        let done = tokio::time::timeout(
            Duration::from_secs(5),
            send(addr, b"GET /bosun-login?code=the-code HTTP/1.1\r\n\r\n"),
        )
        .await
        .expect("the return is answered beside an idle socket");
        assert!(done.contains("Signed in to Bosun"), "{done}");
        assert_eq!(waiting.await.unwrap().unwrap(), "the-code");
    }

    #[tokio::test]
    async fn the_loopback_listener_gives_up_when_the_login_expires() {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let err = loopback_code(&listener, Utc::now() + chrono::Duration::milliseconds(50))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("expired"), "{err}");
    }
}
