//! `bosun oidc`: the run-identity issuer's signing keys (server administrators).

use bosun_api::SigningKeys;
use clap::Subcommand;

use super::Ctx;

#[derive(Subcommand)]
pub enum OidcCommand {
    /// Rotate the signing key now; the old key stays published until every token it
    /// signed has expired.
    Rotate,
}

pub async fn run(ctx: &Ctx, command: OidcCommand) -> anyhow::Result<()> {
    match command {
        OidcCommand::Rotate => {
            let reply = ctx
                .client
                .post(&["oidc", "rotate"], &serde_json::json!({}))
                .await?;
            ctx.show(reply, |k: SigningKeys| {
                format!(
                    "active signing key: {}\npublished: {}\n",
                    k.active,
                    k.published.join(", ")
                )
            })
        }
    }
}
