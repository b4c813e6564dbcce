//! The authorization matrix: every route × every kind of caller, allowed and refused.

use std::collections::BTreeSet;

use bosun_core::Role;
use bosun_server::routes::api_routes;
use bosun_server::service::tokens::mint_run_token;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::harness::TestServer;

/// Who may call a route, as the contract states it (independent of the route table).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Needs {
    AnyUser,
    ServerAdmin,
    Org(Role),
}

pub(crate) struct Case {
    pub(crate) method: Method,
    pub(crate) template: &'static str,
    path: &'static str,
    pub(crate) body: Option<Value>,
    needs: Needs,
}

fn case(
    method: Method,
    template: &'static str,
    path: &'static str,
    body: Option<Value>,
    needs: Needs,
) -> Case {
    Case {
        method,
        template,
        path,
        body,
        needs,
    }
}

/// One request per route. Writes aim at missing or harmless targets, so an allowed call
/// gets past the guard (any status but 401/403) without changing what later calls see.
pub(crate) fn cases() -> Vec<Case> {
    use Needs::*;
    use Role::*;
    let stack = json!({"id": "fresh", "repository": "github:acme/infra", "path": "/abs"});
    vec![
        case(Method::GET, "/whoami", "/whoami", None, AnyUser),
        case(Method::GET, "/orgs", "/orgs", None, AnyUser),
        case(
            Method::POST,
            "/orgs",
            "/orgs",
            Some(json!({"id": "Bad Org"})),
            ServerAdmin,
        ),
        case(
            Method::GET,
            "/orgs/{org}",
            "/orgs/default",
            None,
            Org(Viewer),
        ),
        case(
            Method::PATCH,
            "/orgs/{org}",
            "/orgs/default",
            Some(json!({"pr_feedback": "bogus"})),
            Org(Admin),
        ),
        case(
            Method::POST,
            "/users",
            "/users",
            Some(json!({"id": "Bad User"})),
            ServerAdmin,
        ),
        case(
            Method::GET,
            "/orgs/{org}/members",
            "/orgs/default/members",
            None,
            Org(Viewer),
        ),
        case(
            Method::PUT,
            "/orgs/{org}/members/{user}",
            "/orgs/default/members/ghost",
            Some(json!({"role": "viewer"})),
            Org(Admin),
        ),
        case(
            Method::DELETE,
            "/orgs/{org}/members/{user}",
            "/orgs/default/members/ghost",
            None,
            Org(Admin),
        ),
        case(
            Method::GET,
            "/orgs/{org}/audit",
            "/orgs/default/audit",
            None,
            Org(Admin),
        ),
        case(
            Method::POST,
            "/tokens",
            "/tokens",
            Some(json!({"expires_in_seconds": 1})),
            AnyUser,
        ),
        case(Method::GET, "/tokens", "/tokens", None, AnyUser),
        case(Method::GET, "/sessions", "/sessions", None, AnyUser),
        case(Method::DELETE, "/sessions", "/sessions", None, AnyUser),
        case(Method::GET, "/identities", "/identities", None, AnyUser),
        case(
            Method::POST,
            "/identities",
            "/identities",
            Some(json!({"user": "ghost", "provider": "nowhere", "subject": "s"})),
            ServerAdmin,
        ),
        case(
            Method::DELETE,
            "/identities/{provider}/{subject}",
            "/identities/nowhere/s",
            None,
            ServerAdmin,
        ),
        case(
            Method::POST,
            "/login/refresh",
            "/login/refresh",
            Some(json!({})),
            AnyUser,
        ),
        case(
            Method::DELETE,
            "/sessions/{session}",
            "/sessions/ses-missing",
            None,
            AnyUser,
        ),
        case(Method::GET, "/audit", "/audit", None, ServerAdmin),
        case(
            Method::DELETE,
            "/tokens/{token}",
            "/tokens/tok_missing",
            None,
            AnyUser,
        ),
        case(
            Method::POST,
            "/orgs/{org}/pool-tokens",
            "/orgs/default/pool-tokens",
            Some(json!({"pool": "Bad Pool"})),
            Org(Admin),
        ),
        case(
            Method::GET,
            "/orgs/{org}/pool-tokens",
            "/orgs/default/pool-tokens",
            None,
            Org(Admin),
        ),
        case(
            Method::DELETE,
            "/orgs/{org}/pool-tokens/{token}",
            "/orgs/default/pool-tokens/tok_missing",
            None,
            Org(Admin),
        ),
        case(
            Method::GET,
            "/orgs/{org}/stacks",
            "/orgs/default/stacks",
            None,
            Org(Viewer),
        ),
        case(
            Method::POST,
            "/orgs/{org}/stacks",
            "/orgs/default/stacks",
            Some(stack),
            Org(Admin),
        ),
        case(
            Method::GET,
            "/orgs/{org}/stacks/{stack}",
            "/orgs/default/stacks/ghost",
            None,
            Org(Viewer),
        ),
        case(
            Method::PATCH,
            "/orgs/{org}/stacks/{stack}",
            "/orgs/default/stacks/ghost",
            Some(json!({"name": "x"})),
            Org(Admin),
        ),
        case(
            Method::DELETE,
            "/orgs/{org}/stacks/{stack}",
            "/orgs/default/stacks/ghost",
            None,
            Org(Admin),
        ),
        // The state backend: viewers read, operators write, lock and unlock.
        case(
            Method::GET,
            STATE,
            "/orgs/default/stacks/ghost/state",
            None,
            Org(Viewer),
        ),
        case(
            Method::POST,
            STATE,
            "/orgs/default/stacks/ghost/state",
            Some(json!({})),
            Org(Operator),
        ),
        case(
            lock_method("LOCK"),
            STATE,
            "/orgs/default/stacks/ghost/state",
            Some(json!({"ID": "x"})),
            Org(Operator),
        ),
        case(
            lock_method("UNLOCK"),
            STATE,
            "/orgs/default/stacks/ghost/state",
            Some(json!({"ID": "x"})),
            Org(Operator),
        ),
        case(
            Method::GET,
            "/orgs/{org}/stacks/{stack}/state/versions",
            "/orgs/default/stacks/ghost/state/versions",
            None,
            Org(Viewer),
        ),
        case(
            Method::GET,
            "/orgs/{org}/stacks/{stack}/state/versions/{version}",
            "/orgs/default/stacks/ghost/state/versions/1",
            None,
            Org(Viewer),
        ),
        case(
            Method::GET,
            "/orgs/{org}/stacks/{stack}/state/lock",
            "/orgs/default/stacks/ghost/state/lock",
            None,
            Org(Viewer),
        ),
        case(
            Method::POST,
            "/orgs/{org}/stacks/{stack}/state/force-unlock",
            "/orgs/default/stacks/ghost/state/force-unlock",
            Some(json!({"lock_id": "x"})),
            Org(Operator),
        ),
        case(
            Method::GET,
            "/orgs/{org}/stacks/{stack}/outputs",
            "/orgs/default/stacks/ghost/outputs",
            None,
            Org(Viewer),
        ),
        // Runs: viewers read, operators act.
        case(
            Method::POST,
            "/orgs/{org}/stacks/{stack}/runs",
            "/orgs/default/stacks/ghost/runs",
            Some(json!({})),
            Org(Operator),
        ),
        case(
            Method::GET,
            "/orgs/{org}/stacks/{stack}/runs",
            "/orgs/default/stacks/ghost/runs",
            None,
            Org(Viewer),
        ),
        case(
            Method::POST,
            "/orgs/{org}/stacks/{stack}/drift-checks",
            "/orgs/default/stacks/ghost/drift-checks",
            Some(json!({})),
            Org(Operator),
        ),
        case(
            Method::GET,
            "/orgs/{org}/secrets",
            "/orgs/default/secrets",
            None,
            Org(Operator),
        ),
        case(
            Method::PUT,
            "/orgs/{org}/secrets/{namespace}/{key}",
            "/orgs/default/secrets/authz/probe",
            Some(json!({"value": "v"})),
            Org(Admin),
        ),
        case(
            Method::DELETE,
            "/orgs/{org}/secrets/{namespace}/{key}",
            "/orgs/default/secrets/authz/ghost",
            None,
            Org(Admin),
        ),
        case(
            Method::POST,
            "/oidc/rotate",
            "/oidc/rotate",
            Some(json!({})),
            ServerAdmin,
        ),
        case(
            Method::GET,
            "/orgs/{org}/stacks/{stack}/triggers",
            "/orgs/default/stacks/ghost/triggers",
            None,
            Org(Viewer),
        ),
        case(
            Method::GET,
            "/orgs/{org}/runs/{run}",
            "/orgs/default/runs/ghost",
            None,
            Org(Viewer),
        ),
        case(
            Method::POST,
            "/orgs/{org}/runs/{run}/confirm",
            "/orgs/default/runs/ghost/confirm",
            None,
            Org(Operator),
        ),
        case(
            Method::POST,
            "/orgs/{org}/runs/{run}/discard",
            "/orgs/default/runs/ghost/discard",
            None,
            Org(Operator),
        ),
        case(
            Method::POST,
            "/orgs/{org}/runs/{run}/cancel",
            "/orgs/default/runs/ghost/cancel",
            None,
            Org(Operator),
        ),
        case(
            Method::POST,
            "/orgs/{org}/runs/{run}/retry",
            "/orgs/default/runs/ghost/retry",
            None,
            Org(Operator),
        ),
        case(
            Method::GET,
            "/orgs/{org}/runs/{run}/logs",
            "/orgs/default/runs/ghost/logs",
            None,
            Org(Viewer),
        ),
        case(
            Method::GET,
            "/orgs/{org}/runs/{run}/logs/stream",
            "/orgs/default/runs/ghost/logs/stream",
            None,
            Org(Viewer),
        ),
        case(
            Method::GET,
            "/orgs/{org}/runners",
            "/orgs/default/runners",
            None,
            Org(Viewer),
        ),
        case(
            Method::POST,
            "/orgs/{org}/runners/{runner}/drain",
            "/orgs/default/runners/ghost/drain",
            None,
            Org(Admin),
        ),
        case(
            Method::GET,
            "/orgs/{org}/hosts",
            "/orgs/default/hosts",
            None,
            Org(Viewer),
        ),
        case(
            Method::POST,
            "/orgs/{org}/hosts",
            "/orgs/default/hosts",
            Some(json!({"name": "Bad Host"})),
            Org(Admin),
        ),
        case(
            Method::GET,
            "/orgs/{org}/hosts/{host}",
            "/orgs/default/hosts/ghost",
            None,
            Org(Viewer),
        ),
        case(
            Method::PATCH,
            "/orgs/{org}/hosts/{host}",
            "/orgs/default/hosts/ghost",
            Some(json!({})),
            Org(Admin),
        ),
        case(
            Method::DELETE,
            "/orgs/{org}/hosts/{host}",
            "/orgs/default/hosts/ghost",
            None,
            Org(Admin),
        ),
        case(
            Method::GET,
            "/orgs/{org}/environments",
            "/orgs/default/environments",
            None,
            Org(Viewer),
        ),
        case(
            Method::POST,
            "/orgs/{org}/environments",
            "/orgs/default/environments",
            Some(json!({"id": "Bad Env"})),
            Org(Admin),
        ),
        case(
            Method::GET,
            "/orgs/{org}/environments/{env}",
            "/orgs/default/environments/ghost",
            None,
            Org(Viewer),
        ),
        case(
            Method::PATCH,
            "/orgs/{org}/environments/{env}",
            "/orgs/default/environments/ghost",
            Some(json!({})),
            Org(Admin),
        ),
        case(
            Method::DELETE,
            "/orgs/{org}/environments/{env}",
            "/orgs/default/environments/ghost",
            None,
            Org(Admin),
        ),
        case(
            Method::PUT,
            "/orgs/{org}/environments/{env}/grants/{user}",
            "/orgs/default/environments/ghost/grants/ghost",
            None,
            Org(Admin),
        ),
        case(
            Method::DELETE,
            "/orgs/{org}/environments/{env}/grants/{user}",
            "/orgs/default/environments/ghost/grants/ghost",
            None,
            Org(Admin),
        ),
        case(
            Method::GET,
            "/orgs/{org}/plans",
            "/orgs/default/plans",
            None,
            Org(Viewer),
        ),
        case(
            Method::POST,
            "/orgs/{org}/plans",
            "/orgs/default/plans",
            Some(json!({"source": "not: [a plan"})),
            Org(Admin),
        ),
        case(
            Method::POST,
            "/orgs/{org}/plans/lint",
            "/orgs/default/plans/lint",
            Some(json!({"source": "not: [a plan"})),
            Org(Viewer),
        ),
        case(
            Method::GET,
            "/orgs/{org}/plans/{plan}",
            "/orgs/default/plans/ghost",
            None,
            Org(Viewer),
        ),
        case(
            Method::DELETE,
            "/orgs/{org}/plans/{plan}",
            "/orgs/default/plans/ghost",
            None,
            Org(Admin),
        ),
        case(
            Method::POST,
            "/orgs/{org}/inventory",
            "/orgs/default/inventory",
            Some(json!({"source": "hosts: [broken"})),
            Org(Admin),
        ),
        case(
            Method::GET,
            "/orgs/{org}/notifications/targets",
            "/orgs/default/notifications/targets",
            None,
            Org(Viewer),
        ),
        case(
            Method::POST,
            "/orgs/{org}/notifications/targets",
            "/orgs/default/notifications/targets",
            Some(json!({"id": "Bad Target", "kind": "slack", "url": "http://127.0.0.1:9/x"})),
            Org(Admin),
        ),
        case(
            Method::GET,
            "/orgs/{org}/notifications/targets/{id}",
            "/orgs/default/notifications/targets/ghost",
            None,
            Org(Viewer),
        ),
        case(
            Method::PATCH,
            "/orgs/{org}/notifications/targets/{id}",
            "/orgs/default/notifications/targets/ghost",
            Some(json!({"enabled": false})),
            Org(Admin),
        ),
        case(
            Method::DELETE,
            "/orgs/{org}/notifications/targets/{id}",
            "/orgs/default/notifications/targets/ghost",
            None,
            Org(Admin),
        ),
        case(
            Method::GET,
            "/orgs/{org}/notifications/targets/{id}/deliveries",
            "/orgs/default/notifications/targets/ghost/deliveries",
            None,
            Org(Viewer),
        ),
        case(
            Method::POST,
            "/orgs/{org}/notifications/targets/{id}/test",
            "/orgs/default/notifications/targets/ghost/test",
            None,
            Org(Admin),
        ),
        case(
            Method::POST,
            "/orgs/{org}/plans/{plan}/runs",
            "/orgs/default/plans/ghost/runs",
            Some(json!({"dry_run": true})),
            Org(Operator),
        ),
        case(
            Method::GET,
            "/orgs/{org}/plans/{plan}/runs",
            "/orgs/default/plans/ghost/runs",
            None,
            Org(Viewer),
        ),
        case(
            Method::GET,
            "/orgs/{org}/plan-runs/{run}",
            "/orgs/default/plan-runs/ghost",
            None,
            Org(Viewer),
        ),
        case(
            Method::POST,
            "/orgs/{org}/plan-runs/{run}/abort",
            "/orgs/default/plan-runs/ghost/abort",
            None,
            Org(Operator),
        ),
        case(
            Method::GET,
            "/orgs/{org}/plan-runs/{run}/logs",
            "/orgs/default/plan-runs/ghost/logs",
            None,
            Org(Viewer),
        ),
        case(
            Method::GET,
            "/orgs/{org}/plan-runs/{run}/logs/stream",
            "/orgs/default/plan-runs/ghost/logs/stream",
            None,
            Org(Viewer),
        ),
        case(
            Method::GET,
            "/orgs/{org}/approvals",
            "/orgs/default/approvals",
            None,
            Org(Viewer),
        ),
        case(
            Method::GET,
            "/orgs/{org}/approvals/decisions",
            "/orgs/default/approvals/decisions",
            None,
            Org(Viewer),
        ),
        case(
            Method::POST,
            "/orgs/{org}/approvals/{subject}/approve",
            "/orgs/default/approvals/ghost/approve",
            Some(json!({})),
            Org(Operator),
        ),
        case(
            Method::POST,
            "/orgs/{org}/approvals/{subject}/reject",
            "/orgs/default/approvals/ghost/reject",
            Some(json!({"comment": "no"})),
            Org(Operator),
        ),
        case(
            Method::GET,
            "/orgs/{org}/policies",
            "/orgs/default/policies",
            None,
            Org(Viewer),
        ),
        case(
            Method::GET,
            "/orgs/{org}/policies/{name}",
            "/orgs/default/policies/ghost",
            None,
            Org(Viewer),
        ),
        case(
            Method::PUT,
            "/orgs/{org}/policies/{name}",
            "/orgs/default/policies/ghost",
            Some(json!({})),
            Org(Admin),
        ),
        case(
            Method::DELETE,
            "/orgs/{org}/policies/{name}",
            "/orgs/default/policies/ghost",
            None,
            Org(Admin),
        ),
        case(
            Method::POST,
            "/orgs/{org}/runs/{run}/override",
            "/orgs/default/runs/ghost/override",
            Some(json!({"reason": "x"})),
            Org(Admin),
        ),
        case(
            Method::POST,
            "/orgs/{org}/plan-runs/{run}/override",
            "/orgs/default/plan-runs/ghost/override",
            Some(json!({"reason": "x"})),
            Org(Admin),
        ),
        case(
            Method::GET,
            "/orgs/{org}/plans/{plan}/schedule",
            "/orgs/default/plans/ghost/schedule",
            None,
            Org(Viewer),
        ),
        case(
            Method::PUT,
            "/orgs/{org}/plans/{plan}/schedule",
            "/orgs/default/plans/ghost/schedule",
            Some(json!({"cron": "0 2 * * *"})),
            Org(Operator),
        ),
        case(
            Method::DELETE,
            "/orgs/{org}/plans/{plan}/schedule",
            "/orgs/default/plans/ghost/schedule",
            None,
            Org(Operator),
        ),
    ]
}

/// The runner protocol: pool tokens only (checked in `runner_protocol_needs_a_pool_token`).
const RUNNER_ROUTES: [(&str, &str); 16] = [
    ("POST", "/runner/register"),
    ("POST", "/runner/lease"),
    ("POST", "/runner/runs/{run}/heartbeat"),
    ("GET", "/runner/runs/{run}/logs/next"),
    ("POST", "/runner/runs/{run}/logs"),
    ("PUT", "/runner/runs/{run}/plan"),
    ("PUT", "/runner/runs/{run}/plan-json"),
    ("GET", "/runner/runs/{run}/plan"),
    ("POST", "/runner/runs/{run}/report"),
    ("PUT", "/runner/runs/{run}/recovered-state"),
    ("POST", "/runner/runs/{run}/abandon"),
    ("POST", "/runner/plan-runs/{run}/heartbeat"),
    ("GET", "/runner/plan-runs/{run}/logs/next"),
    ("POST", "/runner/plan-runs/{run}/logs"),
    ("POST", "/runner/plan-runs/{run}/results"),
    ("POST", "/runner/plan-runs/{run}/report"),
];

const STATE: &str = "/orgs/{org}/stacks/{stack}/state";

fn lock_method(m: &str) -> Method {
    Method::from_bytes(m.as_bytes()).unwrap()
}

#[test]
fn every_route_is_in_the_matrix() {
    let table: BTreeSet<(String, String)> = cases()
        .iter()
        .map(|c| (c.method.to_string(), c.template.to_string()))
        .chain(
            RUNNER_ROUTES
                .iter()
                .map(|(m, p)| (m.to_string(), p.to_string())),
        )
        .collect();
    let mut served = 0;
    for r in api_routes() {
        for m in &r.methods {
            served += 1;
            assert!(
                table.contains(&(m.to_string(), r.path.to_string())),
                "route {m} {} has no row in the authorization matrix",
                r.path
            );
        }
    }
    assert_eq!(table.len(), served);
}

#[tokio::test]
async fn matrix_of_roles_and_token_kinds() {
    let t = TestServer::start().await;
    // `other` administers a second org but is no member of `default`.
    let outsider = t.user_token("outsider", None).await;
    let r = t
        .post("/api/v1/orgs", &t.admin, json!({"id": "other"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let r = t
        .call(
            Method::PUT,
            "/api/v1/orgs/other/members/outsider",
            Some(&t.admin),
            Some(json!({"role": "admin"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let viewer = t.user_token("viewer", Some(Role::Viewer)).await;
    let operator = t.user_token("operator", Some(Role::Operator)).await;
    let org_admin = t.user_token("org-admin", Some(Role::Admin)).await;
    let pool = t
        .post(
            "/api/v1/orgs/default/pool-tokens",
            &t.admin,
            json!({"pool": "edge"}),
        )
        .await;
    let pool = pool.body["secret"].as_str().unwrap().to_string();
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

    // (name, token, server admin?, role in default)
    let users: Vec<(&str, &str, bool, Option<Role>)> = vec![
        ("outsider", &outsider, false, None),
        ("viewer", &viewer, false, Some(Role::Viewer)),
        ("operator", &operator, false, Some(Role::Operator)),
        ("org-admin", &org_admin, false, Some(Role::Admin)),
        ("server-admin", &t.admin, true, Some(Role::Admin)),
    ];
    for c in cases() {
        let path = format!("/api/v1{}", c.path);
        for (name, token, server_admin, role) in &users {
            let allowed = match c.needs {
                Needs::AnyUser => true,
                Needs::ServerAdmin => *server_admin,
                Needs::Org(min) => role.is_some_and(|r| r >= min),
            };
            let r = t
                .call(c.method.clone(), &path, Some(token), c.body.clone())
                .await;
            if allowed {
                assert!(
                    r.status != StatusCode::FORBIDDEN && r.status != StatusCode::UNAUTHORIZED,
                    "{name} should pass {} {path}: {} {:?}",
                    c.method,
                    r.status,
                    r.body
                );
            } else {
                assert_eq!(
                    r.status,
                    StatusCode::FORBIDDEN,
                    "{name} on {} {path}: {:?}",
                    c.method,
                    r.body
                );
                assert_eq!(r.code(), "forbidden");
                assert!(!r.message().is_empty());
            }
        }
        // Machine tokens never reach user endpoints; no token or a bad one is a 401.
        for (name, token) in [("pool", pool.as_str()), ("run", run.as_str())] {
            let r = t
                .call(c.method.clone(), &path, Some(token), c.body.clone())
                .await;
            assert_eq!(
                r.status,
                StatusCode::FORBIDDEN,
                "{name} token on {} {path}",
                c.method
            );
            assert!(
                r.message().contains(&format!("a {name} token")),
                "{}",
                r.message()
            );
        }
        for token in [None, Some("bosun_pat_0000"), Some("")] {
            let r = t.call(c.method.clone(), &path, token, c.body.clone()).await;
            assert_eq!(
                r.status,
                StatusCode::UNAUTHORIZED,
                "{token:?} on {} {path}",
                c.method
            );
            assert_eq!(r.code(), "unauthenticated");
        }
    }
}

#[tokio::test]
async fn refusals_say_why() {
    let t = TestServer::start().await;
    let viewer = t.user_token("viewer", Some(Role::Viewer)).await;
    let r = t
        .post(
            "/api/v1/orgs/default/stacks",
            &viewer,
            json!({"id": "net", "repository": "github:a/b"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(
        r.message().contains("viewer") && r.message().contains("admin"),
        "{}",
        r.message()
    );
    let r = t.get("/api/v1/orgs/elsewhere/stacks", &viewer).await;
    assert!(
        r.message().contains("not a member of org \"elsewhere\""),
        "{}",
        r.message()
    );
    // The refused create stored nothing.
    let r = t.get("/api/v1/orgs/default/stacks/net", &t.admin).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

/// A server admin may know every org, so "not a member" of an org that does not exist is
/// "org not found" to them; anyone else is refused alike for an org that exists and one
/// that does not, and so learns nothing of which orgs there are.
#[tokio::test]
async fn an_unknown_org_is_not_found_only_for_a_server_admin() {
    let t = TestServer::start().await;
    let bob = t.user_token("bob", Some(Role::Admin)).await;
    // Org bravo exists, with bob its only admin: the server admin is no member of it.
    let r = t
        .post("/api/v1/orgs", &t.admin, json!({"id": "bravo"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let r = t
        .call(
            reqwest::Method::PUT,
            "/api/v1/orgs/bravo/members/bob",
            Some(&t.admin),
            Some(json!({"role": "admin"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = t
        .call(
            reqwest::Method::DELETE,
            "/api/v1/orgs/bravo/members/admin",
            Some(&bob),
            None,
        )
        .await;
    assert!(r.status.is_success(), "{}", r.body);

    let r = t.get("/api/v1/orgs/nosuch/stacks", &t.admin).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    assert_eq!(r.code(), "not_found");
    assert_eq!(r.message(), "org \"nosuch\" not found");
    let r = t.get("/api/v1/orgs/bravo/stacks", &t.admin).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    assert_eq!(r.message(), "you are not a member of org \"bravo\"");

    // A member of another org: the same refusal whether the org exists or not.
    let viewer = t.user_token("vic", Some(Role::Viewer)).await;
    for org in ["bravo", "nosuch"] {
        let r = t.get(&format!("/api/v1/orgs/{org}/stacks"), &viewer).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{org}: {}", r.body);
        assert_eq!(r.code(), "forbidden");
        assert_eq!(
            r.message(),
            format!("you are not a member of org \"{org}\""),
            "{org}"
        );
    }
}

#[tokio::test]
async fn basic_auth_with_token_as_password() {
    let t = TestServer::start().await;
    let r = t
        .client
        .get(format!("{}/api/v1/whoami", t.url))
        .basic_auth("anything", Some(&t.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = t
        .client
        .get(format!("{}/api/v1/whoami", t.url))
        .basic_auth("anything", Some("wrong"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(r.headers().contains_key("www-authenticate"));
}

#[tokio::test]
async fn runner_protocol_needs_a_pool_token() {
    let t = TestServer::start().await;
    let op = t.user_token("op", Some(Role::Operator)).await;
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
    for (method, path) in RUNNER_ROUTES {
        let path = format!("/api/v1{}", path.replace("{run}", "ghost"));
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        for token in [t.admin.as_str(), op.as_str(), run.as_str()] {
            let r = t
                .call(method.clone(), &path, Some(token), Some(json!({})))
                .await;
            assert_eq!(
                r.status,
                StatusCode::FORBIDDEN,
                "{method} {path}: {:?}",
                r.body
            );
        }
        let r = t.call(method.clone(), &path, None, None).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        let r = t
            .call(
                method,
                &path,
                Some(&t.server.hosted_runner_token),
                Some(json!({})),
            )
            .await;
        assert!(
            r.status != StatusCode::FORBIDDEN && r.status != StatusCode::UNAUTHORIZED,
            "{path}: {:?}",
            r.body
        );
    }
}
