//! Conformance cases for retention: old state versions pruned, with everything a stack or
//! a run still needs kept.

use super::*;

/// The version numbers a stack has, newest first.
async fn versions(store: &dyn Store, stack: &str) -> Vec<i64> {
    store
        .list_state_versions("acme", stack, None, 100)
        .await
        .unwrap()
        .iter()
        .map(|v| v.version)
        .collect()
}

async fn write(store: &dyn Store, stack: &str, w: NewStateVersion) -> StateVersionMeta {
    store.write_state("acme", stack, &w, None).await.unwrap()
}

fn person(serial: u64) -> NewStateVersion {
    state_write(
        Writer::User("bob".into()),
        WriterLiveness::Person,
        None,
        serial,
        "L",
    )
}

pub async fn state_retention_keeps_the_newest_the_young_the_head_and_what_runs_name(
    store: Arc<dyn Store>,
) {
    for stack in ["net", "app", "web"] {
        seed_stack(&*store, stack).await;
    }
    // net: v1 feeds a run of app; v2–v4 plain; v5 recovered; v6 the head; v7 a late
    // write under bob's lock (not current).
    for serial in 1..=4 {
        write(&*store, "net", person(serial)).await;
    }
    let recovered = NewStateVersion {
        recovery_reason: Some("the server was away".into()),
        ..state_write(
            Writer::Run("r-cut-off".into()),
            WriterLiveness::Recovery,
            None,
            5,
            "L",
        )
    };
    assert!(write(&*store, "net", recovered).await.current);
    assert!(write(&*store, "net", person(6)).await.current);
    store
        .lock_state(
            "acme",
            "net",
            &state_lock("BOB", Writer::User("bob".into())),
        )
        .await
        .unwrap();
    let late = state_write(
        Writer::Run("r-dead".into()),
        WriterLiveness::EndedRun,
        Some("OLD"),
        7,
        "L",
    );
    let late = write(&*store, "net", late).await;
    assert!(late.late_write && !late.current);
    // app: two old versions, and a run executing now that was given net's v1.
    for serial in 1..=2 {
        write(&*store, "app", person(serial)).await;
    }
    store
        .create_run(&new_run("r-app", "app", RunKind::Tracked), None)
        .await
        .unwrap();
    let r = runner(&*store, "runner-1").await;
    let leased = store.lease_run(&r).await.unwrap().expect("r-app leased");
    let consumed = json!([{"stack": "net", "version": 1, "output": "name",
                           "variable": "net_name", "sensitive": false}]);
    assert!(store.set_run_consumed("r-app", &consumed).await.unwrap());
    let cutoff = past(Utc::now()).await;
    past(cutoff).await;
    // web: written after the cut-off, young whatever their number.
    for serial in 1..=3 {
        write(&*store, "web", person(serial)).await;
    }

    // Keep 3: net's v2–v4 go, two per transaction; v1 stays for the run that read it.
    assert_eq!(store.prune_state_versions(3, cutoff, 2).await.unwrap(), 3);
    assert_eq!(versions(&*store, "net").await, [7, 6, 5, 1]);
    // Keep 1: still nothing more of net — the late write is the newest, the head is
    // current, v5 was recovered, v1 is a run's input. app waits for its executing run;
    // web is young.
    assert_eq!(store.prune_state_versions(1, cutoff, 2).await.unwrap(), 0);
    assert_eq!(versions(&*store, "net").await, [7, 6, 5, 1]);
    assert_eq!(versions(&*store, "app").await, [2, 1]);
    assert_eq!(versions(&*store, "web").await, [3, 2, 1]);
    // What is kept reads as before; a pruned version is simply gone.
    let (v1, body) = store
        .state_version("acme", "net", Some(1))
        .await
        .unwrap()
        .expect("v1 kept");
    assert_eq!((v1.serial, body), (1, state_body(1, "L", "v1")));
    assert!(store
        .state_version("acme", "net", Some(2))
        .await
        .unwrap()
        .is_none());
    let head = store.state_head("acme", "net").await.unwrap();
    assert_eq!(head.current.map(|c| c.version), Some(6));
    // Keep 0 means keep 1: the newest version is never deleted.
    assert_eq!(store.prune_state_versions(0, cutoff, 2).await.unwrap(), 0);
    assert_eq!(versions(&*store, "net").await, [7, 6, 5, 1]);

    // The run ends: app's old version goes, its head stays. A new write numbers on.
    store
        .run_event("r-app", &ev(Event::PhaseFailed, leased.fencing))
        .await
        .unwrap();
    assert_eq!(store.prune_state_versions(1, cutoff, 2).await.unwrap(), 1);
    assert_eq!(versions(&*store, "app").await, [2]);
    assert_eq!(write(&*store, "app", person(3)).await.version, 3);
    // Everything older than now but the newest of each stack, once nothing else holds.
    let now = past(Utc::now()).await;
    assert_eq!(store.prune_state_versions(1, now, 1000).await.unwrap(), 3);
    assert_eq!(versions(&*store, "web").await, [3]);
    assert_eq!(versions(&*store, "app").await, [3]);
    assert_eq!(versions(&*store, "net").await, [7, 6, 5, 1]);
}
