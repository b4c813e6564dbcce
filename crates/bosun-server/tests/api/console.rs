//! The console's stack, run and state pages over HTTP, as a browser without JavaScript
//! sees them: a session from POST /login with a real personal token, pages read as HTML,
//! forms posted with the page's CSRF token and followed through their redirect and
//! one-time message. Actions go through the same API handlers, so the refusals here are
//! compared with the API's own.

use std::collections::BTreeMap;
use std::time::Duration;

use bosun_core::Role;
use bosun_server::config::{GithubAppConfig, Secret};
use bosun_testkit::{require_examples, sign, BareRepo, GithubDouble};
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::harness::TestServer;
use crate::runs::Runner;

/// A browser: a cookie jar, no automatic redirects (each redirect is checked).
pub(crate) struct Browser<'a> {
    t: &'a TestServer,
    client: reqwest::Client,
    cookies: BTreeMap<String, String>,
}

struct Page {
    status: StatusCode,
    location: Option<String>,
    body: String,
}

impl<'a> Browser<'a> {
    fn new(t: &'a TestServer) -> Self {
        Browser {
            t,
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            cookies: BTreeMap::new(),
        }
    }

    /// Logs in with `token` through the login form.
    pub(crate) async fn login(t: &'a TestServer, token: &str) -> Self {
        let mut b = Browser::new(t);
        let p = b
            .send(
                Method::POST,
                "/login",
                Some(&[("token", token), ("next", "/")]),
            )
            .await;
        assert_eq!(p.status, StatusCode::SEE_OTHER, "login: {}", p.body);
        assert!(b.cookies.contains_key("bosun_session"), "no session cookie");
        b
    }

    async fn send(&mut self, method: Method, path: &str, form: Option<&[(&str, &str)]>) -> Page {
        let mut req = self.client.request(method, format!("{}{path}", self.t.url));
        if !self.cookies.is_empty() {
            let jar: Vec<String> = self
                .cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            req = req.header(COOKIE, jar.join("; "));
        }
        if let Some(f) = form {
            req = req.form(f);
        }
        let resp = req.send().await.unwrap();
        for c in resp.headers().get_all(SET_COOKIE) {
            let c = c.to_str().unwrap();
            let (pair, attrs) = c.split_once(';').unwrap_or((c, ""));
            let (k, v) = pair.split_once('=').unwrap();
            if attrs.contains("Max-Age=0") {
                self.cookies.remove(k);
            } else {
                self.cookies.insert(k.to_string(), v.to_string());
            }
        }
        Page {
            status: resp.status(),
            location: resp
                .headers()
                .get(LOCATION)
                .map(|l| l.to_str().unwrap().to_string()),
            body: resp.text().await.unwrap(),
        }
    }

    /// A page that must be shown (200).
    pub(crate) async fn page(&mut self, path: &str) -> String {
        let p = self.send(Method::GET, path, None).await;
        assert_eq!(p.status, StatusCode::OK, "GET {path}: {}", p.body);
        p.body
    }

    /// Reads an event stream until `needle` arrives (the stream stays open while the run
    /// goes on), with a deadline.
    async fn stream_until(&self, path: &str, needle: &str) -> String {
        let jar: Vec<String> = self
            .cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let mut resp = self
            .client
            .get(format!("{}{path}", self.t.url))
            .header(COOKIE, jar.join("; "))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(
            resp.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        let mut body = String::new();
        let deadline = Duration::from_secs(20);
        while !body.contains(needle) {
            let chunk = tokio::time::timeout(deadline, resp.chunk())
                .await
                .unwrap_or_else(|_| panic!("{needle:?} never came: {body}"))
                .unwrap()
                .unwrap_or_else(|| panic!("the stream ended without {needle:?}: {body}"));
            body.push_str(&String::from_utf8_lossy(&chunk));
        }
        body
    }

    /// Posts a form with the CSRF token of `from`, follows the redirect, and returns the
    /// page it lands on.
    async fn submit(&mut self, from: &str, action: &str, fields: &[(&str, &str)]) -> String {
        let csrf = csrf_of(&self.page(from).await);
        let mut form = vec![("csrf", csrf.as_str())];
        form.extend_from_slice(fields);
        let p = self.send(Method::POST, action, Some(&form)).await;
        assert_eq!(p.status, StatusCode::SEE_OTHER, "POST {action}: {}", p.body);
        let to = p.location.unwrap();
        self.page(&to).await
    }
}

fn csrf_of(html: &str) -> String {
    let marker = r#"<meta name="csrf-token" content=""#;
    let at = html.find(marker).unwrap() + marker.len();
    html[at..at + html[at..].find('"').unwrap()].to_string()
}

/// The text of the one-time message on a page: (ok, text).
fn flash(html: &str) -> Option<(bool, String)> {
    let at = html.find(r#"<p class="flash "#)?;
    let rest = &html[at..];
    let ok = rest.starts_with(r#"<p class="flash ok""#);
    let start = rest.find('>').unwrap() + 1;
    let end = rest.find("</p>").unwrap();
    Some((ok, unescape(&rest[start..end])))
}

fn unescape(s: &str) -> String {
    s.replace("&#60;", "<")
        .replace("&#62;", ">")
        .replace("&quot;", "\"")
        .replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// The page's log as text: its lines without the time each starts with, and the phase
/// dividers as `[phase]` lines.
fn log_text(html: &str) -> String {
    let start = html.find(r#"<pre id="log""#).expect("a log");
    let body = &html[start..];
    let body = &body[body.find('>').unwrap() + 1..body.find("</pre>").unwrap()];
    let mut out = String::new();
    let mut rest = body;
    while let Some(tag) = rest.find('<') {
        out.push_str(&rest[..tag]);
        rest = &rest[tag..];
        let close = rest.find('>').unwrap();
        let (open, after) = (&rest[..=close], &rest[close + 1..]);
        let end = after.find("</").unwrap();
        if open.contains("log-phase") {
            out.push_str(&format!("[{}]\n", &after[..end]));
        } else {
            assert!(open.starts_with(r#"<time class="log-t""#), "{open}");
        }
        rest = &after[after[end..].find('>').unwrap() + end + 1..];
    }
    out.push_str(rest);
    unescape(&out)
}

/// The text of the element with `id` (up to its first closing tag).
fn text_of(html: &str, id: &str) -> String {
    let at = html
        .find(&format!(r#"id="{id}""#))
        .unwrap_or_else(|| panic!("no #{id} in {html}"));
    let rest = &html[at..];
    let start = rest.find('>').unwrap() + 1;
    let end = rest[start..].find('<').unwrap() + start;
    unescape(&rest[start..end])
}

async fn setup() -> TestServer {
    let t = TestServer::start().await;
    let r = t
        .create_stack(json!({"id": "net", "repository": "file:///srv/git/infra",
            "path": "stacks/net", "watch_paths": ["modules"], "labels": ["team-net", "prod"]}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let r = t
        .create_stack(json!({"id": "app", "repository": "file:///srv/git/infra",
            "depends_on": [{"stack": "net", "outputs": {"vpc_id": "vpc"}}]}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    t
}

fn plan_summary() -> Value {
    json!({"has_changes": true, "add": 1, "change": 1, "destroy": 0,
        "resource_changes": [
            {"address": "aws_vpc.main", "action": "create"},
            {"address": "aws_subnet.a", "action": "update"},
            {"address": "aws_route.unchanged", "action": "no-op"}],
        "output_changes": {"vpc_id": "create"}})
}

/// A run of `net` taken by a runner through planning to `unconfirmed`, with a log.
async fn unconfirmed_run(t: &TestServer) -> String {
    let r = t
        .post("/api/v1/orgs/default/stacks/net/runs", &t.admin, json!({}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let id = r.body["id"].as_str().unwrap().to_string();
    let runner = Runner::register(t, "r1").await;
    runner.lease(5).await.expect("a lease");
    let next = t
        .get(
            &format!("/api/v1/runner/runs/{id}/logs/next?fencing=1"),
            &t.server.hosted_runner_token,
        )
        .await;
    let seq = next.body["next_seq"].as_i64().unwrap();
    let r = runner
        .call(
            &format!("{id}/logs"),
            json!({"fencing": 1, "chunks": [{"seq": seq, "text": "init <ok>\n"}, {"seq": seq + 1, "text": "plan: 1 to add\n"}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    runner
        .call(
            &format!("{id}/report"),
            json!({"fencing": 1, "event": "started", "commit": "0123456789abcdef"}),
        )
        .await;
    let r = runner
        .call(
            &format!("{id}/report"),
            json!({"fencing": 1, "event": "planned", "summary": plan_summary()}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    let r = t
        .get(&format!("/api/v1/orgs/default/runs/{id}"), &t.admin)
        .await;
    assert_eq!(r.body["state"], "unconfirmed", "{:?}", r.body);
    id
}

#[tokio::test]
async fn console_pages_without_a_session_redirect_to_login() {
    let t = setup().await;
    let mut b = Browser::new(&t);
    for path in [
        "/orgs/default/stacks/net",
        "/orgs/default/stacks/net/state",
        "/orgs/default/runs/run-x",
        "/orgs/default/runs/run-x/log.txt",
    ] {
        let p = b.send(Method::GET, path, None).await;
        assert_eq!(p.status, StatusCode::SEE_OTHER, "{path}");
        assert_eq!(
            p.location.as_deref(),
            Some(format!("/login?next={path}").as_str()),
            "{path}"
        );
    }
    // A form posted without a session goes to the login page too, and does nothing.
    let p = b
        .send(
            Method::POST,
            "/orgs/default/stacks/net/run",
            Some(&[("csrf", "x")]),
        )
        .await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    let runs = t
        .get("/api/v1/orgs/default/stacks/net/runs", &t.admin)
        .await;
    assert_eq!(runs.body["items"], json!([]));
}

/// After login a person lands in the first of their orgs that has something in it — not
/// in an empty org that sorts first — and in their only org when none has content.
#[tokio::test]
async fn home_lands_in_the_first_org_with_stacks_then_plans() {
    let t = TestServer::start().await;
    let member = |org: &'static str, user: &'static str| {
        let t = &t;
        async move {
            let r = t
                .call(
                    Method::PUT,
                    &format!("/api/v1/orgs/{org}/members/{user}"),
                    Some(&t.admin),
                    Some(json!({"role": "viewer"})),
                )
                .await;
            assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        }
    };
    for org in ["aaa-empty", "bbb-plans"] {
        let r = t.post("/api/v1/orgs", &t.admin, json!({"id": org})).await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }
    let dana = t.user_token("dana", Some(Role::Viewer)).await;
    member("aaa-empty", "dana").await;
    member("bbb-plans", "dana").await;
    let home = |token: String| {
        let t = &t;
        async move {
            let mut b = Browser::login(t, &token).await;
            b.send(Method::GET, "/", None)
                .await
                .location
                .unwrap_or_default()
        }
    };
    // No org has content yet: the first org.
    assert_eq!(home(dana.clone()).await, "/orgs/aaa-empty/stacks");
    // A plan in bbb-plans: its plans page.
    let r = t
        .post(
            "/api/v1/orgs/bbb-plans/plans",
            &t.admin,
            json!({"source": "name: app\ntargets: {hosts: [h]}\nsteps:\n  - command: [true]\n"}),
        )
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    assert_eq!(home(dana.clone()).await, "/orgs/bbb-plans/plans");
    // A stack in default: stacks come first.
    let r = t
        .create_stack(json!({"id": "net", "repository": "file:///srv/git/infra"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(home(dana.clone()).await, "/orgs/default/stacks");

    // The org a browser showed last comes first, while the user is a member of it.
    let mut b = Browser::login(&t, &dana).await;
    b.page("/orgs/aaa-empty/runners").await;
    assert_eq!(
        b.cookies.get("bosun_org").map(String::as_str),
        Some("aaa-empty")
    );
    let home = b.send(Method::GET, "/", None).await;
    assert_eq!(home.location.as_deref(), Some("/orgs/aaa-empty/stacks"));
    b.page("/orgs/bbb-plans/plan-runs").await;
    let home = b.send(Method::GET, "/", None).await;
    assert_eq!(home.location.as_deref(), Some("/orgs/bbb-plans/plans"));
    // A page refused (not a member) is not remembered; a cookie naming an org the user
    // left, or a hostile value, is passed over.
    let refused = b.send(Method::GET, "/orgs/nosuch/stacks", None).await;
    assert_ne!(refused.status, StatusCode::OK);
    assert_eq!(
        b.cookies.get("bosun_org").map(String::as_str),
        Some("bbb-plans")
    );
    for cookie in ["nosuch", "..%2F..%2Fx", "a\"b", &"x".repeat(100)] {
        b.cookies.insert("bosun_org".into(), cookie.to_string());
        let home = b.send(Method::GET, "/", None).await;
        assert_eq!(
            home.location.as_deref(),
            Some("/orgs/default/stacks"),
            "cookie {cookie:?}"
        );
    }
}

#[tokio::test]
async fn run_page_shows_the_run_and_its_buttons_by_role_and_actions_go_through_the_api() {
    let t = setup().await;
    let id = unconfirmed_run(&t).await;
    let op = t.user_token("olivia", Some(Role::Operator)).await;
    let viewer = t.user_token("victor", Some(Role::Viewer)).await;
    let run_page = format!("/orgs/default/runs/{id}");

    let mut o = Browser::login(&t, &op).await;
    let html = o.page(&run_page).await;
    assert_eq!(text_of(&html, "run-state"), "unconfirmed");
    for a in ["confirm", "discard", "cancel"] {
        assert!(
            html.contains(&format!(r#"name="action" value="{a}""#)),
            "{a}: {html}"
        );
    }
    assert!(
        !html.contains(r#"value="retry""#),
        "retry is for ended runs"
    );
    assert!(html.contains("aws_vpc.main") && html.contains("aws_subnet.a"));
    assert!(
        !html.contains("aws_route.unchanged"),
        "no-op changes are not listed"
    );
    assert!(html.contains(&format!(
        r#"data-live-log="/orgs/default/runs/{id}/log/stream""#
    )));
    assert!(
        log_text(&html).contains("init <ok>\nplan: 1 to add\n") && !html.contains("<ok>"),
        "the log so far, escaped: {html}"
    );
    assert!(
        html.contains(r#"<time class="log-t" datetime=""#),
        "each line has its time: {html}"
    );
    assert!(
        text_of(&html, "run-trigger").starts_with("started by hand by"),
        "{html}"
    );

    // The plain-text log and the session's SSE stream.
    let p = o
        .send(Method::GET, &format!("{run_page}/log.txt"), None)
        .await;
    assert_eq!(p.status, StatusCode::OK);
    assert!(
        p.body.ends_with("init <ok>\nplan: 1 to add\n"),
        "{}",
        p.body
    );
    let p = o
        .stream_until(&format!("{run_page}/log/stream?after=0"), "plan: 1 to add")
        .await;
    assert!(
        p.contains("event: chunk") && p.contains("plan: 1 to add"),
        "{p}"
    );

    // A viewer sees the run without buttons; posting anyway gets the API's refusal.
    let mut v = Browser::login(&t, &viewer).await;
    let html = v.page(&run_page).await;
    assert_eq!(text_of(&html, "run-state"), "unconfirmed");
    assert!(!html.contains(r#"id="run-actions""#), "{html}");
    let api = t
        .post(
            &format!("/api/v1/orgs/default/runs/{id}/confirm"),
            &viewer,
            json!({}),
        )
        .await;
    assert_eq!(api.status, StatusCode::FORBIDDEN);
    let after = v
        .submit(
            &run_page,
            &format!("{run_page}/action"),
            &[("action", "confirm")],
        )
        .await;
    assert_eq!(flash(&after), Some((false, api.message().to_string())));
    assert!(after.contains(r#"<p class="flash error" role="alert">"#));

    // Without the session's CSRF token nothing happens, and the refusal says why.
    for csrf in [None, Some("0123456789abcdef0123456789abcdef")] {
        let mut form = vec![("action", "confirm")];
        if let Some(c) = csrf {
            form.push(("csrf", c));
        }
        let p = o
            .send(Method::POST, &format!("{run_page}/action"), Some(&form))
            .await;
        assert_eq!(p.status, StatusCode::FORBIDDEN, "{csrf:?}");
        assert!(p.body.contains("CSRF token does not match"), "{}", p.body);
    }
    let r = t
        .get(&format!("/api/v1/orgs/default/runs/{id}"), &t.admin)
        .await;
    assert_eq!(r.body["state"], "unconfirmed");

    // The operator confirms: the run applies, and the page says so.
    let html = o
        .submit(
            &run_page,
            &format!("{run_page}/action"),
            &[("action", "confirm")],
        )
        .await;
    let (ok, text) = flash(&html).expect("a message");
    assert!(ok, "{text}");
    assert_eq!(text_of(&html, "run-state"), "applying");
    let r = t
        .get(&format!("/api/v1/orgs/default/runs/{id}"), &t.admin)
        .await;
    assert_eq!(r.body["state"], "applying");
    // The message is shown once.
    let html = o.page(&run_page).await;
    assert_eq!(flash(&html), None);

    // The runner applies; the ended run offers a retry, which lands on the new run.
    let runner = Runner::register(&t, "r2").await;
    let lease = runner.lease(5).await.expect("the apply phase");
    assert_eq!(lease["phase"], "apply");
    for event in [
        json!({"fencing": 2, "event": "started", "commit": "0123456789abcdef"}),
        json!({"fencing": 2, "event": "applied"}),
    ] {
        let r = runner.call(&format!("{id}/report"), event).await;
        assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    }
    let html = o.page(&run_page).await;
    assert_eq!(text_of(&html, "run-state"), "finished");
    assert!(html.contains(r#"value="retry""#), "{html}");
    assert!(!html.contains(r#"value="cancel""#), "{html}");
    let html = o
        .submit(
            &run_page,
            &format!("{run_page}/action"),
            &[("action", "retry")],
        )
        .await;
    let (ok, text) = flash(&html).unwrap();
    assert!(ok && text.contains(&format!("retries run {id}")), "{text}");
    assert!(html.contains(&format!(r#"href="/orgs/default/runs/{id}">{id}</a>"#)));
    assert_eq!(text_of(&html, "run-state"), "queued");
    // Cancel the queued retry: it ends at once.
    let retry_page = format!("/orgs/default/runs/{}", run_id_of(&html));
    let html = o
        .submit(
            &retry_page,
            &format!("{retry_page}/action"),
            &[("action", "cancel")],
        )
        .await;
    assert!(flash(&html).unwrap().0, "{html}");
    assert_eq!(text_of(&html, "run-state"), "canceled");
}

/// The id of the run a run page shows (from its heading).
fn run_id_of(html: &str) -> String {
    let at = html.find("<h1>Run ").unwrap() + 8;
    html[at..at + html[at..].find('<').unwrap()].to_string()
}

/// A run waiting for an approver says so on its page — where, who asked, who may decide —
/// offers no confirm, and is approved there by someone the approval rule lets approve;
/// the person who asked sees why they cannot, and a viewer sees no form.
#[tokio::test]
async fn a_gated_run_is_approved_from_its_own_page_by_whoever_may_approve() {
    let t = TestServer::start().await;
    let r = t
        .post(
            "/api/v1/orgs/default/environments",
            &t.admin,
            json!({"id": "prod", "requires_approval": true}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let r = t
        .create_stack(
            json!({"id": "net", "repository": "file:///srv/git/infra", "environment": "prod"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let id = unconfirmed_run(&t).await;
    let op = t.user_token("olivia", Some(Role::Operator)).await;
    let viewer = t.user_token("vera", Some(Role::Viewer)).await;
    let run_page = format!("/orgs/default/runs/{id}");

    // The API names the wait on the run itself.
    let shown = t.get(&format!("/api/v1/orgs/default/runs/{id}"), &op).await;
    assert_eq!(shown.body["approval"]["environments"], json!(["prod"]));
    assert_eq!(shown.body["approval"]["requested_by"], "user:admin");
    let approvers = shown.body["approval"]["approvers"].as_str().unwrap_or("");
    assert!(
        approvers.contains("operator or admin of org default, other than user:admin"),
        "{approvers}"
    );

    // The one who asked: the wait, no confirm, and why they may not approve.
    let mut admin = Browser::login(&t, &t.admin).await;
    let html = admin.page(&run_page).await;
    assert!(html.contains(r#"id="run-approval""#), "{html}");
    assert!(!html.contains("Confirm and apply"), "{html}");
    assert!(!html.contains(r#"id="run-approve""#), "{html}");
    assert!(
        text_of(&html, "run-approval-refusal").contains("approve"),
        "{html}"
    );
    // A viewer: the wait, and no form.
    let mut v = Browser::login(&t, &viewer).await;
    let html = v.page(&run_page).await;
    assert!(html.contains(r#"id="run-approval""#), "{html}");
    assert!(!html.contains(r#"id="run-approve""#), "{html}");

    // A confirm posted anyway is refused with the API's words.
    let api = t
        .post(
            &format!("/api/v1/orgs/default/runs/{id}/confirm"),
            &op,
            json!({}),
        )
        .await;
    assert_eq!(api.code(), "approval_required");
    let mut o = Browser::login(&t, &op).await;
    let html = o
        .submit(
            &run_page,
            &format!("{run_page}/action"),
            &[("action", "confirm")],
        )
        .await;
    assert_eq!(flash(&html), Some((false, api.message().to_string())));
    assert_eq!(text_of(&html, "run-state"), "unconfirmed");

    // The inbox row shows the plan and who may decide, beside the Approve form.
    let inbox = o.page("/orgs/default/approvals").await;
    let row = &inbox[inbox
        .find(&format!(r#"data-subject="{id}""#))
        .expect("the row")..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(row.contains("plan: +1 ~1 -0"), "{row}");
    assert!(
        unescape(row).contains(
            "Who may decide: an operator or admin of org default, other than user:admin."
        ),
        "{row}"
    );

    // An operator approves it from the run page and lands back on it.
    assert!(html.contains(r#"id="run-approve""#), "{html}");
    let html = o
        .submit(
            &run_page,
            &format!("/orgs/default/approvals/{id}/approve"),
            &[("from", "run"), ("comment", "looks right")],
        )
        .await;
    assert_eq!(run_id_of(&html), id, "back on the run's page");
    let (ok, text) = flash(&html).expect("a message");
    assert!(ok && text.starts_with(&format!("approved {id}")), "{text}");
    assert_ne!(text_of(&html, "run-state"), "unconfirmed");
    assert!(!html.contains(r#"id="run-approval""#), "{html}");
    // The run keeps who approved it and what they said, and names its runner.
    let decided = text_of(&html, "run-decisions");
    assert!(
        decided.starts_with("approve by user:olivia, ") && decided.ends_with(": “looks right”"),
        "{decided}"
    );
    let shown = t.get(&format!("/api/v1/orgs/default/runs/{id}"), &op).await;
    assert_eq!(shown.body["approval"], Value::Null);
    assert_eq!(shown.body["decisions"][0]["action"], "approve");
    assert_eq!(shown.body["decisions"][0]["by"], "user:olivia");
    assert_eq!(shown.body["decisions"][0]["comment"], "looks right");
    assert_eq!(shown.body["runner_name"], "r1");
}

fn lock_info(id: &str, who: &str) -> Value {
    json!({"ID": id, "Operation": "OperationTypeApply", "Info": "", "Who": who,
        "Version": "1.0.3", "Created": "2026-11-30T10:00:00.000000Z", "Path": ""})
}

fn state_doc(serial: u64) -> Value {
    json!({"version": 4, "terraform_version": "1.0.3", "serial": serial, "lineage": "L-1",
        "outputs": {"vpc_id": {"value": "vpc-123", "type": "string"},
                    "password": {"value": "hunter2", "type": "string", "sensitive": true}},
        "resources": []})
}

/// Writes a state version of `net` as `token` (locking around it as terraform does)
/// and leaves it locked with `lock` when given.
async fn write_state(t: &TestServer, token: &str, serial: u64, lock: Option<&str>) {
    let url = "/api/v1/orgs/default/stacks/net/state";
    let lock_id = lock.unwrap_or("W-1");
    let r = t
        .call(
            Method::from_bytes(b"LOCK").unwrap(),
            url,
            Some(token),
            Some(lock_info(lock_id, "alice@laptop")),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = t
        .call(
            Method::POST,
            &format!("{url}?ID={lock_id}"),
            Some(token),
            Some(state_doc(serial)),
        )
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    if lock.is_none() {
        let r = t
            .call(
                Method::from_bytes(b"UNLOCK").unwrap(),
                url,
                Some(token),
                Some(lock_info(lock_id, "alice@laptop")),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    }
}

#[tokio::test]
async fn state_page_shows_versions_and_the_lock_and_force_unlock_wants_the_exact_id() {
    let t = setup().await;
    let admin = t.user_token("alice", Some(Role::Admin)).await;
    let viewer = t.user_token("victor", Some(Role::Viewer)).await;
    write_state(&t, &admin, 1, None).await;
    write_state(&t, &admin, 2, Some("A-1")).await;
    let state_page = "/orgs/default/stacks/net/state";

    let mut a = Browser::login(&t, &admin).await;
    let html = a.page(state_page).await;
    assert_eq!(text_of(&html, "lock-id"), "A-1");
    assert!(text_of(&html, "lock-holder").contains("user alice — person"));
    assert_eq!(text_of(&html, "lock-operation"), "OperationTypeApply");
    assert!(html.contains(r#"<form method="post" action="/orgs/default/stacks/net/state/force-unlock" id="force-unlock""#));
    assert!(html.contains(r#"name="lock_id""#));
    assert!(
        html.contains(r#"<tr data-version="2" id="version-2">"#)
            && html.contains(r#"<tr data-version="1" id="version-1">"#)
    );
    assert!(
        html.find(r#"data-version="2""#) < html.find(r#"data-version="1""#),
        "newest first"
    );

    // A viewer sees the lock but no form.
    let mut v = Browser::login(&t, &viewer).await;
    let html = v.page(state_page).await;
    assert_eq!(text_of(&html, "lock-id"), "A-1");
    assert!(!html.contains(r#"id="force-unlock""#));

    // A wrong ID: the API's mismatch, naming the held lock; still locked.
    let html = a
        .submit(
            state_page,
            &format!("{state_page}/force-unlock"),
            &[("lock_id", "A-2")],
        )
        .await;
    let (ok, text) = flash(&html).unwrap();
    assert!(!ok);
    assert!(
        text.starts_with(r#"lock "A-2" is not held; the state is locked by alice@laptop (lock A-1, operation OperationTypeApply"#),
        "{text}"
    );
    assert_eq!(text_of(&html, "lock-id"), "A-1");
    // The viewer posting anyway is refused with the API's words.
    let api = t
        .post(
            "/api/v1/orgs/default/stacks/net/state/force-unlock",
            &viewer,
            json!({"lock_id": "A-1"}),
        )
        .await;
    assert_eq!(api.status, StatusCode::FORBIDDEN);
    let html = v
        .submit(
            state_page,
            &format!("{state_page}/force-unlock"),
            &[("lock_id", "A-1")],
        )
        .await;
    assert_eq!(flash(&html), Some((false, api.message().to_string())));

    // The right ID releases it.
    let html = a
        .submit(
            state_page,
            &format!("{state_page}/force-unlock"),
            &[("lock_id", "A-1")],
        )
        .await;
    let (ok, text) = flash(&html).unwrap();
    assert!(ok && text.starts_with("released lock A-1"), "{text}");
    assert!(html.contains("<p>Unlocked.</p>"));
    let r = t
        .get("/api/v1/orgs/default/stacks/net/state/lock", &t.admin)
        .await;
    assert_eq!(r.body["locked"], false);
}

#[tokio::test]
async fn stack_page_shows_definition_runs_outputs_dependencies_and_runs_now() {
    let t = setup().await;
    let admin = t.user_token("alice", Some(Role::Admin)).await;
    let viewer = t.user_token("victor", Some(Role::Viewer)).await;
    write_state(&t, &admin, 1, None).await;
    let mut a = Browser::login(&t, &admin).await;
    let html = a.page("/orgs/default/stacks/net").await;
    assert!(html.contains("<dd>stacks/net</dd>") && html.contains("<dd>modules</dd>"));
    assert!(
        html.contains("<dt>Labels</dt><dd>team-net, prod</dd>"),
        "{html}"
    );
    assert!(html.contains(r#"<tr data-output="vpc_id">"#) && html.contains("vpc-123"));
    assert!(
        !html.contains("hunter2"),
        "a sensitive value is never shown"
    );
    assert!(
        html.contains(r#"id="downstreams""#)
            && html.contains(r#"href="/orgs/default/stacks/app">app</a>"#)
    );
    assert!(html.contains("<code>vpc_id</code> → <code>TF_VAR_vpc</code>"));
    // The plans it feeds: saved through the API, their file naming the stack.
    let r = t
        .post(
            "/api/v1/orgs/default/plans",
            &admin,
            json!({"source": "name: edge-config\ntargets: { labels: [edge] }\non_stack_change: { stack: net, outputs: [vpc_id] }\nsteps:\n  - command: [\"true\"]\n"}),
        )
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    let r = t
        .post(
            "/api/v1/orgs/default/plans",
            &admin,
            json!({"source": "name: nowhere\ntargets: { labels: [edge] }\non_stack_change: { stack: ghost }\nsteps:\n  - command: [\"true\"]\n"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("on_stack_change.stack: org \"default\" has no stack \"ghost\""),
        "{:?}",
        r.body
    );
    let html = a.page("/orgs/default/stacks/net").await;
    assert!(
        html.contains(r#"id="feeds-plans""#)
            && html
                .contains(r#"<li><a href="/orgs/default/plans/edge-config">edge-config</a> <small>(when <code>vpc_id</code> changes)</small></li>"#),
        "{html}"
    );
    // The API shows both kinds of downstream from the same graph.
    let shown = t.get("/api/v1/orgs/default/stacks/net", &admin).await;
    assert_eq!(shown.body["feeds_plans"], json!(["edge-config"]));
    assert_eq!(shown.body["downstream_stacks"], json!(["app"]));
    // A stack others hang from is not deleted; the refusal names the stack and the plan.
    let r = t
        .call(
            Method::DELETE,
            "/api/v1/orgs/default/stacks/net",
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    assert_eq!(r.body["error"]["code"], "has_dependents");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("is a dependency of app, plan edge-config"),
        "{:?}",
        r.body
    );
    let app = a.page("/orgs/default/stacks/app").await;
    assert!(app.contains("<dt>Labels</dt><dd>(none)</dd>"), "{app}");
    assert!(
        app.contains(r#"id="upstreams""#)
            && app.contains(r#"href="/orgs/default/stacks/net">net</a>"#)
    );

    // A viewer has no Run now button; an admin's lands on the new run.
    let mut v = Browser::login(&t, &viewer).await;
    assert!(!v
        .page("/orgs/default/stacks/net")
        .await
        .contains(r#"id="run-now""#));
    assert!(html.contains(r#"id="run-now""#));
    let html = a
        .submit(
            "/orgs/default/stacks/net",
            "/orgs/default/stacks/net/run",
            &[],
        )
        .await;
    let (ok, text) = flash(&html).unwrap();
    assert!(ok, "{text}");
    assert_eq!(text_of(&html, "run-state"), "queued");
    let html = a.page("/orgs/default/stacks/net").await;
    assert_eq!(html.matches("<tr data-run=").count(), 1);
    let api = t
        .post("/api/v1/orgs/default/stacks/net/runs", &viewer, json!({}))
        .await;
    let html = v
        .submit(
            "/orgs/default/stacks/net",
            "/orgs/default/stacks/net/run",
            &[],
        )
        .await;
    assert_eq!(flash(&html), Some((false, api.message().to_string())));
}

const SECRET: &str = "webhook-secret-for-tests";

#[tokio::test]
async fn stack_page_trigger_history_shows_an_ignored_tag_push_and_why() {
    let Some(ex) = require_examples() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let repos = dir.path().join("repos");
    std::fs::create_dir_all(&repos).unwrap();
    let gh = GithubDouble::start(4242, &repos);
    gh.add_installation(77, "acme", &["acme/infra"]);
    let work = BareRepo::create(&repos, "acme/infra").work_tree();
    let head = work.commit(&[("main.tf", "# a\n")], "init");
    work.push("main");
    let url = gh.url().to_string();
    let t = TestServer::start_with(|c| {
        c.vcs.webhook_secret = Some(Secret(SECRET.into()));
        c.vcs.app = Some(GithubAppConfig {
            app_id: 4242,
            private_key_pem: Secret(bosun_testkit::app_private_key_pem().into()),
        });
        c.vcs.api_url = url.clone();
        c.vcs.web_url = url;
        c.vcs.poll_interval = Duration::ZERO;
    })
    .await;
    let r = t
        .create_stack(json!({"id": "net", "repository": "github:acme/infra"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let mut tag = ex.example("push", |p| {
        p["ref"]
            .as_str()
            .is_some_and(|r| r.starts_with("refs/tags/"))
            && p["created"] == true
    });
    tag["after"] = json!(head);
    tag["repository"]["full_name"] = json!("acme/infra");
    tag["repository"]["name"] = json!("infra");
    tag["repository"]["owner"]["login"] = json!("acme");
    tag["installation"] = json!({"id": 77, "node_id": "MDIz"});
    let body = serde_json::to_vec(&tag).unwrap();
    let resp = t
        .client
        .post(format!("{}/webhooks/github", t.url))
        .header("content-type", "application/json")
        .header("x-github-event", "push")
        .header("x-github-delivery", "tag-1")
        .header("x-hub-signature-256", sign(SECRET.as_bytes(), &body))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let tag_name = tag["ref"]
        .as_str()
        .unwrap()
        .trim_start_matches("refs/tags/");

    let viewer = t.user_token("victor", Some(Role::Viewer)).await;
    let mut v = Browser::login(&t, &viewer).await;
    let html = v.page("/orgs/default/stacks/net").await;
    let at = html
        .find(r#"<tr data-delivery="tag-1""#)
        .unwrap_or_else(|| panic!("no delivery row: {html}"));
    let row = &html[at..at + html[at..].find("</tr>").unwrap()];
    assert!(row.contains(r#"data-triggered="false""#), "{row}");
    assert!(row.contains(">ignored<"), "{row}");
    assert!(row.contains(tag["ref"].as_str().unwrap()), "{row}");
    assert!(row.contains(&head[..12]), "{row}");
    assert!(
        unescape(row).contains(&format!("tag push ignored: tag {tag_name:?}")),
        "{row}"
    );
}

/// The rendered pages with what changes per run (ids, times, ages, the CSRF token)
/// replaced, so a change to the markup shows up as a diff.
#[tokio::test]
async fn rendered_pages_snapshots() {
    let t = setup().await;
    let admin = t.user_token("alice", Some(Role::Admin)).await;
    write_state(&t, &admin, 1, None).await;
    let id = unconfirmed_run(&t).await;
    write_state(&t, &admin, 2, Some("A-1")).await;
    let mut a = Browser::login(&t, &admin).await;
    let filters = vec![
        (r"run-[0-9a-f]{21}", "[run]"),
        (r#"content="[0-9a-f]{32}""#, r#"content="[csrf]""#),
        (
            r#"name="csrf" value="[0-9a-f]{32}""#,
            r#"name="csrf" value="[csrf]""#,
        ),
        (
            r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(\+00:00|Z)",
            "[time]",
        ),
        (r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", "[time]"),
        (
            r#"<time class="log-t" datetime="[^"]*">[^<]*</time>"#,
            "<time>[log-time]</time>",
        ),
        (r"\b\d+(\.\d)?[smhd]( \d+[smhd])?( ago| so far)?\b", "[age]"),
        (r"rnr_[0-9a-f]+", "[runner]"),
    ];
    let pages = [
        ("console_stacks", a.page("/orgs/default/stacks").await),
        ("console_stack", a.page("/orgs/default/stacks/net").await),
        (
            "console_run",
            a.page(&format!("/orgs/default/runs/{id}")).await,
        ),
        (
            "console_state",
            a.page("/orgs/default/stacks/net/state").await,
        ),
    ];
    insta::with_settings!({filters => filters}, {
        for (name, html) in pages {
            insta::assert_snapshot!(name, html);
        }
    });
}

/// A version recovered from an engine that could not write it: the run page says so in a
/// banner linking the version, and the state page flags it with the reason.
#[tokio::test]
async fn the_run_and_state_pages_show_a_recovered_version() {
    let t = TestServer::start().await;
    let r = t
        .create_stack(json!({"id": "net", "repository": "file:///srv/git/infra"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let run = t
        .post("/api/v1/orgs/default/stacks/net/runs", &t.admin, json!({}))
        .await;
    let id = run.body["id"].as_str().unwrap().to_string();
    let runner = Runner::register(&t, "r1").await;
    let lease = runner.lease(5).await.expect("a lease");
    let state = br#"{"version":4,"serial":1,"lineage":"L","outputs":{},"resources":[]}"#;
    let r = t
        .raw(
            Method::PUT,
            &format!(
                "/api/v1/runner/runs/{id}/recovered-state?fencing={}&reason=the%20server%20was%20away",
                lease["fencing"]
            ),
            &t.server.hosted_runner_token,
            Some("application/json"),
            state.to_vec(),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);

    let mut b = Browser::login(&t, &t.admin).await;
    let page = b.page(&format!("/orgs/default/runs/{id}")).await;
    assert!(page.contains(r#"id="recovered-state""#), "{page}");
    assert!(
        page.contains(r#"href="/orgs/default/stacks/net/state#version-1""#),
        "{page}"
    );
    assert!(page.contains("the server was away"), "{page}");
    let page = b.page("/orgs/default/stacks/net/state").await;
    assert!(page.contains(r#"id="version-1""#), "{page}");
    assert!(
        page.contains(r#"title="the server was away">recovered<"#),
        "{page}"
    );
}

/// A paused plan run is approved from its own page by someone the approval rule lets
/// decide; the person who started it reads why they may not, beside no button.
#[tokio::test]
async fn a_paused_plan_run_is_approved_from_its_own_page() {
    let t = TestServer::start().await;
    t.seed_environment("prod", true, false).await;
    t.seed_host("web-1", "web", Some("prod")).await;
    t.seed_plan(
        "app-config",
        "name: app-config\ntargets:\n  labels: [web]\nsteps:\n  - command: [\"true\"]\n",
    )
    .await;
    let alice = t.user_token("alice", Some(Role::Operator)).await;
    let bob = t.user_token("bob", Some(Role::Operator)).await;
    let r = t
        .post(
            "/api/v1/orgs/default/plans/app-config/runs",
            &alice,
            json!({}),
        )
        .await;
    assert_eq!(r.body["state"], "paused", "{:?}", r.body);
    let id = r.body["id"].as_str().unwrap().to_string();
    let page = format!("/orgs/default/plan-runs/{id}");

    let mut a = Browser::login(&t, &alice).await;
    let html = a.page(&page).await;
    assert!(html.contains(r#"id="run-approval""#), "{html}");
    assert!(!html.contains(r#"id="run-approve""#), "{html}");
    assert!(
        text_of(&html, "run-approval-refusal").contains("approve"),
        "{html}"
    );

    let mut b = Browser::login(&t, &bob).await;
    let html = b.page(&page).await;
    assert!(html.contains(r#"id="run-approve""#), "{html}");
    // Who may decide, in the approval rule's words, beside the decision.
    assert!(
        text_of(&html, "run-approvers").starts_with("an operator or admin of org default"),
        "{html}"
    );
    let html = b
        .submit(
            &page,
            &format!("/orgs/default/approvals/{id}/approve"),
            &[("from", "plan-run"), ("comment", "")],
        )
        .await;
    assert!(html.contains(&format!("<h1>Plan run {id}</h1>")), "{html}");
    let (ok, text) = flash(&html).expect("a message");
    assert!(ok && text.starts_with(&format!("approved {id}")), "{text}");
    assert_eq!(text_of(&html, "run-state"), "queued");
    assert!(!html.contains(r#"id="run-approval""#), "{html}");
}

/// A state version has a page of its own: who wrote it, what changed from the version
/// before (sensitive outputs hidden), the document, and a download of the file.
#[tokio::test]
async fn a_state_version_is_shown_diffed_and_downloaded() {
    let t = setup().await;
    write_state(&t, &t.admin, 1, None).await;
    write_state(&t, &t.admin, 2, None).await;
    let mut b = Browser::login(&t, &t.admin).await;
    // The state page links each version to its page.
    let list = b.page("/orgs/default/stacks/net/state").await;
    assert!(
        list.contains(r#"href="/orgs/default/stacks/net/state/versions/2""#),
        "{list}"
    );
    let page = b.page("/orgs/default/stacks/net/state/versions/2").await;
    assert_eq!(text_of(&page, "version-serial"), "2");
    let diff = unescape(&page[page.find(r#"id="diff""#).expect("a diff")..]);
    assert!(
        diff.contains(r#"<span class="del">-  "serial": 1,</span>"#),
        "{diff}"
    );
    assert!(
        diff.contains(r#"<span class="add">+  "serial": 2,</span>"#),
        "{diff}"
    );
    assert!(page.contains("(sensitive)"), "{page}");
    assert!(
        !page.contains("hunter2"),
        "the page hides sensitive outputs"
    );
    // The first version has no diff.
    let first = b.page("/orgs/default/stacks/net/state/versions/1").await;
    assert!(first.contains("The first version"), "{first}");
    // The download is the whole file.
    let file = b
        .send(
            Method::GET,
            "/orgs/default/stacks/net/state/versions/2/download",
            None,
        )
        .await;
    assert_eq!(file.status, StatusCode::OK);
    let doc: Value = serde_json::from_str(&file.body).unwrap();
    assert_eq!(doc, state_doc(2));
    // No such version: not found.
    let missing = b
        .send(
            Method::GET,
            "/orgs/default/stacks/net/state/versions/9",
            None,
        )
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn stack_page_shows_pull_request_feedback_and_whether_it_is_the_orgs() {
    let t = TestServer::start().await;
    for body in [
        json!({"id": "own", "repository": "github:acme/infra", "pr_feedback": "checks"}),
        json!({"id": "inherits", "repository": "github:acme/infra"}),
    ] {
        let r = t.create_stack(body).await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }
    let r = t
        .call(
            Method::PATCH,
            "/api/v1/orgs/default",
            Some(&t.admin),
            Some(json!({"pr_feedback": "comment"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let mut a = Browser::login(&t, &t.admin).await;
    let fact = |html: &str| {
        let at = html.find("<dt>Pull-request feedback</dt><dd>").unwrap();
        let rest = &html[at..];
        rest[..rest.find("</dd>").unwrap()].to_string()
    };
    let own = fact(&a.page("/orgs/default/stacks/own").await);
    assert!(own.ends_with("<dd>checks: check runs only"), "{own}");
    let inherited = fact(&a.page("/orgs/default/stacks/inherits").await);
    assert!(
        inherited.ends_with("<dd>comment (org default): the pull-request comment only"),
        "{inherited}"
    );
}
