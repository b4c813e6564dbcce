//! Executing a leased plan run with the host-plan engine (`bosun_plans::exec::run`): the
//! plan and inventory parsed from the lease, progress streamed as log lines (a step
//! starting, what its raw commands print as they print it — `[host] line`, bounded per
//! step and host by the engine — and each host finishing it with its status), per-host
//! results sent after each
//! step (so a run interrupted later keeps what it did), heartbeats on their own task, and
//! an abort honoured at once — the run's future is dropped, and the SSH connection stops
//! each remote command still running (its process group is signalled over a second
//! channel, `TERM` then `KILL`; see `bosun_plans::connection::ssh`). Secret values of the lease
//! are masked in log lines and results.

use std::path::Path;
use std::sync::Arc;

use bosun_api::{
    PlanHostResult, PlanResultsAppend, PlanRunLease, PlanRunnerEvent, PlanRunnerReport,
};
use bosun_plans::exec::{self, Event, HostResult, RunOptions, RunReport, RunStatus, StepKind};
use bosun_plans::model::{parse_inventory, parse_plan, Plan, Targets};
use tokio::sync::mpsc;
use tracing::Instrument as _;

use crate::client::{retry, ClientError, ServerClient};
use crate::control::{Level, Stop, StopSignal};
use crate::logs::{spawn_shipper, LogSink, ShipEnd};
use crate::worker::{heartbeat_interval, heartbeat_loop, AbortOnDrop, Worker};

/// Results are sent when a step ends, or sooner once this many hosts finished it.
const RESULTS_BATCH: usize = 100;

/// Executes one leased plan run and reports it (unless the lease was fenced).
pub(crate) async fn handle(worker: &Worker, lease: PlanRunLease, registered_heartbeat: u64) {
    let span = tracing::info_span!("plan_run", runner = %worker.name, run = %lease.run_id,
        plan = %lease.plan, fencing = lease.fencing);
    handle_inner(worker, lease, registered_heartbeat)
        .instrument(span)
        .await;
}

/// How the execution ended, before reporting.
enum End {
    Report(PlanRunnerEvent),
    Fenced,
    /// The runner shut down mid-run: report nothing; the server's sweep settles the run
    /// (`interrupted`, with the results already sent).
    Abandoned,
}

async fn handle_inner(worker: &Worker, lease: PlanRunLease, registered_heartbeat: u64) {
    tracing::info!(org = %lease.org, dry_run = lease.dry_run, "leased a plan run");
    let client = &worker.client;
    let stop = StopSignal::new();
    let heartbeat_seconds = if lease.heartbeat_seconds > 0 {
        lease.heartbeat_seconds
    } else {
        registered_heartbeat
    };
    let _heartbeat = AbortOnDrop(tokio::spawn(
        heartbeat_loop(
            Arc::clone(client),
            lease.run_id.clone(),
            lease.fencing,
            heartbeat_interval(heartbeat_seconds),
            stop.clone(),
        )
        .in_current_span(),
    ));
    let shutdown = worker.shutdown.clone();
    let abandon = stop.clone();
    let _abandon = AbortOnDrop(tokio::spawn(async move {
        shutdown.reached(Level::Abandoning).await;
        abandon.stop(Stop::Abandoned);
    }));

    let next_seq = retry(
        "asking where the log continues",
        worker.shutdown.give_up(),
        || client.next_log_seq(&lease.run_id, lease.fencing),
    )
    .await;
    let next_seq = match next_seq {
        Ok(seq) => seq,
        Err(ClientError::Fenced) => {
            tracing::info!("the lease was fenced before the run started; dropping it");
            return;
        }
        Err(ClientError::GaveUp) => return,
        Err(e) => {
            tracing::warn!(error = %e, "cannot learn where the run's log continues; numbering from 0");
            0
        }
    };
    let (log, shipper) = spawn_shipper(
        Arc::clone(client),
        lease.run_id.clone(),
        lease.fencing,
        next_seq,
        lease
            .mask
            .iter()
            .filter(|m| !m.is_empty())
            .cloned()
            .collect(),
        stop.clone(),
        worker.shutdown.clone(),
    );
    let end = execute(worker, &lease, &stop, &log).await;
    drop(log);
    let shipped = shipper.await;
    let end = if matches!(shipped, Ok(ShipEnd::Fenced)) || stop.current() == Some(Stop::Fenced) {
        End::Fenced
    } else {
        end
    };
    let event = match end {
        End::Report(event) => event,
        End::Fenced => {
            tracing::warn!("the lease was fenced; dropped the plan run without reporting");
            return;
        }
        End::Abandoned => {
            tracing::warn!("the runner is shutting down; abandoned the plan run");
            return;
        }
    };
    report(worker, &lease, event).await;
}

async fn report(worker: &Worker, lease: &PlanRunLease, event: PlanRunnerEvent) {
    let body = PlanRunnerReport {
        fencing: lease.fencing,
        event,
    };
    let sent = retry("reporting the plan run", worker.shutdown.give_up(), || {
        worker.client.plan_report(&lease.run_id, &body)
    })
    .await;
    match sent {
        Ok(()) => tracing::info!(event = ?body.event, "reported"),
        Err(ClientError::Fenced) => tracing::warn!("the lease was fenced; the report was refused"),
        Err(e) => tracing::error!(error = %e, "cannot report the plan run"),
    }
}

fn finished(ok: bool, reason: Option<String>, report: Option<serde_json::Value>) -> End {
    End::Report(PlanRunnerEvent::Finished { ok, reason, report })
}

async fn execute(worker: &Worker, lease: &PlanRunLease, stop: &StopSignal, log: &LogSink) -> End {
    // `started` first: a plan that cannot be used still ran nothing, but the run must end
    // `failed` with the reason, which only a started run can.
    let started = PlanRunnerReport {
        fencing: lease.fencing,
        event: PlanRunnerEvent::Started,
    };
    match retry("reporting the start", worker.shutdown.give_up(), || {
        worker.client.plan_report(&lease.run_id, &started)
    })
    .await
    {
        Ok(()) => {}
        Err(ClientError::Fenced) => return End::Fenced,
        Err(ClientError::GaveUp) => return End::Abandoned,
        Err(e) => {
            tracing::error!(error = %e, "the server refused the start of the plan run");
            return End::Abandoned;
        }
    }
    let plan = match parse_plan(Path::new(&format!("{}.yaml", lease.plan)), &lease.source) {
        Ok(p) => on_the_runs_hosts(p, &lease.hosts),
        Err(e) => {
            log.line(format!("bosun: the plan cannot be used: {e}"))
                .await;
            return finished(false, Some(format!("the plan cannot be used: {e}")), None);
        }
    };
    let inventory = match parse_inventory(Path::new("inventory"), &lease.inventory) {
        Ok(i) => i,
        Err(e) => {
            log.line(format!("bosun: the hosts cannot be used: {e}"))
                .await;
            return finished(false, Some(format!("the hosts cannot be used: {e}")), None);
        }
    };
    let mask: Vec<String> = lease
        .mask
        .iter()
        .filter(|m| !m.is_empty())
        .cloned()
        .collect();
    let masker: exec::Masker = Arc::new(move |text: &str| {
        let mut out = text.to_string();
        for secret in &mask {
            out = out.replace(secret.as_str(), crate::logs::MASK);
        }
        out
    });
    let options = RunOptions {
        dry_run: lease.dry_run,
        forks: lease.forks.max(1) as usize,
        inputs: lease.inputs.clone(),
        masker: Some(masker),
        // Substituted by the engine in real runs only (the server sends none for dry runs).
        secrets: lease.secrets.clone(),
        ..RunOptions::default()
    };
    let (tx, rx) = mpsc::unbounded_channel::<Event>();
    let forwarder = forward(worker, lease, log.clone(), rx);
    let run = exec::run(&plan, &inventory, options, move |event| {
        let _ = tx.send(event);
    });
    // Dropping the run's future stops every remote command still running (the SSH
    // connection signals its process group) and closes the connections.
    // Progress is forwarded while the run goes on; it ends when the run's sender drops.
    let execution = async move {
        tokio::select! {
            r = run => Some(r),
            _ = stop.stopped() => None,
        }
    };
    let (outcome, forwarded) = tokio::join!(execution, forwarder);
    let stopped = stop.current();
    match (outcome, stopped) {
        (_, Some(Stop::Fenced)) => End::Fenced,
        (_, Some(Stop::Canceled)) => {
            log.line("bosun: the run was aborted; stopped (remote commands still running were signalled to stop)").await;
            End::Report(PlanRunnerEvent::Aborted)
        }
        (None, _) | (_, Some(Stop::Abandoned)) => End::Abandoned,
        (Some(Err(e)), _) => {
            log.line(format!("bosun: the run was refused: {e}")).await;
            finished(false, Some(e.to_string()), None)
        }
        (Some(Ok(report)), _) => {
            if forwarded == Forwarded::Fenced {
                return End::Fenced;
            }
            let reason = failure_reason(&report);
            let ok = report.status == RunStatus::Succeeded;
            log.line(summary_line(&report)).await;
            finished(ok, reason, Some(report_json(&report)))
        }
    }
}

/// The plan, targeting exactly the run's hosts (`hosts`, from the lease) when the server
/// names them: the lease's inventory also holds the bastions they are reached through,
/// which the plan's own `targets` (a label, an environment, a name) could match, and
/// which no step may run on. No names (an older server): the plan's `targets` as written.
fn on_the_runs_hosts(mut plan: Plan, hosts: &[String]) -> Plan {
    if !hosts.is_empty() {
        plan.targets = Targets {
            hosts: hosts.to_vec(),
            labels: Vec::new(),
            environments: Vec::new(),
            hosts_from: Vec::new(),
        };
    }
    plan
}

fn failure_reason(report: &RunReport) -> Option<String> {
    (report.status == RunStatus::Failed).then(|| match &report.halted {
        Some(h) => h.reason.clone(),
        None => {
            let failed: Vec<String> = report
                .summary()
                .into_iter()
                .filter(|s| s.failed > 0)
                .map(|s| s.host)
                .collect();
            if failed.is_empty() {
                "the run failed".to_string()
            } else {
                format!(
                    "failed on {} (within max_fail_percentage: the rollout went on)",
                    failed.join(", ")
                )
            }
        }
    })
}

fn summary_line(report: &RunReport) -> String {
    let totals = report.summary().iter().fold([0usize; 5], |mut t, s| {
        t[0] += s.ok;
        t[1] += s.changed;
        t[2] += s.failed;
        t[3] += s.skipped;
        t[4] += s.unknown;
        t
    });
    format!(
        "bosun: {} {} — ok {}, changed {}, failed {}, skipped {}, unknown {}; {} unresolved reference(s)",
        if report.dry_run { "dry run" } else { "run" },
        match report.status {
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
        },
        totals[0],
        totals[1],
        totals[2],
        totals[3],
        totals[4],
        report.unresolved.len()
    )
}

/// The report kept on the run: everything but the per-host results (sent on their own).
fn report_json(report: &RunReport) -> serde_json::Value {
    serde_json::json!({
        "status": report.status,
        "dry_run": report.dry_run,
        "hosts": report.hosts,
        "batches": report.batches,
        "halted": report.halted,
        "warnings": report.warnings,
        "unresolved": report.unresolved,
        "summary": report.summary(),
        "duration_ms": report.duration_ms,
    })
}

#[derive(Debug, PartialEq, Eq)]
enum Forwarded {
    Done,
    Fenced,
}

fn wire_result(step: usize, step_name: &str, module: &str, r: &HostResult) -> PlanHostResult {
    let status = serde_json::to_value(r.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "unknown".into());
    PlanHostResult {
        step: step as i64,
        step_name: step_name.to_string(),
        module: module.to_string(),
        host: r.host.clone(),
        status,
        ignored: r.ignored,
        changed: r.changed,
        exit_code: r.exit_code,
        stdout: r.stdout.clone(),
        stderr: r.stderr.clone(),
        duration_ms: r.duration_ms as i64,
        message: r.message.clone(),
        diff: r.diff.clone(),
    }
}

/// Turns the engine's progress into log lines and per-host results, sent as each step
/// ends. Runs until the engine's progress sender is dropped.
async fn forward(
    worker: &Worker,
    lease: &PlanRunLease,
    log: LogSink,
    mut rx: mpsc::UnboundedReceiver<Event>,
) -> Forwarded {
    let client: &ServerClient = &worker.client;
    let mut pending: Vec<PlanHostResult> = Vec::new();
    let mut fenced = false;
    let send = |batch: Vec<PlanHostResult>| async move {
        if batch.is_empty() {
            return Ok(());
        }
        let body = PlanResultsAppend {
            fencing: lease.fencing,
            results: batch,
        };
        retry("sending step results", worker.shutdown.give_up(), || {
            client.plan_results(&lease.run_id, &body)
        })
        .await
    };
    while let Some(event) = rx.recv().await {
        let mut flush = false;
        match event {
            Event::Started {
                hosts,
                steps,
                dry_run,
                ..
            } => {
                log.line(format!(
                    "bosun: {} of plan {:?}: {} step(s) on {} host(s): {}",
                    if dry_run { "dry run" } else { "run" },
                    lease.plan,
                    steps,
                    hosts.len(),
                    hosts.join(", ")
                ))
                .await;
            }
            Event::BatchStarted {
                batch,
                batches,
                hosts,
            } => {
                if batches > 1 {
                    log.line(format!(
                        "bosun: batch {batch} of {batches}: {}",
                        hosts.join(", ")
                    ))
                    .await;
                }
            }
            Event::StepStarted { step, name, kind } => {
                flush = true;
                log.line(match kind {
                    StepKind::Step => format!("step {step}: {name}"),
                    StepKind::Handler => format!("handler {step}: {name}"),
                    StepKind::HealthCheck => format!("health check {step}: {name}"),
                })
                .await;
            }
            Event::Pausing {
                after_batch,
                duration,
            } => {
                log.line(format!(
                    "bosun: pausing {}s after batch {after_batch}",
                    duration.as_secs_f64()
                ))
                .await;
            }
            Event::Output(line) => log.line(line.display()).await,
            Event::HostFinished {
                step,
                step_name,
                module,
                result,
                ..
            } => {
                let wire = wire_result(step, &step_name, module, &result);
                let mut line = format!("  {} {}: {}", wire.host, wire.status, result.message);
                if result.ignored {
                    line.push_str(" (ignored: continue_on_error)");
                }
                log.line(line).await;
                pending.push(wire);
                flush = pending.len() >= RESULTS_BATCH;
            }
            Event::Halted(h) => {
                log.line(format!("bosun: {}: every later step is skipped", h.reason))
                    .await;
            }
            Event::Finished { .. } => flush = true,
        }
        if flush && !fenced {
            match send(std::mem::take(&mut pending)).await {
                Ok(()) => {}
                Err(ClientError::Fenced) => fenced = true,
                Err(e) => tracing::warn!(error = %e, "step results were not delivered"),
            }
        }
    }
    if !fenced {
        if let Err(ClientError::Fenced) = send(std::mem::take(&mut pending)).await {
            fenced = true;
        }
    }
    if fenced {
        Forwarded::Fenced
    } else {
        Forwarded::Done
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::path::Path;

    use super::*;

    /// The lease's inventory holds a bastion with the plan's label (and a host the plan
    /// names): with the run's hosts named, the plan runs on those alone; without (an
    /// older server), its targets pick as written.
    #[test]
    fn a_plan_runs_on_the_leases_hosts_alone() {
        let plan = parse_plan(
            Path::new("p.yaml"),
            "name: p\ntargets: { hosts: [edge], labels: [web] }\nsteps:\n  - command: [\"true\"]\n",
        )
        .unwrap();
        let inventory = parse_inventory(
            Path::new("inventory"),
            "hosts:\n  edge: { labels: [web] }\n  web-1: { labels: [web], proxy_jump: edge }\n  web-2: { labels: [web] }\n",
        )
        .unwrap();
        let names = |plan: &Plan| -> Vec<String> {
            plan.target_hosts(&inventory)
                .iter()
                .map(|h| h.name.clone())
                .collect()
        };
        let run = on_the_runs_hosts(plan.clone(), &["web-2".into(), "web-1".into()]);
        assert_eq!(names(&run), ["web-1", "web-2"]);
        assert_eq!(
            names(&on_the_runs_hosts(plan, &[])),
            ["edge", "web-1", "web-2"]
        );
    }
}
