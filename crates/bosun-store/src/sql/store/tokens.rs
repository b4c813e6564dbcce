//! [`TokenStore`] for both backends: each method delegates to `sql/tokens.rs`.

use super::super::*;

#[async_trait]
impl TokenStore for db::Store {
    async fn create_token(&self, token: &NewToken, audit: Option<&Audit>) -> Result<TokenRecord> {
        let (token, audit) = (token.clone(), audit.cloned());
        self.write(move |tx| tokens::create(tx, &token, audit.as_ref()))
            .await
    }

    async fn token_by_hash(&self, secret_hash: &str) -> Result<Option<TokenRecord>> {
        let hash = secret_hash.to_string();
        self.read(move |c| tokens::by_hash(c, &hash)).await
    }

    async fn token_grant(&self, secret_hash: &str) -> Result<Option<TokenGrant>> {
        let hash = secret_hash.to_string();
        self.read(move |c| tokens::grant(c, &hash)).await
    }

    async fn get_token(&self, id: &str) -> Result<Option<TokenRecord>> {
        let id = id.to_string();
        self.read(move |c| tokens::get(c, &id)).await
    }

    async fn list_tokens(&self, filter: &TokenFilter) -> Result<Vec<TokenRecord>> {
        let filter = filter.clone();
        self.read(move |c| tokens::list(c, &filter)).await
    }

    async fn run_is_active(&self, run: &str) -> Result<bool> {
        let run = run.to_string();
        self.read(move |c| tokens::run_is_active(c, &run)).await
    }

    async fn revoke_token(&self, id: &str, audit: Option<&Audit>) -> Result<bool> {
        let (id, audit) = (id.to_string(), audit.cloned());
        self.write(move |tx| tokens::revoke(tx, &id, audit.as_ref()))
            .await
    }

    async fn revoke_run_tokens(&self, run: &str) -> Result<()> {
        let id = run.to_string();
        self.write(move |tx| tokens::revoke_run_tokens(tx, &id))
            .await
    }
}
