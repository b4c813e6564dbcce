//! What plans run against, over the API: hosts, environments with their
//! approval grants, plan files (parsed and linted at upload, stored as written), and
//! inventory imports. Members read; admins change.
//!
//! A plan upload refuses what cannot run — a file that does not parse (naming file, line
//! and column) — and answers lint findings against the org's hosts and environments as
//! `warnings`. Its `secret://` references resolve in the org's own secrets when a run is
//! leased (`super::secrets`), so an upload reveals nothing about other orgs.

use bosun_core::authz::Access;
use bosun_core::Role;

use crate::route::{endpoint, route, Endpoint, Route};

mod environments;
mod hosts;
mod import;
mod plans;

pub use environments::*;
pub use hosts::*;
pub use import::*;
pub use plans::*;

/// Served by [`list_plans`].
pub const LIST_PLANS: Endpoint = endpoint!(Access::Org(Role::Viewer), list_plans);

/// Served by [`show_plan`].
pub const SHOW_PLAN: Endpoint = endpoint!(Access::Org(Role::Viewer), show_plan);

pub fn routes() -> Vec<Route> {
    let viewer = Access::Org(Role::Viewer);
    let admin = Access::Org(Role::Admin);
    vec![
        route!(viewer, list_hosts),
        route!(admin, create_host),
        route!(viewer, show_host),
        route!(admin, update_host),
        route!(admin, delete_host),
        route!(viewer, list_environments),
        route!(admin, create_environment),
        route!(viewer, show_environment),
        route!(admin, update_environment),
        route!(admin, delete_environment),
        route!(admin, grant),
        route!(admin, revoke),
        LIST_PLANS.route(),
        route!(admin, upload_plan),
        route!(viewer, lint_plan),
        SHOW_PLAN.route(),
        route!(admin, delete_plan),
        route!(admin, import_inventory),
    ]
}
