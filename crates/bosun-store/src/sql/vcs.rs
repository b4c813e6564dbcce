//! VCS: GitHub App bindings, webhook and poll deliveries with their decisions (the runs
//! they create and cancel), VCS tokens, and the poller's heads.

use super::audit::append_audit;
use super::runs::{cancel_in_tx, insert_run, query_runs, RUN_COLUMNS};
use super::stacks::{query_stacks, STACK_COLUMNS};
use super::*;

/// `owner/repo` as bindings store it.
pub(super) fn github_name(repository: &str) -> String {
    repository.to_ascii_lowercase()
}

/// A repository key as stacks store it: GitHub keys are case-insensitive.
pub(super) fn normalize_repo_key(key: &str) -> String {
    if key.starts_with("github:") {
        key.to_ascii_lowercase()
    } else {
        key.to_string()
    }
}

/// Inserts or rebinds `owner/repo` bindings to an installation.
pub(super) fn upsert_bindings(
    tx: &Transaction<'_>,
    installation: i64,
    account: &str,
    repositories: &[String],
    suspended: bool,
    now: i64,
) -> Result<()> {
    let mut stmt = tx.prepare_cached(
        "INSERT INTO github_bindings (repository, installation, account, suspended, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (repository) DO UPDATE SET installation = excluded.installation,
            account = excluded.account, suspended = excluded.suspended,
            updated_at = excluded.updated_at",
    )?;
    for repo in repositories {
        stmt.execute(params![
            github_name(repo),
            installation,
            account,
            suspended,
            now
        ])?;
    }
    Ok(())
}

pub(super) const DELIVERY_COLUMNS: &str = "d.id, d.source, d.guid, d.event, d.action, d.repository,
    d.git_ref, d.before_sha, d.after_sha, d.pull_request, d.summary, d.duplicate_of,
    d.received_at";

/// Raw delivery columns in `DELIVERY_COLUMNS` order.
pub(super) type DeliveryRow = (
    i64,
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<i64>,
    String,
    Option<i64>,
    i64,
);

/// A row decodes into a tuple of its columns, in `SELECT` order.
pub(super) fn delivery_row(r: &Row<'_>) -> db::Result<DeliveryRow> {
    DeliveryRow::try_from(r)
}

pub(super) fn delivery_source(s: &str) -> Result<DeliverySource> {
    match s {
        "github" => Ok(DeliverySource::Github),
        "poll" => Ok(DeliverySource::Poll),
        other => Err(corrupt("delivery source", other)),
    }
}

pub(super) fn delivery_record(d: DeliveryRow) -> Result<DeliveryRecord> {
    Ok(DeliveryRecord {
        id: d.0,
        source: delivery_source(&d.1)?,
        guid: d.2,
        event: d.3,
        action: d.4,
        repository: d.5,
        git_ref: d.6,
        before: d.7,
        after: d.8,
        pull_request: d.9,
        summary: d.10,
        duplicate_of: d.11,
        received_at: from_millis(d.12)?,
    })
}

/// Inserts a delivery row and returns its id.
pub(super) fn insert_delivery(
    tx: &Transaction<'_>,
    d: &NewDelivery,
    duplicate_of: Option<i64>,
    now: i64,
) -> Result<i64> {
    tx.prepare_cached(
        "INSERT INTO deliveries (source, guid, event, action, repository, git_ref, before_sha,
            after_sha, pull_request, summary, duplicate_of, received_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    )?
    .execute(params![
        d.source.as_str(),
        d.guid,
        d.event,
        d.action,
        d.repository,
        d.git_ref,
        d.before,
        d.after,
        d.pull_request,
        d.summary,
        duplicate_of,
        now,
    ])?;
    db::last_insert_id(tx)
}

/// Records a delivery seen before: a duplicate row pointing at the first, and a
/// `duplicate delivery` decision for every stack the first one decided on.
pub(super) fn record_duplicate(
    tx: &Transaction<'_>,
    d: &NewDelivery,
    first_id: i64,
    first_received: i64,
    now: i64,
) -> Result<DeliveryOutcome> {
    let first_received_at = from_millis(first_received)?;
    let id = insert_delivery(tx, d, Some(first_id), now)?;
    let reason = format!(
        "duplicate delivery: already received at {}",
        first_received_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    );
    tx.prepare_cached(
        "INSERT INTO trigger_decisions (delivery_id, org_id, stack_id, run_id, reason)
         SELECT ?1, org_id, stack_id, NULL, ?2 FROM trigger_decisions WHERE delivery_id = ?3",
    )?
    .execute(params![id, reason, first_id])?;
    Ok(DeliveryOutcome::Duplicate {
        id,
        first_id,
        first_received_at,
    })
}

/// Applies a first delivery: its runs, the cancels of superseded proposed runs, its
/// decisions and its audit record.
pub(super) fn record_first(
    tx: &Transaction<'_>,
    d: &NewDelivery,
    now: i64,
) -> Result<DeliveryOutcome> {
    let id = insert_delivery(tx, d, None, now)?;
    let mut runs = Vec::with_capacity(d.runs.len());
    for run in &d.runs {
        runs.push(insert_run(tx, run, Some(id))?);
    }
    let mut canceled = Vec::new();
    if let Some(cancel) = &d.cancel {
        for (org, stack) in &cancel.stacks {
            let open = query_runs(
                tx,
                &format!(
                    "SELECT {RUN_COLUMNS} FROM runs WHERE org_id = ?1 AND stack_id = ?2
                     AND pull_request = ?3 AND kind = 'proposed'
                     AND state NOT IN {TERMINAL_STATES}
                     ORDER BY created_at, id"
                ),
                params![org, stack, cancel.pull_request],
            )?;
            for run in open {
                // Not the runs this delivery creates, and each run once.
                if d.runs.iter().any(|r| r.id == run.id) || canceled.contains(&run.id) {
                    continue;
                }
                let audit = Audit {
                    org: Some(run.org.clone()),
                    actor: "system".into(),
                    token_id: None,
                    action: "run.cancel".into(),
                    target: format!("run:{}", run.id),
                    detail: json!({
                        "reason": cancel.reason,
                        "pull_request": cancel.pull_request,
                        "delivery": d.guid,
                    }),
                };
                cancel_in_tx(tx, &run, cancel.reason.clone(), &audit)?;
                canceled.push(run.id);
            }
        }
    }
    let mut insert = tx.prepare_cached(
        "INSERT INTO trigger_decisions (delivery_id, org_id, stack_id, run_id, reason)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    for decision in &d.decisions {
        if let Some(run) = &decision.run_id {
            if !d.runs.iter().any(|r| &r.id == run) {
                return Err(StoreError::NotFound(format!(
                    "run {run:?} among the runs of delivery {:?}",
                    d.guid
                )));
            }
        }
        insert
            .execute(params![
                id,
                decision.org,
                decision.stack,
                decision.run_id,
                decision.reason
            ])
            .map_err(|e| {
                if is_foreign_key_violation(&e) {
                    StoreError::NotFound(format!(
                        "stack {:?} in org {:?}",
                        decision.stack, decision.org
                    ))
                } else if is_unique_violation(&e) {
                    StoreError::AlreadyExists(format!(
                        "a decision on stack {:?} in org {:?} for this delivery",
                        decision.stack, decision.org
                    ))
                } else {
                    e.into()
                }
            })?;
    }
    for e in &d.evaluations {
        let Some(run) = runs.iter().find(|r| r.id == e.run_id) else {
            return Err(StoreError::NotFound(format!(
                "run {:?} among the runs of delivery {:?}",
                e.run_id, d.guid
            )));
        };
        super::policies::insert_evaluations(tx, &run.org, &run.id, &e.evaluations, now)?;
    }
    if let (Some(pr), Some(full_name)) = (
        d.pull_request,
        d.repository
            .as_deref()
            .and_then(|r| r.strip_prefix("github:")),
    ) {
        super::feedback::pull_request_delivered(tx, full_name, pr, id)?;
    }
    append_audit(
        tx,
        &Audit {
            org: None,
            actor: "system".into(),
            token_id: None,
            action: "vcs.delivery".into(),
            target: format!("delivery:{}", d.guid),
            detail: json!({
                "id": id,
                "source": d.source.as_str(),
                "event": d.event,
                "action": d.action,
                "repository": d.repository,
                "summary": d.summary,
                "runs": runs.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
                "canceled": canceled,
            }),
        },
    )?;
    Ok(DeliveryOutcome::Recorded { id, runs, canceled })
}

pub(super) fn git_remote_stacks(c: &Connection) -> Result<Vec<StackRecord>> {
    query_stacks(
        c,
        &format!(
            "SELECT {STACK_COLUMNS} FROM stacks WHERE substr(repository, 1, 7) <> 'github:'
             ORDER BY org_id, id"
        ),
        params![],
    )
}

pub(super) fn apply_installation(
    tx: &Transaction<'_>,
    change: &InstallationChange,
    audit: &Audit,
) -> Result<()> {
    let now = millis(Utc::now());
    match &change {
        InstallationChange::Created {
            installation,
            account,
            repositories,
        } => {
            tx.prepare_cached("DELETE FROM github_bindings WHERE installation = ?1")?
                .execute([installation])?;
            upsert_bindings(tx, *installation, account, repositories, false, now)?;
        }
        InstallationChange::Deleted { installation } => {
            tx.prepare_cached("DELETE FROM github_bindings WHERE installation = ?1")?
                .execute([installation])?;
        }
        InstallationChange::Suspended {
            installation,
            suspended,
        } => {
            tx.prepare_cached(
                "UPDATE github_bindings SET suspended = ?2, updated_at = ?3
                 WHERE installation = ?1",
            )?
            .execute(params![installation, suspended, now])?;
        }
        InstallationChange::RepositoriesAdded {
            installation,
            account,
            repositories,
        } => {
            // Repositories added to a suspended installation read as suspended too.
            let suspended = exists(
                tx,
                "SELECT 1 FROM github_bindings WHERE installation = ?1 AND suspended = 1",
                params![installation],
            )?;
            upsert_bindings(tx, *installation, account, repositories, suspended, now)?;
        }
        InstallationChange::RepositoriesRemoved {
            installation,
            repositories,
        } => {
            let mut stmt = tx.prepare_cached(
                "DELETE FROM github_bindings WHERE repository = ?1 AND installation = ?2",
            )?;
            for repo in repositories {
                stmt.execute(params![github_name(repo), installation])?;
            }
        }
    }
    append_audit(tx, audit)
}

pub(super) fn record_delivery(
    tx: &Transaction<'_>,
    delivery: &NewDelivery,
) -> Result<DeliveryOutcome> {
    let now = millis(Utc::now());
    let first: Option<(i64, i64)> = tx
        .prepare_cached(
            "SELECT id, received_at FROM deliveries
             WHERE source = ?1 AND guid = ?2 AND duplicate_of IS NULL",
        )?
        .query_row(params![delivery.source.as_str(), delivery.guid], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?;
    match first {
        Some((first_id, received)) => record_duplicate(tx, delivery, first_id, received, now),
        None => record_first(tx, delivery, now),
    }
}

pub(super) fn find_delivery(
    c: &Connection,
    source: DeliverySource,
    guid: &str,
) -> Result<Option<DeliveryRecord>> {
    c.prepare_cached(&format!(
        "SELECT {DELIVERY_COLUMNS} FROM deliveries d
         WHERE d.source = ?1 AND d.guid = ?2 AND d.duplicate_of IS NULL"
    ))?
    .query_row(params![source.as_str(), guid], delivery_row)
    .optional()?
    .map(delivery_record)
    .transpose()
}

pub(super) fn triggers(
    c: &Connection,
    org: &str,
    stack: &str,
    before: Option<i64>,
    limit: u32,
) -> Result<Vec<TriggerRecord>> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT {DELIVERY_COLUMNS}, t.run_id, t.reason FROM trigger_decisions t
         JOIN deliveries d ON d.id = t.delivery_id
         WHERE t.org_id = ?1 AND t.stack_id = ?2 AND t.delivery_id < ?3
         ORDER BY t.delivery_id DESC LIMIT ?4"
    ))?;
    let rows = stmt.query_map(
        params![org, stack, before.unwrap_or(i64::MAX), limit],
        |r| {
            Ok((
                delivery_row(r)?,
                r.get::<_, Option<String>>(13)?,
                r.get::<_, String>(14)?,
            ))
        },
    )?;
    let mut out = Vec::new();
    for row in rows {
        let (delivery, run_id, reason) = row?;
        out.push(TriggerRecord {
            delivery: delivery_record(delivery)?,
            run_id,
            reason,
        });
    }
    Ok(out)
}

pub(super) fn add_token(tx: &Transaction<'_>, token: &VcsTokenRecord) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO vcs_tokens (token, run_id, expires_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (token) DO UPDATE SET run_id = excluded.run_id,
            expires_at = excluded.expires_at",
    )?
    .execute(params![token.token, token.run_id, millis(token.expires_at)])?;
    Ok(())
}

pub(super) fn tokens_due(c: &Connection) -> Result<Vec<VcsTokenRecord>> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT v.token, v.run_id, v.expires_at FROM vcs_tokens v
         LEFT JOIN runs r ON r.id = v.run_id
         WHERE r.id IS NULL OR r.state IN {TERMINAL_STATES} OR v.expires_at <= ?1
         ORDER BY v.expires_at, v.token"
    ))?;
    let rows = stmt.query_map([millis(Utc::now())], |r| {
        <(String, String, i64)>::try_from(r)
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (token, run_id, expires) = row?;
        out.push(VcsTokenRecord {
            run_id,
            token,
            expires_at: from_millis(expires)?,
        });
    }
    Ok(out)
}

pub(super) fn remove_token(tx: &Transaction<'_>, token: &str) -> Result<()> {
    tx.prepare_cached("DELETE FROM vcs_tokens WHERE token = ?1")?
        .execute([&token])?;
    Ok(())
}

pub(super) fn poll_head(
    c: &Connection,
    repository: &str,
    branch: &str,
) -> Result<Option<PollHead>> {
    let row = c
        .prepare_cached(
            "SELECT repository, branch, commit_sha, checked_at FROM poll_heads
             WHERE repository = ?1 AND branch = ?2",
        )?
        .query_row(params![repository, branch], |r| {
            <(String, String, String, i64)>::try_from(r)
        })
        .optional()?;
    row.map(|h| {
        Ok(PollHead {
            repository: h.0,
            branch: h.1,
            commit: h.2,
            checked_at: from_millis(h.3)?,
        })
    })
    .transpose()
}

pub(super) fn set_poll_head(tx: &Transaction<'_>, head: &PollHead) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO poll_heads (repository, branch, commit_sha, checked_at)
         VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (repository, branch) DO UPDATE SET commit_sha = excluded.commit_sha,
            checked_at = excluded.checked_at",
    )?
    .execute(params![
        head.repository,
        head.branch,
        head.commit,
        millis(head.checked_at)
    ])?;
    Ok(())
}

pub(super) fn stacks_for_repository(
    c: &Connection,
    repository: &str,
    branch: Option<&str>,
) -> Result<Vec<StackRecord>> {
    let key = normalize_repo_key(repository);
    match branch {
        Some(branch) => query_stacks(
            c,
            &format!(
                "SELECT {STACK_COLUMNS} FROM stacks WHERE repo_key = ?1 AND branch = ?2
             ORDER BY org_id, id"
            ),
            params![key, branch],
        ),
        None => query_stacks(
            c,
            &format!("SELECT {STACK_COLUMNS} FROM stacks WHERE repo_key = ?1 ORDER BY org_id, id"),
            params![key],
        ),
    }
}

pub(super) fn binding(c: &Connection, repository: &str) -> Result<Option<GithubBinding>> {
    let repository = github_name(repository);
    let row = c
        .prepare_cached(
            "SELECT repository, installation, account, suspended, updated_at
             FROM github_bindings WHERE repository = ?1",
        )?
        .query_row([&repository], |r| {
            <(String, i64, String, bool, i64)>::try_from(r)
        })
        .optional()?;
    row.map(|b| {
        Ok(GithubBinding {
            repository: b.0,
            installation: b.1,
            account: b.2,
            suspended: b.3,
            updated_at: from_millis(b.4)?,
        })
    })
    .transpose()
}
