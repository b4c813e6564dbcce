//! `bosun audit`: the org's audit log (or, for server admins, every org's), newest first.

use bosun_api::AuditEvent;
use clap::Args;

use super::Ctx;
use crate::output::{timestamp, Table};

#[derive(Args)]
pub struct AuditArgs {
    /// Show at most this many events (1–1000; the server defaults to 100).
    #[arg(long)]
    limit: Option<u32>,
    /// Start after this point: the cursor a previous page printed (older events).
    #[arg(long, alias = "before")]
    cursor: Option<String>,
    /// The whole server's log: every org's events and server-level ones such as user
    /// creation (server administrators only).
    #[arg(long)]
    server: bool,
    /// Only this actor's events (`user:alice`, `system`, `run:<id>`, …).
    #[arg(long)]
    actor: Option<String>,
    /// Only this action (`state.force_unlock`) or every action under it (`state`).
    #[arg(long)]
    action: Option<String>,
    /// Only events about this target (`stack:prod`, `plan:app-config`, …).
    #[arg(long)]
    target: Option<String>,
}

pub async fn run(ctx: &Ctx, args: AuditArgs) -> anyhow::Result<()> {
    let mut filters = Vec::new();
    for (key, value) in [
        ("actor", &args.actor),
        ("action", &args.action),
        ("target", &args.target),
    ] {
        if let Some(v) = value {
            filters.push((key, v.clone()));
        }
    }
    let path: &[&str] = if args.server {
        &["audit"]
    } else {
        &["orgs", &ctx.org, "audit"]
    };
    let pages =
        super::fetch_filtered_pages(ctx, path, &filters, args.limit, args.cursor, false).await?;
    super::show_pages(ctx, pages, "events", |events: Vec<AuditEvent>| {
        let mut t = Table::new(&["SEQ", "AT", "ORG", "ACTOR", "ACTION", "TARGET", "DETAIL"]);
        for e in events {
            let detail = match &e.detail {
                serde_json::Value::Object(m) if m.is_empty() => String::new(),
                serde_json::Value::Null => String::new(),
                other => other.to_string(),
            };
            t.row(vec![
                e.seq.to_string(),
                timestamp(&e.at),
                e.org.unwrap_or_else(|| "-".into()),
                e.actor,
                e.action,
                e.target,
                detail,
            ]);
        }
        t.render()
    })
}
