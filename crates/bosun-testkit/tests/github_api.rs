//! The GitHub double's REST API: App JWT verification, installation token minting and its
//! refusals (one repository; permissions granted to the installation), revocation,
//! installation lookup, and what the double records.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};

use bosun_testkit::keys::{jwt_with, other_private_key_pem};
use bosun_testkit::{app_jwt, app_private_key_pem, GithubDouble};
use reqwest::blocking::Client;
use reqwest::StatusCode;
use serde_json::{json, Value};

const APP_ID: i64 = 4242;
const INSTALLATION: i64 = 77;

struct Fixture {
    gh: GithubDouble,
    http: Client,
    _root: tempfile::TempDir,
}

fn fixture() -> Fixture {
    let root = tempfile::tempdir().unwrap();
    let gh = GithubDouble::start(APP_ID, root.path());
    gh.add_installation(INSTALLATION, "acme", &["acme/infra", "acme/network"]);
    gh.add_installation(78, "globex", &["globex/infra"]);
    Fixture {
        gh,
        http: Client::new(),
        _root: root,
    }
}

impl Fixture {
    fn post_token(&self, installation: i64, jwt: &str, body: &Value) -> (StatusCode, Value) {
        let resp = self
            .http
            .post(format!(
                "{}/app/installations/{installation}/access_tokens",
                self.gh.url()
            ))
            .header("Accept", "application/vnd.github+json")
            .header("User-Agent", "bosun-testkit-test")
            .bearer_auth(jwt)
            .json(body)
            .send()
            .unwrap();
        let status = resp.status();
        let text = resp.text().unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Posts a request that should be refused; checks the status, the GitHub-style body,
    /// that the refusal was recorded, and that no token was issued. Returns the message.
    fn refused(&self, installation: i64, jwt: &str, body: &Value, status: u16) -> String {
        let before = self.gh.issued_tokens().len();
        let (got, resp) = self.post_token(installation, jwt, body);
        assert_eq!(got.as_u16(), status, "{resp}");
        let message = resp["message"]
            .as_str()
            .expect("a GitHub-style message")
            .to_string();
        let last = self.gh.token_requests().pop().unwrap();
        assert!(!last.accepted);
        assert_eq!(last.status, status);
        assert_eq!(last.refusal.as_deref(), Some(message.as_str()));
        assert_eq!(self.gh.issued_tokens().len(), before, "no token issued");
        message
    }
}

fn good_body() -> Value {
    json!({"repositories": ["infra"], "permissions": {"contents": "read"}})
}

#[test]
fn a_jwt_signed_with_the_app_key_mints_a_token_for_one_repository() {
    let f = fixture();
    let (status, body) = f.post_token(INSTALLATION, &app_jwt(APP_ID), &good_body());
    assert_eq!(status, StatusCode::CREATED, "{body}");

    let token = body["token"].as_str().unwrap();
    assert!(token.starts_with("ghs_"), "{token}");
    assert_eq!(token.len(), 40);
    assert!(token[4..].chars().all(|c| c.is_ascii_alphanumeric()));
    let expires = chrono::DateTime::parse_from_rfc3339(body["expires_at"].as_str().unwrap())
        .unwrap()
        .timestamp();
    let in_an_hour = chrono::Utc::now().timestamp() + 3600;
    assert!((in_an_hour - expires).abs() <= 5, "expires_at {expires}");
    assert_eq!(body["permissions"], json!({"contents": "read"}));
    assert_eq!(body["repository_selection"], "selected");

    let requests = f.gh.token_requests();
    assert_eq!(requests.len(), 1);
    assert!(requests[0].accepted);
    assert_eq!(requests[0].status, 201);
    assert_eq!(requests[0].installation, INSTALLATION);
    assert_eq!(requests[0].repositories, vec!["infra".to_string()]);
    assert_eq!(requests[0].permissions, json!({"contents": "read"}));
    assert_eq!(requests[0].refusal, None);

    let issued = f.gh.issued_tokens();
    assert_eq!(issued.len(), 1);
    assert_eq!(issued[0].token, token);
    assert_eq!(issued[0].installation, INSTALLATION);
    assert_eq!(issued[0].repository, "acme/infra");
    assert!(!issued[0].revoked);

    let api = f.gh.api_requests();
    assert_eq!(api.len(), 1);
    assert_eq!(api[0].method, "POST");
    assert_eq!(api[0].path, "/app/installations/77/access_tokens");
    assert_eq!(
        api[0].accept.as_deref(),
        Some("application/vnd.github+json")
    );
    assert_eq!(api[0].user_agent.as_deref(), Some("bosun-testkit-test"));
    assert_eq!(api[0].status, 201);
}

#[test]
fn iss_may_be_a_string_or_an_integer() {
    let f = fixture();
    let as_int = jwt_with(app_private_key_pem(), &json!(APP_ID), -60, 540);
    let as_str = jwt_with(app_private_key_pem(), &json!(APP_ID.to_string()), -60, 540);
    for jwt in [as_int, as_str] {
        let (status, body) = f.post_token(INSTALLATION, &jwt, &good_body());
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
}

#[test]
fn a_jwt_signed_with_another_key_is_refused_and_recorded() {
    let f = fixture();
    let jwt = jwt_with(other_private_key_pem(), &json!(APP_ID), -60, 540);
    let message = f.refused(INSTALLATION, &jwt, &good_body(), 401);
    assert!(message.contains("could not be decoded"), "{message}");
}

#[test]
fn bad_jwts_are_refused() {
    let f = fixture();
    let key = app_private_key_pem();
    // Another App's id.
    let m = f.refused(
        INSTALLATION,
        &jwt_with(key, &json!(1), -60, 540),
        &good_body(),
        401,
    );
    assert!(m.contains("'iss'"), "{m}");
    // Expired.
    let m = f.refused(
        INSTALLATION,
        &jwt_with(key, &json!(APP_ID), -600, -10),
        &good_body(),
        401,
    );
    assert!(m.contains("'exp'"), "{m}");
    // Lives longer than 10 minutes.
    let m = f.refused(
        INSTALLATION,
        &jwt_with(key, &json!(APP_ID), -60, 600),
        &good_body(),
        401,
    );
    assert!(m.contains("too far in the future"), "{m}");
    // Issued in the future.
    let m = f.refused(
        INSTALLATION,
        &jwt_with(key, &json!(APP_ID), 120, 500),
        &good_body(),
        401,
    );
    assert!(m.contains("'iat'"), "{m}");
    // HS256 with the public key as the secret (the classic algorithm confusion).
    let now = chrono::Utc::now().timestamp();
    let hs = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({"iss": APP_ID, "iat": now - 60, "exp": now + 500}),
        &jsonwebtoken::EncodingKey::from_secret(bosun_testkit::app_public_key_pem().as_bytes()),
    )
    .unwrap();
    f.refused(INSTALLATION, &hs, &good_body(), 401);
    // Not a JWT at all.
    f.refused(INSTALLATION, "not-a-jwt", &good_body(), 401);

    // No Authorization header.
    let resp = f
        .http
        .post(format!(
            "{}/app/installations/{INSTALLATION}/access_tokens",
            f.gh.url()
        ))
        .header("Accept", "application/vnd.github+json")
        .header("User-Agent", "t")
        .json(&good_body())
        .send()
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert!(f.gh.issued_tokens().is_empty());
    assert_eq!(f.gh.token_requests().len(), 7);
}

#[test]
fn token_requests_outside_bosuns_promise_are_refused() {
    let f = fixture();
    let jwt = app_jwt(APP_ID);
    let read = json!({"contents": "read"});
    // Permissions not granted to the installation, or none.
    for permissions in [
        json!({"contents": "write"}),
        json!({"contents": "read", "administration": "read"}),
        json!({}),
    ] {
        let m = f.refused(
            INSTALLATION,
            &jwt,
            &json!({"repositories": ["infra"], "permissions": permissions}),
            422,
        );
        assert_eq!(
            m, "The permissions requested are not granted to this installation.",
            "{permissions}"
        );
    }
    f.refused(INSTALLATION, &jwt, &json!({"repositories": ["infra"]}), 422);
    // Two repositories, none, or no list.
    let m = f.refused(
        INSTALLATION,
        &jwt,
        &json!({"repositories": ["infra", "network"], "permissions": read}),
        422,
    );
    assert!(m.contains("exactly one"), "{m}");
    f.refused(
        INSTALLATION,
        &jwt,
        &json!({"repositories": [], "permissions": read}),
        422,
    );
    f.refused(INSTALLATION, &jwt, &json!({"permissions": read}), 422);
    // A repository outside the installation (another installation's, or unknown).
    let m = f.refused(
        INSTALLATION,
        &jwt,
        &json!({"repositories": ["elsewhere"], "permissions": read}),
        422,
    );
    assert!(
        m.contains("not accessible to the parent installation"),
        "{m}"
    );
    // owner/repo instead of the name.
    f.refused(
        INSTALLATION,
        &jwt,
        &json!({"repositories": ["acme/infra"], "permissions": read}),
        422,
    );
    // Repositories by id (Bosun names its one repository).
    f.refused(
        INSTALLATION,
        &jwt,
        &json!({"repositories": ["infra"], "repository_ids": [1], "permissions": read}),
        422,
    );
    // An unknown installation.
    f.refused(999, &jwt, &good_body(), 404);

    let requests = f.gh.token_requests();
    assert!(requests.iter().all(|r| !r.accepted));
    let two = requests.iter().find(|r| r.repositories.len() == 2).unwrap();
    assert_eq!(
        two.repositories,
        vec!["infra".to_string(), "network".to_string()]
    );
    assert_eq!(two.permissions, read);
}

#[test]
fn token_permissions_must_be_granted_to_the_installation() {
    let f = fixture();
    let jwt = app_jwt(APP_ID);
    let body = |permissions: Value| json!({"repositories": ["infra"], "permissions": permissions});

    // The default grant: contents and metadata read, checks and pull requests write.
    for permissions in [
        json!({"contents": "read"}),
        json!({"contents": "read", "metadata": "read"}),
        json!({"checks": "write", "pull_requests": "write"}),
        // `write` granted covers `read`.
        json!({"checks": "read", "pull_requests": "read"}),
    ] {
        let (status, answer) = f.post_token(INSTALLATION, &jwt, &body(permissions.clone()));
        assert_eq!(status, StatusCode::CREATED, "{permissions}: {answer}");
        assert_eq!(answer["permissions"], permissions);
        let issued = f.gh.issued_tokens().pop().unwrap();
        assert_eq!(issued.token, answer["token"].as_str().unwrap());
        assert_eq!(issued.permissions, permissions);
    }
    for permissions in [
        json!({"issues": "write"}),
        json!({"contents": "write"}),
        json!({"checks": "write", "metadata": "write"}),
    ] {
        let m = f.refused(INSTALLATION, &jwt, &body(permissions), 422);
        assert_eq!(
            m,
            "The permissions requested are not granted to this installation."
        );
    }

    // Narrower grants refuse what the default allowed; other installations keep theirs.
    f.gh.set_permissions(INSTALLATION, json!({"contents": "read", "issues": "write"}));
    f.refused(INSTALLATION, &jwt, &body(json!({"checks": "write"})), 422);
    let (status, _) = f.post_token(INSTALLATION, &jwt, &body(json!({"issues": "write"})));
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = f.post_token(
        78,
        &jwt,
        &json!({"repositories": ["infra"], "permissions": {"checks": "write"}}),
    );
    assert_eq!(status, StatusCode::CREATED);

    // A level GitHub does not have breaks its schema: refused and recorded.
    if bosun_testkit::github::contract::Contract::global().is_some() {
        let m = f.refused(INSTALLATION, &jwt, &body(json!({"contents": "admin"})), 422);
        assert!(m.starts_with("Invalid request.\n\n"), "{m}");
        assert!(m.contains("/permissions/contents"), "{m}");
        let violations = f.gh.contract_violations();
        assert_eq!(violations.len(), 1, "{violations:#?}");
        assert!(violations[0].starts_with("POST /app/installations/77/access_tokens: "));
    } else {
        f.refused(INSTALLATION, &jwt, &body(json!({"contents": "admin"})), 422);
    }
}

#[test]
fn a_directly_issued_token_carries_the_installations_permissions() {
    let f = fixture();
    f.gh.issue_token(INSTALLATION, "acme/infra");
    f.gh.set_permissions(78, json!({"contents": "read"}));
    f.gh.issue_token(78, "globex/infra");
    f.gh.issue_token_with(INSTALLATION, "acme/network", json!({"checks": "read"}));
    let issued = f.gh.issued_tokens();
    assert_eq!(
        issued[0].permissions,
        bosun_testkit::github::default_permissions()
    );
    assert_eq!(issued[1].permissions, json!({"contents": "read"}));
    assert_eq!(issued[2].permissions, json!({"checks": "read"}));
}

#[test]
fn a_body_that_is_not_json_is_refused() {
    let f = fixture();
    let resp = f
        .http
        .post(format!(
            "{}/app/installations/{INSTALLATION}/access_tokens",
            f.gh.url()
        ))
        .header("Accept", "application/vnd.github+json")
        .header("User-Agent", "t")
        .bearer_auth(app_jwt(APP_ID))
        .body("{not json")
        .send()
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let r = f.gh.token_requests().pop().unwrap();
    assert!(r.refusal.unwrap().contains("Problems parsing JSON"));
}

#[test]
fn requests_without_user_agent_or_accept_are_refused_and_recorded() {
    let f = fixture();
    let url = format!(
        "{}/app/installations/{INSTALLATION}/access_tokens",
        f.gh.url()
    );
    // reqwest sends no User-Agent unless told to.
    let resp = f
        .http
        .post(&url)
        .header("Accept", "application/vnd.github+json")
        .bearer_auth(app_jwt(APP_ID))
        .json(&good_body())
        .send()
        .unwrap();
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    // reqwest always sends `Accept: */*`, so speak HTTP by hand to leave it out.
    let body = good_body().to_string();
    let addr = f.gh.url().strip_prefix("http://").unwrap();
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    write!(
        conn,
        "POST /app/installations/{INSTALLATION}/access_tokens HTTP/1.1\r\nHost: {addr}\r\n\
         User-Agent: t\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        app_jwt(APP_ID),
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(f.gh.issued_tokens().is_empty());
    let api = f.gh.api_requests();
    assert_eq!(api[0].user_agent, None);
    assert_eq!(api[1].accept, None);
    assert_eq!(f.gh.token_requests().len(), 2);
}

#[test]
fn a_token_revokes_itself() {
    let f = fixture();
    let (_, body) = f.post_token(INSTALLATION, &app_jwt(APP_ID), &good_body());
    let token = body["token"].as_str().unwrap().to_string();
    let delete = |auth: String| {
        f.http
            .delete(format!("{}/installation/token", f.gh.url()))
            .header("Accept", "application/vnd.github+json")
            .header("User-Agent", "t")
            .header("Authorization", auth)
            .send()
            .unwrap()
            .status()
    };
    assert_eq!(
        delete("Bearer ghs_unknown".into()),
        StatusCode::UNAUTHORIZED
    );
    assert!(!f.gh.issued_tokens()[0].revoked);
    assert_eq!(delete(format!("Bearer {token}")), StatusCode::NO_CONTENT);
    assert!(f.gh.issued_tokens()[0].revoked);
    assert_eq!(delete(format!("Bearer {token}")), StatusCode::UNAUTHORIZED);

    // The `token` scheme works too.
    let other = f.gh.issue_token(INSTALLATION, "acme/network");
    assert_eq!(delete(format!("token {other}")), StatusCode::NO_CONTENT);
    assert!(f.gh.issued_tokens().iter().all(|t| t.revoked));
}

#[test]
fn installation_lookup_needs_the_app_jwt() {
    let f = fixture();
    let get = |repo: &str, jwt: Option<String>| {
        let mut req = f
            .http
            .get(format!("{}/repos/{repo}/installation", f.gh.url()))
            .header("Accept", "application/vnd.github+json")
            .header("User-Agent", "t");
        if let Some(jwt) = jwt {
            req = req.bearer_auth(jwt);
        }
        let resp = req.send().unwrap();
        let status = resp.status();
        (status, resp.json::<Value>().unwrap_or(Value::Null))
    };
    let (status, body) = get("acme/network", Some(app_jwt(APP_ID)));
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["id"], INSTALLATION);
    assert_eq!(body["account"]["login"], "acme");
    let (status, body) = get("globex/infra", Some(app_jwt(APP_ID)));
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["id"], 78);
    let (status, body) = get("acme/unknown", Some(app_jwt(APP_ID)));
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["message"], "Not Found");
    let (status, _) = get("acme/network", None);
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let foreign = jwt_with(other_private_key_pem(), &json!(APP_ID), -60, 540);
    let (status, _) = get("acme/network", Some(foreign));
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let lookups = f.gh.installation_lookups();
    let summary: Vec<(&str, Option<i64>, u16)> = lookups
        .iter()
        .map(|l| (l.repository.as_str(), l.installation, l.status))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("acme/network", Some(INSTALLATION), 200),
            ("globex/infra", Some(78), 200),
            ("acme/unknown", None, 404),
            ("acme/network", None, 401),
            ("acme/network", None, 401),
        ]
    );
}

#[test]
fn unknown_routes_are_github_style_404s() {
    let f = fixture();
    let resp = f
        .http
        .get(format!("{}/user/repos", f.gh.url()))
        .header("User-Agent", "t")
        .send()
        .unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert_eq!(resp.json::<Value>().unwrap()["message"], "Not Found");
    // GitHub has `GET /user/repos` (the double does not serve it); it has no
    // `/no/such/route`, which breaks the contract.
    let resp = f
        .http
        .get(format!("{}/no/such/route", f.gh.url()))
        .header("User-Agent", "t")
        .send()
        .unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert_eq!(resp.json::<Value>().unwrap()["message"], "Not Found");
    if bosun_testkit::github::contract::Contract::global().is_some() {
        let violations = f.gh.contract_violations();
        assert_eq!(violations.len(), 1, "{violations:#?}");
        assert!(
            violations[0].starts_with("GET /no/such/route: no path"),
            "{}",
            violations[0]
        );
    }
    let api = f.gh.api_requests();
    assert_eq!(
        api[0]
            .operation
            .as_deref()
            .unwrap_or("repos/list-for-authenticated-user"),
        "repos/list-for-authenticated-user"
    );
    assert_eq!(api[1].operation, None);
}

#[test]
fn the_double_stops_on_drop() {
    let f = fixture();
    let url = f.gh.url().to_string();
    drop(f);
    let err = Client::new().get(format!("{url}/user")).send();
    assert!(err.is_err(), "still answering after drop");
}

#[tokio::test]
async fn it_works_from_inside_a_tokio_test() {
    // Starting and dropping the double inside a runtime must not panic (it has its own).
    let root = tempfile::tempdir().unwrap();
    let gh = GithubDouble::start(APP_ID, root.path());
    gh.add_installation(INSTALLATION, "acme", &["acme/infra"]);
    let token = gh.issue_token(INSTALLATION, "acme/infra");
    assert_eq!(gh.issued_tokens()[0].token, token);
    drop(gh);
}
