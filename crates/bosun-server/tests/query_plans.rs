//! The query-plan guard: a server on a seeded store is driven through every API read in
//! the OpenAPI document, the console's pages, a run's whole runner protocol, state writes
//! and the background duties; every distinct statement the store ran is then `EXPLAIN`ed
//! on its own backend — SQLite's `EXPLAIN QUERY PLAN`, PostgreSQL's `EXPLAIN` of the
//! generic plan with sequential scans disabled, so a `Seq Scan` there means no index can
//! serve the statement — and the test fails on a full scan of a table that grows with the
//! store (stacks, runs, their phases and logs, state versions, audit, …), naming the
//! statement and its plan.
//!
//! On SQLite it also counts the statements each API list runs for a short and a long page
//! and fails on a list that reads something per row (an N+1): a cost that grows with the
//! page and that no plan shows.
//!
//! A request whose cost grows with the size of an org shows up here as such a scan. A new
//! API route is covered once it is in the OpenAPI document; a new console page must be
//! added to [`CONSOLE_PAGES`].
//!
//! Its own test binary: the statement record is process-wide.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "api/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::collections::BTreeMap;

use bosun_core::Role;
use bosun_server::openapi::document;
use bosun_server::routes::api_routes;
use bosun_store::query_log::{self, Recorded};
use harness::TestServer;
use reqwest::header::{COOKIE, SET_COOKIE};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// Tables whose size does not grow with stacks, runs or time: one row per org, per
/// schema version, per duty, per signing key, per GitHub binding. Scanning them is fine.
const BOUNDED_TABLES: &[&str] = &[
    "orgs",
    "bosun_schema",
    "duty_leases",
    "oidc_signing_keys",
    "github_bindings",
    "vcs_tokens",
    // A queue: stacks whose drift settings were saved since the scheduler's last pass,
    // which takes them off. Read from its head, a batch at a time.
    "drift_arming",
    // Count deltas written by triggers with each run change, trigger decision, lock and
    // stale-check alert, folded into one row per metric every minute: /metrics sums them
    // whole, through their `metric_counts_metric` index (a scan of PostgreSQL's heap would
    // also read the dead rows a fold leaves until the table is vacuumed).
    "metric_counts",
];

/// Tables of an org's settings, made one row at a time by its people (runners, hosts,
/// plans, secrets, environments, members, notification targets, plan schedules): a list
/// of them reads the org's rows whole by design. The rows of every other growing table
/// come with stacks, runs and time, and a statement may not read all of an org's.
const ORG_SETTINGS_TABLES: &[&str] = &[
    "runners",
    "hosts",
    "plans",
    "plan_schedules",
    "secrets",
    "environments",
    "memberships",
    "notification_targets",
];

/// Statements allowed to read a whole growing table, each with the reason it is bounded.
/// Matched by a fragment of their text.
const ALLOWED_SCANS: &[(&str, &str)] = &[
    (
        "FROM plan_triggers ORDER BY id LIMIT",
        "the plan triggers not started yet, oldest first: the run that settles a trigger \
         deletes it, so the table holds only pending ones (read in batches of 50)",
    ),
    (
        "FROM policies WHERE org_id = ?1 ORDER BY name",
        "an org's policies, read whole at each decision point: at most 100 per org \
         (MAX_POLICIES_PER_ORG), by the primary key",
    ),
    (
        "SELECT 1 FROM users LIMIT 1",
        "bootstrap, at start: whether any user exists — the first row answers",
    ),
    (
        "FROM secrets ORDER BY org_id, namespace, key",
        "at start only: every sealed value is checked against the secrets key",
    ),
    (
        "FROM notification_targets WHERE secret_ciphertext IS NOT NULL",
        "at start only: every sealed value is checked against the secrets key",
    ),
    (
        "FROM sessions WHERE refresh_ciphertext IS NOT NULL AND ended_at IS NULL",
        "at start only: every sealed value is checked against the secrets key — the open \
         provider sessions' refresh tokens, which a partial index holds (an ended session \
         drops its token)",
    ),
    (
        "FROM runners ORDER BY created_at, id",
        "/metrics: one series per registered runner, every row its answer",
    ),
    (
        "FROM plan_schedules WHERE ?1 IS NULL AND ?2 IS NULL",
        "the schedules duty's pass reads every plan schedule: one row per scheduled plan, \
         all of them its answer",
    ),
];

/// Console pages read (GET) by the guard, `{run}` standing for a finished run's id.
const CONSOLE_PAGES: &[&str] = &[
    "/",
    "/orgs/default/stacks",
    "/orgs/default/stacks?after=s10",
    "/orgs/default/stacks/s00",
    "/orgs/default/stacks/s00/state",
    "/orgs/default/runs/{run}",
    "/orgs/default/runs/{run}/log.txt",
    "/orgs/default/drift",
    "/orgs/default/drift?after=0:s00",
    "/orgs/default/approvals",
    "/orgs/default/audit",
    "/orgs/default/audit?target=stack:s01",
    "/orgs/default/plans",
    "/orgs/default/plans/deploy",
    "/orgs/default/plan-runs",
    "/orgs/default/runners",
];

const WEBHOOK_SECRET: &str = "webhook-secret-for-the-guard";

/// The stacks seeded in org `default` (a few more in org `other`).
const STACKS: usize = 40;

#[tokio::test]
async fn no_statement_scans_a_table_that_grows_with_the_store() {
    query_log::start();

    let data = tempfile::tempdir().unwrap();
    let dir = data.path().to_path_buf();
    let t = started(move |c| c.data_dir = dir.clone()).await;
    let sqlite = t.server.state().config.sqlite_path();
    let driven = drive(&t).await;
    let mut per_row = statements_per_row(&t, &driven.lists).await;
    per_row += &store_calls_per_read(&t, "SQLite", &driven).await;
    t.shutdown().await;
    let recorded = query_log::take();
    let scans = explain_sqlite(&sqlite, &recorded);
    let mut failures = report("SQLite", &recorded, scans);
    failures += &std::mem::take(&mut per_row);
    // An allowance no statement needs any more is taken out, not left to excuse a new one.
    for (fragment, why) in ALLOWED_SCANS {
        let flat = |sql: &str| sql.split_whitespace().collect::<Vec<_>>().join(" ");
        if !recorded.iter().any(|r| flat(&r.sql).contains(fragment)) {
            failures +=
                &format!("\nALLOWED_SCANS names a statement nothing ran: {fragment:?} ({why})\n");
        }
    }

    if let Some(admin) = bosun_testkit::postgres::server_url() {
        let db = bosun_testkit::postgres::ScratchDb::create(&admin);
        let url = db.url.clone();
        let t = started(move |c| c.database_url = Some(url.clone())).await;
        let driven = drive(&t).await;
        failures += &store_calls_per_read(&t, "PostgreSQL", &driven).await;
        t.shutdown().await;
        let recorded = query_log::take();
        let scans = explain_postgres(&db.url, &recorded);
        failures += &report("PostgreSQL", &recorded, scans);
    }
    assert!(failures.is_empty(), "{failures}");
}

/// A server on a store its schema is already in: started once to migrate it, stopped,
/// and started again with the record emptied, so only the server's own statements are
/// recorded, not the migrations'.
async fn started(store: impl Fn(&mut bosun_server::ServerConfig) + Clone) -> TestServer {
    let config = move |c: &mut bosun_server::ServerConfig| {
        store(c);
        c.vcs.webhook_secret = Some(bosun_server::config::Secret(WEBHOOK_SECRET.into()));
        // Cloning for changed files fails at once: the push's own commit list is used.
        c.vcs.web_url = "http://127.0.0.1:9".into();
        // Every retention rule on, so the duty's statements are explained too.
        c.retention.run_retention = std::time::Duration::from_secs(30 * 24 * 3600);
    };
    let first = TestServer::start_with(config.clone()).await;
    let _data = first.shutdown().await;
    query_log::take();
    TestServer::start_with(config).await
}

/// What the record and the scans say: an empty string when nothing scans.
fn report(backend: &str, recorded: &[Recorded], scans: Vec<(String, Vec<String>)>) -> String {
    // A workload that recorded little has not exercised the store at all.
    assert!(
        recorded.len() > 100,
        "{backend}: only {} statements were recorded",
        recorded.len()
    );
    eprintln!(
        "{backend}: {} distinct statements explained",
        recorded.len()
    );
    // `BOSUN_QUERY_PLANS_LIST=1`: every statement explained, to see what the workload reached.
    if std::env::var_os("BOSUN_QUERY_PLANS_LIST").is_some() {
        for r in recorded {
            eprintln!(
                "{backend}: {}",
                r.sql.split_whitespace().collect::<Vec<_>>().join(" ")
            );
        }
    }
    let mut out = String::new();
    for (sql, plan) in scans {
        out += &format!(
            "\n{backend}: a full scan of a table that grows with the store:\n  {}\nplan:\n  {}\n",
            sql.split_whitespace().collect::<Vec<_>>().join(" "),
            plan.join("\n  ")
        );
    }
    out
}

// --- the workload -----------------------------------------------------------------------

/// The API lists whose statements grow with the page: each list the workload reached is
/// read with `limit=2` and with `limit=20`, and a list that runs more than
/// [`PER_PAGE_ALLOWANCE`] statements more for the longer page reads something per row (an
/// N+1) — a cost that grows with the page, which an index cannot show. SQLite only: it
/// counts every execution. Each count is the least of three reads, so a background duty
/// running at the same moment is not blamed on the request.
async fn statements_per_row(t: &TestServer, lists: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut checked = 0;
    for (url, token) in lists {
        let sep = if url.contains('?') { '&' } else { '?' };
        let mut counts = Vec::new();
        let mut items = Vec::new();
        for limit in [2, 20] {
            let mut least = u64::MAX;
            let mut len = 0;
            for _ in 0..3 {
                let before = query_log::executed();
                let (status, body) = read(t, &format!("{url}{sep}limit={limit}"), token).await;
                least = least.min(query_log::executed() - before);
                assert_eq!(status, StatusCode::OK, "GET {url} limit={limit}: {body}");
                len = body["items"].as_array().map_or(0, Vec::len);
            }
            counts.push(least);
            items.push(len);
        }
        // A page no longer than the short one proves nothing about rows.
        if items[1] <= items[0] {
            continue;
        }
        checked += 1;
        eprintln!(
            "per row: GET {url}: {} statements for {} items, {} for {}",
            counts[0], items[0], counts[1], items[1]
        );
        if counts[1] > counts[0] + PER_PAGE_ALLOWANCE {
            out += &format!(
                "\nGET {url}: {} statements for {} items, {} for {}: a read per row (N+1)\n",
                counts[0], items[0], counts[1], items[1]
            );
        }
    }
    // The seeded lists must give the check something to compare.
    assert!(
        checked >= 6,
        "only {checked} lists returned more rows for a longer page"
    );
    out
}

/// The reads people make most, and how many store calls each may make, authenticating
/// included: each call is a hop to the blocking pool and a transaction of its own (on
/// PostgreSQL, a round trip to begin it before its statements; a read's end follows its
/// answer), so a read that makes them one after another pays for each. The guard's stacks cover every kind of context: `s00` is drift-checked on a
/// plain git remote, `s01` on GitHub, and a page of 20 holds both and a second remote.
const STORE_CALL_BUDGETS: &[(&str, u64)] = &[
    ("/api/v1/orgs/default/stacks/s00", 2),
    ("/api/v1/orgs/default/stacks/s01", 2),
    ("/api/v1/orgs/default/stacks?limit=20", 2),
    ("/api/v1/orgs/default/stacks/s00/state/versions/2", 2),
    ("/api/v1/orgs/default/stacks/s00/state/versions?limit=2", 2),
    ("/api/v1/orgs/default/runs/{run}", 2),
    // Console pages: the session's lookup, then the page.
    ("/orgs/default/stacks", 2),
    ("/orgs/default/stacks?after=s10", 2),
];

/// Each of [`STORE_CALL_BUDGETS`] (`{run}` standing for a finished run's id; a console
/// page read with the session) read three times; the least count must be within its
/// budget (the least, so a duty's pass at the same moment is not blamed on the read).
async fn store_calls_per_read(t: &TestServer, backend: &str, driven: &Driven) -> String {
    let mut out = String::new();
    for (path, budget) in STORE_CALL_BUDGETS {
        let path = &path.replace("{run}", &driven.finished);
        let mut least = u64::MAX;
        for _ in 0..3 {
            let before = query_log::calls();
            let status = if path.starts_with("/api/") {
                let (status, body) = read(t, path, &t.admin).await;
                assert_eq!(status, StatusCode::OK, "GET {path}: {body}");
                status
            } else {
                let r = t
                    .client
                    .get(format!("{}{path}", t.url))
                    .header(COOKIE, &driven.session)
                    .send()
                    .await
                    .unwrap();
                r.status()
            };
            least = least.min(query_log::calls() - before);
            assert_eq!(status, StatusCode::OK, "GET {path}");
        }
        eprintln!("{backend}: GET {path}: {least} store calls");
        if least > *budget {
            out += &format!(
                "\n{backend}: GET {path}: {least} store calls, where {budget} should do\n"
            );
        }
    }
    out
}

/// Statements a longer page may add: a lookup per distinct repository of a stacks page
/// (the guard's stacks use three).
const PER_PAGE_ALLOWANCE: u64 = 3;

/// What [`drive`] leaves for the checks after it.
struct Driven {
    /// The API lists it read, each with its token.
    lists: Vec<(String, String)>,
    /// The id of a finished run.
    finished: String,
    /// The console session's cookie (`bosun_session=…`).
    session: String,
}

/// Seeds the server and drives it: runs through the runner protocol, state writes, every
/// API read, every console page.
async fn drive(t: &TestServer) -> Driven {
    let mut lists = Vec::new();
    let admin = t.admin.clone();
    let ok = |r: &harness::Reply, what: &str| {
        assert!(r.status.is_success(), "{what}: {} {:?}", r.status, r.body);
    };
    let r = t.post("/api/v1/orgs", &admin, json!({"id": "other"})).await;
    ok(&r, "org other");
    for i in 0..STACKS {
        let mut body = json!({
            "id": format!("s{i:02}"),
            "repository": if i % 3 == 0 { "file:///srv/git/infra" } else { "file:///srv/git/platform" },
            "watch_paths": ["modules/network"],
        });
        if i % 4 == 1 {
            body["repository"] = json!("github:acme/infra");
            body["path"] = json!(format!("infra/s{i:02}"));
        }
        if i % 5 == 0 {
            body["drift_detection"] = json!({"schedule": "0 3 * * *"});
        }
        if i >= 30 {
            body["depends_on"] =
                json!([{"stack": format!("s{:02}", i - 30), "outputs": {"vpc_id": "vpc_id"}}]);
        }
        ok(&t.create_stack(body).await, "stack");
    }
    for i in 0..5 {
        let r = t
            .post(
                "/api/v1/orgs/other/stacks",
                &admin,
                json!({"id": format!("o{i}"), "repository": "file:///srv/git/other"}),
            )
            .await;
        ok(&r, "stack of org other");
    }
    t.seed_environment("prod", true, true).await;
    t.seed_environment("dev", false, false).await;
    t.seed_environment("staging", false, false).await;
    t.seed_host("web-1", "web", Some("prod")).await;
    t.seed_host("web-2", "web", Some("dev")).await;
    t.seed_host("web-3", "web", Some("dev")).await;
    let plan = "name: deploy\ntargets:\n  labels: [web]\nsteps:\n  - name: hello\n    command: [echo, hi]\n";
    t.seed_plan("deploy", plan).await;

    // State: a few versions, a lock taken and released.
    for serial in 1..=3u64 {
        let doc = json!({
            "version": 4, "terraform_version": "1.8.2", "serial": serial,
            "lineage": "7f1c0d4e-guard", "resources": [],
            "outputs": {"vpc_id": {"value": format!("vpc-{serial}"), "type": "string"}},
        });
        let r = t
            .post("/api/v1/orgs/default/stacks/s00/state", &admin, doc)
            .await;
        ok(&r, "state write");
    }
    let lock = json!({"ID": "guard-lock", "Operation": "OperationTypeApply", "Info": "",
        "Who": "guard@test", "Version": "1.8.2", "Created": "2026-12-01T10:00:00Z", "Path": ""});
    let lock_path = "/api/v1/orgs/default/stacks/s01/state";
    ok(
        &t.call(
            Method::from_bytes(b"LOCK").unwrap(),
            lock_path,
            Some(&admin),
            Some(lock.clone()),
        )
        .await,
        "lock",
    );

    // Runs: a tracked run applied end to end, a proposed run planned, one left queued.
    let runner = t.hosted_runner("guard-runner").await;
    let finished = run_through(t, &runner, "s00", false).await;
    run_through(t, &runner, "s02", true).await;
    let r = t
        .post("/api/v1/orgs/default/stacks/s03/runs", &admin, json!({}))
        .await;
    ok(&r, "queued run");
    // More runs of s00, so its runs list has pages to compare (see `statements_per_row`).
    for _ in 0..3 {
        let r = t
            .post(
                "/api/v1/orgs/default/stacks/s00/runs",
                &admin,
                json!({"kind": "proposed"}),
            )
            .await;
        ok(&r, "proposed run");
    }
    ok(
        &t.call(
            Method::from_bytes(b"UNLOCK").unwrap(),
            lock_path,
            Some(&admin),
            Some(lock),
        )
        .await,
        "unlock",
    );

    // A push to GitHub touching one stack of the repository, and its redelivery.
    let push = serde_json::to_vec(&json!({
        "ref": "refs/heads/main",
        "before": "1".repeat(40),
        "after": "2".repeat(40),
        "commits": [{"id": "2".repeat(40), "added": [], "modified": ["infra/s05/main.tf"], "removed": []}],
        "repository": {"full_name": "acme/infra"},
        "sender": {"login": "octocat"}
    }))
    .unwrap();
    for _ in 0..2 {
        let r = t
            .client
            .post(format!("{}/webhooks/github", t.url))
            .header("content-type", "application/json")
            .header("x-github-event", "push")
            .header("x-github-delivery", "guard-push-1")
            .header(
                "x-hub-signature-256",
                bosun_testkit::sign(WEBHOOK_SECRET.as_bytes(), &push),
            )
            .body(push.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "push");
    }

    // What operators' probes and scrapers read.
    for path in ["/healthz", "/readyz", "/metrics"] {
        let r = t
            .client
            .get(format!("{}{path}", t.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
    }

    // Every API read, each list also from its second page.
    let params = BTreeMap::from([
        ("{org}", "default".to_string()),
        ("{stack}", "s00".to_string()),
        ("{run}", finished.clone()),
        ("{version}", "1".to_string()),
        ("{env}", "prod".to_string()),
        ("{host}", "web-1".to_string()),
        ("{plan}", "deploy".to_string()),
        ("{id}", "no-such-target".to_string()),
        ("{name}", "no-such-policy".to_string()),
    ]);
    let doc = serde_json::to_value(document(&api_routes())).unwrap();
    for (path, item) in doc["paths"].as_object().unwrap() {
        if item.get("get").is_none() {
            continue;
        }
        let mut url = path.clone();
        for (name, value) in &params {
            url = url.replace(name, value);
        }
        assert!(
            !url.contains('{'),
            "{path}: a path parameter the guard has no value for (add it to `params`)"
        );
        let token = if url.starts_with("/api/v1/runner/") {
            url += "?fencing=2";
            t.server.hosted_runner_token.clone()
        } else {
            admin.clone()
        };
        let sep = if url.contains('?') { '&' } else { '?' };
        let (mut status, mut body) = read(t, &format!("{url}{sep}limit=2"), &token).await;
        if status == StatusCode::BAD_REQUEST {
            // Not a list: read it as it is.
            (status, body) = read(t, &url, &token).await;
        } else if status == StatusCode::OK && body.get("items").is_some() {
            lists.push((url.clone(), token.clone()));
        }
        assert!(!status.is_server_error(), "GET {url}: {status} {body}");
        if let Some(cursor) = body.get("next_cursor").and_then(Value::as_str) {
            let page = format!("{url}{sep}limit=2&cursor={cursor}");
            let (status, body) = read(t, &page, &token).await;
            assert_eq!(status, StatusCode::OK, "GET {page}: {body}");
        }
    }

    // The console, as a person with a session.
    let person = t.user_token("guard", Some(Role::Admin)).await;
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let login = browser
        .post(format!("{}/login", t.url))
        .form(&[("token", person.as_str()), ("next", "/")])
        .send()
        .await
        .unwrap();
    let session = login
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .map(|c| c.to_str().unwrap().split(';').next().unwrap().to_string())
        .find(|c| c.starts_with("bosun_session="))
        .expect("a session cookie");
    for page in CONSOLE_PAGES {
        let path = page.replace("{run}", &finished);
        let r = browser
            .get(format!("{}{path}", t.url))
            .header(COOKIE, &session)
            .send()
            .await
            .unwrap();
        let status = r.status();
        assert!(
            status.is_success() || status.is_redirection(),
            "console {path}: {status} {}",
            r.text().await.unwrap()
        );
    }
    Driven {
        lists,
        finished,
        session,
    }
}

/// GET `path` with `token`: its status and its JSON (`null` for another body: an event
/// stream, a plan file).
async fn read(t: &TestServer, path: &str, token: &str) -> (StatusCode, Value) {
    let r = t
        .client
        .get(format!("{}{path}", t.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let body = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap_or(Value::Null);
    (status, body)
}

/// A run of `stack` through the runner protocol, the test acting as the runner: leased,
/// logged, planned, and (tracked) confirmed and applied. Its id.
async fn run_through(t: &TestServer, runner: &str, stack: &str, proposed: bool) -> String {
    let token = t.server.hosted_runner_token.clone();
    let body = if proposed {
        json!({"kind": "proposed"})
    } else {
        json!({})
    };
    let r = t
        .post(
            &format!("/api/v1/orgs/default/stacks/{stack}/runs"),
            &t.admin,
            body,
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let id = r.body["id"].as_str().unwrap().to_string();
    let phases: &[i64] = if proposed { &[1] } else { &[1, 2] };
    for &fencing in phases {
        let lease = t
            .post(
                "/api/v1/runner/lease",
                &token,
                json!({"runner_id": runner, "wait_seconds": 5}),
            )
            .await;
        if lease.status != StatusCode::OK {
            let run = t
                .get(&format!("/api/v1/orgs/default/runs/{id}"), &t.admin)
                .await;
            panic!(
                "lease: {} {:?}; run {:?}",
                lease.status, lease.body, run.body
            );
        }
        assert_eq!(lease.body["run_id"], id.as_str());
        let call = |what: &str, body: Value| {
            let path = format!("/api/v1/runner/runs/{id}/{what}");
            let token = token.clone();
            async move { t.post(&path, &token, body).await }
        };
        call("heartbeat", json!({"fencing": fencing})).await;
        let next = t
            .get(
                &format!("/api/v1/runner/runs/{id}/logs/next?fencing={fencing}"),
                &token,
            )
            .await;
        let seq = next.body["next_seq"].as_i64().unwrap();
        let chunks: Vec<Value> = (0..3)
            .map(|i| json!({"seq": seq + i, "text": format!("line {i}\n")}))
            .collect();
        call("logs", json!({"fencing": fencing, "chunks": chunks})).await;
        call(
            "report",
            json!({"fencing": fencing, "event": "started", "commit": "0123456789abcdef"}),
        )
        .await;
        if fencing == 1 {
            let put = t
                .client
                .put(format!("{}/api/v1/runner/runs/{id}/plan?fencing=1", t.url))
                .bearer_auth(&token)
                .body(b"PLANFILE".to_vec())
                .send()
                .await
                .unwrap();
            assert_eq!(put.status(), StatusCode::NO_CONTENT);
            let summary = json!({"has_changes": true, "add": 1, "change": 0, "destroy": 0,
                "resource_changes": [], "output_changes": {"vpc_id": "create"}});
            call(
                "report",
                json!({"fencing": 1, "event": "planned", "summary": summary}),
            )
            .await;
            if !proposed {
                let r = t
                    .post(
                        &format!("/api/v1/orgs/default/runs/{id}/confirm"),
                        &t.admin,
                        json!({}),
                    )
                    .await;
                assert_eq!(r.status, StatusCode::OK, "confirm: {:?}", r.body);
            }
        } else {
            call("report", json!({"fencing": 2, "event": "applied"})).await;
        }
    }
    id
}

// --- the plans --------------------------------------------------------------------------

/// Tables and their names in `sql` (`FROM runs r`, `JOIN stacks AS s`, `UPDATE runs`): the
/// names SQLite's plan lines use. A common table expression's name (`WITH stale AS …`) is
/// no table: scanning it reads what its own statement (explained with it) produced.
fn table_names(sql: &str) -> BTreeMap<String, String> {
    let words: Vec<String> = sql
        .replace(['(', ')', ',', ';'], " ")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let keyword = |w: &str| {
        matches!(
            w.to_ascii_uppercase().as_str(),
            "WHERE"
                | "JOIN"
                | "LEFT"
                | "INNER"
                | "CROSS"
                | "ON"
                | "SET"
                | "ORDER"
                | "GROUP"
                | "LIMIT"
                | "USING"
                | "UNION"
                | "VALUES"
                | "SELECT"
                | "AND"
                | "OR"
                | "RETURNING"
                | "DEFAULT"
                | "INDEXED"
                | "NOT"
                | "FOR"
        )
    };
    let ctes: std::collections::BTreeSet<&String> = words
        .windows(3)
        .filter(|w| {
            matches!(w[0].to_ascii_uppercase().as_str(), "WITH" | "RECURSIVE")
                && w[2].eq_ignore_ascii_case("AS")
        })
        .map(|w| &w[1])
        .collect();
    let mut names = BTreeMap::new();
    for (i, w) in words.iter().enumerate() {
        let upper = w.to_ascii_uppercase();
        if !matches!(upper.as_str(), "FROM" | "JOIN" | "UPDATE" | "INTO") {
            continue;
        }
        let Some(table) = words.get(i + 1) else {
            continue;
        };
        if keyword(table) {
            continue;
        }
        let mut alias = words.get(i + 2).cloned();
        if alias.as_deref().map(str::to_ascii_uppercase).as_deref() == Some("AS") {
            alias = words.get(i + 3).cloned();
        }
        if ctes.contains(table) {
            continue;
        }
        names.insert(table.clone(), table.clone());
        if let Some(a) = alias.filter(|a| !keyword(a)) {
            names.insert(a, table.clone());
        }
    }
    names
}

fn grows(table: &str) -> bool {
    !BOUNDED_TABLES.contains(&table)
}

/// SQLite: each recorded statement's plan; the statements that scan a growing table.
fn explain_sqlite(db: &std::path::Path, recorded: &[Recorded]) -> Vec<(String, Vec<String>)> {
    let c = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap();
    // A partial index holds only the rows its condition picks: reading it whole is reading
    // what the statement asks for.
    let partial: Vec<String> = c
        .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND sql LIKE '% WHERE %'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut scans = Vec::new();
    for r in recorded.iter().filter(|r| !allowed(&r.sql)) {
        let explained = format!("EXPLAIN QUERY PLAN {}", r.sql);
        let mut stmt = match c.prepare(&explained) {
            Ok(s) => s,
            // Statements of the schema itself (migrations, PRAGMAs) have no plan to read.
            Err(_) if !is_dml(&r.sql) => continue,
            Err(e) => panic!("EXPLAIN of {}: {e}", r.sql),
        };
        let nulls = vec![rusqlite::types::Null; stmt.parameter_count()];
        let plan: Vec<String> = stmt
            .query_map(rusqlite::params_from_iter(nulls), |row| {
                row.get::<_, String>(3)
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let names = table_names(&r.sql);
        // `(?N IS NULL OR column = ?N)` hides column's index: with nothing but a range on
        // another left to search by, every row of that range is read and filtered.
        let optional_filter = r.sql.contains(" IS NULL OR ");
        // With no LIMIT, a search narrowed by the org alone reads every row the org has
        // in that table: a cost that grows with the org (an index chosen for covering the
        // columns over one that narrows further did this to a stack's downstream stacks).
        let unlimited = !r.sql.to_ascii_uppercase().contains("LIMIT");
        let on_partial = |rest: &str| {
            rest.split_once(" INDEX ")
                .map(|(_, i)| i.split_whitespace().next().unwrap_or(""))
                .is_some_and(|i| partial.iter().any(|p| p == i))
        };
        let scanned = plan.iter().any(|line| {
            if let Some(rest) = line.strip_prefix("SEARCH ") {
                let name = rest.split_whitespace().next().unwrap_or("");
                let table = names.get(name);
                let growing = table.is_some_and(|table| grows(table));
                let per_stack = table.is_some_and(|t| !ORG_SETTINGS_TABLES.contains(&t.as_str()));
                return growing
                    && ((optional_filter && open_range(rest))
                        || (unlimited && per_stack && !on_partial(rest) && whole_org(rest)));
            }
            let Some(rest) = line.strip_prefix("SCAN ") else {
                return false;
            };
            let mut words = rest.split_whitespace();
            let name = words.next().unwrap_or("");
            let whole_partial = on_partial(rest);
            names.get(name).is_some_and(|table| grows(table)) && !whole_partial
        });
        if scanned {
            scans.push((r.sql.clone(), plan));
        }
    }
    scans
}

/// Whether a SQLite `SEARCH` only ranges over its index (`(seq<?)`, `(created_at>?)`):
/// no equality narrows it, so it may read the table from one end.
fn open_range(search: &str) -> bool {
    let Some(terms) = search
        .rsplit_once('(')
        .and_then(|(_, t)| t.strip_suffix(')'))
    else {
        return false;
    };
    let equality = |t: &str| {
        (t.contains("=?") && !t.contains("<=?") && !t.contains(">=?")) || t.contains(" IN ")
    };
    !terms.split(" AND ").any(equality)
}

/// Whether a SQLite `SEARCH` is narrowed by the org and nothing else (`(org_id=?)`).
fn whole_org(search: &str) -> bool {
    search
        .rsplit_once('(')
        .and_then(|(_, t)| t.strip_suffix(')'))
        .is_some_and(|terms| terms.trim() == "org_id=?")
}

/// PostgreSQL: each recorded statement's generic plan with sequential scans disabled; the
/// statements that still scan a growing table.
fn explain_postgres(url: &str, recorded: &[Recorded]) -> Vec<(String, Vec<String>)> {
    let (url, recorded) = (url.to_string(), recorded.to_vec());
    std::thread::spawn(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        c.batch_execute(
            "ANALYZE; SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off",
        )
        .unwrap();
        let mut scans = Vec::new();
        for r in recorded.iter().filter(|r| is_dml(&r.sql)) {
            if allowed(&r.sql.replace('$', "?")) {
                continue;
            }
            let types = if r.param_types.is_empty() {
                String::new()
            } else {
                format!("({})", r.param_types.join(", "))
            };
            c.batch_execute(&format!("PREPARE guard{types} AS {}", r.sql))
                .unwrap_or_else(|e| panic!("PREPARE of {}: {e}", r.sql));
            let nulls = vec!["NULL"; r.param_types.len()].join(", ");
            let args = if nulls.is_empty() {
                String::new()
            } else {
                format!("({nulls})")
            };
            let plan: Vec<String> = c
                .query(&format!("EXPLAIN EXECUTE guard{args}"), &[])
                .unwrap_or_else(|e| panic!("EXPLAIN of {}: {e}", r.sql))
                .iter()
                .map(|row| row.get::<_, String>(0))
                .collect();
            c.batch_execute("DEALLOCATE guard").unwrap();
            if postgres_scans(&plan) {
                scans.push((r.sql.clone(), plan));
            }
        }
        scans
    })
    .join()
    .unwrap()
}

/// Whether a PostgreSQL plan reads a growing table whole: a `Seq Scan` with sequential
/// scans disabled means no index could serve the statement. (Which index PostgreSQL picks
/// depends on its statistics of the test's small tables; that an index exists for every
/// statement does not, and SQLite's plans, which hold no statistics, check the shape.)
fn postgres_scans(plan: &[String]) -> bool {
    plan.iter().any(|line| {
        line.split("Seq Scan on ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(grows)
    })
}

fn allowed(sql: &str) -> bool {
    let flat = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    ALLOWED_SCANS
        .iter()
        .any(|(fragment, _)| flat.contains(fragment))
}

/// A statement with a plan: a query or a change of rows.
fn is_dml(sql: &str) -> bool {
    let first = sql
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_ascii_uppercase();
    matches!(
        first.as_str(),
        "SELECT" | "WITH" | "INSERT" | "UPDATE" | "DELETE"
    )
}
