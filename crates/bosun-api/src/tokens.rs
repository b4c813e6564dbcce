//! Wire types of personal and pool tokens.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Token {
    pub id: String,
    /// `personal`, `pool` or `run`.
    pub kind: String,
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub org: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A token as created: the only response that ever carries its secret.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TokenCreated {
    pub token: Token,
    /// The bearer secret. Shown once; only its hash is stored.
    pub secret: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PersonalTokenCreate {
    #[serde(default)]
    pub description: String,
    /// Lifetime in seconds; none means no expiry.
    #[serde(default)]
    pub expires_in_seconds: Option<u64>,
    /// Create the token for another user (server admins only).
    #[serde(default)]
    pub user: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PoolTokenCreate {
    /// The runner pool the token joins (`hosted` or a pool slug).
    pub pool: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub expires_in_seconds: Option<u64>,
}
