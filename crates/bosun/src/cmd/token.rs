//! `bosun token`: minting, listing and revoking personal tokens and (with `--pool`) the
//! org's runner-pool tokens.

use bosun_api::{PersonalTokenCreate, PoolTokenCreate, Token, TokenCreated};
use chrono::Utc;
use clap::Subcommand;

use super::Ctx;
use crate::output::{opt_timestamp, timestamp, Fields, Table};

#[derive(Subcommand)]
pub enum TokenCommand {
    /// Create a token. Its secret is printed once and never again.
    Create {
        /// What the token is for.
        #[arg(long, default_value = "")]
        description: String,
        /// Lifetime, e.g. `30d`, `12h`, `1y` [default: never expires].
        #[arg(long, value_name = "DURATION", value_parser = parse_lifetime)]
        expires_in: Option<u64>,
        /// Create a personal token for this user (server administrators only).
        #[arg(long, conflicts_with = "pool")]
        user: Option<String>,
        /// Create a runner-pool token of --org for this pool (a pool slug; the server mints the
        /// `hosted` pool's token itself).
        #[arg(long)]
        pool: Option<String>,
    },
    /// List your personal tokens, or with --pool the runner-pool tokens of --org.
    List {
        #[arg(long)]
        pool: bool,
    },
    /// Revoke a token by id; with --pool, a runner-pool token of --org.
    Revoke {
        /// The token's id (see `bosun token list`).
        id: String,
        #[arg(long)]
        pool: bool,
    },
}

/// `30d` → seconds. The server enforces the allowed range, so this only parses.
fn parse_lifetime(raw: &str) -> Result<u64, String> {
    humantime::parse_duration(raw)
        .map(|d| d.as_secs())
        .map_err(|e| format!("{e} (expected a duration such as 90m, 12h, 30d or 1y)"))
}

fn owner(t: &Token) -> String {
    match (&t.user, &t.org, &t.pool) {
        (Some(user), _, _) => format!("user {user}"),
        (None, Some(org), Some(pool)) => format!("pool {org}/{pool}"),
        (None, Some(org), None) => format!("org {org}"),
        _ => "-".into(),
    }
}

fn dash_if_empty(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_string()
    }
}

fn status(t: &Token) -> &'static str {
    if t.revoked_at.is_some() {
        "revoked"
    } else if t.expires_at.is_some_and(|e| e <= Utc::now()) {
        "expired"
    } else {
        "active"
    }
}

fn created_text(c: TokenCreated) -> String {
    let t = c.token;
    let mut f = Fields::new();
    f.add("id", t.id.clone())
        .add("kind", t.kind.clone())
        .add("owner", owner(&t))
        .add("description", dash_if_empty(&t.description))
        .add("expires", opt_timestamp(&t.expires_at))
        .add("secret", c.secret);
    format!(
        "{}\nThis is the only time the secret is shown: it will not be shown again. Store it now.\n",
        f.render()
    )
}

pub async fn run(ctx: &Ctx, cmd: TokenCommand) -> anyhow::Result<()> {
    let org = ctx.org.as_str();
    match cmd {
        TokenCommand::Create {
            description,
            expires_in,
            user,
            pool,
        } => {
            let value = match pool {
                Some(pool) => {
                    let body = PoolTokenCreate {
                        pool,
                        description,
                        expires_in_seconds: expires_in,
                    };
                    ctx.client
                        .post(&["orgs", org, "pool-tokens"], &body)
                        .await?
                }
                None => {
                    let body = PersonalTokenCreate {
                        description,
                        expires_in_seconds: expires_in,
                        user,
                    };
                    ctx.client.post(&["tokens"], &body).await?
                }
            };
            ctx.show(value, created_text)
        }
        TokenCommand::List { pool } => {
            let path: &[&str] = if pool {
                &["orgs", org, "pool-tokens"]
            } else {
                &["tokens"]
            };
            super::list_all(ctx, path, &[], "tokens", |tokens: Vec<Token>| {
                let mut t = Table::new(&[
                    "ID",
                    "KIND",
                    "OWNER",
                    "STATUS",
                    "CREATED",
                    "EXPIRES",
                    "DESCRIPTION",
                ]);
                for tok in tokens {
                    t.row(vec![
                        tok.id.clone(),
                        tok.kind.clone(),
                        owner(&tok),
                        status(&tok).into(),
                        timestamp(&tok.created_at),
                        opt_timestamp(&tok.expires_at),
                        tok.description,
                    ]);
                }
                t.render()
            })
            .await
        }
        TokenCommand::Revoke { id, pool } => {
            if pool {
                ctx.client
                    .delete(&["orgs", org, "pool-tokens", &id])
                    .await?;
            } else {
                ctx.client.delete(&["tokens", &id]).await?;
            }
            ctx.done(&format!("Revoked token {id}."))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes() {
        assert_eq!(parse_lifetime("30d"), Ok(30 * 24 * 3600));
        assert_eq!(parse_lifetime("90m"), Ok(5400));
        assert!(parse_lifetime("soon").is_err());
    }
}
