//! Preparing a leased phase: the run's integrations — identity, cloud credentials, secret
//! backends, variables — resolved in the order `bosun_core::integrations` gives, into
//! what the runner is handed. The first one that fails fails the run while it is still
//! `preparing`, with a reason naming it; the engine is never started.

use std::collections::BTreeMap;
use std::time::Duration;

use bosun_api::{ConsumedOutput, RunnerIntegration};
use bosun_core::integrations::{self, Kind};
use bosun_core::stack::StackSpec;
use bosun_store::RunRecord;

use crate::app::AppState;
use crate::error::ApiError;

/// What a prepared phase hands the runner.
#[derive(Debug, Default)]
pub struct Prepared {
    pub env: BTreeMap<String, String>,
    pub id_token_request_url: String,
    pub id_token_request_token: String,
    pub integrations: Vec<RunnerIntegration>,
    /// Resolved secret values, masked by the runner and by the server (`secrets::mask`).
    pub mask: Vec<String>,
    /// One line per integration, for the run's log.
    pub log: Vec<String>,
}

/// A phase that cannot start: the reason (naming the integration) and the log so far.
#[derive(Debug)]
pub struct Unprepared {
    pub reason: String,
    pub log: Vec<String>,
}

/// An AWS role session name: at most 64 of `[\w+=,.@-]`.
fn session_name(run: &str) -> String {
    let name: String = format!("bosun-{run}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "+=,.@-_".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    name.chars().take(64).collect()
}

/// Resolves the phase's integrations in order; `request_ttl` bounds the request token.
pub async fn prepare(
    state: &AppState,
    run: &RunRecord,
    spec: &StackSpec,
    request_ttl: Duration,
) -> Result<Result<Prepared, Unprepared>, ApiError> {
    let mut out = Prepared::default();
    let order = match integrations::for_phase(spec, run.phase) {
        Ok(o) => o,
        Err(e) => {
            return Ok(Err(Unprepared {
                reason: e.to_string(),
                log: out.log,
            }))
        }
    };
    let mut resolved: BTreeMap<String, String> = BTreeMap::new();
    for integration in order {
        let name = integration.name.clone();
        let step: Result<&str, String> = match integration.kind {
            Kind::Identity => {
                out.id_token_request_url = crate::identity::request_url(state);
                out.id_token_request_token =
                    crate::identity::mint_request_token(state, run, request_ttl).await?;
                Ok("ok")
            }
            Kind::CloudCredentials => match &spec.aws {
                Some(aws) => {
                    out.integrations.push(RunnerIntegration::AwsWebIdentity {
                        name: name.clone(),
                        role_arn: aws.role_for(run.phase).to_string(),
                        audience: aws.audience.clone(),
                        session_name: session_name(&run.id),
                    });
                    Ok("the runner writes the web identity token file")
                }
                None => Err("no AWS roles are configured".into()),
            },
            Kind::SecretBackend => {
                let mut failure = None;
                for (var, value) in &spec.variables {
                    if crate::secrets::parse_ref(value).is_none() {
                        continue;
                    }
                    match crate::secrets::resolve(state, &run.org, value).await {
                        Ok(v) => {
                            out.mask.push(v.clone());
                            resolved.insert(var.clone(), v);
                        }
                        Err(why) => {
                            failure = Some(format!("variable {var}: {why}"));
                            break;
                        }
                    }
                }
                match failure {
                    Some(f) => Err(f),
                    None => Ok("ok"),
                }
            }
            Kind::Variables => {
                for (var, value) in &spec.variables {
                    let v = match resolved.get(var) {
                        Some(v) => v.clone(),
                        None if crate::secrets::parse_ref(value).is_some() => {
                            return Ok(Err(Unprepared {
                                reason: format!(
                                    "integration {name} failed: variable {var} references a secret nobody resolved"
                                ),
                                log: out.log,
                            }))
                        }
                        None => value.clone(),
                    };
                    out.env.insert(var.clone(), v);
                }
                match upstream_outputs(state, run, spec, &mut out).await? {
                    Ok(()) => Ok("ok"),
                    Err(why) => Err(why),
                }
            }
        };
        match step {
            Ok(note) => out.log.push(format!("bosun: integration {name}: {note}\n")),
            Err(why) => {
                let reason = format!("integration {name} failed: {why}");
                out.log.push(format!("bosun: {reason}\n"));
                return Ok(Err(Unprepared {
                    reason,
                    log: out.log,
                }));
            }
        }
    }
    Ok(Ok(out))
}

/// The values a phase's lease masks that the store can give again, for a replica that
/// did not build the lease (`secrets::mask`): the stack's secret references resolved
/// again and the sensitive upstream outputs the run consumed. The tokens minted for the
/// lease are not among them — the store keeps only their hashes — so such a replica masks
/// those only if the runner does. A reference that no longer resolves is skipped: there
/// is nothing to mask for it.
pub async fn lease_mask_again(state: &AppState, run: &RunRecord) -> Result<Vec<String>, ApiError> {
    let mut mask = Vec::new();
    if let Some(stack) = state.store.get_stack(&run.org, &run.stack).await? {
        for value in stack.spec.variables.values() {
            if crate::secrets::parse_ref(value).is_some() {
                if let Ok(v) = crate::secrets::resolve(state, &run.org, value).await {
                    mask.push(v);
                }
            }
        }
    }
    let consumed: Vec<ConsumedOutput> = run
        .consumed
        .clone()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    for c in consumed.iter().filter(|c| c.sensitive) {
        let meta = state
            .store
            .state_version(&run.org, &c.stack, Some(c.version))
            .await?
            .map(|(m, _)| m);
        if let Some(o) = meta.as_ref().and_then(|m| m.outputs.get(&c.output)) {
            mask.push(tf_var_text(&o.value));
        }
    }
    Ok(mask)
}

/// A value as Terraform reads it from `TF_VAR_*`: strings as they are, everything else
/// as JSON (which is also HCL for lists, maps and objects).
fn tf_var_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The dependency output mappings of the stack: each mapped upstream output becomes
/// `TF_VAR_<variable>`, read from the upstream's current state version — or, for a later
/// phase, from the versions its first phase consumed, recorded on the run.
async fn upstream_outputs(
    state: &AppState,
    run: &RunRecord,
    spec: &StackSpec,
    out: &mut Prepared,
) -> Result<Result<(), String>, ApiError> {
    let recorded: Vec<ConsumedOutput> = run
        .consumed
        .clone()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    let mut consumed = Vec::new();
    for dep in spec.depends_on.iter().filter(|d| !d.outputs.is_empty()) {
        let upstream = dep.stack.as_str();
        let pinned = recorded
            .iter()
            .find(|c| c.stack == upstream)
            .map(|c| c.version);
        let meta = match pinned {
            Some(v) => state
                .store
                .state_version(&run.org, upstream, Some(v))
                .await?
                .map(|(m, _)| m),
            None => state.store.state_head(&run.org, upstream).await?.current,
        };
        let Some(meta) = meta else {
            return Ok(Err(format!(
                "upstream stack {upstream} has no state yet, so its outputs ({}) cannot be passed",
                dep.outputs.keys().cloned().collect::<Vec<_>>().join(", ")
            )));
        };
        let mut passed = Vec::new();
        for (output, variable) in &dep.outputs {
            let Some(o) = meta.outputs.get(output) else {
                return Ok(Err(format!(
                    "upstream stack {upstream} has no output {output} in state version {}",
                    meta.version
                )));
            };
            let text = tf_var_text(&o.value);
            if o.sensitive {
                out.mask.push(text.clone());
            }
            out.env.insert(format!("TF_VAR_{variable}"), text);
            passed.push(format!("{output} → TF_VAR_{variable}"));
            consumed.push(ConsumedOutput {
                stack: upstream.to_string(),
                version: meta.version,
                output: output.clone(),
                variable: variable.clone(),
                sensitive: o.sensitive,
            });
        }
        out.log.push(format!(
            "bosun: upstream stack {upstream}, state version {}: {}\n",
            meta.version,
            passed.join(", ")
        ));
    }
    if !consumed.is_empty() && run.consumed.is_none() {
        let value = serde_json::to_value(&consumed)
            .map_err(|e| ApiError::Internal(format!("consumed outputs: {e}")))?;
        state.store.set_run_consumed(&run.id, &value).await?;
    }
    Ok(Ok(()))
}
