//! Conformance cases for stack runs: leases and fencing, one tracked run per stack at a time,
//! stale runs, and logs.

use super::*;

pub async fn runs_lease_fence_and_finish(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let r = runner(&*store, "runner-1").await;
    let run = store
        .create_run(&new_run("run-1", "net", RunKind::Tracked), None)
        .await
        .unwrap();
    assert_eq!((run.state, run.needs_lease), (RunState::Queued, true));
    let leased = store.lease_run(&r).await.unwrap().unwrap();
    assert_eq!(
        (leased.state, leased.fencing, leased.leased),
        (RunState::Preparing, 1, true)
    );
    assert!(
        store.lease_run(&r).await.unwrap().is_none(),
        "one lease per run"
    );
    // A stale fencing number is refused everywhere.
    assert!(matches!(
        store.heartbeat("run-1", 0).await,
        Err(StoreError::Fenced { .. })
    ));
    assert!(matches!(
        store.run_event("run-1", &ev(Event::PhaseStarted, 7)).await,
        Err(StoreError::Fenced { .. })
    ));
    assert!(!store.heartbeat("run-1", 1).await.unwrap());
    let mut started = ev(Event::PhaseStarted, 1);
    started.update.commit = Some("abc123".into());
    let out = store.run_event("run-1", &started).await.unwrap();
    assert_eq!(
        (out.run.state, out.run.commit.as_deref()),
        (RunState::Planning, Some("abc123"))
    );
    let mut planned = ev(Event::planned(true), 1);
    planned.update.plan_summary = Some(json!({"has_changes": true}));
    let out = store.run_event("run-1", &planned).await.unwrap();
    assert_eq!(
        (out.run.state, out.run.leased),
        (RunState::Unconfirmed, false)
    );
    assert!(
        matches!(
            store.heartbeat("run-1", 1).await,
            Err(StoreError::Fenced { .. })
        ),
        "the plan lease ended"
    );
    let confirm = RunEventInput {
        event: Event::Confirm,
        fencing: None,
        update: RunUpdate::default(),
        audit: None,
    };
    let out = store.run_event("run-1", &confirm).await.unwrap();
    assert_eq!(
        (out.run.state, out.run.phase, out.run.needs_lease),
        (RunState::Applying, Phase::Apply, true)
    );
    let leased = store.lease_run(&r).await.unwrap().unwrap();
    assert_eq!((leased.state, leased.fencing), (RunState::Applying, 2));
    store
        .run_event("run-1", &ev(Event::PhaseStarted, 2))
        .await
        .unwrap();
    let out = store
        .run_event("run-1", &ev(Event::ApplyFinished, 2))
        .await
        .unwrap();
    assert_eq!(out.run.state, RunState::Finished);
    // An invalid event is refused, and the plan summary and phases were kept.
    assert!(matches!(
        store.run_event("run-1", &confirm).await,
        Err(StoreError::InvalidTransition(_))
    ));
    let run = store.get_run("run-1").await.unwrap().unwrap();
    assert_eq!(run.plan_summary, Some(json!({"has_changes": true})));
    let phases: Vec<RunState> = store
        .run_phases("run-1")
        .await
        .unwrap()
        .iter()
        .map(|p| p.state)
        .collect();
    assert_eq!(
        phases,
        [
            RunState::Queued,
            RunState::Preparing,
            RunState::Planning,
            RunState::Unconfirmed,
            RunState::Applying
        ]
    );
    assert!(store
        .run_phases("run-1")
        .await
        .unwrap()
        .iter()
        .all(|p| p.ended_at.is_some()));
    // A page's phases in one read: the same phases per run; runs without any (unknown
    // here) absent; more ids than one statement takes are read in several.
    let mut ids: Vec<String> = (0..150).map(|i| format!("run-none-{i}")).collect();
    ids.push("run-1".into());
    let of = store.run_phases_of(&ids).await.unwrap();
    assert_eq!(of.keys().collect::<Vec<_>>(), ["run-1"]);
    assert_eq!(of["run-1"], store.run_phases("run-1").await.unwrap());
    assert!(store.run_phases_of(&[]).await.unwrap().is_empty());
    let listed = store
        .list_runs("acme", Some("net"), None, 10)
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    // After the last run, nothing; after a run that is not the org's, nothing either
    // (the list never restarts from the newest).
    assert!(store
        .list_runs("acme", Some("net"), Some(&listed[0].id), 10)
        .await
        .unwrap()
        .is_empty());
    assert!(store
        .list_runs("acme", Some("net"), Some("run-nope"), 10)
        .await
        .unwrap()
        .is_empty());
    assert!(store
        .list_runs("globex", None, Some(&listed[0].id), 10)
        .await
        .unwrap()
        .is_empty());
}

pub async fn runs_serialize_tracked_and_wait_for_locks(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let r = runner(&*store, "runner-1").await;
    store
        .create_run(&new_run("t1", "net", RunKind::Tracked), None)
        .await
        .unwrap();
    store
        .create_run(&new_run("t2", "net", RunKind::Tracked), None)
        .await
        .unwrap();
    store
        .create_run(&new_run("p1", "net", RunKind::Proposed), None)
        .await
        .unwrap();
    // Someone (a laptop) holds the lock: tracked runs wait and name the holder; the
    // proposed run goes ahead.
    store
        .lock_state(
            "acme",
            "net",
            &state_lock("LAPTOP", Writer::User("alice".into())),
        )
        .await
        .unwrap();
    let got = store.lease_run(&r).await.unwrap().unwrap();
    assert_eq!(got.id, "p1");
    assert!(store.lease_run(&r).await.unwrap().is_none());
    let t1 = store.get_run("t1").await.unwrap().unwrap();
    assert_eq!(
        t1.blocked_by.as_ref().map(|b| b["Who"].clone()),
        Some(json!("alice@laptop"))
    );
    assert!(t1.blocked_since.is_some() && t1.lock_waits.is_none());
    // Looking again does not start the wait over.
    assert!(store.lease_run(&r).await.unwrap().is_none());
    assert_eq!(
        store.get_run("t1").await.unwrap().unwrap().blocked_since,
        t1.blocked_since
    );
    store
        .unlock_state(
            "acme",
            "net",
            &UnlockRequest::Holder {
                id: "LAPTOP".into(),
            },
            &audit(Some("acme"), "x", "y"),
        )
        .await
        .unwrap();
    // One tracked run at a time, oldest first.
    assert_eq!(store.lease_run(&r).await.unwrap().unwrap().id, "t1");
    // The wait is kept on the run and told in its log, once the lock is gone.
    let t1 = store.get_run("t1").await.unwrap().unwrap();
    assert!(t1.blocked_since.is_none());
    let waits = t1.lock_waits.expect("the lock wait is on record");
    assert_eq!(waits.as_array().map(Vec::len), Some(1), "{waits}");
    assert_eq!(waits[0]["holder"]["Who"], json!("alice@laptop"));
    assert!(
        waits[0]["from"].as_i64() <= waits[0]["until"].as_i64(),
        "{waits}"
    );
    let log = store.read_logs("t1", None, 10).await.unwrap();
    assert_eq!(log.len(), 1, "{log:?}");
    assert!(
        log[0].text.starts_with("bosun: waited ") && log[0].text.contains("held by alice@laptop"),
        "{:?}",
        log[0].text
    );
    assert_eq!(store.next_log_seq("t1").await.unwrap(), 1);
    assert!(
        store.lease_run(&r).await.unwrap().is_none(),
        "t2 waits for t1"
    );
    assert!(store
        .get_run("t1")
        .await
        .unwrap()
        .unwrap()
        .blocked_by
        .is_none());
    store
        .run_event("t1", &ev(Event::PhaseFailed, 1))
        .await
        .unwrap();
    assert_eq!(store.lease_run(&r).await.unwrap().unwrap().id, "t2");
}

pub async fn runs_stale_and_requeue(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let r = runner(&*store, "runner-1").await;
    store
        .create_run(&new_run("a", "net", RunKind::Proposed), None)
        .await
        .unwrap();
    store
        .create_run(&new_run("b", "net", RunKind::Tracked), None)
        .await
        .unwrap();
    let a = store.lease_run(&r).await.unwrap().unwrap();
    let b = store.lease_run(&r).await.unwrap().unwrap();
    store
        .run_event(&b.id, &ev(Event::PhaseStarted, b.fencing))
        .await
        .unwrap();
    // b holds the state lock when its runner dies.
    store
        .lock_state("acme", "net", &state_lock("RUN-B", Writer::Run("b".into())))
        .await
        .unwrap();
    let stale = store
        .stale_runs(Utc::now() + Duration::seconds(1))
        .await
        .unwrap();
    assert_eq!(stale.len(), 2);
    assert!(store
        .stale_runs(Utc::now() - Duration::seconds(60))
        .await
        .unwrap()
        .is_empty());
    // Never started: back to the queue, leasable again with a new fencing number.
    let out = store
        .run_event(
            &a.id,
            &RunEventInput {
                event: Event::Requeue,
                fencing: None,
                update: RunUpdate::default(),
                audit: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (out.run.state, out.run.needs_lease),
        (RunState::Queued, true)
    );
    let again = store.lease_run(&r).await.unwrap().unwrap();
    assert_eq!((again.id.as_str(), again.fencing), ("a", a.fencing + 1));
    // Started: force-failed with the reason, its lock released and recorded.
    let out = store
        .run_event(
            &b.id,
            &RunEventInput {
                event: Event::Stale,
                fencing: None,
                update: RunUpdate::default(),
                audit: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(out.run.state, RunState::ForceFailed);
    assert!(out
        .run
        .reason
        .as_deref()
        .unwrap()
        .starts_with("runner timed out or never reported"));
    assert!(out.run.reason.as_deref().unwrap().contains("RUN-B"));
    assert_eq!(out.released_lock.map(|l| l.id), Some("RUN-B".into()));
    assert!(store
        .state_head("acme", "net")
        .await
        .unwrap()
        .lock
        .is_none());
    let log = store.list_audit(Some("acme"), None, 5).await.unwrap();
    assert_eq!(log[0].entry.action, "state.lock_released");
    // The dead runner cannot move it any more.
    assert!(store.heartbeat(&b.id, b.fencing).await.is_err());
    store.flag_late_write(&b.id).await.unwrap();
    // A stack with an open run cannot be deleted under it.
    let open = store
        .delete_stack(
            "acme",
            "net",
            true,
            &audit(Some("acme"), "stack.delete", "net"),
        )
        .await;
    assert!(
        matches!(open, Err(StoreError::HasOpenRuns { ref runs, .. }) if runs == &["a".to_string()]),
        "{open:?}"
    );
    let m = store.metrics().await.unwrap();
    assert_eq!(m.runs.get(&kind_state("tracked", "force_failed")), Some(&1));
    assert_eq!(m.runs.get(&kind_state("proposed", "preparing")), Some(&1));
    assert!(store.get_run(&b.id).await.unwrap().unwrap().late_write);
}

pub async fn run_logs_are_idempotent(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let r = runner(&*store, "runner-1").await;
    store
        .create_run(&new_run("l", "net", RunKind::Proposed), None)
        .await
        .unwrap();
    let run = store.lease_run(&r).await.unwrap().unwrap();
    assert_eq!(store.next_log_seq("l").await.unwrap(), 0);
    store
        .append_logs("l", run.fencing, &[(0, "a".into()), (1, "b".into())])
        .await
        .unwrap();
    // A resend after a lost reply: no duplicates, first copy kept.
    store
        .append_logs("l", run.fencing, &[(1, "B!".into()), (2, "c".into())])
        .await
        .unwrap();
    let logs = store.read_logs("l", None, 10).await.unwrap();
    let texts: Vec<(i64, &str)> = logs.iter().map(|c| (c.seq, c.text.as_str())).collect();
    assert_eq!(texts, [(0, "a"), (1, "b"), (2, "c")]);
    // Each chunk says when it arrived and which phase wrote it.
    for c in &logs {
        let at = c.at.expect("a chunk's arrival time");
        assert!((Utc::now() - at).num_seconds().abs() < 60, "{at}");
        assert_eq!(c.phase, Some(bosun_core::run::Phase::Plan));
    }
    assert_eq!(store.read_logs("l", Some(1), 10).await.unwrap().len(), 1);
    assert_eq!(store.next_log_seq("l").await.unwrap(), 3);
    assert!(matches!(
        store
            .append_logs("l", run.fencing + 1, &[(3, "x".into())])
            .await,
        Err(StoreError::Fenced { .. })
    ));
    store.put_run_plan("l", run.fencing, b"PLAN").await.unwrap();
    assert_eq!(
        store.get_run_plan("l").await.unwrap().as_deref(),
        Some(&b"PLAN"[..])
    );
}

/// A waiting run is leased by a runner of the pool its stack names now: moving the stack
/// to another pool moves its runs not yet over, and a runner never takes another pool's.
pub async fn runs_leased_by_their_stacks_current_pool(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let hosted = runner(&*store, "runner-hosted").await;
    let edge = store
        .register_runner(&RunnerRecord {
            id: "runner-edge".into(),
            org: Some("acme".into()),
            pool: "edge".into(),
            name: "runner-edge".into(),
            version: "test".into(),
            drained: false,
            last_seen: Utc::now(),
            created_at: Utc::now(),
            egress: None,
        })
        .await
        .unwrap();
    store
        .create_run(&new_run("run-1", "net", RunKind::Proposed), None)
        .await
        .unwrap();
    assert!(
        store.lease_run(&edge).await.unwrap().is_none(),
        "a hosted stack's run"
    );

    // Moved to pool `edge` while it waits: only the edge runner takes it.
    let mut moved = spec("net", &[]);
    moved.runner_pool = bosun_core::stack::RunnerPool::parse("edge").unwrap();
    store
        .update_stack("acme", &moved, &audit(Some("acme"), "stack.update", "net"))
        .await
        .unwrap();
    assert!(
        store.lease_run(&hosted).await.unwrap().is_none(),
        "moved away"
    );
    let leased = store.lease_run(&edge).await.unwrap().unwrap();
    assert_eq!(leased.id, "run-1");

    // A run created after the move waits for the edge pool from the start.
    store
        .create_run(&new_run("run-2", "net", RunKind::Proposed), None)
        .await
        .unwrap();
    assert!(store.lease_run(&hosted).await.unwrap().is_none());
    assert_eq!(store.lease_run(&edge).await.unwrap().unwrap().id, "run-2");
}

/// More runs waiting than a lease reads at once, none of which can go: the dispatchable
/// run created after them is still found (no run starves behind a busy stack's queue).
pub async fn runs_lease_looks_past_a_full_page_of_waiting_runs(store: Arc<dyn Store>) {
    seed_stack(&*store, "busy").await;
    seed_stack(&*store, "quiet").await;
    let r = runner(&*store, "runner-1").await;
    store
        .create_run(&new_run("busy-0", "busy", RunKind::Tracked), None)
        .await
        .unwrap();
    assert_eq!(store.lease_run(&r).await.unwrap().unwrap().id, "busy-0");
    // 250 pushes queue behind the executing run of their stack: two and a half pages.
    for i in 1..=250 {
        store
            .create_run(
                &new_run(&format!("busy-{i:03}"), "busy", RunKind::Tracked),
                None,
            )
            .await
            .unwrap();
    }
    store
        .create_run(&new_run("quiet-1", "quiet", RunKind::Tracked), None)
        .await
        .unwrap();
    let got = store
        .lease_run(&r)
        .await
        .unwrap()
        .expect("the quiet stack's run");
    assert_eq!(got.id, "quiet-1");
    // Nothing else can go: every busy run waits behind busy-0.
    assert!(store.lease_run(&r).await.unwrap().is_none());
}

/// A run read with what is shown beside it, in one call: the same phases, audit records
/// and runner as the separate reads; none for another org's run or a missing one.
pub async fn runs_read_in_context(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    seed_org(&*store, "globex").await;
    let r = runner(&*store, "runner-ctx").await;
    let created = audit(Some("acme"), "run.create", "run:run-c1");
    store
        .create_run(&new_run("run-c1", "net", RunKind::Tracked), Some(&created))
        .await
        .unwrap();
    let bare = store
        .get_run_in_context("acme", "run-c1", 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(bare.0, store.get_run("run-c1").await.unwrap().unwrap());
    assert_eq!(bare.1.runner_name, None, "not leased yet");
    store.lease_run(&r).await.unwrap().unwrap();
    store
        .run_event("run-c1", &ev(Event::PhaseStarted, 1))
        .await
        .unwrap();
    store
        .run_event("run-c1", &ev(Event::planned(true), 1))
        .await
        .unwrap();
    let discard = RunEventInput {
        event: Event::Discard,
        fencing: None,
        update: RunUpdate::default(),
        audit: Some(audit(Some("acme"), "run.discard", "run:run-c1")),
    };
    store.run_event("run-c1", &discard).await.unwrap();
    // Another run's audit record is not this run's.
    store
        .create_run(
            &new_run("run-c2", "net", RunKind::Proposed),
            Some(&audit(Some("acme"), "run.create", "run:run-c2")),
        )
        .await
        .unwrap();

    let (run, context) = store
        .get_run_in_context("acme", "run-c1", 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run, store.get_run("run-c1").await.unwrap().unwrap());
    assert_eq!(run.state, RunState::Discarded);
    assert_eq!(context.phases, store.run_phases("run-c1").await.unwrap());
    assert!(context.phases.len() >= 3, "{:?}", context.phases);
    let about = AuditFilter {
        target: Some("run:run-c1".into()),
        ..Default::default()
    };
    let searched = store
        .search_audit(Some("acme"), &about, None, 10)
        .await
        .unwrap();
    assert_eq!(context.audit, searched);
    let actions: Vec<&str> = context
        .audit
        .iter()
        .map(|a| a.entry.action.as_str())
        .collect();
    assert_eq!(actions, ["run.discard", "run.create"], "newest first");
    assert_eq!(context.runner_name.as_deref(), Some("runner-ctx"));
    assert_eq!(context.drift_check, None, "a manual tracked run has none");
    // The audit records stop at the limit, the newest kept.
    let (_, limited) = store
        .get_run_in_context("acme", "run-c1", 1)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(limited.audit, searched[..1]);
    // Another org's run, or none at all, is not found.
    assert!(store
        .get_run_in_context("globex", "run-c1", 10)
        .await
        .unwrap()
        .is_none());
    assert!(store
        .get_run_in_context("acme", "run-nope", 10)
        .await
        .unwrap()
        .is_none());
}
