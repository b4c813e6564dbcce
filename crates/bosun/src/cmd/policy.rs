//! `bosun policy`: policies as code. On this machine, with no server, `test` runs a
//! policy folder's `_test.rego` rules the way `opa test` does and `eval` decides on an
//! input document the way a run would; on the server, `set` saves an org's policy
//! (uploaded from a folder, or read from a git repository), `list`, `show` and `delete`.

use std::path::PathBuf;
use std::process::ExitCode;

use std::collections::BTreeMap;

use anyhow::Context as _;
use bosun_api::{PolicyPut, PolicyView};
use bosun_policy::{Limits, PolicySet};
use clap::Subcommand;

use super::Ctx;
use crate::output::{self, timestamp, Fields, Table};

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
    /// plan wrapped as `{"plan": …}`): prints the deny, warn, require_approval, skip and
    /// trigger messages; exits 1 when something denies or an evaluation failed.
    Eval {
        /// The policy folder.
        dir: PathBuf,
        /// The input document (a JSON file; `-` for stdin).
        #[arg(long)]
        input: PathBuf,
    },
    /// Create or replace an org policy (org admins): its `.rego` files uploaded from
    /// --dir (checked first: `_test.rego` files are left out), or read from a git
    /// repository's folder at the branch head on every evaluation (--repository).
    Set {
        /// The policy's name (a slug).
        name: String,
        /// Upload this folder's policy files (not recursive).
        #[arg(long, conflicts_with = "repository")]
        dir: Option<PathBuf>,
        /// Read the policy from this git repository instead: a git URL, or
        /// github:owner/repo (read through the GitHub App).
        #[arg(long)]
        repository: Option<String>,
        /// The repository's branch (default main).
        #[arg(long, requires = "repository")]
        branch: Option<String>,
        /// The folder in the repository (default: its root).
        #[arg(long, requires = "repository")]
        path: Option<String>,
        /// advisory | soft_mandatory (default) | hard_mandatory.
        #[arg(long)]
        mode: Option<String>,
        /// Where it is evaluated: plan (default), plan_run, approval, trigger. Repeatable.
        #[arg(long = "point")]
        points: Vec<String>,
        /// Attach it to the stacks with this label (repeatable).
        #[arg(long = "label")]
        labels: Vec<String>,
        /// Attach it to the stacks in this environment (repeatable). With no --label and
        /// no --env, it applies to the whole org.
        #[arg(long = "env")]
        environments: Vec<String>,
        /// What an evaluation error counts as: deny (default) or warn.
        #[arg(long)]
        on_error: Option<String>,
    },
    /// List the org's policies.
    List,
    /// Show a policy (with its uploaded files).
    Show {
        /// The policy's name.
        name: String,
    },
    /// Delete a policy (org admins); its evaluations stay on their runs.
    Delete {
        /// The policy's name.
        name: String,
    },
}

pub async fn run(
    command: PolicyCommand,
    json: bool,
    server: anyhow::Result<Ctx>,
) -> anyhow::Result<ExitCode> {
    match command {
        PolicyCommand::Test { dir } => test(&dir, json),
        PolicyCommand::Eval { dir, input } => eval(&dir, &input, json),
        other => {
            stored(&server?, other).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The policy files of `dir` to upload: its `.rego` files but the tests.
fn read_folder(dir: &std::path::Path) -> anyhow::Result<BTreeMap<String, String>> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().to_string();
        if !name.ends_with(".rego") || name.ends_with("_test.rego") || !entry.path().is_file() {
            continue;
        }
        let text = std::fs::read_to_string(entry.path())
            .with_context(|| format!("cannot read {}", entry.path().display()))?;
        files.insert(name, text);
    }
    if files.is_empty() {
        anyhow::bail!("{} has no .rego policy file", dir.display());
    }
    // Refused here, with the file and line, rather than by the server.
    PolicySet::from_dir(dir, Limits::default())?.packages()?;
    Ok(files)
}

async fn stored(ctx: &Ctx, command: PolicyCommand) -> anyhow::Result<()> {
    let org = ctx.org.as_str();
    match command {
        PolicyCommand::Set {
            name,
            dir,
            repository,
            branch,
            path,
            mode,
            points,
            labels,
            environments,
            on_error,
        } => {
            let files = match (&dir, &repository) {
                (Some(d), _) => Some(read_folder(d)?),
                (None, Some(_)) => None,
                (None, None) => anyhow::bail!("give --dir DIR (upload) or --repository URL"),
            };
            let body = PolicyPut {
                mode,
                on_error,
                points: (!points.is_empty()).then_some(points),
                labels,
                environments,
                files,
                repository,
                branch,
                path,
            };
            let reply = ctx
                .client
                .put(&["orgs", org, "policies", &name], &body)
                .await?;
            ctx.show(reply, |p: PolicyView| {
                format!(
                    "policy {} saved ({}, version {}), attached to {}\n",
                    p.name, p.mode, p.version, p.attached_to
                )
            })
        }
        PolicyCommand::List => {
            super::list_all(
                ctx,
                &["orgs", org, "policies"],
                &[],
                "policies",
                |all: Vec<PolicyView>| {
                    let mut t =
                        Table::new(&["NAME", "MODE", "POINTS", "ATTACHED TO", "SOURCE", "VERSION"]);
                    for p in all {
                        let source = match &p.repository {
                            Some(r) => format!(
                                "{r}@{}:{}",
                                p.branch.clone().unwrap_or_default(),
                                p.path.clone().unwrap_or_default()
                            ),
                            None => format!("upload ({} files)", p.files.len()),
                        };
                        t.row(vec![
                            p.name,
                            p.mode,
                            p.points.join(","),
                            p.attached_to,
                            source,
                            p.version,
                        ]);
                    }
                    t.render()
                },
            )
            .await
        }
        PolicyCommand::Show { name } => {
            let reply = ctx
                .client
                .get(&["orgs", org, "policies", &name], &[])
                .await?;
            ctx.show(reply, |p: PolicyView| {
                let mut f = Fields::new();
                f.add("name", p.name.clone())
                    .add("mode", p.mode.clone())
                    .add("on error", p.on_error.clone())
                    .add("points", p.points.join(", "))
                    .add("attached to", p.attached_to.clone())
                    .add("source", p.source.clone())
                    .add("version", p.version.clone())
                    .add(
                        "updated",
                        format!("{} by {}", timestamp(&p.updated_at), p.updated_by),
                    );
                if let Some(r) = &p.repository {
                    f.add("repository", r.clone())
                        .add("branch", p.branch.clone().unwrap_or_default())
                        .add("path", p.path.clone().unwrap_or_default());
                }
                let mut out = f.render();
                for (file, text) in &p.texts {
                    out.push_str(&format!("\n--- {file}\n{text}"));
                    if !text.ends_with('\n') {
                        out.push('\n');
                    }
                }
                out
            })
        }
        PolicyCommand::Delete { name } => {
            ctx.client.delete(&["orgs", org, "policies", &name]).await?;
            ctx.done(&format!("policy {name} deleted"))
        }
        PolicyCommand::Test { .. } | PolicyCommand::Eval { .. } => Ok(()),
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
            ("skip", &decision.skip),
            ("trigger", &decision.trigger),
            ("error", &decision.errors),
        ] {
            for m in list {
                out.push_str(&format!("{word}: {m}\n"));
            }
        }
        if out.is_empty() {
            out.push_str(
                "nothing to say: no deny, warn, require_approval, skip or trigger message\n",
            );
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
