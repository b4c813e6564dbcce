//! Stacks through the API: every field stored and returned, renames, paging, deletes.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::harness::TestServer;

#[tokio::test]
async fn create_show_update_delete_with_every_field() {
    let t = TestServer::start().await;
    assert_eq!(
        t.create_stack(json!({"id": "net", "repository": "github:acme/infra"}))
            .await
            .status,
        StatusCode::CREATED
    );
    let full = json!({
        "id": "app",
        "name": "Application",
        "repository": "https://git.example.com/infra.git",
        "branch": "release/1",
        "path": "./stacks/app/",
        "watch_paths": ["modules/common/", "modules/common", "shared"],
        "engine": "terraform",
        "engine_binary": "/usr/local/bin/terraform",
        "engine_version": "1.0.3",
        "tier": "medium",
        "autodeploy": true,
        "environment": "prod",
        "variables": {"TF_VAR_region": "eu-west-1", "DB_PASSWORD": "secret://db/password"},
        "depends_on": [{"stack": "net", "outputs": {"vpc_id": "vpc"}, "trigger_always": true}],
        "drift_detection": {"schedule": "0 3 * * *", "reconcile": true, "timezone": "Europe/Berlin"},
        "runner_pool": "edge"
    });
    let r = t.create_stack(full.clone()).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let shown = t.get("/api/v1/orgs/default/stacks/app", &t.admin).await;
    assert_eq!(shown.status, StatusCode::OK);
    let s = &shown.body;
    // The same stack, but for what moves between two answers: the drift schedule's next
    // check (the scheduler's first pass may arm it), and the age counted from its arming
    // (a second may pass).
    let without_next_check = |v: &serde_json::Value| {
        let mut v = v.clone();
        v["drift_status"]["next_check_at"] = serde_json::Value::Null;
        v["drift_status"]["age_seconds"] = serde_json::Value::Null;
        v
    };
    assert_eq!(without_next_check(s), without_next_check(&r.body));
    // Normalized on the way in.
    assert_eq!(s["path"], "stacks/app");
    assert_eq!(s["watch_paths"], json!(["modules/common", "shared"]));
    for key in [
        "name",
        "repository",
        "branch",
        "engine",
        "engine_binary",
        "engine_version",
        "tier",
        "autodeploy",
        "environment",
        "variables",
        "depends_on",
        "drift_detection",
        "runner_pool",
    ] {
        assert_eq!(s[key], full[key], "{key}");
    }

    // Rename: the id stays.
    let r = t
        .call(
            Method::PATCH,
            "/api/v1/orgs/default/stacks/app",
            Some(&t.admin),
            Some(json!({"name": "App (renamed)", "environment": null, "tier": "large"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["id"], "app");
    assert_eq!(r.body["name"], "App (renamed)");
    assert_eq!(r.body["environment"], json!(null));
    assert_eq!(r.body["tier"], "large");
    assert_eq!(
        r.body["variables"], full["variables"],
        "untouched fields stay"
    );
    assert_eq!(r.body["created_at"], s["created_at"]);
    let again = t.get("/api/v1/orgs/default/stacks/app", &t.admin).await;
    assert_eq!(without_next_check(&again.body), without_next_check(&r.body));

    // Upstreams cannot be deleted under their dependents.
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
        (StatusCode::CONFLICT, "has_dependents")
    );
    assert!(r.message().contains("app"), "{}", r.message());
    // Cycles are refused at write time.
    let r = t
        .call(
            Method::PATCH,
            "/api/v1/orgs/default/stacks/net",
            Some(&t.admin),
            Some(json!({"depends_on": [{"stack": "app"}]})),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "dependency_cycle"),
        "{:?}",
        r.body
    );

    let r = t
        .call(
            Method::DELETE,
            "/api/v1/orgs/default/stacks/app",
            Some(&t.admin),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = t.get("/api/v1/orgs/default/stacks/app", &t.admin).await;
    assert_eq!((r.status, r.code()), (StatusCode::NOT_FOUND, "not_found"));
    let r = t
        .create_stack(json!({"id": "net", "repository": "github:acme/infra"}))
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "already_exists")
    );
}

#[tokio::test]
async fn list_pages_by_cursor() {
    let t = TestServer::start().await;
    for i in 0..25 {
        let r = t
            .create_stack(json!({"id": format!("stack-{i:02}"), "repository": "github:acme/infra"}))
            .await;
        assert_eq!(r.status, StatusCode::CREATED);
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/v1/orgs/default/stacks?limit=10&cursor={c}"),
            None => "/api/v1/orgs/default/stacks?limit=10".to_string(),
        };
        let r = t.get(&path, &t.admin).await;
        assert_eq!(r.status, StatusCode::OK);
        for s in r.body["items"].as_array().unwrap() {
            seen.push(s["id"].as_str().unwrap().to_string());
        }
        match r.body["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    let want: Vec<String> = (0..25).map(|i| format!("stack-{i:02}")).collect();
    assert_eq!(seen, want);
}

#[tokio::test]
async fn stack_writes_are_audited() {
    let t = TestServer::start().await;
    t.create_stack(json!({"id": "net", "repository": "github:acme/infra"}))
        .await;
    t.call(
        Method::PATCH,
        "/api/v1/orgs/default/stacks/net",
        Some(&t.admin),
        Some(json!({"name": "Network"})),
    )
    .await;
    t.call(
        Method::DELETE,
        "/api/v1/orgs/default/stacks/net",
        Some(&t.admin),
        None,
    )
    .await;
    let r = t.get("/api/v1/orgs/default/audit", &t.admin).await;
    let log = r.body["items"].as_array().unwrap();
    let actions: Vec<&str> = log.iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(
        &actions[..3],
        ["stack.delete", "stack.update", "stack.create"]
    );
    assert_eq!(log[1]["detail"]["fields"], json!(["name"]));
    assert_eq!(log[0]["actor"], "user:admin");
    assert!(log[0]["token_id"].as_str().unwrap().starts_with("tok_"));
    assert_eq!(log[0]["target"], "stack:net");
}

#[tokio::test]
async fn several_servers_run_side_by_side() {
    let (a, b) = tokio::join!(TestServer::start(), TestServer::start());
    assert_ne!(a.url, b.url);
    a.create_stack(json!({"id": "only-a", "repository": "github:acme/infra"}))
        .await;
    let r = b.get("/api/v1/orgs/default/stacks/only-a", &b.admin).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn pr_feedback_is_the_stacks_own_or_its_orgs() {
    let t = TestServer::start().await;
    let stack = |id: &str| format!("/api/v1/orgs/default/stacks/{id}");
    // Each value kept as given; the effective one is the stack's own.
    for f in ["both", "checks", "comment", "none"] {
        let r = t
            .create_stack(
                json!({"id": format!("s-{f}"), "repository": "github:acme/infra",
                "pr_feedback": f}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        assert_eq!(
            (&r.body["pr_feedback"], &r.body["pr_feedback_effective"]),
            (&json!(f), &json!(f))
        );
        let shown = t.get(&stack(&format!("s-{f}")), &t.admin).await;
        assert_eq!(shown.body["pr_feedback"], f);
    }
    // Without one, the stack follows the org (`both` unless the org says otherwise).
    let r = t
        .create_stack(json!({"id": "plain", "repository": "github:acme/infra"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(r.body["pr_feedback"], json!(null));
    assert_eq!(r.body["pr_feedback_effective"], "both");

    // A bad value is refused, naming the field, and stores nothing.
    let r = t
        .create_stack(json!({"id": "bad", "repository": "github:acme/infra",
            "pr_feedback": "always"}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert_eq!(r.body["error"]["field"], "pr_feedback");
    assert_eq!(
        t.get(&stack("bad"), &t.admin).await.status,
        StatusCode::NOT_FOUND
    );

    let patch = |id: &str, body: serde_json::Value| {
        let path = stack(id);
        let t = &t;
        async move {
            t.call(Method::PATCH, &path, Some(&t.admin), Some(body))
                .await
        }
    };
    // Set to a value, then cleared with null: it follows the org again.
    let r = patch("plain", json!({"pr_feedback": "comment"})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        (&r.body["pr_feedback"], &r.body["pr_feedback_effective"]),
        (&json!("comment"), &json!("comment"))
    );
    let r = patch("plain", json!({"name": "Plain"})).await;
    assert_eq!(r.body["pr_feedback"], "comment", "an absent field is kept");
    let r = patch("plain", json!({"pr_feedback": null})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        (&r.body["pr_feedback"], &r.body["pr_feedback_effective"]),
        (&json!(null), &json!("both"))
    );
    let r = patch("plain", json!({"pr_feedback": "sometimes"})).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert_eq!(r.body["error"]["field"], "pr_feedback");
    assert_eq!(
        t.get(&stack("plain"), &t.admin).await.body["pr_feedback"],
        json!(null)
    );

    // The org's setting changes what an inheriting stack gets, not a stack's own.
    let r = t
        .call(
            Method::PATCH,
            "/api/v1/orgs/default",
            Some(&t.admin),
            Some(json!({"pr_feedback": "checks"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let shown = t.get(&stack("plain"), &t.admin).await.body;
    assert_eq!(
        (&shown["pr_feedback"], &shown["pr_feedback_effective"]),
        (&json!(null), &json!("checks"))
    );
    let listed = t.get("/api/v1/orgs/default/stacks", &t.admin).await.body;
    let effective: Vec<(&str, &str)> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap(),
                s["pr_feedback_effective"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        effective,
        [
            ("plain", "checks"),
            ("s-both", "both"),
            ("s-checks", "checks"),
            ("s-comment", "comment"),
            ("s-none", "none")
        ]
    );
}

/// Labels: kept in the order given on create, shown and listed, replaced whole by a
/// PATCH that names them (`[]` removes them) and kept by one that does not; a label that
/// is not a slug, one listed twice, or more than 32 are refused naming the field, and
/// change nothing.
#[tokio::test]
async fn labels_are_kept_replaced_and_checked() {
    let t = TestServer::start().await;
    let stack = "/api/v1/orgs/default/stacks/net";
    let patch = |body: serde_json::Value| {
        let t = &t;
        async move {
            t.call(Method::PATCH, stack, Some(&t.admin), Some(body))
                .await
        }
    };
    let r = t
        .create_stack(json!({"id": "net", "repository": "github:acme/infra",
            "labels": ["team-net", "prod"]}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(r.body["labels"], json!(["team-net", "prod"]));
    assert_eq!(
        t.get(stack, &t.admin).await.body["labels"],
        json!(["team-net", "prod"])
    );
    let plain = t
        .create_stack(json!({"id": "plain", "repository": "github:acme/infra"}))
        .await;
    assert_eq!(plain.body["labels"], json!([]), "none unless given");
    let listed = t.get("/api/v1/orgs/default/stacks", &t.admin).await.body;
    let labels: Vec<(&str, &serde_json::Value)> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["id"].as_str().unwrap(), &s["labels"]))
        .collect();
    assert_eq!(
        labels,
        [("net", &json!(["team-net", "prod"])), ("plain", &json!([]))]
    );

    // A PATCH naming the labels replaces them; one that does not keeps them.
    let r = patch(json!({"labels": ["eu-1"]})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["labels"], json!(["eu-1"]));
    let r = patch(json!({"name": "Network"})).await;
    assert_eq!(r.body["labels"], json!(["eu-1"]), "an absent field is kept");
    assert_eq!(t.get(stack, &t.admin).await.body["labels"], json!(["eu-1"]));

    // Refused, naming the field at fault, and nothing changes.
    let refused = |r: &crate::harness::Reply, field: &str, says: &str| {
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, "validation_failed"),
            "{:?}",
            r.body
        );
        assert_eq!(r.body["error"]["field"], field, "{:?}", r.body);
        assert!(r.message().contains(says), "{}", r.message());
    };
    let r = patch(json!({"labels": ["prod", "Prod EU"]})).await;
    refused(&r, "labels[1]", "lowercase letters, digits and '-'");
    let r = patch(json!({"labels": ["prod", "prod"]})).await;
    refused(&r, "labels[1]", "listed twice");
    let many: Vec<String> = (0..33).map(|i| format!("l{i}")).collect();
    let r = patch(json!({ "labels": many })).await;
    refused(&r, "labels", "at most 32 labels");
    let r = t
        .create_stack(json!({"id": "bad", "repository": "github:acme/infra",
            "labels": ["ok", "not_a_slug"]}))
        .await;
    refused(&r, "labels[1]", "not_a_slug");
    assert_eq!(
        t.get("/api/v1/orgs/default/stacks/bad", &t.admin)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(t.get(stack, &t.admin).await.body["labels"], json!(["eu-1"]));
    let most: Vec<String> = (0..32).map(|i| format!("l{i}")).collect();
    let r = patch(json!({ "labels": most })).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["labels"].as_array().unwrap().len(), 32);

    // `[]` removes them all.
    let r = patch(json!({"labels": []})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["labels"], json!([]));
    assert_eq!(t.get(stack, &t.admin).await.body["labels"], json!([]));
}
