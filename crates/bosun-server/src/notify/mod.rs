//! Notifications: per-org targets (a generic webhook, JSON signed with HMAC-SHA256, and a
//! Slack-compatible incoming webhook) with rules on event, run kind and run state.
//!
//! Events come from the store's outbox: a run ending, a late state write and an old lock
//! are written in the same transaction as their cause, fanned out there to one delivery
//! per matching target (`bosun_store::NotificationRule`). `deliver.rs` is the duty that
//! sends due deliveries, retries with backoff, records every attempt and prunes settled
//! history older than the retention; `api.rs` serves the API over targets, the delivery
//! log and test events, whose work is `crate::service::notify`.

pub mod api;
pub mod counters;
pub mod deliver;

use bosun_core::authz::Access;
use bosun_core::Role;

use crate::route::{route, Route};

pub use counters::Counters;

pub fn routes() -> Vec<Route> {
    vec![
        route!(Access::Org(Role::Viewer), api::list),
        route!(Access::Org(Role::Admin), api::create),
        route!(Access::Org(Role::Viewer), api::show),
        route!(Access::Org(Role::Admin), api::update),
        route!(Access::Org(Role::Admin), api::delete),
        route!(Access::Org(Role::Viewer), api::deliveries),
        route!(Access::Org(Role::Admin), api::test),
    ]
}
