//! The listener under hostile or careless clients: silent and idle connections are
//! closed, a client trickling its headers or its body is cut off, long-polls outlive
//! every timeout, connections past the cap are refused saying why; `/metrics` needs its
//! token or lives on its own listener; TLS is served and a renewed certificate picked up
//! without a restart.

use std::time::{Duration, Instant};

use bosun_server::config::TlsFiles;
use bosun_testkit::tls::TestCa;
use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::TestServer;
use crate::runs::Runner;

/// Reads until the peer closes the connection (EOF or reset), up to `within`; returns
/// what was read and when the close came, or panics.
async fn read_until_closed(s: &mut TcpStream, within: Duration) -> (Vec<u8>, Instant) {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (out, Instant::now()),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => panic!(
                "the server did not close the connection within {within:?}; read so far: {:?}",
                String::from_utf8_lossy(&out)
            ),
        }
    }
}

/// Reads one response with a Content-Length body from a kept-alive connection.
async fn read_response(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .expect("a response in time")
            .unwrap();
        assert!(n > 0, "closed before a whole response");
        out.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&out).to_string();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            if body.len() >= len {
                return text;
            }
        }
    }
}

fn addr(t: &TestServer) -> std::net::SocketAddr {
    t.server.local_addr
}

#[tokio::test]
async fn silent_and_idle_connections_are_closed() {
    let t = TestServer::start_with(|c| {
        c.listener.header_read_timeout = Duration::from_secs(1);
        c.listener.idle_timeout = Duration::from_secs(2);
    })
    .await;

    // Connected and never a byte: closed after the header-read timeout.
    let opened = Instant::now();
    let mut silent = TcpStream::connect(addr(&t)).await.unwrap();
    let (_, closed) = read_until_closed(&mut silent, Duration::from_secs(10)).await;
    let waited = closed - opened;
    assert!(
        waited >= Duration::from_millis(900),
        "closed too early: {waited:?}"
    );

    // One request on a kept-alive connection, then nothing: open while idle for longer
    // than the header-read timeout, closed after the idle timeout.
    let mut kept = TcpStream::connect(addr(&t)).await.unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let resp = read_response(&mut kept).await;
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    let answered = Instant::now();
    let (_, closed) = read_until_closed(&mut kept, Duration::from_secs(10)).await;
    let idle = closed - answered;
    assert!(
        idle >= Duration::from_millis(1800),
        "an idle keep-alive connection is closed by the idle timeout (2s), not the header-read one: {idle:?}"
    );
    t.shutdown().await;
}

#[tokio::test]
async fn a_client_trickling_its_headers_is_cut_off() {
    let t = TestServer::start_with(|c| {
        c.listener.header_read_timeout = Duration::from_secs(1);
        c.listener.idle_timeout = Duration::from_secs(30);
    })
    .await;
    let s = TcpStream::connect(addr(&t)).await.unwrap();
    let (mut read, mut write) = s.into_split();
    let started = Instant::now();
    // A header line every 200 ms: bytes keep coming, the head never ends.
    let trickle = tokio::spawn(async move {
        let _ = write
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            .await;
        for i in 0..100 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if write
                .write_all(format!("X-Slow-{i}: y\r\n").as_bytes())
                .await
                .is_err()
            {
                return;
            }
        }
    });
    let mut buf = [0u8; 1024];
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match read.read(&mut buf).await {
                Ok(0) | Err(_) => return Instant::now(),
                Ok(_) => {}
            }
        }
    })
    .await
    .expect("the trickling connection is closed");
    let took = closed - started;
    assert!(
        took < Duration::from_secs(5),
        "cut at the header-read timeout (1s), not after the trickle: {took:?}"
    );
    trickle.abort();
    t.shutdown().await;
}

#[tokio::test]
async fn a_body_that_does_not_arrive_is_cut_by_the_request_timeout() {
    let t = TestServer::start_with(|c| {
        c.listener.request_timeout = Duration::from_secs(1);
    })
    .await;
    let mut s = TcpStream::connect(addr(&t)).await.unwrap();
    let head = format!(
        "POST /api/v1/orgs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"id\":",
        t.admin
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let (resp, _) = read_until_closed(&mut s, Duration::from_secs(10)).await;
    let resp = String::from_utf8_lossy(&resp);
    assert!(resp.starts_with("HTTP/1.1 400"), "{resp}");
    assert!(
        resp.contains("request_timeout"),
        "the refusal names the limit: {resp}"
    );
    t.shutdown().await;
}

#[tokio::test]
async fn a_lease_long_poll_outlives_the_idle_and_request_timeouts() {
    let t = TestServer::start_with(|c| {
        c.listener.header_read_timeout = Duration::from_secs(1);
        c.listener.idle_timeout = Duration::from_secs(1);
        c.listener.request_timeout = Duration::from_secs(1);
    })
    .await;
    let runner = Runner::register(&t, "long-poller").await;
    let started = Instant::now();
    // Nothing to lease: the server holds the request for the whole wait, then 204.
    assert!(runner.lease(3).await.is_none());
    let held = started.elapsed();
    assert!(
        held >= Duration::from_millis(2800),
        "the poll was held: {held:?}"
    );
    t.shutdown().await;
}

#[tokio::test]
async fn connections_past_the_cap_are_refused_saying_why() {
    let t = TestServer::start_with(|c| {
        c.listener.max_connections = 2;
        c.listener.header_read_timeout = Duration::from_secs(60);
    })
    .await;
    let first = TcpStream::connect(addr(&t)).await.unwrap();
    let mut second = TcpStream::connect(addr(&t)).await.unwrap();
    // The second is served: the cap has room for it.
    second
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(read_response(&mut second).await.starts_with("HTTP/1.1 200"));

    let mut third = TcpStream::connect(addr(&t)).await.unwrap();
    third
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (resp, _) = read_until_closed(&mut third, Duration::from_secs(10)).await;
    let resp = String::from_utf8_lossy(&resp);
    assert!(resp.starts_with("HTTP/1.1 503"), "{resp}");
    assert!(resp.contains("max_connections"), "{resp}");
    assert!(resp.contains("2 connections"), "{resp}");

    // A freed slot is served again.
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut s = TcpStream::connect(addr(&t)).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let (resp, _) = read_until_closed(&mut s, Duration::from_secs(10)).await;
        if resp.starts_with(b"HTTP/1.1 200") {
            break;
        }
        assert!(Instant::now() < deadline, "the freed slot was never reused");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(second);
    t.shutdown().await;
}

const METRICS_TOKEN: &str = "metrics-token-0123456789abcdef";

#[tokio::test]
async fn metrics_need_the_metrics_token() {
    let t = TestServer::start_with(|c| {
        c.metrics.token = Some(bosun_server::config::Secret(METRICS_TOKEN.into()));
    })
    .await;
    let url = format!("{}/metrics", t.url);
    let r = t.client.get(&url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Authorization: Bearer"),
        "{body}"
    );
    for wrong in [t.admin.as_str(), "metrics-token-0123456789abcdeX"] {
        let r = t.client.get(&url).bearer_auth(wrong).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "token {wrong}");
    }
    let r = t
        .client
        .get(&url)
        .bearer_auth(METRICS_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.text().await.unwrap().contains("bosun_runs{"));
    t.shutdown().await;
}

#[tokio::test]
async fn metrics_on_their_own_listener_are_not_on_the_main_one() {
    let t = TestServer::start_with(|c| {
        c.metrics.listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let main = t
        .client
        .get(format!("{}/metrics", t.url))
        .send()
        .await
        .unwrap();
    assert_eq!(main.status(), StatusCode::NOT_FOUND);
    let metrics = t.server.metrics_addr.expect("a metrics listener");
    let r = t
        .client
        .get(format!("http://{metrics}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.text().await.unwrap().contains("bosun_runs{"));
    // Only /metrics is there: not the API.
    let r = t
        .client
        .get(format!("http://{metrics}/api/v1/whoami"))
        .bearer_auth(&t.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    t.shutdown().await;
}

#[tokio::test]
async fn metrics_are_refused_on_a_public_listener_without_a_token() {
    let t = TestServer::start_with(|c| {
        c.listen = "0.0.0.0:0".parse().unwrap();
    })
    .await;
    let port = t.server.local_addr.port();
    let r = t
        .client
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--metrics-token"),
        "{body}"
    );
    t.shutdown().await;
}

/// A client trusting only `ca_pem`, with no pooled connections (each request
/// handshakes, so it sees the certificate served now).
fn trusting(ca_pem: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap())
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

#[tokio::test]
async fn tls_is_served_and_a_renewed_certificate_is_picked_up_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let files = TlsFiles {
        cert_file: dir.path().join("server.crt"),
        key_file: dir.path().join("server.key"),
    };
    let old_ca = TestCa::new("old CA");
    old_ca
        .server_cert(&["127.0.0.1", "localhost"])
        .write(&files.cert_file, &files.key_file);
    let tls = files.clone();
    let t = TestServer::start_with(move |c| {
        c.listener.tls = Some(tls);
        c.listener.tls_reload_interval = Duration::from_millis(100);
        c.listener.header_read_timeout = Duration::from_secs(1);
    })
    .await;
    let port = t.server.local_addr.port();
    let url = format!("https://127.0.0.1:{port}/healthz");

    let r = trusting(&old_ca.cert_pem).get(&url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // Plain HTTP is not answered on the TLS port.
    assert!(reqwest::get(format!("http://127.0.0.1:{port}/healthz"))
        .await
        .is_err());
    // A TCP connection that never starts its handshake is closed.
    let mut silent = TcpStream::connect(addr(&t)).await.unwrap();
    read_until_closed(&mut silent, Duration::from_secs(10)).await;

    // Renewed by another CA: new handshakes get the new certificate.
    let new_ca = TestCa::new("new CA");
    assert!(trusting(&new_ca.cert_pem).get(&url).send().await.is_err());
    new_ca
        .server_cert(&["127.0.0.1", "localhost"])
        .write(&files.cert_file, &files.key_file);
    let deadline = Instant::now() + Duration::from_secs(15);
    while trusting(&new_ca.cert_pem).get(&url).send().await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the renewed certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        trusting(&old_ca.cert_pem).get(&url).send().await.is_err(),
        "the old certificate is no longer served"
    );
    t.shutdown().await;
}
