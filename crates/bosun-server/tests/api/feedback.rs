//! Feedback on GitHub, end to end: GitHub's example webhooks start runs, the test plays
//! the runner, and the GitHub double — which checks every request against GitHub's own
//! REST description (`@octokit/openapi`) — records the check runs and the comment Bosun
//! writes back.

use std::time::Instant;

use bosun_testkit::{CheckRun, Fault};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::runs::Runner;
use crate::vcs::{fixture, triggered_stacks, wait_for, Fixture, INSTALLATION};

const REPO: &str = "acme/infra";

impl Fixture {
    fn checks_of(&self, stack: &str) -> Vec<CheckRun> {
        self.gh
            .check_runs()
            .into_iter()
            .filter(|c| c.name == format!("bosun/{stack}"))
            .collect()
    }

    fn check_of_run(&self, run: &str) -> Option<CheckRun> {
        self.gh
            .check_runs()
            .into_iter()
            .find(|c| c.external_id.as_deref() == Some(run))
    }

    fn comment_bodies(&self, pr: u64) -> Vec<String> {
        self.gh
            .comments(REPO, pr)
            .into_iter()
            .map(|c| c.body)
            .collect()
    }

    /// A pull request `number` whose head commit changes `files`; its head sha.
    fn pr_commit(&self, number: i64, files: &[(&str, &str)], message: &str) -> String {
        let head = self.work.commit(files, message);
        self.work
            .push_ref(&head, &format!("refs/pull/{number}/head"));
        head
    }

    fn no_violations(&self) {
        let v = self.gh.contract_violations();
        assert!(
            v.is_empty(),
            "requests GitHub's REST description refuses: {v:#?}"
        );
    }
}

/// Plays the runner for one proposed run to its end: the plan's log, then the plan.
async fn plan_run(f: &Fixture, runner: &Runner<'_>, run: &str, commit: &str) {
    // Other runs leased first stay with this runner, preparing.
    let mut lease = runner.lease(5).await.expect("a lease");
    for _ in 0..3 {
        if lease["run_id"] == run {
            break;
        }
        lease = runner.lease(5).await.expect("a lease");
    }
    assert_eq!(lease["run_id"], run, "{lease:?}");
    let fencing = lease["fencing"].as_i64().unwrap();
    let r = runner
        .call(
            &format!("{run}/report"),
            json!({"fencing": fencing, "event": "started", "commit": commit}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    let next =
        f.t.get(
            &format!("/api/v1/runner/runs/{run}/logs/next?fencing={fencing}"),
            &f.t.server.hosted_runner_token,
        )
        .await;
    let seq = next.body["next_seq"].as_i64().unwrap();
    let text = "Refreshing state...\nTerraform will perform the following actions:\n\n  # null_resource.net will be created\n  + resource \"null_resource\" \"net\" {}\n\nPlan: 1 to add, 0 to change, 0 to destroy.\n";
    let r = runner
        .call(
            &format!("{run}/logs"),
            json!({"fencing": fencing, "chunks": [{"seq": seq, "text": text}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    let summary = json!({"has_changes": true, "add": 1, "change": 0, "destroy": 0,
        "resource_changes": [{"address": "null_resource.net", "action": "create"}],
        "output_changes": {"endpoint": "create"}});
    let r = runner
        .call(
            &format!("{run}/report"),
            json!({"fencing": fencing, "event": "planned", "summary": summary}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
}

async fn run_ids(f: &Fixture, stack: &str) -> Vec<String> {
    f.runs(stack)
        .await
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_pull_request_gets_a_check_run_per_stack_and_one_comment_edited_in_place() {
    let Some(f) = fixture(|_| {}).await else {
        return;
    };
    f.stack("net", "main", "infra/net", &[]).await;
    f.stack("app", "main", "app", &[]).await;
    f.stack("dns", "main", "dns", &[]).await;
    let base = f.work.rev_parse("HEAD");
    f.work.checkout_new_branch("change");
    let head1 = f.pr_commit(
        7,
        &[("infra/net/main.tf", "# 1\n"), ("app/main.tf", "# 1\n")],
        "pr 1",
    );
    let r = f
        .deliver(
            "pull_request",
            "pr-1",
            &f.pull_request("opened", 7, &base, &head1),
        )
        .await;
    assert_eq!(triggered_stacks(&r), ["app", "net"]);
    let net1 = run_ids(&f, "net").await[0].clone();
    let app1 = run_ids(&f, "app").await[0].clone();

    // Two check runs, queued, on the PR's head; one comment naming the third stack.
    wait_for(|| async {
        f.gh.check_runs().len() == 2
            && f.comment_bodies(7)
                .first()
                .is_some_and(|b| b.contains("`dns`"))
    })
    .await;
    let net = f.check_of_run(&net1).unwrap();
    assert_eq!(
        (
            net.name.as_str(),
            net.head_sha.as_str(),
            net.status.as_str()
        ),
        ("bosun/net", head1.as_str(), "queued")
    );
    assert!(
        net.details_url
            .as_deref()
            .is_some_and(|u| u.ends_with(&format!("/orgs/default/runs/{net1}"))),
        "{net:?}"
    );
    assert!(f.check_of_run(&app1).is_some());
    let comments = f.gh.comments(REPO, 7);
    assert_eq!(comments.len(), 1);
    let body = &comments[0].body;
    assert!(
        body.contains("<!-- bosun:pr-comment org=default -->"),
        "{body}"
    );
    assert!(body.contains(&net1) && body.contains(&app1), "{body}");
    assert!(body.contains("- `dns`: no watch path touched"), "{body}");
    assert!(comments[0].via_app, "{:?}", comments[0]);

    // A new push: the open runs are superseded (neutral), new check runs appear, and the
    // same comment is edited.
    let head2 = f.pr_commit(
        7,
        &[("infra/net/main.tf", "# 2\n"), ("app/main.tf", "# 2\n")],
        "pr 2",
    );
    let r = f
        .deliver(
            "pull_request",
            "pr-2",
            &f.pull_request("synchronize", 7, &base, &head2),
        )
        .await;
    assert_eq!(triggered_stacks(&r), ["app", "net"]);
    let app2 = run_ids(&f, "app").await[0].clone();
    let net2 = run_ids(&f, "net").await[0].clone();
    wait_for(|| async {
        f.gh.check_runs().len() == 4
            && [&app1, &net1].iter().all(|r| {
                f.check_of_run(r)
                    .is_some_and(|c| c.conclusion.as_deref() == Some("neutral"))
            })
            && f.comment_bodies(7)
                .first()
                .is_some_and(|b| b.contains(&app2))
    })
    .await;
    let comments = f.gh.comments(REPO, 7);
    assert_eq!(comments.len(), 1, "one comment per pull request, edited");
    assert!(comments[0].edits >= 1, "{:?}", comments[0].edits);
    assert!(
        !comments[0].body.contains(&app1),
        "the latest run per stack only"
    );
    assert_eq!(f.checks_of("app").len(), 2);

    // The newest net run plans: its check run completes with the plan, within 2 s of the end.
    let runner = Runner::register(&f.t, "runner-1").await;
    plan_run(&f, &runner, &net2, &head2).await;
    let ended = Instant::now();
    wait_for(|| async {
        f.check_of_run(&net2)
            .is_some_and(|c| c.conclusion.as_deref() == Some("success"))
    })
    .await;
    let completed_after = ended.elapsed();
    let net = f.check_of_run(&net2).unwrap();
    assert_eq!(net.status, "completed");
    assert_eq!(
        net.output_title.as_deref(),
        Some("+1 ~0 −0, 1 output change — planned")
    );
    let summary = net.output_summary.unwrap();
    assert!(
        summary.contains("| create | `null_resource.net` |"),
        "{summary}"
    );
    assert!(summary.contains("| `endpoint` | create |"), "{summary}");
    wait_for(|| async {
        f.comment_bodies(7)
            .first()
            .is_some_and(|b| b.contains("Plan: 1 to add"))
    })
    .await;
    let body = &f.comment_bodies(7)[0];
    assert!(body.contains("✅ planned"), "{body}");
    assert!(body.contains("Plan of <code>net</code>"), "{body}");
    assert!(
        !body.contains("Refreshing state"),
        "the plan text starts at the actions"
    );
    let calls_for_net: Vec<_> =
        f.gh.api_requests()
            .into_iter()
            .filter(|r| r.path.contains("/check-runs"))
            .filter(|r| {
                r.path.ends_with(&format!("/check-runs/{}", net.id))
                    || r.body
                        .as_ref()
                        .is_some_and(|b| b["external_id"] == net2.as_str())
            })
            .collect();
    eprintln!(
        "check-run calls for one run (created → planned): {}; run end → completed check run: {:?}",
        calls_for_net.len(),
        completed_after
    );
    assert!(calls_for_net.len() <= 4, "{calls_for_net:#?}");

    f.no_violations();
}

#[tokio::test]
async fn a_rate_limit_is_waited_out_and_a_missing_permission_is_reported_once() {
    let Some(f) = fixture(|_| {}).await else {
        return;
    };
    f.stack("net", "main", "infra/net", &[]).await;
    let base = f.work.rev_parse("HEAD");
    f.work.checkout_new_branch("change");

    // A secondary rate limit on the first check run: waited out, then created once.
    f.gh.fail_next(
        "POST",
        "/repos/acme/infra/check-runs",
        1,
        Fault::SecondaryRateLimit {
            retry_after_secs: 1,
        },
    );
    let head1 = f.pr_commit(7, &[("infra/net/main.tf", "# 1\n")], "pr 1");
    f.deliver(
        "pull_request",
        "pr-1",
        &f.pull_request("opened", 7, &base, &head1),
    )
    .await;
    wait_for(|| async { f.gh.check_runs().len() == 1 }).await;
    let posts: Vec<_> =
        f.gh.api_requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path == "/repos/acme/infra/check-runs")
            .collect();
    assert_eq!(
        posts.iter().map(|p| p.status).collect::<Vec<_>>(),
        [403, 201],
        "{posts:#?}"
    );
    wait_for(|| async {
        let metrics = f.t.metrics_text().await;
        [
            "bosun_github_feedback_total{kind=\"checks\",outcome=\"rate_limited\"} 1",
            "bosun_github_feedback_total{kind=\"checks\",outcome=\"reported\"} 1",
        ]
        .iter()
        .all(|line| metrics.lines().any(|l| l == *line))
    })
    .await;

    // The installation loses `checks: write`: the comment still comes, the check token
    // is asked for once, and the stack's connection line says why.
    f.gh.set_permissions(
        INSTALLATION,
        json!({"contents": "read", "metadata": "read", "pull_requests": "write"}),
    );
    let f2 = &f;
    let check_token_requests = || {
        f2.gh
            .token_requests()
            .into_iter()
            .filter(|t| t.permissions.get("checks").is_some() && !t.accepted)
            .count()
    };
    let before = f.gh.check_runs().len();
    let head2 = f.pr_commit(8, &[("infra/net/main.tf", "# 2\n")], "pr 2");
    // A fresh token is needed: the cached one was minted with the old permissions.
    for t in f.gh.issued_tokens() {
        f.gh.expire_token(&t.token);
    }
    f.deliver(
        "pull_request",
        "pr-2",
        &f.pull_request("opened", 8, &base, &head2),
    )
    .await;
    wait_for(|| async { check_token_requests() == 1 && !f.comment_bodies(8).is_empty() }).await;
    let head3 = f.pr_commit(8, &[("infra/net/main.tf", "# 3\n")], "pr 3");
    f.deliver(
        "pull_request",
        "pr-3",
        &f.pull_request("synchronize", 8, &base, &head3),
    )
    .await;
    let newest = run_ids(&f, "net").await[0].clone();
    wait_for(|| async {
        f.comment_bodies(8)
            .first()
            .is_some_and(|b| b.contains(&newest))
    })
    .await;
    assert_eq!(
        check_token_requests(),
        1,
        "a refused permission is not asked again"
    );
    assert_eq!(f.gh.check_runs().len(), before);
    let stack =
        f.t.get("/api/v1/orgs/default/stacks/net", &f.t.admin)
            .await
            .body;
    let line = stack["connection"]["detail"].as_str().unwrap_or_default();
    assert!(
        line.contains("checks") && line.contains("refused"),
        "{stack:?}"
    );
    f.no_violations();
}

#[tokio::test]
async fn a_hundred_pushes_to_a_pull_request_leave_one_comment() {
    let Some(f) = fixture(|_| {}).await else {
        return;
    };
    f.stack("net", "main", "infra/net", &[]).await;
    let base = f.work.rev_parse("HEAD");
    f.work.checkout_new_branch("change");
    let mut head = String::new();
    for i in 0..100 {
        head = f.pr_commit(9, &[("infra/net/main.tf", &format!("# {i}\n"))], "push");
        let action = if i == 0 { "opened" } else { "synchronize" };
        f.deliver(
            "pull_request",
            &format!("pr-{i}"),
            &f.pull_request(action, 9, &base, &head),
        )
        .await;
    }
    let newest = run_ids(&f, "net").await[0].clone();
    wait_for(|| async {
        f.comment_bodies(9)
            .first()
            .is_some_and(|b| b.contains(&newest))
            && f.check_of_run(&newest).is_some()
    })
    .await;
    assert_eq!(
        f.gh.comments(REPO, 9).len(),
        1,
        "one comment, however many pushes"
    );
    let calls =
        f.gh.api_requests()
            .into_iter()
            .filter(|r| r.path.contains("/check-runs") || r.path.contains("/comments"))
            .count();
    eprintln!("100 pushes: {calls} check-run and comment calls, one comment");
    assert_eq!(f.check_of_run(&newest).unwrap().head_sha, head);
    f.no_violations();
}

#[tokio::test]
async fn a_re_run_requested_on_github_retries_the_run_over_the_same_commit() {
    let Some(f) = fixture(|_| {}).await else {
        return;
    };
    f.stack("net", "main", "infra/net", &[]).await;
    let base = f.work.rev_parse("HEAD");
    f.work.checkout_new_branch("change");
    let head = f.pr_commit(7, &[("infra/net/main.tf", "# 1\n")], "pr 1");
    f.deliver(
        "pull_request",
        "pr-1",
        &f.pull_request("opened", 7, &base, &head),
    )
    .await;
    let first = run_ids(&f, "net").await[0].clone();
    let runner = Runner::register(&f.t, "runner-1").await;
    plan_run(&f, &runner, &first, &head).await;
    wait_for(|| async {
        f.check_of_run(&first)
            .is_some_and(|c| c.conclusion.as_deref() == Some("success"))
    })
    .await;
    let check = f.check_of_run(&first).unwrap();

    // GitHub's own example, aimed at our check run.
    let mut p = f.ex.example("check_run", |p| p["action"] == "rerequested");
    p["check_run"]["id"] = json!(check.id);
    p["check_run"]["external_id"] = json!(first);
    p["check_run"]["head_sha"] = json!(head);
    crate::vcs::aim(&mut p);
    let r = f.deliver("check_run", "rerun-1", &p).await;
    assert_eq!(triggered_stacks(&r), ["net"], "{:?}", r.body);
    let retry = f.runs("net").await[0].clone();
    assert_eq!(
        (
            retry["trigger"].as_str(),
            retry["retry_of"].as_str(),
            retry["commit"].as_str(),
            retry["pull_request"].as_i64()
        ),
        (
            Some("retry"),
            Some(first.as_str()),
            Some(head.as_str()),
            Some(7)
        )
    );
    let triggers = f.triggers("net").await;
    assert!(
        triggers[0]["reason"]
            .as_str()
            .unwrap()
            .contains("re-run of check run"),
        "{triggers:?}"
    );
    let retry_id = retry["id"].as_str().unwrap().to_string();
    wait_for(|| async { f.check_of_run(&retry_id).is_some() }).await;

    // A re-run naming one of our runs on another commit (or a made-up id) starts nothing.
    for (guid, external_id, sha) in [
        ("forged-1", json!(first), "f".repeat(40)),
        ("forged-2", json!("run-made-up"), head.clone()),
        ("forged-3", json!(null), head.clone()),
    ] {
        let mut p = f.ex.example("check_run", |p| p["action"] == "rerequested");
        p["check_run"]["external_id"] = external_id;
        p["check_run"]["head_sha"] = json!(sha);
        crate::vcs::aim(&mut p);
        let r = f.deliver("check_run", guid, &p).await;
        assert_eq!(
            triggered_stacks(&r),
            Vec::<String>::new(),
            "{guid}: {:?}",
            r.body
        );
        assert!(
            r.body["summary"]
                .as_str()
                .unwrap()
                .contains("nothing to re-run"),
            "{guid}: {:?}",
            r.body
        );
    }

    // A suite re-run while the retry is still queued starts nothing, and says why.
    let mut p =
        f.ex.example("check_suite", |p| p["action"] == "rerequested");
    p["check_suite"]["head_sha"] = json!(head);
    crate::vcs::aim(&mut p);
    let r = f.deliver("check_suite", "rerun-2", &p).await;
    assert_eq!(triggered_stacks(&r), Vec::<String>::new(), "{:?}", r.body);
    assert!(f.triggers("net").await[0]["reason"]
        .as_str()
        .unwrap()
        .contains("is still queued"));
    // Another action of these events starts nothing.
    let mut p: Value = f.ex.example("check_run", |p| p["action"] == "created");
    crate::vcs::aim(&mut p);
    let r = f.deliver("check_run", "created-1", &p).await;
    assert_eq!(triggered_stacks(&r), Vec::<String>::new());
    f.no_violations();
}

#[tokio::test]
async fn the_org_and_stack_switch_chooses_checks_comment_both_or_none() {
    let Some(f) = fixture(|_| {}).await else {
        return;
    };
    let r =
        f.t.call(
            reqwest::Method::PATCH,
            "/api/v1/orgs/default",
            Some(&f.t.admin),
            Some(json!({"pr_feedback": "none"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    for (id, path, feedback) in [
        ("net", "infra/net", Some("checks")),
        ("app", "app", Some("comment")),
        ("web", "web", Some("both")),
        ("dns", "dns", None),
    ] {
        let r =
            f.t.create_stack(json!({"id": id, "repository": "github:acme/infra",
                "path": path, "pr_feedback": feedback}))
                .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }
    let base = f.work.rev_parse("HEAD");
    f.work.checkout_new_branch("change");
    let files: Vec<(String, String)> = ["infra/net", "app", "web", "dns"]
        .iter()
        .map(|p| (format!("{p}/main.tf"), "# 1\n".to_string()))
        .collect();
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let head = f.pr_commit(7, &files, "pr 1");
    let r = f
        .deliver(
            "pull_request",
            "pr-1",
            &f.pull_request("opened", 7, &base, &head),
        )
        .await;
    assert_eq!(triggered_stacks(&r), ["app", "dns", "net", "web"]);
    let app = run_ids(&f, "app").await[0].clone();
    let web = run_ids(&f, "web").await[0].clone();
    wait_for(|| async {
        f.checks_of("net").len() == 1
            && f.checks_of("web").len() == 1
            && f.comment_bodies(7)
                .first()
                .is_some_and(|b| b.contains(&app) && b.contains(&web))
    })
    .await;
    // Checks only for net, the comment only for app, both for web, nothing for dns (the
    // org's `none`).
    assert!(f.checks_of("app").is_empty() && f.checks_of("dns").is_empty());
    let body = &f.comment_bodies(7)[0];
    let net = run_ids(&f, "net").await[0].clone();
    let dns = run_ids(&f, "dns").await[0].clone();
    assert!(!body.contains(&net) && !body.contains(&dns), "{body}");
    f.no_violations();
}

/// The figures `bench/feedback.sh` reports: GitHub calls per run on the happy path and
/// the time from a run's end to its completed check run, over `BENCH_FEEDBACK_RUNS`
/// pull requests (default 100) each planned to its end. Not a pass/fail test.
#[tokio::test]
#[ignore = "a benchmark: bench/feedback.sh runs it"]
async fn feedback_figures() {
    let Some(f) = fixture(|_| {}).await else {
        return;
    };
    let n: usize = std::env::var("BENCH_FEEDBACK_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    f.stack("net", "main", "infra/net", &[]).await;
    let base = f.work.rev_parse("HEAD");
    f.work.checkout_new_branch("change");
    let runner = Runner::register(&f.t, "runner-1").await;
    let mut latencies = Vec::with_capacity(n);
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let pr = 100 + i as i64;
        let head = f.pr_commit(pr, &[("infra/net/main.tf", &format!("# {i}\n"))], "pr");
        f.deliver(
            "pull_request",
            &format!("bench-{i}"),
            &f.pull_request("opened", pr, &base, &head),
        )
        .await;
        let run = run_ids(&f, "net").await[0].clone();
        plan_run(&f, &runner, &run, &head).await;
        let ended = Instant::now();
        loop {
            if f.check_of_run(&run)
                .is_some_and(|c| c.conclusion.as_deref() == Some("success"))
            {
                break;
            }
            assert!(
                ended.elapsed() < std::time::Duration::from_secs(30),
                "run {run}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        latencies.push(ended.elapsed().as_secs_f64() * 1000.0);
        ids.push(run);
    }
    // Let the last comments settle, then count every feedback call.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let requests = f.gh.api_requests();
    let mut per_run = Vec::with_capacity(n);
    for (run, check) in ids.iter().map(|r| (r, f.check_of_run(r).unwrap())) {
        let calls = requests
            .iter()
            .filter(|r| {
                r.path.ends_with(&format!("/check-runs/{}", check.id))
                    || (r.method == "POST"
                        && r.body
                            .as_ref()
                            .is_some_and(|b| b["external_id"] == run.as_str()))
            })
            .count();
        per_run.push(calls);
    }
    let comments = requests
        .iter()
        .filter(|r| r.path.contains("/comments"))
        .count();
    let token_requests = f.gh.token_requests();
    let tokens = token_requests.len();
    let feedback_tokens = token_requests
        .iter()
        .filter(|t| t.permissions.get("contents").is_none())
        .count();
    latencies.sort_by(f64::total_cmp);
    let pct = |p: f64| latencies[((latencies.len() as f64 * p).ceil() as usize).saturating_sub(1)];
    let avg = |v: &[usize]| v.iter().sum::<usize>() as f64 / v.len() as f64;
    println!(
        "feedback: {n} pull requests, one run each, planned to the end\n\
         check-run calls per run: mean {:.2}, max {}\n\
         comment calls per run (find/create/edit): {:.2}\n\
         token requests in all: {tokens}, of which for feedback: {feedback_tokens}\n\
         run end -> check run completed: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        avg(&per_run),
        per_run.iter().max().unwrap(),
        comments as f64 / n as f64,
        pct(0.5),
        pct(0.99),
        latencies.last().unwrap(),
    );
    f.no_violations();
}

#[tokio::test]
async fn the_comment_and_the_check_runs_list_the_policies_that_decided_each_run() {
    let Some(f) = fixture(|_| {}).await else {
        return;
    };
    for (id, path, labels) in [
        ("net", "infra/net", json!(["network"])),
        ("dns", "dns", json!([])),
    ] {
        let r =
            f.t.create_stack(json!({"id": id, "repository": "github:acme/infra",
                "branch": "main", "path": path, "labels": labels}))
                .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }
    crate::vcs::put_policy(
        &f,
        "modules",
        json!({"points": ["trigger"], "mode": "hard_mandatory", "labels": ["network"],
            "files": {"m.rego": "package bosun.modules\n\nimport rego.v1\n\ntrigger contains sprintf(\"%s is a shared module\", [f]) if {\n    some f in input.delivery.changed_files\n    startswith(f, \"modules/\")\n}\n"}}),
    )
    .await;
    let base = f.work.rev_parse("HEAD");
    f.work.checkout_new_branch("change");
    let head = f.pr_commit(11, &[("modules/vpc.tf", "# vpc\n")], "vpc");
    let r = f
        .deliver(
            "pull_request",
            "pr-policies",
            &f.pull_request("opened", 11, &base, &head),
        )
        .await;
    assert_eq!(triggered_stacks(&r), ["net"]);
    let net = run_ids(&f, "net").await[0].clone();
    wait_for(|| async {
        f.check_of_run(&net).is_some()
            && f.comment_bodies(11)
                .first()
                .is_some_and(|b| b.contains("`dns`"))
    })
    .await;
    let body = &f.comment_bodies(11)[0];
    let row = body.lines().find(|l| l.contains(&net)).unwrap();
    assert!(
        row.ends_with("| `modules` trigger: modules/vpc.tf is a shared module |"),
        "{body}"
    );
    let summary = f.check_of_run(&net).unwrap().output_summary.unwrap();
    assert!(
        summary.contains("### Policies")
            && summary.contains(
                "| `modules` | hard-mandatory | trigger | modules/vpc.tf is a shared module |"
            ),
        "{summary}"
    );
    f.no_violations();
}
