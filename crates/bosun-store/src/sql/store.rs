//! The `impl Store` methods, one source compiled into both backends: each method is
//! written once here against `super::db` (the backend's store type, types and dialect)
//! and the backend's `read`/`write` calls, which run a closure in one read snapshot or
//! one write transaction. What truly differs lives as named hooks in each backend's
//! `db` module: `close`, `claim_lease` (PostgreSQL's extra `SKIP LOCKED` claim when
//! leasing a run), `snapshot` (one consistent read for `/metrics`) and `GREATEST`
//! (SQLite's scalar `MAX` versus PostgreSQL's `GREATEST`).

use super::audit::append_audit;
use super::db::GREATEST;
use super::identity::{get_user, membership_target_exists, roles_of};
use super::runners::{runner_record, runner_row, RUNNER_COLUMNS};
use super::runs::{
    apply_event, cancel_in_tx, enter_state, insert_run, load_run, query_runs, run_record, run_row,
    RUN_COLUMNS,
};
use super::secrets::{
    reseal_one, secret_meta, secret_meta_row, signing_key_record, signing_key_row,
    signing_key_sealed, SECRET_META_COLUMNS, SIGNING_KEY_COLUMNS,
};
use super::stacks::{
    check_and_write_dependencies, query_stacks, stack_autodeploy, stack_record, stack_row,
    write_stack_row, STACK_COLUMNS,
};
use super::state::{
    ensure_stack, lock_json, lock_record, lock_row, outputs_json, read_head, read_lock,
    read_version, sha256_hex, version_meta, version_row, LOCK_COLUMNS, VERSION_COLUMNS,
};
use super::tokens::{insert_token, query_tokens, TOKEN_COLUMNS};
use super::vcs::{
    delivery_record, delivery_row, github_name, normalize_repo_key, record_duplicate, record_first,
    upsert_bindings, DELIVERY_COLUMNS,
};
use super::*;

#[async_trait]
impl Store for db::Store {
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

    fn last_unavailable(&self) -> Option<DateTime<Utc>> {
        self.inner.availability.last_unavailable()
    }

    fn write_fault(&self) -> Option<String> {
        self.inner.availability.write_fault()
    }

    async fn close(&self) {
        db::close(self).await;
    }

    fn publish(&self, signal: Signal) {
        db::publish(self, signal);
    }

    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Signal> {
        self.inner.signals.subscribe()
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
            .map_err(|e| exists_or(e, || format!("org {:?}", org.id)))?;
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
            .map_err(|e| exists_or(e, || format!("user {:?}", user.id)))?;
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
            TokenFilter::HostedPool => query_tokens(
                c,
                &format!(
                    "SELECT {TOKEN_COLUMNS} FROM tokens WHERE kind = 'pool' AND org_id IS NULL
                     ORDER BY created_at, id"
                ),
                params![],
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

    async fn downstream_stacks(&self, org: &str, stack: &str) -> Result<Vec<StackRecord>> {
        let (org, stack) = (org.to_string(), stack.to_string());
        self.read(move |c| {
            query_stacks(
                c,
                &format!(
                    "SELECT {STACK_COLUMNS} FROM stacks WHERE org_id = ?1 AND id IN (
                        SELECT stack_id FROM stack_dependencies
                        WHERE org_id = ?1 AND upstream = ?2)
                     ORDER BY id"
                ),
                params![org, stack],
            )
        })
        .await
    }

    async fn last_runs_between(
        &self,
        org: &str,
        first: &str,
        last: &str,
    ) -> Result<Vec<RunRecord>> {
        let (org, first, last) = (org.to_string(), first.to_string(), last.to_string());
        self.read(move |c| {
            query_runs(
                c,
                &format!(
                    "SELECT {RUN_COLUMNS} FROM runs WHERE id IN (
                        SELECT (SELECT r.id FROM runs r
                                WHERE r.org_id = s.org_id AND r.stack_id = s.id
                                ORDER BY r.created_at DESC, r.id DESC LIMIT 1)
                        FROM stacks s WHERE s.org_id = ?1 AND s.id >= ?2 AND s.id <= ?3)
                     ORDER BY stack_id"
                ),
                params![org, first, last],
            )
        })
        .await
    }

    async fn state_locks_between(
        &self,
        org: &str,
        first: &str,
        last: &str,
    ) -> Result<Vec<(String, bosun_core::state::Lock)>> {
        let (org, first, last) = (org.to_string(), first.to_string(), last.to_string());
        self.read(move |c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT stack_id, {LOCK_COLUMNS} FROM state_heads
                 WHERE org_id = ?1 AND stack_id >= ?2 AND stack_id <= ?3
                   AND lock_id IS NOT NULL
                 ORDER BY stack_id"
            ))?;
            let rows = stmt.query_map(params![org, first, last], |r| {
                Ok((r.get::<_, String>(0)?, lock_row(r, 1)?))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (stack, lock) = row?;
                out.push((stack, lock_record(lock)?));
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

    async fn delete_stack(
        &self,
        org: &str,
        id: &str,
        delete_state: bool,
        audit: &Audit,
    ) -> Result<()> {
        let (org, id, audit) = (org.to_string(), id.to_string(), audit.clone());
        self.write(move |tx| {
            let dependents: Vec<String> = {
                let mut stmt = tx.prepare_cached(
                    "SELECT stack_id FROM stack_dependencies WHERE org_id = ?1 AND upstream = ?2
                     ORDER BY stack_id",
                )?;
                let rows = stmt.query_map(params![org, id], |r| r.get(0))?;
                rows.collect::<db::Result<_>>()?
            };
            if !dependents.is_empty() {
                return Err(StoreError::HasDependents {
                    stack: id,
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
                    stack: id,
                    runs: open,
                });
            }
            let versions: i64 = tx
                .prepare_cached(
                    "SELECT COUNT(*) FROM state_versions WHERE org_id = ?1 AND stack_id = ?2",
                )?
                .query_row(params![org, id], |r| r.get(0))?;
            if versions > 0 && !delete_state {
                return Err(StoreError::HasState {
                    stack: id,
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
            let checksum = sha256_hex(&new.body);
            // A runner delivers a recovered state until it hears back: the same state from
            // the same run again is the version already stored.
            if new.request.liveness == bosun_core::state::WriterLiveness::Recovery {
                let stored: Option<i64> = tx
                    .prepare_cached(
                        "SELECT version FROM state_versions
                         WHERE org_id = ?1 AND stack_id = ?2 AND writer_kind = ?3
                           AND writer_id = ?4 AND checksum = ?5
                           AND recovery_reason IS NOT NULL
                         ORDER BY version DESC LIMIT 1",
                    )?
                    .query_row(
                        params![
                            org,
                            stack,
                            new.request.writer.kind(),
                            new.request.writer.id(),
                            checksum
                        ],
                        |r| r.get(0),
                    )
                    .optional()?;
                if let Some(version) = stored {
                    return read_version(tx, &org, &stack, Some(version))?
                        .map(|(m, _)| m)
                        .ok_or_else(|| StoreError::Backend("stored version vanished".into()));
                }
            }
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
            let recovery_reason = outcome.recovered.then(|| {
                new.recovery_reason
                    .clone()
                    .unwrap_or_else(|| "the engine could not write it".to_string())
            });
            tx.prepare_cached(
                "INSERT INTO state_versions (org_id, stack_id, version, serial, lineage, checksum,
                    size, writer_kind, writer_id, token_id, created_at, late_write, forced,
                    outputs, body, recovery_reason)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
            )?
            .execute(params![
                org,
                stack,
                version,
                serial,
                new.doc.lineage,
                checksum,
                new.body.len() as i64,
                new.request.writer.kind(),
                new.request.writer.id(),
                new.token_id,
                millis(Utc::now()),
                outcome.late_write,
                new.request.force,
                outputs_json(&new.doc),
                new.body,
                recovery_reason,
            ])?;
            if outcome.current {
                tx.prepare_cached(
                    "UPDATE state_heads SET current_version = ?3 WHERE org_id = ?1 AND stack_id = ?2",
                )?
                .execute(params![org, stack, version])?;
            }
            if outcome.late_write {
                notify::late_write(tx, &org, &stack, version, &new.request.writer)?;
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

    async fn create_run(&self, run: &NewRun, audit: Option<&Audit>) -> Result<RunRecord> {
        let (run, audit) = (run.clone(), audit.cloned());
        self.write(move |tx| {
            let created = insert_run(tx, &run, None)?;
            if let Some(audit) = &audit {
                append_audit(tx, audit)?;
            }
            Ok(created)
        })
        .await
    }

    async fn get_run(&self, id: &str) -> Result<Option<RunRecord>> {
        let id = id.to_string();
        self.read(move |c| load_run(c, &id)).await
    }

    async fn list_runs(
        &self,
        org: &str,
        stack: Option<&str>,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<RunRecord>> {
        let (org, stack, before) = (
            org.to_string(),
            stack.map(str::to_string),
            before.map(str::to_string),
        );
        self.read(move |c| {
            // A cursor that is no run of the org lists nothing: never the list restarted.
            let before_created: Option<i64> = match &before {
                Some(b) => match c
                    .prepare_cached("SELECT created_at FROM runs WHERE org_id = ?1 AND id = ?2")?
                    .query_row(params![org, b], |r| r.get(0))
                    .optional()?
                {
                    Some(at) => Some(at),
                    None => return Ok(Vec::new()),
                },
                None => None,
            };
            query_runs(
                c,
                &format!(
                    "SELECT {RUN_COLUMNS} FROM runs WHERE org_id = ?1 AND (?2 IS NULL OR stack_id = ?2)
                     AND (?3 IS NULL OR created_at < ?3 OR (created_at = ?3 AND id < ?4))
                     ORDER BY created_at DESC, id DESC LIMIT ?5"
                ),
                params![org, stack, before_created, before, limit],
            )
        })
        .await
    }

    async fn run_phases(&self, run: &str) -> Result<Vec<RunPhaseRecord>> {
        let run = run.to_string();
        self.read(move |c| {
            let mut stmt = c.prepare_cached(
                "SELECT state, started_at, ended_at FROM run_phases WHERE run_id = ?1 ORDER BY rowid",
            )?;
            let rows = stmt.query_map([&run], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, Option<i64>>(2)?))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (state, started, ended) = row?;
                out.push(RunPhaseRecord {
                    state: state.parse().map_err(|e| corrupt("phase state", e))?,
                    started_at: from_millis(started)?,
                    ended_at: opt_from_millis(ended)?,
                });
            }
            Ok(out)
        })
        .await
    }

    async fn run_event(&self, run: &str, input: &RunEventInput) -> Result<RunEventResult> {
        let (id, input) = (run.to_string(), input.clone());
        self.write(move |tx| {
            let run =
                load_run(tx, &id)?.ok_or_else(|| StoreError::NotFound(format!("run {id:?}")))?;
            apply_event(tx, &run, &input)
        })
        .await
    }

    async fn cancel_run(&self, run: &str, audit: &Audit) -> Result<RunEventResult> {
        let (id, audit) = (run.to_string(), audit.clone());
        self.write(move |tx| {
            let run =
                load_run(tx, &id)?.ok_or_else(|| StoreError::NotFound(format!("run {id:?}")))?;
            let reason = format!("canceled by {}", audit.actor);
            cancel_in_tx(tx, &run, reason, &audit)
        })
        .await
    }

    async fn lease_run(&self, runner: &RunnerRecord) -> Result<Option<RunRecord>> {
        // Idle runners poll often: look without the write lock first.
        let waiting = self
            .read(|c| {
                exists(
                    c,
                    "SELECT 1 FROM runs WHERE needs_lease = 1 LIMIT 1",
                    params![],
                )
            })
            .await?;
        if !waiting {
            return Ok(None);
        }
        let runner = runner.clone();
        self.write(move |tx| {
            let candidates = query_runs(
                tx,
                &format!(
                    "SELECT {RUN_COLUMNS} FROM runs r WHERE r.needs_lease = 1
                     AND (?1 IS NULL OR r.org_id = ?1)
                     AND EXISTS (SELECT 1 FROM stacks s WHERE s.org_id = r.org_id
                                 AND s.id = r.stack_id AND s.runner_pool = ?2)
                     ORDER BY r.created_at, r.id LIMIT 100"
                ),
                params![runner.org, runner.pool],
            )?;
            for run in candidates {
                // Claim the row where the backend needs to: a run another dispatcher is
                // leasing right now is skipped, not waited for.
                if !db::claim_lease(tx, &run.id)? {
                    continue;
                }
                if run.kind == RunKind::Tracked {
                    let earlier = exists(
                        tx,
                        &format!(
                            "SELECT 1 FROM runs WHERE org_id = ?1 AND stack_id = ?2
                             AND kind = 'tracked' AND state NOT IN {TERMINAL_STATES}
                             AND held = 0 AND id <> ?4
                             AND (state <> 'queued' OR created_at < ?3
                                  OR (created_at = ?3 AND id < ?4))"
                        ),
                        params![run.org, run.stack, millis(run.created_at), run.id],
                    )?;
                    if earlier {
                        continue;
                    }
                    if let Some(l) = read_lock(tx, &run.org, &run.stack)? {
                        if l.holder != Writer::Run(run.id.clone()) {
                            let holder = lock_json(&l).to_string();
                            if run.blocked_by.as_ref().map(|b| b.to_string())
                                != Some(holder.clone())
                            {
                                tx.prepare_cached("UPDATE runs SET blocked_by = ?2 WHERE id = ?1")?
                                    .execute(params![run.id, holder])?;
                            }
                            continue;
                        }
                    }
                }
                let autodeploy = stack_autodeploy(tx, &run.org, &run.stack)?;
                let next = transition(run.state, run.facts(autodeploy), &Event::Leased)?;
                let now = millis(Utc::now());
                crate::signal::emit(Signal::Run(run.id.clone()));
                tx.prepare_cached(
                    "UPDATE runs SET state = ?2, phase = ?3, needs_lease = 0, leased = 1,
                        started = 0, runner_id = ?4, fencing = fencing + 1, last_heartbeat = ?5,
                        phase_started_at = NULL, blocked_by = NULL, updated_at = ?5
                     WHERE id = ?1",
                )?
                .execute(params![
                    run.id,
                    next.state.as_str(),
                    next.phase.as_str(),
                    runner.id,
                    now
                ])?;
                enter_state(tx, &run.id, run.state, next.state, now)?;
                tx.prepare_cached("UPDATE runners SET last_seen = ?2 WHERE id = ?1")?
                    .execute(params![runner.id, now])?;
                return load_run(tx, &run.id);
            }
            Ok(None)
        })
        .await
    }

    async fn heartbeat(&self, run: &str, fencing: i64) -> Result<bool> {
        let id = run.to_string();
        self.write(move |tx| {
            let now = millis(Utc::now());
            let n = tx
                .prepare_cached(
                    "UPDATE runs SET last_heartbeat = ?3 WHERE id = ?1 AND fencing = ?2 AND leased = 1",
                )?
                .execute(params![id, fencing, now])?;
            if n == 0 {
                return Err(StoreError::Fenced { run: id, fencing });
            }
            tx.prepare_cached(
                "UPDATE runners SET last_seen = ?2 WHERE id = (SELECT runner_id FROM runs WHERE id = ?1)",
            )?
            .execute(params![id, now])?;
            let cancel: bool = tx
                .prepare_cached("SELECT cancel_requested FROM runs WHERE id = ?1")?
                .query_row([&id], |r| r.get(0))?;
            Ok(cancel)
        })
        .await
    }

    async fn stale_runs(&self, before: DateTime<Utc>) -> Result<Vec<RunRecord>> {
        self.read(move |c| {
            query_runs(
                c,
                &format!("SELECT {RUN_COLUMNS} FROM runs WHERE leased = 1 AND last_heartbeat < ?1"),
                params![millis(before)],
            )
        })
        .await
    }

    async fn executing_runs(&self) -> Result<Vec<RunRecord>> {
        self.read(move |c| {
            query_runs(
                c,
                &format!("SELECT {RUN_COLUMNS} FROM runs WHERE leased = 1"),
                params![],
            )
        })
        .await
    }

    async fn busy_runners(&self) -> Result<std::collections::BTreeSet<String>> {
        self.read(metrics_busy_runners).await
    }

    async fn set_run_consumed(&self, run: &str, consumed: &Value) -> Result<bool> {
        let (run, consumed) = (run.to_string(), consumed.clone());
        self.write(move |tx| deps::set_consumed(tx, &run, &consumed))
            .await
    }

    async fn flag_late_write(&self, run: &str) -> Result<()> {
        let id = run.to_string();
        self.write(move |tx| {
            tx.prepare_cached("UPDATE runs SET late_write = 1 WHERE id = ?1")?
                .execute([&id])?;
            Ok(())
        })
        .await
    }

    async fn append_logs(&self, run: &str, fencing: i64, chunks: &[(i64, String)]) -> Result<()> {
        let (id, chunks) = (run.to_string(), chunks.to_vec());
        self.write(move |tx| {
            // Published only if this commits: a fenced append's signal is dropped.
            crate::signal::emit(Signal::Run(id.clone()));
            let current: Option<i64> = tx
                .prepare_cached("SELECT fencing FROM runs WHERE id = ?1")?
                .query_row([&id], |r| r.get(0))
                .optional()?;
            if current != Some(fencing) {
                return Err(StoreError::Fenced { run: id, fencing });
            }
            let mut insert = tx.prepare_cached(
                "INSERT OR IGNORE INTO run_logs (run_id, seq, text) VALUES (?1, ?2, ?3)",
            )?;
            for (seq, text) in &chunks {
                insert.execute(params![id, seq, text])?;
            }
            Ok(())
        })
        .await
    }

    async fn read_logs(
        &self,
        run: &str,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<(i64, String)>> {
        let id = run.to_string();
        self.read(move |c| {
            let mut stmt = c.prepare_cached(
                "SELECT seq, text FROM run_logs WHERE run_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
            )?;
            let rows = stmt.query_map(params![id, after.unwrap_or(-1), limit], |r| Ok((r.get(0)?, r.get(1)?)))?;
            Ok(rows.collect::<db::Result<Vec<_>>>()?)
        })
        .await
    }

    async fn next_log_seq(&self, run: &str) -> Result<i64> {
        let id = run.to_string();
        self.read(move |c| {
            Ok(c.prepare_cached(
                "SELECT COALESCE(MAX(seq), -1) + 1 FROM run_logs WHERE run_id = ?1",
            )?
            .query_row([&id], |r| r.get(0))?)
        })
        .await
    }

    async fn put_run_plan(&self, run: &str, fencing: i64, body: &[u8]) -> Result<()> {
        let (id, body) = (run.to_string(), body.to_vec());
        self.write(move |tx| {
            if !exists(
                tx,
                "SELECT 1 FROM runs WHERE id = ?1 AND fencing = ?2 AND leased = 1",
                params![id, fencing],
            )? {
                return Err(StoreError::Fenced { run: id, fencing });
            }
            tx.prepare_cached(
                "INSERT INTO run_plans (run_id, body) VALUES (?1, ?2)
                 ON CONFLICT (run_id) DO UPDATE SET body = excluded.body",
            )?
            .execute(params![id, body])?;
            Ok(())
        })
        .await
    }

    async fn get_run_plan(&self, run: &str) -> Result<Option<Vec<u8>>> {
        let id = run.to_string();
        self.read(move |c| {
            Ok(
                c.prepare_cached("SELECT body FROM run_plans WHERE run_id = ?1")?
                    .query_row([&id], |r| r.get(0))
                    .optional()?,
            )
        })
        .await
    }

    async fn register_runner(&self, runner: &RunnerRecord) -> Result<RunnerRecord> {
        let runner = runner.clone();
        self.write(move |tx| {
            tx.prepare_cached(&format!(
                "INSERT INTO runners ({RUNNER_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6, ?6)"
            ))?
            .execute(params![
                runner.id,
                runner.org,
                runner.pool,
                runner.name,
                runner.version,
                millis(Utc::now()),
            ])?;
            let row = tx
                .prepare_cached(&format!(
                    "SELECT {RUNNER_COLUMNS} FROM runners WHERE id = ?1"
                ))?
                .query_row([&runner.id], runner_row)?;
            runner_record(row)
        })
        .await
    }

    async fn get_runner(&self, id: &str) -> Result<Option<RunnerRecord>> {
        let id = id.to_string();
        self.read(move |c| {
            c.prepare_cached(&format!(
                "SELECT {RUNNER_COLUMNS} FROM runners WHERE id = ?1"
            ))?
            .query_row([&id], runner_row)
            .optional()?
            .map(runner_record)
            .transpose()
        })
        .await
    }

    async fn touch_runner(&self, id: &str) -> Result<()> {
        let id = id.to_string();
        self.write(move |tx| {
            tx.prepare_cached("UPDATE runners SET last_seen = ?2 WHERE id = ?1")?
                .execute(params![id, millis(Utc::now())])?;
            Ok(())
        })
        .await
    }

    async fn list_runners(&self, org: &str) -> Result<Vec<RunnerRecord>> {
        let org = org.to_string();
        self.read(move |c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {RUNNER_COLUMNS} FROM runners WHERE org_id IS NULL OR org_id = ?1
                 ORDER BY created_at, id"
            ))?;
            let rows = stmt.query_map([&org], runner_row)?;
            let mut out = Vec::new();
            for row in rows {
                out.push(runner_record(row?)?);
            }
            Ok(out)
        })
        .await
    }

    async fn drain_runner(&self, id: &str, audit: &Audit) -> Result<bool> {
        let (id, audit) = (id.to_string(), audit.clone());
        self.write(move |tx| {
            let n = tx
                .prepare_cached("UPDATE runners SET drained = 1 WHERE id = ?1 AND drained = 0")?
                .execute([&id])?;
            if n > 0 {
                append_audit(tx, &audit)?;
            }
            Ok(n > 0)
        })
        .await
    }

    async fn revoke_run_tokens(&self, run: &str) -> Result<()> {
        let id = run.to_string();
        self.write(move |tx| {
            tx.prepare_cached(
                "UPDATE tokens SET revoked_at = ?2 WHERE run_id = ?1 AND revoked_at IS NULL",
            )?
            .execute(params![id, millis(Utc::now())])?;
            Ok(())
        })
        .await
    }

    async fn stacks_for_repository(
        &self,
        repository: &str,
        branch: Option<&str>,
    ) -> Result<Vec<StackRecord>> {
        let (key, branch) = (normalize_repo_key(repository), branch.map(str::to_string));
        self.read(move |c| match &branch {
            Some(branch) => query_stacks(
                c,
                &format!(
                    "SELECT {STACK_COLUMNS} FROM stacks WHERE repo_key = ?1 AND branch = ?2
                     ORDER BY org_id, id"
                ),
                params![key, branch],
            ),
            None => query_stacks(
                c,
                &format!(
                    "SELECT {STACK_COLUMNS} FROM stacks WHERE repo_key = ?1 ORDER BY org_id, id"
                ),
                params![key],
            ),
        })
        .await
    }

    async fn git_remote_stacks(&self) -> Result<Vec<StackRecord>> {
        self.read(|c| {
            query_stacks(
                c,
                &format!(
                    "SELECT {STACK_COLUMNS} FROM stacks WHERE substr(repository, 1, 7) <> 'github:'
                     ORDER BY org_id, id"
                ),
                params![],
            )
        })
        .await
    }

    async fn apply_installation(&self, change: &InstallationChange, audit: &Audit) -> Result<()> {
        let (change, audit) = (change.clone(), audit.clone());
        self.write(move |tx| {
            let now = millis(Utc::now());
            match &change {
                InstallationChange::Created {
                    installation,
                    account,
                    repositories,
                } => {
                    tx.prepare_cached("DELETE FROM github_bindings WHERE installation = ?1")?
                        .execute([installation])?;
                    upsert_bindings(tx, *installation, account, repositories, false, now)?;
                }
                InstallationChange::Deleted { installation } => {
                    tx.prepare_cached("DELETE FROM github_bindings WHERE installation = ?1")?
                        .execute([installation])?;
                }
                InstallationChange::Suspended {
                    installation,
                    suspended,
                } => {
                    tx.prepare_cached(
                        "UPDATE github_bindings SET suspended = ?2, updated_at = ?3
                         WHERE installation = ?1",
                    )?
                    .execute(params![installation, suspended, now])?;
                }
                InstallationChange::RepositoriesAdded {
                    installation,
                    account,
                    repositories,
                } => {
                    // Repositories added to a suspended installation read as suspended too.
                    let suspended = exists(
                        tx,
                        "SELECT 1 FROM github_bindings WHERE installation = ?1 AND suspended = 1",
                        params![installation],
                    )?;
                    upsert_bindings(tx, *installation, account, repositories, suspended, now)?;
                }
                InstallationChange::RepositoriesRemoved {
                    installation,
                    repositories,
                } => {
                    let mut stmt = tx.prepare_cached(
                        "DELETE FROM github_bindings WHERE repository = ?1 AND installation = ?2",
                    )?;
                    for repo in repositories {
                        stmt.execute(params![github_name(repo), installation])?;
                    }
                }
            }
            append_audit(tx, &audit)
        })
        .await
    }

    async fn github_binding(&self, repository: &str) -> Result<Option<GithubBinding>> {
        let repository = github_name(repository);
        self.read(move |c| {
            let row = c
                .prepare_cached(
                    "SELECT repository, installation, account, suspended, updated_at
                     FROM github_bindings WHERE repository = ?1",
                )?
                .query_row([&repository], |r| {
                    <(String, i64, String, bool, i64)>::try_from(r)
                })
                .optional()?;
            row.map(|b| {
                Ok(GithubBinding {
                    repository: b.0,
                    installation: b.1,
                    account: b.2,
                    suspended: b.3,
                    updated_at: from_millis(b.4)?,
                })
            })
            .transpose()
        })
        .await
    }

    async fn record_delivery(&self, delivery: &NewDelivery) -> Result<DeliveryOutcome> {
        let delivery = delivery.clone();
        self.write(move |tx| {
            let now = millis(Utc::now());
            let first: Option<(i64, i64)> = tx
                .prepare_cached(
                    "SELECT id, received_at FROM deliveries
                     WHERE source = ?1 AND guid = ?2 AND duplicate_of IS NULL",
                )?
                .query_row(params![delivery.source.as_str(), delivery.guid], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .optional()?;
            match first {
                Some((first_id, received)) => {
                    record_duplicate(tx, &delivery, first_id, received, now)
                }
                None => record_first(tx, &delivery, now),
            }
        })
        .await
    }

    async fn find_delivery(
        &self,
        source: DeliverySource,
        guid: &str,
    ) -> Result<Option<DeliveryRecord>> {
        let guid = guid.to_string();
        self.read(move |c| {
            c.prepare_cached(&format!(
                "SELECT {DELIVERY_COLUMNS} FROM deliveries d
                 WHERE d.source = ?1 AND d.guid = ?2 AND d.duplicate_of IS NULL"
            ))?
            .query_row(params![source.as_str(), guid], delivery_row)
            .optional()?
            .map(delivery_record)
            .transpose()
        })
        .await
    }

    async fn list_triggers(
        &self,
        org: &str,
        stack: &str,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<TriggerRecord>> {
        let (org, stack) = (org.to_string(), stack.to_string());
        self.read(move |c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {DELIVERY_COLUMNS}, t.run_id, t.reason FROM trigger_decisions t
                 JOIN deliveries d ON d.id = t.delivery_id
                 WHERE t.org_id = ?1 AND t.stack_id = ?2 AND t.delivery_id < ?3
                 ORDER BY t.delivery_id DESC LIMIT ?4"
            ))?;
            let rows = stmt.query_map(
                params![org, stack, before.unwrap_or(i64::MAX), limit],
                |r| {
                    Ok((
                        delivery_row(r)?,
                        r.get::<_, Option<String>>(13)?,
                        r.get::<_, String>(14)?,
                    ))
                },
            )?;
            let mut out = Vec::new();
            for row in rows {
                let (delivery, run_id, reason) = row?;
                out.push(TriggerRecord {
                    delivery: delivery_record(delivery)?,
                    run_id,
                    reason,
                });
            }
            Ok(out)
        })
        .await
    }

    async fn add_vcs_token(&self, token: &VcsTokenRecord) -> Result<()> {
        let token = token.clone();
        self.write(move |tx| {
            tx.prepare_cached(
                "INSERT INTO vcs_tokens (token, run_id, expires_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (token) DO UPDATE SET run_id = excluded.run_id,
                    expires_at = excluded.expires_at",
            )?
            .execute(params![token.token, token.run_id, millis(token.expires_at)])?;
            Ok(())
        })
        .await
    }

    async fn vcs_tokens_due(&self) -> Result<Vec<VcsTokenRecord>> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT v.token, v.run_id, v.expires_at FROM vcs_tokens v
                 LEFT JOIN runs r ON r.id = v.run_id
                 WHERE r.id IS NULL OR r.state IN {TERMINAL_STATES} OR v.expires_at <= ?1
                 ORDER BY v.expires_at, v.token"
            ))?;
            let rows = stmt.query_map([millis(Utc::now())], |r| {
                <(String, String, i64)>::try_from(r)
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (token, run_id, expires) = row?;
                out.push(VcsTokenRecord {
                    run_id,
                    token,
                    expires_at: from_millis(expires)?,
                });
            }
            Ok(out)
        })
        .await
    }

    async fn remove_vcs_token(&self, token: &str) -> Result<()> {
        let token = token.to_string();
        self.write(move |tx| {
            tx.prepare_cached("DELETE FROM vcs_tokens WHERE token = ?1")?
                .execute([&token])?;
            Ok(())
        })
        .await
    }

    async fn poll_head(&self, repository: &str, branch: &str) -> Result<Option<PollHead>> {
        let (repository, branch) = (repository.to_string(), branch.to_string());
        self.read(move |c| {
            let row = c
                .prepare_cached(
                    "SELECT repository, branch, commit_sha, checked_at FROM poll_heads
                     WHERE repository = ?1 AND branch = ?2",
                )?
                .query_row(params![repository, branch], |r| {
                    <(String, String, String, i64)>::try_from(r)
                })
                .optional()?;
            row.map(|h| {
                Ok(PollHead {
                    repository: h.0,
                    branch: h.1,
                    commit: h.2,
                    checked_at: from_millis(h.3)?,
                })
            })
            .transpose()
        })
        .await
    }

    async fn set_poll_head(&self, head: &PollHead) -> Result<()> {
        let head = head.clone();
        self.write(move |tx| {
            tx.prepare_cached(
                "INSERT INTO poll_heads (repository, branch, commit_sha, checked_at)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (repository, branch) DO UPDATE SET commit_sha = excluded.commit_sha,
                    checked_at = excluded.checked_at",
            )?
            .execute(params![
                head.repository,
                head.branch,
                head.commit,
                millis(head.checked_at)
            ])?;
            Ok(())
        })
        .await
    }

    async fn put_secret(
        &self,
        org: &str,
        namespace: &str,
        key: &str,
        value: &Sealed,
        audit: &Audit,
    ) -> Result<SecretMeta> {
        let (org, namespace, key) = (org.to_string(), namespace.to_string(), key.to_string());
        let (value, audit) = (value.clone(), audit.clone());
        self.write(move |tx| {
            let now = millis(Utc::now());
            let created: Option<i64> = tx
                .prepare_cached(
                    "SELECT created_at FROM secrets
                     WHERE org_id = ?1 AND namespace = ?2 AND key = ?3",
                )?
                .query_row(params![org, namespace, key], |r| r.get(0))
                .optional()?;
            let created = created.unwrap_or(now);
            let updated = now.max(created);
            tx.prepare_cached(
                "INSERT INTO secrets (org_id, namespace, key, ciphertext, nonce, key_id,
                                      created_at, updated_at, updated_by)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                 ON CONFLICT (org_id, namespace, key) DO UPDATE SET
                    ciphertext = excluded.ciphertext, nonce = excluded.nonce,
                    key_id = excluded.key_id, updated_at = excluded.updated_at,
                    updated_by = excluded.updated_by",
            )?
            .execute(params![
                org,
                namespace,
                key,
                value.ciphertext,
                value.nonce,
                value.key_id,
                created,
                updated,
                audit.actor,
            ])
            .map_err(|e| {
                if is_foreign_key_violation(&e) {
                    StoreError::NotFound(format!("org {org:?}"))
                } else {
                    e.into()
                }
            })?;
            append_audit(tx, &audit)?;
            Ok(SecretMeta {
                org,
                namespace,
                key,
                created_at: from_millis(created)?,
                updated_at: from_millis(updated)?,
                updated_by: audit.actor,
            })
        })
        .await
    }

    async fn delete_secret(
        &self,
        org: &str,
        namespace: &str,
        key: &str,
        audit: &Audit,
    ) -> Result<bool> {
        let (org, namespace, key) = (org.to_string(), namespace.to_string(), key.to_string());
        let audit = audit.clone();
        self.write(move |tx| {
            let done = tx
                .prepare_cached(
                    "DELETE FROM secrets WHERE org_id = ?1 AND namespace = ?2 AND key = ?3",
                )?
                .execute(params![org, namespace, key])?
                > 0;
            if done {
                append_audit(tx, &audit)?;
            }
            Ok(done)
        })
        .await
    }

    async fn list_secrets(&self, org: &str, namespace: Option<&str>) -> Result<Vec<SecretMeta>> {
        let (org, namespace) = (org.to_string(), namespace.map(str::to_string));
        self.read(move |c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {SECRET_META_COLUMNS} FROM secrets
                 WHERE org_id = ?1 AND (?2 IS NULL OR namespace = ?2)
                 ORDER BY namespace, key"
            ))?;
            let rows = stmt.query_map(params![org, namespace], secret_meta_row)?;
            let mut out = Vec::new();
            for row in rows {
                out.push(secret_meta(row?)?);
            }
            Ok(out)
        })
        .await
    }

    async fn get_secret(&self, org: &str, namespace: &str, key: &str) -> Result<Option<Sealed>> {
        let (org, namespace, key) = (org.to_string(), namespace.to_string(), key.to_string());
        self.read(move |c| {
            // Rows are keyed by org: another org's namespace of the same name is not read.
            let row = c
                .prepare_cached(
                    "SELECT ciphertext, nonce, key_id FROM secrets
                     WHERE org_id = ?1 AND namespace = ?2 AND key = ?3",
                )?
                .query_row(params![org, namespace, key], |r| {
                    <(Vec<u8>, Vec<u8>, String)>::try_from(r)
                })
                .optional()?;
            Ok(row.map(|(ciphertext, nonce, key_id)| Sealed {
                ciphertext,
                nonce,
                key_id,
            }))
        })
        .await
    }

    async fn sealed_values(&self) -> Result<Vec<(SealedOwner, Sealed)>> {
        self.read(|c| {
            let mut out = Vec::new();
            let mut stmt = c.prepare_cached(
                "SELECT org_id, namespace, key, ciphertext, nonce, key_id FROM secrets
                 ORDER BY org_id, namespace, key",
            )?;
            let rows = stmt.query_map([], |r| {
                <(String, String, String, Vec<u8>, Vec<u8>, String)>::try_from(r)
            })?;
            for row in rows {
                let (org, namespace, key, ciphertext, nonce, key_id) = row?;
                out.push((
                    SealedOwner::Secret {
                        org,
                        namespace,
                        key,
                    },
                    Sealed {
                        ciphertext,
                        nonce,
                        key_id,
                    },
                ));
            }
            let mut stmt = c.prepare_cached(
                "SELECT kid, private_ciphertext, private_nonce, key_id FROM oidc_signing_keys
                 ORDER BY created_at, rowid",
            )?;
            let rows = stmt.query_map([], |r| {
                <(String, Option<Vec<u8>>, Option<Vec<u8>>, Option<String>)>::try_from(r)
            })?;
            for row in rows {
                let (kid, ciphertext, nonce, key_id) = row?;
                let sealed = signing_key_sealed(&kid, ciphertext, nonce, key_id)?;
                out.push((SealedOwner::SigningKey { kid }, sealed));
            }
            out.extend(notify::sealed_secrets(c)?);
            Ok(out)
        })
        .await
    }

    async fn reseal(&self, values: &[(SealedOwner, Sealed)], audit: &Audit) -> Result<()> {
        let (values, audit) = (values.to_vec(), audit.clone());
        self.write(move |tx| {
            // Any owner gone fails the whole transaction: all values change or none.
            for (owner, value) in &values {
                reseal_one(tx, owner, value)?;
            }
            append_audit(tx, &audit)
        })
        .await
    }

    async fn add_signing_key(&self, key: &SigningKeyRecord, audit: &Audit) -> Result<()> {
        let (key, audit) = (key.clone(), audit.clone());
        self.write(move |tx| {
            let now = millis(Utc::now());
            tx.prepare_cached(
                "UPDATE oidc_signing_keys SET retired_at = ?1 WHERE retired_at IS NULL",
            )?
            .execute([now])?;
            tx.prepare_cached(&format!(
                "INSERT INTO oidc_signing_keys ({SIGNING_KEY_COLUMNS})
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
            ))?
            .execute(params![
                key.kid,
                key.private_key.ciphertext,
                key.private_key.nonce,
                key.private_key.key_id,
                key.public_jwk.to_string(),
                millis(key.created_at),
                key.retired_at.map(millis),
            ])
            .map_err(|e| exists_or(e, || format!("signing key {:?}", key.kid)))?;
            append_audit(tx, &audit)
        })
        .await
    }

    async fn signing_keys(&self) -> Result<Vec<SigningKeyRecord>> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {SIGNING_KEY_COLUMNS} FROM oidc_signing_keys
                 ORDER BY created_at DESC, rowid DESC"
            ))?;
            let rows = stmt.query_map([], signing_key_row)?;
            let mut out = Vec::new();
            for row in rows {
                out.push(signing_key_record(row?)?);
            }
            Ok(out)
        })
        .await
    }

    async fn prune_signing_keys(&self, before: DateTime<Utc>) -> Result<u64> {
        self.write(move |tx| {
            let deleted = tx
                .prepare_cached(
                    "DELETE FROM oidc_signing_keys
                     WHERE retired_at IS NOT NULL AND retired_at < ?1",
                )?
                .execute([millis(before)])?;
            Ok(deleted as u64)
        })
        .await
    }

    async fn add_id_request_token(&self, token: &IdRequestToken) -> Result<()> {
        let token = token.clone();
        self.write(move |tx| {
            tx.prepare_cached(
                "INSERT INTO id_request_tokens (secret_hash, run_id, phase, fencing, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                token.secret_hash,
                token.run_id,
                token.phase.as_str(),
                token.fencing,
                millis(token.expires_at),
            ])
            .map_err(|e| {
                if is_foreign_key_violation(&e) {
                    StoreError::NotFound(format!("run {:?}", token.run_id))
                } else if is_unique_violation(&e) {
                    StoreError::AlreadyExists("ID-token request token".into())
                } else {
                    e.into()
                }
            })?;
            Ok(())
        })
        .await
    }

    async fn id_request_token(
        &self,
        secret_hash: &str,
    ) -> Result<Option<(IdRequestToken, RunRecord)>> {
        let hash = secret_hash.to_string();
        self.read(move |c| {
            // One statement, so the token and its run come from the same snapshot. The
            // token's columns are renamed: `phase` and `fencing` are also the run's.
            let row = c
                .prepare_cached(&format!(
                    "SELECT {RUN_COLUMNS}, t_phase, t_fencing, t_expires_at FROM runs
                     JOIN (SELECT run_id AS t_run, phase AS t_phase, fencing AS t_fencing,
                                  expires_at AS t_expires_at
                           FROM id_request_tokens WHERE secret_hash = ?1) t ON id = t_run"
                ))?
                .query_row([&hash], |r| {
                    // The token's columns follow the run's.
                    let n = RUN_COLUMNS.split(',').count();
                    Ok((
                        run_row(r)?,
                        r.get::<_, String>(n)?,
                        r.get::<_, i64>(n + 1)?,
                        r.get::<_, i64>(n + 2)?,
                    ))
                })
                .optional()?;
            let Some((run, phase, fencing, expires)) = row else {
                return Ok(None);
            };
            let run = run_record(run)?;
            let token = IdRequestToken {
                secret_hash: hash,
                run_id: run.id.clone(),
                phase: phase.parse().map_err(|e| corrupt("phase", e))?,
                fencing,
                expires_at: from_millis(expires)?,
            };
            Ok(Some((token, run)))
        })
        .await
    }

    async fn metrics(&self) -> Result<StoreMetrics> {
        self.read(|c| {
            // Every figure from the same snapshot.
            db::snapshot(c, |tx| {
                let since = millis(Utc::now()) - METRICS_WINDOW.as_millis() as i64;
                let metrics = StoreMetrics {
                    runs: metrics_runs(tx)?,
                    late_writes: metrics_late_writes(tx)?,
                    window: METRICS_WINDOW,
                    queue_waits_ms: metrics_queue_waits(tx, since)?,
                    phase_durations_ms: metrics_phase_durations(tx, since)?,
                    runners: metrics_runners(tx)?,
                    busy_runners: metrics_busy_runners(tx)?,
                    locks: metrics_locks(tx)?,
                    trigger_decisions: metrics_trigger_decisions(tx)?,
                };
                Ok(metrics)
            })
        })
        .await
    }

    async fn search_audit(
        &self,
        org: Option<&str>,
        filter: &AuditFilter,
        before_seq: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditRecord>> {
        let org = org.map(str::to_string);
        let f = filter.clone();
        // `state` matches `state` and `state.…`: the prefix with LIKE's own characters
        // escaped, so `_` in an action name is not a wildcard.
        let under = f.action.as_ref().map(|a| {
            let escaped = a
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_");
            format!("{escaped}.%")
        });
        self.read(move |c| {
            let mut stmt = c.prepare_cached(
                "SELECT seq, at, org_id, actor, token_id, action, target, detail FROM audit_log
                 WHERE (?1 IS NULL OR org_id = ?1) AND seq < ?2
                   AND (?4 IS NULL OR actor = ?4) AND (?6 IS NULL OR target = ?6)
                   AND (?5 IS NULL OR action = ?5 OR action LIKE ?7 ESCAPE '\\')
                 ORDER BY seq DESC LIMIT ?3",
            )?;
            let args = params![
                org,
                before_seq.unwrap_or(i64::MAX),
                limit,
                f.actor,
                f.action,
                f.target,
                under
            ];
            let rows = stmt.query_map(args, |r| {
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

    async fn create_notification_target(
        &self,
        t: &NewNotificationTarget,
        audit: &Audit,
    ) -> Result<NotificationTargetRecord> {
        self.notify_create_target(t, audit).await
    }

    async fn update_notification_target(
        &self,
        t: &NewNotificationTarget,
        audit: &Audit,
    ) -> Result<NotificationTargetRecord> {
        self.notify_update_target(t, audit).await
    }

    async fn get_notification_target(
        &self,
        org: &str,
        id: &str,
    ) -> Result<Option<NotificationTargetRecord>> {
        self.notify_get_target(org, id).await
    }

    async fn list_notification_targets(&self, org: &str) -> Result<Vec<NotificationTargetRecord>> {
        self.notify_list_targets(org).await
    }

    async fn delete_notification_target(&self, org: &str, id: &str, audit: &Audit) -> Result<bool> {
        self.notify_delete_target(org, id, audit).await
    }

    async fn add_notification_event(
        &self,
        org: &str,
        event: &NewNotificationEvent,
    ) -> Result<Option<i64>> {
        self.notify_add_event(org, event).await
    }

    async fn notify_old_locks(&self, acquired_before: DateTime<Utc>) -> Result<u64> {
        self.notify_write_old_locks(acquired_before).await
    }

    async fn due_notifications(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<DueNotification>> {
        self.notify_due(now, limit).await
    }

    async fn record_notification_attempt(
        &self,
        delivery: i64,
        attempt: &NotificationAttempt,
    ) -> Result<()> {
        self.notify_record_attempt(delivery, attempt).await
    }

    async fn list_notification_deliveries(
        &self,
        org: &str,
        target: &str,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<NotificationDeliveryRecord>> {
        self.notify_list_deliveries(org, target, before, limit)
            .await
    }

    async fn prune_notifications(&self, before: DateTime<Utc>, batch: u32) -> Result<(u64, u64)> {
        self.notify_prune(before, batch).await
    }

    async fn drift_schedules(
        &self,
        org: Option<&str>,
        stack: Option<&str>,
    ) -> Result<Vec<DriftScheduleRecord>> {
        let (org, stack) = (org.map(str::to_string), stack.map(str::to_string));
        self.read(move |c| drift::schedules(c, org.as_deref(), stack.as_deref()))
            .await
    }

    async fn drift_schedules_between(
        &self,
        org: &str,
        first: &str,
        last: &str,
    ) -> Result<Vec<DriftScheduleRecord>> {
        let (org, first, last) = (org.to_string(), first.to_string(), last.to_string());
        self.read(move |c| drift::schedules_in(c, Some(&org), None, Some(&first), Some(&last)))
            .await
    }

    async fn fire_drift_schedule(&self, fire: &DriftFire) -> Result<DriftFired> {
        let fire = fire.clone();
        self.write(move |tx| drift::fire(tx, &fire)).await
    }

    async fn start_drift_check(&self, run: &NewRun, audit: &Audit) -> Result<RunRecord> {
        let (run, audit) = (run.clone(), audit.clone());
        self.write(move |tx| drift::start_check(tx, &run, &audit))
            .await
    }

    async fn unsettled_drift_runs(&self, limit: u32) -> Result<Vec<RunRecord>> {
        self.read(move |c| drift::unsettled(c, limit)).await
    }

    async fn settle_drift_run(
        &self,
        run: &str,
        result: bosun_core::drift::DriftResult,
        reconcile: Option<&NewRun>,
    ) -> Result<Option<DriftCheckRecord>> {
        let (run, reconcile) = (run.to_string(), reconcile.cloned());
        self.write(move |tx| drift::settle(tx, &run, result, reconcile.as_ref()))
            .await
    }

    async fn drift_check(&self, run: &str) -> Result<Option<DriftCheckRecord>> {
        let run = run.to_string();
        self.read(move |c| drift::check(c, &run)).await
    }

    async fn create_environment(
        &self,
        env: &NewEnvironment,
        audit: &Audit,
    ) -> Result<EnvironmentRecord> {
        self.plans_create_environment(env, audit).await
    }

    async fn update_environment(
        &self,
        env: &NewEnvironment,
        audit: &Audit,
    ) -> Result<EnvironmentRecord> {
        self.plans_update_environment(env, audit).await
    }

    async fn get_environment(&self, org: &str, id: &str) -> Result<Option<EnvironmentRecord>> {
        self.plans_get_environment(org, id).await
    }

    async fn list_environments(&self, org: &str) -> Result<Vec<EnvironmentRecord>> {
        self.plans_list_environments(org).await
    }

    async fn delete_environment(&self, org: &str, id: &str, audit: &Audit) -> Result<bool> {
        self.plans_delete_environment(org, id, audit).await
    }

    async fn grant_environment(
        &self,
        org: &str,
        env: &str,
        user: &str,
        audit: &Audit,
    ) -> Result<bool> {
        self.plans_grant(org, env, user, audit).await
    }

    async fn revoke_environment_grant(
        &self,
        org: &str,
        env: &str,
        user: &str,
        audit: &Audit,
    ) -> Result<bool> {
        self.plans_revoke(org, env, user, audit).await
    }

    async fn create_host(&self, host: &NewHost, audit: &Audit) -> Result<HostRecord> {
        self.plans_create_host(host, audit).await
    }

    async fn update_host(&self, host: &NewHost, audit: &Audit) -> Result<HostRecord> {
        self.plans_update_host(host, audit).await
    }

    async fn get_host(&self, org: &str, name: &str) -> Result<Option<HostRecord>> {
        self.plans_get_host(org, name).await
    }

    async fn list_hosts(&self, org: &str) -> Result<Vec<HostRecord>> {
        self.plans_list_hosts(org).await
    }

    async fn delete_host(&self, org: &str, name: &str, audit: &Audit) -> Result<bool> {
        self.plans_delete_host(org, name, audit).await
    }

    async fn import_inventory(
        &self,
        import: &InventoryImport,
        audit: &Audit,
    ) -> Result<InventoryImported> {
        self.plans_import_inventory(import, audit).await
    }

    async fn save_plan(&self, plan: &NewPlan, audit: &Audit) -> Result<PlanRecord> {
        self.plans_save_plan(plan, audit).await
    }

    async fn get_plan(&self, org: &str, name: &str) -> Result<Option<PlanRecord>> {
        self.plans_get_plan(org, name).await
    }

    async fn list_plans(&self, org: &str) -> Result<Vec<PlanRecord>> {
        self.plans_list_plans(org).await
    }

    async fn delete_plan(&self, org: &str, name: &str, audit: &Audit) -> Result<bool> {
        self.plans_delete_plan(org, name, audit).await
    }

    async fn create_plan_run(&self, run: &NewPlanRun, audit: &Audit) -> Result<PlanRunRecord> {
        let (run, audit) = (run.clone(), audit.clone());
        self.write(move |tx| plan_runs::create(tx, &run, &audit))
            .await
    }

    async fn get_plan_run(&self, id: &str) -> Result<Option<PlanRunRecord>> {
        let id = id.to_string();
        self.read(move |c| plan_runs::load(c, &id)).await
    }

    async fn list_plan_runs(
        &self,
        org: &str,
        plan: Option<&str>,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<PlanRunRecord>> {
        let (org, plan, before) = (
            org.to_string(),
            plan.map(str::to_string),
            before.map(str::to_string),
        );
        self.read(move |c| plan_runs::list(c, &org, plan.as_deref(), before.as_deref(), limit))
            .await
    }

    async fn plan_run_event(&self, id: &str, input: &PlanRunEventInput) -> Result<PlanRunRecord> {
        let (id, input) = (id.to_string(), input.clone());
        self.write(move |tx| plan_runs::event(tx, &id, &input))
            .await
    }

    async fn lease_plan_run(&self, runner: &RunnerRecord) -> Result<Option<PlanRunRecord>> {
        // Idle runners poll often: look without the write lock first.
        if !self.read(plan_runs::any_waiting).await? {
            return Ok(None);
        }
        let runner = runner.clone();
        self.write(move |tx| plan_runs::lease(tx, &runner)).await
    }

    async fn plan_run_heartbeat(&self, id: &str, fencing: i64) -> Result<bool> {
        let id = id.to_string();
        self.write(move |tx| plan_runs::heartbeat(tx, &id, fencing))
            .await
    }

    async fn stale_plan_runs(&self, before: DateTime<Utc>) -> Result<Vec<PlanRunRecord>> {
        self.read(move |c| plan_runs::stale(c, before)).await
    }

    async fn put_plan_run_results(
        &self,
        id: &str,
        fencing: i64,
        results: &[PlanHostResultRecord],
    ) -> Result<()> {
        let (id, results) = (id.to_string(), results.to_vec());
        self.write(move |tx| plan_runs::put_results(tx, &id, fencing, &results))
            .await
    }

    async fn plan_run_results(&self, id: &str) -> Result<Vec<PlanHostResultRecord>> {
        let id = id.to_string();
        self.read(move |c| plan_runs::results(c, &id)).await
    }

    async fn append_plan_run_logs(
        &self,
        id: &str,
        fencing: i64,
        chunks: &[(i64, String)],
    ) -> Result<()> {
        let (id, chunks) = (id.to_string(), chunks.to_vec());
        self.write(move |tx| plan_runs::append_logs(tx, &id, fencing, &chunks))
            .await
    }

    async fn read_plan_run_logs(
        &self,
        id: &str,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<(i64, String)>> {
        let id = id.to_string();
        self.read(move |c| plan_runs::read_logs(c, &id, after, limit))
            .await
    }

    async fn next_plan_run_log_seq(&self, id: &str) -> Result<i64> {
        let id = id.to_string();
        self.read(move |c| plan_runs::next_log_seq(c, &id)).await
    }

    async fn pending_approvals(&self, org: &str) -> Result<Vec<PendingApproval>> {
        let org = org.to_string();
        self.read(move |c| approvals::pending(c, &org)).await
    }

    async fn pending_approval(&self, org: &str, subject: &str) -> Result<PendingApproval> {
        let (org, subject) = (org.to_string(), subject.to_string());
        self.read(move |c| approvals::pending_one(c, &org, &subject))
            .await
    }

    async fn decide_approval(
        &self,
        input: &ApprovalDecisionInput,
    ) -> Result<(ApprovalRecord, ApprovalOutcome)> {
        let input = input.clone();
        self.write(move |tx| approvals::decide(tx, &input)).await
    }

    async fn approval_decisions(&self, org: &str, limit: u32) -> Result<Vec<ApprovalRecord>> {
        let org = org.to_string();
        self.read(move |c| approvals::decisions(c, &org, limit))
            .await
    }

    async fn put_plan_schedule(
        &self,
        input: &PlanScheduleInput,
        audit: &Audit,
    ) -> Result<PlanScheduleRecord> {
        let (input, audit) = (input.clone(), audit.clone());
        self.write(move |tx| approvals::put_schedule(tx, &input, &audit))
            .await
    }

    async fn delete_plan_schedule(&self, org: &str, plan: &str, audit: &Audit) -> Result<bool> {
        let (org, plan, audit) = (org.to_string(), plan.to_string(), audit.clone());
        self.write(move |tx| approvals::delete_schedule(tx, &org, &plan, &audit))
            .await
    }

    async fn plan_schedules(
        &self,
        org: Option<&str>,
        plan: Option<&str>,
    ) -> Result<Vec<PlanScheduleRecord>> {
        let (org, plan) = (org.map(str::to_string), plan.map(str::to_string));
        self.read(move |c| approvals::schedules(c, org.as_deref(), plan.as_deref()))
            .await
    }

    async fn fire_plan_schedule(&self, fire: &PlanScheduleFire) -> Result<PlanScheduleFired> {
        let fire = fire.clone();
        self.write(move |tx| approvals::fire(tx, &fire)).await
    }

    async fn try_duty_lease(
        &self,
        duty: &str,
        holder: &str,
        now: DateTime<Utc>,
        ttl: Duration,
    ) -> Result<bool> {
        let (duty, holder) = (duty.to_string(), holder.to_string());
        let ttl = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 4);
        let now = millis(now);
        self.write(move |tx| {
            // Inserted when free; overwritten only when expired or already ours: a live
            // lease of another holder leaves the row untouched (no row changed).
            let changed = tx.execute(
                "INSERT INTO duty_leases (duty, holder, expires_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (duty) DO UPDATE SET holder = excluded.holder,
                    expires_at = excluded.expires_at
                 WHERE duty_leases.holder = excluded.holder OR duty_leases.expires_at <= ?4",
                params![duty, holder, now.saturating_add(ttl), now],
            )?;
            Ok(changed == 1)
        })
        .await
    }

    async fn release_duty_leases(&self, holder: &str) -> Result<u64> {
        let holder = holder.to_string();
        self.write(move |tx| {
            let n = tx.execute("DELETE FROM duty_leases WHERE holder = ?1", params![holder])?;
            Ok(n as u64)
        })
        .await
    }
}

// ---- /metrics: the store's figures, each a bounded query ----

/// How far back `/metrics` timings reach (runs created within it).
const METRICS_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// The window's runs, found through the `runs_dispatch (needs_lease, created_at)` index:
/// `needs_lease IN (0, 1)` names every run and lets the database seek on `created_at`.
const METRICS_WINDOW_RUNS: &str = "r.needs_lease IN (0, 1) AND r.created_at >= ?1";

fn metrics_runs(c: &Connection) -> Result<BTreeMap<(String, String), i64>> {
    let mut stmt =
        c.prepare_cached("SELECT kind, state, COUNT(*) FROM runs GROUP BY kind, state")?;
    let rows = stmt.query_map([], |r| Ok(((r.get(0)?, r.get(1)?), r.get(2)?)))?;
    Ok(rows.collect::<db::Result<_>>()?)
}

fn metrics_late_writes(c: &Connection) -> Result<i64> {
    let mut stmt = c.prepare_cached("SELECT COUNT(*) FROM state_versions WHERE late_write = 1")?;
    Ok(stmt.query_row([], |r| r.get(0))?)
}

/// Creation to first lease (the first `preparing` stint), of the window's leased runs.
fn metrics_queue_waits(c: &Connection, since: i64) -> Result<Vec<i64>> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT {GREATEST}(0, MIN(p.started_at) - r.created_at)
         FROM runs r JOIN run_phases p ON p.run_id = r.id
         WHERE {METRICS_WINDOW_RUNS} AND p.state = 'preparing'
         GROUP BY r.id"
    ))?;
    let rows = stmt.query_map([since], |r| r.get(0))?;
    Ok(rows.collect::<db::Result<_>>()?)
}

/// Every ended stint of the window's runs, by the state it was in.
fn metrics_phase_durations(c: &Connection, since: i64) -> Result<BTreeMap<String, Vec<i64>>> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT p.state, {GREATEST}(0, p.ended_at - p.started_at)
         FROM runs r JOIN run_phases p ON p.run_id = r.id
         WHERE {METRICS_WINDOW_RUNS} AND p.ended_at IS NOT NULL"
    ))?;
    let rows = stmt.query_map([since], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
    })?;
    let mut out: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for row in rows {
        let (state, ms) = row?;
        out.entry(state).or_default().push(ms);
    }
    Ok(out)
}

fn metrics_runners(c: &Connection) -> Result<Vec<RunnerRecord>> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT {RUNNER_COLUMNS} FROM runners ORDER BY created_at, id"
    ))?;
    let rows = stmt.query_map([], runner_row)?;
    let mut out = Vec::new();
    for row in rows {
        out.push(runner_record(row?)?);
    }
    Ok(out)
}

/// The runners holding a lease on a stack run or a plan run.
fn metrics_busy_runners(c: &Connection) -> Result<std::collections::BTreeSet<String>> {
    let mut stmt = c.prepare_cached(
        "SELECT runner_id FROM runs WHERE leased = 1 AND runner_id IS NOT NULL
         UNION SELECT runner_id FROM plan_runs WHERE leased = 1 AND runner_id IS NOT NULL",
    )?;
    let rows = stmt.query_map([], |r| r.get(0))?;
    Ok(rows.collect::<db::Result<_>>()?)
}

fn metrics_locks(c: &Connection) -> Result<Vec<HeldLock>> {
    let mut stmt = c.prepare_cached(
        "SELECT org_id, stack_id, lock_acquired_at FROM state_heads
         WHERE lock_id IS NOT NULL ORDER BY org_id, stack_id",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, i64>(2)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (org, stack, at) = row?;
        out.push(HeldLock {
            org,
            stack,
            acquired_at: from_millis(at)?,
        });
    }
    Ok(out)
}

/// A decision on a repeated delivery is `duplicate`; otherwise it started a run or not.
fn metrics_trigger_decisions(c: &Connection) -> Result<DecisionCounts> {
    Ok(c.prepare_cached(
        "SELECT
            COALESCE(SUM(CASE WHEN d.duplicate_of IS NULL AND t.run_id IS NOT NULL
                THEN 1 ELSE 0 END), 0),
            COALESCE(SUM(CASE WHEN d.duplicate_of IS NULL AND t.run_id IS NULL
                THEN 1 ELSE 0 END), 0),
            COALESCE(SUM(CASE WHEN d.duplicate_of IS NOT NULL THEN 1 ELSE 0 END), 0)
         FROM trigger_decisions t JOIN deliveries d ON d.id = t.delivery_id",
    )?
    .query_row([], |r| {
        Ok(DecisionCounts {
            triggered: r.get(0)?,
            ignored: r.get(1)?,
            duplicate: r.get(2)?,
        })
    })?)
}
