//! Stacks: created (validated into a [`StackSpec`]), changed (a patch laid over the
//! stored input and validated again) and deleted, and as people read them: a page of the
//! org's stacks and one stack, each with how its repository is reached and its drift
//! status — the work behind the API's handlers and the console's stack pages.

use bosun_api::{ErrorCode, Page, Stack, StackCreate, StackPatch};
use bosun_core::feedback::PrFeedback;
use bosun_core::graph::{Graph, Node};
use bosun_core::stack::{DependencyInput, DriftInput, StackInput, StackSpec};
use bosun_store::{StackContext, StackRecord};
use serde_json::json;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::paging::{next_cursor, PageQuery};

/// A page of the org's stacks, ordered by id; the cursor is the last stack's id. The
/// page and all it shows are one store call.
pub async fn list(state: &AppState, org: &str, q: &PageQuery) -> Result<Page<Stack>, ApiError> {
    let limit = q.limit()?;
    let (records, context) = state
        .store
        .list_stacks_in_context(org, q.cursor.as_deref(), limit)
        .await?;
    Ok(page_of(state, records, &context, limit))
}

/// A page of stacks on the wire, from its records and their context.
fn page_of(
    state: &AppState,
    records: Vec<StackRecord>,
    context: &StackContext,
    limit: u32,
) -> Page<Stack> {
    let next_cursor = next_cursor(&records, limit, |r| r.spec.id.to_string());
    let items = records
        .into_iter()
        .map(|r| in_context(state, r, context))
        .collect();
    Page { items, next_cursor }
}

/// [`list`], with each stack's latest run and held state lock (the console's stacks
/// page), still in one store call.
pub async fn list_with_activity(
    state: &AppState,
    org: &str,
    q: &PageQuery,
) -> Result<(Page<Stack>, bosun_store::StackActivity), ApiError> {
    let limit = q.limit()?;
    let (records, context, activity) = state
        .store
        .list_stacks_with_activity(org, q.cursor.as_deref(), limit)
        .await?;
    Ok((page_of(state, records, &context, limit), activity))
}

/// One stack of the org, and all it shows, in one store call.
pub async fn show(state: &AppState, org: &str, id: &str) -> Result<Stack, ApiError> {
    Ok(show_in_graph(state, org, id).await?.0)
}

/// [`show`], with the stack's neighbours in the org's dependency graph (the edges into it
/// and out of it, with what each carries), still in one store call.
pub async fn show_in_graph(
    state: &AppState,
    org: &str,
    id: &str,
) -> Result<(Stack, Graph), ApiError> {
    let (record, context) = state
        .store
        .get_stack_in_context(org, id)
        .await?
        .ok_or_else(|| not_found(org, id))?;
    let mut stack = in_context(state, record, &context);
    // Its downstream in the dependency graph: the stacks, then the plans.
    for (node, _) in context.graph.downstream(&Node::stack(id)) {
        match node {
            Node::Stack(s) => stack.downstream_stacks.push(s.clone()),
            Node::Plan(p) => stack.feeds_plans.push(p.clone()),
        }
    }
    Ok((stack, context.graph))
}

/// Creates a stack of the org from the body, validated into a [`StackSpec`].
pub async fn create(
    state: &AppState,
    caller: &Caller,
    org: &str,
    body: StackCreate,
) -> Result<Stack, ApiError> {
    let spec = StackSpec::from_input(input_from_create(body))?;
    let audit = caller.audit(
        Some(org),
        "stack.create",
        format!("stack:{}", spec.id),
        json!({"name": spec.name, "repository": spec.repository.to_string()}),
    );
    let record = state.store.create_stack(org, &spec, &audit).await?;
    with_context(state, record).await
}

/// Changes a stack's fields: the patch laid over its stored input, validated again. The
/// id never changes; `name` renames it.
pub async fn update(
    state: &AppState,
    caller: &Caller,
    org: &str,
    id: &str,
    patch: StackPatch,
) -> Result<Stack, ApiError> {
    let current = load(state, org, id).await?;
    let mut input = current.spec.to_input();
    let changed = apply_patch(&mut input, patch)?;
    let spec = StackSpec::from_input(input)?;
    let audit = caller.audit(
        Some(org),
        "stack.update",
        format!("stack:{id}"),
        json!({"fields": changed}),
    );
    let record = state.store.update_stack(org, &spec, &audit).await?;
    with_context(state, record).await
}

/// Deletes a stack (with its state versions when `delete_state`). The store refuses
/// while other stacks depend on it or runs of it are open, and — without
/// `delete_state` — while it has state versions.
pub async fn delete(
    state: &AppState,
    caller: &Caller,
    org: &str,
    id: &str,
    delete_state: bool,
) -> Result<(), ApiError> {
    let audit = caller.audit(
        Some(org),
        "stack.delete",
        format!("stack:{id}"),
        json!({"delete_state": delete_state}),
    );
    state
        .store
        .delete_stack(org, id, delete_state, &audit)
        .await?;
    Ok(())
}

/// Loads a stack of the org (a stack of another org is "not found").
pub(crate) async fn load(state: &AppState, org: &str, id: &str) -> Result<StackRecord, ApiError> {
    state
        .store
        .get_stack(org, id)
        .await?
        .ok_or_else(|| not_found(org, id))
}

fn not_found(org: &str, id: &str) -> ApiError {
    ApiError::NotFound(format!("stack {id:?} in org {org:?}"))
}

/// How the stack's repository is reached and whether it is connected, from what its
/// context says of its repository.
fn connection(
    state: &AppState,
    spec: &StackSpec,
    context: &StackContext,
) -> bosun_api::StackConnection {
    use bosun_core::stack::Repository;
    match &spec.repository {
        Repository::Git(_) => {
            let interval = state.config.vcs.poll_interval;
            let detail = if interval.is_zero() {
                "plain git remote; polling is off on this server".to_string()
            } else {
                let seen = context
                    .poll_heads
                    .get(&(spec.repository.key(), spec.branch.clone()));
                match seen {
                    Some(h) => format!(
                        "plain git remote, polled every {}s; last saw {} at {}",
                        interval.as_secs_f64(),
                        h.commit,
                        h.checked_at.to_rfc3339()
                    ),
                    None => format!(
                        "plain git remote, polled every {}s; not polled yet",
                        interval.as_secs_f64()
                    ),
                }
            };
            bosun_api::StackConnection {
                kind: "git".into(),
                connected: true,
                installation: None,
                detail,
            }
        }
        Repository::GitHub { .. } => {
            let full = spec.repository.github_full_name().unwrap_or_default();
            match context.github.get(&spec.repository.key()) {
                Some((b, refusals)) if !b.suspended => {
                    let mut detail = format!("connected through GitHub App installation {} ({})", b.installation, b.account);
                    // Feedback GitHub refused (a permission the installation lacks).
                    for r in refusals {
                        if r.until > chrono::Utc::now() {
                            detail.push_str(&format!("; {} (not tried again before {})", r.message, r.until.format("%H:%M UTC")));
                        }
                    }
                    bosun_api::StackConnection {
                        kind: "github".into(),
                        connected: true,
                        installation: Some(b.installation),
                        detail,
                    }
                }
                Some((b, _)) => bosun_api::StackConnection {
                    kind: "github".into(),
                    connected: false,
                    installation: Some(b.installation),
                    detail: format!("the GitHub App installation {} ({}) is suspended", b.installation, b.account),
                },
                None => bosun_api::StackConnection {
                    kind: "github".into(),
                    connected: false,
                    installation: None,
                    detail: format!("not connected: install the GitHub App on {full}; the next manual run or retry picks it up"),
                },
            }
        }
    }
}

/// The wire form of a stack just written, its context read after it.
async fn with_context(state: &AppState, r: StackRecord) -> Result<Stack, ApiError> {
    let context = state
        .store
        .stack_context(&r.org, std::slice::from_ref(&r))
        .await?;
    Ok(in_context(state, r, &context))
}

/// The wire form of a stack with what its context says: how its repository is reached,
/// its org's feedback setting (when it has none of its own) and its drift status.
fn in_context(state: &AppState, r: StackRecord, context: &StackContext) -> Stack {
    let connection = connection(state, &r.spec, context);
    let org_feedback = context.org_pr_feedback.unwrap_or_default();
    let drift_status = context
        .drift
        .get(r.spec.id.as_str())
        .filter(|_| r.spec.drift_detection.is_some())
        .map(|d| crate::drift::status(state, d.clone()));
    Stack {
        drift_status,
        ..to_wire(r, connection, org_feedback)
    }
}

/// The wire form of a stack; `org_feedback` is its org's `pr_feedback`, which it follows
/// when it has none of its own.
pub fn to_wire(
    r: StackRecord,
    connection: bosun_api::StackConnection,
    org_feedback: PrFeedback,
) -> Stack {
    let s = r.spec;
    Stack {
        id: s.id.into_string(),
        name: s.name,
        repository: s.repository.to_string(),
        branch: s.branch,
        path: s.path.to_string(),
        watch_paths: s.watch_paths.iter().map(|p| p.to_string()).collect(),
        engine: s.engine.kind.as_str().to_string(),
        engine_binary: s.engine.binary,
        engine_version: s.engine.version,
        tier: s.tier.as_str().to_string(),
        autodeploy: s.autodeploy,
        environment: s.environment.map(|e| e.into_string()),
        variables: s.variables,
        depends_on: s
            .depends_on
            .into_iter()
            .map(|d| bosun_api::Dependency {
                stack: d.stack.into_string(),
                outputs: d.outputs,
                trigger_always: d.trigger_always,
            })
            .collect(),
        drift_detection: s.drift_detection.map(|d| bosun_api::DriftDetection {
            schedule: d.schedule,
            reconcile: d.reconcile,
            timezone: Some(d.timezone),
        }),
        runner_pool: s.runner_pool.to_string(),
        aws: s.aws.map(|a| bosun_api::AwsIntegration {
            plan_role_arn: a.plan_role_arn,
            apply_role_arn: Some(a.apply_role_arn),
            audience: Some(a.audience),
        }),
        pr_feedback: s.pr_feedback.map(|f| f.as_str().to_string()),
        pr_feedback_effective: PrFeedback::resolve(s.pr_feedback, org_feedback)
            .as_str()
            .to_string(),
        labels: s.labels.into_iter().map(|l| l.into_string()).collect(),
        connection,
        downstream_stacks: Vec::new(),
        feeds_plans: Vec::new(),
        drift_status: None,
        created_at: r.created_at,
        updated_at: r.updated_at,
    }
}

fn dependency_in(d: bosun_api::Dependency) -> DependencyInput {
    DependencyInput {
        stack: d.stack,
        outputs: d.outputs,
        trigger_always: d.trigger_always,
    }
}

fn drift_in(d: bosun_api::DriftDetection) -> DriftInput {
    DriftInput {
        schedule: d.schedule,
        reconcile: d.reconcile,
        timezone: d.timezone,
    }
}

fn aws_in(a: bosun_api::AwsIntegration) -> bosun_core::stack::AwsInput {
    bosun_core::stack::AwsInput {
        plan_role_arn: a.plan_role_arn,
        apply_role_arn: a.apply_role_arn,
        audience: a.audience,
    }
}

fn input_from_create(c: StackCreate) -> StackInput {
    StackInput {
        id: c.id,
        name: c.name,
        repository: c.repository,
        branch: c.branch,
        path: c.path,
        watch_paths: c.watch_paths,
        engine: c.engine,
        engine_binary: c.engine_binary,
        engine_version: c.engine_version,
        tier: c.tier,
        autodeploy: c.autodeploy,
        environment: c.environment,
        variables: c.variables,
        depends_on: c.depends_on.into_iter().map(dependency_in).collect(),
        drift_detection: c.drift_detection.map(drift_in),
        runner_pool: c.runner_pool,
        aws: c.aws.map(aws_in),
        pr_feedback: c.pr_feedback,
        labels: c.labels,
    }
}

/// Lays a patch over a stored stack's input; returns the names of the fields it sets.
fn apply_patch(input: &mut StackInput, p: StackPatch) -> Result<Vec<&'static str>, ApiError> {
    let mut changed = Vec::new();
    if let Some(id) = p.id {
        if id != input.id {
            return Err(ApiError::BadRequest {
                code: ErrorCode::ImmutableField,
                message: format!(
                    "id is immutable (stack {:?} cannot become {id:?}); change `name` to rename it",
                    input.id
                ),
            });
        }
    }
    macro_rules! set {
        ($field:ident, $value:expr) => {
            if let Some(v) = $value {
                input.$field = v;
                changed.push(stringify!($field));
            }
        };
    }
    set!(name, p.name.map(Some));
    set!(repository, p.repository);
    set!(branch, p.branch.map(Some));
    set!(path, p.path.map(Some));
    set!(watch_paths, p.watch_paths);
    set!(engine, p.engine.map(Some));
    set!(engine_binary, p.engine_binary);
    set!(engine_version, p.engine_version);
    set!(tier, p.tier.map(Some));
    set!(autodeploy, p.autodeploy);
    set!(environment, p.environment);
    set!(variables, p.variables);
    set!(
        depends_on,
        p.depends_on
            .map(|d| d.into_iter().map(dependency_in).collect())
    );
    set!(drift_detection, p.drift_detection.map(|d| d.map(drift_in)));
    set!(runner_pool, p.runner_pool.map(Some));
    set!(aws, p.aws.map(|a| a.map(aws_in)));
    set!(pr_feedback, p.pr_feedback);
    set!(labels, p.labels);
    Ok(changed)
}
