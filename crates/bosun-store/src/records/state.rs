//! Terraform state: stored versions, a stack's head (current version and lock), and writes.

use chrono::{DateTime, Utc};

/// One stored state version, without its body.
#[derive(Debug, Clone, PartialEq)]
pub struct StateVersionMeta {
    pub org: String,
    pub stack: String,
    pub version: i64,
    pub serial: u64,
    pub lineage: String,
    pub checksum: String,
    pub size: u64,
    pub writer: bosun_core::state::Writer,
    pub token_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub late_write: bool,
    pub forced: bool,
    pub current: bool,
    pub outputs: std::collections::BTreeMap<String, bosun_core::state::Output>,
    /// Recovered from an engine that could not write it, and why (`None` for every other
    /// version).
    pub recovery_reason: Option<String>,
}

/// A stack's current state version and lock.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StateHead {
    pub current: Option<StateVersionMeta>,
    pub lock: Option<bosun_core::state::Lock>,
}

/// A state write: the body, what was parsed from it, and who is writing.
#[derive(Debug, Clone, PartialEq)]
pub struct NewStateVersion {
    pub body: Vec<u8>,
    pub doc: bosun_core::state::StateDoc,
    pub request: bosun_core::state::WriteRequest,
    pub token_id: Option<String>,
    /// Why the engine could not write this state itself; set with
    /// `WriterLiveness::Recovery` only.
    pub recovery_reason: Option<String>,
}
