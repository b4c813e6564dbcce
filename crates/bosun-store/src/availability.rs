//! What a backend remembers of its database going away: when a call last failed with
//! [`StoreError::Unavailable`] (the stale sweep counts a run's silence only from then:
//! heartbeats that could not be stored are not a runner's silence), and why writes fail
//! now (for `/readyz`: on a full disk SQLite still reads, so a read-only ping alone would
//! call the store ready while every write is refused).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;

use chrono::{DateTime, TimeZone, Utc};

use crate::StoreError;

#[derive(Default)]
pub(crate) struct Availability {
    /// Unix ms of the last call that failed as unavailable; 0 for never.
    last_unavailable: AtomicI64,
    /// The reason of the last write that failed as unavailable, until a write commits.
    write_fault: Mutex<Option<String>>,
}

impl Availability {
    /// Records what a read call returned.
    pub(crate) fn read<T>(&self, result: &Result<T, StoreError>) {
        if let Err(StoreError::Unavailable(_)) = result {
            self.mark();
        }
    }

    /// Records what a write call returned: a write that committed ends the write fault.
    pub(crate) fn write<T>(&self, result: &Result<T, StoreError>) {
        match result {
            Err(StoreError::Unavailable(why)) => {
                self.mark();
                *self.write_fault.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.clone());
            }
            Ok(_) => {
                let mut fault = self.write_fault.lock().unwrap_or_else(|p| p.into_inner());
                if fault.is_some() {
                    tracing::info!("the database accepts writes again");
                    *fault = None;
                }
            }
            Err(_) => {}
        }
    }

    fn mark(&self) {
        self.last_unavailable
            .fetch_max(Utc::now().timestamp_millis(), Ordering::AcqRel);
    }

    pub(crate) fn last_unavailable(&self) -> Option<DateTime<Utc>> {
        match self.last_unavailable.load(Ordering::Acquire) {
            0 => None,
            ms => Utc.timestamp_millis_opt(ms).single(),
        }
    }

    pub(crate) fn write_fault(&self) -> Option<String> {
        self.write_fault
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_committed_write_ends_the_write_fault_but_not_the_outage_time() {
        let a = Availability::default();
        assert!(a.last_unavailable().is_none());
        assert!(a.write_fault().is_none());
        a.read::<()>(&Err(StoreError::NotFound("x".into())));
        assert!(a.last_unavailable().is_none(), "only outages count");
        a.write::<()>(&Err(StoreError::Unavailable("the disk is full".into())));
        let at = a.last_unavailable().unwrap();
        assert!((Utc::now() - at).num_seconds() < 5);
        assert_eq!(a.write_fault().as_deref(), Some("the disk is full"));
        a.read::<()>(&Ok(()));
        assert!(a.write_fault().is_some(), "a read proves nothing of writes");
        a.write::<()>(&Err(StoreError::NotFound("x".into())));
        assert!(a.write_fault().is_some());
        a.write(&Ok(()));
        assert!(a.write_fault().is_none());
        assert_eq!(a.last_unavailable(), Some(at));
    }
}
