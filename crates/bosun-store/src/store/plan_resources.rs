//! The plan resources part of the store contract: [`PlanResourceStore`], one of the traits
//! [`Store`](crate::Store) is made of.

use async_trait::async_trait;

use crate::{
    Audit, EnvironmentRecord, HostRecord, InventoryImport, InventoryImported, NewEnvironment,
    NewHost, NewPlan, PlanRecord, Result, SourcedHosts, SourcedSync,
};

/// What plans run against: environments and their grants, hosts, inventory imports
/// and plan files.
#[async_trait]
pub trait PlanResourceStore: Send + Sync {
    /// `AlreadyExists` for a taken id.
    async fn create_environment(
        &self,
        env: &NewEnvironment,
        audit: &Audit,
    ) -> Result<EnvironmentRecord>;
    /// Replaces an environment's vars and flags (its grants stay); `NotFound` if absent.
    async fn update_environment(
        &self,
        env: &NewEnvironment,
        audit: &Audit,
    ) -> Result<EnvironmentRecord>;
    async fn get_environment(&self, org: &str, id: &str) -> Result<Option<EnvironmentRecord>>;
    /// The org's environments, ordered by id.
    async fn list_environments(&self, org: &str) -> Result<Vec<EnvironmentRecord>>;
    /// Deletes an environment and its grants; refuses with `EnvironmentInUse` (naming
    /// them) while hosts are in it. False when there was none.
    async fn delete_environment(&self, org: &str, id: &str, audit: &Audit) -> Result<bool>;
    /// Grants a user approval on an environment; false when they already had it.
    /// `NotFound` for an unknown environment or user.
    async fn grant_environment(
        &self,
        org: &str,
        env: &str,
        user: &str,
        audit: &Audit,
    ) -> Result<bool>;
    /// Revokes a grant; false when there was none (`NotFound` for an unknown environment).
    async fn revoke_environment_grant(
        &self,
        org: &str,
        env: &str,
        user: &str,
        audit: &Audit,
    ) -> Result<bool>;
    /// `AlreadyExists` for a taken name, `UnknownEnvironment` for an environment the org
    /// does not have.
    async fn create_host(&self, host: &NewHost, audit: &Audit) -> Result<HostRecord>;
    /// Replaces a host's definition (same name); `NotFound` if absent.
    async fn update_host(&self, host: &NewHost, audit: &Audit) -> Result<HostRecord>;
    async fn get_host(&self, org: &str, name: &str) -> Result<Option<HostRecord>>;
    /// The org's hosts, ordered by name: all of them (resolving a plan's targets).
    async fn list_hosts(&self, org: &str) -> Result<Vec<HostRecord>>;
    /// One page of the org's hosts: ordered by name, strictly after `after`, at most
    /// `limit` (a fleet of thousands is listed a page at a time).
    async fn list_hosts_page(
        &self,
        org: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<HostRecord>>;
    /// False when there was none.
    async fn delete_host(&self, org: &str, name: &str, audit: &Audit) -> Result<bool>;
    /// Creates or replaces every environment, then every host, of an inventory in one
    /// transaction (all or nothing), with one audit entry.
    async fn import_inventory(
        &self,
        import: &InventoryImport,
        audit: &Audit,
    ) -> Result<InventoryImported>;
    /// Replaces the hosts an environment takes from stacks' outputs (added, updated when
    /// changed, removed when no longer given), in one transaction, audited once when
    /// something changed. `AlreadyExists` for a name a host managed otherwise has.
    async fn sync_sourced_hosts(&self, hosts: &SourcedHosts, audit: &Audit) -> Result<SourcedSync>;
    /// Stores a plan file: version 1 when new, the next version when the name exists.
    async fn save_plan(&self, plan: &NewPlan, audit: &Audit) -> Result<PlanRecord>;
    async fn get_plan(&self, org: &str, name: &str) -> Result<Option<PlanRecord>>;
    /// The org's plans, ordered by name: all of them.
    async fn list_plans(&self, org: &str) -> Result<Vec<PlanRecord>>;
    /// One page of the org's plans: ordered by name, strictly after `after`, at most
    /// `limit`.
    async fn list_plans_page(
        &self,
        org: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<PlanRecord>>;
    /// False when there was none.
    async fn delete_plan(&self, org: &str, name: &str, audit: &Audit) -> Result<bool>;
}
