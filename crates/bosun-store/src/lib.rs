//! Bosun's persistence: the [`Store`] trait every backend implements, its records and
//! errors, the SQLite and PostgreSQL backends, and the conformance suite every backend must pass.
//!
//! Every state-changing method takes the [`Audit`] entry describing it and writes both in
//! one transaction: nothing changes without its audit record.

mod availability;
/// The conformance suite, for backends' tests only: behind the `testsuite` feature, which
/// only test builds turn on (`[dev-dependencies]`), so no production binary carries it.
#[cfg(feature = "testsuite")]
#[doc(hidden)]
pub mod conformance;
mod log_blocks;
mod postgres;
/// The statements the store runs, recorded for the query-plan guard: test builds only.
#[cfg(feature = "testsuite")]
#[doc(hidden)]
pub mod query_log;
mod records;
pub mod signal;
mod sqlite;
mod store;

pub use postgres::PostgresStore;
pub use records::*;
pub use signal::Signal;
pub use sqlite::SqliteStore;
pub use store::*;

/// Everything that can go wrong in a store call.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0} already exists")]
    AlreadyExists(String),
    /// Saving would close a cycle: the path along the edges, each one's changes starting
    /// runs of the next, back to where it started.
    #[error("dependency cycle: {} (each starts runs of the next)", .0.join(" → "))]
    DependencyCycle(Vec<String>),
    /// An edge names a stack the org does not have; `field` is what declared it.
    #[error("upstream stack {stack:?} does not exist in this org")]
    UnknownUpstream { field: &'static str, stack: String },
    /// Stacks depend on it, or plans are fed by it (`app`, `plan deploy`).
    #[error("stack {stack:?} is a dependency of {}: remove those dependencies (depends_on, on_stack_change) first", .dependents.join(", "))]
    HasDependents {
        stack: String,
        dependents: Vec<String>,
    },
    #[error("the database schema is version {found}, newer than this binary knows ({known}); upgrade bosun")]
    SchemaTooNew { found: i64, known: i64 },
    #[error("stored data is invalid: {0}")]
    Corrupt(String),
    #[error("{0}")]
    StateRefused(bosun_core::state::WriteRefusal),
    #[error("the state is locked by {} (lock {})", .0.who, .0.id)]
    StateLocked(Box<bosun_core::state::Lock>),
    #[error("stack {stack:?} has open runs ({}): cancel or finish them first", .runs.join(", "))]
    HasOpenRuns { stack: String, runs: Vec<String> },
    #[error("stack {stack:?} has {versions} state version(s); deleting it deletes them too — confirm with delete_state")]
    HasState { stack: String, versions: i64 },
    /// A runner's call about a lease it no longer holds.
    #[error("run {run} is no longer leased with fencing number {fencing}")]
    Fenced { run: String, fencing: i64 },
    #[error("{0}")]
    InvalidTransition(#[from] bosun_core::run::InvalidTransition),
    #[error("environment {environment:?} is used by hosts {}: move them to another environment or delete them first", .hosts.join(", "))]
    EnvironmentInUse {
        environment: String,
        hosts: Vec<String>,
    },
    #[error("environment {0:?} does not exist in this org")]
    UnknownEnvironment(String),
    /// Deleting a host other hosts are reached through (their `proxy_jump`), or making
    /// it a `local` host: `hosts` are those, sorted.
    #[error("host {host:?} is the bastion (proxy_jump) of hosts {}: point their proxy_jump elsewhere or delete them first", .hosts.join(", "))]
    HostInUse { host: String, hosts: Vec<String> },
    /// A host's `proxy_jump` that cannot be: a bastion the org does not have, a `local`
    /// one, or a chain that comes back to a host it passed (`why` says which).
    #[error("host {host:?}: proxy_jump {bastion:?}: {why}")]
    InvalidBastion {
        host: String,
        bastion: String,
        why: String,
    },
    /// The plan-run concurrency guard: the overlapping hosts, sorted, and the runs
    /// holding them (`(id, state)`, oldest first).
    #[error("{}", bosun_core::plan_run::guard_message(.hosts, .held_by))]
    RunInProgress {
        hosts: Vec<String>,
        held_by: Vec<(String, String)>,
    },
    #[error("{0}")]
    InvalidPlanTransition(#[from] bosun_core::plan_run::InvalidPlanTransition),
    /// A change through the API to a schedule the plan's file sets.
    #[error("the schedule of plan {plan:?} is set by its plan file (`schedule:`): change the file and upload it again")]
    ScheduleFromFile { plan: String },
    /// An approval asked of a run that does not wait for one.
    #[error("{why}")]
    NotAwaitingApproval { subject: String, why: String },
    /// The database is not there or cannot write right now — PostgreSQL down,
    /// restarting or read-only, SQLite's disk full or read-only — said in plain words. The
    /// same call may succeed once it is back (the server answers 503 with `Retry-After`).
    #[error("{0}")]
    Unavailable(String),
    #[error("database error: {0}")]
    Backend(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
