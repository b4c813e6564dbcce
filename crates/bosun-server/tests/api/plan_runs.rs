//! Plan runs over the API with no runner attached: targets resolved from the org's
//! hosts, refusals naming the field, the approval gate, the concurrency guard (also
//! under racing requests) and abort.

use bosun_core::Role;
use reqwest::StatusCode;
use serde_json::json;

use crate::harness::TestServer;

const PLAN: &str = r#"name: app-config
targets:
  labels: [web]
inputs:
  release: { default: "1.0" }
steps:
  - name: say
    command: ["echo", "{{ inputs.release }}"]
"#;

async fn seed(t: &TestServer) {
    t.seed_environment("prod", true, false).await;
    for (name, env) in [("web-1", None), ("web-2", None), ("db-1", Some("prod"))] {
        let label = if name.starts_with("web") { "web" } else { "db" };
        t.seed_host(name, label, env).await;
    }
    t.seed_plan("app-config", PLAN).await;
    let db = PLAN
        .replace("labels: [web]", "labels: [db]")
        .replace("app-config", "db");
    t.seed_plan("db", &db).await;
    let nowhere = PLAN
        .replace("labels: [web]", "labels: [none]")
        .replace("app-config", "nowhere");
    t.seed_plan("nowhere", &nowhere).await;
}

#[tokio::test]
async fn runs_resolve_targets_refuse_overlap_and_abort() {
    let t = TestServer::start().await;
    seed(&t).await;
    let op = t.user_token("op", Some(Role::Operator)).await;
    let viewer = t.user_token("vi", Some(Role::Viewer)).await;
    let runs = "/api/v1/orgs/default/plans/app-config/runs";

    let r = t.post(runs, &viewer, json!({})).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = t
        .post(runs, &op, json!({"inputs": {"colour": "red"}}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert_eq!(r.body["error"]["field"], "inputs.colour");
    assert!(r.message().contains("release"), "{}", r.message());
    let r = t
        .post("/api/v1/orgs/default/plans/nowhere/runs", &op, json!({}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert_eq!(r.body["error"]["field"], "targets");
    let r = t
        .post("/api/v1/orgs/default/plans/ghost/runs", &op, json!({}))
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    // Two racing requests over the same hosts: exactly one run.
    let (a, b) = tokio::join!(
        t.post(runs, &op, json!({"inputs": {"release": "2.0"}})),
        t.post(runs, &op, json!({"dry_run": true})),
    );
    let (created, refused) = if a.status == StatusCode::CREATED {
        (a, b)
    } else {
        (b, a)
    };
    assert_eq!(created.status, StatusCode::CREATED, "{:?}", created.body);
    assert_eq!(refused.status, StatusCode::CONFLICT, "{:?}", refused.body);
    assert_eq!(refused.code(), "run_in_progress");
    assert_eq!(created.body["state"], "queued");
    assert_eq!(created.body["hosts"], json!(["web-1", "web-2"]));
    let id = created.body["id"].as_str().unwrap().to_string();
    // The refusal names the hosts and the run holding them.
    assert_eq!(
        refused.message(),
        format!(
            "Already has a run in progress on the same targets: web-1, web-2 — held by run \
             {id} (queued: `bosun plan-run show {id}`)"
        )
    );
    assert!(id.starts_with("prun-"));

    let shown = t
        .get(&format!("/api/v1/orgs/default/plan-runs/{id}"), &viewer)
        .await;
    assert_eq!(shown.status, StatusCode::OK);
    assert_eq!(shown.body["plan_version"], 1);
    let listed = t.get(runs, &viewer).await;
    assert_eq!(listed.body["items"].as_array().unwrap().len(), 1);

    // Abort settles it at once and frees the hosts.
    let r = t
        .post(
            &format!("/api/v1/orgs/default/plan-runs/{id}/abort"),
            &viewer,
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = t
        .post(
            &format!("/api/v1/orgs/default/plan-runs/{id}/abort"),
            &op,
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["state"], "aborted");
    assert_eq!(r.body["reason"], "aborted by user:op");
    let r = t
        .post(
            &format!("/api/v1/orgs/default/plan-runs/{id}/abort"),
            &op,
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert_eq!(r.code(), "invalid_transition");
    let r = t.post(runs, &op, json!({})).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);

    // A target in an environment requiring approval starts paused.
    let r = t
        .post("/api/v1/orgs/default/plans/db/runs", &op, json!({}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(r.body["state"], "paused");
    assert_eq!(r.body["gated_environments"], json!(["prod"]));
    let r = t
        .post("/api/v1/orgs/default/plans/db/runs", &op, json!({}))
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert!(
        r.message().contains("targets: db-1 — held by run prun-")
            && r.message()
                .contains("(paused, waiting for approval: `bosun plan-run show prun-"),
        "{}",
        r.message()
    );
}

/// A run's lease carries the bastions its hosts are reached through, transitively, as
/// bastions only — no labels, variables or environment, so no `targets` of the plan can
/// match them (here one gets the plan's label after the run was created) — and names the
/// run's hosts, which the runner runs on alone. Parsed as the runner parses it, the
/// host's chain is whole.
#[tokio::test]
async fn a_lease_carries_the_bastions_of_its_hosts_as_bastions_only() {
    let t = TestServer::start().await;
    t.seed_plan("app-config", PLAN).await;
    let inventory = "environments:
  prod: {}
hosts:
  outer: { labels: [bastion], vars: { token: secret://app/token }, environment: prod }
  edge: { proxy_jump: outer, user: jump }
  web-1: { labels: [web], proxy_jump: edge }
  other: { labels: [db], proxy_jump: outer }
";
    let r = t
        .post(
            "/api/v1/orgs/default/inventory",
            &t.admin,
            json!({"source": inventory}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = t
        .post(
            "/api/v1/orgs/default/plans/app-config/runs",
            &t.admin,
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(r.body["hosts"], json!(["web-1"]));
    // The bastion gets the plan's label after the run was created.
    let r = t
        .call(
            reqwest::Method::PATCH,
            "/api/v1/orgs/default/hosts/outer",
            Some(&t.admin),
            Some(json!({"labels": ["bastion", "web"]})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);

    let runner = t.hosted_runner("r1").await;
    let r = t
        .post(
            "/api/v1/runner/lease",
            &t.server.hosted_runner_token,
            json!({"runner_id": runner, "wait_seconds": 5, "plan_runs": true}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let lease = &r.body["plan_run"];
    assert_eq!(lease["hosts"], json!(["web-1"]), "{lease:#}");
    let doc: serde_json::Value =
        serde_json::from_str(lease["inventory"].as_str().unwrap()).unwrap();
    let mut names: Vec<&str> = doc["hosts"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    names.sort();
    assert_eq!(names, ["edge", "outer", "web-1"], "{doc:#}");
    assert_eq!(doc["hosts"]["web-1"]["labels"], json!(["web"]), "{doc:#}");
    for bastion in ["edge", "outer"] {
        let b = &doc["hosts"][bastion];
        assert_eq!(b["labels"], json!([]), "{doc:#}");
        assert_eq!(b["vars"], json!({}), "{doc:#}");
        assert!(b.get("environment").is_none(), "{doc:#}");
    }
    assert_eq!(doc["hosts"]["edge"]["user"], "jump", "its own settings");
    assert_eq!(doc["environments"], json!({}), "{doc:#}");
    let parsed = bosun_plans::model::parse_inventory(
        std::path::Path::new("inventory"),
        lease["inventory"].as_str().unwrap(),
    )
    .unwrap();
    let web1 = parsed.hosts.iter().find(|h| h.name == "web-1").unwrap();
    let chain: Vec<&str> = web1.jump_chain().iter().map(|h| h.name.as_str()).collect();
    assert_eq!(chain, ["outer", "edge"]);
    // Nothing of a bastion's variables needs resolving: no secret reached the lease.
    assert!(lease.get("secrets").is_none(), "{lease:#}");
}
