//! The approvals inbox and plan schedules (one source for both backends; see `super::db`).
//!
//! - Pending approvals are read from the runs themselves: plan runs in `paused`, and
//!   tracked stack runs in `unconfirmed` whose stack's environment requires approval
//!   (such a stack never applies on its own: `stack_autodeploy` answers false for it).
//!   Such a run carries that environment in its `gate` column, set as it enters
//!   `unconfirmed` and kept current here when the stack or the environment changes
//!   ([`regate_stack`], [`regate_environment`]), so the inbox pages through the gated
//!   runs' own index and never past the runs that wait for a plain confirmation. A run
//!   a policy holds for approval (`policy_hold = 'approval'`) is in the inbox too: its
//!   gate is its gated environment, or "" when only the policy asks.
//! - A decision is one transaction: the run's transition (through the plan-run or run
//!   state machine), the decision row and the audit record land together; the decision
//!   row's key is the run, so a run is decided once.
//! - Plan schedules keep the scheduler's bookkeeping beside their settings; a fire —
//!   create the run, or record why not, and move `next_at` — applies only while `next_at`
//!   is still the one the scheduler read.

use bosun_core::approval::{Decision, SubjectKind};
use bosun_core::plan_run::{PlanRunEvent, PlanRunState};

use super::audit::append_audit;
use super::runs::{apply_event, load_run};
use super::*;

fn json_list(raw: &str, what: &str) -> Result<Vec<String>> {
    serde_json::from_str(raw).map_err(|e| corrupt(what, e))
}

/// Which waiting runs a read picks: one run, or a page in (creation, id) order.
#[derive(Clone, Copy)]
enum Pick<'a> {
    One(&'a str),
    Page {
        after: Option<&'a KeyCursor>,
        limit: u32,
    },
}

impl Pick<'_> {
    /// The statement's tail after `base` (its `WHERE` so far) over the table aliased `x`,
    /// and its arguments after the org (`?1`): each pick its own statement, so each reads
    /// the waiting runs' partial index from its place.
    fn tail(&self, base: &str) -> String {
        let order = "ORDER BY x.created_at, x.id";
        match self {
            Pick::One(_) => format!("{base} AND x.id = ?2 {order}"),
            Pick::Page { after: None, .. } => format!("{base} {order} LIMIT ?2"),
            Pick::Page { after: Some(_), .. } => {
                format!("{base} AND (x.created_at, x.id) > (?2, ?3) {order} LIMIT ?4")
            }
        }
    }

    fn query<T>(
        &self,
        conn: &Connection,
        sql: &str,
        org: &str,
        row: impl FnMut(&Row<'_>) -> db::Result<T>,
    ) -> Result<Vec<T>> {
        let mut stmt = conn.prepare_cached(sql)?;
        let rows = match *self {
            Pick::One(id) => stmt.query_map(params![org, id], row)?,
            Pick::Page { after: None, limit } => stmt.query_map(params![org, limit], row)?,
            Pick::Page {
                after: Some(c),
                limit,
            } => stmt.query_map(params![org, c.key, c.id, limit], row)?,
        };
        Ok(rows.collect::<db::Result<Vec<T>>>()?)
    }
}

/// The paused plan runs of `org` that `pick` picks.
fn pending_plan_runs(conn: &Connection, org: &str, pick: Pick<'_>) -> Result<Vec<PendingApproval>> {
    let sql = pick.tail(
        "SELECT x.id, x.plan, x.gated_environments, x.requested_by, x.created_at, x.preview
         FROM plan_runs x WHERE x.org_id = ?1 AND x.state = 'paused'
           AND (x.policy_hold IS NULL OR x.policy_hold = 'approval')",
    );
    let rows = pick.query(conn, &sql, org, |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, i64>(4)?,
            r.get::<_, Option<String>>(5)?,
        ))
    })?;
    let mut out = Vec::new();
    for (id, plan, envs, requested_by, created, preview) in rows {
        out.push(PendingApproval {
            kind: SubjectKind::PlanRun,
            subject: id,
            org: org.to_string(),
            target: plan,
            environments: json_list(&envs, "plan run environments")?,
            requested_by,
            since: from_millis(created)?,
            created_at: created,
            preview,
            plan_summary: None,
        });
    }
    Ok(out)
}

/// The gated environment of a stack: its environment when that requires approval.
pub(super) fn stack_gate(conn: &Connection, org: &str, stack: &str) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached(
            "SELECT e.id FROM stacks s JOIN environments e
               ON e.org_id = s.org_id AND e.id = s.environment
             WHERE s.org_id = ?1 AND s.id = ?2 AND e.requires_approval = 1",
        )?
        .query_row(params![org, stack], |r| r.get(0))
        .optional()?)
}

/// The gated stack runs of `org` waiting in `unconfirmed` that `pick` picks. Only such a
/// run has a `gate` (kept so on every transition), so the statement asks for nothing else:
/// told the state and kind too, PostgreSQL intersected the `runs_kind_state` index with
/// the org's gated runs and sorted all of them for a page.
fn pending_stack_runs(
    conn: &Connection,
    org: &str,
    pick: Pick<'_>,
) -> Result<Vec<PendingApproval>> {
    let sql = pick.tail(
        "SELECT x.id, x.stack_id, x.gate, x.triggered_by,
                COALESCE((SELECT MAX(p.started_at) FROM run_phases p
                          WHERE p.run_id = x.id AND p.state = 'unconfirmed'), x.updated_at),
                x.created_at, x.plan_summary
         FROM runs x
         WHERE x.org_id = ?1 AND x.gate IS NOT NULL",
    );
    let rows = pick.query(conn, &sql, org, |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, i64>(4)?,
            r.get::<_, i64>(5)?,
            r.get::<_, Option<String>>(6)?,
        ))
    })?;
    let mut out = Vec::new();
    for (id, stack, env, triggered_by, since, created, plan) in rows {
        let plan_summary = plan
            .map(|s| serde_json::from_str(&s).map_err(|e| corrupt("plan_summary", e)))
            .transpose()?;
        out.push(PendingApproval {
            kind: SubjectKind::StackRun,
            subject: id,
            org: org.to_string(),
            target: stack,
            // "": only a policy asks for approval.
            environments: [env].into_iter().filter(|e| !e.is_empty()).collect(),
            requested_by: triggered_by,
            since: from_millis(since)?,
            created_at: created,
            preview: None,
            plan_summary,
        });
    }
    Ok(out)
}

/// Sets the gate of the stack's tracked runs waiting in `unconfirmed` to the stack's
/// gated environment (or none) — after the stack's environment changed.
pub(super) fn regate_stack(tx: &Transaction<'_>, org: &str, stack: &str) -> Result<()> {
    let gate = stack_gate(tx, org, stack)?;
    tx.prepare_cached(
        "UPDATE runs SET gate = CASE WHEN policy_hold = 'override' THEN NULL
                ELSE COALESCE(?3, CASE WHEN policy_hold = 'approval' THEN '' END) END
         WHERE org_id = ?1 AND stack_id = ?2 AND state = 'unconfirmed' AND kind = 'tracked'",
    )?
    .execute(params![org, stack, gate])?;
    Ok(())
}

/// Sets the gate of the tracked runs waiting in `unconfirmed` on the stacks of
/// environment `env` — after the environment was created, changed or deleted: `env` when
/// it exists and requires approval, none otherwise.
pub(super) fn regate_environment(tx: &Transaction<'_>, org: &str, env: &str) -> Result<()> {
    tx.prepare_cached(
        "UPDATE runs SET gate = CASE WHEN policy_hold = 'override' THEN NULL ELSE COALESCE(
                (SELECT e.id FROM environments e
                 WHERE e.org_id = ?1 AND e.id = ?2 AND e.requires_approval = 1),
                CASE WHEN policy_hold = 'approval' THEN '' END) END
         WHERE org_id = ?1 AND state = 'unconfirmed' AND kind = 'tracked'
           AND EXISTS (SELECT 1 FROM stacks s
                       WHERE s.org_id = ?1 AND s.id = runs.stack_id AND s.environment = ?2)",
    )?
    .execute(params![org, env])?;
    Ok(())
}

/// A page of the runs of `org` waiting for approval in (creation, id) order: the page of
/// each kind read from its index, merged.
pub(super) fn pending(
    conn: &Connection,
    org: &str,
    after: Option<&KeyCursor>,
    limit: u32,
) -> Result<Vec<PendingApproval>> {
    let pick = Pick::Page { after, limit };
    let mut all = pending_plan_runs(conn, org, pick)?;
    all.extend(pending_stack_runs(conn, org, pick)?);
    all.sort_by(|a, b| {
        a.created_at
            .cmp(&b.created_at)
            .then_with(|| a.subject.cmp(&b.subject))
    });
    all.truncate(limit as usize);
    Ok(all)
}

/// One run of `org` waiting for approval; `NotFound` for a run the org does not have,
/// `NotAwaitingApproval` (saying why) for one that does not wait.
pub(super) fn pending_one(conn: &Connection, org: &str, subject: &str) -> Result<PendingApproval> {
    if let Some(p) = pending_plan_runs(conn, org, Pick::One(subject))?.pop() {
        return Ok(p);
    }
    if let Some(p) = pending_stack_runs(conn, org, Pick::One(subject))?.pop() {
        return Ok(p);
    }
    if let Some(run) = super::plan_runs::load(conn, subject)?.filter(|r| r.org == org) {
        use bosun_core::policy::PlanRunHold;
        let why = match run.policy_hold {
            Some(PlanRunHold::Check) => format!(
                "plan run {subject} waits for its policies, evaluated on its dry run {}: it can be approved once they have said",
                run.preview.as_deref().unwrap_or("-")
            ),
            Some(PlanRunHold::Override) => format!(
                "a soft-mandatory policy denied plan run {subject}: an org admin overrides it first (`bosun run override {subject} --reason …`)"
            ),
            _ => format!(
                "plan run {subject} is {}; only paused runs wait for approval",
                run.state
            ),
        };
        return Err(StoreError::NotAwaitingApproval {
            subject: subject.to_string(),
            why,
        });
    }
    if let Some(run) = load_run(conn, subject)?.filter(|r| r.org == org) {
        let why = match stack_gate(conn, org, &run.stack)? {
            None => format!(
                "run {subject}'s stack {:?} has no environment that requires approval: confirm or discard it instead",
                run.stack
            ),
            Some(_) => format!(
                "run {subject} is a {} run in state {}; only tracked runs waiting in unconfirmed wait for approval",
                run.kind, run.state
            ),
        };
        return Err(StoreError::NotAwaitingApproval {
            subject: subject.to_string(),
            why,
        });
    }
    if let Some(decided) = decision(conn, org, subject)? {
        return Err(StoreError::NotAwaitingApproval {
            subject: subject.to_string(),
            why: format!(
                "{subject} was already {} by {}",
                decided.decision.as_str(),
                decided.decided_by
            ),
        });
    }
    Err(StoreError::NotFound(format!(
        "run {subject:?} in org {org:?}"
    )))
}

const DECISION_COLUMNS: &str = "subject_id, org_id, subject_kind, target, environments,
    requested_by, decision, decided_by, comment, decided_at";

type DecisionRow = (
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    Option<String>,
    i64,
);

fn decision_row(r: &Row<'_>) -> db::Result<DecisionRow> {
    DecisionRow::try_from(r)
}

fn decision_record(r: DecisionRow) -> Result<ApprovalRecord> {
    Ok(ApprovalRecord {
        kind: SubjectKind::parse(&r.2).ok_or_else(|| corrupt("approval kind", &r.2))?,
        environments: json_list(&r.4, "approval environments")?,
        decision: Decision::parse(&r.6).ok_or_else(|| corrupt("approval decision", &r.6))?,
        decided_at: from_millis(r.9)?,
        subject: r.0,
        org: r.1,
        target: r.3,
        requested_by: r.5,
        decided_by: r.7,
        comment: r.8,
    })
}

fn decision(conn: &Connection, org: &str, subject: &str) -> Result<Option<ApprovalRecord>> {
    Ok(query_decoded(
        conn,
        &format!("SELECT {DECISION_COLUMNS} FROM approvals WHERE org_id = ?1 AND subject_id = ?2"),
        params![org, subject],
        decision_row,
        decision_record,
    )?
    .pop())
}

pub(super) fn decisions(
    conn: &Connection,
    org: &str,
    before: Option<&str>,
    limit: u32,
) -> Result<Vec<ApprovalRecord>> {
    let before_at: Option<i64> = match before {
        Some(subject) => Some(
            conn.prepare_cached(
                "SELECT decided_at FROM approvals WHERE org_id = ?1 AND subject_id = ?2",
            )?
            .query_row(params![org, subject], |r| r.get(0))
            .optional()?
            .ok_or_else(|| StoreError::NotFound(format!("decision on run {subject:?}")))?,
        ),
        None => None,
    };
    query_decoded(
        conn,
        &format!(
            "SELECT {DECISION_COLUMNS} FROM approvals WHERE org_id = ?1
             AND (?2 IS NULL OR decided_at < ?2 OR (decided_at = ?2 AND subject_id < ?3))
             ORDER BY decided_at DESC, subject_id DESC LIMIT ?4"
        ),
        params![org, before_at, before, limit],
        decision_row,
        decision_record,
    )
}

fn reject_reason(input: &ApprovalDecisionInput) -> String {
    match &input.comment {
        Some(c) => format!("rejected by {}: {c}", input.decided_by),
        None => format!("rejected by {}", input.decided_by),
    }
}

/// Applies a decision: the run's transition, the decision row and the audit record.
pub(super) fn decide(
    tx: &Transaction<'_>,
    input: &ApprovalDecisionInput,
) -> Result<(ApprovalRecord, ApprovalOutcome)> {
    let pending = pending_one(tx, &input.org, &input.subject)?;
    let reject = input.decision == Decision::Reject;
    let outcome = match pending.kind {
        SubjectKind::PlanRun => {
            let event = PlanRunEventInput {
                event: if reject {
                    PlanRunEvent::Reject
                } else {
                    PlanRunEvent::Approve
                },
                fencing: None,
                reason: reject.then(|| reject_reason(input)),
                report: None,
                audit: Some(input.audit.clone()),
            };
            let run = super::plan_runs::event(tx, &input.subject, &event)?;
            debug_assert!(run.state != PlanRunState::Paused);
            ApprovalOutcome::PlanRun(Box::new(run))
        }
        SubjectKind::StackRun => {
            let run = load_run(tx, &input.subject)?
                .ok_or_else(|| StoreError::NotFound(format!("run {:?}", input.subject)))?;
            let event = RunEventInput {
                event: if reject {
                    Event::Discard
                } else {
                    Event::Confirm
                },
                fencing: None,
                update: RunUpdate {
                    reason: reject.then(|| reject_reason(input)),
                    ..RunUpdate::default()
                },
                audit: Some(input.audit.clone()),
            };
            let out = apply_event(tx, &run, &event)?;
            ApprovalOutcome::StackRun(Box::new(out.run))
        }
    };
    let now = Utc::now();
    tx.prepare_cached(
        "INSERT INTO approvals (subject_id, org_id, subject_kind, target, environments,
            requested_by, decision, decided_by, comment, decided_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?
    .execute(params![
        pending.subject,
        pending.org,
        pending.kind.as_str(),
        pending.target,
        Value::from(pending.environments.clone()).to_string(),
        pending.requested_by,
        input.decision.as_str(),
        input.decided_by,
        input.comment,
        millis(now)
    ])
    .map_err(|e| {
        if is_unique_violation(&e) {
            StoreError::NotAwaitingApproval {
                subject: input.subject.clone(),
                why: format!("{} was already decided", input.subject),
            }
        } else {
            e.into()
        }
    })?;
    let record = decision(tx, &input.org, &input.subject)?
        .ok_or_else(|| StoreError::NotFound(format!("approval of {:?}", input.subject)))?;
    Ok((record, outcome))
}

// ---- Plan schedules ----

const SCHEDULE_COLUMNS: &str = "org_id, plan, cron, timezone, inputs, updated_at, updated_by,
    armed_cron, armed_timezone, since, next_at, last_fire_at, last_fire_run, last_fire_note,
    from_file";

struct ScheduleRow {
    org: String,
    plan: String,
    cron: String,
    timezone: String,
    inputs: String,
    updated_at: i64,
    updated_by: String,
    armed_cron: Option<String>,
    armed_timezone: Option<String>,
    since: Option<i64>,
    next_at: Option<i64>,
    last_fire_at: Option<i64>,
    last_fire_run: Option<String>,
    last_fire_note: Option<String>,
    from_file: bool,
}

fn schedule_row(r: &Row<'_>) -> db::Result<ScheduleRow> {
    Ok(ScheduleRow {
        org: r.get(0)?,
        plan: r.get(1)?,
        cron: r.get(2)?,
        timezone: r.get(3)?,
        inputs: r.get(4)?,
        updated_at: r.get(5)?,
        updated_by: r.get(6)?,
        armed_cron: r.get(7)?,
        armed_timezone: r.get(8)?,
        since: r.get(9)?,
        next_at: r.get(10)?,
        last_fire_at: r.get(11)?,
        last_fire_run: r.get(12)?,
        last_fire_note: r.get(13)?,
        from_file: r.get::<_, i64>(14)? != 0,
    })
}

fn schedule_record(r: ScheduleRow) -> Result<PlanScheduleRecord> {
    let armed = match (r.armed_cron, r.armed_timezone, r.since, r.next_at) {
        (Some(cron), Some(timezone), Some(since), Some(next_at)) => Some(PlanScheduleArmed {
            cron,
            timezone,
            since: from_millis(since)?,
            next_at: from_millis(next_at)?,
            last_fire_at: opt_from_millis(r.last_fire_at)?,
            last_fire_run: r.last_fire_run,
            last_fire_note: r.last_fire_note,
        }),
        _ => None,
    };
    Ok(PlanScheduleRecord {
        inputs: serde_json::from_str(&r.inputs).map_err(|e| corrupt("plan schedule inputs", e))?,
        updated_at: from_millis(r.updated_at)?,
        org: r.org,
        plan: r.plan,
        cron: r.cron,
        timezone: r.timezone,
        updated_by: r.updated_by,
        from_file: r.from_file,
        armed,
    })
}

pub(super) fn schedules(
    conn: &Connection,
    org: Option<&str>,
    plan: Option<&str>,
) -> Result<Vec<PlanScheduleRecord>> {
    query_decoded(
        conn,
        &format!(
            "SELECT {SCHEDULE_COLUMNS} FROM plan_schedules WHERE {org} AND {plan}
             ORDER BY org_id, plan",
            org = filter_if(org.is_some(), "org_id = ?1", 1),
            plan = filter_if(plan.is_some(), "plan = ?2", 2),
        ),
        params![org, plan],
        schedule_row,
        schedule_record,
    )
}

/// Refuses an API change to a schedule the plan's file sets.
fn refuse_file_schedule(tx: &Transaction<'_>, org: &str, plan: &str) -> Result<()> {
    if exists(
        tx,
        "SELECT 1 FROM plan_schedules WHERE org_id = ?1 AND plan = ?2 AND from_file <> 0",
        params![org, plan],
    )? {
        return Err(StoreError::ScheduleFromFile {
            plan: plan.to_string(),
        });
    }
    Ok(())
}

/// Writes a plan's schedule settings; the bookkeeping stays: the scheduler re-arms a
/// schedule whose settings differ from what it armed.
fn upsert_schedule(tx: &Transaction<'_>, input: &PlanScheduleInput, from_file: bool) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO plan_schedules (org_id, plan, cron, timezone, inputs, updated_at, updated_by,
            from_file)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
         ON CONFLICT (org_id, plan) DO UPDATE SET cron = excluded.cron,
            timezone = excluded.timezone, inputs = excluded.inputs,
            updated_at = excluded.updated_at, updated_by = excluded.updated_by,
            from_file = excluded.from_file",
    )?
    .execute(params![
        input.org,
        input.plan,
        input.cron,
        input.timezone,
        Value::Object(input.inputs.clone().into_iter().collect()).to_string(),
        millis(Utc::now()),
        input.updated_by,
        i64::from(from_file)
    ])?;
    Ok(())
}

/// Sets a plan's schedule through the API (`NotFound` for an unknown plan,
/// `ScheduleFromFile` when the plan's file sets it).
pub(super) fn put_schedule(
    tx: &Transaction<'_>,
    input: &PlanScheduleInput,
    audit: &Audit,
) -> Result<PlanScheduleRecord> {
    if !exists(
        tx,
        "SELECT 1 FROM plans WHERE org_id = ?1 AND name = ?2",
        params![input.org, input.plan],
    )? {
        return Err(StoreError::NotFound(format!(
            "plan {:?} in org {:?}",
            input.plan, input.org
        )));
    }
    refuse_file_schedule(tx, &input.org, &input.plan)?;
    upsert_schedule(tx, input, false)?;
    append_audit(tx, audit)?;
    schedules(tx, Some(&input.org), Some(&input.plan))?
        .pop()
        .ok_or_else(|| StoreError::NotFound(format!("schedule of plan {:?}", input.plan)))
}

/// Removes a plan's schedule through the API (`ScheduleFromFile` when its file sets it).
pub(super) fn delete_schedule(
    tx: &Transaction<'_>,
    org: &str,
    plan: &str,
    audit: &Audit,
) -> Result<bool> {
    refuse_file_schedule(tx, org, plan)?;
    let n = tx
        .prepare_cached("DELETE FROM plan_schedules WHERE org_id = ?1 AND plan = ?2")?
        .execute(params![org, plan])?;
    if n > 0 {
        append_audit(tx, audit)?;
    }
    Ok(n > 0)
}

/// Keeps a plan's schedule to what its just-saved file says: set (marked as the file's)
/// when it has a `schedule:`, removed when it has none and the schedule was the file's.
/// Returns what changed: `"set"`, `"removed"` or `None`.
pub(super) fn save_file_schedule(
    tx: &Transaction<'_>,
    plan: &NewPlan,
    actor: &str,
) -> Result<Option<&'static str>> {
    match &plan.schedule {
        Some(s) => {
            let input = PlanScheduleInput {
                org: plan.org.clone(),
                plan: plan.name.clone(),
                cron: s.cron.clone(),
                timezone: s.timezone.clone(),
                inputs: s.inputs.clone(),
                updated_by: actor.to_string(),
            };
            upsert_schedule(tx, &input, true)?;
            Ok(Some("set"))
        }
        None => {
            let n = tx
                .prepare_cached(
                    "DELETE FROM plan_schedules WHERE org_id = ?1 AND plan = ?2 AND from_file <> 0",
                )?
                .execute(params![plan.org, plan.name])?;
            Ok((n > 0).then_some("removed"))
        }
    }
}

pub(super) fn fire(tx: &Transaction<'_>, f: &PlanScheduleFire) -> Result<PlanScheduleFired> {
    let Some(current) = schedules(tx, Some(&f.org), Some(&f.plan))?.pop() else {
        return Ok(PlanScheduleFired::Raced);
    };
    let stored_next = current.armed.as_ref().map(|a| millis(a.next_at));
    if stored_next != f.expected_next.map(millis) {
        return Ok(PlanScheduleFired::Raced);
    }
    let now = millis(f.now);
    if f.since.is_some() {
        // Arming: a new schedule (or changed settings) counts from `since`.
        tx.prepare_cached(
            "UPDATE plan_schedules SET armed_cron = ?3, armed_timezone = ?4, since = ?5,
                next_at = ?6
             WHERE org_id = ?1 AND plan = ?2",
        )?
        .execute(params![
            f.org,
            f.plan,
            f.cron,
            f.timezone,
            millis(f.since.unwrap_or(f.now)),
            millis(f.next_at)
        ])?;
        return Ok(PlanScheduleFired::Armed);
    }
    let (outcome, started, note) = match &f.run {
        None => {
            let reason = f
                .note
                .clone()
                .unwrap_or_else(|| "skipped: the run could not be created".into());
            (
                PlanScheduleFired::Skipped {
                    reason: reason.clone(),
                },
                None,
                Some(reason),
            )
        }
        Some(run) => {
            let audit = Audit {
                org: Some(run.org.clone()),
                actor: "schedule".into(),
                token_id: None,
                action: "plan_run.create".into(),
                target: format!("plan:{}", run.plan),
                detail: json!({"run": run.id, "trigger": "schedule", "dry_run": run.dry_run}),
            };
            match super::plan_runs::create(tx, run, &audit) {
                Ok(created) => {
                    let id = created.id.clone();
                    (
                        PlanScheduleFired::Started(Box::new(created)),
                        Some(id),
                        f.note.clone(),
                    )
                }
                Err(e @ StoreError::RunInProgress { .. }) => {
                    let reason = format!("skipped: {e}");
                    (
                        PlanScheduleFired::Skipped {
                            reason: reason.clone(),
                        },
                        None,
                        Some(reason),
                    )
                }
                Err(e) => return Err(e),
            }
        }
    };
    tx.prepare_cached(
        "UPDATE plan_schedules SET next_at = ?3, last_fire_at = ?4, last_fire_run = ?5,
            last_fire_note = ?6
         WHERE org_id = ?1 AND plan = ?2",
    )?
    .execute(params![
        f.org,
        f.plan,
        millis(f.next_at),
        now,
        started,
        note
    ])?;
    Ok(outcome)
}
