//! `bosun approvals`: the approvals inbox — runs waiting for an approver (paused plan
//! runs, and stack runs whose stack's environment requires approval) — and the decisions
//! on them: `list`, `approve RUN`, `reject RUN`, `decisions`.

use bosun_api::{ApprovalDecide, ApprovalDecisionView, PendingApprovalView};
use clap::Subcommand;

use super::Ctx;
use crate::output::{timestamp, Table};

#[derive(Subcommand)]
pub enum ApprovalsCommand {
    /// Runs waiting for an approval, oldest first.
    List,
    /// Approve a waiting run (operator or above; a grant on protected environments; not
    /// your own run unless the server allows it): a plan run is queued, a stack run's
    /// plan is applied.
    Approve {
        /// The run id (`prun-…` or a stack run's id).
        run: String,
        /// Kept with the decision.
        #[arg(long)]
        comment: Option<String>,
    },
    /// Reject a waiting run: a plan run ends `rejected`, a stack run is discarded.
    Reject {
        /// The run id (`prun-…` or a stack run's id).
        run: String,
        /// Kept with the decision and in the run's reason.
        #[arg(long)]
        comment: Option<String>,
    },
    /// Recorded decisions, newest first, a page at a time.
    Decisions(super::PageArgs),
}

fn what(kind: &str, plan: &Option<String>, stack: &Option<String>) -> String {
    match (kind, plan, stack) {
        ("plan_run", Some(p), _) => format!("plan {p}"),
        (_, _, Some(s)) => format!("stack {s}"),
        _ => kind.to_string(),
    }
}

pub async fn run(ctx: &Ctx, command: ApprovalsCommand) -> anyhow::Result<()> {
    let org = ctx.org.as_str();
    match command {
        ApprovalsCommand::List => {
            let path = ["orgs", org, "approvals"];
            super::list_all(
                ctx,
                &path,
                &[],
                "runs",
                |items: Vec<PendingApprovalView>| {
                    if items.is_empty() {
                        return format!("Nothing waits for an approval in org {org}.\n");
                    }
                    let mut t = Table::new(&[
                        "RUN",
                        "FOR",
                        "ENVIRONMENTS",
                        "REQUESTED BY",
                        "SINCE",
                        "PREVIEW",
                    ]);
                    for i in items {
                        t.row(vec![
                            i.subject.clone(),
                            what(&i.kind, &i.plan, &i.stack),
                            i.environments.join(", "),
                            i.requested_by,
                            timestamp(&i.since),
                            i.preview.unwrap_or_else(|| "-".into()),
                        ]);
                    }
                    t.render()
                },
            )
            .await
        }
        ApprovalsCommand::Approve { run, comment } => decide(ctx, "approve", &run, comment).await,
        ApprovalsCommand::Reject { run, comment } => decide(ctx, "reject", &run, comment).await,
        ApprovalsCommand::Decisions(paging) => {
            let path = ["orgs", org, "approvals", "decisions"];
            super::list_pages(
                ctx,
                &path,
                &[],
                paging,
                "decisions",
                |items: Vec<ApprovalDecisionView>| {
                    if items.is_empty() {
                        return format!("No decisions in org {org}.\n");
                    }
                    let mut t = Table::new(&["RUN", "FOR", "DECISION", "BY", "AT", "COMMENT"]);
                    for d in items {
                        t.row(vec![
                            d.subject.clone(),
                            what(&d.kind, &d.plan, &d.stack),
                            d.decision,
                            d.decided_by,
                            timestamp(&d.decided_at),
                            d.comment.unwrap_or_default(),
                        ]);
                    }
                    t.render()
                },
            )
            .await
        }
    }
}

async fn decide(ctx: &Ctx, verb: &str, run: &str, comment: Option<String>) -> anyhow::Result<()> {
    let reply = ctx
        .client
        .post(
            &["orgs", &ctx.org, "approvals", run, verb],
            &ApprovalDecide { comment },
        )
        .await?;
    ctx.show(reply, |d: ApprovalDecisionView| {
        format!(
            "{} {} ({}); the run is now {}\n",
            d.decision,
            d.subject,
            what(&d.kind, &d.plan, &d.stack),
            d.run_state.as_deref().unwrap_or("unknown")
        )
    })
}
