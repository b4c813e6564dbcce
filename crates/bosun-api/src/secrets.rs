//! Wire types of org secrets (never their values).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A secret as the API shows it: never its value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SecretInfo {
    pub namespace: String,
    pub key: String,
    /// How stacks and plans refer to it: `secret://<namespace>/<key>`.
    pub reference: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
}

/// The body of `PUT /orgs/{org}/secrets/{namespace}/{key}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretPut {
    pub value: String,
}
