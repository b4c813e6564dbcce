//! Conformance cases for people's sign-in: identities linked by (issuer, subject),
//! provider-given memberships following the rules while manual ones stay, sign-ins begun
//! taken once, and console sessions.

use std::collections::BTreeMap;

use bosun_core::sign_in::{Granted, MembershipChange, MembershipSource};
use chrono::{Duration, Utc};

use super::*;

fn granted(pairs: &[(&str, Role)]) -> BTreeMap<String, Granted> {
    pairs
        .iter()
        .map(|(org, role)| {
            (
                org.to_string(),
                Granted {
                    role: *role,
                    because: format!("claim \"groups\" holds \"team-{org}\""),
                },
            )
        })
        .collect()
}

fn person(issuer: &str, subject: &str, grants: &[(&str, Role)]) -> ProviderSignIn {
    ProviderSignIn {
        provider: "corp".into(),
        issuer: issuer.into(),
        subject: subject.into(),
        email: Some("alice@example.com".into()),
        username: Some("alice".into()),
        proposed_user: "alice".into(),
        granted: granted(grants),
    }
}

fn session(id: &str, secret: &str) -> NewSession {
    NewSession {
        id: id.into(),
        secret_hash: secret.into(),
        user: String::new(),
        method: SessionMethod::Provider,
        provider: Some("corp".into()),
        subject: None,
        token_id: None,
        id_token: Some("header.claims.signature".into()),
        refresh: Some(Sealed {
            ciphertext: vec![1, 2, 3],
            nonce: vec![4; 12],
            key_id: "k1".into(),
        }),
        expires_at: Utc::now() + Duration::hours(12),
    }
}

fn sign_in_audit() -> Audit {
    audit(None, "session.create", "user")
}

pub async fn sign_in_links_identities_and_follows_the_providers_rules(store: Arc<dyn Store>) {
    seed_org(&*store, "net").await;
    seed_org(&*store, "web").await;
    assert_eq!(store.org_ids(10).await.unwrap(), ["net", "web"]);
    assert_eq!(store.org_ids(1).await.unwrap(), ["net"]);
    // A user made by hand already has the name the provider proposes, and the same email.
    seed_user(&*store, "alice").await;
    let issuer = "https://idp.example.com";

    // A first sign-in never takes over that user: it makes its own, linked by subject.
    let (first, s1) = store
        .sign_in(
            &person(issuer, "sub-1", &[("net", Role::Operator)]),
            &session("ses-1", "h1"),
            None,
            &sign_in_audit(),
        )
        .await
        .unwrap();
    assert!(first.created);
    assert_eq!(first.user.id, "alice-2");
    assert_eq!(s1.user, "alice-2");
    assert_eq!(
        first.changes,
        [MembershipChange::Add {
            org: "net".into(),
            role: Role::Operator,
            because: "claim \"groups\" holds \"team-net\"".into()
        }]
    );
    assert!(store.roles_of("alice").await.unwrap().is_empty());

    // The same subject again: the same user, nothing to change.
    let (again, _) = store
        .sign_in(
            &person(issuer, "sub-1", &[("net", Role::Operator)]),
            &session("ses-2", "h2"),
            None,
            &sign_in_audit(),
        )
        .await
        .unwrap();
    assert_eq!((again.user.id.as_str(), again.created), ("alice-2", false));
    assert!(again.changes.is_empty());
    // The same subject at another issuer is another person.
    let (other, _) = store
        .sign_in(
            &person("https://other.example.com", "sub-1", &[]),
            &session("ses-3", "h3"),
            None,
            &sign_in_audit(),
        )
        .await
        .unwrap();
    assert_eq!(other.user.id, "alice-3");

    // An admin's membership is manual; the provider's rules leave it, and remove theirs.
    store
        .set_member(
            "web",
            "alice-2",
            Role::Admin,
            &audit(Some("web"), "member.set", "user:alice-2"),
        )
        .await
        .unwrap();
    let (later, _) = store
        .sign_in(
            &person(issuer, "sub-1", &[("web", Role::Viewer)]),
            &session("ses-4", "h4"),
            None,
            &sign_in_audit(),
        )
        .await
        .unwrap();
    assert_eq!(
        later.changes,
        [MembershipChange::Remove {
            org: "net".into(),
            role: Role::Operator
        }]
    );
    let roles = store.roles_of("alice-2").await.unwrap();
    assert_eq!(
        roles.into_iter().collect::<Vec<_>>(),
        [("web".to_string(), Role::Admin)]
    );
    let members = store.list_members("web").await.unwrap();
    let m = members.iter().find(|m| m.user == "alice-2").unwrap();
    assert_eq!(m.source, MembershipSource::Manual);

    // A role the rules change is changed, and each change is audited with its rule.
    store
        .sign_in(
            &person(
                issuer,
                "sub-1",
                &[("web", Role::Viewer), ("net", Role::Viewer)],
            ),
            &session("ses-5", "h5"),
            None,
            &sign_in_audit(),
        )
        .await
        .unwrap();
    store
        .sign_in(
            &person(
                issuer,
                "sub-1",
                &[("web", Role::Viewer), ("net", Role::Admin)],
            ),
            &session("ses-6", "h6"),
            None,
            &sign_in_audit(),
        )
        .await
        .unwrap();
    let net = store.list_members("net").await.unwrap();
    assert_eq!(
        (net[0].user.as_str(), net[0].role, net[0].source),
        ("alice-2", Role::Admin, MembershipSource::Provider)
    );
    assert_eq!(
        net[0].source_detail.as_deref(),
        Some("claim \"groups\" holds \"team-net\"")
    );
    let trail = store
        .search_audit(
            Some("net"),
            &AuditFilter {
                actor: Some("provider:corp".into()),
                ..Default::default()
            },
            None,
            10,
        )
        .await
        .unwrap();
    let actions: Vec<&str> = trail.iter().map(|r| r.entry.action.as_str()).collect();
    assert_eq!(
        actions,
        ["member.update", "member.add", "member.remove", "member.add"]
    );
    assert_eq!(trail[0].entry.detail["old"], "viewer");
    assert_eq!(
        trail[0].entry.detail["rule"],
        "claim \"groups\" holds \"team-net\""
    );
    assert_eq!(trail[0].entry.detail["subject"], "sub-1");
}

pub async fn sign_in_attempts_are_taken_once_and_expire(store: Arc<dyn Store>) {
    let attempt = |state: &str, expires_in: Duration| SignInAttempt {
        state_hash: state.into(),
        provider: "corp".into(),
        binding: SignInBinding::Browser {
            cookie_hash: "b".into(),
        },
        nonce: "n".into(),
        verifier: "v".into(),
        next: "/orgs/net".into(),
        expires_at: Utc::now() + expires_in,
    };
    store
        .begin_sign_in(&attempt("s1", Duration::minutes(10)))
        .await
        .unwrap();
    // The same state twice is refused.
    assert!(matches!(
        store
            .begin_sign_in(&attempt("s1", Duration::minutes(10)))
            .await,
        Err(StoreError::AlreadyExists(_))
    ));
    let taken = store.take_sign_in("s1").await.unwrap().unwrap();
    assert_eq!(
        (taken.nonce.as_str(), taken.next.as_str()),
        ("n", "/orgs/net")
    );
    // Taken once: a replay finds nothing.
    assert!(store.take_sign_in("s1").await.unwrap().is_none());
    // An expired one is not answered, and is gone.
    store
        .begin_sign_in(&attempt("s2", -Duration::seconds(1)))
        .await
        .unwrap();
    assert!(store.take_sign_in("s2").await.unwrap().is_none());
    assert!(store.take_sign_in("unknown").await.unwrap().is_none());
    // A `bosun login` through the browser keeps the CLI's loopback and challenge.
    let cli = SignInBinding::Cli {
        redirect_uri: "http://127.0.0.1:4711/bosun-login".into(),
        code_challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM".into(),
    };
    store
        .begin_sign_in(&SignInAttempt {
            binding: cli.clone(),
            ..attempt("s3", Duration::minutes(10))
        })
        .await
        .unwrap();
    let taken = store.take_sign_in("s3").await.unwrap().unwrap();
    assert_eq!(taken.binding, cli);
    assert!(store.take_sign_in("s3").await.unwrap().is_none());
}

pub async fn sessions_open_refresh_end_and_list(store: Arc<dyn Store>) {
    seed_org(&*store, "net").await;
    let issuer = "https://idp.example.com";
    let (who, s) = store
        .sign_in(
            &person(issuer, "sub-9", &[("net", Role::Viewer)]),
            &session("ses-a", "secret-a"),
            None,
            &sign_in_audit(),
        )
        .await
        .unwrap();
    let user = who.user.id.clone();
    assert_eq!(s.method, SessionMethod::Provider);
    assert_eq!(s.subject.as_deref(), Some("sub-9"));
    let grant = store.open_session("secret-a").await.unwrap().unwrap();
    assert_eq!(grant.session.id, "ses-a");
    assert_eq!(grant.user.id, user);
    assert_eq!(grant.roles.get("net"), Some(&Role::Viewer));
    assert_eq!(grant.session.refresh.as_ref().unwrap().key_id, "k1");
    assert!(store.open_session("secret-b").await.unwrap().is_none());

    // Seen later: the idle clock restarts.
    let later = Utc::now() + Duration::minutes(5);
    store.touch_session("ses-a", later).await.unwrap();
    let seen = store.get_session("ses-a").await.unwrap().unwrap();
    assert_eq!(seen.last_seen_at.timestamp(), later.timestamp());

    // A refresh brings the memberships in line and keeps the new tokens.
    let rotated = Sealed {
        ciphertext: vec![9, 9],
        nonce: vec![8; 12],
        key_id: "k2".into(),
    };
    let changes = store
        .refresh_session(
            "ses-a",
            &person(issuer, "sub-9", &[]),
            Some("new.id.token"),
            Some(&rotated),
        )
        .await
        .unwrap();
    assert_eq!(
        changes,
        [MembershipChange::Remove {
            org: "net".into(),
            role: Role::Viewer
        }]
    );
    let grant = store.open_session("secret-a").await.unwrap().unwrap();
    assert!(grant.roles.is_empty());
    assert_eq!(grant.session.id_token.as_deref(), Some("new.id.token"));
    assert_eq!(grant.session.refresh, Some(rotated));

    // A token login's session carries its token.
    store
        .create_user(
            &NewUser {
                id: "bob".into(),
                server_admin: false,
            },
            &audit(None, "user.create", "user:bob"),
        )
        .await
        .unwrap();
    store
        .create_token(
            &token("tok-bob", TokenKind::Personal, Some("bob"), None),
            Some(&audit(None, "token.create", "token:tok-bob")),
        )
        .await
        .unwrap();
    let t = store
        .open_token_session(
            &NewSession {
                id: "ses-t".into(),
                secret_hash: "secret-t".into(),
                user: "bob".into(),
                method: SessionMethod::Token,
                provider: None,
                subject: None,
                token_id: Some("tok-bob".into()),
                id_token: None,
                refresh: None,
                expires_at: Utc::now() + Duration::hours(1),
            },
            &audit(None, "session.create", "user:bob"),
        )
        .await
        .unwrap();
    assert_eq!(t.method, SessionMethod::Token);
    let grant = store.open_session("secret-t").await.unwrap().unwrap();
    assert_eq!(grant.token.unwrap().id, "tok-bob");

    // A secrets-key rotation re-seals an open session's refresh token with the rest.
    let owner = SealedOwner::SessionRefresh {
        session: "ses-a".into(),
    };
    let sealed = store.sealed_values().await.unwrap();
    assert!(sealed.iter().any(|(o, _)| *o == owner), "{sealed:?}");
    let resealed = Sealed {
        ciphertext: vec![7; 4],
        nonce: vec![6; 12],
        key_id: "k3".into(),
    };
    store
        .reseal(
            &[(owner.clone(), resealed.clone())],
            &audit(None, "secrets.rotate", "server"),
        )
        .await
        .unwrap();
    let grant = store.open_session("secret-a").await.unwrap().unwrap();
    assert_eq!(grant.session.refresh, Some(resealed.clone()));

    // Ended once, with the reason; its refresh token is dropped.
    let end = audit(None, "session.revoke", "session:ses-a");
    assert!(store
        .end_session("ses-a", "revoked by user:root", Some(&end))
        .await
        .unwrap());
    assert!(!store.end_session("ses-a", "again", None).await.unwrap());
    let ended = store.get_session("ses-a").await.unwrap().unwrap();
    assert_eq!(ended.ended_reason.as_deref(), Some("revoked by user:root"));
    assert!(ended.ended_at.is_some() && ended.refresh.is_none());
    // An ended session has nothing to re-seal, and re-sealing it is no error.
    let sealed = store.sealed_values().await.unwrap();
    assert!(!sealed.iter().any(|(o, _)| *o == owner));
    store
        .reseal(
            &[(owner, resealed)],
            &audit(None, "secrets.rotate", "server"),
        )
        .await
        .unwrap();
    assert!(matches!(
        store
            .refresh_session("ses-a", &person(issuer, "sub-9", &[]), None, None)
            .await,
        Err(StoreError::NotFound(_))
    ));

    // Listed newest first.
    store
        .sign_in(
            &person(issuer, "sub-9", &[]),
            &session("ses-b", "secret-b"),
            None,
            &sign_in_audit(),
        )
        .await
        .unwrap();
    let listed: Vec<String> = store
        .list_sessions(&user, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(listed, ["ses-b", "ses-a"]);
    assert_eq!(store.list_sessions(&user, 1).await.unwrap().len(), 1);
}

pub async fn a_cli_login_holds_a_token_that_goes_with_its_session(store: Arc<dyn Store>) {
    seed_org(&*store, "net").await;
    let token = |id: &str| NewToken {
        expires_at: Some(Utc::now() + Duration::hours(1)),
        ..token(id, TokenKind::Personal, None, None)
    };
    let mut cli = session("ses-cli", "secret-cli");
    cli.token_id = Some("tok-cli-1".into());
    let (who, opened) = store
        .sign_in(
            &person("https://idp.example.com", "sub-c", &[("net", Role::Viewer)]),
            &cli,
            Some(&token("tok-cli-1")),
            &sign_in_audit(),
        )
        .await
        .unwrap();
    assert_eq!(opened.token_id.as_deref(), Some("tok-cli-1"));
    // The token is the new user's, made in the same transaction.
    let made = store.get_token("tok-cli-1").await.unwrap().unwrap();
    assert_eq!(made.user.as_deref(), Some(who.user.id.as_str()));
    let grant = store.session_of_token("tok-cli-1").await.unwrap().unwrap();
    assert_eq!(grant.session.id, "ses-cli");
    assert_eq!(grant.roles.get("net"), Some(&Role::Viewer));
    assert!(store
        .session_of_token("tok-nobody")
        .await
        .unwrap()
        .is_none());

    // A refresh's new token replaces the old one, which is revoked.
    let renewed = store
        .replace_session_token(
            "ses-cli",
            &token("tok-cli-2"),
            &audit(None, "token.create", "token:tok-cli-2"),
        )
        .await
        .unwrap();
    assert_eq!(renewed.user.as_deref(), Some(who.user.id.as_str()));
    assert!(store
        .get_token("tok-cli-1")
        .await
        .unwrap()
        .unwrap()
        .revoked_at
        .is_some());
    assert_eq!(
        store
            .session_of_token("tok-cli-2")
            .await
            .unwrap()
            .unwrap()
            .session
            .id,
        "ses-cli"
    );
    // Ending the session revokes the token it holds.
    store
        .end_session("ses-cli", "signed out", None)
        .await
        .unwrap();
    assert!(store
        .get_token("tok-cli-2")
        .await
        .unwrap()
        .unwrap()
        .revoked_at
        .is_some());
    assert!(matches!(
        store
            .replace_session_token(
                "ses-cli",
                &token("tok-cli-3"),
                &audit(None, "token.create", "token:tok-cli-3"),
            )
            .await,
        Err(StoreError::NotFound(_))
    ));
}

pub async fn ended_and_expired_sessions_are_pruned_open_ones_kept(store: Arc<dyn Store>) {
    let issuer = "https://idp.example.com";
    let mut old = session("ses-old", "h-old");
    old.expires_at = Utc::now() - Duration::minutes(1);
    for (id, secret) in [("ses-ended", "h-ended"), ("ses-open", "h-open")] {
        store
            .sign_in(
                &person(issuer, "sub-r", &[]),
                &session(id, secret),
                None,
                &sign_in_audit(),
            )
            .await
            .unwrap();
    }
    store
        .sign_in(&person(issuer, "sub-r", &[]), &old, None, &sign_in_audit())
        .await
        .unwrap();
    store
        .end_session("ses-ended", "signed out", None)
        .await
        .unwrap();
    // Nothing ended before an hour ago: nothing goes.
    assert_eq!(
        store
            .prune_sessions(Utc::now() - Duration::hours(1), 10)
            .await
            .unwrap(),
        0
    );
    // Up to now: the ended one and the expired one go, one per batch; the open one stays.
    assert_eq!(
        store
            .prune_sessions(Utc::now() + Duration::seconds(1), 1)
            .await
            .unwrap(),
        2
    );
    assert!(store.get_session("ses-ended").await.unwrap().is_none());
    assert!(store.get_session("ses-old").await.unwrap().is_none());
    assert!(store.get_session("ses-open").await.unwrap().is_some());
}

pub async fn an_admin_links_an_identity_ahead_of_its_sign_in_and_unlinks_it(store: Arc<dyn Store>) {
    seed_org(&*store, "net").await;
    seed_user(&*store, "alice").await;
    let issuer = "https://idp.example.com";
    let link = IdentityLink {
        issuer: issuer.into(),
        subject: "00u1a2b3".into(),
        provider: "corp".into(),
        user: "alice".into(),
    };
    let linked = store
        .link_identity(&link, &audit(None, "identity.link", "user:alice"))
        .await
        .unwrap();
    assert_eq!(
        (linked.user.as_str(), linked.last_sign_in_at),
        ("alice", None)
    );
    // Linked once: again, or to someone else, is refused naming who has it.
    match store
        .link_identity(&link, &audit(None, "identity.link", "user:alice"))
        .await
    {
        Err(StoreError::AlreadyExists(what)) => assert!(what.contains("alice"), "{what}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        store
            .link_identity(
                &IdentityLink {
                    user: "ghost".into(),
                    subject: "other".into(),
                    ..link.clone()
                },
                &audit(None, "identity.link", "user:ghost"),
            )
            .await,
        Err(StoreError::NotFound(_))
    ));

    // The person's first sign-in is alice's, not a new user's.
    let (signed, opened) = store
        .sign_in(
            &ProviderSignIn {
                proposed_user: "alice-at-corp".into(),
                ..person(issuer, "00u1a2b3", &[("net", Role::Operator)])
            },
            &session("ses-linked", "h-linked"),
            None,
            &sign_in_audit(),
        )
        .await
        .unwrap();
    assert_eq!((signed.user.id.as_str(), signed.created), ("alice", false));
    assert_eq!(
        store.roles_of("alice").await.unwrap().get("net"),
        Some(&Role::Operator)
    );
    let listed = store.list_identities("alice").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].last_sign_in_at.is_some(), "{listed:?}");
    assert_eq!(listed[0].email.as_deref(), Some("alice@example.com"));

    // Unlinked: gone, and the session it signed in ended; a second unlink finds nothing.
    let gone = store
        .unlink_identity(
            issuer,
            "00u1a2b3",
            &audit(None, "identity.unlink", "user:alice"),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(gone.user, "alice");
    assert!(store.list_identities("alice").await.unwrap().is_empty());
    let ended = store.get_session(&opened.id).await.unwrap().unwrap();
    assert_eq!(
        ended.ended_reason.as_deref(),
        Some("its identity was unlinked")
    );
    assert!(store
        .unlink_identity(
            issuer,
            "00u1a2b3",
            &audit(None, "identity.unlink", "user:alice")
        )
        .await
        .unwrap()
        .is_none());
}

pub async fn every_open_session_of_a_user_ends_at_once(store: Arc<dyn Store>) {
    seed_org(&*store, "net").await;
    let issuer = "https://idp.example.com";
    for (id, secret) in [("ses-a1", "h-a1"), ("ses-a2", "h-a2")] {
        store
            .sign_in(
                &person(issuer, "sub-a", &[]),
                &session(id, secret),
                None,
                &sign_in_audit(),
            )
            .await
            .unwrap();
    }
    let (bob, _) = store
        .sign_in(
            &ProviderSignIn {
                proposed_user: "bob".into(),
                ..person(issuer, "sub-b", &[])
            },
            &session("ses-b", "h-b"),
            None,
            &sign_in_audit(),
        )
        .await
        .unwrap();
    assert_eq!(bob.user.id, "bob");
    let ended = store
        .end_user_sessions(
            "alice",
            "ended by user:owner",
            &audit(None, "session.revoke", "user:alice"),
        )
        .await
        .unwrap();
    assert_eq!(ended, 2);
    for id in ["ses-a1", "ses-a2"] {
        let s = store.get_session(id).await.unwrap().unwrap();
        assert_eq!(
            s.ended_reason.as_deref(),
            Some("ended by user:owner"),
            "{id}"
        );
    }
    assert!(store
        .get_session("ses-b")
        .await
        .unwrap()
        .unwrap()
        .ended_at
        .is_none());
    // Nothing left open: none ended the second time.
    assert_eq!(
        store
            .end_user_sessions(
                "alice",
                "again",
                &audit(None, "session.revoke", "user:alice")
            )
            .await
            .unwrap(),
        0
    );
}
