//! Every duty of this server process, when it last completed a pass, and the duty
//! leases this replica holds: read by `/metrics` and `/readyz`, written by the duty
//! runner and the lease keeper.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use chrono::Utc;

/// Every duty of this server process and when it last completed a pass, for probes and
/// metrics; and the duty leases this replica holds.
#[derive(Default)]
pub struct DutyStatus {
    /// Each duty's last completed pass (Unix ms; 0 before its first).
    passes: Mutex<BTreeMap<&'static str, i64>>,
    leases: Mutex<Leases>,
}

/// The duties this replica runs, and until when (this process's clock) it may pass each
/// one it holds: a renewal's start plus two thirds of the lease, so a replica whose
/// renewals stall stops passing before its lease can be taken.
#[derive(Default)]
struct Leases {
    duties: BTreeSet<&'static str>,
    held_until: BTreeMap<&'static str, tokio::time::Instant>,
}

impl DutyStatus {
    pub(super) fn register(&self, duty: &'static str) {
        let mut passes = self.passes.lock().unwrap_or_else(|e| e.into_inner());
        passes.entry(duty).or_insert(0);
    }

    pub(super) fn passed(&self, duty: &'static str) {
        let mut passes = self.passes.lock().unwrap_or_else(|e| e.into_inner());
        passes.insert(duty, Utc::now().timestamp_millis());
    }

    /// When `duty` last completed a pass (Unix ms; 0 before its first, or when this
    /// process does not run it).
    pub fn last_pass(&self, duty: &str) -> i64 {
        let passes = self.passes.lock().unwrap_or_else(|e| e.into_inner());
        passes.get(duty).copied().unwrap_or(0)
    }

    /// Every duty of this process, by name, with its last pass (Unix ms; 0 before its
    /// first).
    pub fn last_passes(&self) -> Vec<(&'static str, i64)> {
        let passes = self.passes.lock().unwrap_or_else(|e| e.into_inner());
        passes.iter().map(|(d, at)| (*d, *at)).collect()
    }

    pub(super) fn valid(&self, duty: &'static str) -> Option<bool> {
        let leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        leases.duties.contains(duty).then(|| {
            leases
                .held_until
                .get(duty)
                .is_some_and(|until| tokio::time::Instant::now() < *until)
        })
    }

    pub(super) fn record(&self, duty: &'static str, held: Option<tokio::time::Instant>) {
        let mut leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        leases.duties.insert(duty);
        match held {
            Some(until) => leases.held_until.insert(duty, until),
            None => leases.held_until.remove(duty),
        };
    }

    pub(super) fn duties(&self) -> Vec<&'static str> {
        let leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        leases.duties.iter().copied().collect()
    }

    /// Each duty this replica runs, and whether it holds the duty's lease now.
    pub fn leases_held(&self) -> Vec<(&'static str, bool)> {
        self.duties()
            .into_iter()
            .map(|d| (d, self.valid(d).unwrap_or(false)))
            .collect()
    }
}
