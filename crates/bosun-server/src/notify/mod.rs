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
pub mod deliver;

use std::sync::atomic::AtomicU64;

use bosun_core::authz::Access;
use bosun_core::Role;

use crate::routes::Route;

/// The target kinds.
pub const KINDS: [&str; 2] = ["webhook", "slack"];

/// This process's delivery counters, for `/metrics`.
#[derive(Default)]
pub struct Counters {
    pub delivered: AtomicU64,
    /// Failed attempts that will be retried.
    pub retried: AtomicU64,
    /// Failed last attempts: the delivery was given up.
    pub gave_up: AtomicU64,
    /// Failed attempts (retried or not), by target kind.
    pub failures_webhook: AtomicU64,
    pub failures_slack: AtomicU64,
    /// Deliveries and events deleted by retention.
    pub pruned_deliveries: AtomicU64,
    pub pruned_events: AtomicU64,
}

impl Counters {
    pub fn failures(&self, kind: &str) -> &AtomicU64 {
        if kind == "slack" {
            &self.failures_slack
        } else {
            &self.failures_webhook
        }
    }
}

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
