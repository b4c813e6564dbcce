//! The audit log: appended in the transaction of the change it records, and searched.

use super::*;

pub(super) fn append_audit(tx: &Transaction<'_>, audit: &Audit) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO audit_log (at, org_id, actor, token_id, action, target, detail)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        millis(Utc::now()),
        audit.org,
        audit.actor,
        audit.token_id,
        audit.action,
        audit.target,
        audit.detail.to_string(),
    ])?;
    Ok(())
}
