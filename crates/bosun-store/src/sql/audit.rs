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

/// [`search`]'s statement for the filters given (org, actor, target, action). Only those
/// are conditions, so an org's, an actor's or a target's records are read newest first
/// from their `(org_id, …, seq)` index; an action is matched among the org's records.
pub(crate) fn search_sql([org, actor, target, action]: [bool; 4]) -> String {
    format!(
        "SELECT seq, at, org_id, actor, token_id, action, target, detail FROM audit_log
         WHERE {org} AND seq < ?2 AND {actor} AND {target} AND {action}
         ORDER BY seq DESC LIMIT ?3",
        org = filter_if(org, "org_id = ?1", 1),
        actor = filter_if(actor, "actor = ?4", 4),
        target = filter_if(target, "target = ?6", 6),
        action = match action {
            true => "(action = ?5 OR action LIKE ?7 ESCAPE '\\')",
            false => "?5 IS NULL AND ?7 IS NULL",
        },
    )
}

/// Audit records, newest first: see [`AuditStore::search_audit`].
pub(super) fn search(
    c: &Connection,
    org: Option<&str>,
    f: &AuditFilter,
    before_seq: Option<i64>,
    limit: u32,
) -> Result<Vec<AuditRecord>> {
    // `state` matches `state` and `state.…`: the prefix with LIKE's own characters
    // escaped, so `_` in an action name is not a wildcard.
    let under = f.action.as_ref().map(|a| {
        let escaped = a
            .replace('\\', "\\\\")
            .replace('%', "\\%")
            .replace('_', "\\_");
        format!("{escaped}.%")
    });
    // Which index answers depends on the values: an actor or an org with few records
    // among millions of others'. A target's records are its own index's range whatever
    // the values (`(org_id, target, seq)` holds every condition but the action), so a
    // run's or a stack's records are read without the extra statement.
    if f.target.is_none() {
        db::plan_for_values(c)?;
    }
    let mut stmt = c.prepare_cached(&search_sql([
        org.is_some(),
        f.actor.is_some(),
        f.target.is_some(),
        f.action.is_some(),
    ]))?;
    let args = params![
        org,
        before_seq.unwrap_or(i64::MAX),
        limit,
        f.actor,
        f.action,
        f.target,
        under
    ];
    let rows = stmt.query_map(args, |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, Option<String>>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, Option<String>>(4)?,
            r.get::<_, String>(5)?,
            r.get::<_, String>(6)?,
            r.get::<_, String>(7)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (seq, at, org, actor, token_id, action, target, detail) = row?;
        out.push(AuditRecord {
            seq,
            at: from_millis(at)?,
            entry: Audit {
                org,
                actor,
                token_id,
                action,
                target,
                detail: serde_json::from_str(&detail).map_err(|e| corrupt("detail", e))?,
            },
        });
    }
    Ok(out)
}
