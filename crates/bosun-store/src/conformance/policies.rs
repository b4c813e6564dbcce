//! Conformance cases for policies as code: saved policies, evaluations recorded with the
//! plan they decided, the holds they put on a run, and an admin's override.

use bosun_core::policy::{Attachment, Mode, OnError, Outcome, Point, Verdict};

use super::*;

fn spec(name: &str, mode: Mode, source: PolicySource) -> PolicySpec {
    PolicySpec {
        name: name.into(),
        mode,
        on_error: OnError::Deny,
        points: vec![Point::Plan],
        attachment: Attachment {
            labels: vec!["pci".into()],
            environments: vec![],
        },
        source,
    }
}

fn evaluation(policy: &str, mode: Mode, outcome: Outcome, message: &str) -> NewPolicyEvaluation {
    let mut e = NewPolicyEvaluation {
        point: Point::Plan,
        policy: policy.into(),
        version: "sha256:0123".into(),
        mode,
        outcome,
        deny: vec![],
        warn: vec![],
        require_approval: vec![],
        skip: vec![],
        trigger: vec![],
        errors: vec![],
        duration_ms: 3,
    };
    match outcome {
        Outcome::Deny => e.deny.push(message.into()),
        Outcome::RequireApproval => e.require_approval.push(message.into()),
        _ => e.warn.push(message.into()),
    }
    e
}

pub async fn policies_saved_replaced_listed_and_deleted(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    seed_org(&*store, "other").await;
    let a = |action: &str, target: &str| audit(Some("acme"), action, target);
    let files = PolicySource::Files(BTreeMap::from([(
        "main.rego".to_string(),
        "package main\ndeny contains \"no\" if { false }\n".to_string(),
    )]));
    let git = PolicySource::Git {
        repository: "file:///srv/policies.git".into(),
        branch: "main".into(),
        path: "plan".into(),
    };
    let (saved, created) = store
        .put_policy(
            "acme",
            &spec("zeta", Mode::HardMandatory, files.clone()),
            "sha256:aa",
            &a("policy.put", "policy:zeta"),
        )
        .await
        .unwrap();
    assert!(created);
    assert_eq!(saved.spec, spec("zeta", Mode::HardMandatory, files.clone()));
    assert_eq!(
        (saved.version.as_str(), saved.updated_by.as_str()),
        ("sha256:aa", "user:tester")
    );
    let (_, created) = store
        .put_policy(
            "acme",
            &spec("alpha", Mode::Advisory, git.clone()),
            "main",
            &a("policy.put", "policy:alpha"),
        )
        .await
        .unwrap();
    assert!(created);
    // Replaced: every field, and not created again.
    let mut changed = spec("zeta", Mode::SoftMandatory, git.clone());
    changed.on_error = OnError::Warn;
    changed.points = vec![Point::Plan, Point::PlanRun];
    changed.attachment = Attachment::default();
    let (replaced, created) = store
        .put_policy("acme", &changed, "main", &a("policy.put", "policy:zeta"))
        .await
        .unwrap();
    assert!(!created);
    assert_eq!(replaced.spec, changed);
    assert_eq!(replaced.created_at, saved.created_at);
    let names: Vec<String> = store
        .list_policies("acme")
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.spec.name)
        .collect();
    assert_eq!(names, ["alpha", "zeta"]);
    assert!(
        store.list_policies("other").await.unwrap().is_empty(),
        "per org"
    );
    assert!(store.get_policy("other", "zeta").await.unwrap().is_none());
    assert!(store
        .delete_policy("acme", "zeta", &a("policy.delete", "policy:zeta"))
        .await
        .unwrap());
    assert!(!store
        .delete_policy("acme", "zeta", &a("policy.delete", "policy:zeta"))
        .await
        .unwrap());
    assert!(store.get_policy("acme", "zeta").await.unwrap().is_none());
    let actions: Vec<String> = store
        .list_audit(Some("acme"), None, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.entry.target == "policy:zeta")
        .map(|r| r.entry.action)
        .collect();
    assert_eq!(actions.len(), 3, "two puts and one delete: {actions:?}");
}

pub async fn policy_holds_record_evaluations_and_lift_on_override(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let a = |action: &str, target: &str| audit(Some("acme"), action, target);
    let auto = StackSpec::from_input(StackInput {
        id: "auto".into(),
        repository: "github:acme/infra".into(),
        autodeploy: true,
        ..Default::default()
    })
    .unwrap();
    store
        .create_stack("acme", &auto, &a("stack.create", "auto"))
        .await
        .unwrap();
    let r = runner(&*store, "runner-1").await;
    store
        .create_run(&new_run("run-1", "auto", RunKind::Tracked), None)
        .await
        .unwrap();
    let leased = store.lease_run(&r).await.unwrap().unwrap();
    store
        .run_event("run-1", &ev(Event::PhaseStarted, leased.fencing))
        .await
        .unwrap();
    // The plan JSON is kept until the plan is reported, for the policies to read.
    store
        .put_run_plan_json("run-1", leased.fencing, b"{\"format_version\":\"1.0\"}")
        .await
        .unwrap();
    assert!(matches!(
        store
            .put_run_plan_json("run-1", leased.fencing + 1, b"{}")
            .await,
        Err(StoreError::Fenced { .. })
    ));
    assert_eq!(
        store.get_run_plan_json("run-1").await.unwrap().as_deref(),
        Some(&b"{\"format_version\":\"1.0\"}"[..])
    );
    let mut planned = ev(
        Event::PlanFinished {
            changes: true,
            policy: Verdict::Override,
        },
        leased.fencing,
    );
    planned.update.reason = Some("denied by policy no-destroy".into());
    planned.update.policy_evaluations = vec![
        evaluation(
            "no-destroy",
            Mode::SoftMandatory,
            Outcome::Deny,
            "destroys db",
        ),
        evaluation(
            "big-change",
            Mode::HardMandatory,
            Outcome::RequireApproval,
            "12 changes",
        ),
        evaluation("tags", Mode::Advisory, Outcome::Warn, "no owner tag"),
    ];
    let held = store.run_event("run-1", &planned).await.unwrap().run;
    // Held even though the stack autodeploys; not in the inbox while the deny holds.
    assert_eq!(
        (held.state, held.policy_hold),
        (RunState::Unconfirmed, Verdict::Override)
    );
    assert_eq!(held.reason.as_deref(), Some("denied by policy no-destroy"));
    assert!(
        store.get_run_plan_json("run-1").await.unwrap().is_none(),
        "read once, then gone"
    );
    assert!(store
        .pending_approvals("acme", None, 10)
        .await
        .unwrap()
        .is_empty());
    let recorded = store.policy_evaluations("run-1").await.unwrap();
    assert_eq!(recorded.len(), 3);
    assert_eq!(recorded[0].evaluation, planned.update.policy_evaluations[0]);
    assert_eq!(recorded[2].evaluation.warn, ["no owner tag"]);
    assert!(recorded
        .iter()
        .all(|e| e.subject == "run-1" && e.overridden.is_none()));
    // A confirm cannot lift a soft-mandatory deny.
    let confirm = RunEventInput {
        event: Event::Confirm,
        fencing: None,
        update: RunUpdate::default(),
        audit: None,
    };
    assert!(matches!(
        store.run_event("run-1", &confirm).await,
        Err(StoreError::InvalidTransition(_))
    ));

    // The override: the deny is marked, the approval another policy asked for remains.
    let out = store
        .override_run_policies(
            "acme",
            "run-1",
            "user:admin",
            "the db is a copy",
            &a("run.policy_override", "run:run-1"),
        )
        .await
        .unwrap();
    assert_eq!(
        (out.run.state, out.run.policy_hold),
        (RunState::Unconfirmed, Verdict::Approval)
    );
    let recorded = store.policy_evaluations("run-1").await.unwrap();
    let o = recorded[0]
        .overridden
        .as_ref()
        .expect("the soft deny is overridden");
    assert_eq!(
        (o.by.as_str(), o.reason.as_str()),
        ("user:admin", "the db is a copy")
    );
    assert!(recorded[1].overridden.is_none() && recorded[2].overridden.is_none());
    // Now in the approvals inbox, gated by no environment.
    let pending = store.pending_approvals("acme", None, 10).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].subject, "run-1");
    assert!(pending[0].environments.is_empty(), "{pending:?}");
    // Nothing left to override.
    assert!(store
        .override_run_policies(
            "acme",
            "run-1",
            "user:admin",
            "again",
            &a("run.policy_override", "run:run-1")
        )
        .await
        .is_err());
    // Approved: it applies, and the hold is gone.
    let (_, outcome) = store
        .decide_approval(&ApprovalDecisionInput {
            org: "acme".into(),
            subject: "run-1".into(),
            decision: bosun_core::approval::Decision::Approve,
            decided_by: "user:other".into(),
            comment: None,
            audit: a("approval.approve", "run:run-1"),
        })
        .await
        .unwrap();
    let ApprovalOutcome::StackRun(run) = outcome else {
        panic!("a stack run was decided")
    };
    assert_eq!(
        (run.state, run.policy_hold),
        (RunState::Applying, Verdict::Pass)
    );
    assert!(store
        .pending_approvals("acme", None, 10)
        .await
        .unwrap()
        .is_empty());

    // A stack whose environment requires approval, held by a soft deny: not in the inbox
    // until the override; then there, gated by its environment.
    store
        .create_environment(
            &environment("acme", "prod", true),
            &a("environment.create", "prod"),
        )
        .await
        .unwrap();
    let gated = StackSpec::from_input(StackInput {
        id: "gated".into(),
        repository: "github:acme/infra".into(),
        environment: Some("prod".into()),
        ..Default::default()
    })
    .unwrap();
    store
        .create_stack("acme", &gated, &a("stack.create", "gated"))
        .await
        .unwrap();
    store
        .create_run(&new_run("run-2", "gated", RunKind::Tracked), None)
        .await
        .unwrap();
    // run-1's apply phase is leased first (it waits for a runner too).
    let mut leased = store.lease_run(&r).await.unwrap().unwrap();
    if leased.id == "run-1" {
        leased = store.lease_run(&r).await.unwrap().unwrap();
    }
    assert_eq!(leased.id, "run-2");
    store
        .run_event("run-2", &ev(Event::PhaseStarted, leased.fencing))
        .await
        .unwrap();
    let mut planned = ev(
        Event::PlanFinished {
            changes: true,
            policy: Verdict::Override,
        },
        leased.fencing,
    );
    planned.update.policy_evaluations = vec![evaluation(
        "no-deletes",
        Mode::SoftMandatory,
        Outcome::Deny,
        "x deleted",
    )];
    store.run_event("run-2", &planned).await.unwrap();
    assert!(store
        .pending_approvals("acme", None, 10)
        .await
        .unwrap()
        .is_empty());
    store
        .override_run_policies(
            "acme",
            "run-2",
            "user:admin",
            "fine",
            &a("run.policy_override", "run:run-2"),
        )
        .await
        .unwrap();
    let pending = store.pending_approvals("acme", None, 10).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(
        (pending[0].subject.as_str(), pending[0].environments.clone()),
        ("run-2", vec!["prod".to_string()])
    );
}

pub async fn trigger_evaluations_are_recorded_with_the_delivery_on_its_runs(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let mut trig = evaluation("modules", Mode::HardMandatory, Outcome::Trigger, "");
    trig.point = Point::Trigger;
    trig.warn.clear();
    trig.trigger = vec!["modules/vpc changed: every network stack runs".into()];
    let mut push = delivery("guid-trigger", "push");
    push.runs = vec![pr_run("r-trig", "net", RunKind::Tracked, None)];
    push.decisions = vec![decision(
        "net",
        Some("r-trig"),
        "triggered by policy modules: modules/vpc changed",
    )];
    push.evaluations = vec![RunEvaluations {
        run_id: "r-trig".into(),
        evaluations: vec![trig.clone()],
    }];
    recorded(store.record_delivery(&push).await.unwrap());
    let stored = store.policy_evaluations("r-trig").await.unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].evaluation, trig, "skip and trigger messages kept");

    // Evaluations name one of the delivery's runs, or nothing of it is recorded.
    let mut stray = delivery("guid-stray", "push");
    stray.runs = vec![pr_run("r-stray", "net", RunKind::Tracked, None)];
    stray.decisions = vec![decision("net", Some("r-stray"), "triggered")];
    stray.evaluations = vec![RunEvaluations {
        run_id: "r-trig".into(),
        evaluations: vec![trig],
    }];
    assert!(matches!(
        store.record_delivery(&stray).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(store.get_run("r-stray").await.unwrap().is_none());
    assert!(store
        .find_delivery(DeliverySource::Github, "guid-stray")
        .await
        .unwrap()
        .is_none());
    assert_eq!(store.policy_evaluations("r-trig").await.unwrap().len(), 1);
}
