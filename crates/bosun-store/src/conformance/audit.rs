//! Conformance cases for the audit log: written with each change, and searched by actor,
//! action and target.

use super::*;

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
