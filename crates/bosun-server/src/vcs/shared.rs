//! The VCS side of the server's process state: the GitHub client, the repository
//! mirrors and the webhook counters.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{github, mirror};

/// The VCS side of the server: the GitHub client, the mirrors and delivery counters.
pub struct Vcs {
    pub github: github::Github,
    pub mirrors: mirror::Mirrors,
    pub counters: Counters,
}

/// Webhook deliveries by outcome, for `/metrics` (refused ones are stored nowhere else).
#[derive(Default)]
pub struct Counters {
    pub accepted: AtomicU64,
    pub duplicate: AtomicU64,
    pub rejected: AtomicU64,
}

impl Counters {
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

impl Vcs {
    pub fn new(config: &crate::config::ServerConfig) -> Result<Self, github::GithubError> {
        Ok(Vcs {
            github: github::Github::new(&config.vcs)?,
            mirrors: mirror::Mirrors::new(config.data_dir.join("mirrors")),
            counters: Counters::default(),
        })
    }
}
