//! Re-runs requested on GitHub: a `check_run` or `check_suite` webhook with the action
//! `rerequested` starts a fresh run (a retry over the same commit) of each stack whose
//! check run it names — the one run of a check run (its `external_id`), or the latest
//! run of every stack on the suite's commit — recorded as a delivery with one decision
//! per stack, like any other. Other actions start nothing.

use bosun_core::run::Trigger;
use bosun_store::{CheckFeedback, NewDelivery, NewRun, TriggerDecision};
use serde::Deserialize;

use super::webhook::{actor, bare_delivery, github_key, Login, Repo};
use crate::app::AppState;
use crate::error::ApiError;

#[derive(Deserialize)]
pub(super) struct CheckRunEvent {
    action: String,
    check_run: CheckRunRef,
    repository: Repo,
    sender: Option<Login>,
}

#[derive(Deserialize)]
struct CheckRunRef {
    id: i64,
    head_sha: String,
    #[serde(default)]
    external_id: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct CheckSuiteEvent {
    action: String,
    check_suite: CheckSuiteRef,
    repository: Repo,
    sender: Option<Login>,
}

#[derive(Deserialize)]
struct CheckSuiteRef {
    head_sha: String,
}

pub(super) async fn on_check_run(
    state: &AppState,
    guid: &str,
    e: CheckRunEvent,
) -> Result<NewDelivery, ApiError> {
    let what = format!("check run {} {}", e.check_run.id, e.action);
    let mut d = delivery(
        guid,
        "check_run",
        &e.action,
        &e.repository,
        &e.check_run.head_sha,
    )?;
    if e.action != "rerequested" {
        d.summary = format!("{what}: only rerequested acts");
        return Ok(d);
    }
    let checks = state
        .store
        .checks_of_commit(&e.repository.full_name, &e.check_run.head_sha)
        .await?;
    let ours: Vec<CheckFeedback> = checks
        .into_iter()
        .filter(|c| Some(&c.run_id) == e.check_run.external_id.as_ref())
        .collect();
    if ours.is_empty() {
        d.summary =
            format!("{what}: not a check run of a Bosun run on this commit; nothing to re-run");
        return Ok(d);
    }
    let by = actor(e.sender.as_ref());
    rerun(
        state,
        &mut d,
        &ours,
        &by,
        &format!(
            "re-run of check run {} requested on GitHub by {by}",
            e.check_run.id
        ),
    )
    .await?;
    d.summary = format!("{what}: {}", d.summary);
    Ok(d)
}

pub(super) async fn on_check_suite(
    state: &AppState,
    guid: &str,
    e: CheckSuiteEvent,
) -> Result<NewDelivery, ApiError> {
    let what = format!("check suite {}", e.action);
    let mut d = delivery(
        guid,
        "check_suite",
        &e.action,
        &e.repository,
        &e.check_suite.head_sha,
    )?;
    if e.action != "rerequested" {
        d.summary = format!("{what}: only rerequested acts");
        return Ok(d);
    }
    let checks = state
        .store
        .checks_of_commit(&e.repository.full_name, &e.check_suite.head_sha)
        .await?;
    // The latest run of each stack (rows come oldest first).
    let mut latest: Vec<CheckFeedback> = Vec::new();
    for c in checks.into_iter().filter(|c| c.checks) {
        latest.retain(|l| !(l.org == c.org && l.stack == c.stack));
        latest.push(c);
    }
    if latest.is_empty() {
        d.summary = format!("{what}: no Bosun check run on this commit; nothing to re-run");
        return Ok(d);
    }
    let by = actor(e.sender.as_ref());
    rerun(
        state,
        &mut d,
        &latest,
        &by,
        &format!("re-run of the check suite requested on GitHub by {by}"),
    )
    .await?;
    d.summary = format!("{what}: {}", d.summary);
    Ok(d)
}

fn delivery(
    guid: &str,
    event: &str,
    action: &str,
    repository: &Repo,
    head_sha: &str,
) -> Result<NewDelivery, ApiError> {
    let mut d = bare_delivery(guid, event, Some(action.to_string()), String::new());
    d.repository = Some(github_key(&repository.full_name)?);
    d.after = Some(head_sha.to_string());
    Ok(d)
}

/// A retry of each named run that has ended; a decision naming why for each that has not.
async fn rerun(
    state: &AppState,
    d: &mut NewDelivery,
    checks: &[CheckFeedback],
    by: &str,
    reason: &str,
) -> Result<(), ApiError> {
    for c in checks {
        let Some(old) = state.store.get_run(&c.run_id).await? else {
            continue;
        };
        if !old.state.is_terminal() {
            d.decisions.push(TriggerDecision {
                org: old.org.clone(),
                stack: old.stack.clone(),
                run_id: None,
                reason: format!(
                    "re-run requested on GitHub, but run {} is still {}: nothing to re-run",
                    old.id, old.state
                ),
            });
            continue;
        }
        let run = NewRun {
            id: crate::service::runs::new_run_id(),
            org: old.org.clone(),
            stack: old.stack.clone(),
            kind: old.kind,
            trigger: Trigger::Retry,
            triggered_by: by.to_string(),
            commit: old.commit.clone(),
            branch: old.branch.clone(),
            retry_of: Some(old.id.clone()),
            pull_request: old.pull_request,
        };
        d.decisions.push(TriggerDecision {
            org: run.org.clone(),
            stack: run.stack.clone(),
            run_id: Some(run.id.clone()),
            reason: format!("{reason} (retry of run {})", old.id),
        });
        d.runs.push(run);
    }
    d.summary = format!("{} run(s) started again", d.runs.len());
    Ok(())
}
