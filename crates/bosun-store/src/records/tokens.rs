//! API tokens: what is stored (never the secret itself), what a token grants, and filters.

use bosun_core::token::TokenKind;
use chrono::{DateTime, Utc};

use crate::UserRecord;

/// A token to store. Only the hash of its secret is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewToken {
    pub id: String,
    pub kind: TokenKind,
    pub secret_hash: String,
    pub description: String,
    pub user: Option<String>,
    pub org: Option<String>,
    pub pool: Option<String>,
    pub run: Option<String>,
    pub stack: Option<String>,
    /// Run tokens: upstream stacks whose state the run may read.
    pub read_stacks: Vec<String>,
    pub expires_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRecord {
    pub id: String,
    pub kind: TokenKind,
    pub description: String,
    pub user: Option<String>,
    pub org: Option<String>,
    pub pool: Option<String>,
    pub run: Option<String>,
    pub stack: Option<String>,
    pub read_stacks: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

impl TokenRecord {
    /// Whether the token may authenticate at `now`.
    pub fn is_active(&self, now: DateTime<Utc>) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|e| e > now)
    }
}

/// A token with what it grants: for personal tokens, the user and their org roles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenGrant {
    pub token: TokenRecord,
    pub user: Option<UserRecord>,
    pub roles: std::collections::BTreeMap<String, bosun_core::Role>,
}

/// Which tokens to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenFilter {
    User(String),
    Org {
        org: String,
        kind: TokenKind,
    },
    /// The server's own hosted-pool tokens (no org).
    HostedPool,
}
