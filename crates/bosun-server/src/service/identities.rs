//! People's identities at their identity providers through the API: a user's listed (a
//! server admin may list anyone's), one linked by a server admin to a user made before
//! the provider was configured (so that person's first sign-in is that user, not a new
//! one), and one unlinked, ending the sessions it signed in.

use bosun_api::{Page, SignInIdentity, SignInIdentityLink};
use bosun_store::{IdentityLink, IdentityRecord};
use serde::Deserialize;
use serde_json::json;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::paging::{whole, PageQuery};

/// The longest subject taken (OpenID Connect caps `sub` at 255 ASCII characters).
const MAX_SUBJECT: usize = 255;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct IdentityQuery {
    /// Whose identities (a server admin may name anyone; absent: your own).
    pub user: Option<String>,
    /// Refused: the list is answered whole, as one page (`before` is accepted too, as
    /// for every list).
    #[serde(alias = "before")]
    pub cursor: Option<String>,
    /// Checked (1–1000) but does not shorten the page: a user has at most 100.
    pub limit: Option<u32>,
}

pub fn to_wire(i: IdentityRecord) -> SignInIdentity {
    SignInIdentity {
        user: i.user,
        provider: i.provider,
        issuer: i.issuer,
        subject: i.subject,
        email: i.email,
        username: i.username,
        created_at: i.created_at,
        last_sign_in_at: i.last_sign_in_at,
    }
}

/// A user's identities, oldest first, as one page.
pub async fn list(
    state: &AppState,
    caller: &Caller,
    q: &IdentityQuery,
) -> Result<Page<SignInIdentity>, ApiError> {
    PageQuery {
        cursor: q.cursor.clone(),
        limit: q.limit,
    }
    .whole()?;
    let me = caller.user()?;
    let who = q.user.as_deref().unwrap_or(me);
    if who != me && !caller.is_server_admin() {
        return Err(ApiError::Forbidden(format!(
            "only a server admin may list another user's identities (asked for {who:?})"
        )));
    }
    let identities = state.store.list_identities(who).await?;
    Ok(whole(identities.into_iter().map(to_wire).collect()))
}

/// The issuer of the configured provider `id`.
fn issuer_of(state: &AppState, id: &str) -> Result<String, ApiError> {
    state
        .sign_in
        .get(id)
        .map(|p| p.config.issuer.clone())
        .ok_or_else(|| {
            ApiError::Validation(bosun_core::ValidationError::new(
                "provider",
                format!("no identity provider {id:?} is configured on this server"),
            ))
        })
}

fn check_subject(subject: &str) -> Result<(), ApiError> {
    if subject.is_empty() || subject.len() > MAX_SUBJECT || subject.chars().any(char::is_control) {
        return Err(ApiError::Validation(bosun_core::ValidationError::new(
            "subject",
            format!("must be the person's `sub` at the provider: 1 to {MAX_SUBJECT} bytes, no control characters"),
        )));
    }
    Ok(())
}

/// Links a provider's subject to an existing user (server admins; the route checks).
pub async fn link(
    state: &AppState,
    caller: &Caller,
    body: SignInIdentityLink,
) -> Result<SignInIdentity, ApiError> {
    let issuer = issuer_of(state, &body.provider)?;
    check_subject(&body.subject)?;
    let audit = caller.audit(
        None,
        "identity.link",
        format!("user:{}", body.user),
        json!({"provider": body.provider, "issuer": issuer, "subject": body.subject}),
    );
    let linked = state
        .store
        .link_identity(
            &IdentityLink {
                issuer,
                subject: body.subject,
                provider: body.provider,
                user: body.user,
            },
            &audit,
        )
        .await?;
    Ok(to_wire(linked))
}

/// Unlinks an identity (server admins; the route checks): the sessions it signed in end,
/// and the person's next sign-in makes a new user.
pub async fn unlink(
    state: &AppState,
    caller: &Caller,
    provider: &str,
    subject: &str,
) -> Result<SignInIdentity, ApiError> {
    let issuer = issuer_of(state, provider)?;
    check_subject(subject)?;
    let audit = caller.audit(
        None,
        "identity.unlink",
        String::new(),
        json!({"provider": provider, "issuer": issuer, "subject": subject}),
    );
    let gone = state
        .store
        .unlink_identity(&issuer, subject, &audit)
        .await?
        .ok_or_else(|| {
            ApiError::NotFound(format!("identity {subject:?} of provider {provider}"))
        })?;
    Ok(to_wire(gone))
}
