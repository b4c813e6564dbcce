//! Orgs, users and the first-start bootstrap seed.

use chrono::{DateTime, Utc};

use crate::NewToken;

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

/// The first-start seed (`BOSUN_BOOTSTRAP_TOKEN` or a generated admin token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bootstrap {
    pub org: String,
    pub user: String,
    pub token: NewToken,
}
