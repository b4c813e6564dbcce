//! A stack's outputs, compared with the previous state version's.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A stack's outputs as of one state version, compared with the version before it
/// (`GET /orgs/{org}/stacks/{stack}/outputs`). Values of sensitive outputs never appear.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StackOutputs {
    /// The state version the outputs come from; `null` when the stack has no state.
    pub version: Option<i64>,
    /// That version's serial.
    pub serial: Option<u64>,
    /// The version compared with: the one numbered just before (`null` when there is
    /// none, and every output is `added`).
    pub previous_version: Option<i64>,
    /// The version numbered just before was deleted by retention: there is nothing to
    /// compare with, so `changes` is empty and `changed` false. Absent otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub previous_pruned: bool,
    pub outputs: BTreeMap<String, StackOutput>,
    /// Every output of either version, ordered by name (none when the previous version
    /// was pruned).
    pub changes: Vec<StackOutputChange>,
    /// Whether anything changed at all: an output added or removed, a value, or a
    /// sensitive flag.
    pub changed: bool,
}

/// One output of a state version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StackOutput {
    /// The type the state records for it (`"string"`, `["list", "string"]`, …); `null`
    /// when the state does not say.
    #[serde(rename = "type")]
    pub output_type: Option<serde_json::Value>,
    pub sensitive: bool,
    /// `null` when the output is sensitive.
    pub value: serde_json::Value,
}

/// What happened to one output since the previous version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutputChangeKind {
    Added,
    Removed,
    /// The value differs (the sensitive flag may have flipped too).
    Changed,
    /// Same value; only the sensitive flag flipped.
    SensitivityChanged,
    Unchanged,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutputSensitivityChange {
    BecameSensitive,
    NoLongerSensitive,
}

/// One output compared with the previous version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StackOutputChange {
    pub name: String,
    pub change: OutputChangeKind,
    /// Set when the sensitive flag flipped.
    pub sensitivity: Option<OutputSensitivityChange>,
    /// Sensitive in either version: then no value of it is shown, here or before.
    pub sensitive: bool,
    /// The previous value, for a `changed` or `removed` output that is not sensitive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<serde_json::Value>,
    /// The current value, for a `changed` or `added` output that is not sensitive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<serde_json::Value>,
}
