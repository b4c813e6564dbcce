//! Conformance cases for secrets at rest, OIDC signing keys, ID-token request tokens, and
//! re-sealing every sealed value.

use super::*;

fn secret_keys(list: &[SecretMeta]) -> Vec<String> {
    list.iter()
        .map(|s| format!("{}/{}", s.namespace, s.key))
        .collect()
}

pub async fn secrets_namespaces_are_per_org(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    seed_org(&*store, "globex").await;
    let audits = store.list_audit(None, None, 1000).await.unwrap().len();
    let a = audit(Some("acme"), "secret.put", "secret");
    for (ns, key) in [("db", "user"), ("db", "password"), ("ci", "token")] {
        let meta = store
            .put_secret("acme", ns, key, &sealed(&format!("{ns}/{key}"), "sk1"), &a)
            .await
            .unwrap();
        assert_eq!(
            (
                meta.org.as_str(),
                meta.namespace.as_str(),
                meta.key.as_str()
            ),
            ("acme", ns, key)
        );
        assert_eq!(meta.updated_by, "user:tester");
    }
    assert_eq!(
        secret_keys(&store.list_secrets("acme", None).await.unwrap()),
        ["ci/token", "db/password", "db/user"]
    );
    assert_eq!(
        secret_keys(&store.list_secrets("acme", Some("db")).await.unwrap()),
        ["db/password", "db/user"]
    );
    assert!(store
        .list_secrets("acme", Some("none"))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        store.get_secret("acme", "db", "password").await.unwrap(),
        Some(sealed("db/password", "sk1"))
    );
    assert_eq!(store.get_secret("acme", "db", "nope").await.unwrap(), None);

    // Another org has a namespace `db` of its own, even a key of the same name: each org
    // reads, lists and replaces only its own value.
    let g = audit(Some("globex"), "secret.put", "secret");
    assert_eq!(
        store.get_secret("globex", "db", "password").await.unwrap(),
        None
    );
    assert!(store.list_secrets("globex", None).await.unwrap().is_empty());
    store
        .put_secret("globex", "db", "password", &sealed("globex db", "sk1"), &g)
        .await
        .unwrap();
    assert_eq!(
        store.get_secret("globex", "db", "password").await.unwrap(),
        Some(sealed("globex db", "sk1"))
    );
    assert_eq!(
        store.get_secret("acme", "db", "password").await.unwrap(),
        Some(sealed("db/password", "sk1")),
        "another org's put changed nothing of acme's"
    );
    assert_eq!(
        secret_keys(&store.list_secrets("globex", None).await.unwrap()),
        ["db/password"]
    );
    assert_eq!(
        secret_keys(&store.list_secrets("acme", Some("db")).await.unwrap()),
        ["db/password", "db/user"]
    );
    assert_eq!(store.get_secret("acme", "gx", "key").await.unwrap(), None);
    let no_org = store
        .put_secret("ghost", "ghost-ns", "k", &sealed("x", "sk1"), &g)
        .await;
    assert!(matches!(no_org, Err(StoreError::NotFound(_))), "{no_org:?}");

    // Deleting removes only the deleting org's secret; a namespace emptied by one org is
    // simply empty, and another org uses a namespace of that name as its own.
    let d = audit(Some("acme"), "secret.delete", "secret:ci/token");
    assert!(store
        .delete_secret("acme", "ci", "token", &d)
        .await
        .unwrap());
    assert!(!store
        .delete_secret("acme", "ci", "token", &d)
        .await
        .unwrap());
    assert!(!store
        .delete_secret("globex", "db", "user", &d)
        .await
        .unwrap());
    assert_eq!(store.get_secret("acme", "ci", "token").await.unwrap(), None);
    assert_eq!(
        secret_keys(&store.list_secrets("acme", None).await.unwrap()),
        ["db/password", "db/user"]
    );
    store
        .put_secret("globex", "ci", "token", &sealed("globex ci", "sk1"), &g)
        .await
        .unwrap();
    assert_eq!(
        store.get_secret("globex", "ci", "token").await.unwrap(),
        Some(sealed("globex ci", "sk1"))
    );
    assert_eq!(store.get_secret("acme", "ci", "token").await.unwrap(), None);

    // One audit per change (three acme puts, two globex puts, one delete), none for
    // deletes of nothing, each exactly as given: no value or ciphertext added.
    let log = store.list_audit(None, None, 1000).await.unwrap();
    assert_eq!(log.len(), audits + 6);
    for r in &log[..6] {
        assert!(r.entry.action.starts_with("secret."), "{:?}", r.entry);
        assert_eq!(r.entry.detail, json!({"k": "v"}));
    }
}

pub async fn secrets_replace_keeps_created_at(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let first = store
        .put_secret(
            "acme",
            "db",
            "password",
            &sealed("one", "sk1"),
            &audit(Some("acme"), "secret.put", "secret:db/password"),
        )
        .await
        .unwrap();
    assert_eq!(first.created_at, first.updated_at);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let mut by_other = audit(Some("acme"), "secret.put", "secret:db/password");
    by_other.actor = "user:other".into();
    let second = store
        .put_secret("acme", "db", "password", &sealed("two", "sk1"), &by_other)
        .await
        .unwrap();
    assert_eq!(
        second.created_at.timestamp_millis(),
        first.created_at.timestamp_millis()
    );
    assert!(second.updated_at > first.updated_at, "{second:?}");
    assert_eq!(second.updated_by, "user:other");
    let listed = store.list_secrets("acme", None).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (
            listed[0].created_at.timestamp_millis(),
            listed[0].updated_at.timestamp_millis(),
            listed[0].updated_by.as_str()
        ),
        (
            first.created_at.timestamp_millis(),
            second.updated_at.timestamp_millis(),
            "user:other"
        )
    );
    assert_eq!(
        store.get_secret("acme", "db", "password").await.unwrap(),
        Some(sealed("two", "sk1"))
    );
}

fn signing_key(kid: &str, created_at: chrono::DateTime<Utc>) -> SigningKeyRecord {
    SigningKeyRecord {
        kid: kid.into(),
        private_key: sealed(&format!("private {kid}"), "sk1"),
        public_jwk: json!({"kty": "RSA", "n": format!("n-{kid}"), "e": "AQAB", "kid": kid,
                           "alg": "RS256", "use": "sig"}),
        created_at,
        retired_at: None,
    }
}

fn kids(keys: &[SigningKeyRecord]) -> Vec<&str> {
    keys.iter().map(|k| k.kid.as_str()).collect()
}

pub async fn signing_keys_rotate_and_prune(store: Arc<dyn Store>) {
    assert!(store.signing_keys().await.unwrap().is_empty());
    let a = audit(None, "oidc.key.rotate", "oidc");
    let audits = store.list_audit(None, None, 1000).await.unwrap().len();
    let k1 = signing_key("k1", Utc::now() - Duration::hours(2));
    store.add_signing_key(&k1, &a).await.unwrap();
    let keys = store.signing_keys().await.unwrap();
    assert_eq!(kids(&keys), ["k1"]);
    assert_eq!(keys[0].retired_at, None, "the only key is current");
    assert_eq!(keys[0].private_key, k1.private_key);
    assert_eq!(keys[0].public_jwk, k1.public_jwk);
    assert_eq!(
        keys[0].created_at.timestamp_millis(),
        k1.created_at.timestamp_millis()
    );

    let k2 = signing_key("k2", Utc::now() - Duration::hours(1));
    store.add_signing_key(&k2, &a).await.unwrap();
    let keys = store.signing_keys().await.unwrap();
    assert_eq!(kids(&keys), ["k2", "k1"], "newest first");
    assert_eq!(keys[0].retired_at, None);
    let k1_retired = keys[1].retired_at.expect("adding k2 retires k1");
    assert!(k1_retired > Utc::now() - Duration::minutes(1));

    // A refused add (the kid exists) retires nothing.
    let dup = store
        .add_signing_key(&signing_key("k1", Utc::now()), &a)
        .await;
    assert!(matches!(dup, Err(StoreError::AlreadyExists(_))), "{dup:?}");
    let keys = store.signing_keys().await.unwrap();
    assert_eq!(kids(&keys), ["k2", "k1"]);
    assert_eq!(keys[0].retired_at, None);
    assert_eq!(keys[1].retired_at, Some(k1_retired));

    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    store
        .add_signing_key(&signing_key("k3", Utc::now()), &a)
        .await
        .unwrap();
    let keys = store.signing_keys().await.unwrap();
    assert_eq!(kids(&keys), ["k3", "k2", "k1"]);
    let k2_retired = keys[1].retired_at.expect("adding k3 retires k2");
    assert!(k2_retired > k1_retired);
    assert_eq!(
        keys[2].retired_at,
        Some(k1_retired),
        "k1 keeps its retirement"
    );
    assert_eq!(
        store.list_audit(None, None, 1000).await.unwrap().len(),
        audits + 3
    );

    // Only keys retired strictly before the cut go; the current key never does.
    assert_eq!(store.prune_signing_keys(k1_retired).await.unwrap(), 0);
    assert_eq!(store.prune_signing_keys(k2_retired).await.unwrap(), 1);
    assert_eq!(kids(&store.signing_keys().await.unwrap()), ["k3", "k2"]);
    assert_eq!(
        store
            .prune_signing_keys(Utc::now() + Duration::hours(1))
            .await
            .unwrap(),
        1
    );
    assert_eq!(kids(&store.signing_keys().await.unwrap()), ["k3"]);
}

pub async fn id_request_tokens_with_their_run(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let run = store
        .create_run(&new_run("run-1", "net", RunKind::Tracked), None)
        .await
        .unwrap();
    let expires = Utc::now() + Duration::minutes(30);
    let plan = IdRequestToken {
        secret_hash: "a".repeat(64),
        run_id: "run-1".into(),
        phase: Phase::Plan,
        fencing: 1,
        expires_at: expires,
    };
    let apply = IdRequestToken {
        secret_hash: "b".repeat(64),
        phase: Phase::Apply,
        fencing: 2,
        ..plan.clone()
    };
    store.add_id_request_token(&plan).await.unwrap();
    store.add_id_request_token(&apply).await.unwrap();
    for want in [&plan, &apply] {
        let (got, got_run) = store
            .id_request_token(&want.secret_hash)
            .await
            .unwrap()
            .expect("token stored");
        assert_eq!(
            (
                got.secret_hash.as_str(),
                got.run_id.as_str(),
                got.phase,
                got.fencing
            ),
            (want.secret_hash.as_str(), "run-1", want.phase, want.fencing)
        );
        assert_eq!(
            got.expires_at.timestamp_millis(),
            expires.timestamp_millis()
        );
        assert_eq!(got_run, run);
    }
    assert!(store
        .id_request_token(&"c".repeat(64))
        .await
        .unwrap()
        .is_none());
    let orphan = IdRequestToken {
        secret_hash: "d".repeat(64),
        run_id: "run-missing".into(),
        ..plan.clone()
    };
    assert!(store.add_id_request_token(&orphan).await.is_err());
    assert!(store
        .id_request_token(&orphan.secret_hash)
        .await
        .unwrap()
        .is_none());

    // The run as it is now, not as it was when the token was made.
    let r = runner(&*store, "runner-1").await;
    let leased = store.lease_run(&r).await.unwrap().unwrap();
    let (_, now) = store
        .id_request_token(&plan.secret_hash)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(now, leased);

    // Tokens go with their run.
    store
        .cancel_run("run-1", &audit(Some("acme"), "run.cancel", "run:run-1"))
        .await
        .unwrap();
    // A leased run is only flagged; its runner ends it.
    store
        .run_event("run-1", &ev(Event::CancelAcknowledged, leased.fencing))
        .await
        .unwrap();
    assert!(store
        .get_run("run-1")
        .await
        .unwrap()
        .unwrap()
        .state
        .is_terminal());
    store
        .delete_stack(
            "acme",
            "net",
            true,
            &audit(Some("acme"), "stack.delete", "stack:net"),
        )
        .await
        .unwrap();
    assert!(store
        .id_request_token(&plan.secret_hash)
        .await
        .unwrap()
        .is_none());
}

pub async fn sealed_values_reseal_all_or_nothing(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let a = audit(Some("acme"), "secret.put", "secret");
    store
        .put_secret("acme", "db", "password", &sealed("pw", "old"), &a)
        .await
        .unwrap();
    store
        .put_secret("acme", "db", "user", &sealed("user", "old"), &a)
        .await
        .unwrap();
    let mut key = signing_key("k1", Utc::now());
    key.private_key = sealed("private", "old");
    store
        .add_signing_key(&key, &audit(None, "oidc.key.rotate", "oidc"))
        .await
        .unwrap();
    let secret = |key: &str| SealedOwner::Secret {
        org: "acme".into(),
        namespace: "db".into(),
        key: key.into(),
    };
    let kid = SealedOwner::SigningKey { kid: "k1".into() };
    let sorted = |mut v: Vec<(SealedOwner, Sealed)>| {
        v.sort_by_key(|(o, _)| format!("{o:?}"));
        v
    };
    let before = sorted(store.sealed_values().await.unwrap());
    assert_eq!(
        before,
        sorted(vec![
            (secret("password"), sealed("pw", "old")),
            (secret("user"), sealed("user", "old")),
            (kid.clone(), sealed("private", "old")),
        ])
    );
    let metas = store.list_secrets("acme", None).await.unwrap();
    let audits = store.list_audit(None, None, 1000).await.unwrap().len();

    // One unknown owner (secret or key) and nothing changes.
    let r = audit(None, "secrets.reseal", "secrets");
    for unknown in [
        secret("gone"),
        SealedOwner::SigningKey { kid: "k9".into() },
        SealedOwner::Secret {
            org: "globex".into(),
            namespace: "db".into(),
            key: "password".into(),
        },
    ] {
        let partial = vec![
            (secret("password"), sealed("pw", "new")),
            (kid.clone(), sealed("private", "new")),
            (unknown, sealed("x", "new")),
        ];
        let refused = store.reseal(&partial, &r).await;
        assert!(
            matches!(refused, Err(StoreError::NotFound(_))),
            "{refused:?}"
        );
        assert_eq!(sorted(store.sealed_values().await.unwrap()), before);
        assert_eq!(
            store.list_audit(None, None, 1000).await.unwrap().len(),
            audits
        );
    }

    // Everything under the new key, in one call with one audit.
    let resealed: Vec<(SealedOwner, Sealed)> = before
        .iter()
        .map(|(o, s)| {
            let tag = String::from_utf8(s.ciphertext.clone()).unwrap();
            (o.clone(), sealed(&format!("{tag} again"), "new"))
        })
        .collect();
    store.reseal(&resealed, &r).await.unwrap();
    assert_eq!(sorted(store.sealed_values().await.unwrap()), resealed);
    let log = store.list_audit(None, None, 1000).await.unwrap();
    assert_eq!(log.len(), audits + 1);
    assert_eq!(log[0].entry.action, "secrets.reseal");
    assert_eq!(log[0].entry.detail, json!({"k": "v"}));
    let pw = store
        .get_secret("acme", "db", "password")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(pw.key_id, "new");
    assert_eq!(
        store.signing_keys().await.unwrap()[0].private_key.key_id,
        "new"
    );
    // Re-sealing is not setting: who set a secret, and when, stay.
    assert_eq!(store.list_secrets("acme", None).await.unwrap(), metas);
}
