//! The rows and rules most store calls share, one source compiled into both backends
//! (reading each one's types and dialect through `super::db`): the audit log, tokens and
//! users, stacks and their dependency check, state versions and locks, runs and their
//! state machine, runners, VCS bindings and deliveries, secrets and signing keys; and the
//! small helpers every module uses (timestamps as milliseconds, the terminal-state list).

use super::*;

/// The terminal run states (`RunState::is_terminal`) as an SQL list, for `state IN …`.
pub(super) const TERMINAL_STATES: &str =
    "('finished', 'failed', 'discarded', 'canceled', 'interrupted', 'force_failed', 'skipped')";

pub(crate) fn closed() -> StoreError {
    StoreError::Backend("the store is closed".into())
}

pub(super) fn millis(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

pub(super) fn from_millis(ms: i64) -> Result<DateTime<Utc>> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .ok_or_else(|| StoreError::Corrupt(format!("timestamp {ms} out of range")))
}

pub(super) fn opt_from_millis(ms: Option<i64>) -> Result<Option<DateTime<Utc>>> {
    ms.map(from_millis).transpose()
}

pub(super) fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}"))
}

pub(super) fn append_audit(tx: &Transaction<'_>, audit: &Audit) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO audit_log (at, org_id, actor, token_id, action, target, detail)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        millis(Utc::now()),
        audit.org,
        audit.actor,
        audit.token_id,
        audit.action,
        audit.target,
        audit.detail.to_string(),
    ])?;
    Ok(())
}

pub(super) fn insert_token(tx: &Transaction<'_>, t: &NewToken) -> Result<i64> {
    let now = millis(Utc::now());
    tx.prepare_cached(
        "INSERT INTO tokens (id, kind, secret_hash, description, user_id, org_id, pool, run_id,
                             stack_id, created_at, expires_at, read_stacks)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    )?
    .execute(params![
        t.id,
        t.kind.as_str(),
        t.secret_hash,
        t.description,
        t.user,
        t.org,
        t.pool,
        t.run,
        t.stack,
        now,
        t.expires_at.map(millis),
        json!(t.read_stacks).to_string(),
    ])
    .map_err(|e| exists_or(e, || format!("token {}", t.id)))?;
    Ok(now)
}

pub(super) const TOKEN_COLUMNS: &str =
    "id, kind, description, user_id, org_id, pool, run_id, stack_id,
    created_at, expires_at, revoked_at, read_stacks";

/// Raw token columns, converted outside the row callback so errors stay ours.
pub(super) type TokenRow = (
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    i64,
    Option<i64>,
    Option<i64>,
    String,
);

/// A row decodes into a tuple of its columns, in `SELECT` order.
pub(super) fn token_row(r: &Row<'_>) -> db::Result<TokenRow> {
    TokenRow::try_from(r)
}

pub(super) fn token_record(t: TokenRow) -> Result<TokenRecord> {
    Ok(TokenRecord {
        id: t.0,
        kind: TokenKind::from_str(&t.1).map_err(|e| corrupt("token kind", e))?,
        description: t.2,
        user: t.3,
        org: t.4,
        pool: t.5,
        run: t.6,
        stack: t.7,
        read_stacks: serde_json::from_str(&t.11).map_err(|e| corrupt("read_stacks", e))?,
        created_at: from_millis(t.8)?,
        expires_at: opt_from_millis(t.9)?,
        revoked_at: opt_from_millis(t.10)?,
    })
}

/// Runs a query and decodes each row in two steps: the raw columns (`row`), then the
/// validated record (`record`), whose errors name the corrupt field.
pub(super) fn query_decoded<R, T>(
    conn: &Connection,
    sql: &str,
    args: &[&dyn db::ToSql],
    row: fn(&Row<'_>) -> db::Result<R>,
    record: fn(R) -> Result<T>,
) -> Result<Vec<T>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map(args, row)?;
    let mut out = Vec::new();
    for r in rows {
        out.push(record(r?)?);
    }
    Ok(out)
}

pub(super) fn query_tokens(
    conn: &Connection,
    sql: &str,
    args: &[&dyn db::ToSql],
) -> Result<Vec<TokenRecord>> {
    query_decoded(conn, sql, args, token_row, token_record)
}

pub(super) fn roles_of(conn: &Connection, user: &str) -> Result<BTreeMap<String, Role>> {
    let mut stmt =
        conn.prepare_cached("SELECT org_id, role FROM memberships WHERE user_id = ?1")?;
    let rows = stmt.query_map([user], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
    })?;
    let mut out = BTreeMap::new();
    for row in rows {
        let (org, role) = row?;
        out.insert(org, role.parse().map_err(|e| corrupt("role", e))?);
    }
    Ok(out)
}

pub(super) fn get_user(conn: &Connection, id: &str) -> Result<Option<UserRecord>> {
    let row = conn
        .prepare_cached("SELECT id, server_admin, created_at FROM users WHERE id = ?1")?
        .query_row([id], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, bool>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })
        .optional()?;
    row.map(|(id, server_admin, created)| {
        Ok(UserRecord {
            id,
            server_admin,
            created_at: from_millis(created)?,
        })
    })
    .transpose()
}

pub(crate) fn exists(conn: &Connection, sql: &str, args: &[&dyn db::ToSql]) -> Result<bool> {
    Ok(conn
        .prepare_cached(sql)?
        .query_row(args, |_| Ok(()))
        .optional()?
        .is_some())
}

pub(super) const STACK_COLUMNS: &str =
    "org_id, id, name, repository, branch, path, watch_paths, engine,
    engine_binary, engine_version, tier, autodeploy, environment, variables, depends_on,
    drift_detection, runner_pool, created_at, updated_at, aws";

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
    })
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
    let string_map = |v: &Value| -> BTreeMap<String, String> {
        v.as_object()
            .map(|o| {
                o.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default()
    };
    let depends_on = json("depends_on", &r.depends_on)?
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
        .unwrap_or_default();
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

/// Checks upstreams exist and that the org's graph with `spec`'s edges stays acyclic,
/// then writes the edge table. Runs inside the caller's write transaction.
pub(super) fn check_and_write_dependencies(
    tx: &Transaction<'_>,
    org: &str,
    spec: &StackSpec,
) -> Result<()> {
    let id = spec.id.as_str();
    for dep in &spec.depends_on {
        if !exists(
            tx,
            "SELECT 1 FROM stacks WHERE org_id = ?1 AND id = ?2",
            params![org, dep.stack.as_str()],
        )? {
            return Err(StoreError::UnknownUpstream(dep.stack.to_string()));
        }
    }
    let mut graph: BTreeMap<String, Vec<String>> = BTreeMap::new();
    {
        let mut stmt = tx.prepare_cached(
            "SELECT stack_id, upstream FROM stack_dependencies WHERE org_id = ?1",
        )?;
        let rows = stmt.query_map([org], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })?;
        for row in rows {
            let (from, up) = row?;
            if from != id {
                graph.entry(from).or_default().push(up);
            }
        }
    }
    graph.insert(
        id.to_string(),
        spec.depends_on
            .iter()
            .map(|d| d.stack.to_string())
            .collect(),
    );
    if let Some(cycle) = find_cycle(&graph) {
        return Err(StoreError::DependencyCycle(cycle));
    }
    tx.prepare_cached("DELETE FROM stack_dependencies WHERE org_id = ?1 AND stack_id = ?2")?
        .execute(params![org, id])?;
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
    }
}

/// Inserts a stack's row, or replaces every column but `created_at` of an existing one.
pub(super) fn write_stack_row(
    tx: &Transaction<'_>,
    org: &str,
    spec: &StackSpec,
    created_at: i64,
    updated_at: i64,
) -> db::Result<usize> {
    let c = stack_columns(spec);
    tx.prepare_cached(&format!(
        "INSERT INTO stacks ({STACK_COLUMNS}, repo_key)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                 ?18, ?19, ?20, ?21)
         ON CONFLICT (org_id, id) DO UPDATE SET
            name = excluded.name, repository = excluded.repository, branch = excluded.branch,
            repo_key = excluded.repo_key,
            path = excluded.path, watch_paths = excluded.watch_paths, engine = excluded.engine,
            engine_binary = excluded.engine_binary, engine_version = excluded.engine_version,
            tier = excluded.tier, autodeploy = excluded.autodeploy,
            environment = excluded.environment, variables = excluded.variables,
            depends_on = excluded.depends_on, drift_detection = excluded.drift_detection,
            runner_pool = excluded.runner_pool, aws = excluded.aws,
            updated_at = excluded.updated_at"
    ))?
    .execute(params![
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
        spec.repository.key(),
    ])
}

pub(super) const VERSION_COLUMNS: &str =
    "v.org_id, v.stack_id, v.version, v.serial, v.lineage, v.checksum,
    v.size, v.writer_kind, v.writer_id, v.token_id, v.created_at, v.late_write, v.forced,
    v.outputs, (h.current_version IS NOT DISTINCT FROM v.version), v.recovery_reason";

pub(super) type VersionRow = (
    String,
    String,
    i64,
    i64,
    String,
    String,
    i64,
    String,
    String,
    Option<String>,
    i64,
    bool,
    bool,
    String,
    bool,
    Option<String>,
);

/// A row decodes into a tuple of its columns, in `SELECT` order.
pub(super) fn version_row(r: &Row<'_>) -> db::Result<VersionRow> {
    VersionRow::try_from(r)
}

/// A state version's `outputs` column: name → value and sensitivity.
pub(super) fn decode_outputs(raw: &str) -> Result<BTreeMap<String, Output>> {
    let outputs: Value = serde_json::from_str(raw).map_err(|e| corrupt("outputs", e))?;
    Ok(outputs
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, o)| {
                    (
                        k.clone(),
                        Output {
                            value: o.get("value").cloned().unwrap_or(Value::Null),
                            sensitive: o.get("sensitive").and_then(Value::as_bool).unwrap_or(false),
                        },
                    )
                })
                .collect()
        })
        .unwrap_or_default())
}

pub(super) fn version_meta(v: VersionRow) -> Result<StateVersionMeta> {
    let outputs = decode_outputs(&v.13)?;
    Ok(StateVersionMeta {
        org: v.0,
        stack: v.1,
        version: v.2,
        serial: u64::try_from(v.3).map_err(|e| corrupt("serial", e))?,
        lineage: v.4,
        checksum: v.5,
        size: u64::try_from(v.6).map_err(|e| corrupt("size", e))?,
        writer: Writer::from_parts(&v.7, v.8).ok_or_else(|| corrupt("writer_kind", &v.7))?,
        token_id: v.9,
        created_at: from_millis(v.10)?,
        late_write: v.11,
        forced: v.12,
        current: v.14,
        outputs,
        recovery_reason: v.15,
    })
}

pub(super) fn read_version(
    conn: &Connection,
    org: &str,
    stack: &str,
    version: Option<i64>,
) -> Result<Option<(StateVersionMeta, Vec<u8>)>> {
    let sql = format!(
        "SELECT {VERSION_COLUMNS}, v.body FROM state_versions v
         LEFT JOIN state_heads h ON h.org_id = v.org_id AND h.stack_id = v.stack_id
         WHERE v.org_id = ?1 AND v.stack_id = ?2
           AND v.version = COALESCE(?3, h.current_version)"
    );
    let row = conn
        .prepare_cached(&sql)?
        .query_row(params![org, stack, version], |r| {
            Ok((version_row(r)?, r.get::<_, Vec<u8>>(16)?))
        })
        .optional()?;
    row.map(|(meta, body)| Ok((version_meta(meta)?, body)))
        .transpose()
}

/// A lock's columns of `state_heads`, read by [`lock_row`].
pub(super) const LOCK_COLUMNS: &str =
    "lock_id, lock_operation, lock_info, lock_who, lock_version, lock_created,
     lock_path, lock_holder_kind, lock_holder_id, lock_acquired_at";

type LockRow = (
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    i64,
);

/// The [`LOCK_COLUMNS`] starting at column `at`.
pub(super) fn lock_row(r: &Row<'_>, at: usize) -> db::Result<LockRow> {
    Ok((
        r.get(at)?,
        r.get(at + 1)?,
        r.get(at + 2)?,
        r.get(at + 3)?,
        r.get(at + 4)?,
        r.get(at + 5)?,
        r.get(at + 6)?,
        r.get(at + 7)?,
        r.get(at + 8)?,
        r.get(at + 9)?,
    ))
}

pub(super) fn lock_record(l: LockRow) -> Result<Lock> {
    Ok(Lock {
        id: l.0,
        operation: l.1,
        info: l.2,
        who: l.3,
        version: l.4,
        created: l.5,
        path: l.6,
        holder: Writer::from_parts(&l.7, l.8).ok_or_else(|| corrupt("lock_holder_kind", &l.7))?,
        acquired_at: from_millis(l.9)?,
    })
}

pub(super) fn read_lock(conn: &Connection, org: &str, stack: &str) -> Result<Option<Lock>> {
    let row = conn
        .prepare_cached(&format!(
            "SELECT {LOCK_COLUMNS}
             FROM state_heads WHERE org_id = ?1 AND stack_id = ?2 AND lock_id IS NOT NULL"
        ))?
        .query_row(params![org, stack], |r| lock_row(r, 0))
        .optional()?;
    row.map(lock_record).transpose()
}

pub(super) fn read_head(conn: &Connection, org: &str, stack: &str) -> Result<StateHead> {
    Ok(StateHead {
        current: read_version(conn, org, stack, None)?.map(|(m, _)| m),
        lock: read_lock(conn, org, stack)?,
    })
}

pub(super) fn ensure_stack(tx: &Transaction<'_>, org: &str, stack: &str) -> Result<()> {
    if !exists(
        tx,
        "SELECT 1 FROM stacks WHERE org_id = ?1 AND id = ?2",
        params![org, stack],
    )? {
        return Err(StoreError::NotFound(format!(
            "stack {stack:?} in org {org:?}"
        )));
    }
    tx.prepare_cached("INSERT OR IGNORE INTO state_heads (org_id, stack_id) VALUES (?1, ?2)")?
        .execute(params![org, stack])?;
    Ok(())
}

pub(super) fn outputs_json(doc: &StateDoc) -> String {
    let map: serde_json::Map<String, Value> = doc
        .outputs
        .iter()
        .map(|(k, o)| {
            (
                k.clone(),
                json!({"value": o.value, "sensitive": o.sensitive}),
            )
        })
        .collect();
    Value::Object(map).to_string()
}

pub(super) fn sha256_hex(body: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(body))
}

pub(super) const RUN_COLUMNS: &str =
    "id, org_id, stack_id, kind, trigger, state, phase, needs_lease, leased,
    started, cancel_requested, reason, triggered_by, commit_sha, branch, retry_of, plan_summary,
    blocked_by, late_write, runner_id, fencing, last_heartbeat, phase_started_at, created_at,
    updated_at, pull_request, delivery_id, upstream_run, held, consumed";

/// Raw run columns in `RUN_COLUMNS` order.
pub(super) struct RunRow {
    id: String,
    org: String,
    stack: String,
    kind: String,
    trigger: String,
    state: String,
    phase: String,
    needs_lease: bool,
    leased: bool,
    started: bool,
    cancel_requested: bool,
    reason: Option<String>,
    triggered_by: String,
    commit: Option<String>,
    branch: String,
    retry_of: Option<String>,
    plan_summary: Option<String>,
    blocked_by: Option<String>,
    late_write: bool,
    runner_id: Option<String>,
    fencing: i64,
    last_heartbeat: Option<i64>,
    phase_started_at: Option<i64>,
    created_at: i64,
    updated_at: i64,
    pull_request: Option<i64>,
    delivery: Option<i64>,
    upstream_run: Option<String>,
    held: bool,
    consumed: Option<String>,
}

pub(super) fn run_row(r: &Row<'_>) -> db::Result<RunRow> {
    Ok(RunRow {
        id: r.get(0)?,
        org: r.get(1)?,
        stack: r.get(2)?,
        kind: r.get(3)?,
        trigger: r.get(4)?,
        state: r.get(5)?,
        phase: r.get(6)?,
        needs_lease: r.get(7)?,
        leased: r.get(8)?,
        started: r.get(9)?,
        cancel_requested: r.get(10)?,
        reason: r.get(11)?,
        triggered_by: r.get(12)?,
        commit: r.get(13)?,
        branch: r.get(14)?,
        retry_of: r.get(15)?,
        plan_summary: r.get(16)?,
        blocked_by: r.get(17)?,
        late_write: r.get(18)?,
        runner_id: r.get(19)?,
        fencing: r.get(20)?,
        last_heartbeat: r.get(21)?,
        phase_started_at: r.get(22)?,
        created_at: r.get(23)?,
        updated_at: r.get(24)?,
        pull_request: r.get(25)?,
        delivery: r.get(26)?,
        upstream_run: r.get(27)?,
        held: r.get(28)?,
        consumed: r.get(29)?,
    })
}

pub(super) fn run_record(r: RunRow) -> Result<RunRecord> {
    let json = |col: &str, s: Option<String>| -> Result<Option<Value>> {
        s.map(|s| serde_json::from_str(&s).map_err(|e| corrupt(col, e)))
            .transpose()
    };
    Ok(RunRecord {
        kind: r.kind.parse().map_err(|e| corrupt("kind", e))?,
        trigger: r.trigger.parse().map_err(|e| corrupt("trigger", e))?,
        state: r.state.parse().map_err(|e| corrupt("state", e))?,
        phase: r.phase.parse().map_err(|e| corrupt("phase", e))?,
        plan_summary: json("plan_summary", r.plan_summary)?,
        blocked_by: json("blocked_by", r.blocked_by)?,
        consumed: json("consumed", r.consumed)?,
        last_heartbeat: opt_from_millis(r.last_heartbeat)?,
        phase_started_at: opt_from_millis(r.phase_started_at)?,
        created_at: from_millis(r.created_at)?,
        updated_at: from_millis(r.updated_at)?,
        id: r.id,
        org: r.org,
        stack: r.stack,
        needs_lease: r.needs_lease,
        leased: r.leased,
        started: r.started,
        cancel_requested: r.cancel_requested,
        reason: r.reason,
        triggered_by: r.triggered_by,
        commit: r.commit,
        branch: r.branch,
        retry_of: r.retry_of,
        pull_request: r.pull_request,
        delivery: r.delivery,
        upstream_run: r.upstream_run,
        held: r.held,
        late_write: r.late_write,
        runner_id: r.runner_id,
        fencing: r.fencing,
    })
}

pub(super) fn query_runs(
    conn: &Connection,
    sql: &str,
    args: &[&dyn db::ToSql],
) -> Result<Vec<RunRecord>> {
    query_decoded(conn, sql, args, run_row, run_record)
}

pub(super) fn load_run(conn: &Connection, id: &str) -> Result<Option<RunRecord>> {
    Ok(query_runs(
        conn,
        &format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"),
        params![id],
    )?
    .pop())
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

/// Closes the open phase row and opens one for `state` (none for terminal states).
pub(super) fn enter_state(
    tx: &Transaction<'_>,
    run: &str,
    from: RunState,
    to: RunState,
    now: i64,
) -> Result<()> {
    if from == to {
        return Ok(());
    }
    tx.prepare_cached(
        "UPDATE run_phases SET ended_at = ?2 WHERE run_id = ?1 AND ended_at IS NULL",
    )?
    .execute(params![run, now])?;
    if !to.is_terminal() {
        tx.prepare_cached(
            "INSERT INTO run_phases (run_id, state, started_at) VALUES (?1, ?2, ?3)",
        )?
        .execute(params![run, to.as_str(), now])?;
    }
    Ok(())
}

pub(super) fn clear_lock(tx: &Transaction<'_>, org: &str, stack: &str) -> Result<()> {
    tx.prepare_cached(
        "UPDATE state_heads SET lock_id = NULL, lock_operation = NULL,
            lock_info = NULL, lock_who = NULL, lock_version = NULL,
            lock_created = NULL, lock_path = NULL, lock_holder_kind = NULL,
            lock_holder_id = NULL, lock_acquired_at = NULL
         WHERE org_id = ?1 AND stack_id = ?2",
    )?
    .execute(params![org, stack])?;
    Ok(())
}

pub(super) fn lock_json(l: &Lock) -> Value {
    json!({
        "ID": l.id, "Operation": l.operation, "Info": l.info, "Who": l.who,
        "Version": l.version, "Created": l.created, "Path": l.path,
    })
}

/// Applies a decided transition to the stored run.
pub(super) fn apply_event(
    tx: &Transaction<'_>,
    run: &RunRecord,
    input: &RunEventInput,
) -> Result<RunEventResult> {
    if let Some(f) = input.fencing {
        if f != run.fencing || !run.leased {
            return Err(StoreError::Fenced {
                run: run.id.clone(),
                fencing: f,
            });
        }
    }
    let autodeploy = stack_autodeploy(tx, &run.org, &run.stack)?;
    let next = transition(run.state, run.facts(autodeploy), &input.event)?;
    let now = millis(Utc::now());
    let mut leased = run.leased;
    let mut started = run.started;
    let mut phase_started = run.phase_started_at.map(millis);
    let mut runner_id = run.runner_id.clone();
    match &input.event {
        Event::PhaseStarted => {
            started = true;
            phase_started = Some(now);
        }
        Event::PlanFinished { .. } | Event::Requeue => {
            leased = false;
            started = false;
            phase_started = None;
            if input.event == Event::Requeue {
                runner_id = None;
            }
        }
        _ => {}
    }
    let mut reason = input.update.reason.clone().or(run.reason.clone());
    if input.event == Event::Stale {
        reason = Some(STALE_REASON.to_string());
    }
    let mut released_lock = None;
    if next.state.is_terminal() {
        leased = false;
        if let Some(l) = read_lock(tx, &run.org, &run.stack)? {
            if l.holder == Writer::Run(run.id.clone()) {
                clear_lock(tx, &run.org, &run.stack)?;
                let note = format!("released state lock {} held by this run", l.id);
                reason = Some(match reason {
                    Some(r) => format!("{r}; {note}"),
                    None => note,
                });
                append_audit(
                    tx,
                    &Audit {
                        org: Some(run.org.clone()),
                        actor: "system".into(),
                        token_id: None,
                        action: "state.lock_released".into(),
                        target: format!("stack:{}", run.stack),
                        detail: json!({"run": run.id, "run_state": next.state.as_str(), "released": lock_json(&l)}),
                    },
                )?;
                released_lock = Some(l);
            }
        }
        // An ended run's token dies with it — except after a force-fail or timeout, when
        // the engine may still be out there: its late state writes must be recorded.
        if !matches!(next.state, RunState::ForceFailed | RunState::Interrupted) {
            tx.prepare_cached(
                "UPDATE tokens SET revoked_at = ?2 WHERE run_id = ?1 AND revoked_at IS NULL",
            )?
            .execute(params![run.id, now])?;
        }
    }
    let commit = run.commit.clone().or(input.update.commit.clone());
    let plan = input
        .update
        .plan_summary
        .as_ref()
        .or(run.plan_summary.as_ref())
        .map(|v| v.to_string());
    let cancel_requested = run.cancel_requested || next.stop_runner;
    crate::signal::emit(Signal::Run(run.id.clone()));
    tx.prepare_cached(
        "UPDATE runs SET state = ?2, phase = ?3, needs_lease = ?4, leased = ?5, started = ?6,
            cancel_requested = ?7, reason = ?8, commit_sha = ?9, plan_summary = ?10,
            runner_id = ?11, phase_started_at = ?12, updated_at = ?13,
            blocked_by = CASE WHEN ?4 <> 0 THEN blocked_by ELSE NULL END
         WHERE id = ?1",
    )?
    .execute(params![
        run.id,
        next.state.as_str(),
        next.phase.as_str(),
        next.needs_lease,
        leased,
        started,
        cancel_requested,
        reason,
        commit,
        plan,
        runner_id,
        phase_started,
        now,
    ])?;
    enter_state(tx, &run.id, run.state, next.state, now)?;
    // An operator's event (confirm, discard, an approval) is audited with the change.
    if let Some(audit) = &input.audit {
        append_audit(tx, audit)?;
    }
    if next.state.is_terminal() {
        deps::upstream_ended(tx, run, next.state)?;
    }
    let run =
        load_run(tx, &run.id)?.ok_or_else(|| StoreError::NotFound(format!("run {:?}", run.id)))?;
    if next.state.is_terminal() {
        notify::run_ended(tx, &run)?;
    }
    Ok(RunEventResult {
        run,
        stop_runner: next.stop_runner,
        released_lock,
    })
}

/// Inserts a queued run of an existing stack (with its first phase row) and returns it,
/// with the runs it holds for the stacks downstream of its own ([`deps::hold_downstream`]).
pub(super) fn insert_run(
    tx: &Transaction<'_>,
    run: &NewRun,
    delivery: Option<i64>,
) -> Result<RunRecord> {
    let created = insert_queued_run(tx, run, delivery)?;
    deps::hold_downstream(tx, &created)?;
    Ok(created)
}

/// Inserts a queued run of an existing stack (with its first phase row), holding nothing.
pub(super) fn insert_queued_run(
    tx: &Transaction<'_>,
    run: &NewRun,
    delivery: Option<i64>,
) -> Result<RunRecord> {
    if !exists(
        tx,
        "SELECT 1 FROM stacks WHERE org_id = ?1 AND id = ?2",
        params![run.org, run.stack],
    )? {
        return Err(StoreError::NotFound(format!(
            "stack {:?} in org {:?}",
            run.stack, run.org
        )));
    }
    let now = millis(Utc::now());
    tx.prepare_cached(
        "INSERT INTO runs (id, org_id, stack_id, kind, trigger, state, phase, needs_lease,
            triggered_by, commit_sha, branch, retry_of, pull_request, delivery_id, created_at,
            updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, 'queued', 'plan', 1, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?12)",
    )?
    .execute(params![
        run.id,
        run.org,
        run.stack,
        run.kind.as_str(),
        run.trigger.as_str(),
        run.triggered_by,
        run.commit,
        run.branch,
        run.retry_of,
        run.pull_request,
        delivery,
        now,
    ])
    .map_err(|e| exists_or(e, || format!("run {:?}", run.id)))?;
    tx.prepare_cached(
        "INSERT INTO run_phases (run_id, state, started_at) VALUES (?1, 'queued', ?2)",
    )?
    .execute(params![run.id, now])?;
    load_run(tx, &run.id)?.ok_or_else(|| StoreError::Backend("created run vanished".into()))
}

/// Requests a cancel of `run` through [`transition`] (queued and unconfirmed runs end,
/// executing ones are flagged for their runner), recording `reason` and `audit`.
pub(super) fn cancel_in_tx(
    tx: &Transaction<'_>,
    run: &RunRecord,
    reason: String,
    audit: &Audit,
) -> Result<RunEventResult> {
    let input = RunEventInput {
        event: Event::Cancel,
        fencing: None,
        update: RunUpdate {
            reason: Some(reason),
            ..Default::default()
        },
        audit: None,
    };
    let out = apply_event(tx, run, &input)?;
    append_audit(tx, audit)?;
    Ok(out)
}

/// Raw runner columns in `RUNNER_COLUMNS` order.
pub(super) type RunnerRow = (
    String,
    Option<String>,
    String,
    String,
    String,
    bool,
    i64,
    i64,
);

/// A row decodes into a tuple of its columns, in `SELECT` order.
pub(super) fn runner_row(r: &Row<'_>) -> db::Result<RunnerRow> {
    RunnerRow::try_from(r)
}

pub(super) fn runner_record(r: RunnerRow) -> Result<RunnerRecord> {
    Ok(RunnerRecord {
        id: r.0,
        org: r.1,
        pool: r.2,
        name: r.3,
        version: r.4,
        drained: r.5,
        last_seen: from_millis(r.6)?,
        created_at: from_millis(r.7)?,
    })
}

pub(super) const RUNNER_COLUMNS: &str =
    "id, org_id, pool, name, version, drained, last_seen, created_at";

/// `owner/repo` as bindings store it.
pub(super) fn github_name(repository: &str) -> String {
    repository.to_ascii_lowercase()
}

/// A repository key as stacks store it: GitHub keys are case-insensitive.
pub(super) fn normalize_repo_key(key: &str) -> String {
    if key.starts_with("github:") {
        key.to_ascii_lowercase()
    } else {
        key.to_string()
    }
}

pub(super) fn query_stacks(
    conn: &Connection,
    sql: &str,
    args: &[&dyn db::ToSql],
) -> Result<Vec<StackRecord>> {
    query_decoded(conn, sql, args, stack_row, stack_record)
}

/// Inserts or rebinds `owner/repo` bindings to an installation.
pub(super) fn upsert_bindings(
    tx: &Transaction<'_>,
    installation: i64,
    account: &str,
    repositories: &[String],
    suspended: bool,
    now: i64,
) -> Result<()> {
    let mut stmt = tx.prepare_cached(
        "INSERT INTO github_bindings (repository, installation, account, suspended, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (repository) DO UPDATE SET installation = excluded.installation,
            account = excluded.account, suspended = excluded.suspended,
            updated_at = excluded.updated_at",
    )?;
    for repo in repositories {
        stmt.execute(params![
            github_name(repo),
            installation,
            account,
            suspended,
            now
        ])?;
    }
    Ok(())
}

pub(super) const DELIVERY_COLUMNS: &str = "d.id, d.source, d.guid, d.event, d.action, d.repository,
    d.git_ref, d.before_sha, d.after_sha, d.pull_request, d.summary, d.duplicate_of,
    d.received_at";

/// Raw delivery columns in `DELIVERY_COLUMNS` order.
pub(super) type DeliveryRow = (
    i64,
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<i64>,
    String,
    Option<i64>,
    i64,
);

/// A row decodes into a tuple of its columns, in `SELECT` order.
pub(super) fn delivery_row(r: &Row<'_>) -> db::Result<DeliveryRow> {
    DeliveryRow::try_from(r)
}

pub(super) fn delivery_source(s: &str) -> Result<DeliverySource> {
    match s {
        "github" => Ok(DeliverySource::Github),
        "poll" => Ok(DeliverySource::Poll),
        other => Err(corrupt("delivery source", other)),
    }
}

pub(super) fn delivery_record(d: DeliveryRow) -> Result<DeliveryRecord> {
    Ok(DeliveryRecord {
        id: d.0,
        source: delivery_source(&d.1)?,
        guid: d.2,
        event: d.3,
        action: d.4,
        repository: d.5,
        git_ref: d.6,
        before: d.7,
        after: d.8,
        pull_request: d.9,
        summary: d.10,
        duplicate_of: d.11,
        received_at: from_millis(d.12)?,
    })
}

/// Inserts a delivery row and returns its id.
pub(super) fn insert_delivery(
    tx: &Transaction<'_>,
    d: &NewDelivery,
    duplicate_of: Option<i64>,
    now: i64,
) -> Result<i64> {
    tx.prepare_cached(
        "INSERT INTO deliveries (source, guid, event, action, repository, git_ref, before_sha,
            after_sha, pull_request, summary, duplicate_of, received_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    )?
    .execute(params![
        d.source.as_str(),
        d.guid,
        d.event,
        d.action,
        d.repository,
        d.git_ref,
        d.before,
        d.after,
        d.pull_request,
        d.summary,
        duplicate_of,
        now,
    ])?;
    db::last_insert_id(tx)
}

/// Records a delivery seen before: a duplicate row pointing at the first, and a
/// `duplicate delivery` decision for every stack the first one decided on.
pub(super) fn record_duplicate(
    tx: &Transaction<'_>,
    d: &NewDelivery,
    first_id: i64,
    first_received: i64,
    now: i64,
) -> Result<DeliveryOutcome> {
    let first_received_at = from_millis(first_received)?;
    let id = insert_delivery(tx, d, Some(first_id), now)?;
    let reason = format!(
        "duplicate delivery: already received at {}",
        first_received_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    );
    tx.prepare_cached(
        "INSERT INTO trigger_decisions (delivery_id, org_id, stack_id, run_id, reason)
         SELECT ?1, org_id, stack_id, NULL, ?2 FROM trigger_decisions WHERE delivery_id = ?3",
    )?
    .execute(params![id, reason, first_id])?;
    Ok(DeliveryOutcome::Duplicate {
        id,
        first_id,
        first_received_at,
    })
}

/// Applies a first delivery: its runs, the cancels of superseded proposed runs, its
/// decisions and its audit record.
pub(super) fn record_first(
    tx: &Transaction<'_>,
    d: &NewDelivery,
    now: i64,
) -> Result<DeliveryOutcome> {
    let id = insert_delivery(tx, d, None, now)?;
    let mut runs = Vec::with_capacity(d.runs.len());
    for run in &d.runs {
        runs.push(insert_run(tx, run, Some(id))?);
    }
    let mut canceled = Vec::new();
    if let Some(cancel) = &d.cancel {
        for (org, stack) in &cancel.stacks {
            let open = query_runs(
                tx,
                &format!(
                    "SELECT {RUN_COLUMNS} FROM runs WHERE org_id = ?1 AND stack_id = ?2
                     AND pull_request = ?3 AND kind = 'proposed'
                     AND state NOT IN {TERMINAL_STATES}
                     ORDER BY created_at, id"
                ),
                params![org, stack, cancel.pull_request],
            )?;
            for run in open {
                // Not the runs this delivery creates, and each run once.
                if d.runs.iter().any(|r| r.id == run.id) || canceled.contains(&run.id) {
                    continue;
                }
                let audit = Audit {
                    org: Some(run.org.clone()),
                    actor: "system".into(),
                    token_id: None,
                    action: "run.cancel".into(),
                    target: format!("run:{}", run.id),
                    detail: json!({
                        "reason": cancel.reason,
                        "pull_request": cancel.pull_request,
                        "delivery": d.guid,
                    }),
                };
                cancel_in_tx(tx, &run, cancel.reason.clone(), &audit)?;
                canceled.push(run.id);
            }
        }
    }
    let mut insert = tx.prepare_cached(
        "INSERT INTO trigger_decisions (delivery_id, org_id, stack_id, run_id, reason)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    for decision in &d.decisions {
        if let Some(run) = &decision.run_id {
            if !d.runs.iter().any(|r| &r.id == run) {
                return Err(StoreError::NotFound(format!(
                    "run {run:?} among the runs of delivery {:?}",
                    d.guid
                )));
            }
        }
        insert
            .execute(params![
                id,
                decision.org,
                decision.stack,
                decision.run_id,
                decision.reason
            ])
            .map_err(|e| {
                if is_foreign_key_violation(&e) {
                    StoreError::NotFound(format!(
                        "stack {:?} in org {:?}",
                        decision.stack, decision.org
                    ))
                } else if is_unique_violation(&e) {
                    StoreError::AlreadyExists(format!(
                        "a decision on stack {:?} in org {:?} for this delivery",
                        decision.stack, decision.org
                    ))
                } else {
                    e.into()
                }
            })?;
    }
    append_audit(
        tx,
        &Audit {
            org: None,
            actor: "system".into(),
            token_id: None,
            action: "vcs.delivery".into(),
            target: format!("delivery:{}", d.guid),
            detail: json!({
                "id": id,
                "source": d.source.as_str(),
                "event": d.event,
                "action": d.action,
                "repository": d.repository,
                "summary": d.summary,
                "runs": runs.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
                "canceled": canceled,
            }),
        },
    )?;
    Ok(DeliveryOutcome::Recorded { id, runs, canceled })
}

pub(super) fn membership_target_exists(tx: &Transaction<'_>, org: &str, user: &str) -> Result<()> {
    if !exists(tx, "SELECT 1 FROM orgs WHERE id = ?1", params![org])? {
        return Err(StoreError::NotFound(format!("org {org:?}")));
    }
    if !exists(tx, "SELECT 1 FROM users WHERE id = ?1", params![user])? {
        return Err(StoreError::NotFound(format!("user {user:?}")));
    }
    Ok(())
}

// ---- Secrets, OIDC signing keys, ID-token request tokens ----

pub(super) fn secret_name(org: &str, namespace: &str, key: &str) -> String {
    format!("secret {org}/{namespace}/{key}")
}

pub(super) const SECRET_META_COLUMNS: &str =
    "org_id, namespace, key, created_at, updated_at, updated_by";

/// Raw secret metadata columns in `SECRET_META_COLUMNS` order.
pub(super) type SecretMetaRow = (String, String, String, i64, i64, Option<String>);

pub(super) fn secret_meta_row(r: &Row<'_>) -> db::Result<SecretMetaRow> {
    SecretMetaRow::try_from(r)
}

pub(super) fn secret_meta(r: SecretMetaRow) -> Result<SecretMeta> {
    let (org, namespace, key, created, updated, updated_by) = r;
    let Some(updated_by) = updated_by else {
        return Err(StoreError::Corrupt(format!(
            "{} has no updated_by",
            secret_name(&org, &namespace, &key)
        )));
    };
    Ok(SecretMeta {
        org,
        namespace,
        key,
        created_at: from_millis(created)?,
        updated_at: from_millis(updated)?,
        updated_by,
    })
}

pub(super) const SIGNING_KEY_COLUMNS: &str =
    "kid, private_ciphertext, private_nonce, key_id, public_jwk, created_at, retired_at";

/// Raw signing key columns in `SIGNING_KEY_COLUMNS` order.
pub(super) type SigningKeyRow = (
    String,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Option<String>,
    String,
    i64,
    Option<i64>,
);

pub(super) fn signing_key_row(r: &Row<'_>) -> db::Result<SigningKeyRow> {
    SigningKeyRow::try_from(r)
}

/// The sealed private half of a signing key row; every key the store writes has one.
pub(super) fn signing_key_sealed(
    kid: &str,
    ciphertext: Option<Vec<u8>>,
    nonce: Option<Vec<u8>>,
    key_id: Option<String>,
) -> Result<Sealed> {
    match (ciphertext, nonce, key_id) {
        (Some(ciphertext), Some(nonce), Some(key_id)) => Ok(Sealed {
            ciphertext,
            nonce,
            key_id,
        }),
        _ => Err(StoreError::Corrupt(format!(
            "signing key {kid:?} has no sealed private key"
        ))),
    }
}

pub(super) fn signing_key_record(r: SigningKeyRow) -> Result<SigningKeyRecord> {
    let (kid, ciphertext, nonce, key_id, jwk, created, retired) = r;
    Ok(SigningKeyRecord {
        private_key: signing_key_sealed(&kid, ciphertext, nonce, key_id)?,
        public_jwk: serde_json::from_str(&jwk).map_err(|e| corrupt("public_jwk", e))?,
        created_at: from_millis(created)?,
        retired_at: opt_from_millis(retired)?,
        kid,
    })
}

/// Replaces one sealed value in the caller's write transaction; `NotFound` when its owner
/// no longer exists.
pub(super) fn reseal_one(tx: &Transaction<'_>, owner: &SealedOwner, value: &Sealed) -> Result<()> {
    let changed = match owner {
        SealedOwner::Secret {
            org,
            namespace,
            key,
        } => tx
            .prepare_cached(
                "UPDATE secrets SET ciphertext = ?4, nonce = ?5, key_id = ?6
                 WHERE org_id = ?1 AND namespace = ?2 AND key = ?3",
            )?
            .execute(params![
                org,
                namespace,
                key,
                value.ciphertext,
                value.nonce,
                value.key_id
            ])?,
        SealedOwner::SigningKey { kid } => tx
            .prepare_cached(
                "UPDATE oidc_signing_keys
                 SET private_ciphertext = ?2, private_nonce = ?3, key_id = ?4 WHERE kid = ?1",
            )?
            .execute(params![kid, value.ciphertext, value.nonce, value.key_id])?,
        SealedOwner::NotificationTarget { org, id } => notify::reseal_secret(tx, org, id, value)?,
    };
    if changed == 0 {
        return Err(StoreError::NotFound(match owner {
            SealedOwner::Secret {
                org,
                namespace,
                key,
            } => secret_name(org, namespace, key),
            SealedOwner::SigningKey { kid } => format!("signing key {kid:?}"),
            SealedOwner::NotificationTarget { org, id } => {
                format!("notification target {org}/{id}")
            }
        }));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_states_sql_matches_the_rules() {
        let want: Vec<String> = RunState::ALL
            .into_iter()
            .filter(|s| s.is_terminal())
            .map(|s| format!("'{}'", s.as_str()))
            .collect();
        assert_eq!(TERMINAL_STATES, format!("({})", want.join(", ")));
    }
}
