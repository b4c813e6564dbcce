//! Preparing a leased phase: the run's integrations — identity, cloud credentials, secret
//! backends, variables — resolved in the order `bosun_core::integrations` gives, into
//! what the runner is handed. The first one that fails fails the run while it is still
//! `preparing`, with a reason naming it; the engine is never started.

use std::collections::BTreeMap;
use std::time::Duration;

use bosun_api::RunnerIntegration;
use bosun_core::integrations::{self, Kind};
use bosun_core::stack::StackSpec;
use bosun_store::RunRecord;

use crate::error::ApiError;
use crate::server::AppState;

/// What a prepared phase hands the runner.
#[derive(Debug, Default)]
pub struct Prepared {
    pub env: BTreeMap<String, String>,
    pub id_token_request_url: String,
    pub id_token_request_token: String,
    pub integrations: Vec<RunnerIntegration>,
    /// Resolved secret values, masked by the runner.
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
                Ok("ok")
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
