//! Policies as code at the API's edge: who may save, read and override them, and every
//! way a saved policy can be malformed — refused with the field and the problem named,
//! and nothing saved.

use bosun_core::Role;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::harness::{Reply, TestServer};

const OK_REGO: &str = "package bosun.ok\n\nimport rego.v1\n\ndeny contains \"no\" if { false }\n";

async fn put(t: &TestServer, token: &str, name: &str, body: Value) -> Reply {
    t.call(
        Method::PUT,
        &format!("/api/v1/orgs/default/policies/{name}"),
        Some(token),
        Some(body),
    )
    .await
}

#[tokio::test]
async fn policies_are_saved_by_admins_and_read_by_members() {
    let t = TestServer::start().await;
    let viewer = t.user_token("vera", Some(Role::Viewer)).await;
    let operator = t.user_token("otto", Some(Role::Operator)).await;
    let body = json!({"files": {"ok.rego": OK_REGO}, "mode": "hard_mandatory",
        "labels": ["pci"], "environments": ["prod"]});
    let r = put(&t, &operator, "ok", body.clone()).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    let r = put(&t, &t.admin, "ok", body.clone()).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(
        r.body["attached_to"],
        "stacks labelled pci; environments prod"
    );
    assert!(r.body["version"].as_str().unwrap().starts_with("sha256:"));
    let r = put(&t, &t.admin, "ok", body).await;
    assert_eq!(r.status, StatusCode::OK, "replaced: {:?}", r.body);
    // Members read them; the list names the files, one policy shows their text.
    let r = t.get("/api/v1/orgs/default/policies", &viewer).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["items"][0]["files"], json!(["ok.rego"]));
    assert!(r.body["items"][0].get("texts").is_none(), "{:?}", r.body);
    let r = t.get("/api/v1/orgs/default/policies/ok", &viewer).await;
    assert_eq!(r.body["texts"]["ok.rego"], OK_REGO);
    // Overriding a run is an admin's act.
    let r = t
        .post(
            "/api/v1/orgs/default/runs/run-nope/override",
            &operator,
            json!({"reason": "x"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    let r = t
        .post(
            "/api/v1/orgs/default/runs/run-nope/override",
            &t.admin,
            json!({"reason": "x"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);
    let r = t
        .call(
            Method::DELETE,
            "/api/v1/orgs/default/policies/ok",
            Some(&operator),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = t
        .call(
            Method::DELETE,
            "/api/v1/orgs/default/policies/ok",
            Some(&t.admin),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn malformed_policies_are_refused_naming_the_problem() {
    let t = TestServer::start().await;
    let big = format!("package bosun.big\n# {}\n", "x".repeat(300 * 1024));
    let many: serde_json::Map<String, Value> = (0..201)
        .map(|i| (format!("p{i}.rego"), json!(format!("package bosun.p{i}\n"))))
        .collect();
    let cases: Vec<(&str, Value, &str, &str)> = vec![
        (
            "Bad Name",
            json!({"files": {"a.rego": OK_REGO}}),
            "name",
            "lowercase",
        ),
        ("none", json!({}), "files", "give the policy's files"),
        (
            "both",
            json!({"files": {"a.rego": OK_REGO}, "repository": "https://x/y.git"}),
            "files",
            "not both",
        ),
        ("empty", json!({"files": {}}), "files", "at least one"),
        (
            "not-rego",
            json!({"files": {"a.txt": OK_REGO}}),
            "files[\"a.txt\"]",
            ".rego",
        ),
        (
            "folder",
            json!({"files": {"../a.rego": OK_REGO}}),
            "files[\"../a.rego\"]",
            "no folder",
        ),
        (
            "big",
            json!({"files": {"big.rego": big}}),
            "files[\"big.rego\"]",
            "at most",
        ),
        ("many", json!({"files": many}), "files", "at most 200 files"),
        (
            "parse",
            json!({"files": {"a.rego": "package bosun.a\ndeny contains if {"}}),
            "files",
            "a.rego",
        ),
        (
            "mode",
            json!({"files": {"a.rego": OK_REGO}, "mode": "sometimes"}),
            "mode",
            "advisory",
        ),
        (
            "point",
            json!({"files": {"a.rego": OK_REGO}, "points": ["apply"]}),
            "point",
            "plan_run",
        ),
        (
            "no-points",
            json!({"files": {"a.rego": OK_REGO}, "points": []}),
            "points",
            "at least one",
        ),
        (
            "label",
            json!({"files": {"a.rego": OK_REGO}, "labels": ["Not A Slug"]}),
            "labels[0]",
            "",
        ),
        (
            "file",
            json!({"repository": "file:///srv/x.git"}),
            "repository",
            "file:// policy repositories are off",
        ),
        (
            "branch",
            json!({"repository": "https://git.example/p.git", "branch": "a..b"}),
            "branch",
            "..",
        ),
        (
            "path",
            json!({"repository": "https://git.example/p.git", "path": "../up"}),
            "path",
            "..",
        ),
        (
            "unknown",
            json!({"files": {"a.rego": OK_REGO}, "moed": "advisory"}),
            "",
            "moed",
        ),
    ];
    let mut wrong = Vec::new();
    for (name, body, field, says) in cases {
        let r = put(&t, &t.admin, name, body).await;
        let text = format!("{} {}", r.body["error"]["field"], r.message());
        if r.status != StatusCode::BAD_REQUEST || !text.contains(field) || !text.contains(says) {
            wrong.push(format!(
                "{name}: {} {text} (wanted {field:?}, {says:?})",
                r.status
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let r = t.get("/api/v1/orgs/default/policies", &t.admin).await;
    assert_eq!(r.body["items"], json!([]), "nothing was saved");
}

#[tokio::test]
async fn a_plan_lease_asks_for_the_plans_json_only_when_a_policy_reads_it() {
    let t = TestServer::start().await;
    for (id, labels) in [
        ("net", json!(["pci"])),
        ("db", json!(["pci"])),
        ("app", json!([])),
    ] {
        let r = t
            .create_stack(json!({"id": id, "repository": "file:///srv/git/infra",
                "labels": labels}))
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }
    let runner = crate::runs::Runner::register(&t, "r1").await;
    let lease_of = |stack: &'static str| {
        let (t, runner) = (&t, &runner);
        async move {
            let r = t
                .post(
                    &format!("/api/v1/orgs/default/stacks/{stack}/runs"),
                    &t.admin,
                    json!({}),
                )
                .await;
            assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
            let lease = runner.lease(5).await.expect("a lease");
            assert_eq!(lease["run_id"], r.body["id"]);
            lease["plan_json"].as_bool()
        }
    };
    assert_eq!(lease_of("net").await, Some(false), "no policy: no upload");
    let r = put(
        &t,
        &t.admin,
        "pci-plans",
        json!({"files": {"ok.rego": OK_REGO}, "labels": ["pci"]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(lease_of("db").await, Some(true), "a plan policy reads it");
    assert_eq!(lease_of("app").await, Some(false), "not attached to app");
}
