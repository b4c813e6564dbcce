//! The conformance case for the figures `/metrics` reads from the store.

use super::*;

pub async fn metrics_count_and_time_from_the_store(store: Arc<dyn Store>) {
    let empty = store.metrics().await.unwrap();
    assert!(empty.runs.is_empty() && empty.runners.is_empty() && empty.locks.is_empty());
    assert!(empty.locks_held.is_empty());
    assert!(empty.queue_waits_ms.is_empty() && empty.phase_durations_ms.is_empty());
    assert!(empty.busy_runners.is_empty());
    assert_eq!(
        (empty.late_writes, empty.trigger_decisions),
        (0, DecisionCounts::default())
    );
    assert!(empty.window >= std::time::Duration::from_secs(3600));

    seed_stack(&*store, "net").await;
    seed_stack(&*store, "app").await;
    let busy = runner(&*store, "runner-1").await;
    runner(&*store, "runner-2").await;
    runner(&*store, "runner-3").await;
    assert!(store
        .drain_runner("runner-3", &audit(None, "runner.drain", "runner:runner-3"))
        .await
        .unwrap());

    // t1: leased, requeued (its runner never started it), leased again, planned with
    // changes: unconfirmed. Its queue wait is to the first lease.
    store
        .create_run(&new_run("t1", "net", RunKind::Tracked), None)
        .await
        .unwrap();
    let first = store.lease_run(&busy).await.unwrap().unwrap();
    assert_eq!(first.id, "t1");
    let requeue = RunEventInput {
        event: Event::Requeue,
        fencing: None,
        update: RunUpdate::default(),
        audit: None,
    };
    store.run_event("t1", &requeue).await.unwrap();
    let again = store.lease_run(&busy).await.unwrap().unwrap();
    assert_eq!(again.id, "t1");
    store
        .run_event("t1", &ev(Event::PhaseStarted, again.fencing))
        .await
        .unwrap();
    let out = store
        .run_event("t1", &ev(Event::planned(true), again.fencing))
        .await
        .unwrap();
    assert_eq!(out.run.state, RunState::Unconfirmed);
    // p1: leased and preparing, so runner-1 is busy; d1 waits; c1 is canceled queued.
    store
        .create_run(&new_run("p1", "app", RunKind::Proposed), None)
        .await
        .unwrap();
    assert_eq!(store.lease_run(&busy).await.unwrap().unwrap().id, "p1");
    store
        .create_run(&new_run("d1", "app", RunKind::Drift), None)
        .await
        .unwrap();
    store
        .create_run(&new_run("c1", "app", RunKind::Proposed), None)
        .await
        .unwrap();
    let cancel = RunEventInput {
        event: Event::Cancel,
        ..requeue.clone()
    };
    let out = store.run_event("c1", &cancel).await.unwrap();
    assert_eq!(out.run.state, RunState::Canceled);

    // A held lock, and one late write among two versions.
    store
        .lock_state(
            "acme",
            "net",
            &state_lock("L1", Writer::User("alice".into())),
        )
        .await
        .unwrap();
    store
        .write_state(
            "acme",
            "app",
            &state_write(
                Writer::User("bob".into()),
                WriterLiveness::Person,
                None,
                1,
                "L",
            ),
            None,
        )
        .await
        .unwrap();
    store
        .write_state(
            "acme",
            "app",
            &state_write(
                Writer::Run("r-dead".into()),
                WriterLiveness::EndedRun,
                None,
                2,
                "L",
            ),
            None,
        )
        .await
        .unwrap();

    let m = store.metrics().await.unwrap();
    let want: BTreeMap<(String, String), i64> = [
        (kind_state("tracked", "unconfirmed"), 1),
        (kind_state("proposed", "preparing"), 1),
        (kind_state("drift", "queued"), 1),
        (kind_state("proposed", "canceled"), 1),
    ]
    .into_iter()
    .collect();
    assert_eq!(m.runs, want);
    assert_eq!(m.late_writes, 1);
    // Two runs were ever leased; waits are from creation, never negative.
    assert_eq!(m.queue_waits_ms.len(), 2, "{:?}", m.queue_waits_ms);
    assert!(m.queue_waits_ms.iter().all(|w| (0..60_000).contains(w)));
    // Only ended stints count: t1 was queued twice, prepared twice and planned once; p1
    // and c1 left the queue; open stints (t1 unconfirmed, p1 preparing, d1 queued) wait.
    let counts: BTreeMap<&str, usize> = m
        .phase_durations_ms
        .iter()
        .map(|(s, v)| (s.as_str(), v.len()))
        .collect();
    assert_eq!(
        counts,
        [("planning", 1), ("preparing", 2), ("queued", 4)]
            .into_iter()
            .collect()
    );
    assert!(m
        .phase_durations_ms
        .values()
        .flatten()
        .all(|d| (0..60_000).contains(d)));
    assert_eq!(
        m.runners.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["runner-1", "runner-2", "runner-3"]
    );
    assert_eq!(
        m.runners.iter().map(|r| r.drained).collect::<Vec<_>>(),
        [false, false, true]
    );
    assert_eq!(
        m.busy_runners
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        ["runner-1"]
    );
    let held = store.state_head("acme", "net").await.unwrap().lock.unwrap();
    assert_eq!(
        m.locks,
        [HeldLock {
            org: "acme".into(),
            stack: "net".into(),
            acquired_at: held.acquired_at,
        }]
    );
    assert_eq!(
        m.locks_held,
        [("acme".to_string(), 1)].into_iter().collect()
    );
    assert!(m.stack_series >= 100, "{}", m.stack_series);
    // Oldest first, not by name: a lock taken later on a stack named before it comes
    // second (taken once the clock has moved past the first one's millisecond).
    seed_stack(&*store, "aaa").await;
    while Utc::now().timestamp_millis() <= held.acquired_at.timestamp_millis() {
        tokio::task::yield_now().await;
    }
    store
        .lock_state(
            "acme",
            "aaa",
            &state_lock("L2", Writer::User("alice".into())),
        )
        .await
        .unwrap();
    let later = store.metrics().await.unwrap();
    assert_eq!(
        later
            .locks
            .iter()
            .map(|l| l.stack.as_str())
            .collect::<Vec<_>>(),
        ["net", "aaa"]
    );
    assert_eq!(
        later.locks_held,
        [("acme".to_string(), 2)].into_iter().collect()
    );
    store
        .unlock_state(
            "acme",
            "aaa",
            &UnlockRequest::Holder { id: "L2".into() },
            &audit(Some("acme"), "state.unlock", "stack:aaa"),
        )
        .await
        .unwrap();

    // Trigger decisions: a run started for net, app left alone, then a redelivery
    // repeats both as duplicates.
    let mut push = delivery("guid-m", "push");
    push.runs = vec![pr_run("r-push", "net", RunKind::Tracked, None)];
    push.decisions = vec![
        decision("net", Some("r-push"), "main.tf changed"),
        decision("app", None, "no watched path changed"),
    ];
    recorded(store.record_delivery(&push).await.unwrap());
    assert!(matches!(
        store.record_delivery(&push).await.unwrap(),
        DeliveryOutcome::Duplicate { .. }
    ));
    let m = store.metrics().await.unwrap();
    assert_eq!(
        m.trigger_decisions,
        DecisionCounts {
            triggered: 1,
            ignored: 1,
            duplicate: 2,
        }
    );
    assert_eq!(m.runs.get(&kind_state("tracked", "queued")), Some(&1));

    // Folding the count deltas changes no figure; changes after a fold count on top.
    assert!(store.fold_metric_counts().await.unwrap() > 0);
    let folded = store.metrics().await.unwrap();
    assert_eq!(
        (&folded.runs, &folded.trigger_decisions, &folded.locks_held),
        (&m.runs, &m.trigger_decisions, &m.locks_held)
    );
    assert_eq!(
        m.locks_held,
        [("acme".to_string(), 1)].into_iter().collect()
    );
    let before = store.fold_metric_counts().await.unwrap();
    assert!(
        before <= m.runs.len() + 3 + m.locks_held.len(),
        "one row per metric after a fold, {before} rows"
    );
    store
        .cancel_run("r-push", &audit(Some("acme"), "run.cancel", "run:r-push"))
        .await
        .unwrap();
    let after = store.metrics().await.unwrap();
    assert_eq!(after.runs.get(&kind_state("tracked", "queued")), None);
    assert_eq!(
        after.runs.get(&kind_state("tracked", "canceled")),
        Some(&(m.runs.get(&kind_state("tracked", "canceled")).unwrap_or(&0) + 1))
    );
}
