//! Stacks as people read them: a page of the org's stacks and one stack, each with how
//! its repository is reached and its drift status — the work behind the API's handlers
//! and the console's stack pages, and the wire form the stack writes answer with.

use bosun_api::{Page, Stack};
use bosun_store::StackRecord;

use crate::app::AppState;
use crate::error::ApiError;
use crate::paging::{next_cursor, PageQuery};

/// A page of the org's stacks, ordered by id; the cursor is the last stack's id.
pub async fn list(state: &AppState, org: &str, q: &PageQuery) -> Result<Page<Stack>, ApiError> {
    let limit = q.limit()?;
    let records = state
        .store
        .list_stacks(org, q.cursor.as_deref(), limit)
        .await?;
    let next_cursor = next_cursor(&records, limit, |r| r.spec.id.to_string());
    // One binding lookup per repository, not per stack.
    let mut seen: std::collections::HashMap<String, bosun_api::StackConnection> =
        std::collections::HashMap::new();
    // The drift status of this page's stacks only (ids first..=last of the page).
    let mut drift = match (records.first(), records.last()) {
        (Some(first), Some(last)) => {
            crate::drift::page_status(state, org, first.spec.id.as_str(), last.spec.id.as_str())
                .await?
        }
        _ => Default::default(),
    };
    let mut items = Vec::with_capacity(records.len());
    for r in records {
        let drift_status = drift.remove(r.spec.id.as_str());
        let key = r.spec.repository.key();
        let c = match seen.get(&key) {
            Some(c) => c.clone(),
            None => {
                let c = connection(state, &r.spec).await?;
                seen.insert(key, c.clone());
                c
            }
        };
        items.push(Stack {
            drift_status,
            ..to_wire(r, c)
        });
    }
    Ok(Page { items, next_cursor })
}

/// One stack of the org.
pub async fn show(state: &AppState, org: &str, id: &str) -> Result<Stack, ApiError> {
    let record = load(state, org, id).await?;
    to_wire_with_connection(state, record).await
}

/// Loads a stack of the org (a stack of another org is "not found").
pub(crate) async fn load(state: &AppState, org: &str, id: &str) -> Result<StackRecord, ApiError> {
    state
        .store
        .get_stack(org, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("stack {id:?} in org {org:?}")))
}

/// How the stack's repository is reached and whether it is connected.
pub async fn connection(
    state: &AppState,
    spec: &bosun_core::stack::StackSpec,
) -> Result<bosun_api::StackConnection, ApiError> {
    use bosun_core::stack::Repository;
    Ok(match &spec.repository {
        Repository::Git(_) => {
            let interval = state.config.vcs.poll_interval;
            let detail = if interval.is_zero() {
                "plain git remote; polling is off on this server".to_string()
            } else {
                let seen = state
                    .store
                    .poll_head(&spec.repository.key(), &spec.branch)
                    .await?;
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
            match state.store.github_binding(&full).await? {
                Some(b) if !b.suspended => bosun_api::StackConnection {
                    kind: "github".into(),
                    connected: true,
                    installation: Some(b.installation),
                    detail: format!("connected through GitHub App installation {} ({})", b.installation, b.account),
                },
                Some(b) => bosun_api::StackConnection {
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
    })
}

/// The wire form of a stack, with its connection looked up.
pub async fn to_wire_with_connection(state: &AppState, r: StackRecord) -> Result<Stack, ApiError> {
    let c = connection(state, &r.spec).await?;
    let drift = crate::drift::stack_status(state, &r.org, r.spec.id.as_str()).await?;
    Ok(Stack {
        drift_status: drift,
        ..to_wire(r, c)
    })
}

pub fn to_wire(r: StackRecord, connection: bosun_api::StackConnection) -> Stack {
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
        connection,
        drift_status: None,
        created_at: r.created_at,
        updated_at: r.updated_at,
    }
}
