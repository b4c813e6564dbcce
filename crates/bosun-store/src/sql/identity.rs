//! Orgs, users and their memberships, and the first-start bootstrap.

use bosun_core::feedback::PrFeedback;

use super::audit::append_audit;
use super::tokens::insert_token;
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

/// A user with their memberships, in one statement: what every request's token check
/// reads for a personal token.
pub(super) fn user_with_roles(
    conn: &Connection,
    id: &str,
) -> Result<Option<(UserRecord, BTreeMap<String, Role>)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT u.id, u.server_admin, u.created_at, m.org_id, m.role
         FROM users u LEFT JOIN memberships m ON m.user_id = u.id
         WHERE u.id = ?1",
    )?;
    let rows = stmt.query_map([id], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, bool>(1)?,
            r.get::<_, i64>(2)?,
            r.get::<_, Option<String>>(3)?,
            r.get::<_, Option<String>>(4)?,
        ))
    })?;
    let mut found: Option<(UserRecord, BTreeMap<String, Role>)> = None;
    for row in rows {
        let (id, server_admin, created, org, role) = row?;
        let (_, roles) = match &mut found {
            Some(f) => f,
            None => found.insert((
                UserRecord {
                    id,
                    server_admin,
                    created_at: from_millis(created)?,
                },
                BTreeMap::new(),
            )),
        };
        if let (Some(org), Some(role)) = (org, role) {
            roles.insert(org, role.parse().map_err(|e| corrupt("role", e))?);
        }
    }
    Ok(found)
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

pub(super) fn bootstrap(tx: &Transaction<'_>, seed: &Bootstrap) -> Result<bool> {
    if exists(tx, "SELECT 1 FROM users LIMIT 1", params![])? {
        return Ok(false);
    }
    let now = millis(Utc::now());
    tx.execute(
        "INSERT OR IGNORE INTO orgs (id, name, created_at) VALUES (?1, ?1, ?2)",
        params![seed.org, now],
    )?;
    tx.execute(
        "INSERT INTO users (id, server_admin, created_at) VALUES (?1, 1, ?2)",
        params![seed.user, now],
    )?;
    tx.execute(
        "INSERT INTO memberships (org_id, user_id, role) VALUES (?1, ?2, 'admin')",
        params![seed.org, seed.user],
    )?;
    insert_token(tx, &seed.token)?;
    append_audit(
        tx,
        &Audit {
            org: Some(seed.org.clone()),
            actor: "system".into(),
            token_id: None,
            action: "server.bootstrap".into(),
            target: format!("user:{}", seed.user),
            detail: json!({"token_id": seed.token.id}),
        },
    )?;
    Ok(true)
}

pub(super) fn create_org(tx: &Transaction<'_>, org: &NewOrg, audit: &Audit) -> Result<OrgRecord> {
    let now = millis(Utc::now());
    tx.execute(
        "INSERT INTO orgs (id, name, created_at) VALUES (?1, ?2, ?3)",
        params![org.id, org.name, now],
    )
    .map_err(|e| exists_or(e, || format!("org {:?}", org.id)))?;
    if let Some(admin) = &org.admin {
        tx.execute(
            "INSERT INTO memberships (org_id, user_id, role) VALUES (?1, ?2, 'admin')",
            params![org.id, admin],
        )?;
    }
    append_audit(tx, audit)?;
    Ok(OrgRecord {
        id: org.id.clone(),
        name: org.name.clone(),
        pr_feedback: PrFeedback::default(),
        created_at: from_millis(now)?,
    })
}

pub(super) fn org_ids(c: &Connection, limit: u32) -> Result<Vec<String>> {
    Ok(
        c.prepare_cached("SELECT id FROM orgs ORDER BY id LIMIT ?1")?
            .query_map(params![limit], |r| r.get(0))?
            .collect::<db::Result<_>>()?,
    )
}

pub(super) fn get_org(c: &Connection, id: &str) -> Result<Option<OrgRecord>> {
    let row = c
        .prepare_cached("SELECT id, name, created_at, pr_feedback FROM orgs WHERE id = ?1")?
        .query_row([&id], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, String>(3)?,
            ))
        })
        .optional()?;
    row.map(|(id, name, created, pr_feedback)| {
        Ok(OrgRecord {
            id,
            name,
            pr_feedback: pr_feedback.parse().map_err(|e| corrupt("pr_feedback", e))?,
            created_at: from_millis(created)?,
        })
    })
    .transpose()
}

/// Sets the fields `change` gives; the audit entry records each one's old and new value.
pub(super) fn update_org(
    tx: &Transaction<'_>,
    id: &str,
    change: &OrgUpdate,
    audit: &Audit,
) -> Result<OrgRecord> {
    let current = get_org(tx, id)?.ok_or_else(|| StoreError::NotFound(format!("org {id:?}")))?;
    let mut audit = audit.clone();
    let mut changed = serde_json::Map::new();
    if let Some(f) = change.pr_feedback {
        tx.prepare_cached("UPDATE orgs SET pr_feedback = ?2 WHERE id = ?1")?
            .execute(params![id, f.as_str()])?;
        changed.insert(
            "pr_feedback".into(),
            json!({"old": current.pr_feedback.as_str(), "new": f.as_str()}),
        );
    }
    if let Value::Object(detail) = &mut audit.detail {
        detail.extend(changed);
    }
    append_audit(tx, &audit)?;
    Ok(OrgRecord {
        pr_feedback: change.pr_feedback.unwrap_or(current.pr_feedback),
        ..current
    })
}

pub(super) fn create_user(
    tx: &Transaction<'_>,
    user: &NewUser,
    audit: &Audit,
) -> Result<UserRecord> {
    let now = millis(Utc::now());
    tx.execute(
        "INSERT INTO users (id, server_admin, created_at) VALUES (?1, ?2, ?3)",
        params![user.id, user.server_admin, now],
    )
    .map_err(|e| exists_or(e, || format!("user {:?}", user.id)))?;
    append_audit(tx, audit)?;
    Ok(UserRecord {
        id: user.id.clone(),
        server_admin: user.server_admin,
        created_at: from_millis(now)?,
    })
}

pub(super) fn set_member(
    tx: &Transaction<'_>,
    org: &str,
    user: &str,
    role: Role,
    audit: &Audit,
) -> Result<()> {
    membership_target_exists(tx, org, user)?;
    tx.execute(
        "INSERT INTO memberships (org_id, user_id, role, source) VALUES (?1, ?2, ?3, 'manual')
         ON CONFLICT (org_id, user_id) DO UPDATE SET role = excluded.role,
            source = 'manual', source_detail = NULL",
        params![org, user, role.as_str()],
    )?;
    append_audit(tx, audit)
}

pub(super) fn remove_member(
    tx: &Transaction<'_>,
    org: &str,
    user: &str,
    audit: &Audit,
) -> Result<bool> {
    let done = tx.execute(
        "DELETE FROM memberships WHERE org_id = ?1 AND user_id = ?2",
        params![org, user],
    )? > 0;
    if done {
        append_audit(tx, audit)?;
    }
    Ok(done)
}

pub(super) fn list_members(c: &Connection, org: &str) -> Result<Vec<MemberRecord>> {
    let mut stmt = c.prepare_cached(
        "SELECT user_id, role, source, source_detail FROM memberships WHERE org_id = ?1
         ORDER BY user_id",
    )?;
    let rows = stmt.query_map([&org], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, Option<String>>(3)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (user, role, source, source_detail) = row?;
        out.push(MemberRecord {
            user,
            role: role.parse().map_err(|e| corrupt("role", e))?,
            source: source
                .parse()
                .map_err(|e| corrupt("membership source", e))?,
            source_detail,
        });
    }
    Ok(out)
}
