//! Notifications: per-org targets (a generic webhook, JSON signed with HMAC-SHA256, and a
//! Slack-compatible incoming webhook) with rules on event, run kind and run state.
//!
//! Events come from the store's outbox: a run ending, a late state write and an old lock
//! are written in the same transaction as their cause, fanned out there to one delivery
//! per matching target (`bosun_store::NotificationRule`). `deliver.rs` is the duty that
//! sends due deliveries, retries with backoff, records every attempt and prunes settled
//! history older than the retention; `api.rs` manages
//! targets, shows the delivery log and sends test events.

pub mod api;
pub mod counters;
pub mod deliver;

use bosun_core::authz::Access;
use bosun_core::Role;

use crate::route::Route;

pub use counters::Counters;

/// The target kinds.
pub const KINDS: [&str; 2] = ["webhook", "slack"];

pub fn routes() -> Vec<Route> {
    vec![
        Route::get(
            "/orgs/{org}/notifications/targets",
            Access::Org(Role::Viewer),
            api::list,
        ),
        Route::post(
            "/orgs/{org}/notifications/targets",
            Access::Org(Role::Admin),
            api::create,
        ),
        Route::get(
            "/orgs/{org}/notifications/targets/{id}",
            Access::Org(Role::Viewer),
            api::show,
        ),
        Route::patch(
            "/orgs/{org}/notifications/targets/{id}",
            Access::Org(Role::Admin),
            api::update,
        ),
        Route::delete(
            "/orgs/{org}/notifications/targets/{id}",
            Access::Org(Role::Admin),
            api::delete,
        ),
        Route::get(
            "/orgs/{org}/notifications/targets/{id}/deliveries",
            Access::Org(Role::Viewer),
            api::deliveries,
        ),
        Route::post(
            "/orgs/{org}/notifications/targets/{id}/test",
            Access::Org(Role::Admin),
            api::test,
        ),
    ]
}
