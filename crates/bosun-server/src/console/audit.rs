//! The audit log page: the org's audit records, newest first, a page at a time (org
//! admins, like the API's audit route), narrowed by actor, action and target through the
//! API's filters — a form, and each row's actor, action and target link to their own.

use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::{age, render, urlencode, Layout, PageError, Session};
use crate::app::AppState;

pub fn router() -> Router<AppState> {
    Router::new().route("/orgs/{org}/audit", get(list))
}

/// Records per page.
const PAGE: u32 = 50;

/// A moment for people: "3m 20s ago" or "in 5m", with the exact time kept in
/// `<time datetime>`.
pub struct When {
    pub iso: String,
    pub text: String,
}

impl When {
    pub fn of(at: DateTime<Utc>) -> Self {
        let now = Utc::now();
        let text = if at > now {
            format!("in {}", super::duration_text((at - now).num_seconds()))
        } else {
            format!("{} ago", age(at))
        };
        When {
            iso: at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            text,
        }
    }
}

#[derive(Deserialize, Default)]
pub struct AuditPageQuery {
    before: Option<i64>,
    #[serde(default)]
    actor: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    target: String,
}

impl AuditPageQuery {
    /// The filters as a query string (`&actor=…`), for the pager's links.
    fn filter_query(&self) -> String {
        [
            ("actor", &self.actor),
            ("action", &self.action),
            ("target", &self.target),
        ]
        .into_iter()
        .filter(|(_, v)| !v.trim().is_empty())
        .map(|(k, v)| format!("&{k}={}", urlencode(v.trim())))
        .collect()
    }
}

struct AuditRow {
    seq: i64,
    at: When,
    actor: String,
    /// The token the actor used, when one was.
    token: Option<String>,
    action: String,
    target: String,
    /// The record's detail as compact JSON (empty for `{}`).
    detail: String,
    /// `actor`, `action` and `target` URL-encoded, for the links filtering by each.
    actor_q: String,
    action_q: String,
    target_q: String,
}

#[derive(askama::Template)]
#[template(path = "console/audit.html")]
struct AuditPage {
    layout: Layout,
    rows: Vec<AuditRow>,
    /// The `before` of the next (older) page.
    older: Option<i64>,
    first_page: bool,
    /// The filters in force, as typed, and as a query string for the pager.
    actor: String,
    action: String,
    target: String,
    filtered: bool,
    filter_query: String,
}

async fn list(
    State(state): State<AppState>,
    session: Session,
    Path(org): Path<String>,
    Query(q): Query<AuditPageQuery>,
) -> Result<Response, PageError> {
    let layout = Layout::new(
        session,
        &org,
        "audit",
        "Audit log",
        crate::tenancy::LIST_AUDIT,
    )?;
    let query = crate::service::tenancy::AuditQuery {
        cursor: q.before.map(|c| c.to_string()),
        limit: Some(PAGE),
        actor: Some(q.actor.clone()),
        action: Some(q.action.clone()),
        target: Some(q.target.clone()),
    };
    let events = crate::service::tenancy::audit_page(&state, Some(&org), &query).await?;
    let older = events
        .next_cursor
        .as_deref()
        .and_then(|c| c.parse::<i64>().ok());
    let rows = events
        .items
        .into_iter()
        .map(|e| AuditRow {
            actor_q: urlencode(&e.actor),
            action_q: urlencode(&e.action),
            target_q: urlencode(&e.target),
            seq: e.seq,
            at: When::of(e.at),
            actor: e.actor,
            token: e.token_id,
            action: e.action,
            target: e.target,
            detail: match &e.detail {
                serde_json::Value::Object(m) if m.is_empty() => String::new(),
                serde_json::Value::Null => String::new(),
                d => d.to_string(),
            },
        })
        .collect();
    let flash = layout.flash.clone();
    render(
        flash.as_ref(),
        &AuditPage {
            layout,
            rows,
            older,
            first_page: q.before.is_none(),
            filter_query: q.filter_query(),
            filtered: !q.filter_query().is_empty(),
            actor: q.actor,
            action: q.action,
            target: q.target,
        },
    )
}
