//! A stack's trigger history: every delivery (webhook or poll) that concerned its
//! repository, newest first, with whether it started a run and why or why not — the
//! work behind the API's list and the console's stack page.

use bosun_api::{Page, TriggerEntry};

use crate::app::AppState;
use crate::error::ApiError;
use crate::paging::{next_cursor, PageQuery};

/// A page of the stack's trigger history; the cursor is the last delivery's number.
pub async fn list(
    state: &AppState,
    org: &str,
    stack: &str,
    q: &PageQuery,
) -> Result<Page<TriggerEntry>, ApiError> {
    if state.store.get_stack(org, stack).await?.is_none() {
        return Err(ApiError::NotFound(format!(
            "stack {stack:?} in org {org:?}"
        )));
    }
    let limit = q.limit()?;
    let rows = state
        .store
        .list_triggers(org, stack, q.seq()?, limit)
        .await?;
    let next_cursor = next_cursor(&rows, limit, |r| r.delivery.id.to_string());
    let items = rows
        .into_iter()
        .map(|r| TriggerEntry {
            delivery: r.delivery.guid,
            source: r.delivery.source.as_str().to_string(),
            event: r.delivery.event,
            action: r.delivery.action,
            git_ref: r.delivery.git_ref,
            before: r.delivery.before,
            after: r.delivery.after,
            pull_request: r.delivery.pull_request,
            summary: r.delivery.summary,
            duplicate: r.delivery.duplicate_of.is_some(),
            received_at: r.delivery.received_at,
            triggered: r.run_id.is_some(),
            run: r.run_id,
            reason: r.reason,
        })
        .collect();
    Ok(Page { items, next_cursor })
}
