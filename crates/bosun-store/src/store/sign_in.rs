//! The sign-in part of the store contract: [`SignInStore`], one of the traits
//! [`Store`](crate::Store) is made of.

use async_trait::async_trait;
use bosun_core::sign_in::MembershipChange;
use chrono::{DateTime, Utc};

use crate::{
    Audit, IdentityLink, IdentityRecord, NewSession, NewToken, ProviderSignIn, Result, Sealed,
    SessionGrant, SessionRecord, SignInAttempt, SignedIn, TokenRecord,
};

/// People's sign-in: sign-ins begun at an identity provider, the identities it vouched
/// for, and console sessions.
#[async_trait]
pub trait SignInStore: Send + Sync {
    /// Keeps a sign-in begun until its callback takes it (removing some long expired).
    async fn begin_sign_in(&self, attempt: &SignInAttempt) -> Result<()>;
    /// Takes the sign-in begun with this state, once: a second take finds nothing, and
    /// so does one after its expiry.
    async fn take_sign_in(&self, state_hash: &str) -> Result<Option<SignInAttempt>>;
    /// One transaction: the user linked to the identity (created, with the identity, on
    /// a first sign-in), their provider-given memberships brought in line with
    /// `who.granted` (manual ones untouched; each change audited with its rule), and the
    /// session opened for them (`session.user` is set to that user) — for a CLI login
    /// with `token`, the personal token it holds, made for that user.
    async fn sign_in(
        &self,
        who: &ProviderSignIn,
        session: &NewSession,
        token: Option<&NewToken>,
        audit: &Audit,
    ) -> Result<(SignedIn, SessionRecord)>;
    /// The open-or-ended session a CLI login's token belongs to, with its person.
    async fn session_of_token(&self, token_id: &str) -> Result<Option<SessionGrant>>;
    /// A CLI login's new token: `token` made, the session's old one revoked and the
    /// session moved to the new one, in one transaction.
    async fn replace_session_token(
        &self,
        session: &str,
        token: &NewToken,
        audit: &Audit,
    ) -> Result<TokenRecord>;
    /// Opens a session for a personal token typed in.
    async fn open_token_session(
        &self,
        session: &NewSession,
        audit: &Audit,
    ) -> Result<SessionRecord>;
    /// The session whose cookie secret hashes to `secret_hash`, with its person (one
    /// call); `None` when unknown or its user is gone. An ended one is answered as such.
    async fn open_session(&self, secret_hash: &str) -> Result<Option<SessionGrant>>;
    /// Marks an open session seen at `at`.
    async fn touch_session(&self, id: &str, at: DateTime<Utc>) -> Result<()>;
    /// A provider session vouched for again: memberships brought in line, tokens kept.
    async fn refresh_session(
        &self,
        id: &str,
        who: &ProviderSignIn,
        id_token: Option<&str>,
        refresh: Option<&Sealed>,
    ) -> Result<Vec<MembershipChange>>;
    /// Ends an open session, saying why (audited when `audit` is given), and revokes the
    /// token a CLI login holds; false when it had ended or is unknown.
    async fn end_session(&self, id: &str, reason: &str, audit: Option<&Audit>) -> Result<bool>;
    async fn get_session(&self, id: &str) -> Result<Option<SessionRecord>>;
    /// A user's sessions, newest first, at most `limit`.
    async fn list_sessions(&self, user: &str, limit: u32) -> Result<Vec<SessionRecord>>;
    /// Ends every open session of `user`, saying why (revoking the CLI logins' tokens),
    /// in one transaction audited once; how many it ended.
    async fn end_user_sessions(&self, user: &str, reason: &str, audit: &Audit) -> Result<u64>;
    /// Links a provider's subject to an existing user ahead of its first sign-in (audited):
    /// `NotFound` for no such user, `AlreadyExists` naming the user it is linked to.
    async fn link_identity(&self, link: &IdentityLink, audit: &Audit) -> Result<IdentityRecord>;
    /// A user's identities, oldest first, at most [`MAX_IDENTITIES`].
    async fn list_identities(&self, user: &str) -> Result<Vec<IdentityRecord>>;
    /// Unlinks the identity (issuer, subject) and ends the open sessions it signed in,
    /// revoking their CLI tokens, in one transaction (audited, the target set to its
    /// user); the unlinked identity, or
    /// `None` when there was none.
    async fn unlink_identity(
        &self,
        issuer: &str,
        subject: &str,
        audit: &Audit,
    ) -> Result<Option<IdentityRecord>>;
}

/// The most identities one user's list answers.
pub const MAX_IDENTITIES: u32 = 100;
