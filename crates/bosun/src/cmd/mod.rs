//! The client commands: each module parses its arguments, calls the API through
//! [`Client`], and prints the answer for people or, with `--json`, as the server sent it.

pub mod approvals;
pub mod audit;
pub mod env;
pub mod host;
pub mod login;
pub mod notify;
pub mod oidc;
pub mod org;
pub mod plan;
pub mod plan_run;
pub mod plan_schedule;
pub mod policy;
pub mod run;
pub mod runners;
pub mod secret;
pub mod session;
pub mod stack;
pub mod state;
pub mod token;
pub mod user;
pub mod whoami;

use anyhow::Context as _;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::client::Client;
use crate::output;

/// What every client command runs with.
pub struct Ctx {
    pub client: Client,
    /// The org that org-scoped commands act in (`--org` / `BOSUN_ORG`).
    pub org: String,
    pub json: bool,
}

impl Ctx {
    /// Prints a response: the raw JSON with `--json`, else `human` applied to it decoded.
    pub fn show<T: DeserializeOwned>(
        &self,
        value: Value,
        human: impl FnOnce(T) -> String,
    ) -> anyhow::Result<()> {
        if self.json {
            return output::emit_json(&value);
        }
        output::emit(&human(decode(value)?))
    }

    /// Confirms an action whose response has no body; `--json` stays silent so a script
    /// reads only what the server sent.
    pub fn done(&self, message: &str) -> anyhow::Result<()> {
        if self.json {
            return Ok(());
        }
        output::emit(&format!("{message}\n"))
    }
}

/// Decodes a response into its wire type; a mismatch means client and server disagree
/// on the API, which the message says rather than showing a serde error alone.
pub fn decode<T: DeserializeOwned>(value: Value) -> anyhow::Result<T> {
    serde_json::from_value(value).context(
        "unexpected response from the server (are the client and server versions compatible?)",
    )
}

/// The paging flags of a list the server pages (hosts, plans, decisions, …).
#[derive(clap::Args)]
pub struct PageArgs {
    /// Items per page (1–1000; the server defaults to 100).
    #[arg(long)]
    pub limit: Option<u32>,
    /// Continue from here: the cursor a previous page printed on stderr.
    #[arg(long, conflicts_with = "all")]
    pub cursor: Option<String>,
    /// Fetch every page, not just the first.
    #[arg(long)]
    pub all: bool,
}

/// Fetches and prints one page (or, with `--all`, every page) of the list at `path`.
pub async fn list_pages<T: DeserializeOwned>(
    ctx: &Ctx,
    path: &[&str],
    filters: &[(&str, String)],
    paging: PageArgs,
    noun: &str,
    human: impl FnOnce(Vec<T>) -> String,
) -> anyhow::Result<()> {
    let PageArgs { limit, cursor, all } = paging;
    let pages = fetch_filtered_pages(ctx, path, filters, limit, cursor, all).await?;
    show_pages(ctx, pages, noun, human)
}

/// Fetches and prints every item of the list at `path`: for the lists the server answers
/// whole, in one page, the pager reads that one page the same way as any other.
pub async fn list_all<T: DeserializeOwned>(
    ctx: &Ctx,
    path: &[&str],
    filters: &[(&str, String)],
    noun: &str,
    human: impl FnOnce(Vec<T>) -> String,
) -> anyhow::Result<()> {
    let pages = fetch_filtered_pages(ctx, path, filters, None, None, true).await?;
    show_pages(ctx, pages, noun, human)
}

/// Fetches a paged list at `path`: one page from `cursor`, or every page with `all`.
/// Returns the items and the cursor of the next page when there is one left unfetched.
pub async fn fetch_pages(
    ctx: &Ctx,
    path: &[&str],
    limit: Option<u32>,
    cursor: Option<String>,
    all: bool,
) -> anyhow::Result<(Vec<Value>, Option<String>)> {
    fetch_filtered_pages(ctx, path, &[], limit, cursor, all).await
}

/// [`fetch_pages`] of a list that also takes `filters` as query parameters.
pub async fn fetch_filtered_pages(
    ctx: &Ctx,
    path: &[&str],
    filters: &[(&str, String)],
    limit: Option<u32>,
    mut cursor: Option<String>,
    all: bool,
) -> anyhow::Result<(Vec<Value>, Option<String>)> {
    let mut items: Vec<Value> = Vec::new();
    let next = loop {
        let mut query = filters.to_vec();
        if let Some(limit) = limit {
            query.push(("limit", limit.to_string()));
        }
        if let Some(c) = &cursor {
            query.push(("cursor", c.clone()));
        }
        let page: bosun_api::Page<Value> = decode(ctx.client.get(path, &query).await?)?;
        items.extend(page.items);
        match page.next_cursor {
            // A cursor that does not move would page forever; treat it as the end.
            Some(next) if all && cursor.as_ref() != Some(&next) => cursor = Some(next),
            Some(next) if !all => break Some(next),
            _ => break None,
        }
    };
    Ok((items, next))
}

/// Prints a fetched list: the JSON page with `--json`, else the table `human` makes,
/// with a hint on stderr when more pages are left.
pub fn show_pages<T: DeserializeOwned>(
    ctx: &Ctx,
    (items, next): (Vec<Value>, Option<String>),
    noun: &str,
    human: impl FnOnce(Vec<T>) -> String,
) -> anyhow::Result<()> {
    if ctx.json {
        return output::emit_json(&serde_json::json!({"items": items, "next_cursor": next}));
    }
    output::emit(&human(decode(Value::Array(items))?))?;
    if let Some(next) = next {
        eprintln!("(more {noun}: use --all, or --cursor {next} for the next page)");
    }
    Ok(())
}
