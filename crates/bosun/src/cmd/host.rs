//! `bosun host`: hosts of an inventory. `check` tries a host's connection stage by stage
//! (resolve, connect, host key, authenticate, sudo) with no server. Server-backed
//! subcommands (`add`, `list`, `show`) join this enum later.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use bosun_plans::connection::check::{self, StageStatus};
use bosun_plans::connection::ConnectOptions;
use clap::Subcommand;
use serde_json::json;

use super::plan::read_inventory;
use crate::output::{self, Table};

#[derive(Subcommand)]
pub enum HostCommand {
    /// Check a host's connection stage by stage; exits non-zero when a stage fails (a
    /// sudo that wants a password is a warning).
    Check {
        /// The host's name in the inventory.
        name: String,
        /// The inventory file.
        #[arg(long, short = 'i', value_name = "FILE")]
        inventory: PathBuf,
        /// How long to wait for the connection.
        #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
        connect_timeout: Duration,
    },
}

fn status_word(s: StageStatus) -> &'static str {
    match s {
        StageStatus::Ok => "ok",
        StageStatus::Warning => "warning",
        StageStatus::Failed => "failed",
        StageStatus::Skipped => "skipped",
    }
}

/// Runs a `bosun host` subcommand; `json` prints machine-readable output.
pub async fn run(command: HostCommand, json: bool) -> anyhow::Result<ExitCode> {
    match command {
        HostCommand::Check {
            name,
            inventory,
            connect_timeout,
        } => {
            let inv = read_inventory(&inventory)?;
            let Some(host) = inv.hosts.iter().find(|h| h.name == name) else {
                let names: Vec<&str> = inv.hosts.iter().map(|h| h.name.as_str()).collect();
                bail!(
                    "no host {name:?} in {} (hosts: {})",
                    inventory.display(),
                    if names.is_empty() {
                        "none".to_string()
                    } else {
                        names.join(", ")
                    }
                );
            };
            let stages = check::check(host, &ConnectOptions { connect_timeout }).await;
            let failed = stages.iter().any(|s| s.status == StageStatus::Failed);
            if json {
                let list: Vec<_> = stages
                    .iter()
                    .map(|s| {
                        json!({
                            "stage": s.name,
                            "status": status_word(s.status),
                            "detail": s.detail,
                        })
                    })
                    .collect();
                output::emit_json(&json!({ "host": host.name, "ok": !failed, "stages": list }))?;
            } else {
                let mut table = Table::new(&["STAGE", "STATUS", "DETAIL"]);
                for s in &stages {
                    table.row(vec![
                        s.name.to_string(),
                        status_word(s.status).to_string(),
                        s.detail.clone(),
                    ]);
                }
                let verdict = if failed {
                    format!("{}: cannot be managed (a stage failed)\n", host.name)
                } else if stages.iter().any(|s| s.status == StageStatus::Warning) {
                    format!("{}: reachable, with warnings\n", host.name)
                } else {
                    format!("{}: ok\n", host.name)
                };
                output::emit(&format!("{}\n{verdict}", table.render()))?;
            }
            Ok(if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
    }
}
