//! The PostgreSQL backend: the conformance suite, each case in a database of its own on
//! the server `BOSUN_TEST_DATABASE_URL` names (scripts/test.sh starts one), plus what only
//! a shared database shows (the schema's own refusals, replicas migrating together).
//!
//! Without `BOSUN_TEST_DATABASE_URL` every case prints `SKIPPED (tool missing):
//! postgresql` and passes, unless `BOSUN_REQUIRE_TOOLS=1`, where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use bosun_testkit::postgres::{batch as sql, server_url, ScratchDb};

use bosun_store::{DatabaseStore, PostgresStore, SecretStore, Store, StoreError};

/// A fresh store on a scratch database; `None` when no test server is configured.
async fn fresh() -> Option<(Arc<dyn Store>, ScratchDb)> {
    let admin = server_url()?;
    let db = ScratchDb::create(&admin);
    let store = PostgresStore::open(&db.url).await.unwrap();
    Some((Arc::new(store), db))
}

// Another instance on the same database, as a second replica opens it.
bosun_store::conformance_suite!(fresh(), |_: &Arc<dyn Store>, db: &ScratchDb| {
    let url = db.url.clone();
    async move { Arc::new(PostgresStore::open(&url).await.unwrap()) as Arc<dyn Store> }
});

#[tokio::test]
async fn audit_log_and_state_versions_refuse_edits_in_the_database() {
    let Some((store, db)) = fresh().await else {
        return;
    };
    store.close().await;
    sql(
        &db.url,
        "INSERT INTO audit_log (at, actor, action, target, detail) VALUES (1,'a','b','c','{}')",
    )
    .unwrap();
    for edit in [
        "UPDATE audit_log SET actor = 'x'",
        "DELETE FROM audit_log",
        "TRUNCATE audit_log",
    ] {
        let err = sql(&db.url, edit).expect_err(edit);
        assert!(err.contains("append-only"), "{edit}: {err}");
    }
    sql(
        &db.url,
        "INSERT INTO orgs (id, name, created_at) VALUES ('o', 'o', 1);
         INSERT INTO stacks (org_id, id, name, repository, branch, path, watch_paths, engine,
             tier, autodeploy, variables, depends_on, runner_pool, created_at, updated_at)
         VALUES ('o', 's', 's', 'r', 'main', '.', '[]', 'terraform', 'standard', 0, '{}',
             '[]', 'default', 1, 1);
         INSERT INTO state_versions (org_id, stack_id, version, serial, lineage, checksum,
             size, writer_kind, writer_id, created_at, late_write, forced, outputs, body)
         VALUES ('o', 's', 1, 1, 'l', 'c', 2, 'user', 'u', 1, 0, 0, '{}', '\\x7b7d');",
    )
    .unwrap();
    let err = sql(&db.url, "UPDATE state_versions SET serial = 2").expect_err("update");
    assert!(err.contains("immutable"), "{err}");
}

#[tokio::test]
async fn replicas_starting_together_migrate_once() {
    let Some(admin) = server_url() else {
        return;
    };
    let db = ScratchDb::create(&admin);
    let opens: Vec<_> = (0..4)
        .map(|_| {
            let url = db.url.clone();
            tokio::spawn(async move { PostgresStore::open(&url).await })
        })
        .collect();
    let mut versions = Vec::new();
    for open in opens {
        let store = open.await.unwrap().unwrap();
        versions.push(store.schema_version().await.unwrap());
        store.close().await;
    }
    assert!(
        versions.iter().all(|v| *v == versions[0] && *v > 0),
        "{versions:?}"
    );
    let (url, want) = (db.url.clone(), versions[0]);
    let rows = std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let row = client
            .query_one(
                "SELECT COUNT(*), COUNT(DISTINCT version) FROM bosun_schema",
                &[],
            )
            .unwrap();
        (row.get::<_, i64>(0), row.get::<_, i64>(1))
    })
    .join()
    .unwrap();
    assert_eq!(rows, (want, want), "each migration recorded exactly once");
}

#[tokio::test]
async fn refuses_a_newer_schema() {
    let Some((store, db)) = fresh().await else {
        return;
    };
    let known = store.schema_version().await.unwrap();
    store.close().await;
    sql(
        &db.url,
        &format!("INSERT INTO bosun_schema (version) VALUES ({})", known + 1),
    )
    .unwrap();
    match PostgresStore::open(&db.url).await {
        Err(StoreError::SchemaTooNew { found, known: k }) => {
            assert_eq!((found, k), (known + 1, known));
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("opened a database with a newer schema"),
    }
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable_naming_it() {
    // A port nothing listens on: bind one, learn it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    match PostgresStore::open(&format!("postgres://bosun@127.0.0.1:{port}/postgres")).await {
        Err(StoreError::Unavailable(why)) => {
            assert!(why.starts_with("the database is unavailable"), "{why}");
            assert!(why.contains(&format!("127.0.0.1:{port}")), "{why}");
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("opened a store on a closed port"),
    }
}

/// Schema v16 claimed each secret namespace for the first org that used it; the
/// migration to per-org namespaces keeps every org's secrets and frees the names.
#[tokio::test]
async fn migrates_global_secret_namespaces_to_per_org_keeping_secrets() {
    let Some(admin) = server_url() else {
        return;
    };
    let db = ScratchDb::create(&admin);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/postgres");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .collect();
    files.sort();
    let mut older = String::from("CREATE TABLE bosun_schema (version BIGINT NOT NULL);\n");
    for (i, path) in files.iter().take(16).enumerate() {
        older.push_str(&std::fs::read_to_string(path).unwrap());
        older.push_str(&format!(
            "\nINSERT INTO bosun_schema (version) VALUES ({});\n",
            i + 1
        ));
    }
    older.push_str(
        "INSERT INTO orgs (id, name, created_at) VALUES ('acme', 'Acme', 1), ('globex', 'Globex', 1);
         INSERT INTO secret_namespaces (name, org_id, created_at)
         VALUES ('aws', 'acme', 1), ('old', 'acme', 1);
         INSERT INTO secrets (org_id, namespace, key, ciphertext, nonce, key_id, created_at,
                              updated_at, updated_by)
         VALUES ('acme', 'aws', 'key', '\\x01020304', '\\x0a0b', 'sk1', 5, 6, 'user:alice');",
    );
    sql(&db.url, &format!("BEGIN; {older} COMMIT;")).unwrap();

    let store = PostgresStore::open(&db.url).await.unwrap();
    assert!(store.schema_version().await.unwrap() >= 17);
    let acme = bosun_store::Sealed {
        ciphertext: vec![1, 2, 3, 4],
        nonce: vec![10, 11],
        key_id: "sk1".into(),
    };
    assert_eq!(
        store.get_secret("acme", "aws", "key").await.unwrap(),
        Some(acme.clone())
    );
    let theirs = bosun_store::Sealed {
        ciphertext: b"globex".to_vec(),
        nonce: vec![0; 24],
        key_id: "sk1".into(),
    };
    let mut a = audit("secret.set", "secret://aws/key");
    a.org = Some("globex".into());
    for ns in ["aws", "old"] {
        store
            .put_secret("globex", ns, "key", &theirs, &a)
            .await
            .unwrap();
    }
    assert_eq!(
        store.get_secret("acme", "aws", "key").await.unwrap(),
        Some(acme)
    );
    assert_eq!(
        store.get_secret("globex", "aws", "key").await.unwrap(),
        Some(theirs)
    );
    store.close().await;
}

// ---- Two replicas on one database ----
//
// What SQLite got from its single in-process writer must hold between separate stores
// (separate pools, as two `bosun server` processes have) on one database.

fn audit(action: &str, target: &str) -> bosun_store::Audit {
    bosun_store::Audit {
        org: Some("acme".into()),
        actor: "user:tester".into(),
        token_id: None,
        action: action.into(),
        target: target.into(),
        detail: serde_json::json!({}),
    }
}

/// Org `acme` with `stacks` stacks `s0…`, on a store opened on `db`.
async fn seeded(db: &ScratchDb, stacks: usize) -> Arc<dyn Store> {
    let store: Arc<dyn Store> = Arc::new(PostgresStore::open(&db.url).await.unwrap());
    store
        .create_user(
            &bosun_store::NewUser {
                id: "owner".into(),
                server_admin: true,
            },
            &audit("user.create", "user:owner"),
        )
        .await
        .unwrap();
    store
        .create_org(
            &bosun_store::NewOrg {
                id: "acme".into(),
                name: "Acme".into(),
                admin: Some("owner".into()),
            },
            &audit("org.create", "acme"),
        )
        .await
        .unwrap();
    for i in 0..stacks {
        create_stack(&store, &format!("s{i}")).await;
    }
    store
}

/// Creates stack `id` of org `acme` on `github:acme/infra`.
async fn create_stack(store: &Arc<dyn Store>, id: &str) {
    let spec = bosun_core::stack::StackSpec::from_input(bosun_core::stack::StackInput {
        id: id.into(),
        repository: "github:acme/infra".into(),
        ..Default::default()
    })
    .unwrap();
    store
        .create_stack("acme", &spec, &audit("stack.create", id))
        .await
        .unwrap();
}

fn runner(id: &str) -> bosun_store::RunnerRecord {
    bosun_store::RunnerRecord {
        id: id.into(),
        org: None,
        pool: "hosted".into(),
        name: id.into(),
        version: "test".into(),
        drained: false,
        last_seen: chrono::Utc::now(),
        created_at: chrono::Utc::now(),
        egress: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_lease_each_run_exactly_once() {
    let Some(admin) = server_url() else {
        return;
    };
    let db = ScratchDb::create(&admin);
    let a = seeded(&db, 10).await;
    let b: Arc<dyn Store> = Arc::new(PostgresStore::open(&db.url).await.unwrap());
    // Proposed runs: every one dispatchable at once (tracked ones queue per stack).
    let mut want = Vec::new();
    for i in 0..40 {
        let id = format!("run-{i:02}");
        let run = bosun_store::NewRun {
            id: id.clone(),
            org: "acme".into(),
            stack: format!("s{}", i % 10),
            kind: bosun_core::run::RunKind::Proposed,
            trigger: bosun_core::run::Trigger::Manual,
            triggered_by: "user:tester".into(),
            commit: None,
            branch: "main".into(),
            retry_of: None,
            pull_request: None,
        };
        a.create_run(&run, None).await.unwrap();
        want.push(id);
    }
    let mut leasers = Vec::new();
    for (n, store) in [a.clone(), b.clone(), a.clone(), b.clone(), a, b]
        .into_iter()
        .enumerate()
    {
        let r = store
            .register_runner(&runner(&format!("runner-{n}")))
            .await
            .unwrap();
        leasers.push(tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(run) = store.lease_run(&r).await.unwrap() {
                assert_eq!(run.fencing, 1, "{} leased before", run.id);
                got.push(run.id);
            }
            got
        }));
    }
    let mut leased = Vec::new();
    for l in leasers {
        leased.extend(l.await.unwrap());
    }
    leased.sort();
    assert_eq!(leased, want, "every run leased, none twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_racing_for_a_state_lock_one_wins() {
    let Some(admin) = server_url() else {
        return;
    };
    let db = ScratchDb::create(&admin);
    let a = seeded(&db, 1).await;
    let b: Arc<dyn Store> = Arc::new(PostgresStore::open(&db.url).await.unwrap());
    let mut racers = Vec::new();
    for n in 0..12 {
        let store = if n % 2 == 0 { a.clone() } else { b.clone() };
        racers.push(tokio::spawn(async move {
            let lock = bosun_core::state::Lock {
                id: format!("lock-{n}"),
                operation: "OperationTypeApply".into(),
                info: String::new(),
                who: format!("racer-{n}"),
                version: "1.0.3".into(),
                created: "2026-11-30T00:00:00Z".into(),
                path: String::new(),
                holder: bosun_core::state::Writer::User(format!("user-{n}")),
                acquired_at: chrono::Utc::now(),
            };
            (n, store.lock_state("acme", "s0", &lock).await)
        }));
    }
    let mut winners = Vec::new();
    for r in racers {
        match r.await.unwrap() {
            (n, Ok(())) => winners.push(n),
            (_, Err(StoreError::StateLocked(_))) => {}
            (n, Err(e)) => panic!("racer {n}: {e}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one lock taken: {winners:?}");
    let head = a.state_head("acme", "s0").await.unwrap();
    assert_eq!(
        head.lock.map(|l| l.id),
        Some(format!("lock-{}", winners[0])),
        "the winner holds it, seen from either replica"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_racing_plan_runs_on_one_host_start_one() {
    let Some(admin) = server_url() else {
        return;
    };
    let db = ScratchDb::create(&admin);
    let a = seeded(&db, 0).await;
    let b: Arc<dyn Store> = Arc::new(PostgresStore::open(&db.url).await.unwrap());
    let audit = audit("plan_run.create", "plan:app-config");
    // Many rounds, each on a host of its own: a guard read outside the creating
    // transaction's isolation lets two through sooner or later.
    for round in 0..15 {
        let mut racers = Vec::new();
        for n in 0..8 {
            let store = if n % 2 == 0 { a.clone() } else { b.clone() };
            let audit = audit.clone();
            let run = bosun_store::NewPlanRun {
                id: format!("prun-{round}-{n}"),
                org: "acme".into(),
                plan: "app-config".into(),
                plan_version: 1,
                source: "name: app-config\n".into(),
                inputs: Default::default(),
                dry_run: false,
                requested_by: "user:alice".into(),
                trigger: bosun_core::plan_run::PlanTrigger::Manual,
                hosts: vec![format!("host-{round}")],
                gated_environments: vec![],
                concurrent: false,
                preview: None,
                policy_check: false,
                sources: None,
                upstream: None,
                settles_trigger: None,
                failed: None,
            };
            racers.push(tokio::spawn(async move {
                store.create_plan_run(&run, &audit).await
            }));
        }
        let mut created = 0;
        for r in racers {
            match r.await.unwrap() {
                Ok(_) => created += 1,
                Err(StoreError::RunInProgress { hosts, .. }) => {
                    assert_eq!(hosts, [format!("host-{round}")])
                }
                Err(e) => panic!("round {round}: {e}"),
            }
        }
        assert_eq!(created, 1, "round {round}: exactly one run starts");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_the_server_dropped_are_replaced() {
    let Some(admin) = server_url() else {
        return;
    };
    let db = ScratchDb::create(&admin);
    let store = seeded(&db, 1).await;
    // Several pooled connections, busy at once.
    let mut calls = Vec::new();
    for _ in 0..6 {
        let store = store.clone();
        calls.push(tokio::spawn(async move {
            store.list_stacks("acme", None, 10).await.unwrap().len()
        }));
    }
    for c in calls {
        assert_eq!(c.await.unwrap(), 1);
    }
    // An operator (or a failover) ends every connection to the database.
    let ended = {
        let (admin, name) = (admin.clone(), db.name.clone());
        std::thread::spawn(move || {
            let mut client = postgres::Client::connect(&admin, postgres::NoTls).unwrap();
            client
                .query_one(
                    "SELECT COUNT(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                     WHERE datname = $1 AND pid <> pg_backend_pid()) t",
                    &[&name],
                )
                .unwrap()
                .get::<_, i64>(0)
        })
        .join()
        .unwrap()
    };
    assert!(ended >= 1, "no connection was ended");
    // Every call still answers — reads and writes — on fresh connections.
    for i in 0..8 {
        assert_eq!(
            store.list_stacks("acme", None, 20).await.unwrap().len(),
            1 + i
        );
        create_stack(&store, &format!("after-{i}")).await;
    }
    store.ping().await.unwrap();
}

/// The store's own connections to the scratch database (the listener's aside), each with
/// its `state` in `pg_stat_activity` (`idle`, `active`, `idle in transaction`, …).
fn pool_sessions(db: &ScratchDb) -> Vec<String> {
    activity(
        db,
        "SELECT COALESCE(state, '') FROM pg_stat_activity
         WHERE datname = $1 AND application_name <> 'bosun-listener'
           AND pid <> pg_backend_pid()",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_answer_before_their_transaction_ends_and_leave_none_open() {
    let Some(admin) = server_url() else {
        return;
    };
    let db = ScratchDb::create(&admin);
    let store = seeded(&db, 3).await;
    // Far more reads at once than the pool has connections: each answers as soon as its
    // statements have, and ends its read-only transaction after that, before its
    // connection takes the next call.
    let mut calls = Vec::new();
    for _ in 0..64 {
        let store = store.clone();
        calls.push(tokio::spawn(async move {
            let stacks = store.list_stacks("acme", None, 10).await.unwrap();
            let head = store.state_head("acme", "s0").await.unwrap();
            (stacks.len(), head.current.is_none())
        }));
    }
    for c in calls {
        assert_eq!(c.await.unwrap(), (3, true));
    }
    // A write after them finds no transaction left on its connection.
    create_stack(&store, "after").await;
    assert_eq!(store.list_stacks("acme", None, 10).await.unwrap().len(), 4);
    // Once the calls are done, every pooled connection is idle: none holds a transaction
    // (and its snapshot) open, and there are no more of them than the pool's eight.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let sessions = pool_sessions(&db);
        assert!(
            sessions.len() <= 8,
            "more connections than the pool: {sessions:?}"
        );
        if sessions.iter().all(|s| s == "idle") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "connections left busy or in a transaction: {sessions:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    store.close().await;
}

#[tokio::test]
async fn text_with_nul_is_stored_with_a_replacement_character() {
    let Some(admin) = server_url() else {
        return;
    };
    let db = ScratchDb::create(&admin);
    let store = seeded(&db, 1).await;
    let run = bosun_store::NewRun {
        id: "run-nul".into(),
        org: "acme".into(),
        stack: "s0".into(),
        kind: bosun_core::run::RunKind::Proposed,
        trigger: bosun_core::run::Trigger::Manual,
        triggered_by: "user:tester".into(),
        commit: None,
        branch: "main".into(),
        retry_of: None,
        pull_request: None,
    };
    store.create_run(&run, None).await.unwrap();
    let r = store.register_runner(&runner("runner-1")).await.unwrap();
    let leased = store.lease_run(&r).await.unwrap().unwrap();
    store
        .append_logs("run-nul", leased.fencing, &[(1, "binary\0output\n".into())])
        .await
        .unwrap();
    let logs = store.read_logs("run-nul", None, 10).await.unwrap();
    let texts: Vec<(i64, &str)> = logs.iter().map(|c| (c.seq, c.text.as_str())).collect();
    assert_eq!(texts, [(1, "binary\u{FFFD}output\n")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_racing_with_one_delivery_apply_it_once() {
    let Some(admin) = server_url() else {
        return;
    };
    let db = ScratchDb::create(&admin);
    let a = seeded(&db, 1).await;
    let b: Arc<dyn Store> = Arc::new(PostgresStore::open(&db.url).await.unwrap());
    // GitHub redelivers a webhook while the first is in flight, to either replica.
    for round in 0..10 {
        let mut racers = Vec::new();
        for n in 0..6 {
            let store = if n % 2 == 0 { a.clone() } else { b.clone() };
            let run_id = format!("run-{round}-{n}");
            let delivery = bosun_store::NewDelivery {
                source: bosun_store::DeliverySource::Github,
                guid: format!("guid-{round}"),
                event: "push".into(),
                action: None,
                repository: Some("github:acme/infra".into()),
                git_ref: Some("refs/heads/main".into()),
                before: None,
                after: Some("abc123".into()),
                pull_request: None,
                summary: "push to main".into(),
                decisions: vec![bosun_store::TriggerDecision {
                    org: "acme".into(),
                    stack: "s0".into(),
                    run_id: Some(run_id.clone()),
                    reason: "main.tf changed".into(),
                }],
                runs: vec![bosun_store::NewRun {
                    id: run_id,
                    org: "acme".into(),
                    stack: "s0".into(),
                    kind: bosun_core::run::RunKind::Proposed,
                    trigger: bosun_core::run::Trigger::Manual,
                    triggered_by: "github".into(),
                    commit: Some("abc123".into()),
                    branch: "main".into(),
                    retry_of: None,
                    pull_request: None,
                }],
                cancel: None,
                evaluations: Vec::new(),
            };
            racers.push(tokio::spawn(async move {
                store.record_delivery(&delivery).await
            }));
        }
        let (mut recorded, mut duplicates) = (0, 0);
        for r in racers {
            match r.await.unwrap().unwrap() {
                bosun_store::DeliveryOutcome::Recorded { runs, .. } => {
                    assert_eq!(runs.len(), 1);
                    recorded += 1;
                }
                bosun_store::DeliveryOutcome::Duplicate { .. } => duplicates += 1,
            }
        }
        assert_eq!((recorded, duplicates), (1, 5), "round {round}");
    }
    let runs = a.list_runs("acme", None, None, 100).await.unwrap();
    assert_eq!(runs.len(), 10, "one run per delivery");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_closing_a_cycle_together_one_is_refused() {
    let Some(admin) = server_url() else {
        return;
    };
    let db = ScratchDb::create(&admin);
    let a = seeded(&db, 20).await;
    let b: Arc<dyn Store> = Arc::new(PostgresStore::open(&db.url).await.unwrap());
    let depending = |id: String, on: String| {
        bosun_core::stack::StackSpec::from_input(bosun_core::stack::StackInput {
            id,
            repository: "github:acme/infra".into(),
            depends_on: vec![bosun_core::stack::DependencyInput {
                stack: on,
                ..Default::default()
            }],
            ..Default::default()
        })
        .unwrap()
    };
    // Stacks s2k and s2k+1: one replica makes the first depend on the second while the
    // other makes the second depend on the first. Each check alone sees no cycle.
    for k in 0..10 {
        let (x, y) = (format!("s{}", 2 * k), format!("s{}", 2 * k + 1));
        let (sa, sb) = (a.clone(), b.clone());
        let (xa, ya) = (
            depending(x.clone(), y.clone()),
            depending(y.clone(), x.clone()),
        );
        let one = tokio::spawn(async move {
            sa.update_stack("acme", &xa, &audit("stack.update", "x"))
                .await
        });
        let two = tokio::spawn(async move {
            sb.update_stack("acme", &ya, &audit("stack.update", "y"))
                .await
        });
        let results = [one.await.unwrap(), two.await.unwrap()];
        let ok = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(ok, 1, "pair {x}/{y}: {results:?}");
        assert!(
            results
                .iter()
                .any(|r| matches!(r, Err(StoreError::DependencyCycle(_)))),
            "pair {x}/{y}: {results:?}"
        );
    }
}

/// The server pids of the signal listeners connected to the scratch database.
fn listener_pids(db: &ScratchDb) -> Vec<i32> {
    activity(
        db,
        "SELECT pid FROM pg_stat_activity
         WHERE datname = $1 AND application_name = 'bosun-listener' ORDER BY pid",
    )
}

/// The one column of `sql` over `pg_stat_activity`, whose `$1` is the scratch database's
/// name, read on a connection of the test's own.
fn activity<T>(db: &ScratchDb, sql: &'static str) -> Vec<T>
where
    T: for<'a> postgres::types::FromSql<'a> + Send + 'static,
{
    let (admin, name) = (db.admin_url.clone(), db.name.clone());
    std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&admin, postgres::NoTls).unwrap();
        client
            .query(sql, &[&name])
            .unwrap()
            .iter()
            .map(|r| r.get::<_, T>(0))
            .collect()
    })
    .join()
    .unwrap()
}

/// Waits (with a deadline) for a signal on `rx` that `wanted` accepts, answering what
/// else arrived meanwhile.
async fn hear(
    rx: &mut tokio::sync::broadcast::Receiver<bosun_store::Signal>,
    wanted: impl Fn(&bosun_store::Signal) -> bool,
    what: &str,
) -> Vec<bosun_store::Signal> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut other = Vec::new();
    loop {
        match tokio::time::timeout_at(deadline, bosun_store::signal::next(rx)).await {
            Ok(s) if wanted(&s) => return other,
            Ok(s) => other.push(s),
            Err(_) => panic!("{what} not heard within 20 s; heard {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_whose_connection_was_ended_resyncs_and_hears_again() {
    use bosun_store::Signal;
    let Some(admin) = server_url() else {
        return;
    };
    let db = ScratchDb::create(&admin);
    let a: Arc<dyn Store> = Arc::new(PostgresStore::open(&db.url).await.unwrap());
    let a_listener = listener_pids(&db);
    assert_eq!(
        a_listener.len(),
        1,
        "one listener per store: {a_listener:?}"
    );
    let b: Arc<dyn Store> = Arc::new(PostgresStore::open(&db.url).await.unwrap());
    let b_listener: Vec<i32> = listener_pids(&db)
        .into_iter()
        .filter(|p| !a_listener.contains(p))
        .collect();
    assert_eq!(b_listener.len(), 1, "B listens: {b_listener:?}");
    let mut rx = b.subscribe();

    // Before: A's signal reaches B through B's listener.
    a.publish(Signal::Run("before".into()));
    hear(
        &mut rx,
        |s| *s == Signal::Run("before".into()),
        "A's first signal",
    )
    .await;

    // An operator (or a failover) ends B's listener connection, and only that one.
    let ended = {
        let (admin, pid) = (admin.clone(), b_listener[0]);
        std::thread::spawn(move || {
            let mut client = postgres::Client::connect(&admin, postgres::NoTls).unwrap();
            client
                .query_one("SELECT pg_terminate_backend($1)", &[&pid])
                .unwrap()
                .get::<_, bool>(0)
        })
        .join()
        .unwrap()
    };
    assert!(ended, "pg_terminate_backend refused pid {}", b_listener[0]);

    // B's subscribers are told to look again once the listener is back…
    let meanwhile = hear(&mut rx, |s| *s == Signal::Resync, "Resync").await;
    assert_eq!(meanwhile, Vec::<Signal>::new());
    let now = listener_pids(&db);
    assert_eq!(now.len(), 2, "A's and B's new listener: {now:?}");
    assert!(now.contains(&a_listener[0]), "A's listener was left alone");
    assert!(
        !now.contains(&b_listener[0]),
        "B listens on a new connection"
    );

    // …and B hears A's signals again.
    a.publish(Signal::Run("after".into()));
    hear(
        &mut rx,
        |s| *s == Signal::Run("after".into()),
        "A's signal after the reconnect",
    )
    .await;
    a.close().await;
    b.close().await;
}

/// The audit search is planned for its values, not with the plan PostgreSQL makes once
/// for any values after a statement's fifth run (forced here as the database's default):
/// that plan walks the log newest first for a rare actor's records; the plan for the
/// values reads the actor's index. Seen in the index's scan count once the store's
/// connections have closed (each reports its counts as it ends).
#[tokio::test]
async fn the_audit_search_reads_a_rare_actors_records_by_their_index() {
    use bosun_store::{AuditFilter, AuditStore, DatabaseStore};
    let Some(admin) = server_url() else {
        return;
    };
    let db = ScratchDb::create(&admin);
    PostgresStore::open(&db.url).await.unwrap().close().await;
    sql(
        &db.url,
        "INSERT INTO audit_log (at, org_id, actor, action, target, detail)
         VALUES (1, 'acme', 'user:bob', 'stack.create', 'stack:net', '{}');
         INSERT INTO audit_log (at, org_id, actor, action, target, detail)
         SELECT n, 'acme', 'user:alice', 'stack.update', 'stack:app', '{}'
         FROM generate_series(2, 5001) n;
         ANALYZE audit_log;",
    )
    .unwrap();
    sql(
        &admin,
        &format!(
            "ALTER DATABASE {} SET plan_cache_mode = force_generic_plan",
            db.name
        ),
    )
    .unwrap();
    let store = PostgresStore::open(&db.url).await.unwrap();
    let bob = AuditFilter {
        actor: Some("user:bob".into()),
        ..Default::default()
    };
    for _ in 0..3 {
        let found = store
            .search_audit(Some("acme"), &bob, None, 50)
            .await
            .unwrap();
        assert_eq!(found.len(), 1);
    }
    store.close().await;
    let url = db.url.clone();
    let scans = std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let n: i64 = client
                .query_one(
                    "SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = 'audit_log_actor'",
                    &[],
                )
                .unwrap()
                .get(0);
            if n >= 3 || std::time::Instant::now() > deadline {
                return n;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    })
    .join()
    .unwrap();
    assert!(
        scans >= 3,
        "the actor's index was scanned {scans} times, not once per search"
    );
}
