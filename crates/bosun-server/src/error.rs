//! The one place errors become HTTP responses.
//!
//! Every handler returns `Result<_, ApiError>`; every error body is
//! `{"error": {"code", "message", "field"?}}` with a stable `code`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bosun_api::{ErrorBody, ErrorCode, ErrorDetail};
use bosun_core::authz::Denial;
use bosun_core::ValidationError;
use bosun_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    Validation(#[from] ValidationError),
    /// Malformed request syntax: `code` is `invalid_json`, `unknown_field`,
    /// `invalid_field`, `invalid_query` or `invalid_path`.
    #[error("{message}")]
    BadRequest { code: ErrorCode, message: String },
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0} not found")]
    NotFound(String),
    /// Deleted by retention: the message says what and since when.
    #[error("{0}")]
    Gone(String),
    /// The request conflicts with what is stored: `already_exists`, `dependency_cycle`,
    /// `has_dependents`, `last_admin`.
    #[error("{message}")]
    Conflict { code: ErrorCode, message: String },
    /// The stack's state is locked by someone else.
    #[error("the state is locked by {} (lock {}, operation {})", .0.who, .0.id, .0.operation)]
    Locked(Box<bosun_core::state::Lock>),
    #[error("request body is larger than the limit of {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("no route for {0}")]
    RouteNotFound(String),
    #[error("method {method} is not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },
    /// Too many requests of this kind on this server right now: 429 `rate_limited` with
    /// `Retry-After`.
    #[error("{message}; try again in {retry_after}s")]
    TooManyRequests { message: String, retry_after: u64 },
    #[error("{0}")]
    Unavailable(String),
    /// The database is not there or cannot write right now (`StoreError::Unavailable`):
    /// 503 `store_unavailable` with `Retry-After`, which Terraform's http backend and
    /// Bosun's runners retry, so they ride out a database restart or a full disk.
    #[error("{0}; try again shortly")]
    StoreUnavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Validation(_) | ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) | ApiError::RouteNotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Gone(_) => StatusCode::GONE,
            ApiError::Conflict { .. } => StatusCode::CONFLICT,
            ApiError::Locked(_) => StatusCode::LOCKED,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unavailable(_) | ApiError::StoreUnavailable(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn code(&self) -> ErrorCode {
        match self {
            ApiError::Validation(_) => ErrorCode::ValidationFailed,
            ApiError::BadRequest { code, .. } | ApiError::Conflict { code, .. } => code.clone(),
            ApiError::Unauthenticated(_) => ErrorCode::Unauthenticated,
            ApiError::Locked(_) => ErrorCode::StateLocked,
            ApiError::Forbidden(_) => ErrorCode::Forbidden,
            ApiError::NotFound(_) => ErrorCode::NotFound,
            ApiError::Gone(_) => ErrorCode::Gone,
            ApiError::PayloadTooLarge { .. } => ErrorCode::PayloadTooLarge,
            ApiError::UnsupportedMediaType(_) => ErrorCode::UnsupportedMediaType,
            ApiError::RouteNotFound(_) => ErrorCode::RouteNotFound,
            ApiError::MethodNotAllowed { .. } => ErrorCode::MethodNotAllowed,
            ApiError::TooManyRequests { .. } => ErrorCode::RateLimited,
            ApiError::Unavailable(_) => ErrorCode::Unavailable,
            ApiError::StoreUnavailable(_) => ErrorCode::StoreUnavailable,
            ApiError::Internal(_) => ErrorCode::Internal,
        }
    }

    fn field(&self) -> Option<String> {
        match self {
            ApiError::Validation(v) if !v.field.is_empty() => Some(v.field.clone()),
            _ => None,
        }
    }

    pub fn body(&self) -> ErrorBody {
        let message = match self {
            // Internals stay in the server log; the client gets a pointer to it.
            ApiError::Internal(_) => "internal error; see the server log".to_string(),
            other => other.to_string(),
        };
        ErrorBody {
            error: ErrorDetail {
                code: self.code(),
                message,
                field: self.field(),
            },
        }
    }
}

impl From<Denial> for ApiError {
    fn from(d: Denial) -> Self {
        ApiError::Forbidden(d.to_string())
    }
}

impl From<bosun_core::approval::ApprovalRefused> for ApiError {
    fn from(r: bosun_core::approval::ApprovalRefused) -> Self {
        ApiError::Forbidden(r.to_string())
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(what) => ApiError::NotFound(what),
            StoreError::AlreadyExists(_) => ApiError::Conflict {
                code: ErrorCode::AlreadyExists,
                message: e.to_string(),
            },
            StoreError::DependencyCycle(_) => ApiError::Conflict {
                code: ErrorCode::DependencyCycle,
                message: e.to_string(),
            },
            StoreError::HasDependents { .. } => ApiError::Conflict {
                code: ErrorCode::HasDependents,
                message: e.to_string(),
            },
            StoreError::UnknownUpstream { field, .. } => {
                ApiError::Validation(ValidationError::new(field.to_string(), e.to_string()))
            }
            StoreError::StateLocked(lock) => ApiError::Locked(lock),
            StoreError::HasOpenRuns { .. } => ApiError::Conflict {
                code: ErrorCode::HasOpenRuns,
                message: e.to_string(),
            },
            StoreError::HasState { .. } => ApiError::Conflict {
                code: ErrorCode::HasState,
                message: format!("{e} (delete_state=true)"),
            },
            StoreError::Fenced { .. } => ApiError::Conflict {
                code: ErrorCode::Fenced,
                message: e.to_string(),
            },
            StoreError::InvalidTransition(_) => ApiError::Conflict {
                code: ErrorCode::InvalidTransition,
                message: e.to_string(),
            },
            StoreError::StateRefused(refusal) => {
                use bosun_core::state::WriteRefusal;
                let code = match &refusal {
                    WriteRefusal::Locked(lock) => return ApiError::Locked(lock.clone()),
                    WriteRefusal::LockNotHeld(_) => ErrorCode::LockNotHeld,
                    WriteRefusal::SerialBackwards { .. } => ErrorCode::SerialBackwards,
                    WriteRefusal::LineageChanged { .. } => ErrorCode::LineageChanged,
                };
                ApiError::Conflict {
                    code,
                    message: refusal.to_string(),
                }
            }
            StoreError::RunInProgress { .. } => ApiError::Conflict {
                code: ErrorCode::RunInProgress,
                message: e.to_string(),
            },
            StoreError::InvalidPlanTransition(_) => ApiError::Conflict {
                code: ErrorCode::InvalidTransition,
                message: e.to_string(),
            },
            StoreError::EnvironmentInUse { .. } => ApiError::Conflict {
                code: ErrorCode::EnvironmentInUse,
                message: e.to_string(),
            },
            StoreError::HostInUse { .. } => ApiError::Conflict {
                code: ErrorCode::HostInUse,
                message: e.to_string(),
            },
            StoreError::ScheduleFromFile { .. } => ApiError::Conflict {
                code: ErrorCode::ScheduleFromFile,
                message: e.to_string(),
            },
            StoreError::NotAwaitingApproval { .. } => ApiError::Conflict {
                code: ErrorCode::NotAwaitingApproval,
                message: e.to_string(),
            },
            StoreError::UnknownEnvironment(_) => {
                ApiError::Validation(ValidationError::new("environment", e.to_string()))
            }
            StoreError::InvalidBastion { .. } => {
                ApiError::Validation(ValidationError::new("proxy_jump", e.to_string()))
            }
            StoreError::Unavailable(why) => ApiError::StoreUnavailable(why),
            StoreError::SchemaTooNew { .. } | StoreError::Corrupt(_) | StoreError::Backend(_) => {
                ApiError::Internal(e.to_string())
            }
        }
    }
}

/// How long a client should wait before trying again while the store is unavailable.
pub const STORE_RETRY_AFTER_SECS: u32 = 3;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if let ApiError::StoreUnavailable(_) = self {
            tracing::warn!(error = %self, "request refused: the store is unavailable");
        } else if status.is_server_error() {
            tracing::error!(error = %self, "request failed");
        }
        let mut resp = (status, Json(self.body())).into_response();
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"bosun\""),
            );
        }
        if let ApiError::StoreUnavailable(_) = self {
            resp.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(STORE_RETRY_AFTER_SECS),
            );
        }
        if let ApiError::TooManyRequests { retry_after, .. } = self {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unavailable_store_is_a_503_to_retry_never_a_500() {
        let e = ApiError::from(StoreError::Unavailable(
            "the data directory's filesystem is full (SQLite: database or disk is full)".into(),
        ));
        assert_eq!(e.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(e.code(), "store_unavailable");
        assert_eq!(
            e.body().error.message,
            "the data directory's filesystem is full (SQLite: database or disk is full); \
             try again shortly"
        );
        let resp = e.into_response();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            resp.headers()
                .get(header::RETRY_AFTER)
                .map(|v| v.as_bytes()),
            Some(STORE_RETRY_AFTER_SECS.to_string().as_bytes())
        );
        let backend = ApiError::from(StoreError::Backend("syntax error".into()));
        assert_eq!(backend.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(backend
            .into_response()
            .headers()
            .get(header::RETRY_AFTER)
            .is_none());
    }
}
