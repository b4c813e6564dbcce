//! Policies as code: an org's policies, their evaluations recorded on runs, the admin's
//! override of a soft-mandatory deny, and the plan JSON a runner uploads for them (one
//! source for both backends; see `super::db`).

use bosun_core::policy::{self, Attachment, Counted, Point};

use super::audit::append_audit;
use super::runs::{apply_event, load_run};
use super::*;

const POLICY_COLUMNS: &str = "org_id, name, mode, on_error, points, labels, environments, source,
    version, created_at, updated_at, updated_by";

type PolicyRow = (
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    i64,
    i64,
    String,
);

fn policy_row(r: &Row<'_>) -> db::Result<PolicyRow> {
    PolicyRow::try_from(r)
}

fn strings(raw: &str, what: &str) -> Result<Vec<String>> {
    serde_json::from_str(raw).map_err(|e| corrupt(what, e))
}

fn source_json(s: &PolicySource) -> String {
    match s {
        PolicySource::Files(files) => json!({ "files": files }),
        PolicySource::Git {
            repository,
            branch,
            path,
        } => json!({"repository": repository, "branch": branch, "path": path}),
    }
    .to_string()
}

fn source_of(raw: &str) -> Result<PolicySource> {
    let v: Value = serde_json::from_str(raw).map_err(|e| corrupt("policy source", e))?;
    if let Some(files) = v.get("files") {
        let files =
            serde_json::from_value(files.clone()).map_err(|e| corrupt("policy files", e))?;
        return Ok(PolicySource::Files(files));
    }
    let text = |k: &str| {
        v[k].as_str()
            .map(str::to_string)
            .ok_or_else(|| corrupt("policy source", format!("no {k}")))
    };
    Ok(PolicySource::Git {
        repository: text("repository")?,
        branch: text("branch")?,
        path: text("path")?,
    })
}

fn policy_record(r: PolicyRow) -> Result<PolicyRecord> {
    let points = strings(&r.4, "policy points")?
        .iter()
        .map(|p| p.parse::<Point>().map_err(|e| corrupt("policy points", e)))
        .collect::<Result<Vec<_>>>()?;
    Ok(PolicyRecord {
        spec: PolicySpec {
            name: r.1,
            mode: r.2.parse().map_err(|e| corrupt("policy mode", e))?,
            on_error: r.3.parse().map_err(|e| corrupt("policy on_error", e))?,
            points,
            attachment: Attachment {
                labels: strings(&r.5, "policy labels")?,
                environments: strings(&r.6, "policy environments")?,
            },
            source: source_of(&r.7)?,
        },
        org: r.0,
        version: r.8,
        created_at: from_millis(r.9)?,
        updated_at: from_millis(r.10)?,
        updated_by: r.11,
    })
}

/// Creates or replaces a policy; true when it was created.
pub(super) fn put(
    tx: &Transaction<'_>,
    org: &str,
    spec: &PolicySpec,
    version: &str,
    audit: &Audit,
) -> Result<(PolicyRecord, bool)> {
    let now = millis(Utc::now());
    let created = get(tx, org, &spec.name)?.is_none();
    let points: Vec<&str> = spec.points.iter().map(|p| p.as_str()).collect();
    tx.prepare_cached(
        "INSERT INTO policies (org_id, name, mode, on_error, points, labels, environments,
            source, version, created_at, updated_at, updated_by)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11)
         ON CONFLICT (org_id, name) DO UPDATE SET mode = excluded.mode,
            on_error = excluded.on_error, points = excluded.points, labels = excluded.labels,
            environments = excluded.environments, source = excluded.source,
            version = excluded.version, updated_at = excluded.updated_at,
            updated_by = excluded.updated_by",
    )?
    .execute(params![
        org,
        spec.name,
        spec.mode.as_str(),
        spec.on_error.as_str(),
        json!(points).to_string(),
        json!(spec.attachment.labels).to_string(),
        json!(spec.attachment.environments).to_string(),
        source_json(&spec.source),
        version,
        now,
        audit.actor,
    ])?;
    append_audit(tx, audit)?;
    let record = get(tx, org, &spec.name)?
        .ok_or_else(|| StoreError::NotFound(format!("policy {:?}", spec.name)))?;
    Ok((record, created))
}

pub(super) fn get(conn: &Connection, org: &str, name: &str) -> Result<Option<PolicyRecord>> {
    Ok(query_decoded(
        conn,
        &format!("SELECT {POLICY_COLUMNS} FROM policies WHERE org_id = ?1 AND name = ?2"),
        params![org, name],
        policy_row,
        policy_record,
    )?
    .pop())
}

/// The org's policies, by name.
pub(super) fn list(conn: &Connection, org: &str) -> Result<Vec<PolicyRecord>> {
    query_decoded(
        conn,
        &format!("SELECT {POLICY_COLUMNS} FROM policies WHERE org_id = ?1 ORDER BY name"),
        params![org],
        policy_row,
        policy_record,
    )
}

pub(super) fn delete(tx: &Transaction<'_>, org: &str, name: &str, audit: &Audit) -> Result<bool> {
    let n = tx
        .prepare_cached("DELETE FROM policies WHERE org_id = ?1 AND name = ?2")?
        .execute(params![org, name])?;
    if n > 0 {
        append_audit(tx, audit)?;
    }
    Ok(n > 0)
}

/// Records the evaluations of `run`'s policies (with the run event that they decided).
pub(super) fn insert_evaluations(
    tx: &Transaction<'_>,
    org: &str,
    subject: &str,
    all: &[NewPolicyEvaluation],
    now: i64,
) -> Result<()> {
    for e in all {
        tx.prepare_cached(
            "INSERT INTO policy_evaluations (org_id, subject, point, policy, version, mode,
                outcome, messages, duration_ms, evaluated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )?
        .execute(params![
            org,
            subject,
            e.point.as_str(),
            e.policy,
            e.version,
            e.mode.as_str(),
            e.outcome.as_str(),
            json!({"deny": e.deny, "warn": e.warn,
                "require_approval": e.require_approval, "skip": e.skip,
                "trigger": e.trigger, "errors": e.errors})
            .to_string(),
            i64::try_from(e.duration_ms).unwrap_or(i64::MAX),
            now,
        ])?;
    }
    Ok(())
}

type EvaluationRow = (
    i64,
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    i64,
    i64,
    Option<String>,
    Option<String>,
    Option<i64>,
);

fn evaluation_row(r: &Row<'_>) -> db::Result<EvaluationRow> {
    EvaluationRow::try_from(r)
}

fn evaluation_record(r: EvaluationRow) -> Result<PolicyEvaluationRecord> {
    let messages: Value = serde_json::from_str(&r.7).map_err(|e| corrupt("policy messages", e))?;
    let list = |k: &str| -> Vec<String> {
        messages[k]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|m| m.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let overridden = match (r.10, r.11, r.12) {
        (Some(by), Some(reason), Some(at)) => Some(PolicyOverride {
            by,
            reason,
            at: from_millis(at)?,
        }),
        _ => None,
    };
    Ok(PolicyEvaluationRecord {
        id: r.0,
        evaluation: NewPolicyEvaluation {
            point: r.2.parse().map_err(|e| corrupt("evaluation point", e))?,
            mode: r.5.parse().map_err(|e| corrupt("evaluation mode", e))?,
            outcome: r.6.parse().map_err(|e| corrupt("evaluation outcome", e))?,
            deny: list("deny"),
            warn: list("warn"),
            require_approval: list("require_approval"),
            skip: list("skip"),
            trigger: list("trigger"),
            errors: list("errors"),
            duration_ms: u64::try_from(r.8).unwrap_or(0),
            policy: r.3,
            version: r.4,
        },
        subject: r.1,
        evaluated_at: from_millis(r.9)?,
        overridden,
    })
}

/// The evaluations recorded on `subject` (a run), oldest first.
pub(super) fn evaluations(conn: &Connection, subject: &str) -> Result<Vec<PolicyEvaluationRecord>> {
    query_decoded(
        conn,
        "SELECT id, subject, point, policy, version, mode, outcome, messages, duration_ms,
            evaluated_at, overridden_by, override_reason, overridden_at
         FROM policy_evaluations WHERE subject = ?1 ORDER BY id",
        params![subject],
        evaluation_row,
        evaluation_record,
    )
}

/// An org admin overrides the soft-mandatory denies holding run `id`: each is marked
/// overridden (by, reason), and the run moves on as the other policies still allow —
/// to the approvals inbox when one asks for approval — with the audit record.
pub(super) fn override_run(
    tx: &Transaction<'_>,
    org: &str,
    id: &str,
    by: &str,
    reason: &str,
    audit: &Audit,
) -> Result<RunEventResult> {
    let run = load_run(tx, id)?
        .filter(|r| r.org == org)
        .ok_or_else(|| StoreError::NotFound(format!("run {id:?} in org {org:?}")))?;
    if run.policy_hold == policy::Verdict::Override {
        mark_overridden(tx, id, by, reason)?;
    }
    let then = verdict_of(tx, id)?;
    apply_event(
        tx,
        &run,
        &RunEventInput {
            event: Event::PolicyOverride { then },
            fencing: None,
            update: RunUpdate::default(),
            audit: Some(audit.clone()),
        },
    )
}

fn mark_overridden(tx: &Transaction<'_>, subject: &str, by: &str, reason: &str) -> Result<()> {
    tx.prepare_cached(
        "UPDATE policy_evaluations SET overridden_by = ?2, override_reason = ?3,
            overridden_at = ?4
         WHERE subject = ?1 AND mode = 'soft_mandatory' AND outcome = 'deny'
           AND overridden_by IS NULL",
    )?
    .execute(params![subject, by, reason, millis(Utc::now())])?;
    Ok(())
}

/// What the evaluations recorded on `subject` add up to now (overrides counted).
fn verdict_of(conn: &Connection, subject: &str) -> Result<policy::Verdict> {
    let counted: Vec<Counted> = evaluations(conn, subject)?
        .iter()
        .map(|e| Counted {
            mode: e.evaluation.mode,
            outcome: e.evaluation.outcome,
            overridden: e.overridden.is_some(),
        })
        .collect();
    Ok(policy::verdict(&counted))
}

/// A paused plan run's policies have spoken — evaluated on its dry run (`evaluations`,
/// recorded), or overridden by an org admin (`overridden`: by, reason) — and the run
/// moves as their verdict says: a hard deny rejects it (`reason`); a soft deny holds it
/// for an override; a request for approval, or a gated environment, keeps it paused in
/// the approvals inbox; otherwise it is queued. A run no longer held for that (aborted,
/// decided meanwhile) only gets the evaluations recorded.
pub(super) fn settle_plan_run(
    tx: &Transaction<'_>,
    org: &str,
    id: &str,
    evaluations: &[NewPolicyEvaluation],
    overridden: Option<(&str, &str)>,
    reason: Option<&str>,
    audit: Option<&Audit>,
) -> Result<PlanRunRecord> {
    use bosun_core::plan_run::{PlanRunEvent, PlanRunState};
    use policy::PlanRunHold;
    let run = super::plan_runs::load(tx, id)?
        .filter(|r| r.org == org)
        .ok_or_else(|| StoreError::NotFound(format!("plan run {id:?} in org {org:?}")))?;
    insert_evaluations(tx, org, id, evaluations, millis(Utc::now()))?;
    let expected = match overridden {
        Some(_) => PlanRunHold::Override,
        None => PlanRunHold::Check,
    };
    if run.state != PlanRunState::Paused || run.policy_hold != Some(expected) {
        if overridden.is_some() {
            return Err(StoreError::NotAwaitingApproval {
                subject: id.to_string(),
                why: format!(
                    "plan run {id} is {}: no soft-mandatory policy deny holds it, nothing to override",
                    run.state
                ),
            });
        }
        if let Some(a) = audit {
            append_audit(tx, a)?;
        }
        return Ok(run);
    }
    if let Some((by, why)) = overridden {
        mark_overridden(tx, id, by, why)?;
    }
    let verdict = verdict_of(tx, id)?;
    let moved = |event| PlanRunEventInput {
        event,
        fencing: None,
        reason: reason.map(str::to_string),
        report: None,
        audit: audit.cloned(),
    };
    match (verdict, PlanRunHold::after(verdict)) {
        (policy::Verdict::Deny, _) => {
            super::plan_runs::event(tx, id, &moved(PlanRunEvent::Reject))?;
        }
        (_, Some(hold)) => {
            tx.prepare_cached(
                "UPDATE plan_runs SET policy_hold = ?2, reason = ?3, updated_at = ?4 WHERE id = ?1",
            )?
            .execute(params![id, hold.as_str(), reason, millis(Utc::now())])?;
            if let Some(a) = audit {
                append_audit(tx, a)?;
            }
        }
        // Nothing holds it but its gated environments: it waits for their approver.
        _ if !run.gated_environments.is_empty() => {
            tx.prepare_cached(
                "UPDATE plan_runs SET policy_hold = NULL, reason = ?2 WHERE id = ?1",
            )?
            .execute(params![id, reason])?;
            if let Some(a) = audit {
                append_audit(tx, a)?;
            }
        }
        _ => {
            super::plan_runs::event(tx, id, &moved(PlanRunEvent::Approve))?;
        }
    }
    super::plan_runs::load(tx, id)?.ok_or_else(|| StoreError::NotFound(format!("plan run {id:?}")))
}

pub(super) fn put_plan_json(
    tx: &Transaction<'_>,
    id: &str,
    fencing: i64,
    body: &[u8],
) -> Result<()> {
    super::runs::put_leased_blob(tx, "run_plan_json", id, fencing, body)
}

pub(super) fn get_plan_json(c: &Connection, id: &str) -> Result<Option<Vec<u8>>> {
    Ok(
        c.prepare_cached("SELECT body FROM run_plan_json WHERE run_id = ?1")?
            .query_row([&id], |r| r.get(0))
            .optional()?,
    )
}
