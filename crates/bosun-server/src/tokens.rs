//! Tokens over the API: personal and runner-pool tokens created (the secret shown once),
//! listed and revoked, console sessions listed and ended, and people's identities at
//! their providers listed, linked and unlinked; the work is `service::tokens`,
//! `service::sessions` and `service::identities`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use bosun_api::{
    Page, PersonalTokenCreate, PoolTokenCreate, Session, SignInIdentity, SignInIdentityLink, Token,
    TokenCreated,
};
use bosun_core::authz::Access;
use bosun_core::Role;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::paging::PageQuery;
use crate::route::{route, Route};
use crate::service::tokens as service;

pub fn routes() -> Vec<Route> {
    vec![
        route!(Access::User, create_personal),
        route!(Access::User, list_personal),
        route!(Access::User, revoke_personal),
        route!(Access::User, list_sessions),
        route!(Access::User, revoke_session),
        route!(Access::User, revoke_all_sessions),
        route!(Access::User, refresh_login),
        route!(Access::User, list_identities),
        route!(Access::ServerAdmin, link_identity),
        route!(Access::ServerAdmin, unlink_identity),
        route!(Access::Org(Role::Admin), create_pool),
        route!(Access::Org(Role::Admin), list_pool),
        route!(Access::Org(Role::Admin), revoke_pool),
    ]
}

/// Create a personal token (for yourself; server admins may name another user).
#[utoipa::path(post, path = "/api/v1/tokens", tag = "tokens",
    request_body = PersonalTokenCreate,
    responses((status = 201, body = TokenCreated), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn create_personal(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<PersonalTokenCreate>,
) -> Result<(StatusCode, Json<TokenCreated>), ApiError> {
    let created = service::create_personal(&state, &caller, body).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// List your personal tokens (never their secrets).
///
/// Answered whole, as one page: `next_cursor` is always null; `limit` is checked
/// (1–1000) but does not shorten the page, and a `cursor` is refused.
#[utoipa::path(get, path = "/api/v1/tokens", tag = "tokens",
    params(PageQuery),
    responses((status = 200, body = Page<Token>), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn list_personal(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> Result<Json<Page<Token>>, ApiError> {
    Ok(Json(service::list_personal(&state, &caller, &q).await?))
}

/// Revoke one of your personal tokens (server admins: anyone's).
#[utoipa::path(delete, path = "/api/v1/tokens/{token}", tag = "tokens",
    params(("token" = String, Path, description = "token id")),
    responses((status = 204), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn revoke_personal(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    service::revoke_personal(&state, &caller, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Create a runner-pool token: a runner joins the pool with it.
#[utoipa::path(post, path = "/api/v1/orgs/{org}/pool-tokens", tag = "tokens",
    params(("org" = String, Path)),
    request_body = PoolTokenCreate,
    responses((status = 201, body = TokenCreated), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn create_pool(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(org): ApiPath<String>,
    ApiJson(body): ApiJson<PoolTokenCreate>,
) -> Result<(StatusCode, Json<TokenCreated>), ApiError> {
    let created = service::create_pool(&state, &caller, &org, body).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// List the org's runner-pool tokens.
///
/// Answered whole, as one page: `next_cursor` is always null; `limit` is checked
/// (1–1000) but does not shorten the page, and a `cursor` is refused.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/pool-tokens", tag = "tokens",
    params(("org" = String, Path), PageQuery),
    responses((status = 200, body = Page<Token>), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn list_pool(
    State(state): State<AppState>,
    ApiPath(org): ApiPath<String>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> Result<Json<Page<Token>>, ApiError> {
    Ok(Json(service::list_pool(&state, &org, &q).await?))
}

/// Revoke a runner-pool token.
#[utoipa::path(delete, path = "/api/v1/orgs/{org}/pool-tokens/{token}", tag = "tokens",
    params(("org" = String, Path), ("token" = String, Path)),
    responses((status = 204), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn revoke_pool(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((org, id)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    service::revoke_pool(&state, &caller, &org, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// List console sessions: your own, or (server admins) `user`'s, newest first — open and
/// ended, with why each ended.
///
/// Answered whole, as one page: `next_cursor` is always null; `limit` (1–1000) caps how
/// many of the newest are answered.
#[utoipa::path(get, path = "/api/v1/sessions", tag = "tokens",
    params(crate::service::sessions::SessionQuery),
    responses((status = 200, body = Page<Session>), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn list_sessions(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<crate::service::sessions::SessionQuery>,
) -> Result<Json<Page<Session>>, ApiError> {
    Ok(Json(
        crate::service::sessions::list(&state, &caller, &q).await?,
    ))
}

/// End a console session of yours (server admins: anyone's): its browser must sign in
/// again.
#[utoipa::path(delete, path = "/api/v1/sessions/{session}", tag = "tokens",
    params(("session" = String, Path, description = "session id (ses-…)")),
    responses((status = 200, body = Session), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn revoke_session(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Session>, ApiError> {
    Ok(Json(
        crate::service::sessions::revoke(&state, &caller, &id).await?,
    ))
}

/// Replace the token a `bosun login` holds: the identity provider is asked again (your
/// roles follow it) and a new short-lived token made, the old one revoked. Refused, and the
/// login ended, when the provider no longer vouches for you.
#[utoipa::path(post, path = "/api/v1/login/refresh", tag = "tokens",
    responses((status = 200, body = TokenCreated), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn refresh_login(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<TokenCreated>, ApiError> {
    Ok(Json(
        crate::service::cli_login::refresh(&state, &caller).await?,
    ))
}

/// End every open session of yours (sign out everywhere) or, for a server admin, of
/// `user`: their browsers must sign in again and their `bosun login` tokens are revoked.
/// Audited once, as `session.revoke` with `"all": true`.
#[utoipa::path(delete, path = "/api/v1/sessions", tag = "tokens",
    params(crate::service::sessions::EndAllQuery),
    responses((status = 200, body = bosun_api::SessionsEnded), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn revoke_all_sessions(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<crate::service::sessions::EndAllQuery>,
) -> Result<Json<bosun_api::SessionsEnded>, ApiError> {
    Ok(Json(
        crate::service::sessions::revoke_all(&state, &caller, &q).await?,
    ))
}

/// List identities at identity providers: your own, or (server admins) `user`'s, oldest
/// first, with when each last signed in (null for a link not used yet).
///
/// Answered whole, as one page: `next_cursor` is always null.
#[utoipa::path(get, path = "/api/v1/identities", tag = "tokens",
    params(crate::service::identities::IdentityQuery),
    responses((status = 200, body = Page<SignInIdentity>), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn list_identities(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<crate::service::identities::IdentityQuery>,
) -> Result<Json<Page<SignInIdentity>>, ApiError> {
    Ok(Json(
        crate::service::identities::list(&state, &caller, &q).await?,
    ))
}

/// Link a person's subject at a configured provider to an existing user (server
/// admins), so that their first sign-in is that user rather than a new one. Refused
/// (409 `already_exists`, naming the user) for a subject already linked.
#[utoipa::path(post, path = "/api/v1/identities", tag = "tokens",
    request_body = SignInIdentityLink,
    responses((status = 201, body = SignInIdentity), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn link_identity(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<SignInIdentityLink>,
) -> Result<(StatusCode, Json<SignInIdentity>), ApiError> {
    let linked = crate::service::identities::link(&state, &caller, body).await?;
    Ok((StatusCode::CREATED, Json(linked)))
}

/// Unlink an identity (server admins): the sessions it signed in end, and the person's
/// next sign-in makes a new user.
#[utoipa::path(delete, path = "/api/v1/identities/{provider}/{subject}", tag = "tokens",
    params(("provider" = String, Path), ("subject" = String, Path, description = "the person's `sub`, percent-encoded")),
    responses((status = 200, body = SignInIdentity), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn unlink_identity(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((provider, subject)): ApiPath<(String, String)>,
) -> Result<Json<SignInIdentity>, ApiError> {
    Ok(Json(
        crate::service::identities::unlink(&state, &caller, &provider, &subject).await?,
    ))
}

/// `POST /cli-login`: begins a `bosun login` at an identity provider (no token: the person
/// has none yet). Outside the guarded API, like the console's login.
pub async fn cli_login_start(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<bosun_api::CliLoginStart>,
) -> Result<Json<bosun_api::CliLoginStarted>, ApiError> {
    Ok(Json(crate::service::cli_login::start(&state, &body).await?))
}

/// `POST /cli-login/poll`: whether the person approved a `bosun login` yet; its token once
/// they have.
pub async fn cli_login_poll(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<bosun_api::CliLoginPoll>,
) -> Result<Json<bosun_api::CliLoginStatus>, ApiError> {
    Ok(Json(
        crate::service::cli_login::poll(&state, &body.login).await?,
    ))
}

/// `POST /cli-login/exchange`: the token of a `bosun login` through the browser, for the
/// `code` its loopback received and the verifier behind its challenge.
pub async fn cli_login_exchange(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<bosun_api::CliLoginExchange>,
) -> Result<Json<bosun_api::CliLoginStatus>, ApiError> {
    Ok(Json(
        crate::service::cli_login::exchange(&state, &body).await?,
    ))
}
