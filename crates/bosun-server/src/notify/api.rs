//! The notification API: targets (org admins manage, members read), each target's
//! delivery log, and test events.

use std::str::FromStr;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use bosun_api::{
    NotificationDeliveryInfo, NotificationRule as WireRule, NotificationTargetCreate,
    NotificationTargetInfo, NotificationTargetPatch,
};
use bosun_core::id::Slug;
use bosun_core::run::{RunKind, RunState};
use bosun_core::ValidationError;
use bosun_store::{
    NewNotificationEvent, NewNotificationTarget, NotificationDeliveryRecord, NotificationEventKind,
    NotificationRule, NotificationTargetRecord, Sealed,
};
use serde_json::json;

use super::KINDS;
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::paging::{page, PageQuery};
use bosun_api::Page;

/// The longest HMAC secret accepted.
const MAX_SECRET: usize = 1024;
/// Events a rule may name (test events go to one target, past its rules).
const RULE_EVENTS: [NotificationEventKind; 4] = [
    NotificationEventKind::RunEnded,
    NotificationEventKind::LateWrite,
    NotificationEventKind::OldLock,
    NotificationEventKind::StaleDriftCheck,
];

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ApiError {
    ValidationError::new(field, message).into()
}

pub(super) fn check_url(url: &str) -> Result<(), ApiError> {
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

pub(super) fn delivery_wire(d: NotificationDeliveryRecord) -> NotificationDeliveryInfo {
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

/// The org's notification targets (never their secrets).
#[utoipa::path(get, path = "/api/v1/orgs/{org}/notifications/targets", tag = "notifications",
    params(("org" = String, Path)),
    responses((status = 200, body = Vec<NotificationTargetInfo>)))]
pub async fn list(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
) -> Result<Json<Vec<NotificationTargetInfo>>, ApiError> {
    let targets = state.store.list_notification_targets(&org).await?;
    Ok(Json(targets.into_iter().map(to_wire).collect()))
}

/// Add a notification target (org admin). A webhook's secret is sealed at rest and never
/// shown again.
#[utoipa::path(post, path = "/api/v1/orgs/{org}/notifications/targets", tag = "notifications",
    params(("org" = String, Path)),
    request_body = NotificationTargetCreate,
    responses((status = 201, body = NotificationTargetInfo), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(org): ApiPath<String>,
    ApiJson(body): ApiJson<NotificationTargetCreate>,
) -> Result<(StatusCode, Json<NotificationTargetInfo>), ApiError> {
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
        org: org.clone(),
        id: id.clone(),
        kind: body.kind.clone(),
        url: body.url.clone(),
        secret: seal(&state, body.secret.as_deref())?,
        rules,
        enabled: body.enabled.unwrap_or(true),
    };
    let audit = caller.audit(
        Some(&org),
        "notification_target.create",
        format!("notification_target:{id}"),
        json!({"kind": body.kind, "url": body.url}),
    );
    let created = state
        .store
        .create_notification_target(&target, &audit)
        .await?;
    Ok((StatusCode::CREATED, Json(to_wire(created))))
}

/// One notification target.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/notifications/targets/{id}", tag = "notifications",
    params(("org" = String, Path), ("id" = String, Path)),
    responses((status = 200, body = NotificationTargetInfo), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn show(
    State(state): State<AppState>,
    ApiPath((org, id)): ApiPath<(String, String)>,
) -> Result<Json<NotificationTargetInfo>, ApiError> {
    Ok(Json(to_wire(load(&state, &org, &id).await?)))
}

/// Change a target's URL, secret, rules or enabled flag (org admin).
#[utoipa::path(patch, path = "/api/v1/orgs/{org}/notifications/targets/{id}", tag = "notifications",
    params(("org" = String, Path), ("id" = String, Path)),
    request_body = NotificationTargetPatch,
    responses((status = 200, body = NotificationTargetInfo), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn update(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<NotificationTargetPatch>,
) -> Result<Json<NotificationTargetInfo>, ApiError> {
    let current = load(&state, &org, &id).await?;
    if let Some(url) = &body.url {
        check_url(url)?;
    }
    check_secret(&current.kind, body.secret.as_deref(), false)?;
    let rules = match &body.rules {
        Some(r) => check_rules(r)?,
        None => current.rules.clone(),
    };
    let target = NewNotificationTarget {
        org: org.clone(),
        id: id.clone(),
        kind: current.kind.clone(),
        url: body.url.clone().unwrap_or(current.url),
        secret: seal(&state, body.secret.as_deref())?,
        rules,
        enabled: body.enabled.unwrap_or(current.enabled),
    };
    let audit = caller.audit(
        Some(&org),
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
    Ok(Json(to_wire(updated)))
}

/// Delete a target and its delivery log (org admin).
#[utoipa::path(delete, path = "/api/v1/orgs/{org}/notifications/targets/{id}", tag = "notifications",
    params(("org" = String, Path), ("id" = String, Path)),
    responses((status = 204), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let audit = caller.audit(
        Some(&org),
        "notification_target.delete",
        format!("notification_target:{id}"),
        json!({}),
    );
    if state
        .store
        .delete_notification_target(&org, &id, &audit)
        .await?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!(
            "notification target {id:?} in org {org:?}"
        )))
    }
}

/// A target's delivery log, newest first: the event, attempts, the last status code or
/// error, the next attempt, and when it was delivered.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/notifications/targets/{id}/deliveries", tag = "notifications",
    params(("org" = String, Path), ("id" = String, Path), PageQuery),
    responses((status = 200, body = Page<NotificationDeliveryInfo>), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn deliveries(
    State(state): State<AppState>,
    ApiPath((org, id)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> Result<Json<Page<NotificationDeliveryInfo>>, ApiError> {
    load(&state, &org, &id).await?;
    let limit = q.limit()?;
    let list = state
        .store
        .list_notification_deliveries(&org, &id, q.seq()?, limit)
        .await?;
    let items = list.into_iter().map(delivery_wire).collect();
    Ok(Json(page(items, limit, |d: &NotificationDeliveryInfo| {
        d.id.to_string()
    })))
}

/// Send a test event to this target (org admin), whatever its rules and even when
/// disabled. Answers with the pending delivery; its log entry shows the outcome.
#[utoipa::path(post, path = "/api/v1/orgs/{org}/notifications/targets/{id}/test", tag = "notifications",
    params(("org" = String, Path), ("id" = String, Path)),
    responses((status = 202, body = NotificationDeliveryInfo), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn test(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id)): ApiPath<(String, String)>,
) -> Result<(StatusCode, Json<NotificationDeliveryInfo>), ApiError> {
    load(&state, &org, &id).await?;
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
        only_target: Some(id.clone()),
    };
    let event_id = state
        .store
        .add_notification_event(&org, &event)
        .await?
        .ok_or_else(|| ApiError::Internal("the test event was not recorded".into()))?;
    let delivery = state
        .store
        .list_notification_deliveries(&org, &id, None, 10)
        .await?
        .into_iter()
        .find(|d| d.event_id == event_id)
        .ok_or_else(|| ApiError::Internal("the test delivery was not recorded".into()))?;
    Ok((StatusCode::ACCEPTED, Json(delivery_wire(delivery))))
}
