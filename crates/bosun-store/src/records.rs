//! The values the store takes and returns.

use bosun_core::stack::StackSpec;
use bosun_core::token::TokenKind;
use chrono::{DateTime, Utc};

/// One audit-log entry, written with the change it describes.
#[derive(Debug, Clone, PartialEq)]
pub struct Audit {
    pub org: Option<String>,
    /// `user:alice`, `pool:acme/edge`, `run:<id>` or `system`.
    pub actor: String,
    pub token_id: Option<String>,
    /// Dotted verb: `stack.create`, `token.revoke`, …
    pub action: String,
    pub target: String,
    pub detail: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AuditRecord {
    pub seq: i64,
    pub at: DateTime<Utc>,
    pub entry: Audit,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOrg {
    pub id: String,
    pub name: String,
    /// The user who becomes the new org's first admin.
    pub admin: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrgRecord {
    pub id: String,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewUser {
    pub id: String,
    pub server_admin: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRecord {
    pub id: String,
    pub server_admin: bool,
    pub created_at: DateTime<Utc>,
}

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
    Org { org: String, kind: TokenKind },
}

/// The first-start seed (`BOSUN_BOOTSTRAP_TOKEN` or a generated admin token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bootstrap {
    pub org: String,
    pub user: String,
    pub token: NewToken,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StackRecord {
    pub org: String,
    pub spec: StackSpec,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

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
}
