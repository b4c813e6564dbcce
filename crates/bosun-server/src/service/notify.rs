//! Notification targets: each checked (kind, URL, secret, rules) before it is stored, its
//! secret sealed at rest and never shown, its delivery log, and test events — the work
//! behind the API's notification handlers.

use std::str::FromStr;

use bosun_api::{
    NotificationDeliveryInfo, NotificationRule as WireRule, NotificationTargetCreate,
    NotificationTargetInfo, NotificationTargetPatch, Page,
};
use bosun_core::id::Slug;
use bosun_core::run::{RunKind, RunState};
use bosun_store::{
    NewNotificationEvent, NewNotificationTarget, NotificationDeliveryRecord, NotificationEventKind,
    NotificationRule, NotificationTargetRecord, Sealed,
};
use serde_json::json;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::paging::{page, whole, PageQuery};
use crate::service::{deleted, invalid};

/// The target kinds.
pub const KINDS: [&str; 2] = ["webhook", "slack"];

/// The longest HMAC secret accepted.
const MAX_SECRET: usize = 1024;
/// Events a rule may name (test events go to one target, past its rules).
const RULE_EVENTS: [NotificationEventKind; 4] = [
    NotificationEventKind::RunEnded,
    NotificationEventKind::LateWrite,
    NotificationEventKind::OldLock,
    NotificationEventKind::StaleDriftCheck,
];
fn check_url(url: &str) -> Result<(), ApiError> {
    let parsed = reqwest::Url::parse(url).map_err(|e| invalid("url", format!("not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(invalid(
            "url",
            format!("must be http:// or https://, not {}://", parsed.scheme()),
        ));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(invalid("url", "has no host"));
    }
    Ok(())
}

fn check_rules(rules: &[WireRule]) -> Result<Vec<NotificationRule>, ApiError> {
    let mut out = Vec::with_capacity(rules.len());
    for (i, r) in rules.iter().enumerate() {
        let field = |f: &str| format!("rules[{i}].{f}");
        if r.events.is_empty() {
            return Err(invalid(
                field("events"),
                "must name at least one event: run_ended, late_write, old_lock, stale_drift_check",
            ));
        }
        for e in &r.events {
            if !RULE_EVENTS.iter().any(|k| k.as_str() == e) {
                return Err(invalid(
                    field("events"),
                    format!("unknown event {e:?}; expected one of: run_ended, late_write, old_lock, stale_drift_check"),
                ));
            }
        }
        let about_runs = r.events.iter().any(|e| e == "run_ended");
        let filters_runs = !(r.run_kinds.is_empty() && r.run_states.is_empty());
        if filters_runs && !about_runs {
            return Err(invalid(
                field("events"),
                "run_kinds and run_states apply to run_ended events: add run_ended or drop them",
            ));
        }
        for k in &r.run_kinds {
            RunKind::from_str(k).map_err(|e| invalid(field("run_kinds"), e.message))?;
        }
        for s in &r.run_states {
            let state =
                RunState::from_str(s).map_err(|e| invalid(field("run_states"), e.message))?;
            if !state.is_terminal() {
                return Err(invalid(
                    field("run_states"),
                    format!("{s:?} is not a state a run ends in; runs end finished, failed, discarded, canceled, interrupted, force_failed or skipped"),
                ));
            }
        }
        out.push(NotificationRule {
            events: r.events.clone(),
            run_kinds: r.run_kinds.clone(),
            run_states: r.run_states.clone(),
        });
    }
    Ok(out)
}

fn wire_rule(r: NotificationRule) -> WireRule {
    WireRule {
        events: r.events,
        run_kinds: r.run_kinds,
        run_states: r.run_states,
    }
}

fn check_secret(kind: &str, secret: Option<&str>, creating: bool) -> Result<(), ApiError> {
    match (kind, secret) {
        ("slack", Some(_)) => Err(invalid(
            "secret",
            "a slack target takes no secret: Slack incoming webhooks are authorized by their URL",
        )),
        ("webhook", None) if creating => Err(invalid(
            "secret",
            "a webhook target needs a secret: the receiver checks X-Bosun-Signature-256 with it",
        )),
        (_, Some("")) => Err(invalid("secret", "must not be empty")),
        (_, Some(s)) if s.len() > MAX_SECRET => Err(invalid(
            "secret",
            format!("must be at most {MAX_SECRET} bytes"),
        )),
        _ => Ok(()),
    }
}

fn seal(state: &AppState, secret: Option<&str>) -> Result<Option<Sealed>, ApiError> {
    secret
        .map(|s| state.secrets_key.seal(s.as_bytes()))
        .transpose()
        .map_err(|e| ApiError::Internal(e.to_string()))
}

fn to_wire(t: NotificationTargetRecord) -> NotificationTargetInfo {
    let default_rules = t.rules.is_empty();
    let rules = if default_rules {
        NotificationRule::defaults()
    } else {
        t.rules
    };
    NotificationTargetInfo {
        id: t.id,
        kind: t.kind,
        url: t.url,
        has_secret: t.secret.is_some(),
        rules: rules.into_iter().map(wire_rule).collect(),
        default_rules,
        enabled: t.enabled,
        created_at: t.created_at,
        updated_at: t.updated_at,
        updated_by: t.updated_by,
    }
}

fn delivery_wire(d: NotificationDeliveryRecord) -> NotificationDeliveryInfo {
    let status = if d.delivered_at.is_some() {
        "delivered"
    } else if d.next_attempt_at.is_some() {
        "pending"
    } else {
        "failed"
    };
    NotificationDeliveryInfo {
        id: d.id,
        event_id: d.event_id,
        event: d.event.as_str().to_string(),
        data: d.payload,
        attempts: d.attempts,
        status: status.into(),
        last_status_code: d.last_status,
        last_error: d.last_error,
        next_attempt_at: d.next_attempt_at,
        delivered_at: d.delivered_at,
        created_at: d.created_at,
    }
}

async fn load(state: &AppState, org: &str, id: &str) -> Result<NotificationTargetRecord, ApiError> {
    state
        .store
        .get_notification_target(org, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("notification target {id:?} in org {org:?}")))
}

/// The org's notification targets (never their secrets): a small list, answered whole
/// as one page.
pub async fn list(
    state: &AppState,
    org: &str,
    q: &PageQuery,
) -> Result<Page<NotificationTargetInfo>, ApiError> {
    q.whole()?;
    let targets = state.store.list_notification_targets(org).await?;
    Ok(whole(targets.into_iter().map(to_wire).collect()))
}

/// Adds a notification target for `caller`: its id, kind, URL, secret and rules checked,
/// a webhook's secret sealed at rest.
pub async fn create(
    state: &AppState,
    caller: &Caller,
    org: &str,
    body: NotificationTargetCreate,
) -> Result<NotificationTargetInfo, ApiError> {
    let id = Slug::parse("id", &body.id)?.into_string();
    if !KINDS.contains(&body.kind.as_str()) {
        return Err(invalid(
            "kind",
            format!("unknown kind {:?}; expected webhook or slack", body.kind),
        ));
    }
    check_url(&body.url)?;
    check_secret(&body.kind, body.secret.as_deref(), true)?;
    let rules = check_rules(body.rules.as_deref().unwrap_or_default())?;
    let target = NewNotificationTarget {
        org: org.to_string(),
        id: id.clone(),
        kind: body.kind.clone(),
        url: body.url.clone(),
        secret: seal(state, body.secret.as_deref())?,
        rules,
        enabled: body.enabled.unwrap_or(true),
    };
    let audit = caller.audit(
        Some(org),
        "notification_target.create",
        format!("notification_target:{id}"),
        json!({"kind": body.kind, "url": body.url}),
    );
    let created = state
        .store
        .create_notification_target(&target, &audit)
        .await?;
    Ok(to_wire(created))
}

/// One notification target of `org`.
pub async fn show(
    state: &AppState,
    org: &str,
    id: &str,
) -> Result<NotificationTargetInfo, ApiError> {
    Ok(to_wire(load(state, org, id).await?))
}

/// Changes a target's URL, secret, rules or enabled flag for `caller`; what is not given
/// stays.
pub async fn update(
    state: &AppState,
    caller: &Caller,
    org: &str,
    id: &str,
    body: NotificationTargetPatch,
) -> Result<NotificationTargetInfo, ApiError> {
    let current = load(state, org, id).await?;
    if let Some(url) = &body.url {
        check_url(url)?;
    }
    check_secret(&current.kind, body.secret.as_deref(), false)?;
    let rules = match &body.rules {
        Some(r) => check_rules(r)?,
        None => current.rules.clone(),
    };
    let target = NewNotificationTarget {
        org: org.to_string(),
        id: id.to_string(),
        kind: current.kind.clone(),
        url: body.url.clone().unwrap_or(current.url),
        secret: seal(state, body.secret.as_deref())?,
        rules,
        enabled: body.enabled.unwrap_or(current.enabled),
    };
    let audit = caller.audit(
        Some(org),
        "notification_target.update",
        format!("notification_target:{id}"),
        json!({
            "url": body.url,
            "secret_changed": body.secret.is_some(),
            "rules_changed": body.rules.is_some(),
            "enabled": body.enabled,
        }),
    );
    let updated = state
        .store
        .update_notification_target(&target, &audit)
        .await?;
    Ok(to_wire(updated))
}

/// Deletes a target and its delivery log for `caller`.
pub async fn delete(
    state: &AppState,
    caller: &Caller,
    org: &str,
    id: &str,
) -> Result<(), ApiError> {
    let audit = caller.audit(
        Some(org),
        "notification_target.delete",
        format!("notification_target:{id}"),
        json!({}),
    );
    let done = state
        .store
        .delete_notification_target(org, id, &audit)
        .await?;
    deleted(done, "notification target", id, org)
}

/// A page of a target's delivery log, newest first.
pub async fn deliveries(
    state: &AppState,
    org: &str,
    id: &str,
    q: &PageQuery,
) -> Result<Page<NotificationDeliveryInfo>, ApiError> {
    load(state, org, id).await?;
    let limit = q.limit()?;
    let list = state
        .store
        .list_notification_deliveries(org, id, q.seq()?, limit)
        .await?;
    let items = list.into_iter().map(delivery_wire).collect();
    Ok(page(items, limit, |d: &NotificationDeliveryInfo| {
        d.id.to_string()
    }))
}

/// Sends a test event to one target for `caller`, whatever its rules and even when
/// disabled: the pending delivery it made.
pub async fn test(
    state: &AppState,
    caller: &Caller,
    org: &str,
    id: &str,
) -> Result<NotificationDeliveryInfo, ApiError> {
    load(state, org, id).await?;
    let event = NewNotificationEvent {
        kind: NotificationEventKind::Test,
        run_kind: None,
        run_state: None,
        payload: json!({
            "org": org,
            "target": id,
            "requested_by": caller.0.actor(),
            "url": format!("/api/v1/orgs/{org}/notifications/targets/{id}"),
        }),
        dedup_key: None,
        only_target: Some(id.to_string()),
    };
    let event_id = state
        .store
        .add_notification_event(org, &event)
        .await?
        .ok_or_else(|| ApiError::Internal("the test event was not recorded".into()))?;
    let delivery = state
        .store
        .list_notification_deliveries(org, id, None, 10)
        .await?
        .into_iter()
        .find(|d| d.event_id == event_id)
        .ok_or_else(|| ApiError::Internal("the test delivery was not recorded".into()))?;
    Ok(delivery_wire(delivery))
}
