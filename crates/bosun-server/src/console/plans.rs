//! The plans pages: the org's plans (version, targets, schedule, last run), one plan
//! (its source, schedule, recent runs, the Run and Dry run buttons with a field per
//! input, filled with its default), the org's recent
//! plan runs, and a plan run (who started it, per-host results, what each step printed
//! on each host, the live log, the dry run's report and its unresolved references, and
//! for a paused run its preview's per-host results and diffs beside the decision). Runs
//! are started and aborted only through the API's handlers.

use std::collections::{BTreeMap, HashMap};

use axum::extract::{Form, Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use bosun_api::{PlanHostResult, PlanRunCreate, PlanRunView};
use bosun_core::plan_run::{output_tail, PlanRunState};
use serde::Deserialize;
use serde_json::Value;

use super::audit::When;
use super::log::{page_log, PageLog};
use super::session::{redirect_with_flash, CsrfOnly};
use super::{render, urlencode, Layout, PageError, Session, StreamQuery};
use crate::app::AppState;
use crate::error::ApiError;
use crate::extract::ApiPath;
use crate::service::plan_runs;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/orgs/{org}/plans", get(list))
        .route("/orgs/{org}/plans/{plan}", get(show))
        .route("/orgs/{org}/plans/{plan}/runs", post(start))
        .route("/orgs/{org}/plan-runs", get(runs))
        .route("/orgs/{org}/plan-runs/{run}", get(run_page))
        .route("/orgs/{org}/plan-runs/{run}/abort", post(abort))
        .route("/orgs/{org}/plan-runs/{run}/log/stream", get(log_stream))
}

/// Plans per page, and plan runs on the org's runs page.
const PAGE: usize = 50;
/// Runs on a plan's page.
const RECENT_RUNS: u32 = 20;

/// A plan run in a table.
struct RunItem {
    id: String,
    plan: String,
    state: String,
    dry_run: bool,
    trigger: String,
    requested_by: String,
    hosts: usize,
    at: When,
}

impl RunItem {
    fn of(r: &PlanRunView) -> Self {
        RunItem {
            id: r.id.clone(),
            plan: r.plan.clone(),
            state: r.state.clone(),
            dry_run: r.dry_run,
            trigger: r.trigger.clone(),
            requested_by: r.requested_by.clone(),
            hosts: r.hosts.len(),
            at: When::of(r.created_at),
        }
    }

    fn of_record(r: &bosun_store::PlanRunRecord) -> Self {
        RunItem {
            id: r.id.clone(),
            plan: r.plan.clone(),
            state: r.state.to_string(),
            dry_run: r.dry_run,
            trigger: r.trigger.to_string(),
            requested_by: r.requested_by.clone(),
            hosts: r.hosts.len(),
            at: When::of(r.created_at),
        }
    }
}

/// What a plan targets, in words.
fn targets_text(hosts: &[String], labels: &[String], environments: &[String]) -> String {
    let mut parts = Vec::new();
    if !hosts.is_empty() {
        parts.push(format!("hosts {}", hosts.join(", ")));
    }
    if !labels.is_empty() {
        parts.push(format!("labels {}", labels.join(", ")));
    }
    if !environments.is_empty() {
        parts.push(format!("environments {}", environments.join(", ")));
    }
    if parts.is_empty() {
        "no targets".into()
    } else {
        parts.join("; ")
    }
}

struct PlanRow {
    name: String,
    version: i64,
    targets: String,
    schedule: Option<String>,
    last_run: Option<RunItem>,
    updated: When,
    updated_by: String,
}

#[derive(askama::Template)]
#[template(path = "console/plans.html")]
struct PlansPage {
    layout: Layout,
    rows: Vec<PlanRow>,
    next: Option<String>,
    first_page: bool,
}

#[derive(Deserialize)]
pub struct AfterQuery {
    after: Option<String>,
}

async fn list(
    State(state): State<AppState>,
    session: Session,
    Path(org): Path<String>,
    Query(q): Query<AfterQuery>,
) -> Result<Response, PageError> {
    let layout = Layout::new(
        session,
        &org,
        "plans",
        "Plans",
        crate::plans::resources::LIST_PLANS,
    )?;
    // The store's plans carry their source (targets); the list is ordered by name.
    let plans = state.store.list_plans(&org).await?;
    let schedules: HashMap<String, String> = state
        .store
        .plan_schedules(Some(&org), None)
        .await?
        .into_iter()
        .map(|s| (s.plan, format!("{} ({})", s.cron, s.timezone)))
        .collect();
    let mut page: Vec<_> = plans
        .into_iter()
        .filter(|p| q.after.as_deref().is_none_or(|a| p.name.as_str() > a))
        .take(PAGE + 1)
        .collect();
    let next = (page.len() > PAGE).then(|| page[PAGE - 1].name.clone());
    page.truncate(PAGE);
    let mut rows = Vec::with_capacity(page.len());
    for p in page {
        let targets = match bosun_plans::model::parse_plan(
            std::path::Path::new(&format!("{}.yaml", p.name)),
            &p.source,
        ) {
            Ok(plan) => targets_text(
                &plan.targets.hosts,
                &plan.targets.labels,
                &plan.targets.environments,
            ),
            Err(e) => format!("the stored plan no longer parses: {e}"),
        };
        // One read per row of a bounded page, like the stacks page's last run.
        let last = state
            .store
            .list_plan_runs(&org, Some(&p.name), None, 1)
            .await?;
        rows.push(PlanRow {
            schedule: schedules.get(&p.name).cloned(),
            last_run: last.first().map(RunItem::of_record),
            updated: When::of(p.updated_at),
            updated_by: p.updated_by,
            targets,
            version: p.version,
            name: p.name,
        });
    }
    let flash = layout.flash.clone();
    render(
        flash.as_ref(),
        &PlansPage {
            layout,
            rows,
            next,
            first_page: q.after.is_none(),
        },
    )
}

struct ScheduleInfo {
    cron: String,
    timezone: String,
    next: Option<When>,
    inputs: String,
    last_note: Option<String>,
}

/// A field of the Run form: one of the plan's inputs, filled with its default.
struct InputField {
    name: String,
    /// The default as typed into the field (a string as is, other values as JSON).
    default: String,
    has_default: bool,
}

/// How an input's default shows in its field — and what the field holds when left alone.
fn default_text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

#[derive(askama::Template)]
#[template(path = "console/plan.html")]
struct PlanPage {
    layout: Layout,
    name: String,
    version: i64,
    source: String,
    targets: String,
    hosts: String,
    steps: Vec<(String, String)>,
    warnings: Vec<String>,
    schedule: Option<ScheduleInfo>,
    runs: Vec<RunItem>,
    can_run: bool,
    inputs: Vec<InputField>,
    updated: When,
    updated_by: String,
}

async fn show(
    State(state): State<AppState>,
    session: Session,
    Path((org, plan)): Path<(String, String)>,
) -> Result<Response, PageError> {
    let layout = Layout::new(
        session,
        &org,
        "plans",
        plan.clone(),
        crate::plans::resources::SHOW_PLAN,
    )?;
    let info = crate::service::plans::show(&state, &org, &plan).await?;
    let schedule = match crate::service::plan_schedules::show(&state, &org, &plan).await {
        Ok(s) => Some(s),
        Err(ApiError::NotFound(_)) => None,
        Err(e) => return Err(e.into()),
    };
    let recent = crate::paging::PageQuery {
        cursor: None,
        limit: Some(RECENT_RUNS),
    };
    let runs = plan_runs::list(&state, &org, &plan, &recent).await?.items;
    let s = &info.summary;
    let page = PlanPage {
        can_run: layout.can(crate::plans::runs::CREATE),
        name: info.name.clone(),
        version: info.version,
        targets: targets_text(&s.target_hosts, &s.target_labels, &s.target_environments),
        hosts: if s.hosts.is_empty() {
            "none of the org's hosts".into()
        } else {
            s.hosts.join(", ")
        },
        steps: s
            .steps
            .iter()
            .map(|st| (st.name.clone(), st.module.clone()))
            .collect(),
        warnings: info
            .warnings
            .iter()
            .map(|w| format!("{}:{}:{}: {}", w.file, w.line, w.column, w.message))
            .collect(),
        schedule: schedule.map(|sc| ScheduleInfo {
            next: sc.next_run_at.map(When::of),
            inputs: if sc.inputs.is_empty() {
                String::new()
            } else {
                serde_json::to_string(&sc.inputs).unwrap_or_default()
            },
            last_note: sc.last_note,
            cron: sc.cron,
            timezone: sc.timezone,
        }),
        runs: runs.iter().map(RunItem::of).collect(),
        inputs: s
            .inputs
            .iter()
            .map(|(name, default)| InputField {
                name: name.clone(),
                default: default_text(default),
                has_default: !default.is_null(),
            })
            .collect(),
        updated: When::of(info.updated_at),
        updated_by: info.updated_by.clone(),
        source: info.source,
        layout,
    };
    let flash = page.layout.flash.clone();
    render(flash.as_ref(), &page)
}

#[derive(Deserialize)]
pub struct StartForm {
    csrf: String,
    /// `true` for a dry run.
    #[serde(default)]
    dry_run: String,
    /// The input fields, `input.<name>`.
    #[serde(flatten)]
    fields: BTreeMap<String, String>,
}

/// The inputs a Run form gives: each `input.<name>` field changed from the plan's
/// default (as text, like `--input NAME=VALUE`); a field left as it was, or left empty
/// for an input without a default, gives none — the plan's own default applies.
fn form_inputs(
    fields: &BTreeMap<String, String>,
    defaults: &BTreeMap<String, Value>,
) -> BTreeMap<String, Value> {
    fields
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("input.")?, v)))
        .filter(|(name, v)| match defaults.get(*name) {
            Some(d) => **v != default_text(d),
            // Not an input of the plan: the API refuses it, naming it.
            None => true,
        })
        .map(|(name, v)| (name.to_string(), Value::String(v.clone())))
        .collect()
}

/// `POST /orgs/{org}/plans/{plan}/runs`: a run (or dry run) through the API's handler.
async fn start(
    State(state): State<AppState>,
    session: Session,
    Path((org, plan)): Path<(String, String)>,
    Form(form): Form<StartForm>,
) -> Result<Response, PageError> {
    session.check_csrf(&form.csrf)?;
    let layout = Layout::new(
        session,
        &org,
        "plans",
        plan.clone(),
        crate::plans::resources::SHOW_PLAN,
    )?;
    let back = format!("/orgs/{}/plans/{}", urlencode(&org), urlencode(&plan));
    if let Err(e) = layout.require(crate::plans::runs::CREATE) {
        return Ok(redirect_with_flash(&back, false, &super::refusal(e)));
    }
    let dry_run = form.dry_run == "true";
    let inputs = if form.fields.keys().any(|k| k.starts_with("input.")) {
        let info = crate::service::plans::show(&state, &org, &plan).await?;
        form_inputs(&form.fields, &info.summary.inputs)
    } else {
        BTreeMap::new()
    };
    let body = PlanRunCreate { dry_run, inputs };
    let answer = plan_runs::create(&state, &layout.caller(), &org, &plan, body).await;
    Ok(match answer {
        Ok(run) => {
            let what = if dry_run { "dry run" } else { "run" };
            redirect_with_flash(
                &format!("/orgs/{}/plan-runs/{}", urlencode(&org), run.id),
                true,
                &format!("started {what} {} ({})", run.id, run.state),
            )
        }
        Err(e) => redirect_with_flash(&back, false, &e.body().error.message),
    })
}

#[derive(askama::Template)]
#[template(path = "console/plan_runs.html")]
struct PlanRunsPage {
    layout: Layout,
    runs: Vec<RunItem>,
    /// The cursor of the next (older) page.
    older: Option<String>,
    first_page: bool,
}

#[derive(Deserialize)]
pub struct PlanRunsPageQuery {
    /// The last run of the previous page.
    before: Option<String>,
}

/// The org's plan runs, newest first, a page at a time.
async fn runs(
    State(state): State<AppState>,
    session: Session,
    Path(org): Path<String>,
    Query(q): Query<PlanRunsPageQuery>,
) -> Result<Response, PageError> {
    let layout = Layout::new(
        session,
        &org,
        "plans",
        "Plan runs",
        crate::plans::resources::LIST_PLANS,
    )?;
    let mut page = state
        .store
        .list_plan_runs(&org, None, q.before.as_deref(), PAGE as u32 + 1)
        .await?;
    let older = (page.len() > PAGE).then(|| page[PAGE - 1].id.clone());
    page.truncate(PAGE);
    let runs = page.iter().map(RunItem::of_record).collect();
    let flash = layout.flash.clone();
    render(
        flash.as_ref(),
        &PlanRunsPage {
            layout,
            runs,
            older,
            first_page: q.before.is_none(),
        },
    )
}

/// One step's result on a host, in words.
struct StepLine {
    step: i64,
    name: String,
    module: String,
    status: String,
    ignored: bool,
    message: String,
}

/// How much of each stream of a step's output the page shows: its last lines.
const TAIL_LINES: usize = 200;
const TAIL_BYTES: usize = 16 * 1024;

/// The end of one stream of a step's output.
struct StreamTail {
    /// `stdout` or `stderr`.
    name: &'static str,
    text: String,
    /// Lines before `text` not shown.
    cut_lines: usize,
}

/// What a step printed on a host.
struct StepOutput {
    step: i64,
    name: String,
    status: String,
    exit_code: Option<i32>,
    /// Shown unfolded: the step failed there.
    open: bool,
    streams: Vec<StreamTail>,
}

impl StepOutput {
    /// `None` when the step printed nothing.
    fn of(r: &PlanHostResult) -> Option<StepOutput> {
        let streams: Vec<StreamTail> = [("stdout", &r.stdout), ("stderr", &r.stderr)]
            .into_iter()
            .filter(|(_, text)| !text.is_empty())
            .map(|(name, text)| {
                let tail = output_tail(text, TAIL_LINES, TAIL_BYTES);
                StreamTail {
                    name,
                    text: tail.text.to_string(),
                    cut_lines: tail.cut_lines,
                }
            })
            .collect();
        (!streams.is_empty()).then(|| StepOutput {
            step: r.step,
            name: r.step_name.clone(),
            status: r.status.replace('_', " "),
            exit_code: r.exit_code,
            open: matches!(r.status.as_str(), "failed" | "timed_out") && !r.ignored,
            streams,
        })
    }
}

struct HostRow {
    host: String,
    /// `failed`, `changed`, `ok` or `pending` (no step reported yet).
    status: String,
    ok: usize,
    changed: usize,
    failed: usize,
    other: usize,
    steps: Vec<StepLine>,
    /// The steps that printed something, in step order.
    outputs: Vec<StepOutput>,
}

/// One line of a diff with its colour class (`add`, `del` or none).
struct DiffLine {
    class: &'static str,
    text: String,
}

struct Prediction {
    host: String,
    step: i64,
    name: String,
    status: String,
    message: String,
    diff: Vec<DiffLine>,
}

/// A batch of a rolling run, from its report.
struct BatchRow {
    number: u64,
    hosts: String,
    /// `succeeded`, `failed` or `not run`.
    status: String,
    failed: String,
}

/// The batches a run's report lists (`batches`), as the page shows them.
fn batch_rows(report: Option<&serde_json::Value>) -> Vec<BatchRow> {
    let words = |v: &serde_json::Value| {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|h| h.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    };
    report
        .and_then(|r| r["batches"].as_array())
        .map(|a| {
            a.iter()
                .map(|b| BatchRow {
                    number: b["number"].as_u64().unwrap_or(0),
                    hosts: words(&b["hosts"]),
                    status: b["status"].as_str().unwrap_or("").replace('_', " "),
                    failed: words(&b["failed"]),
                })
                .collect()
        })
        .unwrap_or_default()
}

struct UnresolvedRef {
    host: String,
    step: String,
    step_name: String,
    reference: String,
}

#[derive(askama::Template)]
#[template(path = "console/plan_run.html")]
struct PlanRunPage {
    layout: Layout,
    id: String,
    plan: String,
    plan_version: i64,
    state: String,
    reason: Option<String>,
    dry_run: bool,
    trigger: String,
    requested_by: String,
    inputs: String,
    gated: String,
    runner: Option<String>,
    created: When,
    ended: Option<When>,
    hosts: Vec<HostRow>,
    /// A rolling run's batches (shown when there is more than one).
    batches: Vec<BatchRow>,
    /// Some step printed something on some host.
    has_output: bool,
    predictions: Vec<Prediction>,
    /// `None`: no report yet (the runner sends it when the run ends).
    unresolved: Option<Vec<UnresolvedRef>>,
    warnings: Vec<String>,
    log: PageLog,
    log_after: Option<i64>,
    /// Why the log is not shown: retention deleted it.
    log_removed: Option<String>,
    live: bool,
    can_abort: bool,
    /// A paused run: may this user approve and reject it here, or why not.
    approval: Option<PlanRunApproval>,
    /// The policies evaluated on its dry run and approval, and what they hold it for.
    policies: Vec<super::policies::PolicyRow>,
    policy_hold: Option<String>,
    /// A run that started paused: its preview (the dry run created with it).
    preview: Option<String>,
    /// A preview: the paused run it was created with.
    preview_of: Option<String>,
}

/// A paused plan run, as its page offers the decision.
struct PlanRunApproval {
    /// This user may approve it (and reject it) here.
    can_decide: bool,
    /// Why this user may not approve it (the approval rule's words), when the API would
    /// let them try.
    refusal: Option<String>,
    /// What its preview predicts, shown beside the decision.
    preview: Option<PreviewCard>,
    /// Who may approve or reject it, in the approval rule's words.
    approvers: Option<String>,
}

/// A paused run's preview in its approval card: its one line, its per-host results and
/// its diffs, rendered as the preview's own page renders them.
struct PreviewCard {
    id: String,
    state: String,
    /// Still queued or running: the card says so and refreshes.
    live: bool,
    /// `2 hosts would change, 1 no change`, or where it is (`running`).
    outcome: String,
    reason: Option<String>,
    hosts: Vec<HostRow>,
    predictions: Vec<Prediction>,
}

impl PreviewCard {
    fn of(preview: &PlanRunView) -> PreviewCard {
        PreviewCard {
            id: preview.id.clone(),
            state: preview.state.clone(),
            live: preview
                .state
                .parse::<PlanRunState>()
                .is_ok_and(PlanRunState::is_active),
            outcome: plan_runs::preview_outcome(preview),
            reason: preview.reason.clone(),
            hosts: host_rows(&preview.hosts, &preview.results),
            predictions: predictions(&preview.results),
        }
    }
}

fn host_rows(hosts: &[String], results: &[PlanHostResult]) -> Vec<HostRow> {
    let mut order: Vec<String> = hosts.to_vec();
    for r in results {
        if !order.contains(&r.host) {
            order.push(r.host.clone());
        }
    }
    order
        .into_iter()
        .map(|host| {
            let mut row = HostRow {
                host: host.clone(),
                status: "pending".into(),
                ok: 0,
                changed: 0,
                failed: 0,
                other: 0,
                steps: Vec::new(),
                outputs: Vec::new(),
            };
            let mut mine: Vec<&PlanHostResult> =
                results.iter().filter(|r| r.host == host).collect();
            mine.sort_by_key(|r| r.step);
            for r in mine {
                match r.status.as_str() {
                    "ok" => row.ok += 1,
                    "changed" => row.changed += 1,
                    "failed" | "timed_out" if !r.ignored => row.failed += 1,
                    _ => row.other += 1,
                }
                row.outputs.extend(StepOutput::of(r));
                row.steps.push(StepLine {
                    step: r.step,
                    name: r.step_name.clone(),
                    module: r.module.clone(),
                    status: r.status.replace('_', " "),
                    ignored: r.ignored,
                    message: r.message.clone(),
                });
            }
            row.status = if row.failed > 0 {
                "failed"
            } else if row.changed > 0 {
                "changed"
            } else if row.steps.is_empty() {
                "pending"
            } else {
                "ok"
            }
            .into();
            row
        })
        .collect()
}

/// A dry run's predictions: every step that would change something or is not plainly
/// `ok`, by host then step, with its diff.
fn predictions(results: &[PlanHostResult]) -> Vec<Prediction> {
    let mut p: Vec<&PlanHostResult> = results
        .iter()
        .filter(|r| r.diff.is_some() || r.status != "ok")
        .collect();
    p.sort_by(|a, b| (&a.host, a.step).cmp(&(&b.host, b.step)));
    p.into_iter()
        .map(|r| Prediction {
            host: r.host.clone(),
            step: r.step,
            name: r.step_name.clone(),
            status: r.status.replace('_', " "),
            message: r.message.clone(),
            diff: r.diff.as_deref().map(diff_lines).unwrap_or_default(),
        })
        .collect()
}

fn diff_lines(diff: &str) -> Vec<DiffLine> {
    diff.lines()
        .map(|l| DiffLine {
            class: if l.starts_with('+') && !l.starts_with("+++") {
                "add"
            } else if l.starts_with('-') && !l.starts_with("---") {
                "del"
            } else {
                ""
            },
            text: l.to_string(),
        })
        .collect()
}

async fn run_page(
    State(state): State<AppState>,
    session: Session,
    Path((org, id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    let layout = Layout::new(
        session,
        &org,
        "plans",
        format!("Plan run {id}"),
        crate::plans::runs::SHOW,
    )?;
    let view = plan_runs::show(&state, &org, &id).await?;
    let whole = crate::logs::LogsQuery {
        after: None,
        limit: Some(1000),
    };
    let (chunks, log_removed) = match plan_runs::logs(&state, &org, &id, &whole).await {
        Ok(chunks) => (chunks, None),
        Err(ApiError::Gone(why)) => (Vec::new(), Some(why)),
        Err(e) => return Err(e.into()),
    };
    let terminal = view
        .state
        .parse::<PlanRunState>()
        .map(|s| s.is_terminal())
        .unwrap_or(true);
    let report = view.report.as_ref();
    let unresolved = report.map(|r| {
        r["unresolved"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|u| UnresolvedRef {
                        host: u["host"].as_str().unwrap_or_default().to_string(),
                        step: u["step"].to_string(),
                        step_name: u["step_name"].as_str().unwrap_or_default().to_string(),
                        reference: u["reference"].as_str().unwrap_or_default().to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    });
    let warnings = report
        .and_then(|r| r["warnings"].as_array())
        .map(|a| {
            a.iter()
                .map(|w| match w["message"].as_str() {
                    Some(m) => m.to_string(),
                    None => w.to_string(),
                })
                .collect()
        })
        .unwrap_or_default();
    let predictions = if view.dry_run {
        predictions(&view.results)
    } else {
        Vec::new()
    };
    let hosts = host_rows(&view.hosts, &view.results);
    let approval = if view.state == "paused" {
        let (can_decide, refusal) = super::approvals::page_decision(
            &state,
            &layout,
            &view.gated_environments,
            &view.requested_by,
        )
        .await?;
        let preview = match &view.preview {
            Some(p) => match plan_runs::show(&state, &org, p).await {
                Ok(preview) => Some(PreviewCard::of(&preview)),
                Err(ApiError::NotFound(_)) => None,
                Err(e) => return Err(e.into()),
            },
            None => None,
        };
        let approvers = crate::service::approvals::wait_of(&state, &org, &view.id)
            .await?
            .map(|w| w.approvers);
        Some(PlanRunApproval {
            can_decide,
            refusal,
            preview,
            approvers,
        })
    } else {
        None
    };
    let page = PlanRunPage {
        approval,
        policies: super::policies::rows(&view.policies),
        policy_hold: super::policies::hold_words(view.policy_hold.as_deref(), &view.id),
        can_abort: !terminal && layout.can(crate::plans::runs::ABORT),
        has_output: hosts.iter().any(|h| !h.outputs.is_empty()),
        hosts,
        log: page_log(&chunks),
        log_after: chunks.last().map(|c| c.seq),
        log_removed,
        live: !terminal,
        predictions,
        unresolved,
        warnings,
        batches: batch_rows(report),
        inputs: if view.inputs.is_empty() {
            String::new()
        } else {
            serde_json::to_string(&view.inputs).unwrap_or_default()
        },
        gated: view.gated_environments.join(", "),
        preview: view.preview,
        preview_of: view.preview_of,
        created: When::of(view.created_at),
        ended: view.ended_at.map(When::of),
        id: view.id,
        plan: view.plan,
        plan_version: view.plan_version,
        state: view.state,
        reason: view.reason,
        dry_run: view.dry_run,
        trigger: match &view.upstream {
            Some(u) => format!(
                "stack: started by run {} of stack {}",
                u["run"].as_str().unwrap_or("?"),
                u["stack"].as_str().unwrap_or("?")
            ),
            None => view.trigger,
        },
        requested_by: view.requested_by,
        runner: view.runner_id,
        layout,
    };
    let flash = page.layout.flash.clone();
    render(flash.as_ref(), &page)
}

/// `POST /orgs/{org}/plan-runs/{run}/abort` through the API's handler.
async fn abort(
    State(state): State<AppState>,
    session: Session,
    Path((org, id)): Path<(String, String)>,
    Form(form): Form<CsrfOnly>,
) -> Result<Response, PageError> {
    session.check_csrf(&form.csrf)?;
    let layout = Layout::new(session, &org, "plans", "Plan run", crate::plans::runs::SHOW)?;
    let back = format!("/orgs/{}/plan-runs/{}", urlencode(&org), urlencode(&id));
    if let Err(e) = layout.require(crate::plans::runs::ABORT) {
        return Ok(redirect_with_flash(&back, false, &super::refusal(e)));
    }
    Ok(
        match plan_runs::abort(&state, &layout.caller(), &org, &id).await {
            Ok(r) => redirect_with_flash(&back, true, &format!("aborted {id}: it is {}", r.state)),
            Err(e) => redirect_with_flash(&back, false, &e.body().error.message),
        },
    )
}

/// The run's live log for the page's script: the API's stream, with the session's roles.
async fn log_stream(
    State(state): State<AppState>,
    session: Session,
    Path((org, id)): Path<(String, String)>,
    Query(q): Query<StreamQuery>,
) -> Result<Response, PageError> {
    Layout::new(
        session,
        &org,
        "plans",
        "Plan run log",
        crate::plans::runs::LOGS_STREAM,
    )?;
    let stream =
        crate::plans::runs::logs_stream(State(state), ApiPath((org, id)), q.into_api()).await?;
    Ok(stream.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(host: &str, step: i64, status: &str, ignored: bool) -> PlanHostResult {
        PlanHostResult {
            step,
            step_name: format!("s{step}"),
            module: "command".into(),
            host: host.into(),
            status: status.into(),
            ignored,
            changed: None,
            exit_code: None,
            stdout: String::new(),
            stderr: String::new(),
            duration_ms: 1,
            message: String::new(),
            diff: None,
        }
    }

    #[test]
    fn hosts_are_summed_in_target_order_and_tolerated_failures_do_not_fail_them() {
        let hosts = vec!["web-2".to_string(), "web-1".to_string(), "db".to_string()];
        let results = vec![
            result("web-1", 2, "failed", false),
            result("web-1", 1, "changed", false),
            result("web-2", 1, "ok", false),
            result("web-2", 2, "failed", true),
        ];
        let rows = host_rows(&hosts, &results);
        let summary: Vec<_> = rows
            .iter()
            .map(|r| {
                (
                    r.host.as_str(),
                    r.status.as_str(),
                    r.ok,
                    r.changed,
                    r.failed,
                    r.other,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("web-2", "ok", 1, 0, 0, 1),
                ("web-1", "failed", 0, 1, 1, 0),
                ("db", "pending", 0, 0, 0, 0),
            ]
        );
        // Steps in order, whatever order they were reported in.
        assert_eq!(rows[1].steps[0].step, 1);
        assert!(rows[0].steps[1].ignored);
        assert!(rows.iter().all(|r| r.outputs.is_empty()));
    }

    #[test]
    fn a_steps_output_is_shown_by_the_end_of_each_stream() {
        let long: String = (1..=TAIL_LINES + 3).map(|i| format!("{i}\n")).collect();
        let mut printed = result("web-1", 2, "failed", false);
        printed.stdout = long;
        printed.stderr = "boom\n".into();
        let mut tolerated = result("web-1", 1, "timed_out", true);
        tolerated.stderr = "slow".into();
        let rows = host_rows(&["web-1".to_string()], &[printed, tolerated]);
        let outputs: Vec<_> = rows[0]
            .outputs
            .iter()
            .map(|o| {
                let streams: Vec<_> = o
                    .streams
                    .iter()
                    .map(|s| {
                        (
                            s.name,
                            s.text.lines().next().unwrap_or_default(),
                            s.cut_lines,
                        )
                    })
                    .collect();
                (o.step, o.status.as_str(), o.open, streams)
            })
            .collect();
        assert_eq!(
            outputs,
            [
                (1, "timed out", false, vec![("stderr", "slow", 0)]),
                (
                    2,
                    "failed",
                    true,
                    vec![("stdout", "4", 3), ("stderr", "boom", 0)]
                ),
            ]
        );
    }

    #[test]
    fn only_changed_input_fields_become_inputs_as_text() {
        let defaults = BTreeMap::from([
            ("release".to_string(), serde_json::json!("1.0")),
            ("level".to_string(), serde_json::json!(3)),
            ("target".to_string(), Value::Null),
        ]);
        let fields = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        // Left as shown: nothing given, the plan's defaults (typed) apply.
        let same = fields(&[
            ("input.release", "1.0"),
            ("input.level", "3"),
            ("input.target", ""),
        ]);
        assert!(form_inputs(&same, &defaults).is_empty());
        // Changed ones are given as typed; other form fields are not inputs.
        let changed = fields(&[
            ("input.release", "2.0"),
            ("input.level", "3"),
            ("input.target", "web"),
            ("csrf", "x"),
        ]);
        assert_eq!(
            form_inputs(&changed, &defaults),
            BTreeMap::from([
                ("release".to_string(), serde_json::json!("2.0")),
                ("target".to_string(), serde_json::json!("web")),
            ])
        );
        // A field for no input of the plan is passed on, for the API to refuse by name.
        let unknown = fields(&[("input.nope", "1")]);
        assert_eq!(form_inputs(&unknown, &defaults).len(), 1);
    }

    #[test]
    fn diff_lines_are_coloured_but_not_their_headers() {
        let classes: Vec<_> = diff_lines("--- a\n+++ b\n-x\n+y\n z")
            .into_iter()
            .map(|l| l.class)
            .collect();
        assert_eq!(classes, ["", "", "del", "add", ""]);
    }
}
