//! The conformance case for runners as registered: how their engines reach the network.

use bosun_core::runner::Egress;

use super::*;

fn registration(id: &str, name: &str, egress: Option<Egress>) -> RunnerRecord {
    RunnerRecord {
        id: id.into(),
        org: Some("acme".into()),
        pool: "edge".into(),
        name: name.into(),
        version: "test".into(),
        drained: false,
        last_seen: Utc::now(),
        created_at: Utc::now(),
        egress,
    }
}

/// Each registration keeps the egress mode its runner said (or none), and every read
/// returns it: get, the org's list, a drained runner, the metrics' runners. A runner
/// registering again (a new id, as a restarted runner gets) under another mode is listed
/// with the new one; the earlier registration keeps its own.
pub async fn runners_egress_kept_with_each_registration(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let modes = [
        ("rnr-restricted", Some(Egress::Restricted)),
        ("rnr-open", Some(Egress::Unrestricted)),
        ("rnr-opted-out", Some(Egress::OptedOut)),
        ("rnr-unknown", None),
    ];
    for (id, egress) in modes {
        let registered = store
            .register_runner(&registration(id, id, egress))
            .await
            .unwrap();
        assert_eq!(registered.egress, egress, "{id}");
        assert_eq!(
            store.get_runner(id).await.unwrap().unwrap().egress,
            egress,
            "{id}"
        );
    }
    // Paged in registration order: pages of two read back the whole list, in order.
    let whole = store.list_runners("acme", None, 100).await.unwrap();
    assert!(whole.len() >= 3, "{whole:?}");
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let page = store.list_runners("acme", after.as_ref(), 2).await.unwrap();
        assert!(page.len() <= 2);
        let Some(last) = page.last() else { break };
        after = Some(last.cursor());
        paged.extend(page);
    }
    assert_eq!(paged, whole);
    let order: Vec<_> = whole.iter().map(|r| (r.created_at, r.id.clone())).collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted, "registration order, then id");
    assert!(
        store
            .list_runners("globex", None, 100)
            .await
            .unwrap()
            .iter()
            .all(|r| r.org.is_none()),
        "another org sees only the hosted runners"
    );
    let listed: BTreeMap<String, Option<Egress>> = store
        .list_runners("acme", None, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.id, r.egress))
        .collect();
    assert_eq!(
        listed,
        modes
            .iter()
            .map(|(id, e)| (id.to_string(), *e))
            .collect::<BTreeMap<_, _>>()
    );

    // The same runner again, now opted out of the sandbox.
    let again = store
        .register_runner(&registration(
            "rnr-restricted-2",
            "rnr-restricted",
            Some(Egress::OptedOut),
        ))
        .await
        .unwrap();
    assert_eq!(again.egress, Some(Egress::OptedOut));
    let by_name: Vec<(String, Option<Egress>)> = store
        .list_runners("acme", None, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.name == "rnr-restricted")
        .map(|r| (r.id, r.egress))
        .collect();
    assert_eq!(
        by_name,
        [
            ("rnr-restricted".to_string(), Some(Egress::Restricted)),
            ("rnr-restricted-2".to_string(), Some(Egress::OptedOut)),
        ]
    );

    // Draining and being seen change nothing about it.
    assert!(store
        .drain_runner(
            "rnr-opted-out",
            &audit(Some("acme"), "runner.drain", "runner:rnr-opted-out")
        )
        .await
        .unwrap());
    store.touch_runner("rnr-open").await.unwrap();
    let drained = store.get_runner("rnr-opted-out").await.unwrap().unwrap();
    assert_eq!(
        (drained.drained, drained.egress),
        (true, Some(Egress::OptedOut))
    );
    assert_eq!(
        store.get_runner("rnr-open").await.unwrap().unwrap().egress,
        Some(Egress::Unrestricted)
    );
    let m = store.metrics().await.unwrap();
    let opted_out: Vec<&str> = m
        .runners
        .iter()
        .filter(|r| r.egress == Some(Egress::OptedOut))
        .map(|r| r.id.as_str())
        .collect();
    assert_eq!(opted_out, ["rnr-opted-out", "rnr-restricted-2"]);
}
