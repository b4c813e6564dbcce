//! Secrets at the tenant edge and in runner logs: namespaces are per org (two orgs may each
//! have `aws`, and nothing one org stores shows in another's answers), and the server
//! masks every secret value a lease carried in the log chunks the runner sends back —
//! even split across chunks, resent, or arriving after a restart — before storing or
//! streaming them. The test acts as the runner with the hosted pool token.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::harness::TestServer;

async fn put_secret(t: &TestServer, org: &str, name: &str, value: &str) -> crate::harness::Reply {
    t.call(
        Method::PUT,
        &format!("/api/v1/orgs/{org}/secrets/{name}"),
        Some(&t.admin),
        Some(json!({"value": value})),
    )
    .await
}

async fn create_org(t: &TestServer, id: &str) {
    let r = t.post("/api/v1/orgs", &t.admin, json!({"id": id})).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
}

async fn create_stack(t: &TestServer, org: &str, id: &str, variables: Value) {
    let r = t
        .post(
            &format!("/api/v1/orgs/{org}/stacks"),
            &t.admin,
            json!({"id": id, "repository": "file:///srv/git/infra", "variables": variables}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
}

async fn trigger(t: &TestServer, org: &str, stack: &str) -> String {
    let r = t
        .post(
            &format!("/api/v1/orgs/{org}/stacks/{stack}/runs"),
            &t.admin,
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    r.body["id"].as_str().unwrap().to_string()
}

/// The next lease (`plan_runs`: plan runs too); `None` when there is no work.
async fn lease(t: &TestServer, runner: &str, plan_runs: bool) -> Option<Value> {
    let r = t
        .post(
            "/api/v1/runner/lease",
            &t.server.hosted_runner_token,
            json!({"runner_id": runner, "wait_seconds": 2, "plan_runs": plan_runs}),
        )
        .await;
    match r.status {
        StatusCode::OK => Some(r.body),
        StatusCode::NO_CONTENT => None,
        s => panic!("lease: {s} {:?}", r.body),
    }
}

/// Where the runner continues the log; `kind` is `runs` or `plan-runs`.
async fn next_seq(t: &TestServer, kind: &str, id: &str, fencing: i64) -> i64 {
    let r = t
        .get(
            &format!("/api/v1/runner/{kind}/{id}/logs/next?fencing={fencing}"),
            &t.server.hosted_runner_token,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    r.body["next_seq"].as_i64().unwrap()
}

/// Sends log chunks `(seq, text)` as the runner does.
async fn send_chunks(t: &TestServer, kind: &str, id: &str, fencing: i64, chunks: &[(i64, &str)]) {
    let chunks: Vec<Value> = chunks
        .iter()
        .map(|(seq, text)| json!({"seq": seq, "text": text}))
        .collect();
    let r = t
        .post(
            &format!("/api/v1/runner/{kind}/{id}/logs"),
            &t.server.hosted_runner_token,
            json!({"fencing": fencing, "chunks": chunks}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
}

/// The stored log as the API pages it, joined; `kind` is `runs` or `plan-runs`.
async fn stored_log(t: &TestServer, kind: &str, id: &str) -> String {
    let r = t
        .get(&format!("/api/v1/orgs/default/{kind}/{id}/logs"), &t.admin)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    r.body
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap())
        .collect()
}

/// The log as its SSE stream sends it (the run has ended, so the stream ends), joined.
async fn streamed_log(t: &TestServer, kind: &str, id: &str) -> String {
    let body = t
        .client
        .get(format!(
            "{}/api/v1/orgs/default/{kind}/{id}/logs/stream",
            t.url
        ))
        .bearer_auth(&t.admin)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(body.contains("event: end"), "{body}");
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| c["text"].as_str().map(str::to_string))
        .collect()
}

/// The `env` of a stack-run lease per org, for `count` leases.
async fn lease_envs(t: &TestServer, runner: &str, count: usize) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for _ in 0..count {
        let l = lease(t, runner, false).await.expect("a lease");
        out.push((l["org"].as_str().unwrap().to_string(), l));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[tokio::test]
async fn two_orgs_each_have_a_namespace_aws_and_see_only_their_own() {
    let t = TestServer::start().await;
    create_org(&t, "beta").await;
    let values = [("default", "default-aws-Ax1"), ("beta", "beta-aws-Bx2")];
    for (org, value) in values {
        let r = put_secret(&t, org, "aws/key", value).await;
        assert_eq!(r.status, StatusCode::OK, "{org}: {:?}", r.body);
        assert_eq!(r.body["reference"], "secret://aws/key");
    }
    for (org, value) in values {
        let list = t
            .get(&format!("/api/v1/orgs/{org}/secrets"), &t.admin)
            .await;
        assert_eq!(list.status, StatusCode::OK);
        assert_eq!(
            list.body["items"].as_array().unwrap().len(),
            1,
            "{}",
            list.body
        );
        assert_eq!(list.body["items"][0]["reference"], "secret://aws/key");
        assert!(!list.body.to_string().contains(value));
        create_stack(&t, org, "net", json!({"TF_VAR_key": "secret://aws/key"})).await;
        trigger(&t, org, "net").await;
    }

    // Each run's lease carries its own org's value, never the other's.
    let runner = t.hosted_runner("r1").await;
    let leases = lease_envs(&t, &runner, 2).await;
    assert_eq!(leases[0].0, "beta");
    assert_eq!(leases[0].1["env"]["TF_VAR_key"], "beta-aws-Bx2");
    assert!(!leases[0].1.to_string().contains("default-aws-Ax1"));
    assert_eq!(leases[1].0, "default");
    assert_eq!(leases[1].1["env"]["TF_VAR_key"], "default-aws-Ax1");
    assert!(!leases[1].1.to_string().contains("beta-aws-Bx2"));

    // Deleting beta's changes nothing of default's.
    let r = t
        .call(
            Method::DELETE,
            "/api/v1/orgs/beta/secrets/aws/key",
            Some(&t.admin),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    let list = t.get("/api/v1/orgs/default/secrets", &t.admin).await;
    assert_eq!(list.body["items"][0]["reference"], "secret://aws/key");
}

#[tokio::test]
async fn a_key_only_another_org_has_is_answered_as_a_key_nobody_has() {
    let t = TestServer::start().await;
    create_org(&t, "beta").await;
    let r = put_secret(&t, "default", "aws/only-default", "default-only-Cx3").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);

    // Saving a stack that refers to it, and one that refers to a key nobody has: the
    // same answer; their runs fail the same way, the reference missing from beta.
    let runner = t.hosted_runner("r1").await;
    let mut answers = Vec::new();
    for (stack, reference) in [
        ("app-a", "secret://aws/only-default"),
        ("app-b", "secret://nobody/key"),
    ] {
        let r = t
            .post(
                "/api/v1/orgs/beta/stacks",
                &t.admin,
                json!({"id": stack, "repository": "file:///srv/git/infra", "variables": {"TF_VAR_key": reference}}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        let id = trigger(&t, "beta", stack).await;
        assert!(
            lease(&t, &runner, false).await.is_none(),
            "fails before it starts"
        );
        let run = t
            .get(&format!("/api/v1/orgs/beta/runs/{id}"), &t.admin)
            .await
            .body;
        assert!(!run.to_string().contains("default-only-Cx3"));
        answers.push((
            run["state"].clone(),
            run["reason"].as_str().unwrap().replace(reference, "REF"),
        ));
    }
    assert_eq!(answers[0], answers[1], "{answers:?}");
    assert_eq!(
        answers[0],
        (
            json!("failed"),
            "integration secrets (built-in store) failed: variable TF_VAR_key: REF does not exist"
                .to_string()
        )
    );
}

#[tokio::test]
async fn a_namespace_another_org_emptied_is_free_for_any_org() {
    let t = TestServer::start().await;
    create_org(&t, "beta").await;
    assert_eq!(
        put_secret(&t, "default", "ci/token", "default-ci")
            .await
            .status,
        StatusCode::OK
    );
    let r = t
        .call(
            Method::DELETE,
            "/api/v1/orgs/default/secrets/ci/token",
            Some(&t.admin),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    let r = put_secret(&t, "beta", "ci/token", "beta-ci").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let list = t.get("/api/v1/orgs/beta/secrets", &t.admin).await;
    assert_eq!(list.body["items"][0]["reference"], "secret://ci/token");
    let list = t.get("/api/v1/orgs/default/secrets", &t.admin).await;
    assert_eq!(list.body["items"], json!([]));
    // And the first org may use the name again, beside beta's.
    let r = put_secret(&t, "default", "ci/token", "default-ci-2").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
}

/// A stack `net` of org default whose run's lease carries `secret` (as TF_VAR_pw):
/// the leased run's id, fencing and run token, and where its log continues.
async fn leased_stack_run(t: &TestServer, secret: &str) -> (String, i64, String, i64) {
    assert_eq!(
        put_secret(t, "default", "db/password", secret).await.status,
        StatusCode::OK
    );
    create_stack(
        t,
        "default",
        "net",
        json!({"TF_VAR_pw": "secret://db/password"}),
    )
    .await;
    let id = trigger(t, "default", "net").await;
    let runner = t.hosted_runner("r1").await;
    let l = lease(t, &runner, false).await.expect("a lease");
    assert_eq!(l["env"]["TF_VAR_pw"], secret, "the lease carries the value");
    let fencing = l["fencing"].as_i64().unwrap();
    let seq = next_seq(t, "runs", &id, fencing).await;
    (
        id,
        fencing,
        l["run_token"].as_str().unwrap().to_string(),
        seq,
    )
}

async fn end_stack_run(t: &TestServer, id: &str, fencing: i64) {
    let r = t
        .post(
            &format!("/api/v1/runner/runs/{id}/report"),
            &t.server.hosted_runner_token,
            json!({"fencing": fencing, "event": "failed", "reason": "test over"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
}

#[tokio::test]
async fn stack_run_log_chunks_are_masked_before_they_are_stored_or_streamed() {
    let t = TestServer::start().await;
    let secret = "s3cr3t-Value-Z9";
    let (id, fencing, run_token, seq) = leased_stack_run(&t, secret).await;
    send_chunks(
        &t,
        "runs",
        &id,
        fencing,
        &[
            (seq, &format!("connecting with {secret}\n")),
            (seq + 1, &format!("token {run_token}\n")),
        ],
    )
    .await;
    end_stack_run(&t, &id, fencing).await;
    for log in [
        stored_log(&t, "runs", &id).await,
        streamed_log(&t, "runs", &id).await,
    ] {
        assert!(!log.contains(secret), "{log}");
        assert!(!log.contains(&run_token), "{log}");
        assert!(log.contains("connecting with ***\ntoken ***\n"), "{log}");
    }
}

#[tokio::test]
async fn a_value_split_across_chunks_is_masked_and_a_resend_changes_nothing() {
    let t = TestServer::start().await;
    let secret = "s3cr3t-Value-Z9";
    let (id, fencing, _, seq) = leased_stack_run(&t, secret).await;
    // Split across two requests; the first is resent with the second (its reply "lost").
    send_chunks(&t, "runs", &id, fencing, &[(seq, "split: s3cr3t-Va")]).await;
    send_chunks(
        &t,
        "runs",
        &id,
        fencing,
        &[(seq, "split: s3cr3t-Va"), (seq + 1, "lue-Z9 done\n")],
    )
    .await;
    // Split inside one request, then a log that ends on the beginning of the value:
    // nothing follows, so it is not the value, and it is kept.
    send_chunks(
        &t,
        "runs",
        &id,
        fencing,
        &[
            (seq + 2, "again s3"),
            (seq + 3, "cr3t-Value-Z9!\nlast s3cr3t"),
        ],
    )
    .await;
    end_stack_run(&t, &id, fencing).await;
    for log in [
        stored_log(&t, "runs", &id).await,
        streamed_log(&t, "runs", &id).await,
    ] {
        assert!(!log.contains(secret), "{log}");
        assert!(
            log.ends_with("split: *** done\nagain ***!\nlast s3cr3t"),
            "{log}"
        );
    }
}

#[tokio::test]
async fn a_replica_that_did_not_lease_the_run_masks_its_chunks_too() {
    let t = TestServer::start().await;
    let secret = "s3cr3t-Value-Z9";
    let (id, fencing, _, seq) = leased_stack_run(&t, secret).await;
    // The same replica restarted: nothing of the lease is in its memory any more, so it
    // resolves the run's secrets again from the store.
    let dir = t.shutdown().await;
    let data = dir.path().to_path_buf();
    let t = TestServer::start_with(|c| c.data_dir = data).await;
    send_chunks(
        &t,
        "runs",
        &id,
        fencing,
        &[(seq, &format!("after restart {secret}\n"))],
    )
    .await;
    let log = stored_log(&t, "runs", &id).await;
    assert!(!log.contains(secret), "{log}");
    assert!(log.contains("after restart ***\n"), "{log}");
    drop(dir);
}

/// A plan run of org `default` whose step renders `secret://app/token` (= `secret`),
/// leased by a runner of the hosted pool: its id and fencing number.
async fn leased_plan_run(t: &TestServer, secret: &str) -> (String, i64) {
    t.seed_host("web-1", "web", None).await;
    t.seed_plan(
        "app-config",
        "name: app-config\ntargets:\n  labels: [web]\nvars:\n  token: secret://app/token\nsteps:\n  - name: say\n    command: [\"echo\", \"{{ vars.token }}\"]\n",
    )
    .await;
    assert_eq!(
        put_secret(t, "default", "app/token", secret).await.status,
        StatusCode::OK
    );
    let r = t
        .post(
            "/api/v1/orgs/default/plans/app-config/runs",
            &t.admin,
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let runner = t.hosted_runner("r1").await;
    let l = lease(t, &runner, true).await.expect("a plan-run lease");
    let l = &l["plan_run"];
    assert_eq!(l["secrets"]["secret://app/token"], secret);
    let (id, fencing) = (
        l["run_id"].as_str().unwrap().to_string(),
        l["fencing"].as_i64().unwrap(),
    );
    (id, fencing)
}

#[tokio::test]
async fn plan_run_log_chunks_are_masked_before_they_are_stored_or_streamed() {
    let t = TestServer::start().await;
    let secret = "plan-tok-Q7w";
    let (id, fencing) = leased_plan_run(&t, secret).await;
    let seq = next_seq(&t, "plan-runs", &id, fencing).await;
    send_chunks(
        &t,
        "plan-runs",
        &id,
        fencing,
        &[
            (seq, &format!("web-1: {secret}\n")),
            (seq + 1, "web-1: plan-t"),
        ],
    )
    .await;
    send_chunks(&t, "plan-runs", &id, fencing, &[(seq + 2, "ok-Q7w ok\n")]).await;
    for event in [
        json!({"fencing": fencing, "event": "started"}),
        json!({"fencing": fencing, "event": "finished", "ok": false, "reason": "test over"}),
    ] {
        let r = t
            .post(
                &format!("/api/v1/runner/plan-runs/{id}/report"),
                &t.server.hosted_runner_token,
                event,
            )
            .await;
        assert!(r.status.is_success(), "{:?}", r.body);
    }
    for log in [
        stored_log(&t, "plan-runs", &id).await,
        streamed_log(&t, "plan-runs", &id).await,
    ] {
        assert!(!log.contains(secret), "{log}");
        assert!(log.contains("web-1: ***\nweb-1: *** ok\n"), "{log}");
    }
}

#[tokio::test]
async fn a_stack_runs_failure_reason_is_masked_before_it_is_stored() {
    let t = TestServer::start().await;
    let secret = "s3cr3t-Value-Z9";
    let (id, fencing, _, _) = leased_stack_run(&t, secret).await;
    let r = t
        .post(
            &format!("/api/v1/runner/runs/{id}/report"),
            &t.server.hosted_runner_token,
            json!({"fencing": fencing, "event": "failed",
                   "reason": format!("Error: auth failed for password {secret}")}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    let run = t
        .get(&format!("/api/v1/orgs/default/runs/{id}"), &t.admin)
        .await;
    let text = run.body.to_string();
    assert!(!text.contains(secret), "{text}");
    assert!(
        text.contains("auth failed for password ***"),
        "{:?}",
        run.body
    );
}

#[tokio::test]
async fn plan_run_results_and_report_are_masked_before_they_are_stored() {
    let t = TestServer::start().await;
    let secret = "plan-tok-Q7w";
    let (id, fencing) = leased_plan_run(&t, secret).await;
    let runner_call = |path: &str, body: Value| {
        let (t, path) = (&t, format!("/api/v1/runner/plan-runs/{id}/{path}"));
        async move {
            let r = t.post(&path, &t.server.hosted_runner_token, body).await;
            assert!(r.status.is_success(), "{path}: {:?}", r.body);
        }
    };
    runner_call("report", json!({"fencing": fencing, "event": "started"})).await;
    runner_call(
        "results",
        json!({"fencing": fencing, "results": [{
            "step": 1, "step_name": "say", "module": "command", "host": "web-1",
            "status": "failed", "changed": null, "exit_code": 1,
            "stdout": format!("{secret}\n"), "stderr": format!("bad token {secret}"),
            "duration_ms": 5, "message": format!("exit 1: {secret}"),
            "diff": format!("+token={secret}")
        }]}),
    )
    .await;
    runner_call(
        "report",
        json!({"fencing": fencing, "event": "finished", "ok": false,
               "reason": format!("step say failed: {secret}"),
               "report": {"hosts": {"web-1": {"output": format!("echo {secret}")}}}}),
    )
    .await;
    let run = t
        .get(&format!("/api/v1/orgs/default/plan-runs/{id}"), &t.admin)
        .await;
    let text = run.body.to_string();
    assert!(!text.contains(secret), "{text}");
    let result = &run.body["results"][0];
    assert_eq!(result["stdout"], "***\n");
    assert_eq!(result["stderr"], "bad token ***");
    assert_eq!(result["message"], "exit 1: ***");
    assert_eq!(result["diff"], "+token=***");
    assert_eq!(run.body["reason"], "step say failed: ***");
    assert_eq!(run.body["report"]["hosts"]["web-1"]["output"], "echo ***");
}
