//! The values the store takes and returns, one module per domain; every one is
//! re-exported here and at the crate root.

mod approvals;
mod audit;
mod cursor;
mod drift;
mod feedback;
mod identity;
mod metrics;
mod notify;
mod plan_resources;
mod plan_runs;
mod policies;
mod runners;
mod runs;
mod secrets;
mod sign_in;
mod stacks;
mod state;
mod tokens;
mod vcs;

pub use approvals::*;
pub use audit::*;
pub use cursor::*;
pub use drift::*;
pub use feedback::*;
pub use identity::*;
pub use metrics::*;
pub use notify::*;
pub use plan_resources::*;
pub use plan_runs::*;
pub use policies::*;
pub use runners::*;
pub use runs::*;
pub use secrets::*;
pub use sign_in::*;
pub use stacks::*;
pub use state::*;
pub use tokens::*;
pub use vcs::*;
