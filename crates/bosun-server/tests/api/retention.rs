//! Retention over HTTP: the duty deletes what the settings let go, the API and the
//! console read what is kept, say what was deleted, and `/metrics` counts it.

use std::time::Duration;

use bosun_server::ServerConfig;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::console::Browser;
use crate::console_ops::runner_post;
use crate::harness::{eventually, seed_audit, TestServer};

const NET: &str = "/api/v1/orgs/default/stacks/net";

async fn setup(tweak: impl FnOnce(&mut ServerConfig)) -> TestServer {
    let t = TestServer::start_with(|c| {
        c.retention.every = Duration::from_millis(50);
        tweak(c);
    })
    .await;
    for id in ["net", "app"] {
        let r = t
            .create_stack(json!({"id": id, "repository": "github:acme/infra"}))
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }
    t
}

fn state_doc(serial: u64) -> Value {
    json!({"version": 4, "terraform_version": "1.0.3", "serial": serial, "lineage": "L-1",
        "outputs": {"n": {"value": format!("v{serial}"), "type": "string"}},
        "resources": []})
}

async fn versions(t: &TestServer) -> Vec<i64> {
    let r = t.get(&format!("{NET}/state/versions"), &t.admin).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    r.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_i64().unwrap())
        .collect()
}

#[tokio::test]
async fn old_state_versions_go_and_the_newest_the_head_and_a_runs_input_stay() {
    let t = setup(|c| {
        c.retention.state_keep_versions = 2;
        c.retention.state_keep_for = Duration::from_millis(1);
    })
    .await;
    // A run of app was given net's version 2 as its input (recorded before it exists).
    let store = &t.server.state().store;
    let run = bosun_store::NewRun {
        id: "r-app".into(),
        org: "default".into(),
        stack: "app".into(),
        kind: bosun_core::run::RunKind::Tracked,
        trigger: bosun_core::run::Trigger::Manual,
        triggered_by: "user:admin".into(),
        commit: None,
        branch: "main".into(),
        retry_of: None,
        pull_request: None,
    };
    store.create_run(&run, Some(&seed_audit())).await.unwrap();
    let consumed = json!([{"stack": "net", "version": 2, "output": "n", "variable": "n",
                           "sensitive": false}]);
    assert!(store.set_run_consumed("r-app", &consumed).await.unwrap());
    for serial in 1..=6 {
        let r = t
            .call(
                Method::POST,
                &format!("{NET}/state"),
                Some(&t.admin),
                Some(state_doc(serial)),
            )
            .await;
        assert!(r.status.is_success(), "{:?}", r.body);
    }
    // Keep 2: versions 1, 3 and 4 go; 5 and the head 6 stay, and 2, the run's input.
    let pruned = || {
        t.server
            .state()
            .retention
            .state_versions_pruned
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    eventually("pruning three versions", || async { pruned() >= 3 }).await;
    assert_eq!(versions(&t).await, [6, 5, 2]);
    let head = t.get(&format!("{NET}/state"), &t.admin).await;
    assert_eq!(head.body["serial"], 6, "{:?}", head.body);
    let r = t.get(&format!("{NET}/state/versions/3"), &t.admin).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);
    let r = t.get(&format!("{NET}/state/versions/2"), &t.admin).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["state"]["serial"], 2);
    // Outputs of version 5 are not compared with version 2: 4 was deleted.
    let r = t.get(&format!("{NET}/outputs?version=5"), &t.admin).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        (
            &r.body["previous_version"],
            &r.body["previous_pruned"],
            &r.body["changed"]
        ),
        (&Value::Null, &json!(true), &json!(false)),
        "{:?}",
        r.body
    );
    assert_eq!(r.body["changes"], json!([]));
    assert_eq!(r.body["outputs"]["n"]["value"], "v5");
    // The head's predecessor is kept: compared as ever, and absent `previous_pruned`.
    let r = t.get(&format!("{NET}/outputs"), &t.admin).await;
    assert_eq!(r.body["previous_version"], 5, "{:?}", r.body);
    assert!(r.body.get("previous_pruned").is_none(), "{:?}", r.body);
    // The console's version page says the predecessor went, and still shows the version.
    let mut b = Browser::login(&t, &t.admin).await;
    let page = b.page("/orgs/default/stacks/net/state/versions/5").await;
    assert!(
        page.contains("Version 4 was deleted by retention"),
        "{page}"
    );
    assert!(!page.contains("The first version"), "{page}");
    let page = b.page("/orgs/default/stacks/net/state/versions/2").await;
    assert!(
        page.contains("Version 1 was deleted by retention"),
        "{page}"
    );
    let page = b.page("/orgs/default/stacks/net/state/versions/6").await;
    assert!(page.contains("From <a"), "{page}");
    // Nothing more goes on later passes; /metrics counts what went.
    let passes = || t.server.state().duties.last_pass("retention");
    let seen = passes();
    eventually("another retention pass", || async { passes() != seen }).await;
    assert_eq!(versions(&t).await, [6, 5, 2]);
    assert_eq!(pruned(), 3);
    let m = t.metrics_text().await;
    assert!(
        m.lines()
            .any(|l| l == "bosun_state_versions_pruned_total 3"),
        "{m}"
    );
}

#[tokio::test]
async fn state_keep_for_zero_keeps_every_version() {
    let t = setup(|c| {
        c.retention.state_keep_versions = 1;
        c.retention.state_keep_for = Duration::ZERO;
    })
    .await;
    for serial in 1..=3 {
        let r = t
            .call(
                Method::POST,
                &format!("{NET}/state"),
                Some(&t.admin),
                Some(state_doc(serial)),
            )
            .await;
        assert!(r.status.is_success(), "{:?}", r.body);
    }
    let passes = || t.server.state().duties.last_pass("retention");
    let seen = passes();
    eventually("a retention pass", || async { passes() != seen }).await;
    let seen = passes();
    eventually("another retention pass", || async { passes() != seen }).await;
    assert_eq!(versions(&t).await, [3, 2, 1]);
}

/// Every chunk of a run's log through the API, a page of `limit` at a time.
async fn api_log(t: &TestServer, run: &str, limit: u32) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    loop {
        let after = out
            .last()
            .map(|c| format!("&after={}", c["seq"]))
            .unwrap_or_default();
        let r = t
            .get(
                &format!("/api/v1/orgs/default/runs/{run}/logs?limit={limit}{after}"),
                &t.admin,
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        let page = r.body.as_array().unwrap().clone();
        let more = page.len() == limit as usize;
        out.extend(page);
        if !more {
            return out;
        }
    }
}

#[tokio::test]
async fn an_ended_runs_log_is_compressed_and_reads_the_same_everywhere() {
    let t = setup(|c| c.retention.compress_logs_after = Duration::from_millis(1)).await;
    let r = t
        .create_stack(json!({"id": "web", "repository": "file:///srv/git/infra"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let r = t
        .post("/api/v1/orgs/default/stacks/web/runs", &t.admin, json!({}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let id = r.body["id"].as_str().unwrap().to_string();
    let runner = crate::runs::Runner::register(&t, "r1").await;
    let lease = runner.lease(5).await.expect("a lease");
    let f = lease["fencing"].clone();
    let next = t
        .get(
            &format!("/api/v1/runner/runs/{id}/logs/next?fencing={f}"),
            &t.server.hosted_runner_token,
        )
        .await;
    let first = next.body["next_seq"].as_i64().unwrap();
    let chunks: Vec<Value> = (0..40)
        .map(|i| {
            json!({"seq": first + i,
                   "text": format!("aws_instance.web[{i}]: Refreshing state... [id=i-{i:08}]\n")})
        })
        .collect();
    let r = runner
        .call(
            &format!("{id}/logs"),
            json!({"fencing": f, "chunks": chunks}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    let before = api_log(&t, &id, 1000).await;
    let mut b = Browser::login(&t, &t.admin).await;
    let text_before = b.page(&format!("/orgs/default/runs/{id}/log.txt")).await;
    // Still running: nothing is compressed.
    let passes = || t.server.state().duties.last_pass("retention");
    let seen = passes();
    eventually("a retention pass", || async { passes() != seen }).await;
    let compressed = || {
        t.server
            .state()
            .retention
            .log_chunks_compressed_stack_runs
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    assert_eq!(compressed(), 0);
    let r = runner
        .call(
            &format!("{id}/report"),
            json!({"fencing": f, "event": "failed", "reason": "boom"}),
        )
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    eventually("compressing the run's log", || async {
        compressed() == before.len() as u64
    })
    .await;
    // The API pages, the console's log and its text read exactly as before.
    assert_eq!(api_log(&t, &id, 1000).await, before);
    assert_eq!(api_log(&t, &id, 7).await, before);
    assert_eq!(
        b.page(&format!("/orgs/default/runs/{id}/log.txt")).await,
        text_before
    );
    let page = b.page(&format!("/orgs/default/runs/{id}")).await;
    assert!(
        page.contains("aws_instance.web[39]: Refreshing state"),
        "{page}"
    );
    let m = t.metrics_text().await;
    let line = format!(
        "bosun_run_log_chunks_compressed_total{{kind=\"stack_run\"}} {}",
        before.len()
    );
    assert!(m.lines().any(|l| l == line), "{line} not in {m}");
}

/// `path` (a summarised run's log) answers `410 gone`, saying retention deleted it.
async fn log_gone(t: &TestServer, path: &str) {
    let logs = t.get(path, &t.admin).await;
    assert_eq!(
        (logs.status, logs.code()),
        (StatusCode::GONE, "gone"),
        "{path}: {:?}",
        logs.body
    );
    assert!(
        logs.message().contains("was deleted by retention"),
        "{path}: {:?}",
        logs.body
    );
}

/// Triggers a run of `web`, leases it, logs two chunks and ends it with `end`; its id.
async fn web_run(t: &TestServer, runner: &crate::runs::Runner<'_>, end: Value) -> String {
    let r = t
        .post(
            "/api/v1/orgs/default/stacks/web/runs",
            &t.admin,
            json!({"kind": "proposed"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let id = r.body["id"].as_str().unwrap().to_string();
    let lease = runner.lease(5).await.expect("a lease");
    assert_eq!(lease["run_id"], json!(id));
    let f = lease["fencing"].clone();
    for body in [
        json!({"fencing": f, "event": "started", "commit": "0123456789abcdef"}),
        end,
    ] {
        let mut body = body;
        body["fencing"] = f.clone();
        if body["event"] != "started" {
            let chunks = json!({"fencing": f, "chunks": [
                {"seq": 100, "text": "Refreshing state...\n"}, {"seq": 101, "text": "Plan: 1 to add\n"}]});
            let r = runner.call(&format!("{id}/logs"), chunks).await;
            assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
        }
        let r = runner.call(&format!("{id}/report"), body).await;
        assert!(r.status.is_success(), "{:?}", r.body);
    }
    id
}

#[tokio::test]
async fn runs_past_the_run_retention_are_summarised_and_their_log_says_so() {
    let t = setup(|c| c.retention.run_retention = Duration::from_millis(50)).await;
    let r = t
        .create_stack(json!({"id": "web", "repository": "file:///srv/git/infra"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let runner = crate::runs::Runner::register(&t, "r1").await;
    let summary = json!({"has_changes": true, "add": 1, "change": 0, "destroy": 0,
        "resource_changes": [{"address": "null_resource.a", "action": "create"}],
        "output_changes": {"url": "create"}});
    let old = web_run(&t, &runner, json!({"event": "planned", "summary": summary})).await;
    let latest = web_run(&t, &runner, json!({"event": "failed", "reason": "boom"})).await;
    let summarised = || {
        t.server
            .state()
            .retention
            .runs_summarised
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    eventually("summarising the old run", || async { summarised() >= 1 }).await;
    // The old run's record stays, with its counts, and says what retention removed.
    let run = t
        .get(&format!("/api/v1/orgs/default/runs/{old}"), &t.admin)
        .await;
    assert_eq!(run.status, StatusCode::OK, "{:?}", run.body);
    assert!(run.body["summarised_at"].is_string(), "{:?}", run.body);
    assert_eq!(
        (&run.body["state"], &run.body["kind"], &run.body["commit"]),
        (
            &json!("finished"),
            &json!("proposed"),
            &json!("0123456789abcdef")
        )
    );
    assert_eq!(
        run.body["plan"],
        json!({"has_changes": true, "add": 1, "change": 0, "destroy": 0,
               "resource_changes": [], "output_changes": {}})
    );
    // Its log answers in words, not with an empty page.
    log_gone(&t, &format!("/api/v1/orgs/default/runs/{old}/logs")).await;
    let stream = t
        .get(
            &format!("/api/v1/orgs/default/runs/{old}/logs/stream"),
            &t.admin,
        )
        .await;
    assert_eq!(stream.status, StatusCode::GONE, "{:?}", stream.body);
    // The stack's latest run is left whole, however old.
    let run = t
        .get(&format!("/api/v1/orgs/default/runs/{latest}"), &t.admin)
        .await;
    assert!(run.body.get("summarised_at").is_none(), "{:?}", run.body);
    let logs = t
        .get(
            &format!("/api/v1/orgs/default/runs/{latest}/logs"),
            &t.admin,
        )
        .await;
    assert_eq!(logs.status, StatusCode::OK, "{:?}", logs.body);
    assert!(!logs.body.as_array().unwrap().is_empty());
    // The console's run page says it too, and the plan's counts stay.
    let mut b = Browser::login(&t, &t.admin).await;
    let page = b.page(&format!("/orgs/default/runs/{old}")).await;
    assert!(page.contains("id=\"log-removed\""), "{page}");
    assert!(page.contains("was deleted by retention"), "{page}");
    let passes = || t.server.state().duties.last_pass("retention");
    let seen = passes();
    eventually("another retention pass", || async { passes() != seen }).await;
    assert_eq!(summarised(), 1);
    let m = t.metrics_text().await;
    assert!(
        m.lines()
            .any(|l| l == r#"bosun_runs_summarised_total{kind="stack_run"} 1"#),
        "{m}"
    );
}

#[tokio::test]
async fn run_retention_zero_keeps_every_run_whole() {
    let t = setup(|_| {}).await;
    let r = t
        .create_stack(json!({"id": "web", "repository": "file:///srv/git/infra"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let runner = crate::runs::Runner::register(&t, "r1").await;
    let old = web_run(&t, &runner, json!({"event": "failed", "reason": "boom"})).await;
    web_run(&t, &runner, json!({"event": "failed", "reason": "boom"})).await;
    let passes = || t.server.state().duties.last_pass("retention");
    let seen = passes();
    eventually("a retention pass", || async { passes() != seen }).await;
    let logs = t
        .get(&format!("/api/v1/orgs/default/runs/{old}/logs"), &t.admin)
        .await;
    assert_eq!(logs.status, StatusCode::OK, "{:?}", logs.body);
}

/// Deliveries older than the delivery retention go with their trigger decisions: the
/// stack's trigger history no longer lists them, `/metrics` counts them as pruned, and the
/// decision counts stay.
#[tokio::test]
async fn vcs_deliveries_past_the_delivery_retention_go_with_their_decisions() {
    let t = setup(|c| c.retention.delivery_retention = Duration::from_millis(50)).await;
    let store = &t.server.state().store;
    let delivery = bosun_store::NewDelivery {
        source: bosun_store::DeliverySource::Github,
        guid: "guid-old".into(),
        event: "push".into(),
        action: None,
        repository: Some("github:acme/infra".into()),
        git_ref: Some("refs/heads/main".into()),
        before: Some("b".repeat(40)),
        after: Some("a".repeat(40)),
        pull_request: None,
        summary: "push to main".into(),
        decisions: vec![bosun_store::TriggerDecision {
            org: "default".into(),
            stack: "net".into(),
            run_id: None,
            reason: "no watched path changed".into(),
        }],
        runs: vec![],
        cancel: None,
        evaluations: Vec::new(),
    };
    store.record_delivery(&delivery).await.unwrap();
    let triggers = format!("{NET}/triggers");
    let listed = t.get(&triggers, &t.admin).await;
    assert_eq!(listed.status, StatusCode::OK, "{:?}", listed.body);
    assert_eq!(listed.body["items"].as_array().unwrap().len(), 1);
    eventually("the delivery's pruning", || async {
        t.metrics_text()
            .await
            .contains("bosun_vcs_deliveries_pruned_total 1\n")
    })
    .await;
    let listed = t.get(&triggers, &t.admin).await;
    assert_eq!(listed.body["items"], json!([]), "{:?}", listed.body);
    assert!(
        t.metrics_text()
            .await
            .contains("bosun_trigger_decisions_total{decision=\"ignored\"} 1\n"),
        "decisions made stay counted"
    );
}

/// Creates a run of the plan `app-config` on `web-1`, leases it as the runner `runner`, and
/// reports it through: started, a result with output and a diff, two log chunks, finished
/// with a report; its id.
async fn plan_run(t: &TestServer, runner_id: &str) -> String {
    let runner = |path: String, body: Value| async move { runner_post(t, &path, body).await };
    let r = t
        .post(
            "/api/v1/orgs/default/plans/app-config/runs",
            &t.admin,
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let id = r.body["id"].as_str().unwrap().to_string();
    let lease = runner(
        "lease".into(),
        json!({"runner_id": runner_id, "wait_seconds": 5, "plan_runs": true}),
    )
    .await;
    assert_eq!(lease["plan_run"]["run_id"], json!(id), "{lease}");
    let f = lease["plan_run"]["fencing"].clone();
    for (path, body) in [
        ("report", json!({"event": "started"})),
        (
            "results",
            json!({"results": [{"step": 1, "step_name": "say", "module": "file.copy",
                "host": "web-1", "status": "changed", "changed": true, "exit_code": 0,
                "stdout": "wrote /etc/app.conf", "stderr": "mode widened",
                "duration_ms": 2, "message": "content changed",
                "diff": "-port=80\n+port=8080\n"}]}),
        ),
        (
            "logs",
            json!({"chunks": [{"seq": 0, "text": "[web-1] say\n"}, {"seq": 1, "text": "done\n"}]}),
        ),
        (
            "report",
            json!({"event": "finished", "ok": true,
                   "report": {"unresolved": [], "summary": [{"host": "web-1", "changed": 1}]}}),
        ),
    ] {
        let mut body = body;
        body["fencing"] = f.clone();
        runner(format!("plan-runs/{id}/{path}"), body).await;
    }
    id
}

#[tokio::test]
async fn plan_runs_past_the_run_retention_are_summarised_and_their_log_says_so() {
    let t = setup(|c| c.retention.run_retention = Duration::from_millis(50)).await;
    t.seed_host("web-1", "web", None).await;
    t.seed_plan(
        "app-config",
        "name: app-config\ntargets:\n  labels: [web]\nsteps:\n  - name: say\n    command: [\"echo\", \"hi\"]\n",
    )
    .await;
    let runner = t.hosted_runner("r1").await;
    let old = plan_run(&t, &runner).await;
    let latest = plan_run(&t, &runner).await;
    let summarised = || {
        t.server
            .state()
            .retention
            .plan_runs_summarised
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    eventually("summarising the old plan run", || async {
        summarised() >= 1
    })
    .await;
    // The old run's record stays, with each host's status and its report, without what
    // the step printed.
    let run = t
        .get(&format!("/api/v1/orgs/default/plan-runs/{old}"), &t.admin)
        .await;
    assert_eq!(run.status, StatusCode::OK, "{:?}", run.body);
    assert!(run.body["summarised_at"].is_string(), "{:?}", run.body);
    assert_eq!(run.body["state"], "succeeded");
    let result = &run.body["results"][0];
    assert_eq!(
        (
            &result["status"],
            &result["message"],
            &result["stdout"],
            &result["stderr"],
            &result["diff"]
        ),
        (
            &json!("changed"),
            &json!("content changed"),
            &json!(""),
            &json!(""),
            &Value::Null
        ),
        "{result}"
    );
    assert_eq!(run.body["report"]["summary"][0]["changed"], 1);
    // Its log answers in words, the page and the stream alike.
    for path in ["logs", "logs/stream"] {
        log_gone(&t, &format!("/api/v1/orgs/default/plan-runs/{old}/{path}")).await;
    }
    // The plan's latest run is left whole, however old.
    let run = t
        .get(
            &format!("/api/v1/orgs/default/plan-runs/{latest}"),
            &t.admin,
        )
        .await;
    assert!(run.body.get("summarised_at").is_none(), "{:?}", run.body);
    assert_eq!(run.body["results"][0]["stdout"], "wrote /etc/app.conf");
    let logs = t
        .get(
            &format!("/api/v1/orgs/default/plan-runs/{latest}/logs"),
            &t.admin,
        )
        .await;
    assert_eq!(logs.status, StatusCode::OK, "{:?}", logs.body);
    assert_eq!(logs.body.as_array().unwrap().len(), 2);
    // The console's run page says it too.
    let mut b = Browser::login(&t, &t.admin).await;
    let page = b.page(&format!("/orgs/default/plan-runs/{old}")).await;
    assert!(page.contains("id=\"log-removed\""), "{page}");
    assert!(page.contains("was deleted by retention"), "{page}");
    let passes = || t.server.state().duties.last_pass("retention");
    let seen = passes();
    eventually("another retention pass", || async { passes() != seen }).await;
    assert_eq!(summarised(), 1);
    let m = t.metrics_text().await;
    assert!(
        m.lines()
            .any(|l| l == r#"bosun_runs_summarised_total{kind="plan_run"} 1"#),
        "{m}"
    );
}

#[tokio::test]
async fn ended_console_sessions_past_their_keep_are_deleted_open_ones_stay() {
    let t = setup(|c| c.sign_in.keep_ended_sessions = Duration::from_millis(50)).await;
    let store = &t.server.state().store;
    let alice = t.user_token("alice", Some(bosun_core::Role::Viewer)).await;
    let login = || async {
        let r = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
            .post(format!("{}/login", t.url))
            .form(&[("token", alice.as_str()), ("next", "/")])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
    };
    login().await;
    login().await;
    let sessions = store.list_sessions("alice", 10).await.unwrap();
    let (ended, open) = (sessions[1].id.clone(), sessions[0].id.clone());
    let r = t
        .call(
            Method::DELETE,
            &format!("/api/v1/sessions/{ended}"),
            Some(&alice),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    eventually("the ended session's deletion", || async {
        t.metrics_text()
            .await
            .contains("bosun_sessions_pruned_total 1\n")
    })
    .await;
    let left: Vec<String> = store
        .list_sessions("alice", 10)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(left, [open]);
}
