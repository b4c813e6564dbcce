//! The application state every handler, console page and duty reaches: the store, the
//! configuration and the process's shared parts.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use bosun_store::Store;

use crate::config::ServerConfig;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub config: Arc<ServerConfig>,
    /// Cleared when shutdown begins, so `/readyz` turns away new traffic.
    pub ready: Arc<AtomicBool>,
    /// Woken when a run may have become dispatchable, so waiting leases look again: by
    /// [`AppState::wake_dispatch`] here, and by `forward_signals` when another replica
    /// publishes `Signal::Dispatch`.
    pub dispatch: Arc<tokio::sync::Notify>,
    /// Set when shutdown begins, so background duties and long polls stop.
    pub stopping: Arc<tokio::sync::watch::Sender<bool>>,
    pub duties: Arc<crate::duties::status::DutyStatus>,
    /// The GitHub App client, the repository mirrors and webhook counters.
    pub vcs: Arc<crate::vcs::shared::Vcs>,
    /// Seals secrets and signing keys at rest.
    pub secrets_key: Arc<crate::secrets::seal::SecretsKey>,
    /// The OIDC issuer's shared state.
    pub issuer: Arc<crate::identity::issuer::Issuer>,
    /// This process's notification delivery counters.
    pub notifications: Arc<crate::notify::counters::Counters>,
    /// This process's retention counters.
    pub retention: Arc<crate::retention::counters::Counters>,
    /// What runners reported to this process (the egress refusals), for `/metrics`.
    pub runner_counters: Arc<crate::service::runners::Counters>,
    /// This replica's id: the holder of its duty leases (`duties::holds_duty`) and the
    /// owner of its embedded runners (`runners::embedded_runner_name`).
    pub replica: Arc<str>,
    /// The secret values of the leases this replica knows, masked in their log chunks.
    pub lease_masks: Arc<crate::secrets::mask::LeaseMasks>,
    /// The identity providers people sign in with.
    pub sign_in: Arc<crate::sign_in::Providers>,
}

impl AppState {
    /// A run may have become dispatchable: wakes this replica's waiting leases and
    /// publishes `Signal::Dispatch` so every other replica's wake too.
    pub fn wake_dispatch(&self) {
        self.dispatch.notify_waiters();
        self.store.publish(bosun_store::Signal::Dispatch);
    }
}
