//! Bosun's wire format: the JSON request and response bodies of the HTTP API.
//!
//! Only these types are serialized on the wire. Requests deny unknown fields so a typo is
//! an error, not a silently ignored setting. Domain types live in `bosun-core`.
//!
//! One module per domain; every type is re-exported here, so `bosun_api::Stack` and the
//! like are the paths to use.

use serde::{Deserialize, Deserializer};

mod approvals;
mod audit;
mod drift;
mod errors;
mod health;
mod identity;
mod notify;
mod outputs;
mod paging;
mod plan_resources;
mod plan_runs;
mod plan_schedules;
mod policies;
mod runners;
mod runs;
mod secrets;
mod stacks;
mod state;
mod tenancy;
mod tokens;
mod vcs;

pub use approvals::*;
pub use audit::*;
pub use drift::*;
pub use errors::*;
pub use health::*;
pub use identity::*;
pub use notify::*;
pub use outputs::*;
pub use paging::*;
pub use plan_resources::*;
pub use plan_runs::*;
pub use plan_schedules::*;
pub use policies::*;
pub use runners::*;
pub use runs::*;
pub use secrets::*;
pub use stacks::*;
pub use state::*;
pub use tenancy::*;
pub use tokens::*;
pub use vcs::*;

/// Tells "absent" (outer `None`, via `default`) from "null" (`Some(None)`).
fn nullable<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}
