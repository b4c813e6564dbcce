//! Duty leases: one replica at a time runs each background duty, holding its lease until
//! it expires, renewing it while it runs.

use super::*;

pub(super) fn try_lease(
    tx: &Transaction<'_>,
    duty: &str,
    holder: &str,
    now: DateTime<Utc>,
    ttl: Duration,
) -> Result<bool> {
    let ttl = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 4);
    let now = millis(now);
    // Inserted when free; overwritten only when expired or already ours: a live
    // lease of another holder leaves the row untouched (no row changed).
    let changed = tx.execute(
        "INSERT INTO duty_leases (duty, holder, expires_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (duty) DO UPDATE SET holder = excluded.holder,
            expires_at = excluded.expires_at
         WHERE duty_leases.holder = excluded.holder OR duty_leases.expires_at <= ?4",
        params![duty, holder, now.saturating_add(ttl), now],
    )?;
    Ok(changed == 1)
}

pub(super) fn release(tx: &Transaction<'_>, holder: &str) -> Result<u64> {
    let n = tx.execute("DELETE FROM duty_leases WHERE holder = ?1", params![holder])?;
    Ok(n as u64)
}
