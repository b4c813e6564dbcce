//! Orgs, users and their memberships, and the first-start bootstrap.

use super::*;

pub(super) fn roles_of(conn: &Connection, user: &str) -> Result<BTreeMap<String, Role>> {
    let mut stmt =
        conn.prepare_cached("SELECT org_id, role FROM memberships WHERE user_id = ?1")?;
    let rows = stmt.query_map([user], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
    })?;
    let mut out = BTreeMap::new();
    for row in rows {
        let (org, role) = row?;
        out.insert(org, role.parse().map_err(|e| corrupt("role", e))?);
    }
    Ok(out)
}

pub(super) fn get_user(conn: &Connection, id: &str) -> Result<Option<UserRecord>> {
    let row = conn
        .prepare_cached("SELECT id, server_admin, created_at FROM users WHERE id = ?1")?
        .query_row([id], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, bool>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })
        .optional()?;
    row.map(|(id, server_admin, created)| {
        Ok(UserRecord {
            id,
            server_admin,
            created_at: from_millis(created)?,
        })
    })
    .transpose()
}

pub(super) fn membership_target_exists(tx: &Transaction<'_>, org: &str, user: &str) -> Result<()> {
    if !exists(tx, "SELECT 1 FROM orgs WHERE id = ?1", params![org])? {
        return Err(StoreError::NotFound(format!("org {org:?}")));
    }
    if !exists(tx, "SELECT 1 FROM users WHERE id = ?1", params![user])? {
        return Err(StoreError::NotFound(format!("user {user:?}")));
    }
    Ok(())
}
