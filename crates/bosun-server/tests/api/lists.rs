//! Every list answers in one shape, `{"items": […], "next_cursor": …}`, and takes
//! `cursor` and `limit`: checked on the OpenAPI document (so a new list that answers a
//! bare array fails here), and live on a real server for the lists that page by name
//! (hosts, plans) and some of those answered whole.

use bosun_server::openapi::document;
use bosun_server::routes::api_routes;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::harness::TestServer;

/// The routes allowed a bare array: run-log chunks are a log protocol read with
/// `after` (the next chunk number), not a list.
const LOG_CHUNK_ROUTES: &[&str] = &[
    "/api/v1/orgs/{org}/runs/{run}/logs",
    "/api/v1/orgs/{org}/plan-runs/{run}/logs",
];

/// A schema with `$ref`s to components followed.
fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str() {
        Some(r) => {
            let name = r.trim_start_matches("#/components/schemas/");
            resolve(doc, &doc["components"]["schemas"][name])
        }
        None => schema,
    }
}

fn is_array(schema: &Value) -> bool {
    schema["type"] == "array"
        || schema["type"]
            .as_array()
            .is_some_and(|t| t.contains(&json!("array")))
}

/// `{items: array, next_cursor}`: the page every list answers with.
fn is_page(schema: &Value) -> bool {
    let props = &schema["properties"];
    props["items"].is_object() && is_array(&props["items"]) && props["next_cursor"].is_object()
}

/// Every operation's 200 JSON schema, resolved: (method, path, schema, operation).
fn ok_schemas(doc: &Value) -> Vec<(String, String, Value, Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let Some(schema) = op["responses"]["200"]["content"]["application/json"].get("schema")
            else {
                continue;
            };
            out.push((
                method.clone(),
                path.clone(),
                resolve(doc, schema).clone(),
                op.clone(),
            ));
        }
    }
    out
}

fn query_params(op: &Value) -> Vec<String> {
    op["parameters"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .filter(|p| p["in"] == "query")
                .filter_map(|p| p["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn no_list_answers_a_bare_array() {
    let doc = serde_json::to_value(document(&api_routes())).unwrap();
    let schemas = ok_schemas(&doc);
    let bare: Vec<String> = schemas
        .iter()
        .filter(|(_, path, schema, _)| {
            is_array(schema) && !LOG_CHUNK_ROUTES.contains(&path.as_str())
        })
        .map(|(m, p, _, _)| format!("{} {p}", m.to_uppercase()))
        .collect();
    assert!(
        bare.is_empty(),
        "these answer a bare JSON array; a list answers Page<T> ({{items, next_cursor}}) \
         and takes PageQuery (cursor, limit): {bare:#?}"
    );
    // The exemption stays true: each log route is still there and still a log.
    for route in LOG_CHUNK_ROUTES {
        assert!(
            schemas
                .iter()
                .any(|(m, p, s, _)| m == "get" && p == route && is_array(s)),
            "{route} is no longer a log-chunk route answering an array: drop its exemption"
        );
    }
}

#[test]
fn every_list_takes_cursor_and_limit_and_says_how_it_pages() {
    let doc = serde_json::to_value(document(&api_routes())).unwrap();
    let mut pages = 0;
    let mut missing = Vec::new();
    for (method, path, schema, op) in ok_schemas(&doc) {
        if !is_page(&schema) {
            continue;
        }
        pages += 1;
        let said = format!(
            "{} {}",
            op["summary"].as_str().unwrap_or_default(),
            op["description"].as_str().unwrap_or_default()
        );
        if !said.contains("Paged") && !said.contains("Answered whole") {
            missing.push(format!(
                "{} {path}: the description says neither \"Paged\" nor \"Answered whole\"",
                method.to_uppercase()
            ));
        }
        let params = query_params(&op);
        for wanted in ["cursor", "limit"] {
            if !params.iter().any(|p| p == wanted) {
                missing.push(format!("{} {path}: no `{wanted}`", method.to_uppercase()));
            }
        }
    }
    // Stacks, runs, state versions, triggers, plan runs, audit (two), deliveries, and the
    // lists that answered arrays before: hosts, environments, plans, targets, approvals,
    // decisions, runners, orgs, members, secrets, personal and pool tokens.
    assert!(
        pages >= 20,
        "only {pages} pages found: is is_page still right?"
    );
    assert!(missing.is_empty(), "{missing:#?}");
}

/// Follows `path`'s pages of `limit`, returning each page's item names.
async fn pages_of(t: &TestServer, path: &str, limit: u32) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut url = format!("{path}?limit={limit}");
        if let Some(c) = &cursor {
            url.push_str(&format!("&cursor={c}"));
        }
        let r = t.get(&url, &t.admin).await;
        assert_eq!(r.status, StatusCode::OK, "{url}: {}", r.body);
        let names: Vec<String> = r.body["items"]
            .as_array()
            .unwrap_or_else(|| panic!("{url}: no items in {}", r.body))
            .iter()
            .map(|i| i["name"].as_str().unwrap().to_string())
            .collect();
        pages.push(names);
        match r.body["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => {
                assert!(r.body["next_cursor"].is_null(), "{}", r.body);
                break;
            }
        }
        assert!(pages.len() < 10, "{path} pages forever: {pages:?}");
    }
    pages
}

#[tokio::test]
async fn hosts_and_plans_page_by_name() {
    let t = TestServer::start().await;
    for name in ["web-3", "db-1", "web-1", "cache-1", "web-2"] {
        t.seed_host(name, "x", None).await;
    }
    for name in ["rotate", "bootstrap", "patch", "audit", "deploy"] {
        t.seed_plan(name, &format!("name: {name}\nsteps: []\n"))
            .await;
    }
    assert_eq!(
        pages_of(&t, "/api/v1/orgs/default/hosts", 2).await,
        [
            vec!["cache-1", "db-1"],
            vec!["web-1", "web-2"],
            vec!["web-3"]
        ]
    );
    assert_eq!(
        pages_of(&t, "/api/v1/orgs/default/plans", 2).await,
        [
            vec!["audit", "bootstrap"],
            vec!["deploy", "patch"],
            vec!["rotate"]
        ]
    );
    // A page exactly full is followed by an empty last page, never a lost item.
    assert_eq!(
        pages_of(&t, "/api/v1/orgs/default/hosts", 5).await,
        [
            vec!["cache-1", "db-1", "web-1", "web-2", "web-3"],
            Vec::<&str>::new()
        ]
    );
    // Without a limit: one page of the default size.
    let r = t.get("/api/v1/orgs/default/hosts", &t.admin).await;
    assert_eq!(r.body["items"].as_array().unwrap().len(), 5);
    assert!(r.body["next_cursor"].is_null());
    for bad in ["0", "1001"] {
        let r = t
            .get(&format!("/api/v1/orgs/default/plans?limit={bad}"), &t.admin)
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
        assert_eq!(r.body["error"]["field"], "limit");
    }
}

#[tokio::test]
async fn small_lists_answer_one_whole_page() {
    let t = TestServer::start().await;
    t.seed_environment("prod", false, false).await;
    t.seed_environment("staging", false, false).await;
    for path in [
        "/api/v1/orgs",
        "/api/v1/orgs/default/members",
        "/api/v1/orgs/default/environments",
        "/api/v1/orgs/default/secrets",
        "/api/v1/orgs/default/notifications/targets",
        "/api/v1/orgs/default/pool-tokens",
        "/api/v1/tokens",
    ] {
        let r = t.get(path, &t.admin).await;
        assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.body);
        assert!(r.body["items"].is_array(), "{path}: {}", r.body);
        assert!(
            r.body.as_object().unwrap().contains_key("next_cursor")
                && r.body["next_cursor"].is_null(),
            "{path}: {}",
            r.body
        );
        // `limit` is checked; a cursor cannot continue a list answered whole.
        let r = t.get(&format!("{path}?limit=1"), &t.admin).await;
        assert_eq!(r.status, StatusCode::OK, "{path}?limit=1: {}", r.body);
        let r = t.get(&format!("{path}?limit=0"), &t.admin).await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "{path}?limit=0: {}",
            r.body
        );
        assert_eq!(r.body["error"]["field"], "limit", "{path}");
        let r = t.get(&format!("{path}?cursor=x"), &t.admin).await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "{path}?cursor=x: {}",
            r.body
        );
        assert_eq!(r.body["error"]["field"], "cursor", "{path}");
        assert!(r.message().contains("one page"), "{path}: {}", r.body);
    }
    let envs = t.get("/api/v1/orgs/default/environments", &t.admin).await;
    let ids: Vec<&str> = envs.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["prod", "staging"]);
    // The decisions log pages for real: an unknown cursor is refused, naming it.
    let r = t
        .get(
            "/api/v1/orgs/default/approvals/decisions?cursor=prun-nosuch",
            &t.admin,
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert_eq!(r.body["error"]["field"], "cursor");
}

/// Runners page in registration order (a fleet of a thousand is not one page): pages of
/// two read back every runner once, in order; a cursor not of the list is refused.
#[tokio::test]
async fn runners_page_in_registration_order() {
    let t = TestServer::start().await;
    let hosted = t.server.hosted_runner_token.clone();
    for name in ["r-c", "r-a", "r-e", "r-b", "r-d"] {
        let r = t
            .post(
                "/api/v1/runner/register",
                &hosted,
                json!({"name": name, "version": "0.2.0"}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    }
    let pages = pages_of(&t, "/api/v1/orgs/default/runners", 2).await;
    assert_eq!(pages.len(), 3, "{pages:?}");
    assert!(pages.iter().all(|p| p.len() <= 2), "{pages:?}");
    let whole = t.get("/api/v1/orgs/default/runners", &t.admin).await;
    let all: Vec<String> = whole.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        pages.concat(),
        all,
        "the pages are the whole list, in order"
    );
    for name in ["r-a", "r-b", "r-c", "r-d", "r-e"] {
        assert_eq!(all.iter().filter(|n| *n == name).count(), 1, "{all:?}");
    }
    for bad in ["x", "12:", "nope:r-a"] {
        let r = t
            .get(
                &format!("/api/v1/orgs/default/runners?cursor={bad}"),
                &t.admin,
            )
            .await;
        if bad == "12:" {
            // A cursor of the list's form reads as a position, even one no runner has.
            assert_eq!(r.status, StatusCode::OK, "{bad}: {}", r.body);
            continue;
        }
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.body);
        assert_eq!(r.body["error"]["field"], "cursor", "{bad}");
    }
}
