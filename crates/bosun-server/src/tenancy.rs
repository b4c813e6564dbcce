//! Tenancy: orgs, users, org membership and roles, "who am I", and the audit log.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use bosun_api::{
    AuditEvent, ErrorCode, Member, MemberPut, Org, OrgCreate, OrgRole, Page, User, UserCreate,
    Whoami,
};
use bosun_core::authz::{Access, PrincipalKind};
use bosun_core::{Role, Slug, ValidationError};
use bosun_store::{AuditRecord, NewOrg, NewUser};
use serde::Deserialize;
use serde_json::json;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::route::{endpoint, route, Endpoint, Route};

/// Served by [`list_audit`].
pub const LIST_AUDIT: Endpoint = endpoint!(Access::Org(Role::Admin), list_audit);

pub fn routes() -> Vec<Route> {
    vec![
        route!(Access::User, whoami),
        route!(Access::User, list_orgs),
        route!(Access::ServerAdmin, create_org),
        route!(Access::Org(Role::Viewer), get_org),
        route!(Access::ServerAdmin, create_user),
        route!(Access::Org(Role::Viewer), list_members),
        route!(Access::Org(Role::Admin), put_member),
        route!(Access::Org(Role::Admin), delete_member),
        LIST_AUDIT.route(),
        route!(Access::ServerAdmin, list_server_audit),
    ]
}

fn org_wire(o: bosun_store::OrgRecord) -> Org {
    Org {
        id: o.id,
        name: o.name,
        created_at: o.created_at,
    }
}

/// The caller's identity and roles.
#[utoipa::path(get, path = "/api/v1/whoami", tag = "tenancy",
    responses((status = 200, body = Whoami), (status = 401, body = bosun_api::ErrorBody)))]
pub async fn whoami(caller: Caller) -> Result<Json<Whoami>, ApiError> {
    let PrincipalKind::User {
        user,
        server_admin,
        roles,
    } = caller.0.kind
    else {
        return Err(ApiError::Forbidden("whoami needs a personal token".into()));
    };
    Ok(Json(Whoami {
        user,
        server_admin,
        token_id: caller.0.token_id,
        orgs: roles
            .into_iter()
            .map(|(org, role)| OrgRole {
                org,
                role: role.to_string(),
            })
            .collect(),
    }))
}

/// The orgs the caller belongs to.
#[utoipa::path(get, path = "/api/v1/orgs", tag = "tenancy",
    responses((status = 200, body = Vec<Org>)))]
pub async fn list_orgs(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<Vec<Org>>, ApiError> {
    let roles = state.store.roles_of(caller.user()?).await?;
    let mut orgs = Vec::with_capacity(roles.len());
    for org in roles.keys() {
        if let Some(o) = state.store.get_org(org).await? {
            orgs.push(org_wire(o));
        }
    }
    Ok(Json(orgs))
}

/// Create an org; the creator becomes its first admin.
#[utoipa::path(post, path = "/api/v1/orgs", tag = "tenancy",
    request_body = OrgCreate,
    responses((status = 201, body = Org), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn create_org(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<OrgCreate>,
) -> Result<(StatusCode, Json<Org>), ApiError> {
    let id = Slug::parse("id", &body.id)?;
    let name = match body.name.as_deref().map(str::trim) {
        None | Some("") => id.to_string(),
        Some(n) if n.chars().count() > 200 || n.chars().any(char::is_control) => {
            return Err(ValidationError::new(
                "name",
                "must be at most 200 characters with no control characters",
            )
            .into())
        }
        Some(n) => n.to_string(),
    };
    let org = NewOrg {
        id: id.to_string(),
        name: name.clone(),
        admin: Some(caller.user()?.to_string()),
    };
    let audit = caller.audit(
        Some(id.as_str()),
        "org.create",
        format!("org:{id}"),
        json!({"name": name}),
    );
    let created = state.store.create_org(&org, &audit).await?;
    Ok((StatusCode::CREATED, Json(org_wire(created))))
}

/// One org.
#[utoipa::path(get, path = "/api/v1/orgs/{org}", tag = "tenancy",
    params(("org" = String, Path)),
    responses((status = 200, body = Org), (status = 403, body = bosun_api::ErrorBody)))]
pub async fn get_org(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
) -> Result<Json<Org>, ApiError> {
    let o = state
        .store
        .get_org(&org)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("org {org:?}")))?;
    Ok(Json(org_wire(o)))
}

/// Create a user (then add them to orgs and give them a token).
#[utoipa::path(post, path = "/api/v1/users", tag = "tenancy",
    request_body = UserCreate,
    responses((status = 201, body = User), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn create_user(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<UserCreate>,
) -> Result<(StatusCode, Json<User>), ApiError> {
    let id = Slug::parse("id", &body.id)?;
    let audit = caller.audit(
        None,
        "user.create",
        format!("user:{id}"),
        json!({"server_admin": body.server_admin}),
    );
    let u = state
        .store
        .create_user(
            &NewUser {
                id: id.to_string(),
                server_admin: body.server_admin,
            },
            &audit,
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(User {
            id: u.id,
            server_admin: u.server_admin,
            created_at: u.created_at,
        }),
    ))
}

/// The org's members and their roles.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/members", tag = "tenancy",
    params(("org" = String, Path)),
    responses((status = 200, body = Vec<Member>)))]
pub async fn list_members(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
) -> Result<Json<Vec<Member>>, ApiError> {
    let members = state.store.list_members(&org).await?;
    Ok(Json(
        members
            .into_iter()
            .map(|(user, role)| Member {
                user,
                role: role.to_string(),
            })
            .collect(),
    ))
}

async fn refuse_losing_last_admin(state: &AppState, org: &str, user: &str) -> Result<(), ApiError> {
    let members = state.store.list_members(org).await?;
    let admins: Vec<&String> = members
        .iter()
        .filter(|(_, r)| *r == Role::Admin)
        .map(|(u, _)| u)
        .collect();
    if admins.len() == 1 && admins[0] == user {
        return Err(ApiError::Conflict {
            code: ErrorCode::LastAdmin,
            message: format!(
                "{user:?} is the last admin of org {org:?}; make someone else admin first"
            ),
        });
    }
    Ok(())
}

/// Add a member or change their role.
#[utoipa::path(put, path = "/api/v1/orgs/{org}/members/{user}", tag = "tenancy",
    params(("org" = String, Path), ("user" = String, Path)),
    request_body = MemberPut,
    responses((status = 200, body = Member), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn put_member(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, user)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<MemberPut>,
) -> Result<Json<Member>, ApiError> {
    let role: Role = body.role.parse()?;
    if role != Role::Admin {
        refuse_losing_last_admin(&state, &org, &user).await?;
    }
    let audit = caller.audit(
        Some(&org),
        "member.set",
        format!("user:{user}"),
        json!({"role": role.as_str()}),
    );
    state.store.set_member(&org, &user, role, &audit).await?;
    Ok(Json(Member {
        user,
        role: role.to_string(),
    }))
}

/// Remove a member from the org.
#[utoipa::path(delete, path = "/api/v1/orgs/{org}/members/{user}", tag = "tenancy",
    params(("org" = String, Path), ("user" = String, Path)),
    responses((status = 204), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn delete_member(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, user)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    refuse_losing_last_admin(&state, &org, &user).await?;
    let audit = caller.audit(
        Some(&org),
        "member.remove",
        format!("user:{user}"),
        json!({}),
    );
    if !state.store.remove_member(&org, &user, &audit).await? {
        return Err(ApiError::NotFound(format!(
            "member {user:?} of org {org:?}"
        )));
    }
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Where the page starts: the previous page's `next_cursor` (absent: the newest
    /// records). `before` is accepted too, as older clients sent it.
    #[serde(alias = "before")]
    pub cursor: Option<String>,
    /// Page size, 1–1000 (default 100).
    pub limit: Option<u32>,
    /// Only this actor's records (`user:alice`, `system`, `run:<id>`, …).
    pub actor: Option<String>,
    /// Only this action (`state.force_unlock`) or the actions under it (`state`).
    pub action: Option<String>,
    /// Only records about this target (`stack:prod`, `plan:app-config`, …).
    pub target: Option<String>,
}

impl AuditQuery {
    /// The store's filter; an empty value filters nothing (an empty form field).
    fn filter(&self) -> bosun_store::AuditFilter {
        let given = |v: &Option<String>| v.clone().filter(|s| !s.trim().is_empty());
        bosun_store::AuditFilter {
            actor: given(&self.actor),
            action: given(&self.action).map(|a| a.trim_end_matches('.').to_string()),
            target: given(&self.target),
        }
    }
}

/// The org's audit log, newest first; `actor`, `action` (itself or the actions under
/// it) and `target` narrow it.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/audit", tag = "tenancy",
    params(("org" = String, Path), AuditQuery),
    responses((status = 200, body = Page<AuditEvent>)))]
pub async fn list_audit(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> Result<Json<Page<AuditEvent>>, ApiError> {
    audit_page(&state, Some(&org), &q).await.map(Json)
}

/// The whole server's audit log, newest first: every org's records and server-level
/// ones (users, personal tokens).
#[utoipa::path(get, path = "/api/v1/audit", tag = "tenancy",
    params(AuditQuery),
    responses((status = 200, body = Page<AuditEvent>)))]
pub async fn list_server_audit(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> Result<Json<Page<AuditEvent>>, ApiError> {
    audit_page(&state, None, &q).await.map(Json)
}

/// A page of the audit log of `org` (`None`: the whole server's).
pub(crate) async fn audit_page(
    state: &AppState,
    org: Option<&str>,
    q: &AuditQuery,
) -> Result<Page<AuditEvent>, ApiError> {
    let limit = crate::paging::page_limit(q.limit)?;
    let cursor = crate::paging::seq_cursor(q.cursor.as_deref())?;
    let records = state
        .store
        .search_audit(org, &q.filter(), cursor, limit)
        .await?;
    let items = records.into_iter().map(audit_wire).collect();
    Ok(crate::paging::page(items, limit, |e: &AuditEvent| {
        e.seq.to_string()
    }))
}

fn audit_wire(r: AuditRecord) -> AuditEvent {
    AuditEvent {
        seq: r.seq,
        at: r.at,
        org: r.entry.org,
        actor: r.entry.actor,
        token_id: r.entry.token_id,
        action: r.entry.action,
        target: r.entry.target,
        detail: r.entry.detail,
    }
}
