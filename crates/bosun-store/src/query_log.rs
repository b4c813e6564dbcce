//! The statements the store runs, recorded while a test asks: the query-plan guard
//! (`crates/bosun-server/tests/query_plans.rs`) starts recording, drives a workload through
//! a server, and `EXPLAIN`s every distinct statement it recorded. Test builds only (the
//! `testsuite` feature): no production binary carries it.
//!
//! Process-wide: a test binary that records runs that one workload alone. Only
//! connections opened after [`start`] are seen.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

static RECORDING: AtomicBool = AtomicBool::new(false);
static STATEMENTS: Mutex<BTreeMap<String, Recorded>> = Mutex::new(BTreeMap::new());
static EXECUTED: AtomicU64 = AtomicU64::new(0);
static CALLS: AtomicU64 = AtomicU64::new(0);
static STEPS: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());

/// One distinct statement as the database received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// Its text in the backend's dialect (PostgreSQL's `$N` placeholders after
    /// translation).
    pub sql: String,
    /// PostgreSQL: the types the server resolved for its parameters (`int8`, `text`, …),
    /// so it can be prepared again for `EXPLAIN`. Empty for SQLite.
    pub param_types: Vec<String>,
}

/// Starts recording (for connections opened from now on).
pub fn start() {
    RECORDING.store(true, Ordering::SeqCst);
}

/// Every distinct statement recorded so far, emptying the record; recording goes on.
pub fn take() -> Vec<Recorded> {
    let mut all = STATEMENTS.lock().unwrap_or_else(|p| p.into_inner());
    std::mem::take(&mut *all).into_values().collect()
}

/// How many statements the store has run since recording started: on SQLite every
/// execution (a trigger's statements not counted); on PostgreSQL only the statements
/// prepared, so a per-request count means something on SQLite alone.
pub fn executed() -> u64 {
    EXECUTED.load(Ordering::SeqCst)
}

/// How many store calls have run since recording started, on either backend: each one a
/// hop to the blocking pool and a transaction of its own (PostgreSQL: a round trip to
/// begin it and one to end it, a read's after its answer).
pub fn calls() -> u64 {
    CALLS.load(Ordering::SeqCst)
}

/// Counts one store call (see [`calls`]).
pub(crate) fn call() {
    if recording() {
        CALLS.fetch_add(1, Ordering::SeqCst);
    }
}

/// SQLite only: for each distinct statement run since recording started, the most virtual
/// machine steps one execution of it took — about the rows it read, which no plan shows:
/// an index range as wide as the table is a `SEARCH` all the same. Empties the record.
pub fn take_steps() -> BTreeMap<String, u64> {
    let mut all = STEPS.lock().unwrap_or_else(|p| p.into_inner());
    std::mem::take(&mut *all)
}

/// Records that one execution of `sql` took `steps` virtual machine steps (see
/// [`take_steps`]).
pub(crate) fn stepped(sql: &str, steps: u64) {
    if !recording() {
        return;
    }
    let mut all = STEPS.lock().unwrap_or_else(|p| p.into_inner());
    let most = all.entry(sql.to_string()).or_default();
    *most = (*most).max(steps);
}

pub(crate) fn recording() -> bool {
    RECORDING.load(Ordering::Relaxed)
}

pub(crate) fn record(sql: &str, param_types: Vec<String>) {
    if !recording() {
        return;
    }
    EXECUTED.fetch_add(1, Ordering::SeqCst);
    let mut all = STATEMENTS.lock().unwrap_or_else(|p| p.into_inner());
    if !all.contains_key(sql) {
        all.insert(
            sql.to_string(),
            Recorded {
                sql: sql.to_string(),
                param_types,
            },
        );
    }
}
