//! The tokens part of the store contract: [`TokenStore`], one of the traits [`Store`](crate::Store)
//! is made of.

use async_trait::async_trait;

use crate::{Audit, NewToken, Result, TokenFilter, TokenGrant, TokenRecord};

/// API tokens: created, found by the hash of their secret, listed and revoked.
#[async_trait]
pub trait TokenStore: Send + Sync {
    /// `audit` is `None` only for tokens the server mints for itself (run tokens).
    async fn create_token(&self, token: &NewToken, audit: Option<&Audit>) -> Result<TokenRecord>;
    async fn token_by_hash(&self, secret_hash: &str) -> Result<Option<TokenRecord>>;
    /// Everything needed to authenticate a presented token, in one call: the token and,
    /// for personal tokens, its user and their roles.
    async fn token_grant(&self, secret_hash: &str) -> Result<Option<TokenGrant>>;
    async fn get_token(&self, id: &str) -> Result<Option<TokenRecord>>;
    async fn list_tokens(&self, filter: &TokenFilter) -> Result<Vec<TokenRecord>>;
    /// Whether a Run still holds an active (unrevoked, unexpired) run token: Runs' tokens
    /// are revoked the moment they end.
    async fn run_is_active(&self, run: &str) -> Result<bool>;
    /// Returns false when the token was already revoked.
    async fn revoke_token(&self, id: &str, audit: Option<&Audit>) -> Result<bool>;
    /// Revokes every token of a run.
    async fn revoke_run_tokens(&self, run: &str) -> Result<()>;
}
