//! `bosun host`: the org's hosts on the server — add, list, show, update, delete, import
//! an inventory file — and `check`, which tries a host's connection stage by stage
//! (resolve, connect, host key, authenticate, sudo) from this machine: a host of an
//! inventory file with `--inventory`, else the server's record of it (with the records
//! of the bastions it is reached through). A host behind bastions (`proxy_jump`) shows
//! each bastion's stages first, named after it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use bosun_api::{HostCreate, HostInfo, HostPatch, InventoryImportAnswer, InventoryImportRequest};
use bosun_plans::connection::check::{self, StageStatus};
use bosun_plans::connection::ConnectOptions;
use bosun_plans::model::{ConnectionKind, Host, MAX_JUMPS};
use clap::{Args, Subcommand};
use serde_json::{json, Value};

use super::env::{parse_var, vars_text};
use super::plan::read_inventory;
use super::Ctx;
use crate::output::{self, timestamp, Fields, Table};

#[derive(Subcommand)]
pub enum HostCommand {
    /// Add a host to the org (org admins).
    Add(AddArgs),
    /// The org's hosts, by name, a page at a time.
    List {
        #[command(flatten)]
        paging: super::PageArgs,
        /// Add a SOURCE column: where a host taken from a stack's output came from (stack,
        /// output, state version), or `-` for one added by hand.
        #[arg(long)]
        source: bool,
    },
    /// One host.
    Show {
        /// The host's name.
        name: String,
    },
    /// Change a host (org admins); only what is given changes.
    Update(UpdateArgs),
    /// Delete a host (org admins).
    Delete {
        /// The host's name.
        name: String,
    },
    /// Import an inventory file (the one `bosun plan exec --inventory` reads): its
    /// environments and hosts are created, or replaced when they exist, all at once.
    Import {
        /// The inventory file (YAML).
        file: PathBuf,
    },
    /// Check a host's connection stage by stage from this machine; exits non-zero when a
    /// stage fails (a sudo that wants a password is a warning).
    Check {
        /// The host's name: in the inventory file, or on the server.
        name: String,
        /// The inventory file; without it the host is fetched from the server.
        #[arg(long, short = 'i', value_name = "FILE")]
        inventory: Option<PathBuf>,
        /// How long to wait for the connection.
        #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
        connect_timeout: Duration,
    },
}

#[derive(Args)]
pub struct AddArgs {
    /// `[a-z0-9][a-z0-9._-]*`.
    name: String,
    /// DNS name or IP address (default: the name).
    #[arg(long)]
    address: Option<String>,
    /// SSH port (default 22).
    #[arg(long)]
    port: Option<i64>,
    /// The user to log in as (default: the runner's user).
    #[arg(long)]
    user: Option<String>,
    /// `ssh` (default) or `local`.
    #[arg(long)]
    connection: Option<String>,
    /// A label (repeatable).
    #[arg(long = "label", value_name = "LABEL")]
    labels: Vec<String>,
    /// A variable, NAME=VALUE (repeatable); VALUE is read as JSON when it parses.
    #[arg(long = "var", value_name = "NAME=VALUE", value_parser = parse_var)]
    vars: Vec<(String, Value)>,
    /// The host's environment.
    #[arg(long)]
    environment: Option<String>,
    /// Private key path on the runner's machine (default: the agent, then ~/.ssh/id_*).
    #[arg(long, value_name = "PATH")]
    identity_file: Option<String>,
    /// The host's public key, pinned (`ssh-ed25519 AAAA…`), instead of known_hosts.
    #[arg(long, value_name = "KEY")]
    host_key: Option<String>,
    /// known_hosts path on the runner's machine (default ~/.ssh/known_hosts).
    #[arg(long, value_name = "PATH")]
    known_hosts: Option<String>,
    /// The bastion the host is reached through: another ssh host of the org.
    #[arg(long, value_name = "NAME")]
    proxy_jump: Option<String>,
}

#[derive(Args)]
pub struct UpdateArgs {
    /// The host's name.
    name: String,
    #[arg(long)]
    address: Option<String>,
    #[arg(long)]
    port: Option<i64>,
    #[arg(long)]
    user: Option<String>,
    #[arg(long)]
    connection: Option<String>,
    /// Replace the labels with these (repeatable).
    #[arg(long = "label", value_name = "LABEL")]
    labels: Vec<String>,
    /// Remove every label.
    #[arg(long, conflicts_with = "labels")]
    no_labels: bool,
    /// Set a variable, NAME=VALUE (repeatable; the others stay).
    #[arg(long = "var", value_name = "NAME=VALUE", value_parser = parse_var)]
    vars: Vec<(String, Value)>,
    /// Remove a variable (repeatable).
    #[arg(long = "unset-var", value_name = "NAME")]
    unset_vars: Vec<String>,
    #[arg(long)]
    environment: Option<String>,
    #[arg(long, value_name = "PATH")]
    identity_file: Option<String>,
    #[arg(long, value_name = "KEY")]
    host_key: Option<String>,
    #[arg(long, value_name = "PATH")]
    known_hosts: Option<String>,
    /// The bastion the host is reached through: another ssh host of the org.
    #[arg(long, value_name = "NAME")]
    proxy_jump: Option<String>,
    /// Clear an optional field: user, environment, identity-file, host-key, known-hosts,
    /// proxy-jump (repeatable).
    #[arg(long, value_name = "FIELD")]
    clear: Vec<String>,
}

fn status_word(s: StageStatus) -> &'static str {
    match s {
        StageStatus::Ok => "ok",
        StageStatus::Warning => "warning",
        StageStatus::Failed => "failed",
        StageStatus::Skipped => "skipped",
    }
}

fn or_dash(v: Option<String>) -> String {
    v.unwrap_or_else(|| "-".into())
}

fn host_text(h: HostInfo) -> String {
    let mut f = Fields::new();
    f.add("host", h.name)
        .add("address", format!("{}:{}", h.address, h.port))
        .add("connection", h.connection)
        .add("user", or_dash(h.user))
        .add("environment", or_dash(h.environment))
        .add(
            "labels",
            if h.labels.is_empty() {
                "-".into()
            } else {
                h.labels.join(", ")
            },
        )
        .lines("vars", vars_text(&h.vars))
        .add("identity file", or_dash(h.identity_file))
        .add("host key", or_dash(h.host_key))
        .add("known hosts", or_dash(h.known_hosts))
        .add("proxy jump", or_dash(h.proxy_jump))
        .lines_if_any(
            "source",
            h.source.iter().map(|_| source_text(&h.source)).collect(),
        )
        .add("updated", timestamp(&h.updated_at));
    f.render()
}

/// Where a host came from: `stack web-fleet output instances (state version 3)`.
fn source_text(source: &Option<serde_json::Value>) -> String {
    match source {
        Some(s) => format!(
            "stack {} output {} (state version {})",
            s["stack"].as_str().unwrap_or("?"),
            s["output"].as_str().unwrap_or("?"),
            s["version"]
        ),
        None => "-".into(),
    }
}

fn host_table(org: &str, hosts: Vec<HostInfo>, with_source: bool) -> String {
    if hosts.is_empty() {
        return format!("No hosts in org {org}.\n");
    }
    let mut columns = vec![
        "NAME",
        "ADDRESS",
        "CONNECTION",
        "USER",
        "ENVIRONMENT",
        "LABELS",
        "PROXY JUMP",
    ];
    if with_source {
        columns.push("SOURCE");
    }
    let mut t = Table::new(&columns);
    for h in hosts {
        let source = source_text(&h.source);
        let mut row = vec![
            h.name,
            format!("{}:{}", h.address, h.port),
            h.connection,
            or_dash(h.user),
            or_dash(h.environment),
            if h.labels.is_empty() {
                "-".into()
            } else {
                h.labels.join(",")
            },
            or_dash(h.proxy_jump),
        ];
        if with_source {
            row.push(source);
        }
        t.row(row);
    }
    t.render()
}

fn patch_body(args: UpdateArgs, current: Option<&HostInfo>) -> anyhow::Result<HostPatch> {
    let mut patch = HostPatch {
        address: args.address,
        port: args.port,
        user: args.user.map(Some),
        connection: args.connection,
        labels: if args.no_labels {
            Some(vec![])
        } else if args.labels.is_empty() {
            None
        } else {
            Some(args.labels)
        },
        vars: None,
        environment: args.environment.map(Some),
        identity_file: args.identity_file.map(Some),
        host_key: args.host_key.map(Some),
        known_hosts: args.known_hosts.map(Some),
        proxy_jump: args.proxy_jump.map(Some),
    };
    if let Some(current) = current {
        let mut vars = current.vars.clone();
        for name in &args.unset_vars {
            vars.remove(name);
        }
        vars.extend(args.vars);
        patch.vars = Some(Value::Object(vars.into_iter().collect()));
    }
    for field in &args.clear {
        let slot = match field.as_str() {
            "user" => &mut patch.user,
            "environment" => &mut patch.environment,
            "identity-file" | "identity_file" => &mut patch.identity_file,
            "host-key" | "host_key" => &mut patch.host_key,
            "known-hosts" | "known_hosts" => &mut patch.known_hosts,
            "proxy-jump" | "proxy_jump" => &mut patch.proxy_jump,
            other => bail!(
                "--clear {other:?}: expected user, environment, identity-file, host-key, known-hosts or proxy-jump"
            ),
        };
        if slot.as_ref().is_some_and(Option::is_some) {
            bail!("--clear {field} and a new value for it at once: choose one");
        }
        *slot = Some(None);
    }
    Ok(patch)
}

/// `~` and `~/…` as this machine's home folder (the server keeps paths as written).
fn expand_home(p: &str) -> PathBuf {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty());
    match (p, home) {
        ("~", Some(h)) => PathBuf::from(h),
        (p, Some(h)) if p.starts_with("~/") => PathBuf::from(h).join(&p[2..]),
        (p, _) => PathBuf::from(p),
    }
}

/// The server's record of a host, as the engine connects to it from this machine, with
/// `bastion`: the host it is reached through, already made so (`None`: directly).
fn engine_host(h: HostInfo, bastion: Option<Arc<Host>>) -> Host {
    Host {
        name: h.name,
        address: h.address,
        port: h.port,
        user: h.user,
        connection: if h.connection == "local" {
            ConnectionKind::Local
        } else {
            ConnectionKind::Ssh
        },
        labels: h.labels,
        vars: h.vars.into_iter().collect::<BTreeMap<_, _>>(),
        environment: h.environment,
        identity_file: h.identity_file.as_deref().map(expand_home),
        known_hosts: h.known_hosts.as_deref().map(expand_home),
        host_key: h.host_key,
        proxy_jump: bastion,
    }
}

/// Host `name` as the server keeps it, with the bastions it is reached through (each
/// read from the server in turn), as the engine connects to it from this machine.
async fn server_host(ctx: &Ctx, name: &str) -> anyhow::Result<Host> {
    let fetch = |name: String| async move {
        super::decode::<HostInfo>(
            ctx.client
                .get(&["orgs", &ctx.org, "hosts", &name], &[])
                .await
                .with_context(|| {
                    format!("fetching host {name:?} from the server (or pass --inventory FILE)")
                })?,
        )
    };
    let host = fetch(name.to_string()).await?;
    // The host, then each bastion in turn: the last is reached directly.
    let mut chain = vec![host];
    while let Some(bastion) = chain.last().and_then(|h| h.proxy_jump.clone()) {
        if chain.iter().any(|h| h.name == bastion) {
            bail!(
                "the bastions of host {name:?} go round in a cycle at {bastion:?} (on the server)"
            );
        }
        if chain.len() > MAX_JUMPS {
            bail!("host {name:?} is reached through more than {MAX_JUMPS} bastions");
        }
        let info = fetch(bastion.clone())
            .await
            .with_context(|| format!("host {name:?} is reached through bastion {bastion:?}"))?;
        chain.push(info);
    }
    let mut via: Option<Arc<Host>> = None;
    while let Some(info) = chain.pop() {
        let host = engine_host(info, via.take());
        if chain.is_empty() {
            return Ok(host);
        }
        via = Some(Arc::new(host));
    }
    unreachable!("the chain holds the host itself")
}

fn inventory_host(inventory: &Path, name: &str) -> anyhow::Result<Host> {
    let inv = read_inventory(inventory)?;
    if let Some(host) = inv.hosts.iter().find(|h| h.name == name) {
        return Ok(host.clone());
    }
    let names: Vec<&str> = inv.hosts.iter().map(|h| h.name.as_str()).collect();
    bail!(
        "no host {name:?} in {} (hosts: {})",
        inventory.display(),
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    )
}

async fn check_cmd(host: Host, connect_timeout: Duration, json: bool) -> anyhow::Result<ExitCode> {
    let stages = check::check(&host, &ConnectOptions { connect_timeout }).await;
    let broke = check::failed_stage(&stages);
    let failed = broke.is_some();
    if json {
        let list: Vec<_> = stages
            .iter()
            .map(|s| {
                json!({
                    "stage": s.name,
                    // The bastion the stage checked; null for the host's own stages.
                    "bastion": s.bastion,
                    "status": status_word(s.status),
                    "detail": s.detail,
                })
            })
            .collect();
        output::emit_json(&json!({ "host": host.name, "ok": !failed, "stages": list }))?;
    } else {
        // Behind bastions, every stage is named after the host it checked.
        let hops = stages.iter().any(|s| s.bastion.is_some());
        let mut table = Table::new(&["STAGE", "STATUS", "DETAIL"]);
        for s in &stages {
            table.row(vec![
                if hops && s.bastion.is_none() {
                    format!("{}: {}", host.name, s.name)
                } else {
                    s.label()
                },
                status_word(s.status).to_string(),
                s.detail.clone(),
            ]);
        }
        let verdict = match broke {
            Some(stage) => match &stage.bastion {
                Some(bastion) => format!(
                    "{}: cannot be managed (bastion {bastion:?} failed at {})\n",
                    host.name, stage.name
                ),
                None => format!("{}: cannot be managed (a stage failed)\n", host.name),
            },
            None if stages.iter().any(|s| s.status == StageStatus::Warning) => {
                format!("{}: reachable, with warnings\n", host.name)
            }
            None => format!("{}: ok\n", host.name),
        };
        output::emit(&format!("{}\n{verdict}", table.render()))?;
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Runs a `bosun host` subcommand. `server` is the client context, or why there is none
/// (no token): only the server-backed subcommands need it.
pub async fn run(
    command: HostCommand,
    json: bool,
    server: anyhow::Result<Ctx>,
) -> anyhow::Result<ExitCode> {
    if let HostCommand::Check {
        name,
        inventory: Some(inventory),
        connect_timeout,
    } = &command
    {
        return check_cmd(inventory_host(inventory, name)?, *connect_timeout, json).await;
    }
    let ctx = server?;
    let org = ctx.org.as_str();
    match command {
        HostCommand::Check {
            name,
            connect_timeout,
            ..
        } => {
            let host = server_host(&ctx, &name).await?;
            return check_cmd(host, connect_timeout, json).await;
        }
        HostCommand::Add(a) => {
            let body = HostCreate {
                name: a.name,
                address: a.address,
                port: a.port,
                user: a.user,
                connection: a.connection,
                labels: a.labels,
                vars: Some(Value::Object(a.vars.into_iter().collect())),
                environment: a.environment,
                identity_file: a.identity_file,
                host_key: a.host_key,
                known_hosts: a.known_hosts,
                proxy_jump: a.proxy_jump,
            };
            let reply = ctx.client.post(&["orgs", org, "hosts"], &body).await?;
            ctx.show(reply, |h: HostInfo| {
                format!("added host {}\n{}", h.name, host_text(h.clone()))
            })?;
        }
        HostCommand::List { paging, source } => {
            let path = ["orgs", org, "hosts"];
            super::list_pages(&ctx, &path, &[], paging, "hosts", |hosts: Vec<HostInfo>| {
                host_table(org, hosts, source)
            })
            .await?;
        }
        HostCommand::Show { name } => {
            let reply = ctx.client.get(&["orgs", org, "hosts", &name], &[]).await?;
            ctx.show(reply, host_text)?;
        }
        HostCommand::Update(args) => {
            let name = args.name.clone();
            let current = if args.vars.is_empty() && args.unset_vars.is_empty() {
                None
            } else {
                Some(super::decode::<HostInfo>(
                    ctx.client.get(&["orgs", org, "hosts", &name], &[]).await?,
                )?)
            };
            let body = patch_body(args, current.as_ref())?;
            let reply = ctx
                .client
                .patch(&["orgs", org, "hosts", &name], &body)
                .await?;
            ctx.show(reply, |h: HostInfo| {
                format!("updated host {}\n{}", h.name, host_text(h.clone()))
            })?;
        }
        HostCommand::Delete { name } => {
            ctx.client.delete(&["orgs", org, "hosts", &name]).await?;
            ctx.done(&format!("deleted host {name}"))?;
        }
        HostCommand::Import { file } => {
            let source = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            let body = InventoryImportRequest {
                source,
                file: Some(file.display().to_string()),
            };
            let reply = ctx.client.post(&["orgs", org, "inventory"], &body).await?;
            ctx.show(reply, |a: InventoryImportAnswer| {
                let list = |v: &[String]| {
                    if v.is_empty() {
                        "-".to_string()
                    } else {
                        v.join(", ")
                    }
                };
                let mut f = Fields::new();
                f.add("environments created", list(&a.environments_created))
                    .add("environments updated", list(&a.environments_updated))
                    .add("hosts created", list(&a.hosts_created))
                    .add("hosts updated", list(&a.hosts_updated));
                format!("imported {}\n{}", file.display(), f.render())
            })?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
