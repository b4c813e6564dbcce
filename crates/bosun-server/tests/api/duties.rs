//! Duty leases: with several replicas on one database, a background duty's pass runs only
//! on the replica holding the duty's lease, and moves back once another holder's expires.

use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::Utc;

use crate::harness::TestServer;

#[tokio::test]
async fn a_duty_pass_is_skipped_while_another_replica_holds_its_lease() {
    let t = TestServer::start_with(|c| {
        c.runs.sweep_interval = Duration::from_millis(100);
        c.replica_id = Some("replica-a".into());
    })
    .await;
    let state = t.server.state();
    assert_eq!(&*state.replica, "replica-a");
    let passes = || state.duties.stale_sweep_last_pass.load(Ordering::Relaxed);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while passes() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sweep never ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // While this replica holds the lease, another is refused it.
    assert!(!state
        .store
        .try_duty_lease(
            "stale_sweep",
            "replica-b",
            Utc::now(),
            Duration::from_secs(3)
        )
        .await
        .unwrap());

    // Replica B takes the lease over as it would once A's lapsed (A renews it for a
    // second at most: 3 × 100 ms, at least 1 s), and holds it for 3 s.
    let ttl = Duration::from_secs(3);
    let taken_at = Utc::now() + chrono::Duration::seconds(2);
    assert!(state
        .store
        .try_duty_lease("stale_sweep", "replica-b", taken_at, ttl)
        .await
        .unwrap());
    let expires = taken_at + chrono::Duration::from_std(ttl).unwrap();
    // A pass that took the lease before B did may still land; then nothing while B holds it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = passes();
    while Utc::now() < expires - chrono::Duration::milliseconds(200) {
        assert_eq!(
            passes(),
            held,
            "a sweep pass ran while another replica held the lease"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Once B's lease expires (B died), A takes the duty back and sweeps again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while passes() == held {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sweep did not resume after the other replica's lease expired"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!state
        .store
        .try_duty_lease("stale_sweep", "replica-b", Utc::now(), ttl)
        .await
        .unwrap());
}

#[tokio::test]
async fn the_replica_id_is_kept_in_the_data_dir_and_names_the_embedded_runners() {
    let t = TestServer::start().await;
    let state = t.server.state();
    let kept = std::fs::read_to_string(state.config.data_dir.join("replica-id")).unwrap();
    assert_eq!(kept.trim(), &*state.replica);
    assert_eq!(
        t.server.embedded_runner_name,
        format!("local@{}", state.replica)
    );
}
