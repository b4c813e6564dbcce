//! The test provider with the real Terraform CLI: offline init, plans whose JSON has
//! real create, update, delete and replace actions, and applies.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use bosun_testkit::tf_provider::REQUIRED_PROVIDERS;
use bosun_testkit::{require_terraform, require_tf_provider, TestProvider};
use serde_json::{json, Value};

/// Terraform in a module directory, with an environment like the one Bosun's runner gives
/// the engine (nothing inherited but `PATH`, a `HOME` of its own) plus the provider's.
struct Tf {
    bin: PathBuf,
    module: PathBuf,
    home: PathBuf,
    provider: TestProvider,
}

impl Tf {
    fn run(&self, args: &[&str]) -> Output {
        let started = Instant::now();
        let out = Command::new(&self.bin)
            .args(args)
            .current_dir(&self.module)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("TF_IN_AUTOMATION", "1")
            .env("TF_INPUT", "0")
            .env("CHECKPOINT_DISABLE", "1")
            // Any registry or checkpoint request fails at once: init must not need one.
            .env("HTTPS_PROXY", "http://127.0.0.1:9")
            .env("HTTP_PROXY", "http://127.0.0.1:9")
            .envs(self.provider.env())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        eprintln!(
            "terraform {} took {:.2} s",
            args.first().unwrap_or(&""),
            started.elapsed().as_secs_f64()
        );
        out
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "terraform {args:?} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `plan -out=<file>` then `show -json <file>`: the plan's JSON.
    fn plan(&self, file: &str) -> Value {
        self.ok(&["plan", "-input=false", "-no-color", &format!("-out={file}")]);
        serde_json::from_str(&self.ok(&["show", "-json", file])).unwrap()
    }

    fn write_module(&self, resources: &str) {
        std::fs::write(
            self.module.join("main.tf"),
            format!("{REQUIRED_PROVIDERS}\n{resources}"),
        )
        .unwrap();
    }
}

/// The plan's `resource_changes` by address: (type, actions, change).
fn changes(plan: &Value) -> BTreeMap<String, (String, Vec<String>, Value)> {
    plan["resource_changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|rc| {
            let actions = rc["change"]["actions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_string())
                .collect();
            (
                rc["address"].as_str().unwrap().to_string(),
                (
                    rc["type"].as_str().unwrap().to_string(),
                    actions,
                    rc["change"].clone(),
                ),
            )
        })
        .collect()
}

fn setup(root: &Path) -> Option<Tf> {
    let bin = require_terraform()?;
    if !require_tf_provider() {
        return None;
    }
    let provider = TestProvider::install(&root.join("provider"));
    let module = root.join("module");
    let home = root.join("home");
    std::fs::create_dir_all(&module).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    Some(Tf {
        bin,
        module,
        home,
        provider,
    })
}

#[test]
fn terraform_plans_and_applies_creates_updates_deletes_and_replaces() {
    let root = tempfile::tempdir().unwrap();
    let Some(tf) = setup(root.path()) else { return };

    tf.write_module(
        r#"
resource "testing_thing" "web" {
  name = "web"
  kind = "server"
  tags = { env = "prod", team = "a" }
  size = 2
}

resource "testing_thing" "worker" {
  name = "worker"
  tags = { env = "prod" }
}

resource "testing_protected" "db" {
  name = "db"
  kind = "postgres"
}
"#,
    );
    let init = tf.ok(&["init", "-input=false", "-no-color"]);
    assert!(
        init.contains("Installed bosun/testing v0.1.0"),
        "init output:\n{init}"
    );

    let plan = tf.plan("p.tfplan");
    let c = changes(&plan);
    assert_eq!(
        c.keys().collect::<Vec<_>>(),
        [
            "testing_protected.db",
            "testing_thing.web",
            "testing_thing.worker"
        ]
    );
    for (address, ty) in [
        ("testing_protected.db", "testing_protected"),
        ("testing_thing.web", "testing_thing"),
        ("testing_thing.worker", "testing_thing"),
    ] {
        assert_eq!(c[address].0, ty, "{address}");
        assert_eq!(c[address].1, ["create"], "{address}");
        assert_eq!(c[address].2["before"], Value::Null, "{address}");
        assert_eq!(c[address].2["after_unknown"]["id"], true, "{address}");
    }
    let web = &c["testing_thing.web"].2["after"];
    assert_eq!(web["tags"], json!({"env": "prod", "team": "a"}));
    assert_eq!(web["kind"], "server");
    assert_eq!(web["size"], 2);
    assert_eq!(
        c["testing_thing.worker"].2["after"]["tags"],
        json!({"env": "prod"})
    );
    assert_eq!(c["testing_protected.db"].2["after"]["tags"], Value::Null);
    for rc in plan["resource_changes"].as_array().unwrap() {
        assert_eq!(rc["provider_name"], "registry.terraform.io/bosun/testing");
    }

    tf.ok(&["apply", "-input=false", "-no-color", "p.tfplan"]);

    // Drop the protected resource, change a tag, rename a thing.
    tf.write_module(
        r#"
resource "testing_thing" "web" {
  name = "web"
  kind = "server"
  tags = { env = "staging", team = "a" }
  size = 2
}

resource "testing_thing" "worker" {
  name = "worker-2"
  tags = { env = "prod" }
}
"#,
    );
    let plan = tf.plan("p2.tfplan");
    let c = changes(&plan);
    assert_eq!(c["testing_protected.db"].0, "testing_protected");
    assert_eq!(c["testing_protected.db"].1, ["delete"]);
    assert_eq!(
        c["testing_protected.db"].2["before"]["id"],
        "testing_protected/db"
    );
    assert_eq!(c["testing_protected.db"].2["after"], Value::Null);

    assert_eq!(c["testing_thing.web"].1, ["update"]);
    let web = &c["testing_thing.web"].2;
    assert_eq!(web["before"]["tags"], json!({"env": "prod", "team": "a"}));
    assert_eq!(web["after"]["tags"], json!({"env": "staging", "team": "a"}));
    assert_eq!(
        web["after"]["id"], "testing_thing/web",
        "an update keeps the id"
    );

    assert_eq!(c["testing_thing.worker"].1, ["delete", "create"]);
    let worker = &c["testing_thing.worker"].2;
    assert_eq!(worker["before"]["name"], "worker");
    assert_eq!(worker["after"]["name"], "worker-2");
    assert_eq!(worker["after_unknown"]["id"], true);

    // Applied, the module and the state agree: the next plan has nothing to do.
    tf.ok(&["apply", "-input=false", "-no-color", "p2.tfplan"]);
    let out = tf.run(&["plan", "-input=false", "-no-color", "-detailed-exitcode"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a plan after the apply should be empty:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let state: Value = serde_json::from_str(&tf.ok(&["show", "-json"])).unwrap();
    let mut ids: Vec<&str> = state["values"]["root_module"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["values"]["id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, ["testing_thing/web", "testing_thing/worker-2"]);
}

#[test]
fn the_launcher_and_config_sit_where_terraform_looks() {
    if !require_tf_provider() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let provider = TestProvider::install(root.path());
    let launcher = provider.launcher();
    assert!(launcher.starts_with(
        root.path()
            .join("mirror/registry.terraform.io/bosun/testing/0.1.0")
    ));
    assert_eq!(
        launcher.file_name().unwrap(),
        "terraform-provider-testing_v0.1.0"
    );
    let config = std::fs::read_to_string(provider.cli_config()).unwrap();
    assert!(config.contains(&format!(
        "path    = \"{}\"",
        root.path().join("mirror").display()
    )));
    assert_eq!(
        provider.env(),
        [(
            "TF_CLI_CONFIG_FILE".to_string(),
            provider.cli_config().display().to_string()
        )]
    );
}
