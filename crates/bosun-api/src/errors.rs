//! The error body every failed request answers with.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Every error response: `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable, machine-readable code (`validation_failed`, `not_found`, …).
    pub code: String,
    /// What went wrong, for people.
    pub message: String,
    /// The offending request field, when one is at fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}
