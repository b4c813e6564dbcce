//! Tenancy: "who am I", orgs, users, org membership and roles (never losing an org's last
//! admin), and pages of the audit log — the work behind the API's tenancy handlers and
//! the console's audit page.

use bosun_api::{
    AuditEvent, ErrorCode, Member, MemberPut, Org, OrgCreate, OrgPatch, OrgRole, Page, User,
    UserCreate, Whoami,
};
use bosun_core::authz::PrincipalKind;
use bosun_core::feedback::PrFeedback;
use bosun_core::sign_in::MembershipSource;
use bosun_core::{Role, Slug, ValidationError};
use bosun_store::{AuditRecord, NewOrg, NewUser, OrgUpdate};
use serde::Deserialize;
use serde_json::json;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::paging::{whole, PageQuery};

fn org_wire(o: bosun_store::OrgRecord) -> Org {
    Org {
        id: o.id,
        name: o.name,
        pr_feedback: o.pr_feedback.as_str().to_string(),
        created_at: o.created_at,
    }
}

/// The caller's identity and roles.
pub fn whoami(caller: &Caller) -> Result<Whoami, ApiError> {
    let PrincipalKind::User {
        user,
        server_admin,
        roles,
    } = &caller.0.kind
    else {
        return Err(ApiError::Forbidden("whoami needs a personal token".into()));
    };
    Ok(Whoami {
        user: user.clone(),
        server_admin: *server_admin,
        token_id: caller.0.token_id.clone(),
        orgs: roles
            .iter()
            .map(|(org, role)| OrgRole {
                org: org.clone(),
                role: role.to_string(),
            })
            .collect(),
    })
}

/// The orgs the caller belongs to.
pub async fn list_orgs(
    state: &AppState,
    caller: &Caller,
    q: &PageQuery,
) -> Result<Page<Org>, ApiError> {
    q.whole()?;
    let roles = state.store.roles_of(caller.user()?).await?;
    let mut orgs = Vec::with_capacity(roles.len());
    for org in roles.keys() {
        if let Some(o) = state.store.get_org(org).await? {
            orgs.push(org_wire(o));
        }
    }
    Ok(whole(orgs))
}

/// Creates an org; the creator becomes its first admin.
pub async fn create_org(
    state: &AppState,
    caller: &Caller,
    body: OrgCreate,
) -> Result<Org, ApiError> {
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
    Ok(org_wire(created))
}

/// One org.
pub async fn get_org(state: &AppState, org: &str) -> Result<Org, ApiError> {
    let o = state
        .store
        .get_org(org)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("org {org:?}")))?;
    Ok(org_wire(o))
}

/// Changes an org's settings (`pr_feedback`); the audit entry (`org.update`) records each
/// changed field's old and new value. A body with no field changes nothing.
pub async fn update_org(
    state: &AppState,
    caller: &Caller,
    org: &str,
    body: OrgPatch,
) -> Result<Org, ApiError> {
    let change = OrgUpdate {
        pr_feedback: body
            .pr_feedback
            .as_deref()
            .map(str::parse::<PrFeedback>)
            .transpose()?,
    };
    if change == OrgUpdate::default() {
        return get_org(state, org).await;
    }
    let audit = caller.audit(Some(org), "org.update", format!("org:{org}"), json!({}));
    let updated = state.store.update_org(org, &change, &audit).await?;
    Ok(org_wire(updated))
}

/// Creates a user (then add them to orgs and give them a token).
pub async fn create_user(
    state: &AppState,
    caller: &Caller,
    body: UserCreate,
) -> Result<User, ApiError> {
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
    Ok(User {
        id: u.id,
        server_admin: u.server_admin,
        created_at: u.created_at,
    })
}

/// The org's members and their roles.
pub async fn list_members(
    state: &AppState,
    org: &str,
    q: &PageQuery,
) -> Result<Page<Member>, ApiError> {
    q.whole()?;
    let members = state.store.list_members(org).await?;
    Ok(whole(
        members
            .into_iter()
            .map(|m| Member {
                user: m.user,
                role: m.role.to_string(),
                source: m.source.to_string(),
                source_detail: m.source_detail,
            })
            .collect(),
    ))
}

async fn refuse_losing_last_admin(state: &AppState, org: &str, user: &str) -> Result<(), ApiError> {
    let members = state.store.list_members(org).await?;
    let admins: Vec<&String> = members
        .iter()
        .filter(|m| m.role == Role::Admin)
        .map(|m| &m.user)
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

/// Adds a member or changes their role.
pub async fn put_member(
    state: &AppState,
    caller: &Caller,
    org: &str,
    user: &str,
    body: MemberPut,
) -> Result<Member, ApiError> {
    let role: Role = body.role.parse()?;
    if role != Role::Admin {
        refuse_losing_last_admin(state, org, user).await?;
    }
    let audit = caller.audit(
        Some(org),
        "member.set",
        format!("user:{user}"),
        json!({"role": role.as_str()}),
    );
    state.store.set_member(org, user, role, &audit).await?;
    Ok(Member {
        user: user.to_string(),
        role: role.to_string(),
        source: MembershipSource::Manual.to_string(),
        source_detail: None,
    })
}

/// Removes a member from the org.
pub async fn delete_member(
    state: &AppState,
    caller: &Caller,
    org: &str,
    user: &str,
) -> Result<(), ApiError> {
    refuse_losing_last_admin(state, org, user).await?;
    let audit = caller.audit(
        Some(org),
        "member.remove",
        format!("user:{user}"),
        json!({}),
    );
    if !state.store.remove_member(org, user, &audit).await? {
        return Err(ApiError::NotFound(format!(
            "member {user:?} of org {org:?}"
        )));
    }
    Ok(())
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

/// A page of the audit log of `org` (`None`: the whole server's).
pub async fn audit_page(
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
