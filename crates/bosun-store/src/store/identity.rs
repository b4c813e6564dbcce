//! The identity part of the store contract: [`IdentityStore`], one of the traits
//! [`Store`](crate::Store) is made of.

use std::collections::BTreeMap;

use async_trait::async_trait;
use bosun_core::Role;

use crate::{
    Audit, Bootstrap, MemberRecord, NewOrg, NewUser, OrgRecord, OrgUpdate, Result, UserRecord,
};

/// Orgs, users and their memberships, and the first-start bootstrap.
#[async_trait]
pub trait IdentityStore: Send + Sync {
    /// Seeds org `default`, an admin user and their token when the store holds no user
    /// yet. Returns false (and changes nothing) when it already has users.
    async fn bootstrap(&self, seed: &Bootstrap) -> Result<bool>;
    async fn create_org(&self, org: &NewOrg, audit: &Audit) -> Result<OrgRecord>;
    async fn get_org(&self, id: &str) -> Result<Option<OrgRecord>>;
    /// Every org's id, in order, at most `limit` (a sign-in rule for every org grants in
    /// each).
    async fn org_ids(&self, limit: u32) -> Result<Vec<String>>;
    /// Sets the fields `change` gives and returns the org as it now is; `NotFound` for an
    /// unknown org. The audit entry's detail gains each changed field's `{"old", "new"}`.
    async fn update_org(&self, id: &str, change: &OrgUpdate, audit: &Audit) -> Result<OrgRecord>;
    async fn create_user(&self, user: &NewUser, audit: &Audit) -> Result<UserRecord>;
    async fn get_user(&self, id: &str) -> Result<Option<UserRecord>>;
    /// Each org the user belongs to, with their role there.
    async fn roles_of(&self, user: &str) -> Result<BTreeMap<String, Role>>;
    /// Adds a member or changes their role; the membership is manual from then on (a
    /// provider's sign-in no longer changes it).
    async fn set_member(&self, org: &str, user: &str, role: Role, audit: &Audit) -> Result<()>;
    /// Returns false when the user was not a member.
    async fn remove_member(&self, org: &str, user: &str, audit: &Audit) -> Result<bool>;
    /// The org's members by user id, each with where the membership came from.
    async fn list_members(&self, org: &str) -> Result<Vec<MemberRecord>>;
}
