//! The `impl Store`, one source compiled into both backends, one file per domain
//! (`store/<domain>.rs` implements `crate::store`'s trait of that domain): each method hands its
//! arguments to its domain's function (`sql/<domain>.rs`) inside the backend's `read` (one
//! read snapshot) or `write` (one write transaction), and does nothing else but the few
//! calls that take more than one: a cheap read before leasing, retention's batches. What
//! truly differs between the backends lives as named hooks in each backend's `db` module:
//! `close`, `publish`, `claim_lease` (PostgreSQL's extra `SKIP LOCKED` claim when leasing
//! a run), `snapshot` (one consistent read for `/metrics`) and `GREATEST` (SQLite's scalar
//! `MAX` versus PostgreSQL's `GREATEST`).

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
