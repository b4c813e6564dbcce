//! The staged connection check: resolve, connect, host key, authenticate, sudo.

use crate::model::Host;

use super::ConnectOptions;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageStatus {
    Ok,
    Warning,
    Failed,
    /// Not reached (an earlier stage failed).
    Skipped,
}

/// One stage's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    /// `resolve`, `connect`, `host key`, `authenticate`, `sudo`.
    pub name: &'static str,
    pub status: StageStatus,
    pub detail: String,
}

/// Checks a host stage by stage.
pub async fn check(host: &Host, _options: &ConnectOptions) -> Vec<Stage> {
    vec![Stage {
        name: "resolve",
        status: StageStatus::Failed,
        detail: format!("host checks are not implemented yet ({})", host.name),
    }]
}
