//! `bosun org`: listing, creating and showing orgs, and managing their members' roles.

use bosun_api::{Member, MemberPut, Org, OrgCreate};
use clap::Subcommand;

use super::Ctx;
use crate::output::{timestamp, Fields, Table};

#[derive(Subcommand)]
pub enum OrgCommand {
    /// List the orgs you belong to.
    List,
    /// Create an org (server administrators only); you become its first admin.
    Create {
        /// The org's id (a slug; it never changes).
        id: String,
        /// Display name [default: the id].
        #[arg(long)]
        name: Option<String>,
    },
    /// Show an org [default: --org].
    Show {
        /// The org's id [default: --org].
        id: Option<String>,
    },
    /// List the members of --org and their roles.
    Members,
    /// Add a user to --org, or change their role.
    SetMember {
        /// The user's id.
        user: String,
        /// viewer, operator or admin.
        #[arg(long)]
        role: String,
    },
    /// Remove a user from --org.
    RemoveMember {
        /// The user's id.
        user: String,
    },
}

fn org_fields(o: Org) -> String {
    Fields::new()
        .add("id", o.id)
        .add("name", o.name)
        .add("created", timestamp(&o.created_at))
        .render()
}

pub async fn run(ctx: &Ctx, cmd: OrgCommand) -> anyhow::Result<()> {
    let org = ctx.org.as_str();
    match cmd {
        OrgCommand::List => {
            super::list_all(ctx, &["orgs"], &[], "orgs", |orgs: Vec<Org>| {
                let mut t = Table::new(&["ID", "NAME", "CREATED"]);
                for o in orgs {
                    t.row(vec![o.id, o.name, timestamp(&o.created_at)]);
                }
                t.render()
            })
            .await
        }
        OrgCommand::Create { id, name } => {
            let value = ctx.client.post(&["orgs"], &OrgCreate { id, name }).await?;
            ctx.show(value, org_fields)
        }
        OrgCommand::Show { id } => {
            let id = id.as_deref().unwrap_or(org);
            let value = ctx.client.get(&["orgs", id], &[]).await?;
            ctx.show(value, org_fields)
        }
        OrgCommand::Members => {
            let path = ["orgs", org, "members"];
            super::list_all(ctx, &path, &[], "members", |members: Vec<Member>| {
                let mut t = Table::new(&["USER", "ROLE"]);
                for m in members {
                    t.row(vec![m.user, m.role]);
                }
                t.render()
            })
            .await
        }
        OrgCommand::SetMember { user, role } => {
            let value = ctx
                .client
                .put(&["orgs", org, "members", &user], &MemberPut { role })
                .await?;
            ctx.show(value, |m: Member| {
                format!("{} is now {} in org {org}.\n", m.user, m.role)
            })
        }
        OrgCommand::RemoveMember { user } => {
            ctx.client.delete(&["orgs", org, "members", &user]).await?;
            ctx.done(&format!("Removed {user} from org {org}."))
        }
    }
}
