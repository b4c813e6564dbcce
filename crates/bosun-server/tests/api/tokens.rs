//! Tokens: shown once, hashed at rest, revocable, expiring; run tokens scoped and
//! revocable.

use bosun_core::token::hash_token;
use bosun_server::service::tokens::mint_run_token;
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::harness::TestServer;

#[tokio::test]
async fn personal_token_lifecycle() {
    let t = TestServer::start().await;
    let r = t
        .post(
            "/api/v1/tokens",
            &t.admin,
            json!({"description": "laptop", "expires_in_seconds": 3600}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let secret = r.body["secret"].as_str().unwrap().to_string();
    let id = r.body["token"]["id"].as_str().unwrap().to_string();
    assert!(secret.starts_with("bosun_pat_"));
    assert!(r.body["token"]["expires_at"].is_string());

    // Works, and is never shown again.
    assert_eq!(
        t.get("/api/v1/whoami", &secret).await.body["token_id"],
        json!(id)
    );
    let list = t.get("/api/v1/tokens", &t.admin).await;
    let text = list.body.to_string();
    assert!(text.contains(&id) && !text.contains(&secret), "{text}");

    // Stored hashed: the store knows the hash, not the secret.
    let store = &t.server.state().store;
    let rec = store
        .token_by_hash(&hash_token(&secret))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rec.id, id);
    assert!(store.token_by_hash(&secret).await.unwrap().is_none());

    // Another user cannot revoke it (it is not theirs to see).
    let eve = t.user_token("eve", None).await;
    let r = t
        .call(
            Method::DELETE,
            &format!("/api/v1/tokens/{id}"),
            Some(&eve),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    // Nor mint tokens for others.
    let r = t
        .post("/api/v1/tokens", &eve, json!({"user": "admin"}))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);

    let r = t
        .call(
            Method::DELETE,
            &format!("/api/v1/tokens/{id}"),
            Some(&t.admin),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = t.get("/api/v1/whoami", &secret).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(r.message().contains("revoked"), "{}", r.message());
    let audit = t.get("/api/v1/orgs/default/audit", &t.admin).await;
    assert_eq!(audit.status, StatusCode::OK);
    // Server-level records (personal tokens) are in the server-wide log, for server admins.
    let all = t.get("/api/v1/audit", &t.admin).await;
    assert_eq!(all.status, StatusCode::OK);
    let revoke = all.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["action"] == "token.revoke")
        .unwrap()
        .clone();
    assert_eq!(revoke["target"], json!(format!("token:{id}")));
    assert_eq!(revoke["org"], json!(null));
    assert_eq!(
        t.get("/api/v1/audit", &eve).await.status,
        StatusCode::FORBIDDEN
    );
}

#[tokio::test]
async fn expired_tokens_are_refused() {
    let t = TestServer::start().await;
    let (secret, mut token) = bosun_server::service::tokens::new_token(
        bosun_core::token::TokenKind::Personal,
        bosun_server::service::tokens::TokenOwner::User("admin".into()),
        "old".into(),
        Some(chrono::Utc::now() - chrono::Duration::seconds(1)),
    );
    token.description = "expired".into();
    t.server
        .state()
        .store
        .create_token(&token, None)
        .await
        .unwrap();
    let r = t.get("/api/v1/whoami", &secret).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(r.message().contains("expired"), "{}", r.message());
}

#[tokio::test]
async fn pool_tokens_and_run_tokens() {
    let t = TestServer::start().await;
    let r = t
        .post(
            "/api/v1/orgs/default/pool-tokens",
            &t.admin,
            json!({"pool": "edge", "description": "dc1"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert!(r.body["secret"]
        .as_str()
        .unwrap()
        .starts_with("bosun_pool_"));
    assert_eq!(r.body["token"]["pool"], "edge");
    let id = r.body["token"]["id"].as_str().unwrap().to_string();
    let list = t.get("/api/v1/orgs/default/pool-tokens", &t.admin).await;
    assert_eq!(list.body["items"].as_array().unwrap().len(), 1);
    // Pool tokens are not personal tokens: the personal endpoint does not revoke them.
    let r = t
        .call(
            Method::DELETE,
            &format!("/api/v1/tokens/{id}"),
            Some(&t.admin),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = t
        .call(
            Method::DELETE,
            &format!("/api/v1/orgs/default/pool-tokens/{id}"),
            Some(&t.admin),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let list = t.get("/api/v1/orgs/default/pool-tokens", &t.admin).await;
    assert!(list.body["items"][0]["revoked_at"].is_string());

    // Run tokens: scoped to their run and stack, revocable the moment the run ends.
    let state = t.server.state();
    let (secret, rec) = mint_run_token(
        state,
        "default",
        "run-7",
        "net",
        chrono::Duration::minutes(5),
        &[],
    )
    .await
    .unwrap();
    assert!(secret.starts_with("bosun_run_"));
    assert_eq!(
        (rec.run.as_deref(), rec.stack.as_deref()),
        (Some("run-7"), Some("net"))
    );
    let r = t.get("/api/v1/orgs/default/stacks", &secret).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    state.store.revoke_token(&rec.id, None).await.unwrap();
    let r = t.get("/api/v1/orgs/default/stacks", &secret).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
}

/// Logs in to the console with `token`; answers the session cookie's value.
async fn console_login(t: &TestServer, token: &str) -> String {
    let r = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .post(format!("{}/login", t.url))
        .form(&[("token", token), ("next", "/")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let cookie = r
        .headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap())
        .find(|c| c.starts_with("bosun_session="))
        .unwrap();
    cookie
        .trim_start_matches("bosun_session=")
        .split(';')
        .next()
        .unwrap()
        .to_string()
}

/// A console page's status with `cookie` as the session.
async fn page_status(t: &TestServer, cookie: &str) -> StatusCode {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(format!("{}/orgs/default/stacks", t.url))
        .header(reqwest::header::COOKIE, format!("bosun_session={cookie}"))
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test]
async fn console_sessions_are_listed_per_user_and_ended_by_their_person_or_an_admin() {
    let t = TestServer::start().await;
    let carol = t.user_token("carol", Some(bosun_core::Role::Viewer)).await;
    let dave = t.user_token("dave", Some(bosun_core::Role::Viewer)).await;
    let first = console_login(&t, &carol).await;
    let second = console_login(&t, &carol).await;
    console_login(&t, &dave).await;
    assert_eq!(page_status(&t, &first).await, StatusCode::OK);

    // carol sees her own two, newest first, each saying how it was opened.
    let mine = t.get("/api/v1/sessions", &carol).await;
    assert_eq!(mine.status, StatusCode::OK, "{:?}", mine.body);
    let items = mine.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{:?}", mine.body);
    assert!(items
        .iter()
        .all(|s| s["user"] == "carol" && s["method"] == "token"));
    assert_eq!(mine.body["next_cursor"], json!(null));
    let newest = items[0]["id"].as_str().unwrap().to_string();
    let oldest = items[1]["id"].as_str().unwrap().to_string();
    // Not dave's: neither listed nor ended by her.
    let theirs = t.get("/api/v1/sessions?user=dave", &carol).await;
    assert_eq!(theirs.status, StatusCode::FORBIDDEN, "{:?}", theirs.body);
    let dave_sessions = t.get("/api/v1/sessions?user=dave", &t.admin).await;
    let dave_session = dave_sessions.body["items"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = t
        .call(
            Method::DELETE,
            &format!("/api/v1/sessions/{dave_session}"),
            Some(&carol),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);
    // A cursor is refused: the list is answered whole.
    let r = t.get("/api/v1/sessions?cursor=x", &carol).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);

    // She ends her older one; an admin ends the other. Each browser must log in again,
    // told who ended it.
    let r = t
        .call(
            Method::DELETE,
            &format!("/api/v1/sessions/{oldest}"),
            Some(&carol),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["ended_reason"], "revoked by user:carol");
    assert_eq!(page_status(&t, &first).await, StatusCode::SEE_OTHER);
    assert_eq!(page_status(&t, &second).await, StatusCode::OK);
    let r = t
        .call(
            Method::DELETE,
            &format!("/api/v1/sessions/{newest}"),
            Some(&t.admin),
            None,
        )
        .await;
    assert_eq!(
        r.body["ended_reason"], "revoked by user:admin",
        "{:?}",
        r.body
    );
    assert_eq!(page_status(&t, &second).await, StatusCode::SEE_OTHER);
    // Revoking the token a session was opened with ends it too.
    let dave_cookie = console_login(&t, &dave).await;
    assert_eq!(page_status(&t, &dave_cookie).await, StatusCode::OK);
    let tokens = t.get("/api/v1/tokens", &dave).await;
    let token_id = tokens.body["items"][0]["id"].as_str().unwrap().to_string();
    t.call(
        Method::DELETE,
        &format!("/api/v1/tokens/{token_id}"),
        Some(&dave),
        None,
    )
    .await;
    assert_eq!(page_status(&t, &dave_cookie).await, StatusCode::SEE_OTHER);
    // The ends are audited.
    let audit = t.get("/api/v1/audit?action=session.revoke", &t.admin).await;
    assert_eq!(
        audit.body["items"].as_array().unwrap().len(),
        2,
        "{:?}",
        audit.body
    );
}

#[tokio::test]
async fn every_session_of_a_person_ends_at_once_by_them_or_an_admin() {
    let t = TestServer::start().await;
    let carol = t.user_token("carol", Some(bosun_core::Role::Viewer)).await;
    let dave = t.user_token("dave", Some(bosun_core::Role::Viewer)).await;
    let carol_browsers = [
        console_login(&t, &carol).await,
        console_login(&t, &carol).await,
    ];
    let dave_browser = console_login(&t, &dave).await;

    // Only a server admin ends another's, and only a user who exists.
    let r = t
        .call(
            Method::DELETE,
            "/api/v1/sessions?user=dave",
            Some(&carol),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    let r = t
        .call(
            Method::DELETE,
            "/api/v1/sessions?user=ghost",
            Some(&t.admin),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);

    // carol signs out everywhere: both her browsers must log in again; dave's stays.
    let r = t
        .call(Method::DELETE, "/api/v1/sessions", Some(&carol), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body, json!({"user": "carol", "ended": 2}));
    for cookie in &carol_browsers {
        assert_eq!(page_status(&t, cookie).await, StatusCode::SEE_OTHER);
    }
    assert_eq!(page_status(&t, &dave_browser).await, StatusCode::OK);

    // An admin cuts dave off.
    let r = t
        .call(
            Method::DELETE,
            "/api/v1/sessions?user=dave",
            Some(&t.admin),
            None,
        )
        .await;
    assert_eq!(r.body, json!({"user": "dave", "ended": 1}), "{:?}", r.body);
    assert_eq!(page_status(&t, &dave_browser).await, StatusCode::SEE_OTHER);
    let listed = t.get("/api/v1/sessions?user=dave", &t.admin).await;
    assert_eq!(
        listed.body["items"][0]["ended_reason"], "revoked by user:admin",
        "{:?}",
        listed.body
    );
    // Audited once each, with how many ended.
    let audit = t.get("/api/v1/audit?action=session.revoke", &t.admin).await;
    let items = audit.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{:?}", audit.body);
    assert!(items
        .iter()
        .any(|e| e["target"] == "user:dave" && e["detail"]["ended"] == 1));
}
