//! Conformance cases for VCS: stacks by repository, GitHub App installations, webhook
//! deliveries and their decisions, VCS tokens, and the poller's heads.

use super::*;

fn repo_spec(id: &str, repository: &str, branch: &str) -> StackSpec {
    StackSpec::from_input(StackInput {
        id: id.into(),
        repository: repository.into(),
        branch: Some(branch.into()),
        ..Default::default()
    })
    .unwrap()
}

fn stack_ids(stacks: &[StackRecord]) -> Vec<(String, String)> {
    stacks
        .iter()
        .map(|s| (s.org.clone(), s.spec.id.to_string()))
        .collect()
}

pub async fn vcs_stacks_by_repository_key(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    seed_org(&*store, "globex").await;
    let a = audit(Some("acme"), "stack.create", "stack");
    for (org, id, repo, branch) in [
        ("acme", "net", "github:Acme/Infra", "main"),
        ("acme", "app", "github:acme/infra", "release"),
        ("globex", "web", "github:ACME/infra.git", "main"),
        ("acme", "other", "github:acme/other", "main"),
        ("acme", "plain", "https://git.example.com/Infra.git", "main"),
        ("globex", "plain", "file:///srv/git/infra", "trunk"),
    ] {
        store
            .create_stack(org, &repo_spec(id, repo, branch), &a)
            .await
            .unwrap();
    }
    let infra = store
        .stacks_for_repository("github:acme/infra", None)
        .await
        .unwrap();
    assert_eq!(
        stack_ids(&infra),
        [
            pair("acme", "app"),
            pair("acme", "net"),
            pair("globex", "web")
        ]
    );
    // The stored spec keeps the repository as written.
    assert_eq!(infra[1].spec.repository.to_string(), "github:Acme/Infra");
    assert_eq!(
        stack_ids(
            &store
                .stacks_for_repository("github:acme/infra", Some("main"))
                .await
                .unwrap()
        ),
        [pair("acme", "net"), pair("globex", "web")]
    );
    assert_eq!(
        stack_ids(
            &store
                .stacks_for_repository("github:Acme/INFRA", Some("release"))
                .await
                .unwrap()
        ),
        [pair("acme", "app")]
    );
    assert!(store
        .stacks_for_repository("github:acme/infra", Some("dev"))
        .await
        .unwrap()
        .is_empty());
    // Git URLs are keyed as written.
    assert_eq!(
        stack_ids(
            &store
                .stacks_for_repository("https://git.example.com/Infra.git", None)
                .await
                .unwrap()
        ),
        [pair("acme", "plain")]
    );
    assert!(store
        .stacks_for_repository("https://git.example.com/infra.git", None)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        stack_ids(&store.git_remote_stacks().await.unwrap()),
        [pair("acme", "plain"), pair("globex", "plain")]
    );

    // Changing a stack's repository moves it to the new key.
    store
        .update_stack(
            "acme",
            &repo_spec("other", "github:ACME/Infra", "main"),
            &audit(Some("acme"), "stack.update", "stack:other"),
        )
        .await
        .unwrap();
    assert!(store
        .stacks_for_repository("github:acme/other", None)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        stack_ids(
            &store
                .stacks_for_repository("github:acme/infra", Some("main"))
                .await
                .unwrap()
        ),
        [
            pair("acme", "net"),
            pair("acme", "other"),
            pair("globex", "web")
        ]
    );
    store
        .update_stack(
            "acme",
            &repo_spec("plain", "github:acme/moved", "main"),
            &audit(Some("acme"), "stack.update", "stack:plain"),
        )
        .await
        .unwrap();
    assert_eq!(
        stack_ids(&store.git_remote_stacks().await.unwrap()),
        [pair("globex", "plain")]
    );
    store
        .delete_stack(
            "acme",
            "net",
            false,
            &audit(Some("acme"), "stack.delete", "stack:net"),
        )
        .await
        .unwrap();
    assert_eq!(
        stack_ids(
            &store
                .stacks_for_repository("github:acme/infra", Some("main"))
                .await
                .unwrap()
        ),
        [pair("acme", "other"), pair("globex", "web")]
    );
}

fn repos(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

pub async fn vcs_installation_lifecycle(store: Arc<dyn Store>) {
    let before = store.list_audit(None, None, 1000).await.unwrap().len();
    let a = audit(None, "github.installation", "installation");
    let change = |c: InstallationChange| {
        let store = store.clone();
        let a = a.clone();
        async move { store.apply_installation(&c, &a).await.unwrap() }
    };
    change(InstallationChange::Created {
        installation: 1,
        account: "Acme".into(),
        repositories: repos(&["Acme/Infra", "acme/web"]),
    })
    .await;
    change(InstallationChange::Created {
        installation: 2,
        account: "globex".into(),
        repositories: repos(&["globex/site"]),
    })
    .await;
    let b = store.github_binding("ACME/INFRA").await.unwrap().unwrap();
    assert_eq!(
        (
            b.repository.as_str(),
            b.installation,
            b.account.as_str(),
            b.suspended
        ),
        ("acme/infra", 1, "Acme", false)
    );
    assert!(store.github_binding("acme/nope").await.unwrap().is_none());

    // A re-sync replaces what was known of the installation.
    change(InstallationChange::Created {
        installation: 1,
        account: "Acme".into(),
        repositories: repos(&["acme/web", "acme/new"]),
    })
    .await;
    assert!(store.github_binding("acme/infra").await.unwrap().is_none());
    assert!(store.github_binding("acme/new").await.unwrap().is_some());
    assert!(store.github_binding("acme/web").await.unwrap().is_some());

    change(InstallationChange::RepositoriesAdded {
        installation: 1,
        account: "Acme".into(),
        repositories: repos(&["Acme/Extra"]),
    })
    .await;
    assert_eq!(
        store
            .github_binding("acme/extra")
            .await
            .unwrap()
            .unwrap()
            .installation,
        1
    );
    // Another installation cannot remove what it does not cover.
    change(InstallationChange::RepositoriesRemoved {
        installation: 2,
        repositories: repos(&["acme/extra"]),
    })
    .await;
    assert!(store.github_binding("acme/extra").await.unwrap().is_some());
    change(InstallationChange::RepositoriesRemoved {
        installation: 1,
        repositories: repos(&["ACME/extra"]),
    })
    .await;
    assert!(store.github_binding("acme/extra").await.unwrap().is_none());

    change(InstallationChange::Suspended {
        installation: 1,
        suspended: true,
    })
    .await;
    for repo in ["acme/web", "acme/new"] {
        assert!(store.github_binding(repo).await.unwrap().unwrap().suspended);
    }
    assert!(
        !store
            .github_binding("globex/site")
            .await
            .unwrap()
            .unwrap()
            .suspended
    );
    change(InstallationChange::Suspended {
        installation: 1,
        suspended: false,
    })
    .await;
    assert!(
        !store
            .github_binding("acme/web")
            .await
            .unwrap()
            .unwrap()
            .suspended
    );

    change(InstallationChange::Deleted { installation: 1 }).await;
    assert!(store.github_binding("acme/web").await.unwrap().is_none());
    assert!(store.github_binding("acme/new").await.unwrap().is_none());
    assert!(store.github_binding("globex/site").await.unwrap().is_some());

    let log = store.list_audit(None, None, 1000).await.unwrap();
    assert_eq!(log.len(), before + 9, "one audit record per change");
    assert_eq!(log[0].entry.action, "github.installation");
}

pub async fn vcs_delivery_creates_runs_and_decisions(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    seed_stack(&*store, "app").await;
    let mut push = delivery("guid-push", "push");
    push.runs = vec![pr_run("r-push", "net", RunKind::Tracked, None)];
    push.decisions = vec![
        decision("net", Some("r-push"), "main.tf changed"),
        decision("app", None, "no watched path changed"),
    ];
    let (push_id, runs, canceled) = recorded(store.record_delivery(&push).await.unwrap());
    assert!(canceled.is_empty());
    assert_eq!(runs.len(), 1);
    assert_eq!(
        (runs[0].id.as_str(), runs[0].delivery, runs[0].pull_request),
        ("r-push", Some(push_id), None)
    );
    let stored = store.get_run("r-push").await.unwrap().unwrap();
    assert_eq!(stored, runs[0]);
    assert_eq!(
        (
            stored.state,
            stored.kind,
            stored.trigger,
            stored.needs_lease
        ),
        (RunState::Queued, RunKind::Tracked, Trigger::Push, true)
    );
    let phases = store.run_phases("r-push").await.unwrap();
    assert_eq!(phases.len(), 1);
    assert_eq!(phases[0].state, RunState::Queued);

    let mut pr = delivery("guid-pr", "pull_request");
    pr.action = Some("synchronize".into());
    pr.pull_request = Some(7);
    pr.git_ref = Some("refs/pull/7/head".into());
    pr.runs = vec![pr_run("r-pr", "net", RunKind::Proposed, Some(7))];
    pr.decisions = vec![decision("net", Some("r-pr"), "main.tf changed")];
    let (pr_id, runs, _) = recorded(store.record_delivery(&pr).await.unwrap());
    assert!(pr_id > push_id);
    assert_eq!(
        (runs[0].pull_request, runs[0].delivery),
        (Some(7), Some(pr_id))
    );
    assert_eq!(
        store.get_run("r-pr").await.unwrap().unwrap().pull_request,
        Some(7)
    );
    // A third delivery that concerns only app.
    let mut other = delivery("guid-other", "push");
    other.decisions = vec![decision("app", None, "branch not watched")];
    let (other_id, _, _) = recorded(store.record_delivery(&other).await.unwrap());

    let found = store
        .find_delivery(DeliverySource::Github, "guid-pr")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            found.id,
            found.source,
            found.guid.as_str(),
            found.event.as_str(),
            found.action.as_deref(),
            found.repository.as_deref(),
            found.git_ref.as_deref(),
            found.pull_request,
            found.summary.as_str(),
            found.duplicate_of,
        ),
        (
            pr_id,
            DeliverySource::Github,
            "guid-pr",
            "pull_request",
            Some("synchronize"),
            Some("github:acme/infra"),
            Some("refs/pull/7/head"),
            Some(7),
            "pull_request guid-pr",
            None,
        )
    );
    assert_eq!(
        (found.before.clone(), found.after.clone()),
        (Some("b".repeat(40)), Some("a".repeat(40)))
    );
    assert!(store
        .find_delivery(DeliverySource::Poll, "guid-pr")
        .await
        .unwrap()
        .is_none());
    assert!(store
        .find_delivery(DeliverySource::Github, "guid-none")
        .await
        .unwrap()
        .is_none());

    // History, newest first, paged by delivery id.
    let net = store.list_triggers("acme", "net", None, 10).await.unwrap();
    let view = |t: &[TriggerRecord]| {
        t.iter()
            .map(|t| (t.delivery.id, t.run_id.clone(), t.reason.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        view(&net),
        [
            (
                pr_id,
                Some("r-pr".to_string()),
                "main.tf changed".to_string()
            ),
            (
                push_id,
                Some("r-push".to_string()),
                "main.tf changed".to_string()
            ),
        ]
    );
    assert_eq!(net[0].delivery, found);
    let page = store.list_triggers("acme", "net", None, 1).await.unwrap();
    assert_eq!(view(&page), view(&net[..1]));
    let page = store
        .list_triggers("acme", "net", Some(page[0].delivery.id), 1)
        .await
        .unwrap();
    assert_eq!(view(&page), view(&net[1..]));
    assert!(store
        .list_triggers("acme", "net", Some(push_id), 10)
        .await
        .unwrap()
        .is_empty());
    let app = store.list_triggers("acme", "app", None, 10).await.unwrap();
    assert_eq!(
        view(&app),
        [
            (other_id, None, "branch not watched".to_string()),
            (push_id, None, "no watched path changed".to_string()),
        ]
    );
    assert!(store
        .list_triggers("globex", "net", None, 10)
        .await
        .unwrap()
        .is_empty());

    let log = store.list_audit(None, None, 10).await.unwrap();
    let pr_audit = log
        .iter()
        .find(|r| r.entry.target == "delivery:guid-pr")
        .unwrap();
    assert_eq!(
        (
            pr_audit.entry.org.as_deref(),
            pr_audit.entry.actor.as_str(),
            pr_audit.entry.action.as_str()
        ),
        (None, "system", "vcs.delivery")
    );
    assert_eq!(pr_audit.entry.detail["event"], json!("pull_request"));
    assert_eq!(pr_audit.entry.detail["runs"], json!(["r-pr"]));
    assert_eq!(
        pr_audit.entry.detail["summary"],
        json!("pull_request guid-pr")
    );

    // A stack with a trigger history can still be deleted; its history goes with it.
    store
        .delete_stack(
            "acme",
            "app",
            false,
            &audit(Some("acme"), "stack.delete", "stack:app"),
        )
        .await
        .unwrap();
    seed_stack(&*store, "app").await;
    assert!(store
        .list_triggers("acme", "app", None, 10)
        .await
        .unwrap()
        .is_empty());
}

pub async fn vcs_duplicate_delivery_applies_nothing(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    seed_stack(&*store, "app").await;
    let mut first = delivery("guid-1", "push");
    first.runs = vec![pr_run("r-1", "net", RunKind::Tracked, None)];
    first.decisions = vec![
        decision("net", Some("r-1"), "main.tf changed"),
        decision("app", None, "no watched path changed"),
    ];
    let (first_id, _, _) = recorded(store.record_delivery(&first).await.unwrap());
    let first_at = store
        .find_delivery(DeliverySource::Github, "guid-1")
        .await
        .unwrap()
        .unwrap()
        .received_at;
    let audits = store.list_audit(None, None, 1000).await.unwrap().len();

    // GitHub redelivers, and this time the decision would differ: nothing of it applies.
    let mut again = first.clone();
    again.runs = vec![pr_run("r-2", "net", RunKind::Tracked, None)];
    again.decisions = vec![decision("net", Some("r-2"), "main.tf changed")];
    again.summary = "redelivered".into();
    let (dup_id, got_first, got_at) = match store.record_delivery(&again).await.unwrap() {
        DeliveryOutcome::Duplicate {
            id,
            first_id,
            first_received_at,
        } => (id, first_id, first_received_at),
        other => panic!("expected Duplicate, got {other:?}"),
    };
    assert_ne!(dup_id, first_id);
    assert_eq!((got_first, got_at), (first_id, first_at));
    assert!(store.get_run("r-2").await.unwrap().is_none());
    assert_eq!(
        store.list_runs("acme", None, None, 10).await.unwrap().len(),
        1
    );
    assert_eq!(
        store.list_audit(None, None, 1000).await.unwrap().len(),
        audits
    );
    // find_delivery answers the first one.
    let found = store
        .find_delivery(DeliverySource::Github, "guid-1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((found.id, found.duplicate_of), (first_id, None));

    let expected_reason = format!(
        "duplicate delivery: already received at {}",
        first_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    );
    for stack in ["net", "app"] {
        let history = store.list_triggers("acme", stack, None, 10).await.unwrap();
        assert_eq!(history.len(), 2, "{stack}");
        assert_eq!(history[0].delivery.id, dup_id);
        assert_eq!(history[0].delivery.duplicate_of, Some(first_id));
        assert_eq!(history[0].delivery.summary, "redelivered");
        assert_eq!(history[0].run_id, None);
        assert_eq!(history[0].reason, expected_reason);
        assert_eq!(history[1].delivery.id, first_id);
    }
    assert_eq!(
        store.list_triggers("acme", "net", None, 10).await.unwrap()[1]
            .run_id
            .as_deref(),
        Some("r-1")
    );

    // A third copy still points at the first; the same guid from another source is new.
    match store.record_delivery(&again).await.unwrap() {
        DeliveryOutcome::Duplicate { first_id: f, .. } => assert_eq!(f, first_id),
        other => panic!("expected Duplicate, got {other:?}"),
    }
    let mut polled = again.clone();
    polled.source = DeliverySource::Poll;
    let (_, runs, _) = recorded(store.record_delivery(&polled).await.unwrap());
    assert_eq!(runs[0].id, "r-2");
}

pub async fn vcs_supersede_cancels_older_proposed_runs(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    seed_stack(&*store, "app").await;
    let r = runner(&*store, "runner-1").await;
    // An executing proposed run of PR 7.
    store
        .create_run(&pr_run("p-exec", "net", RunKind::Proposed, Some(7)), None)
        .await
        .unwrap();
    let leased = store.lease_run(&r).await.unwrap().unwrap();
    assert_eq!(leased.id, "p-exec");
    store
        .run_event("p-exec", &ev(Event::PhaseStarted, leased.fencing))
        .await
        .unwrap();
    for (id, stack, kind, pr) in [
        ("p-old", "net", RunKind::Proposed, Some(7)),
        ("p-other", "net", RunKind::Proposed, Some(8)),
        ("t-track", "net", RunKind::Tracked, Some(7)),
        ("p-app", "app", RunKind::Proposed, Some(7)),
        ("p-done", "net", RunKind::Proposed, Some(7)),
    ] {
        store
            .create_run(&pr_run(id, stack, kind, pr), None)
            .await
            .unwrap();
    }
    store
        .cancel_run("p-done", &audit(Some("acme"), "run.cancel", "run:p-done"))
        .await
        .unwrap();

    let mut sync = delivery("guid-sync", "pull_request");
    sync.pull_request = Some(7);
    sync.runs = vec![pr_run("p-new", "net", RunKind::Proposed, Some(7))];
    sync.decisions = vec![decision("net", Some("p-new"), "main.tf changed")];
    sync.cancel = Some(CancelProposed {
        stacks: vec![pair("acme", "net")],
        pull_request: 7,
        reason: "superseded by a newer commit".into(),
    });
    let (_, runs, mut canceled) = recorded(store.record_delivery(&sync).await.unwrap());
    assert_eq!(runs[0].id, "p-new");
    canceled.sort();
    assert_eq!(canceled, ["p-exec", "p-old"]);

    let get = |id: &'static str| {
        let store = store.clone();
        async move { store.get_run(id).await.unwrap().unwrap() }
    };
    let old = get("p-old").await;
    assert_eq!(old.state, RunState::Canceled);
    assert_eq!(old.reason.as_deref(), Some("superseded by a newer commit"));
    // The executing one is asked to stop: its runner learns it on the next heartbeat.
    let exec = get("p-exec").await;
    assert_eq!(
        (exec.state, exec.cancel_requested),
        (RunState::Planning, true)
    );
    assert_eq!(exec.reason.as_deref(), Some("superseded by a newer commit"));
    assert!(store.heartbeat("p-exec", leased.fencing).await.unwrap());
    for id in ["p-other", "t-track", "p-app", "p-new"] {
        let run = get(id).await;
        assert_eq!(
            (run.state, run.cancel_requested),
            (RunState::Queued, false),
            "{id}"
        );
    }
    assert_eq!(
        get("p-done").await.reason.as_deref(),
        Some("canceled by user:tester")
    );

    let log = store.list_audit(Some("acme"), None, 10).await.unwrap();
    let cancels: Vec<_> = log
        .iter()
        .filter(|r| r.entry.action == "run.cancel" && r.entry.actor == "system")
        .map(|r| r.entry.target.as_str())
        .collect();
    assert_eq!(cancels.len(), 2, "{cancels:?}");
    assert!(cancels.contains(&"run:p-old") && cancels.contains(&"run:p-exec"));
    let delivery_audit = store.list_audit(None, None, 1).await.unwrap();
    assert_eq!(delivery_audit[0].entry.action, "vcs.delivery");
    assert_eq!(delivery_audit[0].entry.org, None);
}

pub async fn vcs_delivery_is_atomic(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    store
        .create_run(&pr_run("p-old", "net", RunKind::Proposed, Some(7)), None)
        .await
        .unwrap();
    let audits = store.list_audit(None, None, 1000).await.unwrap().len();
    let cancel = CancelProposed {
        stacks: vec![pair("acme", "net")],
        pull_request: 7,
        reason: "superseded".into(),
    };

    // A run on a stack that does not exist: the whole call fails.
    let mut bad = delivery("guid-bad", "pull_request");
    bad.runs = vec![
        pr_run("r-ok", "net", RunKind::Proposed, Some(7)),
        pr_run("r-ghost", "ghost", RunKind::Proposed, Some(7)),
    ];
    bad.decisions = vec![decision("net", Some("r-ok"), "changed")];
    bad.cancel = Some(cancel.clone());
    let err = store.record_delivery(&bad).await;
    assert!(matches!(err, Err(StoreError::NotFound(_))), "{err:?}");

    // A decision on a stack that does not exist, after the runs and cancels.
    let mut bad2 = delivery("guid-bad2", "pull_request");
    bad2.runs = vec![pr_run("r-ok", "net", RunKind::Proposed, Some(7))];
    bad2.decisions = vec![
        decision("net", Some("r-ok"), "changed"),
        decision("ghost", None, "changed"),
    ];
    bad2.cancel = Some(cancel.clone());
    assert!(store.record_delivery(&bad2).await.is_err());

    // A decision naming a run the delivery does not create.
    let mut bad3 = delivery("guid-bad3", "pull_request");
    bad3.runs = vec![pr_run("r-ok", "net", RunKind::Proposed, Some(7))];
    bad3.decisions = vec![decision("net", Some("p-old"), "changed")];
    bad3.cancel = Some(cancel);
    assert!(store.record_delivery(&bad3).await.is_err());

    for guid in ["guid-bad", "guid-bad2", "guid-bad3"] {
        assert!(store
            .find_delivery(DeliverySource::Github, guid)
            .await
            .unwrap()
            .is_none());
    }
    assert!(store.get_run("r-ok").await.unwrap().is_none());
    let old = store.get_run("p-old").await.unwrap().unwrap();
    assert_eq!((old.state, old.reason), (RunState::Queued, None));
    assert!(store
        .list_triggers("acme", "net", None, 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        store.list_audit(None, None, 1000).await.unwrap().len(),
        audits
    );
    // The guid was not burnt: the corrected delivery records.
    bad.runs.pop();
    let (_, runs, canceled) = recorded(store.record_delivery(&bad).await.unwrap());
    assert_eq!((runs.len(), canceled), (1, vec!["p-old".to_string()]));
}

pub async fn vcs_tokens_due_after_run_ends(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    for id in ["r-live", "r-ending"] {
        store
            .create_run(&new_run(id, "net", RunKind::Proposed), None)
            .await
            .unwrap();
    }
    let token = |t: &str, run: &str, expires: chrono::DateTime<Utc>| VcsTokenRecord {
        run_id: run.into(),
        token: t.into(),
        expires_at: expires,
    };
    let hour = Utc::now() + Duration::hours(1);
    let live = token("ghs_live", "r-live", hour);
    let ending = token("ghs_ending", "r-ending", hour);
    let orphan = token("ghs_orphan", "r-gone", hour);
    let expired = token("ghs_expired", "r-live", Utc::now() - Duration::minutes(1));
    for t in [&live, &ending, &orphan, &expired] {
        store.add_vcs_token(t).await.unwrap();
    }
    let due = |store: Arc<dyn Store>| async move {
        let mut tokens: Vec<String> = store
            .vcs_tokens_due()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.token)
            .collect();
        tokens.sort();
        tokens
    };
    assert_eq!(due(store.clone()).await, ["ghs_expired", "ghs_orphan"]);
    let listed = store.vcs_tokens_due().await.unwrap();
    let got = listed.iter().find(|t| t.token == "ghs_orphan").unwrap();
    assert_eq!(got.run_id, "r-gone");
    assert_eq!(got.expires_at.timestamp_millis(), hour.timestamp_millis());

    store
        .cancel_run(
            "r-ending",
            &audit(Some("acme"), "run.cancel", "run:r-ending"),
        )
        .await
        .unwrap();
    assert_eq!(
        due(store.clone()).await,
        ["ghs_ending", "ghs_expired", "ghs_orphan"]
    );
    for t in ["ghs_ending", "ghs_expired", "ghs_orphan", "ghs_never"] {
        store.remove_vcs_token(t).await.unwrap();
    }
    assert!(due(store.clone()).await.is_empty());
    // Adding the same token again replaces it.
    store
        .add_vcs_token(&token("ghs_live", "r-ending", hour))
        .await
        .unwrap();
    assert_eq!(due(store.clone()).await, ["ghs_live"]);
}

pub async fn vcs_poll_heads_upsert(store: Arc<dyn Store>) {
    let repo = "https://git.example.com/infra.git";
    assert!(store.poll_head(repo, "main").await.unwrap().is_none());
    let at = Utc::now();
    let head = PollHead {
        repository: repo.into(),
        branch: "main".into(),
        commit: "a".repeat(40),
        checked_at: at,
    };
    store.set_poll_head(&head).await.unwrap();
    let got = store.poll_head(repo, "main").await.unwrap().unwrap();
    assert_eq!(
        (
            got.repository.as_str(),
            got.branch.as_str(),
            got.commit.as_str()
        ),
        (repo, "main", "a".repeat(40).as_str())
    );
    assert_eq!(got.checked_at.timestamp_millis(), at.timestamp_millis());
    let moved = PollHead {
        commit: "b".repeat(40),
        checked_at: at + Duration::seconds(60),
        ..head.clone()
    };
    store.set_poll_head(&moved).await.unwrap();
    let got = store.poll_head(repo, "main").await.unwrap().unwrap();
    assert_eq!(got.commit, "b".repeat(40));
    assert_eq!(
        got.checked_at.timestamp_millis(),
        moved.checked_at.timestamp_millis()
    );
    assert!(store.poll_head(repo, "dev").await.unwrap().is_none());
    store
        .set_poll_head(&PollHead {
            branch: "dev".into(),
            commit: "c".repeat(40),
            ..head
        })
        .await
        .unwrap();
    assert_eq!(
        store.poll_head(repo, "main").await.unwrap().unwrap().commit,
        "b".repeat(40)
    );
    assert_eq!(
        store.poll_head(repo, "dev").await.unwrap().unwrap().commit,
        "c".repeat(40)
    );
}
