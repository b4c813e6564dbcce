//! Paging of list endpoints: one query (`cursor`, `limit`) and one answer (`Page<T>`:
//! `items` and `next_cursor`) for every list — those the store pages, and the small ones
//! answered whole as a single page ([`PageQuery::whole`], [`whole`]).

use bosun_core::ValidationError;
use bosun_store::KeyCursor;

use crate::error::ApiError;

pub const DEFAULT_PAGE: u32 = 100;
pub const MAX_PAGE: u32 = 1000;

/// The `cursor` of a list paged by (sort key, id) — `<key>:<id>`, as its `next_cursor`
/// gives it — read as a [`KeyCursor`]; another form is refused naming `list`.
pub fn key_cursor(cursor: Option<&str>, list: &str) -> Result<Option<KeyCursor>, ApiError> {
    cursor
        .map(|c| {
            KeyCursor::decode(c).ok_or_else(|| {
                ValidationError::new(
                    "cursor",
                    format!(
                        "{c:?} is not a cursor of {list}: pass the previous page's next_cursor"
                    ),
                )
                .into()
            })
        })
        .transpose()
}

/// Checks a `limit` query parameter.
pub fn page_limit(limit: Option<u32>) -> Result<u32, ApiError> {
    match limit {
        None => Ok(DEFAULT_PAGE),
        Some(l) if (1..=MAX_PAGE).contains(&l) => Ok(l),
        Some(_) => Err(ValidationError::new("limit", format!("must be 1 to {MAX_PAGE}")).into()),
    }
}

/// The query of every paged list: `cursor` (the previous page's `next_cursor`; absent
/// for the first page) and `limit`. Lists with filters take the same two parameters
/// beside their own.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// Where the page starts: the previous page's `next_cursor` (absent: the first page).
    /// `before` is accepted too, as older clients sent it.
    #[serde(alias = "before")]
    pub cursor: Option<String>,
    /// Page size, 1–1000 (default 100).
    pub limit: Option<u32>,
}

impl PageQuery {
    /// The checked `limit`.
    pub fn limit(&self) -> Result<u32, ApiError> {
        page_limit(self.limit)
    }

    /// For a small list the store keeps unpaged and the API answers whole, as one page
    /// with no `next_cursor`: `limit` is checked like any list's (it does not shorten
    /// the page), and a `cursor` is refused, since no page follows that one could
    /// continue.
    pub fn whole(&self) -> Result<(), ApiError> {
        self.limit()?;
        match &self.cursor {
            None => Ok(()),
            Some(c) => Err(ValidationError::new(
                "cursor",
                format!(
                    "this list is answered whole, as one page with no next_cursor, so \
                     {c:?} cannot continue it: leave cursor out"
                ),
            )
            .into()),
        }
    }

    /// The cursor of a list paged by a sequence number (versions, deliveries, audit).
    pub fn seq(&self) -> Result<Option<i64>, ApiError> {
        seq_cursor(self.cursor.as_deref())
    }
}

/// A sequence-number cursor, refused (naming `cursor`) unless it is a number.
pub fn seq_cursor(cursor: Option<&str>) -> Result<Option<i64>, ApiError> {
    cursor
        .map(|c| {
            c.parse::<i64>().map_err(|_| {
                ValidationError::new(
                    "cursor",
                    format!(
                        "{c:?} is not a cursor of this list: pass the previous page's next_cursor"
                    ),
                )
                .into()
            })
        })
        .transpose()
}

/// Refuses a `cursor` that is not an item of this list (`known`: the store found it
/// there), naming `cursor` and the list (`of`, e.g. `stack "web"`).
pub fn require_known_cursor(cursor: &str, known: bool, of: &str) -> Result<(), ApiError> {
    if known {
        return Ok(());
    }
    Err(ValidationError::new(
        "cursor",
        format!("no run {cursor:?} of {of}: pass the previous page's next_cursor"),
    )
    .into())
}

/// The one page of a list answered whole (see [`PageQuery::whole`]).
pub fn whole<T>(items: Vec<T>) -> bosun_api::Page<T> {
    bosun_api::Page {
        items,
        next_cursor: None,
    }
}

/// The page of `items` fetched with `limit`: a full page's `next_cursor` is its last
/// item's cursor; a shorter one is the last page.
pub fn page<T>(items: Vec<T>, limit: u32, cursor: impl Fn(&T) -> String) -> bosun_api::Page<T> {
    let next_cursor = next_cursor(&items, limit, cursor);
    bosun_api::Page { items, next_cursor }
}

/// The `next_cursor` of a page of `rows` fetched with `limit` (before they are turned
/// into wire items): the last row's cursor when the page is full.
pub fn next_cursor<R>(rows: &[R], limit: u32, cursor: impl Fn(&R) -> String) -> Option<String> {
    (rows.len() == limit as usize)
        .then(|| rows.last().map(cursor))
        .flatten()
}
