//! Orgs, users and the first-start bootstrap seed.

use bosun_core::feedback::PrFeedback;
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
    /// What the org's stacks' runs report on GitHub, unless a stack says otherwise.
    pub pr_feedback: PrFeedback,
    pub created_at: DateTime<Utc>,
}

/// A change to an org's settings: the fields given are set, the others kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OrgUpdate {
    pub pr_feedback: Option<PrFeedback>,
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
