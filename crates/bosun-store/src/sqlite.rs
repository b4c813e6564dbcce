//! The SQLite backend: one database file in WAL mode, migrations applied on open.
//!
//! Calls run on tokio's blocking pool with a connection of their own: one writer
//! connection (so write transactions, which start with `BEGIN IMMEDIATE`, are serialized
//! in-process and a read-check-write such as the cycle check never races), and a small
//! pool of readers that run concurrently under WAL. A whole store call — all its queries
//! and rows — is one hop to a blocking thread, never one hop per row.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bosun_core::stack::{find_cycle, DependencyInput, DriftInput, StackInput, StackSpec};
use bosun_core::state::{
    decide_lock, decide_unlock, decide_write, Current, Lock, Output, StateDoc, UnlockDecision,
    UnlockRequest, Writer,
};
use bosun_core::token::TokenKind;
use bosun_core::Role;
use chrono::{DateTime, TimeZone, Utc};
use rusqlite::{
    params, Connection, OpenFlags, OptionalExtension, Row, Transaction, TransactionBehavior,
};
use serde_json::{json, Value};
use tokio::sync::Semaphore;

use crate::*;

/// Migrations embedded in the binary, applied in order. The index + 1 is the version.
const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/sqlite/0001_init.sql"),
    include_str!("../migrations/sqlite/0002_state.sql"),
];

/// The schema version this binary writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

const READERS: usize = 4;
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// `None` once the store is closed.
    writer: Mutex<Option<Connection>>,
    readers: Mutex<Vec<Connection>>,
    /// One permit per idle reader in `readers`.
    reader_permits: Semaphore,
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Backend(e.to_string())
    }
}

fn constraint_violation(e: &rusqlite::Error, code: std::ffi::c_int) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.extended_code == code)
}

fn is_unique_violation(e: &rusqlite::Error) -> bool {
    constraint_violation(e, rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE)
        || constraint_violation(e, rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY)
}

fn is_foreign_key_violation(e: &rusqlite::Error) -> bool {
    constraint_violation(e, rusqlite::ffi::SQLITE_CONSTRAINT_FOREIGNKEY)
}

fn closed() -> StoreError {
    StoreError::Backend("the store is closed".into())
}

fn millis(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn from_millis(ms: i64) -> Result<DateTime<Utc>> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .ok_or_else(|| StoreError::Corrupt(format!("timestamp {ms} out of range")))
}

fn opt_from_millis(ms: Option<i64>) -> Result<Option<DateTime<Utc>>> {
    ms.map(from_millis).transpose()
}

fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}"))
}

fn open_connection(path: &Path) -> Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI,
    )?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // In WAL mode NORMAL survives a process crash (kill -9); only a power loss can drop
    // the last commits.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`, migrating it to this binary's
    /// schema. Refuses a database whose schema is newer than this binary knows.
    pub async fn open(path: &Path) -> Result<Self> {
        let path: PathBuf = path.to_path_buf();
        tokio::task::spawn_blocking(move || Self::open_blocking(&path))
            .await
            .map_err(|e| StoreError::Backend(format!("open task failed: {e}")))?
    }

    fn open_blocking(path: &Path) -> Result<Self> {
        let mut writer = open_connection(path)?;
        migrate(&mut writer)?;
        let mut readers = Vec::with_capacity(READERS);
        for _ in 0..READERS {
            let r = open_connection(path)?;
            r.pragma_update(None, "query_only", "ON")?;
            readers.push(r);
        }
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                writer: Mutex::new(Some(writer)),
                readers: Mutex::new(readers),
                reader_permits: Semaphore::new(READERS),
            }),
        })
    }

    /// Runs `f` on a reader connection on the blocking pool.
    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let permit = self
            .inner
            .reader_permits
            .acquire()
            .await
            .map_err(|_| closed())?;
        let inner = self.inner.clone();
        let result = tokio::task::spawn_blocking(move || {
            let conn = inner
                .readers
                .lock()
                .map_err(|_| closed())?
                .pop()
                .ok_or_else(closed)?;
            let out = f(&conn);
            if let Ok(mut readers) = inner.readers.lock() {
                readers.push(conn);
            }
            out
        })
        .await
        .map_err(|e| StoreError::Backend(format!("store task failed: {e}")))?;
        drop(permit);
        result
    }

    /// Runs `f` in an immediate write transaction on the writer connection, committing
    /// when it returns `Ok` and rolling back otherwise.
    async fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> Result<T> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = inner.writer.lock().map_err(|_| closed())?;
            let conn = guard.as_mut().ok_or_else(closed)?;
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let out = f(&tx)?;
            tx.commit()?;
            Ok(out)
        })
        .await
        .map_err(|e| StoreError::Backend(format!("store task failed: {e}")))?
    }
}

fn migrate(conn: &mut Connection) -> Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute(
        "CREATE TABLE IF NOT EXISTS bosun_schema (version INTEGER NOT NULL)",
        [],
    )?;
    let found: Option<i64> =
        tx.query_row("SELECT MAX(version) FROM bosun_schema", [], |r| r.get(0))?;
    let found = found.unwrap_or(0);
    if found > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            found,
            known: SCHEMA_VERSION,
        });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        tx.execute_batch(sql)?;
        tx.execute(
            "INSERT INTO bosun_schema (version) VALUES (?1)",
            [i as i64 + 1],
        )?;
        tracing::info!(version = i + 1, "applied schema migration");
    }
    tx.commit()?;
    Ok(())
}

fn append_audit(tx: &Transaction<'_>, audit: &Audit) -> Result<()> {
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

fn insert_token(tx: &Transaction<'_>, t: &NewToken) -> Result<i64> {
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
    .map_err(|e| {
        if is_unique_violation(&e) {
            StoreError::AlreadyExists(format!("token {}", t.id))
        } else {
            e.into()
        }
    })?;
    Ok(now)
}

const TOKEN_COLUMNS: &str = "id, kind, description, user_id, org_id, pool, run_id, stack_id,
    created_at, expires_at, revoked_at, read_stacks";

/// Raw token columns, converted outside rusqlite's row callback so errors stay ours.
type TokenRow = (
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

fn token_row(r: &Row<'_>) -> rusqlite::Result<TokenRow> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
        r.get(8)?,
        r.get(9)?,
        r.get(10)?,
        r.get(11)?,
    ))
}

fn token_record(t: TokenRow) -> Result<TokenRecord> {
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

fn query_tokens(
    conn: &Connection,
    sql: &str,
    args: &[&dyn rusqlite::ToSql],
) -> Result<Vec<TokenRecord>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map(args, token_row)?;
    let mut out = Vec::new();
    for row in rows {
        out.push(token_record(row?)?);
    }
    Ok(out)
}

fn roles_of(conn: &Connection, user: &str) -> Result<BTreeMap<String, Role>> {
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

fn get_user(conn: &Connection, id: &str) -> Result<Option<UserRecord>> {
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

fn exists(conn: &Connection, sql: &str, args: &[&dyn rusqlite::ToSql]) -> Result<bool> {
    Ok(conn
        .prepare_cached(sql)?
        .query_row(args, |_| Ok(()))
        .optional()?
        .is_some())
}

const STACK_COLUMNS: &str = "org_id, id, name, repository, branch, path, watch_paths, engine,
    engine_binary, engine_version, tier, autodeploy, environment, variables, depends_on,
    drift_detection, runner_pool, created_at, updated_at";

/// Raw stack columns in `STACK_COLUMNS` order.
struct StackRow {
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
}

fn stack_row(r: &Row<'_>) -> rusqlite::Result<StackRow> {
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
    })
}

fn stack_record(r: StackRow) -> Result<StackRecord> {
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
fn check_and_write_dependencies(tx: &Transaction<'_>, org: &str, spec: &StackSpec) -> Result<()> {
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

struct StackColumns {
    watch_paths: String,
    variables: String,
    depends_on: String,
    drift_detection: Option<String>,
}

fn stack_columns(spec: &StackSpec) -> StackColumns {
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
        drift_detection: spec
            .drift_detection
            .as_ref()
            .map(|d| json!({"schedule": d.schedule, "reconcile": d.reconcile}).to_string()),
    }
}

/// Inserts a stack's row, or replaces every column but `created_at` of an existing one.
fn write_stack_row(
    tx: &Transaction<'_>,
    org: &str,
    spec: &StackSpec,
    created_at: i64,
    updated_at: i64,
) -> rusqlite::Result<usize> {
    let c = stack_columns(spec);
    tx.prepare_cached(&format!(
        "INSERT INTO stacks ({STACK_COLUMNS})
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                 ?18, ?19)
         ON CONFLICT (org_id, id) DO UPDATE SET
            name = excluded.name, repository = excluded.repository, branch = excluded.branch,
            path = excluded.path, watch_paths = excluded.watch_paths, engine = excluded.engine,
            engine_binary = excluded.engine_binary, engine_version = excluded.engine_version,
            tier = excluded.tier, autodeploy = excluded.autodeploy,
            environment = excluded.environment, variables = excluded.variables,
            depends_on = excluded.depends_on, drift_detection = excluded.drift_detection,
            runner_pool = excluded.runner_pool, updated_at = excluded.updated_at"
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
    ])
}

const VERSION_COLUMNS: &str = "v.org_id, v.stack_id, v.version, v.serial, v.lineage, v.checksum,
    v.size, v.writer_kind, v.writer_id, v.token_id, v.created_at, v.late_write, v.forced,
    v.outputs, (h.current_version IS v.version)";

type VersionRow = (
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
);

fn version_row(r: &Row<'_>) -> rusqlite::Result<VersionRow> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
        r.get(8)?,
        r.get(9)?,
        r.get(10)?,
        r.get(11)?,
        r.get(12)?,
        r.get(13)?,
        r.get(14)?,
    ))
}

fn version_meta(v: VersionRow) -> Result<StateVersionMeta> {
    let outputs: Value = serde_json::from_str(&v.13).map_err(|e| corrupt("outputs", e))?;
    let outputs = outputs
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
        .unwrap_or_default();
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
    })
}

fn read_version(
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
            Ok((version_row(r)?, r.get::<_, Vec<u8>>(15)?))
        })
        .optional()?;
    row.map(|(meta, body)| Ok((version_meta(meta)?, body)))
        .transpose()
}

fn read_lock(conn: &Connection, org: &str, stack: &str) -> Result<Option<Lock>> {
    let row = conn
        .prepare_cached(
            "SELECT lock_id, lock_operation, lock_info, lock_who, lock_version, lock_created,
                    lock_path, lock_holder_kind, lock_holder_id, lock_acquired_at
             FROM state_heads WHERE org_id = ?1 AND stack_id = ?2 AND lock_id IS NOT NULL",
        )?
        .query_row(params![org, stack], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, String>(5)?,
                r.get::<_, String>(6)?,
                r.get::<_, String>(7)?,
                r.get::<_, String>(8)?,
                r.get::<_, i64>(9)?,
            ))
        })
        .optional()?;
    row.map(|l| {
        Ok(Lock {
            id: l.0,
            operation: l.1,
            info: l.2,
            who: l.3,
            version: l.4,
            created: l.5,
            path: l.6,
            holder: Writer::from_parts(&l.7, l.8)
                .ok_or_else(|| corrupt("lock_holder_kind", &l.7))?,
            acquired_at: from_millis(l.9)?,
        })
    })
    .transpose()
}

fn read_head(conn: &Connection, org: &str, stack: &str) -> Result<StateHead> {
    Ok(StateHead {
        current: read_version(conn, org, stack, None)?.map(|(m, _)| m),
        lock: read_lock(conn, org, stack)?,
    })
}

fn ensure_stack(tx: &Transaction<'_>, org: &str, stack: &str) -> Result<()> {
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

fn outputs_json(doc: &StateDoc) -> String {
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

fn sha256_hex(body: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(body))
}

fn membership_target_exists(tx: &Transaction<'_>, org: &str, user: &str) -> Result<()> {
    if !exists(tx, "SELECT 1 FROM orgs WHERE id = ?1", params![org])? {
        return Err(StoreError::NotFound(format!("org {org:?}")));
    }
    if !exists(tx, "SELECT 1 FROM users WHERE id = ?1", params![user])? {
        return Err(StoreError::NotFound(format!("user {user:?}")));
    }
    Ok(())
}

#[async_trait]
impl Store for SqliteStore {
    async fn schema_version(&self) -> Result<i64> {
        self.read(|c| {
            let v: Option<i64> =
                c.query_row("SELECT MAX(version) FROM bosun_schema", [], |r| r.get(0))?;
            Ok(v.unwrap_or(0))
        })
        .await
    }

    async fn ping(&self) -> Result<()> {
        self.read(|c| Ok(c.query_row("SELECT 1", [], |_| Ok(()))?))
            .await
    }

    async fn close(&self) {
        // Take every connection so no call can start, fold the WAL into the database
        // file, and close them before the process exits.
        let inner = self.inner.clone();
        let done = tokio::task::spawn_blocking(move || {
            inner.reader_permits.close();
            if let Ok(mut readers) = inner.readers.lock() {
                readers.clear();
            }
            if let Ok(mut writer) = inner.writer.lock() {
                if let Some(conn) = writer.take() {
                    if let Err(e) = conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);") {
                        tracing::warn!(error = %e, "WAL checkpoint at close failed");
                    }
                    if let Err((_, e)) = conn.close() {
                        tracing::warn!(error = %e, "closing the database failed");
                    }
                }
            }
        })
        .await;
        if let Err(e) = done {
            tracing::warn!(error = %e, "store close task failed");
        }
    }

    async fn bootstrap(&self, seed: &Bootstrap) -> Result<bool> {
        let seed = seed.clone();
        self.write(move |tx| {
            let users: i64 = tx.query_row("SELECT COUNT(*) FROM users", [], |r| r.get(0))?;
            if users > 0 {
                return Ok(false);
            }
            let now = millis(Utc::now());
            tx.execute(
                "INSERT OR IGNORE INTO orgs (id, name, created_at) VALUES (?1, ?1, ?2)",
                params![seed.org, now],
            )?;
            tx.execute(
                "INSERT INTO users (id, server_admin, created_at) VALUES (?1, 1, ?2)",
                params![seed.user, now],
            )?;
            tx.execute(
                "INSERT INTO memberships (org_id, user_id, role) VALUES (?1, ?2, 'admin')",
                params![seed.org, seed.user],
            )?;
            insert_token(tx, &seed.token)?;
            append_audit(
                tx,
                &Audit {
                    org: Some(seed.org.clone()),
                    actor: "system".into(),
                    token_id: None,
                    action: "server.bootstrap".into(),
                    target: format!("user:{}", seed.user),
                    detail: json!({"token_id": seed.token.id}),
                },
            )?;
            Ok(true)
        })
        .await
    }

    async fn create_org(&self, org: &NewOrg, audit: &Audit) -> Result<OrgRecord> {
        let (org, audit) = (org.clone(), audit.clone());
        self.write(move |tx| {
            let now = millis(Utc::now());
            tx.execute(
                "INSERT INTO orgs (id, name, created_at) VALUES (?1, ?2, ?3)",
                params![org.id, org.name, now],
            )
            .map_err(|e| {
                if is_unique_violation(&e) {
                    StoreError::AlreadyExists(format!("org {:?}", org.id))
                } else {
                    e.into()
                }
            })?;
            if let Some(admin) = &org.admin {
                tx.execute(
                    "INSERT INTO memberships (org_id, user_id, role) VALUES (?1, ?2, 'admin')",
                    params![org.id, admin],
                )?;
            }
            append_audit(tx, &audit)?;
            Ok(OrgRecord {
                id: org.id,
                name: org.name,
                created_at: from_millis(now)?,
            })
        })
        .await
    }

    async fn get_org(&self, id: &str) -> Result<Option<OrgRecord>> {
        let id = id.to_string();
        self.read(move |c| {
            let row = c
                .prepare_cached("SELECT id, name, created_at FROM orgs WHERE id = ?1")?
                .query_row([&id], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, i64>(2)?,
                    ))
                })
                .optional()?;
            row.map(|(id, name, created)| {
                Ok(OrgRecord {
                    id,
                    name,
                    created_at: from_millis(created)?,
                })
            })
            .transpose()
        })
        .await
    }

    async fn create_user(&self, user: &NewUser, audit: &Audit) -> Result<UserRecord> {
        let (user, audit) = (user.clone(), audit.clone());
        self.write(move |tx| {
            let now = millis(Utc::now());
            tx.execute(
                "INSERT INTO users (id, server_admin, created_at) VALUES (?1, ?2, ?3)",
                params![user.id, user.server_admin, now],
            )
            .map_err(|e| {
                if is_unique_violation(&e) {
                    StoreError::AlreadyExists(format!("user {:?}", user.id))
                } else {
                    e.into()
                }
            })?;
            append_audit(tx, &audit)?;
            Ok(UserRecord {
                id: user.id,
                server_admin: user.server_admin,
                created_at: from_millis(now)?,
            })
        })
        .await
    }

    async fn get_user(&self, id: &str) -> Result<Option<UserRecord>> {
        let id = id.to_string();
        self.read(move |c| get_user(c, &id)).await
    }

    async fn roles_of(&self, user: &str) -> Result<BTreeMap<String, Role>> {
        let user = user.to_string();
        self.read(move |c| roles_of(c, &user)).await
    }

    async fn set_member(&self, org: &str, user: &str, role: Role, audit: &Audit) -> Result<()> {
        let (org, user, audit) = (org.to_string(), user.to_string(), audit.clone());
        self.write(move |tx| {
            membership_target_exists(tx, &org, &user)?;
            tx.execute(
                "INSERT INTO memberships (org_id, user_id, role) VALUES (?1, ?2, ?3)
                 ON CONFLICT (org_id, user_id) DO UPDATE SET role = excluded.role",
                params![org, user, role.as_str()],
            )?;
            append_audit(tx, &audit)
        })
        .await
    }

    async fn remove_member(&self, org: &str, user: &str, audit: &Audit) -> Result<bool> {
        let (org, user, audit) = (org.to_string(), user.to_string(), audit.clone());
        self.write(move |tx| {
            let done = tx.execute(
                "DELETE FROM memberships WHERE org_id = ?1 AND user_id = ?2",
                params![org, user],
            )? > 0;
            if done {
                append_audit(tx, &audit)?;
            }
            Ok(done)
        })
        .await
    }

    async fn list_members(&self, org: &str) -> Result<Vec<(String, Role)>> {
        let org = org.to_string();
        self.read(move |c| {
            let mut stmt = c.prepare_cached(
                "SELECT user_id, role FROM memberships WHERE org_id = ?1 ORDER BY user_id",
            )?;
            let rows = stmt.query_map([&org], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (user, role) = row?;
                out.push((user, role.parse().map_err(|e| corrupt("role", e))?));
            }
            Ok(out)
        })
        .await
    }

    async fn create_token(&self, token: &NewToken, audit: Option<&Audit>) -> Result<TokenRecord> {
        let (token, audit) = (token.clone(), audit.cloned());
        self.write(move |tx| {
            let created = insert_token(tx, &token)?;
            if let Some(audit) = &audit {
                append_audit(tx, audit)?;
            }
            Ok(TokenRecord {
                id: token.id,
                kind: token.kind,
                description: token.description,
                user: token.user,
                org: token.org,
                pool: token.pool,
                run: token.run,
                stack: token.stack,
                read_stacks: token.read_stacks,
                created_at: from_millis(created)?,
                expires_at: opt_from_millis(token.expires_at.map(millis))?,
                revoked_at: None,
            })
        })
        .await
    }

    async fn token_by_hash(&self, secret_hash: &str) -> Result<Option<TokenRecord>> {
        let hash = secret_hash.to_string();
        self.read(move |c| {
            Ok(query_tokens(
                c,
                &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE secret_hash = ?1"),
                params![hash],
            )?
            .pop())
        })
        .await
    }

    async fn token_grant(&self, secret_hash: &str) -> Result<Option<TokenGrant>> {
        let hash = secret_hash.to_string();
        self.read(move |c| {
            let Some(token) = query_tokens(
                c,
                &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE secret_hash = ?1"),
                params![hash],
            )?
            .pop() else {
                return Ok(None);
            };
            let (user, roles) = match (&token.kind, &token.user) {
                (TokenKind::Personal, Some(u)) => (get_user(c, u)?, roles_of(c, u)?),
                _ => (None, BTreeMap::new()),
            };
            Ok(Some(TokenGrant { token, user, roles }))
        })
        .await
    }

    async fn get_token(&self, id: &str) -> Result<Option<TokenRecord>> {
        let id = id.to_string();
        self.read(move |c| {
            Ok(query_tokens(
                c,
                &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE id = ?1"),
                params![id],
            )?
            .pop())
        })
        .await
    }

    async fn list_tokens(&self, filter: &TokenFilter) -> Result<Vec<TokenRecord>> {
        let filter = filter.clone();
        self.read(move |c| match &filter {
            TokenFilter::User(user) => query_tokens(
                c,
                &format!(
                    "SELECT {TOKEN_COLUMNS} FROM tokens WHERE user_id = ?1 AND kind = 'personal'
                     ORDER BY created_at, id"
                ),
                params![user],
            ),
            TokenFilter::Org { org, kind } => query_tokens(
                c,
                &format!(
                    "SELECT {TOKEN_COLUMNS} FROM tokens WHERE org_id = ?1 AND kind = ?2
                     ORDER BY created_at, id"
                ),
                params![org, kind.as_str()],
            ),
        })
        .await
    }

    async fn run_is_active(&self, run: &str) -> Result<bool> {
        let run = run.to_string();
        self.read(move |c| {
            exists(
                c,
                "SELECT 1 FROM tokens WHERE run_id = ?1 AND kind = 'run' AND revoked_at IS NULL
                 AND (expires_at IS NULL OR expires_at > ?2)",
                params![run, millis(Utc::now())],
            )
        })
        .await
    }

    async fn revoke_token(&self, id: &str, audit: Option<&Audit>) -> Result<bool> {
        let (id, audit) = (id.to_string(), audit.cloned());
        self.write(move |tx| {
            let done = tx.execute(
                "UPDATE tokens SET revoked_at = ?1 WHERE id = ?2 AND revoked_at IS NULL",
                params![millis(Utc::now()), id],
            )? > 0;
            if done {
                if let Some(audit) = &audit {
                    append_audit(tx, audit)?;
                }
            }
            Ok(done)
        })
        .await
    }

    async fn create_stack(
        &self,
        org: &str,
        spec: &StackSpec,
        audit: &Audit,
    ) -> Result<StackRecord> {
        let (org, spec, audit) = (org.to_string(), spec.clone(), audit.clone());
        self.write(move |tx| {
            if exists(
                tx,
                "SELECT 1 FROM stacks WHERE org_id = ?1 AND id = ?2",
                params![org, spec.id.as_str()],
            )? {
                return Err(StoreError::AlreadyExists(format!(
                    "stack {:?}",
                    spec.id.as_str()
                )));
            }
            let now = millis(Utc::now());
            write_stack_row(tx, &org, &spec, now, now).map_err(|e| {
                if is_foreign_key_violation(&e) {
                    StoreError::NotFound(format!("org {org:?}"))
                } else {
                    e.into()
                }
            })?;
            check_and_write_dependencies(tx, &org, &spec)?;
            append_audit(tx, &audit)?;
            Ok(StackRecord {
                org,
                spec,
                created_at: from_millis(now)?,
                updated_at: from_millis(now)?,
            })
        })
        .await
    }

    async fn get_stack(&self, org: &str, id: &str) -> Result<Option<StackRecord>> {
        let (org, id) = (org.to_string(), id.to_string());
        self.read(move |c| {
            let row = c
                .prepare_cached(&format!(
                    "SELECT {STACK_COLUMNS} FROM stacks WHERE org_id = ?1 AND id = ?2"
                ))?
                .query_row(params![org, id], stack_row)
                .optional()?;
            row.map(stack_record).transpose()
        })
        .await
    }

    async fn list_stacks(
        &self,
        org: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<StackRecord>> {
        let (org, after) = (org.to_string(), after.unwrap_or("").to_string());
        self.read(move |c| {
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
        })
        .await
    }

    async fn update_stack(
        &self,
        org: &str,
        spec: &StackSpec,
        audit: &Audit,
    ) -> Result<StackRecord> {
        let (org, spec, audit) = (org.to_string(), spec.clone(), audit.clone());
        self.write(move |tx| {
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
            check_and_write_dependencies(tx, &org, &spec)?;
            let now = millis(Utc::now()).max(created);
            write_stack_row(tx, &org, &spec, created, now)?;
            append_audit(tx, &audit)?;
            Ok(StackRecord {
                org,
                spec,
                created_at: from_millis(created)?,
                updated_at: from_millis(now)?,
            })
        })
        .await
    }

    async fn delete_stack(&self, org: &str, id: &str, audit: &Audit) -> Result<()> {
        let (org, id, audit) = (org.to_string(), id.to_string(), audit.clone());
        self.write(move |tx| {
            let dependents: Vec<String> = {
                let mut stmt = tx.prepare_cached(
                    "SELECT stack_id FROM stack_dependencies WHERE org_id = ?1 AND upstream = ?2
                     ORDER BY stack_id",
                )?;
                let rows = stmt.query_map(params![org, id], |r| r.get(0))?;
                rows.collect::<rusqlite::Result<_>>()?
            };
            if !dependents.is_empty() {
                return Err(StoreError::HasDependents {
                    stack: id,
                    dependents,
                });
            }
            let deleted = tx.execute(
                "DELETE FROM stacks WHERE org_id = ?1 AND id = ?2",
                params![org, id],
            )?;
            if deleted == 0 {
                return Err(StoreError::NotFound(format!("stack {id:?}")));
            }
            append_audit(tx, &audit)
        })
        .await
    }

    async fn state_head(&self, org: &str, stack: &str) -> Result<StateHead> {
        let (org, stack) = (org.to_string(), stack.to_string());
        self.read(move |c| read_head(c, &org, &stack)).await
    }

    async fn state_version(
        &self,
        org: &str,
        stack: &str,
        version: Option<i64>,
    ) -> Result<Option<(StateVersionMeta, Vec<u8>)>> {
        let (org, stack) = (org.to_string(), stack.to_string());
        self.read(move |c| read_version(c, &org, &stack, version))
            .await
    }

    async fn list_state_versions(
        &self,
        org: &str,
        stack: &str,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<StateVersionMeta>> {
        let (org, stack) = (org.to_string(), stack.to_string());
        self.read(move |c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {VERSION_COLUMNS} FROM state_versions v
                 LEFT JOIN state_heads h ON h.org_id = v.org_id AND h.stack_id = v.stack_id
                 WHERE v.org_id = ?1 AND v.stack_id = ?2 AND v.version < ?3
                 ORDER BY v.version DESC LIMIT ?4"
            ))?;
            let rows = stmt.query_map(
                params![org, stack, before.unwrap_or(i64::MAX), limit],
                version_row,
            )?;
            let mut out = Vec::new();
            for row in rows {
                out.push(version_meta(row?)?);
            }
            Ok(out)
        })
        .await
    }

    async fn write_state(
        &self,
        org: &str,
        stack: &str,
        new: &NewStateVersion,
        audit: Option<&Audit>,
    ) -> Result<StateVersionMeta> {
        let (org, stack, new, audit) = (
            org.to_string(),
            stack.to_string(),
            new.clone(),
            audit.cloned(),
        );
        self.write(move |tx| {
            ensure_stack(tx, &org, &stack)?;
            let head = read_head(tx, &org, &stack)?;
            let current = head.current.as_ref().map(|c| Current {
                serial: c.serial,
                lineage: c.lineage.clone(),
            });
            let outcome = decide_write(&new.request, head.lock.as_ref(), current.as_ref(), &new.doc)
                .map_err(StoreError::StateRefused)?;
            let version: i64 = tx
                .prepare_cached(
                    "SELECT COALESCE(MAX(version), 0) + 1 FROM state_versions
                     WHERE org_id = ?1 AND stack_id = ?2",
                )?
                .query_row(params![org, stack], |r| r.get(0))?;
            let serial = i64::try_from(new.doc.serial)
                .map_err(|_| StoreError::Backend("serial out of range".into()))?;
            tx.prepare_cached(
                "INSERT INTO state_versions (org_id, stack_id, version, serial, lineage, checksum,
                    size, writer_kind, writer_id, token_id, created_at, late_write, forced,
                    outputs, body)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
            )?
            .execute(params![
                org,
                stack,
                version,
                serial,
                new.doc.lineage,
                sha256_hex(&new.body),
                new.body.len() as i64,
                new.request.writer.kind(),
                new.request.writer.id(),
                new.token_id,
                millis(Utc::now()),
                outcome.late_write,
                new.request.force,
                outputs_json(&new.doc),
                new.body,
            ])?;
            if outcome.current {
                tx.prepare_cached(
                    "UPDATE state_heads SET current_version = ?3 WHERE org_id = ?1 AND stack_id = ?2",
                )?
                .execute(params![org, stack, version])?;
            }
            if let Some(audit) = &audit {
                append_audit(tx, audit)?;
            }
            read_version(tx, &org, &stack, Some(version))?
                .map(|(m, _)| m)
                .ok_or_else(|| StoreError::Backend("written version vanished".into()))
        })
        .await
    }

    async fn lock_state(&self, org: &str, stack: &str, lock: &Lock) -> Result<()> {
        let (org, stack, lock) = (org.to_string(), stack.to_string(), lock.clone());
        self.write(move |tx| {
            ensure_stack(tx, &org, &stack)?;
            let held = read_lock(tx, &org, &stack)?;
            decide_lock(held.as_ref(), &lock).map_err(StoreError::StateLocked)?;
            if held.is_some() {
                return Ok(());
            }
            tx.prepare_cached(
                "UPDATE state_heads SET lock_id = ?3, lock_operation = ?4, lock_info = ?5,
                    lock_who = ?6, lock_version = ?7, lock_created = ?8, lock_path = ?9,
                    lock_holder_kind = ?10, lock_holder_id = ?11, lock_acquired_at = ?12
                 WHERE org_id = ?1 AND stack_id = ?2",
            )?
            .execute(params![
                org,
                stack,
                lock.id,
                lock.operation,
                lock.info,
                lock.who,
                lock.version,
                lock.created,
                lock.path,
                lock.holder.kind(),
                lock.holder.id(),
                millis(lock.acquired_at),
            ])?;
            Ok(())
        })
        .await
    }

    async fn unlock_state(
        &self,
        org: &str,
        stack: &str,
        request: &UnlockRequest,
        audit: &Audit,
    ) -> Result<UnlockDecision> {
        let (org, stack, request, audit) = (
            org.to_string(),
            stack.to_string(),
            request.clone(),
            audit.clone(),
        );
        self.write(move |tx| {
            if !exists(
                tx,
                "SELECT 1 FROM stacks WHERE org_id = ?1 AND id = ?2",
                params![org, stack],
            )? {
                return Err(StoreError::NotFound(format!(
                    "stack {stack:?} in org {org:?}"
                )));
            }
            let held = read_lock(tx, &org, &stack)?;
            let decision = decide_unlock(held.as_ref(), &request);
            if let UnlockDecision::Release { lock, forced } = &decision {
                tx.prepare_cached(
                    "UPDATE state_heads SET lock_id = NULL, lock_operation = NULL,
                        lock_info = NULL, lock_who = NULL, lock_version = NULL,
                        lock_created = NULL, lock_path = NULL, lock_holder_kind = NULL,
                        lock_holder_id = NULL, lock_acquired_at = NULL
                     WHERE org_id = ?1 AND stack_id = ?2",
                )?
                .execute(params![org, stack])?;
                if *forced {
                    let mut audit = audit.clone();
                    if let Value::Object(m) = &mut audit.detail {
                        m.insert(
                            "released".into(),
                            json!({
                                "lock_id": lock.id,
                                "operation": lock.operation,
                                "who": lock.who,
                                "holder": format!("{}:{}", lock.holder.kind(), lock.holder.id()),
                                "acquired_at": lock.acquired_at.to_rfc3339(),
                            }),
                        );
                    }
                    append_audit(tx, &audit)?;
                }
            }
            Ok(decision)
        })
        .await
    }

    async fn list_audit(
        &self,
        org: Option<&str>,
        before_seq: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditRecord>> {
        let org = org.map(str::to_string);
        self.read(move |c| {
            let mut stmt = c.prepare_cached(
                "SELECT seq, at, org_id, actor, token_id, action, target, detail FROM audit_log
                 WHERE (?1 IS NULL OR org_id = ?1) AND seq < ?2 ORDER BY seq DESC LIMIT ?3",
            )?;
            let rows =
                stmt.query_map(params![org, before_seq.unwrap_or(i64::MAX), limit], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, Option<String>>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, Option<String>>(4)?,
                        r.get::<_, String>(5)?,
                        r.get::<_, String>(6)?,
                        r.get::<_, String>(7)?,
                    ))
                })?;
            let mut out = Vec::new();
            for row in rows {
                let (seq, at, org, actor, token_id, action, target, detail) = row?;
                out.push(AuditRecord {
                    seq,
                    at: from_millis(at)?,
                    entry: Audit {
                        org,
                        actor,
                        token_id,
                        action,
                        target,
                        detail: serde_json::from_str(&detail).map_err(|e| corrupt("detail", e))?,
                    },
                });
            }
            Ok(out)
        })
        .await
    }
}
