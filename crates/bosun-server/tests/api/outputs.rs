//! The outputs API over state written through the `http` backend: each version's outputs
//! compared with the previous one's, and no sensitive value anywhere in a response.

use bosun_server::service::tokens::mint_run_token;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::harness::TestServer;

const STATE: &str = "/api/v1/orgs/default/stacks/net/state";
const OUTPUTS: &str = "/api/v1/orgs/default/stacks/net/outputs";

/// Values that are sensitive in the current version (or were in the one compared with,
/// or are the value of an output that just became sensitive): none may be sent.
const SECRETS: [&str; 5] = [
    "hunter2",
    "hunter3",
    "tok-unchanged-secret",
    "was-public-now-secret",
    "was-secret-now-public",
];

fn v1() -> Value {
    json!({
        "version": 4,
        "terraform_version": "1.9.0",
        "serial": 3,
        "lineage": "L",
        "outputs": {
            "region": {"value": "eu-west-1", "type": "string"},
            "password": {"value": "hunter2", "type": "string", "sensitive": true},
            "token": {"value": "tok-unchanged-secret", "type": "string", "sensitive": true},
            "count": {"value": 1, "type": "number"},
            "gone": {"value": "bye", "type": "string"},
            "flag": {"value": "was-public-now-secret", "type": "string"},
            "api_key": {"value": "was-secret-now-public", "type": "string", "sensitive": true},
            "vpc": {
                "value": {"id": "vpc-1", "subnets": ["10.0.0.0/24", "10.0.1.0/24"]},
                "type": ["object", {"id": "string", "subnets": ["list", "string"]}]
            },
            "zones": {"value": ["a", "b"], "type": ["list", "string"]}
        },
        "resources": []
    })
}

fn v2() -> Value {
    json!({
        "version": 4,
        "terraform_version": "1.9.0",
        "serial": 4,
        "lineage": "L",
        "outputs": {
            "region": {"value": "us-east-2", "type": "string"},
            "password": {"value": "hunter3", "type": "string", "sensitive": true},
            "token": {"value": "tok-unchanged-secret", "type": "string", "sensitive": true},
            "count": {"value": "1", "type": "string"},
            "flag": {"value": "was-public-now-secret", "type": "string", "sensitive": true},
            "api_key": {"value": "rotated-and-public", "type": "string"},
            "vpc": {
                "value": {"id": "vpc-1", "subnets": ["10.0.0.0/24", "10.0.2.0/24"]},
                "type": ["object", {"id": "string", "subnets": ["list", "string"]}]
            },
            "zones": {"value": ["a", "b"], "type": ["list", "string"]},
            "added": {"value": true}
        },
        "resources": []
    })
}

/// GET as text, so the check for secrets sees every byte the server sent.
async fn get_text(t: &TestServer, path: &str, token: &str) -> (StatusCode, String) {
    let resp = t
        .client
        .get(format!("{}{path}", t.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    (resp.status(), resp.text().await.unwrap())
}

fn assert_no_secret(text: &str, secrets: &[&str]) {
    for s in secrets {
        assert!(!text.contains(s), "leaked {s:?}:\n{text}");
    }
}

fn change<'a>(body: &'a Value, name: &str) -> &'a Value {
    body["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no change for {name}: {body}"))
}

#[tokio::test]
async fn outputs_compared_with_the_previous_version() {
    let t = TestServer::start().await;
    for id in ["net", "app"] {
        let r = t
            .create_stack(json!({"id": id, "repository": "github:acme/infra"}))
            .await;
        assert_eq!(r.status, StatusCode::CREATED);
    }

    // No state yet.
    let r = t.get(OUTPUTS, &t.admin).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        r.body,
        json!({"version": null, "serial": null, "previous_version": null,
               "outputs": {}, "changes": [], "changed": false})
    );
    let r = t
        .get("/api/v1/orgs/default/stacks/ghost/outputs", &t.admin)
        .await;
    assert_eq!((r.status, r.code()), (StatusCode::NOT_FOUND, "not_found"));
    let r = t.get(&format!("{OUTPUTS}?version=1"), &t.admin).await;
    assert_eq!((r.status, r.code()), (StatusCode::NOT_FOUND, "not_found"));

    // Two versions through the state backend, as Terraform writes them.
    for doc in [v1(), v2()] {
        let r = t.post(STATE, &t.admin, doc).await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    }

    let (status, text) = get_text(&t, OUTPUTS, &t.admin).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_no_secret(&text, &SECRETS);
    let body: Value = serde_json::from_str(&text).unwrap();
    insta::assert_json_snapshot!("outputs", body);
    assert_eq!(
        (&body["version"], &body["serial"], &body["previous_version"]),
        (&json!(2), &json!(4), &json!(1))
    );
    assert_eq!(body["changed"], true);
    // The current outputs: types as the state records them, sensitive values null.
    let outputs = &body["outputs"];
    assert_eq!(
        outputs["region"],
        json!({"type": "string", "sensitive": false, "value": "us-east-2"})
    );
    assert_eq!(
        outputs["password"],
        json!({"type": "string", "sensitive": true, "value": null})
    );
    assert_eq!(outputs["vpc"]["type"][0], "object");
    assert_eq!(outputs["added"]["type"], Value::Null, "no type recorded");
    assert_eq!(outputs["api_key"]["value"], "rotated-and-public");
    assert!(outputs.get("gone").is_none());

    // Every output of either version, by name.
    let names: Vec<&str> = body["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "added", "api_key", "count", "flag", "gone", "password", "region", "token", "vpc",
            "zones"
        ]
    );
    assert_eq!(
        change(&body, "region"),
        &json!({"name": "region", "change": "changed", "sensitivity": null, "sensitive": false,
                "previous": "eu-west-1", "current": "us-east-2"})
    );
    // A change of type alone is a change.
    assert_eq!(change(&body, "count")["change"], "changed");
    assert_eq!(change(&body, "count")["previous"], 1);
    assert_eq!(change(&body, "count")["current"], "1");
    assert_eq!(change(&body, "vpc")["change"], "changed");
    assert_eq!(change(&body, "zones")["change"], "unchanged");
    assert!(change(&body, "zones").get("current").is_none());
    assert_eq!(
        change(&body, "gone"),
        &json!({"name": "gone", "change": "removed", "sensitivity": null, "sensitive": false,
                "previous": "bye"})
    );
    assert_eq!(change(&body, "added")["change"], "added");
    assert_eq!(change(&body, "added")["current"], true);
    // Sensitive outputs: said to change, never with their values.
    assert_eq!(
        change(&body, "password"),
        &json!({"name": "password", "change": "changed", "sensitivity": null, "sensitive": true})
    );
    assert_eq!(change(&body, "token")["change"], "unchanged");
    assert_eq!(
        change(&body, "flag"),
        &json!({"name": "flag", "change": "sensitivity_changed",
                "sensitivity": "became_sensitive", "sensitive": true})
    );
    assert_eq!(
        change(&body, "api_key"),
        &json!({"name": "api_key", "change": "changed",
                "sensitivity": "no_longer_sensitive", "sensitive": true})
    );

    // An older version, compared with the one before it: there is none.
    let (status, text) = get_text(&t, &format!("{OUTPUTS}?version=1"), &t.admin).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_no_secret(
        &text,
        &["hunter2", "tok-unchanged-secret", "was-secret-now-public"],
    );
    let old: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (&old["version"], &old["serial"], &old["previous_version"]),
        (&json!(1), &json!(3), &Value::Null)
    );
    assert_eq!(old["outputs"]["region"]["value"], "eu-west-1");
    assert_eq!(old["outputs"]["password"]["value"], Value::Null);
    let changes = old["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 9);
    assert!(changes.iter().all(|c| c["change"] == "added"), "{old}");
    assert_eq!(change(&old, "region")["current"], "eu-west-1");
    assert!(change(&old, "password").get("current").is_none());

    // Explicitly asking for the current version gives the same answer.
    let r = t.get(&format!("{OUTPUTS}?version=2"), &t.admin).await;
    assert_eq!(r.body, body);

    // A version with the same outputs: nothing changed.
    let mut v3 = v2();
    v3["serial"] = json!(5);
    let r = t.post(STATE, &t.admin, v3).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = t.get(OUTPUTS, &t.admin).await;
    assert_eq!(
        (&r.body["version"], &r.body["changed"]),
        (&json!(3), &json!(false))
    );
    assert!(r.body["changes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["change"] == "unchanged"));

    // Bad queries are refused with the reason.
    for q in ["?version=x", "?bogus=1"] {
        let r = t.get(&format!("{OUTPUTS}{q}"), &t.admin).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, "invalid_query"),
            "{q}"
        );
    }
}

#[tokio::test]
async fn who_may_read_outputs() {
    let t = TestServer::start().await;
    for id in ["net", "app"] {
        t.create_stack(json!({"id": id, "repository": "github:acme/infra"}))
            .await;
    }
    let r = t.post(STATE, &t.admin, v1()).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let viewer = t.user_token("viewer", Some(bosun_core::Role::Viewer)).await;
    let (status, text) = get_text(&t, OUTPUTS, &viewer).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_no_secret(
        &text,
        &["hunter2", "tok-unchanged-secret", "was-secret-now-public"],
    );

    // Run tokens read the outputs whose state they may read: their own stack's.
    let state = t.server.state();
    let (own, _) = mint_run_token(
        state,
        "default",
        "run-net",
        "net",
        chrono::Duration::minutes(5),
        &[],
    )
    .await
    .unwrap();
    let r = t.get(OUTPUTS, &own).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let (other, _) = mint_run_token(
        state,
        "default",
        "run-app",
        "app",
        chrono::Duration::minutes(5),
        &[],
    )
    .await
    .unwrap();
    let r = t.get(OUTPUTS, &other).await;
    assert_eq!((r.status, r.code()), (StatusCode::FORBIDDEN, "forbidden"));
    let r = t.call(Method::GET, OUTPUTS, None, None).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
}
