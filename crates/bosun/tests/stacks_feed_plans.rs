//! Stacks feed plans, end to end: the real `bosun server` with its embedded runner, a real
//! git repository whose Terraform module (the real Terraform 1.0.3) outputs a list of
//! hosts — the addresses of real loopback sshd hosts — and an environment that takes its
//! hosts from that output. A host plan run then configures exactly the hosts the stack's
//! current state lists, over SSH.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bosun_testkit::sshd::{require_sshd, SshdFleet};
use bosun_testkit::{BareRepo, WorkTree};
use serde_json::{json, Value};
use support::{bosun, terraform_or_skip, ServerProcess};
use tempfile::TempDir;

struct World {
    dir: TempDir,
    tf: PathBuf,
    fleet: SshdFleet,
    server: ServerProcess,
    admin: String,
}

impl Drop for World {
    fn drop(&mut self) {
        support::kill_processes_under(self.dir.path());
    }
}

/// `None` when Terraform or sshd is missing (the skip is announced).
fn world(hosts: usize) -> Option<World> {
    let tf = terraform_or_skip()?;
    if !require_sshd() {
        return None;
    }
    let fleet = SshdFleet::start(hosts);
    let dir = tempfile::Builder::new()
        .prefix("bosun-feed-e2e-")
        .tempdir()
        .unwrap();
    let server = ServerProcess::start(&dir.path().join("data"), &["--allow-self-approval"], &[]);
    let admin = server.admin_token();
    Some(World {
        dir,
        tf,
        fleet,
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

    /// Where the plan writes on host `name` (every sshd host shares this machine).
    fn root(&self) -> PathBuf {
        self.dir.path().join("hosts")
    }

    /// The module: one output listing the first `n` sshd hosts as objects.
    fn module(&self, n: usize) -> String {
        self.module_in(n, "eu-west-1")
    }

    /// [`World::module`] with another `region` output.
    fn module_in(&self, n: usize, region: &str) -> String {
        let items: Vec<String> = self.fleet.hosts()[..n]
            .iter()
            .enumerate()
            .map(|(i, h)| {
                format!(
                    "    {{ name = \"web-{i}\", ip = \"{}\", port = {}, user = \"{}\" }}",
                    h.address(),
                    h.port(),
                    h.user()
                )
            })
            .collect();
        format!(
            "output \"instances\" {{\n  value = [\n{}\n  ]\n}}\n\noutput \"region\" {{\n  value = \"{region}\"\n}}\n",
            items.join(",\n")
        )
    }

    /// Stack `web-fleet` on a repository holding `module(n)`, autodeployed.
    fn stack(&self, n: usize) -> WorkTree {
        let repos = self.dir.path().join("repos");
        std::fs::create_dir_all(&repos).unwrap();
        let bare = BareRepo::create(&repos, "acme/web-fleet");
        let wt = WorkTree::in_dir(&bare, &self.dir.path().join("work"));
        wt.git(&["checkout", "-q", "-b", "main"]);
        wt.commit(&[("main.tf", &self.module(n))], "three hosts");
        wt.push("main");
        let url = bare.file_url();
        self.ok(&[
            "stack",
            "create",
            "web-fleet",
            "--repository",
            &url,
            "--engine",
            "terraform",
            "--engine-binary",
            self.tf.to_str().unwrap(),
            "--autodeploy",
        ]);
        wt
    }

    /// Triggers a run of the stack and waits for it to finish.
    fn deploy(&self) -> Value {
        let id = self.json(&["run", "trigger", "web-fleet"])["id"]
            .as_str()
            .unwrap()
            .to_string();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let r = self.json(&["run", "show", &id]);
            match r["state"].as_str().unwrap_or_default() {
                "finished" => return r,
                "failed" | "discarded" | "canceled" | "interrupted" | "force_failed" => {
                    let logs = self.cli(&["run", "logs", &id]);
                    panic!("run {id}: {r:#}\n{}", String::from_utf8_lossy(&logs.stdout))
                }
                _ => {}
            }
            assert!(Instant::now() < deadline, "run {id} never finished: {r:#}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A `--hosts-from` file taking `output` of `stack`.
    fn sources(&self, stack: &str, output: &str) -> PathBuf {
        let path = self
            .dir
            .path()
            .join(format!("sources-{stack}-{output}.json"));
        let sources = json!([{
            "stack": stack, "output": output,
            "name": "{{ item.name }}", "address": "{{ item.ip }}", "port": "{{ item.port }}",
            "user": "{{ item.user }}",
            "identity_file": self.fleet.client_key_path().display().to_string(),
            "known_hosts": self.fleet.known_hosts_path().display().to_string(),
            "labels": ["web", "{{ item.name }}"],
            "vars": {"index": "{{ key }}"},
        }]);
        std::fs::write(&path, sources.to_string()).unwrap();
        path
    }

    /// Stores the host plan `configure`: every host labelled `web` writes a marker.
    fn plan(&self) {
        self.plan_with("")
    }

    /// [`World::plan`] with more top-level YAML (`on_stack_change: …`).
    fn plan_with(&self, extra: &str) {
        let plan = format!(
            r#"name: configure
targets:
  labels: [web]
{extra}
steps:
  - name: mark
    file.copy:
      path: "{root}/{{{{ host.name }}}}/marker"
      content: "configured as {{{{ vars.index }}}}\n"
"#,
            root = self.root().display()
        );
        let path = self.dir.path().join("configure.yaml");
        std::fs::write(&path, plan).unwrap();
        self.ok(&["plan", "apply", path.to_str().unwrap()]);
    }

    /// Runs the plan and waits for it to end; the run.
    fn configure(&self) -> Value {
        let started = self.json(&["plan-run", "start", "configure"]);
        let id = started["id"].as_str().unwrap().to_string();
        self.wait_run(&id)
    }

    /// The plan's runs, newest first.
    fn plan_runs(&self) -> Vec<Value> {
        self.json(&["plan-run", "list", "configure"])["items"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// Waits for the plan's `n`th run (counting its previews out) to appear; that run.
    fn wait_started(&self, n: usize) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let runs: Vec<Value> = self
                .plan_runs()
                .into_iter()
                .filter(|r| !r["dry_run"].as_bool().unwrap_or(false))
                .collect();
            if runs.len() >= n {
                assert_eq!(runs.len(), n, "one run per change: {runs:#?}");
                return runs[0].clone();
            }
            assert!(
                Instant::now() < deadline,
                "no run {n} of the plan: {runs:#?}\n{}",
                support::log_tail(&self.server, 40)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for plan run `id` to end (or pause); the run.
    fn wait_run(&self, id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let r = self.json(&["plan-run", "show", id]);
            if ["succeeded", "failed", "aborted", "rejected", "interrupted"]
                .contains(&r["state"].as_str().unwrap_or_default())
            {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "plan run {id} never ended: {r:#}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The hosts whose marker exists, each reset for the next run.
    fn configured(&self) -> Vec<String> {
        let mut done = Vec::new();
        for i in 0..self.fleet.hosts().len() {
            let marker = self.root().join(format!("web-{i}")).join("marker");
            if marker.exists() {
                done.push(format!("web-{i}"));
                std::fs::remove_file(&marker).unwrap();
            }
        }
        done
    }
}

fn prepare_roots(root: &Path, n: usize) {
    for i in 0..n {
        std::fs::create_dir_all(root.join(format!("web-{i}"))).unwrap();
    }
}

#[test]
fn an_environment_takes_its_hosts_from_a_stacks_output_and_a_plan_run_configures_exactly_those() {
    let Some(w) = world(4) else { return };
    prepare_roots(&w.root(), 4);
    let wt = w.stack(3);
    let first = w.deploy();
    w.ok(&[
        "env",
        "create",
        "fleet",
        "--hosts-from",
        w.sources("web-fleet", "instances").to_str().unwrap(),
    ]);
    // `env show` previews what the stack's state gives now.
    let shown = w.ok(&["env", "show", "fleet"]);
    assert!(
        shown.contains("stack web-fleet output instances (state version 1): web-0 127.0.0.1:"),
        "{shown}"
    );
    w.plan();

    // Three hosts in the output: the run configures exactly those three.
    let run = w.configure();
    assert_eq!(run["state"], "succeeded", "{run:#}");
    assert_eq!(w.configured(), ["web-0", "web-1", "web-2"]);
    assert_eq!(run["hosts"], json!(["web-0", "web-1", "web-2"]));
    let sources = &run["sources"][0];
    assert_eq!(
        (
            sources["environment"].as_str(),
            sources["stack"].as_str(),
            sources["output"].as_str(),
            sources["version"].as_i64()
        ),
        (Some("fleet"), Some("web-fleet"), Some("instances"), Some(1)),
        "{run:#}"
    );
    assert_eq!(sources["hosts"], json!(["web-0", "web-1", "web-2"]));
    assert!(first["id"].is_string());
    // The hosts are listed with where they came from; they are the stack's to change.
    let listed = w.ok(&["host", "list", "--source"]);
    let row = listed.lines().find(|l| l.starts_with("web-1 ")).unwrap();
    assert!(
        row.contains("fleet") && row.contains("stack web-fleet output instances (state version 1)"),
        "{listed}"
    );
    let said = w.refused(&["host", "delete", "web-1"]);
    assert!(
        said.contains("comes from output \"instances\" of stack \"web-fleet\""),
        "{said}"
    );

    // The output grows to four: the next run configures four, from the new state.
    wt.commit(&[("main.tf", &w.module(4))], "four hosts");
    wt.push("main");
    w.deploy();
    let run = w.configure();
    assert_eq!(run["state"], "succeeded", "{run:#}");
    assert_eq!(w.configured(), ["web-0", "web-1", "web-2", "web-3"]);
    assert_eq!(run["sources"][0]["version"], 2, "{run:#}");

    // Back to two: the hosts no longer given are removed, and not configured.
    wt.commit(&[("main.tf", &w.module(2))], "two hosts");
    wt.push("main");
    w.deploy();
    let run = w.configure();
    assert_eq!(w.configured(), ["web-0", "web-1"], "{run:#}");
    let hosts = w.json(&["host", "list"]);
    let names: Vec<&str> = hosts["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["web-0", "web-1"]);
}

#[test]
fn a_missing_output_or_stack_refuses_the_run_before_any_step_naming_it() {
    let Some(w) = world(1) else { return };
    prepare_roots(&w.root(), 1);
    w.stack(1);
    w.deploy();
    w.plan();
    for (stack, output, says) in [
        (
            "web-fleet",
            "servers",
            "stack \"web-fleet\" has no output \"servers\" in state version 1 (its outputs: instances, region)",
        ),
        (
            "web-fleet",
            "region",
            "output \"region\" of stack \"web-fleet\" is a string, not a list or a map of hosts",
        ),
        ("db-fleet", "instances", "stack \"db-fleet\" does not exist"),
    ] {
        let sources = w.sources(stack, output);
        let flag = sources.to_str().unwrap();
        if w.json(&["env", "list"])["items"]
            .as_array()
            .unwrap()
            .is_empty()
        {
            w.ok(&["env", "create", "fleet", "--hosts-from", flag]);
        } else {
            w.ok(&["env", "update", "fleet", "--hosts-from", flag]);
        }
        let shown = w.ok(&["env", "show", "fleet"]);
        assert!(shown.contains(says), "{shown}");
        let said = w.refused(&["plan-run", "start", "configure"]);
        assert!(
            said.contains("host_source_unresolved") || said.contains(says),
            "{said}"
        );
        assert!(said.contains(says), "{said}");
        assert!(w.configured().is_empty(), "no step ran");
    }
}

/// Pushes `main_tf` and deploys it; the stack run's id.
fn push_and_deploy(w: &World, wt: &WorkTree, main_tf: &str) -> String {
    wt.commit(&[("main.tf", main_tf)], "change");
    wt.push("main");
    w.deploy()["id"].as_str().unwrap().to_string()
}

#[test]
fn a_stacks_output_change_starts_a_plan_run_on_the_new_hosts_and_nothing_else_does() {
    let Some(w) = world(4) else { return };
    prepare_roots(&w.root(), 4);
    let wt = w.stack(3);
    w.deploy();
    w.ok(&[
        "env",
        "create",
        "fleet",
        "--hosts-from",
        w.sources("web-fleet", "instances").to_str().unwrap(),
    ]);
    // The run's `region` input comes from the stack's output of that name.
    w.plan_with(
        "inputs:\n  region:\non_stack_change:\n  stack: web-fleet\n  outputs: [instances]\n  inputs: { region: region }\n",
    );
    // Both sides say so.
    let stack = w.ok(&["stack", "show", "web-fleet"]);
    assert!(
        stack.contains("feeds plans") && stack.contains("configure"),
        "{stack}"
    );

    // The output grows to four (an output-only change: the module has no resource):
    // one run, on the four hosts, started by that stack run.
    let upstream = push_and_deploy(&w, &wt, &w.module(4));
    let run = w.wait_started(1);
    let run = w.wait_run(run["id"].as_str().unwrap());
    assert_eq!(run["state"], "succeeded", "{run:#}");
    assert_eq!(run["trigger"], "stack");
    assert_eq!(
        (
            run["upstream"]["stack"].as_str(),
            run["upstream"]["run"].as_str()
        ),
        (Some("web-fleet"), Some(upstream.as_str()))
    );
    assert_eq!(run["upstream"]["outputs"], json!(["instances"]));
    assert_eq!(run["requested_by"], "stack:web-fleet");
    assert_eq!(run["inputs"], json!({"region": "eu-west-1"}));
    assert_eq!(run["hosts"], json!(["web-0", "web-1", "web-2", "web-3"]));
    assert_eq!(w.configured(), ["web-0", "web-1", "web-2", "web-3"]);
    let shown = w.ok(&["plan-run", "show", run["id"].as_str().unwrap()]);
    assert!(
        shown.contains(&format!("started by run {upstream} of stack web-fleet")),
        "{shown}"
    );

    // Unchanged outputs, then a change of an output the plan does not watch: no run.
    // The next watched change gives exactly one more, from its own stack run.
    w.deploy();
    push_and_deploy(&w, &wt, &w.module_in(4, "us-east-2"));
    let upstream = push_and_deploy(&w, &wt, &w.module_in(3, "us-east-2"));
    let run = w.wait_started(2);
    assert_eq!(run["upstream"]["run"], upstream.as_str(), "{run:#}");
    assert_eq!(
        run["inputs"],
        json!({"region": "us-east-2"}),
        "the state now"
    );
    let run = w.wait_run(run["id"].as_str().unwrap());
    assert_eq!(w.configured(), ["web-0", "web-1", "web-2"], "{run:#}");

    // A gated environment pauses the run a change starts, for an approver.
    w.ok(&["env", "update", "fleet", "--requires-approval", "true"]);
    push_and_deploy(&w, &wt, &w.module_in(2, "us-east-2"));
    let run = w.wait_started(3);
    let id = run["id"].as_str().unwrap().to_string();
    assert_eq!(run["state"], "paused", "{run:#}");
    assert!(
        w.configured().is_empty(),
        "nothing runs before the approval"
    );
    w.ok(&["approvals", "approve", &id]);
    let run = w.wait_run(&id);
    assert_eq!(run["state"], "succeeded", "{run:#}");
    assert_eq!(w.configured(), ["web-0", "web-1"]);

    // A source that gives no hosts fails the run before any step, naming why.
    w.ok(&["env", "update", "fleet", "--requires-approval", "false"]);
    w.ok(&[
        "env",
        "update",
        "fleet",
        "--hosts-from",
        w.sources("web-fleet", "servers").to_str().unwrap(),
    ]);
    push_and_deploy(&w, &wt, &w.module_in(1, "us-east-2"));
    let run = w.wait_started(4);
    assert_eq!(run["state"], "failed", "{run:#}");
    let reason = run["reason"].as_str().unwrap();
    assert!(
        reason.contains("has no output \"servers\"") && reason.contains("started by run"),
        "{reason}"
    );
    assert!(w.configured().is_empty());
}

#[test]
fn a_plans_own_targets_take_hosts_from_a_stacks_output() {
    let Some(w) = world(3) else { return };
    prepare_roots(&w.root(), 3);
    let wt = w.stack(2);
    w.deploy();
    let sources: Value = serde_json::from_str(
        &std::fs::read_to_string(w.sources("web-fleet", "instances")).unwrap(),
    )
    .unwrap();
    let plan = format!(
        r#"name: direct
targets:
  hosts_from: {sources}
steps:
  - name: mark
    file.copy:
      path: "{root}/{{{{ host.name }}}}/marker"
      content: "direct\n"
"#,
        root = w.root().display()
    );
    let path = w.dir.path().join("direct.yaml");
    std::fs::write(&path, &plan).unwrap();
    // Only the server has stacks: run here, the plan is refused saying so.
    let inventory = w.dir.path().join("empty-inventory.yaml");
    std::fs::write(&inventory, "hosts: {}\n").unwrap();
    let said = w.refused(&[
        "plan",
        "exec",
        path.to_str().unwrap(),
        "--inventory",
        inventory.to_str().unwrap(),
    ]);
    assert!(said.contains("only the server has"), "{said}");
    w.ok(&["plan", "apply", path.to_str().unwrap()]);
    let run = |w: &World| {
        let id = w.json(&["plan-run", "start", "direct"])["id"]
            .as_str()
            .unwrap()
            .to_string();
        w.wait_run(&id)
    };
    let r = run(&w);
    assert_eq!(r["state"], "succeeded", "{r:#}");
    assert_eq!(r["hosts"], json!(["web-0", "web-1"]));
    assert_eq!(r["sources"][0]["plan"], "direct", "{r:#}");
    assert_eq!(w.configured(), ["web-0", "web-1"]);
    let listed = w.ok(&["host", "list", "--source"]);
    assert!(
        listed.contains("stack web-fleet output instances (state version 1)"),
        "{listed}"
    );
    // The output changes: the next run follows it.
    wt.commit(&[("main.tf", &w.module(3))], "three");
    wt.push("main");
    w.deploy();
    let r = run(&w);
    assert_eq!(w.configured(), ["web-0", "web-1", "web-2"], "{r:#}");
    // Deleting the plan removes the hosts it took.
    w.ok(&["plan", "delete", "direct"]);
    assert_eq!(w.json(&["host", "list"])["items"], json!([]));
}
