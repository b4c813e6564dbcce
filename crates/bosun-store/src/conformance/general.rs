//! Conformance cases for what holds across calls: the schema version, all-or-nothing writes,
//! concurrent writers, and signals reaching other instances.

use super::*;

pub async fn schema_version_is_current(store: Arc<dyn Store>) {
    assert!(store.schema_version().await.unwrap() >= 1);
    store.ping().await.unwrap();
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
