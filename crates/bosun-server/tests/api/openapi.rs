//! The OpenAPI document covers every route the server serves, and nothing else. Each
//! route's path and method come from its handler's `#[utoipa::path]`; this checks that
//! the routes that dispatch on the method themselves document their standard methods.

use std::collections::BTreeSet;

use bosun_server::openapi::document;
use bosun_server::routes::api_routes;
use reqwest::StatusCode;

use crate::harness::TestServer;

fn documented() -> BTreeSet<(String, String)> {
    let doc = serde_json::to_value(document(&api_routes())).unwrap();
    let mut ops = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if ["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                ops.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    ops
}

#[test]
fn every_route_is_documented() {
    let ops = documented();
    // OpenAPI cannot name protocol methods such as LOCK/UNLOCK; their route's
    // description covers them, and every standard method must be an operation.
    let standard = ["GET", "POST", "PUT", "PATCH", "DELETE"];
    let served: BTreeSet<(String, String)> = api_routes()
        .iter()
        .flat_map(|r| {
            r.methods
                .iter()
                .map(move |m| (m.to_string(), r.full_path()))
        })
        .filter(|(m, _)| standard.contains(&m.as_str()))
        .collect();
    let missing: Vec<_> = served.difference(&ops).collect();
    assert!(
        missing.is_empty(),
        "routes missing from the OpenAPI document: {missing:?}"
    );
    let stale: Vec<_> = ops.difference(&served).collect();
    assert!(
        stale.is_empty(),
        "documented operations no route serves: {stale:?}"
    );
}

#[tokio::test]
async fn document_is_served_without_auth() {
    let t = TestServer::start().await;
    let r = t
        .call(reqwest::Method::GET, "/api/v1/openapi.json", None, None)
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["openapi"].as_str().map(|v| &v[..2]), Some("3."));
    assert!(r.body["components"]["schemas"]["StackCreate"].is_object());
    assert!(r.body["paths"]["/api/v1/orgs/{org}/stacks"]["post"].is_object());
}

/// The runner protocol's egress: the modes a runner registers (and the runner list
/// shows), and the refusals a phase report counts.
#[test]
fn runner_egress_is_described() {
    let doc = serde_json::to_value(document(&api_routes())).unwrap();
    let s = &doc["components"]["schemas"];
    assert_eq!(
        s["RunnerEgress"]["enum"],
        serde_json::json!(["restricted", "unrestricted", "opted_out"])
    );
    for schema in ["RunnerRegister", "RunnerView"] {
        let egress = s[schema]["properties"]["egress"].to_string();
        assert!(
            egress.contains("#/components/schemas/RunnerEgress"),
            "{schema}: {egress}"
        );
    }
    let report = s["RunnerReport"].to_string();
    assert!(report.contains("\"egress_refusals\""), "{report}");
}

/// A stack's labels: an array of strings on the stack, its creation and its changes, each
/// documented.
#[test]
fn stack_labels_are_described() {
    let doc = serde_json::to_value(document(&api_routes())).unwrap();
    let s = &doc["components"]["schemas"];
    for schema in ["Stack", "StackCreate", "StackPatch"] {
        let labels = &s[schema]["properties"]["labels"];
        assert_eq!(labels["items"]["type"], "string", "{schema}: {labels}");
        assert!(
            labels["description"]
                .as_str()
                .is_some_and(|d| d.contains("slugs, each once")),
            "{schema}: {labels}"
        );
    }
    let required = s["StackCreate"]["required"].to_string();
    assert!(!required.contains("labels"), "{required}");
}
