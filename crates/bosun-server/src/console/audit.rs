//! The audit log page: the org's audit records, newest first, a page at a time (org
//! admins, like the API's audit route).

use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::{age, render, Layout, PageError, Session};
use crate::extract::{ApiPath, ApiQuery};
use crate::server::AppState;

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

#[derive(Deserialize)]
pub struct AuditPageQuery {
    before: Option<i64>,
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
}

#[derive(askama::Template)]
#[template(path = "console/audit.html")]
struct AuditPage {
    layout: Layout,
    rows: Vec<AuditRow>,
    /// The `before` of the next (older) page.
    older: Option<i64>,
    first_page: bool,
}

async fn list(
    State(state): State<AppState>,
    session: Session,
    Path(org): Path<String>,
    Query(q): Query<AuditPageQuery>,
) -> Result<Response, PageError> {
    let layout = Layout::new(session, &org, "audit", "Audit log", "/orgs/{org}/audit")?;
    let events = crate::tenancy::list_audit(
        State(state),
        ApiPath(org),
        ApiQuery(crate::tenancy::AuditQuery {
            before: q.before,
            limit: Some(PAGE),
        }),
    )
    .await?
    .0;
    let older = (events.len() == PAGE as usize)
        .then(|| events.last().map(|e| e.seq))
        .flatten();
    let rows = events
        .into_iter()
        .map(|e| AuditRow {
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
        },
    )
}
