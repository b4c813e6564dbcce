//! One step on one host: its condition, rendering, connection (opened once per run),
//! facts, the module's work under the step's timeout, live output, and the result,
//! masked and capped.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{capped_output, HostResult, HostStatus, RunOptions, TIMEOUT_GRACE};
use crate::condition::{self, Decision};
use crate::connection::{self, Connection, Jumps, OutputTap, Stream};
use crate::facts;
use crate::live::{self, OutputLine};
use crate::model::{Host, Plan, Step};
use crate::modules::{self, redact_secrets, Change, ModuleError, Outcome, Overlay, Remote};
use crate::template::Scope;

pub(super) enum ConnState {
    NotOpened,
    Open(Arc<dyn Connection>),
    Failed(String),
}

/// A handler notified on a host, waiting for the next flush.
#[derive(Debug, Clone, Default)]
pub(super) struct Notice {
    /// A step changed the host (dry run: would change it); `false`: a dry run's step
    /// that cannot know whether it would.
    pub(super) certain: bool,
    /// The steps that notified it (report numbers).
    pub(super) by: Vec<usize>,
}

/// One host's state through the run.
pub(super) struct HostRun<'a> {
    pub(super) host: &'a Host,
    pub(super) scope: Scope,
    pub(super) conn: ConnState,
    pub(super) overlay: Overlay,
    /// Handlers (by index) notified and not yet run.
    pub(super) pending: BTreeMap<usize, Notice>,
    /// Why the host runs no more steps while its batch goes on: it failed one, under a
    /// `max_fail_percentage`.
    pub(super) stopped: Option<String>,
    /// It failed a step, a handler or the health check (not tolerated).
    pub(super) failed: bool,
}

pub(super) struct StepCtx<'a> {
    pub(super) plan: &'a Plan,
    pub(super) step: &'a Step,
    /// Where the step was written (`steps[2]`), for locations in warnings.
    pub(super) path: &'a str,
    /// Its report number.
    pub(super) number: usize,
    pub(super) options: &'a RunOptions,
    pub(super) halting: &'a AtomicBool,
    /// A failure sets `halting`: hosts that have not started the step skip it.
    pub(super) halt_on_failure: bool,
    pub(super) live: &'a mpsc::UnboundedSender<OutputLine>,
    /// The step refers to `host.facts` (gathered before it runs, if not yet).
    pub(super) needs_facts: bool,
    /// The run's bastion connections, shared by the hosts behind them.
    pub(super) jumps: &'a Jumps,
}

pub(super) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Runs one step on one host; also returns the references that did not resolve.
pub(super) async fn run_host_step(
    ctx: &StepCtx<'_>,
    h: &mut HostRun<'_>,
) -> (HostResult, Vec<String>) {
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
                let at = ctx.plan.locations.locate(&format!("{}.when", ctx.path));
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
                step: ctx.number,
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
