//! Feedback on GitHub: the outbox rows of a run's check run and of a pull request's
//! comment — written in the transaction that creates or changes the run (or records the
//! pull request's delivery), read by the feedback duty, and settled by its reports.

use bosun_core::feedback::PrFeedback;

use super::runs::{load_run, query_runs, RUN_COLUMNS};
use super::*;

const CHECK_COLUMNS: &str = "run_id, org_id, stack_id, repository, head_sha, pull_request,
    checks, comment, check_run_id, changes, synced, attempts, next_attempt_at, last_error,
    created_at";

type CheckRow = (
    String,
    String,
    String,
    String,
    String,
    Option<i64>,
    bool,
    bool,
    Option<i64>,
    i64,
    i64,
    i64,
    Option<i64>,
    Option<String>,
    i64,
);

fn check_row(r: &Row<'_>) -> db::Result<CheckRow> {
    CheckRow::try_from(r)
}

fn check_record(r: CheckRow) -> Result<CheckFeedback> {
    Ok(CheckFeedback {
        run_id: r.0,
        org: r.1,
        stack: r.2,
        repository: r.3,
        head_sha: r.4,
        pull_request: r.5,
        checks: r.6,
        comment: r.7,
        check_run_id: r.8,
        changes: r.9,
        synced: r.10,
        attempts: r.11,
        next_attempt_at: opt_from_millis(r.12)?,
        last_error: r.13,
        created_at: from_millis(r.14)?,
    })
}

const COMMENT_COLUMNS: &str = "org_id, repository, pull_request, delivery_id, comment_id,
    changes, synced, attempts, next_attempt_at, last_error, create_started";

type CommentRow = (
    String,
    String,
    i64,
    Option<i64>,
    Option<i64>,
    i64,
    i64,
    i64,
    Option<i64>,
    Option<String>,
    bool,
);

fn comment_row(r: &Row<'_>) -> db::Result<CommentRow> {
    CommentRow::try_from(r)
}

fn comment_record(r: CommentRow) -> Result<PrCommentFeedback> {
    Ok(PrCommentFeedback {
        org: r.0,
        repository: r.1,
        pull_request: r.2,
        delivery_id: r.3,
        comment_id: r.4,
        changes: r.5,
        synced: r.6,
        attempts: r.7,
        next_attempt_at: opt_from_millis(r.8)?,
        last_error: r.9,
        create_started: r.10,
    })
}

/// How long a change of a run that is still moving waits before it is reported, so the
/// next change (queued → preparing → planning) is reported with it in one call. A run
/// at rest (waiting for someone, or ended) is reported at once.
const DEBOUNCE_MS: i64 = 1_000;

/// The next attempt after a change: at once for a run at rest, after the debounce for
/// one still moving; a failed row's retry time is kept either way (`?2`: now, `?3`: 1
/// when at rest, `?4`: now plus the debounce).
const DUE_AFTER_CHANGE: &str = "CASE
        WHEN attempts > 0 AND next_attempt_at IS NOT NULL THEN next_attempt_at
        WHEN ?3 <> 0 THEN ?2
        ELSE COALESCE(next_attempt_at, ?4) END";

/// A new run of a stack (`repository` its stored key, `setting` its feedback resolved
/// with its org's): a check row when the run is tracked or proposed, of a `github:`
/// stack, with a commit, and the stack wants feedback; and its pull request's comment
/// marked due when that is wanted too.
pub(super) fn run_created(
    tx: &Transaction<'_>,
    run: &RunRecord,
    repository: &str,
    setting: &str,
) -> Result<()> {
    let Some(full_name) = repository.strip_prefix("github:") else {
        return Ok(());
    };
    let Some(commit) = &run.commit else {
        return Ok(());
    };
    if !matches!(run.kind, RunKind::Tracked | RunKind::Proposed) {
        return Ok(());
    }
    // An unknown setting (a newer server wrote it) reports nothing rather than guess.
    let setting = PrFeedback::from_str(setting).unwrap_or(PrFeedback::None);
    let comment = setting.comment() && run.pull_request.is_some();
    if !setting.checks() && !comment {
        return Ok(());
    }
    let now = millis(Utc::now());
    let full_name = full_name.to_ascii_lowercase();
    tx.prepare_cached(
        "INSERT INTO github_checks (run_id, org_id, stack_id, repository, head_sha,
            pull_request, checks, comment, changes, next_attempt_at, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 1, ?10, ?9, ?9)
         ON CONFLICT (run_id) DO NOTHING",
    )?
    .execute(params![
        run.id,
        run.org,
        run.stack,
        full_name,
        commit,
        run.pull_request,
        setting.checks(),
        comment,
        now,
        now + DEBOUNCE_MS
    ])?;
    if let (true, Some(pr)) = (comment, run.pull_request) {
        comment_changed(tx, &run.org, &full_name, pr, now + DEBOUNCE_MS)?;
    }
    crate::signal::emit(Signal::Notification);
    Ok(())
}

/// A run whose commit became known after it was created: as [`run_created`], with its
/// stack's repository and setting read now.
pub(super) fn run_created_late(tx: &Transaction<'_>, run: &RunRecord) -> Result<()> {
    let stack = tx
        .prepare_cached(
            "SELECT s.repo_key, COALESCE(s.pr_feedback, o.pr_feedback)
             FROM stacks s JOIN orgs o ON o.id = s.org_id
             WHERE s.org_id = ?1 AND s.id = ?2",
        )?
        .query_row(params![run.org, run.stack], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })
        .optional()?;
    match stack {
        Some((repository, setting)) => run_created(tx, run, &repository, &setting),
        None => Ok(()),
    }
}

/// A run changed: its check row (if any) is due — at once when the run is at rest
/// (waiting for someone, or ended), after the debounce while it moves — and so is its
/// pull request's comment when the run came to rest. Returns false when the run has no
/// check row.
pub(super) fn run_changed(tx: &Transaction<'_>, run: &RunRecord) -> Result<bool> {
    let now = millis(Utc::now());
    let at_rest = run.state == RunState::Unconfirmed || run.state.is_terminal();
    let row = tx
        .prepare_cached(&format!(
            "UPDATE github_checks SET changes = changes + 1,
                next_attempt_at = {DUE_AFTER_CHANGE}, updated_at = ?2
             WHERE run_id = ?1
             RETURNING org_id, repository, pull_request, comment"
        ))?
        .query_row(
            params![run.id, now, i64::from(at_rest), now + DEBOUNCE_MS],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Option<i64>>(2)?,
                    r.get::<_, bool>(3)?,
                ))
            },
        )
        .optional()?;
    let Some((org, repository, pull_request, comment)) = row else {
        return Ok(false);
    };
    if let (true, true, Some(pr)) = (at_rest, comment, pull_request) {
        comment_changed(tx, &org, &repository, pr, now)?;
    }
    crate::signal::emit(Signal::Notification);
    Ok(true)
}

/// Marks a pull request's comment due at `due` (creating its row on the first run); a
/// failed row's retry time is kept, an earlier time wins over a later one.
fn comment_changed(
    tx: &Transaction<'_>,
    org: &str,
    repository: &str,
    pull_request: i64,
    due: i64,
) -> Result<()> {
    tx.prepare_cached(&format!(
        "INSERT INTO github_pr_comments (org_id, repository, pull_request, changes,
            next_attempt_at, updated_at)
         VALUES (?1, ?2, ?3, 1, ?4, ?4)
         ON CONFLICT (org_id, repository, pull_request) DO UPDATE SET
            changes = github_pr_comments.changes + 1,
            next_attempt_at = CASE
                WHEN github_pr_comments.attempts > 0
                     AND github_pr_comments.next_attempt_at IS NOT NULL
                    THEN github_pr_comments.next_attempt_at
                WHEN github_pr_comments.next_attempt_at IS NULL THEN excluded.next_attempt_at
                ELSE {}(github_pr_comments.next_attempt_at, excluded.next_attempt_at) END,
            updated_at = excluded.updated_at",
        db::LEAST
    ))?
    .execute(params![org, repository, pull_request, due])?;
    Ok(())
}

/// Records that a comment is about to be created, so that a create whose answer was lost
/// is looked for (by its marker) before another is made.
pub(super) fn comment_creating(
    tx: &Transaction<'_>,
    org: &str,
    repository: &str,
    pull_request: i64,
) -> Result<()> {
    tx.prepare_cached(
        "UPDATE github_pr_comments SET create_started = 1
         WHERE org_id = ?1 AND repository = ?2 AND pull_request = ?3",
    )?
    .execute(params![org, repository, pull_request])?;
    Ok(())
}

/// A pull request's delivery was recorded: the comments of that pull request (every org
/// that has one) now list the stacks it did not trigger, so they are due.
pub(super) fn pull_request_delivered(
    tx: &Transaction<'_>,
    repository: &str,
    pull_request: i64,
    delivery: i64,
) -> Result<()> {
    let now = millis(Utc::now());
    let n = tx
        .prepare_cached(
            "UPDATE github_pr_comments SET delivery_id = ?3, changes = changes + 1,
                next_attempt_at = COALESCE(next_attempt_at, ?4), updated_at = ?4
             WHERE repository = ?1 AND pull_request = ?2",
        )?
        .execute(params![
            repository.to_ascii_lowercase(),
            pull_request,
            delivery,
            now
        ])?;
    if n > 0 {
        crate::signal::emit(Signal::Notification);
    }
    Ok(())
}

pub(super) fn due_checks(c: &Connection, now: DateTime<Utc>, limit: u32) -> Result<Vec<DueCheck>> {
    let checks = query_decoded(
        c,
        &format!(
            "SELECT {CHECK_COLUMNS} FROM github_checks
             WHERE next_attempt_at IS NOT NULL AND next_attempt_at <= ?1
             ORDER BY next_attempt_at, run_id LIMIT ?2"
        ),
        params![millis(now), limit],
        check_row,
        check_record,
    )?;
    let mut due = Vec::with_capacity(checks.len());
    for check in checks {
        // The row goes with its run (ON DELETE CASCADE): a missing run is a race with
        // retention, and the row is gone with it.
        if let Some(run) = load_run(c, &check.run_id)? {
            due.push(DueCheck { check, run });
        }
    }
    Ok(due)
}

/// The row's next state after a report: a success stores the remote id and the changes
/// shown (due again at once if the run changed meanwhile); a failure counts an attempt.
fn settle() -> String {
    format!(
        "synced = CASE WHEN ?2 IS NULL THEN {}(synced, ?3) ELSE synced END,
    attempts = CASE WHEN ?2 IS NULL THEN 0 ELSE attempts + 1 END,
    last_error = ?2,
    next_attempt_at = CASE
        WHEN ?2 IS NOT NULL THEN ?4
        WHEN changes > ?3 THEN ?5
        ELSE NULL END,
    updated_at = ?5",
        db::GREATEST
    )
}

pub(super) fn record_check(tx: &Transaction<'_>, run: &str, report: &FeedbackReport) -> Result<()> {
    let now = millis(Utc::now());
    tx.prepare_cached(&format!(
        "UPDATE github_checks SET {},
            check_run_id = COALESCE(?6, check_run_id)
         WHERE run_id = ?1",
        settle()
    ))?
    .execute(params![
        run,
        report.error,
        report.changes,
        report.retry_at.map(millis),
        now,
        report.remote_id
    ])?;
    Ok(())
}

pub(super) fn due_comments(
    c: &Connection,
    now: DateTime<Utc>,
    limit: u32,
) -> Result<Vec<DuePrComment>> {
    let comments = query_decoded(
        c,
        &format!(
            "SELECT {COMMENT_COLUMNS} FROM github_pr_comments
             WHERE next_attempt_at IS NOT NULL AND next_attempt_at <= ?1
             ORDER BY next_attempt_at, org_id, repository, pull_request LIMIT ?2"
        ),
        params![millis(now), limit],
        comment_row,
        comment_record,
    )?;
    let mut due = Vec::with_capacity(comments.len());
    for comment in comments {
        // The latest run of each stack: rows by stack, newest first.
        let runs = query_runs(
            c,
            &format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE id IN (
                    SELECT g.run_id FROM github_checks g
                    WHERE g.org_id = ?1 AND g.repository = ?2 AND g.pull_request = ?3
                      AND g.comment <> 0
                      AND NOT EXISTS (SELECT 1 FROM github_checks n
                          WHERE n.org_id = g.org_id AND n.repository = g.repository
                            AND n.pull_request = g.pull_request AND n.stack_id = g.stack_id
                            AND n.comment <> 0
                            AND (n.created_at > g.created_at
                                 OR (n.created_at = g.created_at AND n.run_id > g.run_id))))
                 ORDER BY stack_id"
            ),
            params![comment.org, comment.repository, comment.pull_request],
        )?;
        let not_triggered = match comment.delivery_id {
            Some(delivery) => {
                let mut stmt = c.prepare_cached(
                    "SELECT stack_id, reason FROM trigger_decisions
                     WHERE delivery_id = ?1 AND org_id = ?2 AND run_id IS NULL
                     ORDER BY stack_id",
                )?;
                let rows = stmt.query_map(params![delivery, comment.org], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
                })?;
                rows.collect::<db::Result<Vec<_>>>()?
                    .into_iter()
                    .filter(|(stack, _)| !runs.iter().any(|r| &r.stack == stack))
                    .collect()
            }
            None => Vec::new(),
        };
        due.push(DuePrComment {
            comment,
            runs,
            not_triggered,
        });
    }
    Ok(due)
}

pub(super) fn record_comment(
    tx: &Transaction<'_>,
    org: &str,
    repository: &str,
    pull_request: i64,
    report: &FeedbackReport,
) -> Result<()> {
    let now = millis(Utc::now());
    tx.prepare_cached(&format!(
        "UPDATE github_pr_comments SET {},
            comment_id = COALESCE(?6, comment_id)
         WHERE org_id = ?1 AND repository = ?7 AND pull_request = ?8",
        settle()
    ))?
    .execute(params![
        org,
        report.error,
        report.changes,
        report.retry_at.map(millis),
        now,
        report.remote_id,
        repository,
        pull_request
    ])?;
    Ok(())
}

pub(super) fn checks_of_commit(
    c: &Connection,
    repository: &str,
    head_sha: &str,
) -> Result<Vec<CheckFeedback>> {
    query_decoded(
        c,
        &format!(
            "SELECT {CHECK_COLUMNS} FROM github_checks
             WHERE repository = ?1 AND head_sha = ?2 ORDER BY created_at, run_id"
        ),
        params![repository.to_ascii_lowercase(), head_sha],
        check_row,
        check_record,
    )
}

pub(super) fn set_refusal(
    tx: &Transaction<'_>,
    repository: &str,
    kind: &str,
    refusal: Option<(&str, DateTime<Utc>)>,
) -> Result<()> {
    let repository = repository.to_ascii_lowercase();
    match refusal {
        Some((message, until)) => {
            tx.prepare_cached(
                "INSERT INTO github_feedback_refusals (repository, kind, message, until_at)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (repository, kind) DO UPDATE SET message = excluded.message,
                    until_at = excluded.until_at",
            )?
            .execute(params![repository, kind, message, millis(until)])?;
        }
        None => {
            tx.prepare_cached(
                "DELETE FROM github_feedback_refusals WHERE repository = ?1 AND kind = ?2",
            )?
            .execute(params![repository, kind])?;
        }
    }
    Ok(())
}

pub(super) fn refusals(c: &Connection, repository: &str) -> Result<Vec<FeedbackRefusal>> {
    let mut stmt = c.prepare_cached(
        "SELECT repository, kind, message, until_at FROM github_feedback_refusals
         WHERE repository = ?1 ORDER BY kind",
    )?;
    let rows = stmt.query_map(params![repository.to_ascii_lowercase()], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, i64>(3)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (repository, kind, message, until) = row?;
        out.push(FeedbackRefusal {
            repository,
            kind,
            message,
            until: from_millis(until)?,
        });
    }
    Ok(out)
}
