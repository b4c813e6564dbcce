//! The server on SQLite when its data directory's filesystem fills up: the data dir on a
//! small tmpfs of the test's own (mounting needs root, as in CI; elsewhere the tests skip
//! loudly, and fail under `BOSUN_REQUIRE_TOOLS=1`), filled to the last byte with a filler
//! file and freed again.
//!
//! Writes are refused with 503 `store_unavailable` and `Retry-After` (never a 500), saying
//! the disk is full; nothing refused is half-stored; reads, `/healthz` and the process stay
//! up; `/readyz` is 503 while writes fail; everything works again once space returns,
//! without a restart. Heartbeats the full disk refused are no runner's silence: the stale
//! sweep counts silence from the end of the outage, and still fails a run that is silent.
//!
//! Read-only filesystems are not made here: Linux refuses `mount -o remount,ro` while a
//! file on it is open for writing (EBUSY) — and SQLite keeps its database and WAL open —
//! so a filesystem turns read-only under a running server only when the kernel forces it
//! (ext4 `errors=remount-ro`), which needs an unmount and a restart to undo. SQLite's
//! read-only and I/O errors are classified with the full disk's (`StoreError::Unavailable`).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use bosun_testkit::tmpfs::Tmpfs;

use crate::harness::{Reply, TestServer};
use crate::runs::Runner;

const STATE: &str = "/api/v1/orgs/default/stacks/net/state";

/// A server whose data dir (and SQLite database) is on `fs`, with short duty leases so
/// that a duty's write comes every second.
async fn server_on(fs: &Tmpfs, tweak: impl FnOnce(&mut bosun_server::ServerConfig)) -> TestServer {
    let data = fs.path().join("data");
    TestServer::start_with(move |c| {
        c.data_dir = data;
        c.database_url = None;
        c.duty_lease = Duration::from_secs(3);
        tweak(c);
    })
    .await
}

/// Folds the WAL into the database file and truncates it (Python's sqlite3, a connection
/// of the test's own), so the next write must grow the WAL: on a full disk, it cannot.
fn truncate_wal(data_dir: &Path) {
    let db = data_dir.join("bosun.db");
    let script = "import sqlite3, sys\n\
        c = sqlite3.connect(sys.argv[1], timeout=10)\n\
        print(c.execute('PRAGMA wal_checkpoint(TRUNCATE)').fetchone()[0])";
    for _ in 0..20 {
        let out = Command::new("python3")
            .args(["-c", script])
            .arg(&db)
            .stdin(Stdio::null())
            .output()
            .expect("python3 (the test suite's tools need it)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if String::from_utf8_lossy(&out.stdout).trim() == "0" {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the WAL checkpoint stayed blocked");
}

/// The raw body and headers of a request (for `Retry-After` and exact state bytes).
async fn send(
    t: &TestServer,
    method: Method,
    path: &str,
    body: Option<Vec<u8>>,
) -> reqwest::Response {
    let mut req = t
        .client
        .request(method, format!("{}{path}", t.url))
        .bearer_auth(&t.admin);
    if let Some(b) = body {
        req = req.header("content-type", "application/json").body(b);
    }
    req.send().await.unwrap()
}

/// A refusal for want of disk: 503 `store_unavailable`, `Retry-After`, the reason.
async fn assert_refused(resp: reqwest::Response, what: &str) {
    let status = resp.status();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let body: Value = resp.json().await.unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{what}: {body}");
    assert_eq!(body["error"]["code"], "store_unavailable", "{what}: {body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("the data directory's filesystem is full"),
        "{what}: {message}"
    );
    let secs: u64 = retry
        .unwrap_or_else(|| panic!("{what}: no Retry-After"))
        .parse()
        .unwrap();
    assert!((1..=30).contains(&secs), "{what}: Retry-After {secs}");
}

/// A state document whose exact bytes the test checks (odd spacing on purpose).
fn state_doc(serial: u64) -> Vec<u8> {
    format!(
        "{{\n  \"version\": 4,\n  \"serial\": {serial},\n  \"lineage\": \"disk\",\n  \"outputs\": {{ \"n\": {{\"value\": {serial}, \"type\": \"number\"}} }},\n  \"resources\": []\n}}\n"
    )
    .into_bytes()
}

async fn run_state(t: &TestServer, id: &str) -> String {
    let r = t
        .get(&format!("/api/v1/orgs/default/runs/{id}"), &t.admin)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    r.body["state"].as_str().unwrap().to_string()
}

async fn trigger(t: &TestServer, stack: &str) -> String {
    let r = t
        .post(
            &format!("/api/v1/orgs/default/stacks/{stack}/runs"),
            &t.admin,
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    r.body["id"].as_str().unwrap().to_string()
}

async fn create_stack(t: &TestServer, id: &str) -> Reply {
    t.create_stack(json!({"id": id, "repository": "file:///srv/git/infra"}))
        .await
}

#[tokio::test]
async fn a_full_disk_refuses_writes_with_503_and_the_server_recovers_when_space_returns() {
    let Some(fs) = Tmpfs::mount("8m") else {
        return;
    };
    let t = server_on(&fs, |_| {}).await;
    assert_eq!(create_stack(&t, "net").await.status, StatusCode::CREATED);
    let v1 = state_doc(1);
    let r = send(&t, Method::POST, STATE, Some(v1.clone())).await;
    assert_eq!(r.status(), StatusCode::OK);
    // A run in planning, leased by the test acting as its runner.
    let run = trigger(&t, "net").await;
    let runner = Runner::register(&t, "disk-1").await;
    let lease = runner.lease(5).await.expect("a lease");
    let fencing = lease["fencing"].clone();
    let r = runner
        .call(
            &format!("{run}/report"),
            json!({"fencing": fencing, "event": "started", "commit": "abcdef0"}),
        )
        .await;
    assert!(r.status.is_success(), "{} {:?}", r.status, r.body);
    assert_eq!(run_state(&t, &run).await, "planning");
    let ready = send(&t, Method::GET, "/readyz", None).await;
    assert_eq!(ready.status(), StatusCode::OK);

    truncate_wal(&fs.path().join("data"));
    let filler = fs.fill();

    // Every kind of write is refused for want of disk, with a reason and Retry-After:
    // Terraform's state write through the http backend…
    let v2 = state_doc(2);
    let r = send(&t, Method::POST, STATE, Some(v2.clone())).await;
    assert_refused(r, "state write").await;
    // …creating a stack…
    let r = send(
        &t,
        Method::POST,
        "/api/v1/orgs/default/stacks",
        Some(
            json!({"id": "db", "repository": "file:///srv/git/infra"})
                .to_string()
                .into_bytes(),
        ),
    )
    .await;
    assert_refused(r, "stack create").await;
    // …a runner's report and heartbeat.
    let planned = json!({"fencing": fencing, "event": "planned", "summary": {"has_changes": true, "add": 0, "change": 0, "destroy": 0, "resource_changes": [], "output_changes": {"n": "update"}}});
    let report = |body: Value| {
        t.client
            .post(format!("{}/api/v1/runner/runs/{run}/report", t.url))
            .bearer_auth(&t.server.hosted_runner_token)
            .json(&body)
            .send()
    };
    assert_refused(report(planned.clone()).await.unwrap(), "run report").await;
    let hb = t
        .client
        .post(format!("{}/api/v1/runner/runs/{run}/heartbeat", t.url))
        .bearer_auth(&t.server.hosted_runner_token)
        .json(&json!({"fencing": fencing}))
        .send()
        .await
        .unwrap();
    assert_refused(hb, "heartbeat").await;

    // The process stays up and reads still answer, showing only what was acknowledged.
    let health = send(&t, Method::GET, "/healthz", None).await;
    assert_eq!(health.status(), StatusCode::OK);
    let current = send(&t, Method::GET, STATE, None).await;
    assert_eq!(current.status(), StatusCode::OK);
    assert_eq!(current.bytes().await.unwrap().as_ref(), v1.as_slice());
    let stacks = t.get("/api/v1/orgs/default/stacks", &t.admin).await;
    assert_eq!(stacks.status, StatusCode::OK, "{:?}", stacks.body);
    assert_eq!(stacks.body["items"].as_array().unwrap().len(), 1);
    assert_eq!(
        run_state(&t, &run).await,
        "planning",
        "the report was refused"
    );
    // Not ready while writes fail: a read-only ping alone would say ready.
    let ready = send(&t, Method::GET, "/readyz", None).await;
    assert_refused(ready, "/readyz").await;

    // Space returns: no restart, the server writes again — /readyz first, from the duty
    // lease renewals' own writes.
    filler.remove();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let ready = send(&t, Method::GET, "/readyz", None).await;
        if ready.status() == StatusCode::OK {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/readyz still {} 20 s after space returned: {}",
            ready.status(),
            ready.text().await.unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = report(planned).await.unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    assert_eq!(run_state(&t, &run).await, "unconfirmed");
    assert_eq!(create_stack(&t, "db").await.status, StatusCode::CREATED);
    let r = send(&t, Method::POST, STATE, Some(v2.clone())).await;
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());

    // No torn or half-written version: both acknowledged versions read back byte for
    // byte, the refused attempt left nothing (two versions, not three), and the current
    // one is the last acknowledged.
    let current = send(&t, Method::GET, STATE, None).await;
    assert_eq!(current.bytes().await.unwrap().as_ref(), v2.as_slice());
    let store = &t.server.state().store;
    let versions = store
        .list_state_versions("default", "net", None, 10)
        .await
        .unwrap();
    let numbers: Vec<i64> = versions.iter().map(|v| v.version).collect();
    assert_eq!(numbers, vec![2, 1]);
    for (n, doc) in [(1, &v1), (2, &v2)] {
        let (_, body) = store
            .state_version("default", "net", Some(n))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&body, doc, "version {n}");
    }
    t.shutdown().await;
}

#[tokio::test]
async fn heartbeats_a_full_disk_refused_are_no_silence_but_a_silent_run_is_still_swept() {
    let Some(fs) = Tmpfs::mount("8m") else {
        return;
    };
    let stale = Duration::from_secs(3);
    let t = server_on(&fs, |c| {
        c.runs.stale_after = stale;
        c.runs.sweep_interval = Duration::from_millis(100);
        // The sweep's lease lapses during the outage (its renewals are writes too) and is
        // taken again within half a second of the disk coming back.
        c.duty_lease = Duration::from_millis(1500);
    })
    .await;
    for id in ["busy", "gone"] {
        assert_eq!(create_stack(&t, id).await.status, StatusCode::CREATED);
    }
    let runner = Runner::register(&t, "disk-2").await;
    let mut leases = Vec::new();
    for stack in ["busy", "gone"] {
        let run = trigger(&t, stack).await;
        let lease = runner.lease(5).await.expect("a lease");
        assert_eq!(lease["run_id"], json!(run));
        let r = runner
            .call(
                &format!("{run}/report"),
                json!({"fencing": lease["fencing"], "event": "started", "commit": "abcdef0"}),
            )
            .await;
        assert!(r.status.is_success(), "{} {:?}", r.status, r.body);
        leases.push((run, lease["fencing"].clone()));
    }
    let (busy, busy_fencing) = leases[0].clone();
    let (gone, _) = leases[1].clone();
    let beat = || async {
        t.client
            .post(format!("{}/api/v1/runner/runs/{busy}/heartbeat", t.url))
            .bearer_auth(&t.server.hosted_runner_token)
            .json(&json!({"fencing": busy_fencing}))
            .send()
            .await
            .unwrap()
    };
    assert_eq!(beat().await.status(), StatusCode::OK);

    // The disk is full for twice the stale period. `busy`'s runner keeps beating and is
    // refused; `gone`'s runner has stopped. The sweep finds both silent but cannot store
    // a verdict, nor any beat.
    truncate_wal(&fs.path().join("data"));
    let filler = fs.fill();
    let until = tokio::time::Instant::now() + stale * 2;
    while tokio::time::Instant::now() < until {
        assert_refused(beat().await, "heartbeat on a full disk").await;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Space returns. The runner's next beat comes a moment later (its retry backoff) —
    // after the sweep has passed again, which must not take the refused beats for
    // silence: `busy`'s last stored beat is twice the stale period old by now.
    filler.remove();
    let back = tokio::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut gone_failed = None;
    while back.elapsed() < stale * 3 {
        let r = beat().await;
        let status = r.status();
        let body = r.text().await.unwrap();
        assert!(
            status == StatusCode::OK || status == StatusCode::SERVICE_UNAVAILABLE,
            "beat after the outage: {status} {body}"
        );
        if gone_failed.is_none() && run_state(&t, &gone).await == "force_failed" {
            gone_failed = Some(back.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(
        run_state(&t, &busy).await,
        "planning",
        "a run whose beats the full disk refused was swept"
    );
    // The run that really went silent is still force-failed: a stale period after the
    // outage ended, not before.
    let took = gone_failed.expect("the silent run was never force-failed");
    assert!(
        took >= stale - Duration::from_millis(300),
        "force-failed {took:?} after the disk came back"
    );
    t.shutdown().await;
}
