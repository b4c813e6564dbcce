//! Conformance cases for the approvals inbox and plan schedules.

use super::*;

fn gated_spec(id: &str, env: Option<&str>, autodeploy: bool) -> StackSpec {
    StackSpec::from_input(StackInput {
        id: id.into(),
        repository: "github:acme/infra".into(),
        autodeploy,
        environment: env.map(str::to_string),
        ..Default::default()
    })
    .unwrap()
}

/// A new tracked run of `stack`, leased and planned with changes: where it stops.
async fn planned_run(store: &dyn Store, r: &RunnerRecord, id: &str, stack: &str) -> RunRecord {
    store
        .create_run(&new_run(id, stack, RunKind::Tracked), None)
        .await
        .unwrap();
    let leased = store.lease_run(r).await.unwrap().unwrap();
    assert_eq!(leased.id, id, "the only dispatchable run");
    store
        .run_event(id, &ev(Event::PhaseStarted, leased.fencing))
        .await
        .unwrap();
    let mut planned = ev(Event::planned(true), leased.fencing);
    planned.update.plan_summary = Some(plan_summary(id));
    store.run_event(id, &planned).await.unwrap().run
}

/// The plan summary [`planned_run`] reports for run `id`.
fn plan_summary(id: &str) -> serde_json::Value {
    serde_json::json!({"has_changes": true, "add": 2, "change": 1, "destroy": 0, "run": id})
}

fn gated_plan_run(id: &str, org: &str, hosts: &[&str]) -> NewPlanRun {
    let mut run = plan_run(id, hosts);
    run.org = org.into();
    run.gated_environments = vec!["prod".into()];
    run
}

fn approval(
    org: &str,
    subject: &str,
    decision: bosun_core::approval::Decision,
    by: &str,
    comment: Option<&str>,
) -> ApprovalDecisionInput {
    let verb = match decision {
        bosun_core::approval::Decision::Approve => "approval.approve",
        bosun_core::approval::Decision::Reject => "approval.reject",
    };
    ApprovalDecisionInput {
        org: org.into(),
        subject: subject.into(),
        decision,
        decided_by: by.into(),
        comment: comment.map(str::to_string),
        audit: audit(Some(org), verb, &format!("run:{subject}")),
    }
}

fn not_awaiting(result: Result<impl std::fmt::Debug>, subject: &str, says: &str) {
    match result {
        Err(StoreError::NotAwaitingApproval { subject: s, why }) => {
            assert_eq!(s, subject);
            assert!(why.contains(says), "{why:?} should say {says:?}");
        }
        other => panic!("{subject}: expected NotAwaitingApproval, got {other:?}"),
    }
}

/// Audit records of `org` about `target`.
async fn audit_of(store: &dyn Store, org: &str, target: &str) -> Vec<Audit> {
    store
        .list_audit(Some(org), None, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.entry)
        .filter(|e| e.target == target)
        .collect()
}

pub async fn approvals_pending_from_paused_and_gated_runs(store: Arc<dyn Store>) {
    use bosun_core::approval::SubjectKind as K;
    use bosun_core::plan_run::{PlanRunEvent as E, PlanRunState as S};
    seed_org(&*store, "acme").await;
    seed_org(&*store, "other").await;
    let a = |action: &str, target: &str| audit(Some("acme"), action, target);
    for (env, gated) in [("prod", true), ("dev", false)] {
        store
            .create_environment(
                &environment("acme", env, gated),
                &a("environment.create", env),
            )
            .await
            .unwrap();
    }
    // `gated` would autodeploy, but its environment requires approval: it never does.
    for (id, env, autodeploy) in [
        ("gated", Some("prod"), true),
        ("plain", Some("dev"), false),
        ("auto", Some("dev"), true),
    ] {
        store
            .create_stack(
                "acme",
                &gated_spec(id, env, autodeploy),
                &a("stack.create", id),
            )
            .await
            .unwrap();
    }
    let pa = a("plan_run.create", "plan:app-config");
    let paused = store
        .create_plan_run(&gated_plan_run("prun-p1", "acme", &["db-1"]), &pa)
        .await
        .unwrap();
    assert_eq!(paused.state, S::Paused);
    let queued = store
        .create_plan_run(&plan_run("prun-q", &["web-1"]), &pa)
        .await
        .unwrap();
    assert_eq!(queued.state, S::Queued);
    store
        .create_plan_run(&gated_plan_run("prun-p2", "acme", &["db-2"]), &pa)
        .await
        .unwrap();
    let aborted = store
        .plan_run_event("prun-p2", &plan_event(E::Abort, None))
        .await
        .unwrap();
    assert_eq!(aborted.state, S::Aborted);
    store
        .create_plan_run(
            &gated_plan_run("prun-o", "other", &["db-1"]),
            &audit(Some("other"), "plan_run.create", "plan:app-config"),
        )
        .await
        .unwrap();

    let r = runner(&*store, "runner-1").await;
    let gated = planned_run(&*store, &r, "run-g1", "gated").await;
    assert_eq!(
        (gated.state, gated.needs_lease),
        (RunState::Unconfirmed, false)
    );
    let plain = planned_run(&*store, &r, "run-p1", "plain").await;
    assert_eq!(plain.state, RunState::Unconfirmed);
    let auto = planned_run(&*store, &r, "run-a1", "auto").await;
    assert_eq!(auto.state, RunState::Applying, "ungated autodeploy applies");
    // A second tracked run of the gated stack waits in the queue, not in the inbox.
    store
        .create_run(&new_run("run-g2", "gated", RunKind::Tracked), None)
        .await
        .unwrap();

    let pending = store.pending_approvals("acme", None, 100).await.unwrap();
    let subjects: Vec<(K, &str)> = pending
        .iter()
        .map(|p| (p.kind, p.subject.as_str()))
        .collect();
    assert_eq!(
        subjects,
        [(K::PlanRun, "prun-p1"), (K::StackRun, "run-g1")],
        "oldest first: {pending:?}"
    );
    assert_eq!(
        pending[0],
        PendingApproval {
            kind: K::PlanRun,
            subject: "prun-p1".into(),
            org: "acme".into(),
            target: "app-config".into(),
            environments: vec!["prod".into()],
            requested_by: "user:alice".into(),
            since: paused.created_at,
            created_at: paused.created_at.timestamp_millis(),
            preview: None,
            plan_summary: None,
        }
    );
    // Page by page: one at a time, from each one's cursor, the same runs in the same order.
    let mut paged = Vec::new();
    let mut after = None;
    while let Some(p) = store
        .pending_approvals("acme", after.as_ref(), 1)
        .await
        .unwrap()
        .pop()
    {
        after = Some(p.cursor());
        paged.push(p);
    }
    assert_eq!(paged, pending);
    let stack = &pending[1];
    assert_eq!(
        (
            stack.org.as_str(),
            stack.target.as_str(),
            stack.environments.as_slice(),
            stack.requested_by.as_str()
        ),
        ("acme", "gated", &["prod".to_string()][..], "user:tester")
    );
    // The inbox carries the run's plan, so a reader needs no read per row for it.
    assert_eq!(stack.plan_summary, Some(plan_summary("run-g1")));
    // Waiting since it entered `unconfirmed`, not since it was created.
    let phases = store.run_phases("run-g1").await.unwrap();
    let entered = phases
        .iter()
        .find(|p| p.state == RunState::Unconfirmed)
        .unwrap();
    assert_eq!(stack.since, entered.started_at);
    assert!(stack.since >= gated.created_at);

    // One by one: the same record, and the org's own runs only.
    assert_eq!(
        store.pending_approval("acme", "prun-p1").await.unwrap(),
        pending[0]
    );
    assert_eq!(
        store.pending_approval("acme", "run-g1").await.unwrap(),
        pending[1]
    );
    let theirs = store.pending_approvals("other", None, 100).await.unwrap();
    assert_eq!(
        theirs
            .iter()
            .map(|p| p.subject.as_str())
            .collect::<Vec<_>>(),
        ["prun-o"]
    );
    for (org, subject) in [
        ("acme", "prun-o"),
        ("other", "prun-p1"),
        ("other", "run-g1"),
        ("acme", "prun-none"),
    ] {
        assert!(
            matches!(
                store.pending_approval(org, subject).await,
                Err(StoreError::NotFound(_))
            ),
            "{org}/{subject}"
        );
    }
    // Runs that do not wait say why.
    not_awaiting(
        store.pending_approval("acme", "prun-q").await,
        "prun-q",
        "queued",
    );
    not_awaiting(
        store.pending_approval("acme", "prun-p2").await,
        "prun-p2",
        "aborted",
    );
    not_awaiting(
        store.pending_approval("acme", "run-p1").await,
        "run-p1",
        "no environment that requires approval",
    );
    not_awaiting(
        store.pending_approval("acme", "run-g2").await,
        "run-g2",
        "queued",
    );
    not_awaiting(
        store.pending_approval("acme", "run-a1").await,
        "run-a1",
        "no environment that requires approval",
    );

    // Read from the runs themselves: an environment that stops requiring approval takes
    // its stack runs out of the inbox (paused plan runs stay until decided), and back.
    let mut prod = environment("acme", "prod", false);
    store
        .update_environment(&prod, &a("environment.update", "prod"))
        .await
        .unwrap();
    let now: Vec<String> = store
        .pending_approvals("acme", None, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.subject)
        .collect();
    assert_eq!(now, ["prun-p1"]);
    prod.requires_approval = true;
    store
        .update_environment(&prod, &a("environment.update", "prod"))
        .await
        .unwrap();
    assert_eq!(
        store.pending_approvals("acme", None, 100).await.unwrap(),
        pending
    );

    // A waiting run follows its stack's environment: moved into `prod` it waits for
    // approval; moved out, for a plain confirmation again.
    let inbox = || async {
        let pending = store.pending_approvals("acme", None, 100).await.unwrap();
        pending.into_iter().map(|p| p.subject).collect::<Vec<_>>()
    };
    let move_plain = |env: &'static str| {
        let store = store.clone();
        async move {
            store
                .update_stack(
                    "acme",
                    &gated_spec("plain", Some(env), false),
                    &audit(Some("acme"), "stack.update", "plain"),
                )
                .await
                .unwrap();
        }
    };
    move_plain("prod").await;
    assert_eq!(inbox().await, ["prun-p1", "run-g1", "run-p1"]);
    assert_eq!(
        store
            .pending_approval("acme", "run-p1")
            .await
            .unwrap()
            .environments,
        ["prod"]
    );
    move_plain("dev").await;
    assert_eq!(inbox().await, ["prun-p1", "run-g1"]);
    // An environment deleted gates nothing; created again requiring approval, it gates
    // the runs of the stacks that name it.
    assert!(store
        .delete_environment("acme", "prod", &a("environment.delete", "prod"))
        .await
        .unwrap());
    assert_eq!(inbox().await, ["prun-p1"]);
    store
        .create_environment(&prod, &a("environment.create", "prod"))
        .await
        .unwrap();
    assert_eq!(
        store.pending_approvals("acme", None, 100).await.unwrap(),
        pending
    );
}

pub async fn approvals_decided_once_in_one_transaction(store: Arc<dyn Store>) {
    use bosun_core::approval::{Decision as D, SubjectKind as K};
    use bosun_core::plan_run::PlanRunState as S;
    seed_org(&*store, "acme").await;
    seed_org(&*store, "other").await;
    let a = |action: &str, target: &str| audit(Some("acme"), action, target);
    store
        .create_environment(
            &environment("acme", "prod", true),
            &a("environment.create", "prod"),
        )
        .await
        .unwrap();
    for id in ["gated-a", "gated-b"] {
        store
            .create_stack(
                "acme",
                &gated_spec(id, Some("prod"), false),
                &a("stack.create", id),
            )
            .await
            .unwrap();
    }
    let pa = a("plan_run.create", "plan:app-config");
    for (id, host) in [("prun-1", "h1"), ("prun-2", "h2"), ("prun-race", "h3")] {
        store
            .create_plan_run(&gated_plan_run(id, "acme", &[host]), &pa)
            .await
            .unwrap();
    }
    let r = runner(&*store, "runner-1").await;
    planned_run(&*store, &r, "run-a", "gated-a").await;
    planned_run(&*store, &r, "run-b", "gated-b").await;
    let decisions_before = store.list_audit(None, None, 1000).await.unwrap().len();

    // A decision on a run the org does not have changes nothing, writes nothing.
    assert!(matches!(
        store
            .decide_approval(&approval("other", "prun-1", D::Approve, "user:bob", None))
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(
        store.list_audit(None, None, 1000).await.unwrap().len(),
        decisions_before
    );
    assert!(store
        .approval_decisions("other", None, 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        store.get_plan_run("prun-1").await.unwrap().unwrap().state,
        S::Paused
    );

    // Approve a plan run: queued for a runner, the decision recorded and audited.
    let before = Utc::now() - Duration::seconds(1);
    let (record, outcome) = store
        .decide_approval(&approval("acme", "prun-1", D::Approve, "user:bob", None))
        .await
        .unwrap();
    let after = Utc::now() + Duration::seconds(1);
    assert!(record.decided_at >= before && record.decided_at <= after);
    assert_eq!(
        record,
        ApprovalRecord {
            kind: K::PlanRun,
            subject: "prun-1".into(),
            org: "acme".into(),
            target: "app-config".into(),
            environments: vec!["prod".into()],
            requested_by: "user:alice".into(),
            decision: D::Approve,
            decided_by: "user:bob".into(),
            comment: None,
            decided_at: record.decided_at,
        }
    );
    let ApprovalOutcome::PlanRun(run) = outcome else {
        panic!("a plan run's outcome: {outcome:?}")
    };
    assert_eq!((run.state, run.needs_lease), (S::Queued, true));
    assert_eq!(store.get_plan_run("prun-1").await.unwrap().unwrap(), *run);
    // Decided once: a second decision is refused and changes nothing.
    not_awaiting(
        store
            .decide_approval(&approval("acme", "prun-1", D::Reject, "user:carol", None))
            .await,
        "prun-1",
        "queued",
    );
    assert_eq!(
        store.get_plan_run("prun-1").await.unwrap().unwrap().state,
        S::Queued
    );
    let trail = audit_of(&*store, "acme", "run:prun-1").await;
    assert_eq!(
        trail.iter().map(|e| e.action.as_str()).collect::<Vec<_>>(),
        ["approval.approve"]
    );

    // Reject a plan run with a comment: it ends with the reason and frees its hosts.
    let (record, outcome) = store
        .decide_approval(&approval(
            "acme",
            "prun-2",
            D::Reject,
            "user:bob",
            Some("not during the freeze"),
        ))
        .await
        .unwrap();
    assert_eq!(
        (record.decision, record.comment.as_deref()),
        (D::Reject, Some("not during the freeze"))
    );
    let ApprovalOutcome::PlanRun(run) = outcome else {
        panic!("a plan run's outcome: {outcome:?}")
    };
    assert_eq!(run.state, S::Rejected);
    assert_eq!(
        run.reason.as_deref(),
        Some("rejected by user:bob: not during the freeze")
    );
    assert!(run.ended_at.is_some());
    store
        .create_plan_run(&plan_run("prun-2b", &["h2"]), &pa)
        .await
        .unwrap();

    // Approve a gated stack run: confirmed, on to its apply.
    let (record, outcome) = store
        .decide_approval(&approval(
            "acme",
            "run-a",
            D::Approve,
            "user:bob",
            Some("ok"),
        ))
        .await
        .unwrap();
    assert_eq!(
        (
            record.kind,
            record.target.as_str(),
            record.environments.as_slice(),
            record.requested_by.as_str()
        ),
        (
            K::StackRun,
            "gated-a",
            &["prod".to_string()][..],
            "user:tester"
        )
    );
    let ApprovalOutcome::StackRun(run) = outcome else {
        panic!("a stack run's outcome: {outcome:?}")
    };
    assert_eq!(
        (run.state, run.phase, run.needs_lease),
        (RunState::Applying, Phase::Apply, true)
    );
    // Reject one: discarded with the reason.
    let (_, outcome) = store
        .decide_approval(&approval("acme", "run-b", D::Reject, "user:bob", None))
        .await
        .unwrap();
    let ApprovalOutcome::StackRun(run) = outcome else {
        panic!("a stack run's outcome: {outcome:?}")
    };
    assert_eq!(run.state, RunState::Discarded);
    assert_eq!(run.reason.as_deref(), Some("rejected by user:bob"));
    not_awaiting(
        store
            .decide_approval(&approval("acme", "run-b", D::Approve, "user:carol", None))
            .await,
        "run-b",
        "discarded",
    );
    for run in ["run-a", "run-b"] {
        assert_eq!(
            audit_of(&*store, "acme", &format!("run:{run}")).await.len(),
            1,
            "{run}: one audit record"
        );
    }

    // Racing decisions on one run: exactly one lands, with its audit record.
    let mut tasks = Vec::new();
    for i in 0..6 {
        let store = store.clone();
        let d = if i % 2 == 0 { D::Approve } else { D::Reject };
        tasks.push(tokio::spawn(async move {
            let by = format!("user:u{i}");
            let out = store
                .decide_approval(&approval("acme", "prun-race", d, &by, None))
                .await;
            (by, d, out)
        }));
    }
    let mut winners = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            (by, d, Ok(_)) => winners.push((by, d)),
            (_, _, Err(StoreError::NotAwaitingApproval { subject, .. })) => {
                assert_eq!(subject, "prun-race")
            }
            (_, _, Err(e)) => panic!("{e:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    let (by, d) = &winners[0];
    let state = store
        .get_plan_run("prun-race")
        .await
        .unwrap()
        .unwrap()
        .state;
    assert_eq!(
        state,
        if *d == D::Approve {
            S::Queued
        } else {
            S::Rejected
        }
    );
    let trail = audit_of(&*store, "acme", "run:prun-race").await;
    assert_eq!(trail.len(), 1, "{trail:?}");

    // The decisions, newest first, the org's own, limited.
    let all = store.approval_decisions("acme", None, 10).await.unwrap();
    let mut subjects: Vec<&str> = all.iter().map(|d| d.subject.as_str()).collect();
    assert!(
        all.windows(2).all(|w| w[0].decided_at >= w[1].decided_at),
        "{all:?}"
    );
    let race = all.iter().find(|x| x.subject == "prun-race").unwrap();
    assert_eq!((&race.decided_by, race.decision), (by, *d));
    subjects.sort_unstable();
    assert_eq!(
        subjects,
        ["prun-1", "prun-2", "prun-race", "run-a", "run-b"]
    );
    assert_eq!(
        store.approval_decisions("acme", None, 2).await.unwrap(),
        all[..2]
    );
    // Page by page, each continuing after the last decision of the one before, the pages
    // are the whole list in the same order (decisions made in the same millisecond too).
    let mut paged = Vec::new();
    let mut before: Option<String> = None;
    for _ in 0..=all.len() {
        let page = store
            .approval_decisions("acme", before.as_deref(), 2)
            .await
            .unwrap();
        assert!(page.len() <= 2);
        let Some(last) = page.last() else { break };
        before = Some(last.subject.clone());
        paged.extend(page);
    }
    assert_eq!(paged, all);
    // A cursor that is no decision of the org is refused, never read as the first page.
    for (org, cursor) in [("acme", "prun-nosuch"), ("other", "prun-1")] {
        assert!(
            matches!(
                store.approval_decisions(org, Some(cursor), 2).await,
                Err(StoreError::NotFound(_))
            ),
            "{org} {cursor}"
        );
    }
    assert!(store
        .pending_approvals("acme", None, 100)
        .await
        .unwrap()
        .is_empty());
}

fn schedule_input(plan: &str, cron: &str) -> PlanScheduleInput {
    PlanScheduleInput {
        org: "acme".into(),
        plan: plan.into(),
        cron: cron.into(),
        timezone: "Europe/Berlin".into(),
        inputs: BTreeMap::from([("release".to_string(), json!("2.0"))]),
        updated_by: "user:alice".into(),
    }
}

async fn save_plan_named(store: &dyn Store, org: &str, name: &str) {
    store
        .save_plan(
            &NewPlan {
                org: org.into(),
                name: name.into(),
                source: format!("name: {name}\nsteps: []\n"),
                schedule: None,
                on_stack_change: None,
            },
            &audit(Some(org), "plan.save", &format!("plan:{name}")),
        )
        .await
        .unwrap();
}

async fn schedule_of(store: &dyn Store, org: &str, plan: &str) -> Option<PlanScheduleRecord> {
    let mut found = store.plan_schedules(Some(org), Some(plan)).await.unwrap();
    assert!(found.len() <= 1);
    found.pop()
}

/// A time the store keeps exactly (milliseconds).
fn at_millis(t: chrono::DateTime<Utc>) -> chrono::DateTime<Utc> {
    chrono::DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap()
}

/// Saves plan `name` of org `acme` with (or without) a file schedule, as `actor`.
async fn save_plan_scheduled(
    store: &dyn Store,
    name: &str,
    schedule: Option<(&str, &str)>,
    actor: &str,
) -> Result<PlanRecord> {
    let mut a = audit(Some("acme"), "plan.save", &format!("plan:{name}"));
    a.actor = actor.into();
    store
        .save_plan(
            &NewPlan {
                org: "acme".into(),
                name: name.into(),
                source: format!("name: {name}\nsteps: []\n"),
                schedule: schedule.map(|(cron, timezone)| PlanFileSchedule {
                    cron: cron.into(),
                    timezone: timezone.into(),
                    inputs: BTreeMap::from([("release".to_string(), json!("3.0"))]),
                }),
                on_stack_change: None,
            },
            &a,
        )
        .await
}

pub async fn plan_schedules_from_files_follow_the_file(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let a = |action: &str| audit(Some("acme"), action, "plan:app-config");
    let last_save = |store: Arc<dyn Store>| async move {
        store
            .list_audit(Some("acme"), None, 1000)
            .await
            .unwrap()
            .into_iter()
            .find(|e| e.entry.action == "plan.save")
            .unwrap()
            .entry
            .detail
    };

    // Saved with a schedule: the plan's schedule, marked as the file's, in the same write.
    save_plan_scheduled(
        &*store,
        "app-config",
        Some(("0 2 * * *", "Europe/Berlin")),
        "user:alice",
    )
    .await
    .unwrap();
    let s = schedule_of(&*store, "acme", "app-config").await.unwrap();
    assert_eq!(
        (
            s.cron.as_str(),
            s.timezone.as_str(),
            s.updated_by.as_str(),
            s.from_file
        ),
        ("0 2 * * *", "Europe/Berlin", "user:alice", true)
    );
    assert_eq!(
        s.inputs,
        BTreeMap::from([("release".to_string(), json!("3.0"))])
    );
    assert_eq!(last_save(store.clone()).await["schedule"], "set");

    // The API may neither change nor clear it — and writes nothing trying.
    let audits = store.list_audit(None, None, 1000).await.unwrap().len();
    assert!(matches!(
        store
            .put_plan_schedule(&schedule_input("app-config", "0 3 * * *"), &a("plan.schedule.set"))
            .await,
        Err(StoreError::ScheduleFromFile { plan }) if plan == "app-config"
    ));
    assert!(matches!(
        store
            .delete_plan_schedule("acme", "app-config", &a("plan.schedule.delete"))
            .await,
        Err(StoreError::ScheduleFromFile { .. })
    ));
    assert_eq!(
        store.list_audit(None, None, 1000).await.unwrap().len(),
        audits
    );
    assert_eq!(schedule_of(&*store, "acme", "app-config").await.unwrap(), s);

    // A new version with another schedule replaces the settings; the scheduler's
    // bookkeeping stays (it re-arms on a change).
    let t0 = at_millis(Utc::now());
    assert_eq!(
        store
            .fire_plan_schedule(&PlanScheduleFire {
                org: "acme".into(),
                plan: "app-config".into(),
                cron: "0 2 * * *".into(),
                timezone: "Europe/Berlin".into(),
                expected_next: None,
                next_at: t0 + Duration::hours(1),
                since: Some(t0),
                run: None,
                note: None,
                now: t0,
            })
            .await
            .unwrap(),
        PlanScheduleFired::Armed
    );
    save_plan_scheduled(&*store, "app-config", Some(("@hourly", "UTC")), "user:bob")
        .await
        .unwrap();
    let s2 = schedule_of(&*store, "acme", "app-config").await.unwrap();
    assert_eq!(
        (
            s2.cron.as_str(),
            s2.timezone.as_str(),
            s2.updated_by.as_str(),
            s2.from_file
        ),
        ("@hourly", "UTC", "user:bob", true)
    );
    assert_eq!(s2.armed.map(|x| x.next_at), Some(t0 + Duration::hours(1)));

    // A version without one removes it.
    let v = save_plan_scheduled(&*store, "app-config", None, "user:bob")
        .await
        .unwrap();
    assert_eq!(v.version, 3);
    assert_eq!(schedule_of(&*store, "acme", "app-config").await, None);
    assert_eq!(last_save(store.clone()).await["schedule"], "removed");

    // One set through the API is the API's: files without a schedule leave it alone,
    // a file with one takes it over.
    let api = store
        .put_plan_schedule(
            &schedule_input("app-config", "0 3 * * *"),
            &a("plan.schedule.set"),
        )
        .await
        .unwrap();
    assert!(!api.from_file);
    save_plan_scheduled(&*store, "app-config", None, "user:bob")
        .await
        .unwrap();
    assert_eq!(
        schedule_of(&*store, "acme", "app-config")
            .await
            .map(|s| s.cron),
        Some("0 3 * * *".to_string())
    );
    assert!(last_save(store.clone()).await.get("schedule").is_none());
    save_plan_scheduled(
        &*store,
        "app-config",
        Some(("0 5 * * *", "UTC")),
        "user:bob",
    )
    .await
    .unwrap();
    let taken = schedule_of(&*store, "acme", "app-config").await.unwrap();
    assert_eq!((taken.cron.as_str(), taken.from_file), ("0 5 * * *", true));

    // A failed save (unknown org) changes no schedule.
    seed_org(&*store, "other").await;
    let mut theirs = NewPlan {
        org: "nope".into(),
        name: "app-config".into(),
        source: "name: app-config\nsteps: []\n".into(),
        schedule: None,
        on_stack_change: None,
    };
    assert!(store.save_plan(&theirs, &a("plan.save")).await.is_err());
    theirs.org = "other".into();
    store.save_plan(&theirs, &a("plan.save")).await.unwrap();
    assert_eq!(
        schedule_of(&*store, "acme", "app-config").await,
        Some(taken)
    );
}

pub async fn plan_schedules_set_replace_clear(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    seed_org(&*store, "other").await;
    let a = |action: &str| audit(Some("acme"), action, "plan:app-config");
    save_plan_named(&*store, "acme", "app-config").await;
    let audits = store.list_audit(None, None, 1000).await.unwrap().len();
    // No plan, no schedule — and nothing written.
    assert!(matches!(
        store
            .put_plan_schedule(
                &schedule_input("ghost", "0 3 * * *"),
                &a("plan.schedule.set")
            )
            .await,
        Err(StoreError::NotFound(_))
    ));
    let mut theirs = schedule_input("app-config", "0 3 * * *");
    theirs.org = "other".into();
    assert!(matches!(
        store
            .put_plan_schedule(&theirs, &a("plan.schedule.set"))
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(
        store.list_audit(None, None, 1000).await.unwrap().len(),
        audits
    );
    assert!(store.plan_schedules(None, None).await.unwrap().is_empty());

    let set = schedule_input("app-config", "0 3 * * *");
    let before = Utc::now() - Duration::seconds(1);
    let first = store
        .put_plan_schedule(&set, &a("plan.schedule.set"))
        .await
        .unwrap();
    assert_eq!(
        (
            first.org.as_str(),
            first.plan.as_str(),
            first.cron.as_str(),
            first.timezone.as_str(),
            first.updated_by.as_str()
        ),
        (
            "acme",
            "app-config",
            "0 3 * * *",
            "Europe/Berlin",
            "user:alice"
        )
    );
    assert_eq!(first.inputs, set.inputs);
    assert!(first.updated_at >= before && first.updated_at <= Utc::now() + Duration::seconds(1));
    assert!(
        first.armed.is_none(),
        "armed by the scheduler, not by a set"
    );
    assert_eq!(
        schedule_of(&*store, "acme", "app-config").await.unwrap(),
        first
    );
    assert_eq!(
        audit_actions(&*store, "acme")
            .await
            .iter()
            .filter(|x| *x == "plan.schedule.set")
            .count(),
        1
    );

    // Listed by org, then plan; filtered by either.
    save_plan_named(&*store, "acme", "backup").await;
    save_plan_named(&*store, "other", "backup").await;
    store
        .put_plan_schedule(
            &schedule_input("backup", "0 1 * * *"),
            &a("plan.schedule.set"),
        )
        .await
        .unwrap();
    let mut other_backup = schedule_input("backup", "0 2 * * *");
    other_backup.org = "other".into();
    store
        .put_plan_schedule(
            &other_backup,
            &audit(Some("other"), "plan.schedule.set", "plan:backup"),
        )
        .await
        .unwrap();
    let keys = |list: Vec<PlanScheduleRecord>| -> Vec<(String, String)> {
        list.into_iter().map(|s| (s.org, s.plan)).collect()
    };
    assert_eq!(
        keys(store.plan_schedules(None, None).await.unwrap()),
        [
            pair("acme", "app-config"),
            pair("acme", "backup"),
            pair("other", "backup")
        ]
    );
    assert_eq!(
        keys(store.plan_schedules(Some("acme"), None).await.unwrap()),
        [pair("acme", "app-config"), pair("acme", "backup")]
    );
    assert_eq!(
        keys(store.plan_schedules(None, Some("backup")).await.unwrap()),
        [pair("acme", "backup"), pair("other", "backup")]
    );

    // Replacing the settings keeps the scheduler's bookkeeping (it re-arms on a change).
    let t0 = at_millis(Utc::now());
    assert_eq!(
        store
            .fire_plan_schedule(&PlanScheduleFire {
                org: "acme".into(),
                plan: "app-config".into(),
                cron: "0 3 * * *".into(),
                timezone: "Europe/Berlin".into(),
                expected_next: None,
                next_at: t0 + Duration::hours(1),
                since: Some(t0),
                run: None,
                note: None,
                now: t0,
            })
            .await
            .unwrap(),
        PlanScheduleFired::Armed
    );
    let mut replaced = schedule_input("app-config", "30 4 * * 1");
    replaced.timezone = "UTC".into();
    replaced.inputs = BTreeMap::new();
    replaced.updated_by = "user:bob".into();
    let second = store
        .put_plan_schedule(&replaced, &a("plan.schedule.set"))
        .await
        .unwrap();
    assert_eq!(
        (
            second.cron.as_str(),
            second.timezone.as_str(),
            second.updated_by.as_str()
        ),
        ("30 4 * * 1", "UTC", "user:bob")
    );
    assert!(second.inputs.is_empty());
    assert!(second.updated_at >= first.updated_at);
    let armed = second.armed.expect("the bookkeeping stays");
    assert_eq!(
        (armed.cron.as_str(), armed.timezone.as_str()),
        ("0 3 * * *", "Europe/Berlin")
    );
    assert_eq!((armed.since, armed.next_at), (t0, t0 + Duration::hours(1)));

    // Cleared once; the other schedules stay.
    let audits = store.list_audit(None, None, 1000).await.unwrap().len();
    assert!(store
        .delete_plan_schedule("acme", "app-config", &a("plan.schedule.delete"))
        .await
        .unwrap());
    assert!(!store
        .delete_plan_schedule("acme", "app-config", &a("plan.schedule.delete"))
        .await
        .unwrap());
    assert!(!store
        .delete_plan_schedule("other", "app-config", &a("plan.schedule.delete"))
        .await
        .unwrap());
    assert_eq!(
        store.list_audit(None, None, 1000).await.unwrap().len(),
        audits + 1,
        "only the delete that removed something is audited"
    );
    assert!(schedule_of(&*store, "acme", "app-config").await.is_none());
    assert!(store
        .get_plan("acme", "app-config")
        .await
        .unwrap()
        .is_some());
    // Deleting a plan takes its schedule with it.
    assert!(store
        .delete_plan("acme", "backup", &a("plan.delete"))
        .await
        .unwrap());
    assert_eq!(
        keys(store.plan_schedules(None, None).await.unwrap()),
        [pair("other", "backup")]
    );
}

pub async fn plan_schedules_fire_once_under_compare_and_set(store: Arc<dyn Store>) {
    use bosun_core::plan_run::{PlanRunEvent as E, PlanRunState as S, PlanTrigger};
    seed_org(&*store, "acme").await;
    save_plan_named(&*store, "acme", "app-config").await;
    store
        .put_plan_schedule(
            &schedule_input("app-config", "0 3 * * *"),
            &audit(Some("acme"), "plan.schedule.set", "plan:app-config"),
        )
        .await
        .unwrap();
    let t0 = at_millis(Utc::now());
    let t = |hours: i64| t0 + Duration::hours(hours);
    let fire = |expected: Option<i64>, next: i64, run: Option<NewPlanRun>, note: Option<&str>| {
        PlanScheduleFire {
            org: "acme".into(),
            plan: "app-config".into(),
            cron: "0 3 * * *".into(),
            timezone: "Europe/Berlin".into(),
            expected_next: expected.map(t),
            next_at: t(next),
            since: None,
            run,
            note: note.map(str::to_string),
            now: t(next - 1),
        }
    };
    let scheduled = |id: &str, hosts: &[&str]| {
        let mut run = plan_run(id, hosts);
        run.requested_by = "schedule".into();
        run.trigger = PlanTrigger::Schedule;
        run
    };
    let bookkeeping = |s: Option<PlanScheduleRecord>| s.unwrap().armed.unwrap();

    // Not armed yet: a pass that thinks otherwise loses.
    assert_eq!(
        store
            .fire_plan_schedule(&fire(Some(1), 2, None, None))
            .await
            .unwrap(),
        PlanScheduleFired::Raced
    );
    assert!(schedule_of(&*store, "acme", "app-config")
        .await
        .unwrap()
        .armed
        .is_none());
    // Arming: since and next, no fire yet; a second arming pass loses.
    let mut arm = fire(None, 1, None, None);
    arm.since = Some(t0);
    arm.now = t0;
    assert_eq!(
        store.fire_plan_schedule(&arm).await.unwrap(),
        PlanScheduleFired::Armed
    );
    assert_eq!(
        bookkeeping(schedule_of(&*store, "acme", "app-config").await),
        PlanScheduleArmed {
            cron: "0 3 * * *".into(),
            timezone: "Europe/Berlin".into(),
            since: t0,
            next_at: t(1),
            last_fire_at: None,
            last_fire_run: None,
            last_fire_note: None,
        }
    );
    assert_eq!(
        store.fire_plan_schedule(&arm).await.unwrap(),
        PlanScheduleFired::Raced
    );

    // A fire creates the run in the transaction that moves the schedule on; a catch-up
    // run keeps the scheduler's note about the missed times.
    let caught_up = "2 scheduled run(s) passed while the server was down or busy; ran one";
    let first = fire(
        Some(1),
        2,
        Some(scheduled("prun-s1", &["web-1"])),
        Some(caught_up),
    );
    let PlanScheduleFired::Started(run) = store.fire_plan_schedule(&first).await.unwrap() else {
        panic!("the first fire starts a run")
    };
    assert_eq!(
        (
            run.id.as_str(),
            run.state,
            run.trigger,
            run.requested_by.as_str()
        ),
        ("prun-s1", S::Queued, PlanTrigger::Schedule, "schedule")
    );
    assert_eq!(store.get_plan_run("prun-s1").await.unwrap().unwrap(), *run);
    assert_eq!(
        bookkeeping(schedule_of(&*store, "acme", "app-config").await),
        PlanScheduleArmed {
            cron: "0 3 * * *".into(),
            timezone: "Europe/Berlin".into(),
            since: t0,
            next_at: t(2),
            last_fire_at: Some(t(1)),
            last_fire_run: Some("prun-s1".into()),
            last_fire_note: Some(caught_up.into()),
        }
    );
    let created = store
        .list_audit(Some("acme"), None, 1000)
        .await
        .unwrap()
        .into_iter()
        .find(|x| x.entry.action == "plan_run.create")
        .expect("the scheduled run's audit record");
    assert_eq!(created.entry.actor, "schedule");
    assert_eq!(created.entry.detail["run"], json!("prun-s1"));
    // The same fire again (another server read the old next_at): nothing is created.
    let mut replay = first.clone();
    replay.run = Some(scheduled("prun-s1b", &["web-9"]));
    assert_eq!(
        store.fire_plan_schedule(&replay).await.unwrap(),
        PlanScheduleFired::Raced
    );
    assert!(store.get_plan_run("prun-s1b").await.unwrap().is_none());

    // The concurrency guard refuses the next one: no run, the refusal is the note, and
    // the schedule still moves on.
    let out = store
        .fire_plan_schedule(&fire(
            Some(2),
            3,
            Some(scheduled("prun-s2", &["web-2", "web-1"])),
            None,
        ))
        .await
        .unwrap();
    let PlanScheduleFired::Skipped { reason } = out else {
        panic!("the guard refuses: {out:?}")
    };
    assert!(reason.starts_with("skipped: "), "{reason}");
    assert!(
        reason.contains("Already has a run in progress on the same targets: web-1"),
        "{reason}"
    );
    assert!(store.get_plan_run("prun-s2").await.unwrap().is_none());
    let kept = bookkeeping(schedule_of(&*store, "acme", "app-config").await);
    assert_eq!(
        (
            kept.next_at,
            kept.last_fire_at,
            kept.last_fire_run,
            kept.last_fire_note
        ),
        (t(3), Some(t(2)), None, Some(reason))
    );
    // A run that could not be resolved: the scheduler's note is the reason.
    let why = "skipped: the plan \"app-config\" targets no host";
    assert_eq!(
        store
            .fire_plan_schedule(&fire(Some(3), 4, None, Some(why)))
            .await
            .unwrap(),
        PlanScheduleFired::Skipped { reason: why.into() }
    );
    let kept = bookkeeping(schedule_of(&*store, "acme", "app-config").await);
    assert_eq!(
        (
            kept.next_at,
            kept.last_fire_run,
            kept.last_fire_note.as_deref()
        ),
        (t(4), None, Some(why))
    );

    // A gated plan's scheduled run starts paused, in the inbox; no note this time.
    store
        .plan_run_event("prun-s1", &plan_event(E::Abort, None))
        .await
        .unwrap();
    let mut gated = scheduled("prun-s3", &["web-1"]);
    gated.gated_environments = vec!["prod".into()];
    let PlanScheduleFired::Started(run) = store
        .fire_plan_schedule(&fire(Some(4), 5, Some(gated), None))
        .await
        .unwrap()
    else {
        panic!("a gated run is created paused")
    };
    assert_eq!(run.state, S::Paused);
    let inbox = store.pending_approvals("acme", None, 100).await.unwrap();
    assert_eq!(
        inbox
            .iter()
            .map(|p| (p.subject.as_str(), p.requested_by.as_str()))
            .collect::<Vec<_>>(),
        [("prun-s3", "schedule")]
    );
    let kept = bookkeeping(schedule_of(&*store, "acme", "app-config").await);
    assert_eq!(
        (kept.last_fire_run.as_deref(), kept.last_fire_note),
        (Some("prun-s3"), None)
    );

    // Racing passes over one due time: exactly one run.
    let mut tasks = Vec::new();
    for i in 0..6 {
        let store = store.clone();
        let host = format!("race-{i}");
        let f = fire(
            Some(5),
            6,
            Some(scheduled(&format!("prun-race-{i}"), &[host.as_str()])),
            None,
        );
        tasks.push(tokio::spawn(
            async move { store.fire_plan_schedule(&f).await },
        ));
    }
    let mut started = Vec::new();
    for task in tasks {
        match task.await.unwrap().unwrap() {
            PlanScheduleFired::Started(run) => started.push(run.id),
            PlanScheduleFired::Raced => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(started.len(), 1, "{started:?}");
    let runs = store
        .list_plan_runs("acme", Some("app-config"), None, 100)
        .await
        .unwrap();
    let raced: Vec<&str> = runs
        .iter()
        .map(|r| r.id.as_str())
        .filter(|id| id.starts_with("prun-race"))
        .collect();
    assert_eq!(raced, [started[0].as_str()]);
    let kept = bookkeeping(schedule_of(&*store, "acme", "app-config").await);
    assert_eq!(
        (kept.next_at, kept.last_fire_run),
        (t(6), Some(started[0].clone()))
    );

    // A cleared schedule is not fired.
    store
        .delete_plan_schedule(
            "acme",
            "app-config",
            &audit(Some("acme"), "plan.schedule.delete", "plan:app-config"),
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .fire_plan_schedule(&fire(
                Some(6),
                7,
                Some(scheduled("prun-late", &["h9"])),
                None
            ))
            .await
            .unwrap(),
        PlanScheduleFired::Raced
    );
    assert!(store.get_plan_run("prun-late").await.unwrap().is_none());
}
