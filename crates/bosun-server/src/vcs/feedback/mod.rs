//! Feedback on GitHub: the duty that tells GitHub about runs of `github:` stacks — one
//! check run per run (`bosun/<stack>` on its commit: created once, then updated as the
//! run moves) and one comment per pull request and org, found again by its marker and
//! edited in place. What is owed is the store's outbox (`FeedbackStore`), written with
//! each run change; the duty reports each row as its run is *now*, so a burst of changes
//! costs one call. GitHub's rate limits pause every call until the time GitHub gives; a
//! permission the installation lacks is recorded once for the repository (shown on its
//! stacks' connection line) and not asked again for an hour; other failures back off
//! like notification deliveries (the `[notify]` retry settings).

pub mod render;

use std::time::Duration;

use bosun_core::run::{Phase, RunKind, RunState};
use bosun_store::{DueCheck, DuePrComment, FeedbackReport, RunRecord};
use chrono::{DateTime, Utc};

use super::github::{comment_marker, FeedbackPermission, GithubError};
use super::shared::Counters;
use crate::app::AppState;

/// Check rows read per look.
const CHECK_BATCH: u32 = 50;
/// Comment rows read per look.
const COMMENT_BATCH: u32 = 20;
/// How long a permission GitHub refused is not asked for again.
const REFUSAL_HOLD_SECS: i64 = 3600;
/// Pages of 100 comments searched for the marker before a new comment is written.
const COMMENT_PAGES: u32 = 10;
/// Log chunks of a run read for its plan text.
const PLAN_LOG_CHUNKS: u32 = 500;
/// The longest plan text kept per stack before the comment's own trimming.
const PLAN_TEXT_MAX: usize = 60_000;

/// The feedback duty: woken when the store writes feedback rows (with notification
/// deliveries, on any replica), else at the notification poll interval.
pub fn feedback_duty(state: &AppState) -> crate::duties::Duty {
    let every = state
        .vcs
        .github
        .app_configured()
        .then_some(state.config.notify.poll_interval);
    crate::duties::Duty::new("github_feedback", every, |state| {
        let state = state.clone();
        Box::pin(async move { Ok(Some(pass(&state).await?)) })
    })
    .woken_by(bosun_store::Signal::concerns_notifications)
}

/// One pass: every due check run, then every due comment. Returns how long to sleep.
pub async fn pass(state: &AppState) -> Result<Duration, bosun_store::StoreError> {
    let poll = state.config.notify.poll_interval;
    if let Some(until) = state.vcs.github.paused_until() {
        return Ok(until_or(until, poll));
    }
    loop {
        let due = state.store.due_checks(Utc::now(), CHECK_BATCH).await?;
        let n = due.len();
        for d in due {
            let report = report_check(state, &d).await;
            state
                .store
                .record_check_report(&d.check.run_id, &report)
                .await?;
            if state.vcs.github.paused_until().is_some() {
                break;
            }
        }
        if n < CHECK_BATCH as usize || state.vcs.github.paused_until().is_some() {
            break;
        }
    }
    loop {
        if state.vcs.github.paused_until().is_some() {
            break;
        }
        let due = state
            .store
            .due_pr_comments(Utc::now(), COMMENT_BATCH)
            .await?;
        let n = due.len();
        for d in due {
            let report = report_comment(state, &d).await;
            let c = &d.comment;
            state
                .store
                .record_pr_comment_report(&c.org, &c.repository, c.pull_request, &report)
                .await?;
            if state.vcs.github.paused_until().is_some() {
                break;
            }
        }
        if n < COMMENT_BATCH as usize {
            break;
        }
    }
    if let Some(until) = state.vcs.github.paused_until() {
        return Ok(until_or(until, poll));
    }
    // Until the earliest row falls due (a debounce or a retry), at most the poll interval.
    let horizon = Utc::now() + chrono::Duration::from_std(poll).unwrap_or_default();
    let check = state.store.due_checks(horizon, 1).await?;
    let comment = state.store.due_pr_comments(horizon, 1).await?;
    let next = [
        check.first().and_then(|d| d.check.next_attempt_at),
        comment.first().and_then(|d| d.comment.next_attempt_at),
    ]
    .into_iter()
    .flatten()
    .min();
    Ok(next.map_or(poll, |at| until_or(at, poll)))
}

/// The sleep until `until`, at most `poll` (and at least a few milliseconds).
fn until_or(until: DateTime<Utc>, poll: Duration) -> Duration {
    (until - Utc::now())
        .to_std()
        .unwrap_or_default()
        .clamp(Duration::from_millis(5), poll.max(Duration::from_millis(5)))
}

/// The console page of a run: the check run's `details_url` and the comment's links.
pub fn run_url(state: &AppState, run: &RunRecord) -> String {
    format!(
        "{}/orgs/{}/runs/{}",
        state.config.public_url.trim_end_matches('/'),
        run.org,
        run.id
    )
}

/// The environment whose approval an unconfirmed tracked run waits for, if any.
async fn gate_of(state: &AppState, run: &RunRecord) -> Option<String> {
    if run.state != RunState::Unconfirmed || run.kind != RunKind::Tracked {
        return None;
    }
    let stack = state.store.get_stack(&run.org, &run.stack).await.ok()??;
    let env = stack.spec.environment?;
    let record = state
        .store
        .get_environment(&run.org, env.as_str())
        .await
        .ok()??;
    record.requires_approval.then(|| env.to_string())
}

/// A kind of feedback's refusal on record for a repository: why it is not tried now (a
/// refusal still in force), and whether one is recorded at all (to clear after a
/// success) — one read per report.
struct Refusal {
    active: Option<String>,
    recorded: bool,
}

async fn refusal(state: &AppState, repository: &str, kind: &str) -> Refusal {
    let found = state
        .store
        .feedback_refusals(repository)
        .await
        .ok()
        .and_then(|all| all.into_iter().find(|r| r.kind == kind));
    Refusal {
        active: found
            .as_ref()
            .filter(|r| r.until > Utc::now())
            .map(|r| r.message.clone()),
        recorded: found.is_some(),
    }
}

/// A token for `repository` with `permission`, through the installation it is bound to.
async fn token(
    state: &AppState,
    repository: &str,
    permission: FeedbackPermission,
) -> Result<String, GithubError> {
    let binding = state
        .store
        .github_binding(repository)
        .await
        .ok()
        .flatten()
        .filter(|b| !b.suspended)
        .ok_or_else(|| GithubError::Refused {
            what: format!("feedback on {repository}"),
            status: 0,
            message: "the repository is not connected to the GitHub App (no installation covers it, or it is suspended)".into(),
        })?;
    state
        .vcs
        .github
        .feedback_token(binding.installation, repository, permission)
        .await
}

/// Runs `call` with a feedback token; a token GitHub no longer takes (401: expired or
/// revoked early) is forgotten and the call made once more with a fresh one.
async fn with_token<T, F, Fut>(
    state: &AppState,
    repository: &str,
    permission: FeedbackPermission,
    call: F,
) -> Result<T, GithubError>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<T, GithubError>>,
{
    let first = token(state, repository, permission).await?;
    match call(first.clone()).await {
        Err(GithubError::Refused { status: 401, .. }) => {
            state.vcs.github.forget_feedback_token(&first);
            call(token(state, repository, permission).await?).await
        }
        other => other,
    }
}

/// What a failed call means for its row: wait for GitHub's time, give up (recording a
/// refused permission for the repository), or back off and try again.
async fn failed(
    state: &AppState,
    repository: &str,
    kind: &str,
    changes: i64,
    attempts: i64,
    error: GithubError,
) -> FeedbackReport {
    let text = error.to_string();
    let outcome = match &error {
        GithubError::RateLimited { .. } => "rate_limited",
        GithubError::Refused { .. } | GithubError::NotConfigured | GithubError::BadKey(_) => {
            "refused"
        }
        GithubError::Api { .. } | GithubError::NotFound { .. } => "failed",
    };
    Counters::bump(state.vcs.counters.feedback(kind).get(outcome));
    match error {
        GithubError::RateLimited { until, .. } => {
            tracing::info!(repository, kind, until = %until, "GitHub rate limit: feedback waits");
            FeedbackReport::failed(changes, text, Some(until))
        }
        GithubError::Refused { .. } | GithubError::NotConfigured | GithubError::BadKey(_) => {
            let message = format!("GitHub refused {kind} feedback: {text}");
            let until = Utc::now() + chrono::Duration::seconds(REFUSAL_HOLD_SECS);
            tracing::warn!(repository, kind, error = %text, "GitHub feedback refused; not asked again for an hour");
            if let Err(e) = state
                .store
                .set_feedback_refusal(repository, kind, Some((&message, until)))
                .await
            {
                tracing::warn!(error = %e, "cannot record the refusal");
            }
            FeedbackReport::failed(changes, message, None)
        }
        GithubError::Api { .. } | GithubError::NotFound { .. } => {
            let config = &state.config.notify;
            let attempts = u32::try_from(attempts)
                .unwrap_or(u32::MAX)
                .saturating_add(1);
            let retry = crate::notify::deliver::retry_delay(
                config.retry_base,
                attempts,
                config.max_attempts,
            )
            .map(|d| Utc::now() + chrono::Duration::from_std(d).unwrap_or_default());
            tracing::warn!(repository, kind, attempts, error = %text, gave_up = retry.is_none(), "GitHub feedback failed");
            FeedbackReport::failed(changes, text, retry)
        }
    }
}

/// Reports one run's check run: created the first time, updated after.
async fn report_check(state: &AppState, d: &DueCheck) -> FeedbackReport {
    let c = &d.check;
    let settled = FeedbackReport {
        changes: c.changes,
        remote_id: None,
        error: None,
        retry_at: None,
    };
    if !c.checks {
        return settled;
    }
    let refused = refusal(state, &c.repository, "checks").await;
    if let Some(why) = refused.active.clone() {
        return FeedbackReport::failed(c.changes, why, None);
    }
    let gate = gate_of(state, &d.run).await;
    let url = run_url(state, &d.run);
    // The policies evaluated on the run: best effort, like the gate.
    let policies = state
        .store
        .policy_evaluations(&d.run.id)
        .await
        .unwrap_or_default();
    let policies = policies.as_slice();
    let (gate, url) = (gate.as_deref(), url.as_str());
    let result = with_token(
        state,
        &c.repository,
        FeedbackPermission::Checks,
        |token| async move {
            let token = token.as_str();
            let github = &state.vcs.github;
            match c.check_run_id {
                Some(id) => {
                    let body = render::check_body(&d.run, gate, &c.head_sha, url, false, policies);
                    github
                        .update_check_run(token, &c.repository, id, &body)
                        .await
                        .map(|_| id)
                }
                None => {
                    let body = render::check_body(&d.run, gate, &c.head_sha, url, true, policies);
                    github.create_check_run(token, &c.repository, &body).await
                }
            }
        },
    )
    .await;
    match result {
        Ok(id) => {
            Counters::bump(&state.vcs.counters.feedback_checks.reported);
            clear_refusal(state, &c.repository, "checks", &refused).await;
            FeedbackReport::reported(c.changes, id)
        }
        Err(e) => failed(state, &c.repository, "checks", c.changes, c.attempts, e).await,
    }
}

/// Clears a refusal on record once that kind of feedback went through.
async fn clear_refusal(state: &AppState, repository: &str, kind: &str, refusal: &Refusal) {
    if refusal.recorded {
        let _ = state
            .store
            .set_feedback_refusal(repository, kind, None)
            .await;
    }
}

/// Reports a pull request's comment: found again by its marker (or created), then
/// edited in place with what every stack of the org shows now.
async fn report_comment(state: &AppState, d: &DuePrComment) -> FeedbackReport {
    let c = &d.comment;
    let refused = refusal(state, &c.repository, "comment").await;
    if let Some(why) = refused.active.clone() {
        return FeedbackReport::failed(c.changes, why, None);
    }
    let mut gates = Vec::with_capacity(d.runs.len());
    let mut plans = Vec::with_capacity(d.runs.len());
    let mut policies = Vec::with_capacity(d.runs.len());
    for run in &d.runs {
        gates.push(gate_of(state, run).await);
        plans.push(plan_text(state, run).await);
        // Best effort, like the gate.
        policies.push(
            state
                .store
                .policy_evaluations(&run.id)
                .await
                .unwrap_or_default(),
        );
    }
    let stacks: Vec<_> = d
        .runs
        .iter()
        .zip(&gates)
        .zip(plans)
        .zip(policies)
        .map(
            |(((run, gate), plan_text), policies)| render::CommentStack {
                run,
                gate: gate.as_deref(),
                url: run_url(state, run),
                plan_text,
                policies,
            },
        )
        .collect();
    let marker = comment_marker(&c.org);
    let body = render::comment(&marker, &c.org, &stacks, &d.not_triggered);
    let (body, marker) = (body.as_str(), marker.as_str());
    let result = with_token(
        state,
        &c.repository,
        FeedbackPermission::PullRequests,
        |token| async move {
            let token = token.as_str();
            let github = &state.vcs.github;
            // Looked for by its marker only when a create may have happened unrecorded.
            let known = match (c.comment_id, c.create_started) {
                (Some(id), _) => Some(id),
                (None, true) => {
                    github
                        .find_comment(token, &c.repository, c.pull_request, marker, COMMENT_PAGES)
                        .await?
                }
                (None, false) => None,
            };
            if let Some(id) = known {
                match github.update_comment(token, &c.repository, id, body).await {
                    Ok(()) => return Ok(id),
                    // Someone deleted it: a new one takes its place.
                    Err(GithubError::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            state
                .store
                .mark_pr_comment_creating(&c.org, &c.repository, c.pull_request)
                .await
                .map_err(|e| GithubError::Api {
                    what: "recording the comment's creation".into(),
                    message: e.to_string(),
                })?;
            github
                .create_comment(token, &c.repository, c.pull_request, body)
                .await
        },
    )
    .await;
    match result {
        Ok(id) => {
            Counters::bump(&state.vcs.counters.feedback_comment.reported);
            clear_refusal(state, &c.repository, "comment", &refused).await;
            FeedbackReport::reported(c.changes, id)
        }
        Err(e) => failed(state, &c.repository, "comment", c.changes, c.attempts, e).await,
    }
}

/// The plan phase's output of a run (masked when it was stored), from where Terraform
/// starts describing its actions when that is in it, at most [`PLAN_TEXT_MAX`]
/// characters (the end kept). `None` before the run has planned.
async fn plan_text(state: &AppState, run: &RunRecord) -> Option<String> {
    run.plan_summary.as_ref()?;
    let chunks = state
        .store
        .read_logs(&run.id, None, PLAN_LOG_CHUNKS)
        .await
        .ok()?;
    let mut text = String::new();
    for chunk in chunks.iter().filter(|c| c.phase == Some(Phase::Plan)) {
        text.push_str(&chunk.text);
    }
    for start in [
        "Terraform will perform the following actions",
        "OpenTofu will perform the following actions",
        "No changes.",
    ] {
        if let Some(at) = text.find(start) {
            text = text[at..].to_string();
            break;
        }
    }
    let count = text.chars().count();
    if count > PLAN_TEXT_MAX {
        let tail: String = text.chars().skip(count - PLAN_TEXT_MAX).collect();
        text = format!("…\n{tail}");
    }
    (!text.trim().is_empty()).then_some(text)
}
