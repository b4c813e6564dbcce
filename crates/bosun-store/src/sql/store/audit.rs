//! [`AuditStore`] for both backends: each method delegates to `sql/audit.rs`.

use super::super::*;

#[async_trait]
impl AuditStore for db::Store {
    async fn search_audit(
        &self,
        org: Option<&str>,
        filter: &AuditFilter,
        before_seq: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditRecord>> {
        let (org, filter) = (org.map(str::to_string), filter.clone());
        self.read(move |c| audit::search(c, org.as_deref(), &filter, before_seq, limit))
            .await
    }
}
