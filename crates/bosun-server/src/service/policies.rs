//! Policies as code: an org's policies (saved, listed, shown, deleted) and their
//! evaluation at the decision points — a stack run's plan (`plan`), a host plan's dry
//! run (`plan_run`) and an approval (`approval`) — with each result recorded under its
//! policy's mode, and an org admin's override of a soft-mandatory deny. (The `trigger`
//! point, which decides deliveries, is `vcs::trigger_policies`, on these helpers.) The input documents, each attached policy's
//! files (uploaded, or read from git at the branch head) and the engine (`bosun-policy`,
//! on a blocking thread) are here; what a verdict does to a run is `bosun_core::policy`'s
//! and the store's.

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

pub(crate) fn limits() -> Limits {
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
                // Read through the GitHub App's installation on it, as stacks are.
                github @ Repository::GitHub { .. } => github.to_string(),
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

/// The org's policies by name, as one page: an org has at most
/// [`policy::MAX_POLICIES_PER_ORG`], answered whole.
pub async fn list(
    state: &AppState,
    org: &str,
    q: &crate::paging::PageQuery,
) -> Result<bosun_api::Page<PolicyView>, ApiError> {
    q.whole()?;
    let items = state
        .store
        .list_policies(org)
        .await?
        .into_iter()
        .map(|r| view(r, false))
        .collect();
    Ok(bosun_api::Page {
        items,
        next_cursor: None,
    })
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
        skip: e.skip,
        trigger: e.trigger,
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
pub async fn attached(
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
pub(crate) async fn files_of(
    state: &AppState,
    p: &PolicyRecord,
) -> Result<(String, Vec<Policy>), String> {
    match &p.spec.source {
        PolicySource::Files(files) => Ok((p.version.clone(), as_policies(files))),
        PolicySource::Git {
            repository,
            branch,
            path,
        } => {
            let limits = limits();
            // A `github:` repository is read with a token of the App's installation on it,
            // revoked once read.
            let github = repository
                .parse::<Repository>()
                .ok()
                .and_then(|r| r.github_full_name());
            let (url, token) = match github {
                Some(full_name) => {
                    let token = crate::vcs::read_token(state, &full_name)
                        .await
                        .map_err(|e| format!("cannot read the policy's files: {e}"))?;
                    (state.vcs.github.clone_url(&full_name), Some(token))
                }
                None => (repository.clone(), None),
            };
            let snapshot = state
                .vcs
                .mirrors
                .files_at(
                    &url,
                    token.as_ref().map(|t| t.token.as_str()),
                    branch,
                    path,
                    &crate::vcs::mirror::FileLimits {
                        max_files: limits.max_files,
                        max_file_bytes: limits.max_file_bytes as u64,
                    },
                )
                .await
                .map_err(|e| format!("cannot read the policy's files: {e}"));
            if let Some(t) = token {
                crate::vcs::revoke_quietly(state, &t.token).await;
            }
            let snapshot = snapshot?;
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
    let mut heads = Vec::with_capacity(policies.len());
    for p in policies {
        let files = files_of(state, &p).await;
        heads.push(head(&p));
        loaded.push((p, files));
    }
    let evaluations = tokio::task::spawn_blocking(move || {
        // Checked against the size bound and converted once, for every policy.
        let input = match guard(|| input.map(|document| Input::new(&document, &limits()))) {
            Ok(input) => input,
            Err(why) => Err(why),
        };
        loaded
            .into_iter()
            .map(|(p, files)| evaluate_one(point, &p, files, &input))
            .collect::<Vec<_>>()
    })
    .await
    // Never fails open: an evaluation that did not come back is an error for each policy.
    .unwrap_or_else(|e| {
        let why = format!("the policy evaluation did not finish: {e}");
        heads
            .iter()
            .map(|p| {
                judge(
                    point,
                    p,
                    String::new(),
                    &Err(why.clone()),
                    Err(why.clone()),
                    std::time::Instant::now(),
                )
            })
            .collect()
    });
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
    let input = match input {
        Err(why) => Err(why.clone()),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(input)) => Ok(input),
    };
    let (version, set) = load(files);
    judge(point, p, version, &set, input, started)
}

/// A policy without its files: what an evaluation's record needs of it.
fn head(p: &PolicyRecord) -> PolicyRecord {
    PolicyRecord {
        org: p.org.clone(),
        spec: PolicySpec {
            name: p.spec.name.clone(),
            mode: p.spec.mode,
            on_error: p.spec.on_error,
            points: p.spec.points.clone(),
            attachment: p.spec.attachment.clone(),
            source: PolicySource::Files(BTreeMap::new()),
        },
        version: p.version.clone(),
        created_at: p.created_at,
        updated_at: p.updated_at,
        updated_by: p.updated_by.clone(),
    }
}

/// Runs the engine, turning a panic in it into an error (the evaluation then fails as
/// any other, never silently).
pub(crate) fn guard<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .map_err(|_| "the policy engine failed (it panicked) on this policy".to_string())
}

/// A policy's files as a set: the version read, and the set or why it cannot be used.
pub(crate) fn load(
    files: Result<(String, Vec<Policy>), String>,
) -> (String, Result<PolicySet, String>) {
    match files {
        Err(why) => (String::new(), Err(why)),
        Ok((version, files)) => (
            version,
            guard(|| PolicySet::from_policies(files, limits()))
                .and_then(|set| set.map_err(|e| e.to_string())),
        ),
    }
}

/// One policy's evaluation at `point` on an input (or why there is none), under its mode
/// and error rule; the duration counts from `started`.
pub(crate) fn judge(
    point: Point,
    p: &PolicyRecord,
    version: String,
    set: &Result<PolicySet, String>,
    input: Result<&Input, String>,
    started: std::time::Instant,
) -> NewPolicyEvaluation {
    // A policy that does not load says so; one that does, that the input is refused.
    let decision = match (set, input) {
        (Err(why), _) => Err(why.clone()),
        (Ok(_), Err(why)) => Err(why),
        (Ok(set), Ok(input)) => {
            guard(|| set.decide_input(input)).and_then(|d| d.map_err(|e| e.to_string()))
        }
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
        skip: &d.skip,
        trigger: &d.trigger,
        errors: &d.errors,
    };
    let outcome = policy::outcome(point, p.spec.mode, p.spec.on_error, said);
    NewPolicyEvaluation {
        point,
        policy: p.spec.name.clone(),
        version,
        mode: p.spec.mode,
        outcome,
        deny: bounded(d.deny),
        warn: bounded(d.warn),
        require_approval: bounded(d.require_approval),
        skip: bounded(d.skip),
        trigger: bounded(d.trigger),
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
    let Some(stack) = state.store.get_stack(&run.org, &run.stack).await? else {
        return Ok((Vec::new(), Verdict::Pass));
    };
    let policies = plan_policies(state, run, &stack.spec).await?;
    if policies.is_empty() {
        return Ok((Vec::new(), Verdict::Pass));
    }
    let (labels, _) = stack_attachment(&stack.spec);
    let input = plan_input(state, run, &stack, &labels).await?;
    Ok(evaluate(state, Point::Plan, policies, input).await)
}

/// The policies the `plan` point evaluates on a run of `stack`: those attached to it,
/// unless the run is a drift run (it never applies). The runner uploads the plan's JSON
/// only when there are some.
pub async fn plan_policies(
    state: &AppState,
    run: &RunRecord,
    stack: &bosun_core::stack::StackSpec,
) -> Result<Vec<PolicyRecord>, ApiError> {
    if run.kind == bosun_core::run::RunKind::Drift {
        return Ok(Vec::new());
    }
    let (labels, environments) = stack_attachment(stack);
    let subject = Subject {
        labels: &labels,
        environments: &environments,
    };
    attached(state, &run.org, Point::Plan, subject).await
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
            "the runner did not upload the plan's JSON (a runner older than this server, \
             or a policy attached to the stack after its plan started): the policies \
             cannot read the plan"
                .into(),
        ));
    };
    let plan: Value = match serde_json::from_slice(&raw) {
        Ok(v) => v,
        Err(e) => return Ok(Err(format!("the plan's JSON does not parse: {e}"))),
    };
    let outputs: serde_json::Map<String, Value> =
        match state.store.state_head(&run.org, &run.stack).await?.current {
            Some(meta) => meta
                .outputs
                .into_iter()
                .map(|(name, o)| {
                    let value = if o.sensitive { Value::Null } else { o.value };
                    (name, json!({"value": value, "sensitive": o.sensitive}))
                })
                .collect(),
            None => serde_json::Map::new(),
        };
    Ok(Ok(json!({
        "point": "plan",
        "plan": plan,
        "stack": stack_document(stack, labels),
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

/// A stack's labels and environment, for matching policies' attachments.
pub(crate) fn stack_attachment(stack: &bosun_core::stack::StackSpec) -> (Vec<String>, Vec<String>) {
    let labels = stack.labels.iter().map(|l| l.to_string()).collect();
    let environments = stack.environment.iter().map(|e| e.to_string()).collect();
    (labels, environments)
}

/// A stack as the `plan` and `trigger` points' input documents show it.
pub(crate) fn stack_document(stack: &bosun_store::StackRecord, labels: &[String]) -> Value {
    let s = &stack.spec;
    json!({
        "id": s.id.to_string(),
        "name": s.name,
        "labels": labels,
        "environment": s.environment.as_ref().map(|e| e.to_string()),
        "repository": s.repository.to_string(),
        "branch": s.branch,
        "path": s.path.as_str(),
        "autodeploy": s.autodeploy,
    })
}

/// The `plan_run` decision point: once the preview (dry run) of a real plan run that
/// waits for its policies has ended, the policies attached to the run's targets are
/// evaluated on the preview's report, and the run is settled as their verdict says.
/// A preview that ended with no report (aborted, interrupted) is an evaluation error for
/// each policy — a deny, unless a policy says `on_error: warn` — so the run never waits
/// for a verdict that cannot come.
pub async fn after_preview(
    state: &AppState,
    preview: &bosun_store::PlanRunRecord,
) -> Result<(), ApiError> {
    let Some(parent) = &preview.preview_of else {
        return Ok(());
    };
    if !preview.state.is_terminal() {
        return Ok(());
    }
    let Some(run) = state.store.get_plan_run(parent).await? else {
        return Ok(());
    };
    if run.policy_hold != Some(bosun_core::policy::PlanRunHold::Check) {
        return Ok(());
    }
    let hosts = state.store.list_hosts(&run.org).await?;
    let targets = crate::service::plan_runs::targets(&run, &hosts);
    let (labels, environments) = target_labels_and_environments(&run, &hosts);
    let subject = Subject {
        labels: &labels,
        environments: &environments,
    };
    let policies = attached(state, &run.org, Point::PlanRun, subject).await?;
    let results = state.store.plan_run_results(&preview.id).await?;
    let input = match &preview.report {
        None => Err(format!(
            "its dry run {} ended {} with no report: the policies cannot read what it would change",
            preview.id, preview.state
        )),
        Some(report) => Ok(json!({
            "point": "plan_run",
            "plan": {"name": run.plan, "version": run.plan_version},
            "run": {
                "id": run.id,
                "trigger": run.trigger.as_str(),
                "requested_by": run.requested_by,
                "inputs": run.inputs,
                "dry_run": preview.id,
            },
            "targets": targets.iter().map(|h| json!({
                "name": h.name,
                "labels": h.labels,
                "environment": h.environment,
            })).collect::<Vec<_>>(),
            "environments": environments,
            "report": dry_run_report(report, &results),
        })),
    };
    let (evaluations, verdict) = evaluate(state, Point::PlanRun, policies, input).await;
    let why = reason(&run.id, verdict, &evaluations);
    let audit = bosun_store::Audit {
        org: Some(run.org.clone()),
        actor: "system".into(),
        token_id: None,
        action: "plan_run.policies".into(),
        target: format!("plan_run:{}", run.id),
        detail: json!({"verdict": verdict.as_str(), "dry_run": preview.id}),
    };
    let settled = state
        .store
        .settle_plan_run_policies(
            &run.org,
            &run.id,
            &evaluations,
            None,
            why.as_deref(),
            Some(&audit),
        )
        .await?;
    if settled.needs_lease {
        state.wake_dispatch();
    }
    Ok(())
}

/// The `approval` decision point: before `approver` approves the waiting run `pending`,
/// the policies attached to it (its stack's labels and environment, or its plan run's
/// target hosts) are evaluated; a mandatory deny refuses the approval with its messages
/// — on top of the built-in rule, never instead of it. Every evaluation is recorded on
/// the run; an advisory one only warns.
pub async fn check_approval(
    state: &AppState,
    org: &str,
    pending: &bosun_store::PendingApproval,
    approver: serde_json::Value,
) -> Result<(), ApiError> {
    let (labels, environments) = subject_of(state, org, pending).await?;
    let subject = Subject {
        labels: &labels,
        environments: &environments,
    };
    let policies = attached(state, org, Point::Approval, subject).await?;
    if policies.is_empty() {
        return Ok(());
    }
    let earlier: Vec<Value> = state
        .store
        .policy_evaluations(&pending.subject)
        .await?
        .into_iter()
        .map(|e| {
            json!({"policy": e.evaluation.policy, "point": e.evaluation.point.as_str(),
                "outcome": e.evaluation.outcome.as_str(),
                "overridden": e.overridden.is_some()})
        })
        .collect();
    let input = json!({
        "point": "approval",
        "decision": "approve",
        "approver": approver,
        "run": {
            "kind": pending.kind.as_str(),
            "id": pending.subject,
            "target": pending.target,
            "requested_by": pending.requested_by,
            "environments": pending.environments,
            "labels": labels,
            "plan_summary": pending.plan_summary,
        },
        "environments": environments,
        "policies": earlier,
    });
    let (evaluations, verdict) = evaluate(state, Point::Approval, policies, Ok(input)).await;
    state
        .store
        .record_policy_evaluations(org, &pending.subject, &evaluations)
        .await?;
    if matches!(verdict, Verdict::Deny | Verdict::Override) {
        let said: Vec<String> = evaluations
            .iter()
            .filter(|e| e.outcome == Outcome::Deny)
            .map(|e| {
                let msgs: Vec<&str> = e.deny.iter().chain(&e.errors).map(String::as_str).collect();
                format!("policy {}: {}", e.policy, msgs.join("; "))
            })
            .collect();
        return Err(ApiError::Forbidden(format!(
            "the approval policies refuse this approval of {}: {}",
            pending.subject,
            said.join(" | ")
        )));
    }
    Ok(())
}

/// The labels and environments a waiting run is matched against: its stack's, or its
/// plan run's target hosts'.
async fn subject_of(
    state: &AppState,
    org: &str,
    pending: &bosun_store::PendingApproval,
) -> Result<(Vec<String>, Vec<String>), ApiError> {
    use bosun_core::approval::SubjectKind;
    match pending.kind {
        SubjectKind::StackRun => {
            let Some(stack) = state.store.get_stack(org, &pending.target).await? else {
                return Ok((Vec::new(), Vec::new()));
            };
            let labels = stack.spec.labels.iter().map(|l| l.to_string()).collect();
            let envs = stack
                .spec
                .environment
                .iter()
                .map(|e| e.to_string())
                .collect();
            Ok((labels, envs))
        }
        SubjectKind::PlanRun => {
            let Some(run) = state.store.get_plan_run(&pending.subject).await? else {
                return Ok((Vec::new(), Vec::new()));
            };
            let hosts = state.store.list_hosts(org).await?;
            Ok(target_labels_and_environments(&run, &hosts))
        }
    }
}

/// The labels and environments of a plan run's target hosts, sorted, each once.
fn target_labels_and_environments(
    run: &bosun_store::PlanRunRecord,
    hosts: &[bosun_store::HostRecord],
) -> (Vec<String>, Vec<String>) {
    let targets = crate::service::plan_runs::targets(run, hosts);
    let mut labels: Vec<String> = targets
        .iter()
        .flat_map(|h| h.labels.iter().cloned())
        .collect();
    labels.sort();
    labels.dedup();
    let mut envs: Vec<String> = targets
        .iter()
        .filter_map(|h| h.environment.clone())
        .collect();
    envs.sort();
    envs.dedup();
    (labels, envs)
}

/// The `plan_run` point's `report`: the dry run's stored report with its per-host results
/// by step (`steps[].results[]`: host, status, changed, message, and for a file that would
/// change its `path` and `diff`).
fn dry_run_report(report: &Value, results: &[bosun_store::PlanHostResultRecord]) -> Value {
    let mut steps: Vec<Value> = Vec::new();
    for r in results {
        if steps.last().and_then(|s| s["number"].as_i64()) != Some(r.step) {
            steps.push(
                json!({"number": r.step, "name": r.step_name, "module": r.module,
                "results": []}),
            );
        }
        // The diff's header names the file: `--- PATH (before)`.
        let path = r.diff.as_deref().and_then(|d| {
            d.lines()
                .next()?
                .strip_prefix("--- ")?
                .strip_suffix(" (before)")
                .map(str::to_string)
        });
        if let Some(Value::Array(list)) = steps.last_mut().map(|s| &mut s["results"]) {
            list.push(
                json!({"host": r.host, "status": r.status, "changed": r.changed,
                "message": r.message, "path": path, "diff": r.diff}),
            );
        }
    }
    let mut out = report.clone();
    if let Value::Object(o) = &mut out {
        o.insert("steps".into(), Value::Array(steps));
    }
    out
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

/// An org admin overrides the soft-mandatory denies that hold plan run `id` of `org`, with
/// a reason (audited, kept on each overridden evaluation); the run then moves as the other
/// policies and its gated environments allow.
pub async fn override_plan_run(
    state: &AppState,
    caller: &Caller,
    org: &str,
    id: &str,
    reason: &str,
) -> Result<bosun_api::PlanRunView, ApiError> {
    let reason = policy::override_reason(reason)?;
    crate::service::plan_runs::load(state, org, id).await?;
    let by = caller.0.actor();
    let audit = caller.audit(
        Some(org),
        "plan_run.policy_override",
        format!("plan_run:{id}"),
        json!({"comment": reason}),
    );
    let settled = state
        .store
        .settle_plan_run_policies(org, id, &[], Some((&by, &reason)), None, Some(&audit))
        .await
        .map_err(|e| match e {
            bosun_store::StoreError::NotAwaitingApproval { why, .. } => ApiError::Conflict {
                code: bosun_api::ErrorCode::InvalidTransition,
                message: why,
            },
            e => e.into(),
        })?;
    if settled.needs_lease {
        state.wake_dispatch();
    }
    crate::service::plan_runs::show(state, org, id).await
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
    if id.starts_with("prun-") {
        return Err(ApiError::Conflict {
            code: bosun_api::ErrorCode::InvalidTransition,
            message: format!("{id} is a plan run: override it with POST /api/v1/orgs/{org}/plan-runs/{id}/override"),
        });
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_engine_is_an_error_that_denies_not_a_pass() {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let caught = guard(|| -> u8 { panic!("engine bug") });
        std::panic::set_hook(prev);
        let why = caught.unwrap_err();
        assert!(why.contains("panicked"), "{why}");
        let now = chrono::Utc::now();
        let p = PolicyRecord {
            org: "acme".into(),
            spec: PolicySpec {
                name: "tags".into(),
                mode: Mode::HardMandatory,
                on_error: OnError::Deny,
                points: vec![Point::Plan],
                attachment: Attachment::default(),
                source: PolicySource::Files(BTreeMap::new()),
            },
            version: "sha256:0".into(),
            created_at: now,
            updated_at: now,
            updated_by: "user:root".into(),
        };
        let e = judge(
            Point::Plan,
            &head(&p),
            String::new(),
            &Err(why.clone()),
            Err(why),
            std::time::Instant::now(),
        );
        assert_eq!(e.outcome, Outcome::Deny);
        assert!(e.errors[0].contains("panicked"), "{e:?}");
    }
}
