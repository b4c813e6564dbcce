//! Security regression tests (issue: safe to expose): the web edge. The console's login
//! (where the browser goes afterwards, the session cookie), the headers browsers get, the
//! CSRF origin check, the webhook's body cap before its signature is checked, the
//! OpenAPI document's query parameters, the runner protocol's refusal of other tokens,
//! and the data dir's file modes — each against the real server over HTTP (raw TCP
//! where the point is what the server does before reading a body).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bosun_core::Role;
use bosun_server::config::Secret;
use bosun_server::service::tokens::mint_run_token;
use reqwest::header::{
    HeaderMap, CONTENT_SECURITY_POLICY, COOKIE, HOST, LOCATION, ORIGIN, REFERRER_POLICY,
    SET_COOKIE, STRICT_TRANSPORT_SECURITY, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::TestServer;

/// A client that reports redirects instead of following them.
fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// `POST /login` with `token`, `next` and extra headers (a browser's `Origin`, a forged
/// `Host`).
async fn post_login(
    t: &TestServer,
    token: &str,
    next: &str,
    headers: &[(reqwest::header::HeaderName, String)],
) -> reqwest::Response {
    let mut req = browser()
        .post(format!("{}/login", t.url))
        .form(&[("token", token), ("next", next)]);
    for (name, value) in headers {
        req = req.header(name, value);
    }
    req.send().await.unwrap()
}

fn cookies(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect()
}

/// The `bosun_session=…` pair of a login's reply.
fn session_pair(headers: &HeaderMap) -> String {
    let all = cookies(headers);
    let c = all
        .iter()
        .find(|c| c.starts_with("bosun_session="))
        .unwrap_or_else(|| panic!("no session cookie in {all:?}"));
    c.split(';').next().unwrap().to_string()
}

/// The CSRF token a console page carries.
fn csrf_of(html: &str) -> String {
    let at = html
        .find("name=\"csrf-token\" content=\"")
        .expect("csrf meta")
        + 27;
    html[at..].split('"').next().unwrap().to_string()
}

#[tokio::test]
async fn login_next_with_a_tab_is_refused_and_other_sites_become_home() {
    let t = TestServer::start().await;
    let token = t.user_token("alice", Some(Role::Viewer)).await;

    // Browsers drop the tab: `/\t/evil.example` would be `//evil.example`, another site.
    let r = post_login(&t, &token, "/\t/evil.example", &[]).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.headers().get(LOCATION).is_none(), "{:?}", r.headers());
    assert!(cookies(r.headers()).is_empty(), "{:?}", r.headers());
    let page = r.text().await.unwrap();
    assert!(
        page.contains("next") && page.contains("control character"),
        "{page}"
    );

    // The login form itself never carries such a `next` into its hidden field.
    let form = browser()
        .get(format!("{}/login?next=/%09/evil.example", t.url))
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), StatusCode::OK);
    let form = form.text().await.unwrap();
    assert!(form.contains(r#"name="next" value="/""#), "{form}");

    // Other ways off the site go home instead; a path of the site is kept.
    for (next, expect) in [
        ("//evil.example/", "/"),
        ("/\\evil.example", "/"),
        ("https://evil.example/", "/"),
        ("/ /evil.example", "/"),
        ("/orgs/default/stacks?page=2", "/orgs/default/stacks?page=2"),
    ] {
        let r = post_login(&t, &token, next, &[]).await;
        assert_eq!(r.status(), StatusCode::SEE_OTHER, "{next:?}");
        assert_eq!(r.headers()[LOCATION], expect, "{next:?}");
        session_pair(r.headers());
    }
}

#[tokio::test]
async fn login_next_with_crlf_is_400_and_starts_no_session() {
    let t = TestServer::start().await;
    let token = t.user_token("alice", Some(Role::Viewer)).await;
    let r = post_login(&t, &token, "/x\r\nSet-Cookie: planted=1", &[]).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(cookies(r.headers()).is_empty(), "{:?}", r.headers());
    assert!(r.headers().get(LOCATION).is_none());
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let page = r.text().await.unwrap();
    assert!(
        page.contains("validation_failed") && page.contains("next"),
        "{page}"
    );
}

#[tokio::test]
async fn session_cookie_is_secure_only_with_an_https_public_url() {
    let https = TestServer::start_with(|c| c.public_url = "https://bosun.example".into()).await;
    let token = https.user_token("alice", Some(Role::Viewer)).await;
    let r = post_login(&https, &token, "/", &[]).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let all = cookies(r.headers());
    assert!(
        all.iter()
            .any(|c| c.starts_with("bosun_session=") && c.contains("; Secure")),
        "{all:?}"
    );
    assert!(all
        .iter()
        .all(|c| c.contains("HttpOnly") && c.contains("SameSite=Strict")));
    assert_eq!(r.headers()[STRICT_TRANSPORT_SECURITY], "max-age=31536000");
    // Every cookie the console sets, not only the session's: logging out clears it.
    let pair = session_pair(r.headers());
    let page = browser()
        .get(format!("{}/orgs/default/stacks", https.url))
        .header(COOKIE, &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let csrf = csrf_of(&page.text().await.unwrap());
    let out = browser()
        .post(format!("{}/logout", https.url))
        .header(COOKIE, &pair)
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    let cleared = cookies(out.headers());
    assert!(
        cleared
            .iter()
            .any(|c| c.starts_with("bosun_session=;") && c.contains("; Secure")),
        "{cleared:?}"
    );

    // Over plain http a `Secure` cookie would never come back: none is set.
    let http = TestServer::start().await;
    let token = http.user_token("alice", Some(Role::Viewer)).await;
    let r = post_login(&http, &token, "/", &[]).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let all = cookies(r.headers());
    assert!(!all.iter().any(|c| c.contains("Secure")), "{all:?}");
    assert!(r.headers().get(STRICT_TRANSPORT_SECURITY).is_none());
}

fn assert_browser_headers(what: &str, h: &HeaderMap) {
    let csp = h
        .get(CONTENT_SECURITY_POLICY)
        .unwrap_or_else(|| panic!("{what}: no Content-Security-Policy"))
        .to_str()
        .unwrap();
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "frame-ancestors 'none'",
        "form-action 'self'",
        "base-uri 'none'",
    ] {
        assert!(csp.contains(directive), "{what}: {directive} not in {csp}");
    }
    assert!(!csp.contains("unsafe-inline"), "{what}: {csp}");
    assert_eq!(h[X_FRAME_OPTIONS], "DENY", "{what}");
    assert_eq!(h[X_CONTENT_TYPE_OPTIONS], "nosniff", "{what}");
    // Not `no-referrer`: browsers would then post forms with `Origin: null`.
    assert_eq!(h[REFERRER_POLICY], "same-origin", "{what}");
}

/// What the CSP forbids must not be in the page: inline scripts, `style` attributes,
/// event-handler attributes, `javascript:` URLs.
fn assert_no_inline_code(what: &str, html: &str) {
    for (at, _) in html.match_indices("<script") {
        let tag = &html[at..at + html[at..].find('>').unwrap()];
        assert!(tag.contains(" src="), "{what}: inline script {tag}");
    }
    for forbidden in [
        "<style",
        " style=",
        " onclick=",
        " onchange=",
        " onsubmit=",
        " onload=",
        " oninput=",
        "javascript:",
    ] {
        assert!(!html.contains(forbidden), "{what}: {forbidden} in the page");
    }
}

#[tokio::test]
async fn console_pages_and_api_replies_carry_the_browser_security_headers() {
    let t = TestServer::start().await;
    let token = t.user_token("alice", Some(Role::Viewer)).await;
    let login = browser()
        .get(format!("{}/login", t.url))
        .send()
        .await
        .unwrap();
    assert_browser_headers("GET /login", login.headers());
    assert_no_inline_code("GET /login", &login.text().await.unwrap());

    let r = post_login(&t, &token, "/", &[]).await;
    assert_browser_headers("POST /login", r.headers());
    let pair = session_pair(r.headers());
    for path in ["/orgs/default/stacks", "/orgs/default/runners", "/nowhere"] {
        let page = browser()
            .get(format!("{}{path}", t.url))
            .header(COOKIE, &pair)
            .send()
            .await
            .unwrap();
        assert_browser_headers(path, page.headers());
        assert_no_inline_code(path, &page.text().await.unwrap());
    }
    for path in ["/console/static/console.js", "/console/static/console.css"] {
        let r = browser()
            .get(format!("{}{path}", t.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_browser_headers(path, r.headers());
    }
    let api = browser()
        .get(format!("{}/api/v1/whoami", t.url))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), StatusCode::OK);
    assert_browser_headers("GET /api/v1/whoami", api.headers());
}

#[tokio::test]
async fn console_posts_from_another_origin_are_refused_whatever_the_host_says() {
    let t = TestServer::start().await;
    let token = t.user_token("alice", Some(Role::Viewer)).await;
    let evil = |host: &str| vec![(HOST, host.to_string()), (ORIGIN, format!("http://{host}"))];

    // The Host header is the sender's to choose: it proves nothing about the origin.
    let r = post_login(&t, &token, "/", &evil("evil.example")).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(cookies(r.headers()).is_empty());
    let page = r.text().await.unwrap();
    assert!(
        page.contains("http://evil.example") && page.contains(&t.url),
        "{page}"
    );

    // The same for a form of a logged-in session: refused, and the session goes on.
    let r = post_login(&t, &token, "/", &[]).await;
    let pair = session_pair(r.headers());
    let page = browser()
        .get(format!("{}/orgs/default/stacks", t.url))
        .header(COOKIE, &pair)
        .send()
        .await
        .unwrap();
    let csrf = csrf_of(&page.text().await.unwrap());
    let mut req = browser()
        .post(format!("{}/logout", t.url))
        .header(COOKIE, &pair)
        .form(&[("csrf", csrf.as_str())]);
    for (name, value) in evil("evil.example") {
        req = req.header(name, value);
    }
    let r = req.send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(cookies(r.headers()).is_empty());

    // The public URL's own origin is welcome, and so is a loopback alias of it.
    let port = t.server.local_addr.port();
    for origin in [t.url.clone(), format!("http://localhost:{port}")] {
        let r = post_login(&t, &token, "/", &[(ORIGIN, origin.clone())]).await;
        assert_eq!(r.status(), StatusCode::SEE_OTHER, "{origin}");
    }
    let other_port = format!("http://127.0.0.1:{}", port.wrapping_add(1));
    let r = post_login(&t, &token, "/", &[(ORIGIN, other_port)]).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = post_login(&t, &token, "/", &[(ORIGIN, "null".to_string())]).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
}

const CAP: usize = 64 * 1024;
const WEBHOOK_SECRET: &str = "webhook-secret-for-tests";

async fn webhook_server() -> TestServer {
    TestServer::start_with(|c| {
        c.webhook_max_bytes = CAP;
        c.vcs.webhook_secret = Some(Secret(WEBHOOK_SECRET.into()));
    })
    .await
}

/// Sends `head` (and then `body`, as much as the server takes) on a raw connection and
/// reads the reply: status and JSON body. Fails past `deadline`.
async fn raw_exchange(t: &TestServer, head: &str, body: &[u8], deadline: Duration) -> (u16, Value) {
    let exchange = async {
        let mut conn = tokio::net::TcpStream::connect(t.server.local_addr)
            .await
            .unwrap();
        conn.write_all(head.as_bytes()).await.unwrap();
        let (mut rd, mut wr) = conn.into_split();
        let body = body.to_vec();
        // The server may answer and close while the body is still going: write errors
        // are expected then. The writing half stays open after the body (a client still
        // sending, not one that hung up), until the reply is read.
        let writer = tokio::spawn(async move {
            for chunk in body.chunks(8192) {
                if wr.write_all(chunk).await.is_err() {
                    return;
                }
            }
            std::future::pending::<()>().await;
            drop(wr);
        });
        let mut reply = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            if let Some(end) = find(&reply, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&reply[..end]).to_ascii_lowercase();
                let len = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map(|v| v.trim().parse::<usize>().unwrap());
                if let Some(len) = len {
                    if reply.len() >= end + 4 + len {
                        break;
                    }
                }
            }
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => reply.extend_from_slice(&buf[..n]),
            }
        }
        writer.abort();
        let end = find(&reply, b"\r\n\r\n").expect("a reply head");
        let head = String::from_utf8_lossy(&reply[..end]).to_string();
        let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
        let body: Value = serde_json::from_slice(&reply[end + 4..])
            .unwrap_or_else(|_| panic!("non-JSON reply {head}"));
        (status, body)
    };
    tokio::time::timeout(deadline, exchange)
        .await
        .unwrap_or_else(|_| panic!("no reply within {deadline:?}"))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[tokio::test]
async fn webhook_body_over_the_cap_is_refused_before_it_is_read() {
    let t = webhook_server().await;

    // A declared length over the cap: 413 at once, the body never sent.
    let started = Instant::now();
    let head = "POST /webhooks/github HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                X-GitHub-Event: push\r\nX-GitHub-Delivery: big\r\n\
                X-Hub-Signature-256: sha256=00\r\nContent-Length: 100000000\r\n\r\n";
    let (status, body) = raw_exchange(&t, head, b"", Duration::from_secs(10)).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], "payload_too_large");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&CAP.to_string()),
        "{body}"
    );
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "took {took:?}");

    // A chunked body declares nothing: it is cut off where it passes the cap.
    let chunk = vec![b' '; 4096];
    let mut chunked = Vec::new();
    for _ in 0..(CAP / chunk.len() * 2) {
        chunked.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        chunked.extend_from_slice(&chunk);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let head = "POST /webhooks/github HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                X-GitHub-Event: push\r\nX-GitHub-Delivery: chunked\r\n\
                X-Hub-Signature-256: sha256=00\r\nTransfer-Encoding: chunked\r\n\r\n";
    let (status, body) = raw_exchange(&t, head, &chunked, Duration::from_secs(10)).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], "payload_too_large");

    // Both were counted as refused deliveries.
    let counters = &t.server.state().vcs.counters;
    assert_eq!(counters.rejected.load(Ordering::Relaxed), 2);

    // A signed delivery under the cap is still received.
    let ping = json!({"zen": "Keep it logically awesome.", "hook_id": 1}).to_string();
    let r = t
        .client
        .post(format!("{}/webhooks/github", t.url))
        .header("content-type", "application/json")
        .header("x-github-event", "ping")
        .header("x-github-delivery", "small")
        .header(
            "x-hub-signature-256",
            bosun_testkit::sign(WEBHOOK_SECRET.as_bytes(), ping.as_bytes()),
        )
        .body(ping)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
}

#[test]
fn openapi_declares_query_parameters_in_the_query() {
    let doc = serde_json::to_value(bosun_server::openapi::document(
        &bosun_server::routes::api_routes(),
    ))
    .unwrap();
    let fencing = doc["paths"]["/api/v1/runner/runs/{run}/plan"]["put"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "fencing")
        .cloned()
        .expect("the fencing parameter");
    assert_eq!(fencing["in"], "query", "{fencing}");
    // No parameter is said to be in the path unless the path has its segment.
    let mut wrong = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            for p in op["parameters"].as_array().into_iter().flatten() {
                let name = p["name"].as_str().unwrap();
                if p["in"] == "path" && !path.contains(&format!("{{{name}}}")) {
                    wrong.push(format!("{method} {path}: {name}"));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "query parameters documented in the path: {wrong:?}"
    );
}

#[tokio::test]
async fn runner_protocol_refusals_name_the_pool_token_it_needs() {
    let t = TestServer::start().await;
    let (run, _) = mint_run_token(
        t.server.state(),
        "default",
        "run-1",
        "net",
        chrono::Duration::minutes(5),
        &[],
    )
    .await
    .unwrap();
    let personal = t.user_token("alice", Some(Role::Admin)).await;
    for (who, token) in [("run", run.as_str()), ("personal", personal.as_str())] {
        let r = t
            .post(
                "/api/v1/runner/runs/run-1/heartbeat",
                token,
                json!({"fencing": 1}),
            )
            .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{who}: {:?}", r.body);
        let m = r.message();
        assert!(m.starts_with(&format!("a {who} token cannot")), "{m}");
        assert!(m.contains("runner-pool token"), "{who}: {m}");
    }
    // The other way round, the run token still hears that it needs a personal token.
    let r = t
        .call(Method::GET, "/api/v1/whoami", Some(&run), None)
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
}

#[cfg(unix)]
fn private_modes(dir: &std::path::Path) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut loose = Vec::new();
    let mode = std::fs::metadata(dir).unwrap().permissions().mode() & 0o777;
    if mode != 0o700 {
        loose.push(format!("{}: {mode:o}", dir.display()));
    }
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let mode = entry.metadata().unwrap().permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            loose.push(format!("{}: {mode:o}", entry.file_name().to_string_lossy()));
        }
    }
    loose
}

#[cfg(unix)]
#[tokio::test]
async fn data_dir_and_its_files_are_private_and_made_private_again_at_start() {
    use std::os::unix::fs::PermissionsExt;
    let t = TestServer::start_with(|c| c.bootstrap_token = None).await;
    let dir = t.server.state().config.data_dir.clone();
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    for expected in [
        "bosun.db",
        "bosun.db-wal",
        "admin-token",
        "replica-id",
        "secrets.key",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} not in {names:?}"
        );
    }
    assert_eq!(private_modes(&dir), Vec::<String>::new());

    // A data dir left readable (an older version, a copy): private again at the next
    // start, the files SQLite reopens and a directory in it included.
    let kept = t.shutdown().await;
    let dir = kept.path().to_path_buf();
    std::fs::create_dir(dir.join("mirrors")).unwrap();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let loose = if path.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(loose)).unwrap();
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let again = TestServer::start_with(|c| {
        c.bootstrap_token = None;
        c.data_dir = dir.clone();
    })
    .await;
    assert_eq!(private_modes(&dir), Vec::<String>::new());
    again.shutdown().await;
    drop(kept);
}
