//! The conformance case for drift detection: schedules fired once, checks settled once.

use super::*;

pub async fn drift_schedules_fire_once_settle_once(store: Arc<dyn Store>) {
    use bosun_core::drift::DriftResult;
    seed_stack(&*store, "plain").await;
    let mut input = spec("net", &[]).to_input();
    input.drift_detection = Some(DriftInput {
        schedule: "0 * * * *".into(),
        reconcile: true,
        timezone: Some("Europe/Berlin".into()),
    });
    store
        .create_stack(
            "acme",
            &StackSpec::from_input(input).unwrap(),
            &audit(Some("acme"), "stack.create", "net"),
        )
        .await
        .unwrap();
    // Only stacks with drift detection, not yet armed.
    let all = store.drift_schedules(None, None).await.unwrap();
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(
        (all[0].stack.as_str(), all[0].drift.timezone.as_str()),
        ("net", "Europe/Berlin")
    );
    assert!(all[0].state.is_none() && all[0].last_success.is_none());
    assert!(store
        .drift_schedules(Some("other"), None)
        .await
        .unwrap()
        .is_empty());

    let t0 = Utc::now();
    let fire = |expected, run: Option<NewRun>| DriftFire {
        org: "acme".into(),
        stack: "net".into(),
        schedule: "0 * * * *".into(),
        timezone: "Europe/Berlin".into(),
        expected_next: expected,
        next_at: t0 + Duration::hours(1),
        since: Some(t0),
        run,
        note: None,
        now: t0,
    };
    assert_eq!(
        store.fire_drift_schedule(&fire(None, None)).await.unwrap(),
        DriftFired::Armed
    );
    // A pass that read an older next_at loses: nothing is written twice.
    assert_eq!(
        store.fire_drift_schedule(&fire(None, None)).await.unwrap(),
        DriftFired::Raced
    );
    let armed = store
        .drift_schedules(Some("acme"), Some("net"))
        .await
        .unwrap();
    let state = armed[0].state.clone().unwrap();
    assert_eq!(
        state.next_at.timestamp_millis(),
        (t0 + Duration::hours(1)).timestamp_millis()
    );

    let mut scheduled = new_run("run-d1", "net", RunKind::Drift);
    scheduled.trigger = Trigger::Schedule;
    let mut f = fire(Some(state.next_at), Some(scheduled.clone()));
    f.note = Some("2 missed".into());
    f.next_at = t0 + Duration::hours(2);
    let DriftFired::Started(run) = store.fire_drift_schedule(&f).await.unwrap() else {
        panic!("the drift run starts");
    };
    assert_eq!((run.kind, run.trigger), (RunKind::Drift, Trigger::Schedule));
    let s = store.drift_schedules(None, None).await.unwrap().remove(0);
    assert_eq!(s.open_run.as_deref(), Some("run-d1"));
    assert_eq!(
        s.state.as_ref().unwrap().last_fire_note.as_deref(),
        Some("2 missed")
    );
    assert_eq!(
        s.state.as_ref().unwrap().last_fire_run.as_deref(),
        Some("run-d1")
    );

    // While it is open: the next fire records the skip; a manual check is refused.
    let mut again = new_run("run-d2", "net", RunKind::Drift);
    again.trigger = Trigger::Schedule;
    let mut f2 = fire(Some(t0 + Duration::hours(2)), Some(again));
    f2.next_at = t0 + Duration::hours(3);
    assert_eq!(
        store.fire_drift_schedule(&f2).await.unwrap(),
        DriftFired::Skipped {
            open_run: "run-d1".into()
        }
    );
    let note = store.drift_schedules(None, None).await.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .last_fire_note;
    assert_eq!(
        note.as_deref(),
        Some("skipped: drift run run-d1 is still open")
    );
    let manual = new_run("run-d3", "net", RunKind::Drift);
    let refused = store
        .start_drift_check(&manual, &audit(Some("acme"), "run.create", "run:run-d3"))
        .await;
    assert!(
        matches!(refused, Err(StoreError::HasOpenRuns { .. })),
        "{refused:?}"
    );
    assert!(store.get_run("run-d2").await.unwrap().is_none());

    // Nothing to settle until it ends; then exactly once, with its reconcile run.
    assert!(store.unsettled_drift_runs(10).await.unwrap().is_empty());
    let r = runner(&*store, "r1").await;
    run_phase(&*store, &r, "run-d1", Event::PlanFinished { changes: true }).await;
    let unsettled = store.unsettled_drift_runs(10).await.unwrap();
    assert_eq!(unsettled.len(), 1);
    let mut reconcile = new_run("run-t1", "net", RunKind::Tracked);
    reconcile.trigger = Trigger::Schedule;
    reconcile.triggered_by = "run:run-d1".into();
    let check = store
        .settle_drift_run("run-d1", DriftResult::DriftDetected, Some(&reconcile))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(check.reconcile_run.as_deref(), Some("run-t1"));
    assert!(store
        .settle_drift_run("run-d1", DriftResult::DriftDetected, Some(&reconcile))
        .await
        .unwrap()
        .is_none());
    assert!(store.unsettled_drift_runs(10).await.unwrap().is_empty());
    assert_eq!(
        store.drift_check("run-d1").await.unwrap(),
        Some(check.clone())
    );
    assert_eq!(
        store.drift_check("run-t1").await.unwrap(),
        Some(check.clone())
    );
    let s = store.drift_schedules(None, None).await.unwrap().remove(0);
    assert_eq!(s.last_success, Some(check.clone()));
    assert_eq!(s.open_run, None);

    // A failed check is the latest check, not the latest success.
    let manual = store
        .start_drift_check(&manual, &audit(Some("acme"), "run.create", "run:run-d3"))
        .await
        .unwrap();
    store
        .cancel_run(&manual.id, &audit(Some("acme"), "run.cancel", "run:run-d3"))
        .await
        .unwrap();
    store
        .settle_drift_run("run-d3", DriftResult::Failed, None)
        .await
        .unwrap()
        .unwrap();
    let s = store.drift_schedules(None, None).await.unwrap().remove(0);
    assert_eq!(s.last_success.map(|c| c.run).as_deref(), Some("run-d1"));
    assert_eq!(
        s.last_check.map(|c| (c.run, c.result)),
        Some(("run-d3".to_string(), DriftResult::Failed))
    );
    // Scheduled runs are audited as the system's.
    let audits = store.list_audit(Some("acme"), None, 100).await.unwrap();
    assert!(audits
        .iter()
        .any(|a| a.entry.target == "run:run-d1" && a.entry.actor == "system"));
    assert!(audits
        .iter()
        .any(|a| a.entry.target == "run:run-t1" && a.entry.actor == "run:run-d1"));
}
