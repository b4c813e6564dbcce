//! Wire types of run identity: ID tokens and the issuer's signing keys.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// An identity token, as the ID-token request URL answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct IdToken {
    /// The signed JWT.
    pub value: String,
    /// Unix seconds.
    pub expires_at: i64,
}

/// The OIDC issuer's signing keys after a rotation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SigningKeys {
    /// The key new tokens are signed with.
    pub active: String,
    /// Every key still published in the JWKS (the active one and retired ones whose
    /// tokens may still be valid).
    pub published: Vec<String>,
}
