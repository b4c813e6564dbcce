//! The SQLite backend: one database file in WAL mode, migrations applied on open.
//!
//! Write transactions start with `BEGIN IMMEDIATE` so a read-check-write (cycle check,
//! "still empty?") never races another writer; readers run concurrently under WAL.

use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use bosun_core::stack::{find_cycle, DependencyInput, DriftInput, StackInput, StackSpec};
use bosun_core::token::TokenKind;
use bosun_core::Role;
use chrono::{DateTime, TimeZone, Utc};
use serde_json::{json, Value};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{Row, SqliteConnection, SqlitePool};

use crate::*;

/// Migrations embedded in the binary, applied in order. The index + 1 is the version.
const MIGRATIONS: &[&str] = &[include_str!("../migrations/sqlite/0001_init.sql")];

/// The schema version this binary writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

pub struct SqliteStore {
    pool: SqlitePool,
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::Backend(e.to_string())
    }
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
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

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`, migrating it to this binary's
    /// schema. Refuses a database whose schema is newer than this binary knows.
    pub async fn open(path: &Path) -> Result<Self> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // In WAL mode NORMAL survives a process crash (kill -9); only a power loss
            // can drop the last commits.
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .min_connections(1)
            .connect_with(options)
            .await?;
        let store = SqliteStore { pool };
        store.migrate().await?;
        Ok(store)
    }

    async fn migrate(&self) -> Result<()> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query("CREATE TABLE IF NOT EXISTS bosun_schema (version INTEGER NOT NULL)")
            .execute(&mut *tx)
            .await?;
        let found: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM bosun_schema")
            .fetch_one(&mut *tx)
            .await?;
        let found = found.unwrap_or(0);
        if found > SCHEMA_VERSION {
            return Err(StoreError::SchemaTooNew {
                found,
                known: SCHEMA_VERSION,
            });
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
            sqlx::raw_sql(sql).execute(&mut *tx).await?;
            sqlx::query("INSERT INTO bosun_schema (version) VALUES (?)")
                .bind(i as i64 + 1)
                .execute(&mut *tx)
                .await?;
            tracing::info!(version = i + 1, "applied schema migration");
        }
        tx.commit().await?;
        Ok(())
    }

    async fn write_tx(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
    }
}

async fn append_audit(conn: &mut SqliteConnection, audit: &Audit) -> Result<()> {
    sqlx::query(
        "INSERT INTO audit_log (at, org_id, actor, token_id, action, target, detail)
         VALUES (?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(millis(Utc::now()))
    .bind(&audit.org)
    .bind(&audit.actor)
    .bind(&audit.token_id)
    .bind(&audit.action)
    .bind(&audit.target)
    .bind(audit.detail.to_string())
    .execute(conn)
    .await?;
    Ok(())
}

async fn insert_token(conn: &mut SqliteConnection, t: &NewToken) -> Result<i64> {
    let now = millis(Utc::now());
    sqlx::query(
        "INSERT INTO tokens (id, kind, secret_hash, description, user_id, org_id, pool, run_id,
                             stack_id, created_at, expires_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(&t.id)
    .bind(t.kind.as_str())
    .bind(&t.secret_hash)
    .bind(&t.description)
    .bind(&t.user)
    .bind(&t.org)
    .bind(&t.pool)
    .bind(&t.run)
    .bind(&t.stack)
    .bind(now)
    .bind(t.expires_at.map(millis))
    .execute(conn)
    .await
    .map_err(|e| {
        if is_unique_violation(&e) {
            StoreError::AlreadyExists(format!("token {}", t.id))
        } else {
            e.into()
        }
    })?;
    Ok(now)
}

fn token_from_row(r: &SqliteRow) -> Result<TokenRecord> {
    let kind: String = r.try_get("kind")?;
    Ok(TokenRecord {
        id: r.try_get("id")?,
        kind: TokenKind::from_str(&kind).map_err(|e| StoreError::Corrupt(e.to_string()))?,
        description: r.try_get("description")?,
        user: r.try_get("user_id")?,
        org: r.try_get("org_id")?,
        pool: r.try_get("pool")?,
        run: r.try_get("run_id")?,
        stack: r.try_get("stack_id")?,
        created_at: from_millis(r.try_get("created_at")?)?,
        expires_at: opt_from_millis(r.try_get("expires_at")?)?,
        revoked_at: opt_from_millis(r.try_get("revoked_at")?)?,
    })
}

const STACK_COLUMNS: &str = "org_id, id, name, repository, branch, path, watch_paths, engine,
    engine_binary, engine_version, tier, autodeploy, environment, variables, depends_on,
    drift_detection, runner_pool, created_at, updated_at";

fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}"))
}

fn stack_from_row(r: &SqliteRow) -> Result<StackRecord> {
    let json = |col: &str| -> Result<Value> {
        let s: String = r.try_get(col)?;
        serde_json::from_str(&s).map_err(|e| corrupt(col, e))
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
    let depends_on = json("depends_on")?
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
    let drift: Option<String> = r.try_get("drift_detection")?;
    let drift_detection = drift
        .map(|s| serde_json::from_str::<Value>(&s).map_err(|e| corrupt("drift_detection", e)))
        .transpose()?
        .map(|d| DriftInput {
            schedule: d["schedule"].as_str().unwrap_or_default().to_string(),
            reconcile: d["reconcile"].as_bool().unwrap_or(false),
        });
    let input = StackInput {
        id: r.try_get("id")?,
        name: Some(r.try_get("name")?),
        repository: r.try_get("repository")?,
        branch: Some(r.try_get("branch")?),
        path: Some(r.try_get("path")?),
        watch_paths: strings(&json("watch_paths")?),
        engine: Some(r.try_get("engine")?),
        engine_binary: r.try_get("engine_binary")?,
        engine_version: r.try_get("engine_version")?,
        tier: Some(r.try_get("tier")?),
        autodeploy: r.try_get("autodeploy")?,
        environment: r.try_get("environment")?,
        variables: string_map(&json("variables")?),
        depends_on,
        drift_detection,
        runner_pool: Some(r.try_get("runner_pool")?),
    };
    let org: String = r.try_get("org_id")?;
    // Loading re-validates, so a hand-edited row can never enter the server as valid.
    let spec = StackSpec::from_input(input).map_err(|e| corrupt("stack", e))?;
    Ok(StackRecord {
        org,
        spec,
        created_at: from_millis(r.try_get("created_at")?)?,
        updated_at: from_millis(r.try_get("updated_at")?)?,
    })
}

/// Checks upstreams exist and that the org's graph with `spec`'s edges stays acyclic,
/// then writes the edge table. Runs inside the caller's write transaction.
async fn check_and_write_dependencies(
    conn: &mut SqliteConnection,
    org: &str,
    spec: &StackSpec,
) -> Result<()> {
    let id = spec.id.as_str();
    for dep in &spec.depends_on {
        let exists: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM stacks WHERE org_id = ? AND id = ?")
                .bind(org)
                .bind(dep.stack.as_str())
                .fetch_optional(&mut *conn)
                .await?;
        if exists.is_none() {
            return Err(StoreError::UnknownUpstream(dep.stack.to_string()));
        }
    }
    let rows = sqlx::query("SELECT stack_id, upstream FROM stack_dependencies WHERE org_id = ?")
        .bind(org)
        .fetch_all(&mut *conn)
        .await?;
    let mut graph: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in rows {
        let from: String = r.try_get("stack_id")?;
        if from != id {
            graph.entry(from).or_default().push(r.try_get("upstream")?);
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
    sqlx::query("DELETE FROM stack_dependencies WHERE org_id = ? AND stack_id = ?")
        .bind(org)
        .bind(id)
        .execute(&mut *conn)
        .await?;
    for dep in &spec.depends_on {
        sqlx::query("INSERT INTO stack_dependencies (org_id, stack_id, upstream) VALUES (?, ?, ?)")
            .bind(org)
            .bind(id)
            .bind(dep.stack.as_str())
            .execute(&mut *conn)
            .await?;
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

#[async_trait]
impl Store for SqliteStore {
    async fn schema_version(&self) -> Result<i64> {
        let v: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM bosun_schema")
            .fetch_one(&self.pool)
            .await?;
        Ok(v.unwrap_or(0))
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn close(&self) {
        // Fold the WAL into the database file now, rather than trusting the last
        // connection's close to do it before the process exits.
        if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&self.pool)
            .await
        {
            tracing::warn!(error = %e, "WAL checkpoint at close failed");
        }
        self.pool.close().await;
    }

    async fn bootstrap(&self, seed: &Bootstrap) -> Result<bool> {
        let mut tx = self.write_tx().await?;
        let users: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM users")
            .fetch_one(&mut *tx)
            .await?;
        if users > 0 {
            return Ok(false);
        }
        let now = millis(Utc::now());
        sqlx::query("INSERT OR IGNORE INTO orgs (id, name, created_at) VALUES (?, ?, ?)")
            .bind(&seed.org)
            .bind(&seed.org)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        sqlx::query("INSERT INTO users (id, server_admin, created_at) VALUES (?, 1, ?)")
            .bind(&seed.user)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        sqlx::query("INSERT INTO memberships (org_id, user_id, role) VALUES (?, ?, 'admin')")
            .bind(&seed.org)
            .bind(&seed.user)
            .execute(&mut *tx)
            .await?;
        insert_token(&mut tx, &seed.token).await?;
        append_audit(
            &mut tx,
            &Audit {
                org: Some(seed.org.clone()),
                actor: "system".into(),
                token_id: None,
                action: "server.bootstrap".into(),
                target: format!("user:{}", seed.user),
                detail: json!({"token_id": seed.token.id}),
            },
        )
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn create_org(&self, org: &NewOrg, audit: &Audit) -> Result<OrgRecord> {
        let mut tx = self.write_tx().await?;
        let now = Utc::now();
        sqlx::query("INSERT INTO orgs (id, name, created_at) VALUES (?, ?, ?)")
            .bind(&org.id)
            .bind(&org.name)
            .bind(millis(now))
            .execute(&mut *tx)
            .await
            .map_err(|e| {
                if is_unique_violation(&e) {
                    StoreError::AlreadyExists(format!("org {:?}", org.id))
                } else {
                    e.into()
                }
            })?;
        if let Some(admin) = &org.admin {
            sqlx::query("INSERT INTO memberships (org_id, user_id, role) VALUES (?, ?, 'admin')")
                .bind(&org.id)
                .bind(admin)
                .execute(&mut *tx)
                .await?;
        }
        append_audit(&mut tx, audit).await?;
        tx.commit().await?;
        let created = from_millis(millis(now))?;
        Ok(OrgRecord {
            id: org.id.clone(),
            name: org.name.clone(),
            created_at: created,
        })
    }

    async fn get_org(&self, id: &str) -> Result<Option<OrgRecord>> {
        let row = sqlx::query("SELECT id, name, created_at FROM orgs WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| {
            Ok(OrgRecord {
                id: r.try_get("id")?,
                name: r.try_get("name")?,
                created_at: from_millis(r.try_get("created_at")?)?,
            })
        })
        .transpose()
    }

    async fn create_user(&self, user: &NewUser, audit: &Audit) -> Result<UserRecord> {
        let mut tx = self.write_tx().await?;
        let now = millis(Utc::now());
        sqlx::query("INSERT INTO users (id, server_admin, created_at) VALUES (?, ?, ?)")
            .bind(&user.id)
            .bind(user.server_admin)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(|e| {
                if is_unique_violation(&e) {
                    StoreError::AlreadyExists(format!("user {:?}", user.id))
                } else {
                    e.into()
                }
            })?;
        append_audit(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(UserRecord {
            id: user.id.clone(),
            server_admin: user.server_admin,
            created_at: from_millis(now)?,
        })
    }

    async fn get_user(&self, id: &str) -> Result<Option<UserRecord>> {
        let row = sqlx::query("SELECT id, server_admin, created_at FROM users WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| {
            Ok(UserRecord {
                id: r.try_get("id")?,
                server_admin: r.try_get("server_admin")?,
                created_at: from_millis(r.try_get("created_at")?)?,
            })
        })
        .transpose()
    }

    async fn roles_of(&self, user: &str) -> Result<BTreeMap<String, Role>> {
        let rows = sqlx::query("SELECT org_id, role FROM memberships WHERE user_id = ?")
            .bind(user)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                let role: String = r.try_get("role")?;
                Ok((
                    r.try_get("org_id")?,
                    role.parse().map_err(|e| corrupt("role", e))?,
                ))
            })
            .collect()
    }

    async fn set_member(&self, org: &str, user: &str, role: Role, audit: &Audit) -> Result<()> {
        let mut tx = self.write_tx().await?;
        for (table, what) in [("orgs", "org"), ("users", "user")] {
            let key = if table == "orgs" { org } else { user };
            let found: Option<i64> =
                sqlx::query_scalar(&format!("SELECT 1 FROM {table} WHERE id = ?"))
                    .bind(key)
                    .fetch_optional(&mut *tx)
                    .await?;
            if found.is_none() {
                return Err(StoreError::NotFound(format!("{what} {key:?}")));
            }
        }
        sqlx::query(
            "INSERT INTO memberships (org_id, user_id, role) VALUES (?, ?, ?)
             ON CONFLICT (org_id, user_id) DO UPDATE SET role = excluded.role",
        )
        .bind(org)
        .bind(user)
        .bind(role.as_str())
        .execute(&mut *tx)
        .await?;
        append_audit(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn remove_member(&self, org: &str, user: &str, audit: &Audit) -> Result<bool> {
        let mut tx = self.write_tx().await?;
        let done = sqlx::query("DELETE FROM memberships WHERE org_id = ? AND user_id = ?")
            .bind(org)
            .bind(user)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            > 0;
        if done {
            append_audit(&mut tx, audit).await?;
            tx.commit().await?;
        }
        Ok(done)
    }

    async fn list_members(&self, org: &str) -> Result<Vec<(String, Role)>> {
        let rows =
            sqlx::query("SELECT user_id, role FROM memberships WHERE org_id = ? ORDER BY user_id")
                .bind(org)
                .fetch_all(&self.pool)
                .await?;
        rows.iter()
            .map(|r| {
                let role: String = r.try_get("role")?;
                Ok((
                    r.try_get("user_id")?,
                    role.parse().map_err(|e| corrupt("role", e))?,
                ))
            })
            .collect()
    }

    async fn create_token(&self, token: &NewToken, audit: Option<&Audit>) -> Result<TokenRecord> {
        let mut tx = self.write_tx().await?;
        let created = insert_token(&mut tx, token).await?;
        if let Some(audit) = audit {
            append_audit(&mut tx, audit).await?;
        }
        tx.commit().await?;
        Ok(TokenRecord {
            id: token.id.clone(),
            kind: token.kind,
            description: token.description.clone(),
            user: token.user.clone(),
            org: token.org.clone(),
            pool: token.pool.clone(),
            run: token.run.clone(),
            stack: token.stack.clone(),
            created_at: from_millis(created)?,
            expires_at: opt_from_millis(token.expires_at.map(millis))?,
            revoked_at: None,
        })
    }

    async fn token_by_hash(&self, secret_hash: &str) -> Result<Option<TokenRecord>> {
        let row = sqlx::query("SELECT * FROM tokens WHERE secret_hash = ?")
            .bind(secret_hash)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(token_from_row).transpose()
    }

    async fn get_token(&self, id: &str) -> Result<Option<TokenRecord>> {
        let row = sqlx::query("SELECT * FROM tokens WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(token_from_row).transpose()
    }

    async fn list_tokens(&self, filter: &TokenFilter) -> Result<Vec<TokenRecord>> {
        let rows =
            match filter {
                TokenFilter::User(user) => {
                    sqlx::query(
                        "SELECT * FROM tokens WHERE user_id = ? AND kind = 'personal'
                     ORDER BY created_at, id",
                    )
                    .bind(user)
                    .fetch_all(&self.pool)
                    .await?
                }
                TokenFilter::Org { org, kind } => sqlx::query(
                    "SELECT * FROM tokens WHERE org_id = ? AND kind = ? ORDER BY created_at, id",
                )
                .bind(org)
                .bind(kind.as_str())
                .fetch_all(&self.pool)
                .await?,
            };
        rows.iter().map(token_from_row).collect()
    }

    async fn revoke_token(&self, id: &str, audit: Option<&Audit>) -> Result<bool> {
        let mut tx = self.write_tx().await?;
        let done =
            sqlx::query("UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL")
                .bind(millis(Utc::now()))
                .bind(id)
                .execute(&mut *tx)
                .await?
                .rows_affected()
                > 0;
        if done {
            if let Some(audit) = audit {
                append_audit(&mut tx, audit).await?;
            }
            tx.commit().await?;
        }
        Ok(done)
    }

    async fn create_stack(
        &self,
        org: &str,
        spec: &StackSpec,
        audit: &Audit,
    ) -> Result<StackRecord> {
        let mut tx = self.write_tx().await?;
        let exists: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM stacks WHERE org_id = ? AND id = ?")
                .bind(org)
                .bind(spec.id.as_str())
                .fetch_optional(&mut *tx)
                .await?;
        if exists.is_some() {
            return Err(StoreError::AlreadyExists(format!(
                "stack {:?}",
                spec.id.as_str()
            )));
        }
        let now = millis(Utc::now());
        let c = stack_columns(spec);
        sqlx::query(&format!(
            "INSERT INTO stacks ({STACK_COLUMNS})
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        ))
        .bind(org)
        .bind(spec.id.as_str())
        .bind(&spec.name)
        .bind(spec.repository.to_string())
        .bind(&spec.branch)
        .bind(spec.path.as_str())
        .bind(&c.watch_paths)
        .bind(spec.engine.kind.as_str())
        .bind(&spec.engine.binary)
        .bind(&spec.engine.version)
        .bind(spec.tier.as_str())
        .bind(spec.autodeploy)
        .bind(spec.environment.as_ref().map(|e| e.as_str()))
        .bind(&c.variables)
        .bind(&c.depends_on)
        .bind(&c.drift_detection)
        .bind(spec.runner_pool.to_string())
        .bind(now)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(|e| match &e {
            sqlx::Error::Database(d) if d.is_foreign_key_violation() => {
                StoreError::NotFound(format!("org {org:?}"))
            }
            _ => e.into(),
        })?;
        check_and_write_dependencies(&mut tx, org, spec).await?;
        append_audit(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(StackRecord {
            org: org.to_string(),
            spec: spec.clone(),
            created_at: from_millis(now)?,
            updated_at: from_millis(now)?,
        })
    }

    async fn get_stack(&self, org: &str, id: &str) -> Result<Option<StackRecord>> {
        let row = sqlx::query(&format!(
            "SELECT {STACK_COLUMNS} FROM stacks WHERE org_id = ? AND id = ?"
        ))
        .bind(org)
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(stack_from_row).transpose()
    }

    async fn list_stacks(
        &self,
        org: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<StackRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {STACK_COLUMNS} FROM stacks WHERE org_id = ? AND id > ? ORDER BY id LIMIT ?"
        ))
        .bind(org)
        .bind(after.unwrap_or(""))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(stack_from_row).collect()
    }

    async fn update_stack(
        &self,
        org: &str,
        spec: &StackSpec,
        audit: &Audit,
    ) -> Result<StackRecord> {
        let mut tx = self.write_tx().await?;
        let created: Option<i64> =
            sqlx::query_scalar("SELECT created_at FROM stacks WHERE org_id = ? AND id = ?")
                .bind(org)
                .bind(spec.id.as_str())
                .fetch_optional(&mut *tx)
                .await?;
        let Some(created) = created else {
            return Err(StoreError::NotFound(format!(
                "stack {:?}",
                spec.id.as_str()
            )));
        };
        check_and_write_dependencies(&mut tx, org, spec).await?;
        let now = millis(Utc::now()).max(created);
        let c = stack_columns(spec);
        sqlx::query(
            "UPDATE stacks SET name = ?, repository = ?, branch = ?, path = ?, watch_paths = ?,
                engine = ?, engine_binary = ?, engine_version = ?, tier = ?, autodeploy = ?,
                environment = ?, variables = ?, depends_on = ?, drift_detection = ?,
                runner_pool = ?, updated_at = ?
             WHERE org_id = ? AND id = ?",
        )
        .bind(&spec.name)
        .bind(spec.repository.to_string())
        .bind(&spec.branch)
        .bind(spec.path.as_str())
        .bind(&c.watch_paths)
        .bind(spec.engine.kind.as_str())
        .bind(&spec.engine.binary)
        .bind(&spec.engine.version)
        .bind(spec.tier.as_str())
        .bind(spec.autodeploy)
        .bind(spec.environment.as_ref().map(|e| e.as_str()))
        .bind(&c.variables)
        .bind(&c.depends_on)
        .bind(&c.drift_detection)
        .bind(spec.runner_pool.to_string())
        .bind(now)
        .bind(org)
        .bind(spec.id.as_str())
        .execute(&mut *tx)
        .await?;
        append_audit(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(StackRecord {
            org: org.to_string(),
            spec: spec.clone(),
            created_at: from_millis(created)?,
            updated_at: from_millis(now)?,
        })
    }

    async fn delete_stack(&self, org: &str, id: &str, audit: &Audit) -> Result<()> {
        let mut tx = self.write_tx().await?;
        let dependents: Vec<String> = sqlx::query_scalar(
            "SELECT stack_id FROM stack_dependencies WHERE org_id = ? AND upstream = ?
             ORDER BY stack_id",
        )
        .bind(org)
        .bind(id)
        .fetch_all(&mut *tx)
        .await?;
        if !dependents.is_empty() {
            return Err(StoreError::HasDependents {
                stack: id.to_string(),
                dependents,
            });
        }
        let deleted = sqlx::query("DELETE FROM stacks WHERE org_id = ? AND id = ?")
            .bind(org)
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if deleted == 0 {
            return Err(StoreError::NotFound(format!("stack {id:?}")));
        }
        append_audit(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn list_audit(
        &self,
        org: Option<&str>,
        before_seq: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditRecord>> {
        let rows = sqlx::query(
            "SELECT * FROM audit_log WHERE (? IS NULL OR org_id = ?) AND seq < ?
             ORDER BY seq DESC LIMIT ?",
        )
        .bind(org)
        .bind(org)
        .bind(before_seq.unwrap_or(i64::MAX))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let detail: String = r.try_get("detail")?;
                Ok(AuditRecord {
                    seq: r.try_get("seq")?,
                    at: from_millis(r.try_get("at")?)?,
                    entry: Audit {
                        org: r.try_get("org_id")?,
                        actor: r.try_get("actor")?,
                        token_id: r.try_get("token_id")?,
                        action: r.try_get("action")?,
                        target: r.try_get("target")?,
                        detail: serde_json::from_str(&detail).map_err(|e| corrupt("detail", e))?,
                    },
                })
            })
            .collect()
    }
}
