//! Bad input on every write endpoint: a 4xx naming the problem, and nothing stored.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::harness::TestServer;

/// Every endpoint that takes a JSON body, with a valid body to mutate.
fn write_endpoints() -> Vec<(Method, &'static str, serde_json::Value)> {
    vec![
        (Method::POST, "/api/v1/orgs", json!({"id": "neworg"})),
        (Method::POST, "/api/v1/users", json!({"id": "newuser"})),
        (
            Method::PATCH,
            "/api/v1/orgs/default",
            json!({"pr_feedback": "checks"}),
        ),
        (
            Method::PUT,
            "/api/v1/orgs/default/members/admin",
            json!({"role": "admin"}),
        ),
        (Method::POST, "/api/v1/tokens", json!({"description": "x"})),
        (
            Method::POST,
            "/api/v1/orgs/default/pool-tokens",
            json!({"pool": "edge"}),
        ),
        (
            Method::POST,
            "/api/v1/orgs/default/stacks",
            json!({"id": "net2", "repository": "github:acme/infra"}),
        ),
        (
            Method::PATCH,
            "/api/v1/orgs/default/stacks/net",
            json!({"name": "renamed"}),
        ),
    ]
}

/// (content type, body, expected status, code, text the message must contain)
type BadBody = (
    Option<&'static str>,
    Vec<u8>,
    StatusCode,
    &'static str,
    &'static str,
);

async fn snapshot(t: &TestServer) -> (usize, serde_json::Value) {
    let stacks = t.get("/api/v1/orgs/default/stacks", &t.admin).await.body;
    (t.audit_total().await, stacks)
}

#[tokio::test]
async fn malformed_bodies_are_refused_and_store_nothing() {
    let t = TestServer::start_with(|c| c.max_body_bytes = 4096).await;
    let r = t
        .create_stack(json!({"id": "net", "repository": "github:acme/infra"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let before = snapshot(&t).await;

    for (method, path, valid) in write_endpoints() {
        let mut unknown = valid.clone();
        unknown["surprise"] = json!(1);
        let mut wrong_type = valid.clone();
        let key = valid.as_object().unwrap().keys().next().unwrap().clone();
        wrong_type[&key] = json!({"nested": true});
        let huge = format!("{{\"{key}\": \"{}\"}}", "x".repeat(8192));
        let cases: Vec<BadBody> = vec![
            (
                Some("application/json"),
                b"{,}".to_vec(),
                StatusCode::BAD_REQUEST,
                "invalid_json",
                "malformed JSON",
            ),
            (
                Some("application/json"),
                b"[1,2]".to_vec(),
                StatusCode::BAD_REQUEST,
                "invalid_field",
                "invalid type",
            ),
            (
                Some("application/json"),
                unknown.to_string().into_bytes(),
                StatusCode::BAD_REQUEST,
                "unknown_field",
                "surprise",
            ),
            (
                Some("application/json"),
                wrong_type.to_string().into_bytes(),
                StatusCode::BAD_REQUEST,
                "invalid_field",
                "invalid type",
            ),
            (
                Some("application/json"),
                huge.into_bytes(),
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                "4096 bytes",
            ),
            (
                Some("text/plain"),
                valid.to_string().into_bytes(),
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "application/json",
            ),
            (
                None,
                valid.to_string().into_bytes(),
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "application/json",
            ),
        ];
        for (ct, body, status, code, says) in cases {
            let r = t.raw(method.clone(), path, &t.admin, ct, body).await;
            assert_eq!(r.status, status, "{method} {path} ({code}): {:?}", r.body);
            assert_eq!(r.code(), code, "{method} {path}: {:?}", r.body);
            assert!(
                r.message().contains(says),
                "{method} {path}: {:?}",
                r.message()
            );
        }
    }
    assert_eq!(
        snapshot(&t).await,
        before,
        "a refused request changed the store"
    );
}

#[tokio::test]
async fn invalid_values_name_their_field() {
    let t = TestServer::start().await;
    let r = t
        .create_stack(json!({"id": "net", "repository": "github:acme/infra"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let before = snapshot(&t).await;
    let cases: Vec<(Method, &str, serde_json::Value, &str)> = vec![
        (
            Method::POST,
            "/api/v1/orgs",
            json!({"id": "Acme Corp"}),
            "id",
        ),
        (Method::POST, "/api/v1/orgs", json!({"id": "a"}), "id"),
        (Method::POST, "/api/v1/users", json!({"id": "-bob"}), "id"),
        (
            Method::PUT,
            "/api/v1/orgs/default/members/admin",
            json!({"role": "owner"}),
            "role",
        ),
        (
            Method::POST,
            "/api/v1/tokens",
            json!({"expires_in_seconds": 5}),
            "expires_in_seconds",
        ),
        (
            Method::POST,
            "/api/v1/tokens",
            json!({"description": "a\nb"}),
            "description",
        ),
        (
            Method::POST,
            "/api/v1/orgs/default/pool-tokens",
            json!({"pool": "Edge Pool"}),
            "pool",
        ),
        (
            Method::POST,
            "/api/v1/orgs/default/stacks",
            json!({"id": "x", "repository": "github:a/b"}),
            "id",
        ),
        (
            Method::POST,
            "/api/v1/orgs/default/stacks",
            json!({"id": "UPPER", "repository": "github:a/b"}),
            "id",
        ),
        (
            Method::POST,
            "/api/v1/orgs/default/stacks",
            json!({"id": "ok-id", "repository": "svn://x/y"}),
            "repository",
        ),
        (
            Method::POST,
            "/api/v1/orgs/default/stacks",
            json!({"id": "ok-id", "repository": "github:a/b", "path": "../up"}),
            "path",
        ),
        (
            Method::POST,
            "/api/v1/orgs/default/stacks",
            json!({"id": "ok-id", "repository": "github:a/b", "watch_paths": ["a", "/etc"]}),
            "watch_paths[1]",
        ),
        (
            Method::POST,
            "/api/v1/orgs/default/stacks",
            json!({"id": "ok-id", "repository": "github:a/b", "watch_paths": ["a//b"]}),
            "watch_paths[0]",
        ),
        (
            Method::POST,
            "/api/v1/orgs/default/stacks",
            json!({"id": "ok-id", "repository": "github:a/b", "tier": "xl"}),
            "tier",
        ),
        (
            Method::POST,
            "/api/v1/orgs/default/stacks",
            json!({"id": "ok-id", "repository": "github:a/b", "engine": "pulumi"}),
            "engine",
        ),
        (
            Method::POST,
            "/api/v1/orgs/default/stacks",
            json!({"id": "ok-id", "repository": "github:a/b", "branch": "feature branch"}),
            "branch",
        ),
        (
            Method::POST,
            "/api/v1/orgs/default/stacks",
            json!({"id": "ok-id", "repository": "github:a/b", "variables": {"1BAD": "x"}}),
            "variables.1BAD",
        ),
        (
            Method::POST,
            "/api/v1/orgs/default/stacks",
            json!({"id": "ok-id", "repository": "github:a/b", "depends_on": [{"stack": "ghost"}]}),
            "depends_on",
        ),
        (
            Method::POST,
            "/api/v1/orgs/default/stacks",
            json!({"id": "ok-id", "repository": "github:a/b", "drift_detection": {"schedule": "sometimes"}}),
            "drift_detection.schedule",
        ),
        (
            Method::PATCH,
            "/api/v1/orgs/default/stacks/net",
            json!({"tier": "huge"}),
            "tier",
        ),
        (
            Method::PATCH,
            "/api/v1/orgs/default/stacks/net",
            json!({"path": "/abs"}),
            "path",
        ),
        (
            Method::PATCH,
            "/api/v1/orgs/default/stacks/net",
            json!({"depends_on": [{"stack": "net"}]}),
            "depends_on[0].stack",
        ),
        (
            Method::POST,
            "/api/v1/orgs/default/stacks",
            json!({"id": "ok-id", "repository": "github:a/b", "pr_feedback": "all"}),
            "pr_feedback",
        ),
        (
            Method::PATCH,
            "/api/v1/orgs/default/stacks/net",
            json!({"pr_feedback": "org"}),
            "pr_feedback",
        ),
        (
            Method::PATCH,
            "/api/v1/orgs/default",
            json!({"pr_feedback": "Checks"}),
            "pr_feedback",
        ),
        (
            Method::POST,
            "/api/v1/orgs/default/stacks",
            json!({"id": "ok-id", "repository": "github:a/b", "labels": ["web", "-web"]}),
            "labels[1]",
        ),
        (
            Method::PATCH,
            "/api/v1/orgs/default/stacks/net",
            json!({"labels": ["web", "web"]}),
            "labels[1]",
        ),
    ];
    for (method, path, body, field) in cases {
        let r = t
            .call(method.clone(), path, Some(&t.admin), Some(body.clone()))
            .await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "{method} {path} {body}: {:?}",
            r.body
        );
        assert_eq!(r.code(), "validation_failed", "{body}");
        assert_eq!(
            r.body["error"]["field"],
            json!(field),
            "{body}: {:?}",
            r.body
        );
        assert!(r.message().starts_with(field), "{}", r.message());
    }
    // The id is immutable.
    let r = t
        .call(
            Method::PATCH,
            "/api/v1/orgs/default/stacks/net",
            Some(&t.admin),
            Some(json!({"id": "other"})),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, "immutable_field")
    );
    assert_eq!(
        snapshot(&t).await,
        before,
        "a refused request changed the store"
    );
}

#[tokio::test]
async fn bad_queries_and_routes() {
    let t = TestServer::start().await;
    for (path, status, code) in [
        (
            "/api/v1/orgs/default/stacks?limit=0",
            StatusCode::BAD_REQUEST,
            "validation_failed",
        ),
        (
            "/api/v1/orgs/default/stacks?limit=abc",
            StatusCode::BAD_REQUEST,
            "invalid_query",
        ),
        (
            "/api/v1/orgs/default/stacks?colour=blue",
            StatusCode::BAD_REQUEST,
            "invalid_query",
        ),
        (
            "/api/v1/orgs/default/audit?limit=5000",
            StatusCode::BAD_REQUEST,
            "validation_failed",
        ),
        ("/api/v1/nowhere", StatusCode::NOT_FOUND, "route_not_found"),
    ] {
        let r = t.get(path, &t.admin).await;
        assert_eq!((r.status, r.code()), (status, code), "{path}: {:?}", r.body);
    }
    let r = t
        .call(
            Method::PUT,
            "/api/v1/orgs/default/stacks",
            Some(&t.admin),
            None,
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed")
    );
}

/// Every list paged by a sequence number refuses a cursor that is not one of its own,
/// naming `cursor`; `before`, the audit and delivery logs' old name, still pages.
#[tokio::test]
async fn a_sequence_cursor_that_is_not_a_number_is_refused_naming_it() {
    let t = TestServer::start().await;
    let r = t
        .create_stack(json!({"id": "net", "repository": "github:acme/infra"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    for list in [
        "/api/v1/orgs/default/stacks/net/state/versions",
        "/api/v1/orgs/default/stacks/net/triggers",
        "/api/v1/orgs/default/audit",
        "/api/v1/audit",
    ] {
        let r = t.get(&format!("{list}?cursor=run-1"), &t.admin).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{list}: {:?}", r.body);
        assert_eq!(r.code(), "validation_failed", "{list}: {:?}", r.body);
        assert_eq!(r.body["error"]["field"], "cursor", "{list}: {:?}", r.body);
    }
    // The old parameter name pages the audit log like `cursor`.
    let all = t.get("/api/v1/orgs/default/audit", &t.admin).await;
    let newest = all.body["items"][0]["seq"].as_i64().unwrap();
    let older = t
        .get(
            &format!("/api/v1/orgs/default/audit?before={newest}"),
            &t.admin,
        )
        .await;
    assert_eq!(older.status, StatusCode::OK, "{:?}", older.body);
    assert!(older.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["seq"].as_i64().unwrap() < newest));
}
