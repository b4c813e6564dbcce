//! Stacks: their rows, the dependency graph's checks, and the reads of a stack other
//! domains share.

use bosun_core::graph::{Edge, Node};

use super::audit::append_audit;
use super::*;

pub(super) const STACK_COLUMNS: &str =
    "org_id, id, name, repository, branch, path, watch_paths, engine,
    engine_binary, engine_version, tier, autodeploy, environment, variables, depends_on,
    drift_detection, runner_pool, created_at, updated_at, aws, pr_feedback, labels";

/// Raw stack columns in `STACK_COLUMNS` order.
pub(super) struct StackRow {
    org: String,
    id: String,
    name: String,
    repository: String,
    branch: String,
    path: String,
    watch_paths: String,
    engine: String,
    engine_binary: Option<String>,
    engine_version: Option<String>,
    tier: String,
    autodeploy: bool,
    environment: Option<String>,
    variables: String,
    depends_on: String,
    drift_detection: Option<String>,
    runner_pool: String,
    created_at: i64,
    updated_at: i64,
    aws: Option<String>,
    pr_feedback: Option<String>,
    labels: String,
}

pub(super) fn stack_row(r: &Row<'_>) -> db::Result<StackRow> {
    Ok(StackRow {
        org: r.get(0)?,
        id: r.get(1)?,
        name: r.get(2)?,
        repository: r.get(3)?,
        branch: r.get(4)?,
        path: r.get(5)?,
        watch_paths: r.get(6)?,
        engine: r.get(7)?,
        engine_binary: r.get(8)?,
        engine_version: r.get(9)?,
        tier: r.get(10)?,
        autodeploy: r.get(11)?,
        environment: r.get(12)?,
        variables: r.get(13)?,
        depends_on: r.get(14)?,
        drift_detection: r.get(15)?,
        runner_pool: r.get(16)?,
        created_at: r.get(17)?,
        updated_at: r.get(18)?,
        aws: r.get(19)?,
        pr_feedback: r.get(20)?,
        labels: r.get(21)?,
    })
}

/// A stored JSON object of strings (other values left out).
fn string_map(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// The entries of a stored `depends_on` column, as written by [`stack_columns`].
pub(super) fn dependency_inputs(column: &Value) -> Vec<DependencyInput> {
    column
        .as_array()
        .map(|a| {
            a.iter()
                .map(|d| DependencyInput {
                    stack: d["stack"].as_str().unwrap_or_default().to_string(),
                    outputs: string_map(&d["outputs"]),
                    trigger_always: d["trigger_always"].as_bool().unwrap_or(false),
                })
                .collect()
        })
        .unwrap_or_default()
}

pub(super) fn stack_record(r: StackRow) -> Result<StackRecord> {
    let json = |col: &str, s: &str| -> Result<Value> {
        serde_json::from_str(s).map_err(|e| corrupt(col, e))
    };
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let depends_on = dependency_inputs(&json("depends_on", &r.depends_on)?);
    let drift_detection = r
        .drift_detection
        .as_deref()
        .map(|s| json("drift_detection", s))
        .transpose()?
        .map(|d| DriftInput {
            schedule: d["schedule"].as_str().unwrap_or_default().to_string(),
            reconcile: d["reconcile"].as_bool().unwrap_or(false),
            timezone: d["timezone"].as_str().map(str::to_string),
        });
    let aws = r
        .aws
        .as_deref()
        .map(|s| json("aws", s))
        .transpose()?
        .map(|a| AwsInput {
            plan_role_arn: a["plan_role_arn"].as_str().unwrap_or_default().to_string(),
            apply_role_arn: a["apply_role_arn"].as_str().map(str::to_string),
            audience: a["audience"].as_str().map(str::to_string),
        });
    let input = StackInput {
        id: r.id,
        name: Some(r.name),
        repository: r.repository,
        branch: Some(r.branch),
        path: Some(r.path),
        watch_paths: strings(&json("watch_paths", &r.watch_paths)?),
        engine: Some(r.engine),
        engine_binary: r.engine_binary,
        engine_version: r.engine_version,
        tier: Some(r.tier),
        autodeploy: r.autodeploy,
        environment: r.environment,
        variables: string_map(&json("variables", &r.variables)?),
        depends_on,
        drift_detection,
        runner_pool: Some(r.runner_pool),
        aws,
        pr_feedback: r.pr_feedback,
        labels: strings(&json("labels", &r.labels)?),
    };
    // Loading re-validates, so a hand-edited row can never enter the server as valid.
    let spec = StackSpec::from_input(input).map_err(|e| corrupt("stack", e))?;
    Ok(StackRecord {
        org: r.org,
        spec,
        created_at: from_millis(r.created_at)?,
        updated_at: from_millis(r.updated_at)?,
    })
}

/// Checks a stack's dependencies (each upstream exists, no cycle in the org's graph) and
/// writes their index; `fresh` for a stack created in this transaction, which has none to
/// replace.
pub(super) fn check_and_write_dependencies(
    tx: &Transaction<'_>,
    org: &str,
    spec: &StackSpec,
    fresh: bool,
) -> Result<()> {
    let id = spec.id.as_str();
    let edges: Vec<Edge> = spec
        .depends_on
        .iter()
        .map(|d| Edge::depends_on(id, d))
        .collect();
    graph::check_upstreams(tx, org, &Node::stack(id), &edges, "depends_on")?;
    if !fresh {
        tx.prepare_cached("DELETE FROM stack_dependencies WHERE org_id = ?1 AND stack_id = ?2")?
            .execute(params![org, id])?;
    }
    let mut insert = tx.prepare_cached(
        "INSERT INTO stack_dependencies (org_id, stack_id, upstream) VALUES (?1, ?2, ?3)",
    )?;
    for dep in &spec.depends_on {
        insert.execute(params![org, id, dep.stack.as_str()])?;
    }
    Ok(())
}

pub(super) struct StackColumns {
    watch_paths: String,
    variables: String,
    depends_on: String,
    drift_detection: Option<String>,
    aws: Option<String>,
    labels: String,
}

pub(super) fn stack_columns(spec: &StackSpec) -> StackColumns {
    StackColumns {
        watch_paths: json!(spec
            .watch_paths
            .iter()
            .map(|p| p.as_str())
            .collect::<Vec<_>>())
        .to_string(),
        variables: json!(spec.variables).to_string(),
        depends_on: Value::Array(
            spec.depends_on
                .iter()
                .map(|d| {
                    json!({
                        "stack": d.stack.as_str(),
                        "outputs": d.outputs,
                        "trigger_always": d.trigger_always,
                    })
                })
                .collect(),
        )
        .to_string(),
        drift_detection: spec.drift_detection.as_ref().map(|d| {
            json!({"schedule": d.schedule, "reconcile": d.reconcile, "timezone": d.timezone})
                .to_string()
        }),
        aws: spec.aws.as_ref().map(|a| {
            json!({
                "plan_role_arn": a.plan_role_arn,
                "apply_role_arn": a.apply_role_arn,
                "audience": a.audience,
            })
            .to_string()
        }),
        labels: json!(spec.labels.iter().map(|l| l.as_str()).collect::<Vec<_>>()).to_string(),
    }
}

/// Inserts a stack's row (`fresh`: a unique violation when the id is taken), or replaces
/// every column but `created_at` of an existing one.
pub(super) fn write_stack_row(
    tx: &Transaction<'_>,
    org: &str,
    spec: &StackSpec,
    created_at: i64,
    updated_at: i64,
    fresh: bool,
) -> db::Result<usize> {
    let c = stack_columns(spec);
    let insert = format!(
        "INSERT INTO stacks ({STACK_COLUMNS}, repo_key)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                 ?18, ?19, ?20, ?21, ?22, ?23)"
    );
    let sql = if fresh {
        insert
    } else {
        format!(
            "{insert}
         ON CONFLICT (org_id, id) DO UPDATE SET
            name = excluded.name, repository = excluded.repository, branch = excluded.branch,
            repo_key = excluded.repo_key,
            path = excluded.path, watch_paths = excluded.watch_paths, engine = excluded.engine,
            engine_binary = excluded.engine_binary, engine_version = excluded.engine_version,
            tier = excluded.tier, autodeploy = excluded.autodeploy,
            environment = excluded.environment, variables = excluded.variables,
            depends_on = excluded.depends_on, drift_detection = excluded.drift_detection,
            runner_pool = excluded.runner_pool, aws = excluded.aws,
            pr_feedback = excluded.pr_feedback, labels = excluded.labels,
            updated_at = excluded.updated_at"
        )
    };
    tx.prepare_cached(&sql)?.execute(params![
        org,
        spec.id.as_str(),
        spec.name,
        spec.repository.to_string(),
        spec.branch,
        spec.path.as_str(),
        c.watch_paths,
        spec.engine.kind.as_str(),
        spec.engine.binary,
        spec.engine.version,
        spec.tier.as_str(),
        spec.autodeploy,
        spec.environment.as_ref().map(|e| e.as_str()),
        c.variables,
        c.depends_on,
        c.drift_detection,
        spec.runner_pool.to_string(),
        created_at,
        updated_at,
        c.aws,
        spec.pr_feedback.map(|f| f.as_str()),
        c.labels,
        spec.repository.key(),
    ])
}

/// Whether the stack's tracked runs apply without a confirmation: its `autodeploy`, unless
/// its environment requires approval — then they wait in `unconfirmed` for the approvals
/// inbox (`sql/approvals.rs`).
pub(super) fn stack_autodeploy(conn: &Connection, org: &str, stack: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT s.autodeploy <> 0 AND NOT EXISTS (SELECT 1 FROM environments e
                WHERE e.org_id = s.org_id AND e.id = s.environment AND e.requires_approval = 1)
             FROM stacks s WHERE s.org_id = ?1 AND s.id = ?2",
        )?
        .query_row(params![org, stack], |r| r.get(0))
        .optional()?
        .unwrap_or(false))
}

pub(super) fn query_stacks(
    conn: &Connection,
    sql: &str,
    args: &[&dyn db::ToSql],
) -> Result<Vec<StackRecord>> {
    query_decoded(conn, sql, args, stack_row, stack_record)
}

pub(super) fn create(
    tx: &Transaction<'_>,
    org: &str,
    spec: &StackSpec,
    audit: &Audit,
) -> Result<StackRecord> {
    // The insert itself tells a taken id (no read first: one statement, and no predicate
    // lock on the org's ids for concurrent creates to conflict on).
    let now = millis(Utc::now());
    write_stack_row(tx, org, spec, now, now, true).map_err(|e| {
        if is_unique_violation(&e) {
            StoreError::AlreadyExists(format!("stack {:?}", spec.id.as_str()))
        } else if is_foreign_key_violation(&e) {
            StoreError::NotFound(format!("org {org:?}"))
        } else {
            e.into()
        }
    })?;
    check_and_write_dependencies(tx, org, spec, true)?;
    if spec.drift_detection.is_some() {
        super::drift::settings_saved(tx, org, spec, now)?;
    }
    append_audit(tx, audit)?;
    Ok(StackRecord {
        org: org.to_string(),
        spec: spec.clone(),
        created_at: from_millis(now)?,
        updated_at: from_millis(now)?,
    })
}

pub(super) fn get(c: &Connection, org: &str, id: &str) -> Result<Option<StackRecord>> {
    let row = c
        .prepare_cached(&format!(
            "SELECT {STACK_COLUMNS} FROM stacks WHERE org_id = ?1 AND id = ?2"
        ))?
        .query_row(params![org, id], stack_row)
        .optional()?;
    row.map(stack_record).transpose()
}

pub(super) fn list(c: &Connection, org: &str, after: &str, limit: u32) -> Result<Vec<StackRecord>> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT {STACK_COLUMNS} FROM stacks WHERE org_id = ?1 AND id > ?2
         ORDER BY id LIMIT ?3"
    ))?;
    let rows = stmt.query_map(params![org, after, limit], stack_row)?;
    let mut out = Vec::with_capacity(limit as usize);
    for row in rows {
        out.push(stack_record(row?)?);
    }
    Ok(out)
}

/// The [`StackContext`] of `stacks` (of `org`): their org's feedback setting, one binding
/// or polled head per distinct repository, and the drift schedules of those with drift
/// detection, read from the range of their ids when there are several.
pub(super) fn context(c: &Connection, org: &str, stacks: &[StackRecord]) -> Result<StackContext> {
    use bosun_core::stack::Repository;
    let mut out = StackContext {
        org_pr_feedback: super::identity::get_org(c, org)?.map(|o| o.pr_feedback),
        ..Default::default()
    };
    let mut github = BTreeMap::new();
    let mut polled = std::collections::BTreeSet::new();
    for s in stacks {
        match &s.spec.repository {
            Repository::GitHub { .. } => {
                if let Some(full) = s.spec.repository.github_full_name() {
                    github.insert(s.spec.repository.key(), full);
                }
            }
            Repository::Git(_) => {
                polled.insert((s.spec.repository.key(), s.spec.branch.clone()));
            }
        }
    }
    for (key, full) in github {
        if let Some(binding) = super::vcs::binding(c, &full)? {
            let refusals = super::feedback::refusals(c, &binding.repository)?;
            out.github.insert(key, (binding, refusals));
        }
    }
    for (repository, branch) in polled {
        if let Some(head) = super::vcs::poll_head(c, &repository, &branch)? {
            out.poll_heads.insert((repository, branch), head);
        }
    }
    let checked: std::collections::BTreeSet<&str> = stacks
        .iter()
        .filter(|s| s.spec.drift_detection.is_some())
        .map(|s| s.spec.id.as_str())
        .collect();
    let schedules = match (checked.first(), checked.last()) {
        (Some(only), _) if checked.len() == 1 => super::drift::schedules(c, Some(org), Some(only))?,
        (Some(first), Some(last)) => {
            super::drift::schedules_in(c, Some(org), None, Some(first), Some(last))?
        }
        _ => Vec::new(),
    };
    out.drift = schedules
        .into_iter()
        .filter(|r| checked.contains(r.stack.as_str()))
        .map(|r| (r.stack.clone(), r))
        .collect();
    Ok(out)
}

pub(super) fn update(
    tx: &Transaction<'_>,
    org: &str,
    spec: &StackSpec,
    audit: &Audit,
) -> Result<StackRecord> {
    let created: Option<i64> = tx
        .prepare_cached("SELECT created_at FROM stacks WHERE org_id = ?1 AND id = ?2")?
        .query_row(params![org, spec.id.as_str()], |r| r.get(0))
        .optional()?;
    let Some(created) = created else {
        return Err(StoreError::NotFound(format!(
            "stack {:?}",
            spec.id.as_str()
        )));
    };
    check_and_write_dependencies(tx, org, spec, false)?;
    let now = millis(Utc::now()).max(created);
    write_stack_row(tx, org, spec, created, now, false)?;
    super::drift::settings_saved(tx, org, spec, now)?;
    super::approvals::regate_stack(tx, org, spec.id.as_str())?;
    super::runs::repool_stack(tx, org, spec.id.as_str(), &spec.runner_pool.to_string())?;
    append_audit(tx, audit)?;
    Ok(StackRecord {
        org: org.to_string(),
        spec: spec.clone(),
        created_at: from_millis(created)?,
        updated_at: from_millis(now)?,
    })
}

pub(super) fn delete(
    tx: &Transaction<'_>,
    org: &str,
    id: &str,
    delete_state: bool,
    audit: &Audit,
) -> Result<()> {
    // Nothing may hang from it: no stack depending on it, no plan it feeds.
    let dependents = graph::dependents(tx, org, &Node::stack(id))?;
    if !dependents.is_empty() {
        return Err(StoreError::HasDependents {
            stack: id.to_string(),
            dependents,
        });
    }
    let open: Vec<String> = {
        let mut stmt = tx.prepare_cached(&format!(
            "SELECT id FROM runs WHERE org_id = ?1 AND stack_id = ?2
             AND state NOT IN {TERMINAL_STATES} ORDER BY created_at"
        ))?;
        let rows = stmt.query_map(params![org, id], |r| r.get(0))?;
        rows.collect::<db::Result<_>>()?
    };
    if !open.is_empty() {
        return Err(StoreError::HasOpenRuns {
            stack: id.to_string(),
            runs: open,
        });
    }
    let versions: i64 = tx
        .prepare_cached("SELECT COUNT(*) FROM state_versions WHERE org_id = ?1 AND stack_id = ?2")?
        .query_row(params![org, id], |r| r.get(0))?;
    if versions > 0 && !delete_state {
        return Err(StoreError::HasState {
            stack: id.to_string(),
            versions,
        });
    }
    let deleted = tx.execute(
        "DELETE FROM stacks WHERE org_id = ?1 AND id = ?2",
        params![org, id],
    )?;
    if deleted == 0 {
        return Err(StoreError::NotFound(format!("stack {id:?}")));
    }
    append_audit(tx, audit)
}
