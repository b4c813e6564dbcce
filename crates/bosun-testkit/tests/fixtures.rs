//! The key fixture, the git repository fixtures and webhook helpers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;

use bosun_testkit::git::git;
use bosun_testkit::webhooks::WebhookExamples;
use bosun_testkit::{
    app_jwt, app_private_key_pem, app_public_key_pem, require_examples, sign, write_app_key,
    BareRepo, WorkTree,
};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Validation};

#[test]
fn the_app_key_pair_matches_and_is_written_0600() {
    assert!(EncodingKey::from_rsa_pem(app_private_key_pem().as_bytes()).is_ok());
    let jwt = app_jwt(12);
    let mut validation = Validation::new(Algorithm::RS256);
    validation.set_required_spec_claims(&["exp", "iss"]);
    let key = DecodingKey::from_rsa_pem(app_public_key_pem().as_bytes()).unwrap();
    let claims = jsonwebtoken::decode::<serde_json::Value>(&jwt, &key, &validation)
        .unwrap()
        .claims;
    assert_eq!(claims["iss"], "12");
    assert!(claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap() <= 600);

    let dir = tempfile::tempdir().unwrap();
    let path = write_app_key(dir.path());
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        app_private_key_pem()
    );
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn sign_matches_githubs_documented_vector() {
    // From GitHub's "Validating webhook deliveries" docs; checked with Python's hmac.
    assert_eq!(
        sign(b"It's a Secret to Everybody", b"Hello, World!"),
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    );
    assert_eq!(
        sign(
            b"bosun-webhook-secret",
            br#"{"zen":"Keep it logically awesome.","hook_id":1}"#
        ),
        "sha256=b532c312b76e2acf1693ac3a97e6d04f4779fd5f72032fc008514e1dcbf288be"
    );
}

#[test]
fn a_bare_repo_is_set_up_for_the_double() {
    let root = tempfile::tempdir().unwrap();
    let repo = BareRepo::create(root.path(), "acme/infra");
    assert!(repo.path().ends_with("acme/infra.git"));
    assert_eq!(repo.full_name(), "acme/infra");
    assert_eq!(
        git(repo.path(), &["config", "uploadpack.allowAnySHA1InWant"]),
        "true"
    );
    assert_eq!(git(repo.path(), &["config", "http.receivepack"]), "false");
    assert_eq!(
        git(repo.path(), &["symbolic-ref", "HEAD"]),
        "refs/heads/main"
    );
    assert!(repo.file_url().starts_with("file:///"));
}

#[test]
fn a_work_tree_commits_pushes_and_rewrites() {
    let root = tempfile::tempdir().unwrap();
    let repo = BareRepo::create(root.path(), "acme/infra");
    let wt = WorkTree::new(&repo);
    assert_eq!(wt.file_url(), repo.file_url());

    let first = wt.commit(&[("a.tf", "a\n"), ("mod/b.tf", "b\n")], "first");
    assert_eq!(first.len(), 40);
    let author = wt.git(&["log", "-1", "--format=%an <%ae>"]);
    assert_eq!(author, "Bosun Test <test@bosun.test>");
    wt.push("main");
    assert_eq!(repo.rev_parse("refs/heads/main"), first);

    let shas = wt.commit_n(3);
    assert_eq!(shas.len(), 3);
    assert_eq!(wt.rev_parse("HEAD"), shas[2]);
    assert_eq!(wt.rev_parse("HEAD~3"), first);
    wt.delete("mod/b.tf");
    let removed = wt.commit(&[], "remove b");
    assert!(!wt.path().join("mod/b.tf").exists());
    wt.push("main");
    assert_eq!(repo.rev_parse("main"), removed);

    wt.push_tag("v1");
    assert_eq!(repo.rev_parse("refs/tags/v1"), removed);

    // Rewrite history: a plain push would be refused, a forced one is not.
    wt.reset_hard(&first);
    let rewritten = wt.commit(&[("c.tf", "c\n")], "rewritten");
    let refused = bosun_testkit::git::git_output(wt.path(), &["push", "-q", "origin", "main"]);
    assert!(!refused.status.success());
    wt.push_force("main");
    assert_eq!(repo.rev_parse("main"), rewritten);

    wt.checkout_new_branch("feature");
    let feature = wt.commit(&[], "empty commit on feature");
    wt.push("feature");
    assert_eq!(repo.rev_parse("refs/heads/feature"), feature);
    wt.push_ref("HEAD", "refs/pull/3/head");
    assert_eq!(repo.rev_parse("refs/pull/3/head"), feature);
    wt.delete_remote_branch("feature");
    assert!(bosun_testkit::git::git_output(
        repo.path(),
        &["rev-parse", "--verify", "-q", "refs/heads/feature"]
    )
    .stdout
    .is_empty());
    repo.delete_ref("refs/pull/3/head");
    repo.set_ref("refs/pull/4/head", &first);
    assert_eq!(repo.rev_parse("refs/pull/4/head"), first);
}

#[test]
fn webhook_examples_load_from_a_given_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("index.json");
    assert!(WebhookExamples::load_from(&path).is_none());
    std::fs::write(
        &path,
        r#"[{"name": "push", "actions": [], "examples": [{"ref": "refs/tags/x"}, {"ref": "refs/heads/main"}]}]"#,
    )
    .unwrap();
    let ex = WebhookExamples::load_from(&path).unwrap();
    assert_eq!(ex.examples("push").len(), 2);
    assert!(ex.examples("ping").is_empty());
    let branch = ex.example("push", |p| {
        p["ref"].as_str().unwrap().starts_with("refs/heads/")
    });
    assert_eq!(branch["ref"], "refs/heads/main");
}

#[test]
#[should_panic(expected = "no examples for event \"nope\"")]
fn a_missing_event_panics_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("index.json");
    std::fs::write(
        &path,
        r#"[{"name": "push", "actions": [], "examples": [{}]}]"#,
    )
    .unwrap();
    WebhookExamples::load_from(&path)
        .unwrap()
        .example("nope", |_| true);
}

#[test]
fn githubs_own_examples_are_there() {
    let Some(examples) = require_examples() else {
        return;
    };
    let push = examples.example("push", |p| p["ref"] == "refs/heads/master");
    assert!(push["after"].as_str().is_some());
    assert!(push["repository"]["full_name"].as_str().is_some());
    let opened = examples.example("pull_request", |p| p["action"] == "opened");
    assert!(opened["pull_request"]["head"]["sha"].as_str().is_some());
    let created = examples.example("installation", |p| p["action"] == "created");
    assert!(created["installation"]["id"].as_i64().is_some());
}
