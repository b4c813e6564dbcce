//! Version control: what starts runs from code changes, and how runs reach their code.
//!
//! - `webhook`: `POST /webhooks/github` — verified, de-duplicated, decided, recorded.
//! - `github`: the GitHub App client (App JWT, installation tokens, revocation, and the
//!   feedback calls: check runs and comments).
//! - `feedback`: the duty that reports runs back to GitHub (check runs, one PR comment).
//! - `rerun`: re-runs requested on GitHub (`check_run`/`check_suite` `rerequested`).
//! - `mirror`: server-side mirrors that give the changed files of a commit range.
//! - `poller`: polling plain git remotes, deciding exactly like a push.
//! - `source`: a run's clone address and token, and their revocation when it ends.
//! - `trigger_policies`: the `trigger` decision point — the org's policies may skip or
//!   start each stack's run for a delivery.
//! - this module: the shared decision step (delivery → per-stack verdicts → policies →
//!   runs) and the trigger-history API.

pub mod feedback;
pub mod github;
pub mod mirror;
pub mod poller;
pub mod rerun;
pub mod shared;
pub mod source;
pub mod trigger_policies;
pub mod webhook;

use axum::extract::State;
use axum::Json;
use bosun_api::{Page, TriggerEntry};
use bosun_core::authz::Access;
use bosun_core::run::{RunKind, Trigger};
use bosun_core::stack::Repository;
use bosun_core::vcs::{route, Verdict};
use bosun_core::Role;
use bosun_store::{
    DeliveryOutcome, GithubBinding, InstallationChange, NewDelivery, NewRun, RunEvaluations,
    StackRecord, TriggerDecision,
};

use crate::app::AppState;
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery};
use crate::paging::PageQuery;
use crate::route::{endpoint, Endpoint, Route};

/// Served by [`list_triggers`].
pub const LIST_TRIGGERS: Endpoint = endpoint!(Access::Org(Role::Viewer), list_triggers);

pub fn routes() -> Vec<Route> {
    vec![LIST_TRIGGERS.route()]
}

/// What a code change is, for deciding which stacks it starts.
pub struct Change<'a> {
    /// `push`, `pull_request` or `poll`.
    pub event: &'a str,
    /// The branch pushed, or the pull request's base branch.
    pub branch: &'a str,
    /// The commit runs check out.
    pub commit: &'a str,
    pub pull_request: Option<i64>,
    /// `github:<login>` or `poll`.
    pub triggered_by: String,
}

/// What is known of the files a change touched.
pub enum ChangedFiles {
    Known(Vec<String>),
    /// The commit range could not be read; every stack on the branch is triggered, with
    /// this reason, rather than risk missing a change.
    Unknown(String),
}

/// Decides every stack of the repository for one change: a run for each stack whose
/// branch and watch paths it touches, a readable reason for each other.
pub fn decide(
    stacks: &[StackRecord],
    change: &Change<'_>,
    changed: &ChangedFiles,
) -> (Vec<TriggerDecision>, Vec<NewRun>) {
    let specs: Vec<_> = stacks.iter().map(|s| &s.spec).collect();
    let pr = change.pull_request.is_some();
    let verdicts = match changed {
        ChangedFiles::Known(files) => route(&specs, change.branch, files, pr),
        ChangedFiles::Unknown(_) => route(&specs, change.branch, &[], pr),
    };
    let mut decisions = Vec::with_capacity(stacks.len());
    let mut runs = Vec::new();
    for (stack, verdict) in stacks.iter().zip(verdicts) {
        let on_branch = stack.spec.branch == change.branch;
        let reason = match (&verdict, changed) {
            (Verdict::Triggered { .. }, _) => Some(verdict.to_string()),
            (Verdict::Ignored(_), ChangedFiles::Unknown(why)) if on_branch => Some(format!(
                "triggered: the changed files are unknown ({why}), so every stack on {:?} runs",
                change.branch
            )),
            _ => None,
        };
        let Some(reason) = reason else {
            decisions.push(TriggerDecision {
                org: stack.org.clone(),
                stack: stack.spec.id.to_string(),
                run_id: None,
                reason: verdict.to_string(),
            });
            continue;
        };
        let run = new_run(stack, change);
        decisions.push(TriggerDecision {
            org: run.org.clone(),
            stack: run.stack.clone(),
            run_id: Some(run.id.clone()),
            reason,
        });
        runs.push(run);
    }
    (decisions, runs)
}

/// The run a change starts for a stack: tracked for a push, proposed for a pull request.
fn new_run(stack: &StackRecord, change: &Change<'_>) -> NewRun {
    let (kind, trigger) = match change.pull_request {
        Some(_) => (RunKind::Proposed, Trigger::PullRequest),
        None => (RunKind::Tracked, Trigger::Push),
    };
    NewRun {
        id: crate::service::runs::new_run_id(),
        org: stack.org.clone(),
        stack: stack.spec.id.to_string(),
        kind,
        trigger,
        triggered_by: change.triggered_by.clone(),
        commit: Some(change.commit.to_string()),
        branch: stack.spec.branch.clone(),
        retry_of: None,
        pull_request: change.pull_request,
    }
}

/// A change decided for every stack of its repository.
pub struct Decided {
    /// One per stack, in the order of the stacks.
    pub decisions: Vec<TriggerDecision>,
    pub runs: Vec<NewRun>,
    /// The trigger point's policy evaluations, on the runs they concern.
    pub evaluations: Vec<RunEvaluations>,
}

/// Decides a change as [`decide`] does, then lets the `trigger` point's policies skip or
/// start each stack's run on the change's branch.
pub async fn decide_with_policies(
    state: &AppState,
    stacks: &[StackRecord],
    change: &Change<'_>,
    changed: &ChangedFiles,
) -> Result<Decided, ApiError> {
    let (decisions, runs) = decide(stacks, change, changed);
    trigger_policies::apply(
        state,
        stacks,
        change,
        changed,
        Decided {
            decisions,
            runs,
            evaluations: Vec::new(),
        },
    )
    .await
}

/// Records a decided delivery and wakes runners for the runs it created.
pub async fn record(state: &AppState, delivery: &NewDelivery) -> Result<DeliveryOutcome, ApiError> {
    let outcome = state.store.record_delivery(delivery).await?;
    if let DeliveryOutcome::Recorded { runs, canceled, .. } = &outcome {
        if !runs.is_empty() || !canceled.is_empty() {
            state.wake_dispatch();
        }
    }
    Ok(outcome)
}

/// The installation covering a GitHub repository, if it is connected (bound and not
/// suspended).
pub async fn binding(
    state: &AppState,
    repository: &Repository,
) -> Result<Option<GithubBinding>, ApiError> {
    let Some(full_name) = repository.github_full_name() else {
        return Ok(None);
    };
    Ok(state
        .store
        .github_binding(&full_name)
        .await?
        .filter(|b| !b.suspended))
}

/// A token to read a `github:` repository (`owner/repo`) through the App's installation
/// on it — the one bound, or asked of GitHub once. Revoke it after use
/// ([`revoke_quietly`]).
pub async fn read_token(
    state: &AppState,
    full_name: &str,
) -> Result<github::InstallationToken, String> {
    if !state.vcs.github.app_configured() {
        return Err(format!(
            "github:{full_name} is read through the GitHub App, which this server is not configured with"
        ));
    }
    let repository: Repository = format!("github:{full_name}")
        .parse()
        .map_err(|e: bosun_core::ValidationError| e.to_string())?;
    let bound = match binding(state, &repository).await {
        Ok(Some(b)) => Some(b),
        Ok(None) => resolve_binding(state, full_name)
            .await
            .map_err(|e| e.to_string())?
            .filter(|b| !b.suspended),
        Err(e) => return Err(e.to_string()),
    };
    let Some(b) = bound else {
        return Err(format!(
            "the GitHub App is not installed on {full_name} (or its installation is suspended)"
        ));
    };
    state
        .vcs
        .github
        .installation_token(b.installation, full_name)
        .await
        .map_err(|e| e.to_string())
}

/// Revokes a token handed out by [`read_token`], logging a failure (it expires anyway).
pub async fn revoke_quietly(state: &AppState, token: &str) {
    if let Err(e) = state.vcs.github.revoke(token).await {
        tracing::warn!(error = %e, "could not revoke an installation token");
    }
}

/// Asks GitHub which installation covers `owner/repo` and stores the binding: how a
/// stack created before the App was installed heals on its next manual run or retry.
pub async fn resolve_binding(
    state: &AppState,
    full_name: &str,
) -> Result<Option<GithubBinding>, ApiError> {
    let found = state
        .vcs
        .github
        .find_installation(full_name)
        .await
        .map_err(|e| ApiError::Unavailable(e.to_string()))?;
    let Some((installation, account)) = found else {
        return Ok(None);
    };
    let audit = bosun_store::Audit {
        org: None,
        actor: "system".into(),
        token_id: None,
        action: "github.binding.resolve".into(),
        target: format!("repository:{full_name}"),
        detail: serde_json::json!({"installation": installation}),
    };
    state
        .store
        .apply_installation(
            &InstallationChange::RepositoriesAdded {
                installation,
                account,
                repositories: vec![full_name.to_string()],
            },
            &audit,
        )
        .await?;
    Ok(state.store.github_binding(full_name).await?)
}

/// The stack's trigger history: every delivery (webhook or poll) that concerned its
/// repository, newest first, with whether it started a run and why or why not.
///
/// Paged: `next_cursor` is opaque; pass it back as `cursor`.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/stacks/{stack}/triggers", tag = "stacks",
    params(("org" = String, Path), ("stack" = String, Path), PageQuery),
    responses((status = 200, body = Page<TriggerEntry>), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn list_triggers(
    State(state): State<AppState>,
    ApiPath((org, stack)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> Result<Json<Page<TriggerEntry>>, ApiError> {
    Ok(Json(
        crate::service::triggers::list(&state, &org, &stack, &q).await?,
    ))
}
