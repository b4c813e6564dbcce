//! Runners' egress over the runner protocol: the mode a runner registers is listed with
//! it (and an opt-out is logged), and the refusals its phases report are counted on
//! `/metrics` as `bosun_egress_refused_total`.

use std::sync::{Arc, Mutex};

use reqwest::StatusCode;
use serde_json::{json, Value};
use tracing::field::{Field, Visit};
use tracing::span;

use crate::harness::TestServer;

/// The events logged on this thread while it is the default subscriber: level and
/// message (the test's server runs on the test's own thread).
#[derive(Clone, Default)]
struct Logged(Arc<Mutex<Vec<(tracing::Level, String)>>>);

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl tracing::Subscriber for Logged {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }
    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut message = Message(String::new());
        event.record(&mut message);
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), message.0));
    }
    fn enter(&self, _: &span::Id) {}
    fn exit(&self, _: &span::Id) {}
}

async fn register(t: &TestServer, token: &str, body: Value) -> String {
    let r = t.post("/api/v1/runner/register", token, body).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    r.body["runner_id"].as_str().unwrap().to_string()
}

/// `bosun_egress_refused_total` as `/metrics` says it now.
async fn refused_total(t: &TestServer) -> u64 {
    let text = t.metrics_text().await;
    assert!(
        text.contains("# TYPE bosun_egress_refused_total counter\n")
            && text.contains(
                "# HELP bosun_egress_refused_total Connections from engines that the hosted \
                 egress policy refused"
            ),
        "{text}"
    );
    text.lines()
        .find_map(|l| l.strip_prefix("bosun_egress_refused_total "))
        .unwrap_or_else(|| panic!("no bosun_egress_refused_total sample: {text}"))
        .parse()
        .unwrap()
}

#[tokio::test]
async fn runners_are_listed_with_the_egress_they_registered() {
    let logged = Logged::default();
    let _capture = tracing::subscriber::set_default(logged.clone());
    let t = TestServer::start().await;
    let hosted = t.server.hosted_runner_token.clone();
    let sandboxed = register(
        &t,
        &hosted,
        json!({"name": "sandboxed", "version": "0.2.0", "egress": "restricted"}),
    )
    .await;
    let opted = register(
        &t,
        &hosted,
        json!({"name": "opted", "version": "0.2.0", "egress": "opted_out"}),
    )
    .await;
    // An older runner says nothing about it.
    let old = register(&t, &hosted, json!({"name": "old", "version": "0.1.0"})).await;
    // A self-hosted pool's runner: no sandbox, its operator's network.
    let edge = t
        .post(
            "/api/v1/orgs/default/pool-tokens",
            &t.admin,
            json!({"pool": "edge"}),
        )
        .await;
    assert_eq!(edge.status, StatusCode::CREATED, "{:?}", edge.body);
    let own = register(
        &t,
        edge.body["secret"].as_str().unwrap(),
        json!({"name": "own", "egress": "unrestricted"}),
    )
    .await;

    let r = t.get("/api/v1/orgs/default/runners", &t.admin).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    // Listed by registration time, then id: two registrations in the same
    // millisecond come in id order, so the check is on the set.
    let mut listed: Vec<(String, String, Value)> = r.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap().to_string(),
                r["pool"].as_str().unwrap().to_string(),
                r["egress"].clone(),
            )
        })
        .collect();
    let mut expected = vec![
        (sandboxed, "hosted".to_string(), json!("restricted")),
        (opted.clone(), "hosted".to_string(), json!("opted_out")),
        (old, "hosted".to_string(), Value::Null),
        (own, "edge".to_string(), json!("unrestricted")),
    ];
    listed.sort_by(|a, b| a.0.cmp(&b.0));
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(listed, expected);

    // A mode the protocol does not know is refused, naming the ones it knows.
    let r = t
        .post(
            "/api/v1/runner/register",
            &hosted,
            json!({"name": "odd", "egress": "open"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert!(
        r.message()
            .contains("`restricted`, `unrestricted`, `opted_out`"),
        "{:?}",
        r.body
    );

    // Only the opt-out is logged, at info, naming the runner and the flag.
    let logged = logged.0.lock().unwrap().clone();
    let opt_outs: Vec<&(tracing::Level, String)> = logged
        .iter()
        .filter(|(_, m)| m.contains("without the egress sandbox"))
        .collect();
    assert_eq!(
        opt_outs,
        [&(
            tracing::Level::INFO,
            "runner opted runs engines without the egress sandbox (--egress-unrestricted)"
                .to_string()
        )],
        "{opted}: {logged:?}"
    );
}

#[tokio::test]
async fn egress_refusals_reported_with_a_phase_raise_the_metric() {
    let t = TestServer::start().await;
    let r = t
        .create_stack(json!({"id": "net", "repository": "file:///srv/git/infra"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let hosted = t.server.hosted_runner_token.clone();
    let runner = register(
        &t,
        &hosted,
        json!({"name": "sandboxed", "egress": "restricted"}),
    )
    .await;
    assert_eq!(refused_total(&t).await, 0);

    let r = t
        .post(
            "/api/v1/orgs/default/stacks/net/runs",
            &t.admin,
            json!({"kind": "proposed"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let run = r.body["id"].as_str().unwrap().to_string();
    let lease = t
        .post(
            "/api/v1/runner/lease",
            &hosted,
            json!({"runner_id": runner, "wait_seconds": 5}),
        )
        .await;
    assert_eq!(lease.status, StatusCode::OK, "{:?}", lease.body);
    assert_eq!(lease.body["run_id"], json!(run));
    let fencing = lease.body["fencing"].clone();
    let report = |body: Value| {
        let t = &t;
        let hosted = &hosted;
        let path = format!("/api/v1/runner/runs/{run}/report");
        async move { t.post(&path, hosted, body).await }
    };

    // A report without refusals (an older runner's, or none happened) adds nothing.
    let r = report(json!({"fencing": fencing, "event": "started", "commit": "abcdef0"})).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    assert_eq!(refused_total(&t).await, 0);

    let planned = json!({"fencing": fencing, "event": "planned", "egress_refusals": 3,
        "summary": {"has_changes": false, "add": 0, "change": 0, "destroy": 0,
            "resource_changes": [], "output_changes": {}}});
    let r = report(planned.clone()).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    assert_eq!(refused_total(&t).await, 3);

    // A retried copy of the report the server already took is refused, and not counted
    // twice.
    let r = report(planned).await;
    assert!(r.status.is_client_error(), "{:?}", r.body);
    assert_eq!(refused_total(&t).await, 3);
    let r = t
        .get(&format!("/api/v1/orgs/default/runs/{run}"), &t.admin)
        .await;
    assert_eq!(r.body["state"], "finished", "{:?}", r.body);
}
