//! [`IdentityStore`] for both backends: each method delegates to `sql/identity.rs`.

use super::super::*;

#[async_trait]
impl IdentityStore for db::Store {
    async fn bootstrap(&self, seed: &Bootstrap) -> Result<bool> {
        let seed = seed.clone();
        self.write(move |tx| identity::bootstrap(tx, &seed)).await
    }

    async fn create_org(&self, org: &NewOrg, audit: &Audit) -> Result<OrgRecord> {
        let (org, audit) = (org.clone(), audit.clone());
        self.write(move |tx| identity::create_org(tx, &org, &audit))
            .await
    }

    async fn org_ids(&self, limit: u32) -> Result<Vec<String>> {
        self.read(move |c| identity::org_ids(c, limit)).await
    }

    async fn get_org(&self, id: &str) -> Result<Option<OrgRecord>> {
        let id = id.to_string();
        self.read(move |c| identity::get_org(c, &id)).await
    }

    async fn update_org(&self, id: &str, change: &OrgUpdate, audit: &Audit) -> Result<OrgRecord> {
        let (id, change, audit) = (id.to_string(), change.clone(), audit.clone());
        self.write(move |tx| identity::update_org(tx, &id, &change, &audit))
            .await
    }

    async fn create_user(&self, user: &NewUser, audit: &Audit) -> Result<UserRecord> {
        let (user, audit) = (user.clone(), audit.clone());
        self.write(move |tx| identity::create_user(tx, &user, &audit))
            .await
    }

    async fn get_user(&self, id: &str) -> Result<Option<UserRecord>> {
        let id = id.to_string();
        self.read(move |c| identity::get_user(c, &id)).await
    }

    async fn roles_of(&self, user: &str) -> Result<BTreeMap<String, Role>> {
        let user = user.to_string();
        self.read(move |c| identity::roles_of(c, &user)).await
    }

    async fn set_member(&self, org: &str, user: &str, role: Role, audit: &Audit) -> Result<()> {
        let (org, user, audit) = (org.to_string(), user.to_string(), audit.clone());
        self.write(move |tx| identity::set_member(tx, &org, &user, role, &audit))
            .await
    }

    async fn remove_member(&self, org: &str, user: &str, audit: &Audit) -> Result<bool> {
        let (org, user, audit) = (org.to_string(), user.to_string(), audit.clone());
        self.write(move |tx| identity::remove_member(tx, &org, &user, &audit))
            .await
    }

    async fn list_members(&self, org: &str) -> Result<Vec<MemberRecord>> {
        let org = org.to_string();
        self.read(move |c| identity::list_members(c, &org)).await
    }
}
