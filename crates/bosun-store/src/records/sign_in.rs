//! People's sign-in: sign-ins begun at an identity provider, the identities it vouched
//! for, and console sessions.

use std::collections::BTreeMap;

use bosun_core::sign_in::{Granted, MembershipChange, MembershipSource};
use bosun_core::Role;
use chrono::{DateTime, Utc};

use crate::{Sealed, TokenRecord, UserRecord};

/// A sign-in begun: what the callback must find to finish it. `state` is kept hashed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignInAttempt {
    pub state_hash: String,
    pub provider: String,
    /// Who may finish it.
    pub binding: SignInBinding,
    pub nonce: String,
    /// The PKCE code verifier.
    pub verifier: String,
    /// Where the browser goes once signed in (a path of this site).
    pub next: String,
    pub expires_at: DateTime<Utc>,
}

/// Who may finish a sign-in begun.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignInBinding {
    /// The console, in the browser holding the binding cookie (kept hashed).
    Browser { cookie_hash: String },
    /// A `bosun login` through this machine's browser: the callback sends the browser on
    /// to the CLI's loopback address, and only the holder of the verifier behind the CLI's
    /// PKCE challenge gets the token.
    Cli {
        redirect_uri: String,
        code_challenge: String,
    },
}

/// A person's identity at a provider, linked to a user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityRecord {
    pub issuer: String,
    pub subject: String,
    /// The id of the configured provider that linked it.
    pub provider: String,
    pub user: String,
    pub email: Option<String>,
    pub username: Option<String>,
    pub created_at: DateTime<Utc>,
    /// None for a link made by an admin that no sign-in has used yet.
    pub last_sign_in_at: Option<DateTime<Utc>>,
}

/// An identity linked to an existing user ahead of its first sign-in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityLink {
    pub issuer: String,
    pub subject: String,
    pub provider: String,
    pub user: String,
}

/// How a console session was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionMethod {
    /// A personal token typed in (break-glass).
    Token,
    /// A sign-in at an identity provider.
    Provider,
}

impl SessionMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionMethod::Token => "token",
            SessionMethod::Provider => "provider",
        }
    }
}

/// A session to open.
#[derive(Debug, Clone, PartialEq)]
pub struct NewSession {
    /// Its public id (`ses-…`), shown in lists.
    pub id: String,
    /// The hash of the secret the browser's cookie holds.
    pub secret_hash: String,
    pub user: String,
    pub method: SessionMethod,
    /// The provider's id, for a provider sign-in.
    pub provider: Option<String>,
    /// The person's subject at that provider (the store sets it for a sign-in).
    pub subject: Option<String>,
    /// The personal token's id, for a token login.
    pub token_id: Option<String>,
    /// The last ID token (RP-initiated logout sends it back as `id_token_hint`).
    pub id_token: Option<String>,
    /// The provider's refresh token, sealed.
    pub refresh: Option<Sealed>,
    /// When it ends whatever happens (the absolute timeout).
    pub expires_at: DateTime<Utc>,
}

/// A console session as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRecord {
    pub id: String,
    pub user: String,
    pub method: SessionMethod,
    pub provider: Option<String>,
    pub subject: Option<String>,
    pub token_id: Option<String>,
    pub id_token: Option<String>,
    pub refresh: Option<Sealed>,
    pub created_at: DateTime<Utc>,
    pub last_seen_at: DateTime<Utc>,
    /// When the provider last vouched for the person (the sign-in, or a refresh).
    pub refreshed_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    /// Why it ended: `signed out`, `revoked by user:alice`, `idle`, `refresh failed: …`.
    pub ended_reason: Option<String>,
}

/// A session opened by its cookie, with everything a request needs of its person, read
/// in one store call.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionGrant {
    pub session: SessionRecord,
    pub user: UserRecord,
    pub roles: BTreeMap<String, Role>,
    /// The personal token a token login was opened with (its revocation ends the
    /// session).
    pub token: Option<TokenRecord>,
}

/// A person an identity provider vouched for, as one sign-in (or a session's refresh)
/// takes them.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderSignIn {
    pub provider: String,
    pub issuer: String,
    pub subject: String,
    pub email: Option<String>,
    pub username: Option<String>,
    /// The user id a first sign-in proposes; the store adds `-2`, `-3`, … when taken.
    pub proposed_user: String,
    /// The memberships the provider's claims give now, by org, with the rule that gave
    /// each.
    pub granted: BTreeMap<String, Granted>,
}

/// What a sign-in did.
#[derive(Debug, Clone, PartialEq)]
pub struct SignedIn {
    pub user: UserRecord,
    /// Whether this sign-in created the user.
    pub created: bool,
    /// The memberships it added, changed or removed.
    pub changes: Vec<MembershipChange>,
}

/// A member of an org, and where the membership came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRecord {
    pub user: String,
    pub role: Role,
    pub source: MembershipSource,
    /// For a provider's: the rule that gave it.
    pub source_detail: Option<String>,
}
