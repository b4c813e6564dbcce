//! The authorization layer every API route passes through.
//!
//! Each route in [`crate::route`] declares an [`Access`] policy. [`guard`] runs before
//! the handler: it authenticates the bearer token into a [`Principal`], asks
//! [`bosun_core::authz::authorize`], and hands the principal to the handler as a
//! [`Caller`]. A handler cannot be reached without passing here.

use axum::extract::{FromRequestParts, RawPathParams, Request, State};
use axum::http::request::Parts;
use axum::http::{header::AUTHORIZATION, HeaderMap};
use axum::middleware::Next;
use axum::response::Response;
use base64::Engine as _;
use bosun_core::authz::{authorize, Access, Denial, Principal, PrincipalKind};
use bosun_core::state::authorize_state;
use bosun_core::token::{hash_token, TokenKind};
use bosun_store::{Audit, Store};
use chrono::Utc;

use crate::app::AppState;
use crate::error::ApiError;

/// The state the guard middleware of one route carries.
#[derive(Clone)]
pub struct Guard {
    pub state: AppState,
    pub access: Access,
}

/// Authenticates and authorizes, then runs the handler.
pub async fn guard(
    State(g): State<Guard>,
    params: RawPathParams,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let param = |name: &str| {
        params
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    };
    let org = param("org");
    if let Access::State(sel) = g.access {
        // Unknown methods on the backend URL are a 405 whoever asks.
        let op = sel
            .op(req.method().as_str())
            .ok_or_else(|| ApiError::MethodNotAllowed {
                method: req.method().to_string(),
                path: req.uri().path().to_string(),
            })?;
        let principal = authenticate(g.state.store.as_ref(), req.headers()).await?;
        let stack = param("stack").unwrap_or_default();
        authorize_state(&principal, op, org.as_deref().unwrap_or_default(), &stack)?;
        req.extensions_mut().insert(principal);
        return Ok(next.run(req).await);
    }
    let principal = authenticate(g.state.store.as_ref(), req.headers()).await?;
    if let Err(denial) = authorize(&principal, g.access, org.as_deref()) {
        return Err(refusal(g.state.store.as_ref(), &principal, denial).await);
    }
    req.extensions_mut().insert(principal);
    Ok(next.run(req).await)
}

/// The error for a refused call. "Not a member" of an org that does not exist is, for a
/// server admin (who may know every org), that the org is not found; anyone else gets
/// the same refusal for an org that exists and one that does not, so they cannot learn
/// which orgs there are.
async fn refusal(store: &dyn Store, who: &Principal, denial: Denial) -> ApiError {
    let server_admin = matches!(
        who.kind,
        PrincipalKind::User {
            server_admin: true,
            ..
        }
    );
    if let (true, Denial::NotMember { org }) = (server_admin, &denial) {
        match store.get_org(org).await {
            Ok(None) => return ApiError::NotFound(format!("org {org:?}")),
            Ok(Some(_)) => {}
            Err(e) => return e.into(),
        }
    }
    denial.into()
}

/// Reads the token from `Authorization: Bearer <token>`, or from HTTP basic auth with
/// the token as the password (how OpenTofu's http backend sends it).
fn presented_token(headers: &HeaderMap) -> Result<String, ApiError> {
    let missing = || {
        ApiError::Unauthenticated(
            "missing credentials: send Authorization: Bearer <token>".to_string(),
        )
    };
    let value = headers
        .get(AUTHORIZATION)
        .ok_or_else(missing)?
        .to_str()
        .map_err(|_| ApiError::Unauthenticated("Authorization header is not ASCII".into()))?;
    let (scheme, rest) = value.split_once(' ').ok_or_else(missing)?;
    let token = if scheme.eq_ignore_ascii_case("bearer") {
        rest.trim().to_string()
    } else if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest.trim())
            .map_err(|_| ApiError::Unauthenticated("malformed basic credentials".into()))?;
        let text = String::from_utf8(decoded)
            .map_err(|_| ApiError::Unauthenticated("malformed basic credentials".into()))?;
        let (_, password) = text
            .split_once(':')
            .ok_or_else(|| ApiError::Unauthenticated("malformed basic credentials".into()))?;
        password.to_string()
    } else {
        return Err(ApiError::Unauthenticated(format!(
            "unsupported authorization scheme {scheme:?}; use Bearer"
        )));
    };
    if token.is_empty() {
        return Err(missing());
    }
    Ok(token)
}

/// Turns the presented token into the principal it stands for.
pub async fn authenticate(store: &dyn Store, headers: &HeaderMap) -> Result<Principal, ApiError> {
    let token = presented_token(headers)?;
    authenticate_token(store, &token).await
}

/// Turns a token, however it was presented (header or console session), into its
/// principal: revoked, expired and orphaned tokens are refused, saying which.
pub async fn authenticate_token(store: &dyn Store, token: &str) -> Result<Principal, ApiError> {
    let grant = store
        .token_grant(&hash_token(token))
        .await?
        .ok_or_else(|| ApiError::Unauthenticated("invalid token".into()))?;
    let record = grant.token;
    if record.revoked_at.is_some() {
        return Err(ApiError::Unauthenticated(format!(
            "token {} was revoked",
            record.id
        )));
    }
    if let Some(exp) = record.expires_at {
        if exp <= Utc::now() {
            return Err(ApiError::Unauthenticated(format!(
                "token {} expired at {}",
                record.id,
                exp.to_rfc3339()
            )));
        }
    }
    let corrupt = || ApiError::Internal(format!("token {} is missing its owner", record.id));
    let kind = match record.kind {
        TokenKind::Personal => {
            let user = grant.user.ok_or_else(|| {
                ApiError::Unauthenticated("the token's user no longer exists".into())
            })?;
            PrincipalKind::User {
                roles: grant.roles,
                user: user.id,
                server_admin: user.server_admin,
            }
        }
        TokenKind::Pool => PrincipalKind::Pool {
            org: record.org.clone(),
            pool: record.pool.clone().ok_or_else(corrupt)?,
        },
        TokenKind::Run => PrincipalKind::Run {
            org: record.org.clone().ok_or_else(corrupt)?,
            run: record.run.clone().ok_or_else(corrupt)?,
            stack: record.stack.clone().unwrap_or_default(),
            read_stacks: record.read_stacks.clone(),
        },
    };
    Ok(Principal {
        token_id: record.id,
        kind,
    })
}

/// The authenticated caller of a guarded route.
pub struct Caller(pub Principal);

impl Caller {
    /// The audit entry for an action this caller takes.
    pub fn audit(
        &self,
        org: Option<&str>,
        action: &str,
        target: impl Into<String>,
        detail: serde_json::Value,
    ) -> Audit {
        Audit {
            org: org.map(str::to_string),
            actor: self.0.actor(),
            token_id: Some(self.0.token_id.clone()),
            action: action.to_string(),
            target: target.into(),
            detail,
        }
    }

    pub fn user(&self) -> Result<&str, ApiError> {
        self.0
            .user()
            .ok_or_else(|| ApiError::Forbidden("this endpoint needs a personal token".into()))
    }

    pub fn is_server_admin(&self) -> bool {
        matches!(
            self.0.kind,
            PrincipalKind::User {
                server_admin: true,
                ..
            }
        )
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Principal>()
            .cloned()
            .map(Caller)
            .ok_or_else(|| ApiError::Internal("route reached without the auth guard".into()))
    }
}
