//! The approvals inbox, plan schedules and secrets in plan leases over the API, with the
//! test acting as the runner: who may approve (each role, protected environments with
//! and without a grant, self-approval off and on), decisions recorded and audited; a
//! gated stack's run waiting in the inbox and applying after approval; a scheduled gated
//! plan creating a paused run at its time on a hand-set clock; a lease's secrets (real
//! runs only) and a foreign reference failing the run.

use std::time::Duration;

use bosun_core::Role;
use bosun_server::schedules::clock::Clock;
use chrono::{DateTime, Utc};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::harness::{Reply, TestServer};
use crate::runs::Runner;

const PLAN: &str = r#"name: app-config
targets:
  labels: [web]
inputs:
  release: { default: "1.0" }
steps:
  - name: say
    command: ["echo", "{{ inputs.release }}"]
"#;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

/// Environment `prod` (requires approval; `protected` as asked), host `web-1` in it and
/// the plan `app-config` targeting it.
async fn seed(t: &TestServer, protected: bool, plan: &str) {
    t.seed_environment("prod", true, protected).await;
    t.seed_host("web-1", "web", Some("prod")).await;
    t.seed_plan("app-config", plan).await;
}

async fn start_run(t: &TestServer, token: &str, body: Value) -> Reply {
    t.post("/api/v1/orgs/default/plans/app-config/runs", token, body)
        .await
}

async fn decide(t: &TestServer, token: &str, subject: &str, verb: &str, body: Value) -> Reply {
    t.post(
        &format!("/api/v1/orgs/default/approvals/{subject}/{verb}"),
        token,
        body,
    )
    .await
}

async fn inbox(t: &TestServer, token: &str) -> Vec<Value> {
    let r = t.get("/api/v1/orgs/default/approvals", token).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    r.body["items"].as_array().unwrap().clone()
}

async fn audit_actions(t: &TestServer) -> Vec<(String, String, String)> {
    t.server
        .state()
        .store
        .list_audit(Some("default"), None, 10_000)
        .await
        .unwrap()
        .into_iter()
        .map(|a| (a.entry.action, a.entry.actor, a.entry.target))
        .collect()
}

#[tokio::test]
async fn approvals_follow_roles_grants_and_the_self_approval_rule() {
    let t = TestServer::start().await;
    seed(&t, true, PLAN).await;
    let alice = t.user_token("alice", Some(Role::Operator)).await;
    let bob = t.user_token("bob", Some(Role::Operator)).await;
    let carol = t.user_token("carol", Some(Role::Admin)).await;
    let vic = t.user_token("vic", Some(Role::Viewer)).await;

    let r = start_run(&t, &alice, json!({})).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(r.body["state"], "paused");
    let run = r.body["id"].as_str().unwrap().to_string();

    // Everyone in the org sees the inbox.
    let items = inbox(&t, &vic).await;
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0]["kind"], "plan_run");
    assert_eq!(items[0]["subject"], run.as_str());
    assert_eq!(items[0]["plan"], "app-config");
    assert_eq!(items[0]["environments"], json!(["prod"]));
    assert_eq!(items[0]["requested_by"], "user:alice");

    // Restarting the paused run does not make a second waiting run: the guard says so.
    let again = start_run(&t, &alice, json!({})).await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{:?}", again.body);
    assert_eq!(again.code(), "run_in_progress");
    assert!(
        again
            .message()
            .contains("Already has a run in progress on the same targets: web-1"),
        "{}",
        again.message()
    );
    assert_eq!(inbox(&t, &vic).await.len(), 1);

    // A viewer is refused by role.
    let r = decide(&t, &vic, &run, "approve", json!({})).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    assert!(r.message().contains("operator"), "{}", r.message());
    // Operators and admins without a grant are refused by the protected environment.
    for token in [&bob, &carol] {
        let r = decide(&t, token, &run, "approve", json!({})).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
        assert!(
            r.message().contains("\"prod\" is protected"),
            "{}",
            r.message()
        );
    }
    // The requester may not approve their own run (the server does not allow it).
    let r = decide(&t, &alice, &run, "approve", json!({})).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    assert!(
        r.message()
            .contains("approving your own run is not allowed"),
        "{}",
        r.message()
    );
    // Nothing moved.
    let shown = t
        .get(&format!("/api/v1/orgs/default/plan-runs/{run}"), &vic)
        .await;
    assert_eq!(shown.body["state"], "paused");

    // With a grant, the operator approves; the run is queued for a runner.
    for user in ["bob", "carol"] {
        let r = t
            .call(
                Method::PUT,
                &format!("/api/v1/orgs/default/environments/prod/grants/{user}"),
                Some(&t.admin),
                None,
            )
            .await;
        assert!(r.status.is_success(), "{:?}", r.body);
    }
    let r = decide(&t, &bob, &run, "approve", json!({"comment": "go"})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["decision"], "approved");
    assert_eq!(r.body["decided_by"], "user:bob");
    assert_eq!(r.body["comment"], "go");
    assert_eq!(r.body["run_state"], "queued");
    let shown = t
        .get(&format!("/api/v1/orgs/default/plan-runs/{run}"), &vic)
        .await;
    assert_eq!(shown.body["state"], "queued");
    assert!(inbox(&t, &vic).await.is_empty());
    // Decided once.
    let r = decide(&t, &carol, &run, "approve", json!({})).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    assert_eq!(r.code(), "not_awaiting_approval");
    assert!(r.message().contains("queued"), "{}", r.message());

    // A rejection ends the run with the approver and the comment as its reason.
    let r = t
        .post(
            &format!("/api/v1/orgs/default/plan-runs/{run}/abort"),
            &alice,
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let second = start_run(&t, &alice, json!({})).await.body["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = decide(
        &t,
        &carol,
        &second,
        "reject",
        json!({"comment": "not today"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["run_state"], "rejected");
    let shown = t
        .get(&format!("/api/v1/orgs/default/plan-runs/{second}"), &vic)
        .await;
    assert_eq!(shown.body["state"], "rejected");
    assert_eq!(shown.body["reason"], "rejected by user:carol: not today");

    // Both decisions are recorded and audited.
    let r = t
        .get("/api/v1/orgs/default/approvals/decisions", &vic)
        .await;
    let decided: Vec<(String, String)> = r.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["subject"].as_str().unwrap().to_string(),
                d["decision"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        decided,
        [
            (second.clone(), "rejected".to_string()),
            (run.clone(), "approved".to_string())
        ]
    );
    let actions = audit_actions(&t).await;
    assert!(actions.contains(&(
        "approval.approve".into(),
        "user:bob".into(),
        format!("plan_run:{run}")
    )));
    assert!(actions.contains(&(
        "approval.reject".into(),
        "user:carol".into(),
        format!("plan_run:{second}")
    )));
    // Refusals changed nothing and wrote no approval record.
    assert_eq!(
        actions
            .iter()
            .filter(|a| a.0.starts_with("approval."))
            .count(),
        2
    );
}

/// The inbox pages like any list: oldest first, a full page names the next, every waiting
/// run listed once; a cursor that is not one is refused, naming the field.
#[tokio::test]
async fn the_inbox_pages_oldest_first_through_every_waiting_run() {
    let t = TestServer::start().await;
    t.seed_environment("prod", true, false).await;
    let alice = t.user_token("alice", Some(Role::Operator)).await;
    let mut started = Vec::new();
    for i in 0..5 {
        t.seed_host(&format!("web-{i}"), &format!("web{i}"), Some("prod"))
            .await;
        let plan = PLAN
            .replace("app-config", &format!("app-{i}"))
            .replace("[web]", &format!("[web{i}]"));
        t.seed_plan(&format!("app-{i}"), &plan).await;
        let r = t
            .post(
                &format!("/api/v1/orgs/default/plans/app-{i}/runs"),
                &alice,
                json!({}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        assert_eq!(r.body["state"], "paused");
        started.push(r.body["id"].as_str().unwrap().to_string());
    }
    let mut listed = Vec::new();
    let mut path = "/api/v1/orgs/default/approvals?limit=2".to_string();
    let mut pages = 0;
    loop {
        let r = t.get(&path, &alice).await;
        assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.body);
        pages += 1;
        let items = r.body["items"].as_array().unwrap();
        listed.extend(
            items
                .iter()
                .map(|i| i["subject"].as_str().unwrap().to_string()),
        );
        match r.body["next_cursor"].as_str() {
            Some(c) => {
                assert_eq!(items.len(), 2, "only a full page names the next");
                path = format!("/api/v1/orgs/default/approvals?limit=2&cursor={c}");
            }
            None => break,
        }
    }
    assert_eq!(listed, started, "oldest first, each once");
    assert_eq!(pages, 3);
    let r = t
        .get("/api/v1/orgs/default/approvals?cursor=prun-x", &alice)
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert_eq!(r.body["error"]["field"], "cursor");
    assert!(r.message().contains("next_cursor"), "{}", r.body);
}

#[tokio::test]
async fn self_approval_when_the_server_allows_it() {
    let t = TestServer::start_with(|c| c.allow_self_approval = true).await;
    seed(&t, false, PLAN).await;
    let alice = t.user_token("alice", Some(Role::Operator)).await;
    let run = start_run(&t, &alice, json!({})).await.body["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = decide(&t, &alice, &run, "approve", json!({})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["run_state"], "queued");
}

async fn stack_run(t: &TestServer, id: &str) -> Value {
    t.get(&format!("/api/v1/orgs/default/runs/{id}"), &t.admin)
        .await
        .body
}

/// Leases the next phase and reports it: a plan with changes, or an apply.
async fn runner_phase(runner: &Runner<'_>, phase: &str) -> String {
    let lease = runner.lease(5).await.expect("a lease");
    assert_eq!(lease["phase"], phase, "{lease}");
    let id = lease["run_id"].as_str().unwrap().to_string();
    let f = lease["fencing"].clone();
    let r = runner
        .call(
            &format!("{id}/report"),
            json!({"fencing": f, "event": "started", "commit": "abcdef0"}),
        )
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    let end = if phase == "plan" {
        json!({"fencing": f, "event": "planned", "summary": {"has_changes": true, "add": 1,
            "change": 0, "destroy": 0, "resource_changes": [], "output_changes": {}}})
    } else {
        json!({"fencing": f, "event": "applied"})
    };
    let r = runner.call(&format!("{id}/report"), end).await;
    assert!(r.status.is_success(), "{:?}", r.body);
    id
}

#[tokio::test]
async fn a_gated_stacks_run_waits_in_the_inbox_and_applies_after_approval() {
    let t = TestServer::start().await;
    seed(&t, false, PLAN).await;
    let bob = t.user_token("bob", Some(Role::Operator)).await;
    let r = t
        .create_stack(json!({"id": "net", "repository": "file:///srv/git/infra",
            "autodeploy": true, "environment": "prod"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let runner = Runner::register(&t, "r1").await;

    let trigger = || async {
        let r = t
            .post("/api/v1/orgs/default/stacks/net/runs", &t.admin, json!({}))
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    };
    trigger().await;
    let id = runner_phase(&runner, "plan").await;
    // Autodeploy does not apply it: it waits for an approval.
    assert_eq!(stack_run(&t, &id).await["state"], "unconfirmed");
    let items = inbox(&t, &bob).await;
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0]["kind"], "stack_run");
    assert_eq!(items[0]["subject"], id.as_str());
    assert_eq!(items[0]["stack"], "net");
    assert_eq!(items[0]["environments"], json!(["prod"]));
    // With what approving it would apply: the plan the runner reported.
    assert_eq!(items[0]["plan_summary"]["add"], 1, "{items:?}");
    assert_eq!(items[0]["plan_summary"]["has_changes"], true);

    // The plain confirm is refused, pointing to the inbox.
    let r = t
        .post(
            &format!("/api/v1/orgs/default/runs/{id}/confirm"),
            &bob,
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    assert_eq!(r.code(), "approval_required");
    assert!(r.message().contains("approvals inbox"), "{}", r.message());
    // The admin triggered it: approving their own run is refused.
    let r = decide(&t, &t.admin, &id, "approve", json!({})).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);

    let r = decide(&t, &bob, &id, "approve", json!({})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["kind"], "stack_run");
    assert_eq!(runner_phase(&runner, "apply").await, id);
    assert_eq!(stack_run(&t, &id).await["state"], "finished");
    assert!(audit_actions(&t).await.contains(&(
        "approval.approve".into(),
        "user:bob".into(),
        format!("run:{id}")
    )));

    // A rejection discards the next one with the reason.
    trigger().await;
    let next = runner_phase(&runner, "plan").await;
    let r = decide(&t, &bob, &next, "reject", json!({"comment": "freeze"})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let shown = stack_run(&t, &next).await;
    assert_eq!(shown["state"], "discarded");
    assert!(
        shown["reason"]
            .as_str()
            .unwrap_or("")
            .contains("rejected by user:bob: freeze"),
        "{shown}"
    );
    assert!(inbox(&t, &bob).await.is_empty());
}

async fn schedule(t: &TestServer) -> Value {
    let r = t
        .get("/api/v1/orgs/default/plans/app-config/schedule", &t.admin)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    r.body
}

/// Polls the plan's schedule until `pred` holds (deadline 20 s).
async fn wait_schedule(t: &TestServer, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let s = schedule(t).await;
        if pred(&s) {
            return s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the schedule never showed {what}: {s}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every run of the plan, newest first, previews included.
async fn all_plan_runs(t: &TestServer) -> Vec<Value> {
    t.get("/api/v1/orgs/default/plans/app-config/runs", &t.admin)
        .await
        .body["items"]
        .as_array()
        .unwrap()
        .clone()
}

/// The plan's runs the schedule created, newest first: previews (the dry run each paused
/// run gets) left out.
async fn plan_runs(t: &TestServer) -> Vec<Value> {
    let mut runs = all_plan_runs(t).await;
    runs.retain(|r| r["preview_of"].is_null());
    runs
}

/// The preview of the paused run `run`: a dry run of it, queued at once.
async fn preview_of(t: &TestServer, run: &Value) -> Value {
    let id = run["preview"]
        .as_str()
        .unwrap_or_else(|| panic!("no preview: {run}"));
    let preview = all_plan_runs(t)
        .await
        .into_iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("preview {id} not listed"));
    assert_eq!(preview["preview_of"], run["id"], "{preview}");
    assert_eq!(preview["dry_run"], true, "{preview}");
    assert_eq!(preview["state"], "queued", "{preview}");
    assert_eq!(preview["gated_environments"], json!([]), "{preview}");
    for same in ["trigger", "requested_by", "inputs", "hosts", "plan_version"] {
        assert_eq!(preview[same], run[same], "{same}: {preview}");
    }
    preview
}

#[tokio::test]
async fn a_scheduled_gated_plan_creates_a_paused_run_at_its_time() {
    let clock = Clock::manual(utc("2024-06-01T20:00:00Z"));
    let c = clock.clone();
    let t = TestServer::start_with(move |config| {
        config.schedules.interval = Duration::from_millis(50);
        config.schedules.clock = c;
    })
    .await;
    seed(&t, false, PLAN).await;
    let bob = t.user_token("bob", Some(Role::Operator)).await;
    let put = |body: Value| {
        let t = &t;
        let bob = bob.clone();
        async move {
            t.call(
                Method::PUT,
                "/api/v1/orgs/default/plans/app-config/schedule",
                Some(&bob),
                Some(body),
            )
            .await
        }
    };
    // Refusals name the field.
    let r = put(json!({"cron": "0 2 * * *", "timezone": "Mars/Olympus"})).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert_eq!(r.body["error"]["field"], "timezone");
    let r = put(json!({"cron": "0 25 * * *"})).await;
    assert_eq!(r.body["error"]["field"], "cron", "{:?}", r.body);
    let r = put(json!({"cron": "0 2 * * *", "inputs": {"nope": "1"}})).await;
    assert_eq!(r.body["error"]["field"], "inputs.nope", "{:?}", r.body);

    let r = put(json!({"cron": "0 2 * * *", "timezone": "Europe/Berlin",
        "inputs": {"release": "2.0"}}))
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    // Armed: 02:00 in Berlin is 00:00 UTC in June.
    let s = wait_schedule(&t, "its next run", |s| !s["next_run_at"].is_null()).await;
    assert_eq!(
        utc(s["next_run_at"].as_str().unwrap()),
        utc("2024-06-02T00:00:00Z")
    );
    clock.set(utc("2024-06-01T23:59:00Z"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(plan_runs(&t).await.is_empty());

    clock.set(utc("2024-06-02T00:00:10Z"));
    let s = wait_schedule(&t, "a run", |s| !s["last_run"].is_null()).await;
    assert_eq!(
        utc(s["last_fire_at"].as_str().unwrap()),
        utc("2024-06-02T00:00:10Z")
    );
    assert_eq!(
        utc(s["next_run_at"].as_str().unwrap()),
        utc("2024-06-03T00:00:00Z")
    );
    let run = s["last_run"].as_str().unwrap().to_string();
    let runs = plan_runs(&t).await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["id"], run.as_str());
    assert_eq!(runs[0]["state"], "paused");
    assert_eq!(runs[0]["trigger"], "schedule");
    assert_eq!(runs[0]["requested_by"], "schedule");
    assert_eq!(runs[0]["inputs"], json!({"release": "2.0"}));
    // A scheduled run that waits for an approval gets its preview too.
    let preview = preview_of(&t, &runs[0]).await;
    assert_eq!(inbox(&t, &bob).await[0]["subject"], run.as_str());
    assert_eq!(inbox(&t, &bob).await[0]["preview"], preview["id"]);
    let r = decide(&t, &bob, &run, "approve", json!({})).await;
    assert_eq!(r.body["run_state"], "queued", "{:?}", r.body);
    // Approved before any runner took the preview: the preview is aborted, saying why.
    let preview = t
        .get(
            &format!(
                "/api/v1/orgs/default/plan-runs/{}",
                preview["id"].as_str().unwrap()
            ),
            &bob,
        )
        .await
        .body;
    assert_eq!(preview["state"], "aborted", "{preview}");
    assert_eq!(
        preview["reason"],
        format!("its run {run} was approved before this preview ended")
    );
    // Approved, it goes to a runner with the schedule's inputs.
    let runner = t
        .post(
            "/api/v1/runner/register",
            &t.server.hosted_runner_token,
            json!({"name": "r1"}),
        )
        .await
        .body["runner_id"]
        .as_str()
        .unwrap()
        .to_string();
    let lease = lease_plan_run(&t, &runner).await;
    assert_eq!(lease["run_id"], run.as_str());
    assert_eq!(lease["inputs"], json!({"release": "2.0"}));

    // The next fire while that run is still running: the guard's refusal is the note.
    clock.set(utc("2024-06-03T00:00:05Z"));
    let s = wait_schedule(&t, "a skip", |s| {
        s["last_fire_at"].as_str().map(utc) == Some(utc("2024-06-03T00:00:05Z"))
    })
    .await;
    assert!(s["last_run"].is_null(), "{s}");
    assert!(
        s["last_note"]
            .as_str()
            .unwrap_or("")
            .contains("Already has a run in progress on the same targets: web-1"),
        "{s}"
    );
    assert_eq!(plan_runs(&t).await.len(), 1);

    // Down over three fire times: one catch-up run, the missed ones recorded.
    let r = t
        .post(
            &format!("/api/v1/orgs/default/plan-runs/{run}/abort"),
            &bob,
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    clock.set(utc("2024-06-06T12:00:00Z"));
    let s = wait_schedule(&t, "a catch-up run", |s| {
        !s["last_run"].is_null() && s["last_run"] != run.as_str()
    })
    .await;
    assert!(
        s["last_note"]
            .as_str()
            .unwrap_or("")
            .starts_with("2 scheduled run(s) passed"),
        "{s}"
    );
    assert_eq!(plan_runs(&t).await.len(), 2);

    // Cleared: no more runs, and the schedule is gone.
    let r = t
        .call(
            Method::DELETE,
            "/api/v1/orgs/default/plans/app-config/schedule",
            Some(&bob),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    let r = t
        .get("/api/v1/orgs/default/plans/app-config/schedule", &bob)
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_plan_files_schedule_is_the_plans_schedule_until_the_file_drops_it() {
    let clock = Clock::manual(utc("2024-06-01T20:00:00Z"));
    let c = clock.clone();
    let t = TestServer::start_with(move |config| {
        config.schedules.interval = Duration::from_millis(50);
        config.schedules.clock = c;
    })
    .await;
    seed(&t, false, PLAN).await;
    let bob = t.user_token("bob", Some(Role::Operator)).await;
    let upload = |schedule: &str| {
        let t = &t;
        let source = PLAN.replace("steps:", &format!("{schedule}steps:"));
        async move {
            t.post(
                "/api/v1/orgs/default/plans",
                &t.admin,
                json!({"source": source, "file": "app-config.yaml"}),
            )
            .await
        }
    };
    let no_schedule = || async {
        t.get("/api/v1/orgs/default/plans/app-config/schedule", &t.admin)
            .await
            .status
            == StatusCode::NOT_FOUND
    };

    // A cron or zone the scheduler cannot read is refused at upload, naming the place
    // in the file; nothing is stored.
    let r = upload("schedule: \"0 25 * * *\"\n").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    let msg = r.body["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("app-config.yaml:6:11: schedule: invalid cron \"0 25 * * *\""),
        "{msg}"
    );
    let r = upload("schedule: { cron: \"@daily\", timezone: Mars/Olympus }\n").await;
    let msg = r.body["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("app-config.yaml:6:39: schedule.timezone: unknown time zone"),
        "{msg}"
    );
    // Lint says the same before anything is saved.
    let r = t
        .post(
            "/api/v1/orgs/default/plans/lint",
            &t.admin,
            json!({"source": PLAN.replace("steps:", "schedule: \"0 25 * * *\"\nsteps:")}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert_eq!(
        t.get("/api/v1/orgs/default/plans/app-config", &t.admin)
            .await
            .body["version"],
        1
    );
    assert!(no_schedule().await);

    // Uploaded with a schedule: the plan's schedule, fired at its time with its inputs.
    let r = upload(
        "schedule:\n  cron: \"0 2 * * *\"\n  timezone: Europe/Berlin\n  inputs: { release: \"2.0\" }\n",
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        r.body["summary"]["schedule"],
        json!({"cron": "0 2 * * *", "timezone": "Europe/Berlin", "inputs": {"release": "2.0"}})
    );
    let s = wait_schedule(&t, "its next run", |s| !s["next_run_at"].is_null()).await;
    assert_eq!(s["from_file"], true);
    assert_eq!(s["updated_by"], "user:admin");
    assert_eq!(
        utc(s["next_run_at"].as_str().unwrap()),
        utc("2024-06-02T00:00:00Z")
    );
    clock.set(utc("2024-06-02T00:00:10Z"));
    let s = wait_schedule(&t, "a run", |s| !s["last_run"].is_null()).await;
    let runs = plan_runs(&t).await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["id"], s["last_run"]);
    assert_eq!(runs[0]["state"], "paused");
    assert_eq!(runs[0]["trigger"], "schedule");
    assert_eq!(runs[0]["inputs"], json!({"release": "2.0"}));
    preview_of(&t, &runs[0]).await;

    // The API refuses to change or clear it, saying where it is changed.
    for method in [Method::PUT, Method::DELETE] {
        let r = t
            .call(
                method.clone(),
                "/api/v1/orgs/default/plans/app-config/schedule",
                Some(&bob),
                (method == Method::PUT).then(|| json!({"cron": "0 3 * * *"})),
            )
            .await;
        assert_eq!(r.status, StatusCode::CONFLICT, "{method}: {:?}", r.body);
        assert_eq!(r.body["error"]["code"], "schedule_from_file");
        assert_eq!(
            r.body["error"]["message"],
            "the schedule of plan \"app-config\" is set by its plan file (`schedule:`): change the file and upload it again"
        );
    }
    assert_eq!(schedule(&t).await["cron"], "0 2 * * *");

    // A version without a schedule removes it: no more runs.
    let r = upload("").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert!(r.body["summary"].get("schedule").is_none(), "{:?}", r.body);
    assert!(no_schedule().await);
    let saved = t
        .server
        .state()
        .store
        .list_audit(Some("default"), None, 1)
        .await
        .unwrap();
    assert_eq!(saved[0].entry.action, "plan.save");
    assert_eq!(saved[0].entry.detail["schedule"], "removed");

    // One set through the API stays across uploads of a file without one.
    let r = t
        .call(
            Method::PUT,
            "/api/v1/orgs/default/plans/app-config/schedule",
            Some(&bob),
            Some(json!({"cron": "0 3 * * *"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["from_file"], false);
    assert_eq!(upload("").await.status, StatusCode::OK);
    assert_eq!(schedule(&t).await["cron"], "0 3 * * *");
}

/// Leases the next plan run as a runner that executes plan runs.
async fn lease_plan_run(t: &TestServer, runner: &str) -> Value {
    let r = t
        .post(
            "/api/v1/runner/lease",
            &t.server.hosted_runner_token,
            json!({"runner_id": runner, "wait_seconds": 5, "plan_runs": true}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    r.body["plan_run"].clone()
}

#[tokio::test]
async fn secrets_reach_the_lease_of_real_runs_only_and_foreign_ones_fail_the_run() {
    let t = TestServer::start().await;
    let plan = PLAN.replace("steps:", "vars:\n  token: secret://app/token\nsteps:");
    t.seed_host("web-1", "web", None).await;
    let save = |source: String| {
        let t = &t;
        async move { t.seed_plan("app-config", &source).await }
    };
    save(plan.clone()).await;
    let put_secret = |org: &'static str, ns: &'static str, value: &'static str| {
        let t = &t;
        async move {
            let r = t
                .call(
                    Method::PUT,
                    &format!("/api/v1/orgs/{org}/secrets/{ns}/key"),
                    Some(&t.admin),
                    Some(json!({"value": value})),
                )
                .await;
            assert!(r.status.is_success(), "{:?}", r.body);
        }
    };
    let r = t
        .call(
            Method::PUT,
            "/api/v1/orgs/default/secrets/app/token",
            Some(&t.admin),
            Some(json!({"value": "tok-123"})),
        )
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    let runner = t
        .post(
            "/api/v1/runner/register",
            &t.server.hosted_runner_token,
            json!({"name": "r1"}),
        )
        .await
        .body["runner_id"]
        .as_str()
        .unwrap()
        .to_string();
    let settle = |lease: Value| {
        let t = &t;
        async move {
            let id = lease["run_id"].as_str().unwrap().to_string();
            let r = t
                .post(
                    &format!("/api/v1/orgs/default/plan-runs/{id}/abort"),
                    &t.admin,
                    json!({}),
                )
                .await;
            assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
            let r = t
                .post(
                    &format!("/api/v1/runner/plan-runs/{id}/report"),
                    &t.server.hosted_runner_token,
                    json!({"fencing": lease["fencing"], "event": "aborted"}),
                )
                .await;
            assert!(r.status.is_success(), "{:?}", r.body);
        }
    };

    // A dry run: references checked, values only for masking, none to substitute.
    let r = start_run(&t, &t.admin, json!({"dry_run": true})).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let lease = lease_plan_run(&t, &runner).await;
    assert!(lease.get("secrets").is_none(), "{lease}");
    assert_eq!(lease["mask"], json!(["tok-123"]));
    settle(lease).await;

    // A real run: the values to substitute, keyed by the reference.
    let r = start_run(&t, &t.admin, json!({})).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let lease = lease_plan_run(&t, &runner).await;
    assert_eq!(lease["secrets"], json!({"secret://app/token": "tok-123"}));
    assert_eq!(lease["mask"], json!(["tok-123"]));
    let id = lease["run_id"].as_str().unwrap().to_string();
    // Never in an API answer.
    let shown = t
        .get(&format!("/api/v1/orgs/default/plan-runs/{id}"), &t.admin)
        .await;
    assert!(
        !shown.body.to_string().contains("tok-123"),
        "{}",
        shown.body
    );
    settle(lease).await;

    // Only another org has `shared/key`: an upload referring to it is answered as for any
    // reference (namespaces are per org, so nothing tells that another org has one) …
    let r = t
        .post("/api/v1/orgs", &t.admin, json!({"id": "other"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    put_secret("other", "shared", "theirs").await;
    let foreign = plan.replace("vars:\n", "vars:\n  other: secret://shared/key\n");
    let r = t
        .post(
            "/api/v1/orgs/default/plans",
            &t.admin,
            json!({"source": foreign}),
        )
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    // … and its run fails before any step, naming the reference as missing from the
    // org; nothing is leased.
    save(foreign).await;
    let r = start_run(&t, &t.admin, json!({})).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let failed = r.body["id"].as_str().unwrap().to_string();
    let r = t
        .post(
            "/api/v1/runner/lease",
            &t.server.hosted_runner_token,
            json!({"runner_id": runner, "wait_seconds": 1, "plan_runs": true}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    let shown = t
        .get(
            &format!("/api/v1/orgs/default/plan-runs/{failed}"),
            &t.admin,
        )
        .await;
    assert_eq!(shown.body["state"], "failed", "{}", shown.body);
    let reason = shown.body["reason"].as_str().unwrap();
    assert!(
        reason.contains("secret://shared/key does not exist"),
        "{reason}"
    );
    let logs = t
        .get(
            &format!("/api/v1/orgs/default/plan-runs/{failed}/logs"),
            &t.admin,
        )
        .await;
    let text = logs.body.to_string();
    assert!(text.contains("does not exist"), "{text}");
    assert!(
        !text.contains("theirs") && !text.contains("tok-123"),
        "{text}"
    );
}
