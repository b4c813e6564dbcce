//! Polling plain git remotes (no webhooks there): each tracked branch's head is read
//! with `git ls-remote`; when it moved, the change is decided exactly like a push — the
//! changed files of `old..new` from the mirror, the same prefix rule, the same recorded
//! decisions (source `poll`). The first sight of a branch only records its head.

use std::collections::BTreeMap;
use std::time::Duration;

use bosun_store::{DeliverySource, NewDelivery, PollHead};
use chrono::Utc;
use futures_util::StreamExt;
use rand::RngCore;

use super::mirror::{remote_head, Range};
use super::webhook::summary;
use super::{decide_with_policies, record, Change, ChangedFiles};
use crate::app::AppState;
use crate::error::ApiError;

/// Remotes polled at once.
const CONCURRENCY: usize = 8;

/// Polls every `poll_interval` (never, when the interval is zero).
pub fn poll_duty(state: &AppState) -> crate::duties::Duty {
    let interval = state.config.vcs.poll_interval;
    let every = (!interval.is_zero()).then(|| interval.max(Duration::from_millis(100)));
    crate::duties::Duty::new("git_poll", every, |state| {
        let state = state.clone();
        Box::pin(async move {
            poll_once(&state).await?;
            Ok(None)
        })
    })
}

/// One pass over every tracked (remote, branch); returns how many moved.
pub async fn poll_once(state: &AppState) -> Result<usize, ApiError> {
    let mut remotes: BTreeMap<(String, String), String> = BTreeMap::new();
    for s in state.store.git_remote_stacks().await? {
        remotes
            .entry((s.spec.repository.key(), s.spec.branch.clone()))
            .or_insert_with(|| s.spec.repository.to_string());
    }
    let results: Vec<Result<bool, ApiError>> = futures_util::stream::iter(remotes)
        .map(|((key, branch), url)| async move { poll_remote(state, &key, &url, &branch).await })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let mut moved = 0;
    for r in results {
        if r? {
            moved += 1;
        }
    }
    Ok(moved)
}

async fn poll_remote(
    state: &AppState,
    key: &str,
    url: &str,
    branch: &str,
) -> Result<bool, ApiError> {
    let head = match remote_head(url, branch).await {
        Ok(Some(h)) => h,
        Ok(None) => return Ok(false),
        Err(e) => {
            tracing::warn!(remote = %url, branch, error = %e, "cannot read the remote's head");
            return Ok(false);
        }
    };
    let previous = state.store.poll_head(key, branch).await?;
    let new_head = PollHead {
        repository: key.to_string(),
        branch: branch.to_string(),
        commit: head.clone(),
        checked_at: Utc::now(),
    };
    let Some(previous) = previous else {
        state.store.set_poll_head(&new_head).await?;
        return Ok(false);
    };
    if previous.commit == head {
        return Ok(false);
    }
    let range = Range::Push {
        branch: branch.to_string(),
        before: previous.commit.clone(),
        after: head.clone(),
    };
    let changed = match state.vcs.mirrors.changed_files(url, None, &range).await {
        Ok(files) => ChangedFiles::Known(files),
        Err(e) => ChangedFiles::Unknown(e.to_string()),
    };
    let stacks = state.store.stacks_for_repository(key, None).await?;
    let change = Change {
        event: "poll",
        branch,
        commit: &head,
        pull_request: None,
        triggered_by: "poll".into(),
    };
    let decided = decide_with_policies(state, &stacks, &change, &changed).await?;
    let mut id = [0u8; 8];
    rand::thread_rng().fill_bytes(&mut id);
    let delivery = NewDelivery {
        source: DeliverySource::Poll,
        guid: format!("poll-{}", hex::encode(id)),
        event: "poll".into(),
        action: None,
        repository: Some(key.to_string()),
        git_ref: Some(format!("refs/heads/{branch}")),
        before: Some(previous.commit),
        after: Some(head),
        pull_request: None,
        summary: summary(
            "new commits",
            branch,
            &new_head.commit,
            &changed,
            decided.runs.len(),
            stacks.len(),
        ),
        decisions: decided.decisions,
        runs: decided.runs,
        cancel: None,
        evaluations: decided.evaluations,
    };
    record(state, &delivery).await?;
    // After the record: a crash in between re-decides the same move, never loses it.
    state.store.set_poll_head(&new_head).await?;
    Ok(true)
}
