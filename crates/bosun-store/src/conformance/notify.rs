//! Conformance cases for notifications: targets, the outbox of events, deliveries and their
//! retention.

use super::*;

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
