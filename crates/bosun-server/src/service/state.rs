//! A stack's state as people see it: its versions, its lock and the force-unlock — the
//! work behind the API's handlers and the console's state page. (The engines' `http`
//! backend protocol stays in the server's `state` module.)

use bosun_api::{
    ErrorCode, LockHolder, Page, StateLockStatus, StateLockView, StateOutput, StateVersion,
    StateWriter,
};
use bosun_core::state::{Lock, UnlockDecision, UnlockRequest, Writer};
use bosun_store::StateVersionMeta;
use chrono::Utc;
use serde_json::json;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::paging::{page, PageQuery};

/// A page of a stack's state versions, newest first; the cursor is the last version.
pub async fn list_versions(
    state: &AppState,
    org: &str,
    stack: &str,
    q: &PageQuery,
) -> Result<Page<StateVersion>, ApiError> {
    let limit = q.limit()?;
    let versions = state
        .store
        .list_state_versions(org, stack, q.seq()?, limit)
        .await?;
    if versions.is_empty() {
        // An empty page is the only one that may belong to a stack that does not exist.
        require_stack(state, org, stack).await?;
    }
    let items = versions.into_iter().map(version_wire).collect();
    Ok(page(items, limit, |v| v.version.to_string()))
}

/// Whether a stack's state is locked, and by whom.
pub async fn lock_status(
    state: &AppState,
    org: &str,
    stack: &str,
) -> Result<StateLockStatus, ApiError> {
    require_stack(state, org, stack).await?;
    let lock = match state.store.state_head(org, stack).await?.lock {
        Some(l) => Some(lock_view(state, l).await?),
        None => None,
    };
    Ok(StateLockStatus {
        locked: lock.is_some(),
        lock,
    })
}

/// Releases the lock `lock_id` of a stack's state for `caller`, whoever holds it.
pub async fn force_unlock(
    state: &AppState,
    caller: &Caller,
    org: &str,
    stack: &str,
    lock_id: &str,
) -> Result<StateLockView, ApiError> {
    require_stack(state, org, stack).await?;
    let audit = caller.audit(
        Some(org),
        "state.force_unlock",
        format!("stack:{stack}"),
        json!({"via": "api", "requested_id": lock_id}),
    );
    let request = UnlockRequest::Force {
        id: lock_id.to_string(),
    };
    match state.store.unlock_state(org, stack, &request, &audit).await? {
        UnlockDecision::Release { lock, .. } => {
            state.wake_dispatch();
            lock_view(state, *lock).await
        }
        UnlockDecision::NotLocked => Err(ApiError::Conflict {
            code: ErrorCode::NotLocked,
            message: format!("the state of stack {stack:?} is not locked"),
        }),
        UnlockDecision::Mismatch(held) => Err(ApiError::Conflict {
            code: ErrorCode::LockMismatch,
            message: format!(
                "lock {:?} is not held; the state is locked by {} (lock {}, operation {}, since {})",
                lock_id,
                held.who,
                held.id,
                held.operation,
                held.acquired_at.to_rfc3339()
            ),
        }),
    }
}

/// A run is live while it is not ended (or, for runs Bosun does not know, while its
/// token is active).
async fn run_is_live(state: &AppState, run: &str) -> Result<bool, ApiError> {
    Ok(match state.store.get_run(run).await? {
        Some(r) => !r.state.is_terminal(),
        None => state.store.run_is_active(run).await?,
    })
}

pub(crate) async fn lock_view(state: &AppState, l: Lock) -> Result<StateLockView, ApiError> {
    let status = match &l.holder {
        Writer::User(_) => "person",
        Writer::Run(run) if run_is_live(state, run).await? => "live_run",
        Writer::Run(_) => "dead_run",
    };
    Ok(StateLockView {
        holder: LockHolder {
            kind: l.holder.kind().into(),
            id: l.holder.id().into(),
            status: status.into(),
        },
        age_seconds: (Utc::now() - l.acquired_at).num_seconds().max(0),
        id: l.id,
        operation: l.operation,
        who: l.who,
        info: l.info,
        version: l.version,
        created: l.created,
        path: l.path,
        acquired_at: l.acquired_at,
    })
}

pub(crate) async fn require_stack(
    state: &AppState,
    org: &str,
    stack: &str,
) -> Result<(), ApiError> {
    match state.store.get_stack(org, stack).await? {
        Some(_) => Ok(()),
        None => Err(ApiError::NotFound(format!(
            "stack {stack:?} in org {org:?}"
        ))),
    }
}

pub(crate) fn version_wire(m: StateVersionMeta) -> StateVersion {
    StateVersion {
        version: m.version,
        serial: m.serial,
        lineage: m.lineage,
        checksum: m.checksum,
        size: m.size,
        writer: StateWriter {
            kind: m.writer.kind().into(),
            id: m.writer.id().into(),
        },
        token_id: m.token_id,
        created_at: m.created_at,
        late_write: m.late_write,
        forced: m.forced,
        current: m.current,
        recovered: m.recovery_reason,
        outputs: m
            .outputs
            .into_iter()
            .map(|(k, o)| {
                let value = if o.sensitive {
                    serde_json::Value::Null
                } else {
                    o.value
                };
                (
                    k,
                    StateOutput {
                        value,
                        sensitive: o.sensitive,
                    },
                )
            })
            .collect(),
    }
}

/// One state version of the org's stack with its document.
pub async fn show_version(
    state: &AppState,
    org: &str,
    stack: &str,
    version: i64,
) -> Result<bosun_api::StateVersionDetail, ApiError> {
    // The version is read first: one store call when it exists; only a miss asks whether
    // the stack itself is missing, so the 404 names the right thing.
    let Some((meta, body)) = state.store.state_version(org, stack, Some(version)).await? else {
        require_stack(state, org, stack).await?;
        return Err(ApiError::NotFound(format!(
            "state version {version} of stack {stack:?}"
        )));
    };
    let doc = serde_json::from_slice(&body)
        .map_err(|e| ApiError::Internal(format!("stored state is not JSON: {e}")))?;
    Ok(bosun_api::StateVersionDetail {
        meta: version_wire(meta),
        state: doc,
    })
}
