//! Paging of list endpoints: the `limit` every list takes.

use bosun_core::ValidationError;

use crate::error::ApiError;

pub const DEFAULT_PAGE: u32 = 100;
pub const MAX_PAGE: u32 = 1000;

/// Checks a `limit` query parameter.
pub fn page_limit(limit: Option<u32>) -> Result<u32, ApiError> {
    match limit {
        None => Ok(DEFAULT_PAGE),
        Some(l) if (1..=MAX_PAGE).contains(&l) => Ok(l),
        Some(_) => Err(ValidationError::new("limit", format!("must be 1 to {MAX_PAGE}")).into()),
    }
}
