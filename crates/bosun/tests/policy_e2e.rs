//! Policies as code end to end: the real `bosun server` with its embedded runner, real git
//! repositories served as `file://` URLs, the real Terraform 1.0.3 with a real provider
//! (`bosun/testing`, from the testkit) so plans carry real resource changes, and Rego
//! policies saved with `bosun policy set` and evaluated on each plan's own
//! `terraform show -json`. Each test has a server of its own, so every policy applies to
//! the whole org.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bosun_testkit::tf_provider::{require_tf_provider, TestProvider, REQUIRED_PROVIDERS};
use bosun_testkit::{BareRepo, WorkTree};
use serde_json::Value;
use support::{bosun, terraform_or_skip, ServerProcess};
use tempfile::TempDir;

struct World {
    dir: TempDir,
    tf: PathBuf,
    provider: TestProvider,
    server: ServerProcess,
    admin: String,
}

impl Drop for World {
    fn drop(&mut self) {
        support::kill_processes_under(self.dir.path());
    }
}

/// `None` when Terraform or the test provider is missing (the skip is announced).
fn world() -> Option<World> {
    world_with(&[])
}

fn world_with(server_args: &[&str]) -> Option<World> {
    let tf = terraform_or_skip()?;
    if !require_tf_provider() {
        return None;
    }
    let dir = tempfile::Builder::new()
        .prefix("bosun-policy-e2e-")
        .tempdir()
        .unwrap();
    let provider = TestProvider::install(&dir.path().join("provider"));
    // Self-approval on: one admin token drives the test (the approval rule is tested
    // through the API, role by role).
    let mut args = vec!["--allow-self-approval"];
    args.extend_from_slice(server_args);
    let server = ServerProcess::start(&dir.path().join("data"), &args, &[]);
    let admin = server.admin_token();
    Some(World {
        dir,
        tf,
        provider,
        server,
        admin,
    })
}

impl World {
    fn cli(&self, args: &[&str]) -> std::process::Output {
        bosun(&self.server, &self.admin, args)
    }

    fn ok(&self, args: &[&str]) -> String {
        support::bosun_ok(&self.server, &self.admin, args)
    }

    /// A command that must fail; its stderr.
    fn refused(&self, args: &[&str]) -> String {
        support::bosun_refused(&self.server, &self.admin, args)
    }

    fn json(&self, args: &[&str]) -> Value {
        support::bosun_json(&self.server, &self.admin, args)
    }

    /// A folder holding `files`, for `bosun policy set --dir`.
    fn policy_dir(&self, name: &str, files: &[(&str, &str)]) -> PathBuf {
        let dir = self.dir.path().join("policies").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        for (file, text) in files {
            std::fs::write(dir.join(file), text).unwrap();
        }
        dir
    }

    /// Saves policy `name` from `rego` (one file) with `extra` flags.
    fn policy(&self, name: &str, rego: &str, extra: &[&str]) {
        let dir = self.policy_dir(name, &[("policy.rego", rego)]);
        let mut args = vec!["policy", "set", name, "--dir", dir.to_str().unwrap()];
        args.extend_from_slice(extra);
        self.ok(&args);
    }

    /// A repository with `main_tf` on `main`, and stack `id` on it (with `extra` flags).
    fn stack(&self, id: &str, main_tf: &str, extra: &[&str]) -> WorkTree {
        let repos = self.dir.path().join("repos");
        std::fs::create_dir_all(&repos).unwrap();
        let bare = BareRepo::create(&repos, &format!("acme/{id}"));
        let wt = WorkTree::in_dir(&bare, &self.dir.path().join("work").join(id));
        wt.git(&["checkout", "-q", "-b", "main"]);
        self.push(&wt, main_tf);
        let config = format!(
            "TF_CLI_CONFIG_FILE={}",
            self.provider.cli_config().display()
        );
        let url = bare.file_url();
        let mut args = vec![
            "stack",
            "create",
            id,
            "--repository",
            &url,
            "--engine",
            "terraform",
            "--engine-binary",
            self.tf.to_str().unwrap(),
            "--var",
            &config,
        ];
        args.extend_from_slice(extra);
        self.ok(&args);
        wt
    }

    fn push(&self, wt: &WorkTree, main_tf: &str) {
        wt.commit(
            &[("main.tf", &format!("{REQUIRED_PROVIDERS}\n{main_tf}"))],
            "the module",
        );
        wt.push("main");
    }

    fn trigger(&self, stack: &str) -> String {
        self.json(&["run", "trigger", stack])["id"]
            .as_str()
            .unwrap()
            .to_string()
    }

    fn show(&self, run: &str) -> Value {
        self.json(&["run", "show", run])
    }

    /// Waits until run `run` is `want` (failing at once if it ends otherwise).
    fn wait(&self, run: &str, want: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let r = self.show(run);
            let state = r["state"].as_str().unwrap_or_default().to_string();
            if state == want {
                return r;
            }
            let ended = [
                "finished",
                "failed",
                "discarded",
                "canceled",
                "interrupted",
                "force_failed",
            ]
            .contains(&state.as_str());
            if ended || Instant::now() > deadline {
                let logs = self.cli(&["run", "logs", run]);
                panic!(
                    "run {run}: wanted {want}, it is:\n{r:#}\nrun log:\n{}\nserver log:\n{}",
                    String::from_utf8_lossy(&logs.stdout),
                    support::log_tail(&self.server, 40)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn state_versions(&self, stack: &str) -> usize {
        self.json(&["state", "versions", stack])["items"]
            .as_array()
            .unwrap()
            .len()
    }
}

/// The evaluation of `policy` recorded on run `r`.
fn evaluation<'a>(r: &'a Value, policy: &str) -> &'a Value {
    r["policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["policy"] == policy)
        .unwrap_or_else(|| panic!("no evaluation of {policy} on {r:#}"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

const NO_PROTECTED_DESTROY: &str = r#"package bosun.no_protected_destroy

import rego.v1

deny contains msg if {
	some rc in input.plan.resource_changes
	rc.type == "testing_protected"
	"delete" in rc.change.actions
	msg := sprintf("%s would be destroyed: testing_protected resources are protected", [rc.address])
}
"#;

const OWNER_TAG: &str = r#"package bosun.owner_tag

import rego.v1

warn contains msg if {
	some rc in input.plan.resource_changes
	some action in rc.change.actions
	action in {"create", "update"}
	not rc.change.after.tags.owner
	msg := sprintf("%s has no owner tag", [rc.address])
}
"#;

const MAX_CHANGES: &str = r#"package bosun.max_changes

import rego.v1

changes := [rc | some rc in input.plan.resource_changes; rc.change.actions != ["no-op"]]

require_approval contains msg if {
	count(changes) > 2
	msg := sprintf("%d resources change (more than 2) in stack %s", [count(changes), input.stack.id])
}
"#;

const NO_DELETES: &str = r#"package bosun.no_deletes

import rego.v1

deny contains msg if {
	some rc in input.plan.resource_changes
	"delete" in rc.change.actions
	msg := sprintf("%s would be deleted outside the change window", [rc.address])
}
"#;

#[test]
fn a_protected_destroy_is_denied_and_a_missing_tag_warned_on_real_plans() {
    let Some(w) = world() else { return };
    // Attached to the stacks labelled `pci` only.
    w.policy(
        "no-protected-destroy",
        NO_PROTECTED_DESTROY,
        &["--mode", "hard_mandatory", "--label", "pci"],
    );
    w.policy("owner-tag", OWNER_TAG, &["--mode", "advisory"]);
    // A policy repository on the server's own disk is refused unless the server allows it.
    let refused = w.refused(&[
        "policy",
        "set",
        "local",
        "--repository",
        "file:///srv/policies.git",
    ]);
    assert!(
        refused.contains("file:// policy repositories are off"),
        "{refused}"
    );
    let listed = w.ok(&["policy", "list"]);
    assert!(
        listed.contains("no-protected-destroy") && listed.contains("hard_mandatory"),
        "{listed}"
    );
    let wt = w.stack(
        "db",
        r#"
resource "testing_protected" "db" {
  name = "db"
  tags = { owner = "data" }
}
resource "testing_thing" "a" {
  name = "a"
  tags = { owner = "web" }
}
resource "testing_thing" "b" {
  name = "b"
}
"#,
        &["--autodeploy", "--label", "pci"],
    );

    // Creates only: nothing denies; the advisory policy warns about b, and the run applies.
    let first = w.trigger("db");
    let r = w.wait(&first, "finished");
    let tags = evaluation(&r, "owner-tag");
    assert_eq!(tags["outcome"], "warn", "{r:#}");
    assert_eq!(strings(&tags["warn"]), ["testing_thing.b has no owner tag"]);
    assert_eq!(tags["mode"], "advisory");
    assert!(tags["version"].as_str().unwrap().starts_with("sha256:"));
    let guard = evaluation(&r, "no-protected-destroy");
    assert_eq!(guard["outcome"], "pass", "{r:#}");
    assert_eq!(w.state_versions("db"), 1);
    let text = w.ok(&["run", "show", &first]);
    assert!(
        text.contains("WARN owner-tag") && text.contains("warn: testing_thing.b has no owner tag"),
        "{text}"
    );

    // The protected resource dropped from the module: the plan destroys it, the
    // hard-mandatory policy fails the run with its message, and nothing is applied.
    w.push(
        &wt,
        r#"
resource "testing_thing" "a" {
  name = "a"
  tags = { owner = "web" }
}
resource "testing_thing" "b" {
  name = "b"
  tags = { owner = "web" }
}
"#,
    );
    let second = w.trigger("db");
    let r = w.wait(&second, "failed");
    let reason = r["reason"].as_str().unwrap();
    assert!(
        reason.contains("testing_protected.db would be destroyed")
            && reason.contains("no-protected-destroy"),
        "{reason}"
    );
    let guard = evaluation(&r, "no-protected-destroy");
    assert_eq!(guard["outcome"], "deny");
    assert_eq!(guard["mode"], "hard_mandatory");
    assert_eq!(
        evaluation(&r, "owner-tag")["outcome"],
        "pass",
        "b is tagged now"
    );
    assert_eq!(w.state_versions("db"), 1, "a denied plan applies nothing");
    // No override for a hard-mandatory deny.
    let refused = w.refused(&["run", "override", &second, "--reason", "please"]);
    assert!(refused.contains("nothing to override"), "{refused}");
    let text = w.ok(&["run", "show", &second]);
    assert!(text.contains("DENY no-protected-destroy"), "{text}");

    // A stack without the label: the policy is not attached, its destroy goes through.
    let scratch = w.stack(
        "scratch",
        r#"resource "testing_protected" "tmp" {
  name = "tmp"
  tags = { owner = "qa" }
}"#,
        &["--autodeploy"],
    );
    w.wait(&w.trigger("scratch"), "finished");
    w.push(&scratch, "");
    let r = w.wait(&w.trigger("scratch"), "finished");
    let names: Vec<&str> = r["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["policy"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["owner-tag"], "only the whole-org policy: {r:#}");
    assert_eq!(w.state_versions("scratch"), 2);
}

#[test]
fn more_than_n_changes_wait_for_approval_and_a_soft_deny_is_overridden_with_audit() {
    let Some(w) = world() else { return };
    w.policy("max-changes", MAX_CHANGES, &["--mode", "hard_mandatory"]);
    w.policy("no-deletes", NO_DELETES, &[]); // soft_mandatory by default
    let wt = w.stack(
        "web",
        r#"
resource "testing_thing" "a" { name = "a" }
resource "testing_thing" "b" { name = "b" }
resource "testing_thing" "c" { name = "c" }
"#,
        &["--autodeploy"],
    );

    // Three creates: more than two changes, so the autodeploy run waits for approval.
    let first = w.trigger("web");
    let r = w.wait(&first, "unconfirmed");
    assert_eq!(r["policy_hold"], "approval", "{r:#}");
    assert_eq!(
        strings(&evaluation(&r, "max-changes")["require_approval"]),
        ["3 resources change (more than 2) in stack web"]
    );
    let inbox = w.json(&["approvals", "list"]);
    let waiting: Vec<&str> = inbox["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["subject"].as_str().unwrap())
        .collect();
    assert_eq!(waiting, [first.as_str()], "{inbox:#}");
    let refused = w.refused(&["run", "confirm", &first]);
    assert!(refused.contains("a policy asks for approval"), "{refused}");
    w.ok(&[
        "approvals",
        "approve",
        &first,
        "--comment",
        "three new things",
    ]);
    w.wait(&first, "finished");
    assert_eq!(w.state_versions("web"), 1);

    // One thing deleted: the soft-mandatory policy holds the run, a confirm cannot lift
    // it, an admin's override (with a reason) does; autodeploy then applies.
    w.push(
        &wt,
        r#"
resource "testing_thing" "a" { name = "a" }
resource "testing_thing" "b" { name = "b" }
"#,
    );
    let second = w.trigger("web");
    let r = w.wait(&second, "unconfirmed");
    assert_eq!(r["policy_hold"], "override", "{r:#}");
    assert!(
        r["reason"]
            .as_str()
            .unwrap()
            .contains("testing_thing.c would be deleted outside the change window"),
        "{r:#}"
    );
    assert!(w.json(&["approvals", "list"])["items"]
        .as_array()
        .unwrap()
        .is_empty());
    let refused = w.refused(&["run", "confirm", &second]);
    assert!(refused.contains("bosun run override"), "{refused}");
    let refused = w.refused(&["run", "override", &second, "--reason", "  "]);
    assert!(refused.contains("reason"), "{refused}");
    w.ok(&[
        "run",
        "override",
        &second,
        "--reason",
        "c was moved to another stack",
    ]);
    let r = w.wait(&second, "finished");
    let deletes = evaluation(&r, "no-deletes");
    assert_eq!(deletes["outcome"], "deny");
    assert_eq!(deletes["overridden_by"], "user:admin");
    assert_eq!(deletes["override_reason"], "c was moved to another stack");
    assert_eq!(w.state_versions("web"), 2);
    let audit = w.json(&["audit", "--action", "run.policy_override"]);
    let entry = &audit["items"][0];
    assert_eq!(entry["target"], format!("run:{second}"), "{audit:#}");
    assert_eq!(entry["detail"]["comment"], "c was moved to another stack");
    let text = w.ok(&["run", "show", &second]);
    assert!(
        text.contains("overridden by user:admin: c was moved to another stack"),
        "{text}"
    );
}

#[test]
fn a_runaway_policy_is_stopped_by_its_time_bound_and_counts_as_its_on_error_says() {
    let Some(w) = world() else { return };
    // Tens of billions of iterations: only the time bound ends it.
    w.policy(
        "runaway",
        r#"package bosun.runaway

import rego.v1

deny contains "never" if {
	some i in numbers.range(1, 100000)
	some j in numbers.range(1, 100000)
	some k in numbers.range(1, 100000)
	i + j + k < 0
}
"#,
        &["--mode", "hard_mandatory"],
    );
    // Gigabytes in one builtin call: the memory bound refuses it, and the server lives on.
    w.policy(
        "hog",
        r#"package bosun.hog

import rego.v1

deny contains "never" if {
	count(numbers.range(1, 1000000000)) < 0
}
"#,
        &["--mode", "hard_mandatory"],
    );
    w.stack(
        "slow",
        r#"resource "testing_thing" "a" { name = "a" }"#,
        &["--autodeploy"],
    );
    let first = w.trigger("slow");
    let started = Instant::now();
    let r = w.wait(&first, "failed");
    let e = evaluation(&r, "runaway");
    assert_eq!(e["outcome"], "deny", "an error denies by default: {r:#}");
    let errors = strings(&e["errors"]).join(" ");
    assert!(errors.contains("runaway"), "{errors}");
    assert!(
        e["duration_ms"].as_u64().unwrap() < 30_000,
        "stopped by the bound: {e:#}"
    );
    assert!(started.elapsed() < Duration::from_secs(110));
    let hog = evaluation(&r, "hog");
    assert_eq!(hog["outcome"], "deny", "{r:#}");
    let errors = strings(&hog["errors"]).join(" ");
    assert!(
        errors.contains("the memory bound (256 MiB) was reached"),
        "{errors}"
    );
    w.ok(&["policy", "delete", "hog"]);

    // Configured to warn: the same error lets the run through, shown as a warning.
    let dir: &Path = &w.dir.path().join("policies").join("runaway");
    w.ok(&[
        "policy",
        "set",
        "runaway",
        "--dir",
        dir.to_str().unwrap(),
        "--mode",
        "hard_mandatory",
        "--on-error",
        "warn",
    ]);
    let second = w.trigger("slow");
    let r = w.wait(&second, "finished");
    assert_eq!(evaluation(&r, "runaway")["outcome"], "warn", "{r:#}");
}

const SIZE_LIMIT: &str = r#"package bosun.size_limit

import rego.v1

deny contains msg if {
	some rc in input.plan.resource_changes
	rc.change.after.size > LIMIT
	msg := sprintf("%s is size %d, more than LIMIT", [rc.address, rc.change.after.size])
}
"#;

#[test]
fn a_policy_read_from_git_follows_its_branch_head_from_one_run_to_the_next() {
    let Some(w) = world_with(&["--allow-file-policy-repositories"]) else {
        return;
    };
    let repos = w.dir.path().join("repos");
    std::fs::create_dir_all(&repos).unwrap();
    let bare = BareRepo::create(&repos, "acme/policies");
    let rules = WorkTree::in_dir(&bare, &w.dir.path().join("work").join("policies"));
    rules.git(&["checkout", "-q", "-b", "main"]);
    let first_commit = rules.commit(
        &[
            ("plan/size.rego", &SIZE_LIMIT.replace("LIMIT", "10")),
            ("plan/README.md", "not a policy"),
        ],
        "size limit 10",
    );
    rules.push("main");
    w.ok(&[
        "policy",
        "set",
        "size-limit",
        "--repository",
        &bare.file_url(),
        "--path",
        "plan",
        "--mode",
        "hard_mandatory",
    ]);
    let shown = w.json(&["policy", "show", "size-limit"]);
    assert_eq!(
        (shown["source"].as_str(), shown["path"].as_str()),
        (Some("git"), Some("plan"))
    );
    w.stack(
        "sized",
        r#"resource "testing_thing" "a" {
  name = "a"
  size = 5
}"#,
        &["--autodeploy"],
    );
    let first = w.trigger("sized");
    let r = w.wait(&first, "finished");
    let e = evaluation(&r, "size-limit");
    assert_eq!(
        (e["outcome"].as_str(), e["version"].as_str()),
        (Some("pass"), Some(first_commit.as_str())),
        "{r:#}"
    );

    // The policy repository's branch moves: the next run reads the new commit.
    let second_commit = rules.commit(
        &[("plan/size.rego", &SIZE_LIMIT.replace("LIMIT", "3"))],
        "size limit 3",
    );
    rules.push("main");
    let second = w.trigger("sized");
    let r = w.wait(&second, "failed");
    let e = evaluation(&r, "size-limit");
    assert_eq!(e["version"], second_commit.as_str(), "{r:#}");
    assert_eq!(
        strings(&e["deny"]),
        ["testing_thing.a is size 5, more than 3"]
    );

    // A policy folder that went missing is an evaluation error, which denies.
    rules.delete("plan");
    rules.commit(&[("other/keep.txt", "x")], "policies moved");
    rules.push("main");
    let third = w.trigger("sized");
    let r = w.wait(&third, "failed");
    let errors = strings(&evaluation(&r, "size-limit")["errors"]).join(" ");
    assert!(errors.contains("has no folder \"plan\""), "{errors}");
}

const SUDOERS: &str = r#"package bosun.sudoers

import rego.v1

require_approval contains msg if {
	some step in input.report.steps
	some r in step.results
	r.changed == true
	is_string(r.path)
	contains(r.path, "/etc/sudoers.d/")
	msg := sprintf("step \"%s\" would change %s on %s", [step.name, r.path, r.host])
}
"#;

const FOUR_EYES: &str = r#"package bosun.four_eyes

import rego.v1

deny contains msg if {
	input.approver.actor == input.run.requested_by
	msg := sprintf("%s may not approve a run they asked for", [input.approver.actor])
}
"#;

/// A host plan writing `file` (under each host's own root in the test's dir).
fn host_plan(name: &str, root: &Path, file: &str) -> String {
    format!(
        r#"name: {name}
targets:
  labels: [fleet]
steps:
  - name: write {file}
    file.copy:
      path: "{root}/{{{{ host.name }}}}/{file}"
      content: "written by {name}\n"
"#,
        root = root.display()
    )
}

#[test]
fn a_host_plan_whose_dry_run_would_touch_sudoers_waits_for_approval() {
    use bosun_testkit::sshd::{require_sshd, SshdFleet};
    if !require_sshd() {
        return;
    }
    let fleet = SshdFleet::start(2);
    let dir = tempfile::tempdir().unwrap();
    let roots = dir.path().join("hosts");
    for h in ["h0", "h1"] {
        std::fs::create_dir_all(roots.join(h).join("etc/sudoers.d")).unwrap();
    }
    let server = ServerProcess::start(&dir.path().join("data"), &["--allow-self-approval"], &[]);
    let admin = server.admin_token();
    let run = |args: &[&str]| {
        let out = bosun(&server, &admin, args);
        assert!(
            out.status.success(),
            "bosun {args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            support::log_tail(&server, 40)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let json = |args: &[&str]| -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        serde_json::from_str(&run(&all)).unwrap()
    };
    let mut inv = String::from("hosts:\n");
    for (i, h) in fleet.hosts().iter().enumerate() {
        inv.push_str(&format!(
            "  h{i}: {{ address: \"{}\", port: {}, user: \"{}\", identity_file: \"{}\", known_hosts: \"{}\", labels: [fleet] }}\n",
            h.address(),
            h.port(),
            h.user(),
            fleet.client_key_path().display(),
            fleet.known_hosts_path().display()
        ));
    }
    let inv_file = dir.path().join("inventory.yaml");
    std::fs::write(&inv_file, inv).unwrap();
    run(&["host", "import", inv_file.to_str().unwrap()]);
    let policy_dir = dir.path().join("sudoers");
    std::fs::create_dir_all(&policy_dir).unwrap();
    std::fs::write(policy_dir.join("sudoers.rego"), SUDOERS).unwrap();
    run(&[
        "policy",
        "set",
        "sudoers",
        "--dir",
        policy_dir.to_str().unwrap(),
        "--point",
        "plan_run",
        "--mode",
        "hard_mandatory",
    ]);
    for (name, file) in [("grant", "etc/sudoers.d/deploy"), ("motd", "etc/motd")] {
        let path = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&path, host_plan(name, &roots, file)).unwrap();
        run(&["plan", "apply", path.to_str().unwrap()]);
    }
    let wait = |id: &str, want: &str| -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let r = json(&["plan-run", "show", id]);
            if r["state"] == want && r["policy_hold"] != "check" {
                return r;
            }
            assert!(
                Instant::now() < deadline
                    && !["failed", "aborted", "rejected", "succeeded"]
                        .iter()
                        .any(|s| r["state"] == *s && *s != want),
                "plan run {id} never became {want}: {r:#}\n{}",
                support::log_tail(&server, 40)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };

    // The real run waits for its dry run; the policy reads it and asks for approval.
    let grant = json(&["plan-run", "start", "grant"]);
    assert_eq!(grant["state"], "paused", "{grant:#}");
    assert_eq!(grant["policy_hold"], "check");
    let id = grant["id"].as_str().unwrap().to_string();
    let r = wait(&id, "paused");
    assert_eq!(r["policy_hold"], "approval", "{r:#}");
    let e = &r["policies"][0];
    assert_eq!(
        (e["policy"].as_str(), e["point"].as_str()),
        (Some("sudoers"), Some("plan_run"))
    );
    let asks = strings(&e["require_approval"]);
    assert_eq!(asks.len(), 2, "one per host: {asks:?}");
    assert!(
        asks.iter().all(|m| m.contains("/etc/sudoers.d/deploy")
            && m.starts_with("step \"write etc/sudoers.d/deploy\"")),
        "{asks:?}"
    );
    assert!(
        !roots.join("h0/etc/sudoers.d/deploy").exists(),
        "nothing written before approval"
    );
    let inbox = run(&["approvals", "list"]);
    assert!(inbox.contains(&id), "{inbox}");
    // The approval point: a policy stricter than the server's rule (which allows
    // self-approval here) refuses the requester's own approval, saying why.
    let four_eyes = dir.path().join("four-eyes");
    std::fs::create_dir_all(&four_eyes).unwrap();
    std::fs::write(four_eyes.join("four_eyes.rego"), FOUR_EYES).unwrap();
    let set_four_eyes = |mode: &str| {
        run(&[
            "policy",
            "set",
            "four-eyes",
            "--dir",
            four_eyes.to_str().unwrap(),
            "--point",
            "approval",
            "--mode",
            mode,
        ])
    };
    set_four_eyes("hard_mandatory");
    let refused = bosun(&server, &admin, &["approvals", "approve", &id]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("policy four-eyes: user:admin may not approve a run they asked for"),
        "{said}"
    );
    assert_eq!(json(&["plan-run", "show", &id])["state"], "paused");
    // Advisory: the same policy only warns, and the approval goes through.
    set_four_eyes("advisory");
    run(&[
        "approvals",
        "approve",
        &id,
        "--comment",
        "deploy needs sudo",
    ]);
    wait(&id, "succeeded");
    assert!(roots.join("h0/etc/sudoers.d/deploy").exists());
    let r = json(&["plan-run", "show", &id]);
    let outcomes: Vec<&str> = r["policies"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["point"] == "approval")
        .map(|e| e["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        ["deny", "warn"],
        "both approval attempts are recorded: {r:#}"
    );
    run(&["policy", "delete", "four-eyes"]);

    // A plan touching no sudoers file: the same policy passes and the run goes on alone.
    let motd = json(&["plan-run", "start", "motd"]);
    let id = motd["id"].as_str().unwrap().to_string();
    let r = wait(&id, "succeeded");
    assert_eq!(r["policies"][0]["outcome"], "pass", "{r:#}");
    assert!(roots.join("h1/etc/motd").exists());
    // A dry run is never held by policies.
    let dry = json(&["plan-run", "start", "grant", "--dry-run"]);
    assert_ne!(dry["state"], "paused", "{dry:#}");
}
