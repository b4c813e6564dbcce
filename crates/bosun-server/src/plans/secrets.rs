//! Secrets in plans: the `secret://<namespace>/<key>` references of a
//! leased plan run — in its plan source (vars, inputs' defaults, step parameters), its
//! inputs, and the variables of its target hosts and their environments — resolved when
//! the run is leased, among the org's own secrets (`crate::secrets::resolve`).
//!
//! The values travel in the lease only: never stored, never in an API answer. A real run
//! gets them to substitute (`PlanRunLease.secrets`); every value is also in the lease's
//! `mask`, so the runner masks it in each log line and per-host result, and the server
//! masks it again in the log chunks it stores (`crate::secrets::mask`). A dry run gets
//! no values (its report shows `secret://[redacted]`) but its references are checked the
//! same way. A reference that does not resolve — a key the org does not have — fails the
//! run before any step, with the reason.

use std::collections::{BTreeMap, BTreeSet};

use bosun_core::plan_resources::secret_refs;
use bosun_store::{EnvironmentRecord, HostRecord, PlanRunEventInput, PlanRunRecord};

use crate::app::AppState;
use crate::error::ApiError;

/// What a lease carries for a run's secrets.
#[derive(Debug, Default)]
pub struct LeaseSecrets {
    /// Reference as written → value (real runs only).
    pub secrets: BTreeMap<String, String>,
    /// Every resolved value, for the runner's masking (and the server's).
    pub mask: Vec<String>,
}

/// Every distinct reference of the run, in a stable order.
fn references(
    run: &PlanRunRecord,
    targets: &[&HostRecord],
    environments: &[EnvironmentRecord],
) -> BTreeSet<String> {
    let mut texts = vec![
        run.source.clone(),
        serde_json::Value::Object(run.inputs.clone().into_iter().collect()).to_string(),
    ];
    for h in targets {
        texts.push(serde_json::to_string(&h.vars).unwrap_or_default());
        if let Some(e) = environments
            .iter()
            .find(|e| h.environment.as_deref() == Some(e.id.as_str()))
        {
            texts.push(serde_json::to_string(&e.vars).unwrap_or_default());
        }
    }
    texts
        .iter()
        .flat_map(|t| {
            secret_refs(t)
                .into_iter()
                .map(|r| format!("secret://{}/{}", r.namespace, r.key))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Resolves the run's references. `Ok(Err(reason))`: one does not resolve and the run
/// must fail with the reason.
pub async fn for_lease(
    state: &AppState,
    run: &PlanRunRecord,
    targets: &[&HostRecord],
    environments: &[EnvironmentRecord],
) -> Result<Result<LeaseSecrets, String>, ApiError> {
    let mut out = LeaseSecrets::default();
    for reference in references(run, targets, environments) {
        match crate::secrets::resolve(state, &run.org, &reference).await {
            Ok(value) => {
                if !value.is_empty() && !out.mask.contains(&value) {
                    out.mask.push(value.clone());
                }
                if !run.dry_run {
                    out.secrets.insert(reference, value);
                }
            }
            Err(why) => return Ok(Err(format!("a secret of the run cannot be used: {why}"))),
        }
    }
    Ok(Ok(out))
}

/// The values a plan run's lease masks, resolved again from the store for a replica that
/// did not build the lease (`secrets::mask`): its references among its target hosts and
/// their environments as they are now. One that no longer resolves is skipped: there is
/// nothing to mask for it.
pub async fn lease_mask_again(
    state: &AppState,
    run: &PlanRunRecord,
) -> Result<Vec<String>, ApiError> {
    let hosts = state.store.list_hosts(&run.org).await?;
    let environments = state.store.list_environments(&run.org).await?;
    let targets = crate::service::plan_runs::targets(run, &hosts);
    let mut mask = Vec::new();
    for reference in references(run, &targets, &environments) {
        if let Ok(value) = crate::secrets::resolve(state, &run.org, &reference).await {
            mask.push(value);
        }
    }
    Ok(mask)
}

/// Fails a leased plan run before any step ran: the reason in its log and record.
pub async fn fail_before_start(
    state: &AppState,
    run: &PlanRunRecord,
    reason: String,
) -> Result<(), ApiError> {
    let seq = state.store.next_plan_run_log_seq(&run.id).await?;
    state
        .store
        .append_plan_run_logs(&run.id, run.fencing, &[(seq, format!("bosun: {reason}"))])
        .await?;
    use bosun_core::plan_run::PlanRunEvent;
    for (event, reason) in [
        (PlanRunEvent::Started, None),
        (PlanRunEvent::Finished { ok: false }, Some(reason)),
    ] {
        let input = PlanRunEventInput {
            event,
            fencing: Some(run.fencing),
            reason,
            report: None,
            audit: None,
        };
        state.store.plan_run_event(&run.id, &input).await?;
    }
    Ok(())
}
