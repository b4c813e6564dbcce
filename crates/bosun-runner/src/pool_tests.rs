//! The whole runner (`run_workers`) against a fake server: real git repositories, a
//! scripted fake engine for the control paths (cancel, timeout, fencing, failures,
//! shutdown) and the real Terraform for a plan and an apply through the `http` backend.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bosun_api::RunnerIntegration;
use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::egress::{AllowRule, EgressMode, EgressPolicy};
use crate::test_net::{namespaces_or_skip, TestNet};
use crate::test_support::{
    fake_engine, git, terraform_or_skip, wait_for, FakeServer, GitHttpServer, Repo, POOL_TOKEN,
    TOKEN_USER,
};
use crate::{run_workers, RunnerConfig, RunnerError};

/// Long enough for any of these phases on a slow machine; they take well under a second.
const WAIT: Duration = Duration::from_secs(60);

struct Harness {
    server: FakeServer,
    dir: tempfile::TempDir,
    engine: PathBuf,
    repo: Repo,
    stop: Option<oneshot::Sender<()>>,
    pool: JoinHandle<Result<(), RunnerError>>,
}

impl Harness {
    async fn start(cancel_grace: Duration) -> Harness {
        Harness::start_with(cancel_grace, EgressMode::Unrestricted).await
    }

    async fn start_with(cancel_grace: Duration, egress: EgressMode) -> Harness {
        let server = FakeServer::start().await;
        let dir = tempfile::tempdir().unwrap();
        let engine = fake_engine(dir.path());
        let repo = Repo::new(&dir.path().join("repo"));
        let mut config = RunnerConfig::new(
            server.url.clone(),
            POOL_TOKEN,
            "test-runner",
            dir.path().join("work"),
        );
        config.cancel_grace = cancel_grace;
        config.egress = egress;
        // Engines give up on an unreachable state endpoint at once.
        config.state_retry_window = Duration::ZERO;
        let (stop, stopped) = oneshot::channel::<()>();
        let pool = tokio::spawn(run_workers(config, 1, async {
            let _ = stopped.await;
        }));
        Harness {
            server,
            dir,
            engine,
            repo,
            stop: Some(stop),
            pool,
        }
    }

    fn work_dir(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// A plan lease of the harness repository on the fake engine.
    fn lease(&self, run: &str) -> bosun_api::Lease {
        self.server.lease(run, &self.repo.url(), Some(&self.engine))
    }

    async fn wait_events(&self, run: &str, want: &[&str]) {
        let server = self.server.clone();
        wait_for(&format!("events {want:?} of {run}"), WAIT, || {
            server.fake().event_names(run) == want
        })
        .await;
    }

    async fn wait_log(&self, run: &str, text: &str) {
        let server = self.server.clone();
        wait_for(&format!("{text:?} in the log of {run}"), WAIT, || {
            server
                .fake()
                .logs
                .get(run)
                .is_some_and(|l| l.values().any(|t| t.contains(text)))
        })
        .await;
    }

    fn last_event(&self, run: &str) -> Value {
        self.server.fake().events(run).pop().unwrap()
    }

    fn log(&self, run: &str) -> String {
        self.server.fake().log_text(run)
    }

    /// Stops the pool (abandoning any phase), checks it ended well and left no workspace.
    async fn finish(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(WAIT, &mut self.pool)
            .await
            .expect("the pool did not stop")
            .unwrap()
            .unwrap();
        let left: Vec<_> = std::fs::read_dir(self.work_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "workspaces left behind: {left:?}");
    }
}

fn env_keys(log: &str) -> BTreeSet<String> {
    log.lines()
        .filter_map(|l| l.strip_prefix("env: "))
        .filter_map(|l| l.split_once('=').map(|(k, _)| k.to_string()))
        // What the shell itself adds.
        .filter(|k| !matches!(k.as_str(), "PWD" | "SHLVL" | "_" | "OLDPWD"))
        .collect()
}

#[tokio::test]
async fn proposed_plans_do_not_take_the_state_lock() {
    let h = Harness::start(Duration::from_secs(5)).await;
    h.repo.commit(&[("infra/main.tf", "# fake\n")]);
    let mut lease = h.lease("run-p");
    lease.path = "infra".into();
    lease.kind = "proposed".into();
    h.server.push(lease);
    h.wait_events("run-p", &["started", "planned"]).await;
    let log = h.log("run-p");
    assert!(
        log.contains("-detailed-exitcode -lock=false\n"),
        "a proposed plan runs without the lock: {log}"
    );
}

/// A stack whose engine is `auto` (the default) runs the engine the runner has, and the
/// run's log says which and where.
#[tokio::test]
async fn an_auto_engine_runs_and_its_log_names_the_engine_chosen() {
    let h = Harness::start(Duration::from_secs(5)).await;
    h.repo.commit(&[("main.tf", "# fake\n")]);
    let mut lease = h.lease("run-auto");
    lease.engine = "auto".into();
    let binary = lease
        .engine_binary
        .clone()
        .expect("the harness names its engine binary");
    h.server.push(lease);
    h.wait_events("run-auto", &["started", "planned"]).await;
    let log = h.log("run-auto");
    assert!(
        log.contains(&format!("bosun: engine auto: tofu ({binary})\n")),
        "{log}"
    );
    assert!(log.contains("$ tofu init"), "{log}");
    h.finish().await;
}

#[tokio::test]
async fn the_plans_json_is_uploaded_only_when_the_server_says_policies_read_it() {
    let h = Harness::start(Duration::from_secs(5)).await;
    h.repo.commit(&[("main.tf", "# fake\n")]);
    let mut lease = h.lease("run-quiet");
    lease.plan_json = false;
    h.server.push(lease);
    h.wait_events("run-quiet", &["started", "planned"]).await;
    assert!(h.server.fake().plans.contains_key("run-quiet"));
    assert!(
        !h.server.fake().plan_jsons.contains_key("run-quiet"),
        "no policy reads it: not uploaded"
    );
    h.finish().await;
}

#[tokio::test]
async fn plan_then_apply_with_a_minimal_environment() {
    let h = Harness::start(Duration::from_secs(5)).await;
    h.repo.commit(&[("README", "hi\n")]);
    let head = h.repo.commit(&[("infra/main.tf", "# fake\n")]);
    let mut lease = h.lease("run-1");
    lease.path = "infra".into();
    lease.env.insert("FAKE_PLAN_TAG".into(), "abc".into());
    lease.env.insert("TF_VAR_region".into(), "eu".into());
    h.server.push(lease.clone());
    h.wait_events("run-1", &["started", "planned"]).await;

    let events = h.server.fake().events("run-1");
    assert_eq!(events[0]["commit"], head.as_str());
    assert_eq!(events[0]["fencing"], 1);
    let summary = &events[1]["summary"];
    assert_eq!(summary["has_changes"], true);
    assert_eq!(summary["output_changes"]["x"], "create");
    assert_eq!(
        h.server.fake().plans.get("run-1").map(Vec::as_slice),
        Some(&b"plan-bytes-abc\n"[..])
    );
    // The plan's JSON as `show -json` printed it, for the server's policies.
    let shown: serde_json::Value =
        serde_json::from_slice(&h.server.fake().plan_jsons["run-1"]).unwrap();
    assert_eq!(
        shown["output_changes"]["x"]["actions"][0], "create",
        "{shown}"
    );
    let log = h.log("run-1");
    assert!(
        log.contains("$ terraform init -input=false -no-color\n"),
        "{log}"
    );
    assert!(log
        .contains("$ terraform plan -input=false -no-color -out=plan.tfplan -detailed-exitcode\n"));
    assert!(log.contains(&format!("bosun: checked out {head}\n")));
    assert!(log.contains("fake: planned\n"));
    assert!(log.contains("Plan: 0 to add, 0 to change, 0 to destroy. Outputs: 1 to create.\n"));
    assert!(log.contains(&format!(
        "override:     address        = \"{}/state/net\"\n",
        h.server.url
    )));
    assert!(log.contains("override:     lock_method    = \"LOCK\"\n"));
    assert!(log.contains("env: TF_HTTP_PASSWORD=run-token-run-1\n"));
    assert!(log.contains("env: TF_INPUT=0\n"));
    assert!(log.contains("env: TF_VAR_region=eu\n"));
    let home = format!(
        "env: HOME={}\n",
        h.work_dir().join("run-1-plan-1").display()
    );
    assert!(log.contains(&home), "{log}");
    let expected: BTreeSet<String> = [
        "PATH",
        "HOME",
        "TF_IN_AUTOMATION",
        "TF_INPUT",
        "CHECKPOINT_DISABLE",
        "TF_HTTP_PASSWORD",
        "TF_HTTP_RETRY_MAX",
        "TF_HTTP_RETRY_WAIT_MIN",
        "TF_HTTP_RETRY_WAIT_MAX",
        "FAKE_PLAN_TAG",
        "TF_VAR_region",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(env_keys(&log), expected);
    assert!(h
        .server
        .fake()
        .heartbeats
        .get("run-1")
        .is_some_and(|n| *n >= 1));

    // The apply phase: a new fencing number, the planned commit, the uploaded plan file.
    h.repo.commit(&[("infra/main.tf", "# a newer commit\n")]);
    let mut apply = lease;
    apply.phase = "apply".into();
    apply.fencing = 2;
    apply.commit = Some(head.clone());
    h.server.push(apply);
    h.wait_events("run-1", &["started", "planned", "started", "applied"])
        .await;
    let events = h.server.fake().events("run-1");
    assert_eq!(events[2]["commit"], head.as_str());
    assert_eq!(events[3]["fencing"], 2);
    // One log across both phases, numbered without gaps (log_text checks).
    let log = h.log("run-1");
    assert!(log.contains("apply phase of run run-1 on default/net (fencing 2)"));
    assert!(log.contains("$ terraform apply -input=false -no-color plan.tfplan\n"));
    assert!(log.contains("fake: applying plan-bytes-abc\n"));
    assert!(log.contains("bosun: apply finished\n"));
    assert_eq!(h.server.fake().registered, ["test-runner"]);
    h.finish().await;
}

#[tokio::test]
async fn a_named_commit_is_checked_out() {
    let h = Harness::start(Duration::from_secs(5)).await;
    let first = h.repo.commit(&[("main.tf", "# one\n")]);
    h.repo.commit(&[("main.tf", "# two\n")]);
    let mut lease = h.lease("run-c");
    lease.commit = Some(first.clone());
    h.server.push(lease);
    h.wait_events("run-c", &["started", "planned"]).await;
    assert_eq!(h.server.fake().events("run-c")[0]["commit"], first.as_str());
    h.finish().await;
}

#[tokio::test]
async fn cancel_interrupts_the_engine_and_reports_canceled() {
    let h = Harness::start(Duration::from_secs(30)).await;
    h.repo.commit(&[("main.tf", "# x\n")]);
    let mut lease = h.lease("run-x");
    lease.env.insert("FAKE_MODE".into(), "sleep".into());
    h.server.push(lease);
    h.wait_log("run-x", "fake: sleeping").await;
    h.server.fake().cancel.insert("run-x".into());
    h.wait_events("run-x", &["started", "canceled"]).await;
    let log = h.log("run-x");
    // The engine got the interrupt (it traps it), well before the 30 s grace.
    assert!(log.contains("fake: interrupted\n"), "{log}");
    assert!(log.contains("bosun: plan phase canceled\n"));
    assert!(h.server.fake().plans.is_empty());
    h.finish().await;
}

#[tokio::test]
async fn a_phase_past_its_timeout_is_killed_and_reported() {
    let h = Harness::start(Duration::from_millis(300)).await;
    h.repo.commit(&[("main.tf", "# x\n")]);
    let mut lease = h.lease("run-t");
    lease.timeout_seconds = 2;
    lease.env.insert("FAKE_MODE".into(), "stubborn".into());
    h.server.push(lease);
    h.wait_events("run-t", &["started", "timed_out"]).await;
    let log = h.log("run-t");
    assert!(
        log.contains("did not stop within 300ms of the interrupt; killing it"),
        "{log}"
    );
    assert!(log.contains("bosun: plan phase timed out after 2s\n"));
    h.finish().await;
}

#[tokio::test]
async fn a_fenced_lease_is_dropped_without_a_report() {
    let h = Harness::start(Duration::from_secs(30)).await;
    h.repo.commit(&[("main.tf", "# x\n")]);
    let mut lease = h.lease("run-f");
    lease.env.insert("FAKE_MODE".into(), "stubborn".into());
    h.server.push(lease);
    h.wait_log("run-f", "fake: sleeping").await;
    h.server.fake().fenced.insert("run-f".into());
    // The worker kills the stubborn engine at once (no 30 s grace) and takes new work.
    h.server.push(h.lease("run-next"));
    h.wait_events("run-next", &["started", "planned"]).await;
    assert_eq!(h.server.fake().event_names("run-f"), ["started"]);
    h.finish().await;
}

#[tokio::test]
async fn a_failing_command_is_reported_with_its_error_line() {
    let h = Harness::start(Duration::from_secs(5)).await;
    h.repo.commit(&[("main.tf", "# x\n")]);
    let mut lease = h.lease("run-e");
    lease.env.insert("FAKE_MODE".into(), "fail".into());
    h.server.push(lease);
    h.wait_events("run-e", &["started", "failed"]).await;
    assert_eq!(
        h.last_event("run-e")["reason"],
        "`terraform plan` failed (exit code 1): Error: boom"
    );
    let log = h.log("run-e");
    assert!(log.contains("Error: boom\n  on main.tf line 1\n"), "{log}");
    h.finish().await;
}

#[tokio::test]
async fn sources_and_engines_that_cannot_work_fail_clearly() {
    let h = Harness::start(Duration::from_secs(5)).await;
    h.repo.commit(&[("main.tf", "# x\n")]);

    let mut lease = h.lease("run-gh");
    lease.repository = "github:acme/infra".into();
    h.server.push(lease);
    h.wait_events("run-gh", &["failed"]).await;
    let reason = h.last_event("run-gh")["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        reason,
        "the server sent no clone address for github:acme/infra; is the GitHub App \
         configured on the server?"
    );

    let mut lease = h.lease("run-nobin");
    lease.engine_binary = Some("/nonexistent/tofu".into());
    h.server.push(lease);
    h.wait_events("run-nobin", &["failed"]).await;
    let reason = h.last_event("run-nobin")["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        reason.contains("\"/nonexistent/tofu\" was not found"),
        "{reason}"
    );

    let mut lease = h.lease("run-norepo");
    lease.repository = format!("file://{}", h.dir.path().join("missing").display());
    h.server.push(lease);
    h.wait_events("run-norepo", &["failed"]).await;
    let reason = h.last_event("run-norepo")["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(reason.starts_with("`git clone file://"), "{reason}");

    let mut lease = h.lease("run-nopath");
    lease.path = "no/such/dir".into();
    h.server.push(lease);
    h.wait_events("run-nopath", &["failed"]).await;
    let reason = h.last_event("run-nopath")["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        reason.contains("\"no/such/dir\" is not a directory"),
        "{reason}"
    );
    h.finish().await;
}

/// Files under `dir` (recursively) whose contents hold any of `needles`.
fn files_containing(dir: &Path, needles: &[&str]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                todo.push(entry.path());
            } else if kind.is_file() {
                let bytes = std::fs::read(entry.path()).unwrap();
                let text = String::from_utf8_lossy(&bytes);
                if needles.iter().any(|n| text.contains(n)) {
                    found.push(entry.path());
                }
            }
        }
    }
    found
}

#[tokio::test]
async fn github_repositories_clone_with_the_lease_token_and_never_show_it() {
    let h = Harness::start(Duration::from_secs(5)).await;
    h.repo.commit(&[("main.tf", "# main\n")]);
    // A pull request's head: on no branch, so the runner has to fetch it by its SHA.
    git(&h.repo.dir, &["checkout", "--quiet", "-b", "pr"]);
    let pr_head = h.repo.commit(&[("main.tf", "# pull request\n")]);
    git(&h.repo.dir, &["checkout", "--quiet", "main"]);
    git(&h.repo.dir, &["update-ref", "refs/pull/1/head", &pr_head]);
    git(&h.repo.dir, &["branch", "--quiet", "-D", "pr"]);
    git(
        &h.repo.dir,
        &["config", "uploadpack.allowAnySHA1InWant", "true"],
    );
    let token = "ghs_T0kenForThisOneRepository";
    // What git sends: base64("x-access-token:<token>").
    let credential = {
        let out = std::process::Command::new("base64")
            .arg("-w0")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write as _;
                child
                    .stdin
                    .take()
                    .unwrap()
                    .write_all(format!("{TOKEN_USER}:{token}").as_bytes())?;
                child.wait_with_output()
            })
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let secrets = [token, credential.as_str()];
    let server = GitHttpServer::start(h.dir.path(), token).await;
    let clone_url = format!("{}/repo", server.url);

    let mut lease = h.lease("run-gh");
    lease.repository = "github:acme/infra".into();
    lease.clone_url = Some(clone_url.clone());
    lease.clone_token = Some(token.into());
    lease.commit = Some(pr_head.clone());
    // The engine holds still while the workspace is inspected, and prints the token
    // (its env dump shows FAKE_ECHO): the log must mask it.
    lease.env.insert("FAKE_MODE".into(), "sleep".into());
    lease
        .env
        .insert("FAKE_ECHO".into(), format!("echo {token} echo"));
    h.server.push(lease);
    h.wait_log("run-gh", "fake: sleeping").await;

    // The checkout's remote is the plain clone URL; no file of the workspace (the
    // repository's .git/config included) holds the token.
    let ws = h.work_dir().join("run-gh-plan-1");
    let config = std::fs::read_to_string(ws.join("src/.git/config")).unwrap();
    assert!(config.contains(&format!("url = {clone_url}\n")), "{config}");
    assert_eq!(files_containing(&ws, &secrets), Vec::<PathBuf>::new());

    h.server.fake().cancel.insert("run-gh".into());
    h.wait_events("run-gh", &["started", "canceled"]).await;
    assert_eq!(
        h.server.fake().events("run-gh")[0]["commit"],
        pr_head.as_str()
    );
    // Every request git made carried the token: the clone's and the fetch's.
    let requests = server.requests();
    assert!(requests.iter().all(|r| r.authorized), "{requests:?}");
    let upload_packs = requests
        .iter()
        .filter(|r| r.method == "POST" && r.path == "/repo/git-upload-pack")
        .count();
    assert!(upload_packs >= 2, "{requests:?}");

    let log = h.log("run-gh");
    assert!(
        log.contains(&format!(
            "$ git clone --quiet --branch main -- {clone_url} src\n"
        )),
        "{log}"
    );
    assert!(log.contains(&format!(
        "bosun: commit {pr_head} is not on a branch; fetching it\n"
    )));
    assert!(log.contains("env: FAKE_ECHO=echo *** echo\n"), "{log}");
    // The engine got none of git's environment.
    assert!(
        env_keys(&log).iter().all(|k| !k.starts_with("GIT_")),
        "{log}"
    );

    // A wrong token: the clone fails at once, without a prompt, and says so.
    let wrong = "ghs_WrongTokenWrongTokenWrong";
    let mut lease = h.lease("run-gh-wrong");
    lease.repository = "github:acme/infra".into();
    lease.clone_url = Some(clone_url.clone());
    lease.clone_token = Some(wrong.into());
    h.server.push(lease);
    h.wait_events("run-gh-wrong", &["failed"]).await;
    let reason = h.last_event("run-gh-wrong")["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        reason.starts_with(&format!("`git clone {clone_url}` failed (exit code 128)")),
        "{reason}"
    );
    assert!(reason.contains("refused the clone token"), "{reason}");
    let requests = server.requests();
    assert!(requests.iter().any(|r| !r.authorized), "{requests:?}");

    // No chunk of either log, and no report, ever held a token.
    {
        let fake = h.server.fake();
        for run in ["run-gh", "run-gh-wrong"] {
            for (seq, text) in &fake.logs[run] {
                for secret in secrets.iter().chain([&wrong]) {
                    assert!(!text.contains(secret), "{run} chunk {seq}: {text}");
                }
            }
        }
        for (run, _, report) in &fake.reports {
            let report = report.to_string();
            assert!(
                !report.contains(token) && !report.contains(wrong),
                "{run}: {report}"
            );
        }
    }
    h.finish().await;
}

#[tokio::test]
async fn logs_survive_failed_requests_without_loss_or_duplication() {
    let h = Harness::start(Duration::from_secs(5)).await;
    h.repo.commit(&[("main.tf", "# x\n")]);
    h.server.fake().fail_log_requests = 3;
    h.server.push(h.lease("run-l"));
    h.wait_events("run-l", &["started", "planned"]).await;
    let log = h.log("run-l");
    for line in ["fake: init\n", "fake: planned\n", "bosun: plan finished\n"] {
        assert_eq!(log.matches(line).count(), 1, "{line:?} in {log}");
    }
    assert!(h.server.fake().log_requests > 3);
    h.finish().await;
}

#[tokio::test]
async fn shutdown_abandons_a_running_phase_and_reports_it() {
    let h = Harness::start(Duration::from_secs(5)).await;
    h.repo.commit(&[("main.tf", "# x\n")]);
    let mut lease = h.lease("run-s");
    lease.env.insert("FAKE_MODE".into(), "sleep".into());
    h.server.push(lease);
    h.wait_log("run-s", "fake: sleeping").await;
    let server = h.server.clone();
    h.finish().await;
    assert_eq!(server.fake().event_names("run-s"), ["started", "failed"]);
    let events = server.fake().events("run-s");
    assert_eq!(
        events[1]["reason"],
        "runner test-runner shut down during the plan phase"
    );
    assert!(server
        .fake()
        .log_text("run-s")
        .contains("fake: interrupted\n"));
}

#[tokio::test]
async fn a_refused_token_stops_the_runner() {
    let server = FakeServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = RunnerConfig::new(server.url.clone(), "wrong", "r", dir.path().join("w"));
    let result = tokio::time::timeout(WAIT, run_workers(config, 2, std::future::pending::<()>()))
        .await
        .unwrap();
    match result {
        Err(RunnerError::Refused { name, reason }) => {
            assert!(name.starts_with("r-"), "{name}");
            assert!(reason.contains("401"), "{reason}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

// ---- run identity, integrations and masking --------------------------------------------

/// An AWS web identity integration.
fn aws(name: &str, audience: &str, role: &str) -> RunnerIntegration {
    RunnerIntegration::AwsWebIdentity {
        name: name.to_string(),
        role_arn: format!("arn:aws:iam::123456789012:role/{role}"),
        audience: audience.to_string(),
        session_name: format!("bosun-{role}"),
    }
}

/// The environment the fake engine wrote for `subcommand` into `out`.
fn engine_env_file(out: &Path, subcommand: &str) -> BTreeMap<String, String> {
    std::fs::read_to_string(out.join(format!("env-{subcommand}")))
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Asserts that no stored chunk of `run`'s log, nor the whole log, nor any report holds
/// any of `secrets`.
fn assert_never_shown(server: &FakeServer, run: &str, secrets: &[String]) {
    let fake = server.fake();
    let whole = fake.log_text(run);
    for secret in secrets {
        assert!(!secret.is_empty());
        assert!(
            !whole.contains(secret.as_str()),
            "{secret} in the log: {whole}"
        );
        for (seq, text) in &fake.logs[run] {
            assert!(!text.contains(secret.as_str()), "{secret} in chunk {seq}");
        }
        for (r, _, report) in &fake.reports {
            assert!(
                !report.to_string().contains(secret.as_str()),
                "{r}: {report}"
            );
        }
    }
}

impl Harness {
    /// A directory (outside the work dir) where the fake engine writes what it saw.
    fn engine_out(&self, run: &str) -> PathBuf {
        let out = self.dir.path().join(format!("out-{run}"));
        std::fs::create_dir_all(&out).unwrap();
        out
    }
}

#[tokio::test]
async fn the_engine_gets_the_run_identity_and_an_aws_web_identity_token_file() {
    use std::os::unix::fs::PermissionsExt as _;
    let h = Harness::start(Duration::from_secs(5)).await;
    h.repo.commit(&[("main.tf", "# x\n")]);
    let out = h.engine_out("run-i");
    let mut lease = h.lease("run-i");
    h.server.with_identity(&mut lease);
    lease.integrations = vec![aws("aws (plan role)", "sts.amazonaws.com", "plan")];
    // A stack variable cannot replace the run identity's request token.
    lease.env.insert(
        "BOSUN_ID_TOKEN_REQUEST_TOKEN".into(),
        "from-the-stack".into(),
    );
    lease.env.insert("FAKE_MODE".into(), "sleep".into());
    lease
        .env
        .insert("FAKE_OUT".into(), out.display().to_string());
    let request_token = lease.id_token_request_token.clone();
    h.server.push(lease);
    // The engine holds still while its token file is inspected.
    h.wait_log("run-i", "fake: sleeping").await;

    let env = engine_env_file(&out, "init");
    assert_eq!(
        env["BOSUN_ID_TOKEN_REQUEST_URL"],
        format!("{}/id-token", h.server.url)
    );
    assert_eq!(env["BOSUN_ID_TOKEN_REQUEST_TOKEN"], request_token);
    assert_eq!(env["AWS_ROLE_ARN"], "arn:aws:iam::123456789012:role/plan");
    assert_eq!(env["AWS_ROLE_SESSION_NAME"], "bosun-plan");
    let ws = h.work_dir().join("run-i-plan-1");
    let token_file = PathBuf::from(&env["AWS_WEB_IDENTITY_TOKEN_FILE"]);
    assert!(token_file.starts_with(&ws), "{}", token_file.display());
    assert!(
        !token_file.starts_with(ws.join("src")),
        "{}",
        token_file.display()
    );
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let issued = h.server.fake().issued_id_tokens.clone();
    assert_eq!(issued.len(), 1, "one token, no refresh yet");
    assert_eq!(std::fs::read_to_string(&token_file).unwrap(), issued[0]);
    assert_eq!(
        std::fs::read_to_string(out.join("token-init")).unwrap(),
        issued[0]
    );
    assert_eq!(issued[0].split('.').count(), 3, "JWT-shaped: {}", issued[0]);
    // The token was asked for with the lease's request token, never the pool token.
    assert_eq!(
        h.server.fake().id_token_requests,
        [(
            format!("Bearer {request_token}"),
            "sts.amazonaws.com".to_string()
        )]
    );

    h.server.fake().cancel.insert("run-i".into());
    h.wait_events("run-i", &["started", "canceled"]).await;
    let log = h.log("run-i");
    let ok = log
        .find("bosun: integration aws (plan role): ok\n")
        .unwrap();
    let checked_out = log.find("bosun: checked out ").unwrap();
    let init = log.find("$ terraform init").unwrap();
    assert!(checked_out < ok && ok < init, "{log}");
    assert!(
        log.contains("env: BOSUN_ID_TOKEN_REQUEST_TOKEN=***\n"),
        "{log}"
    );
    assert!(log.contains("token: ***\n"), "{log}");
    assert_never_shown(&h.server, "run-i", &[request_token, issued[0].clone()]);
    h.finish().await;
}

#[tokio::test]
async fn a_failing_integration_fails_the_phase_before_the_engine_starts() {
    let h = Harness::start(Duration::from_secs(5)).await;
    h.repo.commit(&[("main.tf", "# x\n")]);
    h.server.fake().refused_audiences.insert(
        "sts.refused".into(),
        "stack net may not assume this role".into(),
    );
    let out = h.engine_out("run-r");
    let mut lease = h.lease("run-r");
    h.server.with_identity(&mut lease);
    lease.integrations = vec![
        aws("aws (first)", "sts.first", "first"),
        aws("aws (apply role)", "sts.refused", "apply"),
        aws("aws (never)", "sts.never", "never"),
    ];
    lease
        .env
        .insert("FAKE_OUT".into(), out.display().to_string());
    h.server.push(lease);
    h.wait_events("run-r", &["failed"]).await;

    assert_eq!(
        h.last_event("run-r")["reason"],
        "integration aws (apply role) failed: cannot get an ID token for audience \
         \"sts.refused\": the server answered 403 Forbidden: stack net may not assume this \
         role (code: forbidden)"
    );
    // The engine never ran, and the integrations stopped at the failing one.
    assert!(!out.join("invocations").exists());
    let audiences: Vec<String> = h
        .server
        .fake()
        .id_token_requests
        .iter()
        .map(|(_, a)| a.clone())
        .collect();
    assert_eq!(audiences, ["sts.first", "sts.refused"]);
    let log = h.log("run-r");
    assert!(
        log.contains("bosun: integration aws (first): ok\n"),
        "{log}"
    );
    assert!(!log.contains("aws (never)"), "{log}");
    assert!(
        log.contains("bosun: plan phase failed: integration aws (apply role) failed: "),
        "{log}"
    );
    assert!(!log.contains("$ terraform"), "{log}");

    // A lease with an integration but no run identity fails the same way.
    let mut lease = h.lease("run-noid");
    lease.integrations = vec![aws("aws (plan role)", "sts.amazonaws.com", "plan")];
    h.server.push(lease);
    h.wait_events("run-noid", &["failed"]).await;
    let reason = h.last_event("run-noid")["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        reason.starts_with(
            "integration aws (plan role) failed: the server gave this run no identity"
        ),
        "{reason}"
    );
    h.finish().await;
}

#[tokio::test]
async fn integrations_run_in_lease_order() {
    let h = Harness::start(Duration::from_secs(5)).await;
    h.repo.commit(&[("main.tf", "# x\n")]);
    let out = h.engine_out("run-o");
    let mut lease = h.lease("run-o");
    h.server.with_identity(&mut lease);
    lease.integrations = vec![
        aws("zeta", "aud-zeta", "zeta"),
        aws("alpha", "aud-alpha", "alpha"),
    ];
    lease
        .env
        .insert("FAKE_OUT".into(), out.display().to_string());
    h.server.push(lease);
    h.wait_events("run-o", &["started", "planned"]).await;

    let log = h.log("run-o");
    let zeta = log.find("bosun: integration zeta: ok\n").unwrap();
    let alpha = log.find("bosun: integration alpha: ok\n").unwrap();
    let init = log.find("$ terraform init").unwrap();
    assert!(zeta < alpha && alpha < init, "{log}");
    let audiences: Vec<String> = h
        .server
        .fake()
        .id_token_requests
        .iter()
        .map(|(_, a)| a.clone())
        .collect();
    assert_eq!(audiences, ["aud-zeta", "aud-alpha"]);
    // The later integration's variables win; each has its own token file.
    let env = engine_env_file(&out, "plan");
    assert_eq!(env["AWS_ROLE_ARN"], "arn:aws:iam::123456789012:role/alpha");
    let issued = h.server.fake().issued_id_tokens.clone();
    assert_eq!(
        std::fs::read_to_string(out.join("token-plan")).unwrap(),
        issued[1]
    );
    assert_never_shown(&h.server, "run-o", &issued);
    h.finish().await;
}

#[tokio::test]
async fn mask_values_never_reach_the_log_or_the_reason() {
    let h = Harness::start(Duration::from_secs(5)).await;
    h.repo.commit(&[("main.tf", "# x\n")]);
    let one = "mask-value-one-1234";
    let two = "other-secret-5678";
    let mut lease = h.lease("run-m");
    lease.mask = vec![one.into(), two.into(), "ab".into(), String::new()];
    // Printed by the engine (its environment dump) on one line, …
    lease
        .env
        .insert("FAKE_PRINT".into(), format!("x {one} y {two} z ab"));
    // … cut by the runner inside a value (a line over 64 KiB), …
    lease.env.insert("FAKE_LONG_PRINT".into(), one.into());
    // … and quoted in the failure reason.
    lease.env.insert("FAKE_MODE".into(), "fail".into());
    lease
        .env
        .insert("FAKE_FAIL_MESSAGE".into(), format!("cannot use {two}"));
    h.server.push(lease);
    h.wait_events("run-m", &["started", "failed"]).await;

    assert_eq!(
        h.last_event("run-m")["reason"],
        "`terraform plan` failed (exit code 1): Error: cannot use ***"
    );
    let log = h.log("run-m");
    assert!(log.contains("env: FAKE_PRINT=x *** y *** z ab\n"), "{log}");
    assert!(log.contains("x\n*** and more\n"), "the long line's end");
    assert!(
        log.contains("bosun: 1 secret value(s) shorter than 4 bytes are not masked"),
        "{log}"
    );
    assert!(log.contains("Error: cannot use ***\n"), "{log}");
    // The long line spans several stored chunks.
    assert!(h.server.fake().logs["run-m"].len() > 4);
    assert_never_shown(&h.server, "run-m", &[one.to_string(), two.to_string()]);
    h.finish().await;
}

#[tokio::test]
async fn the_token_file_is_refreshed_while_the_engine_runs() {
    use std::os::unix::fs::PermissionsExt as _;
    let h = Harness::start(Duration::from_secs(5)).await;
    h.repo.commit(&[("main.tf", "# x\n")]);
    h.server.fake().id_token_lifetime = Some(3);
    let out = h.engine_out("run-fresh");
    let mut lease = h.lease("run-fresh");
    h.server.with_identity(&mut lease);
    lease.integrations = vec![aws("aws", "sts.amazonaws.com", "plan")];
    lease.env.insert("FAKE_MODE".into(), "sleep".into());
    lease
        .env
        .insert("FAKE_OUT".into(), out.display().to_string());
    h.server.push(lease);
    h.wait_log("run-fresh", "fake: sleeping").await;

    let env = engine_env_file(&out, "init");
    let token_file = PathBuf::from(&env["AWS_WEB_IDENTITY_TOKEN_FILE"]);
    let first = std::fs::read_to_string(&token_file).unwrap();
    assert_eq!(first, h.server.fake().issued_id_tokens[0]);
    // A 3 s token is replaced after about 2 s, while the engine still runs.
    wait_for("the token file to be rewritten", WAIT, || {
        std::fs::read_to_string(&token_file).is_ok_and(|t| t != first)
    })
    .await;
    let second = std::fs::read_to_string(&token_file).unwrap();
    let issued = h.server.fake().issued_id_tokens.clone();
    assert!(
        issued[1..].contains(&second),
        "{second} not issued: {issued:?}"
    );
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    h.wait_log(
        "run-fresh",
        "bosun: integration aws: identity token refreshed",
    )
    .await;
    // Every refresh asked with the lease's request token.
    let requests = h.server.fake().id_token_requests.clone();
    assert!(requests.len() >= 2);
    assert!(requests
        .iter()
        .all(|(auth, _)| auth == "Bearer idreq-run-fresh-Secret"));

    h.server.fake().cancel.insert("run-fresh".into());
    h.wait_events("run-fresh", &["started", "canceled"]).await;
    // Refreshing ends with the phase: no request after the report.
    let asked = h.server.fake().id_token_requests.len();
    let issued = h.server.fake().issued_id_tokens.clone();
    assert_never_shown(&h.server, "run-fresh", &issued);
    let server = h.server.clone();
    h.finish().await;
    assert_eq!(server.fake().id_token_requests.len(), asked);
}

// ---- the real Terraform ---------------------------------------------------------------

#[tokio::test]
async fn terraform_plans_and_applies_through_the_http_backend() {
    let Some(terraform) = terraform_or_skip() else {
        return;
    };
    let h = Harness::start(Duration::from_secs(10)).await;
    let config = r#"
        terraform {
          backend "local" {}
        }
        variable "name" { type = string }
        output "greeting" { value = "hello ${var.name}" }
        output "answer" { value = 42 }
    "#;
    let head = h.repo.commit(&[("stacks/net/main.tf", config)]);
    let mut lease = h
        .server
        .lease("run-tf", &h.repo.url(), Some(Path::new(&terraform)));
    lease.path = "stacks/net".into();
    lease.env.insert("TF_VAR_name".into(), "bosun".into());
    h.server.push(lease.clone());
    h.wait_events("run-tf", &["started", "planned"]).await;
    let summary = h.server.fake().events("run-tf")[1]["summary"].clone();
    assert_eq!(summary["has_changes"], true, "{}", h.log("run-tf"));
    assert_eq!(summary["output_changes"]["greeting"], "create");
    assert_eq!(summary["output_changes"]["answer"], "create");
    assert_eq!(summary["add"], 0);
    let log = h.log("run-tf");
    // The override replaced the code's own local backend.
    assert!(
        log.contains("Successfully configured the backend \"http\""),
        "{log}"
    );

    let mut apply = lease;
    apply.phase = "apply".into();
    apply.fencing = 2;
    apply.commit = Some(head);
    h.server.push(apply);
    h.wait_events("run-tf", &["started", "planned", "started", "applied"])
        .await;
    let state: Value = serde_json::from_slice(h.server.fake().states.get("net").unwrap()).unwrap();
    assert_eq!(state["outputs"]["greeting"]["value"], "hello bosun");
    assert_eq!(state["outputs"]["answer"]["value"], 42);
    {
        let fake = h.server.fake();
        let passwords: Vec<&String> = fake.state_passwords.iter().collect();
        assert_eq!(passwords, ["run-token-run-tf"]);
        assert!(fake.state_methods.iter().any(|m| m == "LOCK"));
        assert!(fake.state_methods.iter().any(|m| m == "UNLOCK"));
    }
    let log = h.log("run-tf");
    assert!(log.contains("Apply complete!"), "{log}");
    h.finish().await;
}

// ---- the egress sandbox, with the real Terraform --------------------------------------

/// A state document with one output, as a remote state the configurations read.
fn state_with_greeting(greeting: &str) -> Vec<u8> {
    json!({
        "version": 4, "terraform_version": "1.0.3", "serial": 1, "lineage": "egress-test",
        "outputs": {"greeting": {"value": greeting, "type": "string"}}, "resources": [],
    })
    .to_string()
    .into_bytes()
}

/// A configuration that reads `address` as a remote state and outputs its greeting.
fn reads_remote_state(name: &str, address: &str) -> String {
    format!(
        r#"
        data "terraform_remote_state" "{name}" {{
          backend = "http"
          config = {{
            address  = "{address}"
            username = "bosun"
            password = "any"
          }}
        }}
        output "{name}" {{ value = data.terraform_remote_state.{name}.outputs.greeting }}
        "#
    )
}

/// Plans `config` as stack `stack` on the harness's runner; waits for the plan's end.
async fn plan_config(h: &Harness, terraform: &Path, run: &str, config: &str) -> Value {
    h.repo.commit(&[(&format!("stacks/{run}/main.tf"), config)]);
    let mut lease = h.server.lease(run, &h.repo.url(), Some(terraform));
    lease.path = format!("stacks/{run}");
    h.server.push(lease);
    let server = h.server.clone();
    let run_id = run.to_string();
    wait_for(&format!("the end of {run}"), WAIT, || {
        server.fake().event_names(&run_id).len() >= 2
    })
    .await;
    h.last_event(run)
}

fn restricted(allow: Vec<AllowRule>) -> EgressMode {
    EgressMode::Restricted(EgressPolicy { allow })
}

#[tokio::test]
async fn a_sandboxed_engine_reads_bosun_state_but_not_private_or_metadata_endpoints() {
    let Some(terraform) = terraform_or_skip() else {
        return;
    };
    if !namespaces_or_skip() {
        return;
    }
    let private = TestNet::start(state_with_greeting("from the private network")).await;
    // A service on this machine's loopback that the engine's client would reach directly
    // (Go does not proxy loopback): in the sandbox, that loopback is not this machine's.
    let local = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let local_port = local.local_addr().unwrap().port();
    let h = Harness::start_with(Duration::from_secs(10), restricted(vec![])).await;
    h.server
        .fake()
        .states
        .insert("shared".into(), state_with_greeting("from bosun"));

    // Bosun's own state: allowed.
    let from_bosun = reads_remote_state("shared", &format!("{}/state/shared", h.server.url));
    let planned = plan_config(&h, &terraform, "run-bosun", &from_bosun).await;
    assert_eq!(planned["event"], "planned", "{}", h.log("run-bosun"));
    assert_eq!(planned["summary"]["output_changes"]["shared"], "create");
    assert!(planned.get("egress_refusals").is_none(), "{planned}");
    let log = h.log("run-bosun");
    assert!(
        !log.contains("blocked by the hosted egress policy"),
        "{log}"
    );

    // A private endpoint and the metadata address: refused, said in the log, counted.
    let probes = [
        reads_remote_state("private", &format!("http://{}/state", private.addr)),
        reads_remote_state("metadata", "http://169.254.169.254/latest/meta-data/state"),
    ]
    .concat();
    let failed = plan_config(&h, &terraform, "run-probes", &probes).await;
    assert_eq!(failed["event"], "failed", "{failed}");
    let log = h.log("run-probes");
    for line in [
        format!(
            "bosun: blocked by the hosted egress policy: {} is a private address (RFC 1918); \
             use a self-hosted runner pool or a public mirror",
            private.addr
        ),
        "bosun: blocked by the hosted egress policy: 169.254.169.254:80 is the cloud metadata \
         address"
            .to_string(),
    ] {
        assert!(log.contains(&line), "missing {line:?} in:\n{log}");
    }
    assert!(failed["egress_refusals"].as_u64().unwrap() >= 2, "{failed}");
    assert_eq!(
        private.accepted.load(std::sync::atomic::Ordering::Relaxed),
        0
    );

    // A loopback address, which the engine connects to without the proxy: no route.
    let direct = reads_remote_state("direct", &format!("http://127.0.0.1:{local_port}/state"));
    let failed = plan_config(&h, &terraform, "run-direct", &direct).await;
    assert_eq!(failed["event"], "failed", "{failed}");
    let log = h.log("run-direct");
    assert!(log.contains("connection refused"), "{log}");
    local.set_nonblocking(true).unwrap();
    assert!(
        local.accept().is_err(),
        "the machine's loopback service was reached"
    );
    h.finish().await;
}

#[tokio::test]
async fn an_allow_listed_private_endpoint_and_a_self_hosted_runner_reach_it() {
    let Some(terraform) = terraform_or_skip() else {
        return;
    };
    if !namespaces_or_skip() {
        return;
    }
    let private = TestNet::start(state_with_greeting("from the private network")).await;
    let config = reads_remote_state("private", &format!("http://{}/state", private.addr));

    let allowed = restricted(vec![private.addr.to_string().parse().unwrap()]);
    let h = Harness::start_with(Duration::from_secs(10), allowed).await;
    let planned = plan_config(&h, &terraform, "run-allowed", &config).await;
    assert_eq!(planned["event"], "planned", "{}", h.log("run-allowed"));
    assert_eq!(planned["summary"]["output_changes"]["private"], "create");
    h.finish().await;
    assert_eq!(
        private.accepted.load(std::sync::atomic::Ordering::Relaxed),
        1
    );

    // A self-hosted runner is unrestricted: its point is the operator's network.
    let h = Harness::start_with(Duration::from_secs(10), EgressMode::Unrestricted).await;
    let planned = plan_config(&h, &terraform, "run-self-hosted", &config).await;
    assert_eq!(planned["event"], "planned", "{}", h.log("run-self-hosted"));
    let log = h.log("run-self-hosted");
    assert!(!log.contains("egress"), "{log}");
    h.finish().await;
    assert_eq!(
        private.accepted.load(std::sync::atomic::Ordering::Relaxed),
        2
    );
}
