//! The state backend: OpenTofu/Terraform's `http` backend protocol (GET, POST, LOCK,
//! UNLOCK on one URL per stack) and the JSON API over state versions and locks.
//!
//! Who may do what is decided by the auth guard (`Access::State`); whether a write or a
//! lock is granted is decided by `bosun_core::state` inside the store's transaction.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use bosun_api::{
    ErrorCode, ForceUnlock, Page, StateLockStatus, StateLockView, StateVersion, StateVersionDetail,
    TfLockInfo,
};
use bosun_core::authz::{Access, Principal, PrincipalKind};
use bosun_core::state::{
    authorize_state, Lock, StateAccess, StateDoc, StateOp, UnlockDecision, UnlockRequest,
    WriteRefusal, WriteRequest, Writer, WriterLiveness,
};
use bosun_core::Role;
use bosun_core::ValidationError;
use bosun_store::{NewStateVersion, StoreError};
use chrono::Utc;
use md5::{Digest, Md5};
use serde::Deserialize;
use serde_json::json;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{parse_json, read_body, ApiJson, ApiPath, ApiQuery};
use crate::paging::PageQuery;
use crate::route::{documents, endpoint, route, BodyLimitKind, Endpoint, Route};
use crate::secrets::mask::LogKind;
use crate::service::state::{self as service, require_stack, version_wire};

/// Served by [`list_versions`].
pub const LIST_VERSIONS: Endpoint =
    endpoint!(Access::State(StateAccess::Op(StateOp::Read)), list_versions);

/// Served by [`show_version`].
pub const SHOW_VERSION: Endpoint =
    endpoint!(Access::State(StateAccess::Op(StateOp::Read)), show_version);

/// Served by [`show_lock`].
pub const SHOW_LOCK: Endpoint = endpoint!(Access::State(StateAccess::Op(StateOp::Read)), show_lock);

/// Served by [`force_unlock`].
pub const FORCE_UNLOCK: Endpoint = endpoint!(
    Access::State(StateAccess::Op(StateOp::ForceUnlock)),
    force_unlock
);

pub fn routes() -> Vec<Route> {
    vec![
        Route::any_of(
            &["GET", "POST", "LOCK", "UNLOCK"],
            Access::State(StateAccess::ByMethod),
            documents!(backend),
            backend,
        )
        .also_documents(documents!(backend_write))
        .with_body_limit(BodyLimitKind::State),
        LIST_VERSIONS.route(),
        SHOW_VERSION.route(),
        SHOW_LOCK.route(),
        FORCE_UNLOCK.route(),
        route!(Access::Runner, put_recovered).with_body_limit(BodyLimitKind::State),
    ]
}

/// The writer a principal stands for. A run whose run has ended — force-failed or
/// interrupted, with its engine perhaps still out there — writes late: stored and flagged.
async fn writer_of(state: &AppState, p: &Principal) -> Result<(Writer, WriterLiveness), ApiError> {
    match &p.kind {
        PrincipalKind::User { user, .. } => {
            Ok((Writer::User(user.clone()), WriterLiveness::Person))
        }
        PrincipalKind::Run { run, .. } => {
            let ended = state
                .store
                .get_run(run)
                .await?
                .is_some_and(|r| r.state.is_terminal());
            let liveness = if ended {
                WriterLiveness::EndedRun
            } else {
                WriterLiveness::LiveRun
            };
            Ok((Writer::Run(run.clone()), liveness))
        }
        PrincipalKind::Pool { .. } => Err(ApiError::Forbidden(
            "a pool token cannot touch state".into(),
        )),
    }
}

/// Terraform reads a refused lock's holder from the response body.
fn lock_info(l: &Lock) -> TfLockInfo {
    TfLockInfo {
        id: l.id.clone(),
        operation: l.operation.clone(),
        info: l.info.clone(),
        who: l.who.clone(),
        version: l.version.clone(),
        created: l.created.clone(),
        path: l.path.clone(),
    }
}

fn holder_response(status: StatusCode, l: &Lock) -> Response {
    (status, Json(lock_info(l))).into_response()
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct BackendQuery {
    /// The lock the writer holds (Terraform sends `?ID=` while locked).
    #[serde(rename = "ID", default)]
    id: Option<String>,
    /// Admin override of the serial/lineage checks.
    #[serde(default)]
    force: bool,
}

/// The `http` backend protocol: GET reads, POST writes, LOCK and UNLOCK.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/stacks/{stack}/state", tag = "state",
    description = "OpenTofu/Terraform `http` backend. The same URL takes `POST` (write a new version; `?ID=` the held lock), `LOCK` (200, or 423 with the holder's lock info) and `UNLOCK` (matching ID → 200, mismatch → 409 with the holder; an empty body is a force-unlock, for operator+ personal tokens). Basic auth: any username, a token as the password.",
    params(("org" = String, Path), ("stack" = String, Path)),
    responses((status = 200, description = "the current state"), (status = 204, description = "no state yet")))]
pub async fn backend(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, stack)): ApiPath<(String, String)>,
    ApiQuery(query): ApiQuery<BackendQuery>,
    req: Request,
) -> Result<Response, ApiError> {
    let method = req.method().clone();
    let headers = req.headers().clone();
    let body = read_body(req, &state).await?;
    require_stack(&state, &org, &stack).await?;
    match method.as_str() {
        "GET" => read_current(&state, &org, &stack).await,
        "POST" => write(&state, &caller, &org, &stack, &query, &headers, body).await,
        "LOCK" => lock(&state, &caller, &org, &stack, &body).await,
        "UNLOCK" => unlock(&state, &caller, &org, &stack, &body).await,
        _ => Err(ApiError::MethodNotAllowed {
            method: method.to_string(),
            path: format!("/api/v1/orgs/{org}/stacks/{stack}/state"),
        }),
    }
}

async fn read_current(state: &AppState, org: &str, stack: &str) -> Result<Response, ApiError> {
    match state.store.state_version(org, stack, None).await? {
        Some((_, body)) => Ok((
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            Body::from(body),
        )
            .into_response()),
        None => Ok(StatusCode::NO_CONTENT.into_response()),
    }
}

async fn write(
    state: &AppState,
    caller: &Caller,
    org: &str,
    stack: &str,
    query: &BackendQuery,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    if let Some(sent) = headers.get("content-md5") {
        let want = base64::engine::general_purpose::STANDARD.encode(Md5::digest(&body));
        if sent.as_bytes() != want.as_bytes() {
            return Err(ApiError::BadRequest {
                code: ErrorCode::ChecksumMismatch,
                message: format!(
                    "Content-MD5 {:?} does not match the body (MD5 {want}); the state was not stored",
                    String::from_utf8_lossy(sent.as_bytes())
                ),
            });
        }
    }
    let doc = StateDoc::parse(&body).map_err(|e| ApiError::BadRequest {
        code: ErrorCode::InvalidState,
        message: e.to_string(),
    })?;
    if query.force && caller.0.role_in(org).is_none_or(|r| r < Role::Admin) {
        return Err(ApiError::Forbidden(
            "overriding the serial and lineage checks (force) needs an org admin's personal token"
                .into(),
        ));
    }
    let (writer, liveness) = writer_of(state, &caller.0).await?;
    let new = NewStateVersion {
        body: body.to_vec(),
        doc,
        request: WriteRequest {
            writer,
            liveness,
            lock_id: query.id.clone().filter(|id| !id.is_empty()),
            force: query.force,
        },
        token_id: Some(caller.0.token_id.clone()),
        recovery_reason: None,
    };
    let audit = (query.force || liveness == WriterLiveness::EndedRun).then(|| {
        caller.audit(
            Some(org),
            if query.force {
                "state.force_write"
            } else {
                "state.late_write"
            },
            format!("stack:{stack}"),
            json!({"serial": new.doc.serial, "lineage": new.doc.lineage}),
        )
    });
    match state
        .store
        .write_state(org, stack, &new, audit.as_ref())
        .await
    {
        Ok(meta) => {
            if meta.late_write {
                if let Writer::Run(run) = &meta.writer {
                    state.store.flag_late_write(run).await?;
                }
                tracing::warn!(
                    org,
                    stack,
                    version = meta.version,
                    current = meta.current,
                    "late state write from an ended run stored and flagged"
                );
            }
            Ok((StatusCode::OK, Json(version_wire(meta))).into_response())
        }
        Err(StoreError::StateRefused(WriteRefusal::Locked(lock))) => {
            Ok(holder_response(StatusCode::LOCKED, &lock))
        }
        Err(e) => Err(e.into()),
    }
}

async fn lock(
    state: &AppState,
    caller: &Caller,
    org: &str,
    stack: &str,
    body: &[u8],
) -> Result<Response, ApiError> {
    let info: TfLockInfo = parse_json(body)?;
    if info.id.trim().is_empty() {
        return Err(ApiError::BadRequest {
            code: ErrorCode::InvalidLock,
            message: "lock info must carry a non-empty \"ID\"".into(),
        });
    }
    let (holder, _) = writer_of(state, &caller.0).await?;
    let lock = Lock {
        id: info.id,
        operation: info.operation,
        info: info.info,
        who: info.who,
        version: info.version,
        created: info.created,
        path: info.path,
        holder,
        acquired_at: Utc::now(),
    };
    match state.store.lock_state(org, stack, &lock).await {
        Ok(()) => Ok(holder_response(StatusCode::OK, &lock)),
        Err(StoreError::StateLocked(held)) => Ok(holder_response(StatusCode::LOCKED, &held)),
        Err(e) => Err(e.into()),
    }
}

async fn unlock(
    state: &AppState,
    caller: &Caller,
    org: &str,
    stack: &str,
    body: &[u8],
) -> Result<Response, ApiError> {
    let (writer, _) = writer_of(state, &caller.0).await?;
    let request = if body.iter().all(u8::is_ascii_whitespace) {
        // Terraform's `force-unlock` sends no body at all.
        authorize_state(&caller.0, StateOp::ForceUnlock, org, stack)?;
        UnlockRequest::ForceAny
    } else {
        let info: TfLockInfo = parse_json(body)?;
        let held = state.store.state_head(org, stack).await?.lock;
        match held {
            // Releasing someone else's lock by its ID is a force-unlock.
            Some(l) if l.id == info.id && l.holder != writer => {
                authorize_state(&caller.0, StateOp::ForceUnlock, org, stack)?;
                UnlockRequest::Force { id: info.id }
            }
            _ => UnlockRequest::Holder { id: info.id },
        }
    };
    let audit = caller.audit(
        Some(org),
        "state.force_unlock",
        format!("stack:{stack}"),
        json!({"via": "backend"}),
    );
    match state
        .store
        .unlock_state(org, stack, &request, &audit)
        .await?
    {
        UnlockDecision::Release { lock, .. } => Ok(holder_response(StatusCode::OK, &lock)),
        // Already free (say, force-unlocked meanwhile): unlocking is idempotent.
        UnlockDecision::NotLocked => Ok(StatusCode::OK.into_response()),
        UnlockDecision::Mismatch(held) => Ok(holder_response(StatusCode::CONFLICT, &held)),
    }
}

/// Write a new state version (the `http` backend's POST; `?ID=` the held lock, `?force=true`
/// an org admin's override of the serial/lineage checks).
#[utoipa::path(post, path = "/api/v1/orgs/{org}/stacks/{stack}/state", tag = "state",
    params(("org" = String, Path), ("stack" = String, Path)),
    request_body(content = String, content_type = "application/json", description = "the state document"),
    responses((status = 200, body = StateVersion), (status = 423, body = TfLockInfo, description = "locked by another writer: the holder")))]
#[allow(dead_code)] // Documents the POST that `backend` serves.
fn backend_write() {}

/// A stack's state versions, newest first, a page at a time.
///
/// Paged: `next_cursor` is the page's last version number while the page is full.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/stacks/{stack}/state/versions", tag = "state",
    params(("org" = String, Path), ("stack" = String, Path), PageQuery),
    responses((status = 200, body = Page<StateVersion>)))]
pub async fn list_versions(
    State(state): State<AppState>,
    ApiPath((org, stack)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> Result<Json<Page<StateVersion>>, ApiError> {
    Ok(Json(
        service::list_versions(&state, &org, &stack, &q).await?,
    ))
}

/// One version with its state document.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/stacks/{stack}/state/versions/{version}", tag = "state",
    params(("org" = String, Path), ("stack" = String, Path), ("version" = i64, Path)),
    responses((status = 200, body = StateVersionDetail), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn show_version(
    State(state): State<AppState>,
    ApiPath((org, stack, version)): ApiPath<(String, String, i64)>,
) -> Result<Json<StateVersionDetail>, ApiError> {
    Ok(Json(
        service::show_version(&state, &org, &stack, version).await?,
    ))
}

/// The stack's state lock: holder, operation, age, and whether the holder is a person,
/// a live run or a dead one.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/stacks/{stack}/state/lock", tag = "state",
    params(("org" = String, Path), ("stack" = String, Path)),
    responses((status = 200, body = StateLockStatus)))]
pub async fn show_lock(
    State(state): State<AppState>,
    ApiPath((org, stack)): ApiPath<(String, String)>,
) -> Result<Json<StateLockStatus>, ApiError> {
    Ok(Json(service::lock_status(&state, &org, &stack).await?))
}

/// Release the lock with exactly this ID, whoever holds it. Audited.
#[utoipa::path(post, path = "/api/v1/orgs/{org}/stacks/{stack}/state/force-unlock", tag = "state",
    params(("org" = String, Path), ("stack" = String, Path)),
    request_body = ForceUnlock,
    responses((status = 200, body = StateLockView), (status = 409, body = bosun_api::ErrorBody)))]
pub async fn force_unlock(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, stack)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<ForceUnlock>,
) -> Result<Json<StateLockView>, ApiError> {
    Ok(Json(
        service::force_unlock(&state, &caller, &org, &stack, &body.lock_id).await?,
    ))
}

/// The longest reason a recovered state version keeps.
const MAX_RECOVERY_REASON_CHARS: usize = 500;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct RecoveredQuery {
    /// The fencing number of the lease whose engine could not write the state.
    pub fencing: i64,
    /// Why the engine could not write it (1 to 500 characters).
    pub reason: String,
}

/// A runner delivers the state its engine could not write (the engine's
/// `errored.tfstate`), whenever it can: the run may have ended, even been force-failed,
/// and another lease may hold it now. It is stored as a version flagged `recovered` with
/// the reason, never refused: the resources it records exist. It becomes current only
/// where the run's own write would have (nobody else holds the lock, and it follows the
/// current version). Delivering the same state again answers the version already stored.
#[utoipa::path(put, path = "/api/v1/runner/runs/{run}/recovered-state", tag = "runners",
    params(("run" = String, Path), RecoveredQuery),
    request_body(content = String, content_type = "application/json", description = "the state document"),
    responses((status = 200, body = StateVersion)))]
pub async fn put_recovered(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<RecoveredQuery>,
    req: Request,
) -> Result<Json<StateVersion>, ApiError> {
    let run = crate::runners::pool_run(&state, &caller, &id).await?;
    if q.fencing < 1 || q.fencing > run.fencing {
        return Err(ValidationError::new(
            "fencing",
            format!(
                "run {id} was never leased with fencing number {} (its latest is {})",
                q.fencing, run.fencing
            ),
        )
        .into());
    }
    let reason = q.reason.trim();
    if reason.is_empty()
        || reason.chars().count() > MAX_RECOVERY_REASON_CHARS
        || reason.chars().any(char::is_control)
    {
        return Err(ValidationError::new(
            "reason",
            format!("1 to {MAX_RECOVERY_REASON_CHARS} printable characters"),
        )
        .into());
    }
    let body = read_body(req, &state).await?;
    let doc = StateDoc::parse(&body).map_err(|e| ApiError::BadRequest {
        code: ErrorCode::InvalidState,
        message: e.to_string(),
    })?;
    // The reason may quote the engine's output: masked like the run's log.
    let masker = state
        .lease_masks
        .report_masker(LogKind::StackRun, &id, q.fencing, || {
            crate::prepare::lease_mask_again(&state, &run)
        })
        .await;
    let reason = masker.redact(reason).into_owned();
    let audit = caller.audit(
        Some(&run.org),
        "state.recovered",
        format!("stack:{}", run.stack),
        json!({"run": run.id, "fencing": q.fencing, "serial": doc.serial,
               "lineage": doc.lineage, "reason": reason}),
    );
    let new = NewStateVersion {
        body: body.to_vec(),
        doc,
        request: WriteRequest {
            writer: Writer::Run(run.id.clone()),
            liveness: WriterLiveness::Recovery,
            lock_id: None,
            force: false,
        },
        token_id: None,
        recovery_reason: Some(reason),
    };
    let meta = state
        .store
        .write_state(&run.org, &run.stack, &new, Some(&audit))
        .await?;
    tracing::warn!(
        org = %run.org,
        stack = %run.stack,
        run = %run.id,
        version = meta.version,
        current = meta.current,
        "a state the engine could not write was recovered by its runner"
    );
    // The run's log says so too, whenever the runner got through (its phase may have
    // ended long before): best effort, the version and the audit record are what count.
    let line = format!(
        "bosun: the state this run's engine could not write was recovered as version {} ({}): {}\n",
        meta.version,
        if meta.current {
            "now the current state"
        } else {
            "kept beside the current state"
        },
        meta.recovery_reason.as_deref().unwrap_or_default()
    );
    if let Err(e) = crate::runners::append_server_log(&state, &run, &[line]).await {
        tracing::warn!(run = %run.id, error = %e, "cannot note the recovered state in the run's log");
    }
    Ok(Json(version_wire(meta)))
}
