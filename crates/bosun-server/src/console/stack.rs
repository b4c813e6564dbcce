//! The stack page: its definition, recent runs, trigger history (ignored deliveries and
//! why), outputs, dependencies both ways, drift, the lock, and a "Run now" button.

use std::collections::BTreeMap;

use axum::extract::{Form, Path, Query, State};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use bosun_core::graph::{Link, Node};
use serde::Deserialize;

use super::session::redirect_with_flash;
use super::stacks::DriftBadge;
use super::{age, render, urlencode, Layout, PageError, Session};
use crate::app::AppState;
use crate::extract::ApiPath;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/orgs/{org}/stacks/{stack}", get(show))
        .route("/orgs/{org}/stacks/{stack}/run", post(run_now))
}

/// Runs and trigger entries per page.
const PAGE: u32 = 20;

#[derive(Deserialize)]
pub struct RunNowForm {
    /// Missing is refused like wrong, by the session's check.
    #[serde(default)]
    csrf: String,
}

#[derive(Deserialize)]
pub struct StackQuery {
    runs_after: Option<String>,
    triggers_after: Option<i64>,
}

/// One line of the facts list.
pub struct Fact {
    pub name: &'static str,
    pub value: String,
}

/// A run in the stack's run list, in words.
pub struct RunRow {
    pub id: String,
    pub state: String,
    pub kind: String,
    pub trigger: String,
    pub by: String,
    pub commit: String,
    pub age: String,
    pub at: String,
    pub reason: String,
}

/// One delivery of the trigger history and its verdict on this stack.
pub struct TriggerRow {
    pub delivery: String,
    pub source: String,
    pub event: String,
    pub git_ref: String,
    pub commit: String,
    pub pull_request: Option<i64>,
    pub triggered: bool,
    pub run: Option<String>,
    pub reason: String,
    pub summary: String,
    pub duplicate: bool,
    pub age: String,
    pub at: String,
}

pub struct OutputRow {
    pub name: String,
    pub value: String,
    pub sensitive: bool,
    pub kind: String,
    /// Since the previous version: `added`, `changed`, …, or empty when unchanged.
    pub change: String,
}

/// A dependency edge seen from this stack: the other stack and the outputs it maps.
pub struct Edge {
    pub stack: String,
    /// (upstream output, downstream variable)
    pub outputs: Vec<(String, String)>,
    pub trigger_always: bool,
}

/// A plan the stack feeds, and the outputs whose change starts its runs (empty: any).
pub struct FedPlan {
    pub plan: String,
    pub outputs: Vec<String>,
}

#[derive(askama::Template)]
#[template(path = "console/stack.html")]
struct StackPage {
    layout: Layout,
    id: String,
    name: String,
    facts: Vec<Fact>,
    drift: Option<DriftBadge>,
    drift_detail: Vec<String>,
    lock: Option<String>,
    can_run: bool,
    runs: Vec<RunRow>,
    runs_next: Option<String>,
    runs_first: bool,
    /// `None` when the session may not read them (with why).
    triggers: Result<Vec<TriggerRow>, String>,
    triggers_next: Option<String>,
    triggers_first: bool,
    outputs: Result<Vec<OutputRow>, String>,
    /// The state version the outputs come from, and whether the one before it was
    /// deleted by retention (so no change is shown).
    outputs_version: Option<(i64, bool)>,
    upstreams: Vec<Edge>,
    downstreams: Vec<Edge>,
    /// The plans whose runs a change of its outputs starts (`on_stack_change`).
    feeds_plans: Vec<FedPlan>,
}

fn short(commit: &str) -> String {
    commit.chars().take(12).collect()
}

fn json_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A stack's `depends_on` edge as the page lists it, naming the stack at its other end;
/// `None` for an edge of another kind.
fn edge(other: &Node, link: &Link) -> Option<Edge> {
    let (
        Node::Stack(stack),
        Link::DependsOn {
            outputs,
            trigger_always,
        },
    ) = (other, link)
    else {
        return None;
    };
    Some(Edge {
        stack: stack.clone(),
        outputs: outputs
            .iter()
            .map(|(o, v)| (o.clone(), v.clone()))
            .collect(),
        trigger_always: *trigger_always,
    })
}

/// What the stack's runs report on GitHub, in words: the stack's own setting, or its
/// org's marked "(org default)".
fn pr_feedback_fact(s: &bosun_api::Stack) -> String {
    let effective = s.pr_feedback_effective.as_str();
    let meaning = match effective {
        "both" => "check runs and the pull-request comment",
        "checks" => "check runs only",
        "comment" => "the pull-request comment only",
        "none" => "nothing",
        _ => "",
    };
    let mut value = effective.to_string();
    if s.pr_feedback.is_none() {
        value.push_str(" (org default)");
    }
    if !meaning.is_empty() {
        value.push_str(": ");
        value.push_str(meaning);
    }
    if s.connection.kind != "github" {
        value.push_str("; only github: stacks report on GitHub");
    }
    value
}

async fn show(
    State(state): State<AppState>,
    session: Session,
    Path((org, stack)): Path<(String, String)>,
    Query(q): Query<StackQuery>,
) -> Result<Response, PageError> {
    let mut layout = Layout::new(session, &org, "stacks", &stack, crate::stacks::SHOW)?;
    let _key = || ApiPath((org.clone(), stack.clone()));
    let (s, graph) = crate::service::stacks::show_in_graph(&state, &org, &stack).await?;
    // A stack in an environment that requires approval never applies without an approver.
    let gated = match &s.environment {
        Some(env) => state
            .store
            .get_environment(&org, env)
            .await?
            .is_some_and(|e| e.requires_approval),
        None => false,
    };
    layout.title = s.name.clone();

    let mut facts = vec![
        Fact {
            name: "Repository",
            value: s.repository.clone(),
        },
        Fact {
            name: "Branch",
            value: s.branch.clone(),
        },
        Fact {
            name: "Path",
            value: if s.path.is_empty() {
                "(repository root)".into()
            } else {
                s.path.clone()
            },
        },
        Fact {
            name: "Watch paths",
            value: if s.watch_paths.is_empty() {
                "(only the path)".into()
            } else {
                s.watch_paths.join(", ")
            },
        },
        Fact {
            name: "Engine",
            value: match &s.engine_version {
                Some(v) => format!("{} {v}", s.engine),
                None => s.engine.clone(),
            },
        },
        Fact {
            name: "Autodeploy",
            value: match (s.autodeploy, gated) {
                (_, true) => format!(
                    "{}: environment {} requires approval, so every plan waits for an approver",
                    if s.autodeploy { "yes, but" } else { "no" },
                    s.environment.as_deref().unwrap_or_default()
                ),
                (true, false) => "yes: pushes apply without confirmation".into(),
                (false, false) => "no: plans wait for confirmation".into(),
            },
        },
        Fact {
            name: "Environment",
            value: s.environment.clone().unwrap_or_else(|| "(none)".into()),
        },
        Fact {
            name: "Labels",
            value: if s.labels.is_empty() {
                "(none)".into()
            } else {
                s.labels.join(", ")
            },
        },
        Fact {
            name: "Connection",
            value: format!(
                "{} ({}): {}",
                if s.connection.connected {
                    "connected"
                } else {
                    "not connected"
                },
                s.connection.kind,
                s.connection.detail
            ),
        },
        Fact {
            name: "Runner pool",
            value: format!("{} (tier {})", s.runner_pool, s.tier),
        },
        Fact {
            name: "Pull-request feedback",
            value: pr_feedback_fact(&s),
        },
    ];
    if let Some(d) = &s.drift_detection {
        facts.push(Fact {
            name: "Drift detection",
            value: format!(
                "{} ({}){}",
                d.schedule,
                d.timezone.as_deref().unwrap_or("UTC"),
                if d.reconcile {
                    ", reconciles drift with a tracked run"
                } else {
                    ""
                }
            ),
        });
    }
    let mut drift_detail = Vec::new();
    if let Some(d) = &s.drift_status {
        if let Some(next) = d.next_check_at {
            drift_detail.push(format!("next check at {}", next.to_rfc3339()));
        }
        if let Some(open) = &d.open_run {
            drift_detail.push(format!("check running: run {open}"));
        }
        if let Some(note) = &d.last_fire_note {
            drift_detail.push(note.clone());
        }
    }

    let runs_query = crate::paging::PageQuery {
        cursor: q.runs_after.clone(),
        limit: Some(PAGE),
    };
    // The rows show the runs' own fields: the stored runs, with no per-run reads.
    let runs_page = crate::service::runs::list_records(&state, &org, &stack, &runs_query).await?;
    let runs = runs_page
        .items
        .into_iter()
        .map(|r| RunRow {
            age: age(r.created_at),
            at: r.created_at.to_rfc3339(),
            commit: r.commit.as_deref().map(short).unwrap_or_default(),
            reason: r.reason.unwrap_or_default(),
            id: r.id,
            state: r.state.to_string(),
            kind: r.kind.to_string(),
            trigger: r.trigger.to_string(),
            by: r.triggered_by,
        })
        .collect();

    let (triggers, triggers_next) = match layout.require(crate::vcs::LIST_TRIGGERS) {
        Err(e) => (Err(super::refusal(e)), None),
        Ok(()) => {
            let query = crate::paging::PageQuery {
                cursor: q.triggers_after.map(|c| c.to_string()),
                limit: Some(PAGE),
            };
            let page = crate::service::triggers::list(&state, &org, &stack, &query).await?;
            let rows = page
                .items
                .into_iter()
                .map(|t| TriggerRow {
                    age: age(t.received_at),
                    at: t.received_at.to_rfc3339(),
                    event: match &t.action {
                        Some(a) => format!("{} ({a})", t.event),
                        None => t.event.clone(),
                    },
                    git_ref: t.git_ref.unwrap_or_default(),
                    commit: t.after.as_deref().map(short).unwrap_or_default(),
                    delivery: t.delivery,
                    source: t.source,
                    pull_request: t.pull_request,
                    triggered: t.triggered,
                    run: t.run,
                    reason: t.reason,
                    summary: t.summary,
                    duplicate: t.duplicate,
                })
                .collect();
            (Ok(rows), page.next_cursor)
        }
    };

    let (outputs, outputs_version) = match layout.require(crate::outputs::SHOW) {
        Err(e) => (Err(super::refusal(e)), None),
        Ok(()) => {
            let o = crate::service::outputs::show(&state, &org, &stack, None).await?;
            let changes: BTreeMap<String, String> = o
                .changes
                .iter()
                .map(|c| {
                    let text = serde_json::to_value(c.change)
                        .ok()
                        .and_then(|v| v.as_str().map(|s| s.replace('_', " ")))
                        .unwrap_or_default();
                    (c.name.clone(), text)
                })
                .collect();
            let rows = o
                .outputs
                .iter()
                .map(|(name, out)| OutputRow {
                    name: name.clone(),
                    value: if out.sensitive {
                        "(sensitive)".into()
                    } else {
                        json_text(&out.value)
                    },
                    sensitive: out.sensitive,
                    kind: out.output_type.as_ref().map(json_text).unwrap_or_default(),
                    change: changes
                        .get(name)
                        .filter(|c| c.as_str() != "unchanged")
                        .cloned()
                        .unwrap_or_default(),
                })
                .collect();
            (Ok(rows), o.version.map(|v| (v, o.previous_pruned)))
        }
    };

    // Its neighbours in the org's dependency graph, read with the stack.
    let node = Node::stack(stack.as_str());
    let upstreams = graph
        .upstream(&node)
        .filter_map(|(up, link)| edge(up, link))
        .collect();
    let mut downstreams = Vec::new();
    let mut feeds_plans = Vec::new();
    for (down, link) in graph.downstream(&node) {
        match (down, link) {
            (Node::Plan(plan), Link::Feeds { outputs }) => feeds_plans.push(FedPlan {
                plan: plan.clone(),
                outputs: outputs.clone(),
            }),
            _ => downstreams.extend(edge(down, link)),
        }
    }

    let lock = state.store.state_head(&org, &stack).await?.lock.map(|l| {
        format!(
            "locked by {} ({}) for {}, lock {}",
            l.who,
            l.operation,
            age(l.acquired_at),
            l.id
        )
    });
    let can_run = layout.can(crate::runs::TRIGGER);
    let flash = layout.flash.clone();
    render(
        flash.as_ref(),
        &StackPage {
            id: s.id.clone(),
            name: s.name.clone(),
            facts,
            drift: s.drift_status.as_ref().map(DriftBadge::of),
            drift_detail,
            lock,
            can_run,
            runs,
            runs_next: runs_page.next_cursor,
            runs_first: q.runs_after.is_none(),
            triggers,
            triggers_next,
            triggers_first: q.triggers_after.is_none(),
            outputs,
            outputs_version,
            upstreams,
            downstreams,
            feeds_plans,
            layout,
        },
    )
}

/// `POST /orgs/{org}/stacks/{stack}/run`: a tracked run at the branch head, through the
/// API's own handler; on to the new run's page.
async fn run_now(
    State(state): State<AppState>,
    session: Session,
    Path((org, stack)): Path<(String, String)>,
    Form(form): Form<RunNowForm>,
) -> Result<Response, PageError> {
    session.check_csrf(&form.csrf)?;
    let back = format!("/orgs/{}/stacks/{}", urlencode(&org), urlencode(&stack));
    let layout = Layout::new(session, &org, "stacks", "", crate::stacks::SHOW)?;
    if let Err(e) = layout.require(crate::runs::TRIGGER) {
        return Ok(redirect_with_flash(&back, false, &super::refusal(e)));
    }
    let body = bosun_api::RunCreate::default();
    match crate::service::runs::trigger(&state, &layout.caller(), &org, &stack, body).await {
        Ok(run) => Ok(redirect_with_flash(
            &format!("/orgs/{}/runs/{}", urlencode(&org), urlencode(&run.id)),
            true,
            &format!("run {} of stack {stack} queued", run.id),
        )),
        Err(e) => Ok(redirect_with_flash(
            &back,
            false,
            &super::refusal(PageError::Api(e)),
        )),
    }
}
