//! [`PlanResourceStore`] for both backends: each method delegates to `sql/plan_resources.rs`.

use super::super::*;

#[async_trait]
impl PlanResourceStore for db::Store {
    async fn create_environment(
        &self,
        env: &NewEnvironment,
        audit: &Audit,
    ) -> Result<EnvironmentRecord> {
        let (e, audit) = (env.clone(), audit.clone());
        self.write(move |tx| plan_resources::create_environment(tx, &e, &audit))
            .await
    }

    async fn update_environment(
        &self,
        env: &NewEnvironment,
        audit: &Audit,
    ) -> Result<EnvironmentRecord> {
        let (e, audit) = (env.clone(), audit.clone());
        self.write(move |tx| plan_resources::update_environment(tx, &e, &audit))
            .await
    }

    async fn get_environment(&self, org: &str, id: &str) -> Result<Option<EnvironmentRecord>> {
        let (org, id) = (org.to_string(), id.to_string());
        self.read(move |c| plan_resources::load_env(c, &org, &id))
            .await
    }

    async fn list_environments(&self, org: &str) -> Result<Vec<EnvironmentRecord>> {
        let org = org.to_string();
        self.read(move |c| plan_resources::list_envs(c, &org)).await
    }

    async fn delete_environment(&self, org: &str, id: &str, audit: &Audit) -> Result<bool> {
        let (org, id, audit) = (org.to_string(), id.to_string(), audit.clone());
        self.write(move |tx| plan_resources::delete_environment(tx, &org, &id, &audit))
            .await
    }

    async fn grant_environment(
        &self,
        org: &str,
        env: &str,
        user: &str,
        audit: &Audit,
    ) -> Result<bool> {
        let (org, env, user, audit) = (
            org.to_string(),
            env.to_string(),
            user.to_string(),
            audit.clone(),
        );
        self.write(move |tx| plan_resources::grant(tx, &org, &env, &user, &audit))
            .await
    }

    async fn revoke_environment_grant(
        &self,
        org: &str,
        env: &str,
        user: &str,
        audit: &Audit,
    ) -> Result<bool> {
        let (org, env, user, audit) = (
            org.to_string(),
            env.to_string(),
            user.to_string(),
            audit.clone(),
        );
        self.write(move |tx| plan_resources::revoke(tx, &org, &env, &user, &audit))
            .await
    }

    async fn create_host(&self, host: &NewHost, audit: &Audit) -> Result<HostRecord> {
        let (h, audit) = (host.clone(), audit.clone());
        self.write(move |tx| plan_resources::create_host(tx, &h, &audit))
            .await
    }

    async fn update_host(&self, host: &NewHost, audit: &Audit) -> Result<HostRecord> {
        let (h, audit) = (host.clone(), audit.clone());
        self.write(move |tx| plan_resources::update_host(tx, &h, &audit))
            .await
    }

    async fn get_host(&self, org: &str, name: &str) -> Result<Option<HostRecord>> {
        let (org, name) = (org.to_string(), name.to_string());
        self.read(move |c| plan_resources::load_host(c, &org, &name))
            .await
    }

    async fn list_hosts(&self, org: &str) -> Result<Vec<HostRecord>> {
        let org = org.to_string();
        self.read(move |c| plan_resources::list_hosts(c, &org))
            .await
    }

    async fn list_hosts_page(
        &self,
        org: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<HostRecord>> {
        let (org, after) = (org.to_string(), after.unwrap_or("").to_string());
        self.read(move |c| plan_resources::list_hosts_page(c, &org, &after, limit))
            .await
    }

    async fn delete_host(&self, org: &str, name: &str, audit: &Audit) -> Result<bool> {
        let (org, name, audit) = (org.to_string(), name.to_string(), audit.clone());
        self.write(move |tx| plan_resources::delete_host(tx, &org, &name, &audit))
            .await
    }

    async fn import_inventory(
        &self,
        import: &InventoryImport,
        audit: &Audit,
    ) -> Result<InventoryImported> {
        let (import, audit) = (import.clone(), audit.clone());
        self.write(move |tx| plan_resources::import_inventory(tx, &import, &audit))
            .await
    }

    async fn sync_sourced_hosts(&self, hosts: &SourcedHosts, audit: &Audit) -> Result<SourcedSync> {
        let (hosts, audit) = (hosts.clone(), audit.clone());
        self.write(move |tx| plan_resources::sync_sourced_hosts(tx, &hosts, &audit))
            .await
    }

    async fn save_plan(&self, plan: &NewPlan, audit: &Audit) -> Result<PlanRecord> {
        let (p, audit) = (plan.clone(), audit.clone());
        self.write(move |tx| plan_resources::save_plan(tx, &p, &audit))
            .await
    }

    async fn get_plan(&self, org: &str, name: &str) -> Result<Option<PlanRecord>> {
        let (org, name) = (org.to_string(), name.to_string());
        self.read(move |c| plan_resources::load_plan(c, &org, &name))
            .await
    }

    async fn list_plans(&self, org: &str) -> Result<Vec<PlanRecord>> {
        let org = org.to_string();
        self.read(move |c| plan_resources::list_plans(c, &org))
            .await
    }

    async fn list_plans_page(
        &self,
        org: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<PlanRecord>> {
        let (org, after) = (org.to_string(), after.unwrap_or("").to_string());
        self.read(move |c| plan_resources::list_plans_page(c, &org, &after, limit))
            .await
    }

    async fn delete_plan(&self, org: &str, name: &str, audit: &Audit) -> Result<bool> {
        let (org, name, audit) = (org.to_string(), name.to_string(), audit.clone());
        self.write(move |tx| plan_resources::delete_plan(tx, &org, &name, &audit))
            .await
    }
}
