//! Tenancy isolation, generated from the route table: one org's objects are set up, then an
//! admin of another org calls **every route of `api_routes()`** — once naming the first org,
//! once naming its own org with the first org's object ids — and the first org's data must
//! neither leak into an answer nor change. A route added later is attacked the same way
//! without anyone writing a case for it.

use std::collections::BTreeMap;
use std::time::Duration;

use bosun_core::Role;
use bosun_server::routes::api_routes;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::harness::TestServer;
use crate::runs::Runner;

/// Texts that exist only inside org `default`'s objects: none may appear in any answer the
/// other org's admin gets.
const MARKERS: [&str; 7] = [
    "marker-stack-name-4b1e",
    "marker-output-9f2c",
    "marker-lock-holder-77aa",
    "marker-env-var-31d0",
    "marker-plan-var-c6e5",
    "marker-secret-value-0d9b",
    "marker-log-line-a4f8",
];

const PLAN: &str = r#"name: app-config
targets:
  hosts: [web-1]
vars:
  note: marker-plan-var-c6e5
steps:
  - name: say
    command: ["echo", "{{ vars.note }}"]
"#;

/// The first org's objects, by the route parameter that names them.
struct Victim {
    ids: BTreeMap<&'static str, String>,
    stack_run: String,
    plan_run: String,
    fencing: i64,
}

impl Victim {
    /// `template` with `{org}` set to `org` and every other parameter set to the victim's
    /// object of that kind.
    fn fill(&self, template: &str, org: &str) -> String {
        let mut path = template.replace("{org}", org);
        let run = if template.contains("plan-runs/") {
            &self.plan_run
        } else {
            &self.stack_run
        };
        path = path.replace("{run}", run);
        for (param, id) in &self.ids {
            path = path.replace(&format!("{{{param}}}"), id);
        }
        assert!(
            !path.contains('{'),
            "route {template} has a parameter this test does not know: add the victim's object \
             for it in `setup`"
        );
        path
    }
}

async fn ok(r: crate::harness::Reply, what: &str) -> Value {
    assert!(r.status.is_success(), "{what}: {} {:?}", r.status, r.body);
    r.body
}

/// Org `default` with one of everything, some of it carrying a marker.
async fn setup(t: &TestServer) -> Victim {
    let admin = t.admin.as_str();
    let alice = "alice";
    let alice_token = t.user_token(alice, Some(Role::Operator)).await;
    ok(
        t.create_stack(json!({
            "id": "net",
            "name": "marker-stack-name-4b1e",
            "repository": "file:///srv/git/infra.git",
        }))
        .await,
        "stack",
    )
    .await;
    let state = json!({
        "version": 4, "terraform_version": "1.0.3", "serial": 1, "lineage": "L",
        "outputs": {"endpoint": {"value": "marker-output-9f2c", "type": "string"}},
        "resources": []
    });
    ok(
        t.post("/api/v1/orgs/default/stacks/net/state", admin, state)
            .await,
        "state",
    )
    .await;
    let run = ok(
        t.post("/api/v1/orgs/default/stacks/net/runs", admin, json!({}))
            .await,
        "run",
    )
    .await;
    let stack_run = run["id"].as_str().unwrap().to_string();
    // The hosted pool leases it and logs a line: the run is live, with a fencing number the
    // other org's runner will try.
    let runner = Runner::register(t, "victim-runner").await;
    let lease = runner.lease(5).await.expect("the victim's run to lease");
    assert_eq!(lease["run_id"], stack_run.as_str());
    let fencing = lease["fencing"].as_i64().unwrap();
    let next = ok(
        t.get(
            &format!("/api/v1/runner/runs/{stack_run}/logs/next?fencing={fencing}"),
            &t.server.hosted_runner_token,
        )
        .await,
        "next log seq",
    )
    .await["next_seq"]
        .clone();
    ok(
        runner
            .call(
                &format!("{stack_run}/logs"),
                json!({"fencing": fencing, "chunks": [{"seq": next, "text": "marker-log-line-a4f8\n"}]}),
            )
            .await,
        "logs",
    )
    .await;
    // A person's lock, after the lease (a held lock would keep the run queued).
    ok(
        t.call(
            Method::from_bytes(b"LOCK").unwrap(),
            "/api/v1/orgs/default/stacks/net/state",
            Some(admin),
            Some(json!({
                "ID": "victim-lock", "Operation": "OperationTypeApply", "Info": "",
                "Who": "marker-lock-holder-77aa", "Version": "1.0.3",
                "Created": "2026-11-30T10:00:00.000000Z", "Path": ""
            })),
        )
        .await,
        "lock",
    )
    .await;
    ok(
        t.post(
            "/api/v1/orgs/default/environments",
            admin,
            json!({"id": "prod", "requires_approval": true, "protected": true,
                   "vars": {"region": "marker-env-var-31d0"}}),
        )
        .await,
        "environment",
    )
    .await;
    ok(
        t.call(
            Method::PUT,
            &format!("/api/v1/orgs/default/environments/prod/grants/{alice}"),
            Some(admin),
            None,
        )
        .await,
        "grant",
    )
    .await;
    ok(
        t.post(
            "/api/v1/orgs/default/hosts",
            admin,
            json!({"name": "web-1", "address": "127.0.0.1", "labels": ["web"], "environment": "prod"}),
        )
        .await,
        "host",
    )
    .await;
    ok(
        t.post(
            "/api/v1/orgs/default/plans",
            admin,
            json!({"source": PLAN, "file": "app.yaml"}),
        )
        .await,
        "plan",
    )
    .await;
    let plan_run = ok(
        t.post(
            "/api/v1/orgs/default/plans/app-config/runs",
            admin,
            json!({}),
        )
        .await,
        "plan run",
    )
    .await;
    assert_eq!(plan_run["state"], "paused", "{plan_run:?}");
    let plan_run = plan_run["id"].as_str().unwrap().to_string();
    ok(
        t.call(
            Method::PUT,
            "/api/v1/orgs/default/plans/app-config/schedule",
            Some(admin),
            Some(json!({"cron": "0 2 * * *"})),
        )
        .await,
        "schedule",
    )
    .await;
    ok(
        t.call(
            Method::PUT,
            "/api/v1/orgs/default/secrets/aws/key",
            Some(admin),
            Some(json!({"value": "marker-secret-value-0d9b"})),
        )
        .await,
        "secret",
    )
    .await;
    ok(
        t.post(
            "/api/v1/orgs/default/notifications/targets",
            admin,
            json!({"id": "ops", "kind": "webhook", "url": "http://127.0.0.1:9/hook",
                   "secret": "notify-secret-0123456789"}),
        )
        .await,
        "notification target",
    )
    .await;
    ok(
        t.call(
            Method::PUT,
            "/api/v1/orgs/default/policies/guard",
            Some(admin),
            Some(json!({"files": {"guard.rego":
                "package bosun.guard\n\nimport rego.v1\n\ndeny contains \"marker-policy-3c7e\" if { false }\n"}})),
        )
        .await,
        "policy",
    )
    .await;
    let pool = ok(
        t.post(
            "/api/v1/orgs/default/pool-tokens",
            admin,
            json!({"pool": "edge"}),
        )
        .await,
        "pool token",
    )
    .await;
    let pool_token_id = pool["token"]["id"].as_str().unwrap().to_string();
    let pool_secret = pool["secret"].as_str().unwrap();
    let edge = ok(
        t.post(
            "/api/v1/runner/register",
            pool_secret,
            json!({"name": "victim-edge"}),
        )
        .await,
        "edge runner",
    )
    .await;
    // alice has a console session (bob may neither list nor end it).
    let login = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .post(format!("{}/login", t.url))
        .form(&[("token", alice_token.as_str()), ("next", "/")])
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), StatusCode::SEE_OTHER);
    let session = t
        .server
        .state()
        .store
        .list_sessions(alice, 1)
        .await
        .unwrap()[0]
        .id
        .clone();
    let ids = BTreeMap::from([
        ("session", session),
        ("stack", "net".to_string()),
        ("version", "1".to_string()),
        ("env", "prod".to_string()),
        ("user", alice.to_string()),
        ("host", "web-1".to_string()),
        ("plan", "app-config".to_string()),
        // An identity provider's id (none is configured here).
        ("provider", "corp".to_string()),
        ("subject", plan_run.clone()),
        ("id", "ops".to_string()),
        ("namespace", "aws".to_string()),
        ("key", "key".to_string()),
        ("name", "guard".to_string()),
        ("token", pool_token_id),
        ("runner", edge["runner_id"].as_str().unwrap().to_string()),
    ]);
    Victim {
        ids,
        stack_run,
        plan_run,
        fencing,
    }
}

/// An admin of org `bravo` (and nothing else), with a runner in bravo's own pool.
struct Attacker {
    token: String,
    pool: String,
    runner: String,
}

async fn attacker(t: &TestServer) -> Attacker {
    let admin = t.admin.as_str();
    ok(
        t.post("/api/v1/orgs", admin, json!({"id": "bravo"})).await,
        "org",
    )
    .await;
    ok(
        t.post("/api/v1/users", admin, json!({"id": "bob"})).await,
        "user",
    )
    .await;
    ok(
        t.call(
            Method::PUT,
            "/api/v1/orgs/bravo/members/bob",
            Some(admin),
            Some(json!({"role": "admin"})),
        )
        .await,
        "member",
    )
    .await;
    let token = ok(
        t.post("/api/v1/tokens", admin, json!({"user": "bob"}))
            .await,
        "token",
    )
    .await["secret"]
        .as_str()
        .unwrap()
        .to_string();
    let pool = ok(
        t.post(
            "/api/v1/orgs/bravo/pool-tokens",
            &token,
            json!({"pool": "edge"}),
        )
        .await,
        "pool token",
    )
    .await["secret"]
        .as_str()
        .unwrap()
        .to_string();
    let runner = ok(
        t.post(
            "/api/v1/runner/register",
            &pool,
            json!({"name": "bob-edge"}),
        )
        .await,
        "runner",
    )
    .await["runner_id"]
        .as_str()
        .unwrap()
        .to_string();
    Attacker {
        token,
        pool,
        runner,
    }
}

/// The request body each route gets: the authorization matrix's (valid enough to pass the
/// guard and reach the handler's lookups), or a runner-protocol body carrying the victim's
/// fencing number and the attacker's runner.
fn body_for(method: &Method, template: &str, victim: &Victim, attacker: &Attacker) -> Value {
    if template.starts_with("/runner/") {
        let f = victim.fencing;
        return if template.ends_with("/logs") {
            json!({"fencing": f, "chunks": [{"seq": 1, "text": "bob was here\n"}]})
        } else if template == "/runner/plan-runs/{run}/report" {
            json!({"fencing": f, "event": "started"})
        } else if template.ends_with("/report") {
            json!({"fencing": f, "event": "failed", "reason": "bob"})
        } else if template.ends_with("/results") {
            json!({"fencing": f, "results": []})
        } else if template == "/runner/register" {
            json!({"name": "bob-edge-2"})
        } else if template == "/runner/lease" {
            json!({"runner_id": attacker.runner, "wait_seconds": 0})
        } else {
            json!({"fencing": f})
        };
    }
    crate::authz::cases()
        .into_iter()
        .find(|c| c.method == *method && c.template == template)
        .and_then(|c| c.body)
        .unwrap_or_else(|| json!({}))
}

struct Answer {
    status: StatusCode,
    text: String,
}

async fn send(
    t: &TestServer,
    method: Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> Answer {
    let mut req = t
        .client
        .request(method, format!("{}/api/v1{path}", t.url))
        .bearer_auth(token)
        // A stream that started would be a leak; never let it hang the test.
        .timeout(Duration::from_secs(10));
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    Answer { status, text }
}

/// Every GET answer about org `default`'s objects, read by the server admin: compared before
/// and after the attack.
async fn snapshot(t: &TestServer, victim: &Victim) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for route in api_routes() {
        if !route.methods.contains(&Method::GET)
            || !route.path.starts_with("/orgs/{org}")
            || route.path.ends_with("/stream")
        {
            continue;
        }
        let path = victim.fill(&route.path, "default");
        let r = send(t, Method::GET, &path, &t.admin, None).await;
        let mut v: Value = serde_json::from_str(&r.text).unwrap_or(Value::String(r.text));
        forget_clocks(&mut v);
        out.insert(path, json!({"status": r.status.as_u16(), "body": v}));
    }
    out
}

/// Readings of the clock (ages, last-seen times) change between two reads by themselves.
fn forget_clocks(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|k, _| {
                !(k.ends_with("age_seconds") || k == "last_seen" || k == "last_seen_at")
            });
            map.values_mut().for_each(forget_clocks);
        }
        Value::Array(items) => items.iter_mut().for_each(forget_clocks),
        _ => {}
    }
}

/// Routes that name an object and may still succeed for the other org, because the object
/// they name is the caller's own or global — each with the reason.
fn may_succeed(method: &Method, template: &str) -> Option<&'static str> {
    Some(match (method.as_str(), template) {
        ("PUT", "/orgs/{org}/members/{user}") => "users are global; bravo may add alice",
        ("DELETE", "/orgs/{org}/members/{user}") => {
            "removes alice from bravo, where the PUT put her"
        }
        ("PUT", "/orgs/{org}/secrets/{namespace}/{key}") => {
            "a secret namespace is per org: bravo writes its own aws/key"
        }
        ("DELETE", "/orgs/{org}/secrets/{namespace}/{key}") => {
            "deletes bravo's own aws/key, written by the PUT (default's is checked after)"
        }
        ("PUT", "/orgs/{org}/hosts/{host}") => "creates bravo's own web-1",
        ("PUT", "/orgs/{org}/environments/{env}") => "creates bravo's own prod",
        ("POST", "/runner/register") => "bravo's runner registers in bravo's pool",
        ("POST", "/runner/lease") => "bravo's runner asks for bravo's work (checked: none)",
        _ => return None,
    })
}

#[tokio::test]
async fn another_org_reaches_nothing_through_any_route() {
    let t = TestServer::start().await;
    let victim = setup(&t).await;
    let bob = attacker(&t).await;
    let before = snapshot(&t, &victim).await;
    // Every marker is really in the victim's data, so its absence below means something
    // (the secret value excepted: the API never shows it, to anyone).
    let seen = serde_json::to_string(&before).unwrap();
    for m in MARKERS.iter().filter(|m| !m.contains("secret")) {
        assert!(
            seen.contains(m),
            "marker {m} is not in org default's answers"
        );
    }
    assert!(
        !seen.contains("marker-secret-value-0d9b"),
        "a secret value in the API"
    );

    let mut attacked = 0;
    for route in api_routes() {
        for method in &route.methods {
            let template = route.path.as_str();
            let runner_route = template.starts_with("/runner/");
            let token = if runner_route { &bob.pool } else { &bob.token };
            let body = body_for(method, template, &victim, &bob);
            let send_body = (*method != Method::GET).then(|| body.clone());
            let with_fencing = |p: String| {
                if (runner_route && *method == Method::GET)
                    || template.ends_with("/plan")
                    || template.ends_with("/plan-json")
                    || template.ends_with("/abandon")
                {
                    format!("{p}?fencing={}", victim.fencing)
                } else if template.ends_with("/recovered-state") {
                    format!("{p}?fencing={}&reason=attack", victim.fencing)
                } else {
                    p
                }
            };

            // 1. Naming the victim's org: refused by the guard, saying why.
            if template.starts_with("/orgs/{org}") {
                let path = victim.fill(template, "default");
                let r = send(&t, method.clone(), &path, token, send_body.clone()).await;
                assert_eq!(
                    r.status,
                    StatusCode::FORBIDDEN,
                    "{method} {path} as bravo's admin: {}",
                    r.text
                );
                assert!(
                    r.text.contains("not a member"),
                    "{method} {path}: {}",
                    r.text
                );
                attacked += 1;
            }

            // 2. Naming its own org (or none) with the victim's object ids.
            let path = with_fencing(victim.fill(template, "bravo"));
            let r = send(&t, method.clone(), &path, token, send_body).await;
            attacked += 1;
            for m in MARKERS {
                assert!(
                    !r.text.contains(m),
                    "{method} {path} as bravo showed org default's {m}: {}",
                    r.text
                );
            }
            let names_object = template.replace("{org}", "").contains('{');
            // A read may answer an empty list for a name bravo does not have (the markers
            // above prove it shows nothing of default's); a change must not succeed.
            if r.status.is_success() && names_object && *method != Method::GET {
                assert!(
                    may_succeed(method, template).is_some(),
                    "{method} {path} as bravo succeeded on org default's object: {} {}",
                    r.status,
                    r.text
                );
            }
            if runner_route && names_object {
                assert!(
                    [
                        StatusCode::FORBIDDEN,
                        StatusCode::NOT_FOUND,
                        StatusCode::CONFLICT
                    ]
                    .contains(&r.status),
                    "{method} {path} with bravo's pool token on org default's run: {} {}",
                    r.status,
                    r.text
                );
            }
            if template == "/runner/lease" {
                assert!(
                    !r.text.contains(&victim.stack_run),
                    "bravo's runner leased org default's run: {}",
                    r.text
                );
            }
        }
    }
    assert!(attacked > 100, "only {attacked} requests were tried");

    // Nothing of the victim's changed: every read answers as before, the audit log included.
    let after = snapshot(&t, &victim).await;
    for (path, was) in &before {
        assert_eq!(
            after.get(path),
            Some(was),
            "GET {path} changed after bravo's requests"
        );
    }
}
