//! Bosun's domain: identifiers, roles, tokens, stacks and the pure rules over them.
//!
//! Nothing in this crate does I/O or knows about the wire format; the server, the store
//! and the CLI all lean on it so that a rule is written once.

pub mod approval;
pub mod authz;
pub mod cron;
pub mod drift;
pub mod feedback;
pub mod graph;
pub mod id;
pub mod integrations;
pub mod outputs;
pub mod plan_resources;
pub mod plan_run;
pub mod policy;
pub mod role;
pub mod run;
pub mod runner;
pub mod sign_in;
pub mod stack;
pub mod state;
mod string_enum;
pub mod token;
pub mod validation;
pub mod vcs;

pub use id::Slug;
pub use role::Role;
pub use validation::ValidationError;
