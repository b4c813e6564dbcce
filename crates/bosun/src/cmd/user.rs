//! `bosun user`: creating users, and linking a user to a person's identity at a
//! configured identity provider (server administrators only), and listing a user's
//! identities.

use bosun_api::{SignInIdentity, SignInIdentityLink, User, UserCreate};
use clap::Subcommand;

use super::Ctx;
use crate::output::{opt_timestamp, timestamp, yes_no, Fields, Table};

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
    /// Link a person's identity at an identity provider to an existing user, so their
    /// first sign-in is that user (not a new one).
    Link {
        /// The user's id.
        user: String,
        /// The identity provider's id on the server.
        #[arg(long)]
        provider: String,
        /// The person's subject (`sub`) at the provider.
        #[arg(long)]
        subject: String,
    },
    /// Unlink an identity: the sessions it signed in end, and the person's next sign-in
    /// makes a new user.
    Unlink {
        /// The identity provider's id on the server.
        #[arg(long)]
        provider: String,
        /// The person's subject (`sub`) at the provider.
        #[arg(long)]
        subject: String,
    },
    /// List a user's identities at identity providers (yours, or with --user anyone's for
    /// a server administrator).
    Identities {
        /// Another user's identities (server administrators only).
        #[arg(long)]
        user: Option<String>,
    },
}

fn identity_fields(i: SignInIdentity) -> String {
    Fields::new()
        .add("user", i.user)
        .add("provider", i.provider)
        .add("issuer", i.issuer)
        .add("subject", i.subject)
        .add("last sign-in", opt_timestamp(&i.last_sign_in_at))
        .render()
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
        UserCommand::Link {
            user,
            provider,
            subject,
        } => {
            let body = SignInIdentityLink {
                user,
                provider,
                subject,
            };
            let value = ctx.client.post(&["identities"], &body).await?;
            ctx.show(value, identity_fields)
        }
        UserCommand::Unlink { provider, subject } => {
            let value = ctx
                .client
                .delete(&["identities", &provider, &subject])
                .await?;
            ctx.show(value, |i: SignInIdentity| {
                format!(
                    "Unlinked {} at {} from user {}.\n",
                    i.subject, i.provider, i.user
                )
            })
        }
        UserCommand::Identities { user } => {
            let filters: Vec<(&str, String)> = user.into_iter().map(|u| ("user", u)).collect();
            super::list_all(
                ctx,
                &["identities"],
                &filters,
                "identities",
                |identities: Vec<SignInIdentity>| {
                    let mut t =
                        Table::new(&["USER", "PROVIDER", "SUBJECT", "EMAIL", "LAST SIGN-IN"]);
                    for i in identities {
                        t.row(vec![
                            i.user,
                            i.provider,
                            i.subject,
                            i.email.unwrap_or_default(),
                            opt_timestamp(&i.last_sign_in_at),
                        ]);
                    }
                    t.render()
                },
            )
            .await
        }
    }
}
