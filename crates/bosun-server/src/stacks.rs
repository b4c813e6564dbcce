//! Stacks: create, list, show, update and delete, converting between the wire types and
//! the validated [`StackSpec`].

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use bosun_api::{ErrorCode, Page, Stack, StackCreate, StackPatch};
use bosun_core::authz::Access;
use bosun_core::stack::{DependencyInput, DriftInput, StackInput, StackSpec};
use bosun_core::Role;
use serde::Deserialize;
use serde_json::json;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::paging::PageQuery;
use crate::route::{endpoint, route, Endpoint, Route};
use crate::service::stacks::{self as service, load, to_wire_with_connection};

/// Served by [`list`].
pub const LIST: Endpoint = endpoint!(Access::Org(Role::Viewer), list);

/// Served by [`show`].
pub const SHOW: Endpoint = endpoint!(Access::Org(Role::Viewer), show);

pub fn routes() -> Vec<Route> {
    vec![
        LIST.route(),
        route!(Access::Org(Role::Admin), create),
        SHOW.route(),
        route!(Access::Org(Role::Admin), update),
        route!(Access::Org(Role::Admin), delete),
    ]
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
    Ok(changed)
}

/// List the org's stacks, ordered by id.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/stacks", tag = "stacks",
    params(("org" = String, Path), PageQuery),
    responses((status = 200, body = Page<Stack>), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> Result<Json<Page<Stack>>, ApiError> {
    Ok(Json(service::list(&state, &org, &q).await?))
}

/// Create a stack.
#[utoipa::path(post, path = "/api/v1/orgs/{org}/stacks", tag = "stacks",
    params(("org" = String, Path)),
    request_body = StackCreate,
    responses((status = 201, body = Stack), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(org): ApiPath<String>,
    ApiJson(body): ApiJson<StackCreate>,
) -> Result<(StatusCode, Json<Stack>), ApiError> {
    let spec = StackSpec::from_input(input_from_create(body))?;
    let audit = caller.audit(
        Some(&org),
        "stack.create",
        format!("stack:{}", spec.id),
        json!({"name": spec.name, "repository": spec.repository.to_string()}),
    );
    let record = state.store.create_stack(&org, &spec, &audit).await?;
    Ok((
        StatusCode::CREATED,
        Json(to_wire_with_connection(&state, record).await?),
    ))
}

/// Show one stack.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/stacks/{stack}", tag = "stacks",
    params(("org" = String, Path), ("stack" = String, Path)),
    responses((status = 200, body = Stack), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn show(
    State(state): State<AppState>,
    ApiPath((org, id)): ApiPath<(String, String)>,
) -> Result<Json<Stack>, ApiError> {
    Ok(Json(service::show(&state, &org, &id).await?))
}

/// Change a stack's fields. The id never changes; `name` renames it.
#[utoipa::path(patch, path = "/api/v1/orgs/{org}/stacks/{stack}", tag = "stacks",
    params(("org" = String, Path), ("stack" = String, Path)),
    request_body = StackPatch,
    responses((status = 200, body = Stack), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn update(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id)): ApiPath<(String, String)>,
    ApiJson(patch): ApiJson<StackPatch>,
) -> Result<Json<Stack>, ApiError> {
    let current = load(&state, &org, &id).await?;
    let mut input = current.spec.to_input();
    let changed = apply_patch(&mut input, patch)?;
    let spec = StackSpec::from_input(input)?;
    let audit = caller.audit(
        Some(&org),
        "stack.update",
        format!("stack:{id}"),
        json!({"fields": changed}),
    );
    let record = state.store.update_stack(&org, &spec, &audit).await?;
    Ok(Json(to_wire_with_connection(&state, record).await?))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DeleteQuery {
    /// Also delete the stack's state versions (refused without it when it has state).
    #[serde(default)]
    pub delete_state: bool,
}

/// Delete a stack. Refused while other stacks depend on it or runs of it are open, and —
/// unless `delete_state=true` — while it has state versions.
#[utoipa::path(delete, path = "/api/v1/orgs/{org}/stacks/{stack}", tag = "stacks",
    params(("org" = String, Path), ("stack" = String, Path), DeleteQuery),
    responses((status = 204), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<DeleteQuery>,
) -> Result<StatusCode, ApiError> {
    let audit = caller.audit(
        Some(&org),
        "stack.delete",
        format!("stack:{id}"),
        json!({"delete_state": q.delete_state}),
    );
    state
        .store
        .delete_stack(&org, &id, q.delete_state, &audit)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
