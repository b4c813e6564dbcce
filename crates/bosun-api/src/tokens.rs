//! Wire types of personal and pool tokens.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Token {
    pub id: String,
    /// `personal`, `pool` or `run`.
    pub kind: String,
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub org: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A token as created: the only response that ever carries its secret.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TokenCreated {
    pub token: Token,
    /// The bearer secret. Shown once; only its hash is stored.
    pub secret: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PersonalTokenCreate {
    #[serde(default)]
    pub description: String,
    /// Lifetime in seconds; none means no expiry.
    #[serde(default)]
    pub expires_in_seconds: Option<u64>,
    /// Create the token for another user (server admins only).
    #[serde(default)]
    pub user: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PoolTokenCreate {
    /// The runner pool the token joins (`hosted` or a pool slug).
    pub pool: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub expires_in_seconds: Option<u64>,
}

/// A console session (a personal token typed in, or a sign-in at an identity provider),
/// kept by the server so it can be listed and ended.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Session {
    /// `ses-…`.
    pub id: String,
    pub user: String,
    /// `token` (a personal token typed in) or `provider` (a sign-in at an identity
    /// provider).
    pub method: String,
    /// The identity provider's id, for a provider's sign-in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The personal token a token login was opened with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_id: Option<String>,
    pub created_at: DateTime<Utc>,
    /// When it was last used (the idle timeout counts from here; written at most once a
    /// minute).
    pub last_seen_at: DateTime<Utc>,
    /// When the identity provider last vouched for the person.
    pub refreshed_at: DateTime<Utc>,
    /// When it ends whatever happens.
    pub expires_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    /// Why it ended: `signed out`, `revoked by user:…`, an idle timeout, the provider no
    /// longer vouching.
    pub ended_reason: Option<String>,
}

/// Every open session of a user ended at once (`DELETE /api/v1/sessions`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SessionsEnded {
    pub user: String,
    /// How many were open and are now ended.
    pub ended: u64,
}

/// A person's identity at an identity provider, linked to a Bosun user: made by their
/// first sign-in, or linked ahead of it by a server admin (so that a user made before the
/// provider was configured signs in as themself).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SignInIdentity {
    pub user: String,
    /// The configured provider's id.
    pub provider: String,
    pub issuer: String,
    /// The person's `sub` at the provider.
    pub subject: String,
    pub email: Option<String>,
    pub username: Option<String>,
    pub created_at: DateTime<Utc>,
    /// Null for a link no sign-in has used yet.
    pub last_sign_in_at: Option<DateTime<Utc>>,
}

/// `POST /api/v1/identities`: link a provider's subject to an existing user.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignInIdentityLink {
    pub user: String,
    pub provider: String,
    pub subject: String,
}

/// `POST /cli-login`: begin a CLI login at an identity provider: the device authorization
/// grant where the provider offers it, else (or when `browser` asks) a sign-in through the
/// browser of the CLI's machine, which comes back to the CLI's `loopback`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CliLoginStart {
    /// The provider's id; absent: the server's only (or first) provider.
    #[serde(default)]
    pub provider: Option<String>,
    /// Where the CLI listens for the browser's return, for a sign-in through the browser.
    #[serde(default)]
    pub loopback: Option<CliLoopback>,
    /// Sign in through the browser even where the provider offers the device flow.
    #[serde(default)]
    pub browser: bool,
}

/// The CLI's side of a sign-in through the browser (RFC 8252's loopback redirect).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CliLoopback {
    /// `http://127.0.0.1:PORT/PATH` (or `[::1]`, `localhost`): where the browser is sent
    /// with `code` (or `error`) once the person signed in.
    pub redirect_uri: String,
    /// The PKCE S256 challenge of a verifier only the CLI holds: the exchange must show it.
    pub code_challenge: String,
}

/// How a CLI login goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum CliLoginMethod {
    /// The person opens `verification_uri` anywhere and confirms `user_code`, while the CLI
    /// polls with `login`.
    Device,
    /// The person opens `verification_uri` in this machine's browser; the CLI's loopback
    /// receives a `code` it exchanges (`POST /cli-login/exchange`).
    Browser,
}

/// A CLI login begun.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CliLoginStarted {
    pub method: CliLoginMethod,
    /// Opaque: what the CLI sends back to poll (sealed by the server); device flow only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<String>,
    pub provider: String,
    /// The code the person confirms; device flow only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_code: Option<String>,
    pub verification_uri: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification_uri_complete: Option<String>,
    pub expires_at: DateTime<Utc>,
    /// Seconds to wait between polls; device flow only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<u64>,
}

/// `POST /cli-login/exchange`: the `code` the CLI's loopback received, with the verifier
/// behind the challenge it began with.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CliLoginExchange {
    pub code: String,
    pub verifier: String,
}

/// `POST /cli-login/poll`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CliLoginPoll {
    pub login: String,
}

/// Where a CLI login stands: `pending` (poll again after `interval` seconds) or `done`
/// (with the short-lived token the CLI keeps).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CliLoginStatus {
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<TokenCreated>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
}
