//! `bosun session`: listing console sessions (yours, or with --user anyone's for a server
//! administrator), ending one, and ending all of a person's at once.

use bosun_api::{Session, SessionsEnded};
use clap::Subcommand;

use super::Ctx;
use crate::output::{opt_timestamp, timestamp, Table};

#[derive(Subcommand)]
pub enum SessionCommand {
    /// List console sessions, newest first: open ones, and ended ones with why.
    List {
        /// Another user's sessions (server administrators only).
        #[arg(long)]
        user: Option<String>,
    },
    /// End a console session: its browser must sign in again.
    Revoke {
        /// The session's id (`ses-…`, see `bosun session list`).
        id: String,
    },
    /// End every open session of yours (sign out everywhere) or of --user: their browsers
    /// must sign in again and their `bosun login` tokens are revoked.
    RevokeAll {
        /// Another user's sessions (server administrators only).
        #[arg(long)]
        user: Option<String>,
    },
}

fn how(s: &Session) -> String {
    match (&s.provider, &s.token_id) {
        (Some(p), _) => format!("provider {p}"),
        (None, Some(t)) => format!("token {t}"),
        _ => s.method.clone(),
    }
}

fn status(s: &Session) -> String {
    match (&s.ended_at, &s.ended_reason) {
        (Some(_), Some(why)) => format!("ended: {why}"),
        (Some(_), None) => "ended".into(),
        _ => "open".into(),
    }
}

pub async fn run(ctx: &Ctx, cmd: SessionCommand) -> anyhow::Result<()> {
    match cmd {
        SessionCommand::List { user } => {
            let filters: Vec<(&str, String)> = user.into_iter().map(|u| ("user", u)).collect();
            super::list_all(
                ctx,
                &["sessions"],
                &filters,
                "sessions",
                |sessions: Vec<Session>| {
                    let mut t = Table::new(&[
                        "ID",
                        "USER",
                        "SIGNED IN WITH",
                        "CREATED",
                        "LAST SEEN",
                        "EXPIRES",
                        "STATUS",
                    ]);
                    for s in sessions {
                        t.row(vec![
                            s.id.clone(),
                            s.user.clone(),
                            how(&s),
                            timestamp(&s.created_at),
                            timestamp(&s.last_seen_at),
                            opt_timestamp(&Some(s.expires_at)),
                            status(&s),
                        ]);
                    }
                    t.render()
                },
            )
            .await
        }
        SessionCommand::Revoke { id } => {
            let value = ctx.client.delete(&["sessions", &id]).await?;
            ctx.show(value, |s: Session| {
                format!("Ended session {} of {}.\n", s.id, s.user)
            })
        }
        SessionCommand::RevokeAll { user } => {
            let query: Vec<(&str, String)> = user.into_iter().map(|u| ("user", u)).collect();
            let value = ctx
                .client
                .request::<()>(reqwest::Method::DELETE, &["sessions"], &query, None)
                .await?;
            ctx.show(value, |e: SessionsEnded| {
                format!("Ended {} open session(s) of {}.\n", e.ended, e.user)
            })
        }
    }
}
