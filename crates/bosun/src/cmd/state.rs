//! `bosun state`: a stack's state versions and documents, its lock, and force-unlock.

use std::collections::BTreeMap;

use anyhow::{bail, Context as _};
use bosun_api::{
    ForceUnlock, Page, StateLockStatus, StateLockView, StateOutput, StateVersion,
    StateVersionDetail, StateWriter,
};
use clap::Subcommand;
use serde_json::Value;

use super::{decode, Ctx};
use crate::output::{emit, emit_json, timestamp, Fields, Table};

#[derive(Subcommand)]
pub enum StateCommand {
    /// List a stack's state versions, newest first.
    Versions {
        /// The stack's id.
        stack: String,
        /// Versions per page (1–1000; the server defaults to 100).
        #[arg(long)]
        limit: Option<u32>,
        /// Start below this version (a previous page's next cursor).
        #[arg(long, conflicts_with = "all")]
        cursor: Option<String>,
        /// Fetch every page, not just the first.
        #[arg(long)]
        all: bool,
    },
    /// Print a state document: the current one, or version N with --version.
    Show {
        /// The stack's id.
        stack: String,
        /// Show this version instead of the current one (with --json: the version's
        /// metadata and document).
        #[arg(long, value_name = "N")]
        version: Option<i64>,
        /// Print only the outputs (sensitive values hidden), not the document.
        #[arg(long)]
        outputs: bool,
    },
    /// Show who holds the stack's state lock, if anyone.
    Lock {
        /// The stack's id.
        stack: String,
    },
    /// Release the stack's state lock, whoever holds it. The ID must match the held
    /// lock's (see `bosun state lock`).
    ForceUnlock {
        /// The stack's id.
        stack: String,
        /// The held lock's ID (see `bosun state lock STACK`).
        lock_id: String,
    },
}

fn writer(w: &StateWriter) -> String {
    format!("{}:{}", w.kind, w.id)
}

fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_string()
    }
}

/// `1536` → `1.5 KiB`.
fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// A lock's age in its two largest units: `45s`, `3m12s`, `2h5m`, `3d4h`.
fn age(seconds: i64) -> String {
    let s = seconds.max(0);
    let (d, h, m, sec) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}d{h}h")
    } else if h > 0 {
        format!("{h}h{m}m")
    } else if m > 0 {
        format!("{m}m{sec}s")
    } else {
        format!("{sec}s")
    }
}

fn holder_status(status: &str) -> String {
    match status {
        "person" => "person".into(),
        "live_run" => "live run".into(),
        "dead_run" => "dead run (its run has ended; safe to force-unlock)".into(),
        other => other.into(),
    }
}

fn no_state(stack: &str) {
    eprintln!("stack {stack} has no state yet");
}

fn versions_table(stack: &str, versions: Vec<StateVersion>) -> String {
    if versions.is_empty() {
        return format!("Stack {stack} has no state versions yet.\n");
    }
    let mut t = Table::new(&[
        "VERSION",
        "SERIAL",
        "CURRENT",
        "WRITER",
        "LATE WRITE",
        "RECOVERED",
        "SIZE",
        "CREATED",
        "CHECKSUM",
    ]);
    for v in versions {
        t.row(vec![
            v.version.to_string(),
            v.serial.to_string(),
            if v.current { "yes" } else { "-" }.into(),
            writer(&v.writer),
            if v.late_write { "LATE WRITE" } else { "-" }.into(),
            if v.recovered.is_some() {
                "RECOVERED"
            } else {
                "-"
            }
            .into(),
            size(v.size),
            timestamp(&v.created_at),
            v.checksum.chars().take(12).collect(),
        ]);
    }
    t.render()
}

async fn versions(
    ctx: &Ctx,
    stack: &str,
    limit: Option<u32>,
    cursor: Option<String>,
    all: bool,
) -> anyhow::Result<()> {
    let path = [
        "orgs",
        ctx.org.as_str(),
        "stacks",
        stack,
        "state",
        "versions",
    ];
    let pages = super::fetch_pages(ctx, &path, limit, cursor, all).await?;
    let late = pages
        .0
        .iter()
        .filter(|v| v["late_write"].as_bool() == Some(true))
        .count();
    let recovered = pages
        .0
        .iter()
        .filter(|v| v["recovered"].is_string())
        .count();
    super::show_pages(ctx, pages, "versions", |versions: Vec<StateVersion>| {
        versions_table(stack, versions)
    })?;
    if late > 0 && !ctx.json {
        eprintln!(
            "WARNING: {late} version(s) marked LATE WRITE were written by a run that had \
             already ended (force-failed or interrupted): check them before relying on them"
        );
    }
    if recovered > 0 && !ctx.json {
        eprintln!(
            "WARNING: {recovered} version(s) marked RECOVERED hold a state an engine could not \
             write to Bosun, delivered by its runner afterwards (`bosun state versions STACK \
             --json` says why): check them before relying on them"
        );
    }
    Ok(())
}

fn outputs_table(outputs: &BTreeMap<String, StateOutput>) -> String {
    if outputs.is_empty() {
        return "No outputs.\n".into();
    }
    let mut t = Table::new(&["NAME", "VALUE", "SENSITIVE"]);
    for (name, o) in outputs {
        let value = if o.sensitive {
            "(sensitive)".to_string()
        } else {
            match &o.value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            }
        };
        t.row(vec![
            name.clone(),
            value,
            if o.sensitive { "yes" } else { "no" }.into(),
        ]);
    }
    t.render()
}

/// The current version's metadata, or `None` when the stack has no state.
async fn current_version(ctx: &Ctx, stack: &str) -> anyhow::Result<Option<StateVersion>> {
    let org = ctx.org.as_str();
    let mut cursor: Option<String> = None;
    loop {
        let mut query = vec![("limit", "100".to_string())];
        if let Some(c) = &cursor {
            query.push(("cursor", c.clone()));
        }
        let page: Page<StateVersion> = decode(
            ctx.client
                .get(&["orgs", org, "stacks", stack, "state", "versions"], &query)
                .await?,
        )?;
        if let Some(v) = page.items.into_iter().find(|v| v.current) {
            return Ok(Some(v));
        }
        match page.next_cursor {
            Some(next) if cursor.as_ref() != Some(&next) => cursor = Some(next),
            _ => return Ok(None),
        }
    }
}

async fn show(ctx: &Ctx, stack: &str, version: Option<i64>, outputs: bool) -> anyhow::Result<()> {
    let org = ctx.org.as_str();
    if outputs {
        let meta = match version {
            Some(n) => {
                let detail: StateVersionDetail = decode(
                    ctx.client
                        .get(
                            &[
                                "orgs",
                                org,
                                "stacks",
                                stack,
                                "state",
                                "versions",
                                &n.to_string(),
                            ],
                            &[],
                        )
                        .await?,
                )?;
                detail.meta
            }
            None => match current_version(ctx, stack).await? {
                Some(v) => v,
                None => {
                    no_state(stack);
                    return Ok(());
                }
            },
        };
        if ctx.json {
            return emit_json(&serde_json::to_value(&meta.outputs)?);
        }
        return emit(&outputs_table(&meta.outputs));
    }
    match version {
        Some(n) => {
            let value = ctx
                .client
                .get(
                    &[
                        "orgs",
                        org,
                        "stacks",
                        stack,
                        "state",
                        "versions",
                        &n.to_string(),
                    ],
                    &[],
                )
                .await?;
            if ctx.json {
                return emit_json(&value);
            }
            let detail: StateVersionDetail = decode(value)?;
            emit_json(&detail.state)
        }
        None => {
            let Some(body) = ctx
                .client
                .get_raw(&["orgs", org, "stacks", stack, "state"], &[])
                .await?
            else {
                no_state(stack);
                return Ok(());
            };
            let text = String::from_utf8(body)
                .context("the server sent a state document that is not UTF-8")?;
            if serde_json::from_str::<Value>(&text).is_err() {
                bail!("the server sent a state document that is not JSON");
            }
            let mut pretty = reindent(&text);
            pretty.push('\n');
            emit(&pretty)
        }
    }
}

/// Pretty-prints valid JSON text keeping its key order (a `Value` would sort the keys),
/// in the layout of `serde_json::to_string_pretty`.
fn reindent(json: &str) -> String {
    fn newline(out: &mut String, depth: usize) {
        out.push('\n');
        out.extend(std::iter::repeat_n("  ", depth));
    }
    let mut out = String::with_capacity(json.len() * 2);
    let mut depth = 0usize;
    let mut chars = json.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                out.push('"');
                while let Some(c) = chars.next() {
                    out.push(c);
                    match c {
                        '\\' => out.extend(chars.next()),
                        '"' => break,
                        _ => {}
                    }
                }
            }
            '{' | '[' => {
                out.push(c);
                while chars.peek().is_some_and(|c| c.is_ascii_whitespace()) {
                    chars.next();
                }
                if let Some(&close @ ('}' | ']')) = chars.peek() {
                    chars.next();
                    out.push(close);
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(',');
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_ascii_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

fn lock_text(status: StateLockStatus) -> String {
    let Some(l) = status.lock else {
        return "unlocked\n".into();
    };
    Fields::new()
        .add("id", l.id)
        .add("operation", or_dash(&l.operation))
        .add("who", or_dash(&l.who))
        .add("holder", format!("{}:{}", l.holder.kind, l.holder.id))
        .add("holder status", holder_status(&l.holder.status))
        .add("acquired", timestamp(&l.acquired_at))
        .add("age", age(l.age_seconds))
        .add("info", or_dash(&l.info))
        .add("version", or_dash(&l.version))
        .render()
}

fn released_text(l: StateLockView) -> String {
    format!(
        "released lock {} held by {} ({}:{})\n",
        l.id,
        or_dash(&l.who),
        l.holder.kind,
        l.holder.id
    )
}

pub async fn run(ctx: &Ctx, cmd: StateCommand) -> anyhow::Result<()> {
    let org = ctx.org.as_str();
    match cmd {
        StateCommand::Versions {
            stack,
            limit,
            cursor,
            all,
        } => versions(ctx, &stack, limit, cursor, all).await,
        StateCommand::Show {
            stack,
            version,
            outputs,
        } => show(ctx, &stack, version, outputs).await,
        StateCommand::Lock { stack } => {
            let value = ctx
                .client
                .get(&["orgs", org, "stacks", &stack, "state", "lock"], &[])
                .await?;
            ctx.show(value, lock_text)
        }
        StateCommand::ForceUnlock { stack, lock_id } => {
            let body = ForceUnlock { lock_id };
            let value = ctx
                .client
                .post(
                    &["orgs", org, "stacks", &stack, "state", "force-unlock"],
                    &body,
                )
                .await?;
            ctx.show(value, released_text)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_sizes() {
        assert_eq!(age(0), "0s");
        assert_eq!(age(45), "45s");
        assert_eq!(age(192), "3m12s");
        assert_eq!(age(2 * 3600 + 5 * 60 + 7), "2h5m");
        assert_eq!(age(3 * 86_400 + 4 * 3600), "3d4h");
        assert_eq!(age(-5), "0s");
        assert_eq!(size(512), "512 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(3 * 1024 * 1024), "3.0 MiB");
    }

    #[test]
    fn reindent_keeps_key_order_and_matches_serde_layout() -> anyhow::Result<()> {
        let raw = r#"{"version":4,"serial":1,"a":{"s":"x,\"y\": [z]"},"e":[],"o":{ },"l":[1,{"b":null}]}"#;
        let pretty = reindent(raw);
        assert!(pretty.starts_with("{\n  \"version\": 4,\n  \"serial\": 1,"));
        let parsed: Value = serde_json::from_str(raw)?;
        let reparsed: Value = serde_json::from_str(&pretty)?;
        assert_eq!(parsed, reparsed);
        // Same layout as serde_json's once keys are in the same order.
        let sorted = serde_json::to_string(&parsed)?;
        assert_eq!(reindent(&sorted), serde_json::to_string_pretty(&parsed)?);
        Ok(())
    }
}
