//! `bosun runners`: the runners serving the org (state, egress and last-seen), and draining
//! one.

use bosun_api::{RunnerEgress, RunnerView};
use clap::Subcommand;

use super::Ctx;
use crate::output::{timestamp, Table};

#[derive(Subcommand)]
pub enum RunnersCommand {
    /// The runners serving this org: the server's hosted runners and the org's pools.
    List,
    /// Stop giving a runner new work; it finishes what it holds (admins).
    Drain {
        /// The runner's id (see `bosun runners list`).
        runner: String,
    },
}

/// A runner's egress as the table shows it: `restricted` (the egress sandbox), `open` (no
/// sandbox), `open (opted out)` (no sandbox on a runner that should have one), `-` (the
/// runner did not say).
fn egress_text(egress: Option<RunnerEgress>) -> &'static str {
    match egress {
        Some(RunnerEgress::Restricted) => "restricted",
        Some(RunnerEgress::Unrestricted) => "open",
        Some(RunnerEgress::OptedOut) => "open (opted out)",
        None => "-",
    }
}

pub async fn run(ctx: &Ctx, command: RunnersCommand) -> anyhow::Result<()> {
    match command {
        RunnersCommand::List => {
            let path = ["orgs", ctx.org.as_str(), "runners"];
            super::list_all(ctx, &path, &[], "runners", |runners: Vec<RunnerView>| {
                let mut t = Table::new(&[
                    "RUNNER",
                    "NAME",
                    "POOL",
                    "STATUS",
                    "EGRESS",
                    "LAST SEEN",
                    "VERSION",
                ]);
                for r in runners {
                    t.row(vec![
                        r.id,
                        r.name,
                        r.pool,
                        r.status,
                        egress_text(r.egress).to_string(),
                        timestamp(&r.last_seen),
                        r.version,
                    ]);
                }
                t.render()
            })
            .await
        }
        RunnersCommand::Drain { runner } => {
            ctx.client
                .post(
                    &["orgs", &ctx.org, "runners", &runner, "drain"],
                    &serde_json::json!({}),
                )
                .await?;
            ctx.done(&format!("runner {runner} drained: it takes no new work"))
        }
    }
}
