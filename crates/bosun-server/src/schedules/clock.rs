//! The scheduler's settings and the clock it reads: the system clock, or in tests a
//! clock set by hand.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};

/// Where the scheduler reads the time: the system clock, or (tests) a clock set by hand.
#[derive(Clone, Default)]
pub struct Clock(Option<Arc<Mutex<DateTime<Utc>>>>);

impl Clock {
    pub fn system() -> Self {
        Clock(None)
    }

    /// A clock that reads `start` until moved with [`Clock::set`] or [`Clock::advance`].
    pub fn manual(start: DateTime<Utc>) -> Self {
        Clock(Some(Arc::new(Mutex::new(start))))
    }

    pub fn now(&self) -> DateTime<Utc> {
        match &self.0 {
            None => Utc::now(),
            Some(t) => *t.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }

    /// Sets a manual clock (no effect on the system clock).
    pub fn set(&self, to: DateTime<Utc>) {
        if let Some(t) = &self.0 {
            *t.lock().unwrap_or_else(|e| e.into_inner()) = to;
        }
    }

    pub fn advance(&self, by: chrono::Duration) {
        self.set(self.now() + by);
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            None => f.write_str("Clock(system)"),
            Some(_) => write!(f, "Clock(manual {})", self.now()),
        }
    }
}

impl PartialEq for Clock {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// The scheduler's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleConfig {
    /// How often the scheduler looks (cron has minute resolution; the default looks
    /// several times a minute so a check starts close to its time).
    pub interval: Duration,
    pub clock: Clock,
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        ScheduleConfig {
            interval: Duration::from_secs(15),
            clock: Clock::system(),
        }
    }
}
