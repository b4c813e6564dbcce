//! The `impl Store`, one source compiled into both backends: each method hands its
//! arguments to its domain's function (`sql/<domain>.rs`) inside the backend's `read` (one
//! read snapshot) or `write` (one write transaction), and does nothing else but the few
//! calls that take more than one: a cheap read before leasing, retention's batches. What
//! truly differs between the backends lives as named hooks in each backend's `db` module:
//! `close`, `publish`, `claim_lease` (PostgreSQL's extra `SKIP LOCKED` claim when leasing
//! a run), `snapshot` (one consistent read for `/metrics`) and `GREATEST` (SQLite's scalar
//! `MAX` versus PostgreSQL's `GREATEST`).

use super::*;

#[async_trait]
impl DatabaseStore for db::Store {
    async fn schema_version(&self) -> Result<i64> {
        self.read(database::schema_version).await
    }

    async fn ping(&self) -> Result<()> {
        self.read(database::ping).await
    }

    fn last_unavailable(&self) -> Option<DateTime<Utc>> {
        self.inner.availability.last_unavailable()
    }

    fn write_fault(&self) -> Option<String> {
        self.inner.availability.write_fault()
    }

    async fn close(&self) {
        db::close(self).await;
    }
}

#[async_trait]
impl SignalStore for db::Store {
    fn publish(&self, signal: Signal) {
        db::publish(self, signal);
    }

    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Signal> {
        self.inner.signals.subscribe()
    }
}

#[async_trait]
impl IdentityStore for db::Store {
    async fn bootstrap(&self, seed: &Bootstrap) -> Result<bool> {
        let seed = seed.clone();
        self.write(move |tx| identity::bootstrap(tx, &seed)).await
    }

    async fn create_org(&self, org: &NewOrg, audit: &Audit) -> Result<OrgRecord> {
        let (org, audit) = (org.clone(), audit.clone());
        self.write(move |tx| identity::create_org(tx, &org, &audit))
            .await
    }

    async fn get_org(&self, id: &str) -> Result<Option<OrgRecord>> {
        let id = id.to_string();
        self.read(move |c| identity::get_org(c, &id)).await
    }

    async fn update_org(&self, id: &str, change: &OrgUpdate, audit: &Audit) -> Result<OrgRecord> {
        let (id, change, audit) = (id.to_string(), change.clone(), audit.clone());
        self.write(move |tx| identity::update_org(tx, &id, &change, &audit))
            .await
    }

    async fn create_user(&self, user: &NewUser, audit: &Audit) -> Result<UserRecord> {
        let (user, audit) = (user.clone(), audit.clone());
        self.write(move |tx| identity::create_user(tx, &user, &audit))
            .await
    }

    async fn get_user(&self, id: &str) -> Result<Option<UserRecord>> {
        let id = id.to_string();
        self.read(move |c| identity::get_user(c, &id)).await
    }

    async fn roles_of(&self, user: &str) -> Result<BTreeMap<String, Role>> {
        let user = user.to_string();
        self.read(move |c| identity::roles_of(c, &user)).await
    }

    async fn set_member(&self, org: &str, user: &str, role: Role, audit: &Audit) -> Result<()> {
        let (org, user, audit) = (org.to_string(), user.to_string(), audit.clone());
        self.write(move |tx| identity::set_member(tx, &org, &user, role, &audit))
            .await
    }

    async fn remove_member(&self, org: &str, user: &str, audit: &Audit) -> Result<bool> {
        let (org, user, audit) = (org.to_string(), user.to_string(), audit.clone());
        self.write(move |tx| identity::remove_member(tx, &org, &user, &audit))
            .await
    }

    async fn list_members(&self, org: &str) -> Result<Vec<(String, Role)>> {
        let org = org.to_string();
        self.read(move |c| identity::list_members(c, &org)).await
    }
}

#[async_trait]
impl TokenStore for db::Store {
    async fn create_token(&self, token: &NewToken, audit: Option<&Audit>) -> Result<TokenRecord> {
        let (token, audit) = (token.clone(), audit.cloned());
        self.write(move |tx| tokens::create(tx, &token, audit.as_ref()))
            .await
    }

    async fn token_by_hash(&self, secret_hash: &str) -> Result<Option<TokenRecord>> {
        let hash = secret_hash.to_string();
        self.read(move |c| tokens::by_hash(c, &hash)).await
    }

    async fn token_grant(&self, secret_hash: &str) -> Result<Option<TokenGrant>> {
        let hash = secret_hash.to_string();
        self.read(move |c| tokens::grant(c, &hash)).await
    }

    async fn get_token(&self, id: &str) -> Result<Option<TokenRecord>> {
        let id = id.to_string();
        self.read(move |c| tokens::get(c, &id)).await
    }

    async fn list_tokens(&self, filter: &TokenFilter) -> Result<Vec<TokenRecord>> {
        let filter = filter.clone();
        self.read(move |c| tokens::list(c, &filter)).await
    }

    async fn run_is_active(&self, run: &str) -> Result<bool> {
        let run = run.to_string();
        self.read(move |c| tokens::run_is_active(c, &run)).await
    }

    async fn revoke_token(&self, id: &str, audit: Option<&Audit>) -> Result<bool> {
        let (id, audit) = (id.to_string(), audit.cloned());
        self.write(move |tx| tokens::revoke(tx, &id, audit.as_ref()))
            .await
    }

    async fn revoke_run_tokens(&self, run: &str) -> Result<()> {
        let id = run.to_string();
        self.write(move |tx| tokens::revoke_run_tokens(tx, &id))
            .await
    }
}

#[async_trait]
impl StackStore for db::Store {
    async fn create_stack(
        &self,
        org: &str,
        spec: &StackSpec,
        audit: &Audit,
    ) -> Result<StackRecord> {
        let (org, spec, audit) = (org.to_string(), spec.clone(), audit.clone());
        self.write(move |tx| stacks::create(tx, &org, &spec, &audit))
            .await
    }

    async fn get_stack(&self, org: &str, id: &str) -> Result<Option<StackRecord>> {
        let (org, id) = (org.to_string(), id.to_string());
        self.read(move |c| stacks::get(c, &org, &id)).await
    }

    async fn list_stacks(
        &self,
        org: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<StackRecord>> {
        let (org, after) = (org.to_string(), after.unwrap_or("").to_string());
        self.read(move |c| stacks::list(c, &org, &after, limit))
            .await
    }

    async fn get_stack_in_context(
        &self,
        org: &str,
        id: &str,
    ) -> Result<Option<(StackRecord, StackContext)>> {
        let (org, id) = (org.to_string(), id.to_string());
        self.read(move |c| {
            let Some(stack) = stacks::get(c, &org, &id)? else {
                return Ok(None);
            };
            let context = stacks::context(c, &org, std::slice::from_ref(&stack))?;
            Ok(Some((stack, context)))
        })
        .await
    }

    async fn list_stacks_in_context(
        &self,
        org: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<(Vec<StackRecord>, StackContext)> {
        let (org, after) = (org.to_string(), after.unwrap_or("").to_string());
        self.read(move |c| {
            let page = stacks::list(c, &org, &after, limit)?;
            let context = stacks::context(c, &org, &page)?;
            Ok((page, context))
        })
        .await
    }

    async fn list_stacks_with_activity(
        &self,
        org: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<(Vec<StackRecord>, StackContext, StackActivity)> {
        let (org, after) = (org.to_string(), after.unwrap_or("").to_string());
        self.read(move |c| {
            let page = stacks::list(c, &org, &after, limit)?;
            let context = stacks::context(c, &org, &page)?;
            let mut activity = StackActivity::default();
            // The page's id range: one statement each, not one per stack.
            if let (Some(first), Some(last)) = (page.first(), page.last()) {
                let (first, last) = (first.spec.id.as_str(), last.spec.id.as_str());
                activity.last_runs = runs::last_between(c, &org, first, last)?
                    .into_iter()
                    .map(|r| (r.stack.clone(), r))
                    .collect();
                activity.locks = state::locks_between(c, &org, first, last)?
                    .into_iter()
                    .collect();
            }
            Ok((page, context, activity))
        })
        .await
    }

    async fn stack_context(&self, org: &str, records: &[StackRecord]) -> Result<StackContext> {
        let (org, records) = (org.to_string(), records.to_vec());
        self.read(move |c| stacks::context(c, &org, &records)).await
    }

    async fn downstream_stacks(&self, org: &str, stack: &str) -> Result<Vec<StackRecord>> {
        let (org, stack) = (org.to_string(), stack.to_string());
        self.read(move |c| stacks::downstream(c, &org, &stack))
            .await
    }

    async fn update_stack(
        &self,
        org: &str,
        spec: &StackSpec,
        audit: &Audit,
    ) -> Result<StackRecord> {
        let (org, spec, audit) = (org.to_string(), spec.clone(), audit.clone());
        self.write(move |tx| stacks::update(tx, &org, &spec, &audit))
            .await
    }

    async fn delete_stack(
        &self,
        org: &str,
        id: &str,
        delete_state: bool,
        audit: &Audit,
    ) -> Result<()> {
        let (org, id, audit) = (org.to_string(), id.to_string(), audit.clone());
        self.write(move |tx| stacks::delete(tx, &org, &id, delete_state, &audit))
            .await
    }
}

#[async_trait]
impl StateStore for db::Store {
    async fn state_head(&self, org: &str, stack: &str) -> Result<StateHead> {
        let (org, stack) = (org.to_string(), stack.to_string());
        self.read(move |c| state::read_head(c, &org, &stack)).await
    }

    async fn state_version(
        &self,
        org: &str,
        stack: &str,
        version: Option<i64>,
    ) -> Result<Option<(StateVersionMeta, Vec<u8>)>> {
        let (org, stack) = (org.to_string(), stack.to_string());
        self.read(move |c| state::read_version(c, &org, &stack, version))
            .await
    }

    async fn list_state_versions(
        &self,
        org: &str,
        stack: &str,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<StateVersionMeta>> {
        let (org, stack) = (org.to_string(), stack.to_string());
        self.read(move |c| state::list_versions(c, &org, &stack, before, limit))
            .await
    }

    async fn write_state(
        &self,
        org: &str,
        stack: &str,
        new: &NewStateVersion,
        audit: Option<&Audit>,
    ) -> Result<StateVersionMeta> {
        let (org, stack, new, audit) = (
            org.to_string(),
            stack.to_string(),
            new.clone(),
            audit.cloned(),
        );
        self.write(move |tx| state::write(tx, &org, &stack, &new, audit.as_ref()))
            .await
    }

    async fn lock_state(&self, org: &str, stack: &str, lock: &Lock) -> Result<()> {
        let (org, stack, lock) = (org.to_string(), stack.to_string(), lock.clone());
        self.write(move |tx| state::lock(tx, &org, &stack, &lock))
            .await
    }

    async fn unlock_state(
        &self,
        org: &str,
        stack: &str,
        request: &UnlockRequest,
        audit: &Audit,
    ) -> Result<UnlockDecision> {
        let (org, stack, request, audit) = (
            org.to_string(),
            stack.to_string(),
            request.clone(),
            audit.clone(),
        );
        self.write(move |tx| state::unlock(tx, &org, &stack, &request, &audit))
            .await
    }
}

#[async_trait]
impl RunStore for db::Store {
    async fn create_run(&self, run: &NewRun, audit: Option<&Audit>) -> Result<RunRecord> {
        let (run, audit) = (run.clone(), audit.cloned());
        self.write(move |tx| runs::create(tx, &run, audit.as_ref()))
            .await
    }

    async fn get_run(&self, id: &str) -> Result<Option<RunRecord>> {
        let id = id.to_string();
        self.read(move |c| runs::load_run(c, &id)).await
    }

    async fn get_run_in_context(
        &self,
        org: &str,
        id: &str,
        audit_limit: u32,
    ) -> Result<Option<(RunRecord, RunContext)>> {
        let (org, id) = (org.to_string(), id.to_string());
        self.read(move |c| {
            let Some(run) = runs::load_run(c, &id)?.filter(|r| r.org == org) else {
                return Ok(None);
            };
            let context = runs::context(c, &run, audit_limit)?;
            Ok(Some((run, context)))
        })
        .await
    }

    async fn list_runs(
        &self,
        org: &str,
        stack: Option<&str>,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<RunRecord>> {
        let (org, stack, before) = (
            org.to_string(),
            stack.map(str::to_string),
            before.map(str::to_string),
        );
        self.read(move |c| runs::list(c, &org, stack.as_deref(), before.as_deref(), limit))
            .await
    }

    async fn run_phases(&self, run: &str) -> Result<Vec<RunPhaseRecord>> {
        let run = run.to_string();
        self.read(move |c| runs::phases(c, &run)).await
    }

    async fn run_phases_of(
        &self,
        runs: &[String],
    ) -> Result<BTreeMap<String, Vec<RunPhaseRecord>>> {
        let runs = runs.to_vec();
        self.read(move |c| runs::phases_of(c, &runs)).await
    }

    async fn run_event(&self, run: &str, input: &RunEventInput) -> Result<RunEventResult> {
        let (id, input) = (run.to_string(), input.clone());
        self.write(move |tx| runs::event(tx, &id, &input)).await
    }

    async fn cancel_run(&self, run: &str, audit: &Audit) -> Result<RunEventResult> {
        let (id, audit) = (run.to_string(), audit.clone());
        self.write(move |tx| runs::cancel(tx, &id, &audit)).await
    }

    async fn lease_run(&self, runner: &RunnerRecord) -> Result<Option<RunRecord>> {
        // Idle runners poll often: look without the write lock first.
        if !self.read(runs::any_waiting).await? {
            return Ok(None);
        }
        let runner = runner.clone();
        self.write(move |tx| runs::lease(tx, &runner)).await
    }

    async fn heartbeat(&self, run: &str, fencing: i64) -> Result<bool> {
        let id = run.to_string();
        self.write(move |tx| runs::heartbeat(tx, &id, fencing))
            .await
    }

    async fn stale_runs(&self, before: DateTime<Utc>) -> Result<Vec<RunRecord>> {
        self.read(move |c| runs::stale(c, before)).await
    }

    async fn executing_runs(&self) -> Result<Vec<RunRecord>> {
        self.read(runs::executing).await
    }

    async fn flag_late_write(&self, run: &str) -> Result<()> {
        let id = run.to_string();
        self.write(move |tx| runs::flag_late_write(tx, &id)).await
    }

    async fn set_run_consumed(&self, run: &str, consumed: &Value) -> Result<bool> {
        let (run, consumed) = (run.to_string(), consumed.clone());
        self.write(move |tx| deps::set_consumed(tx, &run, &consumed))
            .await
    }

    async fn append_logs(&self, run: &str, fencing: i64, chunks: &[(i64, String)]) -> Result<()> {
        let (id, chunks) = (run.to_string(), chunks.to_vec());
        self.write(move |tx| runs::append_logs(tx, &id, fencing, &chunks))
            .await
    }

    async fn read_logs(&self, run: &str, after: Option<i64>, limit: u32) -> Result<Vec<LogRecord>> {
        let id = run.to_string();
        self.read(move |c| runs::read_logs(c, &id, after, limit))
            .await
    }

    async fn next_log_seq(&self, run: &str) -> Result<i64> {
        let id = run.to_string();
        self.read(move |c| runs::next_log_seq(c, &id)).await
    }

    async fn put_run_plan(&self, run: &str, fencing: i64, body: &[u8]) -> Result<()> {
        let (id, body) = (run.to_string(), body.to_vec());
        self.write(move |tx| runs::put_plan(tx, &id, fencing, &body))
            .await
    }

    async fn get_run_plan(&self, run: &str) -> Result<Option<Vec<u8>>> {
        let id = run.to_string();
        self.read(move |c| runs::get_plan(c, &id)).await
    }
}

#[async_trait]
impl RunnerStore for db::Store {
    async fn busy_runners(&self) -> Result<std::collections::BTreeSet<String>> {
        self.read(runners::busy).await
    }

    async fn register_runner(&self, runner: &RunnerRecord) -> Result<RunnerRecord> {
        let runner = runner.clone();
        self.write(move |tx| runners::register(tx, &runner)).await
    }

    async fn get_runner(&self, id: &str) -> Result<Option<RunnerRecord>> {
        let id = id.to_string();
        self.read(move |c| runners::get(c, &id)).await
    }

    async fn touch_runner(&self, id: &str) -> Result<()> {
        let id = id.to_string();
        self.write(move |tx| runners::touch(tx, &id)).await
    }

    async fn list_runners(
        &self,
        org: &str,
        after: Option<&KeyCursor>,
        limit: u32,
    ) -> Result<Vec<RunnerRecord>> {
        let (org, after) = (org.to_string(), after.cloned());
        self.read(move |c| runners::list(c, &org, after.as_ref(), limit))
            .await
    }

    async fn drain_runner(&self, id: &str, audit: &Audit) -> Result<bool> {
        let (id, audit) = (id.to_string(), audit.clone());
        self.write(move |tx| runners::drain(tx, &id, &audit)).await
    }
}

#[async_trait]
impl VcsStore for db::Store {
    async fn stacks_for_repository(
        &self,
        repository: &str,
        branch: Option<&str>,
    ) -> Result<Vec<StackRecord>> {
        let (repository, branch) = (repository.to_string(), branch.map(str::to_string));
        self.read(move |c| vcs::stacks_for_repository(c, &repository, branch.as_deref()))
            .await
    }

    async fn git_remote_stacks(&self) -> Result<Vec<StackRecord>> {
        self.read(vcs::git_remote_stacks).await
    }

    async fn apply_installation(&self, change: &InstallationChange, audit: &Audit) -> Result<()> {
        let (change, audit) = (change.clone(), audit.clone());
        self.write(move |tx| vcs::apply_installation(tx, &change, &audit))
            .await
    }

    async fn github_binding(&self, repository: &str) -> Result<Option<GithubBinding>> {
        let repository = repository.to_string();
        self.read(move |c| vcs::binding(c, &repository)).await
    }

    async fn record_delivery(&self, delivery: &NewDelivery) -> Result<DeliveryOutcome> {
        let delivery = delivery.clone();
        self.write(move |tx| vcs::record_delivery(tx, &delivery))
            .await
    }

    async fn find_delivery(
        &self,
        source: DeliverySource,
        guid: &str,
    ) -> Result<Option<DeliveryRecord>> {
        let guid = guid.to_string();
        self.read(move |c| vcs::find_delivery(c, source, &guid))
            .await
    }

    async fn list_triggers(
        &self,
        org: &str,
        stack: &str,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<TriggerRecord>> {
        let (org, stack) = (org.to_string(), stack.to_string());
        self.read(move |c| vcs::triggers(c, &org, &stack, before, limit))
            .await
    }

    async fn add_vcs_token(&self, token: &VcsTokenRecord) -> Result<()> {
        let token = token.clone();
        self.write(move |tx| vcs::add_token(tx, &token)).await
    }

    async fn vcs_tokens_due(&self) -> Result<Vec<VcsTokenRecord>> {
        self.read(vcs::tokens_due).await
    }

    async fn remove_vcs_token(&self, token: &str) -> Result<()> {
        let token = token.to_string();
        self.write(move |tx| vcs::remove_token(tx, &token)).await
    }

    async fn poll_head(&self, repository: &str, branch: &str) -> Result<Option<PollHead>> {
        let (repository, branch) = (repository.to_string(), branch.to_string());
        self.read(move |c| vcs::poll_head(c, &repository, &branch))
            .await
    }

    async fn set_poll_head(&self, head: &PollHead) -> Result<()> {
        let head = head.clone();
        self.write(move |tx| vcs::set_poll_head(tx, &head)).await
    }
}

#[async_trait]
impl SecretStore for db::Store {
    async fn put_secret(
        &self,
        org: &str,
        namespace: &str,
        key: &str,
        value: &Sealed,
        audit: &Audit,
    ) -> Result<SecretMeta> {
        let (org, namespace, key) = (org.to_string(), namespace.to_string(), key.to_string());
        let (value, audit) = (value.clone(), audit.clone());
        self.write(move |tx| secrets::put(tx, &org, &namespace, &key, &value, &audit))
            .await
    }

    async fn delete_secret(
        &self,
        org: &str,
        namespace: &str,
        key: &str,
        audit: &Audit,
    ) -> Result<bool> {
        let (org, namespace, key) = (org.to_string(), namespace.to_string(), key.to_string());
        let audit = audit.clone();
        self.write(move |tx| secrets::delete(tx, &org, &namespace, &key, &audit))
            .await
    }

    async fn list_secrets(&self, org: &str, namespace: Option<&str>) -> Result<Vec<SecretMeta>> {
        let (org, namespace) = (org.to_string(), namespace.map(str::to_string));
        self.read(move |c| secrets::list(c, &org, namespace.as_deref()))
            .await
    }

    async fn get_secret(&self, org: &str, namespace: &str, key: &str) -> Result<Option<Sealed>> {
        let (org, namespace, key) = (org.to_string(), namespace.to_string(), key.to_string());
        self.read(move |c| secrets::get(c, &org, &namespace, &key))
            .await
    }

    async fn sealed_values(&self) -> Result<Vec<(SealedOwner, Sealed)>> {
        self.read(secrets::sealed_values).await
    }

    async fn reseal(&self, values: &[(SealedOwner, Sealed)], audit: &Audit) -> Result<()> {
        let (values, audit) = (values.to_vec(), audit.clone());
        self.write(move |tx| secrets::reseal(tx, &values, &audit))
            .await
    }

    async fn add_signing_key(&self, key: &SigningKeyRecord, audit: &Audit) -> Result<()> {
        let (key, audit) = (key.clone(), audit.clone());
        self.write(move |tx| secrets::add_signing_key(tx, &key, &audit))
            .await
    }

    async fn signing_keys(&self) -> Result<Vec<SigningKeyRecord>> {
        self.read(secrets::signing_keys).await
    }

    async fn prune_signing_keys(&self, before: DateTime<Utc>) -> Result<u64> {
        self.write(move |tx| secrets::prune_signing_keys(tx, before))
            .await
    }

    async fn add_id_request_token(&self, token: &IdRequestToken) -> Result<()> {
        let token = token.clone();
        self.write(move |tx| secrets::add_id_request_token(tx, &token))
            .await
    }

    async fn id_request_token(
        &self,
        secret_hash: &str,
    ) -> Result<Option<(IdRequestToken, RunRecord)>> {
        let hash = secret_hash.to_string();
        self.read(move |c| secrets::id_request_token(c, &hash))
            .await
    }
}

#[async_trait]
impl MetricsStore for db::Store {
    async fn metrics(&self) -> Result<StoreMetrics> {
        self.read(metrics::read).await
    }

    async fn fold_metric_counts(&self) -> Result<usize> {
        self.write(metrics::fold_counts).await
    }
}

#[async_trait]
impl AuditStore for db::Store {
    async fn search_audit(
        &self,
        org: Option<&str>,
        filter: &AuditFilter,
        before_seq: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditRecord>> {
        let (org, filter) = (org.map(str::to_string), filter.clone());
        self.read(move |c| audit::search(c, org.as_deref(), &filter, before_seq, limit))
            .await
    }
}

#[async_trait]
impl NotificationStore for db::Store {
    async fn create_notification_target(
        &self,
        t: &NewNotificationTarget,
        audit: &Audit,
    ) -> Result<NotificationTargetRecord> {
        let (t, audit) = (t.clone(), audit.clone());
        self.write(move |tx| notify::create_target(tx, &t, &audit))
            .await
    }

    async fn update_notification_target(
        &self,
        t: &NewNotificationTarget,
        audit: &Audit,
    ) -> Result<NotificationTargetRecord> {
        let (t, audit) = (t.clone(), audit.clone());
        self.write(move |tx| notify::update_target(tx, &t, &audit))
            .await
    }

    async fn get_notification_target(
        &self,
        org: &str,
        id: &str,
    ) -> Result<Option<NotificationTargetRecord>> {
        let (org, id) = (org.to_string(), id.to_string());
        self.read(move |c| notify::load_target(c, &org, &id)).await
    }

    async fn list_notification_targets(&self, org: &str) -> Result<Vec<NotificationTargetRecord>> {
        let org = org.to_string();
        self.read(move |c| notify::list_targets(c, &org)).await
    }

    async fn delete_notification_target(&self, org: &str, id: &str, audit: &Audit) -> Result<bool> {
        let (org, id, audit) = (org.to_string(), id.to_string(), audit.clone());
        self.write(move |tx| notify::delete_target(tx, &org, &id, &audit))
            .await
    }

    async fn add_notification_event(
        &self,
        org: &str,
        event: &NewNotificationEvent,
    ) -> Result<Option<i64>> {
        let (org, event) = (org.to_string(), event.clone());
        self.write(move |tx| notify::add_event(tx, &org, &event))
            .await
    }

    async fn notify_old_locks(&self, acquired_before: DateTime<Utc>) -> Result<u64> {
        // Most passes find nothing: look without the write lock first.
        if !self
            .read(move |c| notify::any_old_locks(c, acquired_before))
            .await?
        {
            return Ok(0);
        }
        self.write(move |tx| notify::write_old_locks(tx, acquired_before))
            .await
    }

    async fn due_notifications(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<DueNotification>> {
        self.read(move |c| notify::due(c, now, limit)).await
    }

    async fn record_notification_attempt(
        &self,
        delivery: i64,
        attempt: &NotificationAttempt,
    ) -> Result<()> {
        let a = attempt.clone();
        self.write(move |tx| notify::record_attempt(tx, delivery, &a))
            .await
    }

    async fn list_notification_deliveries(
        &self,
        org: &str,
        target: &str,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<NotificationDeliveryRecord>> {
        let (org, target) = (org.to_string(), target.to_string());
        self.read(move |c| notify::list_deliveries(c, &org, &target, before, limit))
            .await
    }

    async fn prune_notifications(&self, before: DateTime<Utc>, batch: u32) -> Result<(u64, u64)> {
        // `batch` rows per write transaction, so a large backlog never holds the write lock
        // for long.
        let (before, batch) = (millis(before), batch.max(1));
        let mut deliveries = 0;
        loop {
            let n = self
                .write(move |tx| notify::prune_deliveries(tx, before, batch))
                .await?;
            deliveries += n;
            if n < u64::from(batch) {
                break;
            }
        }
        let mut events = 0;
        loop {
            let n = self
                .write(move |tx| notify::prune_events(tx, before, batch))
                .await?;
            events += n;
            if n < u64::from(batch) {
                break;
            }
        }
        Ok((deliveries, events))
    }
}

#[async_trait]
impl DriftStore for db::Store {
    async fn drift_schedules(
        &self,
        org: Option<&str>,
        stack: Option<&str>,
    ) -> Result<Vec<DriftScheduleRecord>> {
        let (org, stack) = (org.map(str::to_string), stack.map(str::to_string));
        self.read(move |c| drift::schedules(c, org.as_deref(), stack.as_deref()))
            .await
    }

    async fn drift_schedules_due(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<DriftScheduleRecord>> {
        self.read(move |c| drift::due(c, millis(now), limit)).await
    }

    async fn drift_arming(&self, limit: u32) -> Result<Vec<DriftArming>> {
        self.read(move |c| drift::arming(c, limit)).await
    }

    async fn drift_armed(&self, tickets: &[DriftArming]) -> Result<()> {
        if tickets.is_empty() {
            return Ok(());
        }
        let tickets = tickets.to_vec();
        self.write(move |tx| drift::armed(tx, &tickets)).await
    }

    async fn drift_dashboard(
        &self,
        org: &str,
        after: Option<&KeyCursor>,
        limit: u32,
    ) -> Result<Vec<DriftScheduleRecord>> {
        let (org, after) = (org.to_string(), after.cloned());
        self.read(move |c| drift::dashboard(c, &org, after.as_ref(), limit))
            .await
    }

    async fn stale_drift_checks(&self, now: DateTime<Utc>, limit: u32) -> Result<StaleDriftChecks> {
        self.read(move |c| drift::stale_checks(c, millis(now), limit))
            .await
    }

    async fn count_stale_drift(&self, org: &str, now: DateTime<Utc>, cap: u32) -> Result<u64> {
        let org = org.to_string();
        self.read(move |c| drift::count_stale(c, &org, millis(now), cap))
            .await
    }

    async fn drift_alerts_due(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<DriftScheduleRecord>> {
        self.read(move |c| drift::alerts_due(c, millis(now), limit))
            .await
    }

    async fn drift_alert_raised(&self, org: &str, stack: &str, alert_at: i64) -> Result<()> {
        let (org, stack) = (org.to_string(), stack.to_string());
        self.write(move |tx| drift::alert_raised(tx, &org, &stack, alert_at))
            .await
    }

    async fn fill_drift_stale_at(&self, limit: u32) -> Result<usize> {
        self.write(move |tx| drift::fill_stale_at(tx, limit)).await
    }

    async fn fire_drift_schedule(&self, fire: &DriftFire) -> Result<DriftFired> {
        let fire = fire.clone();
        self.write(move |tx| drift::fire(tx, &fire)).await
    }

    async fn start_drift_check(&self, run: &NewRun, audit: &Audit) -> Result<RunRecord> {
        let (run, audit) = (run.clone(), audit.clone());
        self.write(move |tx| drift::start_check(tx, &run, &audit))
            .await
    }

    async fn unsettled_drift_runs(&self, limit: u32) -> Result<Vec<RunRecord>> {
        self.read(move |c| drift::unsettled(c, limit)).await
    }

    async fn settle_drift_run(
        &self,
        run: &str,
        result: bosun_core::drift::DriftResult,
        reconcile: Option<&NewRun>,
    ) -> Result<Option<DriftCheckRecord>> {
        let (run, reconcile) = (run.to_string(), reconcile.cloned());
        self.write(move |tx| drift::settle(tx, &run, result, reconcile.as_ref()))
            .await
    }

    async fn drift_check(&self, run: &str) -> Result<Option<DriftCheckRecord>> {
        let run = run.to_string();
        self.read(move |c| drift::check(c, &run)).await
    }
}

#[async_trait]
impl PlanResourceStore for db::Store {
    async fn create_environment(
        &self,
        env: &NewEnvironment,
        audit: &Audit,
    ) -> Result<EnvironmentRecord> {
        let (e, audit) = (env.clone(), audit.clone());
        self.write(move |tx| plan_resources::create_environment(tx, &e, &audit))
            .await
    }

    async fn update_environment(
        &self,
        env: &NewEnvironment,
        audit: &Audit,
    ) -> Result<EnvironmentRecord> {
        let (e, audit) = (env.clone(), audit.clone());
        self.write(move |tx| plan_resources::update_environment(tx, &e, &audit))
            .await
    }

    async fn get_environment(&self, org: &str, id: &str) -> Result<Option<EnvironmentRecord>> {
        let (org, id) = (org.to_string(), id.to_string());
        self.read(move |c| plan_resources::load_env(c, &org, &id))
            .await
    }

    async fn list_environments(&self, org: &str) -> Result<Vec<EnvironmentRecord>> {
        let org = org.to_string();
        self.read(move |c| plan_resources::list_envs(c, &org)).await
    }

    async fn delete_environment(&self, org: &str, id: &str, audit: &Audit) -> Result<bool> {
        let (org, id, audit) = (org.to_string(), id.to_string(), audit.clone());
        self.write(move |tx| plan_resources::delete_environment(tx, &org, &id, &audit))
            .await
    }

    async fn grant_environment(
        &self,
        org: &str,
        env: &str,
        user: &str,
        audit: &Audit,
    ) -> Result<bool> {
        let (org, env, user, audit) = (
            org.to_string(),
            env.to_string(),
            user.to_string(),
            audit.clone(),
        );
        self.write(move |tx| plan_resources::grant(tx, &org, &env, &user, &audit))
            .await
    }

    async fn revoke_environment_grant(
        &self,
        org: &str,
        env: &str,
        user: &str,
        audit: &Audit,
    ) -> Result<bool> {
        let (org, env, user, audit) = (
            org.to_string(),
            env.to_string(),
            user.to_string(),
            audit.clone(),
        );
        self.write(move |tx| plan_resources::revoke(tx, &org, &env, &user, &audit))
            .await
    }

    async fn create_host(&self, host: &NewHost, audit: &Audit) -> Result<HostRecord> {
        let (h, audit) = (host.clone(), audit.clone());
        self.write(move |tx| plan_resources::create_host(tx, &h, &audit))
            .await
    }

    async fn update_host(&self, host: &NewHost, audit: &Audit) -> Result<HostRecord> {
        let (h, audit) = (host.clone(), audit.clone());
        self.write(move |tx| plan_resources::update_host(tx, &h, &audit))
            .await
    }

    async fn get_host(&self, org: &str, name: &str) -> Result<Option<HostRecord>> {
        let (org, name) = (org.to_string(), name.to_string());
        self.read(move |c| plan_resources::load_host(c, &org, &name))
            .await
    }

    async fn list_hosts(&self, org: &str) -> Result<Vec<HostRecord>> {
        let org = org.to_string();
        self.read(move |c| plan_resources::list_hosts(c, &org))
            .await
    }

    async fn list_hosts_page(
        &self,
        org: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<HostRecord>> {
        let (org, after) = (org.to_string(), after.unwrap_or("").to_string());
        self.read(move |c| plan_resources::list_hosts_page(c, &org, &after, limit))
            .await
    }

    async fn delete_host(&self, org: &str, name: &str, audit: &Audit) -> Result<bool> {
        let (org, name, audit) = (org.to_string(), name.to_string(), audit.clone());
        self.write(move |tx| plan_resources::delete_host(tx, &org, &name, &audit))
            .await
    }

    async fn import_inventory(
        &self,
        import: &InventoryImport,
        audit: &Audit,
    ) -> Result<InventoryImported> {
        let (import, audit) = (import.clone(), audit.clone());
        self.write(move |tx| plan_resources::import_inventory(tx, &import, &audit))
            .await
    }

    async fn save_plan(&self, plan: &NewPlan, audit: &Audit) -> Result<PlanRecord> {
        let (p, audit) = (plan.clone(), audit.clone());
        self.write(move |tx| plan_resources::save_plan(tx, &p, &audit))
            .await
    }

    async fn get_plan(&self, org: &str, name: &str) -> Result<Option<PlanRecord>> {
        let (org, name) = (org.to_string(), name.to_string());
        self.read(move |c| plan_resources::load_plan(c, &org, &name))
            .await
    }

    async fn list_plans(&self, org: &str) -> Result<Vec<PlanRecord>> {
        let org = org.to_string();
        self.read(move |c| plan_resources::list_plans(c, &org))
            .await
    }

    async fn list_plans_page(
        &self,
        org: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<PlanRecord>> {
        let (org, after) = (org.to_string(), after.unwrap_or("").to_string());
        self.read(move |c| plan_resources::list_plans_page(c, &org, &after, limit))
            .await
    }

    async fn delete_plan(&self, org: &str, name: &str, audit: &Audit) -> Result<bool> {
        let (org, name, audit) = (org.to_string(), name.to_string(), audit.clone());
        self.write(move |tx| plan_resources::delete_plan(tx, &org, &name, &audit))
            .await
    }
}

#[async_trait]
impl PlanRunStore for db::Store {
    async fn create_plan_run(&self, run: &NewPlanRun, audit: &Audit) -> Result<PlanRunRecord> {
        let (run, audit) = (run.clone(), audit.clone());
        self.write(move |tx| plan_runs::create(tx, &run, &audit))
            .await
    }

    async fn get_plan_run(&self, id: &str) -> Result<Option<PlanRunRecord>> {
        let id = id.to_string();
        self.read(move |c| plan_runs::load(c, &id)).await
    }

    async fn list_plan_runs(
        &self,
        org: &str,
        plan: Option<&str>,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<PlanRunRecord>> {
        let (org, plan, before) = (
            org.to_string(),
            plan.map(str::to_string),
            before.map(str::to_string),
        );
        self.read(move |c| plan_runs::list(c, &org, plan.as_deref(), before.as_deref(), limit))
            .await
    }

    async fn plan_run_event(&self, id: &str, input: &PlanRunEventInput) -> Result<PlanRunRecord> {
        let (id, input) = (id.to_string(), input.clone());
        self.write(move |tx| plan_runs::event(tx, &id, &input))
            .await
    }

    async fn lease_plan_run(&self, runner: &RunnerRecord) -> Result<Option<PlanRunRecord>> {
        // Idle runners poll often: look without the write lock first.
        if !self.read(plan_runs::any_waiting).await? {
            return Ok(None);
        }
        let runner = runner.clone();
        self.write(move |tx| plan_runs::lease(tx, &runner)).await
    }

    async fn plan_run_heartbeat(&self, id: &str, fencing: i64) -> Result<bool> {
        let id = id.to_string();
        self.write(move |tx| plan_runs::heartbeat(tx, &id, fencing))
            .await
    }

    async fn stale_plan_runs(&self, before: DateTime<Utc>) -> Result<Vec<PlanRunRecord>> {
        self.read(move |c| plan_runs::stale(c, before)).await
    }

    async fn put_plan_run_results(
        &self,
        id: &str,
        fencing: i64,
        results: &[PlanHostResultRecord],
    ) -> Result<()> {
        let (id, results) = (id.to_string(), results.to_vec());
        self.write(move |tx| plan_runs::put_results(tx, &id, fencing, &results))
            .await
    }

    async fn plan_run_results(&self, id: &str) -> Result<Vec<PlanHostResultRecord>> {
        let id = id.to_string();
        self.read(move |c| plan_runs::results(c, &id)).await
    }

    async fn append_plan_run_logs(
        &self,
        id: &str,
        fencing: i64,
        chunks: &[(i64, String)],
    ) -> Result<()> {
        let (id, chunks) = (id.to_string(), chunks.to_vec());
        self.write(move |tx| plan_runs::append_logs(tx, &id, fencing, &chunks))
            .await
    }

    async fn read_plan_run_logs(
        &self,
        id: &str,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<LogRecord>> {
        let id = id.to_string();
        self.read(move |c| plan_runs::read_logs(c, &id, after, limit))
            .await
    }

    async fn next_plan_run_log_seq(&self, id: &str) -> Result<i64> {
        let id = id.to_string();
        self.read(move |c| plan_runs::next_log_seq(c, &id)).await
    }
}

#[async_trait]
impl ApprovalStore for db::Store {
    async fn pending_approvals(
        &self,
        org: &str,
        after: Option<&KeyCursor>,
        limit: u32,
    ) -> Result<Vec<PendingApproval>> {
        let (org, after) = (org.to_string(), after.cloned());
        self.read(move |c| approvals::pending(c, &org, after.as_ref(), limit))
            .await
    }

    async fn pending_approval(&self, org: &str, subject: &str) -> Result<PendingApproval> {
        let (org, subject) = (org.to_string(), subject.to_string());
        self.read(move |c| approvals::pending_one(c, &org, &subject))
            .await
    }

    async fn decide_approval(
        &self,
        input: &ApprovalDecisionInput,
    ) -> Result<(ApprovalRecord, ApprovalOutcome)> {
        let input = input.clone();
        self.write(move |tx| approvals::decide(tx, &input)).await
    }

    async fn approval_decisions(
        &self,
        org: &str,
        before: Option<&str>,
        limit: u32,
    ) -> Result<Vec<ApprovalRecord>> {
        let (org, before) = (org.to_string(), before.map(str::to_string));
        self.read(move |c| approvals::decisions(c, &org, before.as_deref(), limit))
            .await
    }

    async fn put_plan_schedule(
        &self,
        input: &PlanScheduleInput,
        audit: &Audit,
    ) -> Result<PlanScheduleRecord> {
        let (input, audit) = (input.clone(), audit.clone());
        self.write(move |tx| approvals::put_schedule(tx, &input, &audit))
            .await
    }

    async fn delete_plan_schedule(&self, org: &str, plan: &str, audit: &Audit) -> Result<bool> {
        let (org, plan, audit) = (org.to_string(), plan.to_string(), audit.clone());
        self.write(move |tx| approvals::delete_schedule(tx, &org, &plan, &audit))
            .await
    }

    async fn plan_schedules(
        &self,
        org: Option<&str>,
        plan: Option<&str>,
    ) -> Result<Vec<PlanScheduleRecord>> {
        let (org, plan) = (org.map(str::to_string), plan.map(str::to_string));
        self.read(move |c| approvals::schedules(c, org.as_deref(), plan.as_deref()))
            .await
    }

    async fn fire_plan_schedule(&self, fire: &PlanScheduleFire) -> Result<PlanScheduleFired> {
        let fire = fire.clone();
        self.write(move |tx| approvals::fire(tx, &fire)).await
    }
}

#[async_trait]
impl DutyStore for db::Store {
    async fn try_duty_lease(
        &self,
        duty: &str,
        holder: &str,
        now: DateTime<Utc>,
        ttl: Duration,
    ) -> Result<bool> {
        let (duty, holder) = (duty.to_string(), holder.to_string());
        self.write(move |tx| duties::try_lease(tx, &duty, &holder, now, ttl))
            .await
    }

    async fn release_duty_leases(&self, holder: &str) -> Result<u64> {
        let holder = holder.to_string();
        self.write(move |tx| duties::release(tx, &holder)).await
    }
}

#[async_trait]
impl RetentionStore for db::Store {
    async fn prune_state_versions(
        &self,
        keep: u32,
        before: DateTime<Utc>,
        batch: u32,
    ) -> Result<u64> {
        let (keep, before, batch) = (keep.max(1), millis(before), batch.max(1));
        let stacks = self
            .read(move |c| retention::stacks_with_old_versions(c, keep, before))
            .await?;
        let mut deleted = 0;
        for (org, stack) in stacks {
            loop {
                let (o, s) = (org.clone(), stack.clone());
                let n = self
                    .write(move |tx| {
                        retention::prune_state_versions(tx, &o, &s, keep, before, batch)
                    })
                    .await?;
                deleted += n;
                if n < u64::from(batch) {
                    break;
                }
            }
        }
        Ok(deleted)
    }

    async fn compress_run_logs(
        &self,
        ended_before: DateTime<Utc>,
        batch: u32,
    ) -> Result<(u64, u64)> {
        /// Runs looked up at a time.
        const RUNS: u32 = 100;
        let (ended_before, batch) = (millis(ended_before), batch.max(1));
        let mut packed = [0, 0];
        for (i, of) in [logs::LogOf::StackRun, logs::LogOf::PlanRun]
            .into_iter()
            .enumerate()
        {
            let mut after = String::new();
            loop {
                let from = after.clone();
                let ids = self
                    .read(move |c| logs::ended_with_rows(c, of, ended_before, &from, RUNS))
                    .await?;
                if let Some(last) = ids.last() {
                    after = last.clone();
                }
                for id in &ids {
                    loop {
                        let id = id.clone();
                        let n = self.write(move |tx| logs::pack(tx, of, &id, batch)).await?;
                        packed[i] += n;
                        if n < u64::from(batch) {
                            break;
                        }
                    }
                }
                if ids.len() < RUNS as usize {
                    break;
                }
            }
        }
        Ok((packed[0], packed[1]))
    }

    async fn summarise_runs(&self, ended_before: DateTime<Utc>, batch: u32) -> Result<u64> {
        let (ended_before, batch) = (millis(ended_before), batch.max(1));
        in_batches(self, move |tx| {
            let n = retention::summarise_runs(tx, ended_before, batch)?;
            Ok((n, n == u64::from(batch)))
        })
        .await
    }

    async fn summarise_plan_runs(&self, ended_before: DateTime<Utc>, batch: u32) -> Result<u64> {
        let (ended_before, batch) = (millis(ended_before), batch.max(1));
        in_batches(self, move |tx| {
            let n = retention::summarise_plan_runs(tx, ended_before, batch)?;
            Ok((n, n == u64::from(batch)))
        })
        .await
    }

    async fn prune_deliveries(&self, before: DateTime<Utc>, batch: u32) -> Result<u64> {
        let (before, batch) = (millis(before), batch.max(1));
        in_batches(self, move |tx| {
            retention::prune_deliveries(tx, before, batch)
        })
        .await
    }
}

/// Runs `step` in one write transaction after another while it answers a full batch:
/// `(how many it did, whether the batch was full)`; the sum of what all of them did.
async fn in_batches<F>(store: &db::Store, step: F) -> Result<u64>
where
    F: Fn(&Transaction<'_>) -> Result<(u64, bool)> + Clone + Send + 'static,
{
    let mut done = 0;
    loop {
        let step = step.clone();
        let (n, full) = store.write(move |tx| step(tx)).await?;
        done += n;
        if !full {
            return Ok(done);
        }
    }
}

#[async_trait]
impl FeedbackStore for db::Store {
    async fn due_checks(&self, now: DateTime<Utc>, limit: u32) -> Result<Vec<DueCheck>> {
        self.read(move |c| feedback::due_checks(c, now, limit))
            .await
    }

    async fn record_check_report(&self, run: &str, report: &FeedbackReport) -> Result<()> {
        let (run, report) = (run.to_string(), report.clone());
        self.write(move |tx| feedback::record_check(tx, &run, &report))
            .await
    }

    async fn due_pr_comments(&self, now: DateTime<Utc>, limit: u32) -> Result<Vec<DuePrComment>> {
        self.read(move |c| feedback::due_comments(c, now, limit))
            .await
    }

    async fn record_pr_comment_report(
        &self,
        org: &str,
        repository: &str,
        pull_request: i64,
        report: &FeedbackReport,
    ) -> Result<()> {
        let (org, repository, report) = (org.to_string(), repository.to_string(), report.clone());
        self.write(move |tx| feedback::record_comment(tx, &org, &repository, pull_request, &report))
            .await
    }

    async fn mark_pr_comment_creating(
        &self,
        org: &str,
        repository: &str,
        pull_request: i64,
    ) -> Result<()> {
        let (org, repository) = (org.to_string(), repository.to_string());
        self.write(move |tx| feedback::comment_creating(tx, &org, &repository, pull_request))
            .await
    }

    async fn checks_of_commit(
        &self,
        repository: &str,
        head_sha: &str,
    ) -> Result<Vec<CheckFeedback>> {
        let (repository, head_sha) = (repository.to_string(), head_sha.to_string());
        self.read(move |c| feedback::checks_of_commit(c, &repository, &head_sha))
            .await
    }

    async fn set_feedback_refusal(
        &self,
        repository: &str,
        kind: &str,
        refusal: Option<(&str, DateTime<Utc>)>,
    ) -> Result<()> {
        let (repository, kind) = (repository.to_string(), kind.to_string());
        let refusal = refusal.map(|(m, at)| (m.to_string(), at));
        self.write(move |tx| {
            feedback::set_refusal(
                tx,
                &repository,
                &kind,
                refusal.as_ref().map(|(m, at)| (m.as_str(), *at)),
            )
        })
        .await
    }

    async fn feedback_refusals(&self, repository: &str) -> Result<Vec<FeedbackRefusal>> {
        let repository = repository.to_string();
        self.read(move |c| feedback::refusals(c, &repository)).await
    }
}

#[async_trait]
impl PolicyStore for db::Store {
    async fn put_policy(
        &self,
        org: &str,
        spec: &PolicySpec,
        version: &str,
        audit: &Audit,
    ) -> Result<(PolicyRecord, bool)> {
        let (org, spec, version, audit) = (
            org.to_string(),
            spec.clone(),
            version.to_string(),
            audit.clone(),
        );
        self.write(move |tx| policies::put(tx, &org, &spec, &version, &audit))
            .await
    }

    async fn get_policy(&self, org: &str, name: &str) -> Result<Option<PolicyRecord>> {
        let (org, name) = (org.to_string(), name.to_string());
        self.read(move |c| policies::get(c, &org, &name)).await
    }

    async fn list_policies(&self, org: &str) -> Result<Vec<PolicyRecord>> {
        let org = org.to_string();
        self.read(move |c| policies::list(c, &org)).await
    }

    async fn delete_policy(&self, org: &str, name: &str, audit: &Audit) -> Result<bool> {
        let (org, name, audit) = (org.to_string(), name.to_string(), audit.clone());
        self.write(move |tx| policies::delete(tx, &org, &name, &audit))
            .await
    }

    async fn policy_evaluations(&self, subject: &str) -> Result<Vec<PolicyEvaluationRecord>> {
        let subject = subject.to_string();
        self.read(move |c| policies::evaluations(c, &subject)).await
    }

    async fn override_run_policies(
        &self,
        org: &str,
        run: &str,
        by: &str,
        reason: &str,
        audit: &Audit,
    ) -> Result<RunEventResult> {
        let (org, run, by, reason, audit) = (
            org.to_string(),
            run.to_string(),
            by.to_string(),
            reason.to_string(),
            audit.clone(),
        );
        self.write(move |tx| policies::override_run(tx, &org, &run, &by, &reason, &audit))
            .await
    }

    async fn settle_plan_run_policies(
        &self,
        org: &str,
        run: &str,
        evaluations: &[NewPolicyEvaluation],
        overridden: Option<(&str, &str)>,
        reason: Option<&str>,
        audit: Option<&Audit>,
    ) -> Result<PlanRunRecord> {
        let (org, run, evaluations) = (org.to_string(), run.to_string(), evaluations.to_vec());
        let overridden = overridden.map(|(b, r)| (b.to_string(), r.to_string()));
        let (reason, audit) = (reason.map(str::to_string), audit.cloned());
        self.write(move |tx| {
            policies::settle_plan_run(
                tx,
                &org,
                &run,
                &evaluations,
                overridden.as_ref().map(|(b, r)| (b.as_str(), r.as_str())),
                reason.as_deref(),
                audit.as_ref(),
            )
        })
        .await
    }

    async fn record_policy_evaluations(
        &self,
        org: &str,
        subject: &str,
        evaluations: &[NewPolicyEvaluation],
    ) -> Result<()> {
        let (org, subject, evaluations) =
            (org.to_string(), subject.to_string(), evaluations.to_vec());
        self.write(move |tx| {
            policies::insert_evaluations(tx, &org, &subject, &evaluations, millis(Utc::now()))
        })
        .await
    }

    async fn put_run_plan_json(&self, run: &str, fencing: i64, body: &[u8]) -> Result<()> {
        let (id, body) = (run.to_string(), body.to_vec());
        self.write(move |tx| policies::put_plan_json(tx, &id, fencing, &body))
            .await
    }

    async fn get_run_plan_json(&self, run: &str) -> Result<Option<Vec<u8>>> {
        let id = run.to_string();
        self.read(move |c| policies::get_plan_json(c, &id)).await
    }
}
