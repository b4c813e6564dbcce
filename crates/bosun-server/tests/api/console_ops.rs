//! The console's operations pages over a real server, logged in with real personal
//! tokens through the login form: runners (busy with a plan run, stale when silent),
//! the approvals inbox (the approval rule's answer per user, an approval through the
//! form, a viewer's refused attempt with the API's own refusal, a forged form), plans and
//! a dry run's page (per-host results, the log, diffs, unresolved references), a real
//! run's page (what each step printed on each host, escaped, by its end), the drift
//! dashboard (stale first, highlighted) and the audit log. Each page's HTML is also
//! snapshotted with ids and times redacted.

use std::collections::HashMap;
use std::time::Duration;

use bosun_core::Role;
use bosun_server::schedules::clock::Clock;
use chrono::{DateTime, Utc};
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::{redirect, StatusCode};
use serde_json::{json, Value};

use crate::harness::TestServer;

const APP_PLAN: &str = r#"name: app-config
targets:
  labels: [web]
steps:
  - name: say
    command: ["echo", "hello"]
"#;

const SITE_PLAN: &str = r#"name: site
targets:
  labels: [edge]
steps:
  - name: motd
    command: ["echo", "{{ vars.motd }}"]
  - name: restart
    command: ["true"]
"#;

/// A browser session: a cookie jar of its own, no redirects followed.
struct Browser<'a> {
    t: &'a TestServer,
    client: reqwest::Client,
    cookies: HashMap<String, String>,
}

struct Page {
    status: StatusCode,
    html: String,
}

struct Posted {
    status: StatusCode,
    location: String,
}

impl<'a> Browser<'a> {
    /// Logs in through the login form with a personal token.
    async fn login(t: &'a TestServer, token: &str) -> Browser<'a> {
        let mut b = Browser {
            t,
            client: reqwest::Client::builder()
                .redirect(redirect::Policy::none())
                .build()
                .unwrap(),
            cookies: HashMap::new(),
        };
        let resp = b
            .client
            .post(format!("{}/login", t.url))
            .form(&[("token", token), ("next", "/")])
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::SEE_OTHER, "login refused");
        b.keep(&resp);
        assert!(b.cookies.contains_key("bosun_session"), "no session cookie");
        b
    }

    fn keep(&mut self, resp: &reqwest::Response) {
        for v in resp.headers().get_all(SET_COOKIE) {
            let v = v.to_str().unwrap();
            let pair = v.split(';').next().unwrap();
            let (k, val) = pair.split_once('=').unwrap();
            if v.contains("Max-Age=0") {
                self.cookies.remove(k);
            } else {
                self.cookies.insert(k.to_string(), val.to_string());
            }
        }
    }

    fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    async fn get(&mut self, path: &str) -> Page {
        let resp = self
            .client
            .get(format!("{}{path}", self.t.url))
            .header(COOKIE, self.cookie_header())
            .send()
            .await
            .unwrap();
        self.keep(&resp);
        Page {
            status: resp.status(),
            html: resp.text().await.unwrap(),
        }
    }

    /// A page that must render.
    async fn page(&mut self, path: &str) -> String {
        let p = self.get(path).await;
        assert_eq!(p.status, StatusCode::OK, "{path}: {}", p.html);
        p.html
    }

    async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Posted {
        let resp = self
            .client
            .post(format!("{}{path}", self.t.url))
            .header(COOKIE, self.cookie_header())
            .form(form)
            .send()
            .await
            .unwrap();
        self.keep(&resp);
        let status = resp.status();
        let location = resp
            .headers()
            .get(LOCATION)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        if status != StatusCode::SEE_OTHER {
            let body = resp.text().await.unwrap();
            return Posted {
                status,
                location: body,
            };
        }
        Posted { status, location }
    }
}

/// The session's CSRF token, from the page's `<meta name="csrf-token">`.
fn csrf(html: &str) -> String {
    let at = html
        .find("name=\"csrf-token\" content=\"")
        .expect("csrf meta")
        + 27;
    html[at..].split('"').next().unwrap().to_string()
}

/// The one-time message a page shows: (ok, text).
fn flash(html: &str) -> Option<(bool, String)> {
    let at = html.find("<p class=\"flash ")?;
    let rest = &html[at..];
    let ok = rest.starts_with("<p class=\"flash ok");
    let text = rest[rest.find('>')? + 1..rest.find("</p>")?].to_string();
    Some((ok, text))
}

/// The `<tr …>` element whose opening tag contains `marker`.
fn row<'h>(html: &'h str, marker: &str) -> &'h str {
    let at = html
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker} in {html}"));
    let start = html[..at].rfind("<tr").unwrap();
    let end = at + html[at..].find("</tr>").unwrap();
    &html[start..end]
}

/// Undoes the template's HTML escaping of text.
fn unescape(s: &str) -> String {
    s.replace("&#34;", "\"")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// Snapshots a page with everything that differs between runs redacted.
fn snapshot(name: &str, html: &str) {
    insta::with_settings!({filters => vec![
        (r#"name="csrf-token" content="[0-9a-f]+""#, r#"name="csrf-token" content="[csrf]""#),
        (r#"name="csrf" value="[0-9a-f]+""#, r#"name="csrf" value="[csrf]""#),
        (r"prun-[0-9a-f]{11}[0-9a-z]*", "[plan-run]"),
        (r"\brun-[0-9a-f]{11}[0-9a-z]*", "[run]"),
        (r"\brnr_[0-9a-z]+", "[runner]"),
        (r#"<time datetime="[^"]*" title="[^"]*">[^<]*</time>"#, "<time>[time]</time>"),
        (r#"<time class="log-t" datetime="[^"]*">[^<]*</time>"#, "<time>[log-time]</time>"),
        (r#"data-seq="\d+""#, r#"data-seq="[seq]""#),
        (r#"data-after="\d+""#, r#"data-after="[seq]""#),
        (r#"<span class="age">[^<]*</span>"#, r#"<span class="age">[age]</span>"#),
        (r"no heartbeat since [^<]*", "no heartbeat since [time]"),
        (r"tok_[0-9a-f]+", "[token]"),
        (r"version [0-9][^ <]*", "version [version]"),
    ]}, {
        insta::assert_snapshot!(name, html);
    });
}

async fn seed(t: &TestServer) {
    t.seed_environment("prod", true, false).await;
    t.seed_host("web-1", "web", Some("prod")).await;
    t.seed_host("edge-1", "edge", None).await;
    t.seed_plan("app-config", APP_PLAN).await;
    t.seed_plan("site", SITE_PLAN).await;
}

pub(crate) async fn runner_post(t: &TestServer, path: &str, body: Value) -> Value {
    let r = t
        .post(
            &format!("/api/v1/runner/{path}"),
            &t.server.hosted_runner_token,
            body,
        )
        .await;
    assert!(r.status.is_success(), "{path}: {:?}", r.body);
    r.body
}

/// Registers a runner and leases the next phase, plan runs included.
async fn lease_plan_run(t: &TestServer) -> Value {
    let runner = runner_post(t, "register", json!({"name": "r1", "version": "1.2.3"})).await
        ["runner_id"]
        .as_str()
        .unwrap()
        .to_string();
    runner_post(
        t,
        "lease",
        json!({"runner_id": runner, "wait_seconds": 5, "plan_runs": true}),
    )
    .await
}

#[tokio::test]
async fn runners_approvals_plans_and_audit_pages_show_the_apis_data_and_act_through_it() {
    let t = TestServer::start().await;
    seed(&t).await;
    let alice = t.user_token("alice", Some(Role::Operator)).await;
    let carol = t.user_token("carol", Some(Role::Admin)).await;
    let vic = t.user_token("vic", Some(Role::Viewer)).await;
    let mut as_alice = Browser::login(&t, &alice).await;
    let mut as_carol = Browser::login(&t, &carol).await;
    let mut as_vic = Browser::login(&t, &vic).await;

    // Alice's run waits for an approval (prod requires one); a dry run of `site` does not.
    let r = t
        .post(
            "/api/v1/orgs/default/plans/app-config/runs",
            &alice,
            json!({}),
        )
        .await;
    assert_eq!(r.body["state"], "paused", "{:?}", r.body);
    let gated = r.body["id"].as_str().unwrap().to_string();
    // The dry run is started through the plan page's form.
    let plan_page = as_alice.page("/orgs/default/plans/site").await;
    assert!(plan_page
        .contains("form method=\"post\" action=\"/orgs/default/plans/site/runs\" id=\"plan-run\""));
    assert!(
        plan_page.contains("<pre id=\"source\">name: site"),
        "{plan_page}"
    );
    let vic_plan = as_vic.page("/orgs/default/plans/site").await;
    assert!(
        !vic_plan.contains("id=\"plan-run\""),
        "viewers get no Run button"
    );
    let token = csrf(&plan_page);
    let posted = as_alice
        .post(
            "/orgs/default/plans/site/runs",
            &[("csrf", &token), ("dry_run", "true")],
        )
        .await;
    assert_eq!(posted.status, StatusCode::SEE_OTHER, "{}", posted.location);
    assert!(
        posted.location.starts_with("/orgs/default/plan-runs/prun-"),
        "{}",
        posted.location
    );
    let dry = posted.location.rsplit('/').next().unwrap().to_string();
    let started = as_alice.page(&posted.location).await;
    assert_eq!(
        flash(&started),
        Some((true, format!("started dry run {dry} (queued)")))
    );
    assert!(started.contains("<span id=\"run-state\" class=\"state state-queued\">queued</span>"));

    // A runner leases it: the runners page shows it busy with that run.
    let runner = runner_post(
        &t,
        "register",
        json!({"name": "r1", "version": "1.2.3", "egress": "restricted"}),
    )
    .await["runner_id"]
        .as_str()
        .unwrap()
        .to_string();
    let lease_next = || {
        runner_post(
            &t,
            "lease",
            json!({"runner_id": runner, "wait_seconds": 5, "plan_runs": true}),
        )
    };
    // First the gated run's preview, a dry run of it queued with it: it predicts a
    // change on web-1.
    let lease = lease_next().await;
    let preview = t
        .get(&format!("/api/v1/orgs/default/plan-runs/{gated}"), &alice)
        .await
        .body["preview"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(lease["plan_run"]["run_id"], preview.as_str(), "{lease}");
    assert_eq!(lease["plan_run"]["dry_run"], true, "{lease}");
    let f = lease["plan_run"]["fencing"].clone();
    runner_post(
        &t,
        &format!("plan-runs/{preview}/report"),
        json!({"fencing": f, "event": "started"}),
    )
    .await;
    runner_post(
        &t,
        &format!("plan-runs/{preview}/results"),
        json!({"fencing": f, "results": [{"step": 1, "step_name": "say", "module": "file.copy",
            "host": "web-1", "status": "changed", "changed": true, "exit_code": null,
            "duration_ms": 2, "message": "would write /etc/app.conf",
            "diff": "--- /etc/app.conf (before)\n+++ /etc/app.conf (after)\n-port=80\n+port=8080"}]}),
    )
    .await;
    runner_post(
        &t,
        &format!("plan-runs/{preview}/report"),
        json!({"fencing": f, "event": "finished", "ok": true, "report": {"unresolved": []}}),
    )
    .await;
    let lease = lease_next().await;
    assert_eq!(lease["plan_run"]["run_id"], dry.as_str(), "{lease}");
    let fencing = lease["plan_run"]["fencing"].clone();
    let runners = as_vic.page("/orgs/default/runners").await;
    let r1 = row(&runners, &format!("data-runner=\"{runner}\""));
    assert!(r1.contains("data-status=\"busy\""), "{r1}");
    assert!(
        r1.contains(&format!(
            "<a href=\"/orgs/default/plan-runs/{dry}\">{dry}</a>"
        )),
        "{r1}"
    );
    assert!(r1.contains("run of plan site"), "{r1}");
    assert!(!r1.contains("class=\"stale\""), "{r1}");
    snapshot("runners", &runners);

    // The runner reports: a log, per-host results with a diff, and the report with an
    // unresolved reference.
    runner_post(
        &t,
        &format!("plan-runs/{dry}/report"),
        json!({"fencing": fencing, "event": "started"}),
    )
    .await;
    runner_post(
        &t,
        &format!("plan-runs/{dry}/logs"),
        json!({"fencing": fencing, "chunks": [{"seq": 1, "text": "TASK motd on edge-1\n"}]}),
    )
    .await;
    // The page's live log follows the run through the console's stream route.
    let mut stream = as_vic
        .client
        .get(format!("{}/orgs/default/plan-runs/{dry}/log/stream", t.url))
        .header(COOKIE, as_vic.cookie_header())
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    let mut got = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !got.contains("TASK motd on edge-1") {
        let chunk = tokio::time::timeout_at(deadline, stream.chunk())
            .await
            .expect("the log chunk arrives on the stream")
            .unwrap()
            .expect("the stream stays open while the run runs");
        got.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(got.contains("event: chunk"), "{got}");
    drop(stream);
    let live = as_vic.page(&format!("/orgs/default/plan-runs/{dry}")).await;
    assert!(
        live.contains(&format!(
            "data-live-log=\"/orgs/default/plan-runs/{dry}/log/stream\" data-after=\"1\""
        )),
        "{live}"
    );
    assert!(
        !live.contains("id=\"run-actions\""),
        "a viewer has no abort button"
    );
    let result = |step: i64, name: &str, status: &str, diff: Option<&str>, message: &str| {
        json!({"step": step, "step_name": name, "module": "command", "host": "edge-1",
            "status": status, "changed": status == "changed", "exit_code": null,
            "duration_ms": 3, "message": message, "diff": diff})
    };
    runner_post(
        &t,
        &format!("plan-runs/{dry}/results"),
        json!({"fencing": fencing, "results": [
            result(1, "motd", "changed", Some("--- /etc/motd\n+++ /etc/motd\n-old\n+new"), "would write /etc/motd"),
            result(2, "restart", "unknown", None, "cannot predict a command"),
        ]}),
    )
    .await;
    runner_post(
        &t,
        &format!("plan-runs/{dry}/report"),
        json!({"fencing": fencing, "event": "finished", "ok": true, "report": {
            "plan": "site", "dry_run": true, "status": "ok", "hosts": ["edge-1"], "steps": [],
            "halted": null, "warnings": [], "duration_ms": 9,
            "unresolved": [{"host": "edge-1", "step": 1, "step_name": "motd",
                "reference": "vars.motd"}]}}),
    )
    .await;
    let run_page = as_vic.page(&format!("/orgs/default/plan-runs/{dry}")).await;
    assert!(
        run_page
            .contains("<span id=\"run-state\" class=\"state state-succeeded\">succeeded</span>"),
        "{run_page}"
    );
    assert!(run_page.contains("user:alice (manual)"), "{run_page}");
    let edge = row(&run_page, "data-host=\"edge-1\"");
    // Host, status, then the changed / ok / failed counts.
    assert!(
        edge.contains("<td><span class=\"state state-changed\">changed</span></td>\n  <td>1</td>\n  <td>0</td>\n  <td>0</td>"),
        "{edge}"
    );
    assert!(edge.contains("would write /etc/motd"), "{edge}");
    assert!(
        run_page.contains(">TASK motd on edge-1\n</pre>"),
        "{run_page}"
    );
    assert!(
        !run_page.contains("data-live-log"),
        "an ended run's log is not followed"
    );
    assert!(
        run_page.contains("<span class=\"add\">+new</span>"),
        "{run_page}"
    );
    assert!(
        run_page.contains("<span class=\"del\">-old</span>"),
        "{run_page}"
    );
    assert!(run_page.contains("<code>vars.motd</code>"), "{run_page}");
    let (hosts_at, report_at, unresolved_at) = (
        run_page.find("id=\"hosts\"").unwrap(),
        run_page.find("id=\"dry-run-report\"").unwrap(),
        run_page.find("id=\"unresolved\"").unwrap(),
    );
    assert!(
        hosts_at < report_at && report_at < unresolved_at,
        "unresolved at the bottom"
    );
    assert!(
        !run_page.contains("id=\"run-actions\""),
        "an ended run has no abort"
    );
    snapshot("plan_run", &run_page);

    // The plan's page lists it; so does the org's plan runs page.
    let site_page = as_alice.page("/orgs/default/plans/site").await;
    assert!(row(&site_page, &format!("data-run=\"{dry}\"")).contains("state-succeeded"));
    snapshot("plan", &site_page);
    let all_runs = as_vic.page("/orgs/default/plan-runs").await;
    assert!(row(&all_runs, &format!("data-run=\"{dry}\"")).contains("dry run"));
    assert!(row(&all_runs, &format!("data-run=\"{gated}\"")).contains("state-paused"));

    // The plans list: versions, targets and last runs.
    let plans = as_vic.page("/orgs/default/plans").await;
    let site = row(&plans, "data-plan=\"site\"");
    assert!(site.contains("labels edge"), "{site}");
    assert!(site.contains("state-succeeded"), "{site}");
    assert!(row(&plans, "data-plan=\"app-config\"").contains("state-paused"));
    snapshot("plans", &plans);

    // Approvals: everyone sees the waiting run; the rule answers per user.
    let vic_inbox = as_vic.page("/orgs/default/approvals").await;
    let vic_row = row(&vic_inbox, &format!("data-subject=\"{gated}\""));
    assert!(
        vic_row.contains("user:alice") && vic_row.contains("prod"),
        "{vic_row}"
    );
    assert!(
        !vic_row.contains("class=\"approve\""),
        "a viewer has no approve form"
    );
    let alice_inbox = as_alice.page("/orgs/default/approvals").await;
    let alice_row = row(&alice_inbox, &format!("data-subject=\"{gated}\""));
    // The requester is told the self-approval rule, beside no Approve button; they may
    // still reject (withdraw) their run.
    assert!(
        !alice_row.contains("class=\"approve\"") && alice_row.contains("class=\"reject\""),
        "{alice_row}"
    );
    assert!(
        alice_row.contains("You may not approve this run:"),
        "the requester is told the self-approval rule: {alice_row}"
    );
    let carol_inbox = as_carol.page("/orgs/default/approvals").await;
    let carol_row = row(&carol_inbox, &format!("data-subject=\"{gated}\""));
    assert!(carol_row.contains("You may approve this run."));
    // The preview, summed up in a line linking to it.
    assert!(
        carol_row.contains(&format!(
            "<a href=\"/orgs/default/plan-runs/{preview}\">preview: 1 host would change</a>"
        )),
        "{carol_row}"
    );
    snapshot("approvals_pending", &carol_inbox);
    // The run's own page shows the preview beside the decision: each host's steps and
    // the diff, and it refreshes no more (the preview ended).
    let gated_page = as_carol
        .page(&format!("/orgs/default/plan-runs/{gated}"))
        .await;
    let card = &gated_page[gated_page.find("id=\"run-approval\"").unwrap()..];
    let card = &card[..card.find("</section>").unwrap()];
    assert!(card.contains("id=\"run-approve\""), "{card}");
    assert!(card.contains("1 host would change"), "{card}");
    assert!(
        card.contains("<span class=\"add\">+port=8080</span>")
            && card.contains("<span class=\"del\">-port=80</span>"),
        "{card}"
    );
    assert!(
        row(card, "data-host=\"web-1\"").contains("would write /etc/app.conf"),
        "{card}"
    );
    assert!(!card.contains("data-poll"), "{card}");
    let preview_page = as_vic
        .page(&format!("/orgs/default/plan-runs/{preview}"))
        .await;
    assert!(
        preview_page.contains(&format!(
            "<dd id=\"preview-of\">run <a href=\"/orgs/default/plan-runs/{gated}\">{gated}</a>"
        )),
        "{preview_page}"
    );

    // A viewer posting anyway is refused with the API's own words; nothing changes.
    let api = t
        .post(
            &format!("/api/v1/orgs/default/approvals/{gated}/approve"),
            &vic,
            json!({}),
        )
        .await;
    assert_eq!(api.status, StatusCode::FORBIDDEN, "{:?}", api.body);
    let vic_csrf = csrf(&vic_inbox);
    let posted = as_vic
        .post(
            &format!("/orgs/default/approvals/{gated}/approve"),
            &[("csrf", &vic_csrf), ("comment", "")],
        )
        .await;
    assert_eq!(posted.status, StatusCode::SEE_OTHER);
    assert_eq!(posted.location, "/orgs/default/approvals");
    let after = as_vic.page("/orgs/default/approvals").await;
    let (ok, text) = flash(&after).expect("a refusal message");
    assert!(!ok);
    assert_eq!(unescape(&text), api.message());
    assert!(after.contains("role=\"alert\""));
    // The message is shown once.
    assert_eq!(flash(&as_vic.page("/orgs/default/approvals").await), None);

    // The requester's own approval: the approval rule's refusal, as the API words it.
    let api = t
        .post(
            &format!("/api/v1/orgs/default/approvals/{gated}/approve"),
            &alice,
            json!({}),
        )
        .await;
    assert_eq!(api.status, StatusCode::FORBIDDEN, "{:?}", api.body);
    let alice_csrf = csrf(&alice_inbox);
    as_alice
        .post(
            &format!("/orgs/default/approvals/{gated}/approve"),
            &[("csrf", &alice_csrf), ("comment", "")],
        )
        .await;
    let (ok, text) = flash(&as_alice.page("/orgs/default/approvals").await).unwrap();
    assert!(!ok);
    assert_eq!(unescape(&text), api.message());

    // A form with another session's CSRF token is refused and changes nothing.
    let forged = as_carol
        .post(
            &format!("/orgs/default/approvals/{gated}/approve"),
            &[("csrf", &vic_csrf), ("comment", "forged")],
        )
        .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    assert!(
        forged.location.contains("CSRF token does not match"),
        "{}",
        forged.location
    );
    let state = t
        .get(&format!("/api/v1/orgs/default/plan-runs/{gated}"), &carol)
        .await;
    assert_eq!(state.body["state"], "paused");

    // Carol approves through the form: the decision is recorded and the run moves.
    let carol_csrf = csrf(&carol_inbox);
    let posted = as_carol
        .post(
            &format!("/orgs/default/approvals/{gated}/approve"),
            &[("csrf", &carol_csrf), ("comment", "ship it")],
        )
        .await;
    assert_eq!(posted.status, StatusCode::SEE_OTHER);
    let done = as_carol.page("/orgs/default/approvals").await;
    assert_eq!(
        flash(&done),
        Some((true, format!("approved {gated}; the run is now queued")))
    );
    assert!(
        !done.contains(&format!("data-subject=\"{gated}\"")),
        "no longer waiting"
    );
    let decision = row(&done, &format!("data-decision=\"{gated}\""));
    assert!(
        decision.contains("approved")
            && decision.contains("user:carol")
            && decision.contains("ship it"),
        "{decision}"
    );
    let state = t
        .get(&format!("/api/v1/orgs/default/plan-runs/{gated}"), &carol)
        .await;
    assert_eq!(state.body["state"], "queued");
    let decisions = t
        .get("/api/v1/orgs/default/approvals/decisions", &carol)
        .await;
    assert_eq!(decisions.body["items"][0]["decided_by"], "user:carol");
    assert_eq!(decisions.body["items"][0]["comment"], "ship it");

    // Carol aborts the queued run through the run page's form.
    let page = as_carol
        .page(&format!("/orgs/default/plan-runs/{gated}"))
        .await;
    assert!(page.contains("id=\"run-actions\""), "{page}");
    let posted = as_carol
        .post(
            &format!("/orgs/default/plan-runs/{gated}/abort"),
            &[("csrf", &carol_csrf)],
        )
        .await;
    assert_eq!(posted.status, StatusCode::SEE_OTHER);
    let page = as_carol.page(&posted.location).await;
    assert_eq!(
        flash(&page),
        Some((true, format!("aborted {gated}: it is aborted")))
    );
    assert!(page.contains("<span id=\"run-state\" class=\"state state-aborted\">aborted</span>"));

    // The audit log (admins): newest first, the approval on top.
    let audit = as_carol.page("/orgs/default/audit").await;
    let first = &audit[audit.find("<tbody>").unwrap()..];
    let first = &first[..first.find("</tr>").unwrap()];
    assert!(first.contains("<code>plan_run.abort</code>"), "{first}");
    let second = &audit[audit.find("<tbody>").unwrap()..];
    let second = &second[second.find("</tr>").unwrap() + 5..];
    let first = &second[..second.find("</tr>").unwrap()];
    assert!(first.contains("<code>approval.approve</code>"), "{first}");
    assert!(first.contains("user:carol") && first.contains(&format!("plan_run:{gated}")));
    assert!(
        first.contains("&#34;comment&#34;:&#34;ship it&#34;")
            || first.contains("&quot;comment&quot;:&quot;ship it&quot;"),
        "{first}"
    );
    assert!(audit.contains("<code>plan_run.create</code>"));
    snapshot("audit", &audit);
    // …and its refusal for a viewer, in the API's words.
    let refused = as_vic.get("/orgs/default/audit").await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    let api = t.get("/api/v1/orgs/default/audit", &vic).await;
    assert!(
        refused.html.contains(&api.message().replace('"', "&#34;"))
            || unescape(&refused.html).contains(api.message()),
        "{}",
        refused.html
    );
}

/// A real run's page shows what each step printed on each host: the end of each stream
/// (the lines left out counted), escaped, in a `<details>` per step — unfolded where the
/// step failed — in a section the page refreshes when the run ends. While nothing has
/// been reported it says where the output appears.
#[tokio::test]
async fn a_plan_runs_page_shows_what_each_step_printed_on_each_host() {
    let t = TestServer::start().await;
    seed(&t).await;
    let alice = t.user_token("alice", Some(Role::Operator)).await;
    let vic = t.user_token("vic", Some(Role::Viewer)).await;
    let mut as_vic = Browser::login(&t, &vic).await;
    let r = t
        .post("/api/v1/orgs/default/plans/site/runs", &alice, json!({}))
        .await;
    assert_eq!(r.body["state"], "queued", "{:?}", r.body);
    let id = r.body["id"].as_str().unwrap().to_string();
    let lease = lease_plan_run(&t).await;
    assert_eq!(lease["plan_run"]["run_id"], id.as_str(), "{lease}");
    let fencing = lease["plan_run"]["fencing"].clone();
    runner_post(
        &t,
        &format!("plan-runs/{id}/report"),
        json!({"fencing": fencing, "event": "started"}),
    )
    .await;
    let page = format!("/orgs/default/plan-runs/{id}");
    let running = as_vic.page(&page).await;
    assert!(
        running.contains("<section aria-labelledby=\"output-h\" id=\"output\" data-refresh>"),
        "{running}"
    );
    assert!(
        running.contains("What each step prints appears here once a host has finished it"),
        "{running}"
    );

    let mut stdout: String = (1..=250).map(|i| format!("line {i}\n")).collect();
    stdout.push_str("<script>alert('out')</script>\n");
    let result = |step: i64, name: &str, status: &str, exit: i32, out: &str, err: &str| {
        json!({"step": step, "step_name": name, "module": "command", "host": "edge-1",
            "status": status, "changed": status == "changed", "exit_code": exit,
            "stdout": out, "stderr": err, "duration_ms": 3, "message": "ran: x"})
    };
    runner_post(
        &t,
        &format!("plan-runs/{id}/results"),
        json!({"fencing": fencing, "results": [
            result(1, "motd", "changed", 0, &stdout, "careful: a & b\n"),
            result(2, "restart", "failed", 3, "", "boom\n"),
        ]}),
    )
    .await;
    runner_post(
        &t,
        &format!("plan-runs/{id}/report"),
        json!({"fencing": fencing, "event": "finished", "ok": false,
            "reason": "step 2 (\"restart\") failed on edge-1", "report": {
            "plan": "site", "dry_run": false, "status": "failed", "hosts": ["edge-1"],
            "steps": [], "halted": null, "warnings": [], "unresolved": [], "duration_ms": 9}}),
    )
    .await;
    let html = as_vic.page(&page).await;
    let at = html
        .find("<article class=\"output\" data-host=\"edge-1\">")
        .expect(&html);
    let output = &html[at..at + html[at..].find("</article>").unwrap()];
    assert!(output.contains("<h3>edge-1</h3>"), "{output}");
    // Step 1 folded, its stdout's last 200 lines (the 51 before them counted), escaped.
    assert!(
        output.contains("<details data-step=\"1\">\n<summary>step 1 motd: <span class=\"state state-changed\">changed</span> · exit code 0</summary>"),
        "{output}"
    );
    assert!(
        output.contains("<p class=\"stream\">stdout <small>… 51 earlier line(s) not shown; the API's plan run has the whole output</small></p>\n<pre class=\"output\" data-stream=\"stdout\">line 52\nline 53\n"),
        "{output}"
    );
    assert!(
        output.contains("line 250\n&#60;script&#62;alert(&#39;out&#39;)&#60;/script&#62;</pre>"),
        "{output}"
    );
    assert!(!html.contains("<script>alert"), "{html}");
    assert!(
        output.contains("<pre class=\"output\" data-stream=\"stderr\">careful: a &#38; b</pre>"),
        "{output}"
    );
    // The failed step unfolded.
    assert!(
        output.contains("<details data-step=\"2\" open>"),
        "{output}"
    );
    assert!(
        output.contains("<pre class=\"output\" data-stream=\"stderr\">boom</pre>"),
        "{output}"
    );
    assert!(
        !html.contains("What each step prints appears here"),
        "{html}"
    );
}

#[tokio::test]
async fn a_silent_runner_is_highlighted_as_stale() {
    let t = TestServer::start_with(|c| c.runs.stale_after = Duration::from_secs(1)).await;
    let vic = t.user_token("vic", Some(Role::Viewer)).await;
    let mut b = Browser::login(&t, &vic).await;
    let runner = runner_post(&t, "register", json!({"name": "quiet"})).await["runner_id"]
        .as_str()
        .unwrap()
        .to_string();
    let marker = format!("data-runner=\"{runner}\"");
    let first = b.page("/orgs/default/runners").await;
    assert!(row(&first, &marker).contains("data-status=\"online\""));
    assert!(!row(&first, &marker).contains("class=\"stale\""));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let html = b.page("/orgs/default/runners").await;
        let r = row(&html, &marker);
        if r.contains("class=\"stale\"") {
            assert!(r.contains("data-status=\"dark\""), "{r}");
            assert!(
                r.contains("<span class=\"badge stale\">stale</span>"),
                "{r}"
            );
            assert!(r.contains("stale: no heartbeat since"), "{r}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never stale: {r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_runners_page_shows_how_each_runners_engines_reach_the_network() {
    let t = TestServer::start().await;
    let vic = t.user_token("vic", Some(Role::Viewer)).await;
    let mut b = Browser::login(&t, &vic).await;
    let mut ids = Vec::new();
    for (name, egress) in [
        ("sandboxed", json!("restricted")),
        ("open", json!("unrestricted")),
        ("opted", json!("opted_out")),
        ("old", Value::Null),
    ] {
        let mut body = json!({"name": name});
        if !egress.is_null() {
            body["egress"] = egress;
        }
        let r = runner_post(&t, "register", body).await;
        ids.push(r["runner_id"].as_str().unwrap().to_string());
    }
    let html = b.page("/orgs/default/runners").await;
    assert!(html.contains("<th scope=\"col\">Egress</th>"), "{html}");
    let cell = |id: &str| {
        let r = row(&html, &format!("data-runner=\"{id}\""));
        let at = r.find("<td data-egress=").unwrap_or_else(|| panic!("{r}"));
        r[at..at + r[at..].find("</td>").unwrap()].to_string()
    };
    assert_eq!(
        cell(&ids[0]),
        "<td data-egress=\"restricted\"><span class=\"badge ok\">egress restricted</span>\
         <br><small>engines run in the egress sandbox</small>"
    );
    assert_eq!(
        cell(&ids[1]),
        "<td data-egress=\"unrestricted\"><span class=\"badge\">egress open</span><br>\
         <small>no sandbox: engines reach what this runner&#39;s network reaches</small>"
    );
    // The opt-out stands out: a warning badge saying so.
    assert_eq!(
        cell(&ids[2]),
        "<td data-egress=\"opted_out\"><span class=\"badge warn\">egress unrestricted \
         (opted out)</span><br><small>started with --egress-unrestricted: engines run without \
         the egress sandbox</small>"
    );
    assert_eq!(
        cell(&ids[3]),
        "<td data-egress=\"unknown\"><small>not reported (a runner version before it)</small>"
    );
}

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

#[tokio::test]
async fn the_drift_dashboard_lists_stale_stacks_first_and_highlighted() {
    let clock = Clock::manual(utc("2024-06-01T10:30:00Z"));
    let c = clock.clone();
    let t = TestServer::start_with(move |config| {
        config.schedules.interval = Duration::from_millis(50);
        config.schedules.clock = c;
    })
    .await;
    // `zeta` checks hourly, `alpha` daily, `plain` not at all.
    for (id, drift) in [
        ("zeta", Some(json!({"schedule": "0 * * * *"}))),
        (
            "alpha",
            Some(json!({"schedule": "0 9 * * *", "timezone": "Europe/Berlin"})),
        ),
        ("plain", None),
    ] {
        let mut body = json!({"id": id, "repository": "file:///srv/git/infra"});
        if let Some(d) = drift {
            body["drift_detection"] = d;
        }
        let r = t.create_stack(body).await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }
    let vic = t.user_token("vic", Some(Role::Viewer)).await;
    let mut b = Browser::login(&t, &vic).await;
    // Both are listed once the scheduler armed them; nothing is stale yet.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let html = loop {
        let html = b.page("/orgs/default/drift").await;
        if html.contains("data-stack=\"alpha\"") && html.contains("data-stack=\"zeta\"") {
            break html;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never armed: {html}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(!html.contains("class=\"stale\""), "{html}");
    assert!(
        !html.contains("data-stack=\"plain\""),
        "no drift detection, no row"
    );
    assert!(!html.contains("not scheduled yet"), "{html}");
    // The one turning stale soonest (hourly) comes before the daily one.
    assert!(html.find("data-stack=\"zeta\"").unwrap() < html.find("data-stack=\"alpha\"").unwrap());
    assert!(row(&html, "data-stack=\"alpha\"").contains("Europe/Berlin"));
    // A cursor that is not one is refused with its reason.
    let bad = b.get("/orgs/default/drift?after=zeta").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(
        bad.html.contains("not a drift dashboard cursor"),
        "{}",
        bad.html
    );

    // Over two hours without a successful hourly check: zeta is stale and comes first.
    clock.set(utc("2024-06-01T12:31:00Z"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    // …once the scheduler also started its check (an open run, shown as checking now).
    let html = loop {
        let html = b.page("/orgs/default/drift").await;
        if html.contains("class=\"stale\"") && html.contains("checking now") {
            break html;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never stale: {html}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let zeta = row(&html, "data-stack=\"zeta\"");
    assert!(zeta.contains("class=\"stale\""), "{zeta}");
    assert!(
        zeta.contains("<span class=\"badge stale\">stale</span>"),
        "{zeta}"
    );
    assert!(zeta.contains("<span class=\"age\">2h 1m</span>"), "{zeta}");
    assert!(!row(&html, "data-stack=\"alpha\"").contains("class=\"stale\""));
    assert!(
        html.find("data-stack=\"zeta\"").unwrap() < html.find("data-stack=\"alpha\"").unwrap(),
        "stale first"
    );
    assert!(html.contains("1 stack(s) have had no successful drift check"));
    snapshot("drift", &html);
}

#[tokio::test]
async fn the_drift_dashboard_pages_through_every_stack_once() {
    let t = TestServer::start_with(|config| {
        config.schedules.interval = Duration::from_millis(50);
    })
    .await;
    const STACKS: usize = 57;
    for i in 0..STACKS {
        let r = t
            .create_stack(
                json!({"id": format!("s{i:03}"), "repository": "file:///srv/git/infra",
                "drift_detection": {"schedule": format!("{} * * * *", i % 60)}}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }
    let vic = t.user_token("vic", Some(Role::Viewer)).await;
    let mut b = Browser::login(&t, &vic).await;
    let stacks = |html: &str| -> Vec<String> {
        html.split("data-stack=\"")
            .skip(1)
            .map(|s| s[..s.find('"').unwrap()].to_string())
            .collect()
    };
    // Every stack armed: the first page is full and links the next.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut html = loop {
        let html = b.page("/orgs/default/drift").await;
        if stacks(&html).len() == 50 && html.contains("rel=\"next\"") {
            let next = html.split("drift?after=").nth(1).unwrap();
            let next = &next[..next.find('"').unwrap()];
            let rest = b.page(&format!("/orgs/default/drift?after={next}")).await;
            if stacks(&rest).len() == STACKS - 50 {
                break html;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never armed: {html}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut seen = Vec::new();
    loop {
        seen.extend(stacks(&html));
        let Some(next) = html.split("drift?after=").nth(1) else {
            break;
        };
        let next = next[..next.find('"').unwrap()].to_string();
        html = b.page(&format!("/orgs/default/drift?after={next}")).await;
    }
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!((seen.len(), unique.len()), (STACKS, STACKS), "{seen:?}");
}

#[tokio::test]
async fn a_gated_stack_run_is_rejected_from_the_inbox_with_its_reason() {
    let t = TestServer::start().await;
    seed(&t).await;
    let bob = t.user_token("bob", Some(Role::Operator)).await;
    let r = t
        .create_stack(json!({"id": "net", "repository": "file:///srv/git/infra",
            "environment": "prod"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let r = t
        .post("/api/v1/orgs/default/stacks/net/runs", &t.admin, json!({}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    // A runner plans it with changes: it waits for an approval.
    let runner = crate::runs::Runner::register(&t, "r1").await;
    let lease = runner.lease(5).await.expect("a lease");
    let id = lease["run_id"].as_str().unwrap().to_string();
    let f = lease["fencing"].clone();
    for report in [
        json!({"fencing": f, "event": "started", "commit": "abcdef0"}),
        json!({"fencing": f, "event": "planned", "summary": {"has_changes": true, "add": 1,
            "change": 0, "destroy": 0, "resource_changes": [], "output_changes": {}}}),
    ] {
        let r = runner.call(&format!("{id}/report"), report).await;
        assert!(r.status.is_success(), "{:?}", r.body);
    }

    let mut as_bob = Browser::login(&t, &bob).await;
    let inbox = as_bob.page("/orgs/default/approvals").await;
    let pending = row(&inbox, &format!("data-subject=\"{id}\""));
    assert!(
        pending.contains(&format!("<a href=\"/orgs/default/runs/{id}\">{id}</a>")),
        "{pending}"
    );
    assert!(pending.contains("stack run of stack net"), "{pending}");
    assert!(pending.contains("user:admin"), "{pending}");
    assert!(pending.contains("You may approve this run."), "{pending}");
    let posted = as_bob
        .post(
            &format!("/orgs/default/approvals/{id}/reject"),
            &[("csrf", &csrf(&inbox)), ("comment", "change freeze")],
        )
        .await;
    assert_eq!(posted.status, StatusCode::SEE_OTHER);
    let after = as_bob.page("/orgs/default/approvals").await;
    assert_eq!(
        flash(&after),
        Some((true, format!("rejected {id}; the run is now discarded")))
    );
    let decision = row(&after, &format!("data-decision=\"{id}\""));
    assert!(
        decision.contains("<span class=\"badge failed\">rejected</span>")
            && decision.contains("change freeze")
            && decision.contains("user:bob"),
        "{decision}"
    );
    let run = t
        .get(&format!("/api/v1/orgs/default/runs/{id}"), &bob)
        .await;
    assert_eq!(run.body["state"], "discarded");
    assert!(
        run.body["reason"]
            .as_str()
            .unwrap()
            .contains("change freeze"),
        "{:?}",
        run.body
    );
}

#[tokio::test]
async fn a_plan_run_started_from_the_console_takes_the_inputs_typed_in_its_form() {
    let t = TestServer::start().await;
    seed(&t).await;
    let source = "name: release\ntargets:\n  labels: [edge]\nconcurrent_runs: true\ninputs:\n  version: { default: \"1.0\" }\n  level: { default: 3 }\n  note:\nsteps:\n  - command: [\"echo\", \"{{ inputs.version }}\"]\n";
    let r = t
        .post(
            "/api/v1/orgs/default/plans",
            &t.admin,
            json!({"source": source}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let alice = t.user_token("alice", Some(Role::Operator)).await;
    let mut as_alice = Browser::login(&t, &alice).await;

    // A field per input, filled with its default; one without a default says so.
    let page = as_alice.page("/orgs/default/plans/release").await;
    for field in [
        "<label for=\"input-version\">version</label><input type=\"text\" id=\"input-version\" name=\"input.version\" value=\"1.0\">",
        "<input type=\"text\" id=\"input-level\" name=\"input.level\" value=\"3\">",
        "<input type=\"text\" id=\"input-note\" name=\"input.note\" value=\"\" placeholder=\"no default\">",
    ] {
        assert!(page.contains(field), "{field} missing from:\n{page}");
    }
    let token = csrf(&page);
    let run_inputs = |location: String| {
        let t = &t;
        async move {
            let id = location.rsplit('/').next().unwrap().to_string();
            assert!(id.starts_with("prun-"), "refused: {location}");
            let r = t
                .get(&format!("/api/v1/orgs/default/plan-runs/{id}"), &t.admin)
                .await;
            r.body["inputs"].clone()
        }
    };

    // Left as shown: no inputs given, the plan's own (typed) defaults apply.
    let loc = start_plan_run(
        &mut as_alice,
        &token,
        &[
            ("input.version", "1.0"),
            ("input.level", "3"),
            ("input.note", ""),
        ],
    )
    .await;
    assert_eq!(run_inputs(loc).await, json!({}));
    // Changed fields become the run's inputs, as typed.
    let loc = start_plan_run(
        &mut as_alice,
        &token,
        &[
            ("input.version", "2.0"),
            ("input.level", "3"),
            ("input.note", "from the console"),
        ],
    )
    .await;
    assert_eq!(
        run_inputs(loc).await,
        json!({"version": "2.0", "note": "from the console"})
    );
    // A field for an input the plan does not declare: the API's refusal, on the plan page.
    let loc = start_plan_run(&mut as_alice, &token, &[("input.nope", "1")]).await;
    assert_eq!(loc, "/orgs/default/plans/release");
    let back = as_alice.page(&loc).await;
    let (ok, message) = flash(&back).expect("a flash");
    assert!(!ok && message.contains("nope"), "{message}");
}

/// Posts the `release` plan's Run form (a dry run) with `fields`; returns where it leads.
async fn start_plan_run(b: &mut Browser<'_>, token: &str, fields: &[(&str, &str)]) -> String {
    let mut form = vec![("csrf", token), ("dry_run", "true")];
    form.extend_from_slice(fields);
    let posted = b.post("/orgs/default/plans/release/runs", &form).await;
    assert_eq!(posted.status, StatusCode::SEE_OTHER, "{}", posted.location);
    posted.location
}

#[tokio::test]
async fn the_audit_log_is_filtered_by_actor_action_and_target_and_pages_keep_the_filter() {
    let t = TestServer::start().await;
    let alice = t.user_token("alice", Some(Role::Admin)).await;
    for (token, id) in [(&alice, "one"), (&t.admin, "two"), (&alice, "three")] {
        let r = t
            .post(
                "/api/v1/orgs/default/stacks",
                token,
                json!({"id": id, "repository": "file:///srv/git/infra"}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }
    let r = t
        .call(
            reqwest::Method::DELETE,
            "/api/v1/orgs/default/stacks/one",
            Some(&alice),
            None,
        )
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);

    // The API: each filter, and together.
    let seen = |query: &'static str| {
        let t = &t;
        async move {
            let r = t
                .get(&format!("/api/v1/orgs/default/audit?{query}"), &t.admin)
                .await;
            assert_eq!(r.status, StatusCode::OK, "{query}: {:?}", r.body);
            r.body["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| {
                    format!(
                        "{} {} {}",
                        e["actor"].as_str().unwrap(),
                        e["action"].as_str().unwrap(),
                        e["target"].as_str().unwrap()
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        seen("target=stack:one").await,
        [
            "user:alice stack.delete stack:one",
            "user:alice stack.create stack:one"
        ]
    );
    assert_eq!(
        seen("actor=user:alice&action=stack.create").await,
        [
            "user:alice stack.create stack:three",
            "user:alice stack.create stack:one"
        ]
    );
    assert_eq!(seen("action=stack").await.len(), 4);
    assert!(
        seen("action=stack.creat").await.is_empty(),
        "a prefix is a whole word"
    );

    // The console: the form keeps what was typed, rows link to their own filters, and the
    // pager keeps the filter.
    let mut b = Browser::login(&t, &alice).await;
    let page = b
        .page("/orgs/default/audit?actor=user%3Aalice&action=stack")
        .await;
    assert!(
        page.contains("<input type=\"text\" id=\"f-actor\" name=\"actor\" value=\"user:alice\""),
        "{page}"
    );
    assert!(page.contains("<input type=\"text\" id=\"f-action\" name=\"action\" value=\"stack\""));
    let rows = page.matches("<tr data-seq=").count();
    assert_eq!(rows, 3, "{page}");
    assert!(!page.contains("stack:two"), "{page}");
    assert!(page.contains("<a href=\"/orgs/default/audit?target=stack%3Aone\">stack:one</a>"));
    assert!(page.contains("<a href=\"/orgs/default/audit\">Show all</a>"));
    let page = b
        .page("/orgs/default/audit?actor=user%3Aalice&action=stack&before=1")
        .await;
    assert!(
        page.contains("No audit records match before this point."),
        "{page}"
    );
    assert!(
        page.contains(
            "<a href=\"/orgs/default/audit?actor=user%3Aalice&#38;action=stack\">Newest</a>"
        ),
        "{page}"
    );
    // Empty fields filter nothing.
    let all = b.page("/orgs/default/audit?actor=&action=&target=").await;
    assert!(
        all.contains("stack:two") && !all.contains("Show all"),
        "{all}"
    );
}

#[tokio::test]
async fn plan_runs_page_back_through_the_api_cursor_and_the_consoles_pager() {
    let t = TestServer::start().await;
    seed(&t).await;
    let source =
        "name: often\ntargets:\n  labels: [edge]\nconcurrent_runs: true\nsteps:\n  - command: [\"true\"]\n";
    let r = t
        .post(
            "/api/v1/orgs/default/plans",
            &t.admin,
            json!({"source": source}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let mut created = Vec::new();
    for _ in 0..53 {
        let r = t
            .post(
                "/api/v1/orgs/default/plans/often/runs",
                &t.admin,
                json!({"dry_run": true}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        created.push(r.body["id"].as_str().unwrap().to_string());
    }

    // The API: pages of 20 by cursor walk every run once, newest first.
    let mut walked = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/v1/orgs/default/plans/often/runs?limit=20&cursor={c}"),
            None => "/api/v1/orgs/default/plans/often/runs?limit=20".to_string(),
        };
        let r = t.get(&path, &t.admin).await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        let ids: Vec<String> = r.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["id"].as_str().unwrap().to_string())
            .collect();
        if ids.is_empty() {
            break;
        }
        cursor = ids.last().cloned();
        walked.extend(ids);
    }
    let mut expected = created.clone();
    expected.sort();
    let mut seen = walked.clone();
    seen.sort();
    assert_eq!(seen, expected, "each run once");
    assert_eq!(walked.first(), created.last(), "newest first");
    // A cursor that is no run of this plan is refused, naming it.
    let r = t
        .get(
            "/api/v1/orgs/default/plans/often/runs?cursor=prun-nope",
            &t.admin,
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no run \"prun-nope\" of plan \"often\""),
        "{:?}",
        r.body
    );

    // The console: 50 a page, then the rest behind "Older".
    let mut b = Browser::login(&t, &t.admin).await;
    let first = b.page("/orgs/default/plan-runs").await;
    assert_eq!(
        first
            .matches("href=\"/orgs/default/plan-runs/prun-")
            .count(),
        50
    );
    let older = first
        .split("href=\"/orgs/default/plan-runs?before=")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("an Older link")
        .to_string();
    let second = b
        .page(&format!("/orgs/default/plan-runs?before={older}"))
        .await;
    assert_eq!(
        second
            .matches("href=\"/orgs/default/plan-runs/prun-")
            .count(),
        3
    );
    assert!(second.contains("<a href=\"/orgs/default/plan-runs\">Newest</a>"));
    assert!(!second.contains("rel=\"next\""), "no page after the last");
}

/// A fleet of runners is paged, 50 to a page in registration order, with a link to the
/// next page that shows the rest once.
#[tokio::test]
async fn the_runners_page_pages_a_large_fleet() {
    let t = TestServer::start().await;
    let vic = t.user_token("vic", Some(Role::Viewer)).await;
    let mut b = Browser::login(&t, &vic).await;
    let mut ids = Vec::new();
    for i in 0..52 {
        let r = runner_post(&t, "register", json!({"name": format!("fleet-{i:02}")})).await;
        ids.push(r["runner_id"].as_str().unwrap().to_string());
    }
    let shown = |html: &str| -> Vec<String> {
        ids.iter()
            .filter(|id| html.contains(&format!("data-runner=\"{id}\"")))
            .cloned()
            .collect()
    };
    let first = b.page("/orgs/default/runners").await;
    assert_eq!(shown(&first).len(), 50, "{first}");
    let start = first
        .find("/orgs/default/runners?after=")
        .unwrap_or_else(|| panic!("no next page link: {first}"));
    let href = &first[start..start + first[start..].find('"').unwrap()];
    let second = b
        .page(&href.replace("&#x3a;", ":").replace("%3A", ":"))
        .await;
    let rest = shown(&second);
    assert_eq!(rest.len(), ids.len() - 50, "{second}");
    assert!(rest.iter().all(|id| !shown(&first).contains(id)));
    assert!(second.contains("First page"), "{second}");
    assert!(!second.contains("rel=\"next\""), "{second}");
}

#[tokio::test]
async fn a_plan_runs_page_shows_its_policies_and_what_they_hold_it_for() {
    let t = TestServer::start().await;
    seed(&t).await;
    let carol = t.user_token("carol", Some(Role::Admin)).await;
    let mut as_carol = Browser::login(&t, &carol).await;
    let r = t
        .call(
            reqwest::Method::PUT,
            "/api/v1/orgs/default/policies/etc-changes",
            Some(&carol),
            Some(json!({"points": ["plan_run"], "mode": "hard_mandatory",
                "files": {"etc.rego": "package bosun.etc\n\nimport rego.v1\n\nrequire_approval contains sprintf(\"%s changes %s\", [r.host, r.path]) if {\n    some step in input.report.steps\n    some r in step.results\n    startswith(r.path, \"/etc/\")\n}\n"}})),
        )
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    // A real run of `site` starts paused while its preview is checked.
    let r = t
        .post("/api/v1/orgs/default/plans/site/runs", &carol, json!({}))
        .await;
    assert_eq!(
        (r.body["state"].as_str(), r.body["policy_hold"].as_str()),
        (Some("paused"), Some("check")),
        "{:?}",
        r.body
    );
    let id = r.body["id"].as_str().unwrap().to_string();
    let preview = r.body["preview"].as_str().unwrap().to_string();
    let page = as_carol
        .page(&format!("/orgs/default/plan-runs/{id}"))
        .await;
    assert!(
        page.contains("<p id=\"run-policy-hold\" class=\"approval\">The policies have not decided on this run&#39;s dry run")
            || page.contains("<p id=\"run-policy-hold\" class=\"approval\">The policies have not decided on this run&#x27;s dry run"),
        "{page}"
    );
    // The preview predicts a change under /etc: the policy asks for approval.
    let lease = lease_plan_run(&t).await;
    assert_eq!(lease["plan_run"]["run_id"], preview.as_str(), "{lease}");
    let f = lease["plan_run"]["fencing"].clone();
    for body in [
        json!({"fencing": f, "event": "started"}),
        json!({"fencing": f, "event": "finished", "ok": true, "report": {"unresolved": []}}),
    ] {
        if body["event"] == "finished" {
            runner_post(
                &t,
                &format!("plan-runs/{preview}/results"),
                json!({"fencing": f, "results": [{"step": 1, "step_name": "motd",
                    "module": "file.copy", "host": "edge-1", "status": "changed",
                    "changed": true, "exit_code": null, "duration_ms": 2,
                    "message": "would write /etc/motd",
                    "diff": "--- /etc/motd (before)\n+++ /etc/motd (after)\n-hi\n+hello"}]}),
            )
            .await;
        }
        runner_post(&t, &format!("plan-runs/{preview}/report"), body).await;
    }
    let page = as_carol
        .page(&format!("/orgs/default/plan-runs/{id}"))
        .await;
    assert!(
        page.contains("<p id=\"run-policy-hold\" class=\"approval\">A policy asks for approval"),
        "{page}"
    );
    assert!(
        page.contains("This run changes hosts and a policy asks for approval (see Policies)"),
        "{page}"
    );
    let table = &page[page
        .find("<table class=\"list\" id=\"policies\">")
        .expect("a policies table")..];
    let row = &table[..table.find("</tbody>").unwrap()];
    assert!(
        row.contains("<th scope=\"row\">etc-changes</th><td>plan run</td>")
            && row.contains("state-require_approval")
            && row.contains("require approval: edge-1 changes /etc/motd"),
        "{row}"
    );
}
