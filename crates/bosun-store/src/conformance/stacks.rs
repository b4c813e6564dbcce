//! Conformance cases for stacks: every field kept, pages, updates and deletes, org isolation,
//! the dependency graph's checks and AWS roles.

use bosun_core::graph::{Graph, Link, Node};

use super::*;

fn full_spec() -> StackSpec {
    StackSpec::from_input(StackInput {
        id: "app".into(),
        name: Some("Application ünïcode".into()),
        repository: "ssh://git@git.example.com/infra.git".into(),
        branch: Some("release/2026".into()),
        path: Some("./stacks/app/".into()),
        watch_paths: vec!["modules/common".into(), "shared".into()],
        engine: Some("terraform".into()),
        engine_binary: Some("/usr/local/bin/terraform".into()),
        engine_version: Some("1.0.3".into()),
        tier: Some("large".into()),
        autodeploy: true,
        environment: Some("prod".into()),
        variables: BTreeMap::from([
            ("TF_VAR_region".into(), "eu-west-1".into()),
            ("DB_PASSWORD".into(), "secret://db/password".into()),
        ]),
        depends_on: vec![DependencyInput {
            stack: "net".into(),
            outputs: BTreeMap::from([("vpc_id".into(), "vpc".into())]),
            trigger_always: true,
        }],
        drift_detection: Some(DriftInput {
            schedule: "0 */6 * * *".into(),
            reconcile: true,
            timezone: Some("Europe/Berlin".into()),
        }),
        runner_pool: Some("edge".into()),
        aws: Some(bosun_core::stack::AwsInput {
            plan_role_arn: "arn:aws:iam::123456789012:role/app-plan".into(),
            apply_role_arn: Some("arn:aws:iam::123456789012:role/app-apply".into()),
            audience: None,
        }),
        pr_feedback: Some("comment".into()),
        // Kept in the order given, not sorted.
        labels: vec!["team-net".into(), "prod".into(), "eu-1".into()],
    })
    .unwrap()
}

pub async fn stacks_roundtrip_every_field(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let a = audit(Some("acme"), "stack.create", "stack");
    store
        .create_stack("acme", &spec("net", &[]), &a)
        .await
        .unwrap();
    let want = full_spec();
    let created = store.create_stack("acme", &want, &a).await.unwrap();
    let got = store.get_stack("acme", "app").await.unwrap().unwrap();
    assert_eq!(got.spec, want);
    assert_eq!(got.created_at, created.created_at);
    let listed = store.list_stacks("acme", None, 10).await.unwrap();
    let app = listed.iter().find(|s| s.spec.id.as_str() == "app").unwrap();
    assert_eq!(app.spec, want, "a page reads every field too");
    assert_eq!(got.org, "acme");
    assert!(store.get_stack("acme", "missing").await.unwrap().is_none());
    let mut other = want.clone();
    other.name = "another".into();
    other.drift_detection = None;
    let dup = store.create_stack("acme", &other, &a).await;
    assert!(matches!(dup, Err(StoreError::AlreadyExists(_))), "{dup:?}");
    let kept = store.get_stack("acme", "app").await.unwrap().unwrap();
    assert_eq!(
        (kept.spec, kept.created_at),
        (want.clone(), created.created_at),
        "a taken id changes nothing"
    );
    let no_org = store.create_stack("ghost-org", &spec("x1", &[]), &a).await;
    assert!(matches!(no_org, Err(StoreError::NotFound(_))), "{no_org:?}");
}

pub async fn stacks_list_pages_in_id_order(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let a = audit(Some("acme"), "stack.create", "stack");
    for id in ["s5", "s1", "s3", "s2", "s4"] {
        store
            .create_stack("acme", &spec(id, &[]), &a)
            .await
            .unwrap();
    }
    let ids = |v: Vec<StackRecord>| {
        v.into_iter()
            .map(|s| s.spec.id.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ids(store.list_stacks("acme", None, 2).await.unwrap()),
        ["s1", "s2"]
    );
    assert_eq!(
        ids(store.list_stacks("acme", Some("s2"), 2).await.unwrap()),
        ["s3", "s4"]
    );
    assert_eq!(
        ids(store.list_stacks("acme", Some("s4"), 2).await.unwrap()),
        ["s5"]
    );
    assert!(store
        .list_stacks("acme", Some("s5"), 2)
        .await
        .unwrap()
        .is_empty());
}

pub async fn stacks_update_and_delete(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let a = audit(Some("acme"), "stack.create", "stack");
    let created = store
        .create_stack("acme", &spec("web", &[]), &a)
        .await
        .unwrap();
    assert!(created.spec.labels.is_empty());
    let mut changed = created.spec.clone();
    changed.name = "Web frontend".into();
    changed.autodeploy = true;
    changed.labels = ["prod", "web"]
        .into_iter()
        .map(|l| bosun_core::Slug::parse("labels", l).unwrap())
        .collect();
    let updated = store
        .update_stack(
            "acme",
            &changed,
            &audit(Some("acme"), "stack.update", "stack:web"),
        )
        .await
        .unwrap();
    assert_eq!(updated.created_at, created.created_at);
    assert!(updated.updated_at >= created.updated_at);
    let got = store.get_stack("acme", "web").await.unwrap().unwrap();
    assert_eq!(got.spec.name, "Web frontend");
    assert_eq!(got.spec.id.as_str(), "web");
    assert!(got.spec.autodeploy);
    assert_eq!(got.spec.labels, changed.labels);
    // An update replaces the labels whole: here, with none.
    let mut unlabelled = got.spec.clone();
    unlabelled.labels = Vec::new();
    store
        .update_stack(
            "acme",
            &unlabelled,
            &audit(Some("acme"), "stack.update", "stack:web"),
        )
        .await
        .unwrap();
    let got = store.get_stack("acme", "web").await.unwrap().unwrap();
    assert!(got.spec.labels.is_empty(), "{:?}", got.spec.labels);

    let ghost = store.update_stack("acme", &spec("ghost", &[]), &a).await;
    assert!(matches!(ghost, Err(StoreError::NotFound(_))), "{ghost:?}");

    let d = audit(Some("acme"), "stack.delete", "stack:web");
    store.delete_stack("acme", "web", false, &d).await.unwrap();
    assert!(store.get_stack("acme", "web").await.unwrap().is_none());
    let again = store.delete_stack("acme", "web", false, &d).await;
    assert!(matches!(again, Err(StoreError::NotFound(_))), "{again:?}");
}

pub async fn stacks_isolated_by_org(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    seed_org(&*store, "globex").await;
    let a = audit(Some("acme"), "stack.create", "stack");
    store
        .create_stack("acme", &spec("net", &[]), &a)
        .await
        .unwrap();
    let mut other = spec("net", &[]);
    other.name = "Globex net".into();
    store.create_stack("globex", &other, &a).await.unwrap();
    assert_eq!(
        store
            .get_stack("acme", "net")
            .await
            .unwrap()
            .unwrap()
            .spec
            .name,
        "net"
    );
    assert_eq!(
        store
            .get_stack("globex", "net")
            .await
            .unwrap()
            .unwrap()
            .spec
            .name,
        "Globex net"
    );
    // An upstream in another org is not an upstream.
    store
        .create_stack("globex", &spec("only-globex", &[]), &a)
        .await
        .unwrap();
    let cross = store
        .create_stack("acme", &spec("app", &["only-globex"]), &a)
        .await;
    assert!(
        matches!(cross, Err(StoreError::UnknownUpstream { .. })),
        "{cross:?}"
    );
    store
        .delete_stack(
            "acme",
            "net",
            false,
            &audit(Some("acme"), "stack.delete", "net"),
        )
        .await
        .unwrap();
    assert!(store.get_stack("globex", "net").await.unwrap().is_some());
    assert_eq!(store.list_stacks("acme", None, 10).await.unwrap().len(), 0);
}

pub async fn dependencies_enforced(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let a = audit(Some("acme"), "stack.create", "stack");
    let unknown = store.create_stack("acme", &spec("app", &["net"]), &a).await;
    assert!(
        matches!(unknown, Err(StoreError::UnknownUpstream { field: "depends_on", ref stack }) if stack == "net"),
        "{unknown:?}"
    );
    store
        .create_stack("acme", &spec("net", &[]), &a)
        .await
        .unwrap();
    store
        .create_stack("acme", &spec("db", &["net"]), &a)
        .await
        .unwrap();
    store
        .create_stack("acme", &spec("app", &["db", "net"]), &a)
        .await
        .unwrap();

    // net → app would close app → db → net → app.
    let cycle = store.update_stack("acme", &spec("net", &["app"]), &a).await;
    match cycle {
        Err(StoreError::DependencyCycle(path)) => {
            assert_eq!(path.first(), path.last());
            assert!(path.contains(&"net".to_string()) && path.contains(&"app".to_string()));
        }
        other => panic!("expected a cycle, got {other:?}"),
    }
    // The refused update changed nothing.
    assert!(store
        .get_stack("acme", "net")
        .await
        .unwrap()
        .unwrap()
        .spec
        .depends_on
        .is_empty());

    let d = audit(Some("acme"), "stack.delete", "stack:net");
    match store.delete_stack("acme", "net", false, &d).await {
        Err(StoreError::HasDependents { dependents, .. }) => assert_eq!(dependents, ["app", "db"]),
        other => panic!("expected dependents, got {other:?}"),
    }
    store
        .update_stack("acme", &spec("app", &["db"]), &a)
        .await
        .unwrap();
    store.delete_stack("acme", "app", false, &d).await.unwrap();
    store.delete_stack("acme", "db", false, &d).await.unwrap();
    store.delete_stack("acme", "net", false, &d).await.unwrap();
}

pub async fn stacks_aws_roles_update_and_clear(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let a = audit(Some("acme"), "stack.create", "stack:web");
    store
        .create_stack("acme", &spec("web", &[]), &a)
        .await
        .unwrap();
    assert_eq!(
        store
            .get_stack("acme", "web")
            .await
            .unwrap()
            .unwrap()
            .spec
            .aws,
        None
    );
    let with_aws = StackSpec::from_input(StackInput {
        aws: Some(bosun_core::stack::AwsInput {
            plan_role_arn: "arn:aws:iam::123456789012:role/web-plan".into(),
            apply_role_arn: None,
            audience: Some("bosun.example.com".into()),
        }),
        ..spec("web", &[]).to_input()
    })
    .unwrap();
    store.update_stack("acme", &with_aws, &a).await.unwrap();
    let got = store.get_stack("acme", "web").await.unwrap().unwrap();
    assert_eq!(got.spec, with_aws);
    let aws = got.spec.aws.unwrap();
    assert_eq!(
        (aws.apply_role_arn.as_str(), aws.audience.as_str()),
        (
            "arn:aws:iam::123456789012:role/web-plan",
            "bosun.example.com"
        )
    );
    // Listing decodes the column too.
    let listed = store.list_stacks("acme", None, 10).await.unwrap();
    assert_eq!(listed[0].spec, with_aws);
    // Clearing it stores no roles.
    store
        .update_stack("acme", &spec("web", &[]), &a)
        .await
        .unwrap();
    assert_eq!(
        store
            .get_stack("acme", "web")
            .await
            .unwrap()
            .unwrap()
            .spec
            .aws,
        None
    );
}

pub async fn stacks_page_reads_by_id_range(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    seed_org(&*store, "other").await;
    let a = |org: &str| audit(Some(org), "stack.create", "stack");
    let drift = |s: StackSpec| {
        let mut input = s.to_input();
        input.drift_detection = Some(DriftInput {
            schedule: "0 3 * * *".into(),
            reconcile: false,
            timezone: None,
        });
        StackSpec::from_input(input).unwrap()
    };
    // s-a ← s-b ← s-d, s-a ← s-d; s-a and s-c checked for drift; "s-b" of another org too.
    for s in [
        drift(spec("s-a", &[])),
        spec("s-b", &["s-a"]),
        drift(spec("s-c", &[])),
        spec("s-d", &["s-a", "s-b"]),
    ] {
        store.create_stack("acme", &s, &a("acme")).await.unwrap();
    }
    store
        .create_stack("other", &drift(spec("s-b", &[])), &a("other"))
        .await
        .unwrap();

    let ids = |v: Vec<StackRecord>| -> Vec<String> {
        v.into_iter().map(|s| s.spec.id.to_string()).collect()
    };
    // Dependents: direct ones only, by id, of this org only.
    let down = |org: &'static str, id: &'static str| {
        let store = store.clone();
        async move {
            let node = Node::stack(id);
            let g = store.dependency_graph(org, &node).await.unwrap();
            g.downstream(&node)
                .map(|(n, _)| n.to_string())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(down("acme", "s-a").await, ["s-b", "s-d"]);
    assert_eq!(down("acme", "s-b").await, ["s-d"]);
    assert!(down("acme", "s-d").await.is_empty());
    assert!(down("other", "s-a").await.is_empty());
    // An update that drops the dependency drops the dependent.
    store
        .update_stack("acme", &spec("s-d", &["s-b"]), &a("acme"))
        .await
        .unwrap();
    assert_eq!(down("acme", "s-a").await, ["s-b"]);

    // Last runs: the newest of each stack in the range, the same as listing one per stack.
    for (id, stack) in [
        ("r-a1", "s-a"),
        ("r-b1", "s-b"),
        ("r-b2", "s-b"),
        ("r-d1", "s-d"),
    ] {
        store
            .create_run(&new_run(id, stack, RunKind::Proposed), None)
            .await
            .unwrap();
    }
    let mut other_run = new_run("r-ob", "s-b", RunKind::Proposed);
    other_run.org = "other".into();
    store.create_run(&other_run, None).await.unwrap();
    let activity = |after: Option<&'static str>, limit: u32| {
        let store = store.clone();
        async move {
            let (page, context, activity) = store
                .list_stacks_with_activity("acme", after, limit)
                .await
                .unwrap();
            let (same_page, same_context) = store
                .list_stacks_in_context("acme", after, limit)
                .await
                .unwrap();
            assert_eq!((&page, &context), (&same_page, &same_context));
            (ids(page), activity)
        }
    };
    let (page, last) = activity(Some("s-a"), 2).await;
    assert_eq!(page, ["s-b", "s-c"]);
    let got: Vec<_> = last
        .last_runs
        .iter()
        .map(|(s, r)| (s.as_str(), r.stack.as_str(), r.id.as_str()))
        .collect();
    assert_eq!(got, [("s-b", "s-b", "r-b2")]);
    let (_, all) = activity(None, 10).await;
    for s in ["s-a", "s-b", "s-c", "s-d"] {
        let one = store.list_runs("acme", Some(s), None, 1).await.unwrap();
        let here: Vec<_> = all.last_runs.get(s).cloned().into_iter().collect();
        assert_eq!(here, one, "stack {s}");
    }

    // Locks: only held ones, of stacks in the range, of this org.
    let alice = Writer::User("alice".into());
    for s in ["s-b", "s-d"] {
        store
            .lock_state("acme", s, &state_lock(&format!("L-{s}"), alice.clone()))
            .await
            .unwrap();
    }
    store
        .lock_state("other", "s-b", &state_lock("L-other", alice.clone()))
        .await
        .unwrap();
    let (page, first_three) = activity(None, 3).await;
    assert_eq!(page, ["s-a", "s-b", "s-c"]);
    let got: Vec<_> = first_three
        .locks
        .iter()
        .map(|(s, l)| (s.as_str(), l.id.as_str(), &l.holder))
        .collect();
    assert_eq!(got, [("s-b", "L-s-b", &alice)]);
    assert_eq!(
        first_three.locks["s-b"],
        store.state_head("acme", "s-b").await.unwrap().lock.unwrap()
    );
    let (page, past_the_end) = activity(Some("s-d"), 10).await;
    assert!(page.is_empty());
    assert_eq!(past_the_end, StackActivity::default());

    // Drift: the page's drift-checked stacks, as the one-stack read gives them.
    let (page, context) = store
        .list_stacks_in_context("acme", Some("s-a"), 2)
        .await
        .unwrap();
    assert_eq!(ids(page), ["s-b", "s-c"]);
    assert_eq!(
        context.drift.keys().collect::<Vec<_>>(),
        ["s-c"],
        "{context:?}"
    );
    assert_eq!(
        vec![context.drift["s-c"].clone()],
        store
            .drift_schedules(Some("acme"), Some("s-c"))
            .await
            .unwrap()
    );
    let (_, context) = store
        .list_stacks_in_context("acme", None, 10)
        .await
        .unwrap();
    assert_eq!(
        context.drift.into_values().collect::<Vec<_>>(),
        store.drift_schedules(Some("acme"), None).await.unwrap()
    );
}

pub async fn stacks_pr_feedback_set_and_cleared(store: Arc<dyn Store>) {
    use bosun_core::feedback::PrFeedback;
    seed_org(&*store, "acme").await;
    let a = audit(Some("acme"), "stack.create", "stack:web");
    let with = |f: Option<PrFeedback>| {
        StackSpec::from_input(StackInput {
            pr_feedback: f.map(|f| f.as_str().to_string()),
            ..spec("web", &[]).to_input()
        })
        .unwrap()
    };
    // Created following the org.
    store.create_stack("acme", &with(None), &a).await.unwrap();
    let got = store.get_stack("acme", "web").await.unwrap().unwrap();
    assert_eq!(got.spec.pr_feedback, None);
    // Each value kept, read back by one stack and by the list.
    for f in PrFeedback::ALL {
        store
            .update_stack("acme", &with(Some(f)), &a)
            .await
            .unwrap();
        let got = store.get_stack("acme", "web").await.unwrap().unwrap();
        assert_eq!(got.spec.pr_feedback, Some(f));
        let listed = store.list_stacks("acme", None, 10).await.unwrap();
        assert_eq!(listed[0].spec.pr_feedback, Some(f));
    }
    // Cleared: follows the org again.
    store.update_stack("acme", &with(None), &a).await.unwrap();
    let got = store.get_stack("acme", "web").await.unwrap().unwrap();
    assert_eq!(got.spec.pr_feedback, None);
    // A stack created with its own value keeps it.
    store
        .create_stack(
            "acme",
            &StackSpec::from_input(StackInput {
                pr_feedback: Some("none".into()),
                ..spec("api", &[]).to_input()
            })
            .unwrap(),
            &a,
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .get_stack("acme", "api")
            .await
            .unwrap()
            .unwrap()
            .spec
            .pr_feedback,
        Some(PrFeedback::None)
    );
}

/// What the API shows beside stacks, read with them: the org's feedback setting, one
/// binding (with its refusals) or polled head per repository, the drift schedules; the
/// same whichever of the three reads gives it, and nothing of stacks not read.
pub async fn stacks_read_in_context(store: Arc<dyn Store>) {
    use bosun_core::feedback::PrFeedback;
    seed_org(&*store, "acme").await;
    let a = audit(Some("acme"), "stack.create", "stack");
    let with = |id: &str, repository: &str, branch: Option<&str>, drift: bool| {
        StackSpec::from_input(StackInput {
            repository: repository.into(),
            branch: branch.map(str::to_string),
            drift_detection: drift.then(|| DriftInput {
                schedule: "0 3 * * *".into(),
                reconcile: false,
                timezone: None,
            }),
            ..spec(id, &[]).to_input()
        })
        .unwrap()
    };
    for s in [
        with("a-bound", "github:Acme/Infra", None, true),
        with("b-unbound", "github:acme/elsewhere", None, false),
        with(
            "c-polled",
            "https://git.example.com/infra.git",
            Some("release"),
            false,
        ),
        with(
            "d-unpolled",
            "https://git.example.com/infra.git",
            None,
            true,
        ),
        with("e-bound-too", "github:acme/infra", None, false),
    ] {
        store.create_stack("acme", &s, &a).await.unwrap();
    }
    store
        .update_org(
            "acme",
            &OrgUpdate {
                pr_feedback: Some(PrFeedback::Comment),
            },
            &audit(Some("acme"), "org.update", "org:acme"),
        )
        .await
        .unwrap();
    store
        .apply_installation(
            &InstallationChange::Created {
                installation: 7,
                account: "Acme".into(),
                repositories: vec!["acme/infra".into()],
            },
            &audit(None, "github.installation", "installation"),
        )
        .await
        .unwrap();
    let until = Utc::now() + Duration::hours(1);
    store
        .set_feedback_refusal("acme/infra", "checks", Some(("no checks:write", until)))
        .await
        .unwrap();
    let head = PollHead {
        repository: "https://git.example.com/infra.git".into(),
        branch: "release".into(),
        commit: "c0ffee".into(),
        checked_at: Utc::now(),
    };
    store.set_poll_head(&head).await.unwrap();

    let (page, all) = store
        .list_stacks_in_context("acme", None, 10)
        .await
        .unwrap();
    assert_eq!(page.len(), 5);
    assert_eq!(all.org_pr_feedback, Some(PrFeedback::Comment));
    // One entry for the bound repository, however its stacks spell it; none for the
    // repository without a binding.
    assert_eq!(
        all.github.keys().collect::<Vec<_>>(),
        ["github:acme/infra"],
        "{all:?}"
    );
    let (binding, refusals) = &all.github["github:acme/infra"];
    assert_eq!(
        Some(binding),
        store.github_binding("acme/infra").await.unwrap().as_ref()
    );
    assert_eq!(
        refusals,
        &store.feedback_refusals("acme/infra").await.unwrap()
    );
    assert_eq!(refusals.len(), 1);
    // The polled branch only.
    assert_eq!(all.poll_heads.len(), 1, "{all:?}");
    assert_eq!(
        all.poll_heads[&(head.repository.clone(), head.branch.clone())].commit,
        "c0ffee"
    );
    assert_eq!(
        all.drift.keys().collect::<Vec<_>>(),
        ["a-bound", "d-unpolled"]
    );

    // One stack: its own repository's entry and schedule alone.
    let (one, context) = store
        .get_stack_in_context("acme", "d-unpolled")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(one, page[3]);
    assert!(
        context.github.is_empty() && context.poll_heads.is_empty(),
        "{context:?}"
    );
    assert_eq!(context.drift.keys().collect::<Vec<_>>(), ["d-unpolled"]);
    assert_eq!(context.drift["d-unpolled"], all.drift["d-unpolled"]);
    let (_, context) = store
        .get_stack_in_context("acme", "e-bound-too")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(context.github, all.github);
    assert!(context.drift.is_empty());
    assert!(store
        .get_stack_in_context("acme", "missing")
        .await
        .unwrap()
        .is_none());
    assert!(store
        .get_stack_in_context("other", "a-bound")
        .await
        .unwrap()
        .is_none());

    // Stacks already read: the same context as the page's.
    assert_eq!(store.stack_context("acme", &page).await.unwrap(), all);
    // An org that is gone has no feedback setting.
    assert_eq!(
        store
            .stack_context("gone", &page[..1])
            .await
            .unwrap()
            .org_pr_feedback,
        None
    );
}

/// Stacks and the plans they feed are nodes of one dependency graph: a plan's
/// `on_stack_change` is checked like a stack's `depends_on` when saved (the stack exists in
/// the org), read back with the stack's neighbours, and keeps the stack from being deleted.
pub async fn one_graph_holds_stacks_and_the_plans_they_feed(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    seed_org(&*store, "globex").await;
    let a = audit(Some("acme"), "stack.create", "stack");
    store
        .create_stack("acme", &spec("net", &[]), &a)
        .await
        .unwrap();
    store
        .create_stack("acme", &spec("app", &["net"]), &a)
        .await
        .unwrap();
    store
        .create_stack("globex", &spec("edge", &[]), &a)
        .await
        .unwrap();
    let plan = |name: &str, stack: &str, outputs: &[&str]| NewPlan {
        org: "acme".into(),
        name: name.into(),
        source: format!("name: {name}\n"),
        schedule: None,
        on_stack_change: Some((
            stack.into(),
            outputs.iter().map(|o| o.to_string()).collect(),
        )),
    };
    let p = audit(Some("acme"), "plan.save", "plan");
    // A plan fed by a stack the org lacks (another org's too) is refused, naming the field;
    // nothing is saved.
    for missing in ["nowhere", "edge"] {
        match store.save_plan(&plan("deploy", missing, &[]), &p).await {
            Err(StoreError::UnknownUpstream { field, stack }) => {
                assert_eq!((field, stack.as_str()), ("on_stack_change.stack", missing))
            }
            other => panic!("expected an unknown upstream, got {other:?}"),
        }
    }
    assert!(store.get_plan("acme", "deploy").await.unwrap().is_none());
    store
        .save_plan(&plan("deploy", "net", &["subnets"]), &p)
        .await
        .unwrap();
    store
        .save_plan(&plan("rollout", "app", &[]), &p)
        .await
        .unwrap();

    // The stack's neighbours: the stack it depends on, the stack that depends on it, the
    // plans it feeds with what they watch.
    let (net, app) = (Node::stack("net"), Node::stack("app"));
    let g = store.dependency_graph("acme", &net).await.unwrap();
    let down: Vec<(String, Link)> = g
        .downstream(&net)
        .map(|(n, l)| (n.to_string(), l.clone()))
        .collect();
    assert_eq!(
        down,
        [
            (
                "app".to_string(),
                Link::DependsOn {
                    outputs: Default::default(),
                    trigger_always: false
                }
            ),
            (
                "plan deploy".to_string(),
                Link::Feeds {
                    outputs: vec!["subnets".into()]
                }
            ),
        ]
    );
    let g = store.dependency_graph("acme", &app).await.unwrap();
    assert_eq!(
        g.upstream(&app)
            .map(|(n, _)| n.to_string())
            .collect::<Vec<_>>(),
        ["net"]
    );
    assert_eq!(
        g.downstream(&app)
            .map(|(n, _)| n.to_string())
            .collect::<Vec<_>>(),
        ["plan rollout"]
    );
    let deploy = Node::plan("deploy");
    let g = store.dependency_graph("acme", &deploy).await.unwrap();
    assert_eq!(
        g.upstream(&deploy)
            .map(|(n, _)| n.to_string())
            .collect::<Vec<_>>(),
        ["net"]
    );
    // Another org sees none of it.
    assert_eq!(
        store.dependency_graph("globex", &net).await.unwrap(),
        Graph::new()
    );

    // A stack a plan hangs from is not deleted: the refusal names the plan.
    let d = audit(Some("acme"), "stack.delete", "stack:app");
    match store.delete_stack("acme", "app", false, &d).await {
        Err(StoreError::HasDependents { dependents, .. }) => {
            assert_eq!(dependents, ["plan rollout"])
        }
        other => panic!("expected dependents, got {other:?}"),
    }
    match store.delete_stack("acme", "net", false, &d).await {
        Err(StoreError::HasDependents { dependents, .. }) => {
            assert_eq!(dependents, ["app", "plan deploy"])
        }
        other => panic!("expected dependents, got {other:?}"),
    }
    // Moving the plan's edge moves what it hangs from: app is free once rollout watches net.
    store
        .save_plan(&plan("rollout", "net", &[]), &p)
        .await
        .unwrap();
    store.delete_stack("acme", "app", false, &d).await.unwrap();
    // Dropping `on_stack_change` (or the plan) takes its edge away.
    let mut unfed = plan("deploy", "net", &[]);
    unfed.on_stack_change = None;
    store.save_plan(&unfed, &p).await.unwrap();
    store
        .delete_plan(
            "acme",
            "rollout",
            &audit(Some("acme"), "plan.delete", "plan"),
        )
        .await
        .unwrap();
    assert_eq!(
        store.dependency_graph("acme", &net).await.unwrap(),
        Graph::new()
    );
    store.delete_stack("acme", "net", false, &d).await.unwrap();
}
