//! VCS: GitHub App bindings, webhook and poll deliveries with their decisions (the runs
//! they create and cancel), VCS tokens, and the poller's heads.

use super::audit::append_audit;
use super::runs::{cancel_in_tx, insert_run, query_runs, RUN_COLUMNS};
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
