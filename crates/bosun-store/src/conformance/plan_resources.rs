//! Conformance cases for what plans run against: environments and their grants, hosts,
//! inventory imports and plan files.

use super::*;

pub async fn plan_environments_grants_and_refused_delete(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    seed_org(&*store, "other").await;
    let a = |action: &str| audit(Some("acme"), action, "environment:prod");
    let prod = environment("acme", "prod", true);
    let created = store
        .create_environment(&prod, &a("environment.create"))
        .await
        .unwrap();
    assert_eq!(
        (
            created.vars.clone(),
            created.requires_approval,
            created.protected
        ),
        (prod.vars.clone(), true, true)
    );
    assert!(created.grants.is_empty());
    assert!(matches!(
        store
            .create_environment(&prod, &a("environment.create"))
            .await,
        Err(StoreError::AlreadyExists(_))
    ));
    store
        .create_environment(
            &environment("acme", "staging", false),
            &a("environment.create"),
        )
        .await
        .unwrap();
    assert!(matches!(
        store
            .create_environment(
                &environment("ghost", "prod", false),
                &a("environment.create")
            )
            .await,
        Err(StoreError::NotFound(_))
    ));

    // Grants: idempotent, sorted, only for known users and environments.
    seed_user(&*store, "alice").await;
    assert!(store
        .grant_environment("acme", "prod", "owner", &a("environment.grant"))
        .await
        .unwrap());
    assert!(store
        .grant_environment("acme", "prod", "alice", &a("environment.grant"))
        .await
        .unwrap());
    assert!(!store
        .grant_environment("acme", "prod", "alice", &a("environment.grant"))
        .await
        .unwrap());
    assert!(matches!(
        store
            .grant_environment("acme", "prod", "nobody", &a("environment.grant"))
            .await,
        Err(StoreError::NotFound(w)) if w.contains("nobody")
    ));
    assert!(matches!(
        store
            .grant_environment("acme", "qa", "alice", &a("environment.grant"))
            .await,
        Err(StoreError::NotFound(w)) if w.contains("qa")
    ));
    let got = store
        .get_environment("acme", "prod")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.grants, vec!["alice".to_string(), "owner".to_string()]);

    // An update replaces vars and flags and keeps the grants.
    let mut changed = prod.clone();
    changed.vars = BTreeMap::from([("app_port".to_string(), json!(80))]);
    changed.requires_approval = false;
    let updated = store
        .update_environment(&changed, &a("environment.update"))
        .await
        .unwrap();
    assert_eq!(updated.vars["app_port"], json!(80));
    assert!(!updated.requires_approval && updated.protected);
    assert_eq!(updated.grants.len(), 2);
    assert!(updated.updated_at >= created.updated_at);
    assert!(matches!(
        store
            .update_environment(&environment("acme", "qa", false), &a("environment.update"))
            .await,
        Err(StoreError::NotFound(_))
    ));

    assert!(store
        .revoke_environment_grant("acme", "prod", "owner", &a("environment.revoke"))
        .await
        .unwrap());
    assert!(!store
        .revoke_environment_grant("acme", "prod", "owner", &a("environment.revoke"))
        .await
        .unwrap());

    // Org-scoped: the other org sees none of it.
    assert!(store
        .get_environment("other", "prod")
        .await
        .unwrap()
        .is_none());
    assert!(store.list_environments("other").await.unwrap().is_empty());
    let ids: Vec<String> = store
        .list_environments("acme")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(ids, ["prod", "staging"]);

    // Deleting an environment that hosts are in is refused, naming them.
    for name in ["web-2", "web-1"] {
        store
            .create_host(&host("acme", name, Some("prod")), &a("host.create"))
            .await
            .unwrap();
    }
    let before = store.list_audit(None, None, 1000).await.unwrap().len();
    match store
        .delete_environment("acme", "prod", &a("environment.delete"))
        .await
    {
        Err(StoreError::EnvironmentInUse { environment, hosts }) => {
            assert_eq!(environment, "prod");
            assert_eq!(hosts, ["web-1", "web-2"]);
        }
        other => panic!("expected EnvironmentInUse, got {other:?}"),
    }
    assert_eq!(
        store.list_audit(None, None, 1000).await.unwrap().len(),
        before
    );
    for name in ["web-1", "web-2"] {
        assert!(store
            .delete_host("acme", name, &a("host.delete"))
            .await
            .unwrap());
    }
    assert!(store
        .delete_environment("acme", "prod", &a("environment.delete"))
        .await
        .unwrap());
    assert!(!store
        .delete_environment("acme", "prod", &a("environment.delete"))
        .await
        .unwrap());
    assert!(store
        .get_environment("acme", "prod")
        .await
        .unwrap()
        .is_none());
    // Its grants went with it: a new "prod" starts with none.
    let again = store
        .create_environment(&prod, &a("environment.create"))
        .await
        .unwrap();
    assert!(again.grants.is_empty());

    let actions = audit_actions(&*store, "acme").await;
    for action in [
        "environment.create",
        "environment.grant",
        "environment.update",
        "environment.revoke",
        "environment.delete",
    ] {
        assert!(actions.iter().any(|x| x == action), "{action}: {actions:?}");
    }
    // Two grants and one revoke were written; the no-op ones were not.
    assert_eq!(
        actions.iter().filter(|x| *x == "environment.grant").count(),
        2
    );
    assert_eq!(
        actions
            .iter()
            .filter(|x| *x == "environment.revoke")
            .count(),
        1
    );
}

pub async fn plan_hosts_roundtrip_every_field(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    seed_org(&*store, "other").await;
    let a = |action: &str| audit(Some("acme"), action, "host:web-1");
    store
        .create_environment(
            &environment("acme", "prod", false),
            &a("environment.create"),
        )
        .await
        .unwrap();
    let full = NewHost {
        org: "acme".into(),
        name: "web-1".into(),
        address: "10.1.0.11".into(),
        port: 2222,
        user: Some("deploy".into()),
        connection: "ssh".into(),
        labels: vec!["web".into(), "eu".into()],
        vars: BTreeMap::from([
            ("weight".to_string(), json!(3)),
            ("tags".to_string(), json!({"a": [1, "b"]})),
        ]),
        environment: Some("prod".into()),
        identity_file: Some("~/.ssh/id_ed25519".into()),
        host_key: Some("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDxk".into()),
        known_hosts: Some("/etc/ssh/known".into()),
        proxy_jump: Some("edge-1".into()),
    };
    store
        .create_host(&host("acme", "edge-1", None), &a("host.create"))
        .await
        .unwrap();
    let created = store.create_host(&full, &a("host.create")).await.unwrap();
    assert_eq!(created.proxy_jump.as_deref(), Some("edge-1"));
    let back = store.get_host("acme", "web-1").await.unwrap().unwrap();
    assert_eq!(back, created);
    let as_new = NewHost {
        org: back.org.clone(),
        name: back.name.clone(),
        address: back.address.clone(),
        port: back.port,
        user: back.user.clone(),
        connection: back.connection.clone(),
        labels: back.labels.clone(),
        vars: back.vars.clone(),
        environment: back.environment.clone(),
        identity_file: back.identity_file.clone(),
        host_key: back.host_key.clone(),
        known_hosts: back.known_hosts.clone(),
        proxy_jump: back.proxy_jump.clone(),
    };
    assert_eq!(as_new, full);
    assert!(matches!(
        store.create_host(&full, &a("host.create")).await,
        Err(StoreError::AlreadyExists(_))
    ));
    // An environment the org does not have (here: another org's) is refused.
    store
        .create_environment(&environment("other", "qa", false), &a("environment.create"))
        .await
        .unwrap();
    assert!(matches!(
        store
            .create_host(&host("acme", "web-9", Some("qa")), &a("host.create"))
            .await,
        Err(StoreError::UnknownEnvironment(e)) if e == "qa"
    ));
    let mut moved = full.clone();
    moved.environment = Some("qa".into());
    assert!(matches!(
        store.update_host(&moved, &a("host.update")).await,
        Err(StoreError::UnknownEnvironment(_))
    ));

    // Update replaces every field; clearing optional ones clears them.
    let mut local = host("acme", "web-1", None);
    local.connection = "local".into();
    local.address = "localhost".into();
    let updated = store.update_host(&local, &a("host.update")).await.unwrap();
    assert_eq!(
        (
            updated.connection.as_str(),
            updated.environment.clone(),
            updated.labels.len(),
            updated.host_key.clone(),
            updated.proxy_jump.clone()
        ),
        ("local", None, 0, None, None)
    );
    assert_eq!(updated.created_at, created.created_at);
    assert!(matches!(
        store
            .update_host(&host("acme", "ghost", None), &a("host.update"))
            .await,
        Err(StoreError::NotFound(_))
    ));

    store
        .create_host(&host("acme", "db-1", None), &a("host.create"))
        .await
        .unwrap();
    store
        .create_host(&host("other", "aaa", None), &a("host.create"))
        .await
        .unwrap();
    let names: Vec<String> = store
        .list_hosts("acme")
        .await
        .unwrap()
        .into_iter()
        .map(|h| h.name)
        .collect();
    assert_eq!(names, ["db-1", "edge-1", "web-1"]);
    assert!(store.get_host("other", "web-1").await.unwrap().is_none());
    assert!(!store
        .delete_host("other", "web-1", &a("host.delete"))
        .await
        .unwrap());
    assert!(store
        .delete_host("acme", "web-1", &a("host.delete"))
        .await
        .unwrap());
    assert!(store.get_host("acme", "web-1").await.unwrap().is_none());
    let actions = audit_actions(&*store, "acme").await;
    for action in ["host.create", "host.update", "host.delete"] {
        assert!(actions.iter().any(|x| x == action), "{action}: {actions:?}");
    }
}

/// A host's bastion (`proxy_jump`): kept, cleared, checked inside the transaction (a
/// host of the same org, `ssh`, no cycle), and a host others jump through is neither
/// deleted nor made `local`; an import may name a bastion it adds later, and a bad one
/// leaves nothing behind.
pub async fn plan_hosts_bastions_checked_and_kept(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    seed_org(&*store, "other").await;
    let a = |action: &str| audit(Some("acme"), action, "host:app");
    let behind = |name: &str, bastion: &str| {
        let mut h = host("acme", name, None);
        h.proxy_jump = Some(bastion.to_string());
        h
    };
    let refused = |r: Result<HostRecord>, want_host: &str, want_why: &str| match r {
        Err(StoreError::InvalidBastion { host, why, .. })
            if host == want_host && why.contains(want_why) => {}
        other => panic!("expected InvalidBastion of {want_host} ({want_why}), got {other:?}"),
    };
    let before = store.list_audit(None, None, 1000).await.unwrap().len();
    // Another org's host is no bastion here.
    store
        .create_host(&host("other", "edge", None), &a("host.create"))
        .await
        .unwrap();
    let before = before + 1;
    refused(
        store
            .create_host(&behind("app", "edge"), &a("host.create"))
            .await,
        "app",
        "no host \"edge\"",
    );
    assert!(store.get_host("acme", "app").await.unwrap().is_none());
    assert_eq!(
        store.list_audit(None, None, 1000).await.unwrap().len(),
        before
    );

    store
        .create_host(&host("acme", "edge", None), &a("host.create"))
        .await
        .unwrap();
    let app = store
        .create_host(&behind("app", "edge"), &a("host.create"))
        .await
        .unwrap();
    assert_eq!(app.proxy_jump.as_deref(), Some("edge"));
    // A chain: db through app, app through edge.
    store
        .create_host(&behind("db", "app"), &a("host.create"))
        .await
        .unwrap();
    let listed: Vec<(String, Option<String>)> = store
        .list_hosts("acme")
        .await
        .unwrap()
        .into_iter()
        .map(|h| (h.name, h.proxy_jump))
        .collect();
    assert_eq!(
        listed,
        [
            ("app".to_string(), Some("edge".to_string())),
            ("db".to_string(), Some("app".to_string())),
            ("edge".to_string(), None),
        ]
    );
    let page = store.list_hosts_page("acme", Some("app"), 1).await.unwrap();
    assert_eq!(page[0].proxy_jump.as_deref(), Some("app"));

    // A cycle, through itself or round the chain, is refused and changes nothing.
    refused(
        store
            .update_host(&behind("edge", "db"), &a("host.update"))
            .await,
        "edge",
        "cycle: edge → db → app → edge",
    );
    refused(
        store
            .update_host(&behind("edge", "edge"), &a("host.update"))
            .await,
        "edge",
        "cycle: edge → edge",
    );
    assert_eq!(
        store
            .get_host("acme", "edge")
            .await
            .unwrap()
            .unwrap()
            .proxy_jump,
        None
    );
    // A local host is no bastion, and has none.
    let mut build = host("acme", "build", None);
    build.connection = "local".into();
    store.create_host(&build, &a("host.create")).await.unwrap();
    refused(
        store
            .create_host(&behind("web", "build"), &a("host.create"))
            .await,
        "web",
        "connection `local`",
    );
    let mut local_behind = behind("build", "edge");
    local_behind.connection = "local".into();
    refused(
        store.update_host(&local_behind, &a("host.update")).await,
        "build",
        "has no bastion",
    );
    // A host others jump through stays: not deleted, not made local.
    let audits = store.list_audit(None, None, 1000).await.unwrap().len();
    match store.delete_host("acme", "edge", &a("host.delete")).await {
        Err(StoreError::HostInUse { host, hosts }) => {
            assert_eq!((host.as_str(), hosts), ("edge", vec!["app".to_string()]));
        }
        other => panic!("expected HostInUse, got {other:?}"),
    }
    let mut edge_local = host("acme", "edge", None);
    edge_local.connection = "local".into();
    assert!(matches!(
        store.update_host(&edge_local, &a("host.update")).await,
        Err(StoreError::HostInUse { host, hosts }) if host == "edge" && hosts == ["app"]
    ));
    assert!(store.get_host("acme", "edge").await.unwrap().is_some());
    assert_eq!(
        store.list_audit(None, None, 1000).await.unwrap().len(),
        audits
    );

    // Cleared, the bastion is free to go.
    let cleared = store
        .update_host(&host("acme", "app", None), &a("host.update"))
        .await
        .unwrap();
    assert_eq!(cleared.proxy_jump, None);
    assert!(store
        .delete_host("acme", "edge", &a("host.delete"))
        .await
        .unwrap());

    // An import may name a bastion it adds after the host; one that makes a cycle (or
    // names no host) leaves nothing of the import behind.
    let i = audit(Some("acme"), "inventory.import", "inventory");
    let import = InventoryImport {
        org: "acme".into(),
        environments: vec![],
        hosts: vec![behind("w1", "w0"), host("acme", "w0", None)],
    };
    let done = store.import_inventory(&import, &i).await.unwrap();
    assert_eq!(done.hosts_created, ["w1", "w0"]);
    assert_eq!(
        store
            .get_host("acme", "w1")
            .await
            .unwrap()
            .unwrap()
            .proxy_jump
            .as_deref(),
        Some("w0")
    );
    let audits = store.list_audit(None, None, 1000).await.unwrap().len();
    for hosts in [
        vec![behind("w2", "w1"), behind("w0", "w2")],
        vec![behind("w2", "ghost")],
    ] {
        let broken = InventoryImport {
            org: "acme".into(),
            environments: vec![],
            hosts,
        };
        assert!(matches!(
            store.import_inventory(&broken, &i).await,
            Err(StoreError::InvalidBastion { .. })
        ));
        assert!(store.get_host("acme", "w2").await.unwrap().is_none());
        assert_eq!(
            store
                .get_host("acme", "w0")
                .await
                .unwrap()
                .unwrap()
                .proxy_jump,
            None
        );
    }
    assert_eq!(
        store.list_audit(None, None, 1000).await.unwrap().len(),
        audits
    );
}

pub async fn plan_inventory_import_is_one_transaction(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let a = audit(Some("acme"), "inventory.import", "inventory");
    store
        .create_environment(&environment("acme", "staging", false), &a)
        .await
        .unwrap();
    store
        .create_host(&host("acme", "web-1", None), &a)
        .await
        .unwrap();
    let mut web1 = host("acme", "web-1", Some("prod"));
    web1.labels = vec!["web".into()];
    let import = InventoryImport {
        org: "acme".into(),
        environments: vec![
            environment("acme", "prod", true),
            environment("acme", "staging", false),
        ],
        hosts: vec![web1, host("acme", "build", Some("staging"))],
    };
    let done = store.import_inventory(&import, &a).await.unwrap();
    assert_eq!(
        done,
        InventoryImported {
            environments_created: vec!["prod".into()],
            environments_updated: vec!["staging".into()],
            hosts_created: vec!["build".into()],
            hosts_updated: vec!["web-1".into()],
        }
    );
    let web1 = store.get_host("acme", "web-1").await.unwrap().unwrap();
    assert_eq!(web1.environment.as_deref(), Some("prod"));
    assert_eq!(web1.labels, ["web"]);
    let last = store.list_audit(Some("acme"), None, 1).await.unwrap();
    assert_eq!(last[0].entry.action, "inventory.import");
    assert_eq!(last[0].entry.detail["hosts_created"], json!(["build"]));

    // A bad host late in the file leaves nothing of the import behind.
    let before = store.list_audit(None, None, 1000).await.unwrap().len();
    let broken = InventoryImport {
        org: "acme".into(),
        environments: vec![environment("acme", "qa", false)],
        hosts: vec![
            host("acme", "new-1", Some("qa")),
            host("acme", "new-2", Some("nowhere")),
        ],
    };
    assert!(matches!(
        store.import_inventory(&broken, &a).await,
        Err(StoreError::UnknownEnvironment(e)) if e == "nowhere"
    ));
    assert!(store.get_environment("acme", "qa").await.unwrap().is_none());
    assert!(store.get_host("acme", "new-1").await.unwrap().is_none());
    assert_eq!(
        store.list_audit(None, None, 1000).await.unwrap().len(),
        before
    );
}

pub async fn plan_files_versioned_and_org_scoped(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    seed_org(&*store, "other").await;
    let a = audit(Some("acme"), "plan.save", "plan:app-config");
    let v1 = NewPlan {
        org: "acme".into(),
        name: "app-config".into(),
        source: "name: app-config\nsteps: []\n  # kept exactly, comments too\n".into(),
        schedule: None,
        on_stack_change: None,
    };
    let first = store.save_plan(&v1, &a).await.unwrap();
    assert_eq!(
        (first.version, first.updated_by.as_str()),
        (1, "user:tester")
    );
    assert_eq!(first.source, v1.source);
    let mut v2 = v1.clone();
    v2.source = "name: app-config\nsteps: [] # v2\n".into();
    let second = store.save_plan(&v2, &a).await.unwrap();
    assert_eq!(second.version, 2);
    assert_eq!(second.created_at, first.created_at);
    assert_eq!(
        store.get_plan("acme", "app-config").await.unwrap().unwrap(),
        second
    );
    let last = store.list_audit(Some("acme"), None, 1).await.unwrap();
    assert_eq!(last[0].entry.detail["version"], json!(2));

    // Same name in another org: its own version 1.
    let mut theirs = v1.clone();
    theirs.org = "other".into();
    assert_eq!(store.save_plan(&theirs, &a).await.unwrap().version, 1);
    let mut ghost = v1.clone();
    ghost.org = "ghost".into();
    assert!(matches!(
        store.save_plan(&ghost, &a).await,
        Err(StoreError::NotFound(_))
    ));

    let mut b = v1.clone();
    b.name = "backup".into();
    store.save_plan(&b, &a).await.unwrap();
    let names: Vec<String> = store
        .list_plans("acme")
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["app-config", "backup"]);
    assert!(store.delete_plan("acme", "app-config", &a).await.unwrap());
    assert!(!store.delete_plan("acme", "app-config", &a).await.unwrap());
    assert!(store
        .get_plan("acme", "app-config")
        .await
        .unwrap()
        .is_none());
    assert!(store
        .get_plan("other", "app-config")
        .await
        .unwrap()
        .is_some());
    // Recreated after a delete: version 1 again.
    assert_eq!(store.save_plan(&v1, &a).await.unwrap().version, 1);
}

pub async fn plan_hosts_and_plans_page_by_name(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    seed_org(&*store, "other").await;
    let a = audit(Some("acme"), "host.create", "host");
    for (org, name) in [
        ("acme", "web-3"),
        ("acme", "db-1"),
        ("other", "db-2"),
        ("acme", "web-1"),
        ("acme", "cache-1"),
    ] {
        let host = NewHost {
            org: org.into(),
            name: name.into(),
            address: format!("{name}.internal"),
            port: 22,
            user: None,
            connection: "ssh".into(),
            labels: vec![],
            vars: BTreeMap::new(),
            environment: None,
            identity_file: None,
            host_key: None,
            known_hosts: None,
            proxy_jump: None,
        };
        store.create_host(&host, &a).await.unwrap();
        let plan = NewPlan {
            org: org.into(),
            name: format!("p-{name}"),
            source: format!("name: p-{name}\nsteps: []\n"),
            schedule: None,
            on_stack_change: None,
        };
        store.save_plan(&plan, &a).await.unwrap();
    }
    let hosts = |v: Vec<HostRecord>| v.into_iter().map(|h| h.name).collect::<Vec<_>>();
    let plans = |v: Vec<PlanRecord>| v.into_iter().map(|p| p.name).collect::<Vec<_>>();
    let pages = [
        (None, vec!["cache-1", "db-1"]),
        (Some("db-1"), vec!["web-1", "web-3"]),
        (Some("web-3"), vec![]),
        // A cursor needs not be a host: the page starts after it in name order.
        (Some("d"), vec!["db-1", "web-1"]),
    ];
    for (after, want) in pages {
        let got = hosts(store.list_hosts_page("acme", after, 2).await.unwrap());
        assert_eq!(got, want, "hosts after {after:?}");
        let after_plan = after.map(|a| format!("p-{a}"));
        let got = plans(
            store
                .list_plans_page("acme", after_plan.as_deref(), 2)
                .await
                .unwrap(),
        );
        let want: Vec<String> = want.iter().map(|n| format!("p-{n}")).collect();
        assert_eq!(got, want, "plans after {after_plan:?}");
    }
    // Every page together is the whole list, in the order list_hosts gives it.
    assert_eq!(
        hosts(store.list_hosts_page("acme", None, 1000).await.unwrap()),
        hosts(store.list_hosts("acme").await.unwrap())
    );
    assert_eq!(
        hosts(store.list_hosts_page("other", None, 10).await.unwrap()),
        ["db-2"]
    );
    assert!(store
        .list_plans_page("ghost", None, 10)
        .await
        .unwrap()
        .is_empty());
}

pub async fn sourced_hosts_are_kept_per_owner_and_never_replace_others(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let mut web = environment("acme", "web", false);
    web.hosts_from = Some(
        json!([{"stack": "fleet", "output": "hosts", "name": "{{ item.n }}",
        "address": "{{ item.ip }}"}]),
    );
    let a = audit(Some("acme"), "x", "y");
    store.create_environment(&web, &a).await.unwrap();
    store
        .create_host(&host("acme", "manual", None), &a)
        .await
        .unwrap();
    let from =
        |v: i64| json!({"environment": "web", "stack": "fleet", "output": "hosts", "version": v});
    let sync = |names: &[&str], version: i64| SourcedHosts {
        org: "acme".into(),
        owner: "web".into(),
        environment: Some("web".into()),
        hosts: names
            .iter()
            .map(|n| (host("acme", n, Some("web")), from(version)))
            .collect(),
    };
    let out = store
        .sync_sourced_hosts(&sync(&["w-1", "w-2"], 1), &a)
        .await
        .unwrap();
    assert_eq!(out.added, ["w-1", "w-2"]);
    assert_eq!(
        store.get_host("acme", "w-1").await.unwrap().unwrap().source,
        Some(from(1))
    );
    // The same again changes nothing; a new version updates, a host no longer given goes.
    let out = store
        .sync_sourced_hosts(&sync(&["w-1", "w-2"], 1), &a)
        .await
        .unwrap();
    assert_eq!(out, SourcedSync::default());
    let out = store
        .sync_sourced_hosts(&sync(&["w-2", "w-3"], 2), &a)
        .await
        .unwrap();
    assert_eq!(
        (out.added, out.updated, out.removed),
        (
            vec!["w-3".to_string()],
            vec!["w-2".to_string()],
            vec!["w-1".to_string()]
        )
    );
    // A host added by hand, or another owner's, is never replaced; nothing is written.
    assert!(matches!(
        store
            .sync_sourced_hosts(&sync(&["w-2", "manual"], 3), &a)
            .await,
        Err(StoreError::AlreadyExists(_))
    ));
    assert_eq!(
        store.get_host("acme", "w-2").await.unwrap().unwrap().source,
        Some(from(2))
    );
    let plan_owned = SourcedHosts {
        owner: "plan:direct".into(),
        environment: None,
        ..sync(&["w-3"], 1)
    };
    assert!(matches!(
        store.sync_sourced_hosts(&plan_owned, &a).await,
        Err(StoreError::AlreadyExists(_))
    ));
    // The environment takes hosts from nowhere any more: the hosts it took go.
    web.hosts_from = None;
    store.update_environment(&web, &a).await.unwrap();
    let left: Vec<String> = store
        .list_hosts("acme")
        .await
        .unwrap()
        .into_iter()
        .map(|h| h.name)
        .collect();
    assert_eq!(left, ["manual"]);
}
