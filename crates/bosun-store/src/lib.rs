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
mod postgres;
mod records;
pub mod signal;
mod sqlite;

use std::collections::BTreeMap;

use async_trait::async_trait;
use bosun_core::stack::StackSpec;
use bosun_core::Role;

pub use postgres::PostgresStore;
pub use records::*;
pub use signal::Signal;
pub use sqlite::SqliteStore;

/// Everything that can go wrong in a store call.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0} already exists")]
    AlreadyExists(String),
    #[error("dependency cycle: {}", .0.join(" → "))]
    DependencyCycle(Vec<String>),
    #[error("upstream stack {0:?} does not exist in this org")]
    UnknownUpstream(String),
    #[error("stack {stack:?} is a dependency of {}: remove those dependencies first", .dependents.join(", "))]
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
    /// The plan-run concurrency guard: the overlapping hosts, sorted.
    #[error("{}", bosun_core::plan_run::guard_message(.hosts))]
    RunInProgress { hosts: Vec<String> },
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

/// The persistence interface. Implementations are cheap to share (`Arc<dyn Store>`).
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// The schema version the database is at.
    async fn schema_version(&self) -> Result<i64>;
    /// Checks the database answers (for `/readyz`).
    async fn ping(&self) -> Result<()>;
    /// When a call of this store last failed with [`StoreError::Unavailable`] (`None`:
    /// never, in this process). The stale sweep counts a run's silence from then at the
    /// earliest: heartbeats the store could not keep are not a runner's silence.
    fn last_unavailable(&self) -> Option<chrono::DateTime<chrono::Utc>>;
    /// Why writes fail now: the reason of the last write that failed with
    /// [`StoreError::Unavailable`], while none has committed since (`None` otherwise).
    /// A full disk still reads, so `/readyz` asks this besides [`Store::ping`].
    fn write_fault(&self) -> Option<String>;
    /// Finishes pending work and closes every connection.
    async fn close(&self);

    /// Publishes a signal to every subscriber of every store instance on this database
    /// (other replicas included): at once locally, and on PostgreSQL through `NOTIFY`.
    /// Write calls publish their own changes' signals when they commit (`Run(id)` for a
    /// run's or plan run's logs and state, `Notification` for new deliveries); callers
    /// publish what the store cannot know (`Dispatch`). Never fails: a lost signal costs
    /// only latency, since every waiter also polls.
    fn publish(&self, signal: Signal);
    /// Signals from now on, this instance's and (PostgreSQL) other instances'; a
    /// subscriber that falls behind gets [`Signal::Resync`] from [`signal::next`].
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Signal>;

    /// Seeds org `default`, an admin user and their token when the store holds no user
    /// yet. Returns false (and changes nothing) when it already has users.
    async fn bootstrap(&self, seed: &Bootstrap) -> Result<bool>;

    async fn create_org(&self, org: &NewOrg, audit: &Audit) -> Result<OrgRecord>;
    async fn get_org(&self, id: &str) -> Result<Option<OrgRecord>>;

    async fn create_user(&self, user: &NewUser, audit: &Audit) -> Result<UserRecord>;
    async fn get_user(&self, id: &str) -> Result<Option<UserRecord>>;
    /// Each org the user belongs to, with their role there.
    async fn roles_of(&self, user: &str) -> Result<BTreeMap<String, Role>>;
    /// Adds a member or changes their role.
    async fn set_member(&self, org: &str, user: &str, role: Role, audit: &Audit) -> Result<()>;
    /// Returns false when the user was not a member.
    async fn remove_member(&self, org: &str, user: &str, audit: &Audit) -> Result<bool>;
    async fn list_members(&self, org: &str) -> Result<Vec<(String, Role)>>;

    /// `audit` is `None` only for tokens the server mints for itself (run tokens).
    async fn create_token(&self, token: &NewToken, audit: Option<&Audit>) -> Result<TokenRecord>;
    async fn token_by_hash(&self, secret_hash: &str) -> Result<Option<TokenRecord>>;
    /// Everything needed to authenticate a presented token, in one call: the token and,
    /// for personal tokens, its user and their roles.
    async fn token_grant(&self, secret_hash: &str) -> Result<Option<TokenGrant>>;
    async fn get_token(&self, id: &str) -> Result<Option<TokenRecord>>;
    async fn list_tokens(&self, filter: &TokenFilter) -> Result<Vec<TokenRecord>>;
    /// Whether a Run still holds an active (unrevoked, unexpired) run token: Runs' tokens
    /// are revoked the moment they end.
    async fn run_is_active(&self, run: &str) -> Result<bool>;
    /// Returns false when the token was already revoked.
    async fn revoke_token(&self, id: &str, audit: Option<&Audit>) -> Result<bool>;

    /// Creates a stack, checking in the same transaction that its upstreams exist and
    /// that it closes no dependency cycle.
    async fn create_stack(&self, org: &str, spec: &StackSpec, audit: &Audit)
        -> Result<StackRecord>;
    async fn get_stack(&self, org: &str, id: &str) -> Result<Option<StackRecord>>;
    /// Stacks ordered by id, strictly after `after`, at most `limit`.
    async fn list_stacks(
        &self,
        org: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<StackRecord>>;
    /// The stacks of an org that depend on `stack` (its direct downstreams), by id.
    async fn downstream_stacks(&self, org: &str, stack: &str) -> Result<Vec<StackRecord>>;
    /// The latest run (newest `created_at`, then id) of each stack of an org with an id
    /// in `first..=last` that has runs: one page of a stacks list in one query.
    async fn last_runs_between(&self, org: &str, first: &str, last: &str)
        -> Result<Vec<RunRecord>>;
    /// The state locks held on stacks of an org with an id in `first..=last`, by stack.
    async fn state_locks_between(
        &self,
        org: &str,
        first: &str,
        last: &str,
    ) -> Result<Vec<(String, bosun_core::state::Lock)>>;
    /// Replaces a stack's definition (same id), with the same checks as create.
    async fn update_stack(&self, org: &str, spec: &StackSpec, audit: &Audit)
        -> Result<StackRecord>;
    /// Refuses while other stacks depend on it or runs of it are open; refuses to drop
    /// its state versions unless `delete_state`.
    async fn delete_stack(
        &self,
        org: &str,
        id: &str,
        delete_state: bool,
        audit: &Audit,
    ) -> Result<()>;

    /// The current version and lock of a stack's state (both empty when it has none).
    async fn state_head(&self, org: &str, stack: &str) -> Result<StateHead>;
    /// A version with its body; `None` for the current one.
    async fn state_version(
        &self,
        org: &str,
        stack: &str,
        version: Option<i64>,
    ) -> Result<Option<(StateVersionMeta, Vec<u8>)>>;
    /// Versions, newest first, strictly before `before`, at most `limit`.
    async fn list_state_versions(
        &self,
        org: &str,
        stack: &str,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<StateVersionMeta>>;
    /// Stores a new version in one transaction, judged by
    /// [`bosun_core::state::decide_write`] against the lock and current version held at
    /// that moment. `audit` is written with it when given (forced and late writes).
    async fn write_state(
        &self,
        org: &str,
        stack: &str,
        new: &NewStateVersion,
        audit: Option<&Audit>,
    ) -> Result<StateVersionMeta>;
    /// Takes the lock, or fails with `StateLocked` and the holder.
    async fn lock_state(
        &self,
        org: &str,
        stack: &str,
        lock: &bosun_core::state::Lock,
    ) -> Result<()>;
    /// Releases the lock as [`bosun_core::state::decide_unlock`] decides; a forced release
    /// writes `audit` (with the released lock added to its detail).
    async fn unlock_state(
        &self,
        org: &str,
        stack: &str,
        request: &bosun_core::state::UnlockRequest,
        audit: &Audit,
    ) -> Result<bosun_core::state::UnlockDecision>;

    async fn create_run(&self, run: &NewRun, audit: Option<&Audit>) -> Result<RunRecord>;
    async fn get_run(&self, id: &str) -> Result<Option<RunRecord>>;
    /// Runs of an org (or one stack), newest first, created strictly before `before`.
    async fn list_runs(
        &self,
        org: &str,
        stack: Option<&str>,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<RunRecord>>;
    async fn run_phases(&self, run: &str) -> Result<Vec<RunPhaseRecord>>;
    /// Applies an event through [`bosun_core::run::transition`] in one transaction. A
    /// run that ends releases any state lock it still holds (returned, and recorded).
    async fn run_event(&self, run: &str, input: &RunEventInput) -> Result<RunEventResult>;
    /// Requests a cancel: queued/unconfirmed runs end now; executing ones are flagged so
    /// their runner stops.
    async fn cancel_run(&self, run: &str, audit: &Audit) -> Result<RunEventResult>;
    /// Leases the oldest dispatchable run for this runner, if any: a proposed run, or the
    /// oldest open tracked run of its stack when nobody else holds the stack's lock.
    /// Queued tracked runs blocked by someone's lock record the holder.
    async fn lease_run(&self, runner: &RunnerRecord) -> Result<Option<RunRecord>>;
    /// Records a heartbeat; `Fenced` when the lease is no longer this one. Returns
    /// whether a cancel was requested.
    async fn heartbeat(&self, run: &str, fencing: i64) -> Result<bool>;
    /// Executing runs whose last heartbeat is older than `before`.
    async fn stale_runs(&self, before: chrono::DateTime<chrono::Utc>) -> Result<Vec<RunRecord>>;
    /// Runs executing a phase that started before `before` (for phase timeouts).
    async fn executing_runs(&self) -> Result<Vec<RunRecord>>;
    /// The runners holding a lease now, on a stack run or a plan run.
    async fn busy_runners(&self) -> Result<std::collections::BTreeSet<String>>;
    /// Marks the run as having written late state.
    async fn flag_late_write(&self, run: &str) -> Result<()>;
    /// Records the upstream outputs (stack, state version, output, variable) a run was
    /// given; only the first call per run counts (`false` after that).
    async fn set_run_consumed(&self, run: &str, consumed: &serde_json::Value) -> Result<bool>;
    /// Stores log chunks; a seq already stored keeps its first text.
    async fn append_logs(&self, run: &str, fencing: i64, chunks: &[(i64, String)]) -> Result<()>;
    async fn read_logs(
        &self,
        run: &str,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<(i64, String)>>;
    /// The next log seq to write (one past the highest stored).
    async fn next_log_seq(&self, run: &str) -> Result<i64>;
    /// A stack run's saved Terraform plan file.
    async fn put_run_plan(&self, run: &str, fencing: i64, body: &[u8]) -> Result<()>;
    async fn get_run_plan(&self, run: &str) -> Result<Option<Vec<u8>>>;

    async fn register_runner(&self, runner: &RunnerRecord) -> Result<RunnerRecord>;
    async fn get_runner(&self, id: &str) -> Result<Option<RunnerRecord>>;
    async fn touch_runner(&self, id: &str) -> Result<()>;
    /// Runners of an org's pools and the server's hosted runners.
    async fn list_runners(&self, org: &str) -> Result<Vec<RunnerRecord>>;
    async fn drain_runner(&self, id: &str, audit: &Audit) -> Result<bool>;
    /// Revokes every token of a run.
    async fn revoke_run_tokens(&self, run: &str) -> Result<()>;

    // ---- VCS ----

    /// Stacks of every org whose repository key (`Repository::key`) is `repository`,
    /// through an index on (repository key, branch); `branch: None` for every branch.
    async fn stacks_for_repository(
        &self,
        repository: &str,
        branch: Option<&str>,
    ) -> Result<Vec<StackRecord>>;
    /// Stacks of every org on plain git remotes (not `github:`), for the poller.
    async fn git_remote_stacks(&self) -> Result<Vec<StackRecord>>;
    /// Applies an installation change to the repository bindings, with its audit.
    async fn apply_installation(&self, change: &InstallationChange, audit: &Audit) -> Result<()>;
    /// The binding of `owner/repo` (any case), if an installation covers it.
    async fn github_binding(&self, repository: &str) -> Result<Option<GithubBinding>>;
    /// Records a delivery in one transaction: refuses nothing, but a guid seen before
    /// (same source) records a duplicate instead and applies none of the input. Otherwise
    /// creates the runs (with `delivery` set), cancels superseded proposed runs (through
    /// `run::transition`, each with a `run.cancel` audit by `system`), and writes the
    /// decisions.
    async fn record_delivery(&self, delivery: &NewDelivery) -> Result<DeliveryOutcome>;
    /// A delivery by source and guid (the first one, not its duplicates).
    async fn find_delivery(
        &self,
        source: DeliverySource,
        guid: &str,
    ) -> Result<Option<DeliveryRecord>>;
    /// A stack's trigger history, newest first, deliveries with id < `before`.
    async fn list_triggers(
        &self,
        org: &str,
        stack: &str,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<TriggerRecord>>;
    /// Keeps a VCS token handed to a run, to revoke it when the run ends.
    async fn add_vcs_token(&self, token: &VcsTokenRecord) -> Result<()>;
    /// Tokens whose run has ended (or that expired): due for revocation.
    async fn vcs_tokens_due(&self) -> Result<Vec<VcsTokenRecord>>;
    /// Forgets a token (revoked, or expired).
    async fn remove_vcs_token(&self, token: &str) -> Result<()>;
    /// The poller's last seen commit of a remote's branch.
    async fn poll_head(&self, repository: &str, branch: &str) -> Result<Option<PollHead>>;
    async fn set_poll_head(&self, head: &PollHead) -> Result<()>;

    // ---- Secrets, OIDC keys, ID-token requests ----

    /// Sets a secret (create or replace). Namespaces are per org: another org's namespace
    /// of the same name is another namespace, and nothing about it changes the answer.
    async fn put_secret(
        &self,
        org: &str,
        namespace: &str,
        key: &str,
        value: &Sealed,
        audit: &Audit,
    ) -> Result<SecretMeta>;
    /// Deletes a secret; false when there was none.
    async fn delete_secret(
        &self,
        org: &str,
        namespace: &str,
        key: &str,
        audit: &Audit,
    ) -> Result<bool>;
    /// The org's secrets (optionally one namespace), by namespace then key.
    async fn list_secrets(&self, org: &str, namespace: Option<&str>) -> Result<Vec<SecretMeta>>;
    /// The sealed value of one of the org's secrets; `None` if the org has none by that name.
    async fn get_secret(&self, org: &str, namespace: &str, key: &str) -> Result<Option<Sealed>>;
    /// Every sealed value (secrets and signing keys), for checking and re-sealing.
    async fn sealed_values(&self) -> Result<Vec<(SealedOwner, Sealed)>>;
    /// Replaces sealed values in one transaction (a secrets-key rotation), with its audit.
    async fn reseal(&self, values: &[(SealedOwner, Sealed)], audit: &Audit) -> Result<()>;

    /// Adds a signing key and, in the same transaction, retires the current one(s).
    async fn add_signing_key(&self, key: &SigningKeyRecord, audit: &Audit) -> Result<()>;
    /// Every signing key, newest first.
    async fn signing_keys(&self) -> Result<Vec<SigningKeyRecord>>;
    /// Deletes keys retired before `before` (no token they signed is still valid).
    async fn prune_signing_keys(&self, before: chrono::DateTime<chrono::Utc>) -> Result<u64>;

    async fn add_id_request_token(&self, token: &IdRequestToken) -> Result<()>;
    /// The request token with this hash and its run, if the token exists.
    async fn id_request_token(
        &self,
        secret_hash: &str,
    ) -> Result<Option<(IdRequestToken, RunRecord)>>;

    /// Everything `/metrics` reads from the store, in one read transaction.
    async fn metrics(&self) -> Result<StoreMetrics>;

    /// Audit records, newest first; `org: None` lists every org's and the server's.
    /// Audit records, newest first: of `org` (all orgs' and server-level ones for
    /// `None`), older than `before_seq`, at most `limit`.
    async fn list_audit(
        &self,
        org: Option<&str>,
        before_seq: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditRecord>> {
        self.search_audit(org, &AuditFilter::default(), before_seq, limit)
            .await
    }
    /// Like [`Store::list_audit`], only the records `filter` matches.
    async fn search_audit(
        &self,
        org: Option<&str>,
        filter: &AuditFilter,
        before_seq: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditRecord>>;

    // ---- Notifications ----

    /// Creates a target (`AlreadyExists` for a taken id), with its audit.
    async fn create_notification_target(
        &self,
        target: &NewNotificationTarget,
        audit: &Audit,
    ) -> Result<NotificationTargetRecord>;
    /// Replaces a target's url, rules and enabled flag, and its secret when one is given.
    async fn update_notification_target(
        &self,
        target: &NewNotificationTarget,
        audit: &Audit,
    ) -> Result<NotificationTargetRecord>;
    async fn get_notification_target(
        &self,
        org: &str,
        id: &str,
    ) -> Result<Option<NotificationTargetRecord>>;
    /// The org's targets by id.
    async fn list_notification_targets(&self, org: &str) -> Result<Vec<NotificationTargetRecord>>;
    /// Deletes a target and its delivery log; false when there was none.
    async fn delete_notification_target(&self, org: &str, id: &str, audit: &Audit) -> Result<bool>;
    /// Writes an event to the outbox and, in the same transaction, one delivery for each
    /// enabled target of the org whose rules select it (or for `only_target` alone).
    /// Returns the event id; `None` when its dedup key was already recorded. Run endings,
    /// late writes and old locks are written by the store itself; other causes (stale
    /// drift checks, tests) call this.
    async fn add_notification_event(
        &self,
        org: &str,
        event: &NewNotificationEvent,
    ) -> Result<Option<i64>>;
    /// Writes one `old_lock` event per state lock acquired before `acquired_before`, once
    /// per lock id. Returns how many it wrote.
    async fn notify_old_locks(&self, acquired_before: chrono::DateTime<chrono::Utc>)
        -> Result<u64>;
    /// Deliveries whose next attempt is due at `now`, oldest first, with their targets.
    async fn due_notifications(
        &self,
        now: chrono::DateTime<chrono::Utc>,
        limit: u32,
    ) -> Result<Vec<DueNotification>>;
    /// Records one attempt of a delivery: delivered, to retry at a time, or given up.
    async fn record_notification_attempt(
        &self,
        delivery: i64,
        attempt: &NotificationAttempt,
    ) -> Result<()>;
    /// A target's delivery log, newest first, ids below `before`.
    async fn list_notification_deliveries(
        &self,
        org: &str,
        target: &str,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<NotificationDeliveryRecord>>;
    /// Retention: deletes settled deliveries (delivered or given up) created before
    /// `before`, then events created before it that have no delivery left (but not the
    /// `old_lock` event of a lock still held), `batch` rows per write transaction.
    /// Pending deliveries are never deleted. Returns (deliveries, events) deleted.
    async fn prune_notifications(
        &self,
        before: chrono::DateTime<chrono::Utc>,
        batch: u32,
    ) -> Result<(u64, u64)>;

    // ---- Drift detection ----

    /// Stacks with drift detection (of one org, or one stack, or every org), each with
    /// its schedule bookkeeping, latest successful and latest settled check, and open
    /// drift run.
    async fn drift_schedules(
        &self,
        org: Option<&str>,
        stack: Option<&str>,
    ) -> Result<Vec<DriftScheduleRecord>>;
    /// [`Store::drift_schedules`] of an org's stacks with an id in `first..=last` (one
    /// page of a stacks list), in one query.
    async fn drift_schedules_between(
        &self,
        org: &str,
        first: &str,
        last: &str,
    ) -> Result<Vec<DriftScheduleRecord>>;
    /// Applies a scheduler decision in one transaction: arms the schedule, or fires it —
    /// starting the drift run (with a `run.create` audit by `system`), or, while a drift
    /// run of the stack is open, recording the skip instead. `Raced` when the stored
    /// `next_at` is no longer `expected_next`.
    async fn fire_drift_schedule(&self, fire: &DriftFire) -> Result<DriftFired>;
    /// Starts an operator's drift check; `HasOpenRuns` while a drift run of the stack
    /// is open (never two at once).
    async fn start_drift_check(&self, run: &NewRun, audit: &Audit) -> Result<RunRecord>;
    /// Ended drift runs whose result is not settled yet, oldest first.
    async fn unsettled_drift_runs(&self, limit: u32) -> Result<Vec<RunRecord>>;
    /// Settles an ended drift run's result and, in the same transaction, creates the
    /// reconcile run when given. `None` when it was settled already (nothing written).
    async fn settle_drift_run(
        &self,
        run: &str,
        result: bosun_core::drift::DriftResult,
        reconcile: Option<&NewRun>,
    ) -> Result<Option<DriftCheckRecord>>;
    /// The settled check of a drift run, or the check whose reconcile started this run.
    async fn drift_check(&self, run: &str) -> Result<Option<DriftCheckRecord>>;

    // ---- Plans: environments, hosts, plan files ----

    /// `AlreadyExists` for a taken id.
    async fn create_environment(
        &self,
        env: &NewEnvironment,
        audit: &Audit,
    ) -> Result<EnvironmentRecord>;
    /// Replaces an environment's vars and flags (its grants stay); `NotFound` if absent.
    async fn update_environment(
        &self,
        env: &NewEnvironment,
        audit: &Audit,
    ) -> Result<EnvironmentRecord>;
    async fn get_environment(&self, org: &str, id: &str) -> Result<Option<EnvironmentRecord>>;
    /// The org's environments, ordered by id.
    async fn list_environments(&self, org: &str) -> Result<Vec<EnvironmentRecord>>;
    /// Deletes an environment and its grants; refuses with `EnvironmentInUse` (naming
    /// them) while hosts are in it. False when there was none.
    async fn delete_environment(&self, org: &str, id: &str, audit: &Audit) -> Result<bool>;
    /// Grants a user approval on an environment; false when they already had it.
    /// `NotFound` for an unknown environment or user.
    async fn grant_environment(
        &self,
        org: &str,
        env: &str,
        user: &str,
        audit: &Audit,
    ) -> Result<bool>;
    /// Revokes a grant; false when there was none (`NotFound` for an unknown environment).
    async fn revoke_environment_grant(
        &self,
        org: &str,
        env: &str,
        user: &str,
        audit: &Audit,
    ) -> Result<bool>;

    /// `AlreadyExists` for a taken name, `UnknownEnvironment` for an environment the org
    /// does not have.
    async fn create_host(&self, host: &NewHost, audit: &Audit) -> Result<HostRecord>;
    /// Replaces a host's definition (same name); `NotFound` if absent.
    async fn update_host(&self, host: &NewHost, audit: &Audit) -> Result<HostRecord>;
    async fn get_host(&self, org: &str, name: &str) -> Result<Option<HostRecord>>;
    /// The org's hosts, ordered by name.
    async fn list_hosts(&self, org: &str) -> Result<Vec<HostRecord>>;
    /// False when there was none.
    async fn delete_host(&self, org: &str, name: &str, audit: &Audit) -> Result<bool>;
    /// Creates or replaces every environment, then every host, of an inventory in one
    /// transaction (all or nothing), with one audit entry.
    async fn import_inventory(
        &self,
        import: &InventoryImport,
        audit: &Audit,
    ) -> Result<InventoryImported>;

    /// Stores a plan file: version 1 when new, the next version when the name exists.
    async fn save_plan(&self, plan: &NewPlan, audit: &Audit) -> Result<PlanRecord>;
    async fn get_plan(&self, org: &str, name: &str) -> Result<Option<PlanRecord>>;
    /// The org's plans, ordered by name.
    async fn list_plans(&self, org: &str) -> Result<Vec<PlanRecord>>;
    /// False when there was none.
    async fn delete_plan(&self, org: &str, name: &str, audit: &Audit) -> Result<bool>;

    // ---- Plan runs ----

    /// Creates a plan run — `queued`, or `paused` when it has gated environments — after
    /// the concurrency guard, in the same transaction: unless `concurrent`, refuses with
    /// `RunInProgress` (the overlapping hosts) while another run of the same plan is
    /// queued, paused or running on one of its hosts.
    async fn create_plan_run(&self, run: &NewPlanRun, audit: &Audit) -> Result<PlanRunRecord>;
    async fn get_plan_run(&self, id: &str) -> Result<Option<PlanRunRecord>>;
    /// The org's plan runs (of one plan), newest first.
    /// Plan runs of `org` (of one plan, when given), newest first; with `before`, only
    /// those older than that run (a page's cursor; a run not in the org lists nothing).
    async fn list_plan_runs(
        &self,
        org: &str,
        plan: Option<&str>,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<PlanRunRecord>>;
    /// Applies an event through `bosun_core::plan_run::transition`; a runner's event
    /// (`fencing: Some`) is refused with `Fenced` unless it holds the lease.
    async fn plan_run_event(&self, id: &str, input: &PlanRunEventInput) -> Result<PlanRunRecord>;
    /// Leases the oldest plan run waiting for a runner that serves its org (a pool of
    /// the org, or the hosted pool), with a new fencing number.
    async fn lease_plan_run(&self, runner: &RunnerRecord) -> Result<Option<PlanRunRecord>>;
    /// A runner's liveness beat; answers whether to stop (the run was aborted).
    async fn plan_run_heartbeat(&self, id: &str, fencing: i64) -> Result<bool>;
    /// Leased plan runs with no heartbeat since `before`.
    async fn stale_plan_runs(
        &self,
        before: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<PlanRunRecord>>;
    /// Stores per-host results (replacing the same step and host) for the lease holder.
    async fn put_plan_run_results(
        &self,
        id: &str,
        fencing: i64,
        results: &[PlanHostResultRecord],
    ) -> Result<()>;
    /// Per-host results ordered by step, then the run's host order.
    async fn plan_run_results(&self, id: &str) -> Result<Vec<PlanHostResultRecord>>;
    /// Numbered log chunks; a `seq` already stored is ignored. `Fenced` for a stale lease.
    async fn append_plan_run_logs(
        &self,
        id: &str,
        fencing: i64,
        chunks: &[(i64, String)],
    ) -> Result<()>;
    async fn read_plan_run_logs(
        &self,
        id: &str,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<(i64, String)>>;
    async fn next_plan_run_log_seq(&self, id: &str) -> Result<i64>;

    // ---- The approvals inbox and plan schedules ----

    /// Runs of `org` waiting for an approval, oldest first: paused plan runs, and tracked
    /// stack runs in `unconfirmed` whose stack's environment requires approval.
    async fn pending_approvals(&self, org: &str) -> Result<Vec<PendingApproval>>;
    /// One waiting run; `NotFound` for a run the org does not have, `NotAwaitingApproval`
    /// (saying why) for one that does not wait.
    async fn pending_approval(&self, org: &str, subject: &str) -> Result<PendingApproval>;
    /// Decides a waiting run: approve (a plan run → `queued`, a stack run confirmed) or
    /// reject (a plan run → `rejected`, a stack run discarded, with the reason), the
    /// decision and `input.audit` written in the same transaction.
    async fn decide_approval(
        &self,
        input: &ApprovalDecisionInput,
    ) -> Result<(ApprovalRecord, ApprovalOutcome)>;
    /// Recorded decisions, newest first.
    async fn approval_decisions(&self, org: &str, limit: u32) -> Result<Vec<ApprovalRecord>>;
    /// Sets a plan's schedule (`NotFound` for an unknown plan).
    async fn put_plan_schedule(
        &self,
        input: &PlanScheduleInput,
        audit: &Audit,
    ) -> Result<PlanScheduleRecord>;
    /// Removes a plan's schedule; false when it had none.
    async fn delete_plan_schedule(&self, org: &str, plan: &str, audit: &Audit) -> Result<bool>;
    async fn plan_schedules(
        &self,
        org: Option<&str>,
        plan: Option<&str>,
    ) -> Result<Vec<PlanScheduleRecord>>;
    /// Arms a schedule or fires it (creating the run in the same transaction, or recording
    /// why none was created), only while its `next_at` is still `fire.expected_next`.
    async fn fire_plan_schedule(&self, fire: &PlanScheduleFire) -> Result<PlanScheduleFired>;

    // ---- duty leases (one background duty's pass at a time across replicas) ----

    /// Takes `duty`'s lease for `holder` until `now + ttl` when it is free or expired at
    /// `now`, renews it when `holder` already holds it, and refuses (false) while another
    /// holder's lease is live — one compare-and-set in a write transaction.
    async fn try_duty_lease(
        &self,
        duty: &str,
        holder: &str,
        now: chrono::DateTime<chrono::Utc>,
        ttl: std::time::Duration,
    ) -> Result<bool>;
    /// Gives up every duty lease `holder` holds (a replica shutting down), so other
    /// replicas take the duties at once; returns how many.
    async fn release_duty_leases(&self, holder: &str) -> Result<u64>;
}
