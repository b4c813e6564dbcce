//! VCS triggers at the HTTP level: GitHub's own example payloads (from
//! `@octokit/webhooks-examples`), signed as GitHub signs them, against real git
//! repositories served by the GitHub double (which checks the App JWT with the App's
//! public key, and the permissions and repository of every token request). The test
//! plays the runner to see what a run is handed.

use std::path::Path;
use std::time::Duration;

use bosun_server::config::{GithubAppConfig, Secret};
use bosun_testkit::{require_examples, sign, BareRepo, GithubDouble, WebhookExamples, WorkTree};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::harness::{Reply, TestServer};
use crate::runs::Runner;

pub(crate) const SECRET: &str = "webhook-secret-for-tests";
pub(crate) const APP_ID: i64 = 4242;
pub(crate) const INSTALLATION: i64 = 77;

pub(crate) struct Fixture {
    pub(crate) t: TestServer,
    pub(crate) gh: GithubDouble,
    pub(crate) ex: WebhookExamples,
    pub(crate) work: WorkTree,
    _dir: tempfile::TempDir,
}

/// A server wired to a GitHub double holding `acme/infra` (installation 77).
pub(crate) async fn fixture(
    tweak: impl FnOnce(&mut bosun_server::ServerConfig),
) -> Option<Fixture> {
    let ex = require_examples()?;
    let dir = tempfile::tempdir().unwrap();
    let repos = dir.path().join("repos");
    std::fs::create_dir_all(&repos).unwrap();
    let gh = GithubDouble::start(APP_ID, &repos);
    gh.add_installation(INSTALLATION, "acme", &["acme/infra"]);
    let repo = BareRepo::create(&repos, "acme/infra");
    let work = repo.work_tree();
    work.commit(&[("README.md", "infra\n")], "init");
    work.push("main");
    let url = gh.url().to_string();
    let t = TestServer::start_with(|c| {
        c.vcs.webhook_secret = Some(Secret(SECRET.into()));
        c.vcs.app = Some(GithubAppConfig {
            app_id: APP_ID,
            private_key_pem: Secret(bosun_testkit::app_private_key_pem().into()),
        });
        c.vcs.api_url = url.clone();
        c.vcs.web_url = url;
        c.vcs.poll_interval = Duration::ZERO;
        tweak(c);
    })
    .await;
    Some(Fixture {
        t,
        gh,
        ex,
        work,
        _dir: dir,
    })
}

impl Fixture {
    pub(crate) async fn stack(&self, id: &str, branch: &str, path: &str, watch: &[&str]) {
        let r = self
            .t
            .create_stack(
                json!({"id": id, "repository": "github:acme/infra", "branch": branch,
                "path": path, "watch_paths": watch}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }

    async fn deliver_raw(
        &self,
        event: &str,
        guid: &str,
        body: Vec<u8>,
        sig: Option<String>,
    ) -> Reply {
        let mut req = self
            .t
            .client
            .post(format!("{}/webhooks/github", self.t.url))
            .header("content-type", "application/json")
            .header("x-github-event", event)
            .header("x-github-delivery", guid)
            .body(body);
        if let Some(sig) = sig {
            req = req.header("x-hub-signature-256", sig);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        Reply { status, body }
    }

    pub(crate) async fn deliver(&self, event: &str, guid: &str, payload: &Value) -> Reply {
        let body = serde_json::to_vec(payload).unwrap();
        let sig = sign(SECRET.as_bytes(), &body);
        let r = self.deliver_raw(event, guid, body, Some(sig)).await;
        assert_eq!(r.status, StatusCode::OK, "{event} {guid}: {:?}", r.body);
        r
    }

    /// GitHub's push example, re-aimed at `acme/infra`.
    fn push(&self, git_ref: &str, before: &str, after: &str) -> Value {
        let mut p = self.ex.example("push", |p| {
            p["ref"]
                .as_str()
                .is_some_and(|r| r.starts_with("refs/heads/"))
        });
        p["ref"] = json!(git_ref);
        p["before"] = json!(before);
        p["after"] = json!(after);
        p["deleted"] = json!(after.bytes().all(|b| b == b'0'));
        p["created"] = json!(before.bytes().all(|b| b == b'0'));
        p["forced"] = json!(false);
        aim(&mut p);
        p
    }

    pub(crate) fn pull_request(&self, action: &str, number: i64, base: &str, head: &str) -> Value {
        let mut p = self.ex.example("pull_request", |p| p["action"] == "opened");
        p["action"] = json!(action);
        p["number"] = json!(number);
        p["pull_request"]["number"] = json!(number);
        p["pull_request"]["base"]["ref"] = json!("main");
        p["pull_request"]["base"]["sha"] = json!(base);
        p["pull_request"]["head"]["sha"] = json!(head);
        aim(&mut p);
        p
    }

    pub(crate) async fn triggers(&self, stack: &str) -> Vec<Value> {
        let r = self
            .t
            .get(
                &format!("/api/v1/orgs/default/stacks/{stack}/triggers"),
                &self.t.admin,
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        r.body["items"].as_array().unwrap().clone()
    }

    pub(crate) async fn runs(&self, stack: &str) -> Vec<Value> {
        let r = self
            .t
            .get(
                &format!("/api/v1/orgs/default/stacks/{stack}/runs"),
                &self.t.admin,
            )
            .await;
        r.body["items"].as_array().unwrap().clone()
    }

    pub(crate) async fn run(&self, id: &str) -> Value {
        self.t
            .get(&format!("/api/v1/orgs/default/runs/{id}"), &self.t.admin)
            .await
            .body
    }
}

/// Points an example payload at `acme/infra` and installation 77.
pub(crate) fn aim(p: &mut Value) {
    p["repository"]["full_name"] = json!("acme/infra");
    p["repository"]["name"] = json!("infra");
    p["repository"]["owner"]["login"] = json!("acme");
    p["installation"] = json!({"id": INSTALLATION, "node_id": "MDIz"});
}

pub(crate) fn triggered_stacks(reply: &Reply) -> Vec<String> {
    let mut s: Vec<String> = reply.body["triggered"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["stack"].as_str().unwrap().to_string())
        .collect();
    s.sort();
    s
}

const ZERO: &str = "0000000000000000000000000000000000000000";

#[tokio::test]
async fn deliveries_without_a_valid_signature_are_refused_and_only_counted() {
    let Some(f) = fixture(|_| {}).await else {
        return;
    };
    f.stack("net", "main", "infra/net", &[]).await;
    let head = f.work.rev_parse("HEAD");
    let body = serde_json::to_vec(&f.push("refs/heads/main", ZERO, &head)).unwrap();
    let missing = f.deliver_raw("push", "d-1", body.clone(), None).await;
    assert_eq!(missing.status, StatusCode::UNAUTHORIZED);
    assert!(
        missing.message().contains("X-Hub-Signature-256"),
        "{:?}",
        missing.body
    );
    let wrong = sign(b"another secret", &body);
    assert_eq!(
        f.deliver_raw("push", "d-2", body.clone(), Some(wrong))
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    // A correct signature over different bytes.
    let mut tampered = body.clone();
    tampered.extend_from_slice(b" ");
    let sig = sign(SECRET.as_bytes(), &body);
    assert_eq!(
        f.deliver_raw("push", "d-3", tampered, Some(sig))
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        f.deliver_raw("push", "d-4", body.clone(), Some("sha256=zz".into()))
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    // Nothing stored: no trigger history, no runs; the refusals are counted.
    assert!(f.triggers("net").await.is_empty());
    assert!(f.runs("net").await.is_empty());
    let metrics =
        f.t.client
            .get(format!("{}/metrics", f.t.url))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
    assert!(
        metrics.contains("bosun_webhook_deliveries_total{outcome=\"rejected\"} 4"),
        "{metrics}"
    );

    let ping = f.ex.example("ping", |_| true);
    let r = f.deliver("ping", "d-5", &ping).await;
    assert!(r.body["summary"].as_str().unwrap().starts_with("ping"));
}

#[tokio::test]
async fn a_push_triggers_exactly_the_stacks_whose_watch_paths_it_touches() {
    let Some(f) = fixture(|_| {}).await else {
        return;
    };
    f.stack("net", "main", "infra/net", &[]).await;
    f.stack("network", "main", "infra/network", &["modules/vpc"])
        .await;
    f.stack("dev-net", "develop", "infra/net", &[]).await;
    f.stack("docs", "main", "docs", &[]).await;
    let before = f.work.rev_parse("HEAD");
    let after = f.work.commit(
        &[
            ("infra/net/main.tf", "# net\n"),
            ("modules/vpc/vpc.tf", "# vpc\n"),
        ],
        "net and vpc",
    );
    f.work.push("main");
    let r = f
        .deliver(
            "push",
            "push-1",
            &f.push("refs/heads/main", &before, &after),
        )
        .await;
    assert_eq!(triggered_stacks(&r), ["net", "network"]);

    let runs = f.runs("net").await;
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    assert_eq!(
        (
            run["kind"].as_str(),
            run["trigger"].as_str(),
            run["commit"].as_str(),
            run["state"].as_str()
        ),
        (
            Some("tracked"),
            Some("push"),
            Some(after.as_str()),
            Some("queued")
        )
    );
    assert!(run["triggered_by"].as_str().unwrap().starts_with("github:"));

    let net = f.triggers("net").await;
    assert_eq!(net[0]["delivery"], "push-1");
    assert_eq!(net[0]["triggered"], true);
    assert_eq!(net[0]["run"], run["id"]);
    assert_eq!(
        net[0]["reason"],
        "triggered: infra/net/main.tf changed, under watch path infra/net"
    );
    let network = f.triggers("network").await;
    assert!(
        network[0]["reason"]
            .as_str()
            .unwrap()
            .contains("modules/vpc"),
        "{network:?}"
    );
    let dev = f.triggers("dev-net").await;
    assert_eq!(dev[0]["triggered"], false);
    assert_eq!(
        dev[0]["reason"],
        "branch not tracked: the push was to \"main\", the stack tracks \"develop\""
    );
    let docs = f.triggers("docs").await;
    assert_eq!(
        docs[0]["reason"],
        "no watch path touched: none of the 2 changed file(s) is under docs"
    );

    // Prefix, not substring: infra/network/x.tf is not under infra/net.
    let before = after;
    let after = f
        .work
        .commit(&[("infra/network/x.tf", "# x\n")], "network only");
    f.work.push("main");
    let r = f
        .deliver(
            "push",
            "push-2",
            &f.push("refs/heads/main", &before, &after),
        )
        .await;
    assert_eq!(triggered_stacks(&r), ["network"]);
    assert_eq!(f.runs("net").await.len(), 1);
}

#[tokio::test]
async fn tags_deletions_untracked_branches_and_duplicates_trigger_nothing_and_say_why() {
    let Some(f) = fixture(|_| {}).await else {
        return;
    };
    f.stack("net", "main", "", &[]).await;
    let head = f.work.commit(&[("main.tf", "# a\n")], "a");
    f.work.push("main");
    f.work.push_tag("v1.0.0");

    let tag = f.ex.example("push", |p| {
        p["ref"]
            .as_str()
            .is_some_and(|r| r.starts_with("refs/tags/"))
            && p["created"] == true
    });
    let mut tag = tag;
    tag["after"] = json!(head);
    aim(&mut tag);
    let r = f.deliver("push", "tag-1", &tag).await;
    assert_eq!(triggered_stacks(&r), Vec::<String>::new());
    let tag_ref = tag["ref"]
        .as_str()
        .unwrap()
        .trim_start_matches("refs/tags/")
        .to_string();
    assert_eq!(
        f.triggers("net").await[0]["reason"],
        format!("tag push ignored: tag {tag_ref:?}")
    );

    let mut tag_deleted = f.ex.example("push", |p| {
        p["ref"]
            .as_str()
            .is_some_and(|r| r.starts_with("refs/tags/"))
            && p["deleted"] == true
    });
    aim(&mut tag_deleted);
    f.deliver("push", "tag-2", &tag_deleted).await;
    assert!(f.triggers("net").await[0]["reason"]
        .as_str()
        .unwrap()
        .starts_with("tag deletion ignored"));

    let deleted = f.push("refs/heads/main", &head, ZERO);
    f.deliver("push", "del-1", &deleted).await;
    assert_eq!(
        f.triggers("net").await[0]["reason"],
        "branch deletion ignored: branch \"main\""
    );

    f.work.checkout_new_branch("feature");
    let feature = f.work.commit(&[("main.tf", "# feature\n")], "feature");
    f.work.push("feature");
    f.deliver(
        "push",
        "feat-1",
        &f.push("refs/heads/feature", &head, &feature),
    )
    .await;
    assert_eq!(
        f.triggers("net").await[0]["reason"],
        "branch not tracked: the push was to \"feature\", the stack tracks \"main\""
    );
    assert!(
        f.runs("net").await.is_empty(),
        "nothing above may start a run"
    );

    // The same delivery twice: one run, and the repeat is recorded as such.
    f.work.checkout("main");
    let next = f.work.commit(&[("main.tf", "# b\n")], "b");
    f.work.push("main");
    let push = f.push("refs/heads/main", &head, &next);
    let first = f.deliver("push", "dup-1", &push).await;
    assert_eq!(triggered_stacks(&first), ["net"]);
    let again = f.deliver("push", "dup-1", &push).await;
    assert_eq!(again.body["duplicate"], true);
    assert_eq!(triggered_stacks(&again), Vec::<String>::new());
    assert_eq!(f.runs("net").await.len(), 1);
    let history = f.triggers("net").await;
    assert_eq!(history[0]["delivery"], "dup-1");
    assert_eq!(history[0]["duplicate"], true);
    assert!(
        history[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("duplicate delivery"),
        "{history:?}"
    );
    let metrics =
        f.t.client
            .get(format!("{}/metrics", f.t.url))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
    assert!(
        metrics.contains("bosun_webhook_deliveries_total{outcome=\"duplicate\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn changed_files_come_from_the_commit_range_not_the_payload() {
    let Some(f) = fixture(|_| {}).await else {
        return;
    };
    f.stack("net", "main", "infra/net", &[]).await;
    f.stack("app", "main", "app", &[]).await;
    f.stack("feature-net", "feature", "infra/net", &[]).await;

    // 25 commits; only the first touches infra/net. GitHub lists at most 20 commits, and
    // the example payload lists none of ours.
    let before = f.work.rev_parse("HEAD");
    f.work.commit(&[("infra/net/main.tf", "# net\n")], "net");
    let mut after = String::new();
    for i in 0..24 {
        after = f
            .work
            .commit(&[("app/main.tf", &format!("# {i}\n"))], "app");
    }
    f.work.push("main");
    let r = f
        .deliver(
            "push",
            "long-1",
            &f.push("refs/heads/main", &before, &after),
        )
        .await;
    assert_eq!(triggered_stacks(&r), ["app", "net"]);

    // A force push: main goes back and gets a different change. The range's diff is
    // what changed between the two heads: app/ (reverted) and infra/net (reverted too).
    f.work.reset_hard(&before);
    let forced = f.work.commit(&[("docs/x.md", "# x\n")], "docs only");
    f.work.push_force("main");
    let mut p = f.push("refs/heads/main", &after, &forced);
    p["forced"] = json!(true);
    let r = f.deliver("push", "force-1", &p).await;
    assert_eq!(triggered_stacks(&r), ["app", "net"]);
    // …and a force push that only touches docs triggers nothing.
    let docs = f.work.commit(&[("docs/y.md", "# y\n")], "more docs");
    f.work.reset_hard(&forced);
    let docs2 = f.work.commit(&[("docs/z.md", "# z\n")], "other docs");
    f.work.push_force("main");
    let _ = docs;
    let r = f
        .deliver(
            "push",
            "force-2",
            &f.push("refs/heads/main", &forced, &docs2),
        )
        .await;
    assert_eq!(triggered_stacks(&r), Vec::<String>::new());

    // A first push of a branch (before = zeros): only its own commits count.
    f.work.checkout_new_branch("feature");
    let feat = f
        .work
        .commit(&[("infra/net/feature.tf", "# f\n")], "feature net");
    f.work.push("feature");
    let r = f
        .deliver(
            "push",
            "first-1",
            &f.push("refs/heads/feature", ZERO, &feat),
        )
        .await;
    assert_eq!(triggered_stacks(&r), ["feature-net"]);
    f.work.checkout_new_branch("feature-docs");
    let fd = f.work.commit(&[("docs/f.md", "# f\n")], "feature docs");
    f.work.push("feature-docs");
    let r = f
        .deliver(
            "push",
            "first-2",
            &f.push("refs/heads/feature-docs", ZERO, &fd),
        )
        .await;
    assert_eq!(triggered_stacks(&r), Vec::<String>::new());
}

#[tokio::test]
async fn pull_requests_plan_on_their_base_and_newer_commits_supersede() {
    let Some(f) = fixture(|_| {}).await else {
        return;
    };
    f.stack("net", "main", "infra/net", &[]).await;
    f.stack("app", "main", "app", &[]).await;
    let base = f.work.rev_parse("HEAD");
    f.work.checkout_new_branch("change");
    let head1 = f.work.commit(&[("infra/net/main.tf", "# pr\n")], "pr 1");
    f.work.push_ref(&head1, "refs/pull/7/head");
    // main moves on meanwhile: the merge base, not main's head, bounds the PR's files.
    f.work.checkout("main");
    let main2 = f.work.commit(&[("app/main.tf", "# main moved\n")], "main");
    f.work.push("main");

    let r = f
        .deliver(
            "pull_request",
            "pr-1",
            &f.pull_request("opened", 7, &main2, &head1),
        )
        .await;
    assert_eq!(triggered_stacks(&r), ["net"]);
    let first = f.runs("net").await[0].clone();
    assert_eq!(
        (
            first["kind"].as_str(),
            first["trigger"].as_str(),
            first["pull_request"].as_i64(),
            first["commit"].as_str()
        ),
        (
            Some("proposed"),
            Some("pull_request"),
            Some(7),
            Some(head1.as_str())
        )
    );
    let _ = base;

    f.work.checkout("change");
    let head2 = f.work.commit(&[("infra/net/main.tf", "# pr 2\n")], "pr 2");
    f.work.push_ref(&head2, "refs/pull/7/head");
    let r = f
        .deliver(
            "pull_request",
            "pr-2",
            &f.pull_request("synchronize", 7, &main2, &head2),
        )
        .await;
    assert_eq!(triggered_stacks(&r), ["net"]);
    let old = f.run(first["id"].as_str().unwrap()).await;
    assert_eq!(old["state"], "canceled");
    assert!(
        old["reason"]
            .as_str()
            .unwrap()
            .contains("superseded by commit"),
        "{old:?}"
    );
    let newest = f.runs("net").await[0].clone();
    assert_eq!(newest["state"], "queued");

    let r = f
        .deliver(
            "pull_request",
            "pr-3",
            &f.pull_request("closed", 7, &main2, &head2),
        )
        .await;
    assert_eq!(r.body["canceled"], json!([newest["id"]]));
    let closed = f.run(newest["id"].as_str().unwrap()).await;
    assert_eq!(closed["state"], "canceled");
    assert!(closed["reason"].as_str().unwrap().contains("closed"));
    let app = f.triggers("app").await;
    assert!(
        app[0]["reason"].as_str().unwrap().contains("closed"),
        "{app:?}"
    );
    assert!(
        app[1]["reason"]
            .as_str()
            .unwrap()
            .starts_with("no watch path touched"),
        "{app:?}"
    );

    // Actions that are not about code are recorded and start nothing.
    let r = f
        .deliver(
            "pull_request",
            "pr-4",
            &f.pull_request("labeled", 7, &main2, &head2),
        )
        .await;
    assert_eq!(triggered_stacks(&r), Vec::<String>::new());
    assert!(f.triggers("net").await[0]["reason"]
        .as_str()
        .unwrap()
        .contains("labeled"));
}

#[tokio::test]
async fn each_run_gets_its_own_read_only_token_for_its_repository_revoked_when_it_ends() {
    let Some(f) = fixture(|_| {}).await else {
        return;
    };
    f.stack("net", "main", "", &[]).await;
    // Installation events bind the repository; the stack shows it.
    let mut created = f.ex.example("installation", |p| p["action"] == "created");
    created["installation"]["id"] = json!(INSTALLATION);
    created["repositories"] =
        json!([{"id": 1, "name": "infra", "full_name": "acme/infra", "private": true}]);
    f.deliver("installation", "inst-1", &created).await;
    let stack =
        f.t.get("/api/v1/orgs/default/stacks/net", &f.t.admin)
            .await
            .body;
    assert_eq!(stack["connection"]["connected"], true, "{stack:?}");
    assert_eq!(stack["connection"]["installation"], INSTALLATION);

    let id =
        f.t.post(
            "/api/v1/orgs/default/stacks/net/runs",
            &f.t.admin,
            json!({}),
        )
        .await
        .body["id"]
            .as_str()
            .unwrap()
            .to_string();
    let runner = Runner::register(&f.t, "r1").await;
    let lease = runner.lease(5).await.expect("a lease");
    assert_eq!(lease["clone_url"], format!("{}/acme/infra.git", f.gh.url()));
    let token = lease["clone_token"].as_str().unwrap().to_string();
    let issued = f.gh.issued_tokens();
    let mine = issued
        .iter()
        .find(|t| t.token == token)
        .expect("minted by the App");
    assert_eq!(
        (mine.installation, mine.repository.as_str()),
        (INSTALLATION, "acme/infra")
    );
    let req =
        f.gh.token_requests()
            .into_iter()
            .rfind(|r| r.accepted)
            .unwrap();
    assert_eq!(req.repositories, ["infra"]);
    assert_eq!(req.permissions, json!({"contents": "read"}));
    // The token clones the repository over HTTP.
    let dest = tempfile::tempdir().unwrap();
    clone_with(
        lease["clone_url"].as_str().unwrap(),
        &token,
        &dest.path().join("src"),
    );
    assert!(dest.path().join("src/README.md").exists());

    // The run ends: its token is revoked.
    let fencing = lease["fencing"].clone();
    runner
        .call(
            &format!("{id}/report"),
            json!({"fencing": fencing, "event": "failed", "reason": "test"}),
        )
        .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !f
        .gh
        .issued_tokens()
        .iter()
        .any(|t| t.token == token && t.revoked)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the token was never revoked"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Removing the repository from the installation disconnects the stack.
    let mut removed =
        f.ex.example("installation_repositories", |p| p["action"] == "removed");
    removed["installation"]["id"] = json!(INSTALLATION);
    removed["repositories_removed"] =
        json!([{"id": 1, "name": "infra", "full_name": "acme/infra", "private": true}]);
    f.deliver("installation_repositories", "inst-2", &removed)
        .await;
    let stack =
        f.t.get("/api/v1/orgs/default/stacks/net", &f.t.admin)
            .await
            .body;
    assert_eq!(stack["connection"]["connected"], false);
    assert!(stack["connection"]["detail"]
        .as_str()
        .unwrap()
        .contains("install the GitHub App"));
}

#[tokio::test]
async fn an_unbound_stack_re_resolves_once_on_a_manual_run_and_fails_clearly_if_still_unbound() {
    let Some(f) = fixture(|_| {}).await else {
        return;
    };
    f.stack("net", "main", "", &[]).await;
    let other = BareRepo::create(f.gh.repos_root(), "acme/other");
    let w = other.work_tree();
    w.commit(&[("main.tf", "# other\n")], "init");
    w.push("main");
    let r =
        f.t.create_stack(json!({"id": "other", "repository": "github:acme/other"}))
            .await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(r.body["connection"]["connected"], false);

    // Not installed anywhere: the run fails before any engine, saying why.
    let id =
        f.t.post(
            "/api/v1/orgs/default/stacks/other/runs",
            &f.t.admin,
            json!({}),
        )
        .await
        .body["id"]
            .as_str()
            .unwrap()
            .to_string();
    let runner = Runner::register(&f.t, "r1").await;
    assert!(
        runner.lease(1).await.is_none(),
        "an unreachable run is never handed out"
    );
    let run = f.run(&id).await;
    assert_eq!(run["state"], "failed");
    assert!(
        run["reason"].as_str().unwrap().contains("not connected"),
        "{run:?}"
    );
    assert_eq!(f.gh.installation_lookups().len(), 1, "asked GitHub once");

    // The App is installed on it afterwards: the retry heals the binding.
    f.gh.add_installation(88, "acme", &["acme/other"]);
    let retry =
        f.t.post(
            &format!("/api/v1/orgs/default/runs/{id}/retry"),
            &f.t.admin,
            json!({}),
        )
        .await;
    assert_eq!(retry.status, StatusCode::CREATED);
    let lease = runner.lease(5).await.expect("the retry is leased");
    assert_eq!(lease["clone_url"], format!("{}/acme/other.git", f.gh.url()));
    let stack =
        f.t.get("/api/v1/orgs/default/stacks/other", &f.t.admin)
            .await
            .body;
    assert_eq!(stack["connection"]["installation"], 88);
}

#[tokio::test]
async fn plain_git_remotes_are_polled_and_routed_like_a_push() {
    let dir = tempfile::tempdir().unwrap();
    let repo = BareRepo::create(dir.path(), "local/infra");
    let work = repo.work_tree();
    work.commit(&[("README.md", "x\n")], "init");
    work.push("main");
    let t = TestServer::start_with(|c| c.vcs.poll_interval = Duration::from_millis(200)).await;
    for (id, path) in [("net", "infra/net"), ("app", "app")] {
        let r = t
            .create_stack(json!({"id": id, "repository": repo.file_url(), "path": path}))
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }
    let get_triggers = |stack: &'static str| {
        let t = &t;
        async move {
            t.get(
                &format!("/api/v1/orgs/default/stacks/{stack}/triggers"),
                &t.admin,
            )
            .await
            .body["items"]
                .as_array()
                .unwrap()
                .clone()
        }
    };
    // Let the poller see the first head (recorded, triggers nothing); the stack shows it.
    let first = work.rev_parse("HEAD");
    wait_for(|| async {
        let s = t
            .get("/api/v1/orgs/default/stacks/net", &t.admin)
            .await
            .body;
        s["connection"]["detail"].as_str().unwrap().contains(&first)
    })
    .await;
    assert!(poll_seen(&t).await, "the poll duty reports its passes");
    let sha = work.commit(&[("infra/net/main.tf", "# net\n")], "net");
    work.push("main");
    wait_for(|| async { !get_triggers("net").await.is_empty() }).await;
    let net = get_triggers("net").await;
    assert_eq!(net[0]["source"], "poll");
    assert_eq!(net[0]["triggered"], true);
    assert_eq!(net[0]["after"], sha);
    let app = get_triggers("app").await;
    assert!(app[0]["reason"]
        .as_str()
        .unwrap()
        .starts_with("no watch path touched"));
    let runs = t
        .get("/api/v1/orgs/default/stacks/net/runs", &t.admin)
        .await
        .body;
    assert_eq!(runs["items"][0]["commit"], sha);
    assert_eq!(runs["items"][0]["triggered_by"], "poll");
    let runs = t
        .get("/api/v1/orgs/default/stacks/app/runs", &t.admin)
        .await
        .body;
    assert!(runs["items"].as_array().unwrap().is_empty());
}

/// True once the poller has completed a pass (its pass metric is set).
async fn poll_seen(t: &TestServer) -> bool {
    let m = t.metrics_text().await;
    m.lines().any(|l| {
        l.starts_with("bosun_duty_last_pass_timestamp_seconds{duty=\"git_poll\"}")
            && !l.ends_with(" 0")
    })
}

pub(crate) async fn wait_for<F, Fut>(mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !done().await {
        assert!(std::time::Instant::now() < deadline, "timed out waiting");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn clone_with(url: &str, token: &str, dest: &Path) {
    use base64::Engine as _;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token}"));
    let out = std::process::Command::new("git")
        .args(["clone", "--quiet", url])
        .arg(dest)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "http.extraHeader")
        .env(
            "GIT_CONFIG_VALUE_0",
            format!("Authorization: Basic {basic}"),
        )
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "clone failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub(crate) async fn put_policy(f: &Fixture, name: &str, body: Value) {
    let r =
        f.t.call(
            reqwest::Method::PUT,
            &format!("/api/v1/orgs/default/policies/{name}"),
            Some(&f.t.admin),
            Some(body),
        )
        .await;
    assert!(r.status.is_success(), "{name}: {:?}", r.body);
}

#[tokio::test]
async fn trigger_policies_skip_and_start_runs_and_each_decision_says_why() {
    let Some(f) = fixture(|_| {}).await else {
        return;
    };
    for (id, branch, path, labels) in [
        ("net", "main", "infra/net", json!(["network"])),
        ("edge", "main", "infra/edge", json!(["network"])),
        ("dev-net", "develop", "infra/net", json!(["network"])),
        ("docs", "main", "docs", json!(["docs-team"])),
    ] {
        let r =
            f.t.create_stack(json!({"id": id, "repository": "github:acme/infra",
                "branch": branch, "path": path, "labels": labels}))
                .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }
    // A shared module's change runs every network stack (attached by label).
    put_policy(
        &f,
        "modules",
        json!({"points": ["trigger"], "mode": "hard_mandatory",
        "labels": ["network"], "files": {"modules.rego": r#"package bosun.modules

import rego.v1

trigger contains msg if {
    some f in input.delivery.changed_files
    startswith(f, "modules/")
    msg := sprintf("%s is a shared module", [f])
}
"#}}),
    )
    .await;
    // Markdown alone deploys nothing (the whole org).
    put_policy(
        &f,
        "markdown",
        json!({"points": ["trigger"], "mode": "soft_mandatory",
        "files": {"markdown.rego": r#"package bosun.markdown

import rego.v1

skip contains "only markdown changed" if {
    count(input.delivery.changed_files) > 0
    every f in input.delivery.changed_files { endswith(f, ".md") }
}
"#}}),
    )
    .await;
    // An advisory policy only says what it would do.
    put_policy(
        &f,
        "quiet-hours",
        json!({"points": ["trigger"], "mode": "advisory",
        "files": {"quiet.rego": r#"package bosun.quiet

import rego.v1

skip contains sprintf("%s would wait for the morning", [input.stack.id]) if {
    input.decision.run
    input.delivery.event == "push"
}
"#}}),
    )
    .await;

    let push = |guid: &'static str, files: &'static [(&'static str, &'static str)]| {
        let f = &f;
        async move {
            let before = f.work.rev_parse("HEAD");
            let after = f.work.commit(files, guid);
            f.work.push("main");
            f.deliver("push", guid, &f.push("refs/heads/main", &before, &after))
                .await
        }
    };

    // 1. No watch path is touched, but the module policy starts both network stacks.
    let r = push("push-modules", &[("modules/vpc/main.tf", "# vpc\n")]).await;
    assert_eq!(triggered_stacks(&r), ["edge", "net"]);
    let net = &f.triggers("net").await[0];
    assert_eq!(net["triggered"], true);
    assert_eq!(
        net["reason"],
        "triggered by policy modules: modules/vpc/main.tf is a shared module (the watch \
         paths said: no watch path touched: none of the 1 changed file(s) is under infra/net)"
    );
    let run = f.run(net["run"].as_str().unwrap()).await;
    assert_eq!(
        (run["kind"].as_str(), run["state"].as_str()),
        (Some("tracked"), Some("queued"))
    );
    let policies = run["policies"].as_array().unwrap();
    let modules = policies.iter().find(|p| p["policy"] == "modules").unwrap();
    assert_eq!(
        (modules["point"].as_str(), modules["outcome"].as_str()),
        (Some("trigger"), Some("trigger"))
    );
    assert_eq!(
        modules["trigger"],
        json!(["modules/vpc/main.tf is a shared module"])
    );
    assert!(modules["version"].as_str().unwrap().starts_with("sha256:"));
    // Another branch's stack is not evaluated: its run would check out another branch.
    let dev = &f.triggers("dev-net").await[0];
    assert_eq!(dev["triggered"], false);
    assert!(
        dev["reason"]
            .as_str()
            .unwrap()
            .starts_with("branch not tracked"),
        "{dev:?}"
    );
    assert!(f.runs("docs").await.is_empty());

    // 2. Markdown only: the docs stack's watch path matched, the policy skips it.
    let r = push("push-readme", &[("docs/README.md", "# docs\n")]).await;
    assert!(triggered_stacks(&r).is_empty(), "{:?}", r.body);
    let docs = &f.triggers("docs").await[0];
    assert_eq!(docs["triggered"], false);
    assert_eq!(
        docs["reason"],
        "skipped by policy markdown: only markdown changed (the watch paths said: triggered: \
         docs/README.md changed, under watch path docs); warned by policy quiet-hours \
         (advisory): docs would wait for the morning"
    );
    assert!(f.runs("docs").await.is_empty());

    // 3. A watched change runs; the advisory policy's word is in the reason and on the run.
    let r = push("push-net", &[("infra/net/main.tf", "# net\n")]).await;
    assert_eq!(triggered_stacks(&r), ["net"]);
    let net = &f.triggers("net").await[0];
    assert_eq!(
        net["reason"],
        "triggered: infra/net/main.tf changed, under watch path infra/net; warned by policy \
         quiet-hours (advisory): net would wait for the morning"
    );
    let run = f.run(net["run"].as_str().unwrap()).await;
    let quiet = run["policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["policy"] == "quiet-hours")
        .unwrap()
        .clone();
    assert_eq!(
        (quiet["outcome"].as_str(), quiet["mode"].as_str()),
        (Some("warn"), Some("advisory"))
    );

    // 4. A policy that fails is never silent: it skips (on_error deny), then warns.
    let broken = json!({"points": ["trigger"], "mode": "hard_mandatory",
        "labels": ["docs-team"], "files": {"broken.rego": r#"package bosun.broken

import rego.v1

trigger contains "never" if { to_number("not a number") > 0 }
"#}});
    put_policy(&f, "broken", broken.clone()).await;
    push("push-guide", &[("docs/guide.txt", "guide\n")]).await;
    let docs = &f.triggers("docs").await[0];
    assert_eq!(docs["triggered"], false, "{docs:?}");
    let reason = docs["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("skipped by policy broken: policy data.bosun.broken: trigger:"),
        "{reason}"
    );
    let mut warn = broken;
    warn["on_error"] = json!("warn");
    put_policy(&f, "broken", warn).await;
    let r = push("push-guide-2", &[("docs/guide.txt", "guide 2\n")]).await;
    assert_eq!(triggered_stacks(&r), ["docs"]);
    let reason = f.triggers("docs").await[0]["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        reason.contains("; warned by policy broken: policy data.bosun.broken"),
        "{reason}"
    );

    // 5. A pull request is decided the same way: proposed runs on the base branch.
    let base = f.work.rev_parse("HEAD");
    f.work.checkout_new_branch("dns");
    let head = f.work.commit(&[("modules/dns/main.tf", "# dns\n")], "dns");
    f.work.push_ref(&head, "refs/pull/9/head");
    let r = f
        .deliver(
            "pull_request",
            "pr-modules",
            &f.pull_request("opened", 9, &base, &head),
        )
        .await;
    assert_eq!(triggered_stacks(&r), ["edge", "net"]);
    let edge = &f.triggers("edge").await[0];
    let run = f.run(edge["run"].as_str().unwrap()).await;
    assert_eq!(
        (run["kind"].as_str(), run["pull_request"].as_i64()),
        (Some("proposed"), Some(9))
    );
}

#[tokio::test]
async fn a_policy_in_a_github_repository_is_read_through_the_app_at_its_branch_head() {
    let Some(f) = fixture(|_| {}).await else {
        return;
    };
    f.stack("net", "main", "infra/net", &[]).await;
    // The policy lives in the same repository, read with the App's installation token.
    let before = f.work.rev_parse("HEAD");
    let after = f.work.commit(
        &[(
            "policies/markdown.rego",
            "package bosun.markdown\n\nimport rego.v1\n\nskip contains \"only markdown changed\" if {\n    every f in input.delivery.changed_files { endswith(f, \".md\") }\n}\n",
        )],
        "policy",
    );
    f.work.push("main");
    put_policy(
        &f,
        "markdown",
        json!({"points": ["trigger"], "mode": "hard_mandatory",
            "repository": "github:acme/infra", "branch": "main", "path": "policies"}),
    )
    .await;
    let tokens_before = f.gh.issued_tokens().len();
    f.deliver(
        "push",
        "push-policy",
        &f.push("refs/heads/main", &before, &after),
    )
    .await;
    let before = after;
    let after = f.work.commit(&[("infra/net/README.md", "# net\n")], "docs");
    f.work.push("main");
    let r = f
        .deliver(
            "push",
            "push-md",
            &f.push("refs/heads/main", &before, &after),
        )
        .await;
    assert!(triggered_stacks(&r).is_empty(), "{:?}", r.body);
    let net = &f.triggers("net").await[0];
    assert!(
        net["reason"]
            .as_str()
            .unwrap()
            .starts_with("skipped by policy markdown: only markdown changed"),
        "{net:?}"
    );
    // Each read used a token of its own for that repository, revoked once read.
    let issued = f.gh.issued_tokens();
    assert!(issued.len() > tokens_before);
    assert!(
        issued
            .iter()
            .all(|t| t.revoked && t.repository == "acme/infra"),
        "{issued:?}"
    );

    // A repository the App is not installed on: the evaluation fails, and says why.
    put_policy(
        &f,
        "markdown",
        json!({"points": ["trigger"], "mode": "hard_mandatory",
            "repository": "github:elsewhere/policies", "path": "policies"}),
    )
    .await;
    let before = after;
    let after = f.work.commit(&[("infra/net/main.tf", "# net\n")], "net");
    f.work.push("main");
    f.deliver(
        "push",
        "push-tf",
        &f.push("refs/heads/main", &before, &after),
    )
    .await;
    let net = &f.triggers("net").await[0];
    let reason = net["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("skipped by policy markdown: cannot read the policy's files: the GitHub App is not installed on elsewhere/policies"),
        "{reason}"
    );
}
