//! `bosun plan`: host plans. `exec` runs a plan file directly on the inventory's hosts
//! with no server (the same engine runners use); `lint` checks a plan file, offline with
//! `--inventory` (or with no server configured), else against the server's hosts.
//! `apply`, `list`, `show` and `delete` manage the plans stored on the server (runs of
//! them: `bosun plan-run`).

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use bosun_api::{
    ErrorCode, PlanFileSummary, PlanFinding, PlanInfo, PlanLintAnswer, PlanListItem,
    PlanScheduleView, PlanSource,
};
use bosun_plans::exec::{
    self, BatchStatus, Event, HostResult, HostStatus, RunOptions, RunReport, RunStatus, StepKind,
};
use bosun_plans::model::{self, Inventory, Plan};
use clap::{Args, Subcommand};
use serde_json::{json, Value};

use super::Ctx;
use crate::client::ApiFailure;
use crate::output::{self, timestamp, Fields, Table};

#[derive(Subcommand)]
pub enum PlanCommand {
    /// Run a plan file on its hosts directly, with no server (local development):
    /// live progress per host (with what raw commands print, `[host] line`), a summary,
    /// and a non-zero exit when the run failed.
    Exec(ExecArgs),
    /// Check a plan file: structure, malformed conditions, unresolvable references —
    /// against `--inventory`, or the server's hosts when a token is configured.
    Lint(LintArgs),
    /// Store a plan file on the server (org admins): created, or updated to a new
    /// version when a plan of its name exists. Lint findings are shown as warnings.
    Apply {
        /// The plan file (YAML).
        file: PathBuf,
    },
    /// The org's stored plans, by name, a page at a time.
    List(super::PageArgs),
    /// A stored plan: version, targets (and the hosts they match now), inputs, steps,
    /// and its schedule when one is set (cron, zone, next run, last outcome).
    Show {
        /// The stored plan's name.
        name: String,
        /// Print the plan file as stored instead.
        #[arg(long)]
        source: bool,
    },
    /// Delete a stored plan (org admins).
    Delete {
        /// The stored plan's name.
        name: String,
    },
    /// A stored plan's cron schedule: set, clear, or show (next run, last outcome).
    Schedule(super::plan_schedule::ScheduleArgs),
    /// Run a stored plan on its target hosts (a runner executes it); prints the run id.
    /// Same as `bosun plan-run start`.
    Run(RunArgs),
    /// Dry-run a stored plan: per host and step what would change (with diffs), what
    /// would not, what cannot be known, and every unresolved reference.
    DryRun(RunArgs),
    /// A stored plan's runs, newest first.
    Runs {
        /// The stored plan's name.
        name: String,
        /// Show at most this many runs (1–1000; the server defaults to 100).
        #[arg(long)]
        limit: Option<u32>,
        /// Show runs older than this run (the last one listed: pages back).
        #[arg(long)]
        cursor: Option<String>,
    },
}

#[derive(Args)]
pub struct RunArgs {
    /// The stored plan's name.
    name: String,
    /// Predict instead of acting (`bosun plan dry-run` implies it).
    #[arg(long)]
    dry_run: bool,
    /// A run override, NAME=VALUE (repeatable); NAME must be one of the plan's inputs.
    #[arg(long = "input", value_name = "NAME=VALUE", value_parser = parse_input)]
    inputs: Vec<(String, String)>,
    /// Follow the log until the run ends, then show it; exit non-zero unless it
    /// succeeded.
    #[arg(long)]
    wait: bool,
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

pub(super) fn parse_input(s: &str) -> Result<(String, String), String> {
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

/// Runs a `bosun plan` subcommand; `json` prints machine-readable output. `server` is
/// the client context, or why there is none (no token): `exec` and an offline `lint`
/// do without.
pub async fn run(
    command: PlanCommand,
    json: bool,
    server: anyhow::Result<Ctx>,
) -> anyhow::Result<ExitCode> {
    match command {
        PlanCommand::Exec(args) => exec_cmd(args, json).await,
        PlanCommand::Lint(args) => match server {
            Ok(ctx) if args.inventory.is_none() => server_lint(&ctx, &args.file).await,
            _ => lint_cmd(args, json),
        },
        other => {
            stored(&server?, other).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn exec_cmd(args: ExecArgs, json: bool) -> anyhow::Result<ExitCode> {
    let plan = read_plan(&args.file)?;
    if !plan.targets.hosts_from.is_empty() {
        anyhow::bail!(
            "{}: targets.hosts_from takes hosts from stacks' outputs, which only the server \
             has: run the plan on the server (`bosun plan-run start`)",
            args.file.display()
        );
    }
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
            Event::BatchStarted {
                batch,
                batches,
                hosts,
            } => (*batches > 1).then(|| format!("batch {batch}/{batches}: {}", hosts.join(", "))),
            Event::Pausing {
                after_batch,
                duration,
            } => Some(format!(
                "pausing {}s after batch {after_batch}",
                duration.as_secs_f64()
            )),
            Event::Output(line) => Some(line.display()),
            Event::HostFinished {
                step,
                step_name,
                kind,
                result,
                ..
            } => Some(progress_line(
                &stage_label(*kind, *step, steps_total, step_name),
                result,
                args.dry_run,
            )),
            Event::Halted(h) => Some(format!("halted: {}; every later step is skipped", h.reason)),
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

/// How a progress line names what ran: `2/5 restart`, `handler reload nginx`,
/// `health check`.
fn stage_label(kind: StepKind, step: usize, total: usize, name: &str) -> String {
    match kind {
        StepKind::Step => format!("{step}/{total} {name}"),
        StepKind::Handler => format!("handler {name}"),
        StepKind::HealthCheck if name == "health check" => name.to_string(),
        StepKind::HealthCheck => format!("health check {name}"),
    }
}

fn progress_line(label: &str, result: &HostResult, dry_run: bool) -> String {
    let mut line = format!(
        "[{label}] {}: {}",
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
            "\n{} {:?} ({})\n",
            match step.kind {
                StepKind::Step => format!("step {}", step.number),
                StepKind::Handler => match step.flushed_at {
                    Some(at) => format!("handler (flushed at step {at})"),
                    None => "handler".to_string(),
                },
                StepKind::HealthCheck => "health check".to_string(),
            },
            step.name,
            step.module
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

    if report.batches.len() > 1 {
        out.push_str("\nBatches:\n");
        for b in &report.batches {
            let status = match b.status {
                BatchStatus::Succeeded => "succeeded".to_string(),
                BatchStatus::Failed => format!("failed on {}", b.failed.join(", ")),
                BatchStatus::NotRun => "not run".to_string(),
            };
            out.push_str(&format!(
                "  {}: {} — {status}\n",
                b.number,
                b.hosts.join(", ")
            ));
        }
    }
    out.push('\n');
    out.push_str(&match (&report.halted, dry) {
        (None, false) if report.status == RunStatus::Failed => format!(
            "Run of {:?} failed on {} (within max_fail_percentage: the rollout went on).\n",
            report.plan,
            report
                .summary()
                .into_iter()
                .filter(|s| s.failed > 0)
                .map(|s| s.host)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        (None, false) => format!("Run of {:?} succeeded.\n", report.plan),
        (None, true) => format!("Dry run of {:?} finished.\n", report.plan),
        (Some(h), _) if h.reason.starts_with("step ") => format!(
            "{} of {:?} failed at step {} ({:?}) on {}.\n",
            if dry { "Dry run" } else { "Run" },
            report.plan,
            h.step,
            h.step_name,
            h.hosts.join(", ")
        ),
        (Some(h), _) => format!(
            "{} of {:?} failed: {}.\n",
            if dry { "Dry run" } else { "Run" },
            report.plan,
            h.reason
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

// ---- Plans stored on the server ----

fn read_source(file: &Path) -> anyhow::Result<PlanSource> {
    let source =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    Ok(PlanSource {
        source,
        file: Some(file.display().to_string()),
    })
}

fn findings_text(findings: &[PlanFinding]) -> String {
    findings
        .iter()
        .map(|f| format!("{}:{}:{}: {}\n", f.file, f.line, f.column, f.message))
        .collect()
}

fn list_or_dash(v: &[String]) -> String {
    if v.is_empty() {
        "-".into()
    } else {
        v.join(", ")
    }
}

fn summary_fields(f: &mut Fields, s: &PlanFileSummary) {
    let mut targets = Vec::new();
    if !s.target_hosts.is_empty() {
        targets.push(format!("hosts: {}", s.target_hosts.join(", ")));
    }
    if !s.target_labels.is_empty() {
        targets.push(format!("labels: {}", s.target_labels.join(", ")));
    }
    if !s.target_environments.is_empty() {
        targets.push(format!(
            "environments: {}",
            s.target_environments.join(", ")
        ));
    }
    f.lines("targets", targets)
        .add("hosts now", list_or_dash(&s.hosts))
        .lines(
            "inputs",
            s.inputs
                .iter()
                .map(|(k, v)| match v {
                    Value::Null => k.clone(),
                    v => format!("{k} (default {v})"),
                })
                .collect(),
        )
        .lines(
            "steps",
            s.steps
                .iter()
                .enumerate()
                .map(|(i, st)| {
                    let mut line = format!("{}. {} ({})", i + 1, st.name, st.module);
                    if st.sudo {
                        line.push_str(" sudo");
                    }
                    if let Some(w) = &st.when {
                        line.push_str(&format!(" when: {w}"));
                    }
                    line
                })
                .collect(),
        );
    if let Some(s) = &s.schedule {
        let mut line = format!("{} ({})", s.cron, s.timezone);
        if !s.inputs.is_empty() {
            let inputs: Vec<String> = s.inputs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            line.push_str(&format!(" inputs: {}", inputs.join(", ")));
        }
        f.add("schedule in file", line);
    }
}

/// What the last fire of a schedule did: the run it started, or why none.
fn last_outcome(s: &PlanScheduleView) -> String {
    let Some(at) = &s.last_fire_at else {
        return "- (not fired yet)".into();
    };
    match (&s.last_run, &s.last_note) {
        (Some(run), Some(note)) => format!("{}: started {run} ({note})", timestamp(at)),
        (Some(run), None) => format!("{}: started {run}", timestamp(at)),
        (None, Some(note)) => format!("{}: {note}", timestamp(at)),
        (None, None) => format!("{}: no run", timestamp(at)),
    }
}

fn schedule_fields(f: &mut Fields, s: &PlanScheduleView) {
    f.add("scheduled", format!("{} ({})", s.cron, s.timezone))
        .add(
            "next run",
            match &s.next_run_at {
                Some(t) => timestamp(t),
                None => "(armed on the scheduler's next pass)".into(),
            },
        )
        .add("last outcome", last_outcome(s));
    if !s.inputs.is_empty() {
        f.lines(
            "scheduled inputs",
            s.inputs.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        );
    }
}

/// A stored plan's schedule as the server shows it; `None` when the plan has none.
async fn stored_schedule(ctx: &Ctx, name: &str) -> anyhow::Result<Option<Value>> {
    let path = ["orgs", ctx.org.as_str(), "plans", name, "schedule"];
    match ctx.client.get(&path, &[]).await {
        Ok(v) => Ok(Some(v)),
        Err(e)
            if e.downcast_ref::<ApiFailure>().is_some_and(|f| {
                matches!(f.code, ErrorCode::NotFound | ErrorCode::RouteNotFound)
            }) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

fn plan_text(p: &PlanInfo, schedule: Option<&PlanScheduleView>) -> String {
    let mut f = Fields::new();
    f.add("plan", p.name.clone())
        .add("version", p.version.to_string());
    summary_fields(&mut f, &p.summary);
    if let Some(s) = schedule {
        schedule_fields(&mut f, s);
    }
    f.add(
        "updated",
        format!("{} by {}", timestamp(&p.updated_at), p.updated_by),
    );
    let mut out = f.render();
    if !p.warnings.is_empty() {
        out.push_str(&format!("\n{} warning(s):\n", p.warnings.len()));
        out.push_str(&findings_text(&p.warnings));
    }
    out
}

/// `lint` against the server's hosts and environments (nothing is stored).
async fn server_lint(ctx: &Ctx, file: &Path) -> anyhow::Result<ExitCode> {
    let org = ctx.org.as_str();
    let reply = ctx
        .client
        .post(&["orgs", org, "plans", "lint"], &read_source(file)?)
        .await?;
    let answer: PlanLintAnswer = super::decode(reply)?;
    if ctx.json {
        output::emit_json(&json!({
            "findings": answer.warnings,
            "hosts": answer.summary.hosts,
        }))?;
    } else if answer.warnings.is_empty() {
        output::emit(&format!(
            "{}: no problems found (against org {org}: targets {})\n",
            file.display(),
            list_or_dash(&answer.summary.hosts)
        ))?;
    } else {
        let mut text = findings_text(&answer.warnings);
        text.push_str(&format!(
            "{} problem(s) (against the hosts of org {org})\n",
            answer.warnings.len()
        ));
        output::emit(&text)?;
    }
    Ok(if answer.warnings.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

async fn stored(ctx: &Ctx, command: PlanCommand) -> anyhow::Result<()> {
    let org = ctx.org.as_str();
    match command {
        PlanCommand::Exec(_) | PlanCommand::Lint(_) => Ok(()),
        PlanCommand::Run(a) => {
            super::plan_run::start(ctx, &a.name, a.dry_run, a.inputs, a.wait).await
        }
        PlanCommand::DryRun(a) => {
            super::plan_run::start(ctx, &a.name, true, a.inputs, a.wait).await
        }
        PlanCommand::Runs {
            name,
            limit,
            cursor,
        } => {
            let list = super::plan_run::PlanRunCommand::List {
                plan: name,
                limit,
                cursor,
            };
            super::plan_run::run(ctx, list).await
        }
        PlanCommand::Apply { file } => {
            let reply = ctx
                .client
                .post(&["orgs", org, "plans"], &read_source(&file)?)
                .await?;
            ctx.show(reply, |p: PlanInfo| {
                let verb = if p.created == Some(true) {
                    format!("created plan {} (version 1)", p.name)
                } else {
                    format!("updated plan {} to version {}", p.name, p.version)
                };
                format!("{verb}\n{}", plan_text(&p, None))
            })
        }
        PlanCommand::List(paging) => {
            let path = ["orgs", org, "plans"];
            super::list_pages(
                ctx,
                &path,
                &[],
                paging,
                "plans",
                |plans: Vec<PlanListItem>| {
                    if plans.is_empty() {
                        return format!("No plans in org {org}.\n");
                    }
                    let mut t = Table::new(&["NAME", "VERSION", "UPDATED", "BY"]);
                    for p in plans {
                        t.row(vec![
                            p.name,
                            p.version.to_string(),
                            timestamp(&p.updated_at),
                            p.updated_by,
                        ]);
                    }
                    t.render()
                },
            )
            .await
        }
        PlanCommand::Show { name, source } => {
            let reply = ctx.client.get(&["orgs", org, "plans", &name], &[]).await?;
            if source && !ctx.json {
                let p: PlanInfo = super::decode(reply)?;
                return output::emit(&p.source);
            }
            let schedule = stored_schedule(ctx, &name).await?;
            if ctx.json {
                // The plan as the server shows it, with `schedule` (null when none).
                let mut v = reply;
                if let Value::Object(m) = &mut v {
                    m.insert("schedule".into(), schedule.unwrap_or(Value::Null));
                }
                return output::emit_json(&v);
            }
            let schedule: Option<PlanScheduleView> = schedule.map(super::decode).transpose()?;
            ctx.show(reply, |p: PlanInfo| plan_text(&p, schedule.as_ref()))
        }
        PlanCommand::Delete { name } => {
            ctx.client.delete(&["orgs", org, "plans", &name]).await?;
            ctx.done(&format!("deleted plan {name}"))
        }
        PlanCommand::Schedule(args) => super::plan_schedule::run(ctx, args).await,
    }
}
