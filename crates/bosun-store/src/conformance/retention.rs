//! Conformance cases for retention: old state versions pruned, with everything a stack or
//! a run still needs kept.

use super::*;

/// The version numbers a stack has, newest first.
async fn versions(store: &dyn Store, stack: &str) -> Vec<i64> {
    store
        .list_state_versions("acme", stack, None, 100)
        .await
        .unwrap()
        .iter()
        .map(|v| v.version)
        .collect()
}

async fn write(store: &dyn Store, stack: &str, w: NewStateVersion) -> StateVersionMeta {
    store.write_state("acme", stack, &w, None).await.unwrap()
}

fn person(serial: u64) -> NewStateVersion {
    state_write(
        Writer::User("bob".into()),
        WriterLiveness::Person,
        None,
        serial,
        "L",
    )
}

pub async fn state_retention_keeps_the_newest_the_young_the_head_and_what_runs_name(
    store: Arc<dyn Store>,
) {
    for stack in ["net", "app", "web"] {
        seed_stack(&*store, stack).await;
    }
    // net: v1 feeds a run of app; v2–v4 plain; v5 recovered; v6 the head; v7 a late
    // write under bob's lock (not current).
    for serial in 1..=4 {
        write(&*store, "net", person(serial)).await;
    }
    let recovered = NewStateVersion {
        recovery_reason: Some("the server was away".into()),
        ..state_write(
            Writer::Run("r-cut-off".into()),
            WriterLiveness::Recovery,
            None,
            5,
            "L",
        )
    };
    assert!(write(&*store, "net", recovered).await.current);
    assert!(write(&*store, "net", person(6)).await.current);
    store
        .lock_state(
            "acme",
            "net",
            &state_lock("BOB", Writer::User("bob".into())),
        )
        .await
        .unwrap();
    let late = state_write(
        Writer::Run("r-dead".into()),
        WriterLiveness::EndedRun,
        Some("OLD"),
        7,
        "L",
    );
    let late = write(&*store, "net", late).await;
    assert!(late.late_write && !late.current);
    // app: two old versions, and a run executing now that was given net's v1.
    for serial in 1..=2 {
        write(&*store, "app", person(serial)).await;
    }
    store
        .create_run(&new_run("r-app", "app", RunKind::Tracked), None)
        .await
        .unwrap();
    let r = runner(&*store, "runner-1").await;
    let leased = store.lease_run(&r).await.unwrap().expect("r-app leased");
    let consumed = json!([{"stack": "net", "version": 1, "output": "name",
                           "variable": "net_name", "sensitive": false}]);
    assert!(store.set_run_consumed("r-app", &consumed).await.unwrap());
    let cutoff = past(Utc::now()).await;
    past(cutoff).await;
    // web: written after the cut-off, young whatever their number.
    for serial in 1..=3 {
        write(&*store, "web", person(serial)).await;
    }

    // Keep 3: net's v2–v4 go, two per transaction; v1 stays for the run that read it.
    assert_eq!(store.prune_state_versions(3, cutoff, 2).await.unwrap(), 3);
    assert_eq!(versions(&*store, "net").await, [7, 6, 5, 1]);
    // Keep 1: still nothing more of net — the late write is the newest, the head is
    // current, v5 was recovered, v1 is a run's input. app waits for its executing run;
    // web is young.
    assert_eq!(store.prune_state_versions(1, cutoff, 2).await.unwrap(), 0);
    assert_eq!(versions(&*store, "net").await, [7, 6, 5, 1]);
    assert_eq!(versions(&*store, "app").await, [2, 1]);
    assert_eq!(versions(&*store, "web").await, [3, 2, 1]);
    // What is kept reads as before; a pruned version is simply gone.
    let (v1, body) = store
        .state_version("acme", "net", Some(1))
        .await
        .unwrap()
        .expect("v1 kept");
    assert_eq!((v1.serial, body), (1, state_body(1, "L", "v1")));
    assert!(store
        .state_version("acme", "net", Some(2))
        .await
        .unwrap()
        .is_none());
    let head = store.state_head("acme", "net").await.unwrap();
    assert_eq!(head.current.map(|c| c.version), Some(6));
    // Keep 0 means keep 1: the newest version is never deleted.
    assert_eq!(store.prune_state_versions(0, cutoff, 2).await.unwrap(), 0);
    assert_eq!(versions(&*store, "net").await, [7, 6, 5, 1]);

    // The run ends: app's old version goes, its head stays. A new write numbers on.
    store
        .run_event("r-app", &ev(Event::PhaseFailed, leased.fencing))
        .await
        .unwrap();
    assert_eq!(store.prune_state_versions(1, cutoff, 2).await.unwrap(), 1);
    assert_eq!(versions(&*store, "app").await, [2]);
    assert_eq!(write(&*store, "app", person(3)).await.version, 3);
    // Everything older than now but the newest of each stack, once nothing else holds.
    let now = past(Utc::now()).await;
    assert_eq!(store.prune_state_versions(1, now, 1000).await.unwrap(), 3);
    assert_eq!(versions(&*store, "web").await, [3]);
    assert_eq!(versions(&*store, "app").await, [3]);
    assert_eq!(versions(&*store, "net").await, [7, 6, 5, 1]);
}

/// A stack run's whole log, read a page of `limit` at a time.
async fn whole_log(store: &dyn Store, run: &str, limit: u32) -> Vec<LogRecord> {
    let mut out: Vec<LogRecord> = Vec::new();
    loop {
        let page = store
            .read_logs(run, out.last().map(|c| c.seq), limit)
            .await
            .unwrap();
        let more = page.len() == limit as usize;
        out.extend(page);
        if !more {
            return out;
        }
    }
}

pub async fn run_logs_compressed_once_runs_end_read_the_same(store: Arc<dyn Store>) {
    use bosun_core::plan_run::PlanRunEvent as E;
    for stack in ["net", "web"] {
        seed_stack(&*store, stack).await;
    }
    let r = runner(&*store, "runner-1").await;
    // net's run writes 12 chunks and fails; web's run is still executing.
    store
        .create_run(&new_run("r-net", "net", RunKind::Tracked), None)
        .await
        .unwrap();
    let net = store.lease_run(&r).await.unwrap().expect("r-net");
    store
        .create_run(&new_run("r-web", "web", RunKind::Tracked), None)
        .await
        .unwrap();
    let web = store.lease_run(&r).await.unwrap().expect("r-web");
    let chunks: Vec<(i64, String)> = (0..12)
        .map(|i| {
            (
                i,
                format!("aws_instance.web[{i}]: Refreshing state... [id=i-{i:08}]\n"),
            )
        })
        .collect();
    store
        .append_logs("r-net", net.fencing, &chunks)
        .await
        .unwrap();
    store
        .append_logs("r-web", web.fencing, &chunks[..3])
        .await
        .unwrap();
    let before_end = past(Utc::now()).await;
    store
        .run_event("r-net", &ev(Event::PhaseFailed, net.fencing))
        .await
        .unwrap();
    // A plan run with three chunks, ended.
    let a = audit(Some("acme"), "plan_run.create", "plan:app-config");
    store
        .create_plan_run(&plan_run("prun-1", &["web-1"]), &a)
        .await
        .unwrap();
    let pr = store.lease_plan_run(&r).await.unwrap().expect("prun-1");
    store
        .append_plan_run_logs("prun-1", pr.fencing, &chunks[..3])
        .await
        .unwrap();
    store
        .plan_run_event("prun-1", &plan_event(E::Started, Some(pr.fencing)))
        .await
        .unwrap();
    store
        .plan_run_event(
            "prun-1",
            &plan_event(E::Finished { ok: true }, Some(pr.fencing)),
        )
        .await
        .unwrap();
    let net_log = whole_log(&*store, "r-net", 1000).await;
    let web_log = whole_log(&*store, "r-web", 1000).await;
    let plan_log = store.read_plan_run_logs("prun-1", None, 100).await.unwrap();
    assert_eq!(net_log.len(), 12);

    // Runs that ended after the cut-off wait; nothing is packed.
    assert_eq!(
        store.compress_run_logs(before_end, 5).await.unwrap(),
        (0, 0)
    );
    // Five chunks per transaction: net's twelve in three, the plan run's three; web's run
    // has not ended.
    let ended = past(Utc::now()).await;
    assert_eq!(store.compress_run_logs(ended, 5).await.unwrap(), (12, 3));
    assert_eq!(store.compress_run_logs(ended, 5).await.unwrap(), (0, 0));
    // Every reader gets the same chunks: whole, page by page, from the middle.
    assert_eq!(whole_log(&*store, "r-net", 1000).await, net_log);
    assert_eq!(whole_log(&*store, "r-net", 4).await, net_log);
    assert_eq!(whole_log(&*store, "r-net", 1).await, net_log);
    assert_eq!(
        store.read_logs("r-net", Some(6), 3).await.unwrap(),
        net_log[7..10]
    );
    assert_eq!(store.read_logs("r-net", Some(11), 3).await.unwrap(), []);
    assert_eq!(whole_log(&*store, "r-web", 1000).await, web_log);
    assert_eq!(
        store.read_plan_run_logs("prun-1", None, 100).await.unwrap(),
        plan_log
    );
    assert_eq!(
        store
            .read_plan_run_logs("prun-1", Some(0), 1)
            .await
            .unwrap(),
        plan_log[1..2]
    );
    assert_eq!(store.next_log_seq("r-net").await.unwrap(), 12);
    assert_eq!(store.next_plan_run_log_seq("prun-1").await.unwrap(), 3);

    // A late chunk after the end: a seq already packed keeps its first text, a new one
    // is stored, and a gap stays a gap until it is filled.
    store
        .append_logs(
            "r-net",
            net.fencing,
            &[
                (3, "rewritten\n".into()),
                (12, "late\n".into()),
                (14, "later\n".into()),
            ],
        )
        .await
        .unwrap();
    assert_eq!(store.next_log_seq("r-net").await.unwrap(), 15);
    let after = whole_log(&*store, "r-net", 5).await;
    let seqs: Vec<i64> = after.iter().map(|c| c.seq).collect();
    assert_eq!(seqs, (0..=12).chain([14]).collect::<Vec<_>>());
    assert_eq!(after[3], net_log[3]);
    assert_eq!(after[12].text, "late\n");
    // The run ended long since: its late chunks are packed at the next pass, in two
    // blocks (the gap ends the first).
    assert_eq!(store.compress_run_logs(ended, 5).await.unwrap(), (2, 0));
    assert_eq!(whole_log(&*store, "r-net", 1000).await, after);
    store
        .append_logs(
            "r-net",
            net.fencing,
            &[(13, "between\n".into()), (12, "again\n".into())],
        )
        .await
        .unwrap();
    let filled = whole_log(&*store, "r-net", 1000).await;
    let texts: Vec<&str> = filled[11..].iter().map(|c| c.text.as_str()).collect();
    assert_eq!(
        texts,
        [net_log[11].text.as_str(), "late\n", "between\n", "later\n"]
    );
    assert_eq!(filled[..12], net_log[..]);
    assert_eq!(store.compress_run_logs(ended, 5).await.unwrap(), (1, 0));
    assert_eq!(whole_log(&*store, "r-net", 2).await, filled);
    // The open run's log is still rows: nothing of it moved.
    assert_eq!(whole_log(&*store, "r-web", 1000).await, web_log);
}

/// Leases `id` (nothing else waiting), writes two log chunks, and returns the lease.
async fn leased_with_log(store: &dyn Store, r: &RunnerRecord, id: &str) -> RunRecord {
    let leased = store.lease_run(r).await.unwrap().expect("a run to lease");
    assert_eq!(leased.id, id);
    store
        .run_event(id, &ev(Event::PhaseStarted, leased.fencing))
        .await
        .unwrap();
    store
        .append_logs(
            id,
            leased.fencing,
            &[(0, "init\n".into()), (1, "plan\n".into())],
        )
        .await
        .unwrap();
    leased
}

pub async fn runs_summarised_past_the_horizon_keep_their_record(store: Arc<dyn Store>) {
    for stack in ["net", "web"] {
        seed_stack(&*store, stack).await;
    }
    // web: v1 and v2 (current), by a person.
    for serial in 1..=2 {
        let w = state_write(
            Writer::User("bob".into()),
            WriterLiveness::Person,
            None,
            serial,
            "L",
        );
        store.write_state("acme", "web", &w, None).await.unwrap();
    }
    let r = runner(&*store, "runner-1").await;
    // net/r1: a proposed run given web's v1, with a log, a saved plan and a summary.
    store
        .create_run(&new_run("r1", "net", RunKind::Proposed), None)
        .await
        .unwrap();
    let l1 = leased_with_log(&*store, &r, "r1").await;
    store.put_run_plan("r1", l1.fencing, b"PLAN").await.unwrap();
    let consumed = json!([{"stack": "web", "version": 1, "output": "name",
                           "variable": "name", "sensitive": false}]);
    assert!(store.set_run_consumed("r1", &consumed).await.unwrap());
    let summary = json!({"has_changes": true, "add": 1, "change": 2, "destroy": 0,
        "resource_changes": [{"address": "aws_instance.web", "action": "create"}],
        "output_changes": {"ip": "create"}});
    let planned = RunEventInput {
        update: RunUpdate {
            plan_summary: Some(summary),
            ..RunUpdate::default()
        },
        ..ev(Event::planned(true), l1.fencing)
    };
    let r1 = store.run_event("r1", &planned).await.unwrap().run;
    assert!(r1.state.is_terminal(), "{:?}", r1.state);
    // net/r2 wrote net's current version; net/r3 is net's latest run.
    store
        .create_run(&new_run("r2", "net", RunKind::Proposed), None)
        .await
        .unwrap();
    let l2 = leased_with_log(&*store, &r, "r2").await;
    let w = state_write(
        Writer::Run("r2".into()),
        WriterLiveness::LiveRun,
        None,
        1,
        "N",
    );
    assert!(
        store
            .write_state("acme", "net", &w, None)
            .await
            .unwrap()
            .current
    );
    store
        .run_event("r2", &ev(Event::PhaseFailed, l2.fencing))
        .await
        .unwrap();
    store
        .create_run(&new_run("r3", "net", RunKind::Proposed), None)
        .await
        .unwrap();
    let l3 = leased_with_log(&*store, &r, "r3").await;
    let before_end = past(Utc::now()).await;
    store
        .run_event("r3", &ev(Event::PhaseFailed, l3.fencing))
        .await
        .unwrap();
    // web/w1 ended; web/w2, after it, is still queued.
    store
        .create_run(&new_run("w1", "web", RunKind::Proposed), None)
        .await
        .unwrap();
    let lw = leased_with_log(&*store, &r, "w1").await;
    store
        .run_event("w1", &ev(Event::PhaseFailed, lw.fencing))
        .await
        .unwrap();
    store
        .create_run(&new_run("w2", "web", RunKind::Tracked), None)
        .await
        .unwrap();

    // Only r1 and w1 may go. Before the first cut-off only r1 and r2 had ended (r2 wrote
    // net's current version); then w1, one transaction each.
    assert_eq!(store.summarise_runs(before_end, 1).await.unwrap(), 1);
    let cutoff = past(Utc::now()).await;
    assert_eq!(store.summarise_runs(cutoff, 1).await.unwrap(), 1);
    assert_eq!(store.summarise_runs(cutoff, 1).await.unwrap(), 0);
    for (id, summarised) in [
        ("r1", true),
        ("r2", false),
        ("r3", false),
        ("w1", true),
        ("w2", false),
    ] {
        let run = store.get_run(id).await.unwrap().unwrap();
        assert_eq!(run.summarised_at.is_some(), summarised, "{id}");
        let logs = store.read_logs(id, None, 10).await.unwrap();
        assert_eq!(logs.is_empty(), summarised || id == "w2", "{id}: {logs:?}");
    }
    // r1 keeps what it was: state, kind, trigger, who, commit, timestamps, the counts.
    let after = store.get_run("r1").await.unwrap().unwrap();
    assert_eq!(
        (
            &after.state,
            &after.kind,
            &after.trigger,
            &after.triggered_by,
            &after.created_at
        ),
        (
            &r1.state,
            &r1.kind,
            &r1.trigger,
            &r1.triggered_by,
            &r1.created_at
        )
    );
    assert_eq!(
        after.plan_summary,
        Some(
            json!({"has_changes": true, "add": 1, "change": 2, "destroy": 0,
                    "resource_changes": [], "output_changes": {}})
        )
    );
    assert_eq!(after.consumed, None);
    assert_eq!(store.get_run_plan("r1").await.unwrap(), None);
    assert!(!store.run_phases("r1").await.unwrap().is_empty());
    // A late chunk finds no log to add to.
    store
        .append_logs("r1", l1.fencing, &[(2, "late\n".into())])
        .await
        .unwrap();
    assert_eq!(store.read_logs("r1", None, 10).await.unwrap(), []);
    // web's v1 is no run's input any more: retention may delete it now.
    let now = past(Utc::now()).await;
    assert_eq!(store.prune_state_versions(1, now, 10).await.unwrap(), 1);
}

/// VCS deliveries received before the horizon go, oldest first and a batch at a time,
/// with their trigger decisions and the redeliveries that repeat them; younger ones stay,
/// and so do the runs they started and the trigger-decision counts.
pub async fn vcs_deliveries_pruned_past_the_horizon_with_their_decisions(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    seed_stack(&*store, "app").await;
    let mut first = delivery("guid-1", "push");
    first.runs = vec![pr_run("r-push", "net", RunKind::Tracked, None)];
    first.decisions = vec![
        decision("net", Some("r-push"), "main.tf changed"),
        decision("app", None, "no watched path changed"),
    ];
    recorded(store.record_delivery(&first).await.unwrap());
    let mut second = delivery("guid-2", "push");
    second.decisions = vec![decision("net", None, "no watched path changed")];
    recorded(store.record_delivery(&second).await.unwrap());
    let old = store
        .find_delivery(DeliverySource::Github, "guid-2")
        .await
        .unwrap()
        .unwrap()
        .received_at;
    // The redelivery of the first comes later; a new delivery after the horizon.
    while Utc::now().timestamp_millis() <= old.timestamp_millis() {
        tokio::task::yield_now().await;
    }
    assert!(matches!(
        store.record_delivery(&first).await.unwrap(),
        DeliveryOutcome::Duplicate { .. }
    ));
    let mut young = delivery("guid-3", "push");
    young.decisions = vec![decision("net", None, "no watched path changed")];
    recorded(store.record_delivery(&young).await.unwrap());
    let counted = store.metrics().await.unwrap().trigger_decisions;

    let horizon = old + chrono::Duration::milliseconds(1);
    // Batches of one: the store goes on until a batch is short.
    assert_eq!(store.prune_deliveries(horizon, 1).await.unwrap(), 3);
    assert_eq!(store.prune_deliveries(horizon, 1).await.unwrap(), 0);
    for guid in ["guid-1", "guid-2"] {
        assert_eq!(
            store
                .find_delivery(DeliverySource::Github, guid)
                .await
                .unwrap(),
            None,
            "{guid}"
        );
    }
    let left: Vec<String> = store
        .list_triggers("acme", "net", None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.delivery.guid)
        .collect();
    assert_eq!(left, ["guid-3"]);
    assert!(store
        .list_triggers("acme", "app", None, 10)
        .await
        .unwrap()
        .is_empty());
    assert!(
        store.get_run("r-push").await.unwrap().is_some(),
        "runs stay"
    );
    assert_eq!(store.metrics().await.unwrap().trigger_decisions, counted);
}

/// Leases the next plan run (it must be `id`), stores one result on `host` with output and
/// a diff, two log chunks, and ends it `ok`, with a report; the lease's fencing.
async fn plan_run_through(store: &dyn Store, r: &RunnerRecord, id: &str, host: &str) -> i64 {
    use bosun_core::plan_run::PlanRunEvent as E;
    let leased = store.lease_plan_run(r).await.unwrap().expect("a plan run");
    assert_eq!(leased.id, id);
    let f = leased.fencing;
    store
        .plan_run_event(id, &plan_event(E::Started, Some(f)))
        .await
        .unwrap();
    let result = PlanHostResultRecord {
        step: 1,
        step_name: "render config".into(),
        module: "file.copy".into(),
        host: host.into(),
        status: "changed".into(),
        ignored: false,
        changed: Some(true),
        exit_code: Some(0),
        stdout: format!("wrote /etc/app.conf on {host}"),
        stderr: "warning: mode widened".into(),
        duration_ms: 31,
        message: "content changed".into(),
        diff: Some("-port = 80\n+port = 8080\n".into()),
    };
    store.put_plan_run_results(id, f, &[result]).await.unwrap();
    store
        .append_plan_run_logs(
            id,
            f,
            &[(0, format!("[{host}] step 1\n")), (1, "done\n".into())],
        )
        .await
        .unwrap();
    let report = json!({"status": "succeeded", "summary": [{"host": host, "changed": 1}]});
    let finished = PlanRunEventInput {
        report: Some(report),
        ..plan_event(E::Finished { ok: true }, Some(f))
    };
    store.plan_run_event(id, &finished).await.unwrap();
    f
}

/// Plan runs that ended before the horizon are summarised: their log goes and what each
/// step printed is blanked; the record, statuses and report stay. The latest run of a plan
/// and the preview of a run still waiting for its decision are kept.
pub async fn plan_runs_summarised_past_the_horizon_keep_their_record(store: Arc<dyn Store>) {
    use bosun_core::plan_run::{PlanRunEvent as E, PlanRunState as S};
    seed_org(&*store, "acme").await;
    let r = runner(&*store, "runner-1").await;
    let a = audit(Some("acme"), "plan_run.create", "plan:app-config");
    store
        .create_plan_run(&plan_run("prun-1", &["web-1"]), &a)
        .await
        .unwrap();
    let f1 = plan_run_through(&*store, &r, "prun-1", "web-1").await;
    let ended_1 = store.get_plan_run("prun-1").await.unwrap().unwrap();
    let results_1 = store.plan_run_results("prun-1").await.unwrap();
    // A gated run waits paused; its preview ran.
    let mut gated = plan_run("prun-g1", &["db"]);
    gated.gated_environments = vec!["prod".into()];
    gated.preview = Some("prun-p1".into());
    store.create_plan_run(&gated, &a).await.unwrap();
    plan_run_through(&*store, &r, "prun-p1", "db").await;
    // The plan's latest run, ended: created in a later millisecond than the others (in
    // the same one, the latest is the greatest id, and "prun-g1" > "prun-2").
    past(Utc::now()).await;
    store
        .create_plan_run(&plan_run("prun-2", &["cache"]), &a)
        .await
        .unwrap();
    plan_run_through(&*store, &r, "prun-2", "cache").await;

    // A cut-off before prun-1 ended summarises nothing.
    let before = ended_1.ended_at.unwrap() - chrono::Duration::milliseconds(1);
    assert_eq!(store.summarise_plan_runs(before, 1).await.unwrap(), 0);
    // Past all of them: only prun-1 goes — prun-p1 previews a paused run, prun-2 is the
    // plan's latest, prun-g1 has not ended.
    let cutoff = past(Utc::now()).await;
    assert_eq!(store.summarise_plan_runs(cutoff, 1).await.unwrap(), 1);
    assert_eq!(store.summarise_plan_runs(cutoff, 1).await.unwrap(), 0);
    let after = store.get_plan_run("prun-1").await.unwrap().unwrap();
    assert!(after.summarised_at.is_some());
    assert_eq!(
        (
            after.state,
            &after.reason,
            &after.report,
            &after.hosts,
            &after.inputs,
            after.created_at,
            after.ended_at
        ),
        (
            ended_1.state,
            &ended_1.reason,
            &ended_1.report,
            &ended_1.hosts,
            &ended_1.inputs,
            ended_1.created_at,
            ended_1.ended_at
        )
    );
    assert_eq!(after.state, S::Succeeded);
    assert_eq!(
        store.read_plan_run_logs("prun-1", None, 10).await.unwrap(),
        []
    );
    // Each result keeps what it was, without what the step printed.
    let kept = store.plan_run_results("prun-1").await.unwrap();
    let blanked: Vec<PlanHostResultRecord> = results_1
        .into_iter()
        .map(|r| PlanHostResultRecord {
            stdout: String::new(),
            stderr: String::new(),
            diff: None,
            ..r
        })
        .collect();
    assert_eq!(kept, blanked);
    assert_eq!(kept[0].status, "changed");
    // A late chunk finds no log to add to.
    store
        .append_plan_run_logs("prun-1", f1, &[(2, "late\n".into())])
        .await
        .unwrap();
    assert_eq!(
        store.read_plan_run_logs("prun-1", None, 10).await.unwrap(),
        []
    );
    for id in ["prun-p1", "prun-2"] {
        let run = store.get_plan_run(id).await.unwrap().unwrap();
        assert_eq!(run.summarised_at, None, "{id}");
        assert_eq!(
            store.read_plan_run_logs(id, None, 10).await.unwrap().len(),
            2,
            "{id}"
        );
        assert!(!store.plan_run_results(id).await.unwrap()[0]
            .stdout
            .is_empty());
    }

    // Once the gated run is decided (aborted here), it and its preview may go.
    let aborted = store
        .plan_run_event("prun-g1", &plan_event(E::Abort, None))
        .await
        .unwrap();
    assert_eq!(aborted.state, S::Aborted);
    let cutoff = past(Utc::now()).await;
    assert_eq!(store.summarise_plan_runs(cutoff, 1).await.unwrap(), 2);
    for (id, summarised) in [
        ("prun-1", true),
        ("prun-g1", true),
        ("prun-p1", true),
        ("prun-2", false),
    ] {
        let run = store.get_plan_run(id).await.unwrap().unwrap();
        assert_eq!(run.summarised_at.is_some(), summarised, "{id}");
    }
}
