//! `bosun env`: the org's environments (`staging`, `prod`) — variables, whether runs
//! touching them need approval, whether they are protected — and the grants that let a
//! member approve runs on a protected one.

use std::collections::BTreeMap;

use bosun_api::{EnvironmentCreate, EnvironmentInfo, EnvironmentPatch};
use clap::Subcommand;
use serde_json::Value;

use super::Ctx;
use crate::output::{timestamp, yes_no, Fields, Table};

#[derive(Subcommand)]
pub enum EnvCommand {
    /// Create an environment (org admins).
    Create {
        /// A slug: `staging`, `prod`.
        id: String,
        /// A variable, NAME=VALUE (repeatable); VALUE is read as JSON when it parses
        /// (`3`, `true`, `[1,2]`), else as a string.
        #[arg(long = "var", value_name = "NAME=VALUE", value_parser = parse_var)]
        vars: Vec<(String, Value)>,
        /// Runs touching it wait for an approver (operator or above).
        #[arg(long)]
        requires_approval: bool,
        /// Approvers additionally need a grant on it (`bosun env grant`).
        #[arg(long)]
        protected: bool,
        /// Take hosts from stacks' outputs: a YAML or JSON file with a list of sources
        /// (`stack`, `output`, and templates over `item` for `name`, `address`, …).
        #[arg(long, value_name = "FILE")]
        hosts_from: Option<std::path::PathBuf>,
    },
    /// The org's environments.
    List,
    /// One environment: variables, flags, grants and hosts.
    Show {
        /// The environment's id (e.g. `prod`).
        id: String,
    },
    /// Change an environment (org admins); only what is given changes.
    Update {
        /// The environment's id.
        id: String,
        /// Set a variable, NAME=VALUE (repeatable; kept variables stay).
        #[arg(long = "var", value_name = "NAME=VALUE", value_parser = parse_var)]
        vars: Vec<(String, Value)>,
        /// Remove a variable (repeatable).
        #[arg(long = "unset-var", value_name = "NAME")]
        unset_vars: Vec<String>,
        #[arg(long, value_name = "BOOL")]
        requires_approval: Option<bool>,
        #[arg(long, value_name = "BOOL")]
        protected: Option<bool>,
        /// Replace where it takes hosts from: a YAML or JSON file with a list of sources.
        #[arg(long, value_name = "FILE", conflicts_with = "clear_hosts_from")]
        hosts_from: Option<std::path::PathBuf>,
        /// Take no more hosts from stacks' outputs.
        #[arg(long)]
        clear_hosts_from: bool,
    },
    /// Delete an environment (org admins); refused while hosts are in it.
    Delete {
        /// The environment's id.
        id: String,
    },
    /// Let a member (operator or above) approve runs on a protected environment.
    Grant {
        /// The environment's id.
        id: String,
        /// The member given the grant (a user id).
        user: String,
    },
    /// Take a member's grant away.
    Revoke {
        /// The environment's id.
        id: String,
        /// The member whose grant is taken away (a user id).
        user: String,
    },
}

/// `NAME=VALUE`, the value as JSON when it parses, else a string.
pub fn parse_var(raw: &str) -> Result<(String, Value), String> {
    match raw.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((
            k.to_string(),
            serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_string())),
        )),
        _ => Err(format!("expected NAME=VALUE, got {raw:?}")),
    }
}

/// A `--hosts-from` file: a list of sources, in YAML or JSON.
fn hosts_from_file(path: &std::path::Path) -> anyhow::Result<Value> {
    use anyhow::Context;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    if text.len() > 256 * 1024 {
        anyhow::bail!("{} is larger than 256 KiB", path.display());
    }
    let value: Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(_) => serde_norway::from_str(&text)
            .with_context(|| format!("{} is neither JSON nor YAML", path.display()))?,
    };
    Ok(value)
}

/// Each source, and what it gives now (shown alone): `web-fleet.instances (v3): web-1
/// 10.0.0.1:22, …` or its error.
fn sources_text(e: &EnvironmentInfo) -> (Vec<String>, Vec<String>) {
    let name = |s: &Value| {
        format!(
            "stack {} output {}",
            s["stack"].as_str().unwrap_or("?"),
            s["output"].as_str().unwrap_or("?")
        )
    };
    let sources = e.hosts_from.iter().map(name).collect();
    let preview = e
        .hosts_from_preview
        .iter()
        .flatten()
        .map(|p| match p["error"].as_str() {
            Some(why) => format!("{}: {why}", name(p)),
            None => {
                let hosts: Vec<String> = p["hosts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|h| {
                        format!(
                            "{} {}:{}",
                            h["name"].as_str().unwrap_or("?"),
                            h["address"].as_str().unwrap_or("?"),
                            h["port"]
                        )
                    })
                    .collect();
                format!(
                    "{} (state version {}): {}",
                    name(p),
                    p["version"],
                    if hosts.is_empty() {
                        "no hosts".to_string()
                    } else {
                        hosts.join(", ")
                    }
                )
            }
        })
        .collect();
    (sources, preview)
}

pub fn vars_text(vars: &BTreeMap<String, Value>) -> Vec<String> {
    vars.iter().map(|(k, v)| format!("{k}={v}")).collect()
}

fn env_text(e: EnvironmentInfo) -> String {
    let (sources, preview) = sources_text(&e);
    let mut f = Fields::new();
    f.add("environment", e.id)
        .add("requires approval", yes_no(e.requires_approval))
        .add("protected", yes_no(e.protected))
        .lines("vars", vars_text(&e.vars))
        .lines("grants", e.grants)
        .lines("hosts", e.hosts)
        .lines_if_any("hosts from", sources)
        .lines_if_any("sources now", preview)
        .add("updated", timestamp(&e.updated_at));
    f.render()
}

pub async fn run(ctx: &Ctx, command: EnvCommand) -> anyhow::Result<()> {
    let org = ctx.org.as_str();
    match command {
        EnvCommand::Create {
            id,
            vars,
            requires_approval,
            protected,
            hosts_from,
        } => {
            let body = EnvironmentCreate {
                id,
                vars: Some(Value::Object(vars.into_iter().collect())),
                requires_approval,
                protected,
                hosts_from: hosts_from.as_deref().map(hosts_from_file).transpose()?,
            };
            let reply = ctx
                .client
                .post(&["orgs", org, "environments"], &body)
                .await?;
            ctx.show(reply, |e: EnvironmentInfo| {
                format!("created environment {}\n{}", e.id, env_text(e.clone()))
            })
        }
        EnvCommand::List => {
            let path = ["orgs", org, "environments"];
            super::list_all(
                ctx,
                &path,
                &[],
                "environments",
                |items: Vec<EnvironmentInfo>| {
                    if items.is_empty() {
                        return format!("No environments in org {org}.\n");
                    }
                    let mut t = Table::new(&["ID", "APPROVAL", "PROTECTED", "HOSTS", "GRANTS"]);
                    for e in items {
                        t.row(vec![
                            e.id,
                            yes_no(e.requires_approval).into(),
                            yes_no(e.protected).into(),
                            e.hosts.len().to_string(),
                            if e.grants.is_empty() {
                                "-".into()
                            } else {
                                e.grants.join(",")
                            },
                        ]);
                    }
                    t.render()
                },
            )
            .await
        }
        EnvCommand::Show { id } => {
            let reply = ctx
                .client
                .get(&["orgs", org, "environments", &id], &[])
                .await?;
            ctx.show(reply, env_text)
        }
        EnvCommand::Update {
            id,
            vars,
            unset_vars,
            requires_approval,
            protected,
            hosts_from,
            clear_hosts_from,
        } => {
            let new_vars = if vars.is_empty() && unset_vars.is_empty() {
                None
            } else {
                let current: EnvironmentInfo = super::decode(
                    ctx.client
                        .get(&["orgs", org, "environments", &id], &[])
                        .await?,
                )?;
                let mut merged = current.vars;
                for name in &unset_vars {
                    merged.remove(name);
                }
                merged.extend(vars);
                Some(Value::Object(merged.into_iter().collect()))
            };
            let hosts_from = match (hosts_from, clear_hosts_from) {
                (Some(path), _) => Some(hosts_from_file(&path)?),
                (None, true) => Some(Value::Array(Vec::new())),
                (None, false) => None,
            };
            let body = EnvironmentPatch {
                vars: new_vars,
                requires_approval,
                protected,
                hosts_from,
            };
            let reply = ctx
                .client
                .patch(&["orgs", org, "environments", &id], &body)
                .await?;
            ctx.show(reply, |e: EnvironmentInfo| {
                format!("updated environment {}\n{}", e.id, env_text(e.clone()))
            })
        }
        EnvCommand::Delete { id } => {
            ctx.client
                .delete(&["orgs", org, "environments", &id])
                .await?;
            ctx.done(&format!("deleted environment {id}"))
        }
        EnvCommand::Grant { id, user } => {
            let reply = ctx
                .client
                .request::<()>(
                    reqwest::Method::PUT,
                    &["orgs", org, "environments", &id, "grants", &user],
                    &[],
                    None,
                )
                .await?;
            ctx.show(reply, |e: EnvironmentInfo| {
                format!(
                    "{user} may approve runs on {} (grants: {})\n",
                    e.id,
                    e.grants.join(", ")
                )
            })
        }
        EnvCommand::Revoke { id, user } => {
            ctx.client
                .delete(&["orgs", org, "environments", &id, "grants", &user])
                .await?;
            ctx.done(&format!("revoked {user}'s grant on {id}"))
        }
    }
}
