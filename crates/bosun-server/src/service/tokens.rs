//! Tokens: minting (secret shown once, hash stored), listing and revoking personal,
//! runner-pool and run tokens — the work behind the API's token handlers and the runs
//! that mint their own.

use bosun_api::{Page, PersonalTokenCreate, PoolTokenCreate, Token, TokenCreated};
use bosun_core::stack::RunnerPool;
use bosun_core::token::{format_token, hash_token, TokenKind};
use bosun_core::ValidationError;
use bosun_store::{NewToken, TokenFilter, TokenRecord};
use chrono::{DateTime, Duration, Utc};
use rand::RngCore;
use serde_json::json;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::paging::{whole, PageQuery};

/// Who a new token belongs to.
pub enum TokenOwner {
    User(String),
    /// `org: None`: the server's own hosted pool (its embedded runners).
    Pool {
        org: Option<String>,
        pool: String,
    },
    Run {
        org: String,
        run: String,
        stack: String,
        /// Upstream stacks whose state the run may read (`terraform_remote_state`).
        read_stacks: Vec<String>,
    },
}

/// Makes a fresh token: the secret to show once, and the record to store (hash only).
pub fn new_token(
    kind: TokenKind,
    owner: TokenOwner,
    description: String,
    expires_at: Option<DateTime<Utc>>,
) -> (String, NewToken) {
    let mut random = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut random);
    let secret = format_token(kind, &random);
    let mut id = [0u8; 8];
    rand::thread_rng().fill_bytes(&mut id);
    let mut token = NewToken {
        id: format!("tok_{}", hex::encode(id)),
        kind,
        secret_hash: hash_token(&secret),
        description,
        user: None,
        org: None,
        pool: None,
        run: None,
        stack: None,
        read_stacks: Vec::new(),
        expires_at,
    };
    match owner {
        TokenOwner::User(u) => token.user = Some(u),
        TokenOwner::Pool { org, pool } => {
            token.org = org;
            token.pool = Some(pool);
        }
        TokenOwner::Run {
            org,
            run,
            stack,
            read_stacks,
        } => {
            token.org = Some(org);
            token.run = Some(run);
            token.stack = Some(stack);
            token.read_stacks = read_stacks;
        }
    }
    (secret, token)
}

/// Mints the token a Run authenticates with, scoped to its stack (and read access to the
/// state of `read_stacks`, its granted upstreams). Runs revoke it with
/// [`bosun_store::Store::revoke_token`](bosun_store::TokenStore::revoke_token) the moment they end.
pub async fn mint_run_token(
    state: &AppState,
    org: &str,
    run: &str,
    stack: &str,
    ttl: Duration,
    read_stacks: &[String],
) -> Result<(String, TokenRecord), ApiError> {
    let (secret, token) = new_token(
        TokenKind::Run,
        TokenOwner::Run {
            org: org.into(),
            run: run.into(),
            stack: stack.into(),
            read_stacks: read_stacks.to_vec(),
        },
        format!("run {run}"),
        Some(Utc::now() + ttl),
    );
    let record = state.store.create_token(&token, None).await?;
    Ok((secret, record))
}

const MAX_LIFETIME_SECS: u64 = 10 * 365 * 24 * 3600;

fn expiry(expires_in_seconds: Option<u64>) -> Result<Option<DateTime<Utc>>, ApiError> {
    match expires_in_seconds {
        None => Ok(None),
        Some(s) if (60..=MAX_LIFETIME_SECS).contains(&s) => {
            Ok(Some(Utc::now() + Duration::seconds(s as i64)))
        }
        Some(_) => Err(ValidationError::new(
            "expires_in_seconds",
            format!("must be between 60 and {MAX_LIFETIME_SECS} seconds"),
        )
        .into()),
    }
}

fn check_description(d: &str) -> Result<String, ApiError> {
    if d.chars().count() > 200 || d.chars().any(char::is_control) {
        return Err(ValidationError::new(
            "description",
            "must be at most 200 characters with no control characters",
        )
        .into());
    }
    Ok(d.trim().to_string())
}

pub fn to_wire(t: TokenRecord) -> Token {
    Token {
        id: t.id,
        kind: t.kind.as_str().to_string(),
        description: t.description,
        user: t.user,
        org: t.org,
        pool: t.pool,
        created_at: t.created_at,
        expires_at: t.expires_at,
        revoked_at: t.revoked_at,
    }
}

/// Creates a personal token for the caller; a server admin may name another user.
pub async fn create_personal(
    state: &AppState,
    caller: &Caller,
    body: PersonalTokenCreate,
) -> Result<TokenCreated, ApiError> {
    let me = caller.user()?.to_string();
    let user = body.user.clone().unwrap_or_else(|| me.clone());
    if user != me && !caller.is_server_admin() {
        return Err(ApiError::Forbidden(
            "only a server administrator can create tokens for another user".into(),
        ));
    }
    if state.store.get_user(&user).await?.is_none() {
        return Err(ApiError::NotFound(format!("user {user:?}")));
    }
    issue(
        state,
        caller,
        None,
        TokenKind::Personal,
        TokenOwner::User(user.clone()),
        (&body.description, body.expires_in_seconds),
        json!({"kind": "personal", "user": user}),
    )
    .await
}

/// Mints, stores (with its audit record) and returns a token requested through the API.
async fn issue(
    state: &AppState,
    caller: &Caller,
    org: Option<&str>,
    kind: TokenKind,
    owner: TokenOwner,
    (description, expires_in_seconds): (&str, Option<u64>),
    detail: serde_json::Value,
) -> Result<TokenCreated, ApiError> {
    let (secret, token) = new_token(
        kind,
        owner,
        check_description(description)?,
        expiry(expires_in_seconds)?,
    );
    let audit = caller.audit(org, "token.create", format!("token:{}", token.id), detail);
    let record = state.store.create_token(&token, Some(&audit)).await?;
    Ok(TokenCreated {
        token: to_wire(record),
        secret,
    })
}

/// The caller's personal tokens (never their secrets).
pub async fn list_personal(
    state: &AppState,
    caller: &Caller,
    q: &PageQuery,
) -> Result<Page<Token>, ApiError> {
    q.whole()?;
    let tokens = state
        .store
        .list_tokens(&TokenFilter::User(caller.user()?.to_string()))
        .await?;
    Ok(whole(tokens.into_iter().map(to_wire).collect()))
}

/// Revokes one of the caller's personal tokens (a server admin: anyone's).
pub async fn revoke_personal(state: &AppState, caller: &Caller, id: &str) -> Result<(), ApiError> {
    let me = caller.user()?;
    let record = state
        .store
        .get_token(id)
        .await?
        .filter(|t| t.kind == TokenKind::Personal)
        .filter(|t| caller.is_server_admin() || t.user.as_deref() == Some(me))
        .ok_or_else(|| ApiError::NotFound(format!("token {id:?}")))?;
    let audit = caller.audit(
        None,
        "token.revoke",
        format!("token:{}", record.id),
        json!({}),
    );
    state.store.revoke_token(&record.id, Some(&audit)).await?;
    Ok(())
}

/// Creates a runner-pool token of the org: a runner joins the pool with it.
pub async fn create_pool(
    state: &AppState,
    caller: &Caller,
    org: &str,
    body: PoolTokenCreate,
) -> Result<TokenCreated, ApiError> {
    let pool =
        match RunnerPool::parse(&body.pool).map_err(|e| ValidationError::new("pool", e.message))? {
            RunnerPool::Hosted => {
                return Err(ValidationError::new(
                    "pool",
                    "\"hosted\" is the server's own pool; name a self-hosted pool",
                )
                .into())
            }
            RunnerPool::Named(p) => p.to_string(),
        };
    issue(
        state,
        caller,
        Some(org),
        TokenKind::Pool,
        TokenOwner::Pool {
            org: Some(org.to_string()),
            pool: pool.clone(),
        },
        (&body.description, body.expires_in_seconds),
        json!({"kind": "pool", "pool": pool}),
    )
    .await
}

/// The org's runner-pool tokens.
pub async fn list_pool(
    state: &AppState,
    org: &str,
    q: &PageQuery,
) -> Result<Page<Token>, ApiError> {
    q.whole()?;
    let tokens = state
        .store
        .list_tokens(&TokenFilter::Org {
            org: org.to_string(),
            kind: TokenKind::Pool,
        })
        .await?;
    Ok(whole(tokens.into_iter().map(to_wire).collect()))
}

/// Revokes a runner-pool token of the org (another org's is "not found").
pub async fn revoke_pool(
    state: &AppState,
    caller: &Caller,
    org: &str,
    id: &str,
) -> Result<(), ApiError> {
    let record = state
        .store
        .get_token(id)
        .await?
        .filter(|t| t.kind == TokenKind::Pool && t.org.as_deref() == Some(org))
        .ok_or_else(|| ApiError::NotFound(format!("pool token {id:?}")))?;
    let audit = caller.audit(
        Some(org),
        "token.revoke",
        format!("token:{}", record.id),
        json!({}),
    );
    state.store.revoke_token(&record.id, Some(&audit)).await?;
    Ok(())
}
