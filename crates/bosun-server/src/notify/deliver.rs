//! The delivery duty: sends due deliveries (a generic webhook gets the event as JSON
//! signed with HMAC-SHA256 like GitHub's webhooks; a Slack-compatible one gets
//! `{"text": …}`), records every attempt, and retries failures with exponential backoff
//! (base × 3ⁿ: 10 s, 30 s, 90 s, … by default) until the last attempt. It wakes when the
//! store commits new deliveries and otherwise when the earliest retry falls due. Each
//! pass also writes `old_lock` events for locks held longer than the threshold, and at
//! most once per `prune_every` (an hour) deletes sent and given-up deliveries older than
//! the retention, then events left without deliveries, in small batches.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bosun_store::{DueNotification, NotificationAttempt, NotificationEventKind};
use chrono::Utc;
use futures_util::StreamExt;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

use crate::app::AppState;

/// Deliveries sent at once in one pass.
const CONCURRENCY: usize = 8;
/// Deliveries read per pass.
const BATCH: u32 = 100;
/// Rows deleted per write transaction when pruning.
const PRUNE_BATCH: u32 = 1000;

/// `sha256=<hex>` of the body under the target's secret, as `X-Bosun-Signature-256`.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    // HMAC takes a key of any length, so this cannot fail.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// When to try again after `attempts` failed attempts; `None`: give up.
pub fn retry_delay(base: Duration, attempts: u32, max_attempts: u32) -> Option<Duration> {
    (attempts < max_attempts).then(|| base.saturating_mul(3u32.saturating_pow(attempts - 1)))
}

/// The delivery duty: woken when the store commits new deliveries (on any replica),
/// else passing when the earliest retry falls due, at most every `poll_interval`.
pub fn delivery_duty(state: &AppState) -> crate::duties::Duty {
    let config = state.config.notify.clone();
    let http = match reqwest::Client::builder()
        .timeout(config.timeout)
        .user_agent(concat!("Bosun-Notifications/", env!("CARGO_PKG_VERSION")))
        .build()
    {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::error!(duty = "notify", error = %e, "cannot build the HTTP client; notifications are off");
            None
        }
    };
    let every = http.as_ref().map(|_| config.poll_interval);
    let last_prune = Arc::new(Mutex::new(None::<tokio::time::Instant>));
    crate::duties::Duty::new("notify", every, move |state| {
        let (state, http, last_prune) = (state.clone(), http.clone(), last_prune.clone());
        Box::pin(async move {
            let Some(http) = http else {
                return Ok(None);
            };
            let passed = pass(&state, &http).await;
            let prune_due = {
                let mut last = last_prune.lock().unwrap_or_else(|e| e.into_inner());
                let due = last.is_none_or(|at| at.elapsed() >= state.config.notify.prune_every);
                if due {
                    *last = Some(tokio::time::Instant::now());
                }
                due
            };
            if prune_due {
                prune(&state).await;
            }
            Ok(Some(passed?))
        })
    })
    .woken_by(bosun_store::Signal::concerns_notifications)
}

/// Retention: deletes settled deliveries older than `retention`, then events left
/// without deliveries (nothing when the retention is zero). Failures are logged; the
/// next prune tries again.
pub async fn prune(state: &AppState) {
    let retention = state.config.notify.retention;
    if retention.is_zero() {
        return;
    }
    let Ok(age) = chrono::Duration::from_std(retention) else {
        return;
    };
    let Some(before) = Utc::now().checked_sub_signed(age) else {
        return;
    };
    match state.store.prune_notifications(before, PRUNE_BATCH).await {
        Ok((deliveries, events)) => {
            let counters = &state.notifications;
            counters
                .pruned_deliveries
                .fetch_add(deliveries, Ordering::Relaxed);
            counters.pruned_events.fetch_add(events, Ordering::Relaxed);
            if deliveries > 0 || events > 0 {
                tracing::info!(
                    duty = "notify",
                    deliveries,
                    events,
                    retention = %humantime::format_duration(retention),
                    "pruned notification history older than the retention"
                );
            }
        }
        Err(e) => {
            tracing::warn!(duty = "notify", error = %e, "pruning notification history failed")
        }
    }
}

/// One pass: old locks, then every due delivery. Returns how long to sleep: until the
/// earliest pending retry, at most the poll interval.
async fn pass(
    state: &AppState,
    http: &reqwest::Client,
) -> Result<Duration, bosun_store::StoreError> {
    let config = &state.config.notify;
    if !config.lock_age.is_zero() {
        let age = chrono::Duration::from_std(config.lock_age).unwrap_or(chrono::Duration::hours(1));
        state.store.notify_old_locks(Utc::now() - age).await?;
    }
    loop {
        let due = state.store.due_notifications(Utc::now(), BATCH).await?;
        let n = due.len();
        let results: Vec<_> = futures_util::stream::iter(due)
            .map(|d| async move {
                let attempt = attempt(state, http, &d).await;
                (d, attempt)
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        for (d, a) in results {
            state
                .store
                .record_notification_attempt(d.delivery.id, &a)
                .await?;
        }
        if n < BATCH as usize {
            break;
        }
    }
    let horizon = Utc::now() + chrono::Duration::from_std(config.poll_interval).unwrap_or_default();
    let next = state.store.due_notifications(horizon, 1).await?;
    Ok(next
        .first()
        .and_then(|d| d.delivery.next_attempt_at)
        .and_then(|at| (at - Utc::now()).to_std().ok())
        .unwrap_or(config.poll_interval)
        .min(config.poll_interval))
}

/// Sends one delivery and says what came of it.
async fn attempt(
    state: &AppState,
    http: &reqwest::Client,
    d: &DueNotification,
) -> NotificationAttempt {
    let config = &state.config.notify;
    let kind = d.target.kind.as_str();
    let outcome = send(state, http, d).await;
    let counters = &state.notifications;
    let attempts = u32::try_from(d.delivery.attempts)
        .unwrap_or(u32::MAX)
        .saturating_add(1);
    match outcome {
        Ok(status) => {
            counters.delivered.fetch_add(1, Ordering::Relaxed);
            NotificationAttempt {
                status: Some(status),
                error: None,
                delivered: true,
                retry_at: None,
            }
        }
        Err((status, error)) => {
            counters.failures(kind).fetch_add(1, Ordering::Relaxed);
            let retry = retry_delay(config.retry_base, attempts, config.max_attempts);
            if retry.is_some() {
                counters.retried.fetch_add(1, Ordering::Relaxed);
            } else {
                counters.gave_up.fetch_add(1, Ordering::Relaxed);
            }
            tracing::warn!(
                delivery = d.delivery.id,
                target = %d.target.id,
                org = %d.target.org,
                attempts,
                error = %error,
                gave_up = retry.is_none(),
                "notification not delivered"
            );
            NotificationAttempt {
                status,
                error: Some(error),
                delivered: false,
                retry_at: retry
                    .map(|r| Utc::now() + chrono::Duration::from_std(r).unwrap_or_default()),
            }
        }
    }
}

/// The HTTP status on success; on failure the status (if any) and why.
async fn send(
    state: &AppState,
    http: &reqwest::Client,
    d: &DueNotification,
) -> Result<i64, (Option<i64>, String)> {
    let (body, signature) = match d.target.kind.as_str() {
        "slack" => (
            json!({"text": slack_text(&state.config.public_url, d)}).to_string(),
            None,
        ),
        _ => {
            let body = webhook_body(d).to_string();
            let secret = match &d.target.secret {
                Some(sealed) => state
                    .secrets_key
                    .open(sealed)
                    .map_err(|e| (None, format!("cannot open the target's secret: {e}")))?,
                None => return Err((None, "the webhook target has no secret".into())),
            };
            let sig = signature(&secret, body.as_bytes());
            (body, Some(sig))
        }
    };
    let mut request = http
        .post(&d.target.url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header("X-Bosun-Event", d.delivery.event.as_str())
        .header("X-Bosun-Delivery", d.delivery.id.to_string());
    if let Some(sig) = signature {
        request = request.header("X-Bosun-Signature-256", sig);
    }
    let reply = request
        .body(body)
        .send()
        .await
        .map_err(|e| (None, describe(&e)))?;
    let status = reply.status();
    if status.is_success() {
        return Ok(i64::from(status.as_u16()));
    }
    let text = reply.text().await.unwrap_or_default();
    let excerpt: String = text.chars().take(200).collect();
    Err((
        Some(i64::from(status.as_u16())),
        format!(
            "HTTP {status}{}{}",
            if excerpt.is_empty() { "" } else { ": " },
            excerpt.trim()
        ),
    ))
}

fn describe(e: &reqwest::Error) -> String {
    use std::error::Error as _;
    let mut text = if e.is_timeout() {
        "timed out".to_string()
    } else if e.is_connect() {
        "cannot connect".to_string()
    } else {
        "request failed".to_string()
    };
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The generic webhook's JSON: the delivery id, the event kind, the org, when the event
/// happened, and its details under `data`.
pub fn webhook_body(d: &DueNotification) -> Value {
    json!({
        "delivery": d.delivery.id,
        "event": d.delivery.event.as_str(),
        "org": d.delivery.org,
        "created_at": d.delivery.event_created_at.to_rfc3339(),
        "data": d.delivery.payload,
    })
}

fn field<'a>(data: &'a Value, key: &str) -> &'a str {
    data.get(key).and_then(Value::as_str).unwrap_or("?")
}

/// One line for people, with a link: Slack's `<url|text>` markup.
pub fn slack_text(public_url: &str, d: &DueNotification) -> String {
    let data = &d.delivery.payload;
    let org = d.delivery.org.as_str();
    let link = |label: &str| match data.get("url").and_then(Value::as_str) {
        Some(path) => format!(" — <{public_url}{path}|{label}>"),
        None => String::new(),
    };
    let stack = format!("{org}/{}", field(data, "stack"));
    match d.delivery.event {
        NotificationEventKind::RunEnded => {
            let reason = data
                .get("reason")
                .and_then(Value::as_str)
                .map(|r| format!(": {r}"))
                .unwrap_or_default();
            format!(
                ":rotating_light: Bosun: {} run {} of {stack} {} (trigger {}){reason}{}",
                field(data, "kind"),
                field(data, "run"),
                field(data, "state").replace('_', "-"),
                field(data, "trigger"),
                link("open the run"),
            )
        }
        NotificationEventKind::LateWrite => format!(
            ":warning: Bosun: {} wrote state version {} of {stack} after it had ended{}",
            field(data, "writer"),
            data.get("version")
                .and_then(Value::as_i64)
                .unwrap_or_default(),
            link("open the version"),
        ),
        NotificationEventKind::OldLock => {
            let age = data
                .get("age_seconds")
                .and_then(Value::as_i64)
                .unwrap_or_default();
            format!(
                ":lock: Bosun: the state of {stack} has been locked for {} by {} (lock {}){}",
                human_age(age),
                field(data, "who"),
                field(data, "lock_id"),
                link("open the lock"),
            )
        }
        NotificationEventKind::StaleDriftCheck => {
            let secs = |k: &str| data.get(k).and_then(Value::as_i64);
            let ages = match (secs("age_seconds"), secs("interval_seconds")) {
                (Some(age), Some(interval)) => format!(
                    " ({} ago; the schedule runs every {})",
                    human_age(age),
                    human_age(interval)
                ),
                _ => String::new(),
            };
            format!(
                ":hourglass: Bosun: the last successful drift check of {stack} is older than twice its schedule interval{ages}{}",
                link("open the stack"),
            )
        }
        NotificationEventKind::Test => format!(
            ":white_check_mark: Bosun: test notification for target {} of org {org}, sent by {}{}",
            d.target.id,
            field(data, "requested_by"),
            link("open the target"),
        ),
    }
}

fn human_age(seconds: i64) -> String {
    let (h, m) = (seconds / 3600, (seconds % 3600) / 60);
    match (h, m) {
        (0, 0) => format!("{seconds}s"),
        (0, m) => format!("{m}m"),
        (h, 0) => format!("{h}h"),
        (h, m) => format!("{h}h {m}m"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_triples_until_the_last_attempt() {
        let base = Duration::from_secs(10);
        let delays: Vec<_> = (1..=8).map(|n| retry_delay(base, n, 8)).collect();
        assert_eq!(delays[0], Some(Duration::from_secs(10)));
        assert_eq!(delays[1], Some(Duration::from_secs(30)));
        assert_eq!(delays[2], Some(Duration::from_secs(90)));
        assert_eq!(delays[6], Some(Duration::from_secs(10 * 729)));
        assert_eq!(delays[7], None, "the eighth failure gives up");
    }

    fn due(event: NotificationEventKind, payload: Value) -> DueNotification {
        let now = Utc::now();
        DueNotification {
            delivery: bosun_store::NotificationDeliveryRecord {
                id: 7,
                event_id: 3,
                org: "acme".into(),
                target: "chat".into(),
                event,
                payload,
                event_created_at: now,
                attempts: 0,
                next_attempt_at: Some(now),
                last_status: None,
                last_error: None,
                delivered_at: None,
                created_at: now,
            },
            target: bosun_store::NotificationTargetRecord {
                org: "acme".into(),
                id: "chat".into(),
                kind: "slack".into(),
                url: "http://127.0.0.1:9/".into(),
                secret: None,
                rules: vec![],
                enabled: true,
                created_at: now,
                updated_at: now,
                updated_by: "user:admin".into(),
            },
        }
    }

    #[test]
    fn slack_lines_say_what_happened_with_a_link_when_there_is_one() {
        let url = "https://bosun.example";
        let cases = [
            (
                NotificationEventKind::RunEnded,
                json!({"stack": "net", "run": "run-1", "kind": "drift", "trigger": "schedule",
                       "state": "force_failed", "reason": "runner went silent",
                       "url": "/api/v1/orgs/acme/runs/run-1"}),
                ":rotating_light: Bosun: drift run run-1 of acme/net force-failed (trigger schedule): runner went silent — <https://bosun.example/api/v1/orgs/acme/runs/run-1|open the run>",
            ),
            (
                NotificationEventKind::LateWrite,
                json!({"stack": "net", "version": 4, "writer": "run:run-1"}),
                ":warning: Bosun: run:run-1 wrote state version 4 of acme/net after it had ended",
            ),
            (
                NotificationEventKind::OldLock,
                json!({"stack": "net", "lock_id": "L1", "who": "alice@laptop", "age_seconds": 7380}),
                ":lock: Bosun: the state of acme/net has been locked for 2h 3m by alice@laptop (lock L1)",
            ),
            (
                NotificationEventKind::StaleDriftCheck,
                json!({"stack": "net", "age_seconds": 7200, "interval_seconds": 3600}),
                ":hourglass: Bosun: the last successful drift check of acme/net is older than twice its schedule interval (2h ago; the schedule runs every 1h)",
            ),
            (
                NotificationEventKind::Test,
                json!({"requested_by": "user:admin"}),
                ":white_check_mark: Bosun: test notification for target chat of org acme, sent by user:admin",
            ),
        ];
        for (event, payload, want) in cases {
            assert_eq!(slack_text(url, &due(event, payload)), want);
        }
        let body = webhook_body(&due(NotificationEventKind::Test, json!({"x": 1})));
        assert_eq!(
            (
                &body["delivery"],
                &body["event"],
                &body["org"],
                &body["data"]
            ),
            (&json!(7), &json!("test"), &json!("acme"), &json!({"x": 1}))
        );
    }

    #[test]
    fn signature_is_github_style() {
        // RFC 4231 test case 2.
        let sig = signature(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            sig,
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(human_age(7380), "2h 3m");
        assert_eq!(human_age(3600), "1h");
        assert_eq!(human_age(42), "42s");
    }
}
