//! Every kind of hostile client at once — idle and silent connections, header tricklers,
//! deeply nested plans from a viewer, oversized webhook deliveries declared and streamed —
//! while `/healthz` must keep answering quickly, every hostile request gets its refusal,
//! and the silent connections are closed by the server's own timeouts.

use std::time::{Duration, Instant};

use bosun_core::Role;
use reqwest::StatusCode;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::TestServer;

/// A plan whose `vars` nest 100,000 levels deep (200 KB): 25 s of parser time before the
/// input limits existed.
fn nested_plan() -> String {
    let depth = 100_000;
    format!(
        "name: deep\nvars:\n  x: {}{}\nsteps: []\n",
        "[".repeat(depth),
        "]".repeat(depth)
    )
}

/// Reads until the server closes the connection; `None` if it stays open past `within`.
async fn closed_within(mut s: TcpStream, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => {}
            Err(_) => return None,
        }
    }
}

#[tokio::test]
async fn healthz_stays_fast_while_every_kind_of_hostile_client_is_connected() {
    let t = TestServer::start_with(|c| {
        c.listener.header_read_timeout = Duration::from_secs(2);
        c.listener.idle_timeout = Duration::from_secs(3);
    })
    .await;
    let viewer = t.user_token("vic", Some(Role::Viewer)).await;
    let addr = t.server.local_addr;

    // 200 connections that never send a byte, and 20 that trickle a header a byte at a time.
    let mut silent = Vec::new();
    for _ in 0..200 {
        silent.push(TcpStream::connect(addr).await.unwrap());
    }
    let tricklers: Vec<_> = (0..20)
        .map(|_| {
            tokio::spawn(async move {
                let mut s = TcpStream::connect(addr).await.unwrap();
                let started = Instant::now();
                for b in b"GET /healthz HTTP/1.1\r\nX-Slow: ".iter().cycle() {
                    if s.write_all(&[*b]).await.is_err() {
                        return Some(started.elapsed());
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    if started.elapsed() > Duration::from_secs(30) {
                        return None;
                    }
                }
                None
            })
        })
        .collect();

    // Deeply nested plans linted by a viewer.
    let body = json!({"source": nested_plan()});
    let mut refusals = Vec::new();
    for _ in 0..4 {
        let (client, url, token, body) = (
            t.client.clone(),
            format!("{}/api/v1/orgs/default/plans/lint", t.url),
            viewer.clone(),
            body.clone(),
        );
        refusals.push(tokio::spawn(async move {
            let r = client.post(url).bearer_auth(token).json(&body).send().await;
            r.map(|r| r.status()).ok()
        }));
    }
    // Webhook deliveries declaring 100 MB, whose bodies never come.
    for _ in 0..8 {
        refusals.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let head =
                "POST /webhooks/github HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                        X-GitHub-Event: push\r\nContent-Length: 104857600\r\n\r\n";
            s.write_all(head.as_bytes()).await.unwrap();
            let mut buf = vec![0u8; 4096];
            let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
                .await
                .ok()?
                .ok()?;
            let text = String::from_utf8_lossy(&buf[..n]).to_string();
            text.starts_with("HTTP/1.1 413")
                .then_some(StatusCode::PAYLOAD_TOO_LARGE)
        }));
    }
    // A chunked delivery that keeps streaming past the cap (64 MiB if nobody stops it); the
    // answer is read while the body is still being written.
    refusals.push(tokio::spawn(async move {
        let s = TcpStream::connect(addr).await.unwrap();
        let (mut rx, mut tx) = s.into_split();
        let writer = tokio::spawn(async move {
            let head = "POST /webhooks/github HTTP/1.1\r\nHost: x\r\n\
                        Content-Type: application/json\r\nX-GitHub-Event: push\r\n\
                        Transfer-Encoding: chunked\r\n\r\n";
            let chunk = format!("10000\r\n{}\r\n", " ".repeat(0x10000));
            tx.write_all(head.as_bytes()).await?;
            for _ in 0..1024 {
                tx.write_all(chunk.as_bytes()).await?;
            }
            Ok::<_, std::io::Error>(tx)
        });
        let mut buf = vec![0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(20), rx.read(&mut buf)).await;
        writer.abort();
        let text = String::from_utf8_lossy(&buf[..n.ok()?.ok()?]).to_string();
        text.starts_with("HTTP/1.1 413")
            .then_some(StatusCode::PAYLOAD_TOO_LARGE)
    }));

    // /healthz, polled for as long as any hostile request is still unanswered.
    let mut times = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while times.len() < 20 || refusals.iter().any(|h| !h.is_finished()) {
        assert!(
            Instant::now() < deadline,
            "hostile requests unanswered after 60 s"
        );
        let started = Instant::now();
        let r = t
            .client
            .get(format!("{}/healthz", t.url))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        times.push(started.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    times.sort();
    let median = times[times.len() / 2];
    let slowest = times[times.len() - 1];
    eprintln!(
        "/healthz under attack: {} answers, median {median:?}, slowest {slowest:?}",
        times.len()
    );
    assert!(median < Duration::from_millis(100), "median {median:?}");
    assert!(slowest < Duration::from_millis(500), "slowest {slowest:?}");

    for (i, h) in refusals.into_iter().enumerate() {
        let status = h.await.unwrap();
        let expected = if i < 4 {
            StatusCode::BAD_REQUEST
        } else {
            StatusCode::PAYLOAD_TOO_LARGE
        };
        assert_eq!(status, Some(expected), "hostile request {i}");
    }
    // The server's timeouts close what the clients would keep open forever.
    for (i, s) in silent.into_iter().enumerate() {
        let waited = closed_within(s, Duration::from_secs(15)).await;
        assert!(waited.is_some(), "silent connection {i} still open");
    }
    for (i, h) in tricklers.into_iter().enumerate() {
        assert!(
            h.await.unwrap().is_some(),
            "trickling connection {i} still open after 30 s"
        );
    }
}
