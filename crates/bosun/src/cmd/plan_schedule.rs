//! `bosun plan schedule NAME`: a stored plan's cron schedule — set it (`--cron`, an IANA
//! `--timezone`, `--input NAME=VALUE` for every scheduled run), clear it (`--clear`), or
//! with neither show it with its next run time and the last fire's outcome.

use bosun_api::{PlanScheduleSet, PlanScheduleView};
use clap::Args;
use serde_json::Value;

use super::Ctx;
use crate::output::{opt_timestamp, timestamp, Fields};

#[derive(Args)]
pub struct ScheduleArgs {
    /// The stored plan.
    name: String,
    /// Five-field cron (`0 2 * * *`) or a macro (`@daily`); sets the schedule.
    #[arg(long, conflicts_with = "clear")]
    cron: Option<String>,
    /// The IANA time zone the cron is read in (default UTC).
    #[arg(long, requires = "cron")]
    timezone: Option<String>,
    /// An input of every scheduled run, NAME=VALUE (repeatable; VALUE as JSON when it
    /// parses, else a string).
    #[arg(long = "input", value_name = "NAME=VALUE", value_parser = super::env::parse_var, requires = "cron")]
    inputs: Vec<(String, Value)>,
    /// Remove the schedule.
    #[arg(long)]
    clear: bool,
}

fn text(s: &PlanScheduleView) -> String {
    let mut f = Fields::new();
    f.add("plan", s.plan.clone())
        .add("cron", s.cron.clone())
        .add("timezone", s.timezone.clone())
        .add(
            "next run",
            match &s.next_run_at {
                Some(t) => timestamp(t),
                None => "(armed on the scheduler's next pass)".into(),
            },
        )
        .add("last fire", opt_timestamp(&s.last_fire_at))
        .add("last run", s.last_run.clone().unwrap_or_else(|| "-".into()))
        .add(
            "last note",
            s.last_note.clone().unwrap_or_else(|| "-".into()),
        )
        .add("updated by", s.updated_by.clone())
        .add(
            "set by",
            if s.from_file {
                "the plan file (change it there)"
            } else {
                "the API"
            }
            .to_string(),
        );
    f.lines(
        "inputs",
        s.inputs.iter().map(|(k, v)| format!("{k}={v}")).collect(),
    );
    f.render()
}

pub async fn run(ctx: &Ctx, args: ScheduleArgs) -> anyhow::Result<()> {
    let org = ctx.org.as_str();
    let path = ["orgs", org, "plans", args.name.as_str(), "schedule"];
    if args.clear {
        ctx.client.delete(&path).await?;
        return ctx.done(&format!("cleared the schedule of plan {}", args.name));
    }
    let reply = match args.cron {
        Some(cron) => {
            let body = PlanScheduleSet {
                cron,
                timezone: args.timezone,
                inputs: args.inputs.into_iter().collect(),
            };
            ctx.client.put(&path, &body).await?
        }
        None => ctx.client.get(&path, &[]).await?,
    };
    ctx.show(reply, |s: PlanScheduleView| text(&s))
}
