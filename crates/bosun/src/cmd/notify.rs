//! `bosun notify`: the org's notification targets (generic webhooks signed with HMAC,
//! Slack-compatible incoming webhooks), their rules, test events and delivery logs.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context as _};
use bosun_api::{
    NotificationDeliveryInfo, NotificationRule, NotificationTargetCreate, NotificationTargetInfo,
};
use clap::Subcommand;

use super::{decode, Ctx};
use crate::output::{opt_timestamp, timestamp, yes_no, Fields, Table};

#[derive(Subcommand)]
pub enum NotifyCommand {
    /// Notification targets: add, list, show, delete, test.
    #[command(subcommand)]
    Target(TargetCommand),
    /// A target's delivery log, newest first: event, attempts, last status or error.
    Deliveries {
        /// The notification target's id.
        target: String,
        /// At most this many (default 100).
        #[arg(long)]
        limit: Option<u32>,
        /// Start after this point: the cursor a previous page printed.
        #[arg(long)]
        cursor: Option<String>,
    },
}

#[derive(Subcommand)]
pub enum TargetCommand {
    /// Add a target (org admins). Without --rule it gets the defaults: failed,
    /// force-failed and interrupted runs of every kind, late writes, old locks and stale
    /// drift checks.
    Add {
        /// The target's id (a slug).
        id: String,
        /// `webhook` (JSON signed with X-Bosun-Signature-256) or `slack`.
        #[arg(long)]
        kind: String,
        /// Where to POST (http:// or https://); `--url` is the Bosun server's.
        #[arg(long, value_name = "URL")]
        endpoint: String,
        /// The webhook's HMAC secret (visible in shell history: prefer --secret-file).
        #[arg(long, conflicts_with = "secret_file")]
        secret: Option<String>,
        /// Read the webhook's HMAC secret from this file (a trailing newline is dropped).
        #[arg(long, value_name = "FILE")]
        secret_file: Option<PathBuf>,
        /// A rule, repeatable: `EVENTS[/RUN_KINDS[/RUN_STATES]]`, comma-separated lists,
        /// empty for any — e.g. `run_ended/drift/failed,force_failed` or
        /// `late_write,old_lock`.
        #[arg(long = "rule", value_name = "RULE")]
        rules: Vec<String>,
        /// Create it disabled (nothing is sent until it is enabled).
        #[arg(long)]
        disabled: bool,
    },
    /// List the org's targets.
    List,
    /// Show a target and its rules.
    Show {
        /// The notification target's id.
        id: String,
    },
    /// Delete a target and its delivery log (org admins).
    Delete {
        /// The notification target's id.
        id: String,
    },
    /// Send a test event to a target (org admins) and wait for the first attempt.
    Test {
        /// The notification target's id.
        id: String,
        /// Return at once instead of waiting for the outcome.
        #[arg(long)]
        no_wait: bool,
    },
}

fn parse_rule(text: &str) -> anyhow::Result<NotificationRule> {
    let mut parts = text.split('/');
    let list = |p: Option<&str>| -> Vec<String> {
        p.unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty() && *s != "*")
            .map(String::from)
            .collect()
    };
    let rule = NotificationRule {
        events: list(parts.next()),
        run_kinds: list(parts.next()),
        run_states: list(parts.next()),
    };
    if parts.next().is_some() {
        bail!("rule {text:?}: expected EVENTS[/RUN_KINDS[/RUN_STATES]]");
    }
    if rule.events.is_empty() {
        bail!("rule {text:?} names no event (run_ended, late_write, old_lock, stale_drift_check)");
    }
    Ok(rule)
}

fn rule_text(r: &NotificationRule) -> String {
    let any = |l: &[String]| {
        if l.is_empty() {
            "any".to_string()
        } else {
            l.join(",")
        }
    };
    if r.run_kinds.is_empty()
        && r.run_states.is_empty()
        && !r.events.iter().any(|e| e == "run_ended")
    {
        return r.events.join(", ");
    }
    format!(
        "{} (kinds: {}; states: {})",
        r.events.join(", "),
        any(&r.run_kinds),
        any(&r.run_states)
    )
}

fn show_target(t: NotificationTargetInfo) -> String {
    let mut f = Fields::new();
    f.add("id", t.id)
        .add("kind", t.kind)
        .add("url", t.url)
        .add("secret", if t.has_secret { "set" } else { "-" })
        .add("enabled", yes_no(t.enabled))
        .lines(
            if t.default_rules {
                "rules (defaults)"
            } else {
                "rules"
            },
            t.rules.iter().map(rule_text).collect(),
        )
        .add(
            "updated",
            format!("{} by {}", timestamp(&t.updated_at), t.updated_by),
        );
    f.render()
}

fn deliveries_table(items: Vec<NotificationDeliveryInfo>) -> String {
    let mut t = Table::new(&[
        "ID",
        "EVENT",
        "STATUS",
        "ATTEMPTS",
        "LAST",
        "NEXT ATTEMPT",
        "CREATED",
    ]);
    for d in items {
        let last = match (d.last_status_code, d.last_error) {
            (_, Some(e)) => e,
            (Some(code), None) => format!("HTTP {code}"),
            (None, None) => "-".into(),
        };
        t.row(vec![
            d.id.to_string(),
            d.event,
            d.status,
            d.attempts.to_string(),
            last,
            opt_timestamp(&d.next_attempt_at),
            timestamp(&d.created_at),
        ]);
    }
    t.render()
}

pub async fn run(ctx: &Ctx, command: NotifyCommand) -> anyhow::Result<()> {
    let org = ctx.org.as_str();
    match command {
        NotifyCommand::Target(TargetCommand::Add {
            id,
            kind,
            endpoint,
            secret,
            secret_file,
            rules,
            disabled,
        }) => {
            let secret = match (secret, secret_file) {
                (Some(s), _) => Some(s),
                (None, Some(f)) => {
                    let s = std::fs::read_to_string(&f)
                        .with_context(|| format!("reading {}", f.display()))?;
                    Some(s.strip_suffix('\n').map(String::from).unwrap_or(s))
                }
                (None, None) => None,
            };
            let rules = rules
                .iter()
                .map(|r| parse_rule(r))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let body = NotificationTargetCreate {
                id,
                kind,
                url: endpoint,
                secret,
                rules: (!rules.is_empty()).then_some(rules),
                enabled: Some(!disabled),
            };
            let reply = ctx
                .client
                .post(&["orgs", org, "notifications", "targets"], &body)
                .await?;
            ctx.show(reply, |t: NotificationTargetInfo| {
                format!(
                    "added notification target {}\n{}",
                    t.id.clone(),
                    show_target(t)
                )
            })
        }
        NotifyCommand::Target(TargetCommand::List) => {
            let path = ["orgs", org, "notifications", "targets"];
            super::list_all(
                ctx,
                &path,
                &[],
                "targets",
                |items: Vec<NotificationTargetInfo>| {
                    if items.is_empty() {
                        return format!("No notification targets in org {org}.\n");
                    }
                    let mut t = Table::new(&["ID", "KIND", "URL", "ENABLED", "RULES"]);
                    for i in items {
                        let rules = if i.default_rules {
                            "defaults".to_string()
                        } else {
                            i.rules.len().to_string()
                        };
                        t.row(vec![i.id, i.kind, i.url, yes_no(i.enabled).into(), rules]);
                    }
                    t.render()
                },
            )
            .await
        }
        NotifyCommand::Target(TargetCommand::Show { id }) => {
            let reply = ctx
                .client
                .get(&["orgs", org, "notifications", "targets", &id], &[])
                .await?;
            ctx.show(reply, show_target)
        }
        NotifyCommand::Target(TargetCommand::Delete { id }) => {
            ctx.client
                .delete(&["orgs", org, "notifications", "targets", &id])
                .await?;
            ctx.done(&format!("deleted notification target {id}"))
        }
        NotifyCommand::Target(TargetCommand::Test { id, no_wait }) => {
            let reply = ctx
                .client
                .post(
                    &["orgs", org, "notifications", "targets", &id, "test"],
                    &serde_json::json!({}),
                )
                .await?;
            let pending: NotificationDeliveryInfo = decode(reply.clone())?;
            if no_wait {
                return ctx.show(reply, |d: NotificationDeliveryInfo| {
                    format!("test delivery {} queued\n", d.id)
                });
            }
            // The server retries with backoff; the first attempt is what a person
            // testing a target wants to see.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            let settled = loop {
                let page: bosun_api::Page<serde_json::Value> = decode(
                    ctx.client
                        .get(
                            &["orgs", org, "notifications", "targets", &id, "deliveries"],
                            &[("limit", "20".to_string())],
                        )
                        .await?,
                )?;
                let found = page
                    .items
                    .into_iter()
                    .find(|d| d.get("id").and_then(|v| v.as_i64()) == Some(pending.id));
                if let Some(d) = found {
                    if d.get("attempts").and_then(|v| v.as_i64()).unwrap_or(0) > 0 {
                        break d;
                    }
                }
                if tokio::time::Instant::now() > deadline {
                    bail!(
                        "test delivery {} was not attempted within 30 s; see `bosun notify deliveries {id}`",
                        pending.id
                    );
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            };
            let d: NotificationDeliveryInfo = decode(settled.clone())?;
            let ok = d.status == "delivered";
            ctx.show(settled, |d: NotificationDeliveryInfo| {
                if ok {
                    format!(
                        "test delivery {} delivered (HTTP {})\n",
                        d.id,
                        d.last_status_code.unwrap_or_default()
                    )
                } else {
                    format!(
                        "test delivery {} failed: {}\n",
                        d.id,
                        d.last_error.unwrap_or_else(|| "unknown error".into())
                    )
                }
            })?;
            if !ok {
                bail!("the test notification was not delivered");
            }
            Ok(())
        }
        NotifyCommand::Deliveries {
            target,
            limit,
            cursor,
        } => {
            let path = [
                "orgs",
                org,
                "notifications",
                "targets",
                &target,
                "deliveries",
            ];
            let pages = super::fetch_pages(ctx, &path, limit, cursor, false).await?;
            super::show_pages(
                ctx,
                pages,
                "deliveries",
                |items: Vec<NotificationDeliveryInfo>| {
                    if items.is_empty() {
                        return format!("No deliveries to {target} yet.\n");
                    }
                    deliveries_table(items)
                },
            )
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn rules_parse_from_the_command_line() {
        let r = parse_rule("run_ended/drift/failed,force_failed").unwrap();
        assert_eq!(r.events, ["run_ended"]);
        assert_eq!(r.run_kinds, ["drift"]);
        assert_eq!(r.run_states, ["failed", "force_failed"]);
        let r = parse_rule("run_ended//failed").unwrap();
        assert!(r.run_kinds.is_empty());
        let r = parse_rule("late_write,old_lock").unwrap();
        assert_eq!(r.events, ["late_write", "old_lock"]);
        assert!(parse_rule("/drift").is_err());
        assert!(parse_rule("a/b/c/d").is_err());
    }
}
