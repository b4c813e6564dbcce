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
