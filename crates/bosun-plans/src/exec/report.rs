//! What a run reports: each host's result of each step, the run's report (steps,
//! batches, halt, warnings, unresolved references) and the events it sends as it goes.

use std::time::Duration;

use serde::Serialize;

use crate::live::OutputLine;
use crate::modules::Prediction;

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
    /// A result for a host that did not run the step, saying why.
    pub(crate) fn skipped(host: &str, message: String) -> Self {
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

/// What a report entry ran: one of the plan's steps, a handler at a flush, or the
/// rollout's health check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    Step,
    Handler,
    HealthCheck,
}

/// One step across the hosts, in inventory order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepReport {
    /// 1-based. A plan step's number is its place in `steps:` (`flush: handlers` steps
    /// count, and have no entry of their own); handlers and health checks are numbered
    /// after the last step, in the order they first ran.
    pub number: usize,
    pub name: String,
    pub module: &'static str,
    pub kind: StepKind,
    /// A handler: the `flush: handlers` step it ran at; `None`: the end of a batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flushed_at: Option<usize>,
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
    /// The step (report number) whose failure stopped the run.
    pub step: usize,
    pub step_name: String,
    /// The hosts the step failed on.
    pub hosts: Vec<String>,
    /// Why, in one sentence: `step 2 ("migrate") failed on db-1`, or a rollout's stop.
    pub reason: String,
}

/// How a batch of a rolling rollout went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchStatus {
    /// Every host went through every step (and the health check).
    Succeeded,
    /// Some host failed (within `max_fail_percentage`, or the run halted in it).
    Failed,
    /// The rollout stopped before this batch started.
    NotRun,
}

/// One batch of the run's hosts (a run without `serial` has one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BatchReport {
    /// 1-based.
    pub number: usize,
    pub hosts: Vec<String>,
    pub status: BatchStatus,
    /// Its hosts that failed a step, a handler or the health check.
    pub failed: Vec<String>,
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
    /// The batches, in order (one, unless the plan sets `serial`).
    pub batches: Vec<BatchReport>,
    /// The steps in the order they ran: a handler after the flush step it ran at, or
    /// after the last step; the health check last.
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
        self.step(number).and_then(|s| s.result(host))
    }

    /// The entry numbered `number`.
    pub fn step(&self, number: usize) -> Option<&StepReport> {
        self.steps.iter().find(|s| s.number == number)
    }

    /// The entry of the handler `name` (at the end of batches when `flushed_at` is
    /// `None`).
    pub fn handler(&self, name: &str, flushed_at: Option<usize>) -> Option<&StepReport> {
        self.steps
            .iter()
            .find(|s| s.kind == StepKind::Handler && s.name == name && s.flushed_at == flushed_at)
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
    /// A batch of hosts starts (every run has at least one).
    BatchStarted {
        /// 1-based.
        batch: usize,
        batches: usize,
        hosts: Vec<String>,
    },
    StepStarted {
        step: usize,
        name: String,
        kind: StepKind,
    },
    /// A line a raw command printed on a host, while it runs (before the host finishes
    /// the step; lines of hosts working at once interleave).
    Output(OutputLine),
    /// A host finished a step (in the order hosts finish).
    HostFinished {
        step: usize,
        step_name: String,
        module: &'static str,
        kind: StepKind,
        result: Box<HostResult>,
    },
    /// A step failed: every later step is skipped.
    Halted(Halt),
    /// The run waits this long before the next batch.
    Pausing {
        after_batch: usize,
        duration: Duration,
    },
    Finished {
        status: RunStatus,
    },
}
