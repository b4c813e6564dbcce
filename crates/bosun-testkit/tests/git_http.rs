//! The GitHub double's git smart HTTP, driven by real `git`: clones with a minted
//! installation token succeed; no token, a revoked, expired or other repository's token,
//! or the wrong user name fail cleanly; a commit reachable only from a PR head ref can be
//! fetched by id; pushes are refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use bosun_testkit::git::git_output;
use bosun_testkit::{app_jwt, BareRepo, GithubDouble, WorkTree};
use serde_json::json;

const APP_ID: i64 = 9;
const INSTALLATION: i64 = 5;

struct Fixture {
    gh: GithubDouble,
    repo: BareRepo,
    main_sha: String,
    root: tempfile::TempDir,
}

fn fixture() -> Fixture {
    let root = tempfile::tempdir().unwrap();
    let repos = root.path().join("repos");
    std::fs::create_dir(&repos).unwrap();
    let repo = BareRepo::create(&repos, "acme/infra");
    BareRepo::create(&repos, "acme/other");
    let wt = repo.work_tree();
    let main_sha = wt.commit(&[("main.tf", "# hello\n")], "first");
    wt.push("main");
    let gh = GithubDouble::start(APP_ID, &repos);
    gh.add_installation(INSTALLATION, "acme", &["acme/infra", "acme/other"]);
    Fixture {
        gh,
        repo,
        main_sha,
        root,
    }
}

impl Fixture {
    /// `http://x-access-token:<token>@127.0.0.1:PORT/<full_name>.git`.
    fn url_with(&self, user: &str, token: &str, full_name: &str) -> String {
        let rest = self.gh.url().strip_prefix("http://").unwrap();
        format!("http://{user}:{token}@{rest}/{full_name}.git")
    }

    /// `git clone` into a new directory under the fixture's temp dir.
    fn clone(&self, url: &str, name: &str, extra: &[&str]) -> (bool, String, std::path::PathBuf) {
        let dest = self.root.path().join(name);
        let mut args = vec!["-c", "credential.helper="];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["clone", "-q", url, dest.to_str().unwrap()]);
        let out = git_output(self.root.path(), &args);
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            dest,
        )
    }

    /// Mints a token through the REST API, as Bosun would.
    fn mint(&self, repo_name: &str) -> String {
        let resp = reqwest::blocking::Client::new()
            .post(format!(
                "{}/app/installations/{INSTALLATION}/access_tokens",
                self.gh.url()
            ))
            .header("Accept", "application/vnd.github+json")
            .header("User-Agent", "bosun-testkit-test")
            .bearer_auth(app_jwt(APP_ID))
            .json(&json!({"repositories": [repo_name], "permissions": {"contents": "read"}}))
            .send()
            .unwrap();
        assert_eq!(resp.status().as_u16(), 201);
        resp.json::<serde_json::Value>().unwrap()["token"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

fn head_of(dir: &Path) -> String {
    bosun_testkit::git::git(dir, &["rev-parse", "HEAD"])
}

#[test]
fn a_minted_token_clones_its_repository() {
    let f = fixture();
    let token = f.mint("infra");
    let (ok, stderr, dest) = f.clone(
        &f.url_with("x-access-token", &token, "acme/infra"),
        "c",
        &[],
    );
    assert!(ok, "{stderr}");
    assert_eq!(head_of(&dest), f.main_sha);
    assert_eq!(
        std::fs::read_to_string(dest.join("main.tf")).unwrap(),
        "# hello\n"
    );

    // git first asks without credentials (as it does of github.com), and sends the URL's
    // only after the 401.
    let all = f.gh.git_requests();
    assert_eq!(all[0].status, 401, "{all:?}");
    assert_eq!(all[0].token, None);
    let reqs = &all[1..];
    assert!(reqs.len() >= 2, "{reqs:?}");
    assert!(
        reqs.iter().all(|r| r.status == 200 && r.refusal.is_none()),
        "{reqs:?}"
    );
    assert!(reqs.iter().all(|r| r.repository == "acme/infra"));
    assert!(reqs
        .iter()
        .all(|r| r.token.as_deref() == Some(token.as_str())));
    assert!(reqs[0]
        .path
        .ends_with("/acme/infra.git/info/refs?service=git-upload-pack"));
    assert!(reqs
        .iter()
        .any(|r| r.method == "POST" && r.path.ends_with("/git-upload-pack")));
}

#[test]
fn protocol_v0_and_the_url_without_dot_git_work_too() {
    let f = fixture();
    let token = f.gh.issue_token(INSTALLATION, "acme/infra");
    let url = f.url_with("x-access-token", &token, "acme/infra");
    let (ok, stderr, dest) = f.clone(&url, "v0", &["-c", "protocol.version=0"]);
    assert!(ok, "{stderr}");
    assert_eq!(head_of(&dest), f.main_sha);
    let bare_url = url.strip_suffix(".git").unwrap();
    let (ok, stderr, dest) = f.clone(bare_url, "nodotgit", &[]);
    assert!(ok, "{stderr}");
    assert_eq!(head_of(&dest), f.main_sha);
}

#[test]
fn clones_without_a_good_token_fail() {
    let f = fixture();
    // No credentials at all: git gets a 401 and, with no prompt and no helper, gives up.
    let plain = f.gh.clone_url("acme/infra");
    let (ok, stderr, _) = f.clone(&plain, "none", &[]);
    assert!(!ok);
    assert!(
        stderr.contains("Authentication failed") || stderr.contains("could not read Username"),
        "{stderr}"
    );

    // A token never issued.
    let fake = "ghs_000000000000000000000000000000000000";
    let (ok, _, _) = f.clone(
        &f.url_with("x-access-token", fake, "acme/infra"),
        "fake",
        &[],
    );
    assert!(!ok);

    // A token for another repository of the same installation.
    let other = f.gh.issue_token(INSTALLATION, "acme/other");
    let (ok, _, _) = f.clone(
        &f.url_with("x-access-token", &other, "acme/infra"),
        "other",
        &[],
    );
    assert!(!ok);

    // A good token under another user name.
    let good = f.gh.issue_token(INSTALLATION, "acme/infra");
    let (ok, _, _) = f.clone(&f.url_with("git", &good, "acme/infra"), "user", &[]);
    assert!(!ok);

    // A revoked token.
    let revoked = f.mint("infra");
    let status = reqwest::blocking::Client::new()
        .delete(format!("{}/installation/token", f.gh.url()))
        .header("Accept", "application/vnd.github+json")
        .header("User-Agent", "t")
        .bearer_auth(&revoked)
        .send()
        .unwrap()
        .status();
    assert_eq!(status.as_u16(), 204);
    let (ok, _, _) = f.clone(
        &f.url_with("x-access-token", &revoked, "acme/infra"),
        "revoked",
        &[],
    );
    assert!(!ok);

    // An expired token.
    let expired = f.gh.issue_token(INSTALLATION, "acme/infra");
    f.gh.expire_token(&expired);
    let (ok, _, _) = f.clone(
        &f.url_with("x-access-token", &expired, "acme/infra"),
        "expired",
        &[],
    );
    assert!(!ok);

    let refusals: Vec<String> =
        f.gh.git_requests()
            .into_iter()
            .filter(|r| r.status == 401)
            .map(|r| r.refusal.unwrap())
            .collect();
    for want in [
        "no basic credentials",
        "never issued",
        "minted for acme/other",
        "not x-access-token",
        "revoked",
        "expired",
    ] {
        assert!(
            refusals.iter().any(|r| r.contains(want)),
            "{want:?} not in {refusals:?}"
        );
    }
    // The good token still works for its own repository.
    let (ok, stderr, _) = f.clone(
        &f.url_with("x-access-token", &good, "acme/infra"),
        "good",
        &[],
    );
    assert!(ok, "{stderr}");
}

#[test]
fn the_401_asks_for_basic_credentials() {
    let f = fixture();
    let resp = reqwest::blocking::get(format!(
        "{}/acme/infra.git/info/refs?service=git-upload-pack",
        f.gh.url()
    ))
    .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    assert_eq!(resp.headers()["www-authenticate"], "Basic realm=\"GitHub\"");
}

#[test]
fn a_commit_reachable_only_from_a_pull_ref_is_fetched_by_id() {
    let f = fixture();
    let wt = WorkTree::new(&f.repo);
    wt.checkout_new_branch("feature");
    let first = wt.commit(&[("feature.tf", "# one\n")], "feature one");
    let second = wt.commit(&[("feature.tf", "# two\n")], "feature two");
    wt.push("feature");
    f.repo.set_ref("refs/pull/7/head", &second);
    wt.delete_remote_branch("feature");
    assert_eq!(f.repo.rev_parse("refs/pull/7/head"), second);

    let token = f.gh.issue_token(INSTALLATION, "acme/infra");
    let url = f.url_with("x-access-token", &token, "acme/infra");
    let dest = f.root.path().join("by-sha");
    std::fs::create_dir(&dest).unwrap();
    bosun_testkit::git::git(&dest, &["init", "-q"]);
    // `first` is not the tip of any ref: only reachable from refs/pull/7/head.
    let out = git_output(
        &dest,
        &[
            "-c",
            "credential.helper=",
            "fetch",
            "-q",
            "--depth=1",
            &url,
            &first,
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    bosun_testkit::git::git(&dest, &["checkout", "-q", "FETCH_HEAD"]);
    assert_eq!(head_of(&dest), first);
    assert_eq!(
        std::fs::read_to_string(dest.join("feature.tf")).unwrap(),
        "# one\n"
    );
}

#[test]
fn large_negotiations_arrive_gzipped_and_are_served() {
    let f = fixture();
    // 40 branches with their own commits: the clone's request lists 40 wants, which git
    // gzips (it compresses any request over 1 KiB).
    let wt = WorkTree::new(&f.repo);
    for i in 0..40 {
        wt.checkout_new_branch(&format!("b{i}"));
        wt.commit(&[(&format!("b{i}.txt"), "x\n")], &format!("branch {i}"));
        wt.checkout("main");
    }
    wt.git(&["push", "-q", "origin", "refs/heads/*:refs/heads/*"]);

    let token = f.gh.issue_token(INSTALLATION, "acme/infra");
    let (ok, stderr, dest) = f.clone(
        &f.url_with("x-access-token", &token, "acme/infra"),
        "many",
        &["-c", "protocol.version=0"],
    );
    assert!(ok, "{stderr}");
    let branches = bosun_testkit::git::git(&dest, &["branch", "-r"]);
    assert_eq!(
        branches.lines().filter(|l| l.contains("origin/b")).count(),
        40
    );
    assert!(
        f.gh.git_requests()
            .iter()
            .any(|r| r.content_encoding.as_deref() == Some("gzip") && r.status == 200),
        "{:?}",
        f.gh.git_requests()
    );
}

#[test]
fn pushes_are_refused() {
    let f = fixture();
    let token = f.gh.issue_token(INSTALLATION, "acme/infra");
    let url = f.url_with("x-access-token", &token, "acme/infra");
    let wt = WorkTree::new(&f.repo);
    wt.commit(&[("x.tf", "x\n")], "x");
    let out = git_output(
        wt.path(),
        &[
            "-c",
            "credential.helper=",
            "push",
            "-q",
            &url,
            "HEAD:refs/heads/main",
        ],
    );
    assert!(!out.status.success());
    assert_eq!(f.repo.rev_parse("refs/heads/main"), f.main_sha);
    assert!(f.gh.git_requests().iter().any(|r| r.status == 403));
}

#[test]
fn a_missing_repository_is_404_for_a_token_that_names_it() {
    let f = fixture();
    let token = f.gh.issue_token(INSTALLATION, "acme/gone");
    let (ok, _, _) = f.clone(
        &f.url_with("x-access-token", &token, "acme/gone"),
        "gone",
        &[],
    );
    assert!(!ok);
    assert_eq!(f.gh.git_requests().last().unwrap().status, 404);
}
