//! API tokens: stored by the hash of their secret, found, listed and revoked.

use super::audit::append_audit;
use super::identity::user_with_roles;
use super::*;

pub(super) fn insert_token(tx: &Transaction<'_>, t: &NewToken) -> Result<i64> {
    let now = millis(Utc::now());
    tx.prepare_cached(
        "INSERT INTO tokens (id, kind, secret_hash, description, user_id, org_id, pool, run_id,
                             stack_id, created_at, expires_at, read_stacks)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    )?
    .execute(params![
        t.id,
        t.kind.as_str(),
        t.secret_hash,
        t.description,
        t.user,
        t.org,
        t.pool,
        t.run,
        t.stack,
        now,
        t.expires_at.map(millis),
        json!(t.read_stacks).to_string(),
    ])
    .map_err(|e| exists_or(e, || format!("token {}", t.id)))?;
    Ok(now)
}

pub(super) const TOKEN_COLUMNS: &str =
    "id, kind, description, user_id, org_id, pool, run_id, stack_id,
    created_at, expires_at, revoked_at, read_stacks";

/// Raw token columns, converted outside the row callback so errors stay ours.
pub(super) type TokenRow = (
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    i64,
    Option<i64>,
    Option<i64>,
    String,
);

/// A row decodes into a tuple of its columns, in `SELECT` order.
pub(super) fn token_row(r: &Row<'_>) -> db::Result<TokenRow> {
    TokenRow::try_from(r)
}

pub(super) fn token_record(t: TokenRow) -> Result<TokenRecord> {
    Ok(TokenRecord {
        id: t.0,
        kind: TokenKind::from_str(&t.1).map_err(|e| corrupt("token kind", e))?,
        description: t.2,
        user: t.3,
        org: t.4,
        pool: t.5,
        run: t.6,
        stack: t.7,
        read_stacks: serde_json::from_str(&t.11).map_err(|e| corrupt("read_stacks", e))?,
        created_at: from_millis(t.8)?,
        expires_at: opt_from_millis(t.9)?,
        revoked_at: opt_from_millis(t.10)?,
    })
}

pub(super) fn query_tokens(
    conn: &Connection,
    sql: &str,
    args: &[&dyn db::ToSql],
) -> Result<Vec<TokenRecord>> {
    query_decoded(conn, sql, args, token_row, token_record)
}

pub(super) fn create(
    tx: &Transaction<'_>,
    token: &NewToken,
    audit: Option<&Audit>,
) -> Result<TokenRecord> {
    let created = insert_token(tx, token)?;
    if let Some(audit) = &audit {
        append_audit(tx, audit)?;
    }
    Ok(TokenRecord {
        id: token.id.clone(),
        kind: token.kind,
        description: token.description.clone(),
        user: token.user.clone(),
        org: token.org.clone(),
        pool: token.pool.clone(),
        run: token.run.clone(),
        stack: token.stack.clone(),
        read_stacks: token.read_stacks.clone(),
        created_at: from_millis(created)?,
        expires_at: opt_from_millis(token.expires_at.map(millis))?,
        revoked_at: None,
    })
}

pub(super) fn by_hash(c: &Connection, hash: &str) -> Result<Option<TokenRecord>> {
    Ok(query_tokens(
        c,
        &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE secret_hash = ?1"),
        params![hash],
    )?
    .pop())
}

pub(super) fn grant(c: &Connection, hash: &str) -> Result<Option<TokenGrant>> {
    let Some(token) = query_tokens(
        c,
        &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE secret_hash = ?1"),
        params![hash],
    )?
    .pop() else {
        return Ok(None);
    };
    let (user, roles) = match (&token.kind, &token.user) {
        (TokenKind::Personal, Some(u)) => match user_with_roles(c, u)? {
            Some((user, roles)) => (Some(user), roles),
            None => (None, BTreeMap::new()),
        },
        _ => (None, BTreeMap::new()),
    };
    Ok(Some(TokenGrant { token, user, roles }))
}

pub(super) fn get(c: &Connection, id: &str) -> Result<Option<TokenRecord>> {
    Ok(query_tokens(
        c,
        &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE id = ?1"),
        params![id],
    )?
    .pop())
}

pub(super) fn list(c: &Connection, filter: &TokenFilter) -> Result<Vec<TokenRecord>> {
    match &filter {
        TokenFilter::User(user) => query_tokens(
            c,
            &format!(
                "SELECT {TOKEN_COLUMNS} FROM tokens WHERE user_id = ?1 AND kind = 'personal'
                     ORDER BY created_at, id"
            ),
            params![user],
        ),
        TokenFilter::HostedPool => query_tokens(
            c,
            &format!(
                "SELECT {TOKEN_COLUMNS} FROM tokens WHERE kind = 'pool' AND org_id IS NULL
                     ORDER BY created_at, id"
            ),
            params![],
        ),
        TokenFilter::Org { org, kind } => query_tokens(
            c,
            &format!(
                "SELECT {TOKEN_COLUMNS} FROM tokens WHERE org_id = ?1 AND kind = ?2
                     ORDER BY created_at, id"
            ),
            params![org, kind.as_str()],
        ),
    }
}

pub(super) fn run_is_active(c: &Connection, run: &str) -> Result<bool> {
    exists(
        c,
        "SELECT 1 FROM tokens WHERE run_id = ?1 AND kind = 'run' AND revoked_at IS NULL
         AND (expires_at IS NULL OR expires_at > ?2)",
        params![run, millis(Utc::now())],
    )
}

pub(super) fn revoke(tx: &Transaction<'_>, id: &str, audit: Option<&Audit>) -> Result<bool> {
    let done = tx.execute(
        "UPDATE tokens SET revoked_at = ?1 WHERE id = ?2 AND revoked_at IS NULL",
        params![millis(Utc::now()), id],
    )? > 0;
    if done {
        if let Some(audit) = &audit {
            append_audit(tx, audit)?;
        }
    }
    Ok(done)
}

pub(super) fn revoke_run_tokens(tx: &Transaction<'_>, id: &str) -> Result<()> {
    tx.prepare_cached(
        "UPDATE tokens SET revoked_at = ?2 WHERE run_id = ?1 AND revoked_at IS NULL",
    )?
    .execute(params![id, millis(Utc::now())])?;
    Ok(())
}
