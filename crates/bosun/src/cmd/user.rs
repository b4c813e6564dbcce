//! `bosun user`: creating users (server administrators only).

use bosun_api::{User, UserCreate};
use clap::Subcommand;

use super::Ctx;
use crate::output::{timestamp, yes_no, Fields};

#[derive(Subcommand)]
pub enum UserCommand {
    /// Create a user; then add them to orgs with `org set-member` and give them a token
    /// with `token create --user`.
    Create {
        /// The user's id (a slug).
        id: String,
        /// Make the user a server administrator (may create orgs and users).
        #[arg(long)]
        server_admin: bool,
    },
}

pub async fn run(ctx: &Ctx, cmd: UserCommand) -> anyhow::Result<()> {
    match cmd {
        UserCommand::Create { id, server_admin } => {
            let body = UserCreate { id, server_admin };
            let value = ctx.client.post(&["users"], &body).await?;
            ctx.show(value, |u: User| {
                Fields::new()
                    .add("id", u.id)
                    .add("server admin", yes_no(u.server_admin))
                    .add("created", timestamp(&u.created_at))
                    .render()
            })
        }
    }
}
