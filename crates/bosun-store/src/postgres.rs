//! The PostgreSQL backend: several Bosun servers may share one database, so every rule
//! SQLite got from its single in-process writer holds here through the database itself.
//!
//! - Every write call is one `SERIALIZABLE` transaction, retried whole (with a short,
//!   growing jittered pause) when PostgreSQL reports a serialization failure or a
//!   deadlock. Serializable snapshot isolation makes each commit equivalent to running
//!   the transactions one at a time, across connections and replicas alike: the state
//!   write/lock decisions, the dependency-cycle check, the plan-run concurrency guard,
//!   delivery de-duplication and every compare-and-set read their rows and decide
//!   exactly as on SQLite, and a racing transaction that would break a decision is
//!   rolled back and decides again on fresh data. No rule relies on an in-process lock.
//! - Leasing (`lease_run`, `lease_plan_run`) takes candidate rows `FOR UPDATE SKIP
//!   LOCKED`, so two dispatchers never wait on (or take) the same run.
//! - Read calls run in a `REPEATABLE READ READ ONLY` transaction: one consistent
//!   snapshot per call, like SQLite's WAL readers. Its answer goes back when its last
//!   statement has; the `ROLLBACK` that ends it follows, before the connection is pooled
//!   again, so no request waits for that round trip.
//! - Statements are prepared once per connection and PostgreSQL may plan them once for
//!   any values after a few runs. A read whose best index depends on its values (the
//!   audit search: a rare actor among millions of another's records) asks for a plan
//!   of its own values with `db::plan_for_values`.
//! - The audit log refuses UPDATE, DELETE and TRUNCATE, and state versions refuse
//!   UPDATE, through triggers (migrations in `migrations/postgres/`, one per SQLite
//!   migration with the same number). Migrations run under a transaction-scoped advisory
//!   lock, so replicas starting together apply them once.
//!
//! Calls run on tokio's blocking pool with a pooled connection of their own (the
//! synchronous `postgres` client); a whole store call — all its queries and rows — is one
//! hop to a blocking thread. The store's rules are the SQLite backend's own source: the
//! modules in `src/sql/` are compiled into both backends, here against `compat` (the same
//! statement API as rusqlite), and read what differs — types, row locking for leases, the
//! last insert id, the lease claim, `close`, the `/metrics` snapshot, `GREATEST` — through
//! `db` below; the store traits' methods are shared too (`sql/store/`). This file owns
//! the connections, the transaction loop (`read`/`write`), migrations and those hooks.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::postgres::error::SqlState;
use tokio::sync::Semaphore;

use crate::*;

pub(crate) mod compat;
pub(crate) mod conninfo;
// The store's SQL (`src/sql/`): one source compiled into both backends (the SQLite
// backend includes the same files, hence `duplicate_mod`), reading this backend's
// types and dialect through `db`.
#[allow(clippy::duplicate_mod)]
#[path = "sql/mod.rs"]
mod sql;

use sql::common::closed;

/// What the shared SQL modules (`src/sql/`) take from this backend: its connection,
/// transaction, row and parameter types (`compat`'s, shaped like rusqlite's), its store
/// type, and the few places where PostgreSQL's SQL or API differs from SQLite's.
mod db {
    pub(super) use super::compat::{params, OptionalExtension, Result, ToSql, Transaction};

    pub(super) type Store = super::PostgresStore;

    /// Appended to a leasing `SELECT`: the candidate row is locked, and rows another
    /// dispatcher holds are passed over, so two dispatchers never wait on the same run.
    pub(super) const SKIP_LOCKED: &str = " FOR UPDATE SKIP LOCKED";

    /// The id the transaction's last `INSERT` into an identity table took.
    pub(super) fn last_insert_id(tx: &Transaction<'_>) -> crate::Result<i64> {
        Ok(tx.last_insert_rowid()?)
    }

    /// The scalar "larger of" function.
    pub(super) const GREATEST: &str = "GREATEST";
    pub(super) const LEAST: &str = "LEAST";

    /// Claims a leasing candidate: its row is locked, and `false` when another
    /// dispatcher is leasing it right now, so it is skipped, not waited for.
    pub(super) fn claim_lease(tx: &Transaction<'_>, run: &str) -> crate::Result<bool> {
        super::sql::common::exists(
            tx,
            "SELECT 1 FROM runs WHERE id = ?1 AND needs_lease = 1
             FOR UPDATE SKIP LOCKED",
            params![run],
        )
    }

    /// The rest of this call's statements are planned for their own values
    /// (`SET LOCAL plan_cache_mode = force_custom_plan`), not with the plan PostgreSQL
    /// makes once for any values after a statement's fifth run: for a filter as skewed as
    /// the audit log's actors that plan walks the whole log newest first looking for a
    /// rare one (seconds), where the matching index answers in under a millisecond.
    pub(super) fn plan_for_values(c: &super::Connection) -> crate::Result<()> {
        Ok(c.execute_batch("SET LOCAL plan_cache_mode = force_custom_plan")?)
    }

    /// Runs `f` on the call's connection: a read call is already one read-only snapshot.
    pub(super) fn snapshot<T>(
        c: &super::Connection,
        f: impl FnOnce(&super::Connection) -> crate::Result<T>,
    ) -> crate::Result<T> {
        f(c)
    }

    /// `Store::publish`.
    pub(super) fn publish(store: &Store, signal: crate::Signal) {
        store.publish_signal(signal);
    }

    /// No call starts after this; idle connections close now, busy ones as their calls
    /// return.
    pub(super) async fn close(store: &Store) {
        use std::sync::atomic::Ordering;
        store.inner.closed.store(true, Ordering::Release);
        store.inner.stop_listening.store(true, Ordering::Release);
        store.inner.permits.close();
        let conns = match store.inner.idle.lock() {
            Ok(mut idle) => std::mem::take(&mut *idle),
            Err(_) => return,
        };
        if let Err(e) = tokio::task::spawn_blocking(move || drop(conns)).await {
            tracing::warn!(error = %e, "closing database connections failed");
        }
    }
}

use compat::{params, Connection, PgConn, Row, Transaction};
use conninfo::ConnInfo;

/// Migrations embedded in the binary, applied in order. The index + 1 is the version; the
/// same numbering as SQLite's.
const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/postgres/0001_init.sql"),
    include_str!("../migrations/postgres/0002_state.sql"),
    include_str!("../migrations/postgres/0003_runs.sql"),
    include_str!("../migrations/postgres/0004_vcs.sql"),
    include_str!("../migrations/postgres/0005_identity.sql"),
    include_str!("../migrations/postgres/0006_dependencies.sql"),
    include_str!("../migrations/postgres/0007_notifications.sql"),
    include_str!("../migrations/postgres/0008_drift.sql"),
    include_str!("../migrations/postgres/0009_plan_resources.sql"),
    include_str!("../migrations/postgres/0010_plan_runs.sql"),
    include_str!("../migrations/postgres/0011_approvals.sql"),
    include_str!("../migrations/postgres/0012_duty_leases.sql"),
    include_str!("../migrations/postgres/0013_run_holds.sql"),
    include_str!("../migrations/postgres/0014_notify_retention.sql"),
    include_str!("../migrations/postgres/0015_file_schedules.sql"),
    include_str!("../migrations/postgres/0016_audit_filters.sql"),
    include_str!("../migrations/postgres/0017_secret_namespaces_per_org.sql"),
    include_str!("../migrations/postgres/0018_recovered_state.sql"),
    include_str!("../migrations/postgres/0019_log_times_lock_waits.sql"),
    include_str!("../migrations/postgres/0020_plan_run_previews.sql"),
    include_str!("../migrations/postgres/0021_scan_indexes.sql"),
    include_str!("../migrations/postgres/0022_state_retention.sql"),
    include_str!("../migrations/postgres/0023_run_retention.sql"),
    include_str!("../migrations/postgres/0024_drift_due.sql"),
    include_str!("../migrations/postgres/0025_approval_inbox.sql"),
    include_str!("../migrations/postgres/0026_metric_counts.sql"),
    include_str!("../migrations/postgres/0027_delivery_retention.sql"),
    include_str!("../migrations/postgres/0028_plan_run_retention.sql"),
    include_str!("../migrations/postgres/0029_run_approval_gate.sql"),
    include_str!("../migrations/postgres/0030_metrics_bounded.sql"),
    include_str!("../migrations/postgres/0031_run_pool.sql"),
    include_str!("../migrations/postgres/0032_pr_feedback.sql"),
    include_str!("../migrations/postgres/0033_runner_egress.sql"),
    include_str!("../migrations/postgres/0034_dependencies_upstream.sql"),
    include_str!("../migrations/postgres/0035_metric_counts_by_org.sql"),
    include_str!("../migrations/postgres/0036_drift_alerts_by_org.sql"),
    include_str!("../migrations/postgres/0037_host_proxy_jump.sql"),
    include_str!("../migrations/postgres/0038_policies.sql"),
    include_str!("../migrations/postgres/0039_stack_labels.sql"),
    include_str!("../migrations/postgres/0040_host_sources.sql"),
    include_str!("../migrations/postgres/0041_plan_triggers.sql"),
    include_str!("../migrations/postgres/0042_sign_in.sql"),
    include_str!("../migrations/postgres/0043_cli_loopback.sql"),
];

/// The schema version this binary writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Connections per store (per server replica).
const POOL_SIZE: usize = 8;
/// How often a write transaction is tried before its serialization failure is returned.
const MAX_ATTEMPTS: u32 = 64;
/// The advisory lock migrations run under (any fixed number; "bosun" in ASCII).
const MIGRATION_LOCK: i64 = 0x0062_6f73_756e;

pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    config: ConnInfo,
    idle: Mutex<Vec<PgConn>>,
    /// One permit per connection a call may use.
    permits: Semaphore,
    closed: AtomicBool,
    /// Signals to this store's subscribers: its own commits' and, through the listener
    /// thread, other instances' (`NOTIFY bosun_signals`).
    signals: Arc<crate::signal::Hub>,
    /// Set to stop the listener thread.
    stop_listening: Arc<AtomicBool>,
    /// When calls last failed for want of the database, and why writes fail now.
    availability: crate::availability::Availability,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop_listening.store(true, Ordering::Release);
        // A synchronous client owns a small runtime, which must not be dropped on an async
        // thread: close the idle connections on a thread of their own.
        let conns = std::mem::take(self.idle.get_mut().unwrap_or_else(|p| p.into_inner()));
        if !conns.is_empty() {
            std::thread::spawn(move || drop(conns));
        }
    }
}

impl From<compat::Error> for StoreError {
    fn from(e: compat::Error) -> Self {
        match e.unavailable() {
            Some(why) => StoreError::Unavailable(why),
            None => StoreError::Backend(e.to_string()),
        }
    }
}

/// A unique-constraint violation becomes `AlreadyExists(what())`; any other error passes.
fn exists_or(e: compat::Error, what: impl FnOnce() -> String) -> StoreError {
    if is_unique_violation(&e) {
        StoreError::AlreadyExists(what())
    } else {
        e.into()
    }
}

fn is_unique_violation(e: &compat::Error) -> bool {
    e.code() == Some(&SqlState::UNIQUE_VIOLATION)
}

fn is_foreign_key_violation(e: &compat::Error) -> bool {
    e.code() == Some(&SqlState::FOREIGN_KEY_VIOLATION)
}

/// A new connection. A server that cannot be reached, refuses connections while it starts
/// or stops, or has none left is `Unavailable` (its address stays out of the message,
/// which reaches API clients; `open` adds it); any other refusal (authentication, TLS) is
/// a `Backend` error naming the server.
fn connect(info: &ConnInfo) -> Result<PgConn> {
    let client = info.connect().map_err(|e| {
        // The client's own message ("error connecting to server") hides the cause.
        let cause = std::error::Error::source(&e)
            .map(|c| format!(": {c}"))
            .unwrap_or_default();
        match compat::unavailable(&e) {
            Some(why) => StoreError::Unavailable(format!("{why} (connecting)")),
            None => StoreError::Backend(format!(
                "connecting to PostgreSQL at {}: {e}{cause}",
                hosts(info)
            )),
        }
    })?;
    Ok(PgConn {
        client,
        cache: HashMap::new(),
        read_open: false,
    })
}

/// The servers a URL names, `host:port` each.
fn hosts(info: &ConnInfo) -> String {
    let config = &info.config;
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .zip(config.get_ports().iter().chain(std::iter::repeat(&5432)))
        .map(|(h, p)| match h {
            ::postgres::config::Host::Tcp(h) => format!("{h}:{p}"),
            ::postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    hosts.join(", ")
}

/// How long a new connection may take when the URL sets no `connect_timeout`: a server
/// that drops packets fails a call in seconds rather than the system's TCP timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A pause before trying a transaction again: growing with the attempt, jittered so
/// racing transactions do not collide again in step.
fn backoff(attempt: u32) {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let cap_ms = 1u64 << attempt.min(6);
    std::thread::sleep(Duration::from_micros(
        u64::from(nanos) % (cap_ms * 1000) + 100,
    ));
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user@host:port/db`, with libpq's
    /// `sslmode`, `sslrootcert`, `sslcert` and `sslkey` for TLS: see `conninfo`),
    /// migrating it to this binary's schema. Refuses a database whose schema is newer than
    /// this binary knows.
    pub async fn open(url: &str) -> Result<Self> {
        let mut config = ConnInfo::parse(url).map_err(|e| StoreError::Backend(e.to_string()))?;
        if config.config.get_connect_timeout().is_none() {
            config.config.connect_timeout(CONNECT_TIMEOUT);
        }
        tokio::task::spawn_blocking(move || Self::open_blocking(config))
            .await
            .map_err(|e| StoreError::Backend(format!("open task failed: {e}")))?
    }

    fn open_blocking(config: ConnInfo) -> Result<Self> {
        let mut first = connect(&config).map_err(|e| match e {
            StoreError::Unavailable(why) => {
                StoreError::Unavailable(format!("{why}: PostgreSQL at {}", hosts(&config)))
            }
            e => e,
        })?;
        migrate(&mut first, &config)?;
        // Listening before `open` returns: a signal committed after it reaches this store.
        let listener = listen_connection(&config)?;
        let signals = Arc::new(crate::signal::Hub::new());
        let stop_listening = Arc::new(AtomicBool::new(false));
        {
            let (config, hub, stop) = (config.clone(), signals.clone(), stop_listening.clone());
            std::thread::Builder::new()
                .name("bosun-listen".into())
                .spawn(move || listen(listener, &config, &hub, &stop))
                .map_err(|e| StoreError::Backend(format!("starting the signal listener: {e}")))?;
        }
        Ok(PostgresStore {
            inner: Arc::new(Inner {
                config,
                idle: Mutex::new(vec![first]),
                permits: Semaphore::new(POOL_SIZE),
                closed: AtomicBool::new(false),
                signals,
                stop_listening,
                availability: Default::default(),
            }),
        })
    }

    /// Runs `f` on the blocking pool with a pooled connection (opening one when none is
    /// idle or the idle one was lost). Its answer comes back as soon as `f` returns; a
    /// read's transaction is ended after that, on the same thread, before the connection
    /// (and its permit) is pooled again.
    async fn with_conn<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut PgConn, &ConnInfo) -> Result<T> + Send + 'static,
    {
        #[cfg(feature = "testsuite")]
        crate::query_log::call();
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(closed());
        }
        self.inner
            .permits
            .acquire()
            .await
            .map_err(|_| closed())?
            .forget();
        let inner = self.inner.clone();
        let (answer, answered) = tokio::sync::oneshot::channel();
        let task = tokio::task::spawn_blocking(move || {
            // Whatever happens below, the permit is returned once the connection is.
            let _permit = Returned(&inner.permits);
            let pooled = match inner.idle.lock() {
                Ok(mut idle) => idle.pop(),
                Err(_) => return drop(answer.send(Err(closed()))),
            };
            let mut conn = match pooled {
                Some(c) if !c.client.is_closed() => c,
                _ => match connect(&inner.config) {
                    Ok(c) => c,
                    Err(e) => return drop(answer.send(Err(e))),
                },
            };
            let out = f(&mut conn, &inner.config);
            // The caller may have gone (a cancelled request): the connection is tidied
            // and pooled all the same.
            let _ = answer.send(out);
            if std::mem::take(&mut conn.read_open) && conn.client.batch_execute("ROLLBACK").is_err()
            {
                return;
            }
            if !conn.client.is_closed() && !inner.closed.load(Ordering::Acquire) {
                if let Ok(mut idle) = inner.idle.lock() {
                    idle.push(conn);
                }
            }
        });
        match answered.await {
            Ok(out) => out,
            // The task ended without answering: it panicked.
            Err(_) => Err(StoreError::Backend(match task.await {
                Err(e) => format!("store task failed: {e}"),
                Ok(()) => "store task ended without an answer".into(),
            })),
        }
    }

    /// Runs `f` in a read-only snapshot (`REPEATABLE READ READ ONLY`).
    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let result = self
            .with_conn(move |pc, config| {
                let c = begin(
                    pc,
                    config,
                    "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
                )?;
                let out = f(&c);
                // Ended after the answer is handed back (`with_conn`): a read-only
                // transaction's end changes nothing, so nobody waits for it.
                c.leave_open();
                pc.read_open = true;
                out
            })
            .await;
        self.inner.availability.read(&result);
        result
    }

    /// Runs `f` in a serializable transaction, committing when it returns `Ok` and rolling
    /// back otherwise; tried again from the start (with a fresh clone of `f` and what it
    /// captured) on a serialization failure or deadlock, so `f` must only read and write
    /// through its transaction.
    async fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> Result<T> + Clone + Send + 'static,
    {
        let hub = self.inner.signals.clone();
        let result = self
            .with_conn(move |pc, config| write_blocking(pc, config, &hub, &|tx| f.clone()(tx)))
            .await;
        self.inner.availability.write(&result);
        let (out, signals) = result?;
        // Other instances hear them through their listeners; this one's own are sent here
        // (its listener skips them).
        for signal in signals {
            self.inner.signals.send(signal);
        }
        Ok(out)
    }

    /// `Store::publish`: sent to this instance's subscribers now, and to every other
    /// instance with a `NOTIFY` on a pooled connection (in the background).
    fn publish_signal(&self, signal: Signal) {
        let payload = self.inner.signals.payload(&signal);
        self.inner.signals.send(signal);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let store = PostgresStore {
            inner: self.inner.clone(),
        };
        runtime.spawn(async move {
            let sent = store
                .with_conn(move |pc, _| {
                    pc.client
                        .execute("SELECT pg_notify($1, $2)", &[&SIGNAL_CHANNEL, &payload])
                        .map_err(|e| StoreError::Backend(e.to_string()))
                })
                .await;
            if let Err(e) = sent {
                tracing::debug!(error = %e, "publishing a signal failed; waiters fall back to polling");
            }
        });
    }
}

/// The `LISTEN`/`NOTIFY` channel of signals (`signal::Hub::payload`).
const SIGNAL_CHANNEL: &str = "bosun_signals";

/// The `application_name` of the listener's connection, so an operator (or a test) can
/// tell it apart in `pg_stat_activity`.
const LISTENER_APPLICATION_NAME: &str = "bosun-listener";

/// A connection listening on the signal channel.
fn listen_connection(config: &ConnInfo) -> Result<::postgres::Client> {
    let mut config = config.clone();
    config.config.application_name(LISTENER_APPLICATION_NAME);
    let mut pc = connect(&config)?;
    pc.client
        .batch_execute(&format!("LISTEN {SIGNAL_CHANNEL}"))
        .map_err(|e| StoreError::Backend(format!("listening for signals: {e}")))?;
    Ok(pc.client)
}

/// The listener thread: forwards other instances' signals to `hub` until `stop`. When its
/// connection drops it reconnects with a growing pause (at most 5 s) and then sends
/// `Resync`, so no waiter misses what was sent meanwhile. An idle connection is checked
/// every 15 s, so a silently dead one is noticed.
fn listen(
    mut client: ::postgres::Client,
    config: &ConnInfo,
    hub: &crate::signal::Hub,
    stop: &AtomicBool,
) {
    use ::postgres::fallible_iterator::FallibleIterator;
    const TICK: Duration = Duration::from_millis(250);
    let mut failures = 0u32;
    while !stop.load(Ordering::Acquire) {
        let mut idle = Duration::ZERO;
        let lost = loop {
            if stop.load(Ordering::Acquire) {
                return;
            }
            let next = client.notifications().timeout_iter(TICK).next();
            match next {
                Ok(Some(n)) => {
                    idle = Duration::ZERO;
                    hub.receive(n.payload());
                }
                Ok(None) if client.is_closed() => break "connection closed".to_string(),
                Ok(None) => {
                    idle += TICK;
                    if idle >= Duration::from_secs(15) {
                        idle = Duration::ZERO;
                        if let Err(e) = client.batch_execute("SELECT 1") {
                            break e.to_string();
                        }
                    }
                }
                Err(e) => break e.to_string(),
            }
        };
        tracing::warn!(error = %lost, "signal listener lost its connection; reconnecting");
        loop {
            failures += 1;
            let pause =
                Duration::from_millis(100u64 << failures.min(6)).min(Duration::from_secs(5));
            let until = std::time::Instant::now() + pause;
            while std::time::Instant::now() < until {
                if stop.load(Ordering::Acquire) {
                    return;
                }
                std::thread::sleep(TICK.min(pause));
            }
            match listen_connection(config) {
                Ok(c) => {
                    client = c;
                    failures = 0;
                    tracing::info!("signal listener reconnected");
                    hub.send(Signal::Resync);
                    break;
                }
                Err(e) => tracing::warn!(error = %e, "signal listener cannot reconnect yet"),
            }
        }
    }
}

/// A call's permit, given back to the pool's semaphore when the call's connection is
/// pooled again (or dropped), not when its answer is sent.
struct Returned<'a>(&'a Semaphore);

impl Drop for Returned<'_> {
    fn drop(&mut self) {
        self.0.add_permits(1);
    }
}

/// Starts a transaction on `pc` with `sql` (`BEGIN …`). A pooled connection the server
/// has dropped meanwhile (a restart, a failover, an idle timeout) is replaced first:
/// nothing ran on it yet, so this is safe for writes too.
fn begin<'a>(pc: &'a mut PgConn, config: &ConnInfo, sql: &str) -> Result<Connection<'a>> {
    if let Err(e) = pc.client.batch_execute(sql) {
        if !connection_lost(&e) {
            return Err(compat::Error::from(e).into());
        }
        tracing::info!(error = %e, "reconnecting to PostgreSQL");
        *pc = connect(config)?;
        pc.client.batch_execute(sql).map_err(compat::Error::from)?;
    }
    let PgConn { client, cache, .. } = pc;
    Ok(Connection::begun(client, cache))
}

/// The connection is gone (closed, I/O), or the server is ending it (class 57P:
/// shutdown, termination by an operator).
fn connection_lost(e: &::postgres::Error) -> bool {
    e.is_closed()
        || match e.code() {
            None => true,
            Some(code) => code.code().starts_with("57P") || code.code().starts_with("08"),
        }
}

/// The transaction loop of [`PostgresStore::write`]: returns the value and the signals
/// the committed attempt emitted. They are sent with `NOTIFY` inside that transaction, so
/// PostgreSQL delivers them to other instances only if it commits.
fn write_blocking<T>(
    pc: &mut PgConn,
    config: &ConnInfo,
    hub: &crate::signal::Hub,
    f: &dyn Fn(&Transaction<'_>) -> Result<T>,
) -> Result<(T, Vec<Signal>)> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        compat::take_retryable();
        crate::signal::take_pending();
        let c = begin(pc, config, "BEGIN ISOLATION LEVEL SERIALIZABLE")?;
        let notified = |v: T| -> Result<(T, Vec<Signal>)> {
            let signals = crate::signal::take_pending();
            for signal in &signals {
                c.execute(
                    "SELECT pg_notify('bosun_signals', ?1)",
                    params![hub.payload(signal)],
                )?;
            }
            Ok((v, signals))
        };
        let result = match f(&c).and_then(notified) {
            Ok(v) => c.commit().map(|()| v).map_err(StoreError::from),
            Err(e) => {
                // A failed rollback leaves nothing behind either: the server drops the
                // transaction with the connection.
                let _ = c.rollback();
                Err(e)
            }
        };
        // A serialization failure anywhere in the attempt (even one a caller turned into
        // another error) means it did not commit: try again.
        let retry = compat::take_retryable();
        match result {
            Ok(v) if !retry => return Ok(v),
            _ if retry && attempt < MAX_ATTEMPTS => {
                tracing::debug!(
                    attempt,
                    "serialization failure: trying the transaction again"
                );
                backoff(attempt);
            }
            Ok(_) => {
                return Err(StoreError::Backend(format!(
                    "serialization failures: gave up after {MAX_ATTEMPTS} attempts"
                )))
            }
            Err(e) => return Err(e),
        }
    }
}

/// Applies the migrations this database lacks, in one transaction under an advisory lock:
/// a replica starting at the same time waits, then finds them applied.
fn migrate(pc: &mut PgConn, config: &ConnInfo) -> Result<()> {
    let c = begin(pc, config, "BEGIN")?;
    c.execute("SELECT pg_advisory_xact_lock(?1)", [MIGRATION_LOCK])?;
    c.execute_batch("CREATE TABLE IF NOT EXISTS bosun_schema (version BIGINT NOT NULL)")?;
    let found: Option<i64> = c.query_row("SELECT MAX(version) FROM bosun_schema", [], |r| {
        r.get(0usize)
    })?;
    let found = found.unwrap_or(0);
    if found > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            found,
            known: SCHEMA_VERSION,
        });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        c.execute_batch(sql)?;
        c.execute(
            "INSERT INTO bosun_schema (version) VALUES (?1)",
            [i as i64 + 1],
        )?;
        tracing::info!(version = i + 1, "applied schema migration (PostgreSQL)");
    }
    c.commit()?;
    // Statements prepared before the schema changed are not reused.
    pc.cache.clear();
    Ok(())
}
