//! Conformance cases for Terraform state: versions, locks, and the serial and lineage guard.

use super::*;

pub async fn state_versions_roundtrip(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let head = store.state_head("acme", "net").await.unwrap();
    assert!(head.current.is_none() && head.lock.is_none());
    assert!(store
        .state_version("acme", "net", None)
        .await
        .unwrap()
        .is_none());
    let alice = Writer::User("alice".into());
    let w1 = state_write(alice.clone(), WriterLiveness::Person, None, 1, "L");
    let v1 = store.write_state("acme", "net", &w1, None).await.unwrap();
    assert_eq!(
        (v1.version, v1.serial, v1.current, v1.late_write),
        (1, 1, true, false)
    );
    assert_eq!(v1.size, w1.body.len() as u64);
    assert_eq!(v1.checksum.len(), 64);
    assert_eq!(v1.writer, alice);
    assert_eq!(v1.outputs["name"].value, json!("v1"));
    assert!(v1.outputs["pw"].sensitive);
    let w2 = state_write(
        Writer::Run("r1".into()),
        WriterLiveness::LiveRun,
        None,
        2,
        "L",
    );
    store.write_state("acme", "net", &w2, None).await.unwrap();
    let (cur, body) = store
        .state_version("acme", "net", None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((cur.version, cur.current), (2, true));
    assert_eq!(body, w2.body);
    let (old, old_body) = store
        .state_version("acme", "net", Some(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((old.version, old.current), (1, false));
    assert_eq!(old_body, w1.body);
    let list = store
        .list_state_versions("acme", "net", None, 10)
        .await
        .unwrap();
    assert_eq!(list.iter().map(|v| v.version).collect::<Vec<_>>(), [2, 1]);
    let page = store
        .list_state_versions("acme", "net", Some(2), 10)
        .await
        .unwrap();
    assert_eq!(page.iter().map(|v| v.version).collect::<Vec<_>>(), [1]);
    assert!(store
        .state_version("acme", "net", Some(9))
        .await
        .unwrap()
        .is_none());
}

pub async fn state_lock_rules(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let alice = Writer::User("alice".into());
    let run = Writer::Run("r1".into());
    store
        .lock_state("acme", "net", &state_lock("L1", alice.clone()))
        .await
        .unwrap();
    // Re-locking with the same id by the holder is idempotent; anyone else sees the holder.
    store
        .lock_state("acme", "net", &state_lock("L1", alice.clone()))
        .await
        .unwrap();
    match store
        .lock_state("acme", "net", &state_lock("L2", run.clone()))
        .await
    {
        Err(StoreError::StateLocked(l)) => assert_eq!((l.id.as_str(), &l.holder), ("L1", &alice)),
        other => panic!("expected StateLocked, got {other:?}"),
    }
    let head = store.state_head("acme", "net").await.unwrap();
    assert_eq!(
        head.lock.as_ref().map(|l| l.who.as_str()),
        Some("alice@laptop")
    );

    // Writes: only the holder, with its lock id.
    let w = state_write(run.clone(), WriterLiveness::LiveRun, None, 1, "L");
    assert!(matches!(
        store.write_state("acme", "net", &w, None).await,
        Err(StoreError::StateRefused(WriteRefusal::Locked(_)))
    ));
    let w = state_write(alice.clone(), WriterLiveness::Person, Some("L1"), 1, "L");
    store.write_state("acme", "net", &w, None).await.unwrap();

    let a = audit(Some("acme"), "state.force_unlock", "stack:net");
    let before = store
        .list_audit(Some("acme"), None, 100)
        .await
        .unwrap()
        .len();
    assert!(matches!(
        store.unlock_state("acme", "net", &UnlockRequest::Holder { id: "nope".into() }, &a).await.unwrap(),
        UnlockDecision::Mismatch(l) if l.id == "L1"
    ));
    assert!(matches!(
        store
            .unlock_state("acme", "net", &UnlockRequest::Force { id: "L1".into() }, &a)
            .await
            .unwrap(),
        UnlockDecision::Release { forced: true, .. }
    ));
    let log = store.list_audit(Some("acme"), None, 100).await.unwrap();
    assert_eq!(log.len(), before + 1, "a forced release is audited");
    assert_eq!(log[0].entry.detail["released"]["lock_id"], json!("L1"));
    assert!(store
        .state_head("acme", "net")
        .await
        .unwrap()
        .lock
        .is_none());
    assert_eq!(
        store
            .unlock_state("acme", "net", &UnlockRequest::ForceAny, &a)
            .await
            .unwrap(),
        UnlockDecision::NotLocked
    );
    // The holder's own unlock is not a force and is not audited.
    store
        .lock_state("acme", "net", &state_lock("L3", run.clone()))
        .await
        .unwrap();
    assert!(matches!(
        store
            .unlock_state(
                "acme",
                "net",
                &UnlockRequest::Holder { id: "L3".into() },
                &a
            )
            .await
            .unwrap(),
        UnlockDecision::Release { forced: false, .. }
    ));
    assert_eq!(
        store
            .list_audit(Some("acme"), None, 100)
            .await
            .unwrap()
            .len(),
        before + 1
    );
}

pub async fn state_serial_and_lineage_guard(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let alice = Writer::User("alice".into());
    store
        .write_state(
            "acme",
            "net",
            &state_write(alice.clone(), WriterLiveness::Person, None, 5, "L"),
            None,
        )
        .await
        .unwrap();
    let back = state_write(alice.clone(), WriterLiveness::Person, None, 4, "L");
    assert!(matches!(
        store.write_state("acme", "net", &back, None).await,
        Err(StoreError::StateRefused(
            WriteRefusal::SerialBackwards { .. }
        ))
    ));
    let other = state_write(alice.clone(), WriterLiveness::Person, None, 6, "OTHER");
    assert!(matches!(
        store.write_state("acme", "net", &other, None).await,
        Err(StoreError::StateRefused(
            WriteRefusal::LineageChanged { .. }
        ))
    ));
    assert_eq!(
        store
            .list_state_versions("acme", "net", None, 10)
            .await
            .unwrap()
            .len(),
        1,
        "refused writes store nothing"
    );
    let mut forced = back.clone();
    forced.request.force = true;
    let a = audit(Some("acme"), "state.force_write", "stack:net");
    let v = store
        .write_state("acme", "net", &forced, Some(&a))
        .await
        .unwrap();
    assert!(v.forced && v.current);
    assert_eq!(
        store.list_audit(Some("acme"), None, 1).await.unwrap()[0]
            .entry
            .action,
        "state.force_write"
    );
}

pub async fn state_late_writes_kept_and_flagged(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let bob = Writer::User("bob".into());
    let run = Writer::Run("r-dead".into());
    store
        .write_state(
            "acme",
            "net",
            &state_write(bob.clone(), WriterLiveness::Person, None, 3, "L"),
            None,
        )
        .await
        .unwrap();
    store
        .lock_state("acme", "net", &state_lock("BOB", bob.clone()))
        .await
        .unwrap();
    // Someone else holds the lock: kept, flagged, not current.
    let late = state_write(run.clone(), WriterLiveness::EndedRun, Some("OLD"), 4, "L");
    let v = store.write_state("acme", "net", &late, None).await.unwrap();
    assert!(v.late_write && !v.current);
    assert_eq!(
        store
            .state_head("acme", "net")
            .await
            .unwrap()
            .current
            .unwrap()
            .serial,
        3
    );
    // Nobody holds it: the late write becomes current (it is what happened), flagged.
    store
        .unlock_state(
            "acme",
            "net",
            &UnlockRequest::Holder { id: "BOB".into() },
            &audit(Some("acme"), "x", "y"),
        )
        .await
        .unwrap();
    let late2 = state_write(run, WriterLiveness::EndedRun, None, 5, "L");
    let v = store
        .write_state("acme", "net", &late2, None)
        .await
        .unwrap();
    assert!(v.late_write && v.current);
    let versions = store
        .list_state_versions("acme", "net", None, 10)
        .await
        .unwrap();
    assert_eq!(versions.iter().filter(|v| v.late_write).count(), 2);
}

pub async fn state_recovered_writes_kept_once_and_flagged(store: Arc<dyn Store>) {
    seed_stack(&*store, "net").await;
    let bob = Writer::User("bob".into());
    let run = Writer::Run("r-cut-off".into());
    store
        .write_state(
            "acme",
            "net",
            &state_write(bob.clone(), WriterLiveness::Person, None, 3, "L"),
            None,
        )
        .await
        .unwrap();
    let recovered = |serial, lineage: &str| NewStateVersion {
        recovery_reason: Some("the server was away".into()),
        token_id: None,
        ..state_write(run.clone(), WriterLiveness::Recovery, None, serial, lineage)
    };
    // The run's state follows the current one: current, flagged with its reason.
    let v = store
        .write_state("acme", "net", &recovered(4, "L"), None)
        .await
        .unwrap();
    assert!(v.current && !v.late_write);
    assert_eq!(v.recovery_reason.as_deref(), Some("the server was away"));
    // Delivered again (the runner never heard the answer): the same version, no new one.
    let again = store
        .write_state("acme", "net", &recovered(4, "L"), None)
        .await
        .unwrap();
    assert_eq!(again.version, v.version);
    assert_eq!(
        store
            .list_state_versions("acme", "net", None, 10)
            .await
            .unwrap()
            .len(),
        2
    );
    // Behind the current serial, or under someone else's lock: kept beside it, never
    // refused, never current.
    store
        .write_state(
            "acme",
            "net",
            &state_write(bob.clone(), WriterLiveness::Person, None, 9, "L"),
            None,
        )
        .await
        .unwrap();
    let behind = store
        .write_state("acme", "net", &recovered(5, "L"), None)
        .await
        .unwrap();
    assert!(!behind.current && behind.recovery_reason.is_some());
    store
        .lock_state("acme", "net", &state_lock("BOB", bob.clone()))
        .await
        .unwrap();
    let locked = store
        .write_state("acme", "net", &recovered(10, "L"), None)
        .await
        .unwrap();
    assert!(!locked.current);
    let head = store.state_head("acme", "net").await.unwrap();
    assert_eq!(head.current.unwrap().serial, 9);
    // Ordinary versions carry no reason.
    let versions = store
        .list_state_versions("acme", "net", None, 10)
        .await
        .unwrap();
    assert_eq!(
        versions
            .iter()
            .filter(|v| v.recovery_reason.is_some())
            .map(|v| v.serial)
            .collect::<Vec<_>>(),
        vec![10, 5, 4]
    );
}

pub async fn state_needs_a_stack(store: Arc<dyn Store>) {
    seed_org(&*store, "acme").await;
    let w = state_write(
        Writer::User("a".into()),
        WriterLiveness::Person,
        None,
        1,
        "L",
    );
    assert!(matches!(
        store.write_state("acme", "ghost", &w, None).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store
            .lock_state("acme", "ghost", &state_lock("L", Writer::User("a".into())))
            .await,
        Err(StoreError::NotFound(_))
    ));
    // Deleting a stack with state needs the explicit flag, then removes the state too.
    seed_stack(&*store, "gone").await;
    store.write_state("acme", "gone", &w, None).await.unwrap();
    let kept = store
        .delete_stack(
            "acme",
            "gone",
            false,
            &audit(Some("acme"), "stack.delete", "gone"),
        )
        .await;
    assert!(
        matches!(kept, Err(StoreError::HasState { versions: 1, .. })),
        "{kept:?}"
    );
    store
        .delete_stack(
            "acme",
            "gone",
            true,
            &audit(Some("acme"), "stack.delete", "gone"),
        )
        .await
        .unwrap();
    seed_stack(&*store, "gone").await;
    assert!(store
        .state_version("acme", "gone", None)
        .await
        .unwrap()
        .is_none());
}
