//! `bosun org`: listing, creating and showing orgs, and managing their members' roles.

use bosun_api::{Member, MemberPut, Org, OrgCreate, OrgPatch};
use bosun_core::feedback::PrFeedback;
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
    /// Change an org's settings (org admins only).
    Update {
        /// The org's id [default: --org].
        id: Option<String>,
        /// What runs of the org's `github:` stacks report on GitHub, unless a stack says
        /// otherwise: both (a check run per commit and the pull request's comment),
        /// checks, comment or none.
        #[arg(long, value_name = "FEEDBACK", value_parser = parse_pr_feedback)]
        pr_feedback: Option<String>,
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

fn parse_pr_feedback(raw: &str) -> Result<String, String> {
    raw.parse::<PrFeedback>()
        .map(|f| f.as_str().to_string())
        .map_err(|_| format!("expected both, checks, comment or none (got {raw:?})"))
}

fn org_fields(o: Org) -> String {
    Fields::new()
        .add("id", o.id)
        .add("name", o.name)
        .add("pr feedback", o.pr_feedback)
        .add("created", timestamp(&o.created_at))
        .render()
}

pub async fn run(ctx: &Ctx, cmd: OrgCommand) -> anyhow::Result<()> {
    let org = ctx.org.as_str();
    match cmd {
        OrgCommand::List => {
            super::list_all(ctx, &["orgs"], &[], "orgs", |orgs: Vec<Org>| {
                let mut t = Table::new(&["ID", "NAME", "PR FEEDBACK", "CREATED"]);
                for o in orgs {
                    t.row(vec![o.id, o.name, o.pr_feedback, timestamp(&o.created_at)]);
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
        OrgCommand::Update { id, pr_feedback } => {
            let id = id.as_deref().unwrap_or(org);
            if pr_feedback.is_none() {
                anyhow::bail!("nothing to change: name at least one setting to update (see `bosun org update --help`)");
            }
            let value = ctx
                .client
                .patch(&["orgs", id], &OrgPatch { pr_feedback })
                .await?;
            ctx.show(value, org_fields)
        }
        OrgCommand::Members => {
            let path = ["orgs", org, "members"];
            super::list_all(ctx, &path, &[], "members", |members: Vec<Member>| {
                let mut t = Table::new(&["USER", "ROLE", "SOURCE"]);
                for m in members {
                    let source = match m.source_detail {
                        Some(rule) => format!("{} ({rule})", m.source),
                        None => m.source,
                    };
                    t.row(vec![m.user, m.role, source]);
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
