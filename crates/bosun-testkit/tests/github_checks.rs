//! The GitHub double's check runs and issue comments, the contract check every REST request
//! passes (GitHub's OpenAPI description), installation-token permissions on those routes,
//! rate-limit headers and armed faults — all through a real HTTP client.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use bosun_testkit::{app_jwt, Fault, GithubDouble};
use reqwest::blocking::Client;
use reqwest::header::HeaderMap;
use serde_json::{json, Value};

const APP_ID: i64 = 4242;
const INSTALLATION: i64 = 77;
const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
const OTHER_SHA: &str = "89abcdef0123456789abcdef0123456789abcdef";
const CONCLUSIONS: [&str; 7] = [
    "action_required",
    "cancelled",
    "failure",
    "neutral",
    "success",
    "skipped",
    "timed_out",
];

struct Fixture {
    gh: GithubDouble,
    http: Client,
    _root: tempfile::TempDir,
}

struct Answer {
    status: u16,
    headers: HeaderMap,
    body: Value,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn message(&self) -> &str {
        self.body["message"].as_str().unwrap_or_default()
    }
}

fn fixture() -> Fixture {
    let root = tempfile::tempdir().unwrap();
    let gh = GithubDouble::start(APP_ID, root.path());
    gh.add_installation(INSTALLATION, "acme", &["acme/infra", "acme/network"]);
    Fixture {
        gh,
        http: Client::new(),
        _root: root,
    }
}

/// Whether GitHub's description is installed (the double checks requests against it).
fn contract_installed() -> bool {
    bosun_testkit::github::contract::Contract::global().is_some()
}

impl Fixture {
    fn call(&self, method: &str, path: &str, token: Option<&str>, body: Option<Value>) -> Answer {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let url = if path.starts_with("http") {
            path.to_string()
        } else {
            format!("{}{path}", self.gh.url())
        };
        let mut req = self
            .http
            .request(method, url)
            .header("Accept", "application/vnd.github+json")
            .header("User-Agent", "bosun-testkit-test");
        if let Some(token) = token {
            req = req.header("Authorization", format!("token {token}"));
        }
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().unwrap();
        Answer {
            status,
            headers,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
        }
    }

    /// A token for `acme/<repo>` minted through the API with `permissions`.
    fn token_for(&self, repo: &str, permissions: Value) -> String {
        let resp = self
            .http
            .post(format!(
                "{}/app/installations/{INSTALLATION}/access_tokens",
                self.gh.url()
            ))
            .header("Accept", "application/vnd.github+json")
            .header("User-Agent", "bosun-testkit-test")
            .bearer_auth(app_jwt(APP_ID))
            .json(&json!({"repositories": [repo], "permissions": permissions}))
            .send()
            .unwrap();
        assert_eq!(resp.status().as_u16(), 201);
        resp.json::<Value>().unwrap()["token"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// A token for `acme/infra` with `checks: write` and `pull_requests: write`.
    fn token(&self) -> String {
        self.token_for(
            "infra",
            json!({"checks": "write", "pull_requests": "write"}),
        )
    }

    fn create_run(&self, token: &str, body: Value) -> Answer {
        self.call(
            "POST",
            "/repos/acme/infra/check-runs",
            Some(token),
            Some(body),
        )
    }

    fn no_violations(&self) {
        assert_eq!(self.gh.contract_violations(), Vec::<String>::new());
    }
}

#[test]
fn a_check_run_is_created_with_githubs_shape() {
    let f = fixture();
    let token = f.token();
    let a = f.create_run(
        &token,
        json!({
            "name": "bosun/plan",
            "head_sha": SHA,
            "external_id": "run-17",
            "details_url": "https://bosun.example/runs/17",
            "output": {"title": "Planning", "summary": "3 to add"},
        }),
    );
    assert_eq!(a.status, 201, "{}", a.body);
    let b = &a.body;
    assert_eq!(b["id"], 1000);
    assert_eq!(b["name"], "bosun/plan");
    assert_eq!(b["head_sha"], SHA);
    assert_eq!(b["external_id"], "run-17");
    assert_eq!(b["details_url"], "https://bosun.example/runs/17");
    assert_eq!(b["status"], "queued");
    assert_eq!(b["conclusion"], Value::Null);
    assert!(b["started_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(b["completed_at"], Value::Null);
    assert_eq!(b["output"]["title"], "Planning");
    assert_eq!(b["output"]["summary"], "3 to add");
    assert_eq!(b["output"]["text"], Value::Null);
    assert_eq!(b["output"]["annotations_count"], 0);
    assert!(b["output"]["annotations_url"]
        .as_str()
        .unwrap()
        .ends_with("/repos/acme/infra/check-runs/1000/annotations"));
    assert!(b["html_url"]
        .as_str()
        .unwrap()
        .contains("/acme/infra/runs/1000"));
    assert_eq!(b["app"]["id"], APP_ID);
    assert_eq!(b["app"]["slug"], "bosun-test");
    let suite = b["check_suite"]["id"].as_i64().unwrap();

    // Ids increase; one suite per head SHA; a conclusion completes the run.
    let second = f.create_run(
        &token,
        json!({"name": "bosun/apply", "head_sha": SHA, "conclusion": "success"}),
    );
    assert_eq!(second.status, 201, "{}", second.body);
    assert_eq!(second.body["id"], 1001);
    assert_eq!(second.body["check_suite"]["id"], suite);
    assert_eq!(second.body["status"], "completed");
    assert_eq!(second.body["conclusion"], "success");
    assert!(second.body["completed_at"].is_string());
    let third = f.create_run(&token, json!({"name": "bosun/plan", "head_sha": OTHER_SHA}));
    assert_eq!(third.body["id"], 1002);
    assert_ne!(third.body["check_suite"]["id"], suite);

    let runs = f.gh.check_runs();
    assert_eq!(runs.len(), 3);
    assert_eq!(runs[0].id, 1000);
    assert_eq!(runs[0].repository, "acme/infra");
    assert_eq!(runs[0].name, "bosun/plan");
    assert_eq!(runs[0].head_sha, SHA);
    assert_eq!(runs[0].external_id.as_deref(), Some("run-17"));
    assert_eq!(
        runs[0].details_url.as_deref(),
        Some("https://bosun.example/runs/17")
    );
    assert_eq!(runs[0].status, "queued");
    assert_eq!(runs[0].conclusion, None);
    assert_eq!(runs[0].output_title.as_deref(), Some("Planning"));
    assert_eq!(runs[0].output_summary.as_deref(), Some("3 to add"));
    assert_eq!(runs[0].check_suite, suite);
    assert_eq!(runs[0].updates, 0);
    assert_eq!(runs[1].status, "completed");
    f.no_violations();
}

#[test]
fn a_check_run_is_updated_to_completed_with_each_legal_conclusion() {
    let f = fixture();
    let token = f.token();
    for (i, conclusion) in CONCLUSIONS.into_iter().enumerate() {
        let created = f.create_run(
            &token,
            json!({"name": format!("check {i}"), "head_sha": SHA, "status": "in_progress"}),
        );
        assert_eq!(created.status, 201, "{}", created.body);
        assert_eq!(created.body["status"], "in_progress");
        let id = created.body["id"].as_i64().unwrap();
        let path = format!("/repos/acme/infra/check-runs/{id}");

        let updated = f.call(
            "PATCH",
            &path,
            Some(&token),
            Some(json!({
                "status": "completed",
                "conclusion": conclusion,
                "completed_at": "2030-01-02T03:04:05Z",
                "output": {"title": "Done", "summary": conclusion, "text": "details"},
            })),
        );
        assert_eq!(updated.status, 200, "{conclusion}: {}", updated.body);
        assert_eq!(updated.body["id"], id);
        assert_eq!(updated.body["status"], "completed");
        assert_eq!(updated.body["conclusion"], conclusion);
        assert_eq!(updated.body["completed_at"], "2030-01-02T03:04:05Z");
        assert_eq!(updated.body["name"], format!("check {i}"));
        assert_eq!(updated.body["output"]["text"], "details");

        let got = f.call("GET", &path, Some(&token), None);
        assert_eq!(got.status, 200);
        assert_eq!(got.body, updated.body);

        let run = f.gh.check_runs().pop().unwrap();
        assert_eq!(run.id, id);
        assert_eq!(run.status, "completed");
        assert_eq!(run.conclusion.as_deref(), Some(conclusion));
        assert_eq!(run.output_summary.as_deref(), Some(conclusion));
        assert_eq!(run.output_text.as_deref(), Some("details"));
        assert_eq!(run.updates, 1);
        assert!(run.updated_at >= run.created_at);
    }
    // A PATCH with only some fields keeps the others.
    let renamed = f.call(
        "PATCH",
        "/repos/acme/infra/check-runs/1000",
        Some(&token),
        Some(json!({"name": "renamed"})),
    );
    assert_eq!(renamed.status, 200, "{}", renamed.body);
    assert_eq!(renamed.body["conclusion"], "action_required");
    assert_eq!(f.gh.check_runs()[0].updates, 2);
    f.no_violations();
}

#[test]
fn a_conclusion_github_does_not_have_is_a_contract_violation() {
    let f = fixture();
    if !contract_installed() {
        return;
    }
    let token = f.token();
    let created = f.create_run(&token, json!({"name": "plan", "head_sha": SHA}));
    assert_eq!(created.status, 201);

    let a = f.call(
        "PATCH",
        "/repos/acme/infra/check-runs/1000",
        Some(&token),
        Some(json!({"conclusion": "passed"})),
    );
    assert_eq!(a.status, 422, "{}", a.body);
    assert!(
        a.message().starts_with("Invalid request.\n\n"),
        "{}",
        a.body
    );
    assert!(a.message().contains("/conclusion"), "{}", a.body);
    assert_eq!(a.body["status"], "422");
    assert!(a.body["documentation_url"]
        .as_str()
        .unwrap()
        .contains("docs.github.com"));
    let run = &f.gh.check_runs()[0];
    assert_eq!((run.status.as_str(), run.updates), ("queued", 0));

    let b = f.create_run(
        &token,
        json!({"name": "plan", "head_sha": SHA, "conclusion": "green"}),
    );
    assert_eq!(b.status, 422, "{}", b.body);
    // A field of the wrong type, and a missing required one.
    let c = f.create_run(&token, json!({"name": 7, "head_sha": SHA}));
    assert_eq!(c.status, 422, "{}", c.body);
    let d = f.create_run(&token, json!({"name": "plan"}));
    assert_eq!(d.status, 422, "{}", d.body);
    assert_eq!(f.gh.check_runs().len(), 1);

    let violations = f.gh.contract_violations();
    assert_eq!(violations.len(), 4, "{violations:#?}");
    assert!(
        violations[0].starts_with("PATCH /repos/acme/infra/check-runs/1000: "),
        "{}",
        violations[0]
    );
    assert!(violations[0].contains("passed"), "{}", violations[0]);
    assert!(violations[1].starts_with("POST /repos/acme/infra/check-runs: "));
    assert!(violations[1].contains("green"), "{}", violations[1]);
    assert!(violations[2].contains("/name"), "{}", violations[2]);
    assert!(violations[3].contains("head_sha"), "{}", violations[3]);
    // Unknown fields are not violations (the schema allows them).
    let e = f.create_run(
        &token,
        json!({"name": "plan", "head_sha": SHA, "unheard_of": true}),
    );
    assert_eq!(e.status, 201, "{}", e.body);
    assert_eq!(f.gh.contract_violations().len(), 4);
}

#[test]
fn completed_without_a_conclusion_is_refused() {
    let f = fixture();
    let token = f.token();
    let a = f.create_run(
        &token,
        json!({"name": "plan", "head_sha": SHA, "status": "completed"}),
    );
    assert_eq!(a.status, 422, "{}", a.body);
    assert!(a.message().contains("conclusion"), "{}", a.body);
    let b = f.create_run(
        &token,
        json!({"name": "plan", "head_sha": SHA, "completed_at": "2030-01-01T00:00:00Z"}),
    );
    assert_eq!(b.status, 422, "{}", b.body);
    // Only GitHub concludes `stale`.
    let c = f.create_run(
        &token,
        json!({"name": "plan", "head_sha": SHA, "conclusion": "stale"}),
    );
    assert_eq!(c.status, 422, "{}", c.body);
    // Not a commit SHA.
    let d = f.create_run(&token, json!({"name": "plan", "head_sha": "main"}));
    assert_eq!(d.status, 422, "{}", d.body);
    assert_eq!(d.body["message"], "Validation Failed");
    assert!(f.gh.check_runs().is_empty());

    let created = f.create_run(&token, json!({"name": "plan", "head_sha": SHA}));
    assert_eq!(created.status, 201);
    for body in [
        json!({"status": "completed"}),
        json!({"completed_at": "2030-01-01T00:00:00Z"}),
        json!({"status": "completed", "completed_at": "2030-01-01T00:00:00Z"}),
    ] {
        let e = f.call(
            "PATCH",
            "/repos/acme/infra/check-runs/1000",
            Some(&token),
            Some(body.clone()),
        );
        assert_eq!(e.status, 422, "{body}: {}", e.body);
    }
    let run = &f.gh.check_runs()[0];
    assert_eq!((run.status.as_str(), run.updates), ("queued", 0));
}

#[test]
fn check_runs_need_a_token_for_the_repository_with_checks_write() {
    let f = fixture();
    let writer = f.token();
    let created = f.create_run(&writer, json!({"name": "plan", "head_sha": SHA}));
    assert_eq!(created.status, 201);
    let body = || Some(json!({"name": "plan", "head_sha": SHA}));

    // Granted only `checks: read`: reading works, writing does not.
    f.gh.set_permissions(INSTALLATION, json!({"contents": "read", "checks": "read"}));
    let reader = f.token_for("infra", json!({"checks": "read"}));
    let a = f.call(
        "POST",
        "/repos/acme/infra/check-runs",
        Some(&reader),
        body(),
    );
    assert_eq!(a.status, 403, "{}", a.body);
    assert_eq!(a.message(), "Resource not accessible by integration");
    let a = f.call(
        "PATCH",
        "/repos/acme/infra/check-runs/1000",
        Some(&reader),
        Some(json!({"conclusion": "success"})),
    );
    assert_eq!(a.status, 403, "{}", a.body);
    let a = f.call(
        "GET",
        "/repos/acme/infra/check-runs/1000",
        Some(&reader),
        None,
    );
    assert_eq!(a.status, 200, "{}", a.body);

    // A token without checks at all, and a token for another repository.
    let contents = f.token_for("infra", json!({"contents": "read"}));
    let a = f.call(
        "GET",
        "/repos/acme/infra/check-runs/1000",
        Some(&contents),
        None,
    );
    assert_eq!(a.status, 403);
    let network =
        f.gh.issue_token_with(INSTALLATION, "acme/network", json!({"checks": "write"}));
    let a = f.call(
        "POST",
        "/repos/acme/infra/check-runs",
        Some(&network),
        body(),
    );
    assert_eq!(a.status, 403);

    // No token, an unknown one, a revoked one.
    let a = f.call("POST", "/repos/acme/infra/check-runs", None, body());
    assert_eq!((a.status, a.message()), (401, "Bad credentials"));
    let a = f.call(
        "POST",
        "/repos/acme/infra/check-runs",
        Some("ghs_nope"),
        body(),
    );
    assert_eq!((a.status, a.message()), (401, "Bad credentials"));
    let revoke = f.call("DELETE", "/installation/token", Some(&writer), None);
    assert_eq!(revoke.status, 204);
    let a = f.call(
        "POST",
        "/repos/acme/infra/check-runs",
        Some(&writer),
        body(),
    );
    assert_eq!(a.status, 401);

    // Still the one check run, never updated.
    let runs = f.gh.check_runs();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].updates, 0);
    f.no_violations();
}

#[test]
fn a_check_run_of_another_repository_or_unknown_is_not_found() {
    let f = fixture();
    let infra = f.token();
    let network = f.token_for("network", json!({"checks": "write"}));
    let created = f.call(
        "POST",
        "/repos/acme/network/check-runs",
        Some(&network),
        Some(json!({"name": "plan", "head_sha": SHA})),
    );
    assert_eq!(created.status, 201);
    let id = created.body["id"].as_i64().unwrap();
    assert_eq!(f.gh.check_runs()[0].repository, "acme/network");

    for path in [
        format!("/repos/acme/infra/check-runs/{id}"),
        "/repos/acme/infra/check-runs/999999".to_string(),
    ] {
        let a = f.call("GET", &path, Some(&infra), None);
        assert_eq!((a.status, a.message()), (404, "Not Found"), "{path}");
        let a = f.call(
            "PATCH",
            &path,
            Some(&infra),
            Some(json!({"conclusion": "success"})),
        );
        assert_eq!(a.status, 404, "{path}");
    }
    assert_eq!(f.gh.check_runs()[0].status, "queued");
    f.no_violations();
}

#[test]
fn routes_and_verbs_github_does_not_have_are_violations() {
    let f = fixture();
    if !contract_installed() {
        return;
    }
    let token = f.token();
    f.create_run(&token, json!({"name": "plan", "head_sha": SHA}));

    let put = f.call(
        "PUT",
        "/repos/acme/infra/check-runs/1000",
        Some(&token),
        Some(json!({"conclusion": "success"})),
    );
    assert_eq!((put.status, put.message()), (404, "Not Found"));
    let delete = f.call("DELETE", "/repos/acme/infra/check-runs", Some(&token), None);
    assert_eq!(delete.status, 404);
    let unknown = f.call(
        "GET",
        "/repos/acme/infra/check-run/1000",
        Some(&token),
        None,
    );
    assert_eq!(unknown.status, 404);
    let not_integer = f.call(
        "GET",
        "/repos/acme/infra/check-runs/latest",
        Some(&token),
        None,
    );
    assert_eq!(not_integer.status, 404);
    // A body where the operation takes none.
    let get_with_body = f.call(
        "GET",
        "/repos/acme/infra/check-runs/1000",
        Some(&token),
        Some(json!({"x": 1})),
    );
    assert_eq!(get_with_body.status, 422);

    let v = f.gh.contract_violations();
    assert_eq!(v.len(), 5, "{v:#?}");
    assert!(
        v[0].starts_with("PUT /repos/acme/infra/check-runs/1000: PUT is not an operation"),
        "{}",
        v[0]
    );
    assert!(v[0].contains("GET, PATCH"), "{}", v[0]);
    assert!(v[1].contains("DELETE is not an operation"), "{}", v[1]);
    assert!(v[2].contains("no path"), "{}", v[2]);
    assert!(v[3].contains("check_run_id must be an integer"), "{}", v[3]);
    assert!(v[4].contains("takes no request body"), "{}", v[4]);
    assert_eq!(f.gh.check_runs()[0].status, "queued");
}

#[test]
fn comments_are_listed_oldest_first_a_page_at_a_time() {
    let f = fixture();
    let token = f.token();
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(f.gh.add_comment("acme/infra", 12, "alice", &format!("person {i}")));
    }
    for i in 0..3 {
        let a = f.call(
            "POST",
            "/repos/acme/infra/issues/12/comments",
            Some(&token),
            Some(json!({"body": format!("bot {i}")})),
        );
        assert_eq!(a.status, 201, "{}", a.body);
        ids.push(a.body["id"].as_i64().unwrap());
    }
    // Another issue's and another repository's comments are not listed.
    f.gh.add_comment("acme/infra", 13, "bob", "elsewhere");
    f.gh.add_comment("acme/network", 12, "bob", "elsewhere");
    assert_eq!(ids, (5000..5008).collect::<Vec<_>>());

    // Default page size: everything, no Link.
    let all = f.call(
        "GET",
        "/repos/acme/infra/issues/12/comments",
        Some(&token),
        None,
    );
    assert_eq!(all.status, 200, "{}", all.body);
    let got: Vec<i64> = all
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_i64().unwrap())
        .collect();
    assert_eq!(got, ids);
    assert_eq!(all.header("link"), None);
    let person = &all.body[0];
    assert_eq!(person["body"], "person 0");
    assert_eq!(person["user"]["login"], "alice");
    assert_eq!(person["user"]["type"], "User");
    assert_eq!(person["performed_via_github_app"], Value::Null);
    let bot = &all.body[5];
    assert_eq!(bot["body"], "bot 0");
    assert_eq!(bot["user"]["login"], "bosun-test[bot]");
    assert_eq!(bot["user"]["type"], "Bot");
    assert_eq!(bot["performed_via_github_app"]["id"], APP_ID);
    assert_eq!(bot["performed_via_github_app"]["slug"], "bosun-test");
    assert!(bot["created_at"].as_str().unwrap().ends_with('Z'));
    assert!(bot["html_url"]
        .as_str()
        .unwrap()
        .ends_with("#issuecomment-5005"));

    // Pages of 3, following rel="next".
    let mut url = "/repos/acme/infra/issues/12/comments?per_page=3".to_string();
    let mut pages = Vec::new();
    loop {
        let page = f.call("GET", &url, Some(&token), None);
        assert_eq!(page.status, 200, "{}", page.body);
        pages.push(
            page.body
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["id"].as_i64().unwrap())
                .collect::<Vec<_>>(),
        );
        let Some(next) = page.header("link").and_then(next_link) else {
            break;
        };
        url = next;
    }
    assert_eq!(
        pages,
        vec![
            vec![5000, 5001, 5002],
            vec![5003, 5004, 5005],
            vec![5006, 5007]
        ]
    );
    let first = f.call(
        "GET",
        "/repos/acme/infra/issues/12/comments?per_page=3",
        Some(&token),
        None,
    );
    let link = first.header("link").unwrap();
    assert!(link.contains("page=3>; rel=\"last\""), "{link}");
    // Past the end: empty. Over 100 per page: 100.
    let past = f.call(
        "GET",
        "/repos/acme/infra/issues/12/comments?per_page=3&page=9",
        Some(&token),
        None,
    );
    assert_eq!(past.body, json!([]));
    for i in 0..120 {
        f.gh.add_comment("acme/infra", 14, "carol", &format!("{i}"));
    }
    let big = f.call(
        "GET",
        "/repos/acme/infra/issues/14/comments?per_page=500",
        Some(&token),
        None,
    );
    assert_eq!(big.body.as_array().unwrap().len(), 100);
    assert!(big.header("link").unwrap().contains("rel=\"next\""));
    f.no_violations();
}

/// The URL of `rel="next"` in a `Link` header.
fn next_link(link: &str) -> Option<String> {
    link.split(", ").find_map(|part| {
        let (url, rel) = part.split_once("; ")?;
        (rel == "rel=\"next\"").then(|| url.trim_matches(['<', '>']).to_string())
    })
}

#[test]
fn a_comment_is_created_and_edited() {
    let f = fixture();
    let token = f.token();
    let created = f.call(
        "POST",
        "/repos/acme/infra/issues/7/comments",
        Some(&token),
        Some(json!({"body": "Plan: 1 to add"})),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    let id = created.body["id"].as_i64().unwrap();
    assert_eq!(created.body["body"], "Plan: 1 to add");
    assert_eq!(created.body["user"]["login"], "bosun-test[bot]");

    let path = format!("/repos/acme/infra/issues/comments/{id}");
    let edited = f.call(
        "PATCH",
        &path,
        Some(&token),
        Some(json!({"body": "Plan: applied"})),
    );
    assert_eq!(edited.status, 200, "{}", edited.body);
    assert_eq!(edited.body["id"], id);
    assert_eq!(edited.body["body"], "Plan: applied");
    let got = f.call("GET", &path, Some(&token), None);
    assert_eq!(got.body["body"], "Plan: applied");

    let comments = f.gh.comments("acme/infra", 7);
    assert_eq!(comments.len(), 1);
    assert_eq!(comments[0].id, id);
    assert_eq!(comments[0].user, "bosun-test[bot]");
    assert!(comments[0].via_app);
    assert_eq!(comments[0].body, "Plan: applied");
    assert_eq!(comments[0].edits, 1);
    assert!(comments[0].updated_at >= comments[0].created_at);

    // A person's comment can be edited by the App too; another repository's id is 404.
    let theirs = f.gh.add_comment("acme/infra", 7, "alice", "lgtm");
    let a = f.call(
        "PATCH",
        &format!("/repos/acme/infra/issues/comments/{theirs}"),
        Some(&token),
        Some(json!({"body": "LGTM"})),
    );
    assert_eq!(a.status, 200);
    let foreign = f.gh.add_comment("acme/network", 7, "alice", "hi");
    let a = f.call(
        "PATCH",
        &format!("/repos/acme/infra/issues/comments/{foreign}"),
        Some(&token),
        Some(json!({"body": "x"})),
    );
    assert_eq!(a.status, 404);
    assert_eq!(f.gh.comments("acme/network", 7)[0].edits, 0);
    let mine = f.gh.comments("acme/infra", 7);
    assert_eq!((mine[1].user.as_str(), mine[1].via_app), ("alice", false));
    f.no_violations();
}

#[test]
fn a_comment_too_long_is_refused() {
    let f = fixture();
    let token = f.token();
    let longest = "é".repeat(65_536);
    let ok = f.call(
        "POST",
        "/repos/acme/infra/issues/7/comments",
        Some(&token),
        Some(json!({"body": longest})),
    );
    assert_eq!(ok.status, 201);
    let id = ok.body["id"].as_i64().unwrap();

    let too_long = format!("{longest}x");
    let expected = json!({
        "message": "Validation Failed",
        "errors": [{
            "resource": "IssueComment",
            "code": "unprocessable",
            "field": "data",
            "message": "Body is too long (maximum is 65536 characters)",
        }],
    });
    let a = f.call(
        "POST",
        "/repos/acme/infra/issues/7/comments",
        Some(&token),
        Some(json!({"body": too_long})),
    );
    assert_eq!(a.status, 422);
    assert_eq!(a.body["message"], expected["message"]);
    assert_eq!(a.body["errors"], expected["errors"]);
    let a = f.call(
        "PATCH",
        &format!("/repos/acme/infra/issues/comments/{id}"),
        Some(&token),
        Some(json!({"body": too_long})),
    );
    assert_eq!(a.status, 422);
    assert_eq!(a.body["errors"], expected["errors"]);

    let comments = f.gh.comments("acme/infra", 7);
    assert_eq!(comments.len(), 1);
    assert_eq!(comments[0].edits, 0);
    f.no_violations();
}

#[test]
fn comments_need_pull_requests_or_issues_permission() {
    let f = fixture();
    let body = || Some(json!({"body": "hi"}));
    let path = "/repos/acme/infra/issues/3/comments";

    let contents = f.token_for("infra", json!({"contents": "read"}));
    assert_eq!(f.call("GET", path, Some(&contents), None).status, 403);
    assert_eq!(f.call("POST", path, Some(&contents), body()).status, 403);

    let pr_read = f.token_for("infra", json!({"pull_requests": "read"}));
    assert_eq!(f.call("GET", path, Some(&pr_read), None).status, 200);
    let a = f.call("POST", path, Some(&pr_read), body());
    assert_eq!(
        (a.status, a.message()),
        (403, "Resource not accessible by integration")
    );

    f.gh.set_permissions(INSTALLATION, json!({"issues": "write"}));
    let issues = f.token_for("infra", json!({"issues": "write"}));
    assert_eq!(f.call("POST", path, Some(&issues), body()).status, 201);
    assert_eq!(f.call("GET", path, Some(&issues), None).status, 200);
    assert_eq!(f.call("POST", path, None, body()).status, 401);

    assert_eq!(f.gh.comments("acme/infra", 3).len(), 1);
    f.no_violations();
}

#[test]
fn a_comment_without_a_body_is_a_contract_violation() {
    let f = fixture();
    if !contract_installed() {
        return;
    }
    let token = f.token();
    let path = "/repos/acme/infra/issues/3/comments";
    let a = f.call("POST", path, Some(&token), Some(json!({"text": "hi"})));
    assert_eq!(a.status, 422, "{}", a.body);
    let b = f.call("POST", path, Some(&token), Some(json!({"body": 5})));
    assert_eq!(b.status, 422, "{}", b.body);
    let c = f.call("POST", path, Some(&token), None);
    assert_eq!(c.status, 422, "{}", c.body);
    let v = f.gh.contract_violations();
    assert_eq!(v.len(), 3, "{v:#?}");
    assert!(v[0].contains("body"), "{}", v[0]);
    assert!(v[2].contains("requires a request body"), "{}", v[2]);
    assert!(f.gh.comments("acme/infra", 3).is_empty());
}

#[test]
fn each_fault_is_answered_with_its_headers_then_the_next_request_succeeds() {
    let f = fixture();
    let token = f.token();
    let body = || Some(json!({"name": "plan", "head_sha": SHA}));
    let path = "/repos/acme/infra/check-runs";

    f.gh.fail_next(
        "POST",
        path,
        1,
        Fault::SecondaryRateLimit {
            retry_after_secs: 30,
        },
    );
    let a = f.call("POST", path, Some(&token), body());
    assert_eq!(a.status, 403, "{}", a.body);
    assert_eq!(a.header("retry-after"), Some("30"));
    assert!(
        a.message().starts_with("You have exceeded a secondary rate limit. Please wait a few minutes before you try again. If you reach out to GitHub Support for help, please include the request ID "),
        "{}",
        a.body
    );
    assert!(
        a.header("x-ratelimit-remaining")
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 0
    );
    assert_eq!(f.call("POST", path, Some(&token), body()).status, 201);

    f.gh.fail_next(
        "POST",
        path,
        1,
        Fault::PrimaryRateLimit { reset_in_secs: 60 },
    );
    let a = f.call("POST", path, Some(&token), body());
    assert_eq!(a.status, 403, "{}", a.body);
    assert_eq!(a.header("x-ratelimit-remaining"), Some("0"));
    let reset: i64 = a.header("x-ratelimit-reset").unwrap().parse().unwrap();
    let expected = chrono::Utc::now().timestamp() + 60;
    assert!(
        (reset - expected).abs() <= 2,
        "reset {reset}, expected {expected}"
    );
    assert!(
        a.message()
            .starts_with("API rate limit exceeded for installation ID 77."),
        "{}",
        a.body
    );
    assert_eq!(a.header("retry-after"), None);
    assert_eq!(f.call("POST", path, Some(&token), body()).status, 201);

    f.gh.fail_next("POST", path, 2, Fault::ServerError);
    for _ in 0..2 {
        let a = f.call("POST", path, Some(&token), body());
        assert_eq!(a.status, 502);
        assert_eq!(a.body, json!({"message": "Server Error"}));
    }
    assert_eq!(f.call("POST", path, Some(&token), body()).status, 201);

    // Faults are consumed in the order armed; another method or path is not faulted.
    f.gh.fail_next("POST", path, 1, Fault::ServerError);
    f.gh.fail_next(
        "POST",
        path,
        1,
        Fault::SecondaryRateLimit {
            retry_after_secs: 1,
        },
    );
    f.gh.fail_next("PATCH", "/repos/acme/network", 1, Fault::ServerError);
    let patch = f.call(
        "PATCH",
        "/repos/acme/infra/check-runs/1000",
        Some(&token),
        Some(json!({"conclusion": "success"})),
    );
    assert_eq!(patch.status, 200);
    assert_eq!(f.call("POST", path, Some(&token), body()).status, 502);
    assert_eq!(f.call("POST", path, Some(&token), body()).status, 403);
    assert_eq!(f.call("POST", path, Some(&token), body()).status, 201);

    let statuses: Vec<u16> =
        f.gh.api_requests()
            .iter()
            .filter(|r| r.method == "POST" && r.path == path)
            .map(|r| r.status)
            .collect();
    assert_eq!(
        statuses,
        vec![403, 201, 403, 201, 502, 502, 201, 502, 403, 201]
    );
    assert_eq!(f.gh.check_runs().len(), 4);
    f.no_violations();
}

#[test]
fn a_faulted_token_request_is_recorded_as_refused() {
    let f = fixture();
    f.gh.fail_next("post", "/app/installations/", 1, Fault::ServerError);
    let resp = f
        .http
        .post(format!(
            "{}/app/installations/{INSTALLATION}/access_tokens",
            f.gh.url()
        ))
        .header("Accept", "application/vnd.github+json")
        .header("User-Agent", "t")
        .bearer_auth(app_jwt(APP_ID))
        .json(&json!({"repositories": ["infra"], "permissions": {"contents": "read"}}))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 502);
    let r = f.gh.token_requests().pop().unwrap();
    assert!(!r.accepted);
    assert_eq!(
        (r.status, r.refusal.as_deref()),
        (502, Some("Server Error"))
    );
    assert!(f.gh.issued_tokens().is_empty());
    // The next one is served.
    f.token_for("infra", json!({"contents": "read"}));
}

#[test]
fn every_answer_carries_rate_limit_headers_counted_per_token() {
    let f = fixture();
    let one = f.token();
    let two = f.token();
    let now = chrono::Utc::now().timestamp();
    let mut remaining = Vec::new();
    for (token, path) in [
        (&one, "/repos/acme/infra/issues/1/comments"),
        (&one, "/repos/acme/infra/issues/1/comments"),
        (&two, "/repos/acme/infra/issues/1/comments"),
        (&one, "/repos/acme/infra/check-runs/4040"),
    ] {
        let a = f.call("GET", path, Some(token), None);
        assert_eq!(a.header("x-ratelimit-limit"), Some("5000"));
        assert_eq!(a.header("x-ratelimit-resource"), Some("core"));
        let reset: i64 = a.header("x-ratelimit-reset").unwrap().parse().unwrap();
        assert!(reset > now && reset <= now + 3600 + 5, "reset {reset}");
        let left: u64 = a.header("x-ratelimit-remaining").unwrap().parse().unwrap();
        let used: u64 = a.header("x-ratelimit-used").unwrap().parse().unwrap();
        assert_eq!(left + used, 5000);
        remaining.push(left);
    }
    assert_eq!(remaining, vec![4999, 4998, 4999, 4997]);
}

#[test]
fn api_requests_record_bodies_tokens_and_operations() {
    let f = fixture();
    let token = f.token();
    f.create_run(&token, json!({"name": "plan", "head_sha": SHA}));
    f.call(
        "GET",
        "/repos/acme/infra/issues/2/comments?per_page=5",
        Some(&token),
        None,
    );
    let requests = f.gh.api_requests();
    let mint = &requests[0];
    assert_eq!(mint.method, "POST");
    // The App JWT it was authenticated with.
    assert_eq!(mint.token.as_deref().unwrap().split('.').count(), 3);
    assert_eq!(
        mint.body.as_ref().unwrap()["repositories"],
        json!(["infra"])
    );
    let create = &requests[1];
    assert_eq!(create.token.as_deref(), Some(token.as_str()));
    assert_eq!(create.body, Some(json!({"name": "plan", "head_sha": SHA})));
    let list = &requests[2];
    assert_eq!(list.path, "/repos/acme/infra/issues/2/comments?per_page=5");
    assert_eq!(list.body, None);
    if contract_installed() {
        let ops: Vec<Option<&str>> = requests.iter().map(|r| r.operation.as_deref()).collect();
        assert_eq!(
            ops,
            vec![
                Some("apps/create-installation-access-token"),
                Some("checks/create"),
                Some("issues/list-comments"),
            ]
        );
    }
}
