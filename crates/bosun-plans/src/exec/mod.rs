//! The executor: a plan run step by step across its target hosts, batch by batch, with handlers at its flushes.
//!
//! - One connection per host, opened when the host first runs a step and reused for the
//!   rest of the run; at most `forks` hosts work at once. A host that cannot connect
//!   fails that step with the connection's error (and every later step it reaches).
//!   Hosts behind one bastion (`proxy_jump`) share one connection to it
//!   ([`crate::connection::Jumps`]), closed with the last of them.
//! - **Host facts** ([`facts`]): before the first step on a host whose `when:` or
//!   templates (a `file.template`'s `src` file included) refer to `host.facts`, the host's
//!   facts are gathered with one command and kept in its scope for the rest of the run
//!   (dry runs too: gathering changes nothing). A plan that never refers to them runs no
//!   such command. A host whose facts cannot be gathered fails like one that cannot
//!   connect (`cannot gather host facts: …`).
//! - Step *k* runs on every target host before step *k+1* starts. Per host, `when:` is
//!   decided first ([`crate::condition::decide`]): false skips, malformed runs and warns.
//! - **Live output**: what a `command`, `shell` or `script` step prints is reported line
//!   by line while it runs ([`Event::Output`], cut into lines and bounded by [`crate::live`]),
//!   masked as the report is; the host's result still holds all of it.
//! - **A run halts at its first failed step**: hosts already running that step finish it,
//!   hosts that had not started it do not, every later step is skipped on every host,
//!   and the run is `failed`. `continue_on_error: true` makes a step's failure tolerable
//!   (the result is kept, marked `ignored`). A step's `timeout` fails it as timed out.
//! - **Batches** ([`Rollout`](crate::model::Rollout)): the target hosts go in batches
//!   (one, unless the plan sets `serial`); a batch runs every step, then its notified
//!   handlers, then the health check, before the next starts. Without
//!   `max_fail_percentage` the halt rule holds across batches (later batches do not
//!   start); with it, a failed host stops alone and the rollout stops only when a batch
//!   ends with too many failed. A host the health check fails on (after its retries)
//!   stops the rollout.
//! - **Handlers**: a step's `notify` marks handlers pending on the hosts it changed
//!   (dry run: would change; or, uncertain, cannot know); at a `flush: handlers` step or
//!   the end of the batch each pending handler runs once per host, in declaration order.
//!   A halted run runs none unless `force_handlers` (then at the end of the batch, failed
//!   hosts too) and warns of those left. Handlers and the health check are entries of the
//!   report numbered after the steps ([`StepKind`]).
//! - **Dry run**: the same traversal, but modules predict instead of acting; predictions
//!   of file steps are threaded per host and path into later file steps (an overlay the
//!   file modules read before the host), predictions made after a raw command say they
//!   may be inaccurate, and the report lists every unresolved reference.
//! - `secret://` references: shown as `secret://[redacted]` everywhere in the report. A
//!   real run substitutes the values in [`RunOptions::secrets`] (a Bosun server resolves
//!   them and hands them to its runner) when it renders a step, and masks those values in
//!   every text it reports; it refuses, before anything runs, a reference it was given
//!   no value for (`bosun plan exec` has no secret store). Dry runs never substitute.

mod host;
mod report;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::connection::{ConnectOptions, Jumps};
use crate::facts;
use crate::live::OutputLine;
use crate::model::{Inventory, Plan, Step, Value};
use crate::modules::{self, Overlay, SECRETS_NEED_SERVER};
use crate::template::Scope;
use host::{millis, run_host_step, ConnState, HostRun, StepCtx};
pub use report::{
    capped_output, BatchReport, BatchStatus, Event, Halt, HostResult, HostStatus, HostSummary,
    RunReport, RunStatus, RunWarning, StepKind, StepReport, Unresolved, RESULT_OUTPUT_BYTES,
};

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

/// Where a report entry goes, and what it is: a plan step by index, a handler by its
/// flush point (a step's index, or the end of the steps) and index, the health check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EntryKey {
    Step(usize),
    Handler { at: usize, handler: usize },
    HealthCheck,
}

impl EntryKey {
    /// Where the entry is shown: a handler right after the flush step it ran at (at the
    /// end: after the last step), the health check last.
    fn place(self) -> (usize, usize, usize) {
        match self {
            EntryKey::Step(i) => (i, 0, 0),
            EntryKey::Handler { at, handler } => (at, 1, handler),
            EntryKey::HealthCheck => (usize::MAX, 0, 0),
        }
    }
}

impl Ord for EntryKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.place().cmp(&other.place())
    }
}

impl PartialOrd for EntryKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Runs `plan` on its target hosts in `inventory`, calling `progress` as things happen.
///
/// The hosts go in batches (`serial`; one batch by default): each batch runs every step,
/// then its notified handlers, then the health check, before the next batch starts.
pub async fn run(
    plan: &Plan,
    inventory: &Inventory,
    options: RunOptions,
    progress: impl FnMut(Event),
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
    let hosts: Vec<HostRun<'_>> = targets
        .iter()
        .map(|h| HostRun {
            host: h,
            scope: Scope::for_host(plan, inventory, h, &options.inputs),
            conn: ConnState::NotOpened,
            overlay: Overlay::new(),
            pending: BTreeMap::new(),
            stopped: None,
            failed: false,
        })
        .collect();
    if !options.dry_run {
        refuse_secret_references(plan, &hosts, &options.secrets)?;
    }
    let host_names: Vec<String> = targets.iter().map(|h| h.name.clone()).collect();
    let batches = plan.rollout.batches(host_names.len());
    let report = RunReport {
        plan: plan.name.clone(),
        dry_run: options.dry_run,
        status: RunStatus::Succeeded,
        hosts: host_names.clone(),
        batches: batches
            .iter()
            .enumerate()
            .map(|(b, r)| BatchReport {
                number: b + 1,
                hosts: host_names[r.clone()].to_vec(),
                status: BatchStatus::NotRun,
                failed: Vec::new(),
            })
            .collect(),
        steps: Vec::new(),
        halted: None,
        warnings: Vec::new(),
        unresolved: Vec::new(),
        duration_ms: 0,
    };
    // Live output of the hosts at work, to `progress` from this task (bounded per step
    // and host by `live::Lines`).
    let (live_tx, live_rx) = mpsc::unbounded_channel::<OutputLine>();
    let mut exec = Executor {
        plan,
        options: &options,
        forks: options.forks.max(1),
        hosts,
        report,
        entries: BTreeMap::new(),
        jumps: Jumps::new(),
        // Decided once per run (a template file is read for it), not per batch.
        needs_facts: plan
            .all_steps()
            .into_iter()
            .map(|(path, step)| (path, facts::step_needs_facts(step)))
            .collect(),
        live_tx,
        live_rx,
        progress,
    };
    if targets.is_empty() {
        exec.report.warnings.push(RunWarning {
            host: None,
            step: None,
            message: "the plan's targets match no host of the inventory".into(),
        });
    }
    (exec.progress)(Event::Started {
        plan: plan.name.clone(),
        hosts: host_names,
        steps: plan.steps.len(),
        dry_run: options.dry_run,
    });
    for (b, range) in batches.iter().enumerate() {
        if exec.report.halted.is_some() {
            break;
        }
        if b > 0 {
            exec.pause(b).await;
        }
        exec.run_batch(b, range.clone()).await;
    }
    exec.fill_not_run();

    for h in &exec.hosts {
        if let ConnState::Open(conn) = &h.conn {
            conn.close().await;
        }
    }
    let mut report = exec.report;
    report.steps = exec.entries.into_values().collect();
    if report.status == RunStatus::Succeeded && exec.hosts.iter().any(|h| h.failed) {
        report.status = RunStatus::Failed;
    }
    report.duration_ms = millis(started.elapsed());
    (exec.progress)(Event::Finished {
        status: report.status,
    });
    Ok(report)
}

/// A run in progress: its hosts, its report so far, and where progress goes.
struct Executor<'a, P: FnMut(Event)> {
    plan: &'a Plan,
    options: &'a RunOptions,
    forks: usize,
    hosts: Vec<HostRun<'a>>,
    report: RunReport,
    /// The report's entries, in the order they are shown.
    entries: BTreeMap<EntryKey, StepReport>,
    /// The run's bastion connections, shared by the hosts behind them.
    jumps: Jumps,
    /// Which steps (by path: `steps[2]`, `handlers[0]`, `health_check`) refer to
    /// `host.facts`: a run with none never gathers them.
    needs_facts: BTreeMap<String, bool>,
    live_tx: mpsc::UnboundedSender<OutputLine>,
    live_rx: mpsc::UnboundedReceiver<OutputLine>,
    progress: P,
}

/// A step as the executor runs it: what it is, where it was written, its entry.
struct Stage<'s> {
    step: &'s Step,
    /// Its place in the file (`steps[2]`, `handlers[0]`, `health_check`).
    path: String,
    key: EntryKey,
    number: usize,
    kind: StepKind,
}

impl Stage<'_> {
    /// The event of a host's result of this stage.
    fn finished(&self, result: HostResult) -> Event {
        Event::HostFinished {
            step: self.number,
            step_name: self.step.name.clone(),
            module: self.step.module.kind(),
            kind: self.kind,
            result: Box::new(result),
        }
    }
}

impl<'a, P: FnMut(Event)> Executor<'a, P> {
    /// Batch `b`: the steps, the handlers at the end, then the health check.
    async fn run_batch(&mut self, b: usize, range: std::ops::Range<usize>) {
        let batch: Vec<usize> = range.collect();
        let batches = self.report.batches.len();
        (self.progress)(Event::BatchStarted {
            batch: b + 1,
            batches,
            hosts: batch
                .iter()
                .map(|&i| self.hosts[i].host.name.clone())
                .collect(),
        });
        let plan = self.plan;
        let steps_len = plan.steps.len();
        for (index, step) in plan.steps.iter().enumerate() {
            if step.is_flush() {
                if self.report.halted.is_none() {
                    self.flush(&batch, index).await;
                }
                continue;
            }
            let stage = Stage {
                step,
                path: format!("steps[{index}]"),
                key: EntryKey::Step(index),
                number: index + 1,
                kind: StepKind::Step,
            };
            if let Some(halt) = &self.report.halted {
                let why = if halt.step > 0 {
                    format!(
                        "the run halted at step {} ({:?}), which failed on {}",
                        halt.step,
                        halt.step_name,
                        halt.hosts.join(", ")
                    )
                } else {
                    format!("the run halted: {}", halt.reason)
                };
                self.skip(&stage, &batch, &why);
                continue;
            }
            let (active, stopped): (Vec<usize>, Vec<usize>) = batch
                .iter()
                .partition(|&&i| self.hosts[i].stopped.is_none());
            for i in stopped {
                let why = self.hosts[i].stopped.clone().unwrap_or_default();
                self.skip(&stage, &[i], &why);
            }
            let results = self.run_stage(&stage, &active, true).await;
            self.notify(step, stage.number, &results);
            self.settle(&stage, results);
        }
        // The end of the batch: the handlers still pending, then the health check.
        let halted = self.report.halted.is_some();
        if !halted || plan.force_handlers {
            self.flush(&batch, steps_len).await;
        }
        self.warn_unflushed(&batch);
        if self.report.halted.is_none() {
            self.health_check(&batch).await;
        }
        self.close_batch(b, &batch);
    }

    /// Runs the handlers pending on the batch's hosts, in declaration order, each once
    /// per host. `at`: the flush step's index, or the number of steps for the end of the
    /// batch (where `force_handlers` also runs them on failed hosts).
    async fn flush(&mut self, batch: &[usize], at: usize) {
        let plan = self.plan;
        let end = at == plan.steps.len();
        for (h, handler) in plan.handlers.iter().enumerate() {
            if self.report.halted.is_some() && !(end && plan.force_handlers) {
                return;
            }
            let notified: Vec<usize> = batch
                .iter()
                .copied()
                .filter(|&i| {
                    let host = &self.hosts[i];
                    host.pending.contains_key(&h)
                        && (host.stopped.is_none() || (end && plan.force_handlers))
                })
                .collect();
            if notified.is_empty() {
                continue;
            }
            let key = EntryKey::Handler { at, handler: h };
            let stage = Stage {
                step: handler,
                path: format!("handlers[{h}]"),
                number: self.number_for(key),
                key,
                kind: StepKind::Handler,
            };
            let mut certain = Vec::new();
            for &i in &notified {
                let Some(notice) = self.hosts[i].pending.remove(&h) else {
                    continue;
                };
                if notice.certain {
                    certain.push(i);
                } else {
                    // Dry run: the steps that notify it cannot know whether they change.
                    let by: Vec<String> = notice.by.iter().map(|n| n.to_string()).collect();
                    let mut r = HostResult::skipped(
                        &self.hosts[i].host.name,
                        format!(
                            "may run: notified by step {}, which a dry run cannot know would change the host",
                            by.join(", ")
                        ),
                    );
                    r.status = HostStatus::Unknown;
                    self.record(&stage, r, Vec::new());
                }
            }
            let others: Vec<usize> = batch
                .iter()
                .copied()
                .filter(|i| !notified.contains(i))
                .collect();
            self.skip(&stage, &others, "not notified");
            if certain.is_empty() {
                continue;
            }
            let results = self.run_stage(&stage, &certain, true).await;
            self.settle(&stage, results);
        }
    }

    /// The handlers a halted (or stopped) host will not run, as warnings.
    fn warn_unflushed(&mut self, batch: &[usize]) {
        let plan = self.plan;
        for (h, handler) in plan.handlers.iter().enumerate() {
            let left: Vec<String> = batch
                .iter()
                .filter_map(|&i| {
                    let host = &mut self.hosts[i];
                    host.pending.remove(&h).map(|_| host.host.name.clone())
                })
                .collect();
            if !left.is_empty() {
                self.report.warnings.push(RunWarning {
                    host: None,
                    step: None,
                    message: format!(
                        "handler {:?} was notified on {} but did not run: the host failed or the run halted (force_handlers: true runs notified handlers anyway)",
                        handler.name,
                        left.join(", ")
                    ),
                });
            }
        }
    }

    /// The rollout's health check on the batch's hosts that are still going: a host it
    /// fails on after its retries stops the rollout.
    async fn health_check(&mut self, batch: &[usize]) {
        let Some(check) = &self.plan.rollout.health_check else {
            return;
        };
        let stage = Stage {
            step: &check.step,
            path: "health_check".into(),
            number: self.number_for(EntryKey::HealthCheck),
            key: EntryKey::HealthCheck,
            kind: StepKind::HealthCheck,
        };
        let (mut trying, stopped): (Vec<usize>, Vec<usize>) = batch
            .iter()
            .partition(|&&i| self.hosts[i].stopped.is_none());
        for i in stopped {
            let why = self.hosts[i].stopped.clone().unwrap_or_default();
            self.skip(&stage, &[i], &why);
        }
        // A dry run tries once: it predicts, and a prediction does not change.
        let tries = if self.options.dry_run {
            1
        } else {
            check.retries.saturating_add(1)
        };
        let mut failures: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        let mut finished = Vec::new();
        for attempt in 1..=tries {
            if attempt > 1 {
                tokio::time::sleep(check.delay).await;
            }
            let last = attempt == tries;
            let results = self.run_stage(&stage, &trying, false).await;
            trying.clear();
            for (i, mut result, unresolved) in results {
                if result.status.is_failure() && !last {
                    failures.entry(i).or_default().push(result.message);
                    trying.push(i);
                    continue;
                }
                if let Some(earlier) = failures.remove(&i) {
                    result.warnings.push(format!(
                        "attempt {attempt} of {tries}; the earlier ones failed: {}",
                        earlier.join("; ")
                    ));
                }
                finished.push((i, result, unresolved));
            }
            if trying.is_empty() {
                break;
            }
        }
        finished.sort_by_key(|(i, ..)| *i);
        for (_, result, _) in &finished {
            (self.progress)(stage.finished(result.clone()));
        }
        // The health check gates the next batch whatever `max_fail_percentage` says.
        let failed: Vec<String> = finished
            .iter()
            .filter(|(_, r, _)| r.halts())
            .map(|(_, r, _)| r.host.clone())
            .collect();
        for (i, result, unresolved) in finished {
            if result.halts() {
                self.hosts[i].failed = true;
            }
            self.store(&stage, result, unresolved);
        }
        if !failed.is_empty() {
            let reason = format!(
                "the health check failed on {}: the rollout stops",
                failed.join(", ")
            );
            self.halt(&stage, failed, reason);
        }
    }

    /// Marks the batch done, and stops the rollout if more of it failed than
    /// `max_fail_percentage` allows.
    fn close_batch(&mut self, b: usize, batch: &[usize]) {
        let failed: Vec<String> = batch
            .iter()
            .filter(|&&i| self.hosts[i].failed)
            .map(|&i| self.hosts[i].host.name.clone())
            .collect();
        if let Some(report) = self.report.batches.get_mut(b) {
            report.status = if failed.is_empty() && self.report.halted.is_none() {
                BatchStatus::Succeeded
            } else {
                BatchStatus::Failed
            };
            report.failed = failed.clone();
        }
        let Some(max) = self.plan.rollout.max_fail_percentage else {
            return;
        };
        if self.report.halted.is_some() || failed.is_empty() {
            return;
        }
        let share = failed.len() * 100 / batch.len().max(1);
        if failed.len() * 100 > usize::from(max) * batch.len() {
            let reason = format!(
                "batch {} had {} of {} hosts fail ({share}%), more than max_fail_percentage {max}%: the rollout stops",
                b + 1,
                failed.len(),
                batch.len()
            );
            let halt = Halt {
                step: 0,
                step_name: String::new(),
                hosts: failed,
                reason,
            };
            (self.progress)(Event::Halted(halt.clone()));
            self.report.halted = Some(halt);
            self.report.status = RunStatus::Failed;
        }
    }

    /// Waits `pause_between_batches` before batch `b` (real runs only).
    async fn pause(&mut self, b: usize) {
        let Some(duration) = self.plan.rollout.pause_between_batches else {
            return;
        };
        if self.options.dry_run || duration.is_zero() {
            return;
        }
        (self.progress)(Event::Pausing {
            after_batch: b,
            duration,
        });
        tokio::time::sleep(duration).await;
    }

    /// The hosts of batches that never ran get a skipped result in every entry, and
    /// every entry a result for every host, in host order.
    fn fill_not_run(&mut self) {
        let not_run: Vec<usize> = self
            .report
            .batches
            .iter()
            .filter(|b| b.status == BatchStatus::NotRun)
            .map(|b| b.number)
            .collect();
        let why = match (&self.report.halted, not_run.first()) {
            (Some(h), Some(first)) => format!(
                "not run: the rollout stopped before batch {first} ({})",
                h.reason
            ),
            _ => String::new(),
        };
        let order: BTreeMap<String, usize> = self
            .report
            .hosts
            .iter()
            .enumerate()
            .map(|(i, h)| (h.clone(), i))
            .collect();
        let batch_of: BTreeMap<&str, usize> = self
            .report
            .batches
            .iter()
            .flat_map(|b| b.hosts.iter().map(move |h| (h.as_str(), b.number)))
            .collect();
        let mut filled = Vec::new();
        for entry in self.entries.values_mut() {
            if entry.results.len() == self.report.hosts.len() {
                continue;
            }
            let present: std::collections::BTreeSet<String> =
                entry.results.iter().map(|r| r.host.clone()).collect();
            for host in &self.report.hosts {
                if present.contains(host) {
                    continue;
                }
                let message = match batch_of.get(host.as_str()) {
                    Some(b) if not_run.contains(b) => why.clone(),
                    _ if entry.kind == StepKind::Handler => "not notified".to_string(),
                    _ => "not run".to_string(),
                };
                let result = HostResult::skipped(host, message);
                filled.push((
                    entry.number,
                    entry.name.clone(),
                    entry.module,
                    entry.kind,
                    result.clone(),
                ));
                entry.results.push(result);
            }
            entry
                .results
                .sort_by_key(|r| order.get(&r.host).copied().unwrap_or(usize::MAX));
        }
        for (step, step_name, module, kind, result) in filled {
            (self.progress)(Event::HostFinished {
                step,
                step_name,
                module,
                kind,
                result: Box::new(result),
            });
        }
    }

    /// The report number of an entry: a plan step's place, else the next after the
    /// steps and the entries numbered so far.
    fn number_for(&self, key: EntryKey) -> usize {
        match key {
            EntryKey::Step(i) => i + 1,
            _ => match self.entries.get(&key) {
                Some(e) => e.number,
                None => {
                    let extra = self
                        .entries
                        .keys()
                        .filter(|k| !matches!(k, EntryKey::Step(_)))
                        .count();
                    self.plan.steps.len() + 1 + extra
                }
            },
        }
    }

    fn entry(&mut self, stage: &Stage<'_>) -> &mut StepReport {
        self.entries.entry(stage.key).or_insert_with(|| StepReport {
            number: stage.number,
            name: stage.step.name.clone(),
            module: stage.step.module.kind(),
            kind: stage.kind,
            flushed_at: match stage.key {
                EntryKey::Handler { at, .. } if at < self.plan.steps.len() => Some(at + 1),
                _ => None,
            },
            results: Vec::new(),
        })
    }

    /// A result, reported as it comes and kept in the entry.
    fn record(&mut self, stage: &Stage<'_>, result: HostResult, unresolved: Vec<String>) {
        (self.progress)(stage.finished(result.clone()));
        self.store(stage, result, unresolved);
    }

    /// Keeps a result (already reported) in its entry, with its warnings and
    /// unresolved references.
    fn store(&mut self, stage: &Stage<'_>, result: HostResult, unresolved: Vec<String>) {
        for w in &result.warnings {
            self.report.warnings.push(RunWarning {
                host: Some(result.host.clone()),
                step: Some(stage.number),
                message: w.clone(),
            });
        }
        for reference in unresolved {
            self.report.unresolved.push(Unresolved {
                host: result.host.clone(),
                step: stage.number,
                step_name: stage.step.name.clone(),
                reference,
            });
        }
        self.entry(stage).results.push(result);
    }

    fn skip(&mut self, stage: &Stage<'_>, hosts: &[usize], why: &str) {
        for &i in hosts {
            let result = HostResult::skipped(&self.hosts[i].host.name, why.to_string());
            self.record(stage, result, Vec::new());
        }
    }

    /// Notes the handlers a step notifies on the hosts it changed (dry run: would
    /// change, or cannot know).
    fn notify(&mut self, step: &Step, number: usize, results: &[(usize, HostResult, Vec<String>)]) {
        if step.notify.is_empty() {
            return;
        }
        let plan = self.plan;
        for (i, result, _) in results {
            let certain = match result.status {
                HostStatus::Changed => true,
                HostStatus::Unknown => false,
                _ => continue,
            };
            for name in &step.notify {
                let Some(h) = plan.handlers.iter().position(|x| &x.name == name) else {
                    continue;
                };
                let notice = self.hosts[*i].pending.entry(h).or_default();
                notice.certain |= certain;
                notice.by.push(number);
            }
        }
    }

    /// Keeps a stage's results and applies the failure rule: without
    /// `max_fail_percentage` the first failure halts the run; with it, a failed host
    /// stops alone and its batch goes on.
    fn settle(&mut self, stage: &Stage<'_>, results: Vec<(usize, HostResult, Vec<String>)>) {
        let mut failed = Vec::new();
        for (i, result, unresolved) in results {
            if result.halts() {
                failed.push(result.host.clone());
                let host = &mut self.hosts[i];
                host.failed = true;
                host.stopped = Some(format!(
                    "the host failed {} {} ({:?})",
                    match stage.kind {
                        StepKind::Handler => "handler",
                        _ => "step",
                    },
                    stage.number,
                    stage.step.name
                ));
            }
            self.store(stage, result, unresolved);
        }
        if failed.is_empty() || self.plan.rollout.max_fail_percentage.is_some() {
            return;
        }
        let reason = format!(
            "{} {} ({:?}) failed on {}",
            match stage.kind {
                StepKind::Handler => "handler",
                StepKind::HealthCheck => "health check",
                StepKind::Step => "step",
            },
            stage.number,
            stage.step.name,
            failed.join(", ")
        );
        self.halt(stage, failed, reason);
    }

    fn halt(&mut self, stage: &Stage<'_>, hosts: Vec<String>, reason: String) {
        let halt = Halt {
            step: stage.number,
            step_name: stage.step.name.clone(),
            hosts,
            reason,
        };
        (self.progress)(Event::Halted(halt.clone()));
        self.report.halted = Some(halt);
        self.report.status = RunStatus::Failed;
    }

    /// Runs a stage on `hosts` at once (at most `forks`), reporting each host's result
    /// as it finishes when `report` (the health check reports only final tries).
    /// Returns the results in host order; the caller keeps them.
    async fn run_stage(
        &mut self,
        stage: &Stage<'_>,
        hosts: &[usize],
        report: bool,
    ) -> Vec<(usize, HostResult, Vec<String>)> {
        (self.progress)(Event::StepStarted {
            step: stage.number,
            name: stage.step.name.clone(),
            kind: stage.kind,
        });
        let halting = AtomicBool::new(false);
        let ctx = StepCtx {
            plan: self.plan,
            step: stage.step,
            path: &stage.path,
            number: stage.number,
            options: self.options,
            // The first failure halts the others unless failures are tolerated.
            halting: &halting,
            halt_on_failure: self.plan.rollout.max_fail_percentage.is_none(),
            live: &self.live_tx,
            needs_facts: self.needs_facts.get(&stage.path).copied().unwrap_or(false),
            jumps: &self.jumps,
        };
        let ctx = &ctx;
        let mut out: Vec<(usize, HostResult, Vec<String>)> = Vec::with_capacity(hosts.len());
        let progress = &mut self.progress;
        let live_rx = &mut self.live_rx;
        // Collected first: a lazy `map` kept inside the stream would make this future
        // lose `Send` (rustc cannot prove it for the closure's higher-ranked
        // lifetimes), and runners spawn runs on a multi-threaded runtime.
        let mut wanted = vec![false; self.hosts.len()];
        for &i in hosts {
            if let Some(w) = wanted.get_mut(i) {
                *w = true;
            }
        }
        let work: Vec<_> = self
            .hosts
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| wanted.get(*i).copied().unwrap_or(false))
            .map(|(i, h)| async move { (i, run_host_step(ctx, h).await) })
            .collect();
        let mut running = stream::iter(work).buffer_unordered(self.forks);
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
            if result.halts() && ctx.halt_on_failure {
                halting.store(true, Ordering::SeqCst);
            }
            if report {
                progress(stage.finished(result.clone()));
            }
            out.push((i, result, unresolved));
        }
        out.sort_by_key(|(i, ..)| *i);
        out
    }
}

/// A real run cannot use a `secret://` reference it has no value for: refuse before
/// anything runs.
fn refuse_secret_references(
    plan: &Plan,
    hosts: &[HostRun<'_>],
    secrets: &BTreeMap<String, String>,
) -> Result<(), ExecError> {
    let mut places = Vec::new();
    for (path, step) in plan.all_steps() {
        if step.is_flush() {
            continue;
        }
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
            let what = match path.strip_prefix("steps[") {
                Some(rest) => {
                    let i: usize = rest.trim_end_matches(']').parse().unwrap_or(0);
                    format!("step {}", i + 1)
                }
                None => path.clone(),
            };
            places.push(format!(
                "{what} ({:?}) on {}{hint}",
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
