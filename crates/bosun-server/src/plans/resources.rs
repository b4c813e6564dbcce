//! What plans run against, over the API: hosts, environments with their
//! approval grants, plan files (parsed and linted at upload, stored as written), and
//! inventory imports. Members read; admins change.
//!
//! A plan upload refuses what cannot run — a file that does not parse (naming file, line
//! and column) — and answers lint findings against the org's hosts and environments as
//! `warnings`. Its `secret://` references resolve in the org's own secrets when a run is
//! leased (`super::secrets`), so an upload reveals nothing about other orgs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use bosun_api::{
    EnvironmentCreate, EnvironmentInfo, EnvironmentPatch, ErrorCode, HostCreate, HostInfo,
    HostPatch, InventoryImportAnswer, InventoryImportRequest, PlanFileSchedule, PlanFileSummary,
    PlanFinding, PlanInfo, PlanLintAnswer, PlanListItem, PlanSource, PlanStepSummary,
};
use bosun_core::authz::Access;
use bosun_core::cron::Schedule;
use bosun_core::plan_resources as rules;
use bosun_core::{Role, ValidationError};
use bosun_plans::model::{self as engine, Inventory, ModelError, Plan};
use bosun_store::{
    EnvironmentRecord, HostRecord, InventoryImport, NewEnvironment, NewHost, NewPlan, PlanRecord,
};
use serde_json::{json, Value};

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath};
use crate::route::{Endpoint, Route};

/// A plan may not be called this: `POST /orgs/{org}/plans/lint` owns the path.
const RESERVED_PLAN_NAMES: [&str; 1] = ["lint"];

/// `GET /orgs/{org}/plans`
pub const LIST_PLANS: Endpoint = Endpoint::get("/orgs/{org}/plans", Access::Org(Role::Viewer));

/// `GET /orgs/{org}/plans/{plan}`
pub const SHOW_PLAN: Endpoint =
    Endpoint::get("/orgs/{org}/plans/{plan}", Access::Org(Role::Viewer));

pub fn routes() -> Vec<Route> {
    let viewer = Access::Org(Role::Viewer);
    let admin = Access::Org(Role::Admin);
    vec![
        Route::get("/orgs/{org}/hosts", viewer, list_hosts),
        Route::post("/orgs/{org}/hosts", admin, create_host),
        Route::get("/orgs/{org}/hosts/{host}", viewer, show_host),
        Route::patch("/orgs/{org}/hosts/{host}", admin, update_host),
        Route::delete("/orgs/{org}/hosts/{host}", admin, delete_host),
        Route::get("/orgs/{org}/environments", viewer, list_environments),
        Route::post("/orgs/{org}/environments", admin, create_environment),
        Route::get("/orgs/{org}/environments/{env}", viewer, show_environment),
        Route::patch("/orgs/{org}/environments/{env}", admin, update_environment),
        Route::delete("/orgs/{org}/environments/{env}", admin, delete_environment),
        Route::put("/orgs/{org}/environments/{env}/grants/{user}", admin, grant),
        Route::delete(
            "/orgs/{org}/environments/{env}/grants/{user}",
            admin,
            revoke,
        ),
        LIST_PLANS.route(list_plans),
        Route::post("/orgs/{org}/plans", admin, upload_plan),
        Route::post("/orgs/{org}/plans/lint", viewer, lint_plan),
        SHOW_PLAN.route(show_plan),
        Route::delete("/orgs/{org}/plans/{plan}", admin, delete_plan),
        Route::post("/orgs/{org}/inventory", admin, import_inventory),
    ]
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ApiError {
    ValidationError::new(field, message).into()
}

// ---- The org's hosts as the engine's inventory ----

/// The org's hosts and environments as the engine's inventory (paths as stored: a `~`
/// is the runner's home, not expanded here).
pub fn inventory(hosts: &[HostRecord], environments: &[EnvironmentRecord]) -> Inventory {
    Inventory {
        environments: environments
            .iter()
            .map(|e| {
                (
                    e.id.clone(),
                    engine::Environment {
                        vars: e.vars.clone(),
                        requires_approval: e.requires_approval,
                        protected: e.protected,
                    },
                )
            })
            .collect(),
        hosts: hosts
            .iter()
            .map(|h| engine::Host {
                name: h.name.clone(),
                address: h.address.clone(),
                port: h.port,
                user: h.user.clone(),
                connection: if h.connection == "local" {
                    engine::ConnectionKind::Local
                } else {
                    engine::ConnectionKind::Ssh
                },
                labels: h.labels.clone(),
                vars: h.vars.clone(),
                environment: h.environment.clone(),
                identity_file: h.identity_file.as_ref().map(PathBuf::from),
                known_hosts: h.known_hosts.as_ref().map(PathBuf::from),
                host_key: h.host_key.clone(),
            })
            .collect(),
    }
}

/// The org's current inventory, read from the store.
pub async fn org_inventory(state: &AppState, org: &str) -> Result<Inventory, ApiError> {
    let hosts = state.store.list_hosts(org).await?;
    let environments = state.store.list_environments(org).await?;
    Ok(inventory(&hosts, &environments))
}

fn vars_of(field: &str, v: Option<&Value>) -> Result<BTreeMap<String, Value>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(v) => Ok(rules::vars(field, v)?),
    }
}

// ---- Hosts ----

fn host_wire(h: HostRecord) -> HostInfo {
    HostInfo {
        name: h.name,
        address: h.address,
        port: h.port,
        user: h.user,
        connection: h.connection,
        labels: h.labels,
        vars: h.vars,
        environment: h.environment,
        identity_file: h.identity_file,
        host_key: h.host_key,
        known_hosts: h.known_hosts,
        created_at: h.created_at,
        updated_at: h.updated_at,
    }
}

/// Checks a host against the rules, every field prefixed with `prefix` (`""` for the
/// API body, `hosts.web-1.` in an inventory).
fn check_host(prefix: &str, h: &NewHost) -> Result<(), ApiError> {
    let f = |name: &str| format!("{prefix}{name}");
    if prefix.is_empty() {
        rules::host_name(&f("name"), &h.name)?;
    } else {
        rules::host_name(prefix.trim_end_matches('.'), &h.name)?;
    }
    rules::address(&f("address"), &h.address)?;
    if h.port == 0 {
        return Err(invalid(f("port"), "must be 1 to 65535 (got 0)"));
    }
    rules::Connection::parse(&f("connection"), &h.connection)?;
    if let Some(u) = &h.user {
        rules::user(&f("user"), u)?;
    }
    rules::labels(&f("labels"), &h.labels)?;
    for k in h.vars.keys() {
        rules::var_name(&f(&format!("vars.{k}")), k)?;
    }
    if let Some(e) = &h.environment {
        rules::environment_id(&f("environment"), e)?;
    }
    if let Some(p) = &h.identity_file {
        rules::path(&f("identity_file"), p)?;
    }
    if let Some(p) = &h.known_hosts {
        rules::path(&f("known_hosts"), p)?;
    }
    if let Some(k) = &h.host_key {
        rules::host_key(&f("host_key"), k)?;
    }
    Ok(())
}

async fn load_host(state: &AppState, org: &str, name: &str) -> Result<HostRecord, ApiError> {
    state
        .store
        .get_host(org, name)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("host {name:?} in org {org:?}")))
}

fn host_detail(h: &NewHost) -> Value {
    json!({
        "address": h.address, "port": h.port, "connection": h.connection,
        "environment": h.environment, "labels": h.labels,
    })
}

/// The org's hosts, by name.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/hosts", tag = "plans",
    params(("org" = String, Path)),
    responses((status = 200, body = Vec<HostInfo>)))]
pub async fn list_hosts(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
) -> Result<Json<Vec<HostInfo>>, ApiError> {
    let hosts = state.store.list_hosts(&org).await?;
    Ok(Json(hosts.into_iter().map(host_wire).collect()))
}

/// Add a host (org admin).
#[utoipa::path(post, path = "/api/v1/orgs/{org}/hosts", tag = "plans",
    params(("org" = String, Path)),
    request_body = HostCreate,
    responses((status = 201, body = HostInfo), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn create_host(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(org): ApiPath<String>,
    ApiJson(body): ApiJson<HostCreate>,
) -> Result<(StatusCode, Json<HostInfo>), ApiError> {
    let port = match body.port {
        Some(p) => rules::port("port", p)?,
        None => 22,
    };
    let host = NewHost {
        org: org.clone(),
        address: body.address.clone().unwrap_or_else(|| body.name.clone()),
        name: body.name,
        port,
        user: body.user,
        connection: body.connection.unwrap_or_else(|| "ssh".into()),
        labels: body.labels,
        vars: vars_of("vars", body.vars.as_ref())?,
        environment: body.environment,
        identity_file: body.identity_file,
        host_key: body.host_key,
        known_hosts: body.known_hosts,
    };
    check_host("", &host)?;
    let audit = caller.audit(
        Some(&org),
        "host.create",
        format!("host:{}", host.name),
        host_detail(&host),
    );
    let created = state.store.create_host(&host, &audit).await?;
    Ok((StatusCode::CREATED, Json(host_wire(created))))
}

/// One host.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/hosts/{host}", tag = "plans",
    params(("org" = String, Path), ("host" = String, Path)),
    responses((status = 200, body = HostInfo), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn show_host(
    State(state): State<AppState>,
    ApiPath((org, name)): ApiPath<(String, String)>,
) -> Result<Json<HostInfo>, ApiError> {
    Ok(Json(host_wire(load_host(&state, &org, &name).await?)))
}

/// Change a host (org admin): only the given fields; `null` clears an optional one.
#[utoipa::path(patch, path = "/api/v1/orgs/{org}/hosts/{host}", tag = "plans",
    params(("org" = String, Path), ("host" = String, Path)),
    request_body = HostPatch,
    responses((status = 200, body = HostInfo), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn update_host(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, name)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<HostPatch>,
) -> Result<Json<HostInfo>, ApiError> {
    let current = load_host(&state, &org, &name).await?;
    let port = match body.port {
        Some(p) => rules::port("port", p)?,
        None => current.port,
    };
    let vars = match &body.vars {
        Some(v) => vars_of("vars", Some(v))?,
        None => current.vars,
    };
    let host = NewHost {
        org: org.clone(),
        name: name.clone(),
        address: body.address.unwrap_or(current.address),
        port,
        user: body.user.unwrap_or(current.user),
        connection: body.connection.unwrap_or(current.connection),
        labels: body.labels.unwrap_or(current.labels),
        vars,
        environment: body.environment.unwrap_or(current.environment),
        identity_file: body.identity_file.unwrap_or(current.identity_file),
        host_key: body.host_key.unwrap_or(current.host_key),
        known_hosts: body.known_hosts.unwrap_or(current.known_hosts),
    };
    check_host("", &host)?;
    let audit = caller.audit(
        Some(&org),
        "host.update",
        format!("host:{name}"),
        host_detail(&host),
    );
    Ok(Json(host_wire(
        state.store.update_host(&host, &audit).await?,
    )))
}

/// Delete a host (org admin).
#[utoipa::path(delete, path = "/api/v1/orgs/{org}/hosts/{host}", tag = "plans",
    params(("org" = String, Path), ("host" = String, Path)),
    responses((status = 204), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn delete_host(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, name)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let audit = caller.audit(Some(&org), "host.delete", format!("host:{name}"), json!({}));
    if state.store.delete_host(&org, &name, &audit).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("host {name:?} in org {org:?}")))
    }
}

// ---- Environments ----

fn environment_wire(e: EnvironmentRecord, hosts: &[HostRecord]) -> EnvironmentInfo {
    EnvironmentInfo {
        hosts: hosts
            .iter()
            .filter(|h| h.environment.as_deref() == Some(e.id.as_str()))
            .map(|h| h.name.clone())
            .collect(),
        id: e.id,
        vars: e.vars,
        requires_approval: e.requires_approval,
        protected: e.protected,
        grants: e.grants,
        created_at: e.created_at,
        updated_at: e.updated_at,
    }
}

async fn environment_answer(
    state: &AppState,
    org: &str,
    e: EnvironmentRecord,
) -> Result<EnvironmentInfo, ApiError> {
    let hosts = state.store.list_hosts(org).await?;
    Ok(environment_wire(e, &hosts))
}

async fn load_environment(
    state: &AppState,
    org: &str,
    id: &str,
) -> Result<EnvironmentRecord, ApiError> {
    state
        .store
        .get_environment(org, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("environment {id:?} in org {org:?}")))
}

/// The org's environments, by id, each with its grants and hosts.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/environments", tag = "plans",
    params(("org" = String, Path)),
    responses((status = 200, body = Vec<EnvironmentInfo>)))]
pub async fn list_environments(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
) -> Result<Json<Vec<EnvironmentInfo>>, ApiError> {
    let envs = state.store.list_environments(&org).await?;
    let hosts = state.store.list_hosts(&org).await?;
    Ok(Json(
        envs.into_iter()
            .map(|e| environment_wire(e, &hosts))
            .collect(),
    ))
}

/// Add an environment (org admin).
#[utoipa::path(post, path = "/api/v1/orgs/{org}/environments", tag = "plans",
    params(("org" = String, Path)),
    request_body = EnvironmentCreate,
    responses((status = 201, body = EnvironmentInfo), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn create_environment(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(org): ApiPath<String>,
    ApiJson(body): ApiJson<EnvironmentCreate>,
) -> Result<(StatusCode, Json<EnvironmentInfo>), ApiError> {
    rules::environment_id("id", &body.id)?;
    let env = NewEnvironment {
        org: org.clone(),
        id: body.id.clone(),
        vars: vars_of("vars", body.vars.as_ref())?,
        requires_approval: body.requires_approval,
        protected: body.protected,
    };
    let audit = caller.audit(
        Some(&org),
        "environment.create",
        format!("environment:{}", env.id),
        json!({"requires_approval": env.requires_approval, "protected": env.protected}),
    );
    let created = state.store.create_environment(&env, &audit).await?;
    Ok((
        StatusCode::CREATED,
        Json(environment_answer(&state, &org, created).await?),
    ))
}

/// One environment, with its grants and hosts.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/environments/{env}", tag = "plans",
    params(("org" = String, Path), ("env" = String, Path)),
    responses((status = 200, body = EnvironmentInfo), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn show_environment(
    State(state): State<AppState>,
    ApiPath((org, id)): ApiPath<(String, String)>,
) -> Result<Json<EnvironmentInfo>, ApiError> {
    let env = load_environment(&state, &org, &id).await?;
    Ok(Json(environment_answer(&state, &org, env).await?))
}

/// Change an environment's variables or flags (org admin); grants stay.
#[utoipa::path(patch, path = "/api/v1/orgs/{org}/environments/{env}", tag = "plans",
    params(("org" = String, Path), ("env" = String, Path)),
    request_body = EnvironmentPatch,
    responses((status = 200, body = EnvironmentInfo), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn update_environment(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<EnvironmentPatch>,
) -> Result<Json<EnvironmentInfo>, ApiError> {
    let current = load_environment(&state, &org, &id).await?;
    let vars = match &body.vars {
        Some(v) => vars_of("vars", Some(v))?,
        None => current.vars,
    };
    let env = NewEnvironment {
        org: org.clone(),
        id: id.clone(),
        vars,
        requires_approval: body.requires_approval.unwrap_or(current.requires_approval),
        protected: body.protected.unwrap_or(current.protected),
    };
    let audit = caller.audit(
        Some(&org),
        "environment.update",
        format!("environment:{id}"),
        json!({"requires_approval": env.requires_approval, "protected": env.protected,
            "vars_changed": body.vars.is_some()}),
    );
    let updated = state.store.update_environment(&env, &audit).await?;
    Ok(Json(environment_answer(&state, &org, updated).await?))
}

/// Delete an environment and its grants (org admin); refused while hosts are in it.
#[utoipa::path(delete, path = "/api/v1/orgs/{org}/environments/{env}", tag = "plans",
    params(("org" = String, Path), ("env" = String, Path)),
    responses((status = 204), (status = 404, body = bosun_api::ErrorBody),
        (status = 409, description = "hosts are in it (named)", body = bosun_api::ErrorBody)))]
pub async fn delete_environment(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let audit = caller.audit(
        Some(&org),
        "environment.delete",
        format!("environment:{id}"),
        json!({}),
    );
    if state.store.delete_environment(&org, &id, &audit).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!(
            "environment {id:?} in org {org:?}"
        )))
    }
}

/// Grant a member approval on an environment (org admin): what a protected
/// environment's approvers need besides the operator role. Idempotent.
#[utoipa::path(put, path = "/api/v1/orgs/{org}/environments/{env}/grants/{user}", tag = "plans",
    params(("org" = String, Path), ("env" = String, Path), ("user" = String, Path)),
    responses((status = 200, body = EnvironmentInfo), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn grant(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id, user)): ApiPath<(String, String, String)>,
) -> Result<Json<EnvironmentInfo>, ApiError> {
    load_environment(&state, &org, &id).await?;
    let roles = state.store.roles_of(&user).await?;
    match roles.get(&org) {
        None => {
            return Err(invalid(
                "user",
                format!("user {user:?} is not a member of org {org:?}: add them first"),
            ))
        }
        Some(role) if *role < Role::Operator => {
            return Err(invalid(
                "user",
                format!(
                    "user {user:?} is a {role} of org {org:?}: approving needs operator or above, so a grant would not let them approve"
                ),
            ))
        }
        Some(_) => {}
    }
    let audit = caller.audit(
        Some(&org),
        "environment.grant",
        format!("environment:{id}"),
        json!({"user": user}),
    );
    state
        .store
        .grant_environment(&org, &id, &user, &audit)
        .await?;
    let env = load_environment(&state, &org, &id).await?;
    Ok(Json(environment_answer(&state, &org, env).await?))
}

/// Revoke a member's grant on an environment (org admin).
#[utoipa::path(delete, path = "/api/v1/orgs/{org}/environments/{env}/grants/{user}", tag = "plans",
    params(("org" = String, Path), ("env" = String, Path), ("user" = String, Path)),
    responses((status = 204), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn revoke(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id, user)): ApiPath<(String, String, String)>,
) -> Result<StatusCode, ApiError> {
    let audit = caller.audit(
        Some(&org),
        "environment.revoke",
        format!("environment:{id}"),
        json!({"user": user}),
    );
    if state
        .store
        .revoke_environment_grant(&org, &id, &user, &audit)
        .await?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!(
            "a grant for user {user:?} on environment {id:?}"
        )))
    }
}

// ---- Plans ----

fn finding(location: &engine::Location, message: String) -> PlanFinding {
    PlanFinding {
        file: location.file.clone(),
        line: location.line,
        column: location.column,
        message,
    }
}

fn parse_error(e: ModelError) -> ApiError {
    match e.limit {
        Some(_) => ApiError::BadRequest {
            code: ErrorCode::InputLimit,
            message: format!("source: {e}"),
        },
        None => invalid("source", e.to_string()),
    }
}

/// How long parsing one plan or inventory file may take before the request is answered.
/// The limits checked before parsing (`bosun_plans::model::Limits::FILE`) keep a parse
/// far below this; the budget is what bounds the wait should one get past them.
const PARSE_BUDGET: Duration = Duration::from_secs(2);

/// Runs `parse` over an uploaded file on the blocking pool, answering within `budget`:
/// a slow parse holds neither an async worker (so `/healthz` and every other request
/// keep moving) nor the client. Past the budget the parse finishes in the background,
/// its result dropped.
async fn parse_off_workers<T: Send + 'static>(
    what: &'static str,
    file: &str,
    source: &str,
    budget: Duration,
    parse: fn(&Path, &str) -> Result<T, ModelError>,
) -> Result<Result<T, ModelError>, ApiError> {
    let (file, source) = (file.to_string(), source.to_string());
    let task = tokio::task::spawn_blocking(move || parse(Path::new(&file), &source));
    match tokio::time::timeout(budget, task).await {
        Ok(Ok(parsed)) => Ok(parsed),
        Ok(Err(e)) => Err(ApiError::Internal(format!("parsing a {what} failed: {e}"))),
        Err(_) => Err(ApiError::BadRequest {
            code: ErrorCode::InputLimit,
            message: format!(
                "source: parsing the {what} took longer than the budget of {} ms; make the file simpler",
                budget.as_millis()
            ),
        }),
    }
}

/// A plan file's `schedule:` checked as the scheduler will read it (cron and zone), or
/// where in the file it is wrong and why.
fn file_schedule(plan: &Plan) -> Result<Option<PlanFileSchedule>, PlanFinding> {
    let Some(s) = &plan.schedule else {
        return Ok(None);
    };
    let zone = s.timezone.as_deref().unwrap_or("UTC");
    let parsed = Schedule::parse(&s.cron, zone).map_err(|e| {
        let (path, field) = if e.field == "timezone" {
            ("schedule.timezone", "schedule.timezone")
        } else {
            ("schedule.cron", "schedule")
        };
        finding(
            &plan.locations.locate(path),
            format!("{field}: {}", e.message),
        )
    })?;
    Ok(Some(PlanFileSchedule {
        cron: parsed.expression().to_string(),
        timezone: parsed.timezone().name().to_string(),
        inputs: s.inputs.clone(),
    }))
}

fn summary(
    plan: &Plan,
    inventory: &Inventory,
    schedule: Option<PlanFileSchedule>,
) -> PlanFileSummary {
    PlanFileSummary {
        target_hosts: plan.targets.hosts.clone(),
        target_labels: plan.targets.labels.clone(),
        target_environments: plan.targets.environments.clone(),
        hosts: plan
            .target_hosts(inventory)
            .into_iter()
            .map(|h| h.name.clone())
            .collect(),
        inputs: plan
            .inputs
            .iter()
            .map(|(k, d)| (k.clone(), d.default.clone().unwrap_or(Value::Null)))
            .collect(),
        steps: plan
            .steps
            .iter()
            .map(|s| PlanStepSummary {
                name: s.name.clone(),
                module: s.module.kind().to_string(),
                when: s.when.clone(),
                sudo: s.sudo,
                continue_on_error: s.continue_on_error,
            })
            .collect(),
        concurrent_runs: plan.concurrent_runs,
        strict_vars: plan.strict_vars,
        schedule,
    }
}

/// A checked plan file: parsed, its name allowed, no foreign `secret://` reference,
/// linted against the org's inventory.
struct Checked {
    plan: Plan,
    summary: PlanFileSummary,
    warnings: Vec<PlanFinding>,
}

async fn check_plan(state: &AppState, org: &str, body: &PlanSource) -> Result<Checked, ApiError> {
    let file = body.file.clone().unwrap_or_else(|| "plan.yaml".into());
    let plan = parse_off_workers(
        "plan",
        &file,
        &body.source,
        PARSE_BUDGET,
        engine::parse_plan,
    )
    .await?
    .map_err(parse_error)?;
    let at_name = || plan.locations.locate("name");
    if let Err(e) = rules::plan_name("name", &plan.name) {
        return Err(invalid(
            "source",
            format!("{}: name: {}", at_name(), e.message),
        ));
    }
    if RESERVED_PLAN_NAMES.contains(&plan.name.as_str()) {
        return Err(invalid(
            "source",
            format!(
                "{}: name: {:?} is reserved; choose another name",
                at_name(),
                plan.name
            ),
        ));
    }
    let schedule = file_schedule(&plan).map_err(|f| {
        invalid(
            "source",
            format!("{}:{}:{}: {}", f.file, f.line, f.column, f.message),
        )
    })?;
    let inventory = org_inventory(state, org).await?;
    let warnings = engine::lint(&plan, Some(&inventory))
        .findings
        .into_iter()
        .map(|f| finding(&f.location, f.message))
        .collect();
    Ok(Checked {
        summary: summary(&plan, &inventory, schedule),
        plan,
        warnings,
    })
}

fn plan_wire(p: PlanRecord, summary: PlanFileSummary, warnings: Vec<PlanFinding>) -> PlanInfo {
    PlanInfo {
        name: p.name,
        version: p.version,
        source: p.source,
        summary,
        warnings,
        created: None,
        created_at: p.created_at,
        updated_at: p.updated_at,
        updated_by: p.updated_by,
    }
}

/// The org's plans, by name.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/plans", tag = "plans",
    params(("org" = String, Path)),
    responses((status = 200, body = Vec<PlanListItem>)))]
pub async fn list_plans(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
) -> Result<Json<Vec<PlanListItem>>, ApiError> {
    let plans = state.store.list_plans(&org).await?;
    Ok(Json(
        plans
            .into_iter()
            .map(|p| PlanListItem {
                name: p.name,
                version: p.version,
                created_at: p.created_at,
                updated_at: p.updated_at,
                updated_by: p.updated_by,
            })
            .collect(),
    ))
}

/// Store a plan file under its `name` (org admin): version 1 when new, the next version
/// when it exists. A file that does not parse is refused (file, line, column); lint
/// findings against the org's hosts and environments come back as `warnings`.
#[utoipa::path(post, path = "/api/v1/orgs/{org}/plans", tag = "plans",
    params(("org" = String, Path)),
    request_body = PlanSource,
    responses((status = 201, description = "created", body = PlanInfo),
        (status = 200, description = "updated to a new version", body = PlanInfo),
        (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn upload_plan(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(org): ApiPath<String>,
    ApiJson(body): ApiJson<PlanSource>,
) -> Result<(StatusCode, Json<PlanInfo>), ApiError> {
    let checked = check_plan(&state, &org, &body).await?;
    let name = checked.plan.name.clone();
    let audit = caller.audit(
        Some(&org),
        "plan.save",
        format!("plan:{name}"),
        json!({"warnings": checked.warnings.len()}),
    );
    let saved = state
        .store
        .save_plan(
            &NewPlan {
                org: org.clone(),
                name,
                source: body.source,
                schedule: checked.summary.schedule.as_ref().map(|s| {
                    bosun_store::PlanFileSchedule {
                        cron: s.cron.clone(),
                        timezone: s.timezone.clone(),
                        inputs: s.inputs.clone(),
                    }
                }),
            },
            &audit,
        )
        .await?;
    let created = saved.version == 1;
    let mut info = plan_wire(saved, checked.summary, checked.warnings);
    info.created = Some(created);
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(info)))
}

/// Lint a plan file against the org's hosts and environments without storing it.
#[utoipa::path(post, path = "/api/v1/orgs/{org}/plans/lint", tag = "plans",
    params(("org" = String, Path)),
    request_body = PlanSource,
    responses((status = 200, body = PlanLintAnswer), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn lint_plan(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
    ApiJson(body): ApiJson<PlanSource>,
) -> Result<Json<PlanLintAnswer>, ApiError> {
    let checked = check_plan(&state, &org, &body).await?;
    Ok(Json(PlanLintAnswer {
        name: checked.plan.name,
        summary: checked.summary,
        warnings: checked.warnings,
    }))
}

/// One plan: its source as uploaded, version, parsed summary (with the hosts it targets
/// now) and lint findings against the org's current hosts.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/plans/{plan}", tag = "plans",
    params(("org" = String, Path), ("plan" = String, Path)),
    responses((status = 200, body = PlanInfo), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn show_plan(
    State(state): State<AppState>,
    ApiPath((org, name)): ApiPath<(String, String)>,
) -> Result<Json<PlanInfo>, ApiError> {
    let stored = state
        .store
        .get_plan(&org, &name)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("plan {name:?} in org {org:?}")))?;
    let file = format!("{name}.yaml");
    let plan = parse_off_workers(
        "plan",
        &file,
        &stored.source,
        PARSE_BUDGET,
        engine::parse_plan,
    )
    .await?
    .map_err(|e| ApiError::Conflict {
        code: ErrorCode::InvalidPlan,
        message: format!("the stored plan {name:?} no longer parses: {e}; upload it again"),
    })?;
    let inventory = org_inventory(&state, &org).await?;
    let mut warnings: Vec<PlanFinding> = engine::lint(&plan, Some(&inventory))
        .findings
        .into_iter()
        .map(|f| finding(&f.location, f.message))
        .collect();
    // A plan stored before its schedule was checked at upload: shown, not applied.
    let schedule = file_schedule(&plan).unwrap_or_else(|f| {
        warnings.push(f);
        None
    });
    Ok(Json(plan_wire(
        stored,
        summary(&plan, &inventory, schedule),
        warnings,
    )))
}

/// Delete a plan (org admin). Runs already started keep the plan file they run.
#[utoipa::path(delete, path = "/api/v1/orgs/{org}/plans/{plan}", tag = "plans",
    params(("org" = String, Path), ("plan" = String, Path)),
    responses((status = 204), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn delete_plan(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, name)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let audit = caller.audit(Some(&org), "plan.delete", format!("plan:{name}"), json!({}));
    if state.store.delete_plan(&org, &name, &audit).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("plan {name:?} in org {org:?}")))
    }
}

// ---- Inventory import ----

/// Import an inventory file (org admin) — the YAML `bosun plan exec --inventory` reads:
/// every environment and host in it is created, or replaced when it exists, in one
/// transaction; nothing else changes. `~` in paths stays as written (the runner's home).
#[utoipa::path(post, path = "/api/v1/orgs/{org}/inventory", tag = "plans",
    params(("org" = String, Path)),
    request_body = InventoryImportRequest,
    responses((status = 200, body = InventoryImportAnswer), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn import_inventory(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(org): ApiPath<String>,
    ApiJson(body): ApiJson<InventoryImportRequest>,
) -> Result<Json<InventoryImportAnswer>, ApiError> {
    let file = body.file.clone().unwrap_or_else(|| "inventory.yaml".into());
    let inv = parse_off_workers(
        "inventory",
        &file,
        &body.source,
        PARSE_BUDGET,
        engine::parse_inventory_as_written,
    )
    .await?
    .map_err(parse_error)?;
    let mut environments = Vec::new();
    for (id, e) in &inv.environments {
        let field = format!("environments.{id}");
        rules::environment_id(&field, id)?;
        for k in e.vars.keys() {
            rules::var_name(&format!("{field}.vars.{k}"), k)?;
        }
        environments.push(NewEnvironment {
            org: org.clone(),
            id: id.clone(),
            vars: e.vars.clone(),
            requires_approval: e.requires_approval,
            protected: e.protected,
        });
    }
    let mut hosts = Vec::new();
    for h in &inv.hosts {
        let host = NewHost {
            org: org.clone(),
            name: h.name.clone(),
            address: h.address.clone(),
            port: h.port,
            user: h.user.clone(),
            connection: match h.connection {
                engine::ConnectionKind::Local => "local".into(),
                engine::ConnectionKind::Ssh => "ssh".into(),
            },
            labels: h.labels.clone(),
            vars: h.vars.clone(),
            environment: h.environment.clone(),
            identity_file: h
                .identity_file
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned()),
            host_key: h.host_key.clone(),
            known_hosts: h
                .known_hosts
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned()),
        };
        let prefix = format!("hosts.{}.", h.name);
        check_host(&prefix, &host)?;
        hosts.push(host);
    }
    let audit = caller.audit(
        Some(&org),
        "inventory.import",
        format!("inventory:{file}"),
        json!({}),
    );
    let done = state
        .store
        .import_inventory(
            &InventoryImport {
                org: org.clone(),
                environments,
                hosts,
            },
            &audit,
        )
        .await?;
    Ok(Json(InventoryImportAnswer {
        environments_created: done.environments_created,
        environments_updated: done.environments_updated,
        hosts_created: done.hosts_created,
        hosts_updated: done.hosts_updated,
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// Stands for a parse the limits did not stop: busy for a while, then done.
    fn slow_parse(_: &Path, source: &str) -> Result<usize, ModelError> {
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_millis(500) {
            std::hint::spin_loop();
        }
        Ok(source.len())
    }

    #[tokio::test]
    async fn a_parse_past_its_budget_is_answered_naming_the_budget() {
        let started = std::time::Instant::now();
        let e = parse_off_workers("plan", "p.yaml", "x", Duration::from_millis(50), slow_parse)
            .await
            .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_millis(400),
            "answered at the budget, not after the parse"
        );
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        assert_eq!(e.code(), "input_limit");
        assert!(e.to_string().contains("budget of 50 ms"), "{e}");
        // Within the budget the parse's own result comes back.
        let parsed =
            parse_off_workers("plan", "p.yaml", "xyz", Duration::from_secs(5), slow_parse).await;
        assert_eq!(parsed.unwrap().unwrap(), 3);
    }
}
