//! `bosun policy`: policies as code on this machine, with no server — `test` runs a
//! policy folder's `_test.rego` rules the way `opa test` does.

use std::path::PathBuf;
use std::process::ExitCode;

use bosun_policy::{Limits, PolicySet};
use clap::Subcommand;

use crate::output;

#[derive(Subcommand)]
pub enum PolicyCommand {
    /// Run the `test_` rules of DIR's `_test.rego` files against its policies; exits 1
    /// when one fails.
    Test {
        /// The policy folder (its `.rego` files; not recursive).
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
}

pub fn run(command: PolicyCommand, json: bool) -> anyhow::Result<ExitCode> {
    match command {
        PolicyCommand::Test { dir } => test(&dir, json),
    }
}

fn test(dir: &std::path::Path, json: bool) -> anyhow::Result<ExitCode> {
    let set = PolicySet::from_dir(dir, Limits::default())?;
    let results = set.run_tests()?;
    let failed = results.iter().filter(|r| !r.passed).count();
    if json {
        output::emit_json(&serde_json::to_value(&results)?)?;
    } else {
        let mut out = String::new();
        for r in &results {
            match (&r.why, r.passed) {
                (_, true) => out.push_str(&format!("PASS {} ({} ms)\n", r.name, r.duration_ms)),
                (Some(why), false) => out.push_str(&format!("FAIL {}: {why}\n", r.name)),
                (None, false) => out.push_str(&format!("FAIL {}\n", r.name)),
            }
        }
        out.push_str(&match (results.len(), failed) {
            (0, _) => format!("no test_ rule in {}'s _test.rego files\n", dir.display()),
            (n, 0) => format!("{n} test(s) passed\n"),
            (n, f) => format!("{f} of {n} test(s) failed\n"),
        });
        output::emit(&out)?;
    }
    Ok(if failed == 0 && !results.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
