//! Runs and the runner protocol at the HTTP level, with the test acting as a runner:
//! the whole lifecycle, fencing, heartbeats, the stale sweep, requeue, lock blocking,
//! cancel and late writes.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::harness::{Reply, TestServer};

pub(crate) struct Runner<'a> {
    t: &'a TestServer,
    id: String,
}

impl<'a> Runner<'a> {
    pub(crate) async fn register(t: &'a TestServer, name: &str) -> Runner<'a> {
        Runner {
            t,
            id: t.hosted_runner(name).await,
        }
    }

    pub(crate) async fn lease(&self, wait: u64) -> Option<Value> {
        let r = self
            .t
            .post(
                "/api/v1/runner/lease",
                &self.t.server.hosted_runner_token,
                json!({"runner_id": self.id, "wait_seconds": wait}),
            )
            .await;
        match r.status {
            StatusCode::OK => Some(r.body),
            StatusCode::NO_CONTENT => None,
            s => panic!("lease: {s} {:?}", r.body),
        }
    }

    pub(crate) async fn call(&self, path: &str, body: Value) -> Reply {
        self.t
            .post(
                &format!("/api/v1/runner/runs/{path}"),
                &self.t.server.hosted_runner_token,
                body,
            )
            .await
    }
}

async fn setup(tweak: impl FnOnce(&mut bosun_server::ServerConfig)) -> TestServer {
    let t = TestServer::start_with(tweak).await;
    let r = t.create_stack(json!({"id": "net", "repository": "file:///srv/git/infra", "variables": {"TF_VAR_region": "eu-west-1"}})).await;
    assert_eq!(r.status, StatusCode::CREATED);
    t
}

async fn trigger(t: &TestServer, body: Value) -> String {
    let r = t
        .post("/api/v1/orgs/default/stacks/net/runs", &t.admin, body)
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(r.body["state"], "queued");
    r.body["id"].as_str().unwrap().to_string()
}

async fn run(t: &TestServer, id: &str) -> Value {
    let r = t
        .get(&format!("/api/v1/orgs/default/runs/{id}"), &t.admin)
        .await;
    assert_eq!(r.status, StatusCode::OK);
    r.body
}

/// Polls until the run reaches `state` (deadline 20 s).
async fn wait_state(t: &TestServer, id: &str, state: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let r = run(t, id).await;
        if r["state"] == state {
            return r;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "run {id} never became {state}: {r}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn summary(changes: bool) -> Value {
    json!({"has_changes": changes, "add": 0, "change": 0, "destroy": 0, "resource_changes": [], "output_changes": {"x": "create"}})
}

#[tokio::test]
async fn tracked_run_lifecycle_over_the_protocol() {
    let t = setup(|_| {}).await;
    let id = trigger(&t, json!({})).await;
    let runner = Runner::register(&t, "r1").await;
    let lease = runner.lease(5).await.expect("a lease");
    assert_eq!(lease["run_id"], json!(id));
    assert_eq!(
        (lease["phase"].as_str(), lease["fencing"].as_i64()),
        (Some("plan"), Some(1))
    );
    assert_eq!(lease["env"]["TF_VAR_region"], "eu-west-1");
    assert!(lease["state_url"]
        .as_str()
        .unwrap()
        .ends_with("/api/v1/orgs/default/stacks/net/state"));
    assert!(lease["run_token"]
        .as_str()
        .unwrap()
        .starts_with("bosun_run_"));
    assert_eq!(run(&t, &id).await["state"], "preparing");
    assert!(runner.lease(0).await.is_none(), "nothing else to do");

    // Heartbeats and logs, with a resend after a "lost" reply.
    let hb = runner
        .call(&format!("{id}/heartbeat"), json!({"fencing": 1}))
        .await;
    assert_eq!(hb.body, json!({"cancel": false}));
    let next = t
        .get(
            &format!("/api/v1/runner/runs/{id}/logs/next?fencing=1"),
            &t.server.hosted_runner_token,
        )
        .await;
    // The server logged the phase's integrations first; the runner continues after them.
    assert_eq!(next.body["next_seq"], 2);
    let chunks = json!({"fencing": 1, "chunks": [{"seq": 2, "text": "init\n"}, {"seq": 3, "text": "plan\n"}]});
    assert_eq!(
        runner
            .call(&format!("{id}/logs"), chunks.clone())
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        runner.call(&format!("{id}/logs"), chunks).await.status,
        StatusCode::NO_CONTENT
    );
    let r = runner
        .call(
            &format!("{id}/report"),
            json!({"fencing": 1, "event": "started", "commit": "0123456789abcdef"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    assert_eq!(run(&t, &id).await["state"], "planning");
    let put = t
        .client
        .put(format!("{}/api/v1/runner/runs/{id}/plan?fencing=1", t.url))
        .bearer_auth(&t.server.hosted_runner_token)
        .body(b"PLANFILE".to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::NO_CONTENT);
    runner
        .call(
            &format!("{id}/report"),
            json!({"fencing": 1, "event": "planned", "summary": summary(true)}),
        )
        .await;
    let r = run(&t, &id).await;
    assert_eq!(
        (r["state"].as_str(), r["commit"].as_str()),
        (Some("unconfirmed"), Some("0123456789abcdef"))
    );
    assert_eq!(r["plan"]["output_changes"]["x"], "create");
    // The plan lease is over: the old fencing number moves nothing.
    let r = runner
        .call(&format!("{id}/heartbeat"), json!({"fencing": 1}))
        .await;
    assert_eq!((r.status, r.code()), (StatusCode::CONFLICT, "fenced"));

    let r = t
        .post(
            &format!("/api/v1/orgs/default/runs/{id}/confirm"),
            &t.admin,
            json!({}),
        )
        .await;
    assert_eq!(
        (r.status, r.body["state"].as_str()),
        (StatusCode::OK, Some("applying"))
    );
    let lease = runner.lease(5).await.expect("the apply phase");
    assert_eq!(
        (
            lease["phase"].as_str(),
            lease["fencing"].as_i64(),
            lease["commit"].as_str()
        ),
        (Some("apply"), Some(2), Some("0123456789abcdef"))
    );
    let plan = t
        .client
        .get(format!("{}/api/v1/runner/runs/{id}/plan?fencing=2", t.url))
        .bearer_auth(&t.server.hosted_runner_token)
        .send()
        .await
        .unwrap();
    assert_eq!(plan.bytes().await.unwrap().as_ref(), b"PLANFILE");
    runner
        .call(
            &format!("{id}/report"),
            json!({"fencing": 2, "event": "started", "commit": "0123456789abcdef"}),
        )
        .await;
    runner
        .call(
            &format!("{id}/logs"),
            json!({"fencing": 2, "chunks": [{"seq": 6, "text": "apply\n"}]}),
        )
        .await;
    runner
        .call(
            &format!("{id}/report"),
            json!({"fencing": 2, "event": "applied"}),
        )
        .await;
    let r = run(&t, &id).await;
    assert_eq!(r["state"], "finished");
    let phases: Vec<&str> = r["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["state"].as_str().unwrap())
        .collect();
    assert_eq!(
        phases,
        ["queued", "preparing", "planning", "unconfirmed", "applying"]
    );
    assert!(r["phases"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["seconds"].is_number()));
    let logs = t
        .get(&format!("/api/v1/orgs/default/runs/{id}/logs"), &t.admin)
        .await;
    let text: String = logs
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap())
        .collect();
    let prepared = "bosun: integration identity: ok\nbosun: integration variables: ok\n";
    assert_eq!(text, format!("{prepared}init\nplan\n{prepared}apply\n"));
    // The run's token died with it.
    let r = t
        .get(
            "/api/v1/orgs/default/stacks/net/state",
            lease["run_token"].as_str().unwrap(),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);

    // Retry: a fresh run over the same commit.
    let r = t
        .post(
            &format!("/api/v1/orgs/default/runs/{id}/retry"),
            &t.admin,
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(
        (
            r.body["commit"].as_str(),
            r.body["retry_of"].as_str(),
            r.body["trigger"].as_str()
        ),
        (Some("0123456789abcdef"), Some(id.as_str()), Some("retry"))
    );
    let list = t
        .get("/api/v1/orgs/default/stacks/net/runs", &t.admin)
        .await;
    assert_eq!(list.body["items"].as_array().unwrap().len(), 2);
    // Paged: the second page follows the cursor; an unknown cursor is refused, naming it,
    // rather than the list starting over.
    let first = t
        .get("/api/v1/orgs/default/stacks/net/runs?limit=1", &t.admin)
        .await;
    let cursor = first.body["next_cursor"].as_str().unwrap().to_string();
    let second = t
        .get(
            &format!("/api/v1/orgs/default/stacks/net/runs?limit=1&cursor={cursor}"),
            &t.admin,
        )
        .await;
    assert_eq!(second.body["items"][0]["id"], id.as_str());
    let r = t
        .get(
            "/api/v1/orgs/default/stacks/net/runs?cursor=run-nope",
            &t.admin,
        )
        .await;
    assert_eq!(r.status, reqwest::StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert_eq!(r.body["error"]["field"], "cursor");
    // SSE: the finished run's log, then its end.
    let sse = t
        .client
        .get(format!(
            "{}/api/v1/orgs/default/runs/{id}/logs/stream",
            t.url
        ))
        .bearer_auth(&t.admin)
        .send()
        .await
        .unwrap();
    let body = sse.text().await.unwrap();
    assert!(
        body.contains("event: chunk") && body.contains("apply\\n") && body.contains("event: end"),
        "{body}"
    );
}

#[tokio::test]
async fn proposed_runs_never_apply_and_discard_and_cancel_work() {
    let t = setup(|_| {}).await;
    let runner = Runner::register(&t, "r1").await;
    let id = trigger(&t, json!({"kind": "proposed"})).await;
    let lease = runner.lease(5).await.unwrap();
    runner
        .call(
            &format!("{id}/report"),
            json!({"fencing": lease["fencing"], "event": "started", "commit": "abcdef0"}),
        )
        .await;
    runner
        .call(
            &format!("{id}/report"),
            json!({"fencing": lease["fencing"], "event": "planned", "summary": summary(true)}),
        )
        .await;
    assert_eq!(run(&t, &id).await["state"], "finished");

    // Cancel a queued run: ends at once.
    let queued = trigger(&t, json!({})).await;
    let r = t
        .post(
            &format!("/api/v1/orgs/default/runs/{queued}/cancel"),
            &t.admin,
            json!({}),
        )
        .await;
    assert_eq!(r.body["state"], "canceled");
    // Cancel an executing run: the runner hears it on its heartbeat and confirms.
    let id = trigger(&t, json!({})).await;
    let lease = runner.lease(5).await.unwrap();
    let f = lease["fencing"].clone();
    runner
        .call(
            &format!("{id}/report"),
            json!({"fencing": f, "event": "started", "commit": "abcdef0"}),
        )
        .await;
    let r = t
        .post(
            &format!("/api/v1/orgs/default/runs/{id}/cancel"),
            &t.admin,
            json!({}),
        )
        .await;
    assert_eq!(
        r.body["state"], "planning",
        "still executing until the runner stops"
    );
    let hb = runner
        .call(&format!("{id}/heartbeat"), json!({"fencing": f}))
        .await;
    assert_eq!(hb.body["cancel"], true);
    runner
        .call(
            &format!("{id}/report"),
            json!({"fencing": f, "event": "canceled"}),
        )
        .await;
    assert_eq!(run(&t, &id).await["state"], "canceled");
    // Discard an unconfirmed run; bad actions say why.
    let id = trigger(&t, json!({})).await;
    let lease = runner.lease(5).await.unwrap();
    let f = lease["fencing"].clone();
    runner
        .call(
            &format!("{id}/report"),
            json!({"fencing": f, "event": "started", "commit": "abcdef0"}),
        )
        .await;
    runner
        .call(
            &format!("{id}/report"),
            json!({"fencing": f, "event": "planned", "summary": summary(true)}),
        )
        .await;
    let r = t
        .post(
            &format!("/api/v1/orgs/default/runs/{id}/discard"),
            &t.admin,
            json!({}),
        )
        .await;
    assert_eq!(r.body["state"], "discarded");
    let r = t
        .post(
            &format!("/api/v1/orgs/default/runs/{id}/confirm"),
            &t.admin,
            json!({}),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "invalid_transition")
    );
    assert!(r.message().contains("discarded"), "{}", r.message());
    let r = t
        .post(
            "/api/v1/orgs/default/stacks/net/runs",
            &t.admin,
            json!({"kind": "sideways"}),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, "validation_failed")
    );
    // A stack with an open run is not deleted under it.
    let open = trigger(&t, json!({})).await;
    let r = t
        .call(
            Method::DELETE,
            "/api/v1/orgs/default/stacks/net",
            Some(&t.admin),
            None,
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "has_open_runs")
    );
    assert!(r.message().contains(&open), "{}", r.message());
    t.post(
        &format!("/api/v1/orgs/default/runs/{open}/cancel"),
        &t.admin,
        json!({}),
    )
    .await;
}

#[tokio::test]
async fn a_silent_runner_is_swept_its_lock_released_and_late_writes_flagged() {
    let t = setup(|c| {
        c.runs.stale_after = Duration::from_millis(600);
        c.runs.sweep_interval = Duration::from_millis(100);
    })
    .await;
    let runner = Runner::register(&t, "r1").await;
    let id = trigger(&t, json!({})).await;
    let lease = runner.lease(5).await.unwrap();
    let f = lease["fencing"].clone();
    let token = lease["run_token"].as_str().unwrap().to_string();
    runner
        .call(
            &format!("{id}/report"),
            json!({"fencing": f, "event": "started", "commit": "abcdef0"}),
        )
        .await;
    let state = "/api/v1/orgs/default/stacks/net/state";
    let lock = json!({"ID": "RUN-LOCK", "Operation": "OperationTypeApply", "Who": "runner", "Version": "1.0.3", "Created": "", "Path": "", "Info": ""});
    let r = t
        .call(
            Method::from_bytes(b"LOCK").unwrap(),
            state,
            Some(&token),
            Some(lock),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    // The runner goes silent: force-failed with the reason, its lock released.
    let r = wait_state(&t, &id, "force_failed").await;
    assert!(
        r["reason"]
            .as_str()
            .unwrap()
            .starts_with("runner timed out or never reported"),
        "{r}"
    );
    assert!(r["reason"].as_str().unwrap().contains("RUN-LOCK"), "{r}");
    assert_eq!(
        t.get(&format!("{state}/lock"), &t.admin).await.body["locked"],
        false
    );
    // It cannot move the run any more…
    let r = runner
        .call(
            &format!("{id}/report"),
            json!({"fencing": f, "event": "applied"}),
        )
        .await;
    assert_eq!(r.code(), "fenced");
    // …but the engine it left behind may still write state: kept, flagged, current when
    // nobody holds the lock; not current when someone does.
    let doc = |serial: u64| json!({"version": 4, "serial": serial, "lineage": "L", "outputs": {}, "resources": []});
    let r = t
        .call(
            Method::POST,
            &format!("{state}?ID=RUN-LOCK"),
            Some(&token),
            Some(doc(1)),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        (r.body["late_write"].as_bool(), r.body["current"].as_bool()),
        (Some(true), Some(true))
    );
    let laptop = json!({"ID": "LAPTOP", "Operation": "OperationTypeApply", "Who": "alice@laptop", "Version": "1.0.3", "Created": "", "Path": "", "Info": ""});
    t.call(
        Method::from_bytes(b"LOCK").unwrap(),
        state,
        Some(&t.admin),
        Some(laptop),
    )
    .await;
    let r = t
        .call(Method::POST, state, Some(&token), Some(doc(2)))
        .await;
    assert_eq!(
        (r.body["late_write"].as_bool(), r.body["current"].as_bool()),
        (Some(true), Some(false))
    );
    assert_eq!(run(&t, &id).await["late_write"], true);
    let metrics = t.metrics_text().await;
    assert!(
        metrics.contains("bosun_state_late_writes_total 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("bosun_runs{kind=\"tracked\",state=\"force_failed\"} 1"),
        "{metrics}"
    );
    let log = t.get("/api/v1/orgs/default/audit", &t.admin).await;
    assert!(log.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["action"] == "state.lock_released"));
}

#[tokio::test]
async fn a_lease_never_started_is_requeued_for_another_runner() {
    let t = setup(|c| {
        c.runs.stale_after = Duration::from_millis(600);
        c.runs.sweep_interval = Duration::from_millis(100);
    })
    .await;
    let dead = Runner::register(&t, "dead").await;
    let id = trigger(&t, json!({})).await;
    let first = dead.lease(5).await.unwrap();
    wait_state(&t, &id, "queued").await;
    let other = Runner::register(&t, "other").await;
    let second = other.lease(5).await.expect("requeued");
    assert_eq!(second["run_id"], json!(id));
    assert_eq!(
        second["fencing"].as_i64(),
        first["fencing"].as_i64().map(|f| f + 1)
    );
    let r = dead
        .call(
            &format!("{id}/heartbeat"),
            json!({"fencing": first["fencing"]}),
        )
        .await;
    assert_eq!(r.code(), "fenced");
    let runners = t.get("/api/v1/orgs/default/runners", &t.admin).await;
    let statuses: Vec<&str> = runners.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert!(statuses.contains(&"busy"), "{statuses:?}");
}

#[tokio::test]
async fn a_laptop_lock_holds_tracked_runs_in_the_queue_naming_the_holder() {
    let t = setup(|_| {}).await;
    let state = "/api/v1/orgs/default/stacks/net/state";
    let laptop = json!({"ID": "LAPTOP", "Operation": "OperationTypeApply", "Who": "alice@laptop", "Version": "1.0.3", "Created": "", "Path": "", "Info": ""});
    t.call(
        Method::from_bytes(b"LOCK").unwrap(),
        state,
        Some(&t.admin),
        Some(laptop.clone()),
    )
    .await;
    let id = trigger(&t, json!({})).await;
    let runner = Runner::register(&t, "r1").await;
    assert!(runner.lease(1).await.is_none());
    let r = run(&t, &id).await;
    assert_eq!(
        (r["state"].as_str(), r["blocked_by"]["Who"].as_str()),
        (Some("queued"), Some("alice@laptop"))
    );
    // A waiting lease wakes when the laptop unlocks.
    let waiting = tokio::spawn({
        let url = t.url.clone();
        let token = t.server.hosted_runner_token.clone();
        let runner_id = runner.id.clone();
        async move {
            reqwest::Client::new()
                .post(format!("{url}/api/v1/runner/lease"))
                .bearer_auth(token)
                .json(&json!({"runner_id": runner_id, "wait_seconds": 20}))
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    });
    t.call(
        Method::from_bytes(b"UNLOCK").unwrap(),
        state,
        Some(&t.admin),
        Some(laptop),
    )
    .await;
    let lease = waiting.await.unwrap();
    assert_eq!(lease["run_id"], json!(id));
    assert!(run(&t, &id).await["blocked_by"].is_null());
}

/// A runner delivers the state its engine could not write: bad input is refused naming
/// the field, the state is stored once however often it is delivered, flagged with the
/// reason, audited, and noted in the run's log.
#[tokio::test]
async fn a_recovered_state_is_stored_once_flagged_and_noted() {
    let t = setup(|_| {}).await;
    let id = trigger(&t, json!({})).await;
    let runner = Runner::register(&t, "r1").await;
    let lease = runner.lease(5).await.expect("a lease");
    let fencing = lease["fencing"].as_i64().unwrap();
    let state = br#"{"version":4,"serial":1,"lineage":"L","outputs":{"x":{"value":"y","type":"string"}},"resources":[]}"#;
    let put = |query: String, body: &'static [u8]| {
        let t = &t;
        let id = id.clone();
        async move {
            t.raw(
                Method::PUT,
                &format!("/api/v1/runner/runs/{id}/recovered-state?{query}"),
                &t.server.hosted_runner_token,
                Some("application/json"),
                body.to_vec(),
            )
            .await
        }
    };
    let reason = "the%20server%20was%20away";
    for (query, field) in [
        (format!("fencing=0&reason={reason}"), "fencing"),
        (
            format!("fencing={}&reason={reason}", fencing + 1),
            "fencing",
        ),
        (format!("fencing={fencing}&reason=%20"), "reason"),
        (format!("fencing={fencing}&reason=a%0Ab"), "reason"),
        (
            format!("fencing={fencing}&reason={}", "x".repeat(501)),
            "reason",
        ),
    ] {
        let r = put(query.clone(), state).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{query}: {:?}", r.body);
        assert_eq!(r.body["error"]["field"], field, "{query}: {:?}", r.body);
    }
    let r = put(format!("fencing={fencing}&reason={reason}"), b"{not json").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert_eq!(r.body["error"]["code"], "invalid_state");
    // A personal token is not a runner.
    let r = t
        .raw(
            Method::PUT,
            &format!("/api/v1/runner/runs/{id}/recovered-state?fencing={fencing}&reason=x"),
            &t.admin,
            Some("application/json"),
            state.to_vec(),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    let versions = t
        .get("/api/v1/orgs/default/stacks/net/state/versions", &t.admin)
        .await;
    assert_eq!(versions.body["items"].as_array().unwrap().len(), 0);

    let first = put(format!("fencing={fencing}&reason={reason}"), state).await;
    assert_eq!(first.status, StatusCode::OK, "{:?}", first.body);
    assert_eq!(first.body["recovered"], "the server was away");
    assert_eq!(first.body["current"], true);
    assert_eq!(first.body["writer"]["id"], id.as_str());
    let again = put(format!("fencing={fencing}&reason={reason}"), state).await;
    assert_eq!(again.status, StatusCode::OK, "{:?}", again.body);
    assert_eq!(again.body["version"], first.body["version"]);
    let versions = t
        .get("/api/v1/orgs/default/stacks/net/state/versions", &t.admin)
        .await;
    assert_eq!(versions.body["items"].as_array().unwrap().len(), 1);
    let audit = t
        .get(
            "/api/v1/orgs/default/audit?action=state.recovered",
            &t.admin,
        )
        .await;
    let items = audit.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{:?}", audit.body);
    assert_eq!(items[0]["detail"]["run"], id.as_str());
    let log = t
        .get(&format!("/api/v1/orgs/default/runs/{id}/logs"), &t.admin)
        .await;
    assert!(
        log.body.to_string().contains("recovered as version 1"),
        "{:?}",
        log.body
    );
}

/// A restarted runner hands back a lease its dead process held: refused as fenced unless
/// it names the current lease; a lease never started goes back to the queue, a started
/// one is force-failed.
#[tokio::test]
async fn an_abandoned_lease_is_requeued_or_force_failed_at_once() {
    let t = setup(|_| {}).await;
    let id = trigger(&t, json!({})).await;
    let runner = Runner::register(&t, "r1").await;
    let abandon = |fencing: i64| {
        let t = &t;
        let id = id.clone();
        async move {
            t.post(
                &format!("/api/v1/runner/runs/{id}/abandon?fencing={fencing}"),
                &t.server.hosted_runner_token,
                json!(null),
            )
            .await
        }
    };
    let lease = runner.lease(5).await.expect("a lease");
    let fencing = lease["fencing"].as_i64().unwrap();
    let r = abandon(fencing + 1).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    assert_eq!(r.body["error"]["code"], "fenced");
    // A runner of another pool of the org cannot hand it back.
    let edge = t
        .post(
            "/api/v1/orgs/default/pool-tokens",
            &t.admin,
            json!({"pool": "edge", "description": "another pool"}),
        )
        .await;
    let r = t
        .post(
            &format!("/api/v1/runner/runs/{id}/abandon?fencing={fencing}"),
            edge.body["secret"].as_str().unwrap(),
            json!(null),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    assert_eq!(run(&t, &id).await["state"], "preparing");
    // Never started: back to the queue, for any runner.
    let r = abandon(fencing).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    wait_state(&t, &id, "queued").await;
    let lease = runner.lease(5).await.expect("leased again");
    let fencing = lease["fencing"].as_i64().unwrap();
    let r = runner
        .call(
            &format!("{id}/report"),
            json!({"fencing": fencing, "event": "started", "commit": "abc"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    // Started: force-failed, and a second hand-back is fenced.
    let r = abandon(fencing).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    wait_state(&t, &id, "force_failed").await;
    let r = abandon(fencing).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
}
