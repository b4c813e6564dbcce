//! Drift detection: scheduled and manual drift checks, their outcome, the
//! reconcile run, each stack's last successful check, and the stale-check alert.
//!
//! - A drift run is a plan with detailed exit codes; its outcome comes from
//!   [`bosun_core::drift::result_of`]: `no_drift`, `drift_detected`, or `failed` for any
//!   other end (integrations or clone failing before the plan, engine errors, timeouts,
//!   a runner gone dark, a cancel). Drift runs are never skipped.
//! - The scheduler settles every ended drift run once: it records the result and, for
//!   `drift_detected` on a stack with `reconcile`, starts a tracked run at the branch head
//!   with trigger `schedule`, triggered by `run:<drift run>` (the run's `reconciles`
//!   names it, and the drift run's `reconcile_run` names the tracked run).
//! - Never two open drift runs of one stack: a schedule that fires while one is open
//!   records the skip on the schedule; a manual check is refused (409).
//! - Stale: the last successful check (or the schedule's start, with none) is older than
//!   twice the schedule's interval. One `stale_drift_check` notification per episode (the
//!   event's dedup key is the stack and that starting point, so the next success starts
//!   a new episode), and the `bosun_drift_check_age_seconds` gauge.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use bosun_api::{DriftCheck, Run, StackDriftStatus};
use bosun_core::authz::Access;
use bosun_core::cron::Schedule;
use bosun_core::drift::{staleness, DriftResult};
use bosun_core::run::{RunKind, Trigger};
use bosun_core::Role;
use bosun_store::{
    DriftCheckRecord, DriftFire, DriftFired, DriftScheduleRecord, KeyCursor, NewNotificationEvent,
    NewRun, NotificationEventKind,
};
use chrono::{DateTime, Utc};
use serde_json::json;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::ApiPath;
use crate::route::{route, Route};
use crate::schedules::rule::{fire_due, Armed, Cron, Due, Fire};
use crate::service::drift::result;

pub fn routes() -> Vec<Route> {
    vec![route!(Access::Org(Role::Operator), start_check)]
}

/// Start a drift check of a stack now (operator+): a drift run with trigger `manual`.
/// Refused (409 `has_open_runs`) while a drift run of the stack is open.
#[utoipa::path(post, path = "/api/v1/orgs/{org}/stacks/{stack}/drift-checks", tag = "runs",
    params(("org" = String, Path), ("stack" = String, Path)),
    responses((status = 201, body = Run), (status = 409, body = bosun_api::ErrorBody),
        (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn start_check(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, stack)): ApiPath<(String, String)>,
) -> Result<(StatusCode, Json<Run>), ApiError> {
    let run = crate::service::runs::start_drift_check(&state, &caller, &org, &stack).await?;
    Ok((StatusCode::CREATED, Json(run)))
}

/// A stack's drift checks, fired by the scheduler: a due fire starts a drift run at the
/// branch head, unless one is still open (the skip is recorded).
#[async_trait::async_trait]
impl Cron for DriftScheduleRecord {
    type Run = NewRun;
    const MISSED: &'static str = "scheduled check(s)";

    fn schedule(&self) -> Option<Schedule> {
        self.drift.parsed().ok()
    }

    fn armed(&self) -> Option<Armed<'_>> {
        self.state.as_ref().map(|s| Armed {
            expression: &s.schedule,
            timezone: &s.timezone,
            next_at: s.next_at,
        })
    }

    async fn due(&self, state: &AppState) -> Result<Due<NewRun>, ApiError> {
        let Some(stack) = state.store.get_stack(&self.org, &self.stack).await? else {
            return Ok(Due::Gone);
        };
        Ok(Due::Run(NewRun {
            id: crate::service::runs::new_run_id(),
            org: self.org.clone(),
            stack: self.stack.clone(),
            kind: RunKind::Drift,
            trigger: Trigger::Schedule,
            triggered_by: "system".into(),
            commit: None,
            branch: stack.spec.branch,
            retry_of: None,
            pull_request: None,
        }))
    }

    async fn store(&self, state: &AppState, fire: Fire<NewRun>) -> Result<(), ApiError> {
        let fire = DriftFire {
            org: self.org.clone(),
            stack: self.stack.clone(),
            schedule: fire.expression,
            timezone: fire.timezone,
            expected_next: fire.expected_next,
            next_at: fire.next_at,
            since: fire.since,
            run: fire.run,
            note: fire.note,
            now: fire.now,
        };
        match state.store.fire_drift_schedule(&fire).await? {
            DriftFired::Started(run) => {
                tracing::info!(org = %self.org, stack = %self.stack, run = %run.id, "drift check started");
                state.wake_dispatch();
            }
            DriftFired::Skipped { open_run } => {
                tracing::info!(org = %self.org, stack = %self.stack, open_run = %open_run,
                    "drift check skipped: one is still open");
            }
            DriftFired::Armed | DriftFired::Raced => {}
        }
        Ok(())
    }
}

/// Settles ended drift runs: records each result once and starts the reconcile runs.
pub async fn settle_ended(state: &AppState) -> Result<(), ApiError> {
    for run in state.store.unsettled_drift_runs(100).await? {
        let result = result(&run);
        let reconcile = if result == DriftResult::DriftDetected {
            state
                .store
                .get_stack(&run.org, &run.stack)
                .await?
                .filter(|s| s.spec.drift_detection.as_ref().is_some_and(|d| d.reconcile))
                .map(|s| NewRun {
                    id: crate::service::runs::new_run_id(),
                    org: run.org.clone(),
                    stack: run.stack.clone(),
                    kind: RunKind::Tracked,
                    trigger: Trigger::Schedule,
                    triggered_by: format!("run:{}", run.id),
                    // The branch head: applying the commit the check planned could roll
                    // back what was merged since.
                    commit: None,
                    branch: s.spec.branch,
                    retry_of: None,
                    pull_request: None,
                })
        } else {
            None
        };
        if let Some(check) = state
            .store
            .settle_drift_run(&run.id, result, reconcile.as_ref())
            .await?
        {
            tracing::info!(run = %run.id, result = result.as_str(), reconcile = ?check.reconcile_run,
                "drift check settled");
            if check.reconcile_run.is_some() {
                state.wake_dispatch();
            }
        }
    }
    Ok(())
}

/// The stale rule over one stack at `now`.
fn stale_of(rec: &DriftScheduleRecord, now: DateTime<Utc>) -> Option<bosun_core::drift::Staleness> {
    let schedule = rec.drift.parsed().ok()?;
    let since = rec.state.as_ref()?.since;
    staleness(
        &schedule,
        rec.last_success.as_ref().map(|c| c.checked_at),
        since,
        now,
    )
}

/// Rows a scheduler pass reads from the store at a time.
const BATCH: u32 = 500;

/// Fills `stale_at` of schedules stored before the store kept it (the first passes after
/// an upgrade; nothing after).
pub async fn fill_stale_at(state: &AppState) -> Result<(), ApiError> {
    while state.store.fill_drift_stale_at(BATCH).await? == BATCH as usize {}
    Ok(())
}

/// Raises one `stale_drift_check` notification per staleness episode: for the schedules
/// whose episode turned stale since the last pass (an index read, not every stack).
pub async fn alert_stale(state: &AppState, now: DateTime<Utc>) -> Result<(), ApiError> {
    loop {
        let due = state.store.drift_alerts_due(now, BATCH).await?;
        let full = due.len() == BATCH as usize;
        for rec in due {
            let alert_at = rec.state.as_ref().and_then(|s| s.alert_at);
            alert_one(state, &rec, now).await?;
            if let Some(at) = alert_at {
                state
                    .store
                    .drift_alert_raised(&rec.org, &rec.stack, at)
                    .await?;
            }
        }
        if !full {
            return Ok(());
        }
    }
}

/// Raises the `stale_drift_check` notification of one stack's episode, when it is stale.
async fn alert_one(
    state: &AppState,
    rec: &DriftScheduleRecord,
    now: DateTime<Utc>,
) -> Result<(), ApiError> {
    let Some(st) = stale_of(rec, now).filter(|s| s.stale) else {
        return Ok(());
    };
    let base = rec
        .last_success
        .as_ref()
        .map(|c| c.checked_at)
        .or(rec.state.as_ref().map(|s| s.since))
        .unwrap_or(now);
    let event = NewNotificationEvent {
        kind: NotificationEventKind::StaleDriftCheck,
        run_kind: None,
        run_state: None,
        payload: json!({
            "org": rec.org,
            "stack": rec.stack,
            "schedule": rec.drift.schedule,
            "timezone": rec.drift.timezone,
            "last_success": rec.last_success.as_ref().map(check_json),
            "age_seconds": st.age.num_seconds(),
            "interval_seconds": st.interval.num_seconds(),
            "message": format!(
                "stack {} has had no successful drift check for {}s (more than twice its {}s interval)",
                rec.stack, st.age.num_seconds(), st.interval.num_seconds()
            ),
        }),
        dedup_key: Some(format!(
            "stale_drift_check:{}:{}",
            rec.stack,
            base.timestamp_millis()
        )),
        only_target: None,
    };
    if state
        .store
        .add_notification_event(&rec.org, &event)
        .await?
        .is_some()
    {
        tracing::warn!(org = %rec.org, stack = %rec.stack, age_seconds = st.age.num_seconds(),
            "drift checks are stale");
    }
    Ok(())
}

/// One scheduler pass over drift schedules at `now`: arms the stacks whose settings were
/// saved since the last pass, then fires the due schedules — each an index read of just
/// those rows, however many stacks are drift-checked.
pub async fn fire_pass(state: &AppState, now: DateTime<Utc>) -> Result<(), ApiError> {
    let tickets = state.store.drift_arming(BATCH * 4).await?;
    if !tickets.is_empty() {
        let mut recs = Vec::with_capacity(tickets.len());
        for t in &tickets {
            recs.extend(
                state
                    .store
                    .drift_schedules(Some(&t.org), Some(&t.stack))
                    .await?,
            );
        }
        fire_due(state, recs, now).await?;
        state.store.drift_armed(&tickets).await?;
    }
    // Each due fire moves its `next_at` past `now`; a batch that fired nothing (schedules
    // this build cannot read) ends the pass rather than reading it again.
    for _ in 0..64 {
        let due = state.store.drift_schedules_due(now, BATCH).await?;
        let full = due.len() == BATCH as usize;
        let first = due.first().map(|r| (r.org.clone(), r.stack.clone()));
        fire_due(state, due, now).await?;
        if !full {
            break;
        }
        let again = state.store.drift_schedules_due(now, 1).await?;
        if again.first().map(|r| (r.org.clone(), r.stack.clone())) == first {
            break;
        }
    }
    Ok(())
}

fn check_json(c: &DriftCheckRecord) -> serde_json::Value {
    json!({"run": c.run, "result": c.result.as_str(), "checked_at": c.checked_at})
}

fn check_wire(c: DriftCheckRecord) -> DriftCheck {
    DriftCheck {
        run: c.run,
        result: c.result.as_str().to_string(),
        checked_at: c.checked_at,
        reconcile_run: c.reconcile_run,
    }
}

fn status_wire(rec: DriftScheduleRecord, now: DateTime<Utc>) -> StackDriftStatus {
    let st = stale_of(&rec, now);
    StackDriftStatus {
        next_check_at: rec.state.as_ref().map(|s| s.next_at),
        last_fire_note: rec.state.and_then(|s| s.last_fire_note),
        last_success: rec.last_success.map(check_wire),
        last_check: rec.last_check.map(check_wire),
        open_run: rec.open_run,
        age_seconds: st.as_ref().map(|s| s.age.num_seconds()),
        stale: st.is_some_and(|s| s.stale),
    }
}

/// How far the dashboard counts an org's stale stacks: past it the page says "more than"
/// (the exact figure per org is `/metrics`' `bosun_drift_checks_stale`), so a page costs
/// the same for an org of a hundred stacks and one of a million.
pub const STALE_COUNT_CAP: u32 = 1000;

/// One page of an org's drift dashboard (stale first, the most overdue first): each
/// stack with its settings and status, the cursor after it, and the org's stale count
/// (up to [`STALE_COUNT_CAP`] + 1: more than the cap reads as "more than").
pub async fn dashboard_page(
    state: &AppState,
    org: &str,
    after: Option<&KeyCursor>,
    limit: u32,
) -> Result<DashboardPage, ApiError> {
    let now = state.config.schedules.clock.now();
    let rows = state
        .store
        .drift_dashboard(org, after, limit)
        .await?
        .into_iter()
        .map(|r| {
            let cursor = r.cursor();
            (
                r.stack.clone(),
                r.drift.clone(),
                status_wire(r, now),
                cursor,
            )
        })
        .collect();
    Ok(DashboardPage {
        rows,
        stale_count: state
            .store
            .count_stale_drift(org, now, STALE_COUNT_CAP + 1)
            .await?,
    })
}

/// See [`dashboard_page`].
pub struct DashboardPage {
    pub rows: Vec<(
        String,
        bosun_core::stack::DriftDetection,
        StackDriftStatus,
        Option<KeyCursor>,
    )>,
    pub stale_count: u64,
}

/// A stack's drift status now, from its schedule's record.
pub fn status(state: &AppState, rec: DriftScheduleRecord) -> StackDriftStatus {
    status_wire(rec, state.config.schedules.clock.now())
}

/// What `/metrics` says of stale drift checking: how many drift-checked stacks of each
/// org are stale now, and for the `limit` most overdue, seconds since their last
/// successful check (or since checking began) — `bosun_drift_checks_stale{org}` and
/// `bosun_drift_check_age_seconds{org,stack}`.
pub struct StaleCheckAges {
    pub by_org: std::collections::BTreeMap<String, i64>,
    /// (org, stack, age in seconds), most overdue first.
    pub ages: Vec<(String, String, f64)>,
}

pub async fn stale_check_ages(state: &AppState, limit: u32) -> Result<StaleCheckAges, ApiError> {
    let now = state.config.schedules.clock.now();
    let stale = state.store.stale_drift_checks(now, limit).await?;
    let ages = stale
        .oldest
        .into_iter()
        .map(|b| {
            let base = b.last_success_at.unwrap_or(b.since);
            let age = (now - base).num_milliseconds().max(0) as f64 / 1000.0;
            (b.org, b.stack, age)
        })
        .collect();
    Ok(StaleCheckAges {
        by_org: stale.by_org,
        ages,
    })
}
