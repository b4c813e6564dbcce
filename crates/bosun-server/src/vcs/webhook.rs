//! `POST /webhooks/github`: verify the HMAC signature in constant time (a missing or wrong
//! one is refused and only counted), de-duplicate by delivery id, decide what the event
//! means for every stack of the repository, and record the delivery with its decisions
//! and the runs it starts — in one store transaction.
//!
//! Anyone can post here, and the signature covers the whole body, so the body is read
//! before anything is known about the sender: it is capped (`--webhook-max-bytes`), a
//! `Content-Length` over the cap is refused before a byte of the body is read, and a
//! chunked body is cut off at the cap.

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::header::CONTENT_LENGTH;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use bosun_api::ErrorCode;
use bosun_core::stack::Repository;
use bosun_core::vcs::RefUpdate;
use bosun_store::{
    Audit, CancelProposed, DeliveryOutcome, DeliverySource, InstallationChange, NewDelivery,
    StackRecord,
};
use hmac::{Hmac, Mac};
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::Sha256;

use super::mirror::Range;
use super::shared::Counters;
use super::{decide_with_policies, record, Change, ChangedFiles};
use crate::app::AppState;
use crate::error::ApiError;
use crate::extract::read_body;

/// GitHub lists at most this many commits in a push payload.
const PAYLOAD_COMMIT_LIMIT: usize = 20;

/// Checks `X-Hub-Signature-256: sha256=<hex>` over the raw body, in constant time.
pub fn signature_valid(secret: &[u8], body: &[u8], header: Option<&str>) -> bool {
    let Some(hex_sig) = header.and_then(|h| h.trim().strip_prefix("sha256=")) else {
        return false;
    };
    let Ok(sig) = hex::decode(hex_sig) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(&sig).is_ok()
}

#[derive(Deserialize)]
pub(super) struct Repo {
    pub(super) full_name: String,
}

#[derive(Deserialize)]
struct InstallationRef {
    id: i64,
    #[serde(default)]
    account: Option<Login>,
}

#[derive(Deserialize)]
pub(super) struct Login {
    login: String,
}

#[derive(Deserialize)]
struct PushCommit {
    #[serde(default)]
    added: Vec<String>,
    #[serde(default)]
    modified: Vec<String>,
    #[serde(default)]
    removed: Vec<String>,
}

#[derive(Deserialize)]
struct Push {
    #[serde(rename = "ref")]
    git_ref: String,
    before: String,
    after: String,
    #[serde(default)]
    deleted: bool,
    #[serde(default)]
    forced: bool,
    #[serde(default)]
    commits: Vec<PushCommit>,
    repository: Repo,
    installation: Option<InstallationRef>,
    sender: Option<Login>,
}

#[derive(Deserialize)]
struct PrSide {
    #[serde(rename = "ref")]
    git_ref: String,
    sha: String,
}

#[derive(Deserialize)]
struct PullRequestBody {
    head: PrSide,
    base: PrSide,
}

#[derive(Deserialize)]
struct PullRequest {
    action: String,
    number: i64,
    pull_request: PullRequestBody,
    repository: Repo,
    installation: Option<InstallationRef>,
    sender: Option<Login>,
}

#[derive(Deserialize)]
struct InstallationEvent {
    action: String,
    installation: InstallationRef,
    #[serde(default)]
    repositories: Option<Vec<Repo>>,
    #[serde(default)]
    repositories_added: Vec<Repo>,
    #[serde(default)]
    repositories_removed: Vec<Repo>,
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn parse<T: serde::de::DeserializeOwned>(event: &str, body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::BadRequest {
        code: ErrorCode::InvalidPayload,
        message: format!("the {event} payload is not what GitHub sends: {e}"),
    })
}

/// Reads a verified delivery's body as [`receive`] does, without the store or the
/// network: the typed payload of `event`, its repository key, a push's ref update and
/// listed files. Returns a one-line description. For the `webhook_payload` fuzz target.
#[doc(hidden)]
pub fn inspect(event: &str, body: &[u8]) -> Result<String, ApiError> {
    match event {
        "push" => {
            let p: Push = parse(event, body)?;
            let key = github_key(&p.repository.full_name)?;
            let update = RefUpdate::classify(&p.git_ref, &p.before, &p.after, p.deleted);
            let files = p
                .commits
                .iter()
                .flat_map(|c| c.added.iter().chain(&c.modified).chain(&c.removed))
                .count();
            let ignored = update.ignored().map(|i| i.to_string()).unwrap_or_default();
            Ok(format!(
                "push to {key} at {} by {}: {files} file(s) {ignored}",
                short(&p.after),
                actor(p.sender.as_ref())
            ))
        }
        "pull_request" => {
            let p: PullRequest = parse(event, body)?;
            let key = github_key(&p.repository.full_name)?;
            Ok(format!(
                "pull request #{} {} on {key}: {} at {} by {}",
                p.number,
                p.action,
                p.pull_request.base.git_ref,
                short(&p.pull_request.head.sha),
                actor(p.sender.as_ref())
            ))
        }
        "installation" | "installation_repositories" => {
            let e: InstallationEvent = parse(event, body)?;
            Ok(format!("installation {} {}", e.installation.id, e.action))
        }
        other => {
            let v: Value = parse(other, body)?;
            Ok(format!("{other} on {:?}", repo_key_of(&v)))
        }
    }
}

fn system_audit(action: &str, target: String, detail: Value) -> Audit {
    Audit {
        org: None,
        actor: "github".into(),
        token_id: None,
        action: action.into(),
        target,
        detail,
    }
}

/// Reads a delivery's body within the webhook cap: a declared length over it is refused
/// at once, a longer body than declared (or a chunked one) when it passes the cap.
async fn capped_body(state: &AppState, req: Request) -> Result<Bytes, ApiError> {
    let limit = state.config.webhook_max_bytes;
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    read_body(req, state).await
}

/// Receive one GitHub webhook delivery.
pub async fn receive(
    State(state): State<AppState>,
    req: Request,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let counters = &state.vcs.counters;
    let headers = req.headers().clone();
    let body = match capped_body(&state, req).await {
        Ok(body) => body,
        Err(e) => {
            Counters::bump(&counters.rejected);
            return Err(e);
        }
    };
    let Some(secret) = &state.config.vcs.webhook_secret else {
        Counters::bump(&counters.rejected);
        return Err(ApiError::Unauthenticated(
            "GitHub webhooks are not configured on this server: set --github-webhook-secret".into(),
        ));
    };
    let signature = header(&headers, "x-hub-signature-256");
    if signature.is_none() {
        Counters::bump(&counters.rejected);
        return Err(ApiError::Unauthenticated(
            "missing X-Hub-Signature-256: the delivery is not signed".into(),
        ));
    }
    if !signature_valid(secret.0.as_bytes(), &body, signature) {
        Counters::bump(&counters.rejected);
        return Err(ApiError::Unauthenticated(
            "X-Hub-Signature-256 does not match the body signed with the webhook secret".into(),
        ));
    }
    let event = header(&headers, "x-github-event")
        .ok_or_else(|| ApiError::BadRequest {
            code: ErrorCode::InvalidHeader,
            message: "missing X-GitHub-Event".into(),
        })?
        .to_string();
    let guid = header(&headers, "x-github-delivery")
        .filter(|g| !g.is_empty() && g.len() <= 200)
        .ok_or_else(|| ApiError::BadRequest {
            code: ErrorCode::InvalidHeader,
            message: "missing or invalid X-GitHub-Delivery".into(),
        })?
        .to_string();

    // A repeat of a known delivery is recorded as such without deciding anything again.
    if state
        .store
        .find_delivery(DeliverySource::Github, &guid)
        .await?
        .is_some()
    {
        let delivery = bare_delivery(&guid, &event, None, "duplicate delivery".into());
        return finish(&state, delivery).await;
    }

    let delivery = match event.as_str() {
        "ping" => {
            let v: Value = parse(&event, &body)?;
            let zen = v.get("zen").and_then(Value::as_str).unwrap_or("");
            bare_delivery(&guid, &event, None, format!("ping: {zen}"))
        }
        "installation" => on_installation(&state, &guid, parse(&event, &body)?).await?,
        "installation_repositories" => {
            on_installation(&state, &guid, parse(&event, &body)?).await?
        }
        "push" => on_push(&state, &guid, parse(&event, &body)?).await?,
        "pull_request" => on_pull_request(&state, &guid, parse(&event, &body)?).await?,
        "check_run" => super::rerun::on_check_run(&state, &guid, parse(&event, &body)?).await?,
        "check_suite" => super::rerun::on_check_suite(&state, &guid, parse(&event, &body)?).await?,
        other => {
            let v: Value = parse(other, &body)?;
            let action = v.get("action").and_then(Value::as_str).map(String::from);
            let mut d = bare_delivery(
                &guid,
                other,
                action,
                format!("{other} events start nothing: ignored"),
            );
            d.repository = repo_key_of(&v);
            d
        }
    };
    finish(&state, delivery).await
}

fn repo_key_of(v: &Value) -> Option<String> {
    v.pointer("/repository/full_name")
        .and_then(Value::as_str)
        .map(|f| format!("github:{}", f.to_ascii_lowercase()))
}

pub(super) fn bare_delivery(
    guid: &str,
    event: &str,
    action: Option<String>,
    summary: String,
) -> NewDelivery {
    NewDelivery {
        source: DeliverySource::Github,
        guid: guid.to_string(),
        event: event.to_string(),
        action,
        repository: None,
        git_ref: None,
        before: None,
        after: None,
        pull_request: None,
        summary,
        decisions: Vec::new(),
        runs: Vec::new(),
        cancel: None,
        evaluations: Vec::new(),
    }
}

async fn finish(
    state: &AppState,
    delivery: NewDelivery,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let counters = &state.vcs.counters;
    match record(state, &delivery).await? {
        DeliveryOutcome::Recorded { runs, canceled, .. } => {
            Counters::bump(&counters.accepted);
            let triggered: Vec<Value> = runs
                .iter()
                .map(|r| json!({"org": r.org, "stack": r.stack, "run": r.id}))
                .collect();
            Ok((
                StatusCode::OK,
                Json(json!({
                    "delivery": delivery.guid,
                    "event": delivery.event,
                    "summary": delivery.summary,
                    "duplicate": false,
                    "triggered": triggered,
                    "canceled": canceled,
                    "ignored": delivery.decisions.iter().filter(|d| d.run_id.is_none()).count(),
                })),
            ))
        }
        DeliveryOutcome::Duplicate {
            first_received_at, ..
        } => {
            Counters::bump(&counters.duplicate);
            Ok((
                StatusCode::OK,
                Json(json!({
                    "delivery": delivery.guid,
                    "event": delivery.event,
                    "summary": format!("duplicate delivery: already received at {}", first_received_at.to_rfc3339()),
                    "duplicate": true,
                    "triggered": [],
                    "canceled": [],
                })),
            ))
        }
    }
}

async fn on_installation(
    state: &AppState,
    guid: &str,
    e: InstallationEvent,
) -> Result<NewDelivery, ApiError> {
    let id = e.installation.id;
    let account = e
        .installation
        .account
        .as_ref()
        .map(|a| a.login.clone())
        .unwrap_or_default();
    let names =
        |repos: &[Repo]| -> Vec<String> { repos.iter().map(|r| r.full_name.clone()).collect() };
    let change = match e.action.as_str() {
        "created" => Some(InstallationChange::Created {
            installation: id,
            account,
            repositories: names(e.repositories.as_deref().unwrap_or_default()),
        }),
        "deleted" => Some(InstallationChange::Deleted { installation: id }),
        "suspend" => Some(InstallationChange::Suspended {
            installation: id,
            suspended: true,
        }),
        "unsuspend" => Some(InstallationChange::Suspended {
            installation: id,
            suspended: false,
        }),
        "added" => Some(InstallationChange::RepositoriesAdded {
            installation: id,
            account,
            repositories: names(&e.repositories_added),
        }),
        "removed" => Some(InstallationChange::RepositoriesRemoved {
            installation: id,
            repositories: names(&e.repositories_removed),
        }),
        _ => None,
    };
    let summary = match &change {
        Some(c) => {
            let audit = system_audit(
                "github.installation",
                format!("installation:{id}"),
                json!({"action": e.action}),
            );
            state.store.apply_installation(c, &audit).await?;
            format!("installation {id} {}", e.action)
        }
        None => format!("installation {id} {}: nothing to change", e.action),
    };
    let event = if e.repositories_added.is_empty() && e.repositories_removed.is_empty() {
        "installation"
    } else {
        "installation_repositories"
    };
    Ok(bare_delivery(guid, event, Some(e.action), summary))
}

/// Binds a repository to the installation a delivery names, when nothing binds it yet
/// (the App was installed before this server knew of it).
async fn heal_binding(
    state: &AppState,
    full_name: &str,
    installation: Option<&InstallationRef>,
) -> Result<Option<i64>, ApiError> {
    if let Some(b) = state.store.github_binding(full_name).await? {
        return Ok((!b.suspended).then_some(b.installation));
    }
    let Some(inst) = installation else {
        return Ok(None);
    };
    let account = inst
        .account
        .as_ref()
        .map(|a| a.login.clone())
        .unwrap_or_else(|| full_name.split('/').next().unwrap_or("").to_string());
    let audit = system_audit(
        "github.binding.resolve",
        format!("repository:{full_name}"),
        json!({"installation": inst.id}),
    );
    state
        .store
        .apply_installation(
            &InstallationChange::RepositoriesAdded {
                installation: inst.id,
                account,
                repositories: vec![full_name.to_string()],
            },
            &audit,
        )
        .await?;
    Ok(Some(inst.id))
}

/// The changed files of a range in a GitHub repository, through the mirror (with an
/// installation token the server mints for itself and revokes right after).
async fn changed_files(
    state: &AppState,
    full_name: &str,
    installation: Option<i64>,
    range: &Range,
) -> Result<Vec<String>, String> {
    let github = &state.vcs.github;
    let token = match (installation, github.app_configured()) {
        (Some(inst), true) => Some(
            github
                .installation_token(inst, full_name)
                .await
                .map_err(|e| e.to_string())?,
        ),
        _ => None,
    };
    let url = github.clone_url(full_name);
    let files = state
        .vcs
        .mirrors
        .changed_files(&url, token.as_ref().map(|t| t.token.as_str()), range)
        .await
        .map_err(|e| e.to_string());
    if let Some(t) = token {
        super::revoke_quietly(state, &t.token).await;
    }
    files
}

async fn repo_stacks(state: &AppState, key: &str) -> Result<Vec<StackRecord>, ApiError> {
    Ok(state.store.stacks_for_repository(key, None).await?)
}

async fn on_push(state: &AppState, guid: &str, p: Push) -> Result<NewDelivery, ApiError> {
    let full_name = p.repository.full_name.clone();
    let key = github_key(&full_name)?;
    let installation = heal_binding(state, &full_name, p.installation.as_ref()).await?;
    let stacks = repo_stacks(state, &key).await?;
    let update = RefUpdate::classify(&p.git_ref, &p.before, &p.after, p.deleted);
    let mut d = bare_delivery(guid, "push", None, String::new());
    d.repository = Some(key);
    d.git_ref = Some(p.git_ref.clone());
    d.before = Some(p.before.clone());
    d.after = Some(p.after.clone());

    let branch = match &update {
        RefUpdate::Branch { branch, .. } => branch.clone(),
        _ => {
            let reason = update
                .ignored()
                .map(|i| i.to_string())
                .unwrap_or_else(|| "ignored".into());
            d.decisions = ignored_everywhere(&stacks, &reason);
            d.summary = reason;
            return Ok(d);
        }
    };
    let changed = if stacks.iter().any(|s| s.spec.branch == branch) {
        let range = Range::Push {
            branch: branch.clone(),
            before: p.before.clone(),
            after: p.after.clone(),
        };
        match changed_files(state, &full_name, installation, &range).await {
            Ok(files) => ChangedFiles::Known(files),
            Err(why)
                if !p.forced && !p.commits.is_empty() && p.commits.len() < PAYLOAD_COMMIT_LIMIT =>
            {
                // The payload's own list is complete below GitHub's limit.
                tracing::warn!(error = %why, "changed files from the payload's commit list");
                let mut files: Vec<String> = p
                    .commits
                    .iter()
                    .flat_map(|c| c.added.iter().chain(&c.modified).chain(&c.removed))
                    .cloned()
                    .collect();
                files.sort();
                files.dedup();
                ChangedFiles::Known(files)
            }
            Err(why) => ChangedFiles::Unknown(why),
        }
    } else {
        ChangedFiles::Known(Vec::new())
    };
    let change = Change {
        event: "push",
        branch: &branch,
        commit: &p.after,
        pull_request: None,
        triggered_by: actor(p.sender.as_ref()),
    };
    let decided = decide_with_policies(state, &stacks, &change, &changed).await?;
    d.summary = summary(
        "push",
        &branch,
        &p.after,
        &changed,
        decided.runs.len(),
        stacks.len(),
    );
    d.decisions = decided.decisions;
    d.runs = decided.runs;
    d.evaluations = decided.evaluations;
    Ok(d)
}

async fn on_pull_request(
    state: &AppState,
    guid: &str,
    p: PullRequest,
) -> Result<NewDelivery, ApiError> {
    let full_name = p.repository.full_name.clone();
    let key = github_key(&full_name)?;
    let installation = heal_binding(state, &full_name, p.installation.as_ref()).await?;
    let mut d = bare_delivery(guid, "pull_request", Some(p.action.clone()), String::new());
    d.repository = Some(key.clone());
    d.git_ref = Some(format!("refs/pull/{}/head", p.number));
    d.before = Some(p.pull_request.base.sha.clone());
    d.after = Some(p.pull_request.head.sha.clone());
    d.pull_request = Some(p.number);
    let stacks = repo_stacks(state, &key).await?;
    let all: Vec<(String, String)> = stacks
        .iter()
        .map(|s| (s.org.clone(), s.spec.id.to_string()))
        .collect();
    match p.action.as_str() {
        "opened" | "synchronize" | "reopened" => {}
        "closed" => {
            d.summary = format!(
                "pull request #{} closed: its proposed runs are canceled",
                p.number
            );
            d.decisions = ignored_everywhere(&stacks, &d.summary);
            d.cancel = Some(CancelProposed {
                stacks: all,
                pull_request: p.number,
                reason: format!("pull request #{} was closed", p.number),
            });
            return Ok(d);
        }
        other => {
            d.summary = format!(
                "pull request #{} {other}: only opened, synchronize, reopened and closed act",
                p.number
            );
            d.decisions = ignored_everywhere(&stacks, &d.summary);
            return Ok(d);
        }
    }
    let base = p.pull_request.base.git_ref.clone();
    let head = p.pull_request.head.sha.clone();
    let changed = if stacks.iter().any(|s| s.spec.branch == base) {
        let range = Range::PullRequest {
            number: p.number,
            base_branch: base.clone(),
            base: p.pull_request.base.sha.clone(),
            head: head.clone(),
        };
        match changed_files(state, &full_name, installation, &range).await {
            Ok(files) => ChangedFiles::Known(files),
            Err(why) => ChangedFiles::Unknown(why),
        }
    } else {
        ChangedFiles::Known(Vec::new())
    };
    let change = Change {
        event: "pull_request",
        branch: &base,
        commit: &head,
        pull_request: Some(p.number),
        triggered_by: actor(p.sender.as_ref()),
    };
    let decided = decide_with_policies(state, &stacks, &change, &changed).await?;
    d.summary = summary(
        &format!("pull request #{} {}", p.number, p.action),
        &base,
        &head,
        &changed,
        decided.runs.len(),
        stacks.len(),
    );
    d.decisions = decided.decisions;
    d.runs = decided.runs;
    d.evaluations = decided.evaluations;
    // The newest commit wins: older proposed runs of this pull request are canceled.
    d.cancel = Some(CancelProposed {
        stacks: all,
        pull_request: p.number,
        reason: format!(
            "superseded by commit {} of pull request #{}",
            short(&head),
            p.number
        ),
    });
    Ok(d)
}

pub(super) fn github_key(full_name: &str) -> Result<String, ApiError> {
    let repo: Repository =
        format!("github:{full_name}")
            .parse()
            .map_err(|e: bosun_core::ValidationError| ApiError::BadRequest {
                code: ErrorCode::InvalidPayload,
                message: format!("repository.full_name {full_name:?}: {}", e.message),
            })?;
    Ok(repo.key())
}

pub(super) fn actor(sender: Option<&Login>) -> String {
    match sender {
        Some(s) => format!("github:{}", s.login),
        None => "github".into(),
    }
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

pub(crate) fn ignored_everywhere(
    stacks: &[StackRecord],
    reason: &str,
) -> Vec<bosun_store::TriggerDecision> {
    stacks
        .iter()
        .map(|s| bosun_store::TriggerDecision {
            org: s.org.clone(),
            stack: s.spec.id.to_string(),
            run_id: None,
            reason: reason.to_string(),
        })
        .collect()
}

pub(crate) fn summary(
    what: &str,
    branch: &str,
    commit: &str,
    changed: &ChangedFiles,
    triggered: usize,
    stacks: usize,
) -> String {
    let files = match changed {
        ChangedFiles::Known(f) => format!("{} changed file(s)", f.len()),
        ChangedFiles::Unknown(why) => format!("changed files unknown ({why})"),
    };
    format!(
        "{what} on {branch} at {}: {files}; triggered {triggered} of {stacks} stack(s)",
        short(commit)
    )
}
