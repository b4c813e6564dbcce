//! Drift detection through the API with the scheduler on a hand-set clock: schedules
//! fire at their wall time in the stack's zone, once however many fire times passed
//! (recorded), never beside an open drift run; outcomes; a drift run that fails before
//! its plan is `failed`; manual checks; the stale alert (one notification per episode,
//! received by a local HTTP receiver) and the age gauge.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bosun_server::schedules::clock::Clock;
use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::harness::TestServer;
use crate::runs::Runner;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

async fn setup(start: &str) -> (TestServer, Clock) {
    let clock = Clock::manual(utc(start));
    let c = clock.clone();
    let t = TestServer::start_with(move |config| {
        config.schedules.interval = Duration::from_millis(50);
        config.schedules.clock = c;
    })
    .await;
    (t, clock)
}

async fn stack(t: &TestServer, id: &str) -> Value {
    let r = t
        .get(&format!("/api/v1/orgs/default/stacks/{id}"), &t.admin)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    r.body
}

async fn runs(t: &TestServer, id: &str) -> Vec<Value> {
    let r = t
        .get(&format!("/api/v1/orgs/default/stacks/{id}/runs"), &t.admin)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    r.body["items"].as_array().unwrap().clone()
}

/// Polls the stack until `pred` holds on it (deadline 20 s).
async fn wait_stack(t: &TestServer, id: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let s = stack(t, id).await;
        if pred(&s) {
            return s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "stack {id} never showed {what}: {}",
            s["drift_status"]
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn run(t: &TestServer, id: &str) -> Value {
    t.get(&format!("/api/v1/orgs/default/runs/{id}"), &t.admin)
        .await
        .body
}

/// Leases the next run and reports a plan with or without changes.
async fn plan(runner: &Runner<'_>, changes: bool) -> String {
    let lease = runner.lease(5).await.expect("a lease");
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
            json!({"fencing": f, "event": "planned", "summary": {"has_changes": changes, "add": 0,
                "change": 0, "destroy": 0, "resource_changes": [], "output_changes": {}}}),
        )
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    id
}

#[tokio::test]
async fn the_schedule_fires_in_its_zone_once_and_never_beside_an_open_check() {
    let (t, clock) = setup("2024-06-01T06:30:00Z").await;
    let r = t
        .create_stack(json!({"id": "net", "repository": "file:///srv/git/infra",
            "drift_detection": {"schedule": "0 9 * * *", "timezone": "Europe/Berlin"}}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(r.body["drift_detection"]["timezone"], "Europe/Berlin");

    // Armed: 09:00 in Berlin (summer time) is 07:00 UTC.
    let s = wait_stack(&t, "net", "the next check", |s| {
        s["drift_status"]["next_check_at"] == "2024-06-01T07:00:00Z"
    })
    .await;
    assert_eq!(s["drift_status"]["last_success"], Value::Null);
    assert_eq!(s["drift_status"]["stale"], false);
    assert!(
        runs(&t, "net").await.is_empty(),
        "nothing fires before its time"
    );

    clock.set(utc("2024-06-01T07:00:20Z"));
    wait_stack(&t, "net", "the following check", |s| {
        s["drift_status"]["next_check_at"] == "2024-06-02T07:00:00Z"
    })
    .await;
    let all = runs(&t, "net").await;
    assert_eq!(all.len(), 1, "{all:?}");
    let first = all[0]["id"].as_str().unwrap().to_string();
    assert_eq!(
        (&all[0]["kind"], &all[0]["trigger"], &all[0]["triggered_by"]),
        (&json!("drift"), &json!("schedule"), &json!("system"))
    );
    assert_eq!(all[0]["drift"]["result"], "pending");

    // Three days later, the first check still queued: nothing piles up, the skip is
    // recorded on the schedule.
    clock.set(utc("2024-06-04T08:00:00Z"));
    let s = wait_stack(&t, "net", "the skip", |s| {
        s["drift_status"]["next_check_at"] == "2024-06-05T07:00:00Z"
    })
    .await;
    assert_eq!(runs(&t, "net").await.len(), 1);
    assert_eq!(
        s["drift_status"]["last_fire_note"],
        format!("skipped: drift run {first} is still open")
    );
    assert_eq!(s["drift_status"]["open_run"], json!(first));
    // An operator's check is refused too, saying why.
    let r = t
        .post(
            "/api/v1/orgs/default/stacks/net/drift-checks",
            &t.admin,
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    assert_eq!(r.code(), "has_open_runs");
    assert!(r.message().contains(&first), "{}", r.message());

    // The check finds drift; no reconcile on this stack.
    let runner = Runner::register(&t, "r1").await;
    assert_eq!(plan(&runner, true).await, first);
    let r = run(&t, &first).await;
    assert_eq!(
        (&r["state"], &r["drift"]["result"]),
        (&json!("finished"), &json!("drift_detected"))
    );
    let s = wait_stack(&t, "net", "the settled check", |s| {
        s["drift_status"]["last_success"]["run"] == json!(first)
    })
    .await;
    assert_eq!(
        s["drift_status"]["last_success"]["result"],
        "drift_detected"
    );
    assert_eq!(
        s["drift_status"]["last_success"]["reconcile_run"],
        Value::Null
    );
    assert_eq!(
        runs(&t, "net").await.len(),
        1,
        "no reconcile without the flag"
    );

    // Down over three fire times (5th, 6th, 7th at 07:00 UTC): one check, two missed.
    clock.set(utc("2024-06-07T09:00:00Z"));
    let s = wait_stack(&t, "net", "the catch-up", |s| {
        s["drift_status"]["next_check_at"] == "2024-06-08T07:00:00Z"
    })
    .await;
    assert_eq!(
        s["drift_status"]["last_fire_note"],
        "2 scheduled check(s) passed while the server was down or busy; ran one"
    );
    let all = runs(&t, "net").await;
    assert_eq!(all.len(), 2, "{all:?}");
    let second = all[0]["id"].as_str().unwrap().to_string();
    assert_eq!(plan(&runner, false).await, second);
    assert_eq!(run(&t, &second).await["drift"]["result"], "no_drift");

    // A new zone re-arms from now: 09:00 in Tokyo is 00:00 UTC.
    let r = t
        .call(
            reqwest::Method::PATCH,
            "/api/v1/orgs/default/stacks/net",
            Some(&t.admin),
            Some(json!({"drift_detection": {"schedule": "0 9 * * *", "timezone": "Asia/Tokyo"}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    wait_stack(&t, "net", "the re-armed schedule", |s| {
        s["drift_status"]["next_check_at"] == "2024-06-08T00:00:00Z"
    })
    .await;
}

#[tokio::test]
async fn reconcile_starts_a_tracked_run_that_names_its_drift_run() {
    let (t, _clock) = setup("2024-06-01T06:30:00Z").await;
    let r = t
        .create_stack(json!({"id": "net", "repository": "file:///srv/git/infra",
            "drift_detection": {"schedule": "@daily", "reconcile": true}}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let r = t
        .post(
            "/api/v1/orgs/default/stacks/net/drift-checks",
            &t.admin,
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(
        (&r.body["kind"], &r.body["trigger"]),
        (&json!("drift"), &json!("manual"))
    );
    let drift = r.body["id"].as_str().unwrap().to_string();
    let runner = Runner::register(&t, "r1").await;
    assert_eq!(plan(&runner, true).await, drift);
    let s = wait_stack(&t, "net", "the reconcile run", |s| {
        !s["drift_status"]["last_success"]["reconcile_run"].is_null()
    })
    .await;
    let tracked = s["drift_status"]["last_success"]["reconcile_run"]
        .as_str()
        .unwrap()
        .to_string();
    let r = run(&t, &tracked).await;
    assert_eq!(
        (
            &r["kind"],
            &r["trigger"],
            &r["triggered_by"],
            &r["reconciles"]
        ),
        (
            &json!("tracked"),
            &json!("schedule"),
            &json!(format!("run:{drift}")),
            &json!(drift)
        )
    );
    assert_eq!(
        run(&t, &drift).await["drift"]["reconcile_run"],
        json!(tracked)
    );
    // Exactly one reconcile, however many passes settle.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(runs(&t, "net").await.len(), 2);
    // The manual trigger still refuses kind drift, pointing at the drift-check route.
    let r = t
        .post(
            "/api/v1/orgs/default/stacks/net/runs",
            &t.admin,
            json!({"kind": "drift"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert_eq!(r.body["error"]["field"], "kind");
    assert!(r.message().contains("drift-checks"), "{}", r.message());
}

/// A receiver on a free loopback port; returns its URL and what it got.
async fn receiver() -> (String, Arc<Mutex<Vec<String>>>) {
    let got: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = got.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: String| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(body);
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/hook"), got)
}

#[tokio::test]
async fn a_check_failing_before_its_plan_is_failed_and_staleness_alerts_once() {
    let (t, clock) = setup("2024-06-01T10:30:00Z").await;
    let (url, got) = receiver().await;
    let r = t
        .post(
            "/api/v1/orgs/default/notifications/targets",
            &t.admin,
            json!({"id": "ops", "kind": "webhook", "url": url, "secret": "s3cret-receiver",
                "rules": [{"events": ["stale_drift_check"]}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    // A second target with the default rules: every failed run, drift runs included.
    let (all_url, all_got) = receiver().await;
    let r = t
        .post(
            "/api/v1/orgs/default/notifications/targets",
            &t.admin,
            json!({"id": "all", "kind": "webhook", "url": all_url, "secret": "s3cret-all"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    // Its variable names a secret nobody stored: every run fails while preparing.
    let r = t
        .create_stack(json!({"id": "net", "repository": "file:///srv/git/infra",
            "variables": {"TF_VAR_token": "secret://ops/missing"},
            "drift_detection": {"schedule": "0 * * * *"}}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    wait_stack(&t, "net", "the armed schedule", |s| {
        s["drift_status"]["next_check_at"] == "2024-06-01T11:00:00Z"
    })
    .await;
    let r = t
        .post(
            "/api/v1/orgs/default/stacks/net/drift-checks",
            &t.admin,
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let id = r.body["id"].as_str().unwrap().to_string();
    let runner = Runner::register(&t, "r1").await;
    assert!(runner.lease(1).await.is_none(), "it never reaches a runner");
    let r = run(&t, &id).await;
    assert_eq!(
        (&r["state"], &r["drift"]["result"]),
        (&json!("failed"), &json!("failed"))
    );
    assert!(r["reason"].as_str().unwrap().contains("ops/missing"), "{r}");
    // …and the failed drift check is notified.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let failed = loop {
        let seen: Vec<Value> = all_got
            .lock()
            .unwrap()
            .iter()
            .map(|b| serde_json::from_str(b).unwrap())
            .collect();
        if let Some(b) = seen.into_iter().find(|b| b["data"]["run"] == json!(id)) {
            break b;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no notification of {id}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(failed["event"], "run_ended", "{failed}");
    assert_eq!(
        (&failed["data"]["kind"], &failed["data"]["state"]),
        (&json!("drift"), &json!("failed")),
        "{failed}"
    );
    let s = wait_stack(&t, "net", "the failed check", |s| {
        s["drift_status"]["last_check"]["run"] == json!(id)
    })
    .await;
    assert_eq!(s["drift_status"]["last_check"]["result"], "failed");
    assert_eq!(s["drift_status"]["last_success"], Value::Null);

    // Hourly: stale once nothing succeeded for over two hours since checking began.
    clock.set(utc("2024-06-01T12:29:00Z"));
    let s = wait_stack(&t, "net", "an age", |s| {
        s["drift_status"]["age_seconds"] == 119 * 60
    })
    .await;
    assert_eq!(s["drift_status"]["stale"], false);
    // Checked on time: /metrics names no stack and counts no stale one.
    let text = t.metrics_text().await;
    assert!(
        !text.contains("bosun_drift_check_age_seconds{")
            && !text.contains("bosun_drift_checks_stale{"),
        "{text}"
    );
    clock.set(utc("2024-06-01T12:31:00Z"));
    let s = wait_stack(&t, "net", "staleness", |s| {
        s["drift_status"]["stale"] == true
    })
    .await;
    assert_eq!(s["drift_status"]["age_seconds"], 121 * 60);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while got.lock().unwrap().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "no stale alert");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let body: Value = serde_json::from_str(&got.lock().unwrap()[0]).unwrap();
    assert_eq!(body["event"], "stale_drift_check", "{body}");
    assert_eq!(body["data"]["stack"], "net", "{body}");
    assert_eq!(body["data"]["age_seconds"], 121 * 60, "{body}");
    // The gauge agrees.
    let text = t.metrics_text().await;
    assert!(
        text.contains("bosun_drift_check_age_seconds{org=\"default\",stack=\"net\"} 7260"),
        "{text}"
    );
    assert!(
        text.contains("bosun_drift_checks_stale{org=\"default\"} 1"),
        "{text}"
    );
    // Later passes in the same episode send nothing more.
    clock.set(utc("2024-06-01T13:31:00Z"));
    wait_stack(&t, "net", "a later age", |s| {
        s["drift_status"]["age_seconds"] == 181 * 60
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(got.lock().unwrap().len(), 1, "one alert per episode");
}
