//! The conformance suite: the behaviour every [`Store`] backend must show.
//!
//! A backend's test file runs it with [`conformance_suite!`](crate::conformance_suite),
//! giving an expression that yields `(Arc<dyn Store>, guard)` for a fresh, empty store;
//! the guard (a temp dir, a scratch database) lives until the case ends. The second
//! argument, `|&store, &guard| -> impl Future<Output = Arc<dyn Store>>`, gives another
//! instance on the same database (as a second replica would open it), for the cases that
//! cross instances; a backend whose instances share nothing gives the same store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use bosun_core::run::{Event, Phase, RunKind, RunState, Trigger};
use bosun_core::stack::{DependencyInput, DriftInput, StackInput, StackSpec};
use bosun_core::state::{
    Lock, StateDoc, UnlockDecision, UnlockRequest, WriteRefusal, WriteRequest, Writer,
    WriterLiveness,
};
use bosun_core::token::TokenKind;
use bosun_core::Role;
use chrono::{Duration, Utc};
use serde_json::json;

use crate::*;

mod approvals;
mod audit;
mod deps;
mod drift;
mod duties;
mod feedback;
mod general;
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
mod stacks;
mod state;
mod tokens;
mod vcs;

pub use approvals::*;
pub use audit::*;
pub use deps::*;
pub use drift::*;
pub use duties::*;
pub use feedback::*;
pub use general::*;
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
pub use stacks::*;
pub use state::*;
pub use tokens::*;
pub use vcs::*;

/// One case per test, so a failing backend names exactly which behaviour broke.
#[macro_export]
macro_rules! conformance_suite {
    ($make:expr, $peer:expr) => {
        $crate::conformance_suite!(@peer_cases $make, $peer;
            signals_reach_other_instances,
            signals_of_failed_writes_are_dropped
        );
        $crate::conformance_suite!(@cases $make;
            bootstrap_only_once,
            schema_version_is_current,
            orgs_and_members,
            orgs_pr_feedback_updated_and_audited,
            users_are_unique,
            tokens_lifecycle,
            stacks_roundtrip_every_field,
            stacks_list_pages_in_id_order,
            stacks_update_and_delete,
            stacks_isolated_by_org,
            dependencies_enforced,
            audit_written_with_each_change,
            audit_filtered_by_actor_action_and_target,
            failed_writes_leave_nothing,
            concurrent_writes_all_land,
            state_versions_roundtrip,
            state_lock_rules,
            state_serial_and_lineage_guard,
            state_late_writes_kept_and_flagged,
            state_recovered_writes_kept_once_and_flagged,
            state_needs_a_stack,
            runs_lease_fence_and_finish,
            runs_leased_by_their_stacks_current_pool,
            runs_lease_looks_past_a_full_page_of_waiting_runs,
            runs_serialize_tracked_and_wait_for_locks,
            runs_stale_and_requeue,
            runners_egress_kept_with_each_registration,
            run_logs_are_idempotent,
            vcs_stacks_by_repository_key,
            vcs_installation_lifecycle,
            vcs_delivery_creates_runs_and_decisions,
            vcs_duplicate_delivery_applies_nothing,
            vcs_supersede_cancels_older_proposed_runs,
            feedback_rows_follow_runs_of_github_stacks,
            feedback_refusals_are_kept_per_repository_and_kind,
            vcs_delivery_is_atomic,
            vcs_tokens_due_after_run_ends,
            vcs_poll_heads_upsert,
            stacks_aws_roles_update_and_clear,
            one_graph_holds_stacks_and_the_plans_they_feed,
            stacks_pr_feedback_set_and_cleared,
            secrets_namespaces_are_per_org,
            policies_saved_replaced_listed_and_deleted,
            policy_holds_record_evaluations_and_lift_on_override,
            trigger_evaluations_are_recorded_with_the_delivery_on_its_runs,
            a_stacks_changed_outputs_record_plan_triggers_each_settled_by_one_run,
            sourced_hosts_are_kept_per_owner_and_never_replace_others,
            secrets_replace_keeps_created_at,
            signing_keys_rotate_and_prune,
            id_request_tokens_with_their_run,
            sealed_values_reseal_all_or_nothing,
            sign_in_links_identities_and_follows_the_providers_rules,
            sign_in_attempts_are_taken_once_and_expire,
            sessions_open_refresh_end_and_list,
            a_cli_login_holds_a_token_that_goes_with_its_session,
            ended_and_expired_sessions_are_pruned_open_ones_kept,
            an_admin_links_an_identity_ahead_of_its_sign_in_and_unlinks_it,
            every_open_session_of_a_user_ends_at_once,
            metrics_count_and_time_from_the_store,
            dependency_runs_held_released_removed_skipped,
            held_runs_do_not_block_their_stack,
            dependency_diamond_runs_the_bottom_stack_once,
            notification_targets_roundtrip_and_reseal,
            notification_events_written_with_their_cause,
            notification_deliveries_retry_and_settle,
            notification_retention_prunes_settled_history_in_batches,
            drift_schedules_fire_once_settle_once,
            drift_schedules_read_by_index,
            plan_environments_grants_and_refused_delete,
            plan_hosts_roundtrip_every_field,
            plan_hosts_bastions_checked_and_kept,
            plan_inventory_import_is_one_transaction,
            plan_files_versioned_and_org_scoped,
            plan_hosts_and_plans_page_by_name,
            plan_runs_guard_refuses_overlap_atomically,
            plan_runs_listed_newest_first_page_by_page,
            plan_runs_lease_fence_results_and_settle,
            plan_runs_abort_stale_and_requeue,
            plan_runs_a_paused_run_is_previewed_until_it_is_decided,
            plan_runs_an_approved_run_waits_for_its_previews_runner_to_let_go,
            approvals_pending_from_paused_and_gated_runs,
            approvals_decided_once_in_one_transaction,
            plan_schedules_set_replace_clear,
            plan_schedules_from_files_follow_the_file,
            plan_schedules_fire_once_under_compare_and_set,
            duty_leases_take_renew_refuse_and_expire,
            duty_leases_racing_takers_get_one,
            stacks_page_reads_by_id_range,
            stacks_read_in_context,
            runs_read_in_context,
            state_retention_keeps_the_newest_the_young_the_head_and_what_runs_name,
            run_logs_compressed_once_runs_end_read_the_same,
            runs_summarised_past_the_horizon_keep_their_record,
            plan_runs_summarised_past_the_horizon_keep_their_record,
            vcs_deliveries_pruned_past_the_horizon_with_their_decisions
        );
    };
    (@peer_cases $make:expr, $peer:expr; $($case:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let Some((store, guard)) = $crate::conformance::Fresh::fresh($make.await) else {
                    return;
                };
                let peer: std::sync::Arc<dyn $crate::Store> = ($peer)(&store, &guard).await;
                $crate::conformance::$case(store, peer).await;
            }
        )*
    };
    (@cases $make:expr; $($case:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                // `None`: the backend is not available here (the maker said why).
                let Some((store, _guard)) = $crate::conformance::Fresh::fresh($make.await) else {
                    return;
                };
                $crate::conformance::$case(store).await;
            }
        )*
    };
}

/// What a backend's maker may yield: a fresh store with its guard, or `None` when the
/// backend cannot run here (a test server that is not configured), which skips the case.
pub trait Fresh<G> {
    fn fresh(self) -> Option<(Arc<dyn Store>, G)>;
}

impl<G> Fresh<G> for (Arc<dyn Store>, G) {
    fn fresh(self) -> Option<(Arc<dyn Store>, G)> {
        Some(self)
    }
}

impl<G> Fresh<G> for Option<(Arc<dyn Store>, G)> {
    fn fresh(self) -> Option<(Arc<dyn Store>, G)> {
        self
    }
}

fn audit(org: Option<&str>, action: &str, target: &str) -> Audit {
    Audit {
        org: org.map(str::to_string),
        actor: "user:tester".into(),
        token_id: Some("tok-test".into()),
        action: action.into(),
        target: target.into(),
        detail: json!({"k": "v"}),
    }
}

fn token(id: &str, kind: TokenKind, user: Option<&str>, org: Option<&str>) -> NewToken {
    NewToken {
        id: id.into(),
        kind,
        secret_hash: format!("hash-{id}"),
        description: format!("token {id}"),
        user: user.map(str::to_string),
        org: org.map(str::to_string),
        pool: (kind == TokenKind::Pool).then(|| "edge".to_string()),
        run: (kind == TokenKind::Run).then(|| "run-1".to_string()),
        stack: (kind == TokenKind::Run).then(|| "net".to_string()),
        read_stacks: if kind == TokenKind::Run {
            vec!["up".to_string()]
        } else {
            vec![]
        },
        expires_at: None,
    }
}

fn spec(id: &str, deps: &[&str]) -> StackSpec {
    StackSpec::from_input(StackInput {
        id: id.into(),
        repository: "github:acme/infra".into(),
        depends_on: deps
            .iter()
            .map(|d| DependencyInput {
                stack: d.to_string(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    })
    .unwrap()
}

/// Makes user `id` (no server admin, no membership).
async fn seed_user(store: &dyn Store, id: &str) {
    store
        .create_user(
            &NewUser {
                id: id.into(),
                server_admin: false,
            },
            &audit(None, "user.create", &format!("user:{id}")),
        )
        .await
        .unwrap();
}

async fn seed_org(store: &dyn Store, org: &str) {
    if store.get_user("owner").await.unwrap().is_none() {
        store
            .create_user(
                &NewUser {
                    id: "owner".into(),
                    server_admin: true,
                },
                &audit(None, "user.create", "user:owner"),
            )
            .await
            .unwrap();
    }
    store
        .create_org(
            &NewOrg {
                id: org.into(),
                name: format!("Org {org}"),
                admin: Some("owner".into()),
            },
            &audit(Some(org), "org.create", org),
        )
        .await
        .unwrap();
}

fn state_body(serial: u64, lineage: &str, out: &str) -> Vec<u8> {
    json!({
        "version": 4,
        "terraform_version": "1.0.3",
        "serial": serial,
        "lineage": lineage,
        "outputs": {"name": {"value": out, "type": "string"}, "pw": {"value": "s3cret", "type": "string", "sensitive": true}},
        "resources": []
    })
    .to_string()
    .into_bytes()
}

fn state_write(
    writer: Writer,
    liveness: WriterLiveness,
    lock_id: Option<&str>,
    serial: u64,
    lineage: &str,
) -> NewStateVersion {
    let body = state_body(serial, lineage, &format!("v{serial}"));
    NewStateVersion {
        doc: StateDoc::parse(&body).unwrap(),
        body,
        request: WriteRequest {
            writer,
            liveness,
            lock_id: lock_id.map(str::to_string),
            force: false,
        },
        token_id: Some("tok".into()),
        recovery_reason: None,
    }
}

fn state_lock(id: &str, holder: Writer) -> Lock {
    Lock {
        id: id.into(),
        operation: "OperationTypeApply".into(),
        info: String::new(),
        who: "alice@laptop".into(),
        version: "1.0.3".into(),
        created: "2026-11-30T00:00:00Z".into(),
        path: String::new(),
        holder,
        acquired_at: Utc::now(),
    }
}

async fn seed_stack(store: &dyn Store, id: &str) {
    if store.get_org("acme").await.unwrap().is_none() {
        seed_org(store, "acme").await;
    }
    store
        .create_stack(
            "acme",
            &spec(id, &[]),
            &audit(Some("acme"), "stack.create", id),
        )
        .await
        .unwrap();
}

fn new_run(id: &str, stack: &str, kind: RunKind) -> NewRun {
    NewRun {
        id: id.into(),
        org: "acme".into(),
        stack: stack.into(),
        kind,
        trigger: Trigger::Manual,
        triggered_by: "user:tester".into(),
        commit: None,
        branch: "main".into(),
        retry_of: None,
        pull_request: None,
    }
}

async fn runner(store: &dyn Store, id: &str) -> RunnerRecord {
    store
        .register_runner(&RunnerRecord {
            id: id.into(),
            org: None,
            pool: "hosted".into(),
            name: id.into(),
            version: "test".into(),
            drained: false,
            last_seen: Utc::now(),
            created_at: Utc::now(),
            egress: None,
        })
        .await
        .unwrap()
}

fn ev(event: Event, fencing: i64) -> RunEventInput {
    RunEventInput {
        event,
        fencing: Some(fencing),
        update: RunUpdate::default(),
        audit: None,
    }
}

fn pair(org: &str, stack: &str) -> (String, String) {
    (org.to_string(), stack.to_string())
}

fn delivery(guid: &str, event: &str) -> NewDelivery {
    NewDelivery {
        source: DeliverySource::Github,
        guid: guid.into(),
        event: event.into(),
        action: None,
        repository: Some("github:acme/infra".into()),
        git_ref: Some("refs/heads/main".into()),
        before: Some("b".repeat(40)),
        after: Some("a".repeat(40)),
        pull_request: None,
        summary: format!("{event} {guid}"),
        decisions: vec![],
        runs: vec![],
        cancel: None,
        evaluations: Vec::new(),
    }
}

fn decision(stack: &str, run: Option<&str>, reason: &str) -> TriggerDecision {
    TriggerDecision {
        org: "acme".into(),
        stack: stack.into(),
        run_id: run.map(str::to_string),
        reason: reason.into(),
    }
}

fn pr_run(id: &str, stack: &str, kind: RunKind, pr: Option<i64>) -> NewRun {
    NewRun {
        trigger: if pr.is_some() {
            Trigger::PullRequest
        } else {
            Trigger::Push
        },
        triggered_by: "system".into(),
        commit: Some("a".repeat(40)),
        pull_request: pr,
        ..new_run(id, stack, kind)
    }
}

fn recorded(outcome: DeliveryOutcome) -> (i64, Vec<RunRecord>, Vec<String>) {
    match outcome {
        DeliveryOutcome::Recorded { id, runs, canceled } => (id, runs, canceled),
        other => panic!("expected Recorded, got {other:?}"),
    }
}

fn sealed(tag: &str, key_id: &str) -> Sealed {
    Sealed {
        ciphertext: format!("ciphertext of {tag}").into_bytes(),
        nonce: tag.bytes().cycle().take(12).collect(),
        key_id: key_id.into(),
    }
}

fn kind_state(kind: &str, state: &str) -> (String, String) {
    (kind.to_string(), state.to_string())
}

/// Leases `id` (nothing else may be waiting) and runs its phase to `event`.
async fn run_phase(store: &dyn Store, r: &RunnerRecord, id: &str, end: Event) -> RunRecord {
    let leased = store.lease_run(r).await.unwrap().expect("a run to lease");
    assert_eq!(leased.id, id);
    store
        .run_event(id, &ev(Event::PhaseStarted, leased.fencing))
        .await
        .unwrap();
    if end == Event::ApplyFinished {
        let v = store.state_head("acme", &leased.stack).await.unwrap();
        let serial = v.current.map(|c| c.serial + 1).unwrap_or(1);
        store
            .write_state(
                "acme",
                &leased.stack,
                &state_write(
                    Writer::Run(id.into()),
                    WriterLiveness::LiveRun,
                    None,
                    serial,
                    "L",
                ),
                None,
            )
            .await
            .unwrap();
    }
    store
        .run_event(id, &ev(end, leased.fencing))
        .await
        .unwrap()
        .run
}

fn target(
    id: &str,
    kind: &str,
    rules: Vec<NotificationRule>,
    enabled: bool,
) -> NewNotificationTarget {
    NewNotificationTarget {
        org: "acme".into(),
        id: id.into(),
        kind: kind.into(),
        url: format!("http://127.0.0.1:9/{id}"),
        secret: (kind == "webhook").then(|| sealed(id, "k1")),
        rules,
        enabled,
    }
}

fn environment(org: &str, id: &str, gated: bool) -> NewEnvironment {
    NewEnvironment {
        org: org.into(),
        id: id.into(),
        vars: BTreeMap::from([("app_port".to_string(), json!(8080))]),
        requires_approval: gated,
        protected: gated,
        hosts_from: None,
    }
}

fn host(org: &str, name: &str, env: Option<&str>) -> NewHost {
    NewHost {
        org: org.into(),
        name: name.into(),
        address: format!("{name}.example.test"),
        port: 22,
        user: None,
        connection: "ssh".into(),
        labels: vec![],
        vars: BTreeMap::new(),
        environment: env.map(str::to_string),
        identity_file: None,
        host_key: None,
        known_hosts: None,
        proxy_jump: None,
    }
}

async fn audit_actions(store: &dyn Store, org: &str) -> Vec<String> {
    store
        .list_audit(Some(org), None, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.entry.action)
        .collect()
}

fn plan_run(id: &str, hosts: &[&str]) -> NewPlanRun {
    NewPlanRun {
        id: id.into(),
        org: "acme".into(),
        plan: "app-config".into(),
        plan_version: 3,
        source: "name: app-config\n".into(),
        inputs: BTreeMap::from([("release".to_string(), json!("2.0"))]),
        dry_run: false,
        requested_by: "user:alice".into(),
        trigger: bosun_core::plan_run::PlanTrigger::Manual,
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
        gated_environments: vec![],
        concurrent: false,
        preview: None,
        policy_check: false,
        sources: None,
        upstream: None,
        settles_trigger: None,
        failed: None,
    }
}

fn plan_event(
    event: bosun_core::plan_run::PlanRunEvent,
    fencing: Option<i64>,
) -> PlanRunEventInput {
    PlanRunEventInput {
        event,
        fencing,
        reason: None,
        report: None,
        audit: None,
    }
}

/// The current time once the clock's millisecond has moved past `after`'s (rows are
/// stamped in milliseconds, and the retention cut-off is strict).
async fn past(after: chrono::DateTime<Utc>) -> chrono::DateTime<Utc> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let now = Utc::now();
        if now.timestamp_millis() > after.timestamp_millis() {
            return now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the clock stood still"
        );
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}
