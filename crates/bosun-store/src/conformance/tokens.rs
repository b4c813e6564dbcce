//! Conformance cases for API tokens: created, found by hash, listed and revoked.

use super::*;

pub async fn tokens_lifecycle(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let a = audit(Some("acme"), "token.create", "token");
    let mut personal = token("p1", TokenKind::Personal, Some("owner"), None);
    personal.expires_at = Some(Utc::now() + Duration::hours(1));
    let rec = store.create_token(&personal, Some(&a)).await.unwrap();
    assert_eq!(rec.kind, TokenKind::Personal);
    assert!(rec.is_active(Utc::now()));
    assert!(!rec.is_active(Utc::now() + Duration::hours(2)));

    store
        .create_token(&token("w1", TokenKind::Pool, None, Some("acme")), Some(&a))
        .await
        .unwrap();
    store
        .create_token(&token("r1", TokenKind::Run, None, Some("acme")), None)
        .await
        .unwrap();

    let grant = store.token_grant("hash-p1").await.unwrap().unwrap();
    assert_eq!(grant.token.id, "p1");
    assert_eq!(grant.user.as_ref().map(|u| u.id.as_str()), Some("owner"));
    assert_eq!(grant.roles.get("acme"), Some(&Role::Admin));
    let pool_grant = store.token_grant("hash-w1").await.unwrap().unwrap();
    assert!(pool_grant.user.is_none() && pool_grant.roles.is_empty());
    assert!(store.token_grant("hash-none").await.unwrap().is_none());
    let found = store.token_by_hash("hash-p1").await.unwrap().unwrap();
    assert_eq!(found.id, "p1");
    assert_eq!(
        found.expires_at.map(|t| t.timestamp()),
        personal.expires_at.map(|t| t.timestamp())
    );
    assert!(store.run_is_active("run-1").await.unwrap());
    assert!(!store.run_is_active("run-unknown").await.unwrap());
    let run = store.get_token("r1").await.unwrap().unwrap();
    assert_eq!(run.read_stacks, ["up"]);
    assert_eq!(
        (run.run.as_deref(), run.stack.as_deref()),
        (Some("run-1"), Some("net"))
    );
    assert!(store.token_by_hash("hash-none").await.unwrap().is_none());

    let mine = store
        .list_tokens(&TokenFilter::User("owner".into()))
        .await
        .unwrap();
    assert_eq!(
        mine.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["p1"]
    );
    let pools = store
        .list_tokens(&TokenFilter::Org {
            org: "acme".into(),
            kind: TokenKind::Pool,
        })
        .await
        .unwrap();
    assert_eq!(pools.len(), 1);
    assert_eq!(pools[0].pool.as_deref(), Some("edge"));

    let mut dup = token("p2", TokenKind::Personal, Some("owner"), None);
    dup.secret_hash = "hash-p1".into();
    assert!(matches!(
        store.create_token(&dup, Some(&a)).await,
        Err(StoreError::AlreadyExists(_))
    ));

    let r = audit(Some("acme"), "token.revoke", "token:p1");
    assert!(store.revoke_token("p1", Some(&r)).await.unwrap());
    assert!(!store.revoke_token("p1", Some(&r)).await.unwrap());
    let revoked = store.token_by_hash("hash-p1").await.unwrap().unwrap();
    assert!(revoked.revoked_at.is_some());
    assert!(!revoked.is_active(Utc::now()));
    assert!(!store.revoke_token("missing", Some(&r)).await.unwrap());
    store.revoke_token("r1", None).await.unwrap();
    assert!(
        !store.run_is_active("run-1").await.unwrap(),
        "a run with no live token has ended"
    );
}
