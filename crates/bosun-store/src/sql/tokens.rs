//! API tokens: stored by the hash of their secret, found, listed and revoked.

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
