//! Wire types of orgs, users and their memberships.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Org {
    pub id: String,
    pub name: String,
    /// What the org's stacks' runs report on GitHub unless a stack says otherwise:
    /// `both` (a check run per commit and the pull request's comment), `checks`,
    /// `comment` or `none`.
    #[serde(default)]
    pub pr_feedback: String,
    pub created_at: DateTime<Utc>,
}

/// The body of `PATCH /orgs/{org}`: fields present are changed.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OrgPatch {
    /// `both`, `checks`, `comment` or `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pr_feedback: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OrgCreate {
    /// Immutable slug.
    pub id: String,
    /// Display name (defaults to the id).
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct User {
    pub id: String,
    pub server_admin: bool,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UserCreate {
    pub id: String,
    #[serde(default)]
    pub server_admin: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Member {
    pub user: String,
    pub role: String,
    /// Where the membership came from: `manual` (an admin gave it) or `provider` (the
    /// identity provider's claims, under the sign-in rules, at the person's last sign-in).
    #[serde(default = "manual")]
    pub source: String,
    /// For a provider's: the rule that gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_detail: Option<String>,
}

fn manual() -> String {
    "manual".into()
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemberPut {
    /// `viewer`, `operator` or `admin`.
    pub role: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Whoami {
    pub user: String,
    pub server_admin: bool,
    pub token_id: String,
    pub orgs: Vec<OrgRole>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct OrgRole {
    pub org: String,
    pub role: String,
}
