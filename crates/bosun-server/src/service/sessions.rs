//! Console sessions through the API: a person's own listed (a server admin may list
//! anyone's), and one (or all of a user's) ended by its person or a server admin, saying
//! who ended it.

use bosun_api::{Page, Session, SessionsEnded};
use bosun_store::SessionRecord;
use serde::Deserialize;
use serde_json::json;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::paging::{page_limit, whole, PageQuery};

/// The most sessions one list answers (newest first).
pub const MAX_LISTED: u32 = 1000;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SessionQuery {
    /// Whose sessions (a server admin may name anyone; absent: your own).
    pub user: Option<String>,
    /// Refused: the list is answered whole, as one page (`before` is accepted too, as
    /// for every list).
    #[serde(alias = "before")]
    pub cursor: Option<String>,
    /// How many, newest first, 1–1000 (default 100).
    pub limit: Option<u32>,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct EndAllQuery {
    /// Whose sessions (a server admin may name anyone; absent: your own).
    pub user: Option<String>,
}

pub fn to_wire(s: SessionRecord) -> Session {
    Session {
        id: s.id,
        user: s.user,
        method: s.method.as_str().to_string(),
        provider: s.provider,
        token_id: s.token_id,
        created_at: s.created_at,
        last_seen_at: s.last_seen_at,
        refreshed_at: s.refreshed_at,
        expires_at: s.expires_at,
        ended_at: s.ended_at,
        ended_reason: s.ended_reason,
    }
}

/// A person's sessions, newest first, answered as one page.
pub async fn list(
    state: &AppState,
    caller: &Caller,
    q: &SessionQuery,
) -> Result<Page<Session>, ApiError> {
    PageQuery {
        cursor: q.cursor.clone(),
        limit: q.limit,
    }
    .whole()?;
    let limit = page_limit(q.limit)?.min(MAX_LISTED);
    let me = caller.user()?;
    let who = q.user.as_deref().unwrap_or(me);
    if who != me && !caller.is_server_admin() {
        return Err(ApiError::Forbidden(format!(
            "only a server admin may list another user's sessions (asked for {who:?})"
        )));
    }
    let sessions = state.store.list_sessions(who, limit).await?;
    Ok(whole(sessions.into_iter().map(to_wire).collect()))
}

/// Ends every open session of the caller (sign out everywhere) or, for a server admin,
/// of `user` (a person whose access must stop now), with the CLI logins' tokens.
pub async fn revoke_all(
    state: &AppState,
    caller: &Caller,
    q: &EndAllQuery,
) -> Result<SessionsEnded, ApiError> {
    let me = caller.user()?;
    let who = q.user.as_deref().unwrap_or(me);
    if who != me && !caller.is_server_admin() {
        return Err(ApiError::Forbidden(format!(
            "only a server admin may end another user's sessions (asked for {who:?})"
        )));
    }
    if state.store.get_user(who).await?.is_none() {
        return Err(ApiError::NotFound(format!("user {who:?}")));
    }
    let audit = caller.audit(
        None,
        "session.revoke",
        format!("user:{who}"),
        json!({"user": who, "all": true}),
    );
    let ended = state
        .store
        .end_user_sessions(who, &format!("revoked by user:{me}"), &audit)
        .await?;
    Ok(SessionsEnded {
        user: who.to_string(),
        ended,
    })
}

/// Ends a session of the caller's (a server admin: anyone's); one already ended stays as
/// it ended.
pub async fn revoke(state: &AppState, caller: &Caller, id: &str) -> Result<Session, ApiError> {
    let me = caller.user()?;
    let record = state
        .store
        .get_session(id)
        .await?
        .filter(|s| caller.is_server_admin() || s.user == me)
        .ok_or_else(|| ApiError::NotFound(format!("session {id:?}")))?;
    let audit = caller.audit(
        None,
        "session.revoke",
        format!("session:{}", record.id),
        json!({"user": record.user}),
    );
    let reason = format!("revoked by user:{me}");
    state
        .store
        .end_session(&record.id, &reason, Some(&audit))
        .await?;
    let now = state
        .store
        .get_session(id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("session {id:?}")))?;
    Ok(to_wire(now))
}
