//! The SQLite backend: one database file in WAL mode, migrations applied on open.
//!
//! Calls run on tokio's blocking pool with a connection of their own: one writer
//! connection (so write transactions, which start with `BEGIN IMMEDIATE`, are serialized
//! in-process and a read-check-write such as the cycle check never races), and a small
//! pool of readers that run concurrently under WAL. A whole store call — all its queries
//! and rows — is one hop to a blocking thread, never one hop per row.
//!
//! The store's rules live in `src/sql/`, one source compiled into this backend and the
//! PostgreSQL one, reading what differs through `db` below — the store traits' methods
//! too (`sql/store/`). This file owns the connections, the `read`/`write` calls those
//! methods run their closures through, migrations, and the `db` hooks (`close`, the
//! `/metrics` snapshot, the lease claim, `GREATEST`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, Row, Transaction, TransactionBehavior};
use tokio::sync::Semaphore;

use crate::*;

// The store's SQL (`src/sql/`): one source compiled into both backends, reading this
// backend's types and dialect through `db`.
#[path = "sql/mod.rs"]
mod sql;

use sql::common::closed;

/// What the shared SQL modules (`src/sql/`) take from this backend: its connection,
/// transaction, row and parameter types (rusqlite's), its store type, and the few places
/// where SQLite's SQL or API differs from PostgreSQL's.
mod db {
    pub(super) use rusqlite::{params, OptionalExtension, Result, ToSql, Transaction};

    pub(super) type Store = super::SqliteStore;

    /// Appended to a leasing `SELECT`: nothing here, since SQLite's single writer
    /// connection already serializes leasing.
    pub(super) const SKIP_LOCKED: &str = "";

    /// The rowid the transaction's last `INSERT` took.
    pub(super) fn last_insert_id(tx: &Transaction<'_>) -> crate::Result<i64> {
        Ok(tx.last_insert_rowid())
    }

    /// The scalar "larger of" function: SQLite's two-argument `MAX`.
    pub(super) const GREATEST: &str = "MAX";
    pub(super) const LEAST: &str = "MIN";

    /// Claims a leasing candidate: always won here, since the single writer connection
    /// already serializes leasing.
    pub(super) fn claim_lease(_tx: &Transaction<'_>, _run: &str) -> crate::Result<bool> {
        Ok(true)
    }

    /// Nothing here: SQLite plans each statement once, knowing nothing of its values.
    pub(super) fn plan_for_values(_c: &super::Connection) -> crate::Result<()> {
        Ok(())
    }

    /// Runs `f` in one deferred read transaction on a reader connection, so every query
    /// sees the same snapshot.
    pub(super) fn snapshot<T>(
        c: &super::Connection,
        f: impl FnOnce(&super::Connection) -> crate::Result<T>,
    ) -> crate::Result<T> {
        let tx = c.unchecked_transaction()?;
        f(&tx)
    }

    /// Sends a signal to this store's subscribers: one process, so that is everyone.
    pub(super) fn publish(store: &Store, signal: crate::Signal) {
        store.inner.signals.send(signal);
    }

    /// Takes every connection so no call can start, folds the WAL into the database file,
    /// and closes them before the process exits.
    pub(super) async fn close(store: &Store) {
        let inner = store.inner.clone();
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
}

/// Migrations embedded in the binary, applied in order. The index + 1 is the version.
const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/sqlite/0001_init.sql"),
    include_str!("../migrations/sqlite/0002_state.sql"),
    include_str!("../migrations/sqlite/0003_runs.sql"),
    include_str!("../migrations/sqlite/0004_vcs.sql"),
    include_str!("../migrations/sqlite/0005_identity.sql"),
    include_str!("../migrations/sqlite/0006_dependencies.sql"),
    include_str!("../migrations/sqlite/0007_notifications.sql"),
    include_str!("../migrations/sqlite/0008_drift.sql"),
    include_str!("../migrations/sqlite/0009_plan_resources.sql"),
    include_str!("../migrations/sqlite/0010_plan_runs.sql"),
    include_str!("../migrations/sqlite/0011_approvals.sql"),
    include_str!("../migrations/sqlite/0012_duty_leases.sql"),
    include_str!("../migrations/sqlite/0013_run_holds.sql"),
    include_str!("../migrations/sqlite/0014_notify_retention.sql"),
    include_str!("../migrations/sqlite/0015_file_schedules.sql"),
    include_str!("../migrations/sqlite/0016_audit_filters.sql"),
    include_str!("../migrations/sqlite/0017_secret_namespaces_per_org.sql"),
    include_str!("../migrations/sqlite/0018_recovered_state.sql"),
    include_str!("../migrations/sqlite/0019_log_times_lock_waits.sql"),
    include_str!("../migrations/sqlite/0020_plan_run_previews.sql"),
    include_str!("../migrations/sqlite/0021_scan_indexes.sql"),
    include_str!("../migrations/sqlite/0022_state_retention.sql"),
    include_str!("../migrations/sqlite/0023_run_retention.sql"),
    include_str!("../migrations/sqlite/0024_drift_due.sql"),
    include_str!("../migrations/sqlite/0025_approval_inbox.sql"),
    include_str!("../migrations/sqlite/0026_metric_counts.sql"),
    include_str!("../migrations/sqlite/0027_delivery_retention.sql"),
    include_str!("../migrations/sqlite/0028_plan_run_retention.sql"),
    include_str!("../migrations/sqlite/0029_run_approval_gate.sql"),
    include_str!("../migrations/sqlite/0030_metrics_bounded.sql"),
    include_str!("../migrations/sqlite/0031_run_pool.sql"),
    include_str!("../migrations/sqlite/0032_pr_feedback.sql"),
    include_str!("../migrations/sqlite/0033_runner_egress.sql"),
    include_str!("../migrations/sqlite/0034_dependencies_upstream.sql"),
    include_str!("../migrations/sqlite/0035_metric_counts_by_org.sql"),
    include_str!("../migrations/sqlite/0036_drift_alerts_by_org.sql"),
    include_str!("../migrations/sqlite/0037_host_proxy_jump.sql"),
    include_str!("../migrations/sqlite/0038_policies.sql"),
    include_str!("../migrations/sqlite/0039_stack_labels.sql"),
    include_str!("../migrations/sqlite/0040_host_sources.sql"),
    include_str!("../migrations/sqlite/0041_plan_triggers.sql"),
    include_str!("../migrations/sqlite/0042_sign_in.sql"),
    include_str!("../migrations/sqlite/0043_cli_loopback.sql"),
];

/// The schema version this binary writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

const READERS: usize = 4;
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// The database file, for opening a writer connection again.
    path: PathBuf,
    /// `None` once the store is closed.
    writer: Mutex<Option<Connection>>,
    readers: Mutex<Vec<Connection>>,
    /// One permit per idle reader in `readers`.
    reader_permits: Semaphore,
    /// Signals to this store's subscribers (one process: in-process only).
    signals: crate::signal::Hub,
    /// When calls last failed for want of a usable disk, and why writes fail now.
    availability: crate::availability::Availability,
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        match unavailable(&e) {
            Some(why) => StoreError::Unavailable(why),
            None => StoreError::Backend(e.to_string()),
        }
    }
}

/// The errors that mean the database file cannot be read or written right now — its
/// filesystem full or read-only, an I/O error, a file that cannot be opened, another
/// process holding the write lock past the busy timeout — in plain words. They pass once
/// the disk is fixed, without a restart.
fn unavailable(e: &rusqlite::Error) -> Option<String> {
    use rusqlite::ErrorCode;
    let rusqlite::Error::SqliteFailure(failure, _) = e else {
        return None;
    };
    let what = match failure.code {
        ErrorCode::DiskFull => "the data directory's filesystem is full",
        ErrorCode::ReadOnly => "the database is read-only",
        ErrorCode::SystemIoFailure => "the database's disk cannot be read or written",
        ErrorCode::CannotOpen => "the database file cannot be opened",
        ErrorCode::DatabaseBusy => "the database is busy: another process holds its write lock",
        _ => return None,
    };
    Some(format!("{what} (SQLite: {e})"))
}

fn constraint_violation(e: &rusqlite::Error, code: std::ffi::c_int) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.extended_code == code)
}

/// A unique-constraint violation becomes `AlreadyExists(what())`; any other error passes.
fn exists_or(e: rusqlite::Error, what: impl FnOnce() -> String) -> StoreError {
    if is_unique_violation(&e) {
        StoreError::AlreadyExists(what())
    } else {
        e.into()
    }
}

fn is_unique_violation(e: &rusqlite::Error) -> bool {
    constraint_violation(e, rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE)
        || constraint_violation(e, rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY)
}

fn is_foreign_key_violation(e: &rusqlite::Error) -> bool {
    constraint_violation(e, rusqlite::ffi::SQLITE_CONSTRAINT_FOREIGNKEY)
}

/// Creates the database file readable by its owner only (0600) before SQLite opens it —
/// SQLite gives the `-wal` and `-shm` files the database file's mode — and takes group
/// and other access away from a database, WAL and shared-memory file made looser before.
/// The database holds token hashes, sealed secrets and the audit log.
fn make_private(path: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let io = |what: &Path, e: std::io::Error| {
            StoreError::Backend(format!("cannot make {} private: {e}", what.display()))
        };
        let mut create = std::fs::OpenOptions::new();
        create.write(true).create_new(true).mode(0o600);
        match create.open(path) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(path, e)),
        }
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        let mut shm = path.as_os_str().to_owned();
        shm.push("-shm");
        for file in [path.to_path_buf(), PathBuf::from(wal), PathBuf::from(shm)] {
            let mode = match std::fs::metadata(&file) {
                Ok(m) => m.permissions().mode(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io(&file, e)),
            };
            if mode & 0o077 != 0 {
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode & 0o700))
                    .map_err(|e| io(&file, e))?;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
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
    #[cfg(feature = "testsuite")]
    if crate::query_log::recording() {
        use rusqlite::trace::{TraceEvent, TraceEventCodes};
        use rusqlite::StatementStatus;
        thread_local! {
            // Each running statement's step counter when it began: SQLite's counters
            // add up over every execution of a cached statement.
            static STEPS_AT_START: std::cell::RefCell<std::collections::HashMap<String, i32>> =
                Default::default();
        }
        conn.trace_v2(
            TraceEventCodes::SQLITE_TRACE_STMT | TraceEventCodes::SQLITE_TRACE_PROFILE,
            Some(|event| match event {
                // A trigger's statements come as a comment naming it.
                TraceEvent::Stmt(stmt, sql) if !sql.starts_with("--") => {
                    crate::query_log::record(sql, Vec::new());
                    let at = stmt.get_status(StatementStatus::VmStep);
                    STEPS_AT_START.with(|s| s.borrow_mut().insert(sql.to_string(), at));
                }
                TraceEvent::Profile(stmt, _) => {
                    let sql = stmt.sql();
                    let start = STEPS_AT_START.with(|s| s.borrow_mut().remove(sql.as_ref()));
                    let now = stmt.get_status(StatementStatus::VmStep);
                    let steps = now.saturating_sub(start.unwrap_or(0)).max(0) as u64;
                    crate::query_log::stepped(&sql, steps);
                }
                _ => {}
            }),
        );
    }
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
        make_private(path)?;
        let mut writer = open_writer(path)?;
        migrate(&mut writer)?;
        let mut readers = Vec::with_capacity(READERS);
        for _ in 0..READERS {
            let r = open_connection(path)?;
            r.pragma_update(None, "query_only", "ON")?;
            readers.push(r);
        }
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                path: path.to_path_buf(),
                writer: Mutex::new(Some(writer)),
                readers: Mutex::new(readers),
                reader_permits: Semaphore::new(READERS),
                signals: crate::signal::Hub::new(),
                availability: Default::default(),
            }),
        })
    }

    /// Runs `f` on a reader connection on the blocking pool.
    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        #[cfg(feature = "testsuite")]
        crate::query_log::call();
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
        self.inner.availability.read(&result);
        result
    }

    /// Runs `f` in an immediate write transaction on the writer connection, committing
    /// when it returns `Ok` and rolling back otherwise; the signals `f` emitted are
    /// published after the commit. A transaction the disk refused (full, read-only) is
    /// rolled back, and a writer left inside it replaced, so writes work again as soon
    /// as the disk does.
    async fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> Result<T> + Send + 'static,
    {
        #[cfg(feature = "testsuite")]
        crate::query_log::call();
        let inner = self.inner.clone();
        let result = tokio::task::spawn_blocking(move || {
            let mut guard = inner.writer.lock().map_err(|_| closed())?;
            let conn = guard.as_mut().ok_or_else(closed)?;
            let out = (|| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                crate::signal::take_pending();
                let out = f(&tx)?;
                tx.commit()?;
                Ok(out)
            })();
            match out {
                Ok(out) => {
                    for signal in crate::signal::take_pending() {
                        inner.signals.send(signal);
                    }
                    Ok(out)
                }
                Err(e) => {
                    settle_writer(&mut guard, &inner.path);
                    Err(e)
                }
            }
        })
        .await
        .map_err(|e| StoreError::Backend(format!("store task failed: {e}")))?;
        self.inner.availability.write(&result);
        result
    }
}

/// After a failed write: the transaction was rolled back when it was dropped, but a
/// rollback the disk refused too can leave the writer inside it, where every later
/// `BEGIN` would fail. Such a writer is rolled back again or, failing that, replaced by a
/// new connection (kept as it is when none can be opened yet: the next failed write
/// tries again).
fn settle_writer(writer: &mut Option<Connection>, path: &Path) {
    let Some(conn) = writer.as_mut() else {
        return;
    };
    if conn.is_autocommit() {
        return;
    }
    if conn.execute_batch("ROLLBACK").is_ok() && conn.is_autocommit() {
        return;
    }
    match open_writer(path) {
        Ok(fresh) => {
            tracing::warn!("the database writer was left inside a failed transaction; replaced it");
            *writer = Some(fresh);
        }
        Err(e) => tracing::warn!(error = %e, "cannot replace the database writer yet"),
    }
}

/// The writer connection: a reader's settings plus a larger page cache.
fn open_writer(path: &Path) -> Result<Connection> {
    let writer = open_connection(path)?;
    // A webhook delivery writes one decision row per stack of its repository; with
    // thousands of stacks the default 2 MiB cache spills dirty pages to the WAL
    // mid-transaction. 32 MiB keeps such a transaction in memory.
    writer.pragma_update(None, "cache_size", -32 * 1024)?;
    Ok(writer)
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

#[cfg(test)]
mod tests {
    use rusqlite::ffi;

    /// SQLite's plan for `sql` (with `params` parameters, all NULL) on the current schema:
    /// one line per step.
    fn query_plan(sql: &str, params: usize) -> Vec<String> {
        let c = rusqlite::Connection::open_in_memory().unwrap();
        for m in super::MIGRATIONS {
            c.execute_batch(m).unwrap();
        }
        let mut stmt = c.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let nulls = vec![rusqlite::types::Null; params];
        let rows = stmt
            .query_map(rusqlite::params_from_iter(nulls), |r| r.get::<_, String>(3))
            .unwrap();
        rows.map(Result::unwrap).collect()
    }

    /// A stack's runs and a plan's runs, newest first, from the start or after a cursor:
    /// read in their index's order, never all of the org's runs sorted.
    #[test]
    fn a_stacks_or_a_plans_runs_are_read_in_index_order() {
        for (table, group, index) in [
            ("runs", "stack_id", "runs_stack"),
            ("plan_runs", "plan", "plan_runs_plan"),
        ] {
            for cursor in [false, true] {
                let sql = super::sql::common::newest_first_sql("id", table, group, true, cursor);
                let plan = query_plan(&sql, 5);
                let search = format!("SEARCH {table} USING INDEX {index} (org_id=? AND {group}=?");
                assert!(
                    plan.iter().any(|l| l.starts_with(&search)),
                    "{table}, cursor {cursor}: {plan:#?}"
                );
                assert!(
                    !plan.iter().any(|l| l == "USE TEMP B-TREE FOR ORDER BY"),
                    "{table}, cursor {cursor}: all the org's runs sorted: {plan:#?}"
                );
            }
        }
    }

    /// Drift schedules of one org or one stack (the stack page, `GET …/stacks/{id}`)
    /// search the stacks index: a scan would read every stack of every org to return one.
    #[test]
    fn drift_schedules_of_an_org_or_a_stack_search_the_stacks_index() {
        for filters in [
            [true, true, false, false],
            [true, false, false, false],
            [true, false, true, true],
        ] {
            let plan = query_plan(&super::sql::drift::schedules_sql(filters), 4);
            assert!(
                plan.iter().any(|l| l.starts_with("SEARCH s USING")),
                "{filters:?}: {plan:#?}"
            );
            assert!(
                !plan.iter().any(|l| l.starts_with("SCAN s")),
                "{filters:?} reads every stack: {plan:#?}"
            );
        }
    }

    /// An org's audit log, filtered or not, is read newest first from the org's own
    /// index: the whole log (every org's) read backwards from the cursor would be scanned
    /// to fill one org's page.
    #[test]
    fn an_orgs_audit_records_are_searched_in_its_indexes() {
        for (filters, index) in [
            (
                [true, false, false, false],
                "audit_log_org (org_id=? AND seq<?)",
            ),
            (
                [true, true, false, false],
                "audit_log_actor (org_id=? AND actor=? AND seq<?)",
            ),
            (
                [true, false, true, false],
                "audit_log_target (org_id=? AND target=? AND seq<?)",
            ),
            (
                [true, false, false, true],
                "audit_log_org (org_id=? AND seq<?)",
            ),
        ] {
            let plan = query_plan(&super::sql::audit::search_sql(filters), 7);
            assert_eq!(
                plan,
                [format!("SEARCH audit_log USING INDEX {index}")],
                "{filters:?}"
            );
        }
    }

    fn failure(code: std::ffi::c_int) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(ffi::Error::new(code), None)
    }

    #[test]
    fn a_disk_that_cannot_be_written_is_unavailable_in_plain_words() {
        let said = |code| match crate::StoreError::from(failure(code)) {
            crate::StoreError::Unavailable(why) => Some(why),
            _ => None,
        };
        let full = said(ffi::SQLITE_FULL).unwrap();
        assert!(
            full.starts_with("the data directory's filesystem is full (SQLite: "),
            "{full}"
        );
        for code in [ffi::SQLITE_READONLY, ffi::SQLITE_READONLY_DBMOVED] {
            let why = said(code).unwrap();
            assert!(why.starts_with("the database is read-only"), "{why}");
        }
        for code in [
            ffi::SQLITE_IOERR,
            ffi::SQLITE_IOERR_WRITE,
            ffi::SQLITE_IOERR_FSYNC,
        ] {
            let why = said(code).unwrap();
            assert!(why.contains("cannot be read or written"), "{why}");
        }
        assert!(said(ffi::SQLITE_CANTOPEN)
            .unwrap()
            .contains("cannot be opened"));
        assert!(said(ffi::SQLITE_BUSY).unwrap().contains("busy"));
        for code in [
            ffi::SQLITE_CONSTRAINT_UNIQUE,
            ffi::SQLITE_CORRUPT,
            ffi::SQLITE_ERROR,
            ffi::SQLITE_MISUSE,
        ] {
            assert_eq!(said(code), None, "{code}");
        }
    }
}
