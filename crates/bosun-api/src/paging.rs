//! The page every list answer comes in.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A page of a list. Pass `next_cursor` back as `cursor` for the next page.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Page<T> {
    pub items: Vec<T>,
    #[serde(default)]
    pub next_cursor: Option<String>,
}
