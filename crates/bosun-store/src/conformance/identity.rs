//! Conformance cases for orgs, users and their memberships, and the first-start bootstrap.

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

    store
        .create_user(
            &NewUser {
                id: "alice".into(),
                server_admin: false,
            },
            &audit(None, "user.create", "user:alice"),
        )
        .await
        .unwrap();
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
        store.list_members("acme").await.unwrap(),
        vec![
            ("alice".to_string(), Role::Operator),
            ("owner".to_string(), Role::Admin)
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
