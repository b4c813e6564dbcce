//! `bosun whoami`: the user, token and org roles the server sees for our token.

use bosun_api::Whoami;

use super::Ctx;
use crate::output::{yes_no, Fields};

pub async fn run(ctx: &Ctx) -> anyhow::Result<()> {
    let value = ctx.client.get(&["whoami"], &[]).await?;
    ctx.show(value, |w: Whoami| {
        Fields::new()
            .add("user", w.user)
            .add("server admin", yes_no(w.server_admin))
            .add("token", w.token_id)
            .lines(
                "orgs",
                w.orgs
                    .into_iter()
                    .map(|o| format!("{} ({})", o.org, o.role))
                    .collect(),
            )
            .render()
    })
}
