//! Duty leases: with several replicas on one database, a background duty's pass runs only
//! on the replica holding the duty's lease, and moves back once another holder's expires
//! — every duty within seconds, however rarely the duty itself passes.

use std::time::Duration;

use bosun_store::DutyStore;
use chrono::Utc;

use crate::harness::TestServer;

#[tokio::test]
async fn a_duty_pass_is_skipped_while_another_replica_holds_its_lease() {
    let t = TestServer::start_with(|c| {
        c.runs.sweep_interval = Duration::from_millis(100);
        c.replica_id = Some("replica-a".into());
        c.duty_lease = Duration::from_secs(1);
    })
    .await;
    let state = t.server.state();
    assert_eq!(&*state.replica, "replica-a");
    let passes = || state.duties.last_pass("stale_sweep");
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
    // second at a time), and holds it for 3 s.
    let ttl = Duration::from_secs(3);
    let taken_at = Utc::now() + chrono::Duration::seconds(2);
    assert!(state
        .store
        .try_duty_lease("stale_sweep", "replica-b", taken_at, ttl)
        .await
        .unwrap());
    let expires = taken_at + chrono::Duration::from_std(ttl).unwrap();
    // A pass that took the lease before B did may still land (A trusts its last renewal
    // for two thirds of a second); then nothing while B holds it.
    tokio::time::sleep(Duration::from_millis(800)).await;
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

#[tokio::test]
async fn a_dead_replicas_duties_move_to_a_live_one_within_seconds() {
    // Key rotation passes hourly and git polling every minute, yet their leases move as
    // fast as the sweep's.
    let t = TestServer::start_with(|c| {
        c.replica_id = Some("replica-a".into());
        c.duty_lease = Duration::from_secs(1);
        c.vcs.poll_interval = Duration::from_secs(60);
    })
    .await;
    let state = t.server.state();
    wait_lease_gauges(&t, "1", Utc::now() + chrono::Duration::seconds(20)).await;

    // Replica B takes every duty as it would once A's leases lapsed, for 2 s, and dies.
    let taken_at = Utc::now() + chrono::Duration::seconds(2);
    for duty in DUTIES {
        assert!(state
            .store
            .try_duty_lease(duty, "replica-b", taken_at, Duration::from_secs(2))
            .await
            .unwrap());
    }
    let expires = taken_at + chrono::Duration::seconds(2);
    // While B's leases last, A holds none of them (the metrics say so too).
    tokio::time::sleep(Duration::from_millis(800)).await;
    let gauges = lease_gauges(&t).await;
    for duty in DUTIES {
        assert_eq!(gauges.get(duty).map(String::as_str), Some("0"), "{duty}");
    }
    // Within a few seconds of B's leases running out, A holds every duty again — and B
    // is refused them.
    wait_lease_gauges(&t, "1", expires + chrono::Duration::seconds(3)).await;
    for duty in DUTIES {
        assert!(
            !state
                .store
                .try_duty_lease(duty, "replica-b", Utc::now(), Duration::from_secs(1))
                .await
                .unwrap(),
            "{duty} is free"
        );
    }
}

/// `bosun_duty_lease_held` by duty, as `/metrics` shows it.
async fn lease_gauges(t: &TestServer) -> std::collections::BTreeMap<String, String> {
    let text = t.metrics_text().await;
    text.lines()
        .filter_map(|l| l.strip_prefix("bosun_duty_lease_held{duty=\""))
        .filter_map(|l| l.split_once("\"} "))
        .map(|(duty, value)| (duty.to_string(), value.to_string()))
        .collect()
}

/// Every duty a replica runs with git polling on.
const DUTIES: [&str; 8] = [
    "stale_sweep",
    "git_poll",
    "notify",
    "schedules",
    "oidc_key_rotation",
    "vcs_token_revoke",
    "retention",
    "metric_counts",
];

/// Polls the replica's lease gauges until every duty reads `want` (panics at `until`).
async fn wait_lease_gauges(t: &TestServer, want: &str, until: chrono::DateTime<Utc>) {
    loop {
        let gauges = lease_gauges(t).await;
        if DUTIES
            .into_iter()
            .all(|d| gauges.get(d).map(String::as_str) == Some(want))
        {
            return;
        }
        assert!(
            Utc::now() < until,
            "the replica's lease gauges never all read {want}: {gauges:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_replica_shutting_down_releases_its_duty_leases() {
    let t = TestServer::start_with(|c| {
        c.replica_id = Some("replica-a".into());
        c.duty_lease = Duration::from_secs(600);
        c.vcs.poll_interval = Duration::from_secs(60);
    })
    .await;
    wait_lease_gauges(&t, "1", Utc::now() + chrono::Duration::seconds(20)).await;
    let dir = t.shutdown().await;
    // Ten minutes of lease left, yet another replica takes every duty at once.
    let store = bosun_store::SqliteStore::open(&dir.path().join("bosun.db"))
        .await
        .unwrap();
    for duty in DUTIES {
        assert!(
            store
                .try_duty_lease(duty, "replica-b", Utc::now(), Duration::from_secs(1))
                .await
                .unwrap(),
            "{duty} still held after the replica shut down"
        );
    }
}

#[tokio::test]
async fn readyz_lists_every_duty_with_its_last_pass_and_lease() {
    let t = TestServer::start_with(|c| {
        c.runs.sweep_interval = Duration::from_millis(100);
    })
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let ready = loop {
        let r = t.get("/readyz", &t.admin).await;
        assert_eq!(r.status, axum::http::StatusCode::OK, "{:?}", r.body);
        let sweep = r.body["duties"]
            .as_array()
            .and_then(|d| d.iter().find(|d| d["name"] == "stale_sweep").cloned());
        if sweep.is_some_and(|s| s["last_pass_at"].is_string()) {
            break r.body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sweep never passed: {:?}",
            r.body
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let names: Vec<&str> = ready["duties"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "git_poll",
            "github_feedback",
            "metric_counts",
            "notify",
            "oidc_key_rotation",
            "plan_triggers",
            "retention",
            "schedules",
            "stale_sweep",
            "vcs_token_revoke"
        ],
        "{ready}"
    );
    let sweep = &ready["duties"][8];
    assert_eq!(sweep["lease_held"], true, "{ready}");
    // A duty that passed here held its lease to do so.
    for d in ready["duties"].as_array().unwrap() {
        if d["last_pass_at"].is_string() {
            assert_eq!(d["lease_held"], true, "{d}");
        }
    }
}
