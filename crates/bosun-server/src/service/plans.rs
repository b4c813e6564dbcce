//! Plan files: parsed off the async workers within a budget, checked and linted against
//! the org's hosts and environments (read as the engine's inventory), summarised
//! (targets, inputs, steps, schedule), stored, listed, shown and deleted — the work
//! behind the API's plan handlers, the inventory import and the console's plan pages.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bosun_api::{
    ErrorCode, Page, PlanFileSchedule, PlanFileSummary, PlanFinding, PlanInfo, PlanLintAnswer,
    PlanListItem, PlanSource, PlanStepSummary,
};
use bosun_core::cron::Schedule;
use bosun_core::plan_resources as rules;
use bosun_plans::model::{self as engine, Inventory, ModelError, Plan};
use bosun_store::{EnvironmentRecord, HostRecord, NewPlan, PlanRecord};
use serde_json::{json, Value};

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::paging::{page, PageQuery};
use crate::service::{deleted, invalid};

/// A stored plan of `org`: its summary against the org's hosts as they are now, and lint
/// findings as warnings.
pub async fn show(state: &AppState, org: &str, name: &str) -> Result<PlanInfo, ApiError> {
    let stored = state
        .store
        .get_plan(org, name)
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
    let inventory = org_inventory(state, org).await?;
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
    Ok(plan_wire(
        stored,
        summary(&plan, &inventory, schedule),
        warnings,
    ))
}

/// A page of the org's plans, by name; the cursor is the last plan's name.
pub async fn list(
    state: &AppState,
    org: &str,
    q: &PageQuery,
) -> Result<Page<PlanListItem>, ApiError> {
    let limit = q.limit()?;
    let plans = state
        .store
        .list_plans_page(org, q.cursor.as_deref(), limit)
        .await?;
    let items = plans
        .into_iter()
        .map(|p| PlanListItem {
            name: p.name,
            version: p.version,
            created_at: p.created_at,
            updated_at: p.updated_at,
            updated_by: p.updated_by,
        })
        .collect();
    Ok(page(items, limit, |p| p.name.clone()))
}

/// Stores a plan file under its `name` for `caller`: version 1 when new (`created` is
/// true), the next version when it exists. A file that does not parse is refused; lint
/// findings against the org's hosts and environments come back as `warnings`.
pub async fn upload(
    state: &AppState,
    caller: &Caller,
    org: &str,
    body: PlanSource,
) -> Result<PlanInfo, ApiError> {
    let checked = check_plan(state, org, &body).await?;
    let name = checked.plan.name.clone();
    let audit = caller.audit(
        Some(org),
        "plan.save",
        format!("plan:{name}"),
        json!({"warnings": checked.warnings.len()}),
    );
    let saved = state
        .store
        .save_plan(
            &NewPlan {
                org: org.to_string(),
                name,
                source: body.source,
                schedule: checked.summary.schedule.as_ref().map(|s| {
                    bosun_store::PlanFileSchedule {
                        cron: s.cron.clone(),
                        timezone: s.timezone.clone(),
                        inputs: s.inputs.clone(),
                    }
                }),
                on_stack_change: checked
                    .plan
                    .on_stack_change
                    .as_ref()
                    .map(|o| (o.stack.clone(), o.outputs.clone())),
            },
            &audit,
        )
        .await?;
    let created = saved.version == 1;
    let mut info = plan_wire(saved, checked.summary, checked.warnings);
    info.created = Some(created);
    Ok(info)
}

/// A plan file checked and linted against the org's hosts and environments, not stored.
pub async fn lint(
    state: &AppState,
    org: &str,
    body: &PlanSource,
) -> Result<PlanLintAnswer, ApiError> {
    let checked = check_plan(state, org, body).await?;
    Ok(PlanLintAnswer {
        name: checked.plan.name,
        summary: checked.summary,
        warnings: checked.warnings,
    })
}

/// Deletes a plan for `caller`. Runs already started keep the plan file they run.
pub async fn delete(
    state: &AppState,
    caller: &Caller,
    org: &str,
    name: &str,
) -> Result<(), ApiError> {
    let audit = caller.audit(Some(org), "plan.delete", format!("plan:{name}"), json!({}));
    let done = state.store.delete_plan(org, name, &audit).await?;
    deleted(done, "plan", name, org)
}

/// A plan may not be called this: `POST /orgs/{org}/plans/lint` owns the path.
pub(crate) const RESERVED_PLAN_NAMES: [&str; 1] = ["lint"];

pub(crate) fn finding(location: &engine::Location, message: String) -> PlanFinding {
    PlanFinding {
        file: location.file.clone(),
        line: location.line,
        column: location.column,
        message,
    }
}

pub(crate) fn parse_error(e: ModelError) -> ApiError {
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
pub(crate) const PARSE_BUDGET: Duration = Duration::from_secs(2);

/// Runs `parse` over an uploaded file on the blocking pool, answering within `budget`:
/// a slow parse holds neither an async worker (so `/healthz` and every other request
/// keep moving) nor the client. Past the budget the parse finishes in the background,
/// its result dropped.
pub(crate) async fn parse_off_workers<T: Send + 'static>(
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
pub(crate) fn file_schedule(plan: &Plan) -> Result<Option<PlanFileSchedule>, PlanFinding> {
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

pub(crate) fn summary(
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
pub(crate) struct Checked {
    pub(crate) plan: Plan,
    pub(crate) summary: PlanFileSummary,
    pub(crate) warnings: Vec<PlanFinding>,
}

pub(crate) async fn check_plan(
    state: &AppState,
    org: &str,
    body: &PlanSource,
) -> Result<Checked, ApiError> {
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
    // A plan fed by a stack names one of its org, refused here with the file's line; the
    // store checks the edge again in the save's own transaction, over the org's dependency
    // graph, like a stack's `depends_on` (the stack exists, no cycle closes).
    if let Some(on) = &plan.on_stack_change {
        if state.store.get_stack(org, &on.stack).await?.is_none() {
            return Err(invalid(
                "source",
                format!(
                    "{}: on_stack_change.stack: org {org:?} has no stack {:?}",
                    plan.locations.locate("on_stack_change.stack"),
                    on.stack
                ),
            ));
        }
    }
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

pub(crate) fn plan_wire(
    p: PlanRecord,
    summary: PlanFileSummary,
    warnings: Vec<PlanFinding>,
) -> PlanInfo {
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

// ---- The org's hosts as the engine's inventory ----

/// The org's hosts and environments as the engine's inventory (paths as stored: a `~`
/// is the runner's home, not expanded here), each host's bastion chain resolved from
/// the stored names. The store keeps the chains whole; one that does not resolve all the
/// same (an unknown name, a cycle) is an internal error, named.
pub fn inventory(
    hosts: &[HostRecord],
    environments: &[EnvironmentRecord],
) -> Result<Inventory, ApiError> {
    let jumps: Vec<Option<String>> = hosts.iter().map(|h| h.proxy_jump.clone()).collect();
    let unresolved = Inventory {
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
                proxy_jump: None,
            })
            .collect(),
    };
    let hosts = engine::resolve_jumps(unresolved.hosts, &jumps, |i, why| {
        ApiError::Internal(format!(
            "the org's hosts do not form an inventory: host {:?}: {why}",
            hosts[i].name
        ))
    })?;
    Ok(Inventory {
        environments: unresolved.environments,
        hosts,
    })
}

/// The org's current inventory, read from the store.
pub async fn org_inventory(state: &AppState, org: &str) -> Result<Inventory, ApiError> {
    let hosts = state.store.list_hosts(org).await?;
    let environments = state.store.list_environments(org).await?;
    inventory(&hosts, &environments)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::path::Path;

    use bosun_plans::model::ModelError;

    use axum::http::StatusCode;

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
