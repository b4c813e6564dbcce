//! `bosun stack`: create, list, show, update and delete the org's stacks.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{bail, Context as _};
use bosun_api::{
    AwsIntegration, Dependency, DriftDetection, OutputChangeKind, OutputSensitivityChange, Stack,
    StackCreate, StackOutput, StackOutputs, StackPatch, TriggerEntry,
};
use bosun_core::feedback::PrFeedback;
use clap::{Args, Subcommand};

use super::{decode, Ctx};
use crate::output::{timestamp, yes_no, Fields, Table};

#[derive(Subcommand)]
pub enum StackCommand {
    /// Create a stack from flags, or from a JSON body with --file.
    Create(Box<CreateArgs>),
    /// List the org's stacks, ordered by id.
    List {
        /// Stacks per page (1–1000; the server defaults to 100).
        #[arg(long)]
        limit: Option<u32>,
        /// Start after this stack id (a previous page's next cursor).
        #[arg(long, conflicts_with = "all")]
        cursor: Option<String>,
        /// Fetch every page, not just the first.
        #[arg(long)]
        all: bool,
    },
    /// Show one stack.
    Show {
        /// The stack's id.
        id: String,
    },
    /// Change the given fields of a stack; everything not named stays as it is.
    Update(Box<UpdateArgs>),
    /// Delete a stack (refused while other stacks depend on it or runs of it are open).
    Delete {
        /// The stack's id.
        id: String,
        /// Also delete its state versions: without this, a stack with state is kept.
        #[arg(long)]
        delete_state: bool,
    },
    /// List a stack's runs, newest first.
    Runs {
        /// The stack's id.
        stack: String,
        /// Runs per page (1–1000; the server defaults to 100).
        #[arg(long)]
        limit: Option<u32>,
        /// Start after this run id (a previous page's next cursor).
        #[arg(long, conflicts_with = "all")]
        cursor: Option<String>,
        /// Fetch every page, not just the first.
        #[arg(long)]
        all: bool,
    },
    /// The stack's trigger history: each push, pull request or poll of its repository,
    /// whether it started a run, and why or why not.
    Triggers {
        /// The stack's id.
        stack: String,
        /// Entries per page (1–1000; the server defaults to 100).
        #[arg(long)]
        limit: Option<u32>,
        /// Start after this entry (a previous page's next cursor).
        #[arg(long, conflicts_with = "all")]
        cursor: Option<String>,
        /// Fetch every page, not just the first.
        #[arg(long)]
        all: bool,
    },
    /// Check the stack for drift now: a drift run (plan only) whose result is `no_drift`,
    /// `drift_detected` or `failed`. Refused while a drift run of the stack is open.
    DriftCheck {
        /// The stack's id.
        stack: String,
    },
    /// The stack's outputs (sensitive values masked) and how each changed since the
    /// state version before.
    Outputs {
        /// The stack's id.
        stack: String,
        /// Show the outputs of this state version, compared with the one before it,
        /// instead of the current version's.
        #[arg(long, value_name = "N")]
        version: Option<i64>,
    },
}

/// The settable fields `create` and `update` share.
#[derive(Args)]
#[group(id = "stack_fields", multiple = true)]
pub struct StackFields {
    /// Display name [create default: the id].
    #[arg(long)]
    name: Option<String>,
    /// Git branch to track [create default: main].
    #[arg(long)]
    branch: Option<String>,
    /// Root module folder inside the repository, relative [create default: the root].
    #[arg(long)]
    path: Option<String>,
    /// Another repository path whose changes trigger this stack (repeatable; on update,
    /// replaces the list).
    #[arg(long = "watch-path", value_name = "PATH")]
    watch_paths: Vec<String>,
    /// auto, tofu or terraform [create default: auto: tofu where the runner has it, else
    /// terraform].
    #[arg(long)]
    engine: Option<String>,
    /// The engine binary: an absolute path or a command on PATH.
    #[arg(long)]
    engine_binary: Option<String>,
    /// Engine version pin.
    #[arg(long)]
    engine_version: Option<String>,
    /// Runner size: small, medium or large [create default: small].
    #[arg(long)]
    tier: Option<String>,
    /// Apply automatically after a successful plan (`--autodeploy=false` turns it off).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true")]
    autodeploy: Option<bool>,
    /// Environment label (a slug).
    #[arg(long)]
    environment: Option<String>,
    /// An input variable, NAME=VALUE (repeatable; on update, replaces all variables).
    #[arg(long = "var", value_name = "NAME=VALUE", value_parser = parse_var)]
    vars: Vec<(String, String)>,
    /// An upstream stack this one depends on, with the upstream outputs passed to its
    /// runs as `TF_VAR_<VARIABLE>` (repeatable; on update, replaces the list).
    #[arg(long = "depends-on", value_name = "STACK[:OUTPUT=VARIABLE,...]",
          value_parser = parse_dependency)]
    depends_on: Vec<Dependency>,
    /// Run this stack after every successful tracked run of upstream STACK, even when
    /// its outputs did not change (STACK must be given with `--depends-on`; repeatable).
    #[arg(long = "trigger-always", value_name = "STACK", requires = "depends_on")]
    trigger_always: Vec<String>,
    /// Cron schedule for drift detection (5 fields, or @hourly/@daily/@weekly/…).
    #[arg(long, value_name = "CRON")]
    drift_schedule: Option<String>,
    /// IANA time zone the drift schedule is read in [default: UTC].
    #[arg(long, value_name = "ZONE")]
    drift_timezone: Option<String>,
    /// Start a tracked run when drift is found (`--drift-reconcile=false` turns it off).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true")]
    drift_reconcile: Option<bool>,
    /// Runner pool: `hosted` or a pool slug [create default: hosted].
    #[arg(long)]
    runner_pool: Option<String>,
    /// AWS: the IAM role plan phases assume with the run's identity token.
    #[arg(long, value_name = "ARN")]
    aws_plan_role_arn: Option<String>,
    /// AWS: the IAM role apply phases assume [default: the plan role].
    #[arg(long, value_name = "ARN")]
    aws_apply_role_arn: Option<String>,
    /// What runs of a `github:` stack report on GitHub: both (a check run per commit and
    /// the pull request's comment), checks, comment or none; `org` follows the org's
    /// setting [create default: org].
    #[arg(long, value_name = "FEEDBACK", value_parser = parse_pr_feedback)]
    pr_feedback: Option<String>,
    /// A label that selects the stack, a slug (repeatable, at most 32; on update,
    /// replaces the labels).
    #[arg(long = "label", value_name = "LABEL")]
    labels: Vec<String>,
}

#[derive(Args)]
pub struct CreateArgs {
    /// The stack's id (a slug; it never changes).
    #[arg(required_unless_present = "file", conflicts_with = "file")]
    id: Option<String>,
    /// Git repository URL.
    #[arg(long, required_unless_present = "file", conflicts_with = "file")]
    repository: Option<String>,
    /// Read the whole stack definition (the JSON body of POST /stacks) from this file,
    /// or from standard input with `-`.
    #[arg(long, value_name = "FILE", conflicts_with = "stack_fields")]
    file: Option<PathBuf>,
    #[command(flatten)]
    fields: StackFields,
}

#[derive(Args)]
pub struct UpdateArgs {
    /// The stack's id.
    id: String,
    /// Git repository URL.
    #[arg(long)]
    repository: Option<String>,
    #[command(flatten)]
    fields: StackFields,
    /// Remove the environment label.
    #[arg(long, conflicts_with = "environment")]
    clear_environment: bool,
    /// Turn drift detection off.
    #[arg(long, conflicts_with_all = ["drift_schedule", "drift_reconcile", "drift_timezone"])]
    clear_drift_detection: bool,
    /// Forget the engine binary (use the default one).
    #[arg(long, conflicts_with = "engine_binary")]
    clear_engine_binary: bool,
    /// Remove the engine version pin.
    #[arg(long, conflicts_with = "engine_version")]
    clear_engine_version: bool,
    /// Remove every input variable.
    #[arg(long, conflicts_with = "vars")]
    clear_vars: bool,
    /// Remove every extra watched path.
    #[arg(long, conflicts_with = "watch_paths")]
    clear_watch_paths: bool,
    /// Remove every dependency.
    #[arg(long, conflicts_with = "depends_on")]
    clear_depends_on: bool,
    /// Remove the AWS integration.
    #[arg(long, conflicts_with_all = ["aws_plan_role_arn", "aws_apply_role_arn"])]
    clear_aws: bool,
    /// Remove every label.
    #[arg(long, conflicts_with = "labels")]
    clear_labels: bool,
}

/// `--pr-feedback`: a `PrFeedback` string form, or `org`.
fn parse_pr_feedback(raw: &str) -> Result<String, String> {
    if raw == ORG_FEEDBACK {
        return Ok(raw.to_string());
    }
    raw.parse::<PrFeedback>()
        .map(|f| f.as_str().to_string())
        .map_err(|_| format!("expected both, checks, comment, none or org (got {raw:?})"))
}

/// `--pr-feedback org`: no setting of the stack's own; it follows the org's.
const ORG_FEEDBACK: &str = "org";

fn parse_var(raw: &str) -> Result<(String, String), String> {
    match raw.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        _ => Err(format!("expected NAME=VALUE (got {raw:?})")),
    }
}

fn parse_dependency(raw: &str) -> Result<Dependency, String> {
    let (stack, mappings) = match raw.split_once(':') {
        Some((stack, m)) => (stack, Some(m)),
        None => (raw, None),
    };
    if stack.is_empty() {
        return Err(format!(
            "expected STACK[:OUTPUT=VARIABLE,...] (got {raw:?})"
        ));
    }
    let mut outputs = std::collections::BTreeMap::new();
    for pair in mappings.into_iter().flat_map(|m| m.split(',')) {
        match pair.split_once('=') {
            Some((out, var)) if !out.is_empty() && !var.is_empty() => {
                outputs.insert(out.to_string(), var.to_string());
            }
            _ => {
                return Err(format!(
                    "expected OUTPUT=VARIABLE (got {pair:?} in {raw:?})"
                ))
            }
        }
    }
    Ok(Dependency {
        stack: stack.to_string(),
        outputs,
        trigger_always: false,
    })
}

/// The `--depends-on` list with `--trigger-always` applied to the stacks it names.
fn dependencies(mut deps: Vec<Dependency>, always: &[String]) -> anyhow::Result<Vec<Dependency>> {
    for stack in always {
        match deps.iter_mut().find(|d| &d.stack == stack) {
            Some(d) => d.trigger_always = true,
            None => bail!("--trigger-always {stack}: {stack} is not given with --depends-on"),
        }
    }
    Ok(deps)
}

fn read_create_file(file: &PathBuf) -> anyhow::Result<StackCreate> {
    let text = if file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading the stack from stdin")?
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
    };
    // Parsed here, not just forwarded, so a typo names the file and line it is on.
    serde_json::from_str(&text)
        .with_context(|| format!("{} is not a valid stack definition", file.display()))
}

fn create_body(args: CreateArgs) -> anyhow::Result<StackCreate> {
    if let Some(file) = &args.file {
        return read_create_file(file);
    }
    let f = args.fields;
    let drift_detection = match (f.drift_schedule, f.drift_reconcile, f.drift_timezone) {
        (Some(schedule), reconcile, timezone) => Some(DriftDetection {
            schedule,
            reconcile: reconcile.unwrap_or(false),
            timezone,
        }),
        (None, Some(_), _) => bail!("--drift-reconcile needs --drift-schedule"),
        (None, None, Some(_)) => bail!("--drift-timezone needs --drift-schedule"),
        (None, None, None) => None,
    };
    let aws = match (f.aws_plan_role_arn, f.aws_apply_role_arn) {
        (Some(plan_role_arn), apply_role_arn) => Some(AwsIntegration {
            plan_role_arn,
            apply_role_arn,
            audience: None,
        }),
        (None, Some(_)) => bail!("--aws-apply-role-arn needs --aws-plan-role-arn"),
        (None, None) => None,
    };
    Ok(StackCreate {
        id: args.id.unwrap_or_default(),
        name: f.name,
        repository: args.repository.unwrap_or_default(),
        branch: f.branch,
        path: f.path,
        watch_paths: f.watch_paths,
        engine: f.engine,
        engine_binary: f.engine_binary,
        engine_version: f.engine_version,
        tier: f.tier,
        autodeploy: f.autodeploy.unwrap_or(false),
        environment: f.environment,
        variables: f.vars.into_iter().collect(),
        depends_on: dependencies(f.depends_on, &f.trigger_always)?,
        drift_detection,
        runner_pool: f.runner_pool,
        aws,
        pr_feedback: f.pr_feedback.filter(|v| v != ORG_FEEDBACK),
        labels: f.labels,
    })
}

/// The patch for `update`, holding only what the flags name. `current` is the stored
/// stack, needed only when one drift flag is given without the other.
fn patch_body(args: &UpdateArgs, current: Option<&Stack>) -> anyhow::Result<StackPatch> {
    let f = &args.fields;
    let non_empty = |v: &Vec<String>, clear: bool| {
        (clear || !v.is_empty()).then(|| if clear { Vec::new() } else { v.clone() })
    };
    let nullable = |v: &Option<String>, clear: bool| {
        if clear {
            Some(None)
        } else {
            v.clone().map(Some)
        }
    };
    let drift_detection = if args.clear_drift_detection {
        Some(None)
    } else {
        match (&f.drift_schedule, f.drift_reconcile, &f.drift_timezone) {
            (None, None, None) => None,
            (schedule, reconcile, timezone) => {
                let stored = current.and_then(|s| s.drift_detection.clone());
                let schedule = match (schedule, &stored) {
                    (Some(s), _) => s.clone(),
                    (None, Some(d)) => d.schedule.clone(),
                    (None, None) => bail!(
                        "stack {} has no drift detection: --drift-reconcile and --drift-timezone need --drift-schedule",
                        args.id
                    ),
                };
                let timezone = timezone
                    .clone()
                    .or(stored.as_ref().and_then(|d| d.timezone.clone()));
                let reconcile = reconcile.or(stored.map(|d| d.reconcile)).unwrap_or(false);
                Some(Some(DriftDetection {
                    schedule,
                    reconcile,
                    timezone,
                }))
            }
        }
    };
    let aws = if args.clear_aws {
        Some(None)
    } else {
        match (&f.aws_plan_role_arn, &f.aws_apply_role_arn) {
            (None, None) => None,
            (plan, apply) => {
                let stored = current.and_then(|s| s.aws.clone());
                let plan_role_arn = match (plan, &stored) {
                    (Some(p), _) => p.clone(),
                    (None, Some(a)) => a.plan_role_arn.clone(),
                    (None, None) => bail!(
                        "stack {} has no AWS integration: --aws-apply-role-arn needs --aws-plan-role-arn",
                        args.id
                    ),
                };
                let apply_role_arn = apply
                    .clone()
                    .or_else(|| stored.as_ref().and_then(|a| a.apply_role_arn.clone()));
                let audience = stored.and_then(|a| a.audience);
                Some(Some(AwsIntegration {
                    plan_role_arn,
                    apply_role_arn,
                    audience,
                }))
            }
        }
    };
    let variables = if args.clear_vars {
        Some(BTreeMap::new())
    } else {
        (!f.vars.is_empty()).then(|| f.vars.iter().cloned().collect())
    };
    Ok(StackPatch {
        id: None,
        name: f.name.clone(),
        repository: args.repository.clone(),
        branch: f.branch.clone(),
        path: f.path.clone(),
        watch_paths: non_empty(&f.watch_paths, args.clear_watch_paths),
        engine: f.engine.clone(),
        engine_binary: nullable(&f.engine_binary, args.clear_engine_binary),
        engine_version: nullable(&f.engine_version, args.clear_engine_version),
        tier: f.tier.clone(),
        autodeploy: f.autodeploy,
        environment: nullable(&f.environment, args.clear_environment),
        variables,
        depends_on: if args.clear_depends_on {
            Some(Vec::new())
        } else if f.depends_on.is_empty() {
            None
        } else {
            Some(dependencies(f.depends_on.clone(), &f.trigger_always)?)
        },
        drift_detection,
        runner_pool: f.runner_pool.clone(),
        aws,
        pr_feedback: f
            .pr_feedback
            .clone()
            .map(|v| (v != ORG_FEEDBACK).then_some(v)),
        labels: non_empty(&f.labels, args.clear_labels),
    })
}

fn or_dash(v: Option<String>) -> String {
    v.filter(|s| !s.is_empty()).unwrap_or_else(|| "-".into())
}

/// The root module folder as shown to people: the repository root is `.`.
fn shown_path(p: &str) -> String {
    if p.is_empty() {
        ".".into()
    } else {
        p.to_string()
    }
}

/// A stack's labels on one line, `-` for none.
fn labels_text(labels: &[String], separator: &str) -> String {
    if labels.is_empty() {
        "-".into()
    } else {
        labels.join(separator)
    }
}

/// The feedback a stack's runs give on GitHub, saying when it is the org's.
fn pr_feedback_text(s: &Stack) -> String {
    match (&s.pr_feedback, s.pr_feedback_effective.as_str()) {
        (Some(own), _) => own.clone(),
        (None, "") => "- (org default)".into(),
        (None, effective) => format!("{effective} (org default)"),
    }
}

pub fn stack_text(s: Stack) -> String {
    let pr_feedback = pr_feedback_text(&s);
    let deps = s
        .depends_on
        .into_iter()
        .map(|d| {
            let mut line = d.stack;
            if !d.outputs.is_empty() {
                let outputs: Vec<String> = d
                    .outputs
                    .iter()
                    .map(|(out, var)| format!("{out}->{var}"))
                    .collect();
                line.push_str(&format!(" (outputs: {})", outputs.join(", ")));
            }
            if d.trigger_always {
                line.push_str(" (trigger always)");
            }
            line
        })
        .collect();
    let drift = match s.drift_detection {
        Some(d) => format!(
            "{} in {}{}",
            d.schedule,
            d.timezone.as_deref().unwrap_or("UTC"),
            if d.reconcile { " (reconcile)" } else { "" }
        ),
        None => "-".into(),
    };
    let check = |c: &bosun_api::DriftCheck| {
        let mut line = format!("{} {} ({})", timestamp(&c.checked_at), c.result, c.run);
        if let Some(r) = &c.reconcile_run {
            line.push_str(&format!(", reconcile run {r}"));
        }
        line
    };
    let drift_status: Vec<(&str, String)> = match &s.drift_status {
        None => Vec::new(),
        Some(d) => {
            let mut v = vec![
                (
                    "next drift check",
                    d.next_check_at
                        .as_ref()
                        .map(timestamp)
                        .unwrap_or_else(|| "- (not scheduled yet)".into()),
                ),
                (
                    "last good check",
                    d.last_success
                        .as_ref()
                        .map(check)
                        .unwrap_or_else(|| "never".into()),
                ),
            ];
            if let Some(c) = d.last_check.as_ref().filter(|c| c.result == "failed") {
                v.push(("last check", check(c)));
            }
            if let Some(r) = &d.open_run {
                v.push(("drift run open", r.clone()));
            }
            if d.stale {
                v.push((
                    "drift checks",
                    format!(
                        "STALE: no successful check for {}s (over twice the interval)",
                        d.age_seconds.unwrap_or_default()
                    ),
                ));
            }
            if let Some(n) = &d.last_fire_note {
                v.push(("last schedule note", n.clone()));
            }
            v
        }
    };
    let mut f = Fields::new();
    f.add("id", s.id)
        .add("name", s.name)
        .add("repository", s.repository)
        .add("branch", s.branch)
        .add("path", shown_path(&s.path))
        .lines("watch paths", s.watch_paths)
        .add("engine", s.engine)
        .add("engine binary", or_dash(s.engine_binary))
        .add("engine version", or_dash(s.engine_version))
        .add("tier", s.tier)
        .add("autodeploy", yes_no(s.autodeploy))
        .add("environment", or_dash(s.environment))
        .add("labels", labels_text(&s.labels, ", "))
        .lines(
            "variables",
            s.variables
                .into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect(),
        )
        .lines("depends on", deps)
        .lines_if_any("downstream stacks", s.downstream_stacks.clone())
        .lines_if_any("feeds plans", s.feeds_plans.clone())
        .add("drift detection", drift);
    for (key, value) in drift_status {
        f.add(key, value);
    }
    f.add("runner pool", s.runner_pool)
        .add(
            "aws",
            match &s.aws {
                Some(a) => format!(
                    "plan {}, apply {}",
                    a.plan_role_arn,
                    a.apply_role_arn.as_deref().unwrap_or(&a.plan_role_arn)
                ),
                None => "-".into(),
            },
        )
        .add("pr feedback", pr_feedback)
        .add(
            "connection",
            format!(
                "{} ({})",
                if s.connection.connected {
                    "connected"
                } else {
                    "NOT CONNECTED"
                },
                s.connection.detail
            ),
        )
        .add("created", timestamp(&s.created_at))
        .add("updated", timestamp(&s.updated_at));
    f.render()
}

fn stack_table(org: &str, stacks: Vec<Stack>) -> String {
    if stacks.is_empty() {
        return format!("No stacks in org {org}.\n");
    }
    let mut t = Table::new(&[
        "ID",
        "NAME",
        "ENGINE",
        "BRANCH",
        "PATH",
        "AUTODEPLOY",
        "LABELS",
        "REPOSITORY",
    ]);
    for s in stacks {
        t.row(vec![
            s.id,
            s.name,
            s.engine,
            s.branch,
            shown_path(&s.path),
            yes_no(s.autodeploy).into(),
            labels_text(&s.labels, ","),
            s.repository,
        ]);
    }
    t.render()
}

async fn list(
    ctx: &Ctx,
    limit: Option<u32>,
    cursor: Option<String>,
    all: bool,
) -> anyhow::Result<()> {
    let org = ctx.org.as_str();
    let pages = super::fetch_pages(ctx, &["orgs", org, "stacks"], limit, cursor, all).await?;
    super::show_pages(ctx, pages, "stacks", |stacks: Vec<Stack>| {
        stack_table(org, stacks)
    })
}

pub async fn run(ctx: &Ctx, cmd: StackCommand) -> anyhow::Result<()> {
    let org = ctx.org.as_str();
    match cmd {
        StackCommand::Create(args) => {
            let body = create_body(*args)?;
            let value = ctx.client.post(&["orgs", org, "stacks"], &body).await?;
            ctx.show(value, stack_text)
        }
        StackCommand::List { limit, cursor, all } => list(ctx, limit, cursor, all).await,
        StackCommand::Show { id } => {
            let value = ctx.client.get(&["orgs", org, "stacks", &id], &[]).await?;
            ctx.show(value, stack_text)
        }
        StackCommand::Update(args) => {
            let f = &args.fields;
            // The patch replaces drift detection whole: keep the parts no flag names.
            let given = [
                f.drift_schedule.is_some(),
                f.drift_reconcile.is_some(),
                f.drift_timezone.is_some(),
            ];
            let partial_drift =
                !args.clear_drift_detection && given.contains(&true) && given.contains(&false);
            // Any AWS flag rewrites the whole integration: keep what it does not name.
            let aws_change = f.aws_plan_role_arn.is_some() || f.aws_apply_role_arn.is_some();
            let current: Option<Stack> = if partial_drift || aws_change {
                Some(decode(
                    ctx.client
                        .get(&["orgs", org, "stacks", &args.id], &[])
                        .await?,
                )?)
            } else {
                None
            };
            let patch = patch_body(&args, current.as_ref())?;
            if serde_json::to_value(&patch)?
                .as_object()
                .is_some_and(|m| m.is_empty())
            {
                bail!("nothing to change: name at least one field to update (see `bosun stack update --help`)");
            }
            let value = ctx
                .client
                .patch(&["orgs", org, "stacks", &args.id], &patch)
                .await?;
            ctx.show(value, stack_text)
        }
        StackCommand::Delete { id, delete_state } => {
            let query = [("delete_state", delete_state.to_string())];
            ctx.client
                .request::<()>(
                    reqwest::Method::DELETE,
                    &["orgs", org, "stacks", &id],
                    &query,
                    None,
                )
                .await?;
            ctx.done(&format!("Deleted stack {id} from org {org}."))
        }
        StackCommand::Runs {
            stack,
            limit,
            cursor,
            all,
        } => super::run::list(ctx, &stack, limit, cursor, all).await,
        StackCommand::DriftCheck { stack } => {
            let value = ctx
                .client
                .post(
                    &["orgs", org, "stacks", &stack, "drift-checks"],
                    &serde_json::json!({}),
                )
                .await?;
            ctx.show(value, super::run::run_text)
        }
        StackCommand::Triggers {
            stack,
            limit,
            cursor,
            all,
        } => {
            let path = ["orgs", ctx.org.as_str(), "stacks", &stack, "triggers"];
            let pages = super::fetch_pages(ctx, &path, limit, cursor, all).await?;
            super::show_pages(ctx, pages, "triggers", |t: Vec<TriggerEntry>| {
                triggers_table(&stack, t)
            })
        }
        StackCommand::Outputs { stack, version } => {
            let query: Vec<(&str, String)> = version
                .map(|n| ("version", n.to_string()))
                .into_iter()
                .collect();
            let value = ctx
                .client
                .get(&["orgs", org, "stacks", &stack, "outputs"], &query)
                .await?;
            ctx.show(value, |o: StackOutputs| outputs_text(&stack, o))
        }
    }
}

/// The outputs of one version as a table: every output of it or of the version before,
/// by name, with its value (strings as they are, anything else as compact JSON) and what
/// happened to it.
fn outputs_text(stack: &str, o: StackOutputs) -> String {
    let Some(version) = o.version else {
        return format!("Stack {stack} has no state yet.\n");
    };
    let serial = o
        .serial
        .map(|s| format!(" (serial {s})"))
        .unwrap_or_default();
    let against = match (o.previous_version, o.previous_pruned) {
        (Some(p), _) => format!("compared with version {p}"),
        (None, true) => format!(
            "not compared: version {} was deleted by retention",
            version - 1
        ),
        (None, false) => "the first version".into(),
    };
    let mut out = format!("Stack {stack}, state version {version}{serial}, {against}.\n");
    let mut t = Table::new(&["NAME", "VALUE", "CHANGE"]);
    if o.previous_pruned && !o.outputs.is_empty() {
        for (name, v) in &o.outputs {
            t.row(vec![name.clone(), output_value(v), "-".to_string()]);
        }
        out.push_str(&t.render());
        return out;
    }
    if o.changes.is_empty() {
        out.push_str("No outputs.\n");
        return out;
    }
    for c in o.changes {
        let value = o
            .outputs
            .get(&c.name)
            .map_or_else(|| "-".to_string(), output_value);
        let flip = c.sensitivity.map(|s| match s {
            OutputSensitivityChange::BecameSensitive => "became sensitive",
            OutputSensitivityChange::NoLongerSensitive => "no longer sensitive",
        });
        let change = match (c.change, flip) {
            (OutputChangeKind::Added, _) => "added".to_string(),
            (OutputChangeKind::Removed, _) => "removed".to_string(),
            (OutputChangeKind::Changed, Some(flip)) => format!("changed, {flip}"),
            (OutputChangeKind::Changed, None) => "changed".to_string(),
            (OutputChangeKind::SensitivityChanged, flip) => {
                flip.unwrap_or("sensitivity changed").to_string()
            }
            (OutputChangeKind::Unchanged, _) => "unchanged".to_string(),
        };
        t.row(vec![c.name, value, change]);
    }
    out.push_str(&t.render());
    out
}

/// An output's value as the table shows it: strings as they are, anything else as
/// compact JSON, sensitive ones hidden.
fn output_value(v: &StackOutput) -> String {
    if v.sensitive {
        return "(sensitive)".to_string();
    }
    match &v.value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn triggers_table(stack: &str, entries: Vec<TriggerEntry>) -> String {
    if entries.is_empty() {
        return format!("No deliveries have concerned stack {stack} yet.\n");
    }
    let mut t = Table::new(&["RECEIVED", "EVENT", "REF", "COMMIT", "RUN", "REASON"]);
    for e in entries {
        let event = match &e.action {
            Some(a) => format!("{} {a}", e.event),
            None => e.event.clone(),
        };
        let event = if e.duplicate {
            format!("{event} (duplicate)")
        } else {
            event
        };
        t.row(vec![
            timestamp(&e.received_at),
            event,
            e.git_ref.unwrap_or_else(|| "-".into()),
            e.after
                .map(|c| c.chars().take(12).collect())
                .unwrap_or_else(|| "-".into()),
            e.run.unwrap_or_else(|| "-".into()),
            e.reason,
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use serde_json::{json, Value};

    #[derive(Parser)]
    struct T {
        #[command(subcommand)]
        cmd: StackCommand,
    }

    fn update(args: &[&str]) -> anyhow::Result<Value> {
        let parsed = T::try_parse_from(["t", "update"].iter().chain(args))?;
        let StackCommand::Update(u) = parsed.cmd else {
            bail!("not an update");
        };
        Ok(serde_json::to_value(patch_body(&u, None)?)?)
    }

    #[test]
    fn patch_holds_only_named_fields() -> anyhow::Result<()> {
        assert_eq!(update(&["web", "--name", "Web"])?, json!({"name": "Web"}));
        assert_eq!(
            update(&["web", "--clear-environment", "--autodeploy=false"])?,
            json!({"environment": null, "autodeploy": false})
        );
        assert_eq!(
            update(&["web", "--clear-vars", "--clear-drift-detection"])?,
            json!({"variables": {}, "drift_detection": null})
        );
        assert_eq!(
            update(&["web", "--drift-schedule", "0 * * * *", "--drift-reconcile"])?,
            json!({"drift_detection": {"schedule": "0 * * * *", "reconcile": true}})
        );
        assert!(update(&["web", "--drift-reconcile"]).is_err());
        assert_eq!(
            update(&["web", "--label", "prod", "--label", "team-net"])?,
            json!({"labels": ["prod", "team-net"]})
        );
        assert_eq!(update(&["web", "--clear-labels"])?, json!({"labels": []}));
        assert!(update(&["web", "--label", "prod", "--clear-labels"]).is_err());
        assert!(update(&["web", "--environment", "x", "--clear-environment"]).is_err());
        Ok(())
    }

    #[test]
    fn create_flags_and_file_exclude_each_other() {
        let parse = |args: &[&str]| T::try_parse_from(["t", "create"].iter().chain(args));
        assert!(parse(&["web", "--repository", "r", "--autodeploy"]).is_ok());
        assert!(parse(&["--file", "s.json"]).is_ok());
        assert!(parse(&["--file", "s.json", "--name", "x"]).is_err());
        assert!(parse(&["web"]).is_err());
        assert!(parse(&["web", "--repository", "r", "--var", "novalue"]).is_err());
    }

    #[test]
    fn outputs_say_when_the_previous_version_was_pruned() -> anyhow::Result<()> {
        let o: StackOutputs = serde_json::from_value(json!({
            "version": 5, "serial": 5, "previous_version": null, "previous_pruned": true,
            "outputs": {"vpc": {"type": "string", "sensitive": false, "value": "vpc-1"},
                        "pw": {"type": "string", "sensitive": true, "value": null}},
            "changes": [], "changed": false,
        }))?;
        let text = outputs_text("net", o);
        assert!(
            text.starts_with(
                "Stack net, state version 5 (serial 5), not compared: version 4 was deleted by \
                 retention.\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("vpc-1") && text.contains("(sensitive)"),
            "{text}"
        );
        assert!(!text.contains("No outputs"), "{text}");
        let first: StackOutputs = serde_json::from_value(json!({
            "version": 1, "serial": 1, "previous_version": null,
            "outputs": {}, "changes": [], "changed": false,
        }))?;
        assert_eq!(
            outputs_text("net", first),
            "Stack net, state version 1 (serial 1), the first version.\nNo outputs.\n"
        );
        Ok(())
    }
}
