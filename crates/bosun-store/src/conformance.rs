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
            runs_serialize_tracked_and_wait_for_locks,
            runs_stale_and_requeue,
            run_logs_are_idempotent,
            vcs_stacks_by_repository_key,
            vcs_installation_lifecycle,
            vcs_delivery_creates_runs_and_decisions,
            vcs_duplicate_delivery_applies_nothing,
            vcs_supersede_cancels_older_proposed_runs,
            vcs_delivery_is_atomic,
            vcs_tokens_due_after_run_ends,
            vcs_poll_heads_upsert,
            stacks_aws_roles_update_and_clear,
            secrets_namespaces_are_per_org,
            secrets_replace_keeps_created_at,
            signing_keys_rotate_and_prune,
            id_request_tokens_with_their_run,
            sealed_values_reseal_all_or_nothing,
            metrics_count_and_time_from_the_store,
            dependency_runs_held_released_removed_skipped,
            held_runs_do_not_block_their_stack,
            dependency_diamond_runs_the_bottom_stack_once,
            notification_targets_roundtrip_and_reseal,
            notification_events_written_with_their_cause,
            notification_deliveries_retry_and_settle,
            notification_retention_prunes_settled_history_in_batches,
            drift_schedules_fire_once_settle_once,
            plan_environments_grants_and_refused_delete,
            plan_hosts_roundtrip_every_field,
            plan_inventory_import_is_one_transaction,
            plan_files_versioned_and_org_scoped,
            plan_runs_guard_refuses_overlap_atomically,
            plan_runs_listed_newest_first_page_by_page,
            plan_runs_lease_fence_results_and_settle,
            plan_runs_abort_stale_and_requeue,
            approvals_pending_from_paused_and_gated_runs,
            approvals_decided_once_in_one_transaction,
            plan_schedules_set_replace_clear,
            plan_schedules_from_files_follow_the_file,
            plan_schedules_fire_once_under_compare_and_set,
            duty_leases_take_renew_refuse_and_expire,
            duty_leases_racing_takers_get_one,
            stacks_page_reads_by_id_range
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

pub async fn bootstrap_only_once(store: Arc<dyn Store>) {
    let seed = Bootstrap {
        org: "default".into(),
        user: "admin".into(),
        token: token("boot", TokenKind::Personal, Some("admin"), None),
    };
    assert!(store.bootstrap(&seed).await.unwrap());
    let second = Bootstrap {
        token: token("boot2", TokenKind::Personal, Some("admin"), None),
        ..seed.clone()
    };
    assert!(!store.bootstrap(&second).await.unwrap());
    assert!(store.token_by_hash("hash-boot2").await.unwrap().is_none());
    let admin = store.get_user("admin").await.unwrap().unwrap();
    assert!(admin.server_admin);
    assert_eq!(
        store.roles_of("admin").await.unwrap(),
        BTreeMap::from([("default".to_string(), Role::Admin)])
    );
    let t = store.token_by_hash("hash-boot").await.unwrap().unwrap();
    assert_eq!(t.user.as_deref(), Some("admin"));
    let log = store.list_audit(Some("default"), None, 10).await.unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].entry.action, "server.bootstrap");
}

pub async fn schema_version_is_current(store: Arc<dyn Store>) {
    assert!(store.schema_version().await.unwrap() >= 1);
    store.ping().await.unwrap();
}

pub async fn orgs_and_members(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let org = store.get_org("acme").await.unwrap().unwrap();
    assert_eq!(org.name, "Org acme");
    assert!(store.get_org("nope").await.unwrap().is_none());
    let dup = store
        .create_org(
            &NewOrg {
                id: "acme".into(),
                name: "again".into(),
                admin: None,
            },
            &audit(Some("acme"), "org.create", "acme"),
        )
        .await;
    assert!(matches!(dup, Err(StoreError::AlreadyExists(_))), "{dup:?}");

    store
        .create_user(
            &NewUser {
                id: "alice".into(),
                server_admin: false,
            },
            &audit(None, "user.create", "user:alice"),
        )
        .await
        .unwrap();
    let a = audit(Some("acme"), "member.set", "user:alice");
    store
        .set_member("acme", "alice", Role::Viewer, &a)
        .await
        .unwrap();
    store
        .set_member("acme", "alice", Role::Operator, &a)
        .await
        .unwrap();
    assert_eq!(
        store.roles_of("alice").await.unwrap().get("acme"),
        Some(&Role::Operator)
    );
    assert_eq!(
        store.list_members("acme").await.unwrap(),
        vec![
            ("alice".to_string(), Role::Operator),
            ("owner".to_string(), Role::Admin)
        ]
    );
    let missing = store.set_member("acme", "ghost", Role::Viewer, &a).await;
    assert!(
        matches!(missing, Err(StoreError::NotFound(_))),
        "{missing:?}"
    );
    let missing = store.set_member("nope", "alice", Role::Viewer, &a).await;
    assert!(
        matches!(missing, Err(StoreError::NotFound(_))),
        "{missing:?}"
    );

    assert!(store.remove_member("acme", "alice", &a).await.unwrap());
    assert!(!store.remove_member("acme", "alice", &a).await.unwrap());
    assert!(store.roles_of("alice").await.unwrap().is_empty());
}

pub async fn users_are_unique(store: Arc<dyn Store>) {
    let u = NewUser {
        id: "bob".into(),
        server_admin: false,
    };
    store
        .create_user(&u, &audit(None, "user.create", "user:bob"))
        .await
        .unwrap();
    let again = store
        .create_user(&u, &audit(None, "user.create", "user:bob"))
        .await;
    assert!(
        matches!(again, Err(StoreError::AlreadyExists(_))),
        "{again:?}"
    );
    let got = store.get_user("bob").await.unwrap().unwrap();
    assert!(!got.server_admin);
}

pub async fn tokens_lifecycle(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let a = audit(Some("acme"), "token.create", "token");
    let mut personal = token("p1", TokenKind::Personal, Some("owner"), None);
    personal.expires_at = Some(Utc::now() + Duration::hours(1));
    let rec = store.create_token(&personal, Some(&a)).await.unwrap();
    assert_eq!(rec.kind, TokenKind::Personal);
    assert!(rec.is_active(Utc::now()));
    assert!(!rec.is_active(Utc::now() + Duration::hours(2)));

    store
        .create_token(&token("w1", TokenKind::Pool, None, Some("acme")), Some(&a))
        .await
        .unwrap();
    store
        .create_token(&token("r1", TokenKind::Run, None, Some("acme")), None)
        .await
        .unwrap();

    let grant = store.token_grant("hash-p1").await.unwrap().unwrap();
    assert_eq!(grant.token.id, "p1");
    assert_eq!(grant.user.as_ref().map(|u| u.id.as_str()), Some("owner"));
    assert_eq!(grant.roles.get("acme"), Some(&Role::Admin));
    let pool_grant = store.token_grant("hash-w1").await.unwrap().unwrap();
    assert!(pool_grant.user.is_none() && pool_grant.roles.is_empty());
    assert!(store.token_grant("hash-none").await.unwrap().is_none());
    let found = store.token_by_hash("hash-p1").await.unwrap().unwrap();
    assert_eq!(found.id, "p1");
    assert_eq!(
        found.expires_at.map(|t| t.timestamp()),
        personal.expires_at.map(|t| t.timestamp())
    );
    assert!(store.run_is_active("run-1").await.unwrap());
    assert!(!store.run_is_active("run-unknown").await.unwrap());
    let run = store.get_token("r1").await.unwrap().unwrap();
    assert_eq!(run.read_stacks, ["up"]);
    assert_eq!(
        (run.run.as_deref(), run.stack.as_deref()),
        (Some("run-1"), Some("net"))
    );
    assert!(store.token_by_hash("hash-none").await.unwrap().is_none());

    let mine = store
        .list_tokens(&TokenFilter::User("owner".into()))
        .await
        .unwrap();
    assert_eq!(
        mine.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["p1"]
    );
    let pools = store
        .list_tokens(&TokenFilter::Org {
            org: "acme".into(),
            kind: TokenKind::Pool,
        })
        .await
        .unwrap();
    assert_eq!(pools.len(), 1);
    assert_eq!(pools[0].pool.as_deref(), Some("edge"));

    let mut dup = token("p2", TokenKind::Personal, Some("owner"), None);
    dup.secret_hash = "hash-p1".into();
    assert!(matches!(
        store.create_token(&dup, Some(&a)).await,
        Err(StoreError::AlreadyExists(_))
    ));

    let r = audit(Some("acme"), "token.revoke", "token:p1");
    assert!(store.revoke_token("p1", Some(&r)).await.unwrap());
    assert!(!store.revoke_token("p1", Some(&r)).await.unwrap());
    let revoked = store.token_by_hash("hash-p1").await.unwrap().unwrap();
    assert!(revoked.revoked_at.is_some());
    assert!(!revoked.is_active(Utc::now()));
    assert!(!store.revoke_token("missing", Some(&r)).await.unwrap());
    store.revoke_token("r1", None).await.unwrap();
    assert!(
        !store.run_is_active("run-1").await.unwrap(),
        "a run with no live token has ended"
    );
}

fn full_spec() -> StackSpec {
    StackSpec::from_input(StackInput {
        id: "app".into(),
        name: Some("Application ünïcode".into()),
        repository: "ssh://git@git.example.com/infra.git".into(),
        branch: Some("release/2026".into()),
        path: Some("./stacks/app/".into()),
        watch_paths: vec!["modules/common".into(), "shared".into()],
        engine: Some("terraform".into()),
        engine_binary: Some("/usr/local/bin/terraform".into()),
        engine_version: Some("1.0.3".into()),
        tier: Some("large".into()),
        autodeploy: true,
        environment: Some("prod".into()),
        variables: BTreeMap::from([
            ("TF_VAR_region".into(), "eu-west-1".into()),
            ("DB_PASSWORD".into(), "secret://db/password".into()),
        ]),
        depends_on: vec![DependencyInput {
            stack: "net".into(),
            outputs: BTreeMap::from([("vpc_id".into(), "vpc".into())]),
            trigger_always: true,
        }],
        drift_detection: Some(DriftInput {
            schedule: "0 */6 * * *".into(),
            reconcile: true,
            timezone: Some("Europe/Berlin".into()),
        }),
        runner_pool: Some("edge".into()),
        aws: Some(bosun_core::stack::AwsInput {
            plan_role_arn: "arn:aws:iam::123456789012:role/app-plan".into(),
            apply_role_arn: Some("arn:aws:iam::123456789012:role/app-apply".into()),
            audience: None,
        }),
    })
    .unwrap()
}

pub async fn stacks_roundtrip_every_field(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let a = audit(Some("acme"), "stack.create", "stack");
    store
        .create_stack("acme", &spec("net", &[]), &a)
        .await
        .unwrap();
    let want = full_spec();
    let created = store.create_stack("acme", &want, &a).await.unwrap();
    let got = store.get_stack("acme", "app").await.unwrap().unwrap();
    assert_eq!(got.spec, want);
    assert_eq!(got.created_at, created.created_at);
    assert_eq!(got.org, "acme");
    assert!(store.get_stack("acme", "missing").await.unwrap().is_none());
    let dup = store.create_stack("acme", &want, &a).await;
    assert!(matches!(dup, Err(StoreError::AlreadyExists(_))), "{dup:?}");
    let no_org = store.create_stack("ghost-org", &spec("x1", &[]), &a).await;
    assert!(matches!(no_org, Err(StoreError::NotFound(_))), "{no_org:?}");
}

pub async fn stacks_list_pages_in_id_order(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let a = audit(Some("acme"), "stack.create", "stack");
    for id in ["s5", "s1", "s3", "s2", "s4"] {
        store
            .create_stack("acme", &spec(id, &[]), &a)
            .await
            .unwrap();
    }
    let ids = |v: Vec<StackRecord>| {
        v.into_iter()
            .map(|s| s.spec.id.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ids(store.list_stacks("acme", None, 2).await.unwrap()),
        ["s1", "s2"]
    );
    assert_eq!(
        ids(store.list_stacks("acme", Some("s2"), 2).await.unwrap()),
        ["s3", "s4"]
    );
    assert_eq!(
        ids(store.list_stacks("acme", Some("s4"), 2).await.unwrap()),
        ["s5"]
    );
    assert!(store
        .list_stacks("acme", Some("s5"), 2)
        .await
        .unwrap()
        .is_empty());
}

pub async fn stacks_update_and_delete(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let a = audit(Some("acme"), "stack.create", "stack");
    let created = store
        .create_stack("acme", &spec("web", &[]), &a)
        .await
        .unwrap();
    let mut changed = created.spec.clone();
    changed.name = "Web frontend".into();
    changed.autodeploy = true;
    let updated = store
        .update_stack(
            "acme",
            &changed,
            &audit(Some("acme"), "stack.update", "stack:web"),
        )
        .await
        .unwrap();
    assert_eq!(updated.created_at, created.created_at);
    assert!(updated.updated_at >= created.updated_at);
    let got = store.get_stack("acme", "web").await.unwrap().unwrap();
    assert_eq!(got.spec.name, "Web frontend");
    assert_eq!(got.spec.id.as_str(), "web");
    assert!(got.spec.autodeploy);

    let ghost = store.update_stack("acme", &spec("ghost", &[]), &a).await;
    assert!(matches!(ghost, Err(StoreError::NotFound(_))), "{ghost:?}");

    let d = audit(Some("acme"), "stack.delete", "stack:web");
    store.delete_stack("acme", "web", false, &d).await.unwrap();
    assert!(store.get_stack("acme", "web").await.unwrap().is_none());
    let again = store.delete_stack("acme", "web", false, &d).await;
    assert!(matches!(again, Err(StoreError::NotFound(_))), "{again:?}");
}

pub async fn stacks_isolated_by_org(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    seed_org(&*store, "globex").await;
    let a = audit(Some("acme"), "stack.create", "stack");
    store
        .create_stack("acme", &spec("net", &[]), &a)
        .await
        .unwrap();
    let mut other = spec("net", &[]);
    other.name = "Globex net".into();
    store.create_stack("globex", &other, &a).await.unwrap();
    assert_eq!(
        store
            .get_stack("acme", "net")
            .await
            .unwrap()
            .unwrap()
            .spec
            .name,
        "net"
    );
    assert_eq!(
        store
            .get_stack("globex", "net")
            .await
            .unwrap()
            .unwrap()
            .spec
            .name,
        "Globex net"
    );
    // An upstream in another org is not an upstream.
    store
        .create_stack("globex", &spec("only-globex", &[]), &a)
        .await
        .unwrap();
    let cross = store
        .create_stack("acme", &spec("app", &["only-globex"]), &a)
        .await;
    assert!(
        matches!(cross, Err(StoreError::UnknownUpstream(_))),
        "{cross:?}"
    );
    store
        .delete_stack(
            "acme",
            "net",
            false,
            &audit(Some("acme"), "stack.delete", "net"),
        )
        .await
        .unwrap();
    assert!(store.get_stack("globex", "net").await.unwrap().is_some());
    assert_eq!(store.list_stacks("acme", None, 10).await.unwrap().len(), 0);
}

pub async fn dependencies_enforced(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let a = audit(Some("acme"), "stack.create", "stack");
    let unknown = store.create_stack("acme", &spec("app", &["net"]), &a).await;
    assert!(
        matches!(unknown, Err(StoreError::UnknownUpstream(ref s)) if s == "net"),
        "{unknown:?}"
    );
    store
        .create_stack("acme", &spec("net", &[]), &a)
        .await
        .unwrap();
    store
        .create_stack("acme", &spec("db", &["net"]), &a)
        .await
        .unwrap();
    store
        .create_stack("acme", &spec("app", &["db", "net"]), &a)
        .await
        .unwrap();

    // net → app would close app → db → net → app.
    let cycle = store.update_stack("acme", &spec("net", &["app"]), &a).await;
    match cycle {
        Err(StoreError::DependencyCycle(path)) => {
            assert_eq!(path.first(), path.last());
            assert!(path.contains(&"net".to_string()) && path.contains(&"app".to_string()));
        }
        other => panic!("expected a cycle, got {other:?}"),
    }
    // The refused update changed nothing.
    assert!(store
        .get_stack("acme", "net")
        .await
        .unwrap()
        .unwrap()
        .spec
        .depends_on
        .is_empty());

    let d = audit(Some("acme"), "stack.delete", "stack:net");
    match store.delete_stack("acme", "net", false, &d).await {
        Err(StoreError::HasDependents { dependents, .. }) => assert_eq!(dependents, ["app", "db"]),
        other => panic!("expected dependents, got {other:?}"),
    }
    store
        .update_stack("acme", &spec("app", &["db"]), &a)
        .await
        .unwrap();
    store.delete_stack("acme", "app", false, &d).await.unwrap();
    store.delete_stack("acme", "db", false, &d).await.unwrap();
    store.delete_stack("acme", "net", false, &d).await.unwrap();
}

pub async fn audit_filtered_by_actor_action_and_target(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    seed_org(&*store, "globex").await;
    // One audit record per stack created, with the actor, action and target given.
    let entries = [
        ("acme", "s1", "user:alice", "state.force_unlock", "stack:s1"),
        ("acme", "s2", "user:bob", "state.lock", "stack:s2"),
        ("acme", "s3", "user:alice", "statefile.read", "stack:s3"),
        ("acme", "s4", "user:bob", "state_x.y", "stack:s4"),
        ("acme", "s5", "user:alice", "stateAx.y", "stack:s5"),
        ("globex", "s1", "user:alice", "state.lock", "stack:s1"),
    ];
    let mut seqs = Vec::new();
    for (org, stack, actor, action, target) in entries {
        let mut a = audit(Some(org), action, target);
        a.actor = actor.into();
        store
            .create_stack(org, &spec(stack, &[]), &a)
            .await
            .unwrap();
        seqs.push(store.list_audit(Some(org), None, 1).await.unwrap()[0].seq);
    }
    let find = |org: Option<&'static str>,
                actor: Option<&str>,
                action: Option<&str>,
                target: Option<&str>,
                before: Option<i64>,
                limit: u32| {
        let store = store.clone();
        let filter = AuditFilter {
            actor: actor.map(String::from),
            action: action.map(String::from),
            target: target.map(String::from),
        };
        async move {
            store
                .search_audit(org, &filter, before, limit)
                .await
                .unwrap()
                .into_iter()
                .map(|r| r.seq)
                .collect::<Vec<i64>>()
        }
    };
    let s = |i: usize| seqs[i - 1];
    // Newest first; each filter alone.
    assert_eq!(
        find(Some("acme"), Some("user:alice"), None, None, None, 100).await,
        [s(5), s(3), s(1)]
    );
    // An action matches itself and the actions under it, never a longer word.
    assert_eq!(
        find(Some("acme"), None, Some("state"), None, None, 100).await,
        [s(2), s(1)]
    );
    assert_eq!(
        find(Some("acme"), None, Some("state.lock"), None, None, 100).await,
        [s(2)]
    );
    // `_` in a filter is a character, not a wildcard.
    assert_eq!(
        find(Some("acme"), None, Some("state_x"), None, None, 100).await,
        [s(4)]
    );
    assert_eq!(
        find(Some("acme"), None, None, Some("stack:s1"), None, 100).await,
        [s(1)]
    );
    // Together, every one must match; across orgs without one.
    assert_eq!(
        find(
            Some("acme"),
            Some("user:alice"),
            Some("state"),
            None,
            None,
            100
        )
        .await,
        [s(1)]
    );
    assert_eq!(
        find(None, Some("user:alice"), None, Some("stack:s1"), None, 100).await,
        [s(6), s(1)]
    );
    // Paged like the whole log.
    assert_eq!(
        find(Some("acme"), None, Some("state"), None, None, 1).await,
        [s(2)]
    );
    assert_eq!(
        find(Some("acme"), None, Some("state"), None, Some(s(2)), 100).await,
        [s(1)]
    );
    // Nothing matches: empty, not an error.
    assert!(
        find(Some("acme"), Some("user:nobody"), None, None, None, 100)
            .await
            .is_empty()
    );
}

pub async fn audit_written_with_each_change(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    seed_org(&*store, "globex").await;
    let before = store
        .list_audit(Some("acme"), None, 100)
        .await
        .unwrap()
        .len();
    store
        .create_stack(
            "acme",
            &spec("net", &[]),
            &audit(Some("acme"), "stack.create", "stack:net"),
        )
        .await
        .unwrap();
    store
        .delete_stack(
            "acme",
            "net",
            false,
            &audit(Some("acme"), "stack.delete", "stack:net"),
        )
        .await
        .unwrap();
    let log = store.list_audit(Some("acme"), None, 100).await.unwrap();
    assert_eq!(log.len(), before + 2);
    // Newest first, strictly decreasing sequence.
    assert_eq!(log[0].entry.action, "stack.delete");
    assert_eq!(log[1].entry.action, "stack.create");
    assert!(log.windows(2).all(|w| w[0].seq > w[1].seq));
    assert_eq!(log[0].entry.detail, json!({"k": "v"}));
    assert_eq!(log[0].entry.token_id.as_deref(), Some("tok-test"));
    assert!(log.iter().all(|r| r.entry.org.as_deref() == Some("acme")));
    let page = store
        .list_audit(Some("acme"), Some(log[0].seq), 1)
        .await
        .unwrap();
    assert_eq!(page[0].seq, log[1].seq);
    let all = store.list_audit(None, None, 1000).await.unwrap();
    assert!(all.iter().any(|r| r.entry.org.as_deref() == Some("globex")));
    assert!(all.iter().any(|r| r.entry.org.is_none()));
}

pub async fn failed_writes_leave_nothing(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let before = store.list_audit(None, None, 1000).await.unwrap().len();
    let a = audit(Some("acme"), "stack.create", "stack:app");
    assert!(store
        .create_stack("acme", &spec("app", &["missing"]), &a)
        .await
        .is_err());
    assert!(store.get_stack("acme", "app").await.unwrap().is_none());
    assert!(store.delete_stack("acme", "app", false, &a).await.is_err());
    assert!(store
        .set_member("acme", "ghost", Role::Admin, &a)
        .await
        .is_err());
    assert_eq!(
        store.list_audit(None, None, 1000).await.unwrap().len(),
        before
    );
}

pub async fn concurrent_writes_all_land(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let mut tasks = Vec::new();
    for i in 0..24 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("stack-{i:02}");
            store
                .create_stack(
                    "acme",
                    &spec(&id, &[]),
                    &audit(Some("acme"), "stack.create", &id),
                )
                .await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(
        store.list_stacks("acme", None, 100).await.unwrap().len(),
        24
    );
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

pub async fn state_versions_roundtrip(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let head = store.state_head("acme", "net").await.unwrap();
    assert!(head.current.is_none() && head.lock.is_none());
    assert!(store
        .state_version("acme", "net", None)
        .await
        .unwrap()
        .is_none());
    let alice = Writer::User("alice".into());
    let w1 = state_write(alice.clone(), WriterLiveness::Person, None, 1, "L");
    let v1 = store.write_state("acme", "net", &w1, None).await.unwrap();
    assert_eq!(
        (v1.version, v1.serial, v1.current, v1.late_write),
        (1, 1, true, false)
    );
    assert_eq!(v1.size, w1.body.len() as u64);
    assert_eq!(v1.checksum.len(), 64);
    assert_eq!(v1.writer, alice);
    assert_eq!(v1.outputs["name"].value, json!("v1"));
    assert!(v1.outputs["pw"].sensitive);
    let w2 = state_write(
        Writer::Run("r1".into()),
        WriterLiveness::LiveRun,
        None,
        2,
        "L",
    );
    store.write_state("acme", "net", &w2, None).await.unwrap();
    let (cur, body) = store
        .state_version("acme", "net", None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((cur.version, cur.current), (2, true));
    assert_eq!(body, w2.body);
    let (old, old_body) = store
        .state_version("acme", "net", Some(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((old.version, old.current), (1, false));
    assert_eq!(old_body, w1.body);
    let list = store
        .list_state_versions("acme", "net", None, 10)
        .await
        .unwrap();
    assert_eq!(list.iter().map(|v| v.version).collect::<Vec<_>>(), [2, 1]);
    let page = store
        .list_state_versions("acme", "net", Some(2), 10)
        .await
        .unwrap();
    assert_eq!(page.iter().map(|v| v.version).collect::<Vec<_>>(), [1]);
    assert!(store
        .state_version("acme", "net", Some(9))
        .await
        .unwrap()
        .is_none());
}

pub async fn state_lock_rules(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let alice = Writer::User("alice".into());
    let run = Writer::Run("r1".into());
    store
        .lock_state("acme", "net", &state_lock("L1", alice.clone()))
        .await
        .unwrap();
    // Re-locking with the same id by the holder is idempotent; anyone else sees the holder.
    store
        .lock_state("acme", "net", &state_lock("L1", alice.clone()))
        .await
        .unwrap();
    match store
        .lock_state("acme", "net", &state_lock("L2", run.clone()))
        .await
    {
        Err(StoreError::StateLocked(l)) => assert_eq!((l.id.as_str(), &l.holder), ("L1", &alice)),
        other => panic!("expected StateLocked, got {other:?}"),
    }
    let head = store.state_head("acme", "net").await.unwrap();
    assert_eq!(
        head.lock.as_ref().map(|l| l.who.as_str()),
        Some("alice@laptop")
    );

    // Writes: only the holder, with its lock id.
    let w = state_write(run.clone(), WriterLiveness::LiveRun, None, 1, "L");
    assert!(matches!(
        store.write_state("acme", "net", &w, None).await,
        Err(StoreError::StateRefused(WriteRefusal::Locked(_)))
    ));
    let w = state_write(alice.clone(), WriterLiveness::Person, Some("L1"), 1, "L");
    store.write_state("acme", "net", &w, None).await.unwrap();

    let a = audit(Some("acme"), "state.force_unlock", "stack:net");
    let before = store
        .list_audit(Some("acme"), None, 100)
        .await
        .unwrap()
        .len();
    assert!(matches!(
        store.unlock_state("acme", "net", &UnlockRequest::Holder { id: "nope".into() }, &a).await.unwrap(),
        UnlockDecision::Mismatch(l) if l.id == "L1"
    ));
    assert!(matches!(
        store
            .unlock_state("acme", "net", &UnlockRequest::Force { id: "L1".into() }, &a)
            .await
            .unwrap(),
        UnlockDecision::Release { forced: true, .. }
    ));
    let log = store.list_audit(Some("acme"), None, 100).await.unwrap();
    assert_eq!(log.len(), before + 1, "a forced release is audited");
    assert_eq!(log[0].entry.detail["released"]["lock_id"], json!("L1"));
    assert!(store
        .state_head("acme", "net")
        .await
        .unwrap()
        .lock
        .is_none());
    assert_eq!(
        store
            .unlock_state("acme", "net", &UnlockRequest::ForceAny, &a)
            .await
            .unwrap(),
        UnlockDecision::NotLocked
    );
    // The holder's own unlock is not a force and is not audited.
    store
        .lock_state("acme", "net", &state_lock("L3", run.clone()))
        .await
        .unwrap();
    assert!(matches!(
        store
            .unlock_state(
                "acme",
                "net",
                &UnlockRequest::Holder { id: "L3".into() },
                &a
            )
            .await
            .unwrap(),
        UnlockDecision::Release { forced: false, .. }
    ));
    assert_eq!(
        store
            .list_audit(Some("acme"), None, 100)
            .await
            .unwrap()
            .len(),
        before + 1
    );
}

pub async fn state_serial_and_lineage_guard(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let alice = Writer::User("alice".into());
    store
        .write_state(
            "acme",
            "net",
            &state_write(alice.clone(), WriterLiveness::Person, None, 5, "L"),
            None,
        )
        .await
        .unwrap();
    let back = state_write(alice.clone(), WriterLiveness::Person, None, 4, "L");
    assert!(matches!(
        store.write_state("acme", "net", &back, None).await,
        Err(StoreError::StateRefused(
            WriteRefusal::SerialBackwards { .. }
        ))
    ));
    let other = state_write(alice.clone(), WriterLiveness::Person, None, 6, "OTHER");
    assert!(matches!(
        store.write_state("acme", "net", &other, None).await,
        Err(StoreError::StateRefused(
            WriteRefusal::LineageChanged { .. }
        ))
    ));
    assert_eq!(
        store
            .list_state_versions("acme", "net", None, 10)
            .await
            .unwrap()
            .len(),
        1,
        "refused writes store nothing"
    );
    let mut forced = back.clone();
    forced.request.force = true;
    let a = audit(Some("acme"), "state.force_write", "stack:net");
    let v = store
        .write_state("acme", "net", &forced, Some(&a))
        .await
        .unwrap();
    assert!(v.forced && v.current);
    assert_eq!(
        store.list_audit(Some("acme"), None, 1).await.unwrap()[0]
            .entry
            .action,
        "state.force_write"
    );
}

pub async fn state_late_writes_kept_and_flagged(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let bob = Writer::User("bob".into());
    let run = Writer::Run("r-dead".into());
    store
        .write_state(
            "acme",
            "net",
            &state_write(bob.clone(), WriterLiveness::Person, None, 3, "L"),
            None,
        )
        .await
        .unwrap();
    store
        .lock_state("acme", "net", &state_lock("BOB", bob.clone()))
        .await
        .unwrap();
    // Someone else holds the lock: kept, flagged, not current.
    let late = state_write(run.clone(), WriterLiveness::EndedRun, Some("OLD"), 4, "L");
    let v = store.write_state("acme", "net", &late, None).await.unwrap();
    assert!(v.late_write && !v.current);
    assert_eq!(
        store
            .state_head("acme", "net")
            .await
            .unwrap()
            .current
            .unwrap()
            .serial,
        3
    );
    // Nobody holds it: the late write becomes current (it is what happened), flagged.
    store
        .unlock_state(
            "acme",
            "net",
            &UnlockRequest::Holder { id: "BOB".into() },
            &audit(Some("acme"), "x", "y"),
        )
        .await
        .unwrap();
    let late2 = state_write(run, WriterLiveness::EndedRun, None, 5, "L");
    let v = store
        .write_state("acme", "net", &late2, None)
        .await
        .unwrap();
    assert!(v.late_write && v.current);
    let versions = store
        .list_state_versions("acme", "net", None, 10)
        .await
        .unwrap();
    assert_eq!(versions.iter().filter(|v| v.late_write).count(), 2);
}

pub async fn state_recovered_writes_kept_once_and_flagged(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let bob = Writer::User("bob".into());
    let run = Writer::Run("r-cut-off".into());
    store
        .write_state(
            "acme",
            "net",
            &state_write(bob.clone(), WriterLiveness::Person, None, 3, "L"),
            None,
        )
        .await
        .unwrap();
    let recovered = |serial, lineage: &str| NewStateVersion {
        recovery_reason: Some("the server was away".into()),
        token_id: None,
        ..state_write(run.clone(), WriterLiveness::Recovery, None, serial, lineage)
    };
    // The run's state follows the current one: current, flagged with its reason.
    let v = store
        .write_state("acme", "net", &recovered(4, "L"), None)
        .await
        .unwrap();
    assert!(v.current && !v.late_write);
    assert_eq!(v.recovery_reason.as_deref(), Some("the server was away"));
    // Delivered again (the runner never heard the answer): the same version, no new one.
    let again = store
        .write_state("acme", "net", &recovered(4, "L"), None)
        .await
        .unwrap();
    assert_eq!(again.version, v.version);
    assert_eq!(
        store
            .list_state_versions("acme", "net", None, 10)
            .await
            .unwrap()
            .len(),
        2
    );
    // Behind the current serial, or under someone else's lock: kept beside it, never
    // refused, never current.
    store
        .write_state(
            "acme",
            "net",
            &state_write(bob.clone(), WriterLiveness::Person, None, 9, "L"),
            None,
        )
        .await
        .unwrap();
    let behind = store
        .write_state("acme", "net", &recovered(5, "L"), None)
        .await
        .unwrap();
    assert!(!behind.current && behind.recovery_reason.is_some());
    store
        .lock_state("acme", "net", &state_lock("BOB", bob.clone()))
        .await
        .unwrap();
    let locked = store
        .write_state("acme", "net", &recovered(10, "L"), None)
        .await
        .unwrap();
    assert!(!locked.current);
    let head = store.state_head("acme", "net").await.unwrap();
    assert_eq!(head.current.unwrap().serial, 9);
    // Ordinary versions carry no reason.
    let versions = store
        .list_state_versions("acme", "net", None, 10)
        .await
        .unwrap();
    assert_eq!(
        versions
            .iter()
            .filter(|v| v.recovery_reason.is_some())
            .map(|v| v.serial)
            .collect::<Vec<_>>(),
        vec![10, 5, 4]
    );
}

pub async fn state_needs_a_stack(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let w = state_write(
        Writer::User("a".into()),
        WriterLiveness::Person,
        None,
        1,
        "L",
    );
    assert!(matches!(
        store.write_state("acme", "ghost", &w, None).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store
            .lock_state("acme", "ghost", &state_lock("L", Writer::User("a".into())))
            .await,
        Err(StoreError::NotFound(_))
    ));
    // Deleting a stack with state needs the explicit flag, then removes the state too.
    seed_stack(&*store, "gone").await;
    store.write_state("acme", "gone", &w, None).await.unwrap();
    let kept = store
        .delete_stack(
            "acme",
            "gone",
            false,
            &audit(Some("acme"), "stack.delete", "gone"),
        )
        .await;
    assert!(
        matches!(kept, Err(StoreError::HasState { versions: 1, .. })),
        "{kept:?}"
    );
    store
        .delete_stack(
            "acme",
            "gone",
            true,
            &audit(Some("acme"), "stack.delete", "gone"),
        )
        .await
        .unwrap();
    seed_stack(&*store, "gone").await;
    assert!(store
        .state_version("acme", "gone", None)
        .await
        .unwrap()
        .is_none());
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

pub async fn runs_lease_fence_and_finish(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let r = runner(&*store, "runner-1").await;
    let run = store
        .create_run(&new_run("run-1", "net", RunKind::Tracked), None)
        .await
        .unwrap();
    assert_eq!((run.state, run.needs_lease), (RunState::Queued, true));
    let leased = store.lease_run(&r).await.unwrap().unwrap();
    assert_eq!(
        (leased.state, leased.fencing, leased.leased),
        (RunState::Preparing, 1, true)
    );
    assert!(
        store.lease_run(&r).await.unwrap().is_none(),
        "one lease per run"
    );
    // A stale fencing number is refused everywhere.
    assert!(matches!(
        store.heartbeat("run-1", 0).await,
        Err(StoreError::Fenced { .. })
    ));
    assert!(matches!(
        store.run_event("run-1", &ev(Event::PhaseStarted, 7)).await,
        Err(StoreError::Fenced { .. })
    ));
    assert!(!store.heartbeat("run-1", 1).await.unwrap());
    let mut started = ev(Event::PhaseStarted, 1);
    started.update.commit = Some("abc123".into());
    let out = store.run_event("run-1", &started).await.unwrap();
    assert_eq!(
        (out.run.state, out.run.commit.as_deref()),
        (RunState::Planning, Some("abc123"))
    );
    let mut planned = ev(Event::PlanFinished { changes: true }, 1);
    planned.update.plan_summary = Some(json!({"has_changes": true}));
    let out = store.run_event("run-1", &planned).await.unwrap();
    assert_eq!(
        (out.run.state, out.run.leased),
        (RunState::Unconfirmed, false)
    );
    assert!(
        matches!(
            store.heartbeat("run-1", 1).await,
            Err(StoreError::Fenced { .. })
        ),
        "the plan lease ended"
    );
    let confirm = RunEventInput {
        event: Event::Confirm,
        fencing: None,
        update: RunUpdate::default(),
        audit: None,
    };
    let out = store.run_event("run-1", &confirm).await.unwrap();
    assert_eq!(
        (out.run.state, out.run.phase, out.run.needs_lease),
        (RunState::Applying, Phase::Apply, true)
    );
    let leased = store.lease_run(&r).await.unwrap().unwrap();
    assert_eq!((leased.state, leased.fencing), (RunState::Applying, 2));
    store
        .run_event("run-1", &ev(Event::PhaseStarted, 2))
        .await
        .unwrap();
    let out = store
        .run_event("run-1", &ev(Event::ApplyFinished, 2))
        .await
        .unwrap();
    assert_eq!(out.run.state, RunState::Finished);
    // An invalid event is refused, and the plan summary and phases were kept.
    assert!(matches!(
        store.run_event("run-1", &confirm).await,
        Err(StoreError::InvalidTransition(_))
    ));
    let run = store.get_run("run-1").await.unwrap().unwrap();
    assert_eq!(run.plan_summary, Some(json!({"has_changes": true})));
    let phases: Vec<RunState> = store
        .run_phases("run-1")
        .await
        .unwrap()
        .iter()
        .map(|p| p.state)
        .collect();
    assert_eq!(
        phases,
        [
            RunState::Queued,
            RunState::Preparing,
            RunState::Planning,
            RunState::Unconfirmed,
            RunState::Applying
        ]
    );
    assert!(store
        .run_phases("run-1")
        .await
        .unwrap()
        .iter()
        .all(|p| p.ended_at.is_some()));
    let listed = store
        .list_runs("acme", Some("net"), None, 10)
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    // After the last run, nothing; after a run that is not the org's, nothing either
    // (the list never restarts from the newest).
    assert!(store
        .list_runs("acme", Some("net"), Some(&listed[0].id), 10)
        .await
        .unwrap()
        .is_empty());
    assert!(store
        .list_runs("acme", Some("net"), Some("run-nope"), 10)
        .await
        .unwrap()
        .is_empty());
    assert!(store
        .list_runs("globex", None, Some(&listed[0].id), 10)
        .await
        .unwrap()
        .is_empty());
}

pub async fn runs_serialize_tracked_and_wait_for_locks(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let r = runner(&*store, "runner-1").await;
    store
        .create_run(&new_run("t1", "net", RunKind::Tracked), None)
        .await
        .unwrap();
    store
        .create_run(&new_run("t2", "net", RunKind::Tracked), None)
        .await
        .unwrap();
    store
        .create_run(&new_run("p1", "net", RunKind::Proposed), None)
        .await
        .unwrap();
    // Someone (a laptop) holds the lock: tracked runs wait and name the holder; the
    // proposed run goes ahead.
    store
        .lock_state(
            "acme",
            "net",
            &state_lock("LAPTOP", Writer::User("alice".into())),
        )
        .await
        .unwrap();
    let got = store.lease_run(&r).await.unwrap().unwrap();
    assert_eq!(got.id, "p1");
    assert!(store.lease_run(&r).await.unwrap().is_none());
    let t1 = store.get_run("t1").await.unwrap().unwrap();
    assert_eq!(
        t1.blocked_by.as_ref().map(|b| b["Who"].clone()),
        Some(json!("alice@laptop"))
    );
    store
        .unlock_state(
            "acme",
            "net",
            &UnlockRequest::Holder {
                id: "LAPTOP".into(),
            },
            &audit(Some("acme"), "x", "y"),
        )
        .await
        .unwrap();
    // One tracked run at a time, oldest first.
    assert_eq!(store.lease_run(&r).await.unwrap().unwrap().id, "t1");
    assert!(
        store.lease_run(&r).await.unwrap().is_none(),
        "t2 waits for t1"
    );
    assert!(store
        .get_run("t1")
        .await
        .unwrap()
        .unwrap()
        .blocked_by
        .is_none());
    store
        .run_event("t1", &ev(Event::PhaseFailed, 1))
        .await
        .unwrap();
    assert_eq!(store.lease_run(&r).await.unwrap().unwrap().id, "t2");
}

pub async fn runs_stale_and_requeue(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let r = runner(&*store, "runner-1").await;
    store
        .create_run(&new_run("a", "net", RunKind::Proposed), None)
        .await
        .unwrap();
    store
        .create_run(&new_run("b", "net", RunKind::Tracked), None)
        .await
        .unwrap();
    let a = store.lease_run(&r).await.unwrap().unwrap();
    let b = store.lease_run(&r).await.unwrap().unwrap();
    store
        .run_event(&b.id, &ev(Event::PhaseStarted, b.fencing))
        .await
        .unwrap();
    // b holds the state lock when its runner dies.
    store
        .lock_state("acme", "net", &state_lock("RUN-B", Writer::Run("b".into())))
        .await
        .unwrap();
    let stale = store
        .stale_runs(Utc::now() + Duration::seconds(1))
        .await
        .unwrap();
    assert_eq!(stale.len(), 2);
    assert!(store
        .stale_runs(Utc::now() - Duration::seconds(60))
        .await
        .unwrap()
        .is_empty());
    // Never started: back to the queue, leasable again with a new fencing number.
    let out = store
        .run_event(
            &a.id,
            &RunEventInput {
                event: Event::Requeue,
                fencing: None,
                update: RunUpdate::default(),
                audit: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (out.run.state, out.run.needs_lease),
        (RunState::Queued, true)
    );
    let again = store.lease_run(&r).await.unwrap().unwrap();
    assert_eq!((again.id.as_str(), again.fencing), ("a", a.fencing + 1));
    // Started: force-failed with the reason, its lock released and recorded.
    let out = store
        .run_event(
            &b.id,
            &RunEventInput {
                event: Event::Stale,
                fencing: None,
                update: RunUpdate::default(),
                audit: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(out.run.state, RunState::ForceFailed);
    assert!(out
        .run
        .reason
        .as_deref()
        .unwrap()
        .starts_with("runner timed out or never reported"));
    assert!(out.run.reason.as_deref().unwrap().contains("RUN-B"));
    assert_eq!(out.released_lock.map(|l| l.id), Some("RUN-B".into()));
    assert!(store
        .state_head("acme", "net")
        .await
        .unwrap()
        .lock
        .is_none());
    let log = store.list_audit(Some("acme"), None, 5).await.unwrap();
    assert_eq!(log[0].entry.action, "state.lock_released");
    // The dead runner cannot move it any more.
    assert!(store.heartbeat(&b.id, b.fencing).await.is_err());
    store.flag_late_write(&b.id).await.unwrap();
    // A stack with an open run cannot be deleted under it.
    let open = store
        .delete_stack(
            "acme",
            "net",
            true,
            &audit(Some("acme"), "stack.delete", "net"),
        )
        .await;
    assert!(
        matches!(open, Err(StoreError::HasOpenRuns { ref runs, .. }) if runs == &["a".to_string()]),
        "{open:?}"
    );
    let m = store.metrics().await.unwrap();
    assert_eq!(m.runs.get(&kind_state("tracked", "force_failed")), Some(&1));
    assert_eq!(m.runs.get(&kind_state("proposed", "preparing")), Some(&1));
    assert!(store.get_run(&b.id).await.unwrap().unwrap().late_write);
}

pub async fn run_logs_are_idempotent(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let r = runner(&*store, "runner-1").await;
    store
        .create_run(&new_run("l", "net", RunKind::Proposed), None)
        .await
        .unwrap();
    let run = store.lease_run(&r).await.unwrap().unwrap();
    assert_eq!(store.next_log_seq("l").await.unwrap(), 0);
    store
        .append_logs("l", run.fencing, &[(0, "a".into()), (1, "b".into())])
        .await
        .unwrap();
    // A resend after a lost reply: no duplicates, first copy kept.
    store
        .append_logs("l", run.fencing, &[(1, "B!".into()), (2, "c".into())])
        .await
        .unwrap();
    assert_eq!(
        store.read_logs("l", None, 10).await.unwrap(),
        vec![
            (0, "a".to_string()),
            (1, "b".to_string()),
            (2, "c".to_string())
        ]
    );
    assert_eq!(store.read_logs("l", Some(1), 10).await.unwrap().len(), 1);
    assert_eq!(store.next_log_seq("l").await.unwrap(), 3);
    assert!(matches!(
        store
            .append_logs("l", run.fencing + 1, &[(3, "x".into())])
            .await,
        Err(StoreError::Fenced { .. })
    ));
    store.put_run_plan("l", run.fencing, b"PLAN").await.unwrap();
    assert_eq!(
        store.get_run_plan("l").await.unwrap().as_deref(),
        Some(&b"PLAN"[..])
    );
}

// ---- VCS ----

fn repo_spec(id: &str, repository: &str, branch: &str) -> StackSpec {
    StackSpec::from_input(StackInput {
        id: id.into(),
        repository: repository.into(),
        branch: Some(branch.into()),
        ..Default::default()
    })
    .unwrap()
}

fn stack_ids(stacks: &[StackRecord]) -> Vec<(String, String)> {
    stacks
        .iter()
        .map(|s| (s.org.clone(), s.spec.id.to_string()))
        .collect()
}

fn pair(org: &str, stack: &str) -> (String, String) {
    (org.to_string(), stack.to_string())
}

pub async fn vcs_stacks_by_repository_key(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    seed_org(&*store, "globex").await;
    let a = audit(Some("acme"), "stack.create", "stack");
    for (org, id, repo, branch) in [
        ("acme", "net", "github:Acme/Infra", "main"),
        ("acme", "app", "github:acme/infra", "release"),
        ("globex", "web", "github:ACME/infra.git", "main"),
        ("acme", "other", "github:acme/other", "main"),
        ("acme", "plain", "https://git.example.com/Infra.git", "main"),
        ("globex", "plain", "file:///srv/git/infra", "trunk"),
    ] {
        store
            .create_stack(org, &repo_spec(id, repo, branch), &a)
            .await
            .unwrap();
    }
    let infra = store
        .stacks_for_repository("github:acme/infra", None)
        .await
        .unwrap();
    assert_eq!(
        stack_ids(&infra),
        [
            pair("acme", "app"),
            pair("acme", "net"),
            pair("globex", "web")
        ]
    );
    // The stored spec keeps the repository as written.
    assert_eq!(infra[1].spec.repository.to_string(), "github:Acme/Infra");
    assert_eq!(
        stack_ids(
            &store
                .stacks_for_repository("github:acme/infra", Some("main"))
                .await
                .unwrap()
        ),
        [pair("acme", "net"), pair("globex", "web")]
    );
    assert_eq!(
        stack_ids(
            &store
                .stacks_for_repository("github:Acme/INFRA", Some("release"))
                .await
                .unwrap()
        ),
        [pair("acme", "app")]
    );
    assert!(store
        .stacks_for_repository("github:acme/infra", Some("dev"))
        .await
        .unwrap()
        .is_empty());
    // Git URLs are keyed as written.
    assert_eq!(
        stack_ids(
            &store
                .stacks_for_repository("https://git.example.com/Infra.git", None)
                .await
                .unwrap()
        ),
        [pair("acme", "plain")]
    );
    assert!(store
        .stacks_for_repository("https://git.example.com/infra.git", None)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        stack_ids(&store.git_remote_stacks().await.unwrap()),
        [pair("acme", "plain"), pair("globex", "plain")]
    );

    // Changing a stack's repository moves it to the new key.
    store
        .update_stack(
            "acme",
            &repo_spec("other", "github:ACME/Infra", "main"),
            &audit(Some("acme"), "stack.update", "stack:other"),
        )
        .await
        .unwrap();
    assert!(store
        .stacks_for_repository("github:acme/other", None)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        stack_ids(
            &store
                .stacks_for_repository("github:acme/infra", Some("main"))
                .await
                .unwrap()
        ),
        [
            pair("acme", "net"),
            pair("acme", "other"),
            pair("globex", "web")
        ]
    );
    store
        .update_stack(
            "acme",
            &repo_spec("plain", "github:acme/moved", "main"),
            &audit(Some("acme"), "stack.update", "stack:plain"),
        )
        .await
        .unwrap();
    assert_eq!(
        stack_ids(&store.git_remote_stacks().await.unwrap()),
        [pair("globex", "plain")]
    );
    store
        .delete_stack(
            "acme",
            "net",
            false,
            &audit(Some("acme"), "stack.delete", "stack:net"),
        )
        .await
        .unwrap();
    assert_eq!(
        stack_ids(
            &store
                .stacks_for_repository("github:acme/infra", Some("main"))
                .await
                .unwrap()
        ),
        [pair("acme", "other"), pair("globex", "web")]
    );
}

fn repos(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

pub async fn vcs_installation_lifecycle(store: Arc<dyn Store>) {
    let before = store.list_audit(None, None, 1000).await.unwrap().len();
    let a = audit(None, "github.installation", "installation");
    let change = |c: InstallationChange| {
        let store = store.clone();
        let a = a.clone();
        async move { store.apply_installation(&c, &a).await.unwrap() }
    };
    change(InstallationChange::Created {
        installation: 1,
        account: "Acme".into(),
        repositories: repos(&["Acme/Infra", "acme/web"]),
    })
    .await;
    change(InstallationChange::Created {
        installation: 2,
        account: "globex".into(),
        repositories: repos(&["globex/site"]),
    })
    .await;
    let b = store.github_binding("ACME/INFRA").await.unwrap().unwrap();
    assert_eq!(
        (
            b.repository.as_str(),
            b.installation,
            b.account.as_str(),
            b.suspended
        ),
        ("acme/infra", 1, "Acme", false)
    );
    assert!(store.github_binding("acme/nope").await.unwrap().is_none());

    // A re-sync replaces what was known of the installation.
    change(InstallationChange::Created {
        installation: 1,
        account: "Acme".into(),
        repositories: repos(&["acme/web", "acme/new"]),
    })
    .await;
    assert!(store.github_binding("acme/infra").await.unwrap().is_none());
    assert!(store.github_binding("acme/new").await.unwrap().is_some());
    assert!(store.github_binding("acme/web").await.unwrap().is_some());

    change(InstallationChange::RepositoriesAdded {
        installation: 1,
        account: "Acme".into(),
        repositories: repos(&["Acme/Extra"]),
    })
    .await;
    assert_eq!(
        store
            .github_binding("acme/extra")
            .await
            .unwrap()
            .unwrap()
            .installation,
        1
    );
    // Another installation cannot remove what it does not cover.
    change(InstallationChange::RepositoriesRemoved {
        installation: 2,
        repositories: repos(&["acme/extra"]),
    })
    .await;
    assert!(store.github_binding("acme/extra").await.unwrap().is_some());
    change(InstallationChange::RepositoriesRemoved {
        installation: 1,
        repositories: repos(&["ACME/extra"]),
    })
    .await;
    assert!(store.github_binding("acme/extra").await.unwrap().is_none());

    change(InstallationChange::Suspended {
        installation: 1,
        suspended: true,
    })
    .await;
    for repo in ["acme/web", "acme/new"] {
        assert!(store.github_binding(repo).await.unwrap().unwrap().suspended);
    }
    assert!(
        !store
            .github_binding("globex/site")
            .await
            .unwrap()
            .unwrap()
            .suspended
    );
    change(InstallationChange::Suspended {
        installation: 1,
        suspended: false,
    })
    .await;
    assert!(
        !store
            .github_binding("acme/web")
            .await
            .unwrap()
            .unwrap()
            .suspended
    );

    change(InstallationChange::Deleted { installation: 1 }).await;
    assert!(store.github_binding("acme/web").await.unwrap().is_none());
    assert!(store.github_binding("acme/new").await.unwrap().is_none());
    assert!(store.github_binding("globex/site").await.unwrap().is_some());

    let log = store.list_audit(None, None, 1000).await.unwrap();
    assert_eq!(log.len(), before + 9, "one audit record per change");
    assert_eq!(log[0].entry.action, "github.installation");
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

pub async fn vcs_delivery_creates_runs_and_decisions(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    seed_stack(&*store, "app").await;
    let mut push = delivery("guid-push", "push");
    push.runs = vec![pr_run("r-push", "net", RunKind::Tracked, None)];
    push.decisions = vec![
        decision("net", Some("r-push"), "main.tf changed"),
        decision("app", None, "no watched path changed"),
    ];
    let (push_id, runs, canceled) = recorded(store.record_delivery(&push).await.unwrap());
    assert!(canceled.is_empty());
    assert_eq!(runs.len(), 1);
    assert_eq!(
        (runs[0].id.as_str(), runs[0].delivery, runs[0].pull_request),
        ("r-push", Some(push_id), None)
    );
    let stored = store.get_run("r-push").await.unwrap().unwrap();
    assert_eq!(stored, runs[0]);
    assert_eq!(
        (
            stored.state,
            stored.kind,
            stored.trigger,
            stored.needs_lease
        ),
        (RunState::Queued, RunKind::Tracked, Trigger::Push, true)
    );
    let phases = store.run_phases("r-push").await.unwrap();
    assert_eq!(phases.len(), 1);
    assert_eq!(phases[0].state, RunState::Queued);

    let mut pr = delivery("guid-pr", "pull_request");
    pr.action = Some("synchronize".into());
    pr.pull_request = Some(7);
    pr.git_ref = Some("refs/pull/7/head".into());
    pr.runs = vec![pr_run("r-pr", "net", RunKind::Proposed, Some(7))];
    pr.decisions = vec![decision("net", Some("r-pr"), "main.tf changed")];
    let (pr_id, runs, _) = recorded(store.record_delivery(&pr).await.unwrap());
    assert!(pr_id > push_id);
    assert_eq!(
        (runs[0].pull_request, runs[0].delivery),
        (Some(7), Some(pr_id))
    );
    assert_eq!(
        store.get_run("r-pr").await.unwrap().unwrap().pull_request,
        Some(7)
    );
    // A third delivery that concerns only app.
    let mut other = delivery("guid-other", "push");
    other.decisions = vec![decision("app", None, "branch not watched")];
    let (other_id, _, _) = recorded(store.record_delivery(&other).await.unwrap());

    let found = store
        .find_delivery(DeliverySource::Github, "guid-pr")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            found.id,
            found.source,
            found.guid.as_str(),
            found.event.as_str(),
            found.action.as_deref(),
            found.repository.as_deref(),
            found.git_ref.as_deref(),
            found.pull_request,
            found.summary.as_str(),
            found.duplicate_of,
        ),
        (
            pr_id,
            DeliverySource::Github,
            "guid-pr",
            "pull_request",
            Some("synchronize"),
            Some("github:acme/infra"),
            Some("refs/pull/7/head"),
            Some(7),
            "pull_request guid-pr",
            None,
        )
    );
    assert_eq!(
        (found.before.clone(), found.after.clone()),
        (Some("b".repeat(40)), Some("a".repeat(40)))
    );
    assert!(store
        .find_delivery(DeliverySource::Poll, "guid-pr")
        .await
        .unwrap()
        .is_none());
    assert!(store
        .find_delivery(DeliverySource::Github, "guid-none")
        .await
        .unwrap()
        .is_none());

    // History, newest first, paged by delivery id.
    let net = store.list_triggers("acme", "net", None, 10).await.unwrap();
    let view = |t: &[TriggerRecord]| {
        t.iter()
            .map(|t| (t.delivery.id, t.run_id.clone(), t.reason.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        view(&net),
        [
            (
                pr_id,
                Some("r-pr".to_string()),
                "main.tf changed".to_string()
            ),
            (
                push_id,
                Some("r-push".to_string()),
                "main.tf changed".to_string()
            ),
        ]
    );
    assert_eq!(net[0].delivery, found);
    let page = store.list_triggers("acme", "net", None, 1).await.unwrap();
    assert_eq!(view(&page), view(&net[..1]));
    let page = store
        .list_triggers("acme", "net", Some(page[0].delivery.id), 1)
        .await
        .unwrap();
    assert_eq!(view(&page), view(&net[1..]));
    assert!(store
        .list_triggers("acme", "net", Some(push_id), 10)
        .await
        .unwrap()
        .is_empty());
    let app = store.list_triggers("acme", "app", None, 10).await.unwrap();
    assert_eq!(
        view(&app),
        [
            (other_id, None, "branch not watched".to_string()),
            (push_id, None, "no watched path changed".to_string()),
        ]
    );
    assert!(store
        .list_triggers("globex", "net", None, 10)
        .await
        .unwrap()
        .is_empty());

    let log = store.list_audit(None, None, 10).await.unwrap();
    let pr_audit = log
        .iter()
        .find(|r| r.entry.target == "delivery:guid-pr")
        .unwrap();
    assert_eq!(
        (
            pr_audit.entry.org.as_deref(),
            pr_audit.entry.actor.as_str(),
            pr_audit.entry.action.as_str()
        ),
        (None, "system", "vcs.delivery")
    );
    assert_eq!(pr_audit.entry.detail["event"], json!("pull_request"));
    assert_eq!(pr_audit.entry.detail["runs"], json!(["r-pr"]));
    assert_eq!(
        pr_audit.entry.detail["summary"],
        json!("pull_request guid-pr")
    );

    // A stack with a trigger history can still be deleted; its history goes with it.
    store
        .delete_stack(
            "acme",
            "app",
            false,
            &audit(Some("acme"), "stack.delete", "stack:app"),
        )
        .await
        .unwrap();
    seed_stack(&*store, "app").await;
    assert!(store
        .list_triggers("acme", "app", None, 10)
        .await
        .unwrap()
        .is_empty());
}

pub async fn vcs_duplicate_delivery_applies_nothing(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    seed_stack(&*store, "app").await;
    let mut first = delivery("guid-1", "push");
    first.runs = vec![pr_run("r-1", "net", RunKind::Tracked, None)];
    first.decisions = vec![
        decision("net", Some("r-1"), "main.tf changed"),
        decision("app", None, "no watched path changed"),
    ];
    let (first_id, _, _) = recorded(store.record_delivery(&first).await.unwrap());
    let first_at = store
        .find_delivery(DeliverySource::Github, "guid-1")
        .await
        .unwrap()
        .unwrap()
        .received_at;
    let audits = store.list_audit(None, None, 1000).await.unwrap().len();

    // GitHub redelivers, and this time the decision would differ: nothing of it applies.
    let mut again = first.clone();
    again.runs = vec![pr_run("r-2", "net", RunKind::Tracked, None)];
    again.decisions = vec![decision("net", Some("r-2"), "main.tf changed")];
    again.summary = "redelivered".into();
    let (dup_id, got_first, got_at) = match store.record_delivery(&again).await.unwrap() {
        DeliveryOutcome::Duplicate {
            id,
            first_id,
            first_received_at,
        } => (id, first_id, first_received_at),
        other => panic!("expected Duplicate, got {other:?}"),
    };
    assert_ne!(dup_id, first_id);
    assert_eq!((got_first, got_at), (first_id, first_at));
    assert!(store.get_run("r-2").await.unwrap().is_none());
    assert_eq!(
        store.list_runs("acme", None, None, 10).await.unwrap().len(),
        1
    );
    assert_eq!(
        store.list_audit(None, None, 1000).await.unwrap().len(),
        audits
    );
    // find_delivery answers the first one.
    let found = store
        .find_delivery(DeliverySource::Github, "guid-1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((found.id, found.duplicate_of), (first_id, None));

    let expected_reason = format!(
        "duplicate delivery: already received at {}",
        first_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    );
    for stack in ["net", "app"] {
        let history = store.list_triggers("acme", stack, None, 10).await.unwrap();
        assert_eq!(history.len(), 2, "{stack}");
        assert_eq!(history[0].delivery.id, dup_id);
        assert_eq!(history[0].delivery.duplicate_of, Some(first_id));
        assert_eq!(history[0].delivery.summary, "redelivered");
        assert_eq!(history[0].run_id, None);
        assert_eq!(history[0].reason, expected_reason);
        assert_eq!(history[1].delivery.id, first_id);
    }
    assert_eq!(
        store.list_triggers("acme", "net", None, 10).await.unwrap()[1]
            .run_id
            .as_deref(),
        Some("r-1")
    );

    // A third copy still points at the first; the same guid from another source is new.
    match store.record_delivery(&again).await.unwrap() {
        DeliveryOutcome::Duplicate { first_id: f, .. } => assert_eq!(f, first_id),
        other => panic!("expected Duplicate, got {other:?}"),
    }
    let mut polled = again.clone();
    polled.source = DeliverySource::Poll;
    let (_, runs, _) = recorded(store.record_delivery(&polled).await.unwrap());
    assert_eq!(runs[0].id, "r-2");
}

pub async fn vcs_supersede_cancels_older_proposed_runs(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    seed_stack(&*store, "app").await;
    let r = runner(&*store, "runner-1").await;
    // An executing proposed run of PR 7.
    store
        .create_run(&pr_run("p-exec", "net", RunKind::Proposed, Some(7)), None)
        .await
        .unwrap();
    let leased = store.lease_run(&r).await.unwrap().unwrap();
    assert_eq!(leased.id, "p-exec");
    store
        .run_event("p-exec", &ev(Event::PhaseStarted, leased.fencing))
        .await
        .unwrap();
    for (id, stack, kind, pr) in [
        ("p-old", "net", RunKind::Proposed, Some(7)),
        ("p-other", "net", RunKind::Proposed, Some(8)),
        ("t-track", "net", RunKind::Tracked, Some(7)),
        ("p-app", "app", RunKind::Proposed, Some(7)),
        ("p-done", "net", RunKind::Proposed, Some(7)),
    ] {
        store
            .create_run(&pr_run(id, stack, kind, pr), None)
            .await
            .unwrap();
    }
    store
        .cancel_run("p-done", &audit(Some("acme"), "run.cancel", "run:p-done"))
        .await
        .unwrap();

    let mut sync = delivery("guid-sync", "pull_request");
    sync.pull_request = Some(7);
    sync.runs = vec![pr_run("p-new", "net", RunKind::Proposed, Some(7))];
    sync.decisions = vec![decision("net", Some("p-new"), "main.tf changed")];
    sync.cancel = Some(CancelProposed {
        stacks: vec![pair("acme", "net")],
        pull_request: 7,
        reason: "superseded by a newer commit".into(),
    });
    let (_, runs, mut canceled) = recorded(store.record_delivery(&sync).await.unwrap());
    assert_eq!(runs[0].id, "p-new");
    canceled.sort();
    assert_eq!(canceled, ["p-exec", "p-old"]);

    let get = |id: &'static str| {
        let store = store.clone();
        async move { store.get_run(id).await.unwrap().unwrap() }
    };
    let old = get("p-old").await;
    assert_eq!(old.state, RunState::Canceled);
    assert_eq!(old.reason.as_deref(), Some("superseded by a newer commit"));
    // The executing one is asked to stop: its runner learns it on the next heartbeat.
    let exec = get("p-exec").await;
    assert_eq!(
        (exec.state, exec.cancel_requested),
        (RunState::Planning, true)
    );
    assert_eq!(exec.reason.as_deref(), Some("superseded by a newer commit"));
    assert!(store.heartbeat("p-exec", leased.fencing).await.unwrap());
    for id in ["p-other", "t-track", "p-app", "p-new"] {
        let run = get(id).await;
        assert_eq!(
            (run.state, run.cancel_requested),
            (RunState::Queued, false),
            "{id}"
        );
    }
    assert_eq!(
        get("p-done").await.reason.as_deref(),
        Some("canceled by user:tester")
    );

    let log = store.list_audit(Some("acme"), None, 10).await.unwrap();
    let cancels: Vec<_> = log
        .iter()
        .filter(|r| r.entry.action == "run.cancel" && r.entry.actor == "system")
        .map(|r| r.entry.target.as_str())
        .collect();
    assert_eq!(cancels.len(), 2, "{cancels:?}");
    assert!(cancels.contains(&"run:p-old") && cancels.contains(&"run:p-exec"));
    let delivery_audit = store.list_audit(None, None, 1).await.unwrap();
    assert_eq!(delivery_audit[0].entry.action, "vcs.delivery");
    assert_eq!(delivery_audit[0].entry.org, None);
}

pub async fn vcs_delivery_is_atomic(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    store
        .create_run(&pr_run("p-old", "net", RunKind::Proposed, Some(7)), None)
        .await
        .unwrap();
    let audits = store.list_audit(None, None, 1000).await.unwrap().len();
    let cancel = CancelProposed {
        stacks: vec![pair("acme", "net")],
        pull_request: 7,
        reason: "superseded".into(),
    };

    // A run on a stack that does not exist: the whole call fails.
    let mut bad = delivery("guid-bad", "pull_request");
    bad.runs = vec![
        pr_run("r-ok", "net", RunKind::Proposed, Some(7)),
        pr_run("r-ghost", "ghost", RunKind::Proposed, Some(7)),
    ];
    bad.decisions = vec![decision("net", Some("r-ok"), "changed")];
    bad.cancel = Some(cancel.clone());
    let err = store.record_delivery(&bad).await;
    assert!(matches!(err, Err(StoreError::NotFound(_))), "{err:?}");

    // A decision on a stack that does not exist, after the runs and cancels.
    let mut bad2 = delivery("guid-bad2", "pull_request");
    bad2.runs = vec![pr_run("r-ok", "net", RunKind::Proposed, Some(7))];
    bad2.decisions = vec![
        decision("net", Some("r-ok"), "changed"),
        decision("ghost", None, "changed"),
    ];
    bad2.cancel = Some(cancel.clone());
    assert!(store.record_delivery(&bad2).await.is_err());

    // A decision naming a run the delivery does not create.
    let mut bad3 = delivery("guid-bad3", "pull_request");
    bad3.runs = vec![pr_run("r-ok", "net", RunKind::Proposed, Some(7))];
    bad3.decisions = vec![decision("net", Some("p-old"), "changed")];
    bad3.cancel = Some(cancel);
    assert!(store.record_delivery(&bad3).await.is_err());

    for guid in ["guid-bad", "guid-bad2", "guid-bad3"] {
        assert!(store
            .find_delivery(DeliverySource::Github, guid)
            .await
            .unwrap()
            .is_none());
    }
    assert!(store.get_run("r-ok").await.unwrap().is_none());
    let old = store.get_run("p-old").await.unwrap().unwrap();
    assert_eq!((old.state, old.reason), (RunState::Queued, None));
    assert!(store
        .list_triggers("acme", "net", None, 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        store.list_audit(None, None, 1000).await.unwrap().len(),
        audits
    );
    // The guid was not burnt: the corrected delivery records.
    bad.runs.pop();
    let (_, runs, canceled) = recorded(store.record_delivery(&bad).await.unwrap());
    assert_eq!((runs.len(), canceled), (1, vec!["p-old".to_string()]));
}

pub async fn vcs_tokens_due_after_run_ends(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    for id in ["r-live", "r-ending"] {
        store
            .create_run(&new_run(id, "net", RunKind::Proposed), None)
            .await
            .unwrap();
    }
    let token = |t: &str, run: &str, expires: chrono::DateTime<Utc>| VcsTokenRecord {
        run_id: run.into(),
        token: t.into(),
        expires_at: expires,
    };
    let hour = Utc::now() + Duration::hours(1);
    let live = token("ghs_live", "r-live", hour);
    let ending = token("ghs_ending", "r-ending", hour);
    let orphan = token("ghs_orphan", "r-gone", hour);
    let expired = token("ghs_expired", "r-live", Utc::now() - Duration::minutes(1));
    for t in [&live, &ending, &orphan, &expired] {
        store.add_vcs_token(t).await.unwrap();
    }
    let due = |store: Arc<dyn Store>| async move {
        let mut tokens: Vec<String> = store
            .vcs_tokens_due()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.token)
            .collect();
        tokens.sort();
        tokens
    };
    assert_eq!(due(store.clone()).await, ["ghs_expired", "ghs_orphan"]);
    let listed = store.vcs_tokens_due().await.unwrap();
    let got = listed.iter().find(|t| t.token == "ghs_orphan").unwrap();
    assert_eq!(got.run_id, "r-gone");
    assert_eq!(got.expires_at.timestamp_millis(), hour.timestamp_millis());

    store
        .cancel_run(
            "r-ending",
            &audit(Some("acme"), "run.cancel", "run:r-ending"),
        )
        .await
        .unwrap();
    assert_eq!(
        due(store.clone()).await,
        ["ghs_ending", "ghs_expired", "ghs_orphan"]
    );
    for t in ["ghs_ending", "ghs_expired", "ghs_orphan", "ghs_never"] {
        store.remove_vcs_token(t).await.unwrap();
    }
    assert!(due(store.clone()).await.is_empty());
    // Adding the same token again replaces it.
    store
        .add_vcs_token(&token("ghs_live", "r-ending", hour))
        .await
        .unwrap();
    assert_eq!(due(store.clone()).await, ["ghs_live"]);
}

pub async fn vcs_poll_heads_upsert(store: Arc<dyn Store>) {
    let repo = "https://git.example.com/infra.git";
    assert!(store.poll_head(repo, "main").await.unwrap().is_none());
    let at = Utc::now();
    let head = PollHead {
        repository: repo.into(),
        branch: "main".into(),
        commit: "a".repeat(40),
        checked_at: at,
    };
    store.set_poll_head(&head).await.unwrap();
    let got = store.poll_head(repo, "main").await.unwrap().unwrap();
    assert_eq!(
        (
            got.repository.as_str(),
            got.branch.as_str(),
            got.commit.as_str()
        ),
        (repo, "main", "a".repeat(40).as_str())
    );
    assert_eq!(got.checked_at.timestamp_millis(), at.timestamp_millis());
    let moved = PollHead {
        commit: "b".repeat(40),
        checked_at: at + Duration::seconds(60),
        ..head.clone()
    };
    store.set_poll_head(&moved).await.unwrap();
    let got = store.poll_head(repo, "main").await.unwrap().unwrap();
    assert_eq!(got.commit, "b".repeat(40));
    assert_eq!(
        got.checked_at.timestamp_millis(),
        moved.checked_at.timestamp_millis()
    );
    assert!(store.poll_head(repo, "dev").await.unwrap().is_none());
    store
        .set_poll_head(&PollHead {
            branch: "dev".into(),
            commit: "c".repeat(40),
            ..head
        })
        .await
        .unwrap();
    assert_eq!(
        store.poll_head(repo, "main").await.unwrap().unwrap().commit,
        "b".repeat(40)
    );
    assert_eq!(
        store.poll_head(repo, "dev").await.unwrap().unwrap().commit,
        "c".repeat(40)
    );
}

// ---- Secrets, OIDC signing keys, ID-token request tokens ----

pub async fn stacks_aws_roles_update_and_clear(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let a = audit(Some("acme"), "stack.create", "stack:web");
    store
        .create_stack("acme", &spec("web", &[]), &a)
        .await
        .unwrap();
    assert_eq!(
        store
            .get_stack("acme", "web")
            .await
            .unwrap()
            .unwrap()
            .spec
            .aws,
        None
    );
    let with_aws = StackSpec::from_input(StackInput {
        aws: Some(bosun_core::stack::AwsInput {
            plan_role_arn: "arn:aws:iam::123456789012:role/web-plan".into(),
            apply_role_arn: None,
            audience: Some("bosun.example.com".into()),
        }),
        ..spec("web", &[]).to_input()
    })
    .unwrap();
    store.update_stack("acme", &with_aws, &a).await.unwrap();
    let got = store.get_stack("acme", "web").await.unwrap().unwrap();
    assert_eq!(got.spec, with_aws);
    let aws = got.spec.aws.unwrap();
    assert_eq!(
        (aws.apply_role_arn.as_str(), aws.audience.as_str()),
        (
            "arn:aws:iam::123456789012:role/web-plan",
            "bosun.example.com"
        )
    );
    // Listing decodes the column too.
    let listed = store.list_stacks("acme", None, 10).await.unwrap();
    assert_eq!(listed[0].spec, with_aws);
    // Clearing it stores no roles.
    store
        .update_stack("acme", &spec("web", &[]), &a)
        .await
        .unwrap();
    assert_eq!(
        store
            .get_stack("acme", "web")
            .await
            .unwrap()
            .unwrap()
            .spec
            .aws,
        None
    );
}

fn sealed(tag: &str, key_id: &str) -> Sealed {
    Sealed {
        ciphertext: format!("ciphertext of {tag}").into_bytes(),
        nonce: tag.bytes().cycle().take(12).collect(),
        key_id: key_id.into(),
    }
}

fn secret_keys(list: &[SecretMeta]) -> Vec<String> {
    list.iter()
        .map(|s| format!("{}/{}", s.namespace, s.key))
        .collect()
}

pub async fn secrets_namespaces_are_per_org(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    seed_org(&*store, "globex").await;
    let audits = store.list_audit(None, None, 1000).await.unwrap().len();
    let a = audit(Some("acme"), "secret.put", "secret");
    for (ns, key) in [("db", "user"), ("db", "password"), ("ci", "token")] {
        let meta = store
            .put_secret("acme", ns, key, &sealed(&format!("{ns}/{key}"), "sk1"), &a)
            .await
            .unwrap();
        assert_eq!(
            (
                meta.org.as_str(),
                meta.namespace.as_str(),
                meta.key.as_str()
            ),
            ("acme", ns, key)
        );
        assert_eq!(meta.updated_by, "user:tester");
    }
    assert_eq!(
        secret_keys(&store.list_secrets("acme", None).await.unwrap()),
        ["ci/token", "db/password", "db/user"]
    );
    assert_eq!(
        secret_keys(&store.list_secrets("acme", Some("db")).await.unwrap()),
        ["db/password", "db/user"]
    );
    assert!(store
        .list_secrets("acme", Some("none"))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        store.get_secret("acme", "db", "password").await.unwrap(),
        Some(sealed("db/password", "sk1"))
    );
    assert_eq!(store.get_secret("acme", "db", "nope").await.unwrap(), None);

    // Another org has a namespace `db` of its own, even a key of the same name: each org
    // reads, lists and replaces only its own value.
    let g = audit(Some("globex"), "secret.put", "secret");
    assert_eq!(
        store.get_secret("globex", "db", "password").await.unwrap(),
        None
    );
    assert!(store.list_secrets("globex", None).await.unwrap().is_empty());
    store
        .put_secret("globex", "db", "password", &sealed("globex db", "sk1"), &g)
        .await
        .unwrap();
    assert_eq!(
        store.get_secret("globex", "db", "password").await.unwrap(),
        Some(sealed("globex db", "sk1"))
    );
    assert_eq!(
        store.get_secret("acme", "db", "password").await.unwrap(),
        Some(sealed("db/password", "sk1")),
        "another org's put changed nothing of acme's"
    );
    assert_eq!(
        secret_keys(&store.list_secrets("globex", None).await.unwrap()),
        ["db/password"]
    );
    assert_eq!(
        secret_keys(&store.list_secrets("acme", Some("db")).await.unwrap()),
        ["db/password", "db/user"]
    );
    assert_eq!(store.get_secret("acme", "gx", "key").await.unwrap(), None);
    let no_org = store
        .put_secret("ghost", "ghost-ns", "k", &sealed("x", "sk1"), &g)
        .await;
    assert!(matches!(no_org, Err(StoreError::NotFound(_))), "{no_org:?}");

    // Deleting removes only the deleting org's secret; a namespace emptied by one org is
    // simply empty, and another org uses a namespace of that name as its own.
    let d = audit(Some("acme"), "secret.delete", "secret:ci/token");
    assert!(store
        .delete_secret("acme", "ci", "token", &d)
        .await
        .unwrap());
    assert!(!store
        .delete_secret("acme", "ci", "token", &d)
        .await
        .unwrap());
    assert!(!store
        .delete_secret("globex", "db", "user", &d)
        .await
        .unwrap());
    assert_eq!(store.get_secret("acme", "ci", "token").await.unwrap(), None);
    assert_eq!(
        secret_keys(&store.list_secrets("acme", None).await.unwrap()),
        ["db/password", "db/user"]
    );
    store
        .put_secret("globex", "ci", "token", &sealed("globex ci", "sk1"), &g)
        .await
        .unwrap();
    assert_eq!(
        store.get_secret("globex", "ci", "token").await.unwrap(),
        Some(sealed("globex ci", "sk1"))
    );
    assert_eq!(store.get_secret("acme", "ci", "token").await.unwrap(), None);

    // One audit per change (three acme puts, two globex puts, one delete), none for
    // deletes of nothing, each exactly as given: no value or ciphertext added.
    let log = store.list_audit(None, None, 1000).await.unwrap();
    assert_eq!(log.len(), audits + 6);
    for r in &log[..6] {
        assert!(r.entry.action.starts_with("secret."), "{:?}", r.entry);
        assert_eq!(r.entry.detail, json!({"k": "v"}));
    }
}

pub async fn secrets_replace_keeps_created_at(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let first = store
        .put_secret(
            "acme",
            "db",
            "password",
            &sealed("one", "sk1"),
            &audit(Some("acme"), "secret.put", "secret:db/password"),
        )
        .await
        .unwrap();
    assert_eq!(first.created_at, first.updated_at);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let mut by_other = audit(Some("acme"), "secret.put", "secret:db/password");
    by_other.actor = "user:other".into();
    let second = store
        .put_secret("acme", "db", "password", &sealed("two", "sk1"), &by_other)
        .await
        .unwrap();
    assert_eq!(
        second.created_at.timestamp_millis(),
        first.created_at.timestamp_millis()
    );
    assert!(second.updated_at > first.updated_at, "{second:?}");
    assert_eq!(second.updated_by, "user:other");
    let listed = store.list_secrets("acme", None).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (
            listed[0].created_at.timestamp_millis(),
            listed[0].updated_at.timestamp_millis(),
            listed[0].updated_by.as_str()
        ),
        (
            first.created_at.timestamp_millis(),
            second.updated_at.timestamp_millis(),
            "user:other"
        )
    );
    assert_eq!(
        store.get_secret("acme", "db", "password").await.unwrap(),
        Some(sealed("two", "sk1"))
    );
}

fn signing_key(kid: &str, created_at: chrono::DateTime<Utc>) -> SigningKeyRecord {
    SigningKeyRecord {
        kid: kid.into(),
        private_key: sealed(&format!("private {kid}"), "sk1"),
        public_jwk: json!({"kty": "RSA", "n": format!("n-{kid}"), "e": "AQAB", "kid": kid,
                           "alg": "RS256", "use": "sig"}),
        created_at,
        retired_at: None,
    }
}

fn kids(keys: &[SigningKeyRecord]) -> Vec<&str> {
    keys.iter().map(|k| k.kid.as_str()).collect()
}

pub async fn signing_keys_rotate_and_prune(store: Arc<dyn Store>) {
    assert!(store.signing_keys().await.unwrap().is_empty());
    let a = audit(None, "oidc.key.rotate", "oidc");
    let audits = store.list_audit(None, None, 1000).await.unwrap().len();
    let k1 = signing_key("k1", Utc::now() - Duration::hours(2));
    store.add_signing_key(&k1, &a).await.unwrap();
    let keys = store.signing_keys().await.unwrap();
    assert_eq!(kids(&keys), ["k1"]);
    assert_eq!(keys[0].retired_at, None, "the only key is current");
    assert_eq!(keys[0].private_key, k1.private_key);
    assert_eq!(keys[0].public_jwk, k1.public_jwk);
    assert_eq!(
        keys[0].created_at.timestamp_millis(),
        k1.created_at.timestamp_millis()
    );

    let k2 = signing_key("k2", Utc::now() - Duration::hours(1));
    store.add_signing_key(&k2, &a).await.unwrap();
    let keys = store.signing_keys().await.unwrap();
    assert_eq!(kids(&keys), ["k2", "k1"], "newest first");
    assert_eq!(keys[0].retired_at, None);
    let k1_retired = keys[1].retired_at.expect("adding k2 retires k1");
    assert!(k1_retired > Utc::now() - Duration::minutes(1));

    // A refused add (the kid exists) retires nothing.
    let dup = store
        .add_signing_key(&signing_key("k1", Utc::now()), &a)
        .await;
    assert!(matches!(dup, Err(StoreError::AlreadyExists(_))), "{dup:?}");
    let keys = store.signing_keys().await.unwrap();
    assert_eq!(kids(&keys), ["k2", "k1"]);
    assert_eq!(keys[0].retired_at, None);
    assert_eq!(keys[1].retired_at, Some(k1_retired));

    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    store
        .add_signing_key(&signing_key("k3", Utc::now()), &a)
        .await
        .unwrap();
    let keys = store.signing_keys().await.unwrap();
    assert_eq!(kids(&keys), ["k3", "k2", "k1"]);
    let k2_retired = keys[1].retired_at.expect("adding k3 retires k2");
    assert!(k2_retired > k1_retired);
    assert_eq!(
        keys[2].retired_at,
        Some(k1_retired),
        "k1 keeps its retirement"
    );
    assert_eq!(
        store.list_audit(None, None, 1000).await.unwrap().len(),
        audits + 3
    );

    // Only keys retired strictly before the cut go; the current key never does.
    assert_eq!(store.prune_signing_keys(k1_retired).await.unwrap(), 0);
    assert_eq!(store.prune_signing_keys(k2_retired).await.unwrap(), 1);
    assert_eq!(kids(&store.signing_keys().await.unwrap()), ["k3", "k2"]);
    assert_eq!(
        store
            .prune_signing_keys(Utc::now() + Duration::hours(1))
            .await
            .unwrap(),
        1
    );
    assert_eq!(kids(&store.signing_keys().await.unwrap()), ["k3"]);
}

pub async fn id_request_tokens_with_their_run(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let run = store
        .create_run(&new_run("run-1", "net", RunKind::Tracked), None)
        .await
        .unwrap();
    let expires = Utc::now() + Duration::minutes(30);
    let plan = IdRequestToken {
        secret_hash: "a".repeat(64),
        run_id: "run-1".into(),
        phase: Phase::Plan,
        fencing: 1,
        expires_at: expires,
    };
    let apply = IdRequestToken {
        secret_hash: "b".repeat(64),
        phase: Phase::Apply,
        fencing: 2,
        ..plan.clone()
    };
    store.add_id_request_token(&plan).await.unwrap();
    store.add_id_request_token(&apply).await.unwrap();
    for want in [&plan, &apply] {
        let (got, got_run) = store
            .id_request_token(&want.secret_hash)
            .await
            .unwrap()
            .expect("token stored");
        assert_eq!(
            (
                got.secret_hash.as_str(),
                got.run_id.as_str(),
                got.phase,
                got.fencing
            ),
            (want.secret_hash.as_str(), "run-1", want.phase, want.fencing)
        );
        assert_eq!(
            got.expires_at.timestamp_millis(),
            expires.timestamp_millis()
        );
        assert_eq!(got_run, run);
    }
    assert!(store
        .id_request_token(&"c".repeat(64))
        .await
        .unwrap()
        .is_none());
    let orphan = IdRequestToken {
        secret_hash: "d".repeat(64),
        run_id: "run-missing".into(),
        ..plan.clone()
    };
    assert!(store.add_id_request_token(&orphan).await.is_err());
    assert!(store
        .id_request_token(&orphan.secret_hash)
        .await
        .unwrap()
        .is_none());

    // The run as it is now, not as it was when the token was made.
    let r = runner(&*store, "runner-1").await;
    let leased = store.lease_run(&r).await.unwrap().unwrap();
    let (_, now) = store
        .id_request_token(&plan.secret_hash)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(now, leased);

    // Tokens go with their run.
    store
        .cancel_run("run-1", &audit(Some("acme"), "run.cancel", "run:run-1"))
        .await
        .unwrap();
    // A leased run is only flagged; its runner ends it.
    store
        .run_event("run-1", &ev(Event::CancelAcknowledged, leased.fencing))
        .await
        .unwrap();
    assert!(store
        .get_run("run-1")
        .await
        .unwrap()
        .unwrap()
        .state
        .is_terminal());
    store
        .delete_stack(
            "acme",
            "net",
            true,
            &audit(Some("acme"), "stack.delete", "stack:net"),
        )
        .await
        .unwrap();
    assert!(store
        .id_request_token(&plan.secret_hash)
        .await
        .unwrap()
        .is_none());
}

pub async fn sealed_values_reseal_all_or_nothing(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let a = audit(Some("acme"), "secret.put", "secret");
    store
        .put_secret("acme", "db", "password", &sealed("pw", "old"), &a)
        .await
        .unwrap();
    store
        .put_secret("acme", "db", "user", &sealed("user", "old"), &a)
        .await
        .unwrap();
    let mut key = signing_key("k1", Utc::now());
    key.private_key = sealed("private", "old");
    store
        .add_signing_key(&key, &audit(None, "oidc.key.rotate", "oidc"))
        .await
        .unwrap();
    let secret = |key: &str| SealedOwner::Secret {
        org: "acme".into(),
        namespace: "db".into(),
        key: key.into(),
    };
    let kid = SealedOwner::SigningKey { kid: "k1".into() };
    let sorted = |mut v: Vec<(SealedOwner, Sealed)>| {
        v.sort_by_key(|(o, _)| format!("{o:?}"));
        v
    };
    let before = sorted(store.sealed_values().await.unwrap());
    assert_eq!(
        before,
        sorted(vec![
            (secret("password"), sealed("pw", "old")),
            (secret("user"), sealed("user", "old")),
            (kid.clone(), sealed("private", "old")),
        ])
    );
    let metas = store.list_secrets("acme", None).await.unwrap();
    let audits = store.list_audit(None, None, 1000).await.unwrap().len();

    // One unknown owner (secret or key) and nothing changes.
    let r = audit(None, "secrets.reseal", "secrets");
    for unknown in [
        secret("gone"),
        SealedOwner::SigningKey { kid: "k9".into() },
        SealedOwner::Secret {
            org: "globex".into(),
            namespace: "db".into(),
            key: "password".into(),
        },
    ] {
        let partial = vec![
            (secret("password"), sealed("pw", "new")),
            (kid.clone(), sealed("private", "new")),
            (unknown, sealed("x", "new")),
        ];
        let refused = store.reseal(&partial, &r).await;
        assert!(
            matches!(refused, Err(StoreError::NotFound(_))),
            "{refused:?}"
        );
        assert_eq!(sorted(store.sealed_values().await.unwrap()), before);
        assert_eq!(
            store.list_audit(None, None, 1000).await.unwrap().len(),
            audits
        );
    }

    // Everything under the new key, in one call with one audit.
    let resealed: Vec<(SealedOwner, Sealed)> = before
        .iter()
        .map(|(o, s)| {
            let tag = String::from_utf8(s.ciphertext.clone()).unwrap();
            (o.clone(), sealed(&format!("{tag} again"), "new"))
        })
        .collect();
    store.reseal(&resealed, &r).await.unwrap();
    assert_eq!(sorted(store.sealed_values().await.unwrap()), resealed);
    let log = store.list_audit(None, None, 1000).await.unwrap();
    assert_eq!(log.len(), audits + 1);
    assert_eq!(log[0].entry.action, "secrets.reseal");
    assert_eq!(log[0].entry.detail, json!({"k": "v"}));
    let pw = store
        .get_secret("acme", "db", "password")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(pw.key_id, "new");
    assert_eq!(
        store.signing_keys().await.unwrap()[0].private_key.key_id,
        "new"
    );
    // Re-sealing is not setting: who set a secret, and when, stay.
    assert_eq!(store.list_secrets("acme", None).await.unwrap(), metas);
}

fn kind_state(kind: &str, state: &str) -> (String, String) {
    (kind.to_string(), state.to_string())
}

pub async fn metrics_count_and_time_from_the_store(store: Arc<dyn Store>) {
    let empty = store.metrics().await.unwrap();
    assert!(empty.runs.is_empty() && empty.runners.is_empty() && empty.locks.is_empty());
    assert!(empty.queue_waits_ms.is_empty() && empty.phase_durations_ms.is_empty());
    assert!(empty.busy_runners.is_empty());
    assert_eq!(
        (empty.late_writes, empty.trigger_decisions),
        (0, DecisionCounts::default())
    );
    assert!(empty.window >= std::time::Duration::from_secs(3600));

    seed_stack(&*store, "net").await;
    seed_stack(&*store, "app").await;
    let busy = runner(&*store, "runner-1").await;
    runner(&*store, "runner-2").await;
    runner(&*store, "runner-3").await;
    assert!(store
        .drain_runner("runner-3", &audit(None, "runner.drain", "runner:runner-3"))
        .await
        .unwrap());

    // t1: leased, requeued (its runner never started it), leased again, planned with
    // changes: unconfirmed. Its queue wait is to the first lease.
    store
        .create_run(&new_run("t1", "net", RunKind::Tracked), None)
        .await
        .unwrap();
    let first = store.lease_run(&busy).await.unwrap().unwrap();
    assert_eq!(first.id, "t1");
    let requeue = RunEventInput {
        event: Event::Requeue,
        fencing: None,
        update: RunUpdate::default(),
        audit: None,
    };
    store.run_event("t1", &requeue).await.unwrap();
    let again = store.lease_run(&busy).await.unwrap().unwrap();
    assert_eq!(again.id, "t1");
    store
        .run_event("t1", &ev(Event::PhaseStarted, again.fencing))
        .await
        .unwrap();
    let out = store
        .run_event(
            "t1",
            &ev(Event::PlanFinished { changes: true }, again.fencing),
        )
        .await
        .unwrap();
    assert_eq!(out.run.state, RunState::Unconfirmed);
    // p1: leased and preparing, so runner-1 is busy; d1 waits; c1 is canceled queued.
    store
        .create_run(&new_run("p1", "app", RunKind::Proposed), None)
        .await
        .unwrap();
    assert_eq!(store.lease_run(&busy).await.unwrap().unwrap().id, "p1");
    store
        .create_run(&new_run("d1", "app", RunKind::Drift), None)
        .await
        .unwrap();
    store
        .create_run(&new_run("c1", "app", RunKind::Proposed), None)
        .await
        .unwrap();
    let cancel = RunEventInput {
        event: Event::Cancel,
        ..requeue.clone()
    };
    let out = store.run_event("c1", &cancel).await.unwrap();
    assert_eq!(out.run.state, RunState::Canceled);

    // A held lock, and one late write among two versions.
    store
        .lock_state(
            "acme",
            "net",
            &state_lock("L1", Writer::User("alice".into())),
        )
        .await
        .unwrap();
    store
        .write_state(
            "acme",
            "app",
            &state_write(
                Writer::User("bob".into()),
                WriterLiveness::Person,
                None,
                1,
                "L",
            ),
            None,
        )
        .await
        .unwrap();
    store
        .write_state(
            "acme",
            "app",
            &state_write(
                Writer::Run("r-dead".into()),
                WriterLiveness::EndedRun,
                None,
                2,
                "L",
            ),
            None,
        )
        .await
        .unwrap();

    let m = store.metrics().await.unwrap();
    let want: BTreeMap<(String, String), i64> = [
        (kind_state("tracked", "unconfirmed"), 1),
        (kind_state("proposed", "preparing"), 1),
        (kind_state("drift", "queued"), 1),
        (kind_state("proposed", "canceled"), 1),
    ]
    .into_iter()
    .collect();
    assert_eq!(m.runs, want);
    assert_eq!(m.late_writes, 1);
    // Two runs were ever leased; waits are from creation, never negative.
    assert_eq!(m.queue_waits_ms.len(), 2, "{:?}", m.queue_waits_ms);
    assert!(m.queue_waits_ms.iter().all(|w| (0..60_000).contains(w)));
    // Only ended stints count: t1 was queued twice, prepared twice and planned once; p1
    // and c1 left the queue; open stints (t1 unconfirmed, p1 preparing, d1 queued) wait.
    let counts: BTreeMap<&str, usize> = m
        .phase_durations_ms
        .iter()
        .map(|(s, v)| (s.as_str(), v.len()))
        .collect();
    assert_eq!(
        counts,
        [("planning", 1), ("preparing", 2), ("queued", 4)]
            .into_iter()
            .collect()
    );
    assert!(m
        .phase_durations_ms
        .values()
        .flatten()
        .all(|d| (0..60_000).contains(d)));
    assert_eq!(
        m.runners.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["runner-1", "runner-2", "runner-3"]
    );
    assert_eq!(
        m.runners.iter().map(|r| r.drained).collect::<Vec<_>>(),
        [false, false, true]
    );
    assert_eq!(
        m.busy_runners
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        ["runner-1"]
    );
    let held = store.state_head("acme", "net").await.unwrap().lock.unwrap();
    assert_eq!(
        m.locks,
        [HeldLock {
            org: "acme".into(),
            stack: "net".into(),
            acquired_at: held.acquired_at,
        }]
    );

    // Trigger decisions: a run started for net, app left alone, then a redelivery
    // repeats both as duplicates.
    let mut push = delivery("guid-m", "push");
    push.runs = vec![pr_run("r-push", "net", RunKind::Tracked, None)];
    push.decisions = vec![
        decision("net", Some("r-push"), "main.tf changed"),
        decision("app", None, "no watched path changed"),
    ];
    recorded(store.record_delivery(&push).await.unwrap());
    assert!(matches!(
        store.record_delivery(&push).await.unwrap(),
        DeliveryOutcome::Duplicate { .. }
    ));
    let m = store.metrics().await.unwrap();
    assert_eq!(
        m.trigger_decisions,
        DecisionCounts {
            triggered: 1,
            ignored: 1,
            duplicate: 2,
        }
    );
    assert_eq!(m.runs.get(&kind_state("tracked", "queued")), Some(&1));
}

fn dep_spec(id: &str, upstream: &str, trigger_always: bool) -> StackSpec {
    StackSpec::from_input(StackInput {
        id: id.into(),
        repository: "github:acme/infra".into(),
        depends_on: vec![DependencyInput {
            stack: upstream.into(),
            outputs: [("name".to_string(), "upstream_name".to_string())].into(),
            trigger_always,
        }],
        ..Default::default()
    })
    .unwrap()
}

async fn only_run(store: &dyn Store, stack: &str) -> Option<RunRecord> {
    let mut runs = store
        .list_runs("acme", Some(stack), None, 10)
        .await
        .unwrap();
    assert!(runs.len() <= 1, "{stack}: {runs:?}");
    runs.pop()
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

pub async fn dependency_runs_held_released_removed_skipped(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let a = audit(Some("acme"), "stack.create", "x");
    store
        .create_stack("acme", &dep_spec("app", "net", false), &a)
        .await
        .unwrap();
    store
        .create_stack("acme", &dep_spec("web", "app", false), &a)
        .await
        .unwrap();
    store
        .create_stack("acme", &dep_spec("ops", "net", true), &a)
        .await
        .unwrap();
    let r = runner(&*store, "runner-1").await;
    let confirm = |_: ()| RunEventInput {
        event: Event::Confirm,
        fencing: None,
        update: RunUpdate::default(),
        audit: None,
    };

    // A proposed run holds nothing; a tracked one holds a run of each downstream stack,
    // and that one holds the next level's.
    store
        .create_run(&new_run("p1", "net", RunKind::Proposed), None)
        .await
        .unwrap();
    assert!(only_run(&*store, "app").await.is_none());
    let p = store.lease_run(&r).await.unwrap().unwrap();
    assert_eq!(p.id, "p1");
    store
        .run_event("p1", &ev(Event::PhaseStarted, p.fencing))
        .await
        .unwrap();
    store
        .run_event("p1", &ev(Event::PlanFinished { changes: false }, p.fencing))
        .await
        .unwrap();
    store
        .create_run(&new_run("n1", "net", RunKind::Tracked), None)
        .await
        .unwrap();
    let app = only_run(&*store, "app").await.expect("a held app run");
    assert_eq!(
        (
            app.trigger,
            app.held,
            app.needs_lease,
            app.upstream_run.as_deref()
        ),
        (Trigger::Dependency, true, false, Some("n1"))
    );
    assert_eq!(app.triggered_by, "stack:net");
    let web = only_run(&*store, "web").await.expect("a held web run");
    assert_eq!(
        (web.held, web.upstream_run.as_deref()),
        (true, Some(app.id.as_str()))
    );
    assert!(only_run(&*store, "ops").await.unwrap().held);

    // Held runs are never leased: the runner gets the upstream run. It finishes without
    // writing state: outputs unchanged → the held runs go away (the next level too),
    // except where trigger_always asks for a run.
    let n1 = run_phase(&*store, &r, "n1", Event::PlanFinished { changes: false }).await;
    assert_eq!(n1.state, RunState::Finished);
    assert!(
        only_run(&*store, "app").await.is_none(),
        "unchanged outputs trigger nothing"
    );
    assert!(only_run(&*store, "web").await.is_none());
    let ops = only_run(&*store, "ops").await.unwrap();
    assert_eq!(
        (ops.held, ops.needs_lease, ops.state),
        (false, true, RunState::Queued)
    );
    assert!(
        ops.reason.as_deref().unwrap().contains("trigger_always"),
        "{ops:?}"
    );
    store
        .cancel_run(&ops.id, &audit(Some("acme"), "run.cancel", "ops"))
        .await
        .unwrap();

    // Outputs changed by the upstream's apply: the downstream run is released with the
    // names of the changed outputs; the level below still waits for it.
    store
        .create_run(&new_run("n2", "net", RunKind::Tracked), None)
        .await
        .unwrap();
    run_phase(&*store, &r, "n2", Event::PlanFinished { changes: true }).await;
    store.run_event("n2", &confirm(())).await.unwrap();
    let n2 = run_phase(&*store, &r, "n2", Event::ApplyFinished).await;
    assert_eq!(n2.state, RunState::Finished);
    let runs = store
        .list_runs("acme", Some("app"), None, 10)
        .await
        .unwrap();
    let app = runs
        .iter()
        .find(|x| x.upstream_run.as_deref() == Some("n2"))
        .unwrap();
    assert_eq!((app.held, app.needs_lease), (false, true));
    let reason = app.reason.clone().unwrap();
    assert!(reason.contains("changed outputs: name, pw"), "{reason}");
    let web = store
        .list_runs("acme", Some("web"), None, 10)
        .await
        .unwrap();
    assert_eq!(web.len(), 1);
    assert!(web[0].held && web[0].state == RunState::Queued);
    let ops = store
        .list_runs("acme", Some("ops"), None, 10)
        .await
        .unwrap();
    assert!(ops
        .iter()
        .any(|o| o.upstream_run.as_deref() == Some("n2") && !o.held));
    for o in ops.iter().filter(|o| !o.state.is_terminal()) {
        store
            .cancel_run(&o.id, &audit(Some("acme"), "run.cancel", "ops"))
            .await
            .unwrap();
    }

    // The consumed outputs are recorded once.
    let consumed = json!([{"stack": "net", "version": 1, "output": "name", "variable": "upstream_name", "sensitive": false}]);
    assert!(store.set_run_consumed(&app.id, &consumed).await.unwrap());
    assert!(!store.set_run_consumed(&app.id, &json!([])).await.unwrap());
    assert_eq!(
        store.get_run(&app.id).await.unwrap().unwrap().consumed,
        Some(consumed)
    );

    // The released run fails: the run waiting on it is skipped, naming it.
    let leased = store.lease_run(&r).await.unwrap().unwrap();
    assert_eq!(leased.id, app.id);
    store
        .run_event(&app.id, &ev(Event::PhaseStarted, leased.fencing))
        .await
        .unwrap();
    store
        .run_event(&app.id, &ev(Event::PhaseFailed, leased.fencing))
        .await
        .unwrap();
    let web = store.get_run(&web[0].id).await.unwrap().unwrap();
    assert_eq!((web.state, web.held), (RunState::Skipped, false));
    let reason = web.reason.unwrap();
    assert!(
        reason.contains(&app.id) && reason.contains("ended failed"),
        "{reason}"
    );

    // An upstream failure skips the whole chain below it.
    store
        .create_run(&new_run("n3", "net", RunKind::Tracked), None)
        .await
        .unwrap();
    run_phase(&*store, &r, "n3", Event::PhaseFailed).await;
    for stack in ["app", "web", "ops"] {
        let runs = store
            .list_runs("acme", Some(stack), None, 10)
            .await
            .unwrap();
        let latest = &runs[0];
        assert_eq!(latest.state, RunState::Skipped, "{stack}: {latest:?}");
        assert!(!latest.held);
    }
    assert!(
        store.lease_run(&r).await.unwrap().is_none(),
        "nothing left waiting"
    );
}

pub async fn held_runs_do_not_block_their_stack(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let a = audit(Some("acme"), "stack.create", "x");
    store
        .create_stack("acme", &dep_spec("app", "net", false), &a)
        .await
        .unwrap();
    let r = runner(&*store, "runner-1").await;
    store
        .create_run(&new_run("n1", "net", RunKind::Tracked), None)
        .await
        .unwrap();
    let held = only_run(&*store, "app").await.unwrap();
    // A push to the downstream stack runs while the dependency run waits…
    store
        .create_run(&new_run("a1", "app", RunKind::Tracked), None)
        .await
        .unwrap();
    let first = store.lease_run(&r).await.unwrap().unwrap();
    assert_eq!(first.id, "n1");
    let second = store.lease_run(&r).await.unwrap().unwrap();
    assert_eq!(second.id, "a1");
    // …and once released, the older dependency run still waits for the running one.
    store
        .run_event("n1", &ev(Event::PhaseStarted, first.fencing))
        .await
        .unwrap();
    store
        .run_event("n1", &ev(Event::PhaseFailed, first.fencing))
        .await
        .unwrap();
    let skipped = store.get_run(&held.id).await.unwrap().unwrap();
    assert_eq!(skipped.state, RunState::Skipped);
    store
        .create_run(&new_run("n2", "net", RunKind::Tracked), None)
        .await
        .unwrap();
    let held = store
        .list_runs("acme", Some("app"), None, 10)
        .await
        .unwrap()
        .into_iter()
        .find(|x| x.upstream_run.as_deref() == Some("n2"))
        .unwrap();
    let n2 = store.lease_run(&r).await.unwrap().unwrap();
    assert_eq!(n2.id, "n2");
    store
        .run_event("n2", &ev(Event::PhaseStarted, n2.fencing))
        .await
        .unwrap();
    store
        .run_event("n2", &ev(Event::PlanFinished { changes: true }, n2.fencing))
        .await
        .unwrap();
    store
        .run_event(
            "n2",
            &RunEventInput {
                event: Event::Confirm,
                fencing: None,
                update: RunUpdate::default(),
                audit: None,
            },
        )
        .await
        .unwrap();
    let n2 = run_phase(&*store, &r, "n2", Event::ApplyFinished).await;
    assert_eq!(n2.state, RunState::Finished);
    let released = store.get_run(&held.id).await.unwrap().unwrap();
    assert!(!released.held && released.needs_lease);
    assert!(
        store.lease_run(&r).await.unwrap().is_none(),
        "a1 is still planning on app: the released run waits"
    );
}

/// How a run of a stack ends in [`dependency_wave`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// Planned with changes, confirmed, applied: its outputs change.
    Apply,
    /// Planned without changes: no state written, outputs unchanged.
    NoChanges,
    /// Its plan fails.
    Fail,
}

/// What became of one wave of the diamond `a → b, a → c, b → d, c → d`.
struct Wave {
    b: String,
    c: String,
    /// The one run `d` got, after everything settled (`None`: removed).
    d: Option<RunRecord>,
    d_id: String,
    /// `d` was settled while `b`'s or `c`'s run had not ended yet.
    d_settled_early: bool,
}

/// A tracked run of `a`, then every run it leads to driven to its `ending` in whatever
/// order the runner gets them; after each step, `d`'s run is still held unless both `b`'s
/// and `c`'s runs have ended (or were removed) — or one of them failed and `d` was
/// skipped.
async fn dependency_wave(
    store: &dyn Store,
    r: &RunnerRecord,
    root: &str,
    ending: impl Fn(&str) -> Ending,
) -> Wave {
    let ids = |stack: &'static str| async move {
        store
            .list_runs("acme", Some(stack), None, 100)
            .await
            .unwrap()
            .into_iter()
            .map(|x| x.id)
            .collect::<Vec<_>>()
    };
    let before = [ids("left").await, ids("right").await, ids("bottom").await];
    store
        .create_run(&new_run(root, "top", RunKind::Tracked), None)
        .await
        .unwrap();
    let mut new = Vec::new();
    for (stack, old) in ["left", "right", "bottom"].into_iter().zip(before) {
        let fresh: Vec<String> = ids(stack)
            .await
            .into_iter()
            .filter(|id| !old.contains(id))
            .collect();
        assert_eq!(fresh.len(), 1, "one held run of {stack}: {fresh:?}");
        new.push(fresh[0].clone());
    }
    let [b, c, d_id] = <[String; 3]>::try_from(new).unwrap();
    let d = store.get_run(&d_id).await.unwrap().unwrap();
    assert!(d.held && !d.needs_lease, "{d:?}");
    let reason = d.reason.clone().unwrap();
    assert!(
        reason.contains(&b) && reason.contains(&c),
        "d waits for both: {reason}"
    );
    let ended = |run: &Option<RunRecord>| run.as_ref().is_none_or(|x| x.state.is_terminal());
    let mut d_settled_early = false;
    while let Some(leased) = store.lease_run(r).await.unwrap() {
        let id = leased.id.clone();
        store
            .run_event(&id, &ev(Event::PhaseStarted, leased.fencing))
            .await
            .unwrap();
        let end = match (leased.phase, ending(&leased.stack)) {
            (_, Ending::Fail) => Event::PhaseFailed,
            (Phase::Apply, _) => {
                let v = store.state_head("acme", &leased.stack).await.unwrap();
                let serial = v.current.map(|c| c.serial + 1).unwrap_or(1);
                let w = state_write(
                    Writer::Run(id.clone()),
                    WriterLiveness::LiveRun,
                    None,
                    serial,
                    "L",
                );
                store
                    .write_state("acme", &leased.stack, &w, None)
                    .await
                    .unwrap();
                Event::ApplyFinished
            }
            (_, ending) => Event::PlanFinished {
                changes: ending == Ending::Apply,
            },
        };
        let after = store
            .run_event(&id, &ev(end, leased.fencing))
            .await
            .unwrap()
            .run;
        if after.state == RunState::Unconfirmed {
            store
                .run_event(
                    &id,
                    &RunEventInput {
                        event: Event::Confirm,
                        fencing: None,
                        update: RunUpdate::default(),
                        audit: None,
                    },
                )
                .await
                .unwrap();
        }
        let d = store.get_run(&d_id).await.unwrap();
        if d.as_ref().is_none_or(|d| !d.held) {
            let sides = [
                store.get_run(&b).await.unwrap(),
                store.get_run(&c).await.unwrap(),
            ];
            if !sides.iter().all(ended) {
                let failed_side = sides.iter().flatten().any(|x| x.state == RunState::Failed);
                assert!(
                    failed_side && d.as_ref().is_some_and(|d| d.state == RunState::Skipped),
                    "d settled before b and c both ended, and not skipped for a failed one: {d:?}"
                );
                d_settled_early = true;
            }
        }
    }
    let d = store.get_run(&d_id).await.unwrap();
    if let Some(d) = &d {
        assert!(
            d.state.is_terminal() && !d.held,
            "nothing left waiting: {d:?}"
        );
    }
    for stack in ["left", "right", "bottom"] {
        for run in store
            .list_runs("acme", Some(stack), None, 100)
            .await
            .unwrap()
        {
            assert!(run.state.is_terminal() && !run.held, "{run:?}");
        }
    }
    Wave {
        b,
        c,
        d,
        d_id,
        d_settled_early,
    }
}

pub async fn dependency_diamond_runs_the_bottom_stack_once(store: Arc<dyn Store>) {
    // a → b, a → c, and d depends on both b and c.
    seed_stack(&*store, "top").await;
    let a = audit(Some("acme"), "stack.create", "x");
    for stack in ["left", "right"] {
        store
            .create_stack("acme", &dep_spec(stack, "top", false), &a)
            .await
            .unwrap();
    }
    let d = StackSpec::from_input(StackInput {
        id: "bottom".into(),
        repository: "github:acme/infra".into(),
        depends_on: ["left", "right"]
            .into_iter()
            .map(|up| DependencyInput {
                stack: up.into(),
                outputs: [("name".to_string(), format!("{up}_name"))].into(),
                trigger_always: false,
            })
            .collect(),
        ..Default::default()
    })
    .unwrap();
    store.create_stack("acme", &d, &a).await.unwrap();
    let r = runner(&*store, "runner-1").await;
    let runs_of_d = |store: Arc<dyn Store>| async move {
        store
            .list_runs("acme", Some("bottom"), None, 100)
            .await
            .unwrap()
            .len()
    };

    // Both sides change outputs: d runs once, released only after both ended, naming
    // both changes.
    let w = dependency_wave(&*store, &r, "a1", |s| match s {
        "bottom" => Ending::NoChanges,
        _ => Ending::Apply,
    })
    .await;
    let d = w.d.expect("d ran");
    assert_eq!(
        (d.state, d.trigger),
        (RunState::Finished, Trigger::Dependency)
    );
    let reason = d.reason.clone().unwrap_or_default();
    assert!(
        reason.contains(&format!(
            "run {} of upstream stack left changed outputs",
            w.b
        )) && reason.contains(&format!(
            "run {} of upstream stack right changed outputs",
            w.c
        )),
        "{reason}"
    );
    assert_eq!(runs_of_d(store.clone()).await, 1);

    // One side changes outputs, the other does not: d still runs once, after both.
    let w = dependency_wave(&*store, &r, "a2", |s| match s {
        "right" | "bottom" => Ending::NoChanges,
        _ => Ending::Apply,
    })
    .await;
    let d = w.d.expect("d ran");
    assert_eq!(d.state, RunState::Finished);
    let reason = d.reason.clone().unwrap_or_default();
    assert!(
        reason.contains(&w.b) && !reason.contains(&w.c),
        "only b's change: {reason}"
    );
    assert_eq!(runs_of_d(store.clone()).await, 2);

    // Neither side changes outputs: d's run is removed.
    let w = dependency_wave(&*store, &r, "a3", |s| match s {
        "top" => Ending::Apply,
        _ => Ending::NoChanges,
    })
    .await;
    assert!(w.d.is_none(), "d's run removed: {:?}", w.d);
    assert_eq!(runs_of_d(store.clone()).await, 2);

    // a itself changes nothing: b's, c's and d's runs all go away.
    let w = dependency_wave(&*store, &r, "a4", |_| Ending::NoChanges).await;
    assert!(w.d.is_none());
    for id in [&w.b, &w.c] {
        assert!(store.get_run(id).await.unwrap().is_none(), "{id} removed");
    }

    // One side fails, the other changes outputs: d is skipped, naming the failed run.
    let w = dependency_wave(&*store, &r, "a5", |s| match s {
        "left" => Ending::Fail,
        _ => Ending::Apply,
    })
    .await;
    let d = w.d.expect("d skipped, not removed");
    assert_eq!((d.state, d.held), (RunState::Skipped, false));
    let reason = d.reason.clone().unwrap_or_default();
    assert!(
        reason.contains(&format!("upstream run {} of stack left ended failed", w.b)),
        "{reason}"
    );
    assert_eq!(runs_of_d(store.clone()).await, 3);
    assert_eq!(
        store.get_run(&w.d_id).await.unwrap().unwrap().state,
        RunState::Skipped
    );

    // The first side to run fails: d is skipped at once, while the other side is still
    // to run — and that side's end leaves it skipped.
    let first = std::sync::Mutex::new(None::<String>);
    let w = dependency_wave(&*store, &r, "a6", |s| {
        if s == "left" || s == "right" {
            let mut first = first.lock().unwrap();
            if first.get_or_insert_with(|| s.to_string()) == s {
                return Ending::Fail;
            }
        }
        Ending::Apply
    })
    .await;
    assert!(w.d_settled_early, "d waited for the other side");
    let d = w.d.expect("d skipped, not removed");
    assert_eq!((d.state, d.held), (RunState::Skipped, false));
    let failed = first.lock().unwrap().clone().unwrap();
    let failed_run = if failed == "left" { &w.b } else { &w.c };
    let reason = d.reason.clone().unwrap_or_default();
    assert!(
        reason.contains(&format!(
            "upstream run {failed_run} of stack {failed} ended failed"
        )),
        "{reason}"
    );
    assert_eq!(runs_of_d(store.clone()).await, 4);
}

// ---- Notifications ----

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

fn rule(events: &[&str], kinds: &[&str], states: &[&str]) -> NotificationRule {
    let v = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
    NotificationRule {
        events: v(events),
        run_kinds: v(kinds),
        run_states: v(states),
    }
}

/// (event kind, run state) of each delivery of a target, oldest first.
async fn deliveries_of(store: &dyn Store, t: &str) -> Vec<(String, Option<String>)> {
    let mut out: Vec<_> = store
        .list_notification_deliveries("acme", t, None, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|d| {
            let state = d.payload["state"].as_str().map(String::from);
            (d.event.as_str().to_string(), state)
        })
        .collect();
    out.reverse();
    out
}

pub async fn notification_targets_roundtrip_and_reseal(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let a = audit(Some("acme"), "notification_target.create", "hook");
    let hook = target("hook", "webhook", vec![rule(&["old_lock"], &[], &[])], true);
    let created = store.create_notification_target(&hook, &a).await.unwrap();
    assert_eq!(created.secret, hook.secret);
    assert_eq!(created.rules, hook.rules);
    assert!(matches!(
        store.create_notification_target(&hook, &a).await,
        Err(StoreError::AlreadyExists(_))
    ));
    let mut other_org = hook.clone();
    other_org.org = "ghost".into();
    assert!(matches!(
        store.create_notification_target(&other_org, &a).await,
        Err(StoreError::NotFound(_))
    ));
    store
        .create_notification_target(&target("chat", "slack", vec![], true), &a)
        .await
        .unwrap();
    // An update without a secret keeps the stored one.
    let mut changed = hook.clone();
    changed.url = "https://example.test/new".into();
    changed.secret = None;
    changed.rules = vec![];
    changed.enabled = false;
    let updated = store
        .update_notification_target(&changed, &audit(Some("acme"), "x", "y"))
        .await
        .unwrap();
    assert_eq!(
        (updated.url.as_str(), updated.rules.len(), updated.enabled),
        ("https://example.test/new", 0, false)
    );
    assert_eq!(updated.secret, hook.secret);
    let ids: Vec<String> = store
        .list_notification_targets("acme")
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(ids, ["chat", "hook"]);
    // The secret is one of the sealed values, and a rekey replaces it.
    let owner = SealedOwner::NotificationTarget {
        org: "acme".into(),
        id: "hook".into(),
    };
    let all = store.sealed_values().await.unwrap();
    assert!(
        all.contains(&(owner.clone(), sealed("hook", "k1"))),
        "{all:?}"
    );
    assert_eq!(all.len(), 1, "a slack target has no secret");
    store
        .reseal(
            &[(owner.clone(), sealed("hook2", "k2"))],
            &audit(None, "x", "y"),
        )
        .await
        .unwrap();
    let t = store
        .get_notification_target("acme", "hook")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t.secret, Some(sealed("hook2", "k2")));
    assert!(store
        .delete_notification_target("acme", "hook", &audit(Some("acme"), "x", "y"))
        .await
        .unwrap());
    assert!(!store
        .delete_notification_target("acme", "hook", &audit(Some("acme"), "x", "y"))
        .await
        .unwrap());
    assert!(matches!(
        store
            .reseal(&[(owner, sealed("h3", "k3"))], &audit(None, "x", "y"))
            .await,
        Err(StoreError::NotFound(_))
    ));
}

pub async fn notification_events_written_with_their_cause(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let a = audit(Some("acme"), "notification_target.create", "t");
    for t in [
        target("defaults", "webhook", vec![], true),
        target(
            "all-runs",
            "slack",
            vec![rule(&["run_ended"], &[], &[])],
            true,
        ),
        target(
            "drift-only",
            "slack",
            vec![rule(&["run_ended"], &["drift"], &["failed"])],
            true,
        ),
        target("off", "slack", vec![], false),
    ] {
        store.create_notification_target(&t, &a).await.unwrap();
    }
    let mut signals = store.subscribe();
    // A queued run canceled: not a failure, so only the catch-all rule takes it.
    store
        .create_run(&new_run("r-cancel", "net", RunKind::Tracked), None)
        .await
        .unwrap();
    store
        .cancel_run(
            "r-cancel",
            &audit(Some("acme"), "run.cancel", "run:r-cancel"),
        )
        .await
        .unwrap();
    assert_eq!(
        deliveries_of(&*store, "all-runs").await,
        [("run_ended".into(), Some("canceled".into()))]
    );
    assert!(deliveries_of(&*store, "defaults").await.is_empty());
    tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while crate::signal::next(&mut signals).await != Signal::Notification {}
    })
    .await
    .expect("a commit with deliveries wakes the delivery duty");
    // A drift run failing: the defaults and the drift rule take it.
    let r = runner(&*store, "runner-1").await;
    store
        .create_run(&new_run("r-drift", "net", RunKind::Drift), None)
        .await
        .unwrap();
    let leased = store.lease_run(&r).await.unwrap().unwrap();
    assert_eq!(leased.id, "r-drift");
    store
        .run_event("r-drift", &ev(Event::PhaseStarted, leased.fencing))
        .await
        .unwrap();
    let mut failed = ev(Event::PhaseFailed, leased.fencing);
    failed.update.reason = Some("credentials expired".into());
    store.run_event("r-drift", &failed).await.unwrap();
    let failed_run = [("run_ended".to_string(), Some("failed".to_string()))];
    assert_eq!(deliveries_of(&*store, "defaults").await, failed_run);
    assert_eq!(deliveries_of(&*store, "drift-only").await, failed_run);
    assert!(
        deliveries_of(&*store, "off").await.is_empty(),
        "disabled target"
    );
    let d = &store
        .list_notification_deliveries("acme", "defaults", None, 1)
        .await
        .unwrap()[0];
    assert_eq!(
        (
            d.payload["run"].as_str(),
            d.payload["kind"].as_str(),
            d.payload["stack"].as_str(),
            d.payload["reason"].as_str(),
            d.payload["url"].as_str(),
        ),
        (
            Some("r-drift"),
            Some("drift"),
            Some("net"),
            Some("credentials expired"),
            Some("/api/v1/orgs/acme/runs/r-drift"),
        )
    );
    // A late write from an ended run, in the write's transaction.
    let late = state_write(
        Writer::Run("r-drift".into()),
        WriterLiveness::EndedRun,
        None,
        1,
        "L",
    );
    store.write_state("acme", "net", &late, None).await.unwrap();
    assert_eq!(
        deliveries_of(&*store, "defaults").await.last().unwrap().0,
        "late_write"
    );
    // An old lock: one event per lock id, however often the duty looks.
    let mut lock = state_lock("OLD-LOCK", Writer::User("bob".into()));
    lock.acquired_at = Utc::now() - Duration::hours(3);
    store.lock_state("acme", "net", &lock).await.unwrap();
    let hour_ago = Utc::now() - Duration::hours(1);
    assert_eq!(
        store
            .notify_old_locks(Utc::now() - Duration::hours(4))
            .await
            .unwrap(),
        0
    );
    assert_eq!(store.notify_old_locks(hour_ago).await.unwrap(), 1);
    assert_eq!(store.notify_old_locks(hour_ago).await.unwrap(), 0);
    let kinds: Vec<String> = deliveries_of(&*store, "defaults")
        .await
        .into_iter()
        .map(|d| d.0)
        .collect();
    assert_eq!(kinds, ["run_ended", "late_write", "old_lock"]);
    // Other causes (stale drift checks) come through add_notification_event, de-duplicated.
    let stale = NewNotificationEvent {
        kind: NotificationEventKind::StaleDriftCheck,
        run_kind: None,
        run_state: None,
        payload: json!({"org": "acme", "stack": "net"}),
        dedup_key: Some("stale:net:1".into()),
        only_target: None,
    };
    assert!(store
        .add_notification_event("acme", &stale)
        .await
        .unwrap()
        .is_some());
    assert!(store
        .add_notification_event("acme", &stale)
        .await
        .unwrap()
        .is_none());
    // A test event goes to its target only, whatever its rules; an unknown target is refused.
    let test = NewNotificationEvent {
        kind: NotificationEventKind::Test,
        only_target: Some("drift-only".into()),
        dedup_key: None,
        ..stale.clone()
    };
    store
        .add_notification_event("acme", &test)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        deliveries_of(&*store, "drift-only").await.last().unwrap().0,
        "test"
    );
    assert!(matches!(
        store
            .add_notification_event(
                "acme",
                &NewNotificationEvent {
                    only_target: Some("ghost".into()),
                    ..test
                }
            )
            .await,
        Err(StoreError::NotFound(_))
    ));
}

pub async fn notification_deliveries_retry_and_settle(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    store
        .create_notification_target(
            &target("hook", "webhook", vec![], true),
            &audit(Some("acme"), "x", "y"),
        )
        .await
        .unwrap();
    let event = NewNotificationEvent {
        kind: NotificationEventKind::LateWrite,
        run_kind: None,
        run_state: None,
        payload: json!({"org": "acme", "stack": "net"}),
        dedup_key: None,
        only_target: None,
    };
    store.add_notification_event("acme", &event).await.unwrap();
    let due = store.due_notifications(Utc::now(), 10).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].target.id, "hook");
    assert_eq!(due[0].target.secret, Some(sealed("hook", "k1")));
    let id = due[0].delivery.id;
    let retry_at = Utc::now() + Duration::seconds(30);
    store
        .record_notification_attempt(
            id,
            &NotificationAttempt {
                status: Some(500),
                error: Some("HTTP 500".into()),
                delivered: false,
                retry_at: Some(retry_at),
            },
        )
        .await
        .unwrap();
    assert!(store
        .due_notifications(Utc::now(), 10)
        .await
        .unwrap()
        .is_empty());
    let later = store
        .due_notifications(retry_at + Duration::seconds(1), 10)
        .await
        .unwrap();
    assert_eq!(later.len(), 1);
    assert_eq!(
        (later[0].delivery.attempts, later[0].delivery.last_status),
        (1, Some(500))
    );
    store
        .record_notification_attempt(
            id,
            &NotificationAttempt {
                status: Some(204),
                error: None,
                delivered: true,
                retry_at: None,
            },
        )
        .await
        .unwrap();
    assert!(store
        .due_notifications(Utc::now() + Duration::days(1), 10)
        .await
        .unwrap()
        .is_empty());
    let log = store
        .list_notification_deliveries("acme", "hook", None, 10)
        .await
        .unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(
        (
            log[0].attempts,
            log[0].last_status,
            log[0].last_error.clone()
        ),
        (2, Some(204), None)
    );
    assert!(log[0].delivered_at.is_some() && log[0].next_attempt_at.is_none());
    // Deleting the target deletes its log.
    store
        .delete_notification_target("acme", "hook", &audit(Some("acme"), "x", "y"))
        .await
        .unwrap();
    assert!(store
        .list_notification_deliveries("acme", "hook", None, 10)
        .await
        .unwrap()
        .is_empty());
}

#[test]
fn notification_default_rules_follow_the_spec() {
    use NotificationEventKind::*;
    let d: &[NotificationRule] = &[];
    for state in ["failed", "force_failed", "interrupted"] {
        for kind in ["tracked", "proposed", "drift"] {
            assert!(NotificationRule::any_matches(
                d,
                RunEnded,
                Some(kind),
                Some(state)
            ));
        }
    }
    for state in ["finished", "canceled", "discarded", "skipped"] {
        assert!(!NotificationRule::any_matches(
            d,
            RunEnded,
            Some("tracked"),
            Some(state)
        ));
    }
    for kind in [LateWrite, OldLock, StaleDriftCheck] {
        assert!(NotificationRule::any_matches(d, kind, None, None));
    }
    assert!(!NotificationRule::any_matches(d, Test, None, None));
    let only_drift = [rule(&["run_ended"], &["drift"], &[])];
    assert!(NotificationRule::any_matches(
        &only_drift,
        RunEnded,
        Some("drift"),
        Some("finished")
    ));
    assert!(!NotificationRule::any_matches(
        &only_drift,
        RunEnded,
        Some("tracked"),
        Some("failed")
    ));
    assert!(!NotificationRule::any_matches(
        &only_drift,
        LateWrite,
        None,
        None
    ));
}

// ---- Drift detection ----

pub async fn drift_schedules_fire_once_settle_once(store: Arc<dyn Store>) {
    use bosun_core::drift::DriftResult;
    seed_stack(&*store, "plain").await;
    let mut input = spec("net", &[]).to_input();
    input.drift_detection = Some(DriftInput {
        schedule: "0 * * * *".into(),
        reconcile: true,
        timezone: Some("Europe/Berlin".into()),
    });
    store
        .create_stack(
            "acme",
            &StackSpec::from_input(input).unwrap(),
            &audit(Some("acme"), "stack.create", "net"),
        )
        .await
        .unwrap();
    // Only stacks with drift detection, not yet armed.
    let all = store.drift_schedules(None, None).await.unwrap();
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(
        (all[0].stack.as_str(), all[0].drift.timezone.as_str()),
        ("net", "Europe/Berlin")
    );
    assert!(all[0].state.is_none() && all[0].last_success.is_none());
    assert!(store
        .drift_schedules(Some("other"), None)
        .await
        .unwrap()
        .is_empty());

    let t0 = Utc::now();
    let fire = |expected, run: Option<NewRun>| DriftFire {
        org: "acme".into(),
        stack: "net".into(),
        schedule: "0 * * * *".into(),
        timezone: "Europe/Berlin".into(),
        expected_next: expected,
        next_at: t0 + Duration::hours(1),
        since: Some(t0),
        run,
        note: None,
        now: t0,
    };
    assert_eq!(
        store.fire_drift_schedule(&fire(None, None)).await.unwrap(),
        DriftFired::Armed
    );
    // A pass that read an older next_at loses: nothing is written twice.
    assert_eq!(
        store.fire_drift_schedule(&fire(None, None)).await.unwrap(),
        DriftFired::Raced
    );
    let armed = store
        .drift_schedules(Some("acme"), Some("net"))
        .await
        .unwrap();
    let state = armed[0].state.clone().unwrap();
    assert_eq!(
        state.next_at.timestamp_millis(),
        (t0 + Duration::hours(1)).timestamp_millis()
    );

    let mut scheduled = new_run("run-d1", "net", RunKind::Drift);
    scheduled.trigger = Trigger::Schedule;
    let mut f = fire(Some(state.next_at), Some(scheduled.clone()));
    f.note = Some("2 missed".into());
    f.next_at = t0 + Duration::hours(2);
    let DriftFired::Started(run) = store.fire_drift_schedule(&f).await.unwrap() else {
        panic!("the drift run starts");
    };
    assert_eq!((run.kind, run.trigger), (RunKind::Drift, Trigger::Schedule));
    let s = store.drift_schedules(None, None).await.unwrap().remove(0);
    assert_eq!(s.open_run.as_deref(), Some("run-d1"));
    assert_eq!(
        s.state.as_ref().unwrap().last_fire_note.as_deref(),
        Some("2 missed")
    );
    assert_eq!(
        s.state.as_ref().unwrap().last_fire_run.as_deref(),
        Some("run-d1")
    );

    // While it is open: the next fire records the skip; a manual check is refused.
    let mut again = new_run("run-d2", "net", RunKind::Drift);
    again.trigger = Trigger::Schedule;
    let mut f2 = fire(Some(t0 + Duration::hours(2)), Some(again));
    f2.next_at = t0 + Duration::hours(3);
    assert_eq!(
        store.fire_drift_schedule(&f2).await.unwrap(),
        DriftFired::Skipped {
            open_run: "run-d1".into()
        }
    );
    let note = store.drift_schedules(None, None).await.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .last_fire_note;
    assert_eq!(
        note.as_deref(),
        Some("skipped: drift run run-d1 is still open")
    );
    let manual = new_run("run-d3", "net", RunKind::Drift);
    let refused = store
        .start_drift_check(&manual, &audit(Some("acme"), "run.create", "run:run-d3"))
        .await;
    assert!(
        matches!(refused, Err(StoreError::HasOpenRuns { .. })),
        "{refused:?}"
    );
    assert!(store.get_run("run-d2").await.unwrap().is_none());

    // Nothing to settle until it ends; then exactly once, with its reconcile run.
    assert!(store.unsettled_drift_runs(10).await.unwrap().is_empty());
    let r = runner(&*store, "r1").await;
    run_phase(&*store, &r, "run-d1", Event::PlanFinished { changes: true }).await;
    let unsettled = store.unsettled_drift_runs(10).await.unwrap();
    assert_eq!(unsettled.len(), 1);
    let mut reconcile = new_run("run-t1", "net", RunKind::Tracked);
    reconcile.trigger = Trigger::Schedule;
    reconcile.triggered_by = "run:run-d1".into();
    let check = store
        .settle_drift_run("run-d1", DriftResult::DriftDetected, Some(&reconcile))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(check.reconcile_run.as_deref(), Some("run-t1"));
    assert!(store
        .settle_drift_run("run-d1", DriftResult::DriftDetected, Some(&reconcile))
        .await
        .unwrap()
        .is_none());
    assert!(store.unsettled_drift_runs(10).await.unwrap().is_empty());
    assert_eq!(
        store.drift_check("run-d1").await.unwrap(),
        Some(check.clone())
    );
    assert_eq!(
        store.drift_check("run-t1").await.unwrap(),
        Some(check.clone())
    );
    let s = store.drift_schedules(None, None).await.unwrap().remove(0);
    assert_eq!(s.last_success, Some(check.clone()));
    assert_eq!(s.open_run, None);

    // A failed check is the latest check, not the latest success.
    let manual = store
        .start_drift_check(&manual, &audit(Some("acme"), "run.create", "run:run-d3"))
        .await
        .unwrap();
    store
        .cancel_run(&manual.id, &audit(Some("acme"), "run.cancel", "run:run-d3"))
        .await
        .unwrap();
    store
        .settle_drift_run("run-d3", DriftResult::Failed, None)
        .await
        .unwrap()
        .unwrap();
    let s = store.drift_schedules(None, None).await.unwrap().remove(0);
    assert_eq!(s.last_success.map(|c| c.run).as_deref(), Some("run-d1"));
    assert_eq!(
        s.last_check.map(|c| (c.run, c.result)),
        Some(("run-d3".to_string(), DriftResult::Failed))
    );
    // Scheduled runs are audited as the system's.
    let audits = store.list_audit(Some("acme"), None, 100).await.unwrap();
    assert!(audits
        .iter()
        .any(|a| a.entry.target == "run:run-d1" && a.entry.actor == "system"));
    assert!(audits
        .iter()
        .any(|a| a.entry.target == "run:run-t1" && a.entry.actor == "run:run-d1"));
}

// ---- Plans: environments, hosts, plan files ----

fn environment(org: &str, id: &str, gated: bool) -> NewEnvironment {
    NewEnvironment {
        org: org.into(),
        id: id.into(),
        vars: BTreeMap::from([("app_port".to_string(), json!(8080))]),
        requires_approval: gated,
        protected: gated,
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

pub async fn plan_environments_grants_and_refused_delete(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    seed_org(&*store, "other").await;
    let a = |action: &str| audit(Some("acme"), action, "environment:prod");
    let prod = environment("acme", "prod", true);
    let created = store
        .create_environment(&prod, &a("environment.create"))
        .await
        .unwrap();
    assert_eq!(
        (
            created.vars.clone(),
            created.requires_approval,
            created.protected
        ),
        (prod.vars.clone(), true, true)
    );
    assert!(created.grants.is_empty());
    assert!(matches!(
        store
            .create_environment(&prod, &a("environment.create"))
            .await,
        Err(StoreError::AlreadyExists(_))
    ));
    store
        .create_environment(
            &environment("acme", "staging", false),
            &a("environment.create"),
        )
        .await
        .unwrap();
    assert!(matches!(
        store
            .create_environment(
                &environment("ghost", "prod", false),
                &a("environment.create")
            )
            .await,
        Err(StoreError::NotFound(_))
    ));

    // Grants: idempotent, sorted, only for known users and environments.
    store
        .create_user(
            &NewUser {
                id: "alice".into(),
                server_admin: false,
            },
            &audit(None, "user.create", "user:alice"),
        )
        .await
        .unwrap();
    assert!(store
        .grant_environment("acme", "prod", "owner", &a("environment.grant"))
        .await
        .unwrap());
    assert!(store
        .grant_environment("acme", "prod", "alice", &a("environment.grant"))
        .await
        .unwrap());
    assert!(!store
        .grant_environment("acme", "prod", "alice", &a("environment.grant"))
        .await
        .unwrap());
    assert!(matches!(
        store
            .grant_environment("acme", "prod", "nobody", &a("environment.grant"))
            .await,
        Err(StoreError::NotFound(w)) if w.contains("nobody")
    ));
    assert!(matches!(
        store
            .grant_environment("acme", "qa", "alice", &a("environment.grant"))
            .await,
        Err(StoreError::NotFound(w)) if w.contains("qa")
    ));
    let got = store
        .get_environment("acme", "prod")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.grants, vec!["alice".to_string(), "owner".to_string()]);

    // An update replaces vars and flags and keeps the grants.
    let mut changed = prod.clone();
    changed.vars = BTreeMap::from([("app_port".to_string(), json!(80))]);
    changed.requires_approval = false;
    let updated = store
        .update_environment(&changed, &a("environment.update"))
        .await
        .unwrap();
    assert_eq!(updated.vars["app_port"], json!(80));
    assert!(!updated.requires_approval && updated.protected);
    assert_eq!(updated.grants.len(), 2);
    assert!(updated.updated_at >= created.updated_at);
    assert!(matches!(
        store
            .update_environment(&environment("acme", "qa", false), &a("environment.update"))
            .await,
        Err(StoreError::NotFound(_))
    ));

    assert!(store
        .revoke_environment_grant("acme", "prod", "owner", &a("environment.revoke"))
        .await
        .unwrap());
    assert!(!store
        .revoke_environment_grant("acme", "prod", "owner", &a("environment.revoke"))
        .await
        .unwrap());

    // Org-scoped: the other org sees none of it.
    assert!(store
        .get_environment("other", "prod")
        .await
        .unwrap()
        .is_none());
    assert!(store.list_environments("other").await.unwrap().is_empty());
    let ids: Vec<String> = store
        .list_environments("acme")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(ids, ["prod", "staging"]);

    // Deleting an environment that hosts are in is refused, naming them.
    for name in ["web-2", "web-1"] {
        store
            .create_host(&host("acme", name, Some("prod")), &a("host.create"))
            .await
            .unwrap();
    }
    let before = store.list_audit(None, None, 1000).await.unwrap().len();
    match store
        .delete_environment("acme", "prod", &a("environment.delete"))
        .await
    {
        Err(StoreError::EnvironmentInUse { environment, hosts }) => {
            assert_eq!(environment, "prod");
            assert_eq!(hosts, ["web-1", "web-2"]);
        }
        other => panic!("expected EnvironmentInUse, got {other:?}"),
    }
    assert_eq!(
        store.list_audit(None, None, 1000).await.unwrap().len(),
        before
    );
    for name in ["web-1", "web-2"] {
        assert!(store
            .delete_host("acme", name, &a("host.delete"))
            .await
            .unwrap());
    }
    assert!(store
        .delete_environment("acme", "prod", &a("environment.delete"))
        .await
        .unwrap());
    assert!(!store
        .delete_environment("acme", "prod", &a("environment.delete"))
        .await
        .unwrap());
    assert!(store
        .get_environment("acme", "prod")
        .await
        .unwrap()
        .is_none());
    // Its grants went with it: a new "prod" starts with none.
    let again = store
        .create_environment(&prod, &a("environment.create"))
        .await
        .unwrap();
    assert!(again.grants.is_empty());

    let actions = audit_actions(&*store, "acme").await;
    for action in [
        "environment.create",
        "environment.grant",
        "environment.update",
        "environment.revoke",
        "environment.delete",
    ] {
        assert!(actions.iter().any(|x| x == action), "{action}: {actions:?}");
    }
    // Two grants and one revoke were written; the no-op ones were not.
    assert_eq!(
        actions.iter().filter(|x| *x == "environment.grant").count(),
        2
    );
    assert_eq!(
        actions
            .iter()
            .filter(|x| *x == "environment.revoke")
            .count(),
        1
    );
}

pub async fn plan_hosts_roundtrip_every_field(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    seed_org(&*store, "other").await;
    let a = |action: &str| audit(Some("acme"), action, "host:web-1");
    store
        .create_environment(
            &environment("acme", "prod", false),
            &a("environment.create"),
        )
        .await
        .unwrap();
    let full = NewHost {
        org: "acme".into(),
        name: "web-1".into(),
        address: "10.1.0.11".into(),
        port: 2222,
        user: Some("deploy".into()),
        connection: "ssh".into(),
        labels: vec!["web".into(), "eu".into()],
        vars: BTreeMap::from([
            ("weight".to_string(), json!(3)),
            ("tags".to_string(), json!({"a": [1, "b"]})),
        ]),
        environment: Some("prod".into()),
        identity_file: Some("~/.ssh/id_ed25519".into()),
        host_key: Some("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDxk".into()),
        known_hosts: Some("/etc/ssh/known".into()),
    };
    let created = store.create_host(&full, &a("host.create")).await.unwrap();
    let back = store.get_host("acme", "web-1").await.unwrap().unwrap();
    assert_eq!(back, created);
    let as_new = NewHost {
        org: back.org.clone(),
        name: back.name.clone(),
        address: back.address.clone(),
        port: back.port,
        user: back.user.clone(),
        connection: back.connection.clone(),
        labels: back.labels.clone(),
        vars: back.vars.clone(),
        environment: back.environment.clone(),
        identity_file: back.identity_file.clone(),
        host_key: back.host_key.clone(),
        known_hosts: back.known_hosts.clone(),
    };
    assert_eq!(as_new, full);
    assert!(matches!(
        store.create_host(&full, &a("host.create")).await,
        Err(StoreError::AlreadyExists(_))
    ));
    // An environment the org does not have (here: another org's) is refused.
    store
        .create_environment(&environment("other", "qa", false), &a("environment.create"))
        .await
        .unwrap();
    assert!(matches!(
        store
            .create_host(&host("acme", "web-9", Some("qa")), &a("host.create"))
            .await,
        Err(StoreError::UnknownEnvironment(e)) if e == "qa"
    ));
    let mut moved = full.clone();
    moved.environment = Some("qa".into());
    assert!(matches!(
        store.update_host(&moved, &a("host.update")).await,
        Err(StoreError::UnknownEnvironment(_))
    ));

    // Update replaces every field; clearing optional ones clears them.
    let mut local = host("acme", "web-1", None);
    local.connection = "local".into();
    local.address = "localhost".into();
    let updated = store.update_host(&local, &a("host.update")).await.unwrap();
    assert_eq!(
        (
            updated.connection.as_str(),
            updated.environment.clone(),
            updated.labels.len(),
            updated.host_key.clone()
        ),
        ("local", None, 0, None)
    );
    assert_eq!(updated.created_at, created.created_at);
    assert!(matches!(
        store
            .update_host(&host("acme", "ghost", None), &a("host.update"))
            .await,
        Err(StoreError::NotFound(_))
    ));

    store
        .create_host(&host("acme", "db-1", None), &a("host.create"))
        .await
        .unwrap();
    store
        .create_host(&host("other", "aaa", None), &a("host.create"))
        .await
        .unwrap();
    let names: Vec<String> = store
        .list_hosts("acme")
        .await
        .unwrap()
        .into_iter()
        .map(|h| h.name)
        .collect();
    assert_eq!(names, ["db-1", "web-1"]);
    assert!(store.get_host("other", "web-1").await.unwrap().is_none());
    assert!(!store
        .delete_host("other", "web-1", &a("host.delete"))
        .await
        .unwrap());
    assert!(store
        .delete_host("acme", "web-1", &a("host.delete"))
        .await
        .unwrap());
    assert!(store.get_host("acme", "web-1").await.unwrap().is_none());
    let actions = audit_actions(&*store, "acme").await;
    for action in ["host.create", "host.update", "host.delete"] {
        assert!(actions.iter().any(|x| x == action), "{action}: {actions:?}");
    }
}

pub async fn plan_inventory_import_is_one_transaction(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let a = audit(Some("acme"), "inventory.import", "inventory");
    store
        .create_environment(&environment("acme", "staging", false), &a)
        .await
        .unwrap();
    store
        .create_host(&host("acme", "web-1", None), &a)
        .await
        .unwrap();
    let mut web1 = host("acme", "web-1", Some("prod"));
    web1.labels = vec!["web".into()];
    let import = InventoryImport {
        org: "acme".into(),
        environments: vec![
            environment("acme", "prod", true),
            environment("acme", "staging", false),
        ],
        hosts: vec![web1, host("acme", "build", Some("staging"))],
    };
    let done = store.import_inventory(&import, &a).await.unwrap();
    assert_eq!(
        done,
        InventoryImported {
            environments_created: vec!["prod".into()],
            environments_updated: vec!["staging".into()],
            hosts_created: vec!["build".into()],
            hosts_updated: vec!["web-1".into()],
        }
    );
    let web1 = store.get_host("acme", "web-1").await.unwrap().unwrap();
    assert_eq!(web1.environment.as_deref(), Some("prod"));
    assert_eq!(web1.labels, ["web"]);
    let last = store.list_audit(Some("acme"), None, 1).await.unwrap();
    assert_eq!(last[0].entry.action, "inventory.import");
    assert_eq!(last[0].entry.detail["hosts_created"], json!(["build"]));

    // A bad host late in the file leaves nothing of the import behind.
    let before = store.list_audit(None, None, 1000).await.unwrap().len();
    let broken = InventoryImport {
        org: "acme".into(),
        environments: vec![environment("acme", "qa", false)],
        hosts: vec![
            host("acme", "new-1", Some("qa")),
            host("acme", "new-2", Some("nowhere")),
        ],
    };
    assert!(matches!(
        store.import_inventory(&broken, &a).await,
        Err(StoreError::UnknownEnvironment(e)) if e == "nowhere"
    ));
    assert!(store.get_environment("acme", "qa").await.unwrap().is_none());
    assert!(store.get_host("acme", "new-1").await.unwrap().is_none());
    assert_eq!(
        store.list_audit(None, None, 1000).await.unwrap().len(),
        before
    );
}

pub async fn plan_files_versioned_and_org_scoped(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    seed_org(&*store, "other").await;
    let a = audit(Some("acme"), "plan.save", "plan:app-config");
    let v1 = NewPlan {
        org: "acme".into(),
        name: "app-config".into(),
        source: "name: app-config\nsteps: []\n  # kept exactly, comments too\n".into(),
        schedule: None,
    };
    let first = store.save_plan(&v1, &a).await.unwrap();
    assert_eq!(
        (first.version, first.updated_by.as_str()),
        (1, "user:tester")
    );
    assert_eq!(first.source, v1.source);
    let mut v2 = v1.clone();
    v2.source = "name: app-config\nsteps: [] # v2\n".into();
    let second = store.save_plan(&v2, &a).await.unwrap();
    assert_eq!(second.version, 2);
    assert_eq!(second.created_at, first.created_at);
    assert_eq!(
        store.get_plan("acme", "app-config").await.unwrap().unwrap(),
        second
    );
    let last = store.list_audit(Some("acme"), None, 1).await.unwrap();
    assert_eq!(last[0].entry.detail["version"], json!(2));

    // Same name in another org: its own version 1.
    let mut theirs = v1.clone();
    theirs.org = "other".into();
    assert_eq!(store.save_plan(&theirs, &a).await.unwrap().version, 1);
    let mut ghost = v1.clone();
    ghost.org = "ghost".into();
    assert!(matches!(
        store.save_plan(&ghost, &a).await,
        Err(StoreError::NotFound(_))
    ));

    let mut b = v1.clone();
    b.name = "backup".into();
    store.save_plan(&b, &a).await.unwrap();
    let names: Vec<String> = store
        .list_plans("acme")
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["app-config", "backup"]);
    assert!(store.delete_plan("acme", "app-config", &a).await.unwrap());
    assert!(!store.delete_plan("acme", "app-config", &a).await.unwrap());
    assert!(store
        .get_plan("acme", "app-config")
        .await
        .unwrap()
        .is_none());
    assert!(store
        .get_plan("other", "app-config")
        .await
        .unwrap()
        .is_some());
    // Recreated after a delete: version 1 again.
    assert_eq!(store.save_plan(&v1, &a).await.unwrap().version, 1);
}

// ---- Plan runs ----

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

fn host_result(step: i64, host: &str, status: &str) -> PlanHostResultRecord {
    PlanHostResultRecord {
        step,
        step_name: format!("step {step}"),
        module: "command".into(),
        host: host.into(),
        status: status.into(),
        ignored: false,
        changed: Some(status == "changed"),
        exit_code: Some(0),
        stdout: format!("out {host}"),
        stderr: String::new(),
        duration_ms: 12,
        message: "ran".into(),
        diff: None,
    }
}

pub async fn plan_runs_listed_newest_first_page_by_page(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    seed_org(&*store, "other").await;
    let a = audit(Some("acme"), "plan_run.create", "plan:app-config");
    // Seven runs (overlap allowed), some created in the same millisecond; one of another
    // plan and one of another org.
    let mut ids = Vec::new();
    for i in 0..7 {
        let mut run = plan_run(&format!("prun-page-{i}"), &["web-1"]);
        run.concurrent = true;
        store.create_plan_run(&run, &a).await.unwrap();
        ids.push(run.id);
    }
    let mut backup = plan_run("prun-backup", &["db"]);
    backup.plan = "backup".into();
    store.create_plan_run(&backup, &a).await.unwrap();
    let mut theirs = plan_run("prun-theirs", &["web-1"]);
    theirs.org = "other".into();
    store
        .create_plan_run(
            &theirs,
            &audit(Some("other"), "plan_run.create", "plan:app-config"),
        )
        .await
        .unwrap();
    let page = |before: Option<&'static str>, limit: u32| {
        let store = store.clone();
        async move {
            store
                .list_plan_runs("acme", Some("app-config"), before, limit)
                .await
                .unwrap()
                .into_iter()
                .map(|r| r.id)
                .collect::<Vec<_>>()
        }
    };
    // Newest first: pages of three follow on without a gap or a repeat.
    let all = page(None, 100).await;
    assert_eq!(all.len(), 7);
    let mut walked = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let got = store
            .list_plan_runs("acme", Some("app-config"), cursor.as_deref(), 3)
            .await
            .unwrap();
        if got.is_empty() {
            break;
        }
        cursor = got.last().map(|r| r.id.clone());
        walked.extend(got.into_iter().map(|r| r.id));
    }
    assert_eq!(walked, all);
    let mut sorted = ids.clone();
    sorted.sort();
    let mut seen = walked.clone();
    seen.sort();
    assert_eq!(seen, sorted);
    // A cursor that is no run of the org lists nothing (it never restarts the list).
    assert!(page(Some("prun-nope"), 100).await.is_empty());
    assert!(page(Some("prun-theirs"), 100).await.is_empty());
    // Without a plan: every plan of the org (not another org's), paged the same way.
    let org_all: Vec<String> = store
        .list_plan_runs("acme", None, None, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(org_all.len(), 8);
    assert!(org_all.contains(&"prun-backup".to_string()));
    let at = org_all.iter().position(|id| *id == all[2]).unwrap();
    let after: Vec<String> = store
        .list_plan_runs("acme", None, Some(&all[2]), 100)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(after, org_all[at + 1..]);
}

pub async fn plan_runs_guard_refuses_overlap_atomically(store: Arc<dyn Store>) {
    use bosun_core::plan_run::{PlanRunEvent as E, PlanRunState as S};
    seed_org(&*store, "acme").await;
    let a = audit(Some("acme"), "plan_run.create", "plan:app-config");
    let first = store
        .create_plan_run(&plan_run("prun-1", &["web-1", "web-2", "db"]), &a)
        .await
        .unwrap();
    assert_eq!((first.state, first.needs_lease), (S::Queued, true));
    assert_eq!(first.hosts, ["web-1", "web-2", "db"]);
    assert_eq!(first.inputs["release"], json!("2.0"));
    assert_eq!(first.plan_version, 3);
    let refused = store
        .create_plan_run(&plan_run("prun-2", &["web-2", "cache", "web-1"]), &a)
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, StoreError::RunInProgress { hosts } if hosts == &["web-1", "web-2"]),
        "{refused:?}"
    );
    assert_eq!(
        refused.to_string(),
        "Already has a run in progress on the same targets: web-1, web-2"
    );
    assert!(store.get_plan_run("prun-2").await.unwrap().is_none());
    // Disjoint hosts, another plan, or a plan allowing overlap: created.
    store
        .create_plan_run(&plan_run("prun-3", &["cache"]), &a)
        .await
        .unwrap();
    let mut other = plan_run("prun-4", &["web-1"]);
    other.plan = "backup".into();
    store.create_plan_run(&other, &a).await.unwrap();
    let mut concurrent = plan_run("prun-5", &["web-1"]);
    concurrent.concurrent = true;
    store.create_plan_run(&concurrent, &a).await.unwrap();
    // A gated run starts paused, and a paused run still holds its hosts.
    let mut gated = plan_run("prun-6", &["db-2"]);
    gated.gated_environments = vec!["prod".into()];
    let paused = store.create_plan_run(&gated, &a).await.unwrap();
    assert_eq!((paused.state, paused.needs_lease), (S::Paused, false));
    assert!(matches!(
        store
            .create_plan_run(&plan_run("prun-7", &["db-2"]), &a)
            .await,
        Err(StoreError::RunInProgress { .. })
    ));
    // Once the first run ends, its hosts are free again.
    let aborted = store
        .plan_run_event("prun-1", &plan_event(E::Abort, None))
        .await
        .unwrap();
    assert_eq!(aborted.state, S::Aborted);
    assert!(aborted.ended_at.is_some());
    store
        .create_plan_run(&plan_run("prun-8", &["web-2"]), &a)
        .await
        .unwrap();

    // Racing creations over the same host: exactly one passes.
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        let a = a.clone();
        tasks.push(tokio::spawn(async move {
            store
                .create_plan_run(&plan_run(&format!("prun-race-{i}"), &["race-host"]), &a)
                .await
        }));
    }
    let mut created = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => created += 1,
            Err(StoreError::RunInProgress { hosts }) => assert_eq!(hosts, ["race-host"]),
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(created, 1);
    let listed = store
        .list_plan_runs("acme", Some("app-config"), None, 100)
        .await
        .unwrap();
    assert!(listed.iter().all(|r| r.plan == "app-config"));
    assert_eq!(
        listed
            .iter()
            .filter(|r| r.id.starts_with("prun-race"))
            .count(),
        1
    );
}

pub async fn plan_runs_lease_fence_results_and_settle(store: Arc<dyn Store>) {
    use bosun_core::plan_run::{PlanRunEvent as E, PlanRunState as S};
    seed_org(&*store, "acme").await;
    seed_org(&*store, "other").await;
    let a = audit(Some("acme"), "plan_run.create", "plan:app-config");
    store
        .create_plan_run(&plan_run("prun-1", &["web-1", "web-2"]), &a)
        .await
        .unwrap();
    // A pool of another org does not see it.
    let mut foreign = runner(&*store, "r-other").await;
    foreign.org = Some("other".into());
    assert!(store.lease_plan_run(&foreign).await.unwrap().is_none());
    let r = runner(&*store, "r1").await;
    let leased = store.lease_plan_run(&r).await.unwrap().unwrap();
    assert_eq!(leased.id, "prun-1");
    assert_eq!(
        (leased.state, leased.leased, leased.started),
        (S::Running, true, false)
    );
    assert_eq!(leased.runner_id.as_deref(), Some("r1"));
    assert!(leased.fencing > 0);
    // Holding a plan run makes a runner busy, as a stack run does.
    assert!(store.busy_runners().await.unwrap().contains("r1"));
    assert!(store.lease_plan_run(&r).await.unwrap().is_none());
    let f = leased.fencing;
    // A wrong fencing number moves nothing.
    assert!(matches!(
        store
            .plan_run_event("prun-1", &plan_event(E::Started, Some(f + 1)))
            .await,
        Err(StoreError::Fenced { .. })
    ));
    assert!(matches!(
        store.plan_run_heartbeat("prun-1", f + 1).await,
        Err(StoreError::Fenced { .. })
    ));
    let started = store
        .plan_run_event("prun-1", &plan_event(E::Started, Some(f)))
        .await
        .unwrap();
    assert!(started.started);
    assert!(!store.plan_run_heartbeat("prun-1", f).await.unwrap());
    // Results per step and host; a resend replaces, order follows the run's hosts.
    store
        .put_plan_run_results(
            "prun-1",
            f,
            &[host_result(1, "web-2", "ok"), host_result(1, "web-1", "ok")],
        )
        .await
        .unwrap();
    store
        .put_plan_run_results("prun-1", f, &[host_result(1, "web-2", "changed")])
        .await
        .unwrap();
    assert!(matches!(
        store
            .put_plan_run_results("prun-1", f + 1, &[host_result(2, "web-1", "ok")])
            .await,
        Err(StoreError::Fenced { .. })
    ));
    let results = store.plan_run_results("prun-1").await.unwrap();
    let seen: Vec<(i64, &str, &str)> = results
        .iter()
        .map(|r| (r.step, r.host.as_str(), r.status.as_str()))
        .collect();
    assert_eq!(seen, [(1, "web-1", "ok"), (1, "web-2", "changed")]);
    assert_eq!(results[1], host_result(1, "web-2", "changed"));
    // The end, with the report kept.
    let mut done = plan_event(E::Finished { ok: false }, Some(f));
    done.reason = Some("step 2 failed on web-1".into());
    done.report = Some(json!({"unresolved": []}));
    let ended = store.plan_run_event("prun-1", &done).await.unwrap();
    assert_eq!((ended.state, ended.leased), (S::Failed, false));
    assert!(!store.busy_runners().await.unwrap().contains("r1"));
    assert_eq!(ended.reason.as_deref(), Some("step 2 failed on web-1"));
    assert_eq!(ended.report, Some(json!({"unresolved": []})));
    assert!(ended.ended_at.is_some());
    // The settled run is fenced for its old runner, and refuses more transitions.
    assert!(matches!(
        store.plan_run_heartbeat("prun-1", f).await,
        Err(StoreError::Fenced { .. })
    ));
    assert!(matches!(
        store
            .plan_run_event("prun-1", &plan_event(E::Abort, None))
            .await,
        Err(StoreError::InvalidPlanTransition(_))
    ));
    // Logs: numbered, idempotent, fenced.
    store
        .append_plan_run_logs("prun-1", f, &[(0, "a\n".into()), (1, "b\n".into())])
        .await
        .unwrap();
    store
        .append_plan_run_logs("prun-1", f, &[(1, "B\n".into()), (2, "c\n".into())])
        .await
        .unwrap();
    assert!(matches!(
        store
            .append_plan_run_logs("prun-1", f + 1, &[(3, "x".into())])
            .await,
        Err(StoreError::Fenced { .. })
    ));
    assert_eq!(store.next_plan_run_log_seq("prun-1").await.unwrap(), 3);
    let logs = store
        .read_plan_run_logs("prun-1", Some(0), 10)
        .await
        .unwrap();
    assert_eq!(logs, [(1, "b\n".to_string()), (2, "c\n".to_string())]);
}

pub async fn plan_runs_abort_stale_and_requeue(store: Arc<dyn Store>) {
    use bosun_core::plan_run::{PlanRunEvent as E, PlanRunState as S};
    seed_org(&*store, "acme").await;
    let a = audit(Some("acme"), "plan_run.create", "plan:app-config");
    let r = runner(&*store, "r1").await;
    // A lease that never started goes back to the queue, with a new fencing number next time.
    store
        .create_plan_run(&plan_run("prun-q", &["h1"]), &a)
        .await
        .unwrap();
    let l1 = store.lease_plan_run(&r).await.unwrap().unwrap();
    let stale = store
        .stale_plan_runs(Utc::now() + Duration::seconds(1))
        .await
        .unwrap();
    assert_eq!(
        stale.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["prun-q"]
    );
    let requeued = store
        .plan_run_event("prun-q", &plan_event(E::Requeue, Some(l1.fencing)))
        .await
        .unwrap();
    assert_eq!(
        (requeued.state, requeued.needs_lease, requeued.leased),
        (S::Queued, true, false)
    );
    let l2 = store.lease_plan_run(&r).await.unwrap().unwrap();
    assert!(l2.fencing > l1.fencing);
    // Started, some progress, then the runner goes silent: interrupted, progress kept.
    store
        .plan_run_event("prun-q", &plan_event(E::Started, Some(l2.fencing)))
        .await
        .unwrap();
    store
        .put_plan_run_results("prun-q", l2.fencing, &[host_result(1, "h1", "changed")])
        .await
        .unwrap();
    let interrupted = store
        .plan_run_event("prun-q", &plan_event(E::Stale, Some(l2.fencing)))
        .await
        .unwrap();
    assert_eq!(
        (interrupted.state, interrupted.leased),
        (S::Interrupted, false)
    );
    assert!(interrupted.reason.unwrap().contains("stopped reporting"));
    assert_eq!(store.plan_run_results("prun-q").await.unwrap().len(), 1);
    assert!(store
        .stale_plan_runs(Utc::now() + Duration::seconds(1))
        .await
        .unwrap()
        .is_empty());

    // Abort while a runner executes: settled at once, the heartbeat says stop, and the
    // runner's acknowledgement releases the lease.
    store
        .create_plan_run(&plan_run("prun-a", &["h1"]), &a)
        .await
        .unwrap();
    let l = store.lease_plan_run(&r).await.unwrap().unwrap();
    store
        .plan_run_event("prun-a", &plan_event(E::Started, Some(l.fencing)))
        .await
        .unwrap();
    let mut abort = plan_event(E::Abort, None);
    abort.reason = Some("aborted by alice".into());
    abort.audit = Some(audit(Some("acme"), "plan_run.abort", "plan_run:prun-a"));
    let aborted = store.plan_run_event("prun-a", &abort).await.unwrap();
    assert_eq!(
        (aborted.state, aborted.leased, aborted.cancel_requested),
        (S::Aborted, true, true)
    );
    assert!(aborted.ended_at.is_some());
    // The guard no longer counts it.
    store
        .create_plan_run(&plan_run("prun-b", &["h1"]), &a)
        .await
        .unwrap();
    assert!(store.plan_run_heartbeat("prun-a", l.fencing).await.unwrap());
    let released = store
        .plan_run_event("prun-a", &plan_event(E::AbortAcknowledged, Some(l.fencing)))
        .await
        .unwrap();
    assert_eq!((released.state, released.leased), (S::Aborted, false));
    assert_eq!(released.reason.as_deref(), Some("aborted by alice"));
    assert_eq!(released.ended_at, aborted.ended_at);
    assert!(matches!(
        store.plan_run_heartbeat("prun-a", l.fencing).await,
        Err(StoreError::Fenced { .. })
    ));
    let actions = audit_actions(&*store, "acme").await;
    assert!(actions.iter().any(|x| x == "plan_run.abort"), "{actions:?}");
}

// ---- The approvals inbox and plan schedules ----

fn gated_spec(id: &str, env: Option<&str>, autodeploy: bool) -> StackSpec {
    StackSpec::from_input(StackInput {
        id: id.into(),
        repository: "github:acme/infra".into(),
        autodeploy,
        environment: env.map(str::to_string),
        ..Default::default()
    })
    .unwrap()
}

/// A new tracked run of `stack`, leased and planned with changes: where it stops.
async fn planned_run(store: &dyn Store, r: &RunnerRecord, id: &str, stack: &str) -> RunRecord {
    store
        .create_run(&new_run(id, stack, RunKind::Tracked), None)
        .await
        .unwrap();
    let leased = store.lease_run(r).await.unwrap().unwrap();
    assert_eq!(leased.id, id, "the only dispatchable run");
    store
        .run_event(id, &ev(Event::PhaseStarted, leased.fencing))
        .await
        .unwrap();
    store
        .run_event(
            id,
            &ev(Event::PlanFinished { changes: true }, leased.fencing),
        )
        .await
        .unwrap()
        .run
}

fn gated_plan_run(id: &str, org: &str, hosts: &[&str]) -> NewPlanRun {
    let mut run = plan_run(id, hosts);
    run.org = org.into();
    run.gated_environments = vec!["prod".into()];
    run
}

fn approval(
    org: &str,
    subject: &str,
    decision: bosun_core::approval::Decision,
    by: &str,
    comment: Option<&str>,
) -> ApprovalDecisionInput {
    let verb = match decision {
        bosun_core::approval::Decision::Approve => "approval.approve",
        bosun_core::approval::Decision::Reject => "approval.reject",
    };
    ApprovalDecisionInput {
        org: org.into(),
        subject: subject.into(),
        decision,
        decided_by: by.into(),
        comment: comment.map(str::to_string),
        audit: audit(Some(org), verb, &format!("run:{subject}")),
    }
}

fn not_awaiting(result: Result<impl std::fmt::Debug>, subject: &str, says: &str) {
    match result {
        Err(StoreError::NotAwaitingApproval { subject: s, why }) => {
            assert_eq!(s, subject);
            assert!(why.contains(says), "{why:?} should say {says:?}");
        }
        other => panic!("{subject}: expected NotAwaitingApproval, got {other:?}"),
    }
}

/// Audit records of `org` about `target`.
async fn audit_of(store: &dyn Store, org: &str, target: &str) -> Vec<Audit> {
    store
        .list_audit(Some(org), None, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.entry)
        .filter(|e| e.target == target)
        .collect()
}

pub async fn approvals_pending_from_paused_and_gated_runs(store: Arc<dyn Store>) {
    use bosun_core::approval::SubjectKind as K;
    use bosun_core::plan_run::{PlanRunEvent as E, PlanRunState as S};
    seed_org(&*store, "acme").await;
    seed_org(&*store, "other").await;
    let a = |action: &str, target: &str| audit(Some("acme"), action, target);
    for (env, gated) in [("prod", true), ("dev", false)] {
        store
            .create_environment(
                &environment("acme", env, gated),
                &a("environment.create", env),
            )
            .await
            .unwrap();
    }
    // `gated` would autodeploy, but its environment requires approval: it never does.
    for (id, env, autodeploy) in [
        ("gated", Some("prod"), true),
        ("plain", Some("dev"), false),
        ("auto", Some("dev"), true),
    ] {
        store
            .create_stack(
                "acme",
                &gated_spec(id, env, autodeploy),
                &a("stack.create", id),
            )
            .await
            .unwrap();
    }
    let pa = a("plan_run.create", "plan:app-config");
    let paused = store
        .create_plan_run(&gated_plan_run("prun-p1", "acme", &["db-1"]), &pa)
        .await
        .unwrap();
    assert_eq!(paused.state, S::Paused);
    let queued = store
        .create_plan_run(&plan_run("prun-q", &["web-1"]), &pa)
        .await
        .unwrap();
    assert_eq!(queued.state, S::Queued);
    store
        .create_plan_run(&gated_plan_run("prun-p2", "acme", &["db-2"]), &pa)
        .await
        .unwrap();
    let aborted = store
        .plan_run_event("prun-p2", &plan_event(E::Abort, None))
        .await
        .unwrap();
    assert_eq!(aborted.state, S::Aborted);
    store
        .create_plan_run(
            &gated_plan_run("prun-o", "other", &["db-1"]),
            &audit(Some("other"), "plan_run.create", "plan:app-config"),
        )
        .await
        .unwrap();

    let r = runner(&*store, "runner-1").await;
    let gated = planned_run(&*store, &r, "run-g1", "gated").await;
    assert_eq!(
        (gated.state, gated.needs_lease),
        (RunState::Unconfirmed, false)
    );
    let plain = planned_run(&*store, &r, "run-p1", "plain").await;
    assert_eq!(plain.state, RunState::Unconfirmed);
    let auto = planned_run(&*store, &r, "run-a1", "auto").await;
    assert_eq!(auto.state, RunState::Applying, "ungated autodeploy applies");
    // A second tracked run of the gated stack waits in the queue, not in the inbox.
    store
        .create_run(&new_run("run-g2", "gated", RunKind::Tracked), None)
        .await
        .unwrap();

    let pending = store.pending_approvals("acme").await.unwrap();
    let subjects: Vec<(K, &str)> = pending
        .iter()
        .map(|p| (p.kind, p.subject.as_str()))
        .collect();
    assert_eq!(
        subjects,
        [(K::PlanRun, "prun-p1"), (K::StackRun, "run-g1")],
        "oldest first: {pending:?}"
    );
    assert_eq!(
        pending[0],
        PendingApproval {
            kind: K::PlanRun,
            subject: "prun-p1".into(),
            org: "acme".into(),
            target: "app-config".into(),
            environments: vec!["prod".into()],
            requested_by: "user:alice".into(),
            since: paused.created_at,
        }
    );
    let stack = &pending[1];
    assert_eq!(
        (
            stack.org.as_str(),
            stack.target.as_str(),
            stack.environments.as_slice(),
            stack.requested_by.as_str()
        ),
        ("acme", "gated", &["prod".to_string()][..], "user:tester")
    );
    // Waiting since it entered `unconfirmed`, not since it was created.
    let phases = store.run_phases("run-g1").await.unwrap();
    let entered = phases
        .iter()
        .find(|p| p.state == RunState::Unconfirmed)
        .unwrap();
    assert_eq!(stack.since, entered.started_at);
    assert!(stack.since >= gated.created_at);

    // One by one: the same record, and the org's own runs only.
    assert_eq!(
        store.pending_approval("acme", "prun-p1").await.unwrap(),
        pending[0]
    );
    assert_eq!(
        store.pending_approval("acme", "run-g1").await.unwrap(),
        pending[1]
    );
    let theirs = store.pending_approvals("other").await.unwrap();
    assert_eq!(
        theirs
            .iter()
            .map(|p| p.subject.as_str())
            .collect::<Vec<_>>(),
        ["prun-o"]
    );
    for (org, subject) in [
        ("acme", "prun-o"),
        ("other", "prun-p1"),
        ("other", "run-g1"),
        ("acme", "prun-none"),
    ] {
        assert!(
            matches!(
                store.pending_approval(org, subject).await,
                Err(StoreError::NotFound(_))
            ),
            "{org}/{subject}"
        );
    }
    // Runs that do not wait say why.
    not_awaiting(
        store.pending_approval("acme", "prun-q").await,
        "prun-q",
        "queued",
    );
    not_awaiting(
        store.pending_approval("acme", "prun-p2").await,
        "prun-p2",
        "aborted",
    );
    not_awaiting(
        store.pending_approval("acme", "run-p1").await,
        "run-p1",
        "no environment that requires approval",
    );
    not_awaiting(
        store.pending_approval("acme", "run-g2").await,
        "run-g2",
        "queued",
    );
    not_awaiting(
        store.pending_approval("acme", "run-a1").await,
        "run-a1",
        "no environment that requires approval",
    );

    // Read from the runs themselves: an environment that stops requiring approval takes
    // its stack runs out of the inbox (paused plan runs stay until decided), and back.
    let mut prod = environment("acme", "prod", false);
    store
        .update_environment(&prod, &a("environment.update", "prod"))
        .await
        .unwrap();
    let now: Vec<String> = store
        .pending_approvals("acme")
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.subject)
        .collect();
    assert_eq!(now, ["prun-p1"]);
    prod.requires_approval = true;
    store
        .update_environment(&prod, &a("environment.update", "prod"))
        .await
        .unwrap();
    assert_eq!(store.pending_approvals("acme").await.unwrap(), pending);
}

pub async fn approvals_decided_once_in_one_transaction(store: Arc<dyn Store>) {
    use bosun_core::approval::{Decision as D, SubjectKind as K};
    use bosun_core::plan_run::PlanRunState as S;
    seed_org(&*store, "acme").await;
    seed_org(&*store, "other").await;
    let a = |action: &str, target: &str| audit(Some("acme"), action, target);
    store
        .create_environment(
            &environment("acme", "prod", true),
            &a("environment.create", "prod"),
        )
        .await
        .unwrap();
    for id in ["gated-a", "gated-b"] {
        store
            .create_stack(
                "acme",
                &gated_spec(id, Some("prod"), false),
                &a("stack.create", id),
            )
            .await
            .unwrap();
    }
    let pa = a("plan_run.create", "plan:app-config");
    for (id, host) in [("prun-1", "h1"), ("prun-2", "h2"), ("prun-race", "h3")] {
        store
            .create_plan_run(&gated_plan_run(id, "acme", &[host]), &pa)
            .await
            .unwrap();
    }
    let r = runner(&*store, "runner-1").await;
    planned_run(&*store, &r, "run-a", "gated-a").await;
    planned_run(&*store, &r, "run-b", "gated-b").await;
    let decisions_before = store.list_audit(None, None, 1000).await.unwrap().len();

    // A decision on a run the org does not have changes nothing, writes nothing.
    assert!(matches!(
        store
            .decide_approval(&approval("other", "prun-1", D::Approve, "user:bob", None))
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(
        store.list_audit(None, None, 1000).await.unwrap().len(),
        decisions_before
    );
    assert!(store
        .approval_decisions("other", 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        store.get_plan_run("prun-1").await.unwrap().unwrap().state,
        S::Paused
    );

    // Approve a plan run: queued for a runner, the decision recorded and audited.
    let before = Utc::now() - Duration::seconds(1);
    let (record, outcome) = store
        .decide_approval(&approval("acme", "prun-1", D::Approve, "user:bob", None))
        .await
        .unwrap();
    let after = Utc::now() + Duration::seconds(1);
    assert!(record.decided_at >= before && record.decided_at <= after);
    assert_eq!(
        record,
        ApprovalRecord {
            kind: K::PlanRun,
            subject: "prun-1".into(),
            org: "acme".into(),
            target: "app-config".into(),
            environments: vec!["prod".into()],
            requested_by: "user:alice".into(),
            decision: D::Approve,
            decided_by: "user:bob".into(),
            comment: None,
            decided_at: record.decided_at,
        }
    );
    let ApprovalOutcome::PlanRun(run) = outcome else {
        panic!("a plan run's outcome: {outcome:?}")
    };
    assert_eq!((run.state, run.needs_lease), (S::Queued, true));
    assert_eq!(store.get_plan_run("prun-1").await.unwrap().unwrap(), *run);
    // Decided once: a second decision is refused and changes nothing.
    not_awaiting(
        store
            .decide_approval(&approval("acme", "prun-1", D::Reject, "user:carol", None))
            .await,
        "prun-1",
        "queued",
    );
    assert_eq!(
        store.get_plan_run("prun-1").await.unwrap().unwrap().state,
        S::Queued
    );
    let trail = audit_of(&*store, "acme", "run:prun-1").await;
    assert_eq!(
        trail.iter().map(|e| e.action.as_str()).collect::<Vec<_>>(),
        ["approval.approve"]
    );

    // Reject a plan run with a comment: it ends with the reason and frees its hosts.
    let (record, outcome) = store
        .decide_approval(&approval(
            "acme",
            "prun-2",
            D::Reject,
            "user:bob",
            Some("not during the freeze"),
        ))
        .await
        .unwrap();
    assert_eq!(
        (record.decision, record.comment.as_deref()),
        (D::Reject, Some("not during the freeze"))
    );
    let ApprovalOutcome::PlanRun(run) = outcome else {
        panic!("a plan run's outcome: {outcome:?}")
    };
    assert_eq!(run.state, S::Rejected);
    assert_eq!(
        run.reason.as_deref(),
        Some("rejected by user:bob: not during the freeze")
    );
    assert!(run.ended_at.is_some());
    store
        .create_plan_run(&plan_run("prun-2b", &["h2"]), &pa)
        .await
        .unwrap();

    // Approve a gated stack run: confirmed, on to its apply.
    let (record, outcome) = store
        .decide_approval(&approval(
            "acme",
            "run-a",
            D::Approve,
            "user:bob",
            Some("ok"),
        ))
        .await
        .unwrap();
    assert_eq!(
        (
            record.kind,
            record.target.as_str(),
            record.environments.as_slice(),
            record.requested_by.as_str()
        ),
        (
            K::StackRun,
            "gated-a",
            &["prod".to_string()][..],
            "user:tester"
        )
    );
    let ApprovalOutcome::StackRun(run) = outcome else {
        panic!("a stack run's outcome: {outcome:?}")
    };
    assert_eq!(
        (run.state, run.phase, run.needs_lease),
        (RunState::Applying, Phase::Apply, true)
    );
    // Reject one: discarded with the reason.
    let (_, outcome) = store
        .decide_approval(&approval("acme", "run-b", D::Reject, "user:bob", None))
        .await
        .unwrap();
    let ApprovalOutcome::StackRun(run) = outcome else {
        panic!("a stack run's outcome: {outcome:?}")
    };
    assert_eq!(run.state, RunState::Discarded);
    assert_eq!(run.reason.as_deref(), Some("rejected by user:bob"));
    not_awaiting(
        store
            .decide_approval(&approval("acme", "run-b", D::Approve, "user:carol", None))
            .await,
        "run-b",
        "discarded",
    );
    for run in ["run-a", "run-b"] {
        assert_eq!(
            audit_of(&*store, "acme", &format!("run:{run}")).await.len(),
            1,
            "{run}: one audit record"
        );
    }

    // Racing decisions on one run: exactly one lands, with its audit record.
    let mut tasks = Vec::new();
    for i in 0..6 {
        let store = store.clone();
        let d = if i % 2 == 0 { D::Approve } else { D::Reject };
        tasks.push(tokio::spawn(async move {
            let by = format!("user:u{i}");
            let out = store
                .decide_approval(&approval("acme", "prun-race", d, &by, None))
                .await;
            (by, d, out)
        }));
    }
    let mut winners = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            (by, d, Ok(_)) => winners.push((by, d)),
            (_, _, Err(StoreError::NotAwaitingApproval { subject, .. })) => {
                assert_eq!(subject, "prun-race")
            }
            (_, _, Err(e)) => panic!("{e:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    let (by, d) = &winners[0];
    let state = store
        .get_plan_run("prun-race")
        .await
        .unwrap()
        .unwrap()
        .state;
    assert_eq!(
        state,
        if *d == D::Approve {
            S::Queued
        } else {
            S::Rejected
        }
    );
    let trail = audit_of(&*store, "acme", "run:prun-race").await;
    assert_eq!(trail.len(), 1, "{trail:?}");

    // The decisions, newest first, the org's own, limited.
    let all = store.approval_decisions("acme", 10).await.unwrap();
    let mut subjects: Vec<&str> = all.iter().map(|d| d.subject.as_str()).collect();
    assert!(
        all.windows(2).all(|w| w[0].decided_at >= w[1].decided_at),
        "{all:?}"
    );
    let race = all.iter().find(|x| x.subject == "prun-race").unwrap();
    assert_eq!((&race.decided_by, race.decision), (by, *d));
    subjects.sort_unstable();
    assert_eq!(
        subjects,
        ["prun-1", "prun-2", "prun-race", "run-a", "run-b"]
    );
    assert_eq!(store.approval_decisions("acme", 2).await.unwrap(), all[..2]);
    assert!(store.pending_approvals("acme").await.unwrap().is_empty());
}

fn schedule_input(plan: &str, cron: &str) -> PlanScheduleInput {
    PlanScheduleInput {
        org: "acme".into(),
        plan: plan.into(),
        cron: cron.into(),
        timezone: "Europe/Berlin".into(),
        inputs: BTreeMap::from([("release".to_string(), json!("2.0"))]),
        updated_by: "user:alice".into(),
    }
}

async fn save_plan_named(store: &dyn Store, org: &str, name: &str) {
    store
        .save_plan(
            &NewPlan {
                org: org.into(),
                name: name.into(),
                source: format!("name: {name}\nsteps: []\n"),
                schedule: None,
            },
            &audit(Some(org), "plan.save", &format!("plan:{name}")),
        )
        .await
        .unwrap();
}

async fn schedule_of(store: &dyn Store, org: &str, plan: &str) -> Option<PlanScheduleRecord> {
    let mut found = store.plan_schedules(Some(org), Some(plan)).await.unwrap();
    assert!(found.len() <= 1);
    found.pop()
}

/// A time the store keeps exactly (milliseconds).
fn at_millis(t: chrono::DateTime<Utc>) -> chrono::DateTime<Utc> {
    chrono::DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap()
}

/// Saves plan `name` of org `acme` with (or without) a file schedule, as `actor`.
async fn save_plan_scheduled(
    store: &dyn Store,
    name: &str,
    schedule: Option<(&str, &str)>,
    actor: &str,
) -> Result<PlanRecord> {
    let mut a = audit(Some("acme"), "plan.save", &format!("plan:{name}"));
    a.actor = actor.into();
    store
        .save_plan(
            &NewPlan {
                org: "acme".into(),
                name: name.into(),
                source: format!("name: {name}\nsteps: []\n"),
                schedule: schedule.map(|(cron, timezone)| PlanFileSchedule {
                    cron: cron.into(),
                    timezone: timezone.into(),
                    inputs: BTreeMap::from([("release".to_string(), json!("3.0"))]),
                }),
            },
            &a,
        )
        .await
}

pub async fn plan_schedules_from_files_follow_the_file(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let a = |action: &str| audit(Some("acme"), action, "plan:app-config");
    let last_save = |store: Arc<dyn Store>| async move {
        store
            .list_audit(Some("acme"), None, 1000)
            .await
            .unwrap()
            .into_iter()
            .find(|e| e.entry.action == "plan.save")
            .unwrap()
            .entry
            .detail
    };

    // Saved with a schedule: the plan's schedule, marked as the file's, in the same write.
    save_plan_scheduled(
        &*store,
        "app-config",
        Some(("0 2 * * *", "Europe/Berlin")),
        "user:alice",
    )
    .await
    .unwrap();
    let s = schedule_of(&*store, "acme", "app-config").await.unwrap();
    assert_eq!(
        (
            s.cron.as_str(),
            s.timezone.as_str(),
            s.updated_by.as_str(),
            s.from_file
        ),
        ("0 2 * * *", "Europe/Berlin", "user:alice", true)
    );
    assert_eq!(
        s.inputs,
        BTreeMap::from([("release".to_string(), json!("3.0"))])
    );
    assert_eq!(last_save(store.clone()).await["schedule"], "set");

    // The API may neither change nor clear it — and writes nothing trying.
    let audits = store.list_audit(None, None, 1000).await.unwrap().len();
    assert!(matches!(
        store
            .put_plan_schedule(&schedule_input("app-config", "0 3 * * *"), &a("plan.schedule.set"))
            .await,
        Err(StoreError::ScheduleFromFile { plan }) if plan == "app-config"
    ));
    assert!(matches!(
        store
            .delete_plan_schedule("acme", "app-config", &a("plan.schedule.delete"))
            .await,
        Err(StoreError::ScheduleFromFile { .. })
    ));
    assert_eq!(
        store.list_audit(None, None, 1000).await.unwrap().len(),
        audits
    );
    assert_eq!(schedule_of(&*store, "acme", "app-config").await.unwrap(), s);

    // A new version with another schedule replaces the settings; the scheduler's
    // bookkeeping stays (it re-arms on a change).
    let t0 = at_millis(Utc::now());
    assert_eq!(
        store
            .fire_plan_schedule(&PlanScheduleFire {
                org: "acme".into(),
                plan: "app-config".into(),
                cron: "0 2 * * *".into(),
                timezone: "Europe/Berlin".into(),
                expected_next: None,
                next_at: t0 + Duration::hours(1),
                since: Some(t0),
                run: None,
                note: None,
                now: t0,
            })
            .await
            .unwrap(),
        PlanScheduleFired::Armed
    );
    save_plan_scheduled(&*store, "app-config", Some(("@hourly", "UTC")), "user:bob")
        .await
        .unwrap();
    let s2 = schedule_of(&*store, "acme", "app-config").await.unwrap();
    assert_eq!(
        (
            s2.cron.as_str(),
            s2.timezone.as_str(),
            s2.updated_by.as_str(),
            s2.from_file
        ),
        ("@hourly", "UTC", "user:bob", true)
    );
    assert_eq!(s2.armed.map(|x| x.next_at), Some(t0 + Duration::hours(1)));

    // A version without one removes it.
    let v = save_plan_scheduled(&*store, "app-config", None, "user:bob")
        .await
        .unwrap();
    assert_eq!(v.version, 3);
    assert_eq!(schedule_of(&*store, "acme", "app-config").await, None);
    assert_eq!(last_save(store.clone()).await["schedule"], "removed");

    // One set through the API is the API's: files without a schedule leave it alone,
    // a file with one takes it over.
    let api = store
        .put_plan_schedule(
            &schedule_input("app-config", "0 3 * * *"),
            &a("plan.schedule.set"),
        )
        .await
        .unwrap();
    assert!(!api.from_file);
    save_plan_scheduled(&*store, "app-config", None, "user:bob")
        .await
        .unwrap();
    assert_eq!(
        schedule_of(&*store, "acme", "app-config")
            .await
            .map(|s| s.cron),
        Some("0 3 * * *".to_string())
    );
    assert!(last_save(store.clone()).await.get("schedule").is_none());
    save_plan_scheduled(
        &*store,
        "app-config",
        Some(("0 5 * * *", "UTC")),
        "user:bob",
    )
    .await
    .unwrap();
    let taken = schedule_of(&*store, "acme", "app-config").await.unwrap();
    assert_eq!((taken.cron.as_str(), taken.from_file), ("0 5 * * *", true));

    // A failed save (unknown org) changes no schedule.
    seed_org(&*store, "other").await;
    let mut theirs = NewPlan {
        org: "nope".into(),
        name: "app-config".into(),
        source: "name: app-config\nsteps: []\n".into(),
        schedule: None,
    };
    assert!(store.save_plan(&theirs, &a("plan.save")).await.is_err());
    theirs.org = "other".into();
    store.save_plan(&theirs, &a("plan.save")).await.unwrap();
    assert_eq!(
        schedule_of(&*store, "acme", "app-config").await,
        Some(taken)
    );
}

pub async fn plan_schedules_set_replace_clear(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    seed_org(&*store, "other").await;
    let a = |action: &str| audit(Some("acme"), action, "plan:app-config");
    save_plan_named(&*store, "acme", "app-config").await;
    let audits = store.list_audit(None, None, 1000).await.unwrap().len();
    // No plan, no schedule — and nothing written.
    assert!(matches!(
        store
            .put_plan_schedule(
                &schedule_input("ghost", "0 3 * * *"),
                &a("plan.schedule.set")
            )
            .await,
        Err(StoreError::NotFound(_))
    ));
    let mut theirs = schedule_input("app-config", "0 3 * * *");
    theirs.org = "other".into();
    assert!(matches!(
        store
            .put_plan_schedule(&theirs, &a("plan.schedule.set"))
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(
        store.list_audit(None, None, 1000).await.unwrap().len(),
        audits
    );
    assert!(store.plan_schedules(None, None).await.unwrap().is_empty());

    let set = schedule_input("app-config", "0 3 * * *");
    let before = Utc::now() - Duration::seconds(1);
    let first = store
        .put_plan_schedule(&set, &a("plan.schedule.set"))
        .await
        .unwrap();
    assert_eq!(
        (
            first.org.as_str(),
            first.plan.as_str(),
            first.cron.as_str(),
            first.timezone.as_str(),
            first.updated_by.as_str()
        ),
        (
            "acme",
            "app-config",
            "0 3 * * *",
            "Europe/Berlin",
            "user:alice"
        )
    );
    assert_eq!(first.inputs, set.inputs);
    assert!(first.updated_at >= before && first.updated_at <= Utc::now() + Duration::seconds(1));
    assert!(
        first.armed.is_none(),
        "armed by the scheduler, not by a set"
    );
    assert_eq!(
        schedule_of(&*store, "acme", "app-config").await.unwrap(),
        first
    );
    assert_eq!(
        audit_actions(&*store, "acme")
            .await
            .iter()
            .filter(|x| *x == "plan.schedule.set")
            .count(),
        1
    );

    // Listed by org, then plan; filtered by either.
    save_plan_named(&*store, "acme", "backup").await;
    save_plan_named(&*store, "other", "backup").await;
    store
        .put_plan_schedule(
            &schedule_input("backup", "0 1 * * *"),
            &a("plan.schedule.set"),
        )
        .await
        .unwrap();
    let mut other_backup = schedule_input("backup", "0 2 * * *");
    other_backup.org = "other".into();
    store
        .put_plan_schedule(
            &other_backup,
            &audit(Some("other"), "plan.schedule.set", "plan:backup"),
        )
        .await
        .unwrap();
    let keys = |list: Vec<PlanScheduleRecord>| -> Vec<(String, String)> {
        list.into_iter().map(|s| (s.org, s.plan)).collect()
    };
    assert_eq!(
        keys(store.plan_schedules(None, None).await.unwrap()),
        [
            pair("acme", "app-config"),
            pair("acme", "backup"),
            pair("other", "backup")
        ]
    );
    assert_eq!(
        keys(store.plan_schedules(Some("acme"), None).await.unwrap()),
        [pair("acme", "app-config"), pair("acme", "backup")]
    );
    assert_eq!(
        keys(store.plan_schedules(None, Some("backup")).await.unwrap()),
        [pair("acme", "backup"), pair("other", "backup")]
    );

    // Replacing the settings keeps the scheduler's bookkeeping (it re-arms on a change).
    let t0 = at_millis(Utc::now());
    assert_eq!(
        store
            .fire_plan_schedule(&PlanScheduleFire {
                org: "acme".into(),
                plan: "app-config".into(),
                cron: "0 3 * * *".into(),
                timezone: "Europe/Berlin".into(),
                expected_next: None,
                next_at: t0 + Duration::hours(1),
                since: Some(t0),
                run: None,
                note: None,
                now: t0,
            })
            .await
            .unwrap(),
        PlanScheduleFired::Armed
    );
    let mut replaced = schedule_input("app-config", "30 4 * * 1");
    replaced.timezone = "UTC".into();
    replaced.inputs = BTreeMap::new();
    replaced.updated_by = "user:bob".into();
    let second = store
        .put_plan_schedule(&replaced, &a("plan.schedule.set"))
        .await
        .unwrap();
    assert_eq!(
        (
            second.cron.as_str(),
            second.timezone.as_str(),
            second.updated_by.as_str()
        ),
        ("30 4 * * 1", "UTC", "user:bob")
    );
    assert!(second.inputs.is_empty());
    assert!(second.updated_at >= first.updated_at);
    let armed = second.armed.expect("the bookkeeping stays");
    assert_eq!(
        (armed.cron.as_str(), armed.timezone.as_str()),
        ("0 3 * * *", "Europe/Berlin")
    );
    assert_eq!((armed.since, armed.next_at), (t0, t0 + Duration::hours(1)));

    // Cleared once; the other schedules stay.
    let audits = store.list_audit(None, None, 1000).await.unwrap().len();
    assert!(store
        .delete_plan_schedule("acme", "app-config", &a("plan.schedule.delete"))
        .await
        .unwrap());
    assert!(!store
        .delete_plan_schedule("acme", "app-config", &a("plan.schedule.delete"))
        .await
        .unwrap());
    assert!(!store
        .delete_plan_schedule("other", "app-config", &a("plan.schedule.delete"))
        .await
        .unwrap());
    assert_eq!(
        store.list_audit(None, None, 1000).await.unwrap().len(),
        audits + 1,
        "only the delete that removed something is audited"
    );
    assert!(schedule_of(&*store, "acme", "app-config").await.is_none());
    assert!(store
        .get_plan("acme", "app-config")
        .await
        .unwrap()
        .is_some());
    // Deleting a plan takes its schedule with it.
    assert!(store
        .delete_plan("acme", "backup", &a("plan.delete"))
        .await
        .unwrap());
    assert_eq!(
        keys(store.plan_schedules(None, None).await.unwrap()),
        [pair("other", "backup")]
    );
}

pub async fn plan_schedules_fire_once_under_compare_and_set(store: Arc<dyn Store>) {
    use bosun_core::plan_run::{PlanRunEvent as E, PlanRunState as S, PlanTrigger};
    seed_org(&*store, "acme").await;
    save_plan_named(&*store, "acme", "app-config").await;
    store
        .put_plan_schedule(
            &schedule_input("app-config", "0 3 * * *"),
            &audit(Some("acme"), "plan.schedule.set", "plan:app-config"),
        )
        .await
        .unwrap();
    let t0 = at_millis(Utc::now());
    let t = |hours: i64| t0 + Duration::hours(hours);
    let fire = |expected: Option<i64>, next: i64, run: Option<NewPlanRun>, note: Option<&str>| {
        PlanScheduleFire {
            org: "acme".into(),
            plan: "app-config".into(),
            cron: "0 3 * * *".into(),
            timezone: "Europe/Berlin".into(),
            expected_next: expected.map(t),
            next_at: t(next),
            since: None,
            run,
            note: note.map(str::to_string),
            now: t(next - 1),
        }
    };
    let scheduled = |id: &str, hosts: &[&str]| {
        let mut run = plan_run(id, hosts);
        run.requested_by = "schedule".into();
        run.trigger = PlanTrigger::Schedule;
        run
    };
    let bookkeeping = |s: Option<PlanScheduleRecord>| s.unwrap().armed.unwrap();

    // Not armed yet: a pass that thinks otherwise loses.
    assert_eq!(
        store
            .fire_plan_schedule(&fire(Some(1), 2, None, None))
            .await
            .unwrap(),
        PlanScheduleFired::Raced
    );
    assert!(schedule_of(&*store, "acme", "app-config")
        .await
        .unwrap()
        .armed
        .is_none());
    // Arming: since and next, no fire yet; a second arming pass loses.
    let mut arm = fire(None, 1, None, None);
    arm.since = Some(t0);
    arm.now = t0;
    assert_eq!(
        store.fire_plan_schedule(&arm).await.unwrap(),
        PlanScheduleFired::Armed
    );
    assert_eq!(
        bookkeeping(schedule_of(&*store, "acme", "app-config").await),
        PlanScheduleArmed {
            cron: "0 3 * * *".into(),
            timezone: "Europe/Berlin".into(),
            since: t0,
            next_at: t(1),
            last_fire_at: None,
            last_fire_run: None,
            last_fire_note: None,
        }
    );
    assert_eq!(
        store.fire_plan_schedule(&arm).await.unwrap(),
        PlanScheduleFired::Raced
    );

    // A fire creates the run in the transaction that moves the schedule on; a catch-up
    // run keeps the scheduler's note about the missed times.
    let caught_up = "2 scheduled run(s) passed while the server was down or busy; ran one";
    let first = fire(
        Some(1),
        2,
        Some(scheduled("prun-s1", &["web-1"])),
        Some(caught_up),
    );
    let PlanScheduleFired::Started(run) = store.fire_plan_schedule(&first).await.unwrap() else {
        panic!("the first fire starts a run")
    };
    assert_eq!(
        (
            run.id.as_str(),
            run.state,
            run.trigger,
            run.requested_by.as_str()
        ),
        ("prun-s1", S::Queued, PlanTrigger::Schedule, "schedule")
    );
    assert_eq!(store.get_plan_run("prun-s1").await.unwrap().unwrap(), *run);
    assert_eq!(
        bookkeeping(schedule_of(&*store, "acme", "app-config").await),
        PlanScheduleArmed {
            cron: "0 3 * * *".into(),
            timezone: "Europe/Berlin".into(),
            since: t0,
            next_at: t(2),
            last_fire_at: Some(t(1)),
            last_fire_run: Some("prun-s1".into()),
            last_fire_note: Some(caught_up.into()),
        }
    );
    let created = store
        .list_audit(Some("acme"), None, 1000)
        .await
        .unwrap()
        .into_iter()
        .find(|x| x.entry.action == "plan_run.create")
        .expect("the scheduled run's audit record");
    assert_eq!(created.entry.actor, "schedule");
    assert_eq!(created.entry.detail["run"], json!("prun-s1"));
    // The same fire again (another server read the old next_at): nothing is created.
    let mut replay = first.clone();
    replay.run = Some(scheduled("prun-s1b", &["web-9"]));
    assert_eq!(
        store.fire_plan_schedule(&replay).await.unwrap(),
        PlanScheduleFired::Raced
    );
    assert!(store.get_plan_run("prun-s1b").await.unwrap().is_none());

    // The concurrency guard refuses the next one: no run, the refusal is the note, and
    // the schedule still moves on.
    let out = store
        .fire_plan_schedule(&fire(
            Some(2),
            3,
            Some(scheduled("prun-s2", &["web-2", "web-1"])),
            None,
        ))
        .await
        .unwrap();
    let PlanScheduleFired::Skipped { reason } = out else {
        panic!("the guard refuses: {out:?}")
    };
    assert!(reason.starts_with("skipped: "), "{reason}");
    assert!(
        reason.contains("Already has a run in progress on the same targets: web-1"),
        "{reason}"
    );
    assert!(store.get_plan_run("prun-s2").await.unwrap().is_none());
    let kept = bookkeeping(schedule_of(&*store, "acme", "app-config").await);
    assert_eq!(
        (
            kept.next_at,
            kept.last_fire_at,
            kept.last_fire_run,
            kept.last_fire_note
        ),
        (t(3), Some(t(2)), None, Some(reason))
    );
    // A run that could not be resolved: the scheduler's note is the reason.
    let why = "skipped: the plan \"app-config\" targets no host";
    assert_eq!(
        store
            .fire_plan_schedule(&fire(Some(3), 4, None, Some(why)))
            .await
            .unwrap(),
        PlanScheduleFired::Skipped { reason: why.into() }
    );
    let kept = bookkeeping(schedule_of(&*store, "acme", "app-config").await);
    assert_eq!(
        (
            kept.next_at,
            kept.last_fire_run,
            kept.last_fire_note.as_deref()
        ),
        (t(4), None, Some(why))
    );

    // A gated plan's scheduled run starts paused, in the inbox; no note this time.
    store
        .plan_run_event("prun-s1", &plan_event(E::Abort, None))
        .await
        .unwrap();
    let mut gated = scheduled("prun-s3", &["web-1"]);
    gated.gated_environments = vec!["prod".into()];
    let PlanScheduleFired::Started(run) = store
        .fire_plan_schedule(&fire(Some(4), 5, Some(gated), None))
        .await
        .unwrap()
    else {
        panic!("a gated run is created paused")
    };
    assert_eq!(run.state, S::Paused);
    let inbox = store.pending_approvals("acme").await.unwrap();
    assert_eq!(
        inbox
            .iter()
            .map(|p| (p.subject.as_str(), p.requested_by.as_str()))
            .collect::<Vec<_>>(),
        [("prun-s3", "schedule")]
    );
    let kept = bookkeeping(schedule_of(&*store, "acme", "app-config").await);
    assert_eq!(
        (kept.last_fire_run.as_deref(), kept.last_fire_note),
        (Some("prun-s3"), None)
    );

    // Racing passes over one due time: exactly one run.
    let mut tasks = Vec::new();
    for i in 0..6 {
        let store = store.clone();
        let host = format!("race-{i}");
        let f = fire(
            Some(5),
            6,
            Some(scheduled(&format!("prun-race-{i}"), &[host.as_str()])),
            None,
        );
        tasks.push(tokio::spawn(
            async move { store.fire_plan_schedule(&f).await },
        ));
    }
    let mut started = Vec::new();
    for task in tasks {
        match task.await.unwrap().unwrap() {
            PlanScheduleFired::Started(run) => started.push(run.id),
            PlanScheduleFired::Raced => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(started.len(), 1, "{started:?}");
    let runs = store
        .list_plan_runs("acme", Some("app-config"), None, 100)
        .await
        .unwrap();
    let raced: Vec<&str> = runs
        .iter()
        .map(|r| r.id.as_str())
        .filter(|id| id.starts_with("prun-race"))
        .collect();
    assert_eq!(raced, [started[0].as_str()]);
    let kept = bookkeeping(schedule_of(&*store, "acme", "app-config").await);
    assert_eq!(
        (kept.next_at, kept.last_fire_run),
        (t(6), Some(started[0].clone()))
    );

    // A cleared schedule is not fired.
    store
        .delete_plan_schedule(
            "acme",
            "app-config",
            &audit(Some("acme"), "plan.schedule.delete", "plan:app-config"),
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .fire_plan_schedule(&fire(
                Some(6),
                7,
                Some(scheduled("prun-late", &["h9"])),
                None
            ))
            .await
            .unwrap(),
        PlanScheduleFired::Raced
    );
    assert!(store.get_plan_run("prun-late").await.unwrap().is_none());
}

pub async fn duty_leases_take_renew_refuse_and_expire(store: Arc<dyn Store>) {
    let ttl = std::time::Duration::from_secs(10);
    let t0 = Utc::now();
    // Take: the lease is free.
    assert!(store.try_duty_lease("sweep", "r1", t0, ttl).await.unwrap());
    // Refused to another holder while live, also just before it expires.
    assert!(!store.try_duty_lease("sweep", "r2", t0, ttl).await.unwrap());
    let almost = t0 + Duration::milliseconds(9_999);
    assert!(!store
        .try_duty_lease("sweep", "r2", almost, ttl)
        .await
        .unwrap());
    // Another duty's lease is separate.
    assert!(store.try_duty_lease("poll", "r2", t0, ttl).await.unwrap());
    // Renew: the holder extends it, so it outlives its first expiry.
    let t5 = t0 + Duration::seconds(5);
    assert!(store.try_duty_lease("sweep", "r1", t5, ttl).await.unwrap());
    let t12 = t0 + Duration::seconds(12);
    assert!(!store.try_duty_lease("sweep", "r2", t12, ttl).await.unwrap());
    // Take over after expiry (t5 + 10s); then the old holder is refused.
    let t15 = t0 + Duration::seconds(15);
    assert!(store.try_duty_lease("sweep", "r2", t15, ttl).await.unwrap());
    assert!(!store.try_duty_lease("sweep", "r1", t15, ttl).await.unwrap());
    // Released (a holder shutting down): only its own, and free at once for another.
    assert_eq!(store.release_duty_leases("r2").await.unwrap(), 2);
    assert_eq!(store.release_duty_leases("r2").await.unwrap(), 0);
    assert!(store.try_duty_lease("sweep", "r1", t15, ttl).await.unwrap());
    assert!(store.try_duty_lease("poll", "r3", t15, ttl).await.unwrap());
}

pub async fn duty_leases_racing_takers_get_one(store: Arc<dyn Store>) {
    let ttl = std::time::Duration::from_secs(30);
    let now = Utc::now();
    let takers = (0..8).map(|i| {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .try_duty_lease("race", &format!("r{i}"), now, ttl)
                .await
                .unwrap()
        })
    });
    let mut won = 0;
    for t in takers.collect::<Vec<_>>() {
        if t.await.unwrap() {
            won += 1;
        }
    }
    assert_eq!(won, 1, "exactly one racing taker holds the lease");
    // The same race once the lease has expired: again exactly one.
    let later = now + Duration::seconds(31);
    let takers = (10..18).map(|i| {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .try_duty_lease("race", &format!("r{i}"), later, ttl)
                .await
                .unwrap()
        })
    });
    let mut won = 0;
    for t in takers.collect::<Vec<_>>() {
        if t.await.unwrap() {
            won += 1;
        }
    }
    assert_eq!(won, 1, "exactly one taker takes over an expired lease");
}

// ---- signals across instances ----

/// Waits (at most 10 s) until `rx` hears `want`, passing over other signals.
async fn hear(rx: &mut tokio::sync::broadcast::Receiver<Signal>, want: &Signal) {
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while crate::signal::next(rx).await != *want {}
    })
    .await
    .unwrap_or_else(|_| panic!("{want:?} never arrived"));
}

/// Signals, published or written, reach a subscriber of another instance on the same
/// database (on a single-process backend, the same instance).
pub async fn signals_reach_other_instances(store: Arc<dyn Store>, peer: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let r = runner(&*store, "runner-1").await;
    store
        .create_run(&new_run("sig", "net", RunKind::Proposed), None)
        .await
        .unwrap();
    let mut rx = peer.subscribe();
    let mut own = store.subscribe();
    // Published by a caller (a run was queued through this instance's API).
    store.publish(Signal::Dispatch);
    hear(&mut rx, &Signal::Dispatch).await;
    hear(&mut own, &Signal::Dispatch).await;
    // Written: a lease, log chunks and the run's end each change run `sig`.
    let run = store.lease_run(&r).await.unwrap().unwrap();
    hear(&mut rx, &Signal::Run("sig".into())).await;
    store
        .append_logs("sig", run.fencing, &[(0, "line".into())])
        .await
        .unwrap();
    hear(&mut rx, &Signal::Run("sig".into())).await;
    store
        .cancel_run("sig", &audit(Some("acme"), "run.cancel", "run:sig"))
        .await
        .unwrap();
    hear(&mut rx, &Signal::Run("sig".into())).await;
    // And the other way round.
    let mut back = store.subscribe();
    peer.publish(Signal::Notification);
    hear(&mut back, &Signal::Notification).await;
}

/// A write that fails (rolled back) publishes none of the signals it emitted: a fenced
/// log append emits `Run` before its fencing check, yet nobody hears it.
pub async fn signals_of_failed_writes_are_dropped(store: Arc<dyn Store>, peer: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    seed_stack(&*store, "app").await;
    let r = runner(&*store, "runner-1").await;
    for (id, stack) in [("fenced", "net"), ("marker", "app")] {
        store
            .create_run(&new_run(id, stack, RunKind::Proposed), None)
            .await
            .unwrap();
    }
    let mut rx = peer.subscribe();
    let mut own = store.subscribe();
    let mut leased = BTreeMap::new();
    while let Some(run) = store.lease_run(&r).await.unwrap() {
        leased.insert(run.id.clone(), run.fencing);
    }
    assert_eq!(leased.len(), 2, "{leased:?}");
    // The leases' own (committed) `Run` signals may still be on their way to the peer:
    // a first marker, heard in commit order, passes them all.
    store
        .append_logs("marker", leased["marker"], &[(0, "first".into())])
        .await
        .unwrap();
    hear(&mut rx, &Signal::Run("marker".into())).await;
    hear(&mut own, &Signal::Run("marker".into())).await;
    let refused = store
        .append_logs("fenced", leased["fenced"] + 1, &[(0, "x".into())])
        .await;
    assert!(
        matches!(refused, Err(StoreError::Fenced { .. })),
        "{refused:?}"
    );
    // Then a write that commits: signals arrive in commit order, so everything before the
    // marker has been heard.
    store
        .append_logs("marker", leased["marker"], &[(1, "ok".into())])
        .await
        .unwrap();
    for rx in [&mut rx, &mut own] {
        let heard = tokio::time::timeout(std::time::Duration::from_secs(10), async {
            let mut heard = Vec::new();
            loop {
                let s = crate::signal::next(rx).await;
                if s == Signal::Run("marker".into()) {
                    return heard;
                }
                heard.push(s);
            }
        })
        .await
        .expect("the committed write's signal arrives");
        assert!(
            !heard.contains(&Signal::Run("fenced".into())),
            "a rolled-back write's signal was published: {heard:?}"
        );
    }
}

// ---- One page of a stacks list: reads by id range, and a stack's dependents ----

pub async fn stacks_page_reads_by_id_range(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    seed_org(&*store, "other").await;
    let a = |org: &str| audit(Some(org), "stack.create", "stack");
    let drift = |s: StackSpec| {
        let mut input = s.to_input();
        input.drift_detection = Some(DriftInput {
            schedule: "0 3 * * *".into(),
            reconcile: false,
            timezone: None,
        });
        StackSpec::from_input(input).unwrap()
    };
    // s-a ← s-b ← s-d, s-a ← s-d; s-a and s-c checked for drift; "s-b" of another org too.
    for s in [
        drift(spec("s-a", &[])),
        spec("s-b", &["s-a"]),
        drift(spec("s-c", &[])),
        spec("s-d", &["s-a", "s-b"]),
    ] {
        store.create_stack("acme", &s, &a("acme")).await.unwrap();
    }
    store
        .create_stack("other", &drift(spec("s-b", &[])), &a("other"))
        .await
        .unwrap();

    // Dependents: direct ones only, by id, of this org only.
    let ids = |v: Vec<StackRecord>| -> Vec<String> {
        v.into_iter().map(|s| s.spec.id.to_string()).collect()
    };
    assert_eq!(
        ids(store.downstream_stacks("acme", "s-a").await.unwrap()),
        ["s-b", "s-d"]
    );
    assert_eq!(
        ids(store.downstream_stacks("acme", "s-b").await.unwrap()),
        ["s-d"]
    );
    assert!(store
        .downstream_stacks("acme", "s-d")
        .await
        .unwrap()
        .is_empty());
    assert!(store
        .downstream_stacks("other", "s-a")
        .await
        .unwrap()
        .is_empty());
    // An update that drops the dependency drops the dependent.
    store
        .update_stack("acme", &spec("s-d", &["s-b"]), &a("acme"))
        .await
        .unwrap();
    assert_eq!(
        ids(store.downstream_stacks("acme", "s-a").await.unwrap()),
        ["s-b"]
    );

    // Last runs: the newest of each stack in the range, the same as listing one per stack.
    for (id, stack) in [
        ("r-a1", "s-a"),
        ("r-b1", "s-b"),
        ("r-b2", "s-b"),
        ("r-d1", "s-d"),
    ] {
        store
            .create_run(&new_run(id, stack, RunKind::Proposed), None)
            .await
            .unwrap();
    }
    let mut other_run = new_run("r-ob", "s-b", RunKind::Proposed);
    other_run.org = "other".into();
    store.create_run(&other_run, None).await.unwrap();
    let last = store.last_runs_between("acme", "s-b", "s-c").await.unwrap();
    let got: Vec<_> = last
        .iter()
        .map(|r| (r.stack.as_str(), r.id.as_str()))
        .collect();
    assert_eq!(got, [("s-b", "r-b2")]);
    let all = store.last_runs_between("acme", "s-a", "s-d").await.unwrap();
    for s in ["s-a", "s-b", "s-c", "s-d"] {
        let one = store.list_runs("acme", Some(s), None, 1).await.unwrap();
        let here: Vec<_> = all.iter().filter(|r| r.stack == s).cloned().collect();
        assert_eq!(here, one, "stack {s}");
    }

    // Locks: only held ones, of stacks in the range, of this org.
    let alice = Writer::User("alice".into());
    for s in ["s-b", "s-d"] {
        store
            .lock_state("acme", s, &state_lock(&format!("L-{s}"), alice.clone()))
            .await
            .unwrap();
    }
    store
        .lock_state("other", "s-b", &state_lock("L-other", alice.clone()))
        .await
        .unwrap();
    let locks = store
        .state_locks_between("acme", "s-a", "s-c")
        .await
        .unwrap();
    let got: Vec<_> = locks
        .iter()
        .map(|(s, l)| (s.as_str(), l.id.as_str(), &l.holder))
        .collect();
    assert_eq!(got, [("s-b", "L-s-b", &alice)]);
    assert_eq!(
        locks[0].1,
        store.state_head("acme", "s-b").await.unwrap().lock.unwrap()
    );
    assert!(store
        .state_locks_between("acme", "s-e", "s-z")
        .await
        .unwrap()
        .is_empty());

    // Drift: the range's drift-checked stacks, as the org-wide read gives them.
    let page = store
        .drift_schedules_between("acme", "s-b", "s-d")
        .await
        .unwrap();
    assert_eq!(page.len(), 1, "{page:?}");
    assert_eq!(
        (page[0].org.as_str(), page[0].stack.as_str()),
        ("acme", "s-c")
    );
    assert_eq!(
        page,
        store
            .drift_schedules(Some("acme"), Some("s-c"))
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .drift_schedules_between("acme", "s-a", "s-d")
            .await
            .unwrap(),
        store.drift_schedules(Some("acme"), None).await.unwrap()
    );
    assert_eq!(page[0].drift.timezone, "UTC");
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

pub async fn notification_retention_prunes_settled_history_in_batches(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let a = audit(Some("acme"), "x", "y");
    // Targets that hear only test events (sent to them by name): an old lock's event
    // fans out to no one.
    for id in ["sent", "failing"] {
        store
            .create_notification_target(
                &target(id, "webhook", vec![rule(&["test"], &[], &[])], true),
                &a,
            )
            .await
            .unwrap();
    }
    let event = |to: &str, key: &str| NewNotificationEvent {
        kind: NotificationEventKind::Test,
        run_kind: None,
        run_state: None,
        payload: json!({"key": key}),
        dedup_key: Some(key.to_string()),
        only_target: Some(to.to_string()),
    };
    // Sends every due delivery: delivered, or failed — given up for `gave-up`, retried
    // in an hour for `pending`.
    let settle = |store: Arc<dyn Store>| async move {
        for d in store.due_notifications(Utc::now(), 100).await.unwrap() {
            let key = d.delivery.payload["key"].as_str().unwrap().to_string();
            let attempt = NotificationAttempt {
                status: Some(if key.contains("sent") { 204 } else { 500 }),
                error: (!key.contains("sent")).then(|| "HTTP 500".to_string()),
                delivered: key.contains("sent"),
                retry_at: key
                    .contains("pending")
                    .then(|| Utc::now() + Duration::hours(1)),
            };
            store
                .record_notification_attempt(d.delivery.id, &attempt)
                .await
                .unwrap();
        }
    };
    let keys = |store: Arc<dyn Store>, t: &'static str| async move {
        let mut keys: Vec<String> = store
            .list_notification_deliveries("acme", t, None, 100)
            .await
            .unwrap()
            .iter()
            .map(|d| d.payload["key"].as_str().unwrap().to_string())
            .collect();
        keys.sort();
        keys
    };

    // Old history: five sent, one given up, one still retrying, and an old lock's event
    // (no deliveries) for a lock that is still held.
    for i in 0..5 {
        let e = event("sent", &format!("old-sent-{i}"));
        store
            .add_notification_event("acme", &e)
            .await
            .unwrap()
            .unwrap();
    }
    for key in ["old-gave-up", "old-pending"] {
        store
            .add_notification_event("acme", &event("failing", key))
            .await
            .unwrap()
            .unwrap();
    }
    let mut lock = state_lock("HELD", Writer::User("bob".into()));
    lock.acquired_at = Utc::now() - Duration::hours(3);
    store.lock_state("acme", "net", &lock).await.unwrap();
    let hour_ago = Utc::now() - Duration::hours(1);
    assert_eq!(store.notify_old_locks(hour_ago).await.unwrap(), 1);
    settle(store.clone()).await;
    let cutoff = past(Utc::now()).await;
    past(cutoff).await;
    // Recent history: sent after the cut-off.
    store
        .add_notification_event("acme", &event("sent", "new-sent"))
        .await
        .unwrap()
        .unwrap();
    settle(store.clone()).await;
    assert_eq!(keys(store.clone(), "sent").await.len(), 6);

    // Two rows per transaction: six settled old deliveries take four rounds, their six
    // events as many.
    assert_eq!(store.prune_notifications(cutoff, 2).await.unwrap(), (6, 6));
    assert_eq!(keys(store.clone(), "sent").await, ["new-sent"]);
    assert_eq!(
        keys(store.clone(), "failing").await,
        ["old-pending"],
        "a delivery still retrying is kept, however old"
    );
    let pending = store
        .list_notification_deliveries("acme", "failing", None, 10)
        .await
        .unwrap();
    assert_eq!(pending[0].attempts, 1);
    assert!(pending[0].next_attempt_at.is_some());
    // The pruned events are gone (their dedup keys are free again); kept ones are not.
    assert!(store
        .add_notification_event("acme", &event("sent", "old-sent-0"))
        .await
        .unwrap()
        .is_some());
    for kept in ["old-pending", "new-sent"] {
        assert_eq!(
            store
                .add_notification_event("acme", &event("failing", kept))
                .await
                .unwrap(),
            None,
            "{kept}"
        );
    }
    // The held lock's event stays, so the lock is not reported again.
    assert_eq!(store.notify_old_locks(hour_ago).await.unwrap(), 0);
    assert_eq!(store.prune_notifications(cutoff, 2).await.unwrap(), (0, 0));
    // Released, its old event goes on the next prune.
    store
        .unlock_state("acme", "net", &UnlockRequest::ForceAny, &a)
        .await
        .unwrap();
    assert_eq!(store.prune_notifications(cutoff, 2).await.unwrap(), (0, 1));
    // Everything settled is old a day later — except the delivery still retrying.
    settle(store.clone()).await;
    let (deliveries, events) = store
        .prune_notifications(Utc::now() + Duration::days(1), 1000)
        .await
        .unwrap();
    assert_eq!((deliveries, events), (2, 2));
    assert!(keys(store.clone(), "sent").await.is_empty());
    assert_eq!(keys(store.clone(), "failing").await, ["old-pending"]);
}
