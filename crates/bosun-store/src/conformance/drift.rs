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
    run_phase(&*store, &r, "run-d1", Event::planned(true)).await;
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
    // A run read in context carries the same check: the drift run's and its reconcile's.
    for run in ["run-d1", "run-t1"] {
        let (_, context) = store
            .get_run_in_context("acme", run, 10)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(context.drift_check, Some(check.clone()), "{run}");
    }
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
    // What a check age is measured from: the armed schedule and the latest success, not
    // the failed check after it. Stale once twice the hourly interval has passed since
    // that success, and not a millisecond before.
    let success = s.last_success.as_ref().unwrap().checked_at;
    let turns_stale = success + Duration::hours(2);
    assert_eq!(
        store.stale_drift_checks(turns_stale, 10).await.unwrap(),
        StaleDriftChecks::default()
    );
    let stale = store
        .stale_drift_checks(turns_stale + Duration::milliseconds(1), 10)
        .await
        .unwrap();
    assert_eq!(
        stale.oldest,
        [DriftCheckBase {
            org: s.org.clone(),
            stack: s.stack.clone(),
            since: s.state.as_ref().unwrap().since,
            last_success_at: Some(success),
        }]
    );
    assert_eq!(
        stale.by_org,
        [("acme".to_string(), 1)].into_iter().collect()
    );
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

/// The scheduler's and the dashboard's index reads: saved settings queue a stack for
/// arming (once per change), armed schedules are read when due, the dashboard pages in
/// (`stale_at`, stack) order with the org's stale count, and each staleness episode's
/// alert comes due once.
pub async fn drift_schedules_read_by_index(store: Arc<dyn Store>) {
    use bosun_core::drift::DriftResult;
    let hourly = || DriftInput {
        schedule: "0 * * * *".into(),
        reconcile: false,
        timezone: None,
    };
    let daily = || DriftInput {
        schedule: "0 9 * * *".into(),
        reconcile: false,
        timezone: None,
    };
    let save = |id: &'static str, drift: Option<DriftInput>, create: bool| {
        let store = store.clone();
        async move {
            let mut input = spec(id, &[]).to_input();
            input.drift_detection = drift;
            let spec = StackSpec::from_input(input).unwrap();
            let a = audit(Some("acme"), "stack.save", id);
            if create {
                store.create_stack("acme", &spec, &a).await.unwrap();
            } else {
                store.update_stack("acme", &spec, &a).await.unwrap();
            }
        }
    };
    seed_stack(&*store, "plain").await;
    for (id, d) in [("s-a", hourly()), ("s-b", daily()), ("s-c", hourly())] {
        save(id, Some(d), true).await;
    }
    // Saved settings wait for the scheduler; a stack without drift detection does not.
    let tickets = store.drift_arming(100).await.unwrap();
    let queued: Vec<_> = tickets.iter().map(|t| t.stack.as_str()).collect();
    assert_eq!(queued, ["s-a", "s-b", "s-c"]);
    assert_eq!(store.drift_arming(2).await.unwrap().len(), 2, "bounded");

    // Armed at different moments: `a` 3 h before `c`, `b` daily.
    let t0 = chrono::DateTime::parse_from_rfc3339("2024-06-01T10:00:00Z")
        .unwrap()
        .with_timezone(&Utc);
    let arm = |stack: &str, schedule: &str, since: chrono::DateTime<Utc>| DriftFire {
        org: "acme".into(),
        stack: stack.into(),
        schedule: schedule.into(),
        timezone: "UTC".into(),
        expected_next: None,
        next_at: since + Duration::hours(1),
        since: Some(since),
        run: None,
        note: None,
        now: since,
    };
    for f in [
        arm("s-a", "0 * * * *", t0),
        arm("s-b", "0 9 * * *", t0),
        arm("s-c", "0 * * * *", t0 + Duration::hours(3)),
    ] {
        assert_eq!(
            store.fire_drift_schedule(&f).await.unwrap(),
            DriftFired::Armed
        );
    }
    store.drift_armed(&tickets).await.unwrap();
    assert!(store.drift_arming(100).await.unwrap().is_empty());
    // Saving the same settings again queues nothing; new settings queue the stack, and a
    // ticket read before that save does not take the new one off.
    save("s-b", Some(daily()), false).await;
    assert!(store.drift_arming(100).await.unwrap().is_empty());
    save("s-b", Some(hourly()), false).await;
    let requeued = store.drift_arming(100).await.unwrap();
    assert_eq!(requeued.len(), 1);
    store.drift_armed(&tickets).await.unwrap();
    assert_eq!(store.drift_arming(100).await.unwrap(), requeued);
    let half_hourly = DriftInput {
        schedule: "*/30 * * * *".into(),
        reconcile: false,
        timezone: None,
    };
    save("s-b", Some(half_hourly), false).await;
    store.drift_armed(&requeued).await.unwrap();
    assert_eq!(
        store.drift_arming(100).await.unwrap().len(),
        1,
        "a save after the ticket was read stays queued"
    );

    // stale_at = the base plus twice the interval.
    let stale_at = |stack: &str| {
        let store = store.clone();
        let stack = stack.to_string();
        async move {
            store
                .drift_schedules(Some("acme"), Some(&stack))
                .await
                .unwrap()[0]
                .state
                .clone()
                .unwrap()
                .stale_at
                .unwrap()
        }
    };
    let ms = |t: chrono::DateTime<Utc>| t.timestamp_millis();
    assert_eq!(stale_at("s-a").await, ms(t0 + Duration::hours(2)));
    assert_eq!(stale_at("s-b").await, ms(t0 + Duration::hours(48)));
    assert_eq!(stale_at("s-c").await, ms(t0 + Duration::hours(5)));

    // The dashboard: (stale_at, stack) order, page by page; only its org.
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .drift_dashboard("acme", after.as_ref(), 1)
            .await
            .unwrap();
        let Some(rec) = page.first() else { break };
        assert_eq!(page.len(), 1);
        seen.push(rec.stack.clone());
        after = rec.cursor();
    }
    assert_eq!(seen, ["s-a", "s-c", "s-b"]);
    assert!(store
        .drift_dashboard("other", None, 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        store.drift_dashboard("acme", None, 1).await.unwrap()[0].cursor(),
        Some(KeyCursor {
            key: ms(t0 + Duration::hours(2)),
            id: "s-a".into()
        })
    );
    let at = |h: i64| t0 + Duration::hours(h);
    assert_eq!(
        store.count_stale_drift("acme", at(2), 10).await.unwrap(),
        0,
        "exactly twice is not yet stale"
    );
    assert_eq!(store.count_stale_drift("acme", at(4), 10).await.unwrap(), 1);
    assert_eq!(store.count_stale_drift("acme", at(6), 10).await.unwrap(), 2);
    assert_eq!(
        store.count_stale_drift("acme", at(6), 1).await.unwrap(),
        1,
        "the count stops at its cap"
    );
    assert_eq!(
        store.count_stale_drift("other", at(6), 10).await.unwrap(),
        0
    );
    // /metrics' view: every org's stale stacks counted, the most overdue named first and
    // no more than asked for (s-a turned stale at 2 h, s-c at 5 h).
    let named = |s: &StaleDriftChecks| s.oldest.iter().map(|b| b.stack.clone()).collect::<Vec<_>>();
    let stale = store.stale_drift_checks(at(6), 10).await.unwrap();
    assert_eq!(named(&stale), ["s-a", "s-c"]);
    assert_eq!(
        stale.by_org,
        [("acme".to_string(), 2)].into_iter().collect()
    );
    assert_eq!(stale.oldest[1].since, t0 + Duration::hours(3));
    let first = store.stale_drift_checks(at(6), 1).await.unwrap();
    assert_eq!(
        (named(&first), first.by_org),
        (vec!["s-a".to_string()], stale.by_org)
    );
    assert!(store
        .stale_drift_checks(at(2), 10)
        .await
        .unwrap()
        .by_org
        .is_empty());

    // Due schedules: next_at <= now (soonest first; these two are due at once).
    let mut due: Vec<_> = store
        .drift_schedules_due(at(1), 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.stack)
        .collect();
    due.sort();
    assert_eq!(due, ["s-a", "s-b"]);
    assert!(store
        .drift_schedules_due(at(0), 10)
        .await
        .unwrap()
        .is_empty());

    // Alerts: `a`'s episode comes due once; a success starts a new episode.
    let alerts = store.drift_alerts_due(at(4), 10).await.unwrap();
    let names: Vec<_> = alerts.iter().map(|r| r.stack.as_str()).collect();
    assert_eq!(names, ["s-a"]);
    let alert_at = alerts[0].state.as_ref().unwrap().alert_at.unwrap();
    store
        .drift_alert_raised("acme", "s-a", alert_at)
        .await
        .unwrap();
    assert!(store.drift_alerts_due(at(4), 10).await.unwrap().is_empty());
    // Counted whether alerted (s-a) or only past its stale time (s-c at 6 h), and the
    // same once the count deltas are folded.
    let by_org = |t| {
        let store = store.clone();
        async move { store.stale_drift_checks(t, 10).await.unwrap().by_org }
    };
    let acme = |n: i64| [("acme".to_string(), n)].into_iter().collect();
    assert_eq!(by_org(at(4)).await, acme(1));
    assert_eq!(by_org(at(6)).await, acme(2));
    store.fold_metric_counts().await.unwrap();
    assert_eq!(by_org(at(4)).await, acme(1));
    assert_eq!(by_org(at(6)).await, acme(2));
    assert_eq!(store.count_stale_drift("acme", at(6), 10).await.unwrap(), 2);
    assert_eq!(store.count_stale_drift("acme", at(6), 1).await.unwrap(), 1);
    assert_eq!(
        store.count_stale_drift("other", at(6), 10).await.unwrap(),
        0
    );
    let r = runner(&*store, "r1").await;
    let check = new_run("run-a1", "s-a", RunKind::Drift);
    store
        .start_drift_check(&check, &audit(Some("acme"), "run.create", "run:run-a1"))
        .await
        .unwrap();
    run_phase(&*store, &r, "run-a1", Event::planned(false)).await;
    let settled = store
        .settle_drift_run("run-a1", DriftResult::NoDrift, None)
        .await
        .unwrap()
        .unwrap();
    let new_stale = stale_at("s-a").await;
    assert!(new_stale > ms(settled.checked_at), "{new_stale}");
    // The success (now, long after t0) ended s-a's episode: not counted until it turns
    // stale again, while s-b and s-c have been stale since 2024.
    assert_eq!(
        by_org(settled.checked_at + Duration::hours(1)).await,
        acme(2)
    );
    assert_eq!(
        by_org(settled.checked_at + Duration::hours(3)).await,
        acme(3)
    );
    let far = settled.checked_at + Duration::hours(3);
    let again: Vec<_> = store
        .drift_alerts_due(far, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.stack)
        .collect();
    assert!(again.contains(&"s-a".to_string()), "{again:?}");

    // Turning drift detection off drops the schedule and its ticket.
    save("s-b", None, false).await;
    assert!(store.drift_arming(100).await.unwrap().is_empty());
    let listed: Vec<_> = store
        .drift_dashboard("acme", None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.stack)
        .collect();
    assert_eq!(listed, ["s-c", "s-a"]);
    // Nothing is left to compute: every schedule got its stale_at when it was armed.
    assert_eq!(store.fill_drift_stale_at(10).await.unwrap(), 0);
}
