//! People signing in to the console through a real OpenID Provider (`oidc-provider`, on
//! loopback): the whole authorization-code flow with PKCE driven over HTTP as a browser
//! would (its cookies per host, each redirect followed by hand, the provider's own login
//! and consent forms filled in), users made on first sign-in, groups mapped to roles and
//! followed at each refresh, and every way a sign-in must fail: a tampered ID token
//! (audience, expiry, signature, nonce), a replayed state, another browser's callback;
//! and `bosun login` through the browser and the CLI's loopback where the provider has no
//! device flow.

use std::collections::BTreeMap;

use bosun_core::sign_in::MembershipSource;
use bosun_core::Role;
use bosun_server::sign_in::config::{SignInConfig, SignInProvider};
use bosun_testkit::oidc::{require_oidc_provider, OpenIdProvider};
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::harness::TestServer;

const CLIENT_ID: &str = "bosun-console";
const CLIENT_SECRET: &str = "a-client-secret-for-tests";

fn rule(group: &str, org: &str, role: &str) -> bosun_core::sign_in::RoleRule {
    bosun_core::sign_in::RoleRule::parse("roles[0]", "groups", group, org, role).unwrap()
}

fn users() -> Value {
    json!({
        "alice": {"email": "alice@example.com", "preferred_username": "alice",
                  "groups": ["platform-admins"]},
        "bob": {"email": "bob@example.com", "preferred_username": "bob",
                "groups": ["team-net"]},
    })
}

/// A public client of `issuer` named `id`, scope `openid`, default claims, no rules.
fn provider(id: &str, issuer: String) -> SignInProvider {
    SignInProvider {
        id: id.into(),
        name: id.into(),
        issuer,
        client_id: CLIENT_ID.into(),
        client_secret: None,
        scopes: vec!["openid".into()],
        username_claim: "preferred_username".into(),
        email_claim: "email".into(),
        groups_claim: "groups".into(),
        rules: vec![],
    }
}

/// A provider with alice and bob, and a server signing in with it: `platform-admins`
/// are admins of every org, `team-net` operators of `net`. `tweak` changes the sign-in
/// settings.
async fn setup(tweak: impl FnOnce(&mut SignInConfig)) -> Option<(OpenIdProvider, TestServer)> {
    if !require_oidc_provider() {
        return None;
    }
    Some(serve(OpenIdProvider::start(users()), tweak).await)
}

/// A server signing in with `op` as [`setup`] describes.
async fn serve(
    op: OpenIdProvider,
    tweak: impl FnOnce(&mut SignInConfig),
) -> (OpenIdProvider, TestServer) {
    let issuer = op.issuer.clone();
    let t = TestServer::start_with(move |c| {
        c.sign_in.providers = vec![SignInProvider {
            name: "Corp SSO".into(),
            client_secret: Some(bosun_server::config::Secret(CLIENT_SECRET.into())),
            scopes: ["openid", "email", "profile", "groups"]
                .map(String::from)
                .to_vec(),
            rules: vec![
                rule("platform-admins", "*", "admin"),
                rule("team-net", "net", "operator"),
            ],
            ..provider("corp", issuer)
        }];
        tweak(&mut c.sign_in);
    })
    .await;
    op.set_clients(json!([{
        "client_id": CLIENT_ID,
        "client_secret": CLIENT_SECRET,
        "redirect_uris": [format!("{}/login/corp/callback", t.url)],
        "post_logout_redirect_uris": [format!("{}/login", t.url)],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
    }]))
    .await;
    let r = t
        .post(
            "/api/v1/orgs",
            &t.admin,
            json!({"id": "net", "name": "Net"}),
        )
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    (op, t)
}

/// A browser: cookies per host (attributes other than deletion ignored), redirects
/// followed by hand.
struct Browser {
    client: reqwest::Client,
    cookies: BTreeMap<String, BTreeMap<String, String>>,
}

struct Answer {
    url: String,
    status: StatusCode,
    location: Option<String>,
    body: String,
}

fn host_of(url: &str) -> String {
    let u = reqwest::Url::parse(url).unwrap();
    format!(
        "{}:{}",
        u.host_str().unwrap(),
        u.port_or_known_default().unwrap()
    )
}

impl Browser {
    fn new() -> Self {
        Browser {
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            cookies: BTreeMap::new(),
        }
    }

    async fn send(&mut self, method: Method, url: &str, form: Option<&[(&str, &str)]>) -> Answer {
        let host = host_of(url);
        let mut req = self.client.request(method, url);
        if let Some(jar) = self.cookies.get(&host).filter(|j| !j.is_empty()) {
            let header: Vec<String> = jar.iter().map(|(k, v)| format!("{k}={v}")).collect();
            req = req.header(COOKIE, header.join("; "));
        }
        if let Some(f) = form {
            req = req.form(f);
        }
        let resp = req.send().await.unwrap();
        let jar = self.cookies.entry(host).or_default();
        for c in resp.headers().get_all(SET_COOKIE) {
            let c = c.to_str().unwrap();
            let (pair, attrs) = c.split_once(';').unwrap_or((c, ""));
            let (k, v) = pair.split_once('=').unwrap();
            let lower = attrs.to_ascii_lowercase();
            if lower.contains("max-age=0") || lower.contains("expires=thu, 01 jan 1970") {
                jar.remove(k.trim());
            } else {
                jar.insert(k.trim().to_string(), v.to_string());
            }
        }
        let status = resp.status();
        let location = resp.headers().get(LOCATION).map(|l| {
            reqwest::Url::parse(url)
                .unwrap()
                .join(l.to_str().unwrap())
                .unwrap()
                .to_string()
        });
        Answer {
            url: url.to_string(),
            status,
            location,
            body: resp.text().await.unwrap(),
        }
    }

    async fn get(&mut self, url: &str) -> Answer {
        self.send(Method::GET, url, None).await
    }

    /// From `url`, follows redirects and fills in the provider's login (as `login`) and
    /// consent forms, until an answer comes from `until` (a URL prefix) that is no
    /// redirect, or a redirect to `stop` (a URL prefix) is seen (answered, not followed).
    async fn walk(&mut self, url: &str, login: &str, until: &str, stop: Option<&str>) -> Answer {
        let mut next = url.to_string();
        for _ in 0..20 {
            let a = self.get(&next).await;
            if let Some(to) = &a.location {
                if stop.is_some_and(|s| to.starts_with(s)) {
                    return a;
                }
                next = to.clone();
                continue;
            }
            if a.url.starts_with(until) {
                return a;
            }
            // A form of the provider: login, or consent.
            let action = form_action(&a.body)
                .unwrap_or_else(|| panic!("no form at {} ({}): {}", a.url, a.status, a.body));
            let action = reqwest::Url::parse(&a.url)
                .unwrap()
                .join(&action)
                .unwrap()
                .to_string();
            let fields: Vec<(&str, &str)> = if a.body.contains(r#"name="login""#) {
                vec![("prompt", "login"), ("login", login), ("password", "any")]
            } else {
                vec![("prompt", "consent")]
            };
            let posted = self.send(Method::POST, &action, Some(&fields)).await;
            next = posted.location.unwrap_or_else(|| {
                panic!(
                    "the form at {} answered {}: {}",
                    a.url, posted.status, posted.body
                )
            });
        }
        panic!("sign-in did not finish in 20 steps");
    }

    /// Signs in from the console's button for `corp` as `login`: the last answer (the
    /// signed-in page, or the login page saying why not).
    async fn sign_in(&mut self, t: &TestServer, login: &str) -> Answer {
        let start = format!("{}/login/corp?next=/orgs/net/stacks", t.url);
        let callback = format!("{}/login/corp/callback", t.url);
        self.walk(&start, login, &callback, None).await
    }

    fn has_session(&self, t: &TestServer) -> bool {
        self.cookies
            .get(&host_of(&t.url))
            .is_some_and(|j| j.contains_key("bosun_session"))
    }
}

fn form_action(html: &str) -> Option<String> {
    let i = html.find("<form")?;
    let rest = &html[i..];
    let a = rest.find("action=\"")? + 8;
    let end = rest[a..].find('"')?;
    Some(rest[a..a + end].replace("&amp;", "&"))
}

/// Asserts the answer is the signed-in page of `user`.
fn assert_signed_in(a: &Answer, user: &str) {
    assert_eq!(signed_in_as(a).as_deref(), Some(user), "{}", a.body);
}

fn signed_in_as(a: &Answer) -> Option<String> {
    let i = a.body.find(r#"id="signed-in-user">"#)? + 20;
    let end = a.body[i..].find('<')?;
    Some(a.body[i..i + end].to_string())
}

#[tokio::test]
async fn a_person_signs_in_with_the_provider_and_gets_the_roles_its_groups_give() {
    let Some((_op, t)) = setup(|_| {}).await else {
        return;
    };
    let store = &t.server.state().store;
    // The console offers the provider beside the token form.
    let mut b = Browser::new();
    let login = b.get(&format!("{}/login", t.url)).await;
    assert!(
        login.body.contains(r#"id="sign-in-corp""#) && login.body.contains("Sign in with Corp SSO"),
        "{}",
        login.body
    );
    assert!(login.body.contains(r#"id="token-login""#));

    // alice: made on first sign-in, admin of every org by her group.
    let done = b.sign_in(&t, "alice").await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    assert_signed_in(&done, "alice");
    assert!(
        done.body.contains(r#"content="0;url=/orgs/net/stacks""#),
        "{}",
        done.body
    );
    assert!(b.has_session(&t));
    assert!(t.metrics_text().await.contains(
        "bosun_sign_ins_total{provider=\"corp\",way=\"console\",result=\"signed_in\"} 1\n"
    ));
    let page = b.get(&format!("{}/orgs/net/stacks", t.url)).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let roles = store.roles_of("alice").await.unwrap();
    assert_eq!(roles.get("net"), Some(&Role::Admin));
    assert_eq!(roles.get("default"), Some(&Role::Admin));
    let members = store.list_members("net").await.unwrap();
    let alice = members.iter().find(|m| m.user == "alice").unwrap();
    assert_eq!(alice.source, MembershipSource::Provider);
    assert!(
        alice
            .source_detail
            .as_deref()
            .unwrap()
            .contains("platform-admins"),
        "{alice:?}"
    );
    // The API shows where the membership came from.
    let listed = t.get("/api/v1/orgs/net/members", &t.admin).await;
    let row = listed.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["user"] == "alice")
        .unwrap()
        .clone();
    assert_eq!(row["source"], "provider", "{row}");

    // bob: operator of net only; default's pages are not his.
    let mut bob = Browser::new();
    let done = bob.sign_in(&t, "bob").await;
    assert_signed_in(&done, "bob");
    let roles = store.roles_of("bob").await.unwrap();
    assert_eq!(
        roles.into_iter().collect::<Vec<_>>(),
        [("net".to_string(), Role::Operator)]
    );
    let refused = bob.get(&format!("{}/orgs/default/stacks", t.url)).await;
    assert!(!refused.status.is_success(), "{}", refused.status);

    // Signing in again is the same person: no new user.
    let mut again = Browser::new();
    let done = again.sign_in(&t, "alice").await;
    assert_signed_in(&done, "alice");
    assert!(store.get_user("alice-2").await.unwrap().is_none());

    // Each change is audited with the rule and the subject that caused it.
    let trail = t
        .get("/api/v1/orgs/net/audit?actor=provider:corp", &t.admin)
        .await;
    let entries = trail.body["items"].as_array().unwrap();
    let add = entries
        .iter()
        .find(|e| e["action"] == "member.add" && e["target"] == "user:bob")
        .unwrap_or_else(|| panic!("{}", trail.body));
    assert!(
        add["detail"]["rule"].as_str().unwrap().contains("team-net"),
        "{add}"
    );
    assert_eq!(add["detail"]["subject"], "bob");
}

#[tokio::test]
async fn roles_follow_the_provider_at_each_refresh_and_manual_memberships_stay() {
    let Some((op, t)) = setup(|s| s.refresh_every = std::time::Duration::ZERO).await else {
        return;
    };
    let store = &t.server.state().store;
    let mut bob = Browser::new();
    bob.sign_in(&t, "bob").await;
    assert!(bob.has_session(&t));
    let net = format!("{}/orgs/net/stacks", t.url);
    assert_eq!(bob.get(&net).await.status, StatusCode::OK);
    // An admin makes bob a viewer of default by hand.
    let r = t
        .call(
            Method::PUT,
            "/api/v1/orgs/default/members/bob",
            Some(&t.admin),
            Some(json!({"role": "viewer"})),
        )
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);

    // bob leaves team-net at the provider: the next page refreshes and his role goes.
    op.set_users(json!({"bob": {"preferred_username": "bob", "groups": []}}))
        .await;
    let refused = bob.get(&net).await;
    assert!(!refused.status.is_success(), "{}", refused.status);
    let roles = store.roles_of("bob").await.unwrap();
    assert_eq!(
        roles.into_iter().collect::<Vec<_>>(),
        [("default".to_string(), Role::Viewer)],
        "the manual membership stays"
    );
    let still = bob.get(&format!("{}/orgs/default/stacks", t.url)).await;
    assert_eq!(still.status, StatusCode::OK, "{}", still.body);

    // Back in the group: the role comes back at the next refresh.
    op.set_users(users()).await;
    assert_eq!(bob.get(&net).await.status, StatusCode::OK);

    // Removed at the provider altogether: the refresh is refused and the session ends.
    op.set_users(json!({})).await;
    let ended = bob.get(&net).await;
    assert_eq!(ended.status, StatusCode::SEE_OTHER);
    let login = bob.get(&ended.location.unwrap()).await;
    assert!(
        login.body.contains("no longer vouches for you"),
        "{}",
        login.body
    );
    let sessions = store.list_sessions("bob", 10).await.unwrap();
    assert!(
        sessions[0]
            .ended_reason
            .as_deref()
            .unwrap()
            .contains("no longer vouches"),
        "{sessions:?}"
    );
}

#[tokio::test]
async fn a_tampered_id_token_is_refused_naming_what_is_wrong() {
    let Some((op, t)) = setup(|_| {}).await else {
        return;
    };
    for (mode, says) in [
        ("aud", "audience (aud) is not this client"),
        ("expired", "has expired"),
        ("signature", "signature does not verify"),
        ("nonce", "nonce is not the one this sign-in sent"),
        ("hs256", "a shared secret; an asymmetric key is required"),
        ("none", "its header"),
    ] {
        op.tamper_next(mode).await;
        let mut b = Browser::new();
        let done = b.sign_in(&t, "alice").await;
        assert_eq!(
            done.status,
            StatusCode::UNAUTHORIZED,
            "{mode}: {}",
            done.body
        );
        assert!(done.body.contains(says), "{mode}: {}", done.body);
        assert!(!b.has_session(&t), "{mode}: a session was opened");
    }
    assert!(
        t.server
            .state()
            .store
            .get_user("alice")
            .await
            .unwrap()
            .is_none(),
        "no refused sign-in made a user"
    );
    // The next, untouched, goes through.
    let mut b = Browser::new();
    let done = b.sign_in(&t, "alice").await;
    assert_signed_in(&done, "alice");
}

#[tokio::test]
async fn a_replayed_state_or_another_browsers_callback_is_refused() {
    let Some((_op, t)) = setup(|_| {}).await else {
        return;
    };
    let callback = format!("{}/login/corp/callback", t.url);
    // Walk to the provider's redirect back, and stop there.
    let mut b = Browser::new();
    let start = format!("{}/login/corp?next=/", t.url);
    let back = b.walk(&start, "alice", &callback, Some(&callback)).await;
    let back = back.location.unwrap();
    // Another browser (no binding cookie) presenting it is refused, and spends it.
    let mut other = Browser::new();
    let refused = other.get(&back).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert!(
        refused.body.contains("begun in another browser"),
        "{}",
        refused.body
    );
    assert!(t.metrics_text().await.contains(
        "bosun_sign_ins_total{provider=\"corp\",way=\"console\",result=\"refused\"} 1\n"
    ));
    // So the browser that began it finds it used.
    let replay = b.get(&back).await;
    assert_eq!(replay.status, StatusCode::UNAUTHORIZED);
    assert!(
        replay.body.contains("already used or has expired"),
        "{}",
        replay.body
    );

    // A finished sign-in's callback replayed is refused too.
    let mut c = Browser::new();
    let back = c.walk(&start, "alice", &callback, Some(&callback)).await;
    let back = back.location.unwrap();
    let done = c.get(&back).await;
    assert_signed_in(&done, "alice");
    let replay = c.get(&back).await;
    assert!(
        replay.body.contains("already used or has expired"),
        "{}",
        replay.body
    );
    // A callback with no state, or an error from the provider, is refused plainly.
    let none = c.get(&format!("{callback}?code=x")).await;
    assert!(none.body.contains("without a state"), "{}", none.body);
}

#[tokio::test]
async fn a_provider_rotating_its_keys_is_followed() {
    let Some((op, t)) = setup(|_| {}).await else {
        return;
    };
    let mut b = Browser::new();
    assert_signed_in(&b.sign_in(&t, "alice").await, "alice");
    // The provider signs with a key the server has not seen: it fetches the keys again.
    op.rotate_keys().await;
    let mut c = Browser::new();
    let done = c.sign_in(&t, "alice").await;
    assert_signed_in(&done, "alice");
}

#[tokio::test]
async fn signing_out_ends_the_session_here_and_at_the_provider() {
    let Some((_op, t)) = setup(|_| {}).await else {
        return;
    };
    let mut b = Browser::new();
    b.sign_in(&t, "alice").await;
    let page = b.get(&format!("{}/orgs/net/stacks", t.url)).await;
    let csrf = {
        let i = page.body.find(r#"name="csrf" value=""#).unwrap() + 19;
        let end = page.body[i..].find('"').unwrap();
        page.body[i..i + end].to_string()
    };
    let session_cookie = b.cookies[&host_of(&t.url)]["bosun_session"].clone();
    let out = b
        .send(
            Method::POST,
            &format!("{}/logout", t.url),
            Some(&[("csrf", csrf.as_str())]),
        )
        .await;
    // A page of Bosun's moves on to the provider's end-session endpoint.
    assert_eq!(out.status, StatusCode::OK, "{}", out.body);
    let i = out.body.find(r#"content="0;url="#).unwrap() + 15;
    let end = out.body[i..].find('"').unwrap();
    let to = reqwest::Url::parse(&out.body[i..i + end].replace("&#38;", "&")).unwrap();
    assert!(
        to.as_str()
            .starts_with(&format!("{}/session/end", _op.issuer)),
        "{to}"
    );
    let query: BTreeMap<String, String> = to.query_pairs().into_owned().collect();
    assert_eq!(query["client_id"], CLIENT_ID);
    assert_eq!(
        query["post_logout_redirect_uri"],
        format!("{}/login", t.url)
    );
    assert!(query["id_token_hint"].split('.').count() == 3);
    // The session is over even with the old cookie presented again.
    assert!(!b.has_session(&t));
    b.cookies
        .entry(host_of(&t.url))
        .or_default()
        .insert("bosun_session".into(), session_cookie);
    let after = b.get(&format!("{}/orgs/net/stacks", t.url)).await;
    assert_eq!(after.status, StatusCode::SEE_OTHER);
    let login = b.get(&after.location.unwrap()).await;
    assert!(login.body.contains("signed out"), "{}", login.body);
}

#[tokio::test]
async fn sessions_end_when_idle_or_old_and_token_login_can_be_turned_off() {
    // Two providers, and no token login.
    let Some((_op, t)) = setup(|s| {
        s.token_login = false;
        let mut backup = s.providers[0].clone();
        backup.id = "backup".into();
        backup.name = "Backup SSO".into();
        s.providers.push(backup);
    })
    .await
    else {
        return;
    };
    let store = &t.server.state().store;
    // A button per provider; no token form, and a token posted anyway is refused saying
    // why.
    let mut b = Browser::new();
    let login = b.get(&format!("{}/login", t.url)).await;
    for (id, name) in [("corp", "Corp SSO"), ("backup", "Backup SSO")] {
        assert!(
            login.body.contains(&format!(r#"id="sign-in-{id}""#))
                && login.body.contains(&format!("Sign in with {name}")),
            "{}",
            login.body
        );
    }
    assert!(
        !login.body.contains(r#"id="token-login""#),
        "{}",
        login.body
    );
    let refused = b
        .send(
            Method::POST,
            &format!("{}/login", t.url),
            Some(&[("token", t.admin.as_str()), ("next", "/")]),
        )
        .await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert!(refused.body.contains("turned off"), "{}", refused.body);

    // A session unused for longer than the idle timeout ends.
    b.sign_in(&t, "alice").await;
    let page = format!("{}/orgs/net/stacks", t.url);
    assert_eq!(b.get(&page).await.status, StatusCode::OK);
    let session = store.list_sessions("alice", 1).await.unwrap().remove(0);
    store
        .touch_session(&session.id, chrono::Utc::now() - chrono::Duration::hours(9))
        .await
        .unwrap();
    let ended = b.get(&page).await;
    assert_eq!(ended.status, StatusCode::SEE_OTHER);
    let login = b.get(&ended.location.unwrap()).await;
    assert!(
        login.body.contains("unused for more than 8h"),
        "{}",
        login.body
    );
    let session = store.get_session(&session.id).await.unwrap().unwrap();
    assert!(session.ended_at.is_some());
}

#[tokio::test]
async fn hostile_input_to_the_sign_in_endpoints_is_bounded_and_refused() {
    let Some((_op, t)) = setup(|_| {}).await else {
        return;
    };
    let mut b = Browser::new();
    // A callback parameter past the bound is refused before anything is looked up.
    let long = "x".repeat(5000);
    let r = b
        .get(&format!(
            "{}/login/corp/callback?state={long}&code=c",
            t.url
        ))
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(r.body.contains("over 4096 bytes"), "{}", r.body);
    // An unknown provider's button says so.
    let r = b.get(&format!("{}/login/nowhere", t.url)).await;
    assert!(r.body.contains("no identity provider"), "{}", r.body);
    let client = reqwest::Client::new();
    // A CLI login's handle that is not one this server sealed, or too long, is refused
    // naming the field; an unknown provider is named.
    for login in ["not-a-handle", "a.b.c", &"y".repeat(10_000)] {
        let r = client
            .post(format!("{}/cli-login/poll", t.url))
            .json(&json!({ "login": login }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["field"], "login", "{body}");
    }
    let r = client
        .post(format!("{}/cli-login", t.url))
        .json(&json!({"provider": "nowhere"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = client
        .post(format!("{}/cli-login", t.url))
        .json(&json!({"provider": "corp", "extra": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::BAD_REQUEST,
        "unknown fields are refused"
    );
}

#[tokio::test]
async fn a_provider_answering_too_much_is_cut_off_and_named() {
    // A "provider" whose discovery document is larger than any real one.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let issuer = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().route(
        "/.well-known/openid-configuration",
        axum::routing::get(|| async { "x".repeat(200_000) }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    let t = TestServer::start_with(move |c| {
        c.sign_in.providers = vec![provider("huge", issuer)];
    })
    .await;
    let mut b = Browser::new();
    let r = b.get(&format!("{}/login/huge?next=/", t.url)).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(
        r.body.contains("an answer was larger than 65536 bytes"),
        "{}",
        r.body
    );
}

/// The query parameter `name` of `url`.
fn query_param(url: &reqwest::Url, name: &str) -> String {
    url.query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| panic!("no {name} in {url}"))
}

/// Posts `body` to `path` outside the API (no token), answering status and JSON.
async fn post_public(t: &TestServer, path: &str, body: Value) -> (StatusCode, Value) {
    let r = reqwest::Client::new()
        .post(format!("{}{path}", t.url))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_cli_login_without_device_flow_goes_through_the_browser_to_the_clis_loopback() {
    use bosun_server::sign_in::oidc::{pkce_challenge, random_text};
    if !require_oidc_provider() {
        return;
    }
    let (op, t) = serve(OpenIdProvider::start_without_device_flow(users()), |_| {}).await;
    // Without a loopback to come back to, the login cannot go on, and says why.
    let (status, body) = post_public(&t, "/cli-login", json!({"provider": "corp"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["field"], "loopback", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("offers no device flow"),
        "{body}"
    );
    // Only a loopback address may receive the token's code, and only a real challenge.
    let verifier = random_text();
    let challenge = pkce_challenge(&verifier);
    for (redirect, code_challenge, field) in [
        (
            "http://evil.example:8080/cb",
            challenge.as_str(),
            "loopback.redirect_uri",
        ),
        (
            "https://127.0.0.1:8080/cb",
            challenge.as_str(),
            "loopback.redirect_uri",
        ),
        (
            "http://127.0.0.1/cb",
            challenge.as_str(),
            "loopback.redirect_uri",
        ),
        (
            "http://127.0.0.1:8080/cb?x=1",
            challenge.as_str(),
            "loopback.redirect_uri",
        ),
        (
            "http://user@127.0.0.1:8080/cb",
            challenge.as_str(),
            "loopback.redirect_uri",
        ),
        (
            &format!("http://127.0.0.1:8080/{}", "a".repeat(300)),
            challenge.as_str(),
            "loopback.redirect_uri",
        ),
        (
            "http://127.0.0.1:8080/cb",
            "too-short",
            "loopback.code_challenge",
        ),
    ] {
        let (status, body) = post_public(
            &t,
            "/cli-login",
            json!({"loopback": {"redirect_uri": redirect, "code_challenge": code_challenge}}),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{redirect}: {body}");
        assert_eq!(body["error"]["field"], field, "{redirect}: {body}");
    }
    // The CLI's loopback (nothing listens: the walk stops at the redirect to it).
    let loopback = "http://127.0.0.1:9/bosun-login";
    let begin = || {
        post_public(
            &t,
            "/cli-login",
            json!({"loopback": {"redirect_uri": loopback, "code_challenge": challenge}}),
        )
    };
    let (status, started) = begin().await;
    assert_eq!(status, StatusCode::OK, "{started}");
    assert_eq!(started["method"], "browser", "{started}");
    assert!(started.get("user_code").is_none(), "{started}");
    let url = started["verification_uri"].as_str().unwrap();
    assert!(url.starts_with(&op.issuer), "{url}");

    // The person signs in at the provider in a browser that never saw Bosun before (no
    // binding cookie: the CLI's challenge binds this sign-in).
    let mut b = Browser::new();
    let back = b.walk(url, "bob", loopback, Some(loopback)).await;
    let to = reqwest::Url::parse(back.location.as_deref().unwrap()).unwrap();
    assert_eq!(to.path(), "/bosun-login");
    let code = query_param(&to, "code");

    // The code is worth nothing without the verifier, or when forged.
    let (status, body) = post_public(
        &t,
        "/cli-login/exchange",
        json!({"code": code, "verifier": random_text()}),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("does not answer the challenge"),
        "{body}"
    );
    for forged in ["a.b.c", "nothing", &"z".repeat(10_000)] {
        let (status, body) = post_public(
            &t,
            "/cli-login/exchange",
            json!({"code": forged, "verifier": verifier}),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(body["error"]["field"], "code", "{body}");
    }
    // With it, the CLI's short-lived token: bob, operator of net by his group.
    let (status, done) = post_public(
        &t,
        "/cli-login/exchange",
        json!({"code": code, "verifier": verifier}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["status"], "done");
    let secret = done["token"]["secret"].as_str().unwrap();
    assert_eq!(done["token"]["token"]["description"], "bosun login (corp)");
    let me = t.get("/api/v1/whoami", secret).await;
    assert_eq!(me.status, StatusCode::OK, "{:?}", me.body);
    assert_eq!(me.body["user"], "bob");
    assert_eq!(
        me.body["orgs"],
        json!([{"org": "net", "role": "operator"}]),
        "{:?}",
        me.body
    );
    let session = done["session"].as_str().unwrap();
    let sessions = t.get("/api/v1/sessions", secret).await;
    assert!(
        sessions.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["id"] == session),
        "{:?}",
        sessions.body
    );
    // Once the session ends, its code gives nothing any more.
    let r = t
        .call(
            Method::DELETE,
            &format!("/api/v1/sessions/{session}"),
            Some(secret),
            None,
        )
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    let (status, body) = post_public(
        &t,
        "/cli-login/exchange",
        json!({"code": code, "verifier": verifier}),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("revoked"),
        "{body}"
    );

    // A refusal at the provider comes back to the CLI's loopback, named.
    let (_, started) = begin().await;
    let url = reqwest::Url::parse(started["verification_uri"].as_str().unwrap()).unwrap();
    let state = query_param(&url, "state");
    let refused = Browser::new()
        .get(&format!(
            "{}/login/corp/callback?state={state}&error=access_denied",
            t.url
        ))
        .await;
    let to = reqwest::Url::parse(refused.location.as_deref().unwrap()).unwrap();
    assert!(to.as_str().starts_with(loopback), "{to}");
    let error = query_param(&to, "error");
    assert!(error.contains("access_denied"), "{error}");
    // Both counted: one signed in through the browser, one refused.
    let metrics = t.metrics_text().await;
    for line in [
        "bosun_sign_ins_total{provider=\"corp\",way=\"cli_browser\",result=\"signed_in\"} 1\n",
        "bosun_sign_ins_total{provider=\"corp\",way=\"cli_browser\",result=\"refused\"} 1\n",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    // And its state is spent.
    let replay = Browser::new()
        .get(&format!(
            "{}/login/corp/callback?state={state}&code=x",
            t.url
        ))
        .await;
    assert!(
        replay.body.contains("already used or has expired"),
        "{}",
        replay.body
    );
}

#[tokio::test]
async fn a_cli_login_may_ask_for_the_browser_where_the_provider_has_the_device_flow() {
    let Some((op, t)) = setup(|_| {}).await else {
        return;
    };
    op.set_clients(json!([{
        "client_id": CLIENT_ID,
        "client_secret": CLIENT_SECRET,
        "redirect_uris": [format!("{}/login/corp/callback", t.url)],
        "grant_types": ["authorization_code", "urn:ietf:params:oauth:grant-type:device_code"],
        "response_types": ["code"],
    }]))
    .await;
    let challenge =
        bosun_server::sign_in::oidc::pkce_challenge(&bosun_server::sign_in::oidc::random_text());
    let loopback =
        json!({"redirect_uri": "http://[::1]:4711/bosun-login", "code_challenge": challenge});
    let (status, started) = post_public(&t, "/cli-login", json!({"loopback": loopback})).await;
    assert_eq!(status, StatusCode::OK, "{started}");
    assert_eq!(started["method"], "device", "{started}");
    assert!(started["user_code"].is_string(), "{started}");
    let (status, started) = post_public(
        &t,
        "/cli-login",
        json!({"loopback": loopback, "browser": true}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{started}");
    assert_eq!(started["method"], "browser", "{started}");
}

#[tokio::test]
async fn sign_ins_begun_past_the_servers_budget_are_refused_saying_when_to_try_again() {
    let Some((_op, t)) = setup(|c| c.starts_per_minute = 2).await else {
        return;
    };
    let challenge =
        bosun_server::sign_in::oidc::pkce_challenge(&bosun_server::sign_in::oidc::random_text());
    let begin = || {
        reqwest::Client::new()
            .post(format!("{}/cli-login", t.url))
            .json(&json!({"browser": true, "loopback":
                {"redirect_uri": "http://127.0.0.1:4711/bosun-login", "code_challenge": challenge}}))
            .send()
    };
    for _ in 0..2 {
        let r = begin().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }
    // The third within the minute: 429, with when to try again.
    let r = begin().await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = r.headers()[reqwest::header::RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=30).contains(&retry), "{retry}");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited", "{body}");
    // The console's button shares the budget, and says so on the login page.
    let page = Browser::new()
        .get(&format!("{}/login/corp?next=/", t.url))
        .await;
    assert!(
        page.location.is_none() && page.body.contains("too many sign-ins are beginning"),
        "{:?} {}",
        page.location,
        page.body
    );
    // Counted for the operator.
    assert!(t
        .metrics_text()
        .await
        .contains("bosun_sign_in_starts_limited_total 2\n"));
    // Token login is not a sign-in begun at a provider: still open.
    let me = t.get("/api/v1/whoami", &t.admin).await;
    assert_eq!(me.status, StatusCode::OK);
}

#[tokio::test]
async fn an_admin_links_a_user_made_before_the_provider_and_its_person_signs_in_as_them() {
    let Some((_op, t)) = setup(|_| {}).await else {
        return;
    };
    let store = &t.server.state().store;
    // robert was made by hand, a viewer of default, before the provider was configured;
    // at the provider he is `bob`.
    let robert = t.user_token("robert", Some(Role::Viewer)).await;
    let link = json!({"user": "robert", "provider": "corp", "subject": "bob"});
    let r = t.post("/api/v1/identities", &robert, link.clone()).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    for (bad, status, field) in [
        (
            json!({"user": "robert", "provider": "nowhere", "subject": "bob"}),
            StatusCode::BAD_REQUEST,
            Some("provider"),
        ),
        (
            json!({"user": "robert", "provider": "corp", "subject": ""}),
            StatusCode::BAD_REQUEST,
            Some("subject"),
        ),
        (
            json!({"user": "robert", "provider": "corp", "subject": "x".repeat(300)}),
            StatusCode::BAD_REQUEST,
            Some("subject"),
        ),
        (
            json!({"user": "ghost", "provider": "corp", "subject": "bob"}),
            StatusCode::NOT_FOUND,
            None,
        ),
    ] {
        let r = t.post("/api/v1/identities", &t.admin, bad.clone()).await;
        assert_eq!(r.status, status, "{bad}: {:?}", r.body);
        if let Some(field) = field {
            assert_eq!(r.body["error"]["field"], field, "{bad}: {:?}", r.body);
        }
    }
    let r = t.post("/api/v1/identities", &t.admin, link.clone()).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(r.body["user"], "robert");
    assert_eq!(r.body["last_sign_in_at"], Value::Null);
    // Linked once: a second link is refused naming who has it.
    let r = t.post("/api/v1/identities", &t.admin, link).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    assert!(r.message().contains("robert"), "{:?}", r.body);

    // bob signs in, and is robert: his manual membership kept, the rules' added.
    let mut b = Browser::new();
    let done = b.sign_in(&t, "bob").await;
    assert_signed_in(&done, "robert");
    let roles = store.roles_of("robert").await.unwrap();
    assert_eq!(roles.get("default"), Some(&Role::Viewer));
    assert_eq!(roles.get("net"), Some(&Role::Operator));
    assert!(store.get_user("bob").await.unwrap().is_none());
    let mine = t.get("/api/v1/identities", &robert).await;
    assert_eq!(mine.status, StatusCode::OK, "{:?}", mine.body);
    assert_eq!(mine.body["items"][0]["subject"], "bob", "{:?}", mine.body);
    assert!(mine.body["items"][0]["last_sign_in_at"].is_string());
    // Only a server admin lists another's.
    let r = t.get("/api/v1/identities?user=admin", &robert).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);

    // A subject with characters a path must encode is linked and unlinked all the same.
    let odd = "auth0|a/b c";
    let r = t
        .post(
            "/api/v1/identities",
            &t.admin,
            json!({"user": "robert", "provider": "corp", "subject": odd}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let r = t
        .call(
            Method::DELETE,
            "/api/v1/identities/corp/auth0%7Ca%2Fb%20c",
            Some(&t.admin),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["subject"], odd);

    // Unlinked (by a server admin only): the session it signed in ends, and bob's next
    // sign-in makes a user of its own.
    let unlink = "/api/v1/identities/corp/bob";
    let r = t.call(Method::DELETE, unlink, Some(&robert), None).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    let r = t.call(Method::DELETE, unlink, Some(&t.admin), None).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let page = b.get(&format!("{}/orgs/net/stacks", t.url)).await;
    assert!(
        page.location
            .as_deref()
            .is_some_and(|l| l.contains("/login")),
        "{:?} {}",
        page.location,
        page.body
    );
    let r = t.call(Method::DELETE, unlink, Some(&t.admin), None).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);
    let again = Browser::new().sign_in(&t, "bob").await;
    assert_signed_in(&again, "bob");
    // Both audited, naming the user and the subject.
    let trail = t.get("/api/v1/audit?limit=200", &t.admin).await;
    for action in ["identity.link", "identity.unlink"] {
        assert!(
            trail.body["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["action"] == action
                    && e["target"] == "user:robert"
                    && e["detail"]["subject"] == "bob"),
            "{action}: {:?}",
            trail.body
        );
    }
}

#[tokio::test]
async fn a_provider_that_cannot_be_used_is_found_as_the_server_starts() {
    if !require_oidc_provider() {
        return;
    }
    let op = OpenIdProvider::start(users());
    // A provider nothing answers for: a port bound, then let go.
    let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", gone.local_addr().unwrap());
    drop(gone);
    let issuer = op.issuer.clone();
    let t = TestServer::start_with(move |c| {
        c.sign_in.providers = vec![provider("corp", issuer), provider("down", dead)];
    })
    .await;
    // Asked at start, before anyone signs in: the gauge tells them apart.
    crate::harness::eventually("both providers probed", || async {
        let text = t.metrics_text().await;
        text.contains("bosun_sign_in_provider_up{provider=\"corp\"} 1\n")
            && text.contains("bosun_sign_in_provider_up{provider=\"down\"} 0\n")
    })
    .await;
}

/// `bosun login` through the browser for `login`, as the CLI does it: begun with a
/// loopback and a challenge, walked through the provider, the code exchanged. Answers the
/// token's secret.
async fn cli_login_through_the_browser(t: &TestServer, login: &str) -> String {
    use bosun_server::sign_in::oidc::{pkce_challenge, random_text};
    let verifier = random_text();
    let loopback = "http://127.0.0.1:9/bosun-login";
    let (status, started) = post_public(
        t,
        "/cli-login",
        json!({"browser": true, "loopback":
            {"redirect_uri": loopback, "code_challenge": pkce_challenge(&verifier)}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{started}");
    let url = started["verification_uri"].as_str().unwrap();
    let back = Browser::new()
        .walk(url, login, loopback, Some(loopback))
        .await;
    let code = query_param(
        &reqwest::Url::parse(back.location.as_deref().unwrap()).unwrap(),
        "code",
    );
    let (status, done) = post_public(
        t,
        "/cli-login/exchange",
        json!({"code": code, "verifier": verifier}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    done["token"]["secret"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn an_outage_of_the_provider_signs_no_one_out() {
    // Every request is due a refresh.
    let Some((op, t)) = setup(|c| c.refresh_every = std::time::Duration::from_millis(1)).await
    else {
        return;
    };
    let store = &t.server.state().store;
    let mut b = Browser::new();
    assert_signed_in(&b.sign_in(&t, "alice").await, "alice");
    let bob = cli_login_through_the_browser(&t, "bob").await;
    // While the provider answers, a refresh goes through.
    let r = t.post("/api/v1/login/refresh", &bob, json!({})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let bob = r.body["secret"].as_str().unwrap().to_string();

    // The provider goes away.
    drop(op);
    // The console stays open: the refresh is put off, not taken as a refusal.
    for _ in 0..2 {
        let page = b.get(&format!("{}/orgs/net/stacks", t.url)).await;
        assert_eq!(
            page.status,
            StatusCode::OK,
            "{:?} {}",
            page.location,
            page.body
        );
    }
    // The CLI's refresh is refused for now, saying the login stays; its token still works.
    let r = t.post("/api/v1/login/refresh", &bob, json!({})).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{:?}", r.body);
    assert_eq!(r.code(), "unavailable");
    assert!(r.message().contains("your login stays"), "{:?}", r.body);
    let me = t.get("/api/v1/whoami", &bob).await;
    assert_eq!(me.status, StatusCode::OK, "{:?}", me.body);
    for user in ["alice", "bob"] {
        let sessions = store.list_sessions(user, 10).await.unwrap();
        assert!(
            sessions.iter().all(|s| s.ended_at.is_none()),
            "{user}: {sessions:?}"
        );
    }
}
