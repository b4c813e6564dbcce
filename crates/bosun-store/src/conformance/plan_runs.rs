//! Conformance cases for plan runs: the concurrency guard, pages, leases and results, and
//! aborted and stale runs.

use super::*;

fn host_result(step: i64, host: &str, status: &str) -> PlanHostResultRecord {
    PlanHostResultRecord {
        step,
        step_name: format!("step {step}"),
        module: "command".into(),
        host: host.into(),
        status: status.into(),
        ignored: false,
        changed: Some(status == "changed"),
        exit_code: Some(0),
        stdout: format!("out {host}"),
        stderr: String::new(),
        duration_ms: 12,
        message: "ran".into(),
        diff: None,
    }
}

pub async fn plan_runs_listed_newest_first_page_by_page(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    seed_org(&*store, "other").await;
    let a = audit(Some("acme"), "plan_run.create", "plan:app-config");
    // Seven runs (overlap allowed), some created in the same millisecond; one of another
    // plan and one of another org.
    let mut ids = Vec::new();
    for i in 0..7 {
        let mut run = plan_run(&format!("prun-page-{i}"), &["web-1"]);
        run.concurrent = true;
        store.create_plan_run(&run, &a).await.unwrap();
        ids.push(run.id);
    }
    let mut backup = plan_run("prun-backup", &["db"]);
    backup.plan = "backup".into();
    store.create_plan_run(&backup, &a).await.unwrap();
    let mut theirs = plan_run("prun-theirs", &["web-1"]);
    theirs.org = "other".into();
    store
        .create_plan_run(
            &theirs,
            &audit(Some("other"), "plan_run.create", "plan:app-config"),
        )
        .await
        .unwrap();
    let page = |before: Option<&'static str>, limit: u32| {
        let store = store.clone();
        async move {
            store
                .list_plan_runs("acme", Some("app-config"), before, limit)
                .await
                .unwrap()
                .into_iter()
                .map(|r| r.id)
                .collect::<Vec<_>>()
        }
    };
    // Newest first: pages of three follow on without a gap or a repeat.
    let all = page(None, 100).await;
    assert_eq!(all.len(), 7);
    let mut walked = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let got = store
            .list_plan_runs("acme", Some("app-config"), cursor.as_deref(), 3)
            .await
            .unwrap();
        if got.is_empty() {
            break;
        }
        cursor = got.last().map(|r| r.id.clone());
        walked.extend(got.into_iter().map(|r| r.id));
    }
    assert_eq!(walked, all);
    let mut sorted = ids.clone();
    sorted.sort();
    let mut seen = walked.clone();
    seen.sort();
    assert_eq!(seen, sorted);
    // A cursor that is no run of the org lists nothing (it never restarts the list).
    assert!(page(Some("prun-nope"), 100).await.is_empty());
    assert!(page(Some("prun-theirs"), 100).await.is_empty());
    // Without a plan: every plan of the org (not another org's), paged the same way.
    let org_all: Vec<String> = store
        .list_plan_runs("acme", None, None, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(org_all.len(), 8);
    assert!(org_all.contains(&"prun-backup".to_string()));
    let at = org_all.iter().position(|id| *id == all[2]).unwrap();
    let after: Vec<String> = store
        .list_plan_runs("acme", None, Some(&all[2]), 100)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(after, org_all[at + 1..]);
}

pub async fn plan_runs_guard_refuses_overlap_atomically(store: Arc<dyn Store>) {
    use bosun_core::plan_run::{PlanRunEvent as E, PlanRunState as S};
    seed_org(&*store, "acme").await;
    let a = audit(Some("acme"), "plan_run.create", "plan:app-config");
    let first = store
        .create_plan_run(&plan_run("prun-1", &["web-1", "web-2", "db"]), &a)
        .await
        .unwrap();
    assert_eq!((first.state, first.needs_lease), (S::Queued, true));
    assert_eq!(first.hosts, ["web-1", "web-2", "db"]);
    assert_eq!(first.inputs["release"], json!("2.0"));
    assert_eq!(first.plan_version, 3);
    let refused = store
        .create_plan_run(&plan_run("prun-2", &["web-2", "cache", "web-1"]), &a)
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, StoreError::RunInProgress { hosts, held_by }
            if hosts == &["web-1", "web-2"] && held_by == &[("prun-1".to_string(), "queued".to_string())]),
        "{refused:?}"
    );
    assert_eq!(
        refused.to_string(),
        "Already has a run in progress on the same targets: web-1, web-2 — held by run prun-1 \
         (queued: `bosun plan-run show prun-1`)"
    );
    assert!(store.get_plan_run("prun-2").await.unwrap().is_none());
    // Disjoint hosts, another plan, or a plan allowing overlap: created.
    store
        .create_plan_run(&plan_run("prun-3", &["cache"]), &a)
        .await
        .unwrap();
    let mut other = plan_run("prun-4", &["web-1"]);
    other.plan = "backup".into();
    store.create_plan_run(&other, &a).await.unwrap();
    let mut concurrent = plan_run("prun-5", &["web-1"]);
    concurrent.concurrent = true;
    store.create_plan_run(&concurrent, &a).await.unwrap();
    // A gated run starts paused, and a paused run still holds its hosts.
    let mut gated = plan_run("prun-6", &["db-2"]);
    gated.gated_environments = vec!["prod".into()];
    let paused = store.create_plan_run(&gated, &a).await.unwrap();
    assert_eq!((paused.state, paused.needs_lease), (S::Paused, false));
    assert!(matches!(
        store
            .create_plan_run(&plan_run("prun-7", &["db-2"]), &a)
            .await,
        Err(StoreError::RunInProgress { .. })
    ));
    // Once the first run ends, its hosts are free again.
    let aborted = store
        .plan_run_event("prun-1", &plan_event(E::Abort, None))
        .await
        .unwrap();
    assert_eq!(aborted.state, S::Aborted);
    assert!(aborted.ended_at.is_some());
    store
        .create_plan_run(&plan_run("prun-8", &["web-2"]), &a)
        .await
        .unwrap();

    // Racing creations over the same host: exactly one passes.
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        let a = a.clone();
        tasks.push(tokio::spawn(async move {
            store
                .create_plan_run(&plan_run(&format!("prun-race-{i}"), &["race-host"]), &a)
                .await
        }));
    }
    let mut created = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => created += 1,
            Err(StoreError::RunInProgress { hosts, .. }) => assert_eq!(hosts, ["race-host"]),
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(created, 1);
    let listed = store
        .list_plan_runs("acme", Some("app-config"), None, 100)
        .await
        .unwrap();
    assert!(listed.iter().all(|r| r.plan == "app-config"));
    assert_eq!(
        listed
            .iter()
            .filter(|r| r.id.starts_with("prun-race"))
            .count(),
        1
    );
}

pub async fn plan_runs_lease_fence_results_and_settle(store: Arc<dyn Store>) {
    use bosun_core::plan_run::{PlanRunEvent as E, PlanRunState as S};
    seed_org(&*store, "acme").await;
    seed_org(&*store, "other").await;
    let a = audit(Some("acme"), "plan_run.create", "plan:app-config");
    store
        .create_plan_run(&plan_run("prun-1", &["web-1", "web-2"]), &a)
        .await
        .unwrap();
    // A pool of another org does not see it.
    let mut foreign = runner(&*store, "r-other").await;
    foreign.org = Some("other".into());
    assert!(store.lease_plan_run(&foreign).await.unwrap().is_none());
    let r = runner(&*store, "r1").await;
    let leased = store.lease_plan_run(&r).await.unwrap().unwrap();
    assert_eq!(leased.id, "prun-1");
    assert_eq!(
        (leased.state, leased.leased, leased.started),
        (S::Running, true, false)
    );
    assert_eq!(leased.runner_id.as_deref(), Some("r1"));
    assert!(leased.fencing > 0);
    // Holding a plan run makes a runner busy, as a stack run does.
    assert!(store.busy_runners().await.unwrap().contains("r1"));
    assert!(store.lease_plan_run(&r).await.unwrap().is_none());
    let f = leased.fencing;
    // A wrong fencing number moves nothing.
    assert!(matches!(
        store
            .plan_run_event("prun-1", &plan_event(E::Started, Some(f + 1)))
            .await,
        Err(StoreError::Fenced { .. })
    ));
    assert!(matches!(
        store.plan_run_heartbeat("prun-1", f + 1).await,
        Err(StoreError::Fenced { .. })
    ));
    let started = store
        .plan_run_event("prun-1", &plan_event(E::Started, Some(f)))
        .await
        .unwrap();
    assert!(started.started);
    assert!(!store.plan_run_heartbeat("prun-1", f).await.unwrap());
    // Results per step and host; a resend replaces, order follows the run's hosts.
    store
        .put_plan_run_results(
            "prun-1",
            f,
            &[host_result(1, "web-2", "ok"), host_result(1, "web-1", "ok")],
        )
        .await
        .unwrap();
    store
        .put_plan_run_results("prun-1", f, &[host_result(1, "web-2", "changed")])
        .await
        .unwrap();
    assert!(matches!(
        store
            .put_plan_run_results("prun-1", f + 1, &[host_result(2, "web-1", "ok")])
            .await,
        Err(StoreError::Fenced { .. })
    ));
    let results = store.plan_run_results("prun-1").await.unwrap();
    let seen: Vec<(i64, &str, &str)> = results
        .iter()
        .map(|r| (r.step, r.host.as_str(), r.status.as_str()))
        .collect();
    assert_eq!(seen, [(1, "web-1", "ok"), (1, "web-2", "changed")]);
    assert_eq!(results[1], host_result(1, "web-2", "changed"));
    // The end, with the report kept.
    let mut done = plan_event(E::Finished { ok: false }, Some(f));
    done.reason = Some("step 2 failed on web-1".into());
    done.report = Some(json!({"unresolved": []}));
    let ended = store.plan_run_event("prun-1", &done).await.unwrap();
    assert_eq!((ended.state, ended.leased), (S::Failed, false));
    assert!(!store.busy_runners().await.unwrap().contains("r1"));
    assert_eq!(ended.reason.as_deref(), Some("step 2 failed on web-1"));
    assert_eq!(ended.report, Some(json!({"unresolved": []})));
    assert!(ended.ended_at.is_some());
    // The settled run is fenced for its old runner, and refuses more transitions.
    assert!(matches!(
        store.plan_run_heartbeat("prun-1", f).await,
        Err(StoreError::Fenced { .. })
    ));
    assert!(matches!(
        store
            .plan_run_event("prun-1", &plan_event(E::Abort, None))
            .await,
        Err(StoreError::InvalidPlanTransition(_))
    ));
    // Logs: numbered, idempotent, fenced.
    store
        .append_plan_run_logs("prun-1", f, &[(0, "a\n".into()), (1, "b\n".into())])
        .await
        .unwrap();
    store
        .append_plan_run_logs("prun-1", f, &[(1, "B\n".into()), (2, "c\n".into())])
        .await
        .unwrap();
    assert!(matches!(
        store
            .append_plan_run_logs("prun-1", f + 1, &[(3, "x".into())])
            .await,
        Err(StoreError::Fenced { .. })
    ));
    assert_eq!(store.next_plan_run_log_seq("prun-1").await.unwrap(), 3);
    let logs = store
        .read_plan_run_logs("prun-1", Some(0), 10)
        .await
        .unwrap();
    let texts: Vec<(i64, &str)> = logs.iter().map(|c| (c.seq, c.text.as_str())).collect();
    assert_eq!(texts, [(1, "b\n"), (2, "c\n")]);
    assert!(logs.iter().all(|c| c.at.is_some() && c.phase.is_none()));
}

pub async fn plan_runs_abort_stale_and_requeue(store: Arc<dyn Store>) {
    use bosun_core::plan_run::{PlanRunEvent as E, PlanRunState as S};
    seed_org(&*store, "acme").await;
    let a = audit(Some("acme"), "plan_run.create", "plan:app-config");
    let r = runner(&*store, "r1").await;
    // A lease that never started goes back to the queue, with a new fencing number next time.
    store
        .create_plan_run(&plan_run("prun-q", &["h1"]), &a)
        .await
        .unwrap();
    let l1 = store.lease_plan_run(&r).await.unwrap().unwrap();
    let stale = store
        .stale_plan_runs(Utc::now() + Duration::seconds(1))
        .await
        .unwrap();
    assert_eq!(
        stale.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["prun-q"]
    );
    let requeued = store
        .plan_run_event("prun-q", &plan_event(E::Requeue, Some(l1.fencing)))
        .await
        .unwrap();
    assert_eq!(
        (requeued.state, requeued.needs_lease, requeued.leased),
        (S::Queued, true, false)
    );
    let l2 = store.lease_plan_run(&r).await.unwrap().unwrap();
    assert!(l2.fencing > l1.fencing);
    // Started, some progress, then the runner goes silent: interrupted, progress kept.
    store
        .plan_run_event("prun-q", &plan_event(E::Started, Some(l2.fencing)))
        .await
        .unwrap();
    store
        .put_plan_run_results("prun-q", l2.fencing, &[host_result(1, "h1", "changed")])
        .await
        .unwrap();
    let interrupted = store
        .plan_run_event("prun-q", &plan_event(E::Stale, Some(l2.fencing)))
        .await
        .unwrap();
    assert_eq!(
        (interrupted.state, interrupted.leased),
        (S::Interrupted, false)
    );
    assert!(interrupted.reason.unwrap().contains("stopped reporting"));
    assert_eq!(store.plan_run_results("prun-q").await.unwrap().len(), 1);
    assert!(store
        .stale_plan_runs(Utc::now() + Duration::seconds(1))
        .await
        .unwrap()
        .is_empty());

    // Abort while a runner executes: settled at once, the heartbeat says stop, and the
    // runner's acknowledgement releases the lease.
    store
        .create_plan_run(&plan_run("prun-a", &["h1"]), &a)
        .await
        .unwrap();
    let l = store.lease_plan_run(&r).await.unwrap().unwrap();
    store
        .plan_run_event("prun-a", &plan_event(E::Started, Some(l.fencing)))
        .await
        .unwrap();
    let mut abort = plan_event(E::Abort, None);
    abort.reason = Some("aborted by alice".into());
    abort.audit = Some(audit(Some("acme"), "plan_run.abort", "plan_run:prun-a"));
    let aborted = store.plan_run_event("prun-a", &abort).await.unwrap();
    assert_eq!(
        (aborted.state, aborted.leased, aborted.cancel_requested),
        (S::Aborted, true, true)
    );
    assert!(aborted.ended_at.is_some());
    // The guard no longer counts it.
    store
        .create_plan_run(&plan_run("prun-b", &["h1"]), &a)
        .await
        .unwrap();
    assert!(store.plan_run_heartbeat("prun-a", l.fencing).await.unwrap());
    let released = store
        .plan_run_event("prun-a", &plan_event(E::AbortAcknowledged, Some(l.fencing)))
        .await
        .unwrap();
    assert_eq!((released.state, released.leased), (S::Aborted, false));
    assert_eq!(released.reason.as_deref(), Some("aborted by alice"));
    assert_eq!(released.ended_at, aborted.ended_at);
    assert!(matches!(
        store.plan_run_heartbeat("prun-a", l.fencing).await,
        Err(StoreError::Fenced { .. })
    ));
    let actions = audit_actions(&*store, "acme").await;
    assert!(actions.iter().any(|x| x == "plan_run.abort"), "{actions:?}");
}

/// A gated run of `hosts` that names its preview `preview`.
fn previewed_run(id: &str, preview: &str, hosts: &[&str]) -> NewPlanRun {
    let mut run = plan_run(id, hosts);
    run.gated_environments = vec!["prod".into()];
    run.preview = Some(preview.into());
    run
}

fn decision(subject: &str, decision: bosun_core::approval::Decision) -> ApprovalDecisionInput {
    ApprovalDecisionInput {
        org: "acme".into(),
        subject: subject.into(),
        decision,
        decided_by: "user:bob".into(),
        comment: None,
        audit: audit(
            Some("acme"),
            "approval.decide",
            &format!("plan_run:{subject}"),
        ),
    }
}

pub async fn plan_runs_a_paused_run_is_previewed_until_it_is_decided(store: Arc<dyn Store>) {
    use bosun_core::approval::Decision;
    use bosun_core::plan_run::{PlanRunEvent as E, PlanRunState as S};
    seed_org(&*store, "acme").await;
    let a = audit(Some("acme"), "plan_run.create", "plan:app-config");
    // A gated run is created paused with its preview: a dry run of the same version,
    // hosts and inputs, queued at once, each naming the other. The guard does not refuse
    // the preview because of its own run.
    let run = store
        .create_plan_run(&previewed_run("prun-g1", "prun-p1", &["web-1", "db"]), &a)
        .await
        .unwrap();
    assert_eq!((run.state, run.needs_lease), (S::Paused, false));
    assert_eq!(run.preview.as_deref(), Some("prun-p1"));
    assert_eq!(run.preview_of, None);
    let preview = store.get_plan_run("prun-p1").await.unwrap().unwrap();
    assert_eq!((preview.state, preview.needs_lease), (S::Queued, true));
    assert!(preview.dry_run);
    assert!(preview.gated_environments.is_empty());
    assert_eq!(preview.preview_of.as_deref(), Some("prun-g1"));
    assert_eq!(preview.preview, None);
    assert_eq!(preview.created_at, run.created_at);
    assert_eq!(
        (
            &preview.hosts,
            &preview.inputs,
            preview.plan_version,
            &preview.source,
            preview.trigger,
            &preview.requested_by
        ),
        (
            &run.hosts,
            &run.inputs,
            run.plan_version,
            &run.source,
            run.trigger,
            &run.requested_by
        )
    );
    // The inbox lists the run (not its preview) and names its preview.
    let pending = store.pending_approvals("acme", None, 100).await.unwrap();
    let listed: Vec<(&str, Option<&str>)> = pending
        .iter()
        .map(|p| (p.subject.as_str(), p.preview.as_deref()))
        .collect();
    assert_eq!(listed, [("prun-g1", Some("prun-p1"))]);
    // Other runs stay guarded, and the refusal names the run people decide, not its
    // preview.
    let refused = store
        .create_plan_run(&plan_run("prun-x", &["db"]), &a)
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, StoreError::RunInProgress { hosts, held_by }
            if hosts == &["db"] && held_by == &[("prun-g1".to_string(), "paused".to_string())]),
        "{refused:?}"
    );
    // Only a real run that starts paused gets a preview: a queued run or a dry run
    // ignores the id.
    let mut plain = plan_run("prun-q", &["cache"]);
    plain.preview = Some("prun-q-preview".into());
    let plain = store.create_plan_run(&plain, &a).await.unwrap();
    assert_eq!(plain.preview, None);
    let mut dry = previewed_run("prun-d", "prun-d-preview", &["mail"]);
    dry.dry_run = true;
    dry.gated_environments = Vec::new();
    assert_eq!(store.create_plan_run(&dry, &a).await.unwrap().preview, None);
    for id in ["prun-q-preview", "prun-d-preview"] {
        assert!(store.get_plan_run(id).await.unwrap().is_none(), "{id}");
    }

    // Approved while its preview is still queued: the preview is aborted in the same
    // transaction, saying why, and the real run is the one a runner leases.
    let (_, outcome) = store
        .decide_approval(&decision("prun-g1", Decision::Approve))
        .await
        .unwrap();
    assert!(matches!(outcome, ApprovalOutcome::PlanRun(r) if r.state == S::Queued));
    let preview = store.get_plan_run("prun-p1").await.unwrap().unwrap();
    assert_eq!(
        (preview.state, preview.needs_lease, preview.leased),
        (S::Aborted, false, false)
    );
    assert_eq!(
        preview.reason.as_deref(),
        Some("its run prun-g1 was approved before this preview ended")
    );
    assert!(preview.ended_at.is_some());
    let r = runner(&*store, "r1").await;
    let mut leased = Vec::new();
    while let Some(l) = store.lease_plan_run(&r).await.unwrap() {
        leased.push(l.id.clone());
        store
            .plan_run_event(&l.id, &plan_event(E::Started, Some(l.fencing)))
            .await
            .unwrap();
        store
            .plan_run_event(
                &l.id,
                &plan_event(E::Finished { ok: true }, Some(l.fencing)),
            )
            .await
            .unwrap();
    }
    leased.sort();
    assert_eq!(leased, ["prun-d", "prun-g1", "prun-q"]);

    // Rejected while its preview is running: the preview is aborted and its runner told
    // to stop.
    store
        .create_plan_run(&previewed_run("prun-g2", "prun-p2", &["web-2"]), &a)
        .await
        .unwrap();
    let l = store.lease_plan_run(&r).await.unwrap().unwrap();
    assert_eq!(l.id, "prun-p2");
    store
        .plan_run_event("prun-p2", &plan_event(E::Started, Some(l.fencing)))
        .await
        .unwrap();
    let (_, outcome) = store
        .decide_approval(&decision("prun-g2", Decision::Reject))
        .await
        .unwrap();
    assert!(matches!(outcome, ApprovalOutcome::PlanRun(r) if r.state == S::Rejected));
    let preview = store.get_plan_run("prun-p2").await.unwrap().unwrap();
    assert_eq!(
        (preview.state, preview.leased, preview.cancel_requested),
        (S::Aborted, true, true)
    );
    assert_eq!(
        preview.reason.as_deref(),
        Some("its run prun-g2 was rejected before this preview ended")
    );
    assert!(store
        .plan_run_heartbeat("prun-p2", l.fencing)
        .await
        .unwrap());
    store
        .plan_run_event(
            "prun-p2",
            &plan_event(E::AbortAcknowledged, Some(l.fencing)),
        )
        .await
        .unwrap();

    // Aborted while its preview is queued: the same.
    store
        .create_plan_run(&previewed_run("prun-g3", "prun-p3", &["web-3"]), &a)
        .await
        .unwrap();
    let aborted = store
        .plan_run_event("prun-g3", &plan_event(E::Abort, None))
        .await
        .unwrap();
    assert_eq!(aborted.state, S::Aborted);
    let preview = store.get_plan_run("prun-p3").await.unwrap().unwrap();
    assert_eq!(preview.state, S::Aborted);
    assert_eq!(
        preview.reason.as_deref(),
        Some("its run prun-g3 was aborted before this preview ended")
    );

    // A preview that ended before the decision keeps its outcome.
    store
        .create_plan_run(&previewed_run("prun-g4", "prun-p4", &["web-4"]), &a)
        .await
        .unwrap();
    let l = store.lease_plan_run(&r).await.unwrap().unwrap();
    assert_eq!(l.id, "prun-p4");
    store
        .plan_run_event("prun-p4", &plan_event(E::Started, Some(l.fencing)))
        .await
        .unwrap();
    let mut done = plan_event(E::Finished { ok: true }, Some(l.fencing));
    done.report = Some(json!({"unresolved": []}));
    store.plan_run_event("prun-p4", &done).await.unwrap();
    store
        .decide_approval(&decision("prun-g4", Decision::Approve))
        .await
        .unwrap();
    let preview = store.get_plan_run("prun-p4").await.unwrap().unwrap();
    assert_eq!((preview.state, preview.reason), (S::Succeeded, None));
}

pub async fn plan_runs_an_approved_run_waits_for_its_previews_runner_to_let_go(
    store: Arc<dyn Store>,
) {
    use bosun_core::approval::Decision;
    use bosun_core::plan_run::{PlanRunEvent as E, PlanRunState as S};
    seed_org(&*store, "acme").await;
    let a = audit(Some("acme"), "plan_run.create", "plan:app-config");
    store
        .create_plan_run(&previewed_run("prun-g", "prun-p", &["web-1"]), &a)
        .await
        .unwrap();
    let r1 = runner(&*store, "r1").await;
    let r2 = runner(&*store, "r2").await;
    let l = store.lease_plan_run(&r1).await.unwrap().unwrap();
    assert_eq!(l.id, "prun-p");
    store
        .plan_run_event("prun-p", &plan_event(E::Started, Some(l.fencing)))
        .await
        .unwrap();
    store
        .decide_approval(&decision("prun-g", Decision::Approve))
        .await
        .unwrap();
    // The approved run waits while the aborted preview's runner still holds it…
    let run = store.get_plan_run("prun-g").await.unwrap().unwrap();
    assert_eq!((run.state, run.needs_lease), (S::Queued, true));
    assert!(store.lease_plan_run(&r2).await.unwrap().is_none());
    // …and is leased once that runner stopped.
    assert!(store.plan_run_heartbeat("prun-p", l.fencing).await.unwrap());
    store
        .plan_run_event("prun-p", &plan_event(E::AbortAcknowledged, Some(l.fencing)))
        .await
        .unwrap();
    let leased = store.lease_plan_run(&r2).await.unwrap().unwrap();
    assert_eq!(leased.id, "prun-g");
    assert!(!leased.dry_run);
}

pub async fn a_stacks_changed_outputs_record_plan_triggers_each_settled_by_one_run(
    store: Arc<dyn Store>,
) {
    seed_stack(&*store, "net").await;
    let a = audit(Some("acme"), "plan.save", "plan");
    for (name, outputs) in [
        ("watch-name", vec!["name".to_string()]),
        ("watch-other", vec!["other".to_string()]),
        ("watch-any", vec![]),
    ] {
        store
            .save_plan(
                &NewPlan {
                    org: "acme".into(),
                    name: name.into(),
                    source: format!("name: {name}\n"),
                    schedule: None,
                    on_stack_change: Some(("net".into(), outputs)),
                },
                &a,
            )
            .await
            .unwrap();
    }
    let net = bosun_core::graph::Node::stack("net");
    assert_eq!(
        store
            .dependency_graph("acme", &net)
            .await
            .unwrap()
            .downstream(&net)
            .map(|(n, _)| n.to_string())
            .collect::<Vec<_>>(),
        ["plan watch-any", "plan watch-name", "plan watch-other"]
    );
    let r = runner(&*store, "runner-1").await;
    // A run that wrote no state changed no output: no trigger.
    store
        .create_run(&new_run("t1", "net", RunKind::Tracked), None)
        .await
        .unwrap();
    run_phase(&*store, &r, "t1", Event::planned(false)).await;
    assert!(store.pending_plan_triggers(10).await.unwrap().is_empty());
    // An apply that changed outputs: one trigger per plan whose watch it matches.
    store
        .create_run(&new_run("t2", "net", RunKind::Tracked), None)
        .await
        .unwrap();
    run_phase(&*store, &r, "t2", Event::planned(true)).await;
    store
        .run_event(
            "t2",
            &RunEventInput {
                event: Event::Confirm,
                fencing: None,
                update: RunUpdate::default(),
                audit: None,
            },
        )
        .await
        .unwrap();
    let t2 = run_phase(&*store, &r, "t2", Event::ApplyFinished).await;
    assert_eq!(t2.state, RunState::Finished);
    let pending = store.pending_plan_triggers(10).await.unwrap();
    let seen: Vec<(&str, &str, Vec<String>)> = pending
        .iter()
        .map(|t| (t.plan.as_str(), t.run.as_str(), t.outputs.clone()))
        .collect();
    assert_eq!(
        seen,
        [
            (
                "watch-any",
                "t2",
                vec!["name".to_string(), "pw".to_string()]
            ),
            ("watch-name", "t2", vec!["name".to_string()]),
        ]
    );
    // A run settles its trigger in its creating transaction, once.
    let mut run = plan_run("prun-t1", &["web-1"]);
    run.plan = "watch-name".into();
    run.trigger = bosun_core::plan_run::PlanTrigger::Stack;
    run.upstream = Some(json!({"stack": "net", "run": "t2", "outputs": ["name"]}));
    run.settles_trigger = Some(pending[1].id);
    let created = store
        .create_plan_run(&run, &audit(Some("acme"), "plan_run.create", "plan"))
        .await
        .unwrap();
    assert_eq!(created.trigger, bosun_core::plan_run::PlanTrigger::Stack);
    assert_eq!(created.upstream, run.upstream);
    let again = NewPlanRun {
        id: "prun-t2".into(),
        ..run.clone()
    };
    assert!(matches!(
        store
            .create_plan_run(&again, &audit(Some("acme"), "plan_run.create", "plan"))
            .await,
        Err(StoreError::AlreadyExists(_))
    ));
    assert!(store.get_plan_run("prun-t2").await.unwrap().is_none());
    // A run that cannot resolve is created failed, before any step, and never leased.
    let failed = NewPlanRun {
        id: "prun-t3".into(),
        plan: "watch-any".into(),
        hosts: vec![],
        settles_trigger: Some(pending[0].id),
        failed: Some("stack \"net\" has no output \"servers\"".into()),
        ..run
    };
    let f = store
        .create_plan_run(&failed, &audit(Some("acme"), "plan_run.create", "plan"))
        .await
        .unwrap();
    assert_eq!(
        (f.state, f.needs_lease, f.reason.as_deref()),
        (
            bosun_core::plan_run::PlanRunState::Failed,
            false,
            Some("stack \"net\" has no output \"servers\"")
        )
    );
    assert!(f.ended_at.is_some());
    assert!(store.pending_plan_triggers(10).await.unwrap().is_empty());
}
