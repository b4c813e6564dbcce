//! Wire types of stack state: versions, outputs, locks and their holders.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Terraform/OpenTofu's lock-info JSON, as the `http` backend sends it with `LOCK` and
/// expects back in a 423.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TfLockInfo {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Operation", default)]
    pub operation: String,
    #[serde(rename = "Info", default)]
    pub info: String,
    #[serde(rename = "Who", default)]
    pub who: String,
    #[serde(rename = "Version", default)]
    pub version: String,
    #[serde(rename = "Created", default)]
    pub created: String,
    #[serde(rename = "Path", default)]
    pub path: String,
}

/// Who wrote a version or holds a lock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StateWriter {
    /// `user` or `run`.
    pub kind: String,
    pub id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StateOutput {
    /// `null` when the output is sensitive: values of sensitive outputs never leave the
    /// state document itself.
    pub value: serde_json::Value,
    pub sensitive: bool,
}

/// One stored state version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StateVersion {
    pub version: i64,
    pub serial: u64,
    pub lineage: String,
    /// SHA-256 of the document, hex.
    pub checksum: String,
    pub size: u64,
    pub writer: StateWriter,
    pub token_id: Option<String>,
    pub created_at: DateTime<Utc>,
    /// Written by a Run that had already ended (force-failed or interrupted).
    pub late_write: bool,
    /// Stored with an admin's override of the serial/lineage checks.
    pub forced: bool,
    pub current: bool,
    pub outputs: BTreeMap<String, StateOutput>,
    /// Set on a version a runner recovered after its engine could not write it (the
    /// engine's `errored.tfstate`, delivered once the server answered again): why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered: Option<String>,
}

/// A version with its document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StateVersionDetail {
    #[serde(flatten)]
    pub meta: StateVersion,
    pub state: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LockHolder {
    pub kind: String,
    pub id: String,
    /// `person`, `live_run` or `dead_run` (a run whose tokens are all revoked or expired).
    pub status: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StateLockView {
    pub id: String,
    pub operation: String,
    pub who: String,
    pub info: String,
    pub version: String,
    pub created: String,
    pub path: String,
    pub holder: LockHolder,
    pub acquired_at: DateTime<Utc>,
    pub age_seconds: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StateLockStatus {
    pub locked: bool,
    pub lock: Option<StateLockView>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForceUnlock {
    /// The exact ID of the lock to release.
    pub lock_id: String,
}
