//! The audit part of the store contract: [`AuditStore`], one of the traits [`Store`](crate::Store)
//! is made of.

use async_trait::async_trait;

use crate::{AuditFilter, AuditRecord, Result};

/// The audit log, as read back (every write call appends its own entry).
#[async_trait]
pub trait AuditStore: Send + Sync {
    /// Audit records, newest first; `org: None` lists every org's and the server's.
    /// Audit records, newest first: of `org` (all orgs' and server-level ones for
    /// `None`), older than `before_seq`, at most `limit`.
    async fn list_audit(
        &self,
        org: Option<&str>,
        before_seq: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditRecord>> {
        self.search_audit(org, &AuditFilter::default(), before_seq, limit)
            .await
    }
    /// Like [`Store::list_audit`], only the records `filter` matches.
    ///
    /// [`Store::list_audit`]: AuditStore::list_audit
    async fn search_audit(
        &self,
        org: Option<&str>,
        filter: &AuditFilter,
        before_seq: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditRecord>>;
}
