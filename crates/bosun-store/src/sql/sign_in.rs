//! People's sign-in: sign-ins begun (taken once by their callback), identities linked by
//! (issuer, subject), the provider-given memberships a sign-in brings in line with the
//! rules (`bosun_core::sign_in`; manual ones untouched, each change audited with the rule
//! that caused it), and console sessions.

use bosun_core::sign_in::{membership_changes, MembershipChange, MembershipSource};

use super::audit::append_audit;
use super::*;

/// Sign-ins begun and never finished are removed this many at a time, as new ones begin.
const PRUNE_BATCH: i64 = 100;

pub(super) fn begin(tx: &Transaction<'_>, a: &SignInAttempt) -> Result<()> {
    let now = millis(Utc::now());
    tx.prepare_cached(
        "DELETE FROM sign_in_attempts WHERE state_hash IN (
            SELECT state_hash FROM sign_in_attempts WHERE expires_at < ?1
            ORDER BY expires_at LIMIT ?2)",
    )?
    .execute(params![now, PRUNE_BATCH])?;
    let (binding_hash, cli_redirect, cli_challenge) = match &a.binding {
        SignInBinding::Browser { cookie_hash } => (cookie_hash.as_str(), None, None),
        SignInBinding::Cli {
            redirect_uri,
            code_challenge,
        } => ("", Some(redirect_uri), Some(code_challenge)),
    };
    tx.prepare_cached(
        "INSERT INTO sign_in_attempts (state_hash, provider, binding_hash, nonce, verifier,
            next, created_at, expires_at, cli_redirect, cli_challenge)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?
    .execute(params![
        a.state_hash,
        a.provider,
        binding_hash,
        a.nonce,
        a.verifier,
        a.next,
        now,
        millis(a.expires_at),
        cli_redirect,
        cli_challenge
    ])
    .map_err(|e| exists_or(e, || "sign-in state".to_string()))?;
    Ok(())
}

/// Takes the sign-in begun with this state: it is gone afterwards, so a second callback
/// with the same state finds nothing. One past its expiry is removed and not answered.
pub(super) fn take(tx: &Transaction<'_>, state_hash: &str) -> Result<Option<SignInAttempt>> {
    let row = tx
        .prepare_cached(
            "SELECT provider, binding_hash, nonce, verifier, next, expires_at,
                    cli_redirect, cli_challenge
             FROM sign_in_attempts WHERE state_hash = ?1",
        )?
        .query_row(params![state_hash], |r| {
            Ok((
                (
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, i64>(5)?,
                ),
                (
                    r.get::<_, Option<String>>(6)?,
                    r.get::<_, Option<String>>(7)?,
                ),
            ))
        })
        .optional()?;
    let Some(((provider, binding_hash, nonce, verifier, next, expires), cli)) = row else {
        return Ok(None);
    };
    let binding = match cli {
        (None, None) => SignInBinding::Browser {
            cookie_hash: binding_hash,
        },
        (Some(redirect_uri), Some(code_challenge)) => SignInBinding::Cli {
            redirect_uri,
            code_challenge,
        },
        _ => {
            return Err(StoreError::Corrupt(
                "a sign-in has a CLI redirect without a challenge, or one without the other".into(),
            ))
        }
    };
    tx.prepare_cached("DELETE FROM sign_in_attempts WHERE state_hash = ?1")?
        .execute(params![state_hash])?;
    if expires < millis(Utc::now()) {
        return Ok(None);
    }
    Ok(Some(SignInAttempt {
        state_hash: state_hash.to_string(),
        provider,
        binding,
        nonce,
        verifier,
        next,
        expires_at: from_millis(expires)?,
    }))
}

/// The user an identity is linked to, creating both on a first sign-in (the proposed id,
/// or it with `-2`, `-3`, … when taken), then the provider-given memberships brought in
/// line with `s.granted`. All in the caller's transaction, each change audited.
pub(super) fn sign_in(tx: &Transaction<'_>, s: &ProviderSignIn) -> Result<SignedIn> {
    let now = millis(Utc::now());
    let linked: Option<String> = tx
        .prepare_cached("SELECT user_id FROM identities WHERE issuer = ?1 AND subject = ?2")?
        .query_row(params![s.issuer, s.subject], |r| r.get(0))
        .optional()?;
    let (user, created) = match linked {
        Some(user) => {
            tx.prepare_cached(
                "UPDATE identities SET email = ?3, username = ?4, last_sign_in_at = ?5
                 WHERE issuer = ?1 AND subject = ?2",
            )?
            .execute(params![s.issuer, s.subject, s.email, s.username, now])?;
            let record = super::identity::get_user(tx, &user)?.ok_or_else(|| vanished("user"))?;
            (record, false)
        }
        None => {
            let id = free_user_id(tx, &s.proposed_user)?;
            let audit = Audit {
                org: None,
                actor: format!("provider:{}", s.provider),
                token_id: None,
                action: "user.create".into(),
                target: format!("user:{id}"),
                detail: json!({
                    "provider": s.provider,
                    "issuer": s.issuer,
                    "subject": s.subject,
                    "email": s.email,
                    "username": s.username,
                }),
            };
            let record = super::identity::create_user(
                tx,
                &NewUser {
                    id: id.clone(),
                    server_admin: false,
                },
                &audit,
            )?;
            tx.prepare_cached(
                "INSERT INTO identities (issuer, subject, provider, user_id, email, username,
                    created_at, last_sign_in_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
            )?
            .execute(params![
                s.issuer, s.subject, s.provider, id, s.email, s.username, now
            ])?;
            (record, true)
        }
    };
    let changes = apply_memberships(tx, &user.id, s)?;
    Ok(SignedIn {
        user,
        created,
        changes,
    })
}

/// `proposed`, or it with the first free `-N`.
fn free_user_id(tx: &Transaction<'_>, proposed: &str) -> Result<String> {
    for n in 1..=1000 {
        let id = if n == 1 {
            proposed.to_string()
        } else {
            format!("{proposed}-{n}")
        };
        if !exists(tx, "SELECT 1 FROM users WHERE id = ?1", params![id])? {
            return Ok(id);
        }
    }
    Err(StoreError::AlreadyExists(format!(
        "user {proposed:?} and its first 1000 variants"
    )))
}

/// Brings `user`'s provider-given memberships in line with what the claims grant now;
/// answers the changes made.
fn apply_memberships(
    tx: &Transaction<'_>,
    user: &str,
    s: &ProviderSignIn,
) -> Result<Vec<MembershipChange>> {
    let current: BTreeMap<String, (Role, MembershipSource)> = tx
        .prepare_cached("SELECT org_id, role, source FROM memberships WHERE user_id = ?1")?
        .query_map(params![user], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?
        .collect::<db::Result<Vec<_>>>()?
        .into_iter()
        .map(|(org, role, source)| {
            Ok((
                org,
                (
                    role.parse().map_err(|e| corrupt("membership role", e))?,
                    source
                        .parse()
                        .map_err(|e| corrupt("membership source", e))?,
                ),
            ))
        })
        .collect::<Result<_>>()?;
    let changes = membership_changes(&current, &s.granted);
    for change in &changes {
        let (org, action, detail) = match change {
            MembershipChange::Add { org, role, because } => {
                tx.prepare_cached(
                    "INSERT INTO memberships (org_id, user_id, role, source, source_detail)
                     VALUES (?1, ?2, ?3, 'provider', ?4)",
                )?
                .execute(params![org, user, role.as_str(), because])?;
                (
                    org,
                    "member.add",
                    json!({"user": user, "role": role.as_str(), "rule": because}),
                )
            }
            MembershipChange::Change {
                org,
                from,
                to,
                because,
            } => {
                tx.prepare_cached(
                    "UPDATE memberships SET role = ?3, source_detail = ?4
                     WHERE org_id = ?1 AND user_id = ?2",
                )?
                .execute(params![org, user, to.as_str(), because])?;
                (
                    org,
                    "member.update",
                    json!({"user": user, "old": from.as_str(), "role": to.as_str(), "rule": because}),
                )
            }
            MembershipChange::Remove { org, role } => {
                tx.prepare_cached("DELETE FROM memberships WHERE org_id = ?1 AND user_id = ?2")?
                    .execute(params![org, user])?;
                (
                    org,
                    "member.remove",
                    json!({"user": user, "role": role.as_str(),
                           "rule": "no rule grants a role in this org any more"}),
                )
            }
        };
        let mut detail = detail;
        detail["provider"] = json!(s.provider);
        detail["subject"] = json!(s.subject);
        append_audit(
            tx,
            &Audit {
                org: Some(org.clone()),
                actor: format!("provider:{}", s.provider),
                token_id: None,
                action: action.into(),
                target: format!("user:{user}"),
                detail,
            },
        )?;
    }
    Ok(changes)
}

const SESSION_COLUMNS: &str = "id, user_id, method, provider, token_id, id_token,
    refresh_ciphertext, refresh_nonce, refresh_key_id, created_at, last_seen_at,
    refreshed_at, expires_at, ended_at, ended_reason, subject";

type SessionRow = (
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    (Option<Vec<u8>>, Option<Vec<u8>>, Option<String>),
    (i64, i64, i64, i64, Option<i64>),
    Option<String>,
    Option<String>,
);

fn session_row(r: &Row<'_>) -> db::Result<SessionRow> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        (r.get(6)?, r.get(7)?, r.get(8)?),
        (r.get(9)?, r.get(10)?, r.get(11)?, r.get(12)?, r.get(13)?),
        r.get(14)?,
        r.get(15)?,
    ))
}

fn session_record(row: SessionRow) -> Result<SessionRecord> {
    let (id, user, method, provider, token_id, id_token, sealed, times, ended_reason, subject) =
        row;
    let method = match method.as_str() {
        "token" => SessionMethod::Token,
        "provider" => SessionMethod::Provider,
        other => return Err(corrupt("session method", other)),
    };
    let refresh = match sealed {
        (Some(ciphertext), Some(nonce), Some(key_id)) => Some(Sealed {
            ciphertext,
            nonce,
            key_id,
        }),
        _ => None,
    };
    let (created, seen, refreshed, expires, ended) = times;
    Ok(SessionRecord {
        id,
        user,
        method,
        provider,
        subject,
        token_id,
        id_token,
        refresh,
        created_at: from_millis(created)?,
        last_seen_at: from_millis(seen)?,
        refreshed_at: from_millis(refreshed)?,
        expires_at: from_millis(expires)?,
        ended_at: ended.map(from_millis).transpose()?,
        ended_reason,
    })
}

pub(super) fn create_session(
    tx: &Transaction<'_>,
    s: &NewSession,
    audit: &Audit,
) -> Result<SessionRecord> {
    let now = millis(Utc::now());
    let (ciphertext, nonce, key_id) = match &s.refresh {
        Some(r) => (
            Some(r.ciphertext.clone()),
            Some(r.nonce.clone()),
            Some(r.key_id.clone()),
        ),
        None => (None, None, None),
    };
    tx.prepare_cached(
        "INSERT INTO sessions (id, secret_hash, user_id, method, provider, token_id, id_token,
            refresh_ciphertext, refresh_nonce, refresh_key_id, created_at, last_seen_at,
            refreshed_at, expires_at, subject)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11, ?11, ?12, ?13)",
    )?
    .execute(params![
        s.id,
        s.secret_hash,
        s.user,
        s.method.as_str(),
        s.provider,
        s.token_id,
        s.id_token,
        ciphertext,
        nonce,
        key_id,
        now,
        millis(s.expires_at),
        s.subject
    ])?;
    append_audit(tx, audit)?;
    get_session(tx, &s.id)?.ok_or_else(|| vanished("session"))
}

pub(super) fn get_session(c: &Connection, id: &str) -> Result<Option<SessionRecord>> {
    c.prepare_cached(&format!(
        "SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1"
    ))?
    .query_row(params![id], session_row)
    .optional()?
    .map(session_record)
    .transpose()
}

/// The session whose cookie secret hashes to `secret_hash`, with its person's user,
/// memberships and (for a token login) token.
pub(super) fn open_session(c: &Connection, secret_hash: &str) -> Result<Option<SessionGrant>> {
    session_grant(c, "secret_hash", secret_hash)
}

/// The session a CLI login's token belongs to, with its person.
pub(super) fn session_of_token(c: &Connection, token_id: &str) -> Result<Option<SessionGrant>> {
    session_grant(c, "token_id", token_id)
}

/// The session whose `column` (a unique or indexed one) is `value`, with its person.
fn session_grant(c: &Connection, column: &str, value: &str) -> Result<Option<SessionGrant>> {
    let Some(session) = c
        .prepare_cached(&format!(
            "SELECT {SESSION_COLUMNS} FROM sessions WHERE {column} = ?1
             ORDER BY created_at DESC LIMIT 1"
        ))?
        .query_row(params![value], session_row)
        .optional()?
        .map(session_record)
        .transpose()?
    else {
        return Ok(None);
    };
    let Some((user, roles)) = super::identity::user_with_roles(c, &session.user)? else {
        return Ok(None);
    };
    let token = match &session.token_id {
        Some(id) => super::tokens::get(c, id)?,
        None => None,
    };
    Ok(Some(SessionGrant {
        session,
        user,
        roles,
        token,
    }))
}

/// Marks the session seen now (the idle timeout counts from here).
pub(super) fn touch_session(tx: &Transaction<'_>, id: &str, at: DateTime<Utc>) -> Result<()> {
    tx.prepare_cached("UPDATE sessions SET last_seen_at = ?2 WHERE id = ?1 AND ended_at IS NULL")?
        .execute(params![id, millis(at)])?;
    Ok(())
}

/// A provider session the provider vouched for again: its memberships brought in line,
/// its tokens replaced (a refresh token the provider did not rotate is kept).
pub(super) fn refresh_session(
    tx: &Transaction<'_>,
    id: &str,
    s: &ProviderSignIn,
    id_token: Option<&str>,
    refresh: Option<&Sealed>,
) -> Result<Vec<MembershipChange>> {
    let session =
        get_session(tx, id)?.ok_or_else(|| StoreError::NotFound(format!("session {id:?}")))?;
    if session.ended_at.is_some() {
        return Err(StoreError::NotFound(format!("session {id:?} (ended)")));
    }
    let changes = apply_memberships(tx, &session.user, s)?;
    let now = millis(Utc::now());
    tx.prepare_cached(
        "UPDATE sessions SET refreshed_at = ?2, id_token = COALESCE(?3, id_token) WHERE id = ?1",
    )?
    .execute(params![id, now, id_token])?;
    if let Some(r) = refresh {
        tx.prepare_cached(
            "UPDATE sessions SET refresh_ciphertext = ?2, refresh_nonce = ?3, refresh_key_id = ?4
             WHERE id = ?1",
        )?
        .execute(params![id, r.ciphertext, r.nonce, r.key_id])?;
    }
    Ok(changes)
}

/// Makes `token` for the session's user, revokes the session's old one and moves the
/// session to the new one.
pub(super) fn replace_session_token(
    tx: &Transaction<'_>,
    session: &str,
    token: &NewToken,
    audit: &Audit,
) -> Result<TokenRecord> {
    let s = get_session(tx, session)?
        .filter(|s| s.ended_at.is_none())
        .ok_or_else(|| StoreError::NotFound(format!("session {session:?}")))?;
    if let Some(old) = &s.token_id {
        super::tokens::revoke(tx, old, None)?;
    }
    let token = NewToken {
        user: Some(s.user.clone()),
        ..token.clone()
    };
    let created = super::tokens::create(tx, &token, Some(audit))?;
    tx.prepare_cached("UPDATE sessions SET token_id = ?2 WHERE id = ?1")?
        .execute(params![session, token.id])?;
    Ok(created)
}

/// Ends a session that has not ended, saying why; false when it had (or is unknown).
pub(super) fn end_session(
    tx: &Transaction<'_>,
    id: &str,
    reason: &str,
    audit: Option<&Audit>,
) -> Result<bool> {
    let done = tx
        .prepare_cached(
            "UPDATE sessions SET ended_at = ?2, ended_reason = ?3,
                refresh_ciphertext = NULL, refresh_nonce = NULL, refresh_key_id = NULL
             WHERE id = ?1 AND ended_at IS NULL",
        )?
        .execute(params![id, millis(Utc::now()), reason])?
        > 0;
    if done {
        // A CLI login's token goes with its session (a token login's stays the person's).
        let cli_token: Option<String> = tx
            .prepare_cached("SELECT token_id FROM sessions WHERE id = ?1 AND method = 'provider'")?
            .query_row(params![id], |r| r.get(0))
            .optional()?
            .flatten();
        if let Some(token) = cli_token {
            super::tokens::revoke(tx, &token, None)?;
        }
        if let Some(a) = audit {
            append_audit(tx, a)?;
        }
    }
    Ok(done)
}

/// A user's sessions, newest first, at most `limit`.
pub(super) fn end_user_sessions(
    tx: &Transaction<'_>,
    user: &str,
    reason: &str,
    audit: &Audit,
) -> Result<u64> {
    let open: Vec<String> = tx
        .prepare_cached(
            "SELECT id FROM sessions WHERE user_id = ?1 AND ended_at IS NULL ORDER BY id",
        )?
        .query_map(params![user], |r| r.get(0))?
        .collect::<db::Result<_>>()?;
    let mut ended = 0;
    for id in &open {
        if end_session(tx, id, reason, None)? {
            ended += 1;
        }
    }
    let mut audit = audit.clone();
    audit.detail["ended"] = json!(ended);
    append_audit(tx, &audit)?;
    Ok(ended)
}

pub(super) fn list_sessions(c: &Connection, user: &str, limit: u32) -> Result<Vec<SessionRecord>> {
    c.prepare_cached(&format!(
        "SELECT {SESSION_COLUMNS} FROM sessions WHERE user_id = ?1
         ORDER BY created_at DESC, id DESC LIMIT ?2"
    ))?
    .query_map(params![user, limit], session_row)?
    .collect::<db::Result<Vec<_>>>()?
    .into_iter()
    .map(session_record)
    .collect()
}

const IDENTITY_COLUMNS: &str =
    "issuer, subject, provider, user_id, email, username, created_at, last_sign_in_at";

/// An identity's row. A link an admin made before any sign-in keeps `last_sign_in_at` 0
/// (the column predates such links and holds no null).
fn identity_row(r: &Row<'_>) -> db::Result<(IdentityRecord, i64, i64)> {
    Ok((
        IdentityRecord {
            issuer: r.get(0)?,
            subject: r.get(1)?,
            provider: r.get(2)?,
            user: r.get(3)?,
            email: r.get(4)?,
            username: r.get(5)?,
            created_at: Utc::now(),
            last_sign_in_at: None,
        },
        r.get(6)?,
        r.get(7)?,
    ))
}

fn identity_record((mut i, created, last): (IdentityRecord, i64, i64)) -> Result<IdentityRecord> {
    i.created_at = from_millis(created)?;
    i.last_sign_in_at = if last == 0 {
        None
    } else {
        Some(from_millis(last)?)
    };
    Ok(i)
}

fn get_identity(c: &Connection, issuer: &str, subject: &str) -> Result<Option<IdentityRecord>> {
    c.prepare_cached(&format!(
        "SELECT {IDENTITY_COLUMNS} FROM identities WHERE issuer = ?1 AND subject = ?2"
    ))?
    .query_row(params![issuer, subject], identity_row)
    .optional()?
    .map(identity_record)
    .transpose()
}

pub(super) fn link_identity(
    tx: &Transaction<'_>,
    link: &IdentityLink,
    audit: &Audit,
) -> Result<IdentityRecord> {
    if super::identity::get_user(tx, &link.user)?.is_none() {
        return Err(StoreError::NotFound(format!("user {:?}", link.user)));
    }
    if let Some(linked) = get_identity(tx, &link.issuer, &link.subject)? {
        return Err(StoreError::AlreadyExists(format!(
            "identity {:?} of provider {} (linked to user {})",
            link.subject, linked.provider, linked.user
        )));
    }
    tx.prepare_cached(
        "INSERT INTO identities (issuer, subject, provider, user_id, created_at,
            last_sign_in_at)
         VALUES (?1, ?2, ?3, ?4, ?5, 0)",
    )?
    .execute(params![
        link.issuer,
        link.subject,
        link.provider,
        link.user,
        millis(Utc::now())
    ])?;
    append_audit(tx, audit)?;
    get_identity(tx, &link.issuer, &link.subject)?.ok_or_else(|| vanished("identity"))
}

pub(super) fn list_identities(c: &Connection, user: &str) -> Result<Vec<IdentityRecord>> {
    c.prepare_cached(&format!(
        "SELECT {IDENTITY_COLUMNS} FROM identities WHERE user_id = ?1
         ORDER BY created_at, issuer, subject LIMIT ?2"
    ))?
    .query_map(params![user, crate::MAX_IDENTITIES], identity_row)?
    .collect::<db::Result<Vec<_>>>()?
    .into_iter()
    .map(identity_record)
    .collect()
}

pub(super) fn unlink_identity(
    tx: &Transaction<'_>,
    issuer: &str,
    subject: &str,
    audit: &Audit,
) -> Result<Option<IdentityRecord>> {
    let Some(identity) = get_identity(tx, issuer, subject)? else {
        return Ok(None);
    };
    tx.prepare_cached("DELETE FROM identities WHERE issuer = ?1 AND subject = ?2")?
        .execute(params![issuer, subject])?;
    // The sessions it signed in end with it (a CLI login's token with its session).
    let open: Vec<String> = tx
        .prepare_cached(
            "SELECT id FROM sessions WHERE user_id = ?1 AND provider = ?2 AND subject = ?3
             AND ended_at IS NULL ORDER BY id",
        )?
        .query_map(params![identity.user, identity.provider, subject], |r| {
            r.get(0)
        })?
        .collect::<db::Result<_>>()?;
    for id in open {
        end_session(tx, &id, "its identity was unlinked", None)?;
    }
    append_audit(
        tx,
        &Audit {
            target: format!("user:{}", identity.user),
            ..audit.clone()
        },
    )?;
    Ok(Some(identity))
}

/// Every open session's sealed refresh token, for re-sealing under a new secrets key.
pub(super) fn sealed_refresh_tokens(c: &Connection) -> Result<Vec<(SealedOwner, Sealed)>> {
    let rows: Vec<(String, Vec<u8>, Vec<u8>, String)> = c
        .prepare_cached(
            "SELECT id, refresh_ciphertext, refresh_nonce, refresh_key_id FROM sessions
             WHERE refresh_ciphertext IS NOT NULL AND ended_at IS NULL ORDER BY id",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
        .collect::<db::Result<_>>()?;
    Ok(rows
        .into_iter()
        .map(|(session, ciphertext, nonce, key_id)| {
            (
                SealedOwner::SessionRefresh { session },
                Sealed {
                    ciphertext,
                    nonce,
                    key_id,
                },
            )
        })
        .collect())
}

/// Replaces an open session's sealed refresh token in a re-seal transaction.
pub(super) fn reseal_refresh(tx: &Transaction<'_>, session: &str, v: &Sealed) -> Result<()> {
    tx.prepare_cached(
        "UPDATE sessions SET refresh_ciphertext = ?2, refresh_nonce = ?3, refresh_key_id = ?4
         WHERE id = ?1 AND refresh_ciphertext IS NOT NULL",
    )?
    .execute(params![session, v.ciphertext, v.nonce, v.key_id])?;
    Ok(())
}

/// Removes every sign-in begun and past its expiry (retention's sweep; new sign-ins also
/// remove some as they begin).
pub(super) fn prune_attempts(tx: &Transaction<'_>) -> Result<()> {
    tx.prepare_cached("DELETE FROM sign_in_attempts WHERE expires_at < ?1")?
        .execute(params![millis(Utc::now())])?;
    Ok(())
}

/// One batch of [`crate::RetentionStore::prune_sessions`]: the sessions that ended (or
/// expired unended) before `before`, oldest first; how many went, and whether the batch
/// was full.
pub(super) fn prune_sessions(tx: &Transaction<'_>, before: i64, batch: u32) -> Result<(u64, bool)> {
    let mut ids: Vec<String> = tx
        .prepare_cached(
            "SELECT id FROM sessions WHERE ended_at IS NOT NULL AND ended_at < ?1
             ORDER BY ended_at LIMIT ?2",
        )?
        .query_map(params![before, batch], |r| r.get(0))?
        .collect::<db::Result<_>>()?;
    let left = batch.saturating_sub(ids.len() as u32);
    if left > 0 {
        ids.extend(
            tx.prepare_cached(
                "SELECT id FROM sessions WHERE ended_at IS NULL AND expires_at < ?1
                 ORDER BY expires_at LIMIT ?2",
            )?
            .query_map(params![before, left], |r| r.get::<_, String>(0))?
            .collect::<db::Result<Vec<_>>>()?,
        );
    }
    let mut delete = tx.prepare_cached("DELETE FROM sessions WHERE id = ?1")?;
    for id in &ids {
        delete.execute(params![id])?;
    }
    Ok((ids.len() as u64, ids.len() == batch as usize))
}
