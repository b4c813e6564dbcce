//! The persistence contract: [`Store`], the sum of every domain's part, each declared in
//! this module's file of that domain.

mod approvals;
mod audit;
mod database;
mod drift;
mod duties;
mod feedback;
mod identity;
mod metrics;
mod notify;
mod plan_resources;
mod plan_runs;
mod policies;
mod retention;
mod runners;
mod runs;
mod secrets;
mod sign_in;
mod signals;
mod stacks;
mod state;
mod tokens;
mod vcs;

pub use approvals::*;
pub use audit::*;
pub use database::*;
pub use drift::*;
pub use duties::*;
pub use feedback::*;
pub use identity::*;
pub use metrics::*;
pub use notify::*;
pub use plan_resources::*;
pub use plan_runs::*;
pub use policies::*;
pub use retention::*;
pub use runners::*;
pub use runs::*;
pub use secrets::*;
pub use sign_in::*;
pub use signals::*;
pub use stacks::*;
pub use state::*;
pub use tokens::*;
pub use vcs::*;

/// The persistence interface. Implementations are cheap to share (`Arc<dyn Store>`).
///
/// Each domain's methods are declared by its own trait ([`RunStore`], [`StateStore`], …);
/// `Store` is all of them, implemented by every type that implements each.
pub trait Store:
    DatabaseStore
    + SignalStore
    + IdentityStore
    + TokenStore
    + StackStore
    + StateStore
    + RunStore
    + RunnerStore
    + VcsStore
    + SecretStore
    + MetricsStore
    + AuditStore
    + NotificationStore
    + FeedbackStore
    + DriftStore
    + PlanResourceStore
    + PlanRunStore
    + PolicyStore
    + ApprovalStore
    + DutyStore
    + RetentionStore
    + SignInStore
    + Send
    + Sync
    + 'static
{
}

impl<T> Store for T where
    T: DatabaseStore
        + SignalStore
        + IdentityStore
        + TokenStore
        + StackStore
        + StateStore
        + RunStore
        + RunnerStore
        + VcsStore
        + SecretStore
        + MetricsStore
        + AuditStore
        + NotificationStore
        + FeedbackStore
        + DriftStore
        + PlanResourceStore
        + PlanRunStore
        + PolicyStore
        + PolicyStore
        + ApprovalStore
        + DutyStore
        + RetentionStore
        + SignInStore
        + Send
        + Sync
        + 'static
{
}
