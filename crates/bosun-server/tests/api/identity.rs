//! Run identity and secrets at the HTTP level, with the test acting as the runner: the
//! secret store's API, references kept inside the org, the ID-token request endpoint and
//! its claims, request tokens that die with their phase, key rotation with overlap,
//! integrations resolved in order (a failure fails the run in `preparing`), and the
//! secrets key at start (missing, wrong, rotated).

use base64::Engine as _;
use bosun_core::Role;
use bosun_server::{ConfigOverrides, FileConfig, RunningServer, ServerConfig};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::harness::{TestServer, BOOTSTRAP};
use crate::runs::Runner;

async fn put_secret(
    t: &TestServer,
    token: &str,
    org: &str,
    name: &str,
    value: &str,
) -> crate::harness::Reply {
    t.call(
        Method::PUT,
        &format!("/api/v1/orgs/{org}/secrets/{name}"),
        Some(token),
        Some(json!({"value": value})),
    )
    .await
}

/// The claims of a JWT, read without verifying it (the PyJWT end-to-end test verifies).
fn claims(jwt: &str) -> Value {
    let payload = jwt.split('.').nth(1).unwrap();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

fn kid(jwt: &str) -> String {
    let header = jwt.split('.').next().unwrap();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header)
        .unwrap();
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    v["kid"].as_str().unwrap().to_string()
}

async fn id_token(t: &TestServer, lease: &Value, audience: Option<&str>) -> (StatusCode, Value) {
    let mut url = lease["id_token_request_url"].as_str().unwrap().to_string();
    if let Some(a) = audience {
        url = format!("{url}?audience={a}");
    }
    let resp = t
        .client
        .get(url)
        .bearer_auth(lease["id_token_request_token"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn stack(t: &TestServer, body: Value) {
    let r = t.create_stack(body).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
}

async fn trigger(t: &TestServer, stack: &str) -> String {
    let r = t
        .post(
            &format!("/api/v1/orgs/default/stacks/{stack}/runs"),
            &t.admin,
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    r.body["id"].as_str().unwrap().to_string()
}

async fn run(t: &TestServer, id: &str) -> Value {
    t.get(&format!("/api/v1/orgs/default/runs/{id}"), &t.admin)
        .await
        .body
}

async fn logs(t: &TestServer, id: &str) -> String {
    let r = t
        .get(&format!("/api/v1/orgs/default/runs/{id}/logs"), &t.admin)
        .await;
    r.body
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn secrets_are_set_listed_without_values_and_kept_inside_their_org() {
    let t = TestServer::start().await;
    let operator = t.user_token("olive", Some(Role::Operator)).await;
    let r = put_secret(
        &t,
        &t.admin,
        "default",
        "db/password",
        "hunter2-very-secret",
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["reference"], "secret://db/password");
    assert!(!r.body.to_string().contains("hunter2"));
    // Operators list names; they may not set.
    let list = t.get("/api/v1/orgs/default/secrets", &operator).await;
    assert_eq!(list.status, StatusCode::OK);
    assert_eq!(list.body["items"][0]["key"], "password");
    assert!(!list.body.to_string().contains("hunter2"));
    let r = put_secret(&t, &operator, "default", "db/other", "x").await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // Bad names and values are refused, naming the problem.
    let r = put_secret(&t, &t.admin, "default", "DB/x", "v").await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, "validation_failed"),
        "{:?}",
        r.body
    );
    let r = put_secret(&t, &t.admin, "default", "db/empty", "").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);

    // Namespaces are per org: beta has a `db` namespace of its own, and its stacks'
    // references name it.
    let r = t
        .post("/api/v1/orgs", &t.admin, json!({"id": "beta"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let r = put_secret(&t, &t.admin, "beta", "db/password", "theirs").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = t
        .post(
            "/api/v1/orgs/beta/stacks",
            &t.admin,
            json!({"id": "app", "repository": "file:///srv/git/x", "variables": {"TF_VAR_pw": "secret://db/password"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);

    // The audit log records the change, never the value.
    let audit = t.get("/api/v1/orgs/default/audit", &t.admin).await;
    assert!(audit.body.to_string().contains("secret.set"));
    assert!(!audit.body.to_string().contains("hunter2"));

    let r = t
        .call(
            Method::DELETE,
            "/api/v1/orgs/default/secrets/db/password",
            Some(&t.admin),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = t
        .call(
            Method::DELETE,
            "/api/v1/orgs/default/secrets/db/password",
            Some(&t.admin),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_phase_gets_identity_tokens_for_itself_only_and_they_die_with_the_phase() {
    let t = TestServer::start().await;
    stack(
        &t,
        json!({"id": "net", "name": "Network", "repository": "file:///srv/git/infra"}),
    )
    .await;
    let id = trigger(&t, "net").await;
    let runner = Runner::register(&t, "r1").await;
    let plan = runner.lease(5).await.expect("a lease");
    assert!(plan["id_token_request_url"]
        .as_str()
        .unwrap()
        .ends_with("/oidc/token"));

    // The stack is renamed: identity follows the id.
    let r = t
        .call(
            Method::PATCH,
            "/api/v1/orgs/default/stacks/net",
            Some(&t.admin),
            Some(json!({"name": "Renamed"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let (status, body) = id_token(&t, &plan, Some("sts.amazonaws.com")).await;
    assert_eq!(status, StatusCode::OK, "{body:?}");
    let c = claims(body["value"].as_str().unwrap());
    assert_eq!(c["sub"], "org:default:stack:net:run_phase:plan");
    assert_eq!(c["aud"], "sts.amazonaws.com");
    assert_eq!(c["iss"], t.url.as_str());
    assert_eq!(c["exp"].as_i64().unwrap() - c["iat"].as_i64().unwrap(), 600);
    assert_eq!(body["expires_at"], c["exp"]);
    assert_eq!(c["nbf"], c["iat"]);
    assert_eq!(
        (
            c["run_id"].as_str(),
            c["run_kind"].as_str(),
            c["trigger"].as_str()
        ),
        (Some(id.as_str()), Some("tracked"), Some("manual"))
    );
    assert_eq!(c["repository"], "file:///srv/git/infra");
    assert_eq!(c["branch"], "main");
    assert!(c["jti"].as_str().is_some_and(|j| j.len() >= 16));
    let (_, again) = id_token(&t, &plan, Some("sts.amazonaws.com")).await;
    assert_ne!(
        claims(again["value"].as_str().unwrap())["jti"],
        c["jti"],
        "each token its own jti"
    );

    // The audience is required; a made-up request token is refused.
    let (status, body) = id_token(&t, &plan, None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body:?}");
    let mut forged = plan.clone();
    forged["id_token_request_token"] = json!("bosun_idr_00");
    assert_eq!(
        id_token(&t, &forged, Some("x")).await.0,
        StatusCode::UNAUTHORIZED
    );

    // The plan phase ends: its request token is dead, and the apply phase's token names apply.
    let f = plan["fencing"].clone();
    runner
        .call(
            &format!("{id}/report"),
            json!({"fencing": f, "event": "started", "commit": "abcdef0"}),
        )
        .await;
    runner
        .call(
            &format!("{id}/report"),
            json!({"fencing": f, "event": "planned", "summary": {"has_changes": true, "add": 1, "change": 0, "destroy": 0, "resource_changes": [], "output_changes": {}}}),
        )
        .await;
    assert_eq!(run(&t, &id).await["state"], "unconfirmed");
    assert_eq!(
        id_token(&t, &plan, Some("x")).await.0,
        StatusCode::UNAUTHORIZED
    );
    t.post(
        &format!("/api/v1/orgs/default/runs/{id}/confirm"),
        &t.admin,
        json!({}),
    )
    .await;
    let apply = runner.lease(5).await.expect("the apply lease");
    let (status, body) = id_token(&t, &apply, Some("x")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        claims(body["value"].as_str().unwrap())["sub"],
        "org:default:stack:net:run_phase:apply"
    );
    assert_eq!(claims(body["value"].as_str().unwrap())["commit"], "abcdef0");
    // The plan's token still cannot mint anything, apply included.
    assert_eq!(
        id_token(&t, &plan, Some("x")).await.0,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn rotation_keeps_the_old_key_published_while_its_tokens_live() {
    let t = TestServer::start().await;
    stack(
        &t,
        json!({"id": "net", "repository": "file:///srv/git/infra"}),
    )
    .await;
    trigger(&t, "net").await;
    let runner = Runner::register(&t, "r1").await;
    let lease = runner.lease(5).await.unwrap();
    let (_, before) = id_token(&t, &lease, Some("a")).await;
    let old_kid = kid(before["value"].as_str().unwrap());

    let viewer = t.user_token("vic", Some(Role::Admin)).await;
    let r = t.post("/api/v1/oidc/rotate", &viewer, json!({})).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "server admins only");
    let r = t.post("/api/v1/oidc/rotate", &t.admin, json!({})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let new_kid = r.body["active"].as_str().unwrap().to_string();
    assert_ne!(new_kid, old_kid);

    let jwks: Value = t
        .client
        .get(format!("{}/.well-known/jwks.json", t.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let kids: Vec<&str> = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap())
        .collect();
    assert!(
        kids.contains(&old_kid.as_str()) && kids.contains(&new_kid.as_str()),
        "{kids:?}"
    );
    let (_, after) = id_token(&t, &lease, Some("a")).await;
    assert_eq!(kid(after["value"].as_str().unwrap()), new_kid);

    let disco: Value = t
        .client
        .get(format!("{}/.well-known/openid-configuration", t.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(disco["issuer"], t.url.as_str());
    assert_eq!(
        disco["jwks_uri"],
        format!("{}/.well-known/jwks.json", t.url)
    );
}

#[tokio::test]
async fn integrations_resolve_in_order_and_a_failure_fails_the_run_before_any_engine() {
    let t = TestServer::start().await;
    put_secret(&t, &t.admin, "default", "db/password", "s3cr3t-value-42").await;
    stack(
        &t,
        json!({"id": "ok", "repository": "file:///srv/git/infra",
               "variables": {"TF_VAR_db": "secret://db/password", "TF_VAR_plain": "p"},
               "aws": {"plan_role_arn": "arn:aws:iam::123456789012:role/plan", "apply_role_arn": "arn:aws:iam::123456789012:role/apply"}}),
    )
    .await;
    let id = trigger(&t, "ok").await;
    let runner = Runner::register(&t, "r1").await;
    let lease = runner.lease(5).await.unwrap();
    assert_eq!(lease["env"]["TF_VAR_db"], "s3cr3t-value-42");
    assert_eq!(lease["env"]["TF_VAR_plain"], "p");
    assert_eq!(lease["mask"], json!(["s3cr3t-value-42"]));
    assert_eq!(
        lease["integrations"],
        json!([{"kind": "aws_web_identity", "name": "aws (plan role)", "role_arn": "arn:aws:iam::123456789012:role/plan",
                "audience": "sts.amazonaws.com", "session_name": format!("bosun-{id}")}])
    );
    let log = logs(&t, &id).await;
    assert_eq!(
        log,
        "bosun: integration identity: ok\nbosun: integration aws (plan role): the runner writes the web identity token file\nbosun: integration secrets (built-in store): ok\nbosun: integration variables: ok\n"
    );
    assert!(!log.contains("s3cr3t"));

    // A reference that does not resolve: the run fails in preparing, every time the
    // same way, and is never handed to a runner.
    stack(
        &t,
        json!({"id": "broken", "repository": "file:///srv/git/infra",
               "variables": {"TF_VAR_db": "secret://db/missing"},
               "aws": {"plan_role_arn": "arn:aws:iam::123456789012:role/plan"}}),
    )
    .await;
    let mut seen: Option<(String, String)> = None;
    for _ in 0..100 {
        let id = trigger(&t, "broken").await;
        assert!(
            runner.lease(0).await.is_none(),
            "a run that cannot prepare is never leased"
        );
        let r = run(&t, &id).await;
        assert_eq!(r["state"], "failed");
        let phases: Vec<&str> = r["phases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["state"].as_str().unwrap())
            .collect();
        assert_eq!(
            phases,
            ["queued", "preparing"],
            "failed while preparing: {r:?}"
        );
        let got = (
            r["reason"].as_str().unwrap().to_string(),
            logs(&t, &id).await,
        );
        match &seen {
            None => seen = Some(got),
            Some(first) => assert_eq!(&got, first, "the same order and failure every time"),
        }
    }
    let (reason, log) = seen.unwrap();
    assert_eq!(reason, "integration secrets (built-in store) failed: variable TF_VAR_db: secret://db/missing does not exist");
    assert!(
        log.starts_with("bosun: integration identity: ok\nbosun: integration aws (plan role)"),
        "{log}"
    );
}

async fn start_on(
    dir: &std::path::Path,
    tweak: impl FnOnce(&mut ServerConfig),
) -> Result<RunningServer, bosun_server::StartError> {
    let mut config = ServerConfig::merge(
        ConfigOverrides {
            listen: Some("127.0.0.1:0".parse().unwrap()),
            data_dir: Some(dir.to_path_buf()),
            bootstrap_token: Some(BOOTSTRAP.into()),
            ..Default::default()
        },
        FileConfig::default(),
    )
    .unwrap();
    tweak(&mut config);
    RunningServer::start(config).await
}

#[tokio::test]
async fn the_secrets_key_is_required_once_secrets_exist_and_rotation_re_seals() {
    use bosun_server::config::Secret;
    use bosun_server::secrets::seal::KeySource;
    let dir = tempfile::tempdir().unwrap();
    let key = |b: u8| {
        KeySource::Value(Secret(
            base64::engine::general_purpose::STANDARD.encode([b; 32]),
        ))
    };
    let client = reqwest::Client::new();
    let server = start_on(dir.path(), |c| c.secrets.key = Some(key(1)))
        .await
        .unwrap();
    let url = format!("http://{}", server.local_addr);
    let r = client
        .put(format!("{url}/api/v1/orgs/default/secrets/db/password"))
        .bearer_auth(BOOTSTRAP)
        .json(&json!({"value": "rotate-me"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    server.shutdown().await.unwrap();
    // The database file never holds the value in the clear.
    let db = std::fs::read(dir.path().join("bosun.db")).unwrap();
    assert!(!db.windows(9).any(|w| w == b"rotate-me"));

    // No key, or the wrong key: refused, saying what to do.
    let e = start_on(dir.path(), |_| {})
        .await
        .err()
        .expect("no key: refused");
    assert!(
        e.to_string().contains("no secrets key is configured"),
        "{e}"
    );
    let e = start_on(dir.path(), |c| c.secrets.key = Some(key(2)))
        .await
        .err()
        .expect("wrong key: refused");
    assert!(e.to_string().contains("--secrets-previous-key-file"), "{e}");

    // Rotation: the new key with the old one as previous re-seals everything.
    let server = start_on(dir.path(), |c| {
        c.secrets.key = Some(key(2));
        c.secrets.previous_key = Some(key(1));
    })
    .await
    .unwrap();
    server.shutdown().await.unwrap();
    let server = start_on(dir.path(), |c| c.secrets.key = Some(key(2)))
        .await
        .expect("the new key alone now opens everything");
    server.shutdown().await.unwrap();
    let e = start_on(dir.path(), |c| c.secrets.key = Some(key(1)))
        .await
        .err()
        .expect("the old key no longer does");
    assert!(e.to_string().contains("sealed with secrets key"), "{e}");
}

#[tokio::test]
async fn the_signing_key_rotates_on_schedule() {
    let t =
        TestServer::start_with(|c| c.oidc.rotate_every = std::time::Duration::from_secs(1)).await;
    let jwks = || async {
        let v: Value = t
            .client
            .get(format!("{}/.well-known/jwks.json", t.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["kid"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let first = jwks().await;
    assert_eq!(first.len(), 1);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let now = jwks().await;
        if now.len() >= 2 {
            assert!(
                now.contains(&first[0]),
                "the retired key stays published: {now:?}"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no scheduled rotation"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_reference_the_org_does_not_have_fails_the_run_whoever_else_has_it() {
    let t = TestServer::start().await;
    let r = t
        .post("/api/v1/orgs", &t.admin, json!({"id": "beta"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    // Beta refers to `shared/key`, which only org default has: beta's run does not see it.
    let r = t
        .post(
            "/api/v1/orgs/beta/stacks",
            &t.admin,
            json!({"id": "app", "repository": "file:///srv/git/x", "variables": {"TF_VAR_k": "secret://shared/key"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let r = put_secret(&t, &t.admin, "default", "shared/key", "not-for-beta").await;
    assert_eq!(r.status, StatusCode::OK);
    let r = t
        .post("/api/v1/orgs/beta/stacks/app/runs", &t.admin, json!({}))
        .await;
    let id = r.body["id"].as_str().unwrap().to_string();
    let runner = Runner::register(&t, "r1").await;
    assert!(runner.lease(1).await.is_none());
    let r = t
        .get(&format!("/api/v1/orgs/beta/runs/{id}"), &t.admin)
        .await
        .body;
    assert_eq!(r["state"], "failed");
    assert_eq!(
        r["reason"],
        "integration secrets (built-in store) failed: variable TF_VAR_k: secret://shared/key does not exist"
    );
}
