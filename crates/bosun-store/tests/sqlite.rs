//! The SQLite backend: the conformance suite, plus what only a file database shows.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use bosun_store::{
    DatabaseStore, IdentityStore, RetentionStore, RunStore, SecretStore, SqliteStore, StackStore,
    StateStore, Store, StoreError, VcsStore,
};

async fn fresh() -> (Arc<dyn Store>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("bosun.db"))
        .await
        .unwrap();
    (Arc::new(store), dir)
}

// One process: the "other instance" is the same store.
bosun_store::conformance_suite!(fresh(), |store: &Arc<dyn Store>, _: &tempfile::TempDir| {
    std::future::ready(store.clone())
});

#[tokio::test]
async fn refuses_a_newer_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bosun.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let known = store.schema_version().await.unwrap();
    store.close().await;
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(
        "INSERT INTO bosun_schema (version) VALUES (?1)",
        [known + 1],
    )
    .unwrap();
    drop(conn);
    match SqliteStore::open(&path).await {
        Err(StoreError::SchemaTooNew { found, known: k }) => {
            assert_eq!((found, k), (known + 1, known));
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("opened a database with a newer schema"),
    }
}

#[tokio::test]
async fn reopen_keeps_data_and_uses_wal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bosun.db");
    let store = SqliteStore::open(&path).await.unwrap();
    store
        .create_user(
            &bosun_store::NewUser {
                id: "keeper".into(),
                server_admin: false,
            },
            &bosun_store::Audit {
                org: None,
                actor: "system".into(),
                token_id: None,
                action: "user.create".into(),
                target: "user:keeper".into(),
                detail: serde_json::json!({}),
            },
        )
        .await
        .unwrap();
    assert!(
        path.with_extension("db-wal").exists(),
        "WAL file expected while open"
    );
    store.close().await;
    let again = SqliteStore::open(&path).await.unwrap();
    assert!(again.get_user("keeper").await.unwrap().is_some());
    again.close().await;
}

#[tokio::test]
async fn audit_log_refuses_edits_in_the_database() {
    let (store, dir) = fresh().await;
    store.close().await;
    let path = dir.path().join("bosun.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(
        "INSERT INTO audit_log (at, actor, action, target, detail) VALUES (1,'a','b','c','{}')",
        [],
    )
    .unwrap();
    for edit in ["UPDATE audit_log SET actor = 'x'", "DELETE FROM audit_log"] {
        let err = conn.execute(edit, []).unwrap_err();
        assert!(err.to_string().contains("append-only"), "{edit}: {err}");
    }
}

/// Creates a database at schema v3 (the first three migrations, as an older binary
/// left it) holding an org, two stacks and a run.
fn v3_database(path: &std::path::Path) {
    let mut conn = rusqlite::Connection::open(path).unwrap();
    let tx = conn.transaction().unwrap();
    tx.execute_batch("CREATE TABLE bosun_schema (version INTEGER NOT NULL)")
        .unwrap();
    for (i, sql) in [
        include_str!("../migrations/sqlite/0001_init.sql"),
        include_str!("../migrations/sqlite/0002_state.sql"),
        include_str!("../migrations/sqlite/0003_runs.sql"),
    ]
    .iter()
    .enumerate()
    {
        tx.execute_batch(sql).unwrap();
        tx.execute("INSERT INTO bosun_schema (version) VALUES (?1)", [i + 1])
            .unwrap();
    }
    tx.execute_batch(
        "INSERT INTO orgs (id, name, created_at) VALUES ('acme', 'Acme', 1);
         INSERT INTO stacks (org_id, id, name, repository, branch, path, watch_paths, engine,
             tier, autodeploy, variables, depends_on, runner_pool, created_at, updated_at)
         VALUES
           ('acme', 'net', 'net', 'github:Acme/Infra', 'main', '.', '[]', 'tofu', 'small', 0,
            '{}', '[]', 'hosted', 1, 1),
           ('acme', 'app', 'app', 'https://git.example.com/Infra.git', 'main', '.', '[]',
            'tofu', 'small', 0, '{}', '[]', 'hosted', 1, 1);
         INSERT INTO runs (id, org_id, stack_id, kind, trigger, state, phase, needs_lease,
             triggered_by, branch, created_at, updated_at)
         VALUES ('r-old', 'acme', 'net', 'proposed', 'manual', 'queued', 'plan', 1,
                 'user:alice', 'main', 2, 2);
         INSERT INTO run_phases (run_id, state, started_at) VALUES ('r-old', 'queued', 2);",
    )
    .unwrap();
    tx.commit().unwrap();
}

#[tokio::test]
async fn migrates_a_v3_database_and_backfills_repository_keys() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bosun.db");
    v3_database(&path);
    let store = SqliteStore::open(&path).await.unwrap();
    let (fresh_store, _fresh_dir) = fresh().await;
    assert_eq!(
        store.schema_version().await.unwrap(),
        fresh_store.schema_version().await.unwrap()
    );
    assert!(store.schema_version().await.unwrap() >= 4);

    let found = store
        .stacks_for_repository("github:acme/infra", Some("main"))
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].spec.id.as_str(), "net");
    assert_eq!(found[0].spec.repository.to_string(), "github:Acme/Infra");
    let git = store
        .stacks_for_repository("https://git.example.com/Infra.git", None)
        .await
        .unwrap();
    assert_eq!(git.len(), 1);
    assert_eq!(git[0].spec.id.as_str(), "app");
    let remotes = store.git_remote_stacks().await.unwrap();
    assert_eq!(remotes.len(), 1);
    assert_eq!(remotes[0].spec.id.as_str(), "app");

    // Old runs read with no pull request and no delivery, and the new columns work.
    let old = store.get_run("r-old").await.unwrap().unwrap();
    assert_eq!((old.pull_request, old.delivery), (None, None));
    let outcome = store
        .record_delivery(&bosun_store::NewDelivery {
            source: bosun_store::DeliverySource::Poll,
            guid: "poll-1".into(),
            event: "poll".into(),
            action: None,
            repository: Some("github:acme/infra".into()),
            git_ref: Some("refs/heads/main".into()),
            before: None,
            after: Some("c".repeat(40)),
            pull_request: None,
            summary: "branch moved".into(),
            decisions: vec![bosun_store::TriggerDecision {
                org: "acme".into(),
                stack: "net".into(),
                run_id: Some("r-new".into()),
                reason: "changed".into(),
            }],
            runs: vec![bosun_store::NewRun {
                id: "r-new".into(),
                org: "acme".into(),
                stack: "net".into(),
                kind: bosun_core::run::RunKind::Proposed,
                trigger: bosun_core::run::Trigger::PullRequest,
                triggered_by: "system".into(),
                commit: Some("c".repeat(40)),
                branch: "main".into(),
                retry_of: None,
                pull_request: Some(3),
            }],
            cancel: None,
            evaluations: Vec::new(),
        })
        .await
        .unwrap();
    let bosun_store::DeliveryOutcome::Recorded { id, runs, .. } = outcome else {
        panic!("expected Recorded, got {outcome:?}");
    };
    assert_eq!(
        (runs[0].delivery, runs[0].pull_request),
        (Some(id), Some(3))
    );
    store.close().await;

    // Reopening applies nothing again.
    let again = SqliteStore::open(&path).await.unwrap();
    assert_eq!(
        again
            .stacks_for_repository("github:acme/infra", None)
            .await
            .unwrap()
            .len(),
        1
    );
    again.close().await;
}

/// Creates a database at schema v4 (the first four migrations, as an older binary left
/// it) holding an org, a stack and a run.
fn v4_database(path: &std::path::Path) {
    let mut conn = rusqlite::Connection::open(path).unwrap();
    let tx = conn.transaction().unwrap();
    tx.execute_batch("CREATE TABLE bosun_schema (version INTEGER NOT NULL)")
        .unwrap();
    for (i, sql) in [
        include_str!("../migrations/sqlite/0001_init.sql"),
        include_str!("../migrations/sqlite/0002_state.sql"),
        include_str!("../migrations/sqlite/0003_runs.sql"),
        include_str!("../migrations/sqlite/0004_vcs.sql"),
    ]
    .iter()
    .enumerate()
    {
        tx.execute_batch(sql).unwrap();
        tx.execute("INSERT INTO bosun_schema (version) VALUES (?1)", [i + 1])
            .unwrap();
    }
    tx.execute_batch(
        "INSERT INTO orgs (id, name, created_at) VALUES ('acme', 'Acme', 1);
         INSERT INTO stacks (org_id, id, name, repository, branch, path, watch_paths, engine,
             tier, autodeploy, variables, depends_on, runner_pool, created_at, updated_at,
             repo_key)
         VALUES ('acme', 'net', 'net', 'github:Acme/Infra', 'main', '.', '[]', 'tofu',
                 'small', 0, '{}', '[]', 'hosted', 1, 1, 'github:acme/infra');
         INSERT INTO runs (id, org_id, stack_id, kind, trigger, state, phase, needs_lease,
             triggered_by, branch, created_at, updated_at)
         VALUES ('r-old', 'acme', 'net', 'tracked', 'manual', 'queued', 'plan', 1,
                 'user:alice', 'main', 2, 2);
         INSERT INTO run_phases (run_id, state, started_at) VALUES ('r-old', 'queued', 2);",
    )
    .unwrap();
    tx.commit().unwrap();
}

#[tokio::test]
async fn migrates_a_v4_database_to_run_identity() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bosun.db");
    v4_database(&path);
    let store = SqliteStore::open(&path).await.unwrap();
    let (fresh_store, _fresh_dir) = fresh().await;
    assert_eq!(
        store.schema_version().await.unwrap(),
        fresh_store.schema_version().await.unwrap()
    );
    assert!(store.schema_version().await.unwrap() >= 5);

    // The old stack reads with no AWS roles, and can be given some.
    let old = store.get_stack("acme", "net").await.unwrap().unwrap();
    assert_eq!(old.spec.aws, None);
    let mut input = old.spec.to_input();
    input.aws = Some(bosun_core::stack::AwsInput {
        plan_role_arn: "arn:aws:iam::123456789012:role/net-plan".into(),
        apply_role_arn: None,
        audience: None,
    });
    let with_aws = bosun_core::stack::StackSpec::from_input(input).unwrap();
    let a = bosun_store::Audit {
        org: Some("acme".into()),
        actor: "user:alice".into(),
        token_id: None,
        action: "stack.update".into(),
        target: "stack:net".into(),
        detail: serde_json::json!({}),
    };
    store.update_stack("acme", &with_aws, &a).await.unwrap();

    // The new tables work against the old rows.
    let sealed = bosun_store::Sealed {
        ciphertext: b"ct".to_vec(),
        nonce: vec![0; 12],
        key_id: "sk1".into(),
    };
    store
        .put_secret("acme", "db", "password", &sealed, &a)
        .await
        .unwrap();
    assert!(store.signing_keys().await.unwrap().is_empty());
    store
        .add_id_request_token(&bosun_store::IdRequestToken {
            secret_hash: "e".repeat(64),
            run_id: "r-old".into(),
            phase: bosun_core::run::Phase::Plan,
            fencing: 0,
            expires_at: chrono::Utc::now() + chrono::Duration::minutes(5),
        })
        .await
        .unwrap();
    let (_, run) = store
        .id_request_token(&"e".repeat(64))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.id, "r-old");
    store.close().await;

    // Reopening applies nothing again and keeps what was written.
    let again = SqliteStore::open(&path).await.unwrap();
    assert_eq!(
        again
            .get_stack("acme", "net")
            .await
            .unwrap()
            .unwrap()
            .spec
            .aws,
        with_aws.aws
    );
    assert_eq!(
        again.get_secret("acme", "db", "password").await.unwrap(),
        Some(sealed)
    );
    again.close().await;
}

/// A signing key row without its sealed private half (only a hand edit makes one) is
/// refused as corrupt, not returned half-empty.
#[tokio::test]
async fn signing_key_without_private_half_is_corrupt() {
    let (store, dir) = fresh().await;
    store.close().await;
    let conn = rusqlite::Connection::open(dir.path().join("bosun.db")).unwrap();
    conn.execute(
        "INSERT INTO oidc_signing_keys (kid, public_jwk, created_at) VALUES ('k', '{}', 1)",
        [],
    )
    .unwrap();
    drop(conn);
    let store = SqliteStore::open(&dir.path().join("bosun.db"))
        .await
        .unwrap();
    assert!(matches!(
        store.signing_keys().await,
        Err(StoreError::Corrupt(_))
    ));
    assert!(matches!(
        store.sealed_values().await,
        Err(StoreError::Corrupt(_))
    ));
}

/// The SQLite migrations up to and including `upto` (as an older binary applied them).
/// Builds the schema of version `upto` in `tx`, as that version's server left it.
fn schema_at(tx: &rusqlite::Transaction<'_>, upto: usize) {
    tx.execute_batch("CREATE TABLE bosun_schema (version INTEGER NOT NULL)")
        .unwrap();
    for (i, sql) in migrations_up_to(upto).iter().enumerate() {
        tx.execute_batch(sql).unwrap();
        tx.execute("INSERT INTO bosun_schema (version) VALUES (?1)", [i + 1])
            .unwrap();
    }
}

fn migrations_up_to(upto: usize) -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/sqlite");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .collect();
    files.sort();
    files.truncate(upto);
    files
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect()
}

/// Schema v16 claimed each secret namespace for the first org that used it; the
/// migration to per-org namespaces keeps every org's secrets (sealed values untouched)
/// and frees the names for everyone.
#[tokio::test]
async fn migrates_global_secret_namespaces_to_per_org_keeping_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bosun.db");
    {
        let mut conn = rusqlite::Connection::open(&path).unwrap();
        conn.pragma_update(None, "foreign_keys", "ON").unwrap();
        let tx = conn.transaction().unwrap();
        schema_at(&tx, 16);
        // acme claimed `aws` and `old` (since emptied); globex claimed `ci`.
        tx.execute_batch(
            "INSERT INTO orgs (id, name, created_at) VALUES ('acme', 'Acme', 1), ('globex', 'Globex', 1);
             INSERT INTO secret_namespaces (name, org_id, created_at)
             VALUES ('aws', 'acme', 1), ('old', 'acme', 1), ('ci', 'globex', 1);
             INSERT INTO secrets (org_id, namespace, key, ciphertext, nonce, key_id, created_at,
                                  updated_at, updated_by)
             VALUES ('acme', 'aws', 'key', X'01020304', X'0a0b', 'sk1', 5, 6, 'user:alice'),
                    ('globex', 'ci', 'token', X'0506', X'0c0d', 'sk1', 7, 8, NULL);",
        )
        .unwrap();
        tx.commit().unwrap();
    }
    let store = SqliteStore::open(&path).await.unwrap();
    let (fresh_store, _fresh_dir) = fresh().await;
    assert_eq!(
        store.schema_version().await.unwrap(),
        fresh_store.schema_version().await.unwrap()
    );
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
    let listed = store.list_secrets("acme", None).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (
            listed[0].created_at.timestamp_millis(),
            listed[0].updated_by.as_str()
        ),
        (5, "user:alice")
    );
    assert_eq!(
        store.get_secret("globex", "ci", "token").await.unwrap(),
        Some(bosun_store::Sealed {
            ciphertext: vec![5, 6],
            nonce: vec![12, 13],
            key_id: "sk1".into(),
        })
    );
    // Every claimed name is now usable by the other org, without touching the owner's.
    let a = bosun_store::Audit {
        org: Some("globex".into()),
        actor: "user:bob".into(),
        token_id: None,
        action: "secret.set".into(),
        target: "secret://aws/key".into(),
        detail: serde_json::json!({}),
    };
    let theirs = bosun_store::Sealed {
        ciphertext: b"globex".to_vec(),
        nonce: vec![0; 24],
        key_id: "sk1".into(),
    };
    for ns in ["aws", "old"] {
        store
            .put_secret("globex", ns, "key", &theirs, &a)
            .await
            .unwrap();
    }
    store
        .put_secret("acme", "ci", "token", &theirs, &a)
        .await
        .unwrap();
    assert_eq!(
        store.get_secret("acme", "aws", "key").await.unwrap(),
        Some(acme)
    );
    assert_eq!(
        store.get_secret("globex", "aws", "key").await.unwrap(),
        Some(theirs)
    );
    assert_eq!(store.sealed_values().await.unwrap().len(), 5);
    store.close().await;
}

/// A v20 database, as the binary before retention left it: org `acme`, stack `net` with
/// three old state versions (the third current), and run `r1`, ended long ago, that
/// consumed version 1 and logged three chunks as rows.
fn v20_database(path: &std::path::Path) {
    let mut conn = rusqlite::Connection::open(path).unwrap();
    conn.pragma_update(None, "foreign_keys", "ON").unwrap();
    let tx = conn.transaction().unwrap();
    schema_at(&tx, 20);
    tx.execute_batch(
        "INSERT INTO orgs (id, name, created_at) VALUES ('acme', 'Acme', 1);
         INSERT INTO stacks (org_id, id, name, repository, branch, path, watch_paths, engine,
             tier, autodeploy, variables, depends_on, runner_pool, created_at, updated_at)
         VALUES ('acme', 'net', 'net', 'r', 'main', '.', '[]', 'terraform', 'standard', 0,
             '{}', '[]', 'hosted', 1, 1);
         INSERT INTO state_versions (org_id, stack_id, version, serial, lineage, checksum,
             size, writer_kind, writer_id, created_at, late_write, forced, outputs, body)
         VALUES ('acme', 'net', 1, 1, 'l', 'c', 2, 'user', 'u', 1, 0, 0, '{}', X'7b7d'),
                ('acme', 'net', 2, 2, 'l', 'c', 2, 'user', 'u', 1, 0, 0, '{}', X'7b7d'),
                ('acme', 'net', 3, 3, 'l', 'c', 2, 'user', 'u', 1, 0, 0, '{}', X'7b7d');
         INSERT INTO state_heads (org_id, stack_id, current_version) VALUES ('acme', 'net', 3);
         INSERT INTO runs (id, org_id, stack_id, kind, trigger, state, phase, needs_lease,
             triggered_by, branch, created_at, updated_at, consumed)
         VALUES ('r1', 'acme', 'net', 'tracked', 'manual', 'failed', 'plan', 0, 'user:u',
                 'main', 1, 1,
                 '[{\"stack\": \"net\", \"version\": 1, \"output\": \"o\", \"variable\": \"o\", \"sensitive\": false}]'),
                ('r2', 'acme', 'net', 'tracked', 'manual', 'failed', 'plan', 0, 'user:u',
                 'main', 1, 1, '{\"not\": \"a list\"}');
         INSERT INTO run_logs (run_id, seq, text) VALUES ('r1', 0, 'a'), ('r1', 1, 'b'),
             ('r1', 2, 'c');",
    )
    .unwrap();
    tx.commit().unwrap();
}

/// Schema v21 records the versions runs consumed before it (a malformed list records
/// nothing), so retention keeps them; v22's readers keep reading the rows of old logs.
#[tokio::test]
async fn migrates_a_v20_database_keeping_consumed_versions_and_old_logs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bosun.db");
    v20_database(&path);
    let store = SqliteStore::open(&path).await.unwrap();
    assert!(store.schema_version().await.unwrap() >= 22);
    let logs = store.read_logs("r1", None, 10).await.unwrap();
    let texts: Vec<(i64, &str)> = logs.iter().map(|c| (c.seq, c.text.as_str())).collect();
    assert_eq!(texts, [(0, "a"), (1, "b"), (2, "c")]);
    assert!(logs.iter().all(|c| c.at.is_none() && c.phase.is_none()));
    assert_eq!(
        store
            .prune_state_versions(1, chrono::Utc::now(), 10)
            .await
            .unwrap(),
        1
    );
    let kept: Vec<i64> = store
        .list_state_versions("acme", "net", None, 10)
        .await
        .unwrap()
        .iter()
        .map(|v| v.version)
        .collect();
    assert_eq!(kept, [3, 1]);
    assert_eq!(
        store
            .compress_run_logs(chrono::Utc::now(), 10)
            .await
            .unwrap(),
        (3, 0)
    );
    assert_eq!(store.read_logs("r1", None, 10).await.unwrap(), logs);
    assert_eq!(store.next_log_seq("r1").await.unwrap(), 3);
}

/// A block whose row claims less than it inflates to — a bomb — is refused as corrupt,
/// never inflated past the claim; so is a claim past what any block may hold.
#[tokio::test]
async fn a_log_block_inflating_past_its_stored_length_is_refused() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bosun.db");
    v20_database(&path);
    drop(SqliteStore::open(&path).await.unwrap());
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(&vec![b' '; 8 * 1024 * 1024]).unwrap();
    let bomb = z.finish().unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(
        "INSERT INTO run_log_blocks (run_id, first_seq, last_seq, chunks, raw_bytes, body)
         VALUES ('r2', 0, 0, 1, 64, ?1)",
        [&bomb],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO run_log_blocks (run_id, first_seq, last_seq, chunks, raw_bytes, body)
         VALUES ('r1', 10, 10, 1, 1099511627776, ?1)",
        [&bomb],
    )
    .unwrap();
    drop(conn);
    let store = SqliteStore::open(&path).await.unwrap();
    match store.read_logs("r2", None, 10).await {
        Err(StoreError::Corrupt(e)) => assert!(e.contains("inflates past"), "{e}"),
        other => panic!("read a bomb: {other:?}"),
    }
    // r1's rows still read; its claimed-huge block is refused when a read reaches it.
    assert_eq!(store.read_logs("r1", None, 3).await.unwrap().len(), 3);
    match store.read_logs("r1", Some(2), 10).await {
        Err(StoreError::Corrupt(e)) => assert!(e.contains("more than the"), "{e}"),
        other => panic!("read a huge block: {other:?}"),
    }
}

/// Schema v24 keeps each drift schedule's `stale_at` for the dashboard's and the
/// scheduler's indexes. Upgrading queues every drift-checked stack for one look by the
/// scheduler, drops the schedule of a stack whose drift detection was turned off, and
/// leaves `stale_at` for the scheduler to fill: computed from the latest successful check
/// (or `since`), with its alert due. v26 counts the runs already stored.
#[tokio::test]
async fn migrates_a_v23_database_to_drift_schedules_read_by_index_and_counted_runs() {
    use bosun_store::DriftStore;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bosun.db");
    {
        let mut conn = rusqlite::Connection::open(&path).unwrap();
        let tx = conn.transaction().unwrap();
        schema_at(&tx, 23);
        let stack = |id: &str, drift: &str| {
            format!(
                "INSERT INTO stacks (org_id, id, name, repository, branch, path, watch_paths,
                     engine, tier, autodeploy, variables, depends_on, runner_pool, created_at,
                     updated_at, drift_detection)
                 VALUES ('acme', '{id}', '{id}', 'r', 'main', '.', '[]', 'terraform',
                     'standard', 0, '{{}}', '[]', 'hosted', 1, 1, {drift});"
            )
        };
        // `net` checks hourly since 10:00 and last succeeded at 11:00; `off` had its
        // drift detection turned off after it was armed.
        let h = 3_600_000i64;
        let t0 = 1_717_236_000_000i64; // 2024-06-01T10:00:00Z
        tx.execute_batch(&format!(
            "INSERT INTO orgs (id, name, created_at) VALUES ('acme', 'Acme', 1);
             {}{}
             INSERT INTO drift_schedules (org_id, stack_id, schedule, timezone, since, next_at)
             VALUES ('acme', 'net', '0 * * * *', 'UTC', {t0}, {}),
                    ('acme', 'off', '0 * * * *', 'UTC', {t0}, {});
             INSERT INTO runs (id, org_id, stack_id, kind, trigger, state, phase, needs_lease,
                 triggered_by, branch, created_at, updated_at)
             VALUES ('d1', 'acme', 'net', 'drift', 'schedule', 'finished', 'plan', 0,
                 'system', 'main', {}, {});
             INSERT INTO drift_checks (run_id, org_id, stack_id, result, checked_at)
             VALUES ('d1', 'acme', 'net', 'no_drift', {});",
            stack(
                "net",
                "'{\"schedule\": \"0 * * * *\", \"timezone\": \"UTC\"}'"
            ),
            stack("off", "NULL"),
            t0 + 2 * h,
            t0 + 2 * h,
            t0 + h,
            t0 + h,
            t0 + h,
        ))
        .unwrap();
        tx.commit().unwrap();
    }
    let store = SqliteStore::open(&path).await.unwrap();
    assert!(store.schema_version().await.unwrap() >= 24);
    let queued: Vec<_> = store
        .drift_arming(10)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.stack)
        .collect();
    assert_eq!(queued, ["net"]);
    // Not listed until its stale_at is computed; `off` is gone.
    assert!(store
        .drift_dashboard("acme", None, 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(store.fill_drift_stale_at(10).await.unwrap(), 1);
    assert_eq!(store.fill_drift_stale_at(10).await.unwrap(), 0);
    let listed = store.drift_dashboard("acme", None, 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    let state = listed[0].state.clone().unwrap();
    // The last success (11:00) plus twice the hourly interval.
    assert_eq!(state.stale_at, Some(1_717_236_000_000 + 3 * 3_600_000));
    assert_eq!(state.alert_at, state.stale_at);
    // v26 counts the runs stored before it for /metrics.
    let m = bosun_store::MetricsStore::metrics(&store).await.unwrap();
    assert_eq!(
        m.runs.into_iter().collect::<Vec<_>>(),
        [(("drift".to_string(), "finished".to_string()), 1)]
    );
}

#[tokio::test]
async fn migrates_a_v28_database_gating_the_runs_already_waiting_for_approval() {
    use bosun_store::ApprovalStore;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bosun.db");
    {
        let mut conn = rusqlite::Connection::open(&path).unwrap();
        let tx = conn.transaction().unwrap();
        schema_at(&tx, 28);
        let stack = |id: &str, env: &str| {
            format!(
                "INSERT INTO stacks (org_id, id, name, repository, branch, path, watch_paths,
                     engine, tier, autodeploy, variables, depends_on, runner_pool, created_at,
                     updated_at, environment)
                 VALUES ('acme', '{id}', '{id}', 'r', 'main', '.', '[]', 'terraform',
                     'standard', 0, '{{}}', '[]', 'hosted', 1, 1, '{env}');"
            )
        };
        let run = |id: &str, stack: &str, kind: &str, state: &str| {
            format!(
                "INSERT INTO runs (id, org_id, stack_id, kind, trigger, state, phase, needs_lease,
                     triggered_by, branch, created_at, updated_at)
                 VALUES ('{id}', 'acme', '{stack}', '{kind}', 'manual', '{state}', 'plan', 0,
                     'user:alice', 'main', 10, 10);"
            )
        };
        // Waiting on `prod` (requires approval): the tracked unconfirmed run only; `dev`'s
        // waits for a plain confirmation.
        tx.execute_batch(&format!(
            "INSERT INTO orgs (id, name, created_at) VALUES ('acme', 'Acme', 1);
             INSERT INTO environments (org_id, id, vars, requires_approval, protected,
                 created_at, updated_at, updated_by)
             VALUES ('acme', 'prod', '{{}}', 1, 0, 1, 1, 'admin'),
                    ('acme', 'dev', '{{}}', 0, 0, 1, 1, 'admin');
             {}{}{}{}{}{}",
            stack("gated", "prod"),
            stack("plain", "dev"),
            run("r-gated", "gated", "tracked", "unconfirmed"),
            run("r-plain", "plain", "tracked", "unconfirmed"),
            run("r-proposed", "gated", "proposed", "finished"),
            run("r-done", "gated", "tracked", "finished"),
        ))
        .unwrap();
        tx.commit().unwrap();
    }
    let store = SqliteStore::open(&path).await.unwrap();
    assert!(store.schema_version().await.unwrap() >= 29);
    let pending: Vec<_> = store
        .pending_approvals("acme", None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|p| (p.subject, p.environments))
        .collect();
    assert_eq!(pending, [("r-gated".to_string(), vec!["prod".to_string()])]);
}

#[tokio::test]
async fn migrates_a_v30_database_keeping_waiting_runs_leasable_by_their_pool() {
    use bosun_store::{RunStore, RunnerRecord, RunnerStore};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bosun.db");
    {
        let mut conn = rusqlite::Connection::open(&path).unwrap();
        let tx = conn.transaction().unwrap();
        schema_at(&tx, 30);
        let stack = |id: &str, pool: &str| {
            format!(
                "INSERT INTO stacks (org_id, id, name, repository, branch, path, watch_paths,
                     engine, tier, autodeploy, variables, depends_on, runner_pool, created_at,
                     updated_at)
                 VALUES ('acme', '{id}', '{id}', 'github:acme/infra', 'main', '', '[]', 'auto',
                     'small', 0, '{{}}', '[]', '{pool}', 1, 1);"
            )
        };
        let run = |id: &str, stack: &str, state: &str, needs_lease: u8, at: i64| {
            format!(
                "INSERT INTO runs (id, org_id, stack_id, kind, trigger, state, phase, needs_lease,
                     triggered_by, branch, created_at, updated_at)
                 VALUES ('{id}', 'acme', '{stack}', 'proposed', 'manual', '{state}', 'plan',
                     {needs_lease}, 'user:alice', 'main', {at}, {at});"
            )
        };
        // Two runs queued before the upgrade, one per pool; an old finished run.
        tx.execute_batch(&format!(
            "INSERT INTO orgs (id, name, created_at) VALUES ('acme', 'Acme', 1);
             {}{}{}{}{}",
            stack("on-edge", "edge"),
            stack("hosted", "hosted"),
            run("r-edge", "on-edge", "queued", 1, 10),
            run("r-hosted", "hosted", "queued", 1, 11),
            run("r-done", "on-edge", "finished", 0, 5),
        ))
        .unwrap();
        tx.commit().unwrap();
    }
    let store = SqliteStore::open(&path).await.unwrap();
    assert!(store.schema_version().await.unwrap() >= 31);
    let runner = |id: &str, org: Option<&str>, pool: &str| RunnerRecord {
        id: id.into(),
        org: org.map(str::to_string),
        pool: pool.into(),
        name: id.into(),
        version: "test".into(),
        drained: false,
        last_seen: chrono::Utc::now(),
        created_at: chrono::Utc::now(),
        egress: None,
    };
    let edge = store
        .register_runner(&runner("rnr-edge", Some("acme"), "edge"))
        .await
        .unwrap();
    let hosted = store
        .register_runner(&runner("rnr-hosted", None, "hosted"))
        .await
        .unwrap();
    let leased = |r: RunnerRecord| {
        let store = &store;
        async move { store.lease_run(&r).await.unwrap().map(|run| run.id) }
    };
    assert_eq!(leased(edge.clone()).await.as_deref(), Some("r-edge"));
    assert_eq!(leased(edge).await, None);
    assert_eq!(leased(hosted).await.as_deref(), Some("r-hosted"));
}

/// The feedback duty reads `orgs.pr_feedback` and `stacks.pr_feedback` in its own SQL: the
/// columns hold `PrFeedback`'s string forms, and NULL for a stack that follows its org.
#[tokio::test]
async fn pr_feedback_columns_hold_the_string_forms() {
    use bosun_core::feedback::PrFeedback;
    use bosun_core::stack::{StackInput, StackSpec};
    let (store, dir) = fresh().await;
    let audit = |action: &str| bosun_store::Audit {
        org: Some("acme".into()),
        actor: "user:tester".into(),
        token_id: None,
        action: action.into(),
        target: "org:acme".into(),
        detail: serde_json::json!({}),
    };
    store
        .create_org(
            &bosun_store::NewOrg {
                id: "acme".into(),
                name: "acme".into(),
                admin: None,
            },
            &audit("org.create"),
        )
        .await
        .unwrap();
    store
        .update_org(
            "acme",
            &bosun_store::OrgUpdate {
                pr_feedback: Some(PrFeedback::Comment),
            },
            &audit("org.update"),
        )
        .await
        .unwrap();
    for (id, f) in [("own", Some("checks")), ("inherits", None)] {
        let spec = StackSpec::from_input(StackInput {
            id: id.into(),
            repository: "github:acme/infra".into(),
            pr_feedback: f.map(str::to_string),
            ..StackInput::default()
        })
        .unwrap();
        store
            .create_stack("acme", &spec, &audit("stack.create"))
            .await
            .unwrap();
    }
    store.close().await;
    let conn = rusqlite::Connection::open(dir.path().join("bosun.db")).unwrap();
    let org: String = conn
        .query_row("SELECT pr_feedback FROM orgs WHERE id = 'acme'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(org, "comment");
    let stacks: Vec<(String, Option<String>)> = conn
        .prepare("SELECT id, pr_feedback FROM stacks ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        stacks,
        [
            ("inherits".to_string(), None),
            ("own".to_string(), Some("checks".to_string()))
        ]
    );
}

/// Runners registered before v33 said nothing of their egress: they read back as `None`,
/// and a runner registering afterwards stores its mode's string form.
#[tokio::test]
async fn migrates_a_v32_database_keeping_runners_that_did_not_say_their_egress() {
    use bosun_core::runner::Egress;
    use bosun_store::{RunnerRecord, RunnerStore};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bosun.db");
    {
        let mut conn = rusqlite::Connection::open(&path).unwrap();
        let tx = conn.transaction().unwrap();
        schema_at(&tx, 32);
        tx.execute_batch(
            "INSERT INTO runners (id, org_id, pool, name, version, drained, last_seen, created_at)
             VALUES ('rnr-old', NULL, 'hosted', 'old', '0.1.0', 0, 1, 1);",
        )
        .unwrap();
        tx.commit().unwrap();
    }
    let store = SqliteStore::open(&path).await.unwrap();
    assert!(store.schema_version().await.unwrap() >= 33);
    let old = store.get_runner("rnr-old").await.unwrap().unwrap();
    assert_eq!((old.name.as_str(), old.egress), ("old", None));
    store
        .register_runner(&RunnerRecord {
            id: "rnr-new".into(),
            org: None,
            pool: "hosted".into(),
            name: "new".into(),
            version: "0.2.0".into(),
            drained: false,
            last_seen: chrono::Utc::now(),
            created_at: chrono::Utc::now(),
            egress: Some(Egress::OptedOut),
        })
        .await
        .unwrap();
    store.close().await;
    let conn = rusqlite::Connection::open(&path).unwrap();
    let stored: Vec<(String, Option<String>)> = conn
        .prepare("SELECT id, egress FROM runners ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        stored,
        [
            ("rnr-new".to_string(), Some("opted_out".to_string())),
            ("rnr-old".to_string(), None)
        ]
    );
}

/// v35 keeps /metrics' held-lock and alerted stale-check counts with triggers: a store
/// upgraded from v34 starts from the rows it holds, and later changes — here a stack
/// deleted with its lock and its alerted schedule — count on top.
#[tokio::test]
async fn migrates_a_v34_database_counting_held_locks_and_alerted_stale_checks() {
    use bosun_store::{DriftStore, MetricsStore};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bosun.db");
    let h = 3_600_000i64;
    let t0 = 1_717_236_000_000i64; // 2024-06-01T10:00:00Z
    {
        let mut conn = rusqlite::Connection::open(&path).unwrap();
        let tx = conn.transaction().unwrap();
        schema_at(&tx, 34);
        let stack = |id: &str| {
            format!(
                "INSERT INTO stacks (org_id, id, name, repository, branch, path, watch_paths,
                     engine, tier, autodeploy, variables, depends_on, runner_pool, created_at,
                     updated_at)
                 VALUES ('acme', '{id}', '{id}', 'r', 'main', '.', '[]', 'terraform',
                     'standard', 0, '{{}}', '[]', 'hosted', 1, 1);"
            )
        };
        let schedule = |id: &str, stale_at: &str, alert_at: &str| {
            format!(
                "INSERT INTO drift_schedules (org_id, stack_id, schedule, timezone, since,
                     next_at, stale_at, alert_at)
                 VALUES ('acme', '{id}', '0 * * * *', 'UTC', {t0}, {t0}, {stale_at}, {alert_at});"
            )
        };
        // `net`: locked, and its stale alert raised. `app`: stale, its alert not raised
        // yet. `web`: never stale. `old`: stored before stale_at was kept.
        tx.execute_batch(&format!(
            "INSERT INTO orgs (id, name, created_at) VALUES ('acme', 'Acme', 1);
             {}{}{}{}
             INSERT INTO state_heads (org_id, stack_id, lock_id, lock_acquired_at)
             VALUES ('acme', 'net', 'L1', {t0}), ('acme', 'app', NULL, NULL);
             {}{}{}{}",
            stack("net"),
            stack("app"),
            stack("web"),
            stack("old"),
            schedule("net", &(t0 + 2 * h).to_string(), "NULL"),
            schedule("app", &(t0 + 3 * h).to_string(), &(t0 + 3 * h).to_string()),
            schedule("web", &i64::MAX.to_string(), "NULL"),
            schedule("old", "NULL", "NULL"),
        ))
        .unwrap();
        tx.commit().unwrap();
    }
    let acme = |n: i64| [("acme".to_string(), n)].into_iter().collect();
    let now = chrono::Utc::now();
    {
        let store = SqliteStore::open(&path).await.unwrap();
        assert!(store.schema_version().await.unwrap() >= 35);
        assert_eq!(store.metrics().await.unwrap().locks_held, acme(1));
        assert_eq!(
            store.stale_drift_checks(now, 10).await.unwrap().by_org,
            acme(2)
        );
        store.close().await;
    }
    // Deleted with its stack: the lock and the alerted schedule go, and so do their counts.
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("PRAGMA foreign_keys = ON; DELETE FROM stacks WHERE id = 'net';")
            .unwrap();
    }
    let store = SqliteStore::open(&path).await.unwrap();
    assert!(store.metrics().await.unwrap().locks_held.is_empty());
    assert_eq!(
        store.stale_drift_checks(now, 10).await.unwrap().by_org,
        acme(1)
    );
}

/// Stacks stored before v39 had no labels: they read back with none, and an update that
/// gives one labels stores them as a JSON array of strings, in the order given.
#[tokio::test]
async fn migrates_a_v37_database_giving_its_stacks_no_labels() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bosun.db");
    {
        let mut conn = rusqlite::Connection::open(&path).unwrap();
        let tx = conn.transaction().unwrap();
        schema_at(&tx, 37);
        tx.execute_batch(
            "INSERT INTO orgs (id, name, created_at) VALUES ('acme', 'Acme', 1);
             INSERT INTO stacks (org_id, id, name, repository, branch, path, watch_paths,
                 engine, tier, autodeploy, variables, depends_on, runner_pool, created_at,
                 updated_at, repo_key)
             VALUES ('acme', 'net', 'net', 'file:///srv/git/infra', 'main', '', '[]',
                 'terraform', 'small', 0, '{}', '[]', 'hosted', 1, 1, 'file:///srv/git/infra');",
        )
        .unwrap();
        tx.commit().unwrap();
    }
    let store = SqliteStore::open(&path).await.unwrap();
    let old = store.get_stack("acme", "net").await.unwrap().unwrap();
    assert!(old.spec.labels.is_empty(), "{:?}", old.spec.labels);
    let mut labelled = old.spec.clone();
    labelled.labels = ["prod", "network"]
        .into_iter()
        .map(|l| bosun_core::Slug::parse("labels", l).unwrap())
        .collect();
    store
        .update_stack(
            "acme",
            &labelled,
            &bosun_store::Audit {
                org: Some("acme".into()),
                actor: "user:tester".into(),
                token_id: None,
                action: "stack.update".into(),
                target: "stack:net".into(),
                detail: serde_json::json!({}),
            },
        )
        .await
        .unwrap();
    store.close().await;
    let conn = rusqlite::Connection::open(&path).unwrap();
    let stored: String = conn
        .query_row("SELECT labels FROM stacks WHERE id = 'net'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(stored, r#"["prod","network"]"#);
}
