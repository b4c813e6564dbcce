//! The SQLite backend: the conformance suite, plus what only a file database shows.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use bosun_store::{SqliteStore, Store, StoreError};

async fn fresh() -> (Arc<dyn Store>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("bosun.db"))
        .await
        .unwrap();
    (Arc::new(store), dir)
}

bosun_store::conformance_suite!(fresh());

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
