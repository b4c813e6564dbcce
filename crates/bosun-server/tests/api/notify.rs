//! Notifications end to end: a local HTTP receiver in the test process gets what the
//! delivery duty sends — webhook JSON whose HMAC signature the test checks with the
//! target's secret, Slack's `{"text"}` — retries with the delivery log, the default rules,
//! a sweep's force-fail, old locks, test events and the API's refusals.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode as AxumStatus};
use bosun_core::run::{RunKind, Trigger};
use bosun_store::NewRun;
use hmac::{Hmac, Mac};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sha2::Sha256;

use crate::harness::TestServer;
use crate::runs::Runner;

const SECRET: &str = "s3cret-for-the-receiver";

/// What the receiver got: headers and body of each request, in order.
#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<(HeaderMap, String)>>>);

impl Received {
    fn all(&self) -> Vec<(HeaderMap, String)> {
        self.0.lock().unwrap().clone()
    }

    /// Polls until at least `n` requests arrived (deadline 20 s).
    async fn wait_for(&self, n: usize) -> Vec<(HeaderMap, String)> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let all = self.all();
            if all.len() >= n {
                return all;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the receiver got {} request(s), expected {n}: {:?}",
                all.len(),
                all.iter().map(|(_, b)| b).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A receiver on a free loopback port that answers 500 to its first `fail_first`
/// requests and 200 after. Returns its URL.
async fn receiver(fail_first: usize) -> (String, Received) {
    let received = Received::default();
    let seen = received.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: String| {
            let seen = seen.clone();
            async move {
                let mut all = seen.0.lock().unwrap();
                all.push((headers, body));
                if all.len() <= fail_first {
                    (AxumStatus::INTERNAL_SERVER_ERROR, "receiver down")
                } else {
                    (AxumStatus::OK, "ok")
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (format!("http://{addr}/hook"), received)
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> &'a str {
    h.get(name)
        .unwrap_or_else(|| panic!("no {name} header"))
        .to_str()
        .unwrap()
}

/// The receiver's check: HMAC-SHA256 of the body with the shared secret.
fn signature_valid(secret: &str, body: &str, header: &str) -> bool {
    let Some(hex_sig) = header.strip_prefix("sha256=") else {
        return false;
    };
    let Ok(sig) = hex::decode(hex_sig) else {
        return false;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body.as_bytes());
    mac.verify_slice(&sig).is_ok()
}

async fn setup(tweak: impl FnOnce(&mut bosun_server::ServerConfig)) -> TestServer {
    let t = TestServer::start_with(|c| {
        c.notify.retry_base = Duration::from_millis(50);
        c.notify.poll_interval = Duration::from_millis(100);
        tweak(c);
    })
    .await;
    let r = t
        .create_stack(json!({"id": "net", "repository": "file:///srv/git/infra"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    t
}

const TARGETS: &str = "/api/v1/orgs/default/notifications/targets";

async fn add_target(t: &TestServer, body: Value) -> Value {
    let r = t.post(TARGETS, &t.admin, body).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    r.body
}

async fn deliveries(t: &TestServer, target: &str) -> Vec<Value> {
    let r = t
        .get(&format!("{TARGETS}/{target}/deliveries"), &t.admin)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    r.body["items"].as_array().unwrap().clone()
}

/// Leases the next run and reports it failed with `reason`; returns its id.
async fn lease_and_fail(runner: &Runner<'_>, reason: &str) -> String {
    let lease = runner.lease(5).await.expect("a run to lease");
    let id = lease["run_id"].as_str().unwrap().to_string();
    let f = lease["fencing"].clone();
    let r = runner
        .call(
            &format!("{id}/report"),
            json!({"fencing": f, "event": "started", "commit": "abcdef0"}),
        )
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    let r = runner
        .call(
            &format!("{id}/report"),
            json!({"fencing": f, "event": "failed", "reason": reason}),
        )
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    id
}

async fn trigger(t: &TestServer) -> String {
    let r = t
        .post("/api/v1/orgs/default/stacks/net/runs", &t.admin, json!({}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    r.body["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_failed_run_is_signed_retried_and_delivered_on_the_third_attempt() {
    let t = setup(|_| {}).await;
    let (url, received) = receiver(2).await;
    let target = add_target(
        &t,
        json!({"id": "ops", "kind": "webhook", "url": url, "secret": SECRET}),
    )
    .await;
    assert_eq!(
        (
            target["has_secret"].as_bool(),
            target["default_rules"].as_bool()
        ),
        (Some(true), Some(true))
    );
    assert!(target.get("secret").is_none(), "the secret is write-only");
    let runner = Runner::register(&t, "r1").await;
    trigger(&t).await;
    let run = lease_and_fail(&runner, "terraform init failed").await;

    let got = received.wait_for(3).await;
    let delivery_id = header(&got[0].0, "x-bosun-delivery").to_string();
    for (headers, body) in &got {
        assert_eq!(header(headers, "x-bosun-event"), "run_ended");
        assert_eq!(
            header(headers, "x-bosun-delivery"),
            delivery_id,
            "one delivery, retried"
        );
        assert_eq!(header(headers, "content-type"), "application/json");
        assert!(
            signature_valid(SECRET, body, header(headers, "x-bosun-signature-256")),
            "signature of {body}"
        );
        assert!(!signature_valid(
            "another-secret",
            body,
            header(headers, "x-bosun-signature-256")
        ));
    }
    let body: Value = serde_json::from_str(&got[2].1).unwrap();
    assert_eq!(body["event"], "run_ended");
    assert_eq!(body["org"], "default");
    assert_eq!(
        (
            &body["data"]["run"],
            &body["data"]["stack"],
            &body["data"]["state"],
            &body["data"]["kind"],
            &body["data"]["trigger"],
        ),
        (
            &json!(run),
            &json!("net"),
            &json!("failed"),
            &json!("tracked"),
            &json!("manual")
        )
    );
    assert!(body["data"]["reason"]
        .as_str()
        .unwrap()
        .contains("terraform init failed"));
    assert_eq!(
        body["data"]["url"],
        format!("/api/v1/orgs/default/runs/{run}")
    );

    // The log settles once the third attempt's answer is recorded.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let log = loop {
        let log = deliveries(&t, "ops").await;
        if log.first().is_some_and(|d| d["status"] == "delivered") {
            break log;
        }
        assert!(tokio::time::Instant::now() < deadline, "{log:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(log.len(), 1, "{log:?}");
    let d = &log[0];
    assert_eq!(d["id"].to_string(), delivery_id);
    assert_eq!(
        (
            &d["attempts"],
            &d["last_status_code"],
            &d["last_error"],
            &d["event"]
        ),
        (&json!(3), &json!(200), &Value::Null, &json!("run_ended"))
    );
    assert!(d["delivered_at"].is_string() && d["next_attempt_at"].is_null());
    assert_eq!(received.all().len(), 3, "nothing sent after delivery");

    let m = t.metrics_text().await;
    for line in [
        "bosun_notification_deliveries_total{outcome=\"delivered\"} 1",
        "bosun_notification_deliveries_total{outcome=\"retry\"} 2",
        "bosun_notification_deliveries_total{outcome=\"gave_up\"} 0",
        "bosun_notification_failures_total{kind=\"webhook\"} 2",
        "bosun_notification_failures_total{kind=\"slack\"} 0",
    ] {
        assert!(m.lines().any(|l| l == line), "{line} missing from:\n{m}");
    }
}

#[tokio::test]
async fn a_receiver_that_never_answers_is_given_up_after_the_last_attempt() {
    let t = setup(|c| c.notify.max_attempts = 3).await;
    let (url, received) = receiver(usize::MAX).await;
    add_target(
        &t,
        json!({"id": "ops", "kind": "webhook", "url": url, "secret": SECRET}),
    )
    .await;
    let runner = Runner::register(&t, "r1").await;
    trigger(&t).await;
    lease_and_fail(&runner, "boom").await;
    received.wait_for(3).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let log = deliveries(&t, "ops").await;
        if log[0]["status"] == "failed" {
            assert_eq!(log[0]["attempts"], 3);
            assert_eq!(log[0]["last_status_code"], 500);
            assert!(
                log[0]["last_error"]
                    .as_str()
                    .unwrap()
                    .contains("receiver down"),
                "{log:?}"
            );
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{log:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(received.all().len(), 3);
    assert!(t
        .metrics_text()
        .await
        .lines()
        .any(|l| l == "bosun_notification_deliveries_total{outcome=\"gave_up\"} 1"));
}

#[tokio::test]
async fn slack_by_default_hears_of_a_failed_drift_run_but_not_of_a_finished_run() {
    let t = setup(|_| {}).await;
    let (url, received) = receiver(0).await;
    add_target(&t, json!({"id": "chat", "kind": "slack", "url": url})).await;
    let runner = Runner::register(&t, "r1").await;
    // A tracked run that finishes (no changes): not a default notification.
    let finished = trigger(&t).await;
    let lease = runner.lease(5).await.unwrap();
    let f = lease["fencing"].clone();
    runner
        .call(
            &format!("{finished}/report"),
            json!({"fencing": f, "event": "started", "commit": "abcdef0"}),
        )
        .await;
    let r = runner
        .call(
            &format!("{finished}/report"),
            json!({"fencing": f, "event": "planned", "summary": {"has_changes": false, "add": 0, "change": 0, "destroy": 0, "resource_changes": [], "output_changes": {}}}),
        )
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    let r = t
        .get(&format!("/api/v1/orgs/default/runs/{finished}"), &t.admin)
        .await;
    assert_eq!(r.body["state"], "finished", "{:?}", r.body);
    // A drift run that fails before its plan: notified.
    let store = &t.server.state().store;
    store
        .create_run(
            &NewRun {
                id: "run-drift-1".into(),
                org: "default".into(),
                stack: "net".into(),
                kind: RunKind::Drift,
                trigger: Trigger::Schedule,
                triggered_by: "system".into(),
                commit: None,
                branch: "main".into(),
                retry_of: None,
                pull_request: None,
            },
            None,
        )
        .await
        .unwrap();
    let drift = lease_and_fail(&runner, "AWS credentials expired").await;
    assert_eq!(drift, "run-drift-1");
    let got = received.wait_for(1).await;
    let (headers, body) = &got[0];
    assert!(
        headers.get("x-bosun-signature-256").is_none(),
        "slack is not signed"
    );
    let msg: Value = serde_json::from_str(body).unwrap();
    let keys: Vec<&String> = msg.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["text"], "Slack's incoming-webhook shape: {msg}");
    let text = msg["text"].as_str().unwrap();
    assert!(text.contains("drift run run-drift-1 of default/net failed (trigger schedule): AWS credentials expired"), "{text}");
    assert!(
        text.contains(&format!(
            "<{}/api/v1/orgs/default/runs/run-drift-1|open the run>",
            t.url
        )),
        "{text}"
    );
    assert!(!text.contains('\n'), "one line: {text}");
    // The finished run was never queued for delivery.
    let log = deliveries(&t, "chat").await;
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0]["data"]["run"], "run-drift-1");
}

#[tokio::test]
async fn a_run_force_failed_by_the_sweep_notifies() {
    let t = setup(|c| {
        c.runs.stale_after = Duration::from_millis(600);
        c.runs.sweep_interval = Duration::from_millis(100);
    })
    .await;
    let (url, received) = receiver(0).await;
    add_target(
        &t,
        json!({"id": "ops", "kind": "webhook", "url": url, "secret": SECRET}),
    )
    .await;
    let runner = Runner::register(&t, "r1").await;
    let id = trigger(&t).await;
    let lease = runner.lease(5).await.unwrap();
    runner
        .call(
            &format!("{id}/report"),
            json!({"fencing": lease["fencing"], "event": "started", "commit": "abcdef0"}),
        )
        .await;
    // The runner goes silent.
    let got = received.wait_for(1).await;
    let body: Value = serde_json::from_str(&got[0].1).unwrap();
    assert_eq!(
        (&body["event"], &body["data"]["run"], &body["data"]["state"]),
        (&json!("run_ended"), &json!(id), &json!("force_failed"))
    );
    assert!(body["data"]["reason"]
        .as_str()
        .unwrap()
        .starts_with("runner timed out or never reported"));
}

#[tokio::test]
async fn an_old_lock_notifies_once_per_lock() {
    let t = setup(|c| c.notify.lock_age = Duration::from_millis(300)).await;
    let (url, received) = receiver(0).await;
    add_target(
        &t,
        json!({"id": "locks", "kind": "webhook", "url": url, "secret": SECRET,
               "rules": [{"events": ["old_lock"]}]}),
    )
    .await;
    let lock = json!({"ID": "LAPTOP-1", "Operation": "OperationTypeApply", "Who": "alice@laptop", "Version": "1.0.3", "Created": "", "Path": "", "Info": ""});
    let r = t
        .call(
            Method::from_bytes(b"LOCK").unwrap(),
            "/api/v1/orgs/default/stacks/net/state",
            Some(&t.admin),
            Some(lock),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let got = received.wait_for(1).await;
    let body: Value = serde_json::from_str(&got[0].1).unwrap();
    assert_eq!(
        (
            &body["event"],
            &body["data"]["lock_id"],
            &body["data"]["who"],
            &body["data"]["stack"]
        ),
        (
            &json!("old_lock"),
            &json!("LAPTOP-1"),
            &json!("alice@laptop"),
            &json!("net")
        )
    );
    // Several more passes of the duty later, still one notification for this lock.
    let passes = || t.server.state().duties.last_pass("notify");
    let mut seen = passes();
    for _ in 0..3 {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while passes() == seen {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the duty stopped passing"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        seen = passes();
    }
    assert_eq!(received.all().len(), 1);
}

#[tokio::test]
async fn targets_are_managed_tested_and_refused_with_reasons() {
    let t = setup(|_| {}).await;
    let (url, received) = receiver(0).await;
    // Refusals name the field and say why.
    for (body, field, words) in [
        (
            json!({"id": "a1", "kind": "webhook", "url": "ftp://example.test/x", "secret": "s"}),
            "url",
            "http:// or https://",
        ),
        (
            json!({"id": "a1", "kind": "webhook", "url": "not a url", "secret": "s"}),
            "url",
            "not a URL",
        ),
        (
            json!({"id": "a1", "kind": "webhook", "url": url}),
            "secret",
            "needs a secret",
        ),
        (
            json!({"id": "a1", "kind": "slack", "url": url, "secret": "s"}),
            "secret",
            "takes no secret",
        ),
        (
            json!({"id": "a1", "kind": "pager", "url": url}),
            "kind",
            "webhook or slack",
        ),
        (json!({"id": "A B", "kind": "slack", "url": url}), "id", ""),
        (
            json!({"id": "a1", "kind": "slack", "url": url, "rules": [{"events": ["run_started"]}]}),
            "rules[0].events",
            "unknown event",
        ),
        (
            json!({"id": "a1", "kind": "slack", "url": url, "rules": [{"events": ["run_ended"], "run_states": ["planning"]}]}),
            "rules[0].run_states",
            "not a state a run ends in",
        ),
        (
            json!({"id": "a1", "kind": "slack", "url": url, "rules": [{"events": ["run_ended"], "run_kinds": ["nightly"]}]}),
            "rules[0].run_kinds",
            "unknown kind",
        ),
        (
            json!({"id": "a1", "kind": "slack", "url": url, "rules": [{"events": ["late_write"], "run_states": ["failed"]}]}),
            "rules[0].events",
            "apply to run_ended",
        ),
    ] {
        let r = t.post(TARGETS, &t.admin, body.clone()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {:?}", r.body);
        assert_eq!(r.body["error"]["field"], field, "{body}: {:?}", r.body);
        assert!(r.message().contains(words), "{body}: {:?}", r.body);
    }
    let created = add_target(
        &t,
        json!({"id": "ops", "kind": "webhook", "url": url, "secret": SECRET,
               "rules": [{"events": ["run_ended"], "run_kinds": ["drift"]}], "enabled": false}),
    )
    .await;
    assert_eq!(created["default_rules"], false);
    let r = t
        .post(
            TARGETS,
            &t.admin,
            json!({"id": "ops", "kind": "slack", "url": url}),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "already_exists")
    );
    // A test event reaches even a disabled target, signed.
    let r = t
        .post(&format!("{TARGETS}/ops/test"), &t.admin, json!({}))
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{:?}", r.body);
    assert_eq!(r.body["event"], "test", "{:?}", r.body);
    // The answer says how far the delivery got when it was read: the delivery duty,
    // woken by the commit, may already have sent it.
    assert!(
        r.body["status"] == "pending" || r.body["status"] == "delivered",
        "{:?}",
        r.body
    );
    let got = received.wait_for(1).await;
    assert_eq!(header(&got[0].0, "x-bosun-event"), "test");
    assert!(signature_valid(
        SECRET,
        &got[0].1,
        header(&got[0].0, "x-bosun-signature-256")
    ));
    // PATCH: a new secret signs from then on; `rules: []` returns to the defaults.
    let r = t
        .call(
            Method::PATCH,
            &format!("{TARGETS}/ops"),
            Some(&t.admin),
            Some(json!({"secret": "rotated-secret", "rules": [], "enabled": true})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        (&r.body["default_rules"], &r.body["enabled"]),
        (&json!(true), &json!(true))
    );
    assert_eq!(
        r.body["rules"][0]["run_states"],
        json!(["failed", "force_failed", "interrupted"])
    );
    t.post(&format!("{TARGETS}/ops/test"), &t.admin, json!({}))
        .await;
    let got = received.wait_for(2).await;
    assert!(signature_valid(
        "rotated-secret",
        &got[1].1,
        header(&got[1].0, "x-bosun-signature-256")
    ));
    let r = t
        .call(
            Method::PATCH,
            &format!("{TARGETS}/ops"),
            Some(&t.admin),
            Some(json!({"url": "gopher://x"})),
        )
        .await;
    assert_eq!(r.body["error"]["field"], "url");
    // Members read, the list shows no secret; delete removes it and its log.
    let viewer = t.user_token("vera", Some(bosun_core::Role::Viewer)).await;
    let r = t.get(TARGETS, &viewer).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["items"].as_array().unwrap().len(), 1);
    assert!(!r.body.to_string().contains("rotated-secret") && !r.body.to_string().contains(SECRET));
    assert_eq!(deliveries(&t, "ops").await.len(), 2);
    let r = t
        .call(
            Method::DELETE,
            &format!("{TARGETS}/ops"),
            Some(&t.admin),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = t.get(&format!("{TARGETS}/ops/deliveries"), &t.admin).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = t
        .post(&format!("{TARGETS}/ops/test"), &t.admin, json!({}))
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let log = t.get("/api/v1/orgs/default/audit", &t.admin).await;
    let actions: Vec<&str> = log.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    for a in [
        "notification_target.create",
        "notification_target.update",
        "notification_target.delete",
    ] {
        assert!(actions.contains(&a), "{a} not audited: {actions:?}");
    }
}

#[tokio::test]
async fn the_duty_prunes_settled_deliveries_past_the_retention_and_keeps_pending_ones() {
    let t = setup(|c| {
        c.notify.retention = Duration::from_millis(500);
        c.notify.prune_every = Duration::from_millis(50);
        // A failed attempt is retried only in an hour: the delivery stays pending.
        c.notify.retry_base = Duration::from_secs(3600);
    })
    .await;
    let (url, received) = receiver(0).await;
    add_target(
        &t,
        json!({"id": "ok", "kind": "webhook", "url": url, "secret": SECRET}),
    )
    .await;
    // Nothing listens on the discard port: every attempt fails to connect.
    add_target(
        &t,
        json!({"id": "down", "kind": "slack", "url": "http://127.0.0.1:9/hook"}),
    )
    .await;
    for id in ["ok", "down"] {
        let r = t
            .post(&format!("{TARGETS}/{id}/test"), &t.admin, json!({}))
            .await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{:?}", r.body);
    }
    received.wait_for(1).await;
    // The sent delivery is pruned once older than the retention, its event with it.
    let counters = &t.server.state().notifications;
    let pruned = || {
        (
            counters
                .pruned_deliveries
                .load(std::sync::atomic::Ordering::Relaxed),
            counters
                .pruned_events
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while pruned() != (1, 1) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "pruned {:?}; ok: {:?}; down: {:?}",
            pruned(),
            deliveries(&t, "ok").await,
            deliveries(&t, "down").await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(deliveries(&t, "ok").await, Vec::<Value>::new());
    // The failed one, as old, is still retrying: it stays, whatever its age.
    let down = deliveries(&t, "down").await;
    assert_eq!(down.len(), 1, "{down:?}");
    assert_eq!(
        (&down[0]["status"], &down[0]["attempts"]),
        (&json!("pending"), &json!(1)),
        "{down:?}"
    );
    // Later prunes find nothing more.
    let passes = || t.server.state().duties.last_pass("notify");
    let seen = passes();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while passes() == seen {
        assert!(tokio::time::Instant::now() < deadline, "the duty stopped");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(deliveries(&t, "down").await.len(), 1);
    assert_eq!(pruned(), (1, 1));
    // /metrics says what was pruned.
    let m = t.metrics_text().await;
    for line in [
        "bosun_notifications_pruned_total{kind=\"deliveries\"} 1",
        "bosun_notifications_pruned_total{kind=\"events\"} 1",
    ] {
        assert!(m.lines().any(|l| l == line), "{line} missing from:\n{m}");
    }
}
