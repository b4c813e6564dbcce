//! Request extractors whose rejections are [`ApiError`]s, so malformed bodies, queries
//! and paths get our error format and a message naming the problem.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use axum::http::StatusCode;
use bosun_api::ErrorCode;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON request body. Requires `Content-Type: application/json`.
pub struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let is_json = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|m| {
                let m = m.trim();
                m == "application/json" || m.ends_with("+json")
            });
        if !is_json {
            return Err(ApiError::UnsupportedMediaType(
                "expected a JSON body with Content-Type: application/json".into(),
            ));
        }
        let bytes = read_body(req, state).await?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// Reads a whole request body within the route's limit (413 past it).
pub async fn read_body<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    let limit = req
        .extensions()
        .get::<BodyLimit>()
        .map(|l| l.0)
        .unwrap_or(0);
    Bytes::from_request(req, state).await.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge { limit }
        } else {
            ApiError::BadRequest {
                code: ErrorCode::InvalidBody,
                message: format!("could not read the request body: {r}"),
            }
        }
    })
}

/// The body limit in force, recorded so the 413 message can state it.
#[derive(Clone, Copy)]
pub struct BodyLimit(pub usize);

pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        use serde_json::error::Category;
        match e.classify() {
            Category::Syntax | Category::Eof | Category::Io => ApiError::BadRequest {
                code: ErrorCode::InvalidJson,
                message: format!("malformed JSON: {e}"),
            },
            Category::Data => {
                let code = if e.to_string().starts_with("unknown field") {
                    ErrorCode::UnknownField
                } else {
                    ErrorCode::InvalidField
                };
                ApiError::BadRequest {
                    code,
                    message: format!("invalid request body: {e}"),
                }
            }
        }
    })
}

/// Query-string parameters.
pub struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| ApiQuery(q.0))
            .map_err(|e| ApiError::BadRequest {
                code: ErrorCode::InvalidQuery,
                message: e.body_text(),
            })
    }
}

/// Path parameters.
pub struct ApiPath<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| ApiPath(p.0))
            .map_err(|e| ApiError::BadRequest {
                code: ErrorCode::InvalidPath,
                message: e.body_text(),
            })
    }
}
