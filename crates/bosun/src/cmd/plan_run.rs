//! `bosun plan-run`: runs of plans stored on the server — start one (or a dry run) and
//! optionally wait for it, list a plan's runs, show one with its per-host summary, each
//! host's step output (its last lines), a dry run's unresolved references at the bottom
//! and a paused run's preview summary, print or follow its log, abort it.

use std::collections::BTreeMap;

use anyhow::bail;
use bosun_api::{LogChunk, PlanHostResult, PlanRunCreate, PlanRunView};
use bosun_core::plan_run::{describe_preview, output_tail};
use clap::Subcommand;
use serde_json::{json, Value};

use super::run::LogPrinter;
use super::{decode, Ctx};
use crate::output::{emit, emit_json, opt_timestamp, timestamp, Fields, Table};

#[derive(Subcommand)]
pub enum PlanRunCommand {
    /// Run a stored plan on its target hosts (a runner executes it); prints the run id.
    Start {
        /// The stored plan's name.
        plan: String,
        /// Predict instead of acting: what would change per host and step, with diffs,
        /// and every unresolved reference.
        #[arg(long)]
        dry_run: bool,
        /// A run override, NAME=VALUE (repeatable); NAME must be one of the plan's inputs.
        #[arg(long = "input", value_name = "NAME=VALUE", value_parser = super::plan::parse_input)]
        inputs: Vec<(String, String)>,
        /// Follow the log until the run ends, then show it; exit non-zero unless it
        /// succeeded.
        #[arg(long)]
        wait: bool,
    },
    /// A plan's runs, newest first.
    List {
        /// The stored plan's name.
        plan: String,
        /// Show at most this many runs (1–1000; the server defaults to 100).
        #[arg(long)]
        limit: Option<u32>,
        /// Show runs older than this run (the last one listed: pages back).
        #[arg(long)]
        cursor: Option<String>,
    },
    /// A run: state and why, per-host summary and results, what each step printed on
    /// each host (its last lines; `--json` has all of it), a dry run's unresolved
    /// references.
    Show {
        /// The plan run's id (`prun-…`).
        run: String,
    },
    /// Print a run's log.
    Logs {
        /// The plan run's id (`prun-…`).
        run: String,
        /// Keep printing until the run ends; exit non-zero unless it succeeded.
        #[arg(long)]
        follow: bool,
        /// Start each line with when the server received it (UTC).
        #[arg(long)]
        timestamps: bool,
    },
    /// Abort a run: settled at once; a runner executing it stops.
    Abort {
        /// The plan run's id (`prun-…`).
        run: String,
    },
}

/// The per-host totals over a run's results.
fn summary_table(run: &PlanRunView) -> String {
    let mut totals: BTreeMap<&str, [usize; 6]> = BTreeMap::new();
    for h in &run.hosts {
        totals.insert(h, [0; 6]);
    }
    for r in &run.results {
        let t = totals.entry(&r.host).or_insert([0; 6]);
        let i = match (r.status.as_str(), r.ignored) {
            ("ok", _) => 0,
            ("changed", _) => 1,
            ("unknown", _) => 2,
            ("failed" | "timed_out", true) => 4,
            ("failed" | "timed_out", false) => 3,
            _ => 5,
        };
        t[i] += 1;
    }
    let mut table = Table::new(&[
        "HOST", "OK", "CHANGED", "UNKNOWN", "FAILED", "IGNORED", "SKIPPED",
    ]);
    for h in &run.hosts {
        let t = totals.get(h.as_str()).copied().unwrap_or([0; 6]);
        let mut row = vec![h.clone()];
        row.extend(t.iter().map(|n| n.to_string()));
        table.row(row);
    }
    table.render()
}

/// How much of each stream of a step's output `show` prints: its last lines.
const TAIL_LINES: usize = 20;
const TAIL_BYTES: usize = 4096;

/// What each step printed on each host, in step then host order: the end of its stdout
/// and stderr, and how many lines before it are left out.
fn outputs(results: &[PlanHostResult]) -> String {
    let mut printed: Vec<&PlanHostResult> = results
        .iter()
        .filter(|r| !r.stdout.is_empty() || !r.stderr.is_empty())
        .collect();
    printed.sort_by_key(|r| r.step);
    let mut out = String::new();
    for r in printed {
        let exit = match r.exit_code {
            Some(code) => format!(", exit code {code}"),
            None => String::new(),
        };
        for (stream, text) in [("stdout", &r.stdout), ("stderr", &r.stderr)] {
            if text.is_empty() {
                continue;
            }
            let tail = output_tail(text, TAIL_LINES, TAIL_BYTES);
            out.push_str(&format!(
                "\n--- step {} {} on {}: {stream} ({}{exit})\n",
                r.step, r.step_name, r.host, r.status
            ));
            if tail.cut_lines > 0 {
                out.push_str(&format!(
                    "  … {} earlier line(s) not shown (--json has the whole output)\n",
                    tail.cut_lines
                ));
            }
            for line in tail.text.split('\n') {
                out.push_str(&format!("  {line}\n"));
            }
        }
    }
    out
}

/// What a preview predicts per host once it ended, or where it is.
fn preview_text(preview: &PlanRunView) -> String {
    describe_preview(
        &preview.state,
        &preview.hosts,
        preview.results.iter().map(PlanHostResult::outcome),
    )
}

/// `run` for people; `preview` is its preview as fetched (a run that started paused).
fn render(run: &PlanRunView, preview: Option<&PlanRunView>) -> String {
    let mut f = Fields::new();
    f.add("id", run.id.clone())
        .add(
            "plan",
            format!("{} (version {})", run.plan, run.plan_version),
        )
        .add("state", run.state.clone());
    if let Some(reason) = &run.reason {
        f.add("reason", reason.clone());
    }
    f.add("mode", if run.dry_run { "dry run" } else { "run" })
        .add("requested by", run.requested_by.clone())
        .add(
            "trigger",
            match &run.upstream {
                Some(u) => format!(
                    "stack: started by run {} of stack {} (changed outputs: {})",
                    u["run"].as_str().unwrap_or("?"),
                    u["stack"].as_str().unwrap_or("?"),
                    u["outputs"]
                        .as_array()
                        .map(|o| o
                            .iter()
                            .filter_map(|x| x.as_str())
                            .collect::<Vec<_>>()
                            .join(", "))
                        .unwrap_or_default()
                ),
                None => run.trigger.clone(),
            },
        )
        .add("hosts", run.hosts.join(", "));
    if let Some(sources) = run.sources.as_ref().and_then(|s| s.as_array()) {
        f.lines(
            "hosts from",
            sources
                .iter()
                .map(|s| {
                    format!(
                        "environment {}: stack {} output {} (state version {}): {}",
                        s["environment"].as_str().unwrap_or("?"),
                        s["stack"].as_str().unwrap_or("?"),
                        s["output"].as_str().unwrap_or("?"),
                        s["version"],
                        s["hosts"]
                            .as_array()
                            .map(|h| {
                                h.iter()
                                    .filter_map(|n| n.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            })
                            .unwrap_or_default()
                    )
                })
                .collect(),
        );
    }
    if !run.gated_environments.is_empty() {
        f.add("gated environments", run.gated_environments.join(", "));
    }
    if let Some(id) = &run.preview {
        let line = match preview {
            Some(p) => format!("{id} — {}", preview_text(p)),
            None => id.clone(),
        };
        f.add(
            "preview",
            format!("{line} (`bosun plan-run show {id}` shows what this run would change)"),
        );
    }
    if let Some(id) = &run.preview_of {
        f.add(
            "preview of",
            format!(
                "run {id}: this dry run shows what that run would change (`bosun plan-run show {id}`)"
            ),
        );
    }
    if let Some(hold) = &run.policy_hold {
        f.add(
            "held by policy",
            match hold.as_str() {
                "check" => "its policies are evaluated once its dry run (the preview) ends".to_string(),
                "override" => format!(
                    "a soft-mandatory deny: an org admin overrides it with `bosun run override {} --reason …`",
                    run.id
                ),
                _ => "a policy asks for approval: it waits in the approvals inbox".to_string(),
            },
        );
    }
    if !run.policies.is_empty() {
        f.lines(
            "policies",
            run.policies
                .iter()
                .flat_map(super::run::policy_lines)
                .collect(),
        );
    }
    if !run.inputs.is_empty() {
        f.lines(
            "inputs",
            run.inputs.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        );
    }
    f.add("created", timestamp(&run.created_at))
        .add("ended", opt_timestamp(&run.ended_at));
    if let Some(at) = &run.summarised_at {
        f.add(
            "summarised",
            format!(
                "{}: its log and what each step printed were deleted by retention",
                timestamp(at)
            ),
        );
    }
    let mut out = f.render();
    out.push('\n');
    out.push_str(&summary_table(run));
    if !run.results.is_empty() {
        out.push('\n');
        let mut table = Table::new(&["STEP", "HOST", "STATUS", "MESSAGE"]);
        for r in &run.results {
            table.row(vec![
                format!("{} {}", r.step, r.step_name),
                r.host.clone(),
                if r.ignored {
                    format!("{} (ignored)", r.status)
                } else {
                    r.status.clone()
                },
                r.message.clone(),
            ]);
        }
        out.push_str(&table.render());
        for r in run.results.iter().filter(|r| r.diff.is_some()) {
            out.push_str(&format!(
                "\n--- step {} on {}\n{}",
                r.step,
                r.host,
                r.diff.as_deref().unwrap_or_default()
            ));
        }
        out.push_str(&outputs(&run.results));
    }
    if run.dry_run {
        let unresolved = run
            .report
            .as_ref()
            .and_then(|r| r.get("unresolved"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        out.push_str(&format!("\nUnresolved references: {}\n", unresolved.len()));
        for u in unresolved {
            out.push_str(&format!(
                "  {} step {} ({}): {}\n",
                u["host"].as_str().unwrap_or(""),
                u["step"],
                u["step_name"].as_str().unwrap_or(""),
                u["reference"].as_str().unwrap_or("")
            ));
        }
    }
    out
}

async fn get_run(ctx: &Ctx, run: &str) -> anyhow::Result<(Value, PlanRunView)> {
    let value = ctx
        .client
        .get(&["orgs", &ctx.org, "plan-runs", run], &[])
        .await?;
    Ok((value.clone(), decode(value)?))
}

/// `run` for people, with its preview's summary when it has one (fetched; left out if
/// it cannot be read).
async fn render_with_preview(ctx: &Ctx, run: &PlanRunView) -> String {
    let preview = match &run.preview {
        Some(id) => get_run(ctx, id).await.ok().map(|(_, p)| p),
        None => None,
    };
    render(run, preview.as_ref())
}

/// Prints log chunks after `after`; returns the last seq printed.
async fn print_logs(
    ctx: &Ctx,
    run: &str,
    mut after: Option<i64>,
    printer: &mut LogPrinter,
) -> anyhow::Result<Option<i64>> {
    loop {
        let mut query = vec![("limit", "1000".to_string())];
        if let Some(a) = after {
            query.push(("after", a.to_string()));
        }
        let value = ctx
            .client
            .get(&["orgs", &ctx.org, "plan-runs", run, "logs"], &query)
            .await?;
        let chunks: Vec<LogChunk> = decode(value)?;
        let Some(last) = chunks.last().map(|c| c.seq) else {
            return Ok(after);
        };
        for c in chunks {
            if ctx.json {
                emit(&format!("{}\n", serde_json::to_string(&c)?))?;
            } else {
                emit(&printer.render(&c))?;
            }
        }
        after = Some(last);
    }
}

/// Prints the log as it grows — the server's event stream, as `bosun run logs --follow`
/// reads it — until the run has ended and its runner let go; returns the run as it ended.
async fn follow(ctx: &Ctx, run: &str, printer: LogPrinter) -> anyhow::Result<PlanRunView> {
    let path = ["orgs", ctx.org.as_str(), "plan-runs", run, "logs", "stream"];
    super::run::stream_log(ctx, &path, run, Some(printer)).await?;
    Ok(get_run(ctx, run).await?.1)
}

fn ended_badly(run: &PlanRunView) -> anyhow::Result<()> {
    if run.state == "succeeded" {
        return Ok(());
    }
    match &run.reason {
        Some(r) => bail!("plan run {} ended {}: {r}", run.id, run.state),
        None => bail!("plan run {} ended {}", run.id, run.state),
    }
}

/// What a paused plan run waits for, the commands that decide it, and its preview.
fn paused_text(run: &PlanRunView) -> String {
    let mut text = match run.policy_hold.as_deref() {
        Some("check") => format!(
            "paused: its policies decide once its dry run has run (`bosun plan-run show {}`)",
            run.id
        ),
        Some("override") => format!(
            "paused: a soft-mandatory policy denied it; an org admin overrides it with \
             `bosun run override {} --reason …`",
            run.id
        ),
        _ => format!(
            "paused: waiting for approval{}; `bosun approvals approve {id}` or \
             `bosun approvals reject {id}` (`bosun approvals list` shows the inbox)",
            match run.gated_environments.is_empty() {
                true => " asked by a policy".to_string(),
                false => format!(" in {}", run.gated_environments.join(", ")),
            },
            id = run.id
        ),
    };
    if let Some(preview) = &run.preview {
        text.push_str(&format!(
            "; its preview {preview}, a dry run started with it, shows what it would change: \
             `bosun plan-run show {preview}`"
        ));
    }
    text
}

/// `bosun plan-run start`, also usable as `bosun plan run`.
pub async fn start(
    ctx: &Ctx,
    plan: &str,
    dry_run: bool,
    inputs: Vec<(String, String)>,
    wait: bool,
) -> anyhow::Result<()> {
    let body = PlanRunCreate {
        dry_run,
        inputs: inputs
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect(),
    };
    let value = ctx
        .client
        .post(&["orgs", &ctx.org, "plans", plan, "runs"], &body)
        .await?;
    let run: PlanRunView = decode(value.clone())?;
    if !ctx.json && run.state == "paused" {
        eprintln!("({})", paused_text(&run));
    }
    if !wait {
        if ctx.json {
            return emit_json(&value);
        }
        return emit(&format!("{}\n", run.id));
    }
    if !ctx.json {
        emit(&format!("{} ({})\n", run.id, run.state))?;
    }
    super::run::stream_log(
        ctx,
        &["orgs", &ctx.org, "plan-runs", &run.id, "logs", "stream"],
        &run.id,
        (!ctx.json).then(LogPrinter::default),
    )
    .await?;
    let (value, run) = get_run(ctx, &run.id).await?;
    if ctx.json {
        emit_json(&value)?;
    } else {
        emit(&render_with_preview(ctx, &run).await)?;
    }
    ended_badly(&run)
}

pub async fn run(ctx: &Ctx, cmd: PlanRunCommand) -> anyhow::Result<()> {
    match cmd {
        PlanRunCommand::Start {
            plan,
            dry_run,
            inputs,
            wait,
        } => start(ctx, &plan, dry_run, inputs, wait).await,
        PlanRunCommand::List {
            plan,
            limit,
            cursor,
        } => {
            let path = ["orgs", &ctx.org, "plans", &plan, "runs"];
            let pages = super::fetch_pages(ctx, &path, limit, cursor, false).await?;
            super::show_pages(ctx, pages, "runs", |runs: Vec<PlanRunView>| {
                let mut t =
                    Table::new(&["ID", "STATE", "MODE", "HOSTS", "REQUESTED BY", "CREATED"]);
                for r in runs {
                    t.row(vec![
                        r.id,
                        r.state,
                        if r.dry_run { "dry run" } else { "run" }.into(),
                        r.hosts.join(","),
                        r.requested_by,
                        timestamp(&r.created_at),
                    ]);
                }
                t.render()
            })
        }
        PlanRunCommand::Show { run } => {
            let (value, view) = get_run(ctx, &run).await?;
            if ctx.json {
                return emit_json(&value);
            }
            emit(&render_with_preview(ctx, &view).await)
        }
        PlanRunCommand::Logs {
            run,
            follow: false,
            timestamps,
        } => print_logs(ctx, &run, None, &mut LogPrinter::new(timestamps))
            .await
            .map(drop),
        PlanRunCommand::Logs {
            run,
            follow: true,
            timestamps,
        } => {
            let view = follow(ctx, &run, LogPrinter::new(timestamps)).await?;
            ended_badly(&view)
        }
        PlanRunCommand::Abort { run } => {
            let value = ctx
                .client
                .post(&["orgs", &ctx.org, "plan-runs", &run, "abort"], &json!({}))
                .await?;
            ctx.show(value, |r: PlanRunView| {
                format!("Aborted plan run {} ({}).\n", r.id, r.state)
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(step: i64, host: &str, stdout: &str, stderr: &str) -> PlanHostResult {
        PlanHostResult {
            step,
            step_name: format!("s{step}"),
            module: "shell".into(),
            host: host.into(),
            status: "changed".into(),
            ignored: false,
            changed: Some(true),
            exit_code: Some(0),
            stdout: stdout.into(),
            stderr: stderr.into(),
            duration_ms: 1,
            message: "ran: x".into(),
            diff: None,
        }
    }

    fn view(id: &str, state: &str, dry_run: bool) -> PlanRunView {
        PlanRunView {
            id: id.into(),
            org: "default".into(),
            plan: "deploy".into(),
            plan_version: 2,
            state: state.into(),
            reason: None,
            dry_run,
            inputs: BTreeMap::new(),
            trigger: "manual".into(),
            requested_by: "user:alice".into(),
            hosts: vec!["h0".into(), "h1".into(), "h2".into()],
            gated_environments: if dry_run { vec![] } else { vec!["prod".into()] },
            preview: None,
            preview_of: None,
            policy_hold: None,
            policies: Vec::new(),
            sources: None,
            upstream: None,
            runner_id: None,
            created_at: chrono::Utc::now(),
            updated_at: chrono::Utc::now(),
            ended_at: None,
            results: Vec::new(),
            report: None,
            summarised_at: None,
        }
    }

    #[test]
    fn a_summarised_run_says_what_retention_deleted() {
        let mut run = view("prun-old", "succeeded", false);
        assert!(!render(&run, None).contains("summarised"));
        run.summarised_at = Some(
            chrono::DateTime::parse_from_rfc3339("2026-01-02T03:05:10Z")
                .unwrap()
                .with_timezone(&chrono::Utc),
        );
        let text = render(&run, None);
        assert!(
            text.contains(
                "\nsummarised:         2026-01-02T03:05:10Z: its log and what each step \
                 printed were deleted by retention\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_paused_run_names_its_preview_and_sums_it_up() {
        let mut run = view("prun-r", "paused", false);
        run.preview = Some("prun-p".into());
        let said = paused_text(&run);
        assert!(
            said.starts_with("paused: waiting for approval in prod; `bosun approvals approve prun-r`")
                && said.ends_with("its preview prun-p, a dry run started with it, shows what it would change: `bosun plan-run show prun-p`"),
            "{said}"
        );
        let mut preview = view("prun-p", "succeeded", true);
        preview.preview_of = Some("prun-r".into());
        preview.results = vec![result(1, "h0", "", ""), result(1, "h1", "", "")];
        preview.results[1].status = "ok".into();
        let text = render(&run, Some(&preview));
        assert!(
            text.contains("prun-p — 1 host would change, 1 no change, 1 not checked yet (`bosun plan-run show prun-p` shows what this run would change)"),
            "{text}"
        );
        let mut running = preview.clone();
        running.state = "running".into();
        assert!(render(&run, Some(&running)).contains("prun-p — running ("));
        // Unread, the preview is still named.
        assert!(render(&run, None).contains("prun-p (`bosun plan-run show prun-p`"));
        let text = render(&preview, None);
        assert!(
            text.contains("run prun-r: this dry run shows what that run would change (`bosun plan-run show prun-r`)"),
            "{text}"
        );
        assert!(!paused_text(&view("prun-x", "paused", false)).contains("preview"));
    }

    #[test]
    fn each_steps_output_is_shown_by_its_last_lines() {
        let long: String = (1..=25).map(|i| format!("line {i}\n")).collect();
        let text = outputs(&[
            result(2, "h1", "", "warning\n"),
            result(1, "h0", &long, ""),
            result(1, "h1", "", ""),
        ]);
        let mut want = String::from(
            "\n--- step 1 s1 on h0: stdout (changed, exit code 0)\n  … 5 earlier line(s) not shown (--json has the whole output)\n",
        );
        for i in 6..=25 {
            want.push_str(&format!("  line {i}\n"));
        }
        want.push_str("\n--- step 2 s2 on h1: stderr (changed, exit code 0)\n  warning\n");
        assert_eq!(text, want);
    }
}
