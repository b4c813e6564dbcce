//! Conformance cases for stack dependencies: the runs an upstream run holds downstream, and
//! how they are released, removed or skipped as their holders end.

use super::*;

fn dep_spec(id: &str, upstream: &str, trigger_always: bool) -> StackSpec {
    StackSpec::from_input(StackInput {
        id: id.into(),
        repository: "github:acme/infra".into(),
        depends_on: vec![DependencyInput {
            stack: upstream.into(),
            outputs: [("name".to_string(), "upstream_name".to_string())].into(),
            trigger_always,
        }],
        ..Default::default()
    })
    .unwrap()
}

async fn only_run(store: &dyn Store, stack: &str) -> Option<RunRecord> {
    let mut runs = store
        .list_runs("acme", Some(stack), None, 10)
        .await
        .unwrap();
    assert!(runs.len() <= 1, "{stack}: {runs:?}");
    runs.pop()
}

pub async fn dependency_runs_held_released_removed_skipped(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let a = audit(Some("acme"), "stack.create", "x");
    store
        .create_stack("acme", &dep_spec("app", "net", false), &a)
        .await
        .unwrap();
    store
        .create_stack("acme", &dep_spec("web", "app", false), &a)
        .await
        .unwrap();
    store
        .create_stack("acme", &dep_spec("ops", "net", true), &a)
        .await
        .unwrap();
    let r = runner(&*store, "runner-1").await;
    let confirm = |_: ()| RunEventInput {
        event: Event::Confirm,
        fencing: None,
        update: RunUpdate::default(),
        audit: None,
    };

    // A proposed run holds nothing; a tracked one holds a run of each downstream stack,
    // and that one holds the next level's.
    store
        .create_run(&new_run("p1", "net", RunKind::Proposed), None)
        .await
        .unwrap();
    assert!(only_run(&*store, "app").await.is_none());
    let p = store.lease_run(&r).await.unwrap().unwrap();
    assert_eq!(p.id, "p1");
    store
        .run_event("p1", &ev(Event::PhaseStarted, p.fencing))
        .await
        .unwrap();
    store
        .run_event("p1", &ev(Event::planned(false), p.fencing))
        .await
        .unwrap();
    store
        .create_run(&new_run("n1", "net", RunKind::Tracked), None)
        .await
        .unwrap();
    let app = only_run(&*store, "app").await.expect("a held app run");
    assert_eq!(
        (
            app.trigger,
            app.held,
            app.needs_lease,
            app.upstream_run.as_deref()
        ),
        (Trigger::Dependency, true, false, Some("n1"))
    );
    assert_eq!(app.triggered_by, "stack:net");
    let web = only_run(&*store, "web").await.expect("a held web run");
    assert_eq!(
        (web.held, web.upstream_run.as_deref()),
        (true, Some(app.id.as_str()))
    );
    assert!(only_run(&*store, "ops").await.unwrap().held);

    // Held runs are never leased: the runner gets the upstream run. It finishes without
    // writing state: outputs unchanged → the held runs go away (the next level too),
    // except where trigger_always asks for a run.
    let n1 = run_phase(&*store, &r, "n1", Event::planned(false)).await;
    assert_eq!(n1.state, RunState::Finished);
    assert!(
        only_run(&*store, "app").await.is_none(),
        "unchanged outputs trigger nothing"
    );
    assert!(only_run(&*store, "web").await.is_none());
    let ops = only_run(&*store, "ops").await.unwrap();
    assert_eq!(
        (ops.held, ops.needs_lease, ops.state),
        (false, true, RunState::Queued)
    );
    assert!(
        ops.reason.as_deref().unwrap().contains("trigger_always"),
        "{ops:?}"
    );
    store
        .cancel_run(&ops.id, &audit(Some("acme"), "run.cancel", "ops"))
        .await
        .unwrap();

    // Outputs changed by the upstream's apply: the downstream run is released with the
    // names of the changed outputs; the level below still waits for it.
    store
        .create_run(&new_run("n2", "net", RunKind::Tracked), None)
        .await
        .unwrap();
    run_phase(&*store, &r, "n2", Event::planned(true)).await;
    store.run_event("n2", &confirm(())).await.unwrap();
    let n2 = run_phase(&*store, &r, "n2", Event::ApplyFinished).await;
    assert_eq!(n2.state, RunState::Finished);
    let runs = store
        .list_runs("acme", Some("app"), None, 10)
        .await
        .unwrap();
    let app = runs
        .iter()
        .find(|x| x.upstream_run.as_deref() == Some("n2"))
        .unwrap();
    assert_eq!((app.held, app.needs_lease), (false, true));
    let reason = app.reason.clone().unwrap();
    assert!(reason.contains("changed outputs: name, pw"), "{reason}");
    let web = store
        .list_runs("acme", Some("web"), None, 10)
        .await
        .unwrap();
    assert_eq!(web.len(), 1);
    assert!(web[0].held && web[0].state == RunState::Queued);
    let ops = store
        .list_runs("acme", Some("ops"), None, 10)
        .await
        .unwrap();
    assert!(ops
        .iter()
        .any(|o| o.upstream_run.as_deref() == Some("n2") && !o.held));
    for o in ops.iter().filter(|o| !o.state.is_terminal()) {
        store
            .cancel_run(&o.id, &audit(Some("acme"), "run.cancel", "ops"))
            .await
            .unwrap();
    }

    // The consumed outputs are recorded once.
    let consumed = json!([{"stack": "net", "version": 1, "output": "name", "variable": "upstream_name", "sensitive": false}]);
    assert!(store.set_run_consumed(&app.id, &consumed).await.unwrap());
    assert!(!store.set_run_consumed(&app.id, &json!([])).await.unwrap());
    assert_eq!(
        store.get_run(&app.id).await.unwrap().unwrap().consumed,
        Some(consumed)
    );

    // The released run fails: the run waiting on it is skipped, naming it.
    let leased = store.lease_run(&r).await.unwrap().unwrap();
    assert_eq!(leased.id, app.id);
    store
        .run_event(&app.id, &ev(Event::PhaseStarted, leased.fencing))
        .await
        .unwrap();
    store
        .run_event(&app.id, &ev(Event::PhaseFailed, leased.fencing))
        .await
        .unwrap();
    let web = store.get_run(&web[0].id).await.unwrap().unwrap();
    assert_eq!((web.state, web.held), (RunState::Skipped, false));
    let reason = web.reason.unwrap();
    assert!(
        reason.contains(&app.id) && reason.contains("ended failed"),
        "{reason}"
    );

    // An upstream failure skips the whole chain below it.
    store
        .create_run(&new_run("n3", "net", RunKind::Tracked), None)
        .await
        .unwrap();
    run_phase(&*store, &r, "n3", Event::PhaseFailed).await;
    for stack in ["app", "web", "ops"] {
        let runs = store
            .list_runs("acme", Some(stack), None, 10)
            .await
            .unwrap();
        let latest = &runs[0];
        assert_eq!(latest.state, RunState::Skipped, "{stack}: {latest:?}");
        assert!(!latest.held);
    }
    assert!(
        store.lease_run(&r).await.unwrap().is_none(),
        "nothing left waiting"
    );
}

pub async fn held_runs_do_not_block_their_stack(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let a = audit(Some("acme"), "stack.create", "x");
    store
        .create_stack("acme", &dep_spec("app", "net", false), &a)
        .await
        .unwrap();
    let r = runner(&*store, "runner-1").await;
    store
        .create_run(&new_run("n1", "net", RunKind::Tracked), None)
        .await
        .unwrap();
    let held = only_run(&*store, "app").await.unwrap();
    // A push to the downstream stack runs while the dependency run waits…
    store
        .create_run(&new_run("a1", "app", RunKind::Tracked), None)
        .await
        .unwrap();
    // Both are leased; which first depends only on their creation times, which may be
    // the same millisecond.
    let leased = [
        store.lease_run(&r).await.unwrap().unwrap(),
        store.lease_run(&r).await.unwrap().unwrap(),
    ];
    let mut ids: Vec<&str> = leased.iter().map(|l| l.id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["a1", "n1"]);
    let first = leased.iter().find(|l| l.id == "n1").unwrap().clone();
    // …and once released, the older dependency run still waits for the running one.
    store
        .run_event("n1", &ev(Event::PhaseStarted, first.fencing))
        .await
        .unwrap();
    store
        .run_event("n1", &ev(Event::PhaseFailed, first.fencing))
        .await
        .unwrap();
    let skipped = store.get_run(&held.id).await.unwrap().unwrap();
    assert_eq!(skipped.state, RunState::Skipped);
    store
        .create_run(&new_run("n2", "net", RunKind::Tracked), None)
        .await
        .unwrap();
    let held = store
        .list_runs("acme", Some("app"), None, 10)
        .await
        .unwrap()
        .into_iter()
        .find(|x| x.upstream_run.as_deref() == Some("n2"))
        .unwrap();
    let n2 = store.lease_run(&r).await.unwrap().unwrap();
    assert_eq!(n2.id, "n2");
    store
        .run_event("n2", &ev(Event::PhaseStarted, n2.fencing))
        .await
        .unwrap();
    store
        .run_event("n2", &ev(Event::planned(true), n2.fencing))
        .await
        .unwrap();
    store
        .run_event(
            "n2",
            &RunEventInput {
                event: Event::Confirm,
                fencing: None,
                update: RunUpdate::default(),
                audit: None,
            },
        )
        .await
        .unwrap();
    let n2 = run_phase(&*store, &r, "n2", Event::ApplyFinished).await;
    assert_eq!(n2.state, RunState::Finished);
    let released = store.get_run(&held.id).await.unwrap().unwrap();
    assert!(!released.held && released.needs_lease);
    assert!(
        store.lease_run(&r).await.unwrap().is_none(),
        "a1 is still planning on app: the released run waits"
    );
}

/// How a run of a stack ends in [`dependency_wave`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// Planned with changes, confirmed, applied: its outputs change.
    Apply,
    /// Planned without changes: no state written, outputs unchanged.
    NoChanges,
    /// Its plan fails.
    Fail,
}

/// What became of one wave of the diamond `a → b, a → c, b → d, c → d`.
struct Wave {
    b: String,
    c: String,
    /// The one run `d` got, after everything settled (`None`: removed).
    d: Option<RunRecord>,
    d_id: String,
    /// `d` was settled while `b`'s or `c`'s run had not ended yet.
    d_settled_early: bool,
}

/// A tracked run of `a`, then every run it leads to driven to its `ending` in whatever
/// order the runner gets them; after each step, `d`'s run is still held unless both `b`'s
/// and `c`'s runs have ended (or were removed) — or one of them failed and `d` was
/// skipped.
async fn dependency_wave(
    store: &dyn Store,
    r: &RunnerRecord,
    root: &str,
    ending: impl Fn(&str) -> Ending,
) -> Wave {
    let ids = |stack: &'static str| async move {
        store
            .list_runs("acme", Some(stack), None, 100)
            .await
            .unwrap()
            .into_iter()
            .map(|x| x.id)
            .collect::<Vec<_>>()
    };
    let before = [ids("left").await, ids("right").await, ids("bottom").await];
    store
        .create_run(&new_run(root, "top", RunKind::Tracked), None)
        .await
        .unwrap();
    let mut new = Vec::new();
    for (stack, old) in ["left", "right", "bottom"].into_iter().zip(before) {
        let fresh: Vec<String> = ids(stack)
            .await
            .into_iter()
            .filter(|id| !old.contains(id))
            .collect();
        assert_eq!(fresh.len(), 1, "one held run of {stack}: {fresh:?}");
        new.push(fresh[0].clone());
    }
    let [b, c, d_id] = <[String; 3]>::try_from(new).unwrap();
    let d = store.get_run(&d_id).await.unwrap().unwrap();
    assert!(d.held && !d.needs_lease, "{d:?}");
    let reason = d.reason.clone().unwrap();
    assert!(
        reason.contains(&b) && reason.contains(&c),
        "d waits for both: {reason}"
    );
    let ended = |run: &Option<RunRecord>| run.as_ref().is_none_or(|x| x.state.is_terminal());
    let mut d_settled_early = false;
    while let Some(leased) = store.lease_run(r).await.unwrap() {
        let id = leased.id.clone();
        store
            .run_event(&id, &ev(Event::PhaseStarted, leased.fencing))
            .await
            .unwrap();
        let end = match (leased.phase, ending(&leased.stack)) {
            (_, Ending::Fail) => Event::PhaseFailed,
            (Phase::Apply, _) => {
                let v = store.state_head("acme", &leased.stack).await.unwrap();
                let serial = v.current.map(|c| c.serial + 1).unwrap_or(1);
                let w = state_write(
                    Writer::Run(id.clone()),
                    WriterLiveness::LiveRun,
                    None,
                    serial,
                    "L",
                );
                store
                    .write_state("acme", &leased.stack, &w, None)
                    .await
                    .unwrap();
                Event::ApplyFinished
            }
            (_, ending) => Event::planned(ending == Ending::Apply),
        };
        let after = store
            .run_event(&id, &ev(end, leased.fencing))
            .await
            .unwrap()
            .run;
        if after.state == RunState::Unconfirmed {
            store
                .run_event(
                    &id,
                    &RunEventInput {
                        event: Event::Confirm,
                        fencing: None,
                        update: RunUpdate::default(),
                        audit: None,
                    },
                )
                .await
                .unwrap();
        }
        let d = store.get_run(&d_id).await.unwrap();
        if d.as_ref().is_none_or(|d| !d.held) {
            let sides = [
                store.get_run(&b).await.unwrap(),
                store.get_run(&c).await.unwrap(),
            ];
            if !sides.iter().all(ended) {
                let failed_side = sides.iter().flatten().any(|x| x.state == RunState::Failed);
                assert!(
                    failed_side && d.as_ref().is_some_and(|d| d.state == RunState::Skipped),
                    "d settled before b and c both ended, and not skipped for a failed one: {d:?}"
                );
                d_settled_early = true;
            }
        }
    }
    let d = store.get_run(&d_id).await.unwrap();
    if let Some(d) = &d {
        assert!(
            d.state.is_terminal() && !d.held,
            "nothing left waiting: {d:?}"
        );
    }
    for stack in ["left", "right", "bottom"] {
        for run in store
            .list_runs("acme", Some(stack), None, 100)
            .await
            .unwrap()
        {
            assert!(run.state.is_terminal() && !run.held, "{run:?}");
        }
    }
    Wave {
        b,
        c,
        d,
        d_id,
        d_settled_early,
    }
}

pub async fn dependency_diamond_runs_the_bottom_stack_once(store: Arc<dyn Store>) {
    // a → b, a → c, and d depends on both b and c.
    seed_stack(&*store, "top").await;
    let a = audit(Some("acme"), "stack.create", "x");
    for stack in ["left", "right"] {
        store
            .create_stack("acme", &dep_spec(stack, "top", false), &a)
            .await
            .unwrap();
    }
    let d = StackSpec::from_input(StackInput {
        id: "bottom".into(),
        repository: "github:acme/infra".into(),
        depends_on: ["left", "right"]
            .into_iter()
            .map(|up| DependencyInput {
                stack: up.into(),
                outputs: [("name".to_string(), format!("{up}_name"))].into(),
                trigger_always: false,
            })
            .collect(),
        ..Default::default()
    })
    .unwrap();
    store.create_stack("acme", &d, &a).await.unwrap();
    let r = runner(&*store, "runner-1").await;
    let runs_of_d = |store: Arc<dyn Store>| async move {
        store
            .list_runs("acme", Some("bottom"), None, 100)
            .await
            .unwrap()
            .len()
    };

    // Both sides change outputs: d runs once, released only after both ended, naming
    // both changes.
    let w = dependency_wave(&*store, &r, "a1", |s| match s {
        "bottom" => Ending::NoChanges,
        _ => Ending::Apply,
    })
    .await;
    let d = w.d.expect("d ran");
    assert_eq!(
        (d.state, d.trigger),
        (RunState::Finished, Trigger::Dependency)
    );
    let reason = d.reason.clone().unwrap_or_default();
    assert!(
        reason.contains(&format!(
            "run {} of upstream stack left changed outputs",
            w.b
        )) && reason.contains(&format!(
            "run {} of upstream stack right changed outputs",
            w.c
        )),
        "{reason}"
    );
    assert_eq!(runs_of_d(store.clone()).await, 1);

    // One side changes outputs, the other does not: d still runs once, after both.
    let w = dependency_wave(&*store, &r, "a2", |s| match s {
        "right" | "bottom" => Ending::NoChanges,
        _ => Ending::Apply,
    })
    .await;
    let d = w.d.expect("d ran");
    assert_eq!(d.state, RunState::Finished);
    let reason = d.reason.clone().unwrap_or_default();
    assert!(
        reason.contains(&w.b) && !reason.contains(&w.c),
        "only b's change: {reason}"
    );
    assert_eq!(runs_of_d(store.clone()).await, 2);

    // Neither side changes outputs: d's run is removed.
    let w = dependency_wave(&*store, &r, "a3", |s| match s {
        "top" => Ending::Apply,
        _ => Ending::NoChanges,
    })
    .await;
    assert!(w.d.is_none(), "d's run removed: {:?}", w.d);
    assert_eq!(runs_of_d(store.clone()).await, 2);

    // a itself changes nothing: b's, c's and d's runs all go away.
    let w = dependency_wave(&*store, &r, "a4", |_| Ending::NoChanges).await;
    assert!(w.d.is_none());
    for id in [&w.b, &w.c] {
        assert!(store.get_run(id).await.unwrap().is_none(), "{id} removed");
    }

    // One side fails, the other changes outputs: d is skipped, naming the failed run.
    let w = dependency_wave(&*store, &r, "a5", |s| match s {
        "left" => Ending::Fail,
        _ => Ending::Apply,
    })
    .await;
    let d = w.d.expect("d skipped, not removed");
    assert_eq!((d.state, d.held), (RunState::Skipped, false));
    let reason = d.reason.clone().unwrap_or_default();
    assert!(
        reason.contains(&format!("upstream run {} of stack left ended failed", w.b)),
        "{reason}"
    );
    assert_eq!(runs_of_d(store.clone()).await, 3);
    assert_eq!(
        store.get_run(&w.d_id).await.unwrap().unwrap().state,
        RunState::Skipped
    );

    // The first side to run fails: d is skipped at once, while the other side is still
    // to run — and that side's end leaves it skipped.
    let first = std::sync::Mutex::new(None::<String>);
    let w = dependency_wave(&*store, &r, "a6", |s| {
        if s == "left" || s == "right" {
            let mut first = first.lock().unwrap();
            if first.get_or_insert_with(|| s.to_string()) == s {
                return Ending::Fail;
            }
        }
        Ending::Apply
    })
    .await;
    assert!(w.d_settled_early, "d waited for the other side");
    let d = w.d.expect("d skipped, not removed");
    assert_eq!((d.state, d.held), (RunState::Skipped, false));
    let failed = first.lock().unwrap().clone().unwrap();
    let failed_run = if failed == "left" { &w.b } else { &w.c };
    let reason = d.reason.clone().unwrap_or_default();
    assert!(
        reason.contains(&format!(
            "upstream run {failed_run} of stack {failed} ended failed"
        )),
        "{reason}"
    );
    assert_eq!(runs_of_d(store.clone()).await, 4);
}
