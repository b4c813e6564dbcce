//! `bosun secret`: the org's built-in secret store — set (value from a flag, a file or
//! standard input), list (names only) and delete. Values are never shown again.

use std::io::Read as _;
use std::path::PathBuf;

use anyhow::{bail, Context as _};
use bosun_api::{SecretInfo, SecretPut};
use clap::Subcommand;

use super::Ctx;
use crate::output::{timestamp, Table};

#[derive(Subcommand)]
pub enum SecretCommand {
    /// Set a secret (org admins): `bosun secret set NAMESPACE/KEY`, the value from
    /// --value, --from-file, or standard input.
    Set {
        /// `NAMESPACE/KEY`; stacks refer to it as `secret://NAMESPACE/KEY`.
        name: String,
        /// The value (visible in your shell history: prefer --from-file or stdin).
        #[arg(long, conflicts_with = "from_file")]
        value: Option<String>,
        /// Read the value from this file (a trailing newline is kept).
        #[arg(long, value_name = "FILE")]
        from_file: Option<PathBuf>,
    },
    /// List the org's secrets (names, never values).
    List {
        /// Only this namespace.
        #[arg(long)]
        namespace: Option<String>,
    },
    /// Delete a secret (org admins).
    Delete {
        /// The secret, as `NAMESPACE/KEY` (or `secret://NAMESPACE/KEY`).
        name: String,
    },
}

fn split(name: &str) -> anyhow::Result<(&str, &str)> {
    let name = name.strip_prefix("secret://").unwrap_or(name);
    match name.split_once('/') {
        Some((ns, key)) if !ns.is_empty() && !key.is_empty() => Ok((ns, key)),
        _ => bail!("expected NAMESPACE/KEY (got {name:?})"),
    }
}

pub async fn run(ctx: &Ctx, command: SecretCommand) -> anyhow::Result<()> {
    let org = ctx.org.as_str();
    match command {
        SecretCommand::Set {
            name,
            value,
            from_file,
        } => {
            let (ns, key) = split(&name)?;
            let value = match (value, from_file) {
                (Some(v), _) => v,
                (None, Some(f)) => std::fs::read_to_string(&f)
                    .with_context(|| format!("reading {}", f.display()))?,
                (None, None) => {
                    let mut v = String::new();
                    std::io::stdin()
                        .read_to_string(&mut v)
                        .context("reading the value from standard input")?;
                    v.strip_suffix('\n').map(String::from).unwrap_or(v)
                }
            };
            let reply = ctx
                .client
                .put(&["orgs", org, "secrets", ns, key], &SecretPut { value })
                .await?;
            ctx.show(reply, |s: SecretInfo| format!("set {}\n", s.reference))
        }
        SecretCommand::List { namespace } => {
            let query: Vec<(&str, String)> =
                namespace.map(|n| ("namespace", n)).into_iter().collect();
            let path = ["orgs", org, "secrets"];
            super::list_all(ctx, &path, &query, "secrets", |items: Vec<SecretInfo>| {
                if items.is_empty() {
                    return format!("No secrets in org {org}.\n");
                }
                let mut t = Table::new(&["REFERENCE", "UPDATED", "BY"]);
                for s in items {
                    t.row(vec![s.reference, timestamp(&s.updated_at), s.updated_by]);
                }
                t.render()
            })
            .await
        }
        SecretCommand::Delete { name } => {
            let (ns, key) = split(&name)?;
            ctx.client
                .delete(&["orgs", org, "secrets", ns, key])
                .await?;
            ctx.done(&format!("deleted secret://{ns}/{key}"))
        }
    }
}
