//! Orgs, users, membership and the audit log.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::harness::TestServer;

#[tokio::test]
async fn bootstrap_admin_and_orgs() {
    let t = TestServer::start().await;
    let me = t.get("/api/v1/whoami", &t.admin).await;
    assert_eq!(me.body["user"], "admin");
    assert_eq!(me.body["server_admin"], true);
    assert_eq!(
        me.body["orgs"],
        json!([{"org": "default", "role": "admin"}])
    );

    let r = t
        .post(
            "/api/v1/orgs",
            &t.admin,
            json!({"id": "acme", "name": "Acme Corp"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(r.body["name"], "Acme Corp");
    let r = t
        .post("/api/v1/orgs", &t.admin, json!({"id": "acme"}))
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "already_exists")
    );
    let orgs = t.get("/api/v1/orgs", &t.admin).await;
    let ids: Vec<&str> = orgs.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["acme", "default"]);

    // Nothing crosses orgs: a stack in acme is invisible from default.
    let r = t
        .post(
            "/api/v1/orgs/acme/stacks",
            &t.admin,
            json!({"id": "net", "repository": "github:a/b"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let r = t.get("/api/v1/orgs/default/stacks/net", &t.admin).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn members_and_the_last_admin() {
    let t = TestServer::start().await;
    let bob = t.user_token("bob", Some(bosun_core::Role::Viewer)).await;
    let members = t.get("/api/v1/orgs/default/members", &bob).await;
    assert_eq!(
        members.body,
        json!({
            "items": [
                {"user": "admin", "role": "admin", "source": "manual"},
                {"user": "bob", "role": "viewer", "source": "manual"}
            ],
            "next_cursor": null
        })
    );

    // Demoting or removing the only admin would orphan the org.
    let r = t
        .call(
            Method::PUT,
            "/api/v1/orgs/default/members/admin",
            Some(&t.admin),
            Some(json!({"role": "viewer"})),
        )
        .await;
    assert_eq!((r.status, r.code()), (StatusCode::CONFLICT, "last_admin"));
    let r = t
        .call(
            Method::DELETE,
            "/api/v1/orgs/default/members/admin",
            Some(&t.admin),
            None,
        )
        .await;
    assert_eq!((r.status, r.code()), (StatusCode::CONFLICT, "last_admin"));

    // Promote bob, then the old admin can step down.
    let r = t
        .call(
            Method::PUT,
            "/api/v1/orgs/default/members/bob",
            Some(&t.admin),
            Some(json!({"role": "admin"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = t.get("/api/v1/orgs/default/audit", &bob).await;
    assert_eq!(r.status, StatusCode::OK, "bob is admin now");
    let r = t
        .call(
            Method::DELETE,
            "/api/v1/orgs/default/members/admin",
            Some(&bob),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = t.get("/api/v1/orgs/default/stacks", &t.admin).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);

    let r = t
        .call(
            Method::PUT,
            "/api/v1/orgs/default/members/ghost",
            Some(&bob),
            Some(json!({"role": "viewer"})),
        )
        .await;
    assert_eq!((r.status, r.code()), (StatusCode::NOT_FOUND, "not_found"));
}

#[tokio::test]
async fn health_and_readiness() {
    let t = TestServer::start().await;
    let r = t.call(Method::GET, "/healthz", None, None).await;
    assert_eq!(
        (r.status, r.body["status"].as_str()),
        (StatusCode::OK, Some("ok"))
    );
    let r = t.call(Method::GET, "/readyz", None, None).await;
    assert_eq!(
        (r.status, r.body["status"].as_str()),
        (StatusCode::OK, Some("ready"))
    );
    // Once shutdown begins the server reports not ready, and the store is closed after.
    let state = t.server.state().clone();
    let url = t.url.clone();
    t.server.shutdown().await.unwrap();
    assert!(
        state.store.ping().await.is_err(),
        "store still open after shutdown"
    );
    assert!(
        reqwest::get(format!("{url}/healthz")).await.is_err(),
        "still accepting"
    );
}

#[tokio::test]
async fn org_pr_feedback_changed_by_admins_and_audited() {
    let t = TestServer::start().await;
    let org = t.get("/api/v1/orgs/default", &t.admin).await;
    assert_eq!(org.body["pr_feedback"], "both", "the default");
    let patch = |token: String, body: serde_json::Value| {
        let t = &t;
        async move {
            t.call(
                Method::PATCH,
                "/api/v1/orgs/default",
                Some(&token),
                Some(body),
            )
            .await
        }
    };

    let r = patch(t.admin.clone(), json!({"pr_feedback": "checks"})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["id"], "default");
    assert_eq!(r.body["pr_feedback"], "checks");
    let org = t.get("/api/v1/orgs/default", &t.admin).await;
    assert_eq!(org.body["pr_feedback"], "checks");
    let orgs = t.get("/api/v1/orgs", &t.admin).await;
    assert_eq!(orgs.body["items"][0]["pr_feedback"], "checks");

    // Audited with the old and new value.
    let log = t
        .get("/api/v1/orgs/default/audit?action=org.update", &t.admin)
        .await;
    let items = log.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0]["actor"], "user:admin");
    assert_eq!(items[0]["target"], "org:default");
    assert_eq!(
        items[0]["detail"],
        json!({"pr_feedback": {"old": "both", "new": "checks"}})
    );

    // Operators (and viewers) may not; a bad value or an unknown field is refused.
    let operator = t.user_token("olga", Some(bosun_core::Role::Operator)).await;
    let r = patch(operator, json!({"pr_feedback": "none"})).await;
    assert_eq!((r.status, r.code()), (StatusCode::FORBIDDEN, "forbidden"));
    let r = patch(t.admin.clone(), json!({"pr_feedback": "sometimes"})).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert_eq!(r.body["error"]["field"], "pr_feedback");
    let r = patch(t.admin.clone(), json!({"pr_feedback": "none", "name": "x"})).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, "unknown_field")
    );
    let org = t.get("/api/v1/orgs/default", &t.admin).await;
    assert_eq!(
        org.body["pr_feedback"], "checks",
        "nothing refused changed it"
    );
    let log = t
        .get("/api/v1/orgs/default/audit?action=org.update", &t.admin)
        .await;
    assert_eq!(log.body["items"].as_array().unwrap().len(), 1);

    // An empty change answers the org as it is, and audits nothing.
    let r = patch(t.admin.clone(), json!({})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["pr_feedback"], "checks");
    let log = t
        .get("/api/v1/orgs/default/audit?action=org.update", &t.admin)
        .await;
    assert_eq!(log.body["items"].as_array().unwrap().len(), 1);
}
