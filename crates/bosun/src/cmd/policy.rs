//! `bosun policy`: policies as code on this machine, with no server — `test` runs a
//! policy folder's `_test.rego` rules the way `opa test` does, `eval` decides on an input
//! document the way a run would.

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
    /// Evaluate DIR's policies on an input document (JSON, e.g. `terraform show -json`'s
    /// plan wrapped as `{"plan": …}`): prints the deny, warn and require_approval
    /// messages; exits 1 when something denies or an evaluation failed.
    Eval {
        /// The policy folder.
        dir: PathBuf,
        /// The input document (a JSON file; `-` for stdin).
        #[arg(long)]
        input: PathBuf,
    },
}

pub fn run(command: PolicyCommand, json: bool) -> anyhow::Result<ExitCode> {
    match command {
        PolicyCommand::Test { dir } => test(&dir, json),
        PolicyCommand::Eval { dir, input } => eval(&dir, &input, json),
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

fn eval(dir: &std::path::Path, input: &std::path::Path, json: bool) -> anyhow::Result<ExitCode> {
    use anyhow::Context as _;
    use std::io::Read as _;
    let limits = Limits::default();
    let mut text = String::new();
    let reader: Box<dyn std::io::Read> = if input == std::path::Path::new("-") {
        Box::new(std::io::stdin())
    } else {
        Box::new(
            std::fs::File::open(input)
                .with_context(|| format!("cannot read {}", input.display()))?,
        )
    };
    // One byte past the bound tells a file that is too large from one that fits.
    reader
        .take(limits.max_input_bytes as u64 + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("cannot read {}", input.display()))?;
    let document: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a JSON document", input.display()))?;
    let set = PolicySet::from_dir(dir, limits)?;
    let decision = set.decide(&document)?;
    if json {
        output::emit_json(&serde_json::to_value(&decision)?)?;
    } else {
        let mut out = String::new();
        for (word, list) in [
            ("deny", &decision.deny),
            ("warn", &decision.warn),
            ("require approval", &decision.require_approval),
            ("error", &decision.errors),
        ] {
            for m in list {
                out.push_str(&format!("{word}: {m}\n"));
            }
        }
        if out.is_empty() {
            out.push_str("nothing to say: no deny, warn or require_approval message\n");
        }
        out.push_str(&format!("({} ms)\n", decision.duration_ms));
        output::emit(&out)?;
    }
    Ok(if decision.deny.is_empty() && decision.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
