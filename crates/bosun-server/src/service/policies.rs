//! Policies as code: an org's policies (saved, listed, shown, deleted), their evaluation
//! at a stack run's `plan` decision point — the input document, the files of each
//! attached policy (uploaded, or read from git at the branch head), the engine
//! (`bosun-policy`) on a blocking thread, each result under its policy's mode — and an
//! org admin's override of a soft-mandatory deny. The work behind the API's handlers and
//! the runner's plan report.

use std::collections::BTreeMap;

use bosun_api::{PolicyEvaluationView, PolicyPut, PolicyView};
use bosun_core::policy::{
    self, Attachment, Counted, Mode, OnError, Outcome, Point, Said, Subject, Verdict,
};
use bosun_core::stack::{check_branch, RepoPath, Repository};
use bosun_core::ValidationError;
use bosun_policy::{Input, Limits, Policy, PolicyError, PolicySet};
use bosun_store::{
    NewPolicyEvaluation, PolicyEvaluationRecord, PolicyRecord, PolicySource, PolicySpec, RunRecord,
};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;

/// The most messages of one rule kept from one evaluation; the rest are counted.
const MAX_MESSAGES: usize = 50;
/// The longest message kept (longer ones are cut, saying so).
const MAX_MESSAGE_CHARS: usize = 1000;

fn limits() -> Limits {
    Limits::default()
}

fn digest(files: &BTreeMap<String, String>) -> String {
    let mut h = Sha256::new();
    for (name, text) in files {
        h.update((name.len() as u64).to_be_bytes());
        h.update(name.as_bytes());
        h.update((text.len() as u64).to_be_bytes());
        h.update(text.as_bytes());
    }
    format!("sha256:{}", &hex::encode(h.finalize())[..16])
}

/// Checks an uploaded policy's files: `.rego` names without folders, within the bounds,
/// parsed by the engine (a parse error names the file and line).
fn check_files(files: &BTreeMap<String, String>) -> Result<(), ApiError> {
    let limits = limits();
    if files.is_empty() {
        return Err(ValidationError::new("files", "give at least one .rego file").into());
    }
    if files.len() > limits.max_files {
        return Err(ValidationError::new(
            "files",
            format!("at most {} files (got {})", limits.max_files, files.len()),
        )
        .into());
    }
    for (name, text) in files {
        let field = format!("files[{name:?}]");
        let plain = !name.is_empty()
            && name.len() <= 255
            && name.ends_with(".rego")
            && !name.contains('/')
            && !name.starts_with('.')
            && !name.chars().any(char::is_control);
        if !plain {
            return Err(ValidationError::new(
                field,
                "a file name ends in .rego and has no folder (at most 255 bytes)",
            )
            .into());
        }
        if text.len() > limits.max_file_bytes {
            return Err(ValidationError::new(
                field,
                format!(
                    "at most {} bytes (got {})",
                    limits.max_file_bytes,
                    text.len()
                ),
            )
            .into());
        }
    }
    let set = PolicySet::from_policies(as_policies(files), limits)
        .map_err(|e| ValidationError::new("files", e.to_string()))?;
    set.packages()
        .map_err(|e| ValidationError::new("files", e.to_string()))?;
    Ok(())
}

fn as_policies(files: &BTreeMap<String, String>) -> Vec<Policy> {
    files
        .iter()
        .map(|(path, text)| Policy {
            path: path.clone(),
            text: text.clone(),
        })
        .collect()
}

fn spec_of(
    name: &str,
    body: PolicyPut,
    allow_file: bool,
) -> Result<(PolicySpec, String), ApiError> {
    let mode = body
        .mode
        .as_deref()
        .unwrap_or("soft_mandatory")
        .parse::<Mode>()?;
    let on_error = body
        .on_error
        .as_deref()
        .unwrap_or("deny")
        .parse::<OnError>()?;
    let points = match body.points {
        None => vec![Point::Plan],
        Some(p) => p
            .iter()
            .map(|p| p.parse::<Point>())
            .collect::<Result<Vec<_>, _>>()?,
    };
    policy::validate(name, &points)?;
    let attachment = Attachment {
        labels: body.labels,
        environments: body.environments,
    };
    attachment.validate()?;
    let (source, version) = match (body.files, body.repository) {
        (Some(_), Some(_)) => {
            return Err(
                ValidationError::new("files", "give either files or repository, not both").into(),
            )
        }
        (None, None) => {
            return Err(ValidationError::new(
                "files",
                "give the policy's files, or a repository (with branch and path) to read them from",
            )
            .into())
        }
        (Some(files), None) => {
            if body.branch.is_some() || body.path.is_some() {
                return Err(ValidationError::new(
                    "branch",
                    "branch and path go with repository, not with files",
                )
                .into());
            }
            check_files(&files)?;
            let version = digest(&files);
            (PolicySource::Files(files), version)
        }
        (None, Some(repository)) => {
            let repository = match repository.parse::<Repository>()? {
                Repository::Git(url) if url.starts_with("file://") && !allow_file => {
                    return Err(ValidationError::new(
                        "repository",
                        "file:// policy repositories are off on this server (it would read \
                         any repository on its own disk): give an https://, ssh:// or git:// URL",
                    )
                    .into())
                }
                Repository::Git(url) => url,
                Repository::GitHub { .. } => {
                    return Err(ValidationError::new(
                        "repository",
                        "give the repository's git URL (https://…, file://…): a policy \
                         repository is read without the GitHub App",
                    )
                    .into())
                }
            };
            let branch = check_branch(body.branch.as_deref().unwrap_or("main"))?;
            let path = RepoPath::parse(body.path.as_deref().unwrap_or_default())
                .map_err(|e| ValidationError::new("path", e.to_string()))?
                .as_str()
                .to_string();
            let version = branch.clone();
            (
                PolicySource::Git {
                    repository,
                    branch,
                    path,
                },
                version,
            )
        }
    };
    Ok((
        PolicySpec {
            name: name.to_string(),
            mode,
            on_error,
            points,
            attachment,
            source,
        },
        version,
    ))
}

/// Creates or replaces policy `name` of `org`; true when it was created.
pub async fn put(
    state: &AppState,
    caller: &Caller,
    org: &str,
    name: &str,
    body: PolicyPut,
) -> Result<(PolicyView, bool), ApiError> {
    let (spec, version) = spec_of(name, body, state.config.allow_file_policy_repositories)?;
    let existing = state.store.list_policies(org).await?;
    if existing.len() >= policy::MAX_POLICIES_PER_ORG
        && !existing.iter().any(|p| p.spec.name == name)
    {
        return Err(ValidationError::new(
            "name",
            format!(
                "org {org:?} has {} policies, the most it may have",
                existing.len()
            ),
        )
        .into());
    }
    let audit = caller.audit(
        Some(org),
        "policy.put",
        format!("policy:{name}"),
        json!({"mode": spec.mode.as_str(), "version": version,
            "points": spec.points.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
            "attached_to": spec.attachment.describe()}),
    );
    let (record, created) = state.store.put_policy(org, &spec, &version, &audit).await?;
    Ok((view(record, true), created))
}

pub async fn list(state: &AppState, org: &str) -> Result<Vec<PolicyView>, ApiError> {
    Ok(state
        .store
        .list_policies(org)
        .await?
        .into_iter()
        .map(|r| view(r, false))
        .collect())
}

pub async fn get(state: &AppState, org: &str, name: &str) -> Result<PolicyView, ApiError> {
    state
        .store
        .get_policy(org, name)
        .await?
        .map(|r| view(r, true))
        .ok_or_else(|| ApiError::NotFound(format!("policy {name:?} in org {org:?}")))
}

pub async fn delete(
    state: &AppState,
    caller: &Caller,
    org: &str,
    name: &str,
) -> Result<(), ApiError> {
    let audit = caller.audit(
        Some(org),
        "policy.delete",
        format!("policy:{name}"),
        json!({}),
    );
    if !state.store.delete_policy(org, name, &audit).await? {
        return Err(ApiError::NotFound(format!(
            "policy {name:?} in org {org:?}"
        )));
    }
    Ok(())
}

fn view(r: PolicyRecord, texts: bool) -> PolicyView {
    let s = r.spec;
    let (source, files, text_map, repository, branch, path) = match s.source {
        PolicySource::Files(files) => (
            "upload",
            files.keys().cloned().collect(),
            if texts { files } else { BTreeMap::new() },
            None,
            None,
            None,
        ),
        PolicySource::Git {
            repository,
            branch,
            path,
        } => (
            "git",
            Vec::new(),
            BTreeMap::new(),
            Some(repository),
            Some(branch),
            Some(path),
        ),
    };
    PolicyView {
        attached_to: s.attachment.describe(),
        name: s.name,
        mode: s.mode.to_string(),
        on_error: s.on_error.to_string(),
        points: s.points.iter().map(|p| p.to_string()).collect(),
        labels: s.attachment.labels,
        environments: s.attachment.environments,
        source: source.to_string(),
        files,
        texts: text_map,
        repository,
        branch,
        path,
        version: r.version,
        updated_at: r.updated_at,
        updated_by: r.updated_by,
    }
}

/// A recorded evaluation on the wire.
pub fn evaluation_view(r: PolicyEvaluationRecord) -> PolicyEvaluationView {
    let e = r.evaluation;
    let (overridden_by, override_reason, overridden_at) = match r.overridden {
        Some(o) => (Some(o.by), Some(o.reason), Some(o.at)),
        None => (None, None, None),
    };
    PolicyEvaluationView {
        point: e.point.to_string(),
        policy: e.policy,
        version: e.version,
        mode: e.mode.to_string(),
        outcome: e.outcome.to_string(),
        deny: e.deny,
        warn: e.warn,
        require_approval: e.require_approval,
        errors: e.errors,
        duration_ms: e.duration_ms,
        evaluated_at: r.evaluated_at,
        overridden_by,
        override_reason,
        overridden_at,
    }
}

/// The policies of `org` evaluated at `point` for a subject with these labels and
/// environments.
async fn attached(
    state: &AppState,
    org: &str,
    point: Point,
    subject: Subject<'_>,
) -> Result<Vec<PolicyRecord>, ApiError> {
    Ok(state
        .store
        .list_policies(org)
        .await?
        .into_iter()
        .filter(|p| p.spec.points.contains(&point) && p.spec.attachment.applies_to(subject))
        .collect())
}

/// A policy's files and the version read: uploaded ones as saved, a git source's at its
/// branch head (the version is the commit).
async fn files_of(state: &AppState, p: &PolicyRecord) -> Result<(String, Vec<Policy>), String> {
    match &p.spec.source {
        PolicySource::Files(files) => Ok((p.version.clone(), as_policies(files))),
        PolicySource::Git {
            repository,
            branch,
            path,
        } => {
            let limits = limits();
            let snapshot = state
                .vcs
                .mirrors
                .files_at(
                    repository,
                    None,
                    branch,
                    path,
                    &crate::vcs::mirror::FileLimits {
                        max_files: limits.max_files,
                        max_file_bytes: limits.max_file_bytes as u64,
                    },
                )
                .await
                .map_err(|e| format!("cannot read the policy's files: {e}"))?;
            let files = snapshot
                .files
                .into_iter()
                .map(|(path, text)| Policy { path, text })
                .collect();
            Ok((snapshot.commit, files))
        }
    }
}

/// Keeps at most [`MAX_MESSAGES`] messages of [`MAX_MESSAGE_CHARS`] each, saying how
/// many more there were.
fn bounded(mut all: Vec<String>) -> Vec<String> {
    let more = all.len().saturating_sub(MAX_MESSAGES);
    all.truncate(MAX_MESSAGES);
    for m in &mut all {
        if m.chars().count() > MAX_MESSAGE_CHARS {
            *m = format!(
                "{}… (cut)",
                m.chars().take(MAX_MESSAGE_CHARS).collect::<String>()
            );
        }
    }
    if more > 0 {
        all.push(format!("… and {more} more"));
    }
    all
}

/// Evaluates `policies` on `input` (each its own set, on a blocking thread, all on one
/// [`Input`] converted once) and records each under its mode; the verdict is what they
/// add up to.
async fn evaluate(
    state: &AppState,
    point: Point,
    policies: Vec<PolicyRecord>,
    input: Result<Value, String>,
) -> (Vec<NewPolicyEvaluation>, Verdict) {
    let mut loaded = Vec::with_capacity(policies.len());
    for p in policies {
        let files = files_of(state, &p).await;
        loaded.push((p, files));
    }
    let evaluations = tokio::task::spawn_blocking(move || {
        // Checked against the size bound and converted once, for every policy.
        let input = input.map(|document| Input::new(&document, &limits()));
        loaded
            .into_iter()
            .map(|(p, files)| evaluate_one(point, &p, files, &input))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    let counted: Vec<Counted> = evaluations
        .iter()
        .map(|e| Counted {
            mode: e.mode,
            outcome: e.outcome,
            overridden: false,
        })
        .collect();
    let verdict = policy::verdict(&counted);
    (evaluations, verdict)
}

fn evaluate_one(
    point: Point,
    p: &PolicyRecord,
    files: Result<(String, Vec<Policy>), String>,
    input: &Result<Result<Input, PolicyError>, String>,
) -> NewPolicyEvaluation {
    let started = std::time::Instant::now();
    let (version, decision) = match (files, input) {
        (Err(why), _) => (String::new(), Err(why)),
        (Ok((version, _)), Err(why)) => (version, Err(why.clone())),
        // A policy that does not load says so; one that does, that the input is refused.
        (Ok((version, files)), Ok(input)) => (
            version,
            PolicySet::from_policies(files, limits())
                .and_then(|set| match input {
                    Ok(input) => set.decide_input(input),
                    Err(e) => Err(e.clone()),
                })
                .map_err(|e| e.to_string()),
        ),
    };
    let d = match decision {
        Ok(d) => d,
        Err(why) => bosun_policy::Decision {
            errors: vec![why],
            ..Default::default()
        },
    };
    let said = Said {
        deny: &d.deny,
        warn: &d.warn,
        require_approval: &d.require_approval,
        errors: &d.errors,
    };
    let outcome = policy::outcome(p.spec.mode, p.spec.on_error, said);
    NewPolicyEvaluation {
        point,
        policy: p.spec.name.clone(),
        version,
        mode: p.spec.mode,
        outcome,
        deny: bounded(d.deny),
        warn: bounded(d.warn),
        require_approval: bounded(d.require_approval),
        errors: bounded(d.errors),
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    }
}

/// The `plan` decision point of a stack run whose plan was just reported: the policies
/// attached to its stack, evaluated on the plan JSON its runner uploaded, the stack, the
/// run and the current state's outputs. Drift runs are not evaluated (they never apply).
pub async fn evaluate_plan(
    state: &AppState,
    run: &RunRecord,
) -> Result<(Vec<NewPolicyEvaluation>, Verdict), ApiError> {
    if run.kind == bosun_core::run::RunKind::Drift {
        return Ok((Vec::new(), Verdict::Pass));
    }
    let Some(stack) = state.store.get_stack(&run.org, &run.stack).await? else {
        return Ok((Vec::new(), Verdict::Pass));
    };
    let environments: Vec<String> = stack
        .spec
        .environment
        .iter()
        .map(|e| e.to_string())
        .collect();
    // Stack labels: not yet (STACK-LABELS).
    let labels: Vec<String> = Vec::new();
    let subject = Subject {
        labels: &labels,
        environments: &environments,
    };
    let policies = attached(state, &run.org, Point::Plan, subject).await?;
    if policies.is_empty() {
        return Ok((Vec::new(), Verdict::Pass));
    }
    let input = plan_input(state, run, &stack, &labels).await?;
    Ok(evaluate(state, Point::Plan, policies, input).await)
}

/// The `plan` point's input document (docs/policies.md): `plan` (Terraform's own
/// `show -json` of the plan), `stack`, `run`, `outputs` (the current state's outputs,
/// sensitive values `null`). `Err`: why there is none (each policy records it).
async fn plan_input(
    state: &AppState,
    run: &RunRecord,
    stack: &bosun_store::StackRecord,
    labels: &[String],
) -> Result<Result<Value, String>, ApiError> {
    let Some(raw) = state.store.get_run_plan_json(&run.id).await? else {
        return Ok(Err(
            "the runner did not upload the plan's JSON (a runner older than this server?): \
             the policies cannot read the plan"
                .into(),
        ));
    };
    let plan: Value = match serde_json::from_slice(&raw) {
        Ok(v) => v,
        Err(e) => return Ok(Err(format!("the plan's JSON does not parse: {e}"))),
    };
    let outputs: serde_json::Map<String, Value> = match state
        .store
        .state_version(&run.org, &run.stack, None)
        .await?
    {
        Some((meta, _)) => meta
            .outputs
            .into_iter()
            .map(|(name, o)| {
                let value = if o.sensitive { Value::Null } else { o.value };
                (name, json!({"value": value, "sensitive": o.sensitive}))
            })
            .collect(),
        None => serde_json::Map::new(),
    };
    let s = &stack.spec;
    Ok(Ok(json!({
        "point": "plan",
        "plan": plan,
        "stack": {
            "id": s.id.to_string(),
            "name": s.name,
            "labels": labels,
            "environment": s.environment.as_ref().map(|e| e.to_string()),
            "repository": s.repository.to_string(),
            "branch": s.branch,
            "path": s.path.as_str(),
            "autodeploy": s.autodeploy,
        },
        "run": {
            "id": run.id,
            "kind": run.kind.as_str(),
            "trigger": run.trigger.as_str(),
            "commit": run.commit,
            "branch": run.branch,
            "pull_request": run.pull_request,
            "author": run.triggered_by,
        },
        "outputs": outputs,
    })))
}

/// Why a run's plan is held or failed by its policies, for the run's reason.
pub fn reason(run: &str, verdict: Verdict, evaluations: &[NewPolicyEvaluation]) -> Option<String> {
    let says = |pick: &dyn Fn(&NewPolicyEvaluation) -> bool| -> String {
        evaluations
            .iter()
            .filter(|e| pick(e))
            .map(|e| {
                let mut msgs: Vec<&str> = e.deny.iter().map(String::as_str).collect();
                if e.outcome == Outcome::RequireApproval {
                    msgs = e.require_approval.iter().map(String::as_str).collect();
                }
                msgs.extend(e.errors.iter().map(String::as_str));
                format!("policy {} ({}): {}", e.policy, e.mode, msgs.join("; "))
            })
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let denied = |m: Mode| move |e: &NewPolicyEvaluation| e.mode == m && e.outcome == Outcome::Deny;
    match verdict {
        Verdict::Pass => None,
        Verdict::Deny => Some(format!("denied by {}", says(&denied(Mode::HardMandatory)))),
        Verdict::Override => Some(format!(
            "denied by {} — an org admin may override it with a reason: \
             bosun run override {run} --reason TEXT",
            says(&denied(Mode::SoftMandatory))
        )),
        Verdict::Approval => Some(format!(
            "waits for approval asked by {} — approve it in the approvals inbox: \
             bosun approvals approve {run}",
            says(&|e| e.outcome == Outcome::RequireApproval)
        )),
    }
}

/// An org admin overrides the soft-mandatory denies that hold run `id` of `org`, with a
/// reason (audited, kept on each overridden evaluation).
pub async fn override_run(
    state: &AppState,
    caller: &Caller,
    org: &str,
    id: &str,
    reason: &str,
) -> Result<bosun_api::Run, ApiError> {
    let reason = policy::override_reason(reason)?;
    let run = crate::service::runs::load(state, org, id).await?;
    if run.policy_hold != Verdict::Override {
        return Err(ApiError::Conflict {
            code: bosun_api::ErrorCode::InvalidTransition,
            message: format!(
                "run {id} is {}{}: no soft-mandatory policy deny holds it, nothing to override",
                run.state,
                match run.policy_hold {
                    Verdict::Approval => " and waits for an approval a policy asked for",
                    _ => "",
                }
            ),
        });
    }
    let by = caller.0.actor();
    let audit = caller.audit(
        Some(org),
        "run.policy_override",
        format!("run:{id}"),
        json!({"stack": run.stack, "comment": reason}),
    );
    let out = state
        .store
        .override_run_policies(org, id, &by, &reason, &audit)
        .await?;
    if out.run.needs_lease {
        state.wake_dispatch();
    }
    crate::service::runs::show(state, org, id).await
}
