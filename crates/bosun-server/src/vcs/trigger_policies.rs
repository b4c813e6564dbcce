//! The `trigger` decision point: after the watch paths have decided a delivery (a push, a
//! pull request, a polled commit), the org's policies attached to each stack on the
//! change's branch read the delivery and that decision, and may `skip` the stack's run or
//! `trigger` one the watch paths did not ask for (`bosun_core::policy` says what each
//! outcome does; a skip wins over a trigger). What they decided is the stack's trigger
//! decision's reason, and their evaluations are recorded on the run when one starts.
//!
//! Stacks on other branches are not evaluated: a run checks out its stack's branch, so a
//! change elsewhere never starts one. Each policy's files are read and parsed once per
//! delivery, then evaluated for each stack it is attached to, on a blocking thread.

use std::collections::BTreeMap;
use std::time::Instant;

use bosun_core::policy::{self, Mode, Outcome, Point, Subject, TriggerEffect};
use bosun_policy::Input;
use bosun_store::{NewPolicyEvaluation, PolicyRecord, RunEvaluations, StackRecord};
use serde_json::{json, Value};

use super::{new_run, Change, ChangedFiles, Decided};
use crate::app::AppState;
use crate::error::ApiError;
use crate::service::policies::{
    files_of, guard, judge, limits, load, stack_attachment, stack_document,
};

/// The longest message of a policy quoted in a trigger decision's reason.
const REASON_MESSAGE_CHARS: usize = 200;

/// Applies the `trigger` point's policies to a decided change (see the module docs).
pub async fn apply(
    state: &AppState,
    stacks: &[StackRecord],
    change: &Change<'_>,
    changed: &ChangedFiles,
    mut decided: Decided,
) -> Result<Decided, ApiError> {
    // Which policies apply to which stacks of the change's branch.
    let mut org_policies: BTreeMap<&str, Vec<PolicyRecord>> = BTreeMap::new();
    let mut work: Vec<(usize, Vec<usize>)> = Vec::new();
    for (i, stack) in stacks.iter().enumerate() {
        if stack.spec.branch != change.branch {
            continue;
        }
        if !org_policies.contains_key(stack.org.as_str()) {
            let all = state.store.list_policies(&stack.org).await?;
            let at_trigger = all
                .into_iter()
                .filter(|p| p.spec.points.contains(&Point::Trigger))
                .collect();
            org_policies.insert(stack.org.as_str(), at_trigger);
        }
        let (labels, environments) = stack_attachment(&stack.spec);
        let subject = Subject {
            labels: &labels,
            environments: &environments,
        };
        let applies: Vec<usize> = org_policies[stack.org.as_str()]
            .iter()
            .enumerate()
            .filter(|(_, p)| p.spec.attachment.applies_to(subject))
            .map(|(j, _)| j)
            .collect();
        if !applies.is_empty() {
            work.push((i, applies));
        }
    }
    if work.is_empty() {
        return Ok(decided);
    }

    // Each policy's files, read once for the delivery.
    let mut files = BTreeMap::new();
    for (i, applies) in &work {
        let org = stacks[*i].org.as_str();
        for j in applies {
            let p = &org_policies[org][*j];
            let key = (org.to_string(), p.spec.name.clone());
            if let std::collections::btree_map::Entry::Vacant(slot) = files.entry(key) {
                slot.insert(files_of(state, p).await);
            }
        }
    }
    let jobs: Vec<(usize, Value, Vec<PolicyRecord>)> = work
        .iter()
        .map(|(i, applies)| {
            let stack = &stacks[*i];
            let d = &decided.decisions[*i];
            let document = input(stack, change, changed, d.run_id.is_some(), &d.reason);
            let policies = applies
                .iter()
                .map(|j| org_policies[stack.org.as_str()][*j].clone())
                .collect();
            (*i, document, policies)
        })
        .collect();
    let evaluated = tokio::task::spawn_blocking(move || {
        // Each policy parsed once, then evaluated for each of its stacks.
        let sets: BTreeMap<_, _> = files.into_iter().map(|(key, f)| (key, load(f))).collect();
        jobs.into_iter()
            .map(|(i, document, policies)| {
                let input = guard(|| Input::new(&document, &limits()))
                    .and_then(|input| input.map_err(|e| e.to_string()));
                let evaluations: Vec<NewPolicyEvaluation> = policies
                    .iter()
                    .map(|p| {
                        let started = Instant::now();
                        let (version, set) = &sets[&(p.org.clone(), p.spec.name.clone())];
                        judge(
                            Point::Trigger,
                            p,
                            version.clone(),
                            set,
                            input.as_ref().map_err(Clone::clone),
                            started,
                        )
                    })
                    .collect();
                (i, evaluations)
            })
            .collect::<Vec<_>>()
    })
    .await
    .map_err(|e| ApiError::Internal(format!("the trigger policies' evaluation failed: {e}")))?;

    for (i, evaluations) in evaluated {
        settle(&stacks[i], change, &mut decided, i, evaluations);
    }
    Ok(decided)
}

/// What one stack's evaluations do to its decision and run.
fn settle(
    stack: &StackRecord,
    change: &Change<'_>,
    decided: &mut Decided,
    i: usize,
    evaluations: Vec<NewPolicyEvaluation>,
) {
    let effect = policy::trigger_effect(evaluations.iter().map(|e| e.outcome));
    let decision = &mut decided.decisions[i];
    let before = decision.reason.clone();
    match (effect, decision.run_id.clone()) {
        (TriggerEffect::Skip, Some(run)) => {
            decided.runs.retain(|r| r.id != run);
            decision.run_id = None;
            decision.reason = format!(
                "skipped by {} (the watch paths said: {before})",
                said(&evaluations, Outcome::Skip)
            );
        }
        (TriggerEffect::Trigger, None) => {
            let run = new_run(stack, change);
            decision.run_id = Some(run.id.clone());
            decision.reason = format!(
                "triggered by {} (the watch paths said: {before})",
                said(&evaluations, Outcome::Trigger)
            );
            decided.runs.push(run);
        }
        _ => {}
    }
    let warned = said(&evaluations, Outcome::Warn);
    if !warned.is_empty() {
        decision.reason = format!("{}; warned by {warned}", decision.reason);
    }
    if let Some(run) = &decision.run_id {
        decided.evaluations.push(RunEvaluations {
            run_id: run.clone(),
            evaluations,
        });
    }
}

/// `policy NAME: first message` for each evaluation with this outcome, joined by `; `.
fn said(evaluations: &[NewPolicyEvaluation], outcome: Outcome) -> String {
    evaluations
        .iter()
        .filter(|e| e.outcome == outcome)
        .map(|e| {
            let first = [
                &e.skip,
                &e.deny,
                &e.errors,
                &e.trigger,
                &e.warn,
                &e.require_approval,
            ]
            .into_iter()
            .find_map(|m| m.first());
            let advisory = if e.mode == Mode::Advisory {
                " (advisory)"
            } else {
                ""
            };
            match first {
                Some(m) => format!(
                    "policy {}{advisory}: {}",
                    e.policy,
                    m.chars().take(REASON_MESSAGE_CHARS).collect::<String>()
                ),
                None => format!("policy {}{advisory}", e.policy),
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The `trigger` point's input document (docs/policies.md): the delivery, the stack, and
/// what the watch paths decided.
fn input(
    stack: &StackRecord,
    change: &Change<'_>,
    changed: &ChangedFiles,
    run: bool,
    reason: &str,
) -> Value {
    let (files, unknown) = match changed {
        ChangedFiles::Known(files) => (json!(files), Value::Null),
        ChangedFiles::Unknown(why) => (Value::Null, json!(why)),
    };
    let (labels, _) = stack_attachment(&stack.spec);
    json!({
        "point": "trigger",
        "delivery": {
            "event": change.event,
            "repository": stack.spec.repository.to_string(),
            "branch": change.branch,
            "commit": change.commit,
            "pull_request": change.pull_request,
            "author": change.triggered_by,
            "changed_files": files,
            "changed_files_unknown": unknown,
        },
        "stack": stack_document(stack, &labels),
        "decision": {"run": run, "reason": reason},
    })
}
