//! Conformance cases for orgs, users and their memberships, and the first-start bootstrap.

use bosun_core::sign_in::MembershipSource;

use super::*;

pub async fn bootstrap_only_once(store: Arc<dyn Store>) {
    let seed = Bootstrap {
        org: "default".into(),
        user: "admin".into(),
        token: token("boot", TokenKind::Personal, Some("admin"), None),
    };
    assert!(store.bootstrap(&seed).await.unwrap());
    let second = Bootstrap {
        token: token("boot2", TokenKind::Personal, Some("admin"), None),
        ..seed.clone()
    };
    assert!(!store.bootstrap(&second).await.unwrap());
    assert!(store.token_by_hash("hash-boot2").await.unwrap().is_none());
    let admin = store.get_user("admin").await.unwrap().unwrap();
    assert!(admin.server_admin);
    assert_eq!(
        store.roles_of("admin").await.unwrap(),
        BTreeMap::from([("default".to_string(), Role::Admin)])
    );
    let t = store.token_by_hash("hash-boot").await.unwrap().unwrap();
    assert_eq!(t.user.as_deref(), Some("admin"));
    let log = store.list_audit(Some("default"), None, 10).await.unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].entry.action, "server.bootstrap");
}

pub async fn orgs_and_members(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let org = store.get_org("acme").await.unwrap().unwrap();
    assert_eq!(org.name, "Org acme");
    assert!(store.get_org("nope").await.unwrap().is_none());
    let dup = store
        .create_org(
            &NewOrg {
                id: "acme".into(),
                name: "again".into(),
                admin: None,
            },
            &audit(Some("acme"), "org.create", "acme"),
        )
        .await;
    assert!(matches!(dup, Err(StoreError::AlreadyExists(_))), "{dup:?}");

    seed_user(&*store, "alice").await;
    let a = audit(Some("acme"), "member.set", "user:alice");
    store
        .set_member("acme", "alice", Role::Viewer, &a)
        .await
        .unwrap();
    store
        .set_member("acme", "alice", Role::Operator, &a)
        .await
        .unwrap();
    assert_eq!(
        store.roles_of("alice").await.unwrap().get("acme"),
        Some(&Role::Operator)
    );
    assert_eq!(
        store
            .list_members("acme")
            .await
            .unwrap()
            .into_iter()
            .map(|m| (m.user, m.role, m.source))
            .collect::<Vec<_>>(),
        vec![
            (
                "alice".to_string(),
                Role::Operator,
                MembershipSource::Manual
            ),
            ("owner".to_string(), Role::Admin, MembershipSource::Manual)
        ]
    );
    let missing = store.set_member("acme", "ghost", Role::Viewer, &a).await;
    assert!(
        matches!(missing, Err(StoreError::NotFound(_))),
        "{missing:?}"
    );
    let missing = store.set_member("nope", "alice", Role::Viewer, &a).await;
    assert!(
        matches!(missing, Err(StoreError::NotFound(_))),
        "{missing:?}"
    );

    assert!(store.remove_member("acme", "alice", &a).await.unwrap());
    assert!(!store.remove_member("acme", "alice", &a).await.unwrap());
    assert!(store.roles_of("alice").await.unwrap().is_empty());
}

pub async fn users_are_unique(store: Arc<dyn Store>) {
    let u = NewUser {
        id: "bob".into(),
        server_admin: false,
    };
    store
        .create_user(&u, &audit(None, "user.create", "user:bob"))
        .await
        .unwrap();
    let again = store
        .create_user(&u, &audit(None, "user.create", "user:bob"))
        .await;
    assert!(
        matches!(again, Err(StoreError::AlreadyExists(_))),
        "{again:?}"
    );
    let got = store.get_user("bob").await.unwrap().unwrap();
    assert!(!got.server_admin);
}

pub async fn orgs_pr_feedback_updated_and_audited(store: Arc<dyn Store>) {
    use bosun_core::feedback::PrFeedback;
    seed_org(&*store, "acme").await;
    seed_org(&*store, "other").await;
    let org = store.get_org("acme").await.unwrap().unwrap();
    assert_eq!(org.pr_feedback, PrFeedback::Both, "a new org gets both");
    let change = |f| OrgUpdate {
        pr_feedback: Some(f),
    };
    let a = Audit {
        detail: json!({}),
        ..audit(Some("acme"), "org.update", "org:acme")
    };
    let updated = store
        .update_org("acme", &change(PrFeedback::Checks), &a)
        .await
        .unwrap();
    assert_eq!(updated.pr_feedback, PrFeedback::Checks);
    assert_eq!(
        (updated.name, updated.created_at),
        (org.name, org.created_at)
    );
    assert_eq!(
        store.get_org("acme").await.unwrap().unwrap().pr_feedback,
        PrFeedback::Checks
    );
    assert_eq!(
        store.get_org("other").await.unwrap().unwrap().pr_feedback,
        PrFeedback::Both,
        "another org keeps its own"
    );
    for f in PrFeedback::ALL {
        store.update_org("acme", &change(f), &a).await.unwrap();
        assert_eq!(store.get_org("acme").await.unwrap().unwrap().pr_feedback, f);
    }
    // The audit entry names the old and new value, in the change's transaction.
    let log = store.list_audit(Some("acme"), None, 10).await.unwrap();
    let updates: Vec<_> = log
        .iter()
        .filter(|r| r.entry.action == "org.update")
        .collect();
    assert_eq!(updates.len(), 1 + PrFeedback::ALL.len());
    assert_eq!(
        updates.last().unwrap().entry.detail,
        json!({"pr_feedback": {"old": "both", "new": "checks"}}),
        "the oldest update, from both to checks"
    );
    assert_eq!(
        updates[0].entry.detail,
        json!({"pr_feedback": {"old": "comment", "new": "none"}})
    );
    // An unknown org changes nothing and writes no audit entry.
    let missing = store
        .update_org("nope", &change(PrFeedback::None), &a)
        .await;
    assert!(
        matches!(missing, Err(StoreError::NotFound(_))),
        "{missing:?}"
    );
    assert_eq!(
        store
            .list_audit(Some("acme"), None, 100)
            .await
            .unwrap()
            .len(),
        log.len()
    );
}
