//! [`SignInStore`] for both backends: each method delegates to `sql/sign_in.rs`.

use super::super::*;

#[async_trait]
impl SignInStore for db::Store {
    async fn begin_sign_in(&self, attempt: &SignInAttempt) -> Result<()> {
        let attempt = attempt.clone();
        self.write(move |tx| sign_in::begin(tx, &attempt)).await
    }

    async fn take_sign_in(&self, state_hash: &str) -> Result<Option<SignInAttempt>> {
        let state_hash = state_hash.to_string();
        self.write(move |tx| sign_in::take(tx, &state_hash)).await
    }

    async fn sign_in(
        &self,
        who: &ProviderSignIn,
        session: &NewSession,
        token: Option<&NewToken>,
        audit: &Audit,
    ) -> Result<(SignedIn, SessionRecord)> {
        let (who, session, audit) = (who.clone(), session.clone(), audit.clone());
        let token = token.cloned();
        self.write(move |tx| {
            let signed = sign_in::sign_in(tx, &who)?;
            if let Some(t) = &token {
                let t = NewToken {
                    user: Some(signed.user.id.clone()),
                    ..t.clone()
                };
                tokens::create(tx, &t, None)?;
            }
            let session = NewSession {
                user: signed.user.id.clone(),
                subject: Some(who.subject.clone()),
                ..session
            };
            let audit = Audit {
                target: format!("user:{}", signed.user.id),
                ..audit
            };
            let opened = sign_in::create_session(tx, &session, &audit)?;
            Ok((signed, opened))
        })
        .await
    }

    async fn session_of_token(&self, token_id: &str) -> Result<Option<SessionGrant>> {
        let token_id = token_id.to_string();
        self.read(move |c| sign_in::session_of_token(c, &token_id))
            .await
    }

    async fn replace_session_token(
        &self,
        session: &str,
        token: &NewToken,
        audit: &Audit,
    ) -> Result<TokenRecord> {
        let (session, token, audit) = (session.to_string(), token.clone(), audit.clone());
        self.write(move |tx| sign_in::replace_session_token(tx, &session, &token, &audit))
            .await
    }

    async fn open_token_session(
        &self,
        session: &NewSession,
        audit: &Audit,
    ) -> Result<SessionRecord> {
        let (session, audit) = (session.clone(), audit.clone());
        self.write(move |tx| sign_in::create_session(tx, &session, &audit))
            .await
    }

    async fn open_session(&self, secret_hash: &str) -> Result<Option<SessionGrant>> {
        let secret_hash = secret_hash.to_string();
        self.read(move |c| sign_in::open_session(c, &secret_hash))
            .await
    }

    async fn touch_session(&self, id: &str, at: DateTime<Utc>) -> Result<()> {
        let id = id.to_string();
        self.write(move |tx| sign_in::touch_session(tx, &id, at))
            .await
    }

    async fn refresh_session(
        &self,
        id: &str,
        who: &ProviderSignIn,
        id_token: Option<&str>,
        refresh: Option<&Sealed>,
    ) -> Result<Vec<bosun_core::sign_in::MembershipChange>> {
        let (id, who) = (id.to_string(), who.clone());
        let (id_token, refresh) = (id_token.map(str::to_string), refresh.cloned());
        self.write(move |tx| {
            sign_in::refresh_session(tx, &id, &who, id_token.as_deref(), refresh.as_ref())
        })
        .await
    }

    async fn end_session(&self, id: &str, reason: &str, audit: Option<&Audit>) -> Result<bool> {
        let (id, reason, audit) = (id.to_string(), reason.to_string(), audit.cloned());
        self.write(move |tx| sign_in::end_session(tx, &id, &reason, audit.as_ref()))
            .await
    }

    async fn get_session(&self, id: &str) -> Result<Option<SessionRecord>> {
        let id = id.to_string();
        self.read(move |c| sign_in::get_session(c, &id)).await
    }

    async fn list_sessions(&self, user: &str, limit: u32) -> Result<Vec<SessionRecord>> {
        let user = user.to_string();
        self.read(move |c| sign_in::list_sessions(c, &user, limit))
            .await
    }

    async fn end_user_sessions(&self, user: &str, reason: &str, audit: &Audit) -> Result<u64> {
        let (user, reason, audit) = (user.to_string(), reason.to_string(), audit.clone());
        self.write(move |tx| sign_in::end_user_sessions(tx, &user, &reason, &audit))
            .await
    }

    async fn link_identity(&self, link: &IdentityLink, audit: &Audit) -> Result<IdentityRecord> {
        let (link, audit) = (link.clone(), audit.clone());
        self.write(move |tx| sign_in::link_identity(tx, &link, &audit))
            .await
    }

    async fn list_identities(&self, user: &str) -> Result<Vec<IdentityRecord>> {
        let user = user.to_string();
        self.read(move |c| sign_in::list_identities(c, &user)).await
    }

    async fn unlink_identity(
        &self,
        issuer: &str,
        subject: &str,
        audit: &Audit,
    ) -> Result<Option<IdentityRecord>> {
        let (issuer, subject, audit) = (issuer.to_string(), subject.to_string(), audit.clone());
        self.write(move |tx| sign_in::unlink_identity(tx, &issuer, &subject, &audit))
            .await
    }
}
