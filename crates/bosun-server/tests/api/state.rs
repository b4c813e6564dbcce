//! The state backend at the HTTP level: every status code of the protocol, the 423 body
//! OpenTofu's `-lock-timeout` retries on, force-unlock rules, versions and run tokens.

use base64::Engine as _;
use bosun_core::Role;
use bosun_server::service::tokens::mint_run_token;
use md5::{Digest, Md5};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::harness::{Reply, TestServer};

const NET: &str = "/api/v1/orgs/default/stacks/net/state";

fn m(name: &str) -> Method {
    Method::from_bytes(name.as_bytes()).unwrap()
}

fn doc(serial: u64, lineage: &str) -> Value {
    json!({
        "version": 4,
        "terraform_version": "1.0.3",
        "serial": serial,
        "lineage": lineage,
        "outputs": {
            "region": {"value": "eu-west-1", "type": "string"},
            "password": {"value": "hunter2", "type": "string", "sensitive": true}
        },
        "resources": []
    })
}

fn lock_info(id: &str, who: &str) -> Value {
    json!({
        "ID": id,
        "Operation": "OperationTypeApply",
        "Info": "",
        "Who": who,
        "Version": "1.0.3",
        "Created": "2026-11-30T10:00:00.000000Z",
        "Path": ""
    })
}

async fn setup() -> TestServer {
    let t = TestServer::start_with(|c| c.max_state_bytes = 64 * 1024).await;
    for id in ["net", "app", "db"] {
        let r = t
            .create_stack(json!({"id": id, "repository": "github:acme/infra"}))
            .await;
        assert_eq!(r.status, StatusCode::CREATED);
    }
    t
}

async fn post_state(t: &TestServer, token: &str, query: &str, body: &Value) -> Reply {
    t.call(
        Method::POST,
        &format!("{NET}{query}"),
        Some(token),
        Some(body.clone()),
    )
    .await
}

#[tokio::test]
async fn read_write_and_validate() {
    let t = setup().await;
    let r = t.get(NET, &t.admin).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "no state yet");
    let r = t
        .get("/api/v1/orgs/default/stacks/ghost/state", &t.admin)
        .await;
    assert_eq!((r.status, r.code()), (StatusCode::NOT_FOUND, "not_found"));

    let r = post_state(&t, &t.admin, "", &doc(1, "L")).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        (r.body["version"].as_i64(), r.body["serial"].as_u64()),
        (Some(1), Some(1))
    );
    let r = t.get(NET, &t.admin).await;
    assert_eq!((r.status, &r.body), (StatusCode::OK, &doc(1, "L")));

    // Bad documents are refused with the reason, and store nothing.
    for (body, says) in [
        (json!([1]), "JSON object"),
        (json!({"version": 4, "lineage": "L"}), "serial"),
        (json!({"version": 4, "serial": 2}), "lineage"),
        (json!({"serial": 2, "lineage": "L"}), "version"),
    ] {
        let r = post_state(&t, &t.admin, "", &body).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, "invalid_state"),
            "{body}"
        );
        assert!(r.message().contains(says), "{}", r.message());
    }
    let r = t
        .raw(
            Method::POST,
            NET,
            &t.admin,
            Some("application/json"),
            b"{not json".to_vec(),
        )
        .await;
    assert_eq!(r.code(), "invalid_state");

    // Content-MD5 is checked when sent.
    let body = doc(2, "L").to_string().into_bytes();
    let good = base64::engine::general_purpose::STANDARD.encode(Md5::digest(&body));
    let send = |md5: &str| {
        t.client
            .post(format!("{}{NET}", t.url))
            .bearer_auth(&t.admin)
            .header("Content-MD5", md5)
            .body(body.clone())
            .send()
    };
    let bad = send("AAAAAAAAAAAAAAAAAAAAAA==").await.unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    assert!(bad.text().await.unwrap().contains("checksum_mismatch"));
    assert_eq!(send(&good).await.unwrap().status(), StatusCode::OK);

    // Oversized documents: 413 naming the limit.
    let mut big = doc(3, "L");
    big["padding"] = json!("x".repeat(70 * 1024));
    let r = post_state(&t, &t.admin, "", &big).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
    );
    assert!(r.message().contains("65536"), "{}", r.message());

    // Serial and lineage guards; an admin may force, an operator may not.
    let r = post_state(&t, &t.admin, "", &doc(1, "L")).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "serial_backwards")
    );
    let r = post_state(&t, &t.admin, "", &doc(9, "OTHER")).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "lineage_changed")
    );
    let op = t.user_token("op", Some(Role::Operator)).await;
    let r = post_state(&t, &op, "?force=true", &doc(1, "L")).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = post_state(&t, &t.admin, "?force=true", &doc(1, "L")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["forced"], true);
    let log = t.get("/api/v1/orgs/default/audit", &t.admin).await;
    assert_eq!(log.body["items"][0]["action"], "state.force_write");
    let r = post_state(&t, &t.admin, "?bogus=1", &doc(5, "L")).await;
    assert_eq!(r.code(), "invalid_query");

    let versions = t.get(&format!("{NET}/versions"), &t.admin).await;
    let serials: Vec<u64> = versions.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["serial"].as_u64().unwrap())
        .collect();
    assert_eq!(
        serials,
        [1, 2, 1],
        "refused writes stored nothing; newest first"
    );

    // A stack with state is not deleted by accident: the state goes only when asked.
    let r = t
        .call(
            Method::DELETE,
            "/api/v1/orgs/default/stacks/net",
            Some(&t.admin),
            None,
        )
        .await;
    assert_eq!((r.status, r.code()), (StatusCode::CONFLICT, "has_state"));
    assert!(r.message().contains("3 state version"), "{}", r.message());
    assert_eq!(
        t.get(NET, &t.admin).await.status,
        StatusCode::OK,
        "nothing was lost"
    );
    let r = t
        .call(
            Method::DELETE,
            "/api/v1/orgs/default/stacks/net?delete_state=true",
            Some(&t.admin),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(t.get(NET, &t.admin).await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn lock_protocol_status_codes() {
    let t = setup().await;
    let alice = t.user_token("alice", Some(Role::Operator)).await;
    let bob = t.user_token("bob", Some(Role::Operator)).await;
    post_state(&t, &alice, "", &doc(1, "L")).await;

    let r = t
        .call(
            m("LOCK"),
            NET,
            Some(&alice),
            Some(lock_info("A-1", "alice@laptop")),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    // Same holder, same id: idempotent.
    let r = t
        .call(
            m("LOCK"),
            NET,
            Some(&alice),
            Some(lock_info("A-1", "alice@laptop")),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);

    // Another writer gets 423 with the holder's lock info as the body — a non-empty
    // ID, which is what OpenTofu's -lock-timeout needs to retry.
    let r = t
        .call(m("LOCK"), NET, Some(&bob), Some(lock_info("B-1", "bob@ci")))
        .await;
    assert_eq!(r.status, StatusCode::LOCKED);
    assert_eq!(r.body, lock_info("A-1", "alice@laptop"));

    // Writes: only the holder with its ID.
    let r = post_state(&t, &bob, "", &doc(2, "L")).await;
    assert_eq!(
        (r.status, &r.body["ID"]),
        (StatusCode::LOCKED, &json!("A-1"))
    );
    let r = post_state(&t, &bob, "?ID=B-1", &doc(2, "L")).await;
    assert_eq!(r.status, StatusCode::LOCKED);
    let r = post_state(&t, &alice, "?ID=A-1", &doc(2, "L")).await;
    assert_eq!(r.status, StatusCode::OK);

    // UNLOCK with a mismatching ID: 409 with the holder.
    let r = t
        .call(
            m("UNLOCK"),
            NET,
            Some(&alice),
            Some(lock_info("nope", "alice@laptop")),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert_eq!(r.body["ID"], "A-1");
    // The lock is shown with holder, operation and age.
    let l = t.get(&format!("{NET}/lock"), &bob).await;
    assert_eq!(l.body["locked"], true);
    assert_eq!(
        l.body["lock"]["holder"],
        json!({"kind": "user", "id": "alice", "status": "person"})
    );
    assert_eq!(l.body["lock"]["operation"], "OperationTypeApply");
    assert!(l.body["lock"]["age_seconds"].as_i64().unwrap() >= 0);
    // The holder's own UNLOCK: 200, not a force, not audited.
    let before = t.audit_total().await;
    let r = t
        .call(
            m("UNLOCK"),
            NET,
            Some(&alice),
            Some(lock_info("A-1", "alice@laptop")),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(t.audit_total().await, before);
    // A stale ID after the lock is gone is refused for writes.
    let r = post_state(&t, &alice, "?ID=A-1", &doc(3, "L")).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "lock_not_held")
    );
    let r = t.call(m("PUT"), NET, Some(&alice), Some(json!({}))).await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    let r = t
        .call(m("LOCK"), NET, Some(&alice), Some(json!({"ID": ""})))
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, "invalid_lock")
    );
}

#[tokio::test]
async fn force_unlock_rules() {
    let t = setup().await;
    let alice = t.user_token("alice", Some(Role::Operator)).await;
    let viewer = t.user_token("val", Some(Role::Viewer)).await;
    let (run, _) = mint_run_token(
        t.server.state(),
        "default",
        "run-1",
        "net",
        chrono::Duration::minutes(5),
        &[],
    )
    .await
    .unwrap();
    let r = t
        .call(
            m("LOCK"),
            NET,
            Some(&alice),
            Some(lock_info("A-1", "alice@laptop")),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);

    // An empty UNLOCK body (terraform force-unlock) is a force: never for run tokens or
    // viewers.
    for token in [&run, &viewer] {
        let r = t.raw(m("UNLOCK"), NET, token, None, Vec::new()).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    }
    // A run token naming someone else's lock is a force too, and refused.
    let r = t
        .call(m("UNLOCK"), NET, Some(&run), Some(lock_info("A-1", "x")))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);

    // The API's force-unlock wants the exact ID; a mismatch names the holder.
    let fu = format!("{NET}/force-unlock");
    let r = t.post(&fu, &t.admin, json!({"lock_id": "wrong"})).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "lock_mismatch")
    );
    assert!(
        r.message().contains("alice@laptop") && r.message().contains("A-1"),
        "{}",
        r.message()
    );
    let r = t.post(&fu, &t.admin, json!({"lock_id": "A-1"})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["holder"]["id"], "alice");
    let r = t.post(&fu, &t.admin, json!({"lock_id": "A-1"})).await;
    assert_eq!((r.status, r.code()), (StatusCode::CONFLICT, "not_locked"));

    // The empty-body force from an operator works and is audited with what it released.
    t.call(
        m("LOCK"),
        NET,
        Some(&alice),
        Some(lock_info("A-2", "alice@laptop")),
    )
    .await;
    let bob = t.user_token("bob", Some(Role::Operator)).await;
    let r = t.raw(m("UNLOCK"), NET, &bob, None, Vec::new()).await;
    assert_eq!(r.status, StatusCode::OK);
    let log = t.get("/api/v1/orgs/default/audit", &t.admin).await;
    let forced: Vec<&Value> = log.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "state.force_unlock")
        .collect();
    assert_eq!(forced.len(), 2);
    assert_eq!(forced[0]["actor"], "user:bob");
    assert_eq!(forced[0]["detail"]["released"]["lock_id"], "A-2");
    assert_eq!(forced[0]["detail"]["released"]["who"], "alice@laptop");
    assert_eq!(forced[1]["detail"]["released"]["lock_id"], "A-1");
    assert!(
        !t.get(&format!("{NET}/lock"), &t.admin).await.body["locked"]
            .as_bool()
            .unwrap()
    );
}

#[tokio::test]
async fn run_tokens_are_scoped_to_their_stack_and_grants() {
    let t = setup().await;
    post_state(&t, &t.admin, "", &doc(1, "L")).await;
    let state = t.server.state();
    let (app_run, rec) = mint_run_token(
        state,
        "default",
        "run-app",
        "app",
        chrono::Duration::minutes(5),
        &["net".to_string()],
    )
    .await
    .unwrap();
    let (db_run, _) = mint_run_token(
        state,
        "default",
        "run-db",
        "db",
        chrono::Duration::minutes(5),
        &[],
    )
    .await
    .unwrap();
    // Granted upstream: read only.
    assert_eq!(t.get(NET, &app_run).await.status, StatusCode::OK);
    assert_eq!(
        post_state(&t, &app_run, "", &doc(2, "L")).await.status,
        StatusCode::FORBIDDEN
    );
    let r = t
        .call(m("LOCK"), NET, Some(&app_run), Some(lock_info("R", "run")))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // Not granted: no read either, and the refusal says why.
    let r = t.get(NET, &db_run).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(
        r.message().contains("without a dependency grant"),
        "{}",
        r.message()
    );
    // Its own stack: read, write, lock, unlock.
    let app = "/api/v1/orgs/default/stacks/app/state";
    let r = t
        .call(
            m("LOCK"),
            app,
            Some(&app_run),
            Some(lock_info("R-1", "runner")),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = t
        .call(
            Method::POST,
            &format!("{app}?ID=R-1"),
            Some(&app_run),
            Some(doc(1, "APP")),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["writer"], json!({"kind": "run", "id": "run-app"}));
    // While the run lives, its lock shows a live run; once its token is revoked (the run
    // ended), a dead one.
    let l = t.get(&format!("{app}/lock"), &t.admin).await;
    assert_eq!(l.body["lock"]["holder"]["status"], "live_run");
    state.store.revoke_token(&rec.id, None).await.unwrap();
    let l = t.get(&format!("{app}/lock"), &t.admin).await;
    assert_eq!(l.body["lock"]["holder"]["status"], "dead_run");
    assert_eq!(t.get(app, &app_run).await.status, StatusCode::UNAUTHORIZED);
    // Basic auth with the token as the password, as Terraform sends it.
    let r = t
        .client
        .get(format!("{}{NET}", t.url))
        .basic_auth("bosun", Some(&t.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test]
async fn versions_api_redacts_sensitive_outputs() {
    let t = setup().await;
    for serial in 1..=3 {
        assert_eq!(
            post_state(&t, &t.admin, "", &doc(serial, "L")).await.status,
            StatusCode::OK
        );
    }
    let page = t.get(&format!("{NET}/versions?limit=2"), &t.admin).await;
    let items = page.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(items[0]["current"], true);
    assert_eq!(items[1]["current"], false);
    assert_eq!(
        items[0]["outputs"]["region"],
        json!({"value": "eu-west-1", "sensitive": false})
    );
    assert_eq!(
        items[0]["outputs"]["password"],
        json!({"value": null, "sensitive": true})
    );
    assert!(!page.body.to_string().contains("hunter2"));
    assert_eq!(items[0]["checksum"].as_str().unwrap().len(), 64);
    assert_eq!(items[0]["writer"], json!({"kind": "user", "id": "admin"}));
    let cursor = page.body["next_cursor"].as_str().unwrap();
    let rest = t
        .get(&format!("{NET}/versions?limit=2&cursor={cursor}"), &t.admin)
        .await;
    assert_eq!(rest.body["items"][0]["version"], 1);
    let one = t.get(&format!("{NET}/versions/1"), &t.admin).await;
    assert_eq!(one.body["state"], doc(1, "L"));
    assert_eq!(one.body["version"], 1);
    let r = t.get(&format!("{NET}/versions/99"), &t.admin).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}
