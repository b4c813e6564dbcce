//! Hostile input at the API: plan and inventory YAML built to stall the parser (deep
//! nesting, alias chains, size) is refused with 400 `input_limit` naming the limit,
//! quickly, while `/healthz` keeps answering; a state serial the store cannot keep is
//! refused naming `serial`; and property tests over the webhook payload reader, lock
//! bodies and list cursors — any input, an answer in the 4xx class, never a panic or a 500.

use std::time::{Duration, Instant};

use bosun_core::Role;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::harness::{Reply, TestServer};

const LINT: &str = "/api/v1/orgs/default/plans/lint";
const PLANS: &str = "/api/v1/orgs/default/plans";
const INVENTORY: &str = "/api/v1/orgs/default/inventory";

/// A refusal is answered well within this in a debug build (measured: tens of ms); the
/// unbounded parse took 22–25 s.
const FAST: Duration = Duration::from_secs(2);

fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

/// The report's plan: `vars` holding 100,000 nested `[` … `]` (200 KB).
fn deep_plan() -> String {
    format!(
        "name: deep\nvars:\n  x: {}\nsteps:\n  - command: [\"true\"]\n",
        nested(100_000)
    )
}

fn deep_inventory() -> String {
    format!(
        "hosts:\n  web-1:\n    vars:\n      x: {}\n",
        nested(100_000)
    )
}

/// `levels` anchors, each a list of `fanout` aliases of the one before.
fn alias_bomb(levels: usize, fanout: usize) -> String {
    let mut text = String::from("name: laughs\nvars:\n  l0: &l0 [ha, ha]\n");
    for level in 1..levels {
        let refs = vec![format!("*l{}", level - 1); fanout].join(", ");
        text.push_str(&format!("  l{level}: &l{level} [{refs}]\n"));
    }
    text.push_str("steps:\n  - command: [\"true\"]\n");
    text
}

async fn timed_post(
    t: &TestServer,
    path: &str,
    token: &str,
    body: serde_json::Value,
) -> (Reply, Duration) {
    let started = Instant::now();
    let r = t.post(path, token, body).await;
    (r, started.elapsed())
}

fn assert_limit(r: &Reply, took: Duration, wanted: &str, what: &str) {
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{what}: {:?}", r.body);
    assert_eq!(r.code(), "input_limit", "{what}: {:?}", r.body);
    assert!(r.message().contains(wanted), "{what}: {:?}", r.body);
    assert!(took < FAST, "{what} answered in {took:?}");
    eprintln!("{what}: refused in {took:?}");
}

#[tokio::test]
async fn deeply_nested_yaml_is_refused_fast_naming_the_limit() {
    let t = TestServer::start().await;
    let viewer = t.user_token("vic", Some(Role::Viewer)).await;
    let depth = "nests deeper than the limit of 64 levels";

    // Any org viewer may lint.
    let (r, took) = timed_post(&t, LINT, &viewer, json!({"source": deep_plan()})).await;
    assert_limit(&r, took, depth, "lint");
    assert!(
        r.message().starts_with("source: plan.yaml:3:"),
        "{}",
        r.message()
    );

    let (r, took) = timed_post(
        &t,
        PLANS,
        &t.admin,
        json!({"source": deep_plan(), "file": "deep.yaml"}),
    )
    .await;
    assert_limit(&r, took, depth, "upload");
    assert!(r.message().contains("deep.yaml:3:"), "{}", r.message());
    assert_eq!(
        t.get(PLANS, &t.admin).await.body["items"],
        json!([]),
        "nothing stored"
    );

    let (r, took) = timed_post(&t, INVENTORY, &t.admin, json!({"source": deep_inventory()})).await;
    assert_limit(
        &r,
        took,
        "inventory nests deeper than the limit of 64 levels",
        "inventory import",
    );
    let hosts = t.get("/api/v1/orgs/default/hosts", &t.admin).await;
    assert_eq!(hosts.body["items"], json!([]), "nothing imported");

    // A plan just inside the limit still lints.
    let ok = format!(
        "name: ok\nvars:\n  x: {}\nsteps:\n  - command: [\"true\"]\n",
        nested(60)
    );
    let r = t.post(LINT, &viewer, json!({"source": ok})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
}

#[tokio::test]
async fn healthz_answers_while_hostile_plans_are_in_flight() {
    let t = TestServer::start().await;
    let viewer = t.user_token("vic", Some(Role::Viewer)).await;
    let body = json!({"source": deep_plan()});
    let hostile: Vec<_> = (0..4)
        .map(|_| {
            let (client, url, token, body) = (
                t.client.clone(),
                format!("{}{LINT}", t.url),
                viewer.clone(),
                body.clone(),
            );
            tokio::spawn(async move {
                let r = client
                    .post(url)
                    .bearer_auth(token)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                r.status()
            })
        })
        .collect();
    // Poll /healthz for as long as any hostile request is in flight (and at least a few
    // times): each answer must come quickly.
    let mut slowest = Duration::ZERO;
    let mut polls = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while polls < 5 || hostile.iter().any(|h| !h.is_finished()) {
        assert!(
            Instant::now() < deadline,
            "hostile requests still running after 30 s"
        );
        let started = Instant::now();
        let r = t
            .client
            .get(format!("{}/healthz", t.url))
            .send()
            .await
            .unwrap_or_else(|e| panic!("/healthz failed with hostile plans in flight: {e}"));
        assert_eq!(r.status(), StatusCode::OK);
        slowest = slowest.max(started.elapsed());
        polls += 1;
    }
    for h in hostile {
        assert_eq!(h.await.unwrap(), StatusCode::BAD_REQUEST);
    }
    eprintln!("/healthz: slowest of {polls} answers {slowest:?}");
    assert!(
        slowest < Duration::from_millis(500),
        "/healthz took {slowest:?}"
    );
}

#[tokio::test]
async fn alias_bombs_and_oversized_files_are_refused() {
    let t = TestServer::start_with(|c| c.max_body_bytes = 4 * 1024 * 1024).await;

    let (r, took) = timed_post(&t, PLANS, &t.admin, json!({"source": alias_bomb(9, 10)})).await;
    assert_limit(
        &r,
        took,
        "aliases expand to more than the limit of 100000 nodes",
        "alias bomb",
    );

    let own = "name: loop\nvars:\n  a: &a\n    b: *a\nsteps:\n  - command: [\"true\"]\n";
    let (r, took) = timed_post(&t, LINT, &t.admin, json!({"source": own})).await;
    assert_limit(
        &r,
        took,
        "alias *a is inside the node it names",
        "recursive alias",
    );

    // Anchors used as meant are fine.
    let shared = "name: shared\nvars:\n  base: &b {user: deploy, port: 22}\n  web: *b\n  db: *b\nsteps:\n  - command: [\"true\"]\n";
    let r = t.post(LINT, &t.admin, json!({"source": shared})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);

    let mut big = String::from("name: big\nsteps:\n");
    while big.len() <= 1024 * 1024 {
        big.push_str("  - command: [\"true\", \"a fairly long argument to make the file big\"]\n");
    }
    let (r, took) = timed_post(&t, PLANS, &t.admin, json!({"source": big})).await;
    assert_limit(&r, took, "over the limit of 1048576 bytes", "large plan");
    let inventory = format!(
        "hosts:\n  web:\n    vars:\n      pad: \"{}\"\n",
        "x".repeat(1024 * 1024)
    );
    let (r, took) = timed_post(&t, INVENTORY, &t.admin, json!({"source": inventory})).await;
    assert_limit(&r, took, "the inventory is", "large inventory");
}

#[tokio::test]
async fn state_serials_the_store_cannot_keep_are_refused_naming_serial() {
    let t = TestServer::start().await;
    let r = t
        .create_stack(json!({"id": "net", "repository": "github:acme/infra"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let path = "/api/v1/orgs/default/stacks/net/state";
    let doc = |serial: &str| {
        format!(
            r#"{{"version":4,"serial":{serial},"lineage":"l-1","outputs":{{}},"resources":[]}}"#
        )
        .into_bytes()
    };
    for serial in [
        "9223372036854775808",
        "18446744073709551615",
        "18446744073709551616",
        "1e30",
    ] {
        let r = t
            .raw(
                Method::POST,
                path,
                &t.admin,
                Some("application/json"),
                doc(serial),
            )
            .await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "serial {serial}: {:?}",
            r.body
        );
        assert_eq!(r.code(), "invalid_state", "serial {serial}");
        assert!(
            r.message().contains("\"serial\""),
            "serial {serial}: {}",
            r.message()
        );
    }
    // The largest the store keeps is stored.
    let r = t
        .raw(
            Method::POST,
            path,
            &t.admin,
            Some("application/json"),
            doc("9223372036854775807"),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        r.body["serial"],
        json!(9223372036854775807u64),
        "{:?}",
        r.body
    );
}

// ---- Property tests: any input answered in the 4xx class ----

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

const EVENTS: &[&str] = &[
    "push",
    "ping",
    "pull_request",
    "create",
    "delete",
    "installation",
    "",
    "nope",
];

/// JSON-ish pieces: payloads that get past the first brace and into the typed reading.
const JSON_PIECES: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"ref\"",
    "\"refs/heads/main\"",
    "\"repository\"",
    "{\"full_name\":\"acme/infra\"}",
    "\"full_name\"",
    "\"acme/infra\"",
    "\"a/b/c\"",
    "\"\"",
    "\"before\"",
    "\"after\"",
    "\"0000000000000000000000000000000000000000\"",
    "\"commits\"",
    "\"added\"",
    "\"deleted\"",
    "true",
    "null",
    "1e400",
    "-1",
    "\"\\u0000\"",
    "\"é\"",
];

proptest! {
    #![proptest_config(config(512))]

    /// A verified delivery's body, read as the server reads it: an answer or a 4xx
    /// error, never a panic, quickly.
    #[test]
    fn webhook_payloads_never_panic(
        event in prop::sample::select(EVENTS),
        body in prop_oneof![
            prop::collection::vec(prop::sample::select(JSON_PIECES), 0..40).prop_map(|p| p.concat().into_bytes()),
            prop::collection::vec(any::<u8>(), 0..200),
        ],
    ) {
        let started = Instant::now();
        let result = bosun_server::vcs::webhook::inspect(event, &body);
        prop_assert!(started.elapsed() < FAST);
        match result {
            Ok(line) => prop_assert!(!line.is_empty()),
            Err(e) => prop_assert!(e.status().is_client_error(), "{} for {:?}", e, String::from_utf8_lossy(&body)),
        }
    }
}

/// Lock bodies and list cursors through the real server: any text gets a 2xx, 4xx or
/// 423 — never a 500.
#[tokio::test]
async fn lock_bodies_and_cursors_are_answered_without_a_server_error() {
    let t = TestServer::start().await;
    let r = t
        .create_stack(json!({"id": "net", "repository": "github:acme/infra"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let lock = Method::from_bytes(b"LOCK").unwrap();
    let unlock = Method::from_bytes(b"UNLOCK").unwrap();
    let state = "/api/v1/orgs/default/stacks/net/state";

    let lock_pieces = prop::collection::vec(
        prop::sample::select(
            &[
                "{",
                "}",
                "\"ID\"",
                ":",
                ",",
                "\"l-1\"",
                "\"\"",
                "\"Who\"",
                "\"me\"",
                "\"Operation\"",
                "\"Info\"",
                "null",
                "1",
                "[",
                "]",
                "\"Created\"",
                "\"2026-01-01T00:00:00Z\"",
                "\"x\"",
            ][..],
        ),
        0..24,
    )
    .prop_map(|p| p.concat());
    let cursors = prop_oneof![
        "[a-z0-9_-]{0,40}",
        ".{0,40}",
        Just("%00".to_string()),
        Just("../../x".to_string()),
    ];

    let mut runner = proptest::test_runner::TestRunner::new(config(48));
    let mut cases = Vec::new();
    for _ in 0..48 {
        let body = lock_pieces.new_tree(&mut runner).unwrap().current();
        let cursor = cursors.new_tree(&mut runner).unwrap().current();
        cases.push((body, cursor));
    }
    for (body, cursor) in cases {
        for method in [&lock, &unlock] {
            let started = Instant::now();
            let r = t
                .client
                .request(method.clone(), format!("{}{state}", t.url))
                .bearer_auth(&t.admin)
                .body(body.clone())
                .send()
                .await
                .unwrap();
            let status = r.status();
            assert!(started.elapsed() < FAST);
            assert!(
                status.is_success() || status.is_client_error(),
                "{method} {body:?}: {status} {}",
                r.text().await.unwrap_or_default()
            );
        }
        let encoded: String = url_escape(&cursor);
        for list in [
            "/api/v1/orgs/default/stacks/net/runs",
            "/api/v1/orgs/default/audit",
        ] {
            let r = t
                .client
                .get(format!("{}{list}?cursor={encoded}&limit=5", t.url))
                .bearer_auth(&t.admin)
                .send()
                .await
                .unwrap();
            let status = r.status();
            assert!(
                status.is_success() || status.is_client_error(),
                "{list} cursor {cursor:?}: {status} {}",
                r.text().await.unwrap_or_default()
            );
        }
    }
}

/// Percent-encodes every byte outside the unreserved set.
fn url_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
