//! Plan runs a stack starts: a plan file's `on_stack_change` names a stack and outputs;
//! when a tracked run of that stack finishes having changed one of them (any output when
//! none is named), the store records a plan trigger in the transaction that ends the run.
//! This duty starts the plan's run from each trigger, with trigger `stack`, requested by
//! `stack:<id>`, naming the upstream run, stack and changed outputs (`upstream`). The
//! run's own creating transaction settles the trigger, so a trigger gives one run even
//! if the server stops in between.
//!
//! The run starts like any other: its hosts are resolved then (an environment taking
//! hosts from that very stack's output gets the new ones), and a gated environment pauses
//! it for an approver. A trigger whose run cannot be resolved (a source gives no hosts,
//! the plan no longer parses or targets no host) still gives a run: `failed` before any
//! step, its reason saying why. One the concurrency guard refuses waits for the next
//! pass. A trigger whose plan is gone or watches another stack now is dropped.

use std::collections::BTreeMap;
use std::time::Duration;

use bosun_core::plan_run::PlanTrigger;
use bosun_store::{Audit, NewPlanRun, PlanTriggerRecord, StoreError};
use serde_json::json;

use crate::app::AppState;
use crate::duties::{Duty, PassError};
use crate::error::ApiError;
use crate::service::plan_runs::{new_run_ids, resolve};

/// The most triggers one pass starts runs for.
const BATCH: u32 = 50;

/// The duty: passes every few seconds, and as soon as runs move.
pub fn trigger_duty() -> Duty {
    Duty::new("plan_triggers", Some(Duration::from_secs(5)), |state| {
        let state = state.clone();
        Box::pin(async move {
            pass(&state).await.map_err(|e| Box::new(e) as PassError)?;
            Ok(None)
        })
    })
    .woken_by(|s| {
        matches!(
            s,
            bosun_store::Signal::Dispatch | bosun_store::Signal::Resync
        )
    })
}

async fn pass(state: &AppState) -> Result<(), ApiError> {
    for t in state.store.pending_plan_triggers(BATCH).await? {
        start(state, &t).await?;
    }
    Ok(())
}

/// Starts the run of one trigger (or records why it failed, or drops it).
async fn start(state: &AppState, t: &PlanTriggerRecord) -> Result<(), ApiError> {
    let Some(plan) = state.store.get_plan(&t.org, &t.plan).await? else {
        return Ok(state.store.drop_plan_trigger(t.id).await?);
    };
    let requested_by = format!("stack:{}", t.stack);
    let upstream = json!({"stack": t.stack, "run": t.run, "outputs": t.outputs});
    let base = NewPlanRun {
        id: String::new(),
        org: t.org.clone(),
        plan: t.plan.clone(),
        plan_version: plan.version,
        source: plan.source.clone(),
        inputs: BTreeMap::new(),
        dry_run: false,
        requested_by: requested_by.clone(),
        trigger: PlanTrigger::Stack,
        hosts: Vec::new(),
        gated_environments: Vec::new(),
        concurrent: false,
        preview: None,
        policy_check: false,
        sources: None,
        upstream: Some(upstream.clone()),
        settles_trigger: Some(t.id),
        failed: None,
    };
    // Resolved with no inputs: the mapped ones are declared inputs, read from the stack
    // once the plan is parsed.
    let resolved = resolve(
        state,
        &t.org,
        &t.plan,
        &plan.source,
        &BTreeMap::new(),
        &requested_by,
    )
    .await;
    let run = match resolved {
        Ok(resolved) => {
            let Some(on) = resolved
                .plan
                .on_stack_change
                .as_ref()
                .filter(|o| o.stack == t.stack)
            else {
                return Ok(state.store.drop_plan_trigger(t.id).await?);
            };
            match inputs_from_outputs(state, t, &on.inputs).await? {
                Err(why) => failed(base, why),
                Ok(inputs) => {
                    let (id, preview) = new_run_ids(false, &resolved.gated, resolved.policy_check);
                    NewPlanRun {
                        id,
                        preview,
                        inputs,
                        hosts: resolved.hosts,
                        gated_environments: resolved.gated,
                        concurrent: resolved.plan.concurrent_runs,
                        policy_check: resolved.policy_check,
                        sources: resolved.sources,
                        ..base
                    }
                }
            }
        }
        // What keeps the run from resolving is its reason: a run that fails before any
        // step, visible with the plan's runs.
        Err(ApiError::Validation(e)) => failed(base, e.to_string()),
        Err(ApiError::Conflict { message, .. }) => failed(base, message),
        Err(e) => return Err(e),
    };
    let audit = Audit {
        org: Some(t.org.clone()),
        actor: requested_by,
        token_id: None,
        action: "plan_run.create".into(),
        target: format!("plan:{}", t.plan),
        detail: json!({"upstream": upstream, "failed": run.failed}),
    };
    match state.store.create_plan_run(&run, &audit).await {
        Ok(created) => {
            tracing::info!(org = %t.org, plan = %t.plan, stack = %t.stack, upstream = %t.run,
                run = %created.id, state = %created.state, "plan run started by a stack's change");
            if created.needs_lease || created.preview.is_some() {
                state.wake_dispatch();
            }
            Ok(())
        }
        // Another run holds its hosts: the next pass tries again.
        Err(StoreError::RunInProgress { .. }) => Ok(()),
        // Settled meanwhile (another replica's pass).
        Err(StoreError::AlreadyExists(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The run's inputs its `on_stack_change.inputs` maps from the stack's current outputs
/// (`input → output`), or why one cannot be read: a missing output, or a sensitive one
/// (a run's inputs are shown with it).
async fn inputs_from_outputs(
    state: &AppState,
    t: &PlanTriggerRecord,
    mapped: &BTreeMap<String, String>,
) -> Result<Result<BTreeMap<String, serde_json::Value>, String>, ApiError> {
    if mapped.is_empty() {
        return Ok(Ok(BTreeMap::new()));
    }
    let Some(meta) = state.store.state_head(&t.org, &t.stack).await?.current else {
        return Ok(Err(format!("stack {:?} has no state", t.stack)));
    };
    let mut inputs = BTreeMap::new();
    for (input, output) in mapped {
        match meta.outputs.get(output) {
            None => {
                return Ok(Err(format!(
                    "input {input:?} maps output {output:?}, which stack {:?} does not have",
                    t.stack
                )))
            }
            Some(o) if o.sensitive => {
                return Ok(Err(format!(
                    "input {input:?} maps output {output:?} of stack {:?}, which is sensitive: a \
                     run's inputs are shown with it",
                    t.stack
                )))
            }
            Some(o) => {
                inputs.insert(input.clone(), o.value.clone());
            }
        }
    }
    Ok(Ok(inputs))
}

fn failed(base: NewPlanRun, reason: String) -> NewPlanRun {
    let (id, _) = new_run_ids(false, &[], false);
    NewPlanRun {
        id,
        failed: Some(format!(
            "started by run {} of stack {}, but not run: {reason}",
            base.upstream
                .as_ref()
                .and_then(|u| u["run"].as_str())
                .unwrap_or("?"),
            base.upstream
                .as_ref()
                .and_then(|u| u["stack"].as_str())
                .unwrap_or("?"),
        )),
        ..base
    }
}
