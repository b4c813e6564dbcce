//! What `/metrics` reads from the store.

use chrono::{DateTime, Utc};

use crate::RunnerRecord;

/// What `/metrics` reads from the store, in one read snapshot. Counts cover everything
/// stored; timings only the newest runs created within `window` of the read — at most
/// `window_runs` of them, and as many still waiting for a lease — so a scrape's cost grows
/// neither with history nor with how busy the store is.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StoreMetrics {
    /// (run kind, run state) → number of runs, every run stored.
    pub runs: std::collections::BTreeMap<(String, String), i64>,
    /// State versions written late by ended runs.
    pub late_writes: i64,
    /// How far back the timings reach: runs created at most this long before the read.
    pub window: std::time::Duration,
    /// At most this many of the window's newest runs are timed.
    pub window_runs: u32,
    /// For each run of the window leased at least once: milliseconds from its creation to
    /// its first lease (entering `preparing`).
    pub queue_waits_ms: Vec<i64>,
    /// State (`run_phases.state`: queued, preparing, planning, …) → milliseconds spent
    /// in it, one entry per stint that has ended, of the window's runs.
    pub phase_durations_ms: std::collections::BTreeMap<String, Vec<i64>>,
    /// Every registered runner, oldest first.
    pub runners: Vec<RunnerRecord>,
    /// Ids of the runners holding a lease on a run.
    pub busy_runners: std::collections::BTreeSet<String>,
    /// Org → its held state locks (orgs holding none are absent).
    pub locks_held: std::collections::BTreeMap<String, i64>,
    /// The oldest held state locks, oldest first: at most `stack_series` of them.
    pub locks: Vec<HeldLock>,
    /// At most this many stacks are named by a per-stack series.
    pub stack_series: u32,
    /// Every trigger decision stored (webhook and poll deliveries), by verdict.
    pub trigger_decisions: DecisionCounts,
}

/// A held state lock, for its age.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldLock {
    pub org: String,
    pub stack: String,
    pub acquired_at: DateTime<Utc>,
}

/// Trigger decisions by verdict: a run started, the stack left alone, or a repeat of a
/// delivery already received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DecisionCounts {
    pub triggered: i64,
    pub ignored: i64,
    pub duplicate: i64,
}
