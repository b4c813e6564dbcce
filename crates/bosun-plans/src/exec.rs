//! The executor: a plan run step by step across its target hosts.
//!
//! - One connection per host, opened when the host first runs a step and reused for the
//!   rest of the run; at most `forks` hosts work at once. A host that cannot connect
//!   fails that step with the connection's error (and every later step it reaches).
//!   Hosts behind one bastion (`proxy_jump`) share one connection to it
//!   ([`connection::Jumps`]), closed with the last of them.
//! - **Host facts** ([`facts`]): before the first step on a host whose `when:` or
//!   templates (a `file.template`'s `src` file included) refer to `host.facts`, the host's
//!   facts are gathered with one command and kept in its scope for the rest of the run
//!   (dry runs too: gathering changes nothing). A plan that never refers to them runs no
//!   such command. A host whose facts cannot be gathered fails like one that cannot
//!   connect (`cannot gather host facts: …`).
//! - Step *k* runs on every target host before step *k+1* starts. Per host, `when:` is
//!   decided first ([`condition::decide`]): false skips, malformed runs and warns.
//! - **Live output**: what a `command`, `shell` or `script` step prints is reported line
//!   by line while it runs ([`Event::Output`], cut into lines and bounded by [`live`]),
//!   masked as the report is; the host's result still holds all of it.
//! - **A run halts at its first failed step**: hosts already running that step finish it,
//!   hosts that had not started it do not, every later step is skipped on every host,
//!   and the run is `failed`. `continue_on_error: true` makes a step's failure tolerable
//!   (the result is kept, marked `ignored`). A step's `timeout` fails it as timed out.
//! - **Dry run**: the same traversal, but modules predict instead of acting; predictions
//!   of file steps are threaded per host and path into later file steps (an overlay the
//!   file modules read before the host), predictions made after a raw command say they
//!   may be inaccurate, and the report lists every unresolved reference.
//! - `secret://` references: shown as `secret://[redacted]` everywhere in the report. A
//!   real run substitutes the values in [`RunOptions::secrets`] (a Bosun server resolves
//!   them and hands them to its runner) when it renders a step, and masks those values in
//!   every text it reports; it refuses, before anything runs, a reference it was given
//!   no value for (`bosun plan exec` has no secret store). Dry runs never substitute.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::condition::{self, Decision};
use crate::connection::{self, ConnectOptions, Connection, Jumps, OutputTap, Stream};
use crate::facts;
use crate::live::{self, OutputLine};
use crate::model::{Host, Inventory, Plan, Step, Value};
use crate::modules::{
    self, redact_secrets, Change, ModuleError, Outcome, Overlay, Prediction, Remote,
    SECRETS_NEED_SERVER,
};
use crate::template::Scope;

/// Masks secret values in text that leaves the executor (output, messages, diffs).
pub type Masker = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// How long past a step's timeout the executor waits for the connection to report the
/// kill before it gives up on the step itself.
const TIMEOUT_GRACE: Duration = Duration::from_secs(5);

/// How to run.
#[derive(Clone)]
pub struct RunOptions {
    /// Predict instead of acting.
    pub dry_run: bool,
    /// At most this many hosts work at once (0 counts as 1).
    pub forks: usize,
    /// Run overrides; each must be one of the plan's `inputs`.
    pub inputs: BTreeMap<String, Value>,
    pub connect: ConnectOptions,
    /// Applied to every text of the report (server runs mask resolved secret values).
    pub masker: Option<Masker>,
    /// Resolved `secret://namespace/key` references (as written → value), substituted in
    /// real runs only and masked (`***`) in every text of the report.
    pub secrets: BTreeMap<String, String>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            dry_run: false,
            forks: 50,
            inputs: BTreeMap::new(),
            connect: ConnectOptions::default(),
            masker: None,
            secrets: BTreeMap::new(),
        }
    }
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("dry_run", &self.dry_run)
            .field("forks", &self.forks)
            .field("inputs", &self.inputs)
            .field("connect", &self.connect)
            .field("masker", &self.masker.is_some())
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

/// A run refused before anything ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    #[error("unknown input {name:?} (the plan declares: {})", if declared.is_empty() { "none".to_string() } else { declared.join(", ") })]
    UnknownInput { name: String, declared: Vec<String> },
    #[error("{SECRETS_NEED_SERVER}; found in: {}", places.join("; "))]
    SecretReferences { places: Vec<String> },
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Succeeded,
    Failed,
}

/// How one step went on one host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HostStatus {
    /// Ran (or would run) and changed nothing.
    Ok,
    /// Changed the host (dry run: would change it).
    Changed,
    /// Dry run of a raw command: cannot be known.
    Unknown,
    Failed,
    TimedOut,
    Skipped,
}

impl HostStatus {
    pub fn is_failure(self) -> bool {
        matches!(self, HostStatus::Failed | HostStatus::TimedOut)
    }
}

/// The most of each stream of a step's output a result keeps (the head; see
/// [`capped_output`]).
pub const RESULT_OUTPUT_BYTES: usize = 64 * 1024;

/// `text` cut to its first [`RESULT_OUTPUT_BYTES`] (at a character boundary), with a
/// last line saying it was cut and how long it was: `… [truncated: N bytes in all]`.
pub fn capped_output(text: String) -> String {
    if text.len() <= RESULT_OUTPUT_BYTES {
        return text;
    }
    let mut end = RESULT_OUTPUT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n… [truncated: {} bytes in all]",
        &text[..end],
        text.len()
    )
}

/// One step's result on one host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostResult {
    pub host: String,
    pub status: HostStatus,
    /// A failure the step's `continue_on_error` tolerated.
    pub ignored: bool,
    /// Whether the host changed (dry run: would change); `None` when unknown or not run.
    pub changed: Option<bool>,
    pub exit_code: Option<i32>,
    /// What the command printed, at most [`RESULT_OUTPUT_BYTES`] of it ([`capped_output`]).
    pub stdout: String,
    pub stderr: String,
    pub duration_ms: u64,
    /// One line for people: what happened, or why not.
    pub message: String,
    pub warnings: Vec<String>,
    /// Dry run of a file module that would change something: the unified diff.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// Dry run of a file module: the predicted before and after (not serialized; the
    /// diff shows it).
    #[serde(skip)]
    pub prediction: Option<Prediction>,
}

impl HostResult {
    fn skipped(host: &str, message: String) -> Self {
        HostResult {
            host: host.to_string(),
            status: HostStatus::Skipped,
            ignored: false,
            changed: None,
            exit_code: None,
            stdout: String::new(),
            stderr: String::new(),
            duration_ms: 0,
            message,
            warnings: Vec::new(),
            diff: None,
            prediction: None,
        }
    }

    /// A failure that stops the run (not tolerated by `continue_on_error`).
    pub fn halts(&self) -> bool {
        self.status.is_failure() && !self.ignored
    }
}

/// One step across the hosts, in inventory order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepReport {
    /// 1-based.
    pub number: usize,
    pub name: String,
    pub module: &'static str,
    pub results: Vec<HostResult>,
}

impl StepReport {
    pub fn result(&self, host: &str) -> Option<&HostResult> {
        self.results.iter().find(|r| r.host == host)
    }
}

/// Where a run halted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Halt {
    pub step: usize,
    pub step_name: String,
    /// The hosts the step failed on.
    pub hosts: Vec<String>,
}

/// A warning recorded on the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunWarning {
    pub host: Option<String>,
    pub step: Option<usize>,
    pub message: String,
}

/// A reference that did not resolve (rendered empty, or failed the step with
/// `strict_vars`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unresolved {
    pub host: String,
    pub step: usize,
    pub step_name: String,
    pub reference: String,
}

/// Per-host totals over the steps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HostSummary {
    pub host: String,
    pub ok: usize,
    pub changed: usize,
    pub unknown: usize,
    pub failed: usize,
    pub ignored: usize,
    pub skipped: usize,
}

/// What a run did (or, dry, would do).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunReport {
    pub plan: String,
    pub dry_run: bool,
    pub status: RunStatus,
    /// The target hosts, in inventory order.
    pub hosts: Vec<String>,
    pub steps: Vec<StepReport>,
    pub halted: Option<Halt>,
    pub warnings: Vec<RunWarning>,
    /// Every unresolved reference, per host and step.
    pub unresolved: Vec<Unresolved>,
    pub duration_ms: u64,
}

impl RunReport {
    /// The result of step `number` (1-based) on `host`.
    pub fn result(&self, number: usize, host: &str) -> Option<&HostResult> {
        self.steps
            .get(number.checked_sub(1)?)
            .and_then(|s| s.result(host))
    }

    /// Per-host counts, in host order.
    pub fn summary(&self) -> Vec<HostSummary> {
        self.hosts
            .iter()
            .map(|h| {
                let mut s = HostSummary {
                    host: h.clone(),
                    ..HostSummary::default()
                };
                for r in self.steps.iter().filter_map(|st| st.result(h)) {
                    match r.status {
                        HostStatus::Ok => s.ok += 1,
                        HostStatus::Changed => s.changed += 1,
                        HostStatus::Unknown => s.unknown += 1,
                        HostStatus::Failed | HostStatus::TimedOut if r.ignored => s.ignored += 1,
                        HostStatus::Failed | HostStatus::TimedOut => s.failed += 1,
                        HostStatus::Skipped => s.skipped += 1,
                    }
                }
                s
            })
            .collect()
    }
}

/// What happens during a run, as it happens.
#[derive(Debug, Clone)]
pub enum Event {
    Started {
        plan: String,
        hosts: Vec<String>,
        steps: usize,
        dry_run: bool,
    },
    StepStarted {
        step: usize,
        name: String,
    },
    /// A line a raw command printed on a host, while it runs (before the host finishes
    /// the step; lines of hosts working at once interleave).
    Output(OutputLine),
    /// A host finished a step (in the order hosts finish).
    HostFinished {
        step: usize,
        step_name: String,
        result: Box<HostResult>,
    },
    /// A step failed: every later step is skipped.
    Halted(Halt),
    Finished {
        status: RunStatus,
    },
}

enum ConnState {
    NotOpened,
    Open(Arc<dyn Connection>),
    Failed(String),
}

/// One host's state through the run.
struct HostRun<'a> {
    host: &'a Host,
    scope: Scope,
    conn: ConnState,
    overlay: Overlay,
}

/// Runs `plan` on its target hosts in `inventory`, calling `progress` as things happen.
pub async fn run(
    plan: &Plan,
    inventory: &Inventory,
    options: RunOptions,
    mut progress: impl FnMut(Event),
) -> Result<RunReport, ExecError> {
    let started = Instant::now();
    if let Some(name) = options
        .inputs
        .keys()
        .find(|k| !plan.inputs.contains_key(*k))
    {
        return Err(ExecError::UnknownInput {
            name: name.clone(),
            declared: plan.inputs.keys().cloned().collect(),
        });
    }
    let targets = plan.target_hosts(inventory);
    let mut hosts: Vec<HostRun<'_>> = targets
        .iter()
        .map(|h| HostRun {
            host: h,
            scope: Scope::for_host(plan, inventory, h, &options.inputs),
            conn: ConnState::NotOpened,
            overlay: Overlay::new(),
        })
        .collect();
    if !options.dry_run {
        refuse_secret_references(plan, &hosts, &options.secrets)?;
    }

    let host_names: Vec<String> = targets.iter().map(|h| h.name.clone()).collect();
    let mut report = RunReport {
        plan: plan.name.clone(),
        dry_run: options.dry_run,
        status: RunStatus::Succeeded,
        hosts: host_names.clone(),
        steps: Vec::new(),
        halted: None,
        warnings: Vec::new(),
        unresolved: Vec::new(),
        duration_ms: 0,
    };
    if targets.is_empty() {
        report.warnings.push(RunWarning {
            host: None,
            step: None,
            message: "the plan's targets match no host of the inventory".into(),
        });
    }
    progress(Event::Started {
        plan: plan.name.clone(),
        hosts: host_names.clone(),
        steps: plan.steps.len(),
        dry_run: options.dry_run,
    });

    // Which steps refer to `host.facts`: a run with none never gathers them.
    let needs_facts: Vec<bool> = plan.steps.iter().map(facts::step_needs_facts).collect();
    let forks = options.forks.max(1);
    let jumps = Jumps::new();
    // Live output of the hosts at work, to `progress` from this task (bounded per step
    // and host by `live::Lines`).
    let (live_tx, mut live_rx) = mpsc::unbounded_channel::<OutputLine>();
    for (index, step) in plan.steps.iter().enumerate() {
        let number = index + 1;
        let mut step_report = StepReport {
            number,
            name: step.name.clone(),
            module: step.module.kind(),
            results: Vec::new(),
        };
        if let Some(halt) = &report.halted {
            let why = format!(
                "the run halted at step {} ({:?}), which failed on {}",
                halt.step,
                halt.step_name,
                halt.hosts.join(", ")
            );
            for name in &host_names {
                let result = HostResult::skipped(name, why.clone());
                progress(Event::HostFinished {
                    step: number,
                    step_name: step.name.clone(),
                    result: Box::new(result.clone()),
                });
                step_report.results.push(result);
            }
            report.steps.push(step_report);
            continue;
        }
        progress(Event::StepStarted {
            step: number,
            name: step.name.clone(),
        });
        let halting = AtomicBool::new(false);
        let mut results: Vec<Option<(HostResult, Vec<String>)>> = vec![None; hosts.len()];
        {
            let ctx = StepCtx {
                plan,
                step,
                index,
                options: &options,
                halting: &halting,
                live: &live_tx,
                needs_facts: needs_facts.get(index).copied().unwrap_or(false),
                jumps: &jumps,
            };
            let ctx = &ctx;
            // Collected first: a lazy `map` kept inside the stream would make this future
            // lose `Send` (rustc cannot prove it for the closure's higher-ranked
            // lifetimes), and runners spawn runs on a multi-threaded runtime.
            let work: Vec<_> = hosts
                .iter_mut()
                .enumerate()
                .map(|(i, h)| async move { (i, run_host_step(ctx, h).await) })
                .collect();
            let mut running = stream::iter(work).buffer_unordered(forks);
            loop {
                // A host's lines are sent before its result is: they are reported first.
                let next = tokio::select! {
                    biased;
                    Some(line) = live_rx.recv() => {
                        progress(Event::Output(line));
                        continue;
                    }
                    next = running.next() => next,
                };
                while let Ok(line) = live_rx.try_recv() {
                    progress(Event::Output(line));
                }
                let Some((i, (result, unresolved))) = next else {
                    break;
                };
                if result.halts() {
                    halting.store(true, Ordering::SeqCst);
                }
                progress(Event::HostFinished {
                    step: number,
                    step_name: step.name.clone(),
                    result: Box::new(result.clone()),
                });
                if let Some(slot) = results.get_mut(i) {
                    *slot = Some((result, unresolved));
                }
            }
        }
        for (result, unresolved) in results.into_iter().flatten() {
            for w in &result.warnings {
                report.warnings.push(RunWarning {
                    host: Some(result.host.clone()),
                    step: Some(number),
                    message: w.clone(),
                });
            }
            for reference in unresolved {
                report.unresolved.push(Unresolved {
                    host: result.host.clone(),
                    step: number,
                    step_name: step.name.clone(),
                    reference,
                });
            }
            step_report.results.push(result);
        }
        let failed: Vec<String> = step_report
            .results
            .iter()
            .filter(|r| r.halts())
            .map(|r| r.host.clone())
            .collect();
        report.steps.push(step_report);
        if !failed.is_empty() {
            let halt = Halt {
                step: number,
                step_name: step.name.clone(),
                hosts: failed,
            };
            progress(Event::Halted(halt.clone()));
            report.halted = Some(halt);
            report.status = RunStatus::Failed;
        }
    }

    for h in &hosts {
        if let ConnState::Open(conn) = &h.conn {
            conn.close().await;
        }
    }
    report.duration_ms = millis(started.elapsed());
    progress(Event::Finished {
        status: report.status,
    });
    Ok(report)
}

/// A real run cannot use a `secret://` reference it has no value for: refuse before
/// anything runs.
fn refuse_secret_references(
    plan: &Plan,
    hosts: &[HostRun<'_>],
    secrets: &BTreeMap<String, String>,
) -> Result<(), ExecError> {
    let mut places = Vec::new();
    for (i, step) in plan.steps.iter().enumerate() {
        let on: Vec<&str> = hosts
            .iter()
            .filter(|h| {
                modules::render_with(&step.module, &h.scope, Some(secrets))
                    .is_ok_and(|r| r.has_secret_refs)
            })
            .map(|h| h.host.name.as_str())
            .collect();
        if !on.is_empty() {
            // A server looks up the references written in the plan, its inputs and the
            // hosts' vars: not those inside a template file, which only the runner reads.
            let hint = match &step.module {
                crate::model::Module::Template {
                    source: crate::model::CopySource::Src(src),
                    ..
                } => format!(
                    " (if the reference is inside the template file {}: a server does not \
                     look there; set it in a variable and use that in the template)",
                    src.display()
                ),
                _ => String::new(),
            };
            places.push(format!(
                "step {} ({:?}) on {}{hint}",
                i + 1,
                step.name,
                on.join(", ")
            ));
        }
    }
    if places.is_empty() {
        Ok(())
    } else {
        Err(ExecError::SecretReferences { places })
    }
}

struct StepCtx<'a> {
    plan: &'a Plan,
    step: &'a Step,
    index: usize,
    options: &'a RunOptions,
    halting: &'a AtomicBool,
    live: &'a mpsc::UnboundedSender<OutputLine>,
    /// The step refers to `host.facts` (gathered before it runs, if not yet).
    needs_facts: bool,
    /// The run's bastion connections, shared by the hosts behind them.
    jumps: &'a Jumps,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Runs one step on one host; also returns the references that did not resolve.
async fn run_host_step(ctx: &StepCtx<'_>, h: &mut HostRun<'_>) -> (HostResult, Vec<String>) {
    let step = ctx.step;
    let name = h.host.name.as_str();
    if ctx.halting.load(Ordering::SeqCst) {
        return (
            HostResult::skipped(
                name,
                "not started: the step failed on another host and the run is halting".into(),
            ),
            Vec::new(),
        );
    }
    let started = Instant::now();
    let mut warnings = Vec::new();
    // Facts first: the condition and the templates may use them.
    if ctx.needs_facts && h.scope.host.facts.is_none() {
        if let Err(e) = gather_facts(ctx, h).await {
            return (finish(ctx, name, started, warnings, Err(e)), Vec::new());
        }
    }
    if let Some(expr) = &step.when {
        match condition::decide(expr, &h.scope) {
            Decision::Run => {}
            Decision::Skip => {
                return (
                    HostResult::skipped(name, format!("condition is false: {expr}")),
                    Vec::new(),
                )
            }
            Decision::RunMalformed(why) => {
                let at = ctx
                    .plan
                    .locations
                    .locate(&format!("steps[{}].when", ctx.index));
                let at = if at.file.is_empty() {
                    String::new()
                } else {
                    format!("{at}: ")
                };
                // `why` names the condition and what is wrong with it.
                warnings.push(format!(
                    "{at}{why}; the step runs (a broken guard fails open)"
                ));
            }
        }
    }

    let values = (!ctx.options.dry_run).then_some(&ctx.options.secrets);
    let rendered = match modules::render_with(&step.module, &h.scope, values) {
        Ok(r) => r,
        Err(e) => return (finish(ctx, name, started, warnings, Err(e)), Vec::new()),
    };
    let unresolved = rendered.unresolved.clone();
    if !unresolved.is_empty() {
        if ctx.plan.strict_vars {
            let e = ModuleError::Unresolved(unresolved.clone());
            return (finish(ctx, name, started, warnings, Err(e)), unresolved);
        }
        warnings.push(format!(
            "unresolved reference(s) rendered empty: {}",
            unresolved.join(", ")
        ));
    }
    if rendered.has_secret_refs && !ctx.options.dry_run {
        let e = ModuleError::SecretReferences;
        return (finish(ctx, name, started, warnings, Err(e)), unresolved);
    }

    let conn = match connect(ctx, h).await {
        Ok(c) => c,
        Err(e) => return (finish(ctx, name, started, warnings, Err(e)), unresolved),
    };
    // What a raw command prints goes out line by line, masked, as it comes.
    let lines = Mutex::new(live::Lines::new(live::LIVE_BYTES));
    let send = |found: Vec<(live::LineKind, String)>| {
        for (kind, text) in found {
            let _ = ctx.live.send(OutputLine {
                step: ctx.index + 1,
                host: name.to_string(),
                kind,
                text: clean(ctx.options, &text),
            });
        }
    };
    let tap = |stream: Stream, bytes: &[u8]| {
        let found = lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(stream, bytes);
        send(found);
    };
    let remote = Remote {
        conn: conn.as_ref(),
        sudo: step.sudo,
        deadline: step.timeout.map(|t| Instant::now() + t),
        live: (!ctx.options.dry_run).then_some(&tap as &OutputTap<'_>),
    };
    let work = async {
        if ctx.options.dry_run {
            modules::predict(&rendered.module, &remote, &mut h.overlay, &step.name).await
        } else {
            modules::apply(&rendered.module, &remote).await
        }
    };
    let outcome = match step.timeout {
        Some(limit) => match tokio::time::timeout(limit + TIMEOUT_GRACE, work).await {
            Ok(r) => r,
            Err(_) => Err(ModuleError::TimedOut { output: None }),
        },
        None => work.await,
    };
    let rest = lines
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .finish();
    send(rest);
    (finish(ctx, name, started, warnings, outcome), unresolved)
}

/// The host's connection, opened on first use; a host that could not connect (or whose
/// facts could not be gathered) fails every step that needs it with the same error.
async fn connect(
    ctx: &StepCtx<'_>,
    h: &mut HostRun<'_>,
) -> Result<Arc<dyn Connection>, ModuleError> {
    match &h.conn {
        ConnState::Open(c) => Ok(Arc::clone(c)),
        ConnState::Failed(e) => Err(ModuleError::Remote(e.clone())),
        ConnState::NotOpened => {
            match connection::open_via(h.host, &ctx.options.connect, ctx.jumps).await {
                Ok(c) => {
                    h.conn = ConnState::Open(Arc::clone(&c));
                    Ok(c)
                }
                Err(e) => {
                    h.conn = ConnState::Failed(e.to_string());
                    Err(ModuleError::Connection(e))
                }
            }
        }
    }
}

/// Gathers the host's facts into its scope (one command, once per run). A host whose
/// facts cannot be gathered is failed like one that cannot connect.
async fn gather_facts(ctx: &StepCtx<'_>, h: &mut HostRun<'_>) -> Result<(), ModuleError> {
    let conn = connect(ctx, h).await?;
    match facts::gather(conn.as_ref()).await {
        Ok(f) => {
            h.scope.host.facts = Some(f);
            Ok(())
        }
        Err(why) => {
            let message = format!("cannot gather host facts: {why}");
            conn.close().await;
            h.conn = ConnState::Failed(message.clone());
            Err(ModuleError::Remote(message))
        }
    }
}

/// `text` as the run reports it: `secret://` references redacted, the secret values the
/// run substituted masked, and the caller's masker applied.
fn clean(options: &RunOptions, text: &str) -> String {
    let mut s = redact_secrets(text);
    for value in options.secrets.values().filter(|v| !v.is_empty()) {
        if s.contains(value.as_str()) {
            s = s.replace(value.as_str(), "***");
        }
    }
    match &options.masker {
        Some(mask) => mask(&s),
        None => s,
    }
}

/// The host's result from a module's outcome, texts redacted and masked.
fn finish(
    ctx: &StepCtx<'_>,
    host: &str,
    started: Instant,
    mut warnings: Vec<String>,
    outcome: Result<Outcome, ModuleError>,
) -> HostResult {
    let mut result = match outcome {
        Ok(o) => {
            warnings.extend(o.warnings);
            let (status, changed) = match o.change {
                Change::Changed => (HostStatus::Changed, Some(true)),
                Change::Unchanged => (HostStatus::Ok, Some(false)),
                Change::Unknown => (HostStatus::Unknown, None),
            };
            HostResult {
                host: host.to_string(),
                status,
                ignored: false,
                changed,
                exit_code: o.exit_code,
                stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
                duration_ms: 0,
                message: o.message,
                warnings,
                diff: o.diff,
                prediction: o.prediction,
            }
        }
        Err(e) => {
            let status = if e.is_timeout() {
                HostStatus::TimedOut
            } else {
                HostStatus::Failed
            };
            let message = match (&e, ctx.step.timeout) {
                (ModuleError::TimedOut { .. }, Some(t)) => {
                    format!("timed out after {}", humanize(t))
                }
                _ => e.to_string(),
            };
            let output = e.output();
            HostResult {
                host: host.to_string(),
                status,
                ignored: ctx.step.continue_on_error,
                changed: None,
                exit_code: output.and_then(|o| o.exit_code),
                stdout: output
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_default(),
                stderr: output
                    .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                    .unwrap_or_default(),
                duration_ms: 0,
                message,
                warnings,
                diff: None,
                prediction: None,
            }
        }
    };
    result.duration_ms = millis(started.elapsed());
    let clean = |s: &str| clean(ctx.options, s);
    // Masked first, so the cut never leaves half a secret unmasked.
    result.stdout = capped_output(clean(&result.stdout));
    result.stderr = capped_output(clean(&result.stderr));
    result.message = clean(&result.message);
    result.warnings = result.warnings.iter().map(|w| clean(w)).collect();
    result.diff = result.diff.as_deref().map(clean);
    result
}

fn humanize(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}
