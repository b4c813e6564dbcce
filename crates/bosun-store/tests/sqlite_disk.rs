//! The SQLite backend on a disk that fills up: a database on a small tmpfs of the test's
//! own (mounting needs root, as in CI; elsewhere the test skips loudly, and fails under
//! `BOSUN_REQUIRE_TOOLS=1`). A write the full disk refuses is `StoreError::Unavailable`
//! saying so, leaves nothing behind, and writes work again once space returns — on the
//! same store, without reopening it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use bosun_store::{Audit, DatabaseStore, IdentityStore, NewUser, SqliteStore, Store, StoreError};
use bosun_testkit::tmpfs::Tmpfs;

fn audit(user: &str) -> Audit {
    Audit {
        org: None,
        actor: "system".into(),
        token_id: None,
        action: "user.create".into(),
        target: format!("user:{user}"),
        detail: serde_json::json!({}),
    }
}

async fn add_user(store: &dyn Store, id: &str) -> Result<(), StoreError> {
    store
        .create_user(
            &NewUser {
                id: id.into(),
                server_admin: false,
            },
            &audit(id),
        )
        .await
        .map(drop)
}

/// Folds the WAL into the database file and truncates it, from a connection of the
/// test's own: the next write must then grow the WAL, so it needs new space.
fn truncate_wal(db: &Path) {
    let conn = rusqlite::Connection::open(db).unwrap();
    let busy: i64 = conn
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
        .unwrap();
    assert_eq!(busy, 0, "the checkpoint was blocked");
}

#[tokio::test]
async fn a_full_disk_refuses_writes_as_unavailable_and_they_work_again_once_space_returns() {
    let Some(fs) = Tmpfs::mount("8m") else {
        return;
    };
    let db = fs.path().join("bosun.db");
    let store = SqliteStore::open(&db).await.unwrap();
    add_user(&store, "before").await.unwrap();
    assert!(store.last_unavailable().is_none());
    truncate_wal(&db);
    let filler = fs.fill();

    // Every write is refused, saying why; nothing half-written is left.
    for attempt in 0..3 {
        match add_user(&store, &format!("during-{attempt}")).await {
            Err(StoreError::Unavailable(why)) => assert!(
                why.contains("the data directory's filesystem is full"),
                "{why}"
            ),
            other => panic!("a write on a full disk answered {other:?}"),
        }
    }
    let outage = store.last_unavailable().expect("the outage is recorded");
    let fault = store.write_fault().expect("the write fault is known");
    assert!(fault.contains("filesystem is full"), "{fault}");
    // Reads still answer, and what was stored before is there.
    store.ping().await.unwrap();
    assert!(store.get_user("before").await.unwrap().is_some());
    assert!(store.get_user("during-0").await.unwrap().is_none());

    // Space returns: the same store writes again.
    filler.remove();
    add_user(&store, "after").await.unwrap();
    assert!(store.write_fault().is_none(), "a committed write ends it");
    assert_eq!(
        store.last_unavailable(),
        Some(outage),
        "the outage time stays"
    );
    for user in ["before", "after"] {
        assert!(store.get_user(user).await.unwrap().is_some(), "{user}");
    }
    for attempt in 0..3 {
        let user = format!("during-{attempt}");
        assert!(store.get_user(&user).await.unwrap().is_none(), "{user}");
    }
    store.close().await;
    // And it all survives a reopen.
    let store = SqliteStore::open(&db).await.unwrap();
    assert!(store.get_user("after").await.unwrap().is_some());
    store.close().await;
}
