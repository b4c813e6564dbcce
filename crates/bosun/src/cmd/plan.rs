//! `bosun plan`: host plans. `exec` runs a plan file directly on the inventory's hosts
//! with no server (the same engine runners use) and `lint` checks a plan file; both
//! work offline. Server-backed subcommands (`apply`, `list`, `show`, `run`) join this
//! enum later and take the client context then.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use bosun_plans::exec::{self, Event, HostResult, HostStatus, RunOptions, RunReport, RunStatus};
use bosun_plans::model::{self, Inventory, Plan};
use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::output::{self, Table};

#[derive(Subcommand)]
pub enum PlanCommand {
    /// Run a plan file on its hosts directly, with no server (local development):
    /// live progress per host, a summary, and a non-zero exit when the run failed.
    Exec(ExecArgs),
    /// Check a plan file: structure, malformed conditions, unresolvable references.
    Lint(LintArgs),
}

#[derive(Args)]
pub struct ExecArgs {
    /// The plan file (YAML).
    file: PathBuf,
    /// The inventory file: hosts, environments, defaults.
    #[arg(long, short = 'i', value_name = "FILE")]
    inventory: PathBuf,
    /// Predict instead of acting: per host and step, what would change (with a diff
    /// for file modules), what would not, and what cannot be known.
    #[arg(long)]
    dry_run: bool,
    /// A run override, NAME=VALUE (repeatable); NAME must be one of the plan's inputs.
    #[arg(long = "input", value_name = "NAME=VALUE", value_parser = parse_input)]
    inputs: Vec<(String, String)>,
    /// At most this many hosts work at once.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    forks: u32,
}

#[derive(Args)]
pub struct LintArgs {
    /// The plan file (YAML).
    file: PathBuf,
    /// An inventory, so references to host and environment variables can be checked.
    #[arg(long, short = 'i', value_name = "FILE")]
    inventory: Option<PathBuf>,
}

fn parse_input(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected NAME=VALUE, got {s:?}")),
    }
}

pub fn read_plan(path: &Path) -> anyhow::Result<Plan> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(model::parse_plan(path, &text)?)
}

pub fn read_inventory(path: &Path) -> anyhow::Result<Inventory> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(model::parse_inventory(path, &text)?)
}

/// Runs a `bosun plan` subcommand; `json` prints machine-readable output.
pub async fn run(command: PlanCommand, json: bool) -> anyhow::Result<ExitCode> {
    match command {
        PlanCommand::Exec(args) => exec_cmd(args, json).await,
        PlanCommand::Lint(args) => lint_cmd(args, json),
    }
}

async fn exec_cmd(args: ExecArgs, json: bool) -> anyhow::Result<ExitCode> {
    let plan = read_plan(&args.file)?;
    let inventory = read_inventory(&args.inventory)?;
    let options = RunOptions {
        dry_run: args.dry_run,
        forks: usize::try_from(args.forks).unwrap_or(1),
        inputs: args
            .inputs
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect::<BTreeMap<_, _>>(),
        ..RunOptions::default()
    };
    // Progress goes to stdout for people, to stderr (on a terminal only) beside --json.
    let live = !json || std::io::stderr().is_terminal();
    let mut steps_total = 0;
    let report = exec::run(&plan, &inventory, options, |event| {
        if !live {
            return;
        }
        let line = match &event {
            Event::Started {
                plan,
                hosts,
                steps,
                dry_run,
            } => {
                steps_total = *steps;
                Some(format!(
                    "{} {plan:?}: {} step(s) on {} host(s)",
                    if *dry_run { "dry run of" } else { "running" },
                    steps,
                    hosts.len()
                ))
            }
            Event::StepStarted { .. } | Event::Finished { .. } => None,
            Event::HostFinished {
                step,
                step_name,
                result,
            } => Some(progress_line(
                *step,
                steps_total,
                step_name,
                result,
                args.dry_run,
            )),
            Event::Halted(h) => Some(format!(
                "halted: step {} ({:?}) failed on {}; every later step is skipped",
                h.step,
                h.step_name,
                h.hosts.join(", ")
            )),
        };
        if let Some(line) = line {
            if json {
                eprintln!("{line}");
            } else {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}").and_then(|()| out.flush());
            }
        }
    })
    .await?;
    if json {
        output::emit_json(&serde_json::to_value(&report)?)?;
    } else {
        output::emit(&render_report(&report))?;
    }
    Ok(match report.status {
        RunStatus::Succeeded => ExitCode::SUCCESS,
        RunStatus::Failed => ExitCode::FAILURE,
    })
}

/// What a status is called in this mode.
fn status_word(result: &HostResult, dry_run: bool) -> String {
    let word = match (result.status, dry_run) {
        (HostStatus::Ok, false) => "ok",
        (HostStatus::Ok, true) => "no change",
        (HostStatus::Changed, false) => "changed",
        (HostStatus::Changed, true) => "would change",
        (HostStatus::Unknown, _) => "cannot know",
        (HostStatus::Failed, _) => "failed",
        (HostStatus::TimedOut, _) => "timed out",
        (HostStatus::Skipped, _) => "skipped",
    };
    if result.ignored {
        format!("{word} (ignored)")
    } else {
        word.to_string()
    }
}

fn progress_line(
    step: usize,
    total: usize,
    step_name: &str,
    result: &HostResult,
    dry_run: bool,
) -> String {
    let mut line = format!(
        "[{step}/{total} {step_name}] {}: {}",
        result.host,
        status_word(result, dry_run)
    );
    let detail = match result.status {
        HostStatus::Failed | HostStatus::TimedOut | HostStatus::Skipped => {
            Some(result.message.as_str())
        }
        _ => None,
    };
    if let Some(d) = detail.filter(|d| !d.is_empty()) {
        line.push_str(" — ");
        line.push_str(d);
    }
    if result.status != HostStatus::Skipped {
        line.push_str(&format!(" ({} ms)", result.duration_ms));
    }
    line
}

fn indent(text: &str, by: &str) -> String {
    text.lines()
        .map(|l| format!("{by}{l}\n"))
        .collect::<String>()
}

/// The report after the progress lines: details, the summary table, warnings, and the
/// unresolved references at the bottom.
fn render_report(report: &RunReport) -> String {
    let mut out = String::new();
    let dry = report.dry_run;
    // Details: in a dry run, every host and step; in a real run, what failed.
    let mut details = String::new();
    for step in &report.steps {
        let shown: Vec<&HostResult> = step
            .results
            .iter()
            .filter(|r| {
                if dry {
                    r.status != HostStatus::Skipped || r.message.contains("condition")
                } else {
                    r.status.is_failure()
                }
            })
            .collect();
        if shown.is_empty() {
            continue;
        }
        details.push_str(&format!(
            "\nstep {} {:?} ({})\n",
            step.number, step.name, step.module
        ));
        for r in shown {
            details.push_str(&format!(
                "  {}: {} — {}\n",
                r.host,
                status_word(r, dry),
                r.message
            ));
            for w in &r.warnings {
                details.push_str(&format!("    warning: {w}\n"));
            }
            if let Some(diff) = &r.diff {
                details.push_str(&indent(diff, "    "));
            }
            if !dry && r.status.is_failure() {
                let stderr = r.stderr.trim_end();
                if !stderr.is_empty() {
                    let lines: Vec<&str> = stderr.lines().collect();
                    let tail = &lines[lines.len().saturating_sub(10)..];
                    details.push_str("    stderr:\n");
                    for l in tail {
                        details.push_str(&format!("      {l}\n"));
                    }
                }
            }
        }
    }
    if !details.is_empty() {
        out.push_str(if dry {
            "\nDry run (against the hosts as they are now):\n"
        } else {
            "\nFailures:\n"
        });
        out.push_str(&details);
    }

    out.push('\n');
    let headers: &[&'static str] = if dry {
        &[
            "HOST",
            "NO CHANGE",
            "WOULD CHANGE",
            "CANNOT KNOW",
            "FAILED",
            "IGNORED",
            "SKIPPED",
        ]
    } else {
        &["HOST", "OK", "CHANGED", "FAILED", "IGNORED", "SKIPPED"]
    };
    let mut table = Table::new(headers);
    for s in report.summary() {
        let mut row = vec![s.host.clone(), s.ok.to_string(), s.changed.to_string()];
        if dry {
            row.push(s.unknown.to_string());
        }
        row.extend([
            s.failed.to_string(),
            s.ignored.to_string(),
            s.skipped.to_string(),
        ]);
        table.row(row);
    }
    out.push_str(&table.render());

    // A dry run showed each warning under its step already.
    let run_warnings: Vec<String> = report
        .warnings
        .iter()
        .filter(|w| !dry && !w.message.starts_with("unresolved reference"))
        .map(|w| match (&w.host, w.step) {
            (Some(h), Some(s)) => format!("  step {s} on {h}: {}", w.message),
            (Some(h), None) => format!("  {h}: {}", w.message),
            _ => format!("  {}", w.message),
        })
        .collect();
    if !run_warnings.is_empty() {
        out.push_str("\nWarnings:\n");
        for w in run_warnings {
            out.push_str(&w);
            out.push('\n');
        }
    }

    out.push('\n');
    out.push_str(&match (&report.halted, dry) {
        (None, false) => format!("Run of {:?} succeeded.\n", report.plan),
        (None, true) => format!("Dry run of {:?} finished.\n", report.plan),
        (Some(h), _) => format!(
            "{} of {:?} failed at step {} ({:?}) on {}.\n",
            if dry { "Dry run" } else { "Run" },
            report.plan,
            h.step,
            h.step_name,
            h.hosts.join(", ")
        ),
    });

    if !report.unresolved.is_empty() {
        // reference → step → hosts, in first-seen order.
        let mut grouped: Vec<(String, Vec<Place>)> = Vec::new();
        for u in &report.unresolved {
            let idx = match grouped.iter().position(|(r, _)| *r == u.reference) {
                Some(i) => i,
                None => {
                    grouped.push((u.reference.clone(), Vec::new()));
                    grouped.len() - 1
                }
            };
            let steps = &mut grouped[idx].1;
            match steps.iter_mut().find(|(n, _, _)| *n == u.step) {
                Some((_, _, hosts)) => hosts.push(u.host.clone()),
                None => steps.push((u.step, u.step_name.clone(), vec![u.host.clone()])),
            }
        }
        out.push_str("\nUnresolved variables (rendered empty):\n");
        for (reference, steps) in grouped {
            let places: Vec<String> = steps
                .iter()
                .map(|(n, name, hosts)| format!("step {n} {name:?} on {}", hosts.join(", ")))
                .collect();
            out.push_str(&format!("  {reference} — {}\n", places.join("; ")));
        }
    }
    out
}

/// A step (number, name) and the hosts where a reference did not resolve.
type Place = (usize, String, Vec<String>);

fn lint_cmd(args: LintArgs, json: bool) -> anyhow::Result<ExitCode> {
    let plan = read_plan(&args.file)?;
    let inventory = match &args.inventory {
        Some(p) => Some(read_inventory(p)?),
        None => None,
    };
    let report = model::lint(&plan, inventory.as_ref());
    if json {
        let findings: Vec<Value> = report
            .findings
            .iter()
            .map(|f| {
                json!({
                    "file": f.location.file,
                    "line": f.location.line,
                    "column": f.location.column,
                    "message": f.message,
                })
            })
            .collect();
        output::emit_json(&json!({ "findings": findings }))?;
    } else if report.findings.is_empty() {
        output::emit(&format!("{}: no problems found\n", args.file.display()))?;
    } else {
        let mut text = String::new();
        for f in &report.findings {
            text.push_str(&format!("{}: {}\n", f.location, f.message));
        }
        text.push_str(&format!("{} problem(s)\n", report.findings.len()));
        output::emit(&text)?;
    }
    Ok(if report.findings.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
