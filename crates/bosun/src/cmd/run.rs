//! `bosun run`: start a stack's run and follow it, show one, print its log (or follow it
//! live), confirm, discard, cancel and retry; and a stack's runs for `bosun stack runs`.

use std::time::Duration;

use anyhow::bail;
use bosun_api::{LogChunk, PlanSummary, Run, RunCreate, TfLockInfo};
use clap::Subcommand;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{decode, Ctx};
use crate::output::{emit, emit_json, timestamp, Fields, Table};

#[derive(Subcommand)]
pub enum RunCommand {
    /// Start a run of a stack: tracked (plan, then apply once confirmed) unless --proposed.
    Trigger {
        /// The stack's id.
        stack: String,
        /// A proposed run: plan only, never applied.
        #[arg(long)]
        proposed: bool,
        /// Run this commit instead of the tracked branch's head.
        #[arg(long, value_name = "SHA")]
        commit: Option<String>,
        /// Follow the run, printing its state changes, until it waits for confirmation or
        /// ends; exit non-zero when it ends failed, canceled, interrupted, force-failed or
        /// discarded.
        #[arg(long)]
        wait: bool,
        /// With --wait: stop waiting after this long (`90s`, `10m`) and exit 1 saying
        /// where the run is; the run itself goes on.
        #[arg(long, value_name = "DURATION", requires = "wait", value_parser = humantime::parse_duration)]
        timeout: Option<Duration>,
    },
    /// Follow a run like `trigger --wait`: print its state changes until it waits for
    /// confirmation or an approver, or ends; exit non-zero when it ends badly.
    Wait {
        /// The run's id.
        run: String,
        /// Stop waiting after this long (`90s`, `10m`) and exit 1 saying where the run
        /// is; the run itself goes on.
        #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
        timeout: Option<Duration>,
    },
    /// Show a run: its state and why, what blocks it, its plan summary and phases.
    Show {
        /// The run's id.
        run: String,
    },
    /// Print a run's log.
    Logs {
        /// The run's id.
        run: String,
        /// Keep printing as the run writes, until it ends; exit non-zero when it ends
        /// failed, canceled, interrupted, force-failed or discarded.
        #[arg(long)]
        follow: bool,
        /// Start each line with when the server received it (UTC).
        #[arg(long)]
        timestamps: bool,
    },
    /// Apply an unconfirmed run's plan.
    Confirm {
        /// The run's id.
        run: String,
    },
    /// Override the soft-mandatory policy denies holding an unconfirmed run (org
    /// admins), with a reason (audited). The run then goes on as its other policies
    /// allow.
    Override {
        /// The run's id.
        run: String,
        /// Why (required; kept on the overridden evaluations and in the audit log).
        #[arg(long)]
        reason: String,
    },
    /// Throw away an unconfirmed run's plan; the run ends discarded.
    Discard {
        /// The run's id.
        run: String,
    },
    /// Cancel a run: a waiting run ends at once; an executing run's runner stops the
    /// engine first.
    Cancel {
        /// The run's id.
        run: String,
    },
    /// Start a new run over the same commit as an ended run; prints the new run's id.
    Retry {
        /// The ended run's id.
        run: String,
    },
    /// Abort a plan run (`prun-…`): settled at once; a runner executing it stops.
    Abort {
        /// The plan run's id (`prun-…`).
        run: String,
    },
}

/// End states that are not a success: `--wait` and `logs --follow` exit non-zero on them.
const FAILURE_STATES: [&str; 5] = [
    "failed",
    "canceled",
    "interrupted",
    "force_failed",
    "discarded",
];

/// Every end state.
const END_STATES: [&str; 7] = [
    "finished",
    "failed",
    "discarded",
    "canceled",
    "interrupted",
    "force_failed",
    "skipped",
];

fn is_failure(state: &str) -> bool {
    FAILURE_STATES.contains(&state)
}

fn is_end(state: &str) -> bool {
    END_STATES.contains(&state)
}

fn or_dash(v: Option<String>) -> String {
    v.filter(|s| !s.is_empty()).unwrap_or_else(|| "-".into())
}

fn short_commit(c: &Option<String>) -> String {
    match c {
        Some(c) if !c.is_empty() => c.chars().take(8).collect(),
        _ => "-".into(),
    }
}

/// `alice@laptop holds the state lock (lock-1, OperationTypeApply)`.
fn blocked_text(l: &TfLockInfo) -> String {
    let who = if l.who.is_empty() {
        "someone"
    } else {
        l.who.as_str()
    };
    if l.operation.is_empty() {
        format!("{who} holds the state lock ({})", l.id)
    } else {
        format!("{who} holds the state lock ({}, {})", l.id, l.operation)
    }
}

/// `+1 ~2 -0`, or that the plan changes nothing.
fn plan_text(p: &PlanSummary) -> String {
    p.short_text()
}

fn late_write_text(late: bool) -> &'static str {
    if late {
        "YES: this run wrote state after it had ended (force-failed or interrupted); \
         check that state version before relying on it"
    } else {
        "no"
    }
}

fn warn_late_write(run: &Run) {
    if run.late_write {
        eprintln!(
            "WARNING: run {} wrote state after it had ended (LATE WRITE): check its state \
             version (`bosun state versions {}`) before relying on it",
            run.id, run.stack
        );
    }
}

/// The state as one line: `failed: the plan failed`, `queued: blocked: …`.
fn state_line(run: &Run) -> String {
    let mut line = run.state.clone();
    if let Some(reason) = run.reason.as_deref().filter(|r| !r.is_empty()) {
        line.push_str(&format!(": {reason}"));
    }
    if let Some(b) = &run.blocked_by {
        line.push_str(&format!(" (blocked: {})", blocked_text(b)));
    }
    if let Some(a) = &run.approval {
        line.push_str(&format!(
            " (waiting for approval in {})",
            a.environments.join(", ")
        ));
    }
    line
}

/// What a run waiting for an approval waits for, and the commands that decide it.
fn approval_text(id: &str, a: &bosun_api::ApprovalWait) -> String {
    format!(
        "waiting for approval in {} (requested by {}); who may decide: {} — \
         `bosun approvals approve {id}` or `bosun approvals reject {id}`",
        a.environments.join(", "),
        a.requested_by,
        a.approvers
    )
}

/// One policy evaluation: its result line, then one line per message.
pub(crate) fn policy_lines(e: &bosun_api::PolicyEvaluationView) -> Vec<String> {
    let version = match e.version.len() {
        0 => String::new(),
        n if n > 12 && !e.version.starts_with("sha256:") => format!(" @{}", &e.version[..12]),
        _ => format!(" @{}", e.version),
    };
    let mut out = vec![format!(
        "{} {} ({}, {} point{version}, {} ms)",
        e.outcome.to_uppercase(),
        e.policy,
        e.mode,
        e.point,
        e.duration_ms
    )];
    for (kind, msgs) in [
        ("deny", &e.deny),
        ("require approval", &e.require_approval),
        ("warn", &e.warn),
        ("error", &e.errors),
    ] {
        out.extend(msgs.iter().map(|m| format!("  {kind}: {m}")));
    }
    if let (Some(by), Some(reason)) = (&e.overridden_by, &e.override_reason) {
        out.push(format!("  overridden by {by}: {reason}"));
    }
    out
}

fn seconds(s: Option<f64>) -> String {
    s.map(|s| format!("{s:.1}")).unwrap_or_else(|| "-".into())
}

pub fn run_text(r: Run) -> String {
    let mut f = Fields::new();
    let approval = r.approval.as_ref().map(|a| approval_text(&r.id, a));
    let id = r.id.clone();
    f.add("id", r.id)
        .add("stack", r.stack)
        .add("kind", r.kind)
        .add("trigger", r.trigger)
        .add("state", r.state);
    if let Some(reason) = r.reason.filter(|s| !s.is_empty()) {
        f.add("reason", reason);
    }
    f.add("commit", or_dash(r.commit))
        .add("branch", r.branch)
        .add("triggered by", r.triggered_by);
    if let Some(of) = r.retry_of {
        f.add("retry of", of);
    }
    if let Some(up) = r.upstream_run {
        f.add("upstream run", up);
    }
    if let Some(d) = &r.drift {
        let mut line = d.result.clone();
        if let Some(rec) = &d.reconcile_run {
            line.push_str(&format!(" (reconcile run {rec})"));
        }
        f.add("drift", line);
    }
    if let Some(of) = r.reconciles {
        f.add("reconciles", format!("drift found by run {of}"));
    }
    if !r.consumed.is_empty() {
        f.lines(
            "upstream outputs",
            r.consumed
                .iter()
                .map(|c| {
                    format!(
                        "{}.{} (state version {}) → TF_VAR_{}{}",
                        c.stack,
                        c.output,
                        c.version,
                        c.variable,
                        if c.sensitive { " (sensitive)" } else { "" }
                    )
                })
                .collect(),
        );
    }
    if let Some(b) = &r.blocked_by {
        let since = r
            .blocked_since
            .map(|t| format!(", since {}", timestamp(&t)))
            .unwrap_or_default();
        f.add("blocked by", format!("{}{since}", blocked_text(b)));
    }
    if !r.lock_waits.is_empty() {
        f.lines(
            "waited",
            r.lock_waits
                .iter()
                .map(|w| {
                    let waited = (w.until - w.from).to_std().unwrap_or_default();
                    let who = match w.holder.who.as_str() {
                        "" => "someone",
                        who => who,
                    };
                    format!(
                        "{} for the state lock {} held by {who} ({} to {})",
                        elapsed_text(waited),
                        w.holder.id,
                        timestamp(&w.from),
                        timestamp(&w.until)
                    )
                })
                .collect(),
        );
    }
    if let Some(a) = approval {
        f.add("approval", a);
    }
    if let Some(hold) = &r.policy_hold {
        f.add(
            "held by policy",
            match hold.as_str() {
                "override" => format!(
                    "a soft-mandatory deny: an org admin overrides it with `bosun run override {id} --reason …`"
                ),
                _ => "a policy asks for approval: it waits in the approvals inbox".to_string(),
            },
        );
    }
    if !r.policies.is_empty() {
        f.lines(
            "policies",
            r.policies.iter().flat_map(policy_lines).collect(),
        );
    }
    if !r.decisions.is_empty() {
        f.lines(
            "decided by",
            r.decisions
                .iter()
                .map(|d| {
                    let comment = d
                        .comment
                        .as_deref()
                        .map(|c| format!(": {c}"))
                        .unwrap_or_default();
                    format!("{} by {} at {}{comment}", d.action, d.by, d.at.to_rfc3339())
                })
                .collect(),
        );
    }
    let runner = match (r.runner_name, r.runner) {
        (Some(name), Some(id)) => format!("{name} ({id})"),
        (None, id) => or_dash(id),
        (Some(name), None) => name,
    };
    f.add("runner", runner)
        .add("late write", late_write_text(r.late_write));
    match &r.plan {
        Some(p) => {
            f.add("plan", plan_text(p))
                .lines(
                    "resource changes",
                    p.resource_changes
                        .iter()
                        .filter(|c| c.action != "no-op")
                        .map(|c| format!("{} {}", c.action, c.address))
                        .collect(),
                )
                .lines(
                    "output changes",
                    p.output_changes
                        .iter()
                        .map(|(name, action)| format!("{action} {name}"))
                        .collect(),
                );
        }
        None => {
            f.add("plan", "-");
        }
    }
    f.add("created", timestamp(&r.created_at))
        .add("updated", timestamp(&r.updated_at));
    if let Some(at) = &r.summarised_at {
        f.add(
            "summarised",
            format!(
                "{}: its log, saved plan and plan detail were deleted by retention",
                timestamp(at)
            ),
        );
    }
    let mut out = f.render();
    if !r.phases.is_empty() {
        let mut t = Table::new(&["STATE", "STARTED", "SECONDS"]);
        for p in r.phases {
            t.row(vec![p.state, timestamp(&p.started_at), seconds(p.seconds)]);
        }
        out.push('\n');
        out.push_str(&t.render());
    }
    out
}

fn runs_table(stack: &str, runs: Vec<Run>) -> String {
    if runs.is_empty() {
        return format!("Stack {stack} has no runs yet.\n");
    }
    let mut t = Table::new(&[
        "RUN", "KIND", "TRIGGER", "STATE", "PLAN", "DURATION", "COMMIT", "CREATED",
    ]);
    for r in runs {
        let plan = r.plan.as_ref().map(plan_text).unwrap_or_else(|| "-".into());
        let duration = run_duration(&r);
        t.row(vec![
            r.id,
            r.kind,
            r.trigger,
            r.state,
            plan,
            duration,
            short_commit(&r.commit),
            timestamp(&r.created_at),
        ]);
    }
    t.render()
}

/// How long an ended run took, from its creation to its end ("1m 5s"); `-` while it
/// has not ended.
fn run_duration(r: &Run) -> String {
    if !is_end(&r.state) {
        return "-".into();
    }
    let secs = (r.updated_at - r.created_at).num_seconds().max(0);
    seconds_text(secs as u64)
}

fn elapsed_text(d: Duration) -> String {
    seconds_text(d.as_secs())
}

/// "42s", "1m 5s", "2h 3m": a whole number of seconds for people.
fn seconds_text(secs: u64) -> String {
    match (secs / 3600, secs / 60 % 60, secs % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m {s}s"),
        (h, m, _) => format!("{h}h {m}m"),
    }
}

/// `bosun stack runs`: a stack's runs, newest first.
pub async fn list(
    ctx: &Ctx,
    stack: &str,
    limit: Option<u32>,
    cursor: Option<String>,
    all: bool,
) -> anyhow::Result<()> {
    let path = ["orgs", ctx.org.as_str(), "stacks", stack, "runs"];
    let pages = super::fetch_pages(ctx, &path, limit, cursor, all).await?;
    super::show_pages(ctx, pages, "runs", |runs: Vec<Run>| runs_table(stack, runs))
}

/// An error for a run that ended without success.
fn ended_badly(run: &str, state: &str, reason: Option<&str>) -> anyhow::Error {
    match reason.filter(|r| !r.is_empty()) {
        Some(reason) => anyhow::anyhow!("run {run} ended {state}: {reason}"),
        None => anyhow::anyhow!("run {run} ended {state}"),
    }
}

/// How often `--wait` looks at the run.
const POLL: Duration = Duration::from_millis(500);

/// How often `--wait` says a run is still where it was (at most half the `--timeout`).
const STILL_EVERY: Duration = Duration::from_secs(30);

/// Follows a run until it waits for confirmation or ends (or `timeout` passes), printing
/// each state change, and every half minute how long it has been in the same one.
async fn wait(ctx: &Ctx, first: Run, timeout: Option<Duration>) -> anyhow::Result<()> {
    let org = ctx.org.as_str();
    let id = first.id.clone();
    let mut run = first;
    let mut shown: Option<String> = None;
    let mut plan_shown = false;
    let started = std::time::Instant::now();
    let still_every = timeout.map_or(STILL_EVERY, |t| STILL_EVERY.min(t / 2));
    let mut since = started;
    let mut still_said = started;
    loop {
        let line = state_line(&run);
        if !ctx.json && shown.as_ref() != Some(&line) {
            emit(&format!("state: {line}\n"))?;
            shown = Some(line);
            since = std::time::Instant::now();
            still_said = since;
        } else if !ctx.json && still_said.elapsed() >= still_every {
            eprintln!(
                "(still {} after {})",
                state_line(&run),
                elapsed_text(since.elapsed())
            );
            still_said = std::time::Instant::now();
        }
        if let Some(limit) = timeout.filter(|t| started.elapsed() >= *t) {
            anyhow::bail!(
                "stopped waiting after {}: run {id} is still {} (it goes on; \
                 `bosun run show {id}` shows it)",
                elapsed_text(limit),
                state_line(&run)
            );
        }
        if let (false, Some(p)) = (ctx.json || plan_shown, &run.plan) {
            emit(&format!("plan: {}\n", plan_text(p)))?;
            plan_shown = true;
        }
        if run.state == "unconfirmed" || is_end(&run.state) {
            break;
        }
        tokio::time::sleep(POLL).await;
        run = decode(ctx.client.get(&["orgs", org, "runs", &id], &[]).await?)?;
    }
    if ctx.json {
        emit_json(&serde_json::to_value(&run)?)?;
    } else if let Some(a) = run.approval.as_ref().filter(|_| run.state == "unconfirmed") {
        eprintln!("({})", approval_text(&id, a));
    } else if run.state == "unconfirmed" {
        eprintln!("(apply the plan with `bosun run confirm {id}`, or `bosun run discard {id}`)");
    }
    warn_late_write(&run);
    if is_failure(&run.state) {
        return Err(ended_badly(&id, &run.state, run.reason.as_deref()));
    }
    Ok(())
}

async fn trigger(
    ctx: &Ctx,
    stack: &str,
    proposed: bool,
    commit: Option<String>,
    // `Some` to follow the run, with how long at most.
    follow: Option<Option<Duration>>,
) -> anyhow::Result<()> {
    let org = ctx.org.as_str();
    let body = RunCreate {
        kind: proposed.then(|| "proposed".to_string()),
        commit,
    };
    let value = ctx
        .client
        .post(&["orgs", org, "stacks", stack, "runs"], &body)
        .await?;
    let Some(timeout) = follow else {
        return ctx.show(value, |r: Run| format!("{}\n", r.id));
    };
    let run: Run = decode(value)?;
    if !ctx.json {
        emit(&format!("{}\n", run.id))?;
    }
    wait(ctx, run, timeout).await
}

/// Prints the whole log: pages of chunks until an empty one.
async fn logs(ctx: &Ctx, run: &str, mut printer: LogPrinter) -> anyhow::Result<()> {
    let org = ctx.org.as_str();
    let mut after: Option<i64> = None;
    let mut all: Vec<Value> = Vec::new();
    loop {
        let mut query = vec![("limit", "1000".to_string())];
        if let Some(a) = after {
            query.push(("after", a.to_string()));
        }
        let value = ctx
            .client
            .get(&["orgs", org, "runs", run, "logs"], &query)
            .await?;
        let items: Vec<Value> = decode(value)?;
        let chunks: Vec<LogChunk> = decode(Value::Array(items.clone()))?;
        let Some(last) = chunks.last().map(|c| c.seq) else {
            break;
        };
        if ctx.json {
            all.extend(items);
        } else {
            let text: String = chunks.iter().map(|c| printer.render(c)).collect();
            emit(&text)?;
        }
        // A page that does not move past `after` would repeat forever.
        if after.is_some_and(|a| last <= a) {
            break;
        }
        after = Some(last);
    }
    if ctx.json {
        return emit_json(&Value::Array(all));
    }
    Ok(())
}

/// How a run's log is printed: a divider where the phase that wrote it changes (plan,
/// apply) and, with `timestamps`, each line prefixed with when the server received it.
#[derive(Default)]
pub(crate) struct LogPrinter {
    timestamps: bool,
    phase: Option<String>,
    /// The last text printed ended a line (or nothing was printed yet).
    mid_line: bool,
}

impl LogPrinter {
    pub(crate) fn new(timestamps: bool) -> Self {
        LogPrinter {
            timestamps,
            ..LogPrinter::default()
        }
    }

    /// The chunk as it is printed, after the chunks rendered before it.
    pub(crate) fn render(&mut self, chunk: &LogChunk) -> String {
        let mut out = String::new();
        if let Some(phase) = chunk
            .phase
            .as_ref()
            .filter(|p| self.phase.as_ref() != Some(*p))
        {
            if self.mid_line {
                out.push('\n');
                self.mid_line = false;
            }
            out.push_str(&format!("── {phase} ──\n"));
            self.phase = Some(phase.clone());
        }
        if !self.timestamps {
            out.push_str(&chunk.text);
        } else {
            let stamp = match chunk.at {
                Some(at) => at.format("%Y-%m-%dT%H:%M:%SZ ").to_string(),
                None => " ".repeat(21),
            };
            for line in chunk.text.split_inclusive('\n') {
                if !self.mid_line {
                    out.push_str(&stamp);
                }
                out.push_str(line);
                self.mid_line = !line.ends_with('\n');
            }
            return out;
        }
        if let Some(last) = chunk.text.chars().last() {
            self.mid_line = last != '\n';
        }
        out
    }
}

/// One server-sent event: its `event:` name and its `data:` lines joined.
#[derive(Debug, PartialEq)]
struct SseEvent {
    event: String,
    data: String,
}

/// Splits a server-sent event stream, fed as the bytes arrive, into events.
#[derive(Default)]
struct SseParser {
    buf: Vec<u8>,
    event: String,
    data: Option<String>,
}

impl SseParser {
    fn push(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.buf.extend_from_slice(bytes);
        let mut events = Vec::new();
        // A newline byte never occurs inside a multi-byte UTF-8 character, so each line
        // is whole text.
        while let Some(end) = self.buf.iter().position(|&b| b == b'\n') {
            let raw: Vec<u8> = self.buf.drain(..=end).collect();
            let line = String::from_utf8_lossy(&raw[..end]);
            let line = line.strip_suffix('\r').unwrap_or(&line);
            if line.is_empty() {
                // A blank line ends an event; one without data is no event.
                let event = std::mem::take(&mut self.event);
                if let Some(data) = self.data.take() {
                    events.push(SseEvent {
                        event: if event.is_empty() {
                            "message".into()
                        } else {
                            event
                        },
                        data,
                    });
                }
                continue;
            }
            if line.starts_with(':') {
                // A comment: the keep-alive.
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                None => (line, ""),
            };
            match field {
                "event" => self.event = value.to_string(),
                "data" => match &mut self.data {
                    Some(d) => {
                        d.push('\n');
                        d.push_str(value);
                    }
                    None => self.data = Some(value.to_string()),
                },
                _ => {}
            }
        }
        events
    }
}

#[derive(Deserialize)]
struct StreamEnd {
    state: String,
}

/// How many times in a row `logs --follow` reconnects without receiving anything.
const MAX_IDLE_RECONNECTS: u32 = 3;

/// Follows the log over the server-sent event stream until its `end` event; fails
/// unless the run ended well.
async fn follow_logs(ctx: &Ctx, run: &str, printer: LogPrinter) -> anyhow::Result<()> {
    let org = ctx.org.as_str();
    let state = stream_log(
        ctx,
        &["orgs", org, "runs", run, "logs", "stream"],
        run,
        Some(printer),
    )
    .await?;
    if is_failure(&state) {
        let reason = ctx
            .client
            .get(&["orgs", org, "runs", run], &[])
            .await
            .ok()
            .and_then(|v| decode::<Run>(v).ok())
            .and_then(|r| r.reason);
        return Err(ended_badly(run, &state, reason.as_deref()));
    }
    Ok(())
}

/// Prints a run's log from its server-sent event stream at `path` (a stack run's or a
/// plan run's) until the `end` event, reconnecting after the last chunk seen when the
/// stream breaks off (the client's timeout bounds each connection). Returns the run's
/// final state. `echo` prints the chunks (as JSON lines under `--json`); without it the
/// call only waits for the end (`--json --wait` prints one document, the run, at the end).
pub(crate) async fn stream_log(
    ctx: &Ctx,
    path: &[&str],
    run: &str,
    mut echo: Option<LogPrinter>,
) -> anyhow::Result<String> {
    let mut after: Option<i64> = None;
    let mut idle = 0;
    loop {
        let mut query = Vec::new();
        if let Some(a) = after {
            query.push(("after", a.to_string()));
        }
        let mut resp = ctx.client.get_event_stream(path, &query).await?;
        let mut parser = SseParser::default();
        let mut received = false;
        let mut broke_off: Option<reqwest::Error> = None;
        let mut end: Option<StreamEnd> = None;
        while end.is_none() {
            let bytes = match resp.chunk().await {
                Ok(Some(bytes)) => bytes,
                Ok(None) => break,
                Err(e) => {
                    broke_off = Some(e);
                    break;
                }
            };
            received = true;
            for ev in parser.push(&bytes) {
                match ev.event.as_str() {
                    "chunk" => {
                        let chunk: LogChunk = decode(serde_json::from_str(&ev.data)?)?;
                        if after.is_some_and(|a| chunk.seq <= a) {
                            continue;
                        }
                        after = Some(chunk.seq);
                        match &mut echo {
                            Some(_) if ctx.json => emit(&format!("{}\n", ev.data))?,
                            Some(printer) => emit(&printer.render(&chunk))?,
                            None => {}
                        }
                    }
                    "end" => {
                        if echo.is_some() && ctx.json {
                            emit(&format!("{}\n", ev.data))?;
                        }
                        end = Some(decode(serde_json::from_str(&ev.data)?)?);
                        break;
                    }
                    _ => {}
                }
            }
        }
        if let Some(end) = end {
            return Ok(end.state);
        }
        idle = if received { 0 } else { idle + 1 };
        if idle >= MAX_IDLE_RECONNECTS {
            match broke_off {
                Some(e) => bail!("the log stream of run {run} broke off: {e}"),
                None => bail!("the server closed the log stream of run {run} before it ended"),
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Confirm, discard or cancel: the server answers with the run.
async fn act(ctx: &Ctx, run: &str, action: &str) -> anyhow::Result<()> {
    let org = ctx.org.as_str();
    let value = ctx
        .client
        .post(&["orgs", org, "runs", run, action], &json!({}))
        .await?;
    ctx.show(value, |r: Run| match (action, r.state.as_str()) {
        ("confirm", state) => format!("Confirmed run {}: it is now {state}.\n", r.id),
        ("discard", state) => format!("Discarded run {}: it is now {state}.\n", r.id),
        ("cancel", "canceled") => format!("Canceled run {}.\n", r.id),
        (_, state) => format!(
            "Canceling run {}: its runner was told to stop the engine (it is {state}).\n",
            r.id
        ),
    })
}

/// Plan runs (`prun-…`) share `bosun run show|logs|abort` with stack runs.
fn is_plan_run(id: &str) -> bool {
    id.starts_with("prun-")
}

pub async fn run(ctx: &Ctx, cmd: RunCommand) -> anyhow::Result<()> {
    let org = ctx.org.as_str();
    match cmd {
        RunCommand::Trigger {
            stack,
            proposed,
            commit,
            wait,
            timeout,
        } => trigger(ctx, &stack, proposed, commit, wait.then_some(timeout)).await,
        RunCommand::Wait { run, timeout } => {
            let first: Run = decode(ctx.client.get(&["orgs", org, "runs", &run], &[]).await?)?;
            wait(ctx, first, timeout).await
        }
        RunCommand::Show { run } if is_plan_run(&run) => {
            super::plan_run::run(ctx, super::plan_run::PlanRunCommand::Show { run }).await
        }
        RunCommand::Logs {
            run,
            follow,
            timestamps,
        } if is_plan_run(&run) => {
            let logs = super::plan_run::PlanRunCommand::Logs {
                run,
                follow,
                timestamps,
            };
            super::plan_run::run(ctx, logs).await
        }
        RunCommand::Abort { run } if is_plan_run(&run) => {
            super::plan_run::run(ctx, super::plan_run::PlanRunCommand::Abort { run }).await
        }
        RunCommand::Abort { run } => {
            bail!("{run} is not a plan run: stack runs are stopped with `bosun run cancel {run}`")
        }
        RunCommand::Show { run } => {
            let value = ctx.client.get(&["orgs", org, "runs", &run], &[]).await?;
            if !ctx.json {
                let r: Run = decode(value.clone())?;
                warn_late_write(&r);
            }
            ctx.show(value, run_text)
        }
        RunCommand::Logs {
            run,
            follow,
            timestamps,
        } => {
            let printer = LogPrinter::new(timestamps);
            if follow {
                follow_logs(ctx, &run, printer).await
            } else {
                logs(ctx, &run, printer).await
            }
        }
        RunCommand::Confirm { run } => act(ctx, &run, "confirm").await,
        RunCommand::Discard { run } => act(ctx, &run, "discard").await,
        RunCommand::Override { run, reason } => {
            let kind = if is_plan_run(&run) {
                "plan-runs"
            } else {
                "runs"
            };
            let value = ctx
                .client
                .post(
                    &["orgs", org, kind, &run, "override"],
                    &json!({ "reason": reason }),
                )
                .await?;
            let state = value["state"].as_str().unwrap_or("?").to_string();
            ctx.show(value, |_: Value| {
                format!("Overrode the policies holding run {run}: it is now {state}.\n")
            })
        }
        RunCommand::Cancel { run } => act(ctx, &run, "cancel").await,
        RunCommand::Retry { run } => {
            let value = ctx
                .client
                .post(&["orgs", org, "runs", &run, "retry"], &json!({}))
                .await?;
            ctx.show(value, |r: Run| format!("{}\n", r.id))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bosun_api::{LockWait, PhaseTiming, ResourceChange};
    use chrono::{TimeZone, Utc};

    #[test]
    fn sse_events_split_across_reads() {
        let mut p = SseParser::default();
        let stream = ": keep-alive\n\nevent: chunk\ndata: {\"seq\":0,\"text\":\"a\\n\"}\n\nevent: chunk\r\ndata: {\"seq\":1,\r\ndata: \"text\":\"é\"}\r\n\r\nevent: end\ndata: {\"state\":\"failed\"}\n\n";
        let bytes = stream.as_bytes();
        let mut events = Vec::new();
        // Fed in three-byte pieces, splitting lines and even characters.
        for piece in bytes.chunks(3) {
            events.extend(p.push(piece));
        }
        assert_eq!(
            events,
            vec![
                SseEvent {
                    event: "chunk".into(),
                    data: r#"{"seq":0,"text":"a\n"}"#.into()
                },
                SseEvent {
                    event: "chunk".into(),
                    data: "{\"seq\":1,\n\"text\":\"é\"}".into()
                },
                SseEvent {
                    event: "end".into(),
                    data: r#"{"state":"failed"}"#.into()
                },
            ]
        );
        // An event still without its blank line is not out yet.
        assert!(p.push(b"event: chunk\ndata: x\n").is_empty());
        assert_eq!(p.push(b"\n").len(), 1);
    }

    #[test]
    fn states() {
        assert!(is_failure("force_failed") && is_failure("discarded"));
        assert!(!is_failure("finished") && !is_failure("skipped"));
        assert!(is_end("skipped") && !is_end("unconfirmed"));
    }

    fn sample() -> Run {
        let t = Utc
            .with_ymd_and_hms(2026, 1, 2, 3, 4, 5)
            .single()
            .unwrap_or_default();
        Run {
            id: "run-1".into(),
            org: "default".into(),
            stack: "web".into(),
            kind: "tracked".into(),
            trigger: "manual".into(),
            state: "queued".into(),
            reason: None,
            triggered_by: "user:admin".into(),
            commit: Some("0123456789abcdef".into()),
            branch: "main".into(),
            pull_request: None,
            approval: None,
            runner_name: None,
            decisions: Vec::new(),
            policy_hold: None,
            policies: Vec::new(),
            blocked_by: Some(TfLockInfo {
                id: "lock-1".into(),
                operation: "OperationTypeApply".into(),
                who: "alice@laptop".into(),
                ..TfLockInfo::default()
            }),
            blocked_since: Some(t),
            lock_waits: vec![LockWait {
                holder: TfLockInfo {
                    id: "lock-0".into(),
                    who: "bob@ci".into(),
                    ..TfLockInfo::default()
                },
                from: t - chrono::Duration::seconds(600),
                until: t,
            }],
            plan: Some(PlanSummary {
                has_changes: true,
                add: 1,
                change: 2,
                destroy: 0,
                resource_changes: vec![ResourceChange {
                    address: "null_resource.a".into(),
                    action: "create".into(),
                }],
                output_changes: [("url".to_string(), "update".to_string())].into(),
            }),
            late_write: true,
            runner: None,
            retry_of: None,
            upstream_run: None,
            consumed: Vec::new(),
            drift: None,
            reconciles: None,
            phases: vec![PhaseTiming {
                state: "queued".into(),
                started_at: t,
                ended_at: None,
                seconds: Some(1.5),
            }],
            created_at: t,
            updated_at: t,
            summarised_at: None,
        }
    }

    #[test]
    fn show_text() {
        let text = run_text(sample());
        assert!(text.contains(
            "blocked by:       alice@laptop holds the state lock (lock-1, OperationTypeApply), since 2026-01-02T03:04:05Z"
        ));
        assert!(
            text.contains("waited:           10m 0s for the state lock lock-0 held by bob@ci (2026-01-02T02:54:05Z to 2026-01-02T03:04:05Z)"),
            "{text}"
        );
        assert!(text.contains("plan:             +1 ~2 -0, 1 output to change\n"));
        assert!(text.contains("create null_resource.a"));
        assert!(text.contains("update url"));
        assert!(text.contains("late write:       YES"));
        assert!(text.contains(
            "\nSTATE   STARTED               SECONDS\nqueued  2026-01-02T03:04:05Z  1.5"
        ));
        assert!(state_line(&sample()).starts_with("queued (blocked: alice@laptop holds"));
        let table = runs_table("web", vec![sample()]);
        assert!(
            table.contains("run-1  tracked  manual   queued  +1 ~2 -0, 1 output to change  -         01234567  2026-01-02T03:04:05Z"),
            "{table}"
        );
        let mut ended = sample();
        ended.state = "finished".into();
        ended.updated_at = ended.created_at + chrono::Duration::seconds(65);
        assert!(runs_table("web", vec![ended.clone()]).contains(" 1m 5s "));
        assert!(!text.contains("summarised"), "{text}");
        ended.summarised_at = Some(ended.updated_at);
        assert!(
            run_text(ended).contains(
                "summarised:       2026-01-02T03:05:10Z: its log, saved plan and plan detail \
                 were deleted by retention"
            ),
            "summarised run"
        );
    }

    /// Dividers where the phase changes; timestamps at the start of each line, not
    /// inside a line a chunk boundary cut.
    #[test]
    fn log_printer_marks_phases_and_times() {
        let at = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).single();
        let chunk = |seq, text: &str, phase: &str| LogChunk {
            phase: Some(phase.into()),
            at,
            ..LogChunk::new(seq, text)
        };
        let chunks = [
            chunk(0, "a\nb", "plan"),
            chunk(1, "c\n", "plan"),
            chunk(2, "d\n", "apply"),
            LogChunk::new(3, "old\n"),
        ];
        let mut plain = LogPrinter::new(false);
        let text: String = chunks.iter().map(|c| plain.render(c)).collect();
        assert_eq!(text, "── plan ──\na\nbc\n── apply ──\nd\nold\n");
        let mut stamped = LogPrinter::new(true);
        let text: String = chunks.iter().map(|c| stamped.render(c)).collect();
        let t = "2026-01-02T03:04:05Z";
        assert_eq!(
            text,
            format!(
                "── plan ──\n{t} a\n{t} bc\n── apply ──\n{t} d\n{} old\n",
                " ".repeat(20)
            )
        );
        // A phase change in the middle of a line starts the divider on its own line.
        let mut p = LogPrinter::new(false);
        let text = p.render(&chunk(0, "x", "plan")) + &p.render(&chunk(1, "y\n", "apply"));
        assert_eq!(text, "── plan ──\nx\n── apply ──\ny\n");
    }

    /// A plan that changes only outputs does not read as "nothing to apply".
    #[test]
    fn a_plan_changing_only_outputs_says_so() {
        let only_outputs = PlanSummary {
            has_changes: true,
            add: 0,
            change: 0,
            destroy: 0,
            resource_changes: Vec::new(),
            output_changes: [
                ("url".to_string(), "update".to_string()),
                ("id".to_string(), "create".to_string()),
                ("same".to_string(), "no-op".to_string()),
            ]
            .into(),
        };
        assert_eq!(plan_text(&only_outputs), "+0 ~0 -0, 2 outputs to change");
        let nothing = PlanSummary {
            has_changes: false,
            output_changes: Default::default(),
            ..only_outputs
        };
        assert_eq!(plan_text(&nothing), "+0 ~0 -0 (no changes)");
    }
}
