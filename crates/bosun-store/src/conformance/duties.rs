//! Conformance cases for duty leases: one replica at a time runs a background duty.

use super::*;

pub async fn duty_leases_take_renew_refuse_and_expire(store: Arc<dyn Store>) {
    let ttl = std::time::Duration::from_secs(10);
    let t0 = Utc::now();
    // Take: the lease is free.
    assert!(store.try_duty_lease("sweep", "r1", t0, ttl).await.unwrap());
    // Refused to another holder while live, also just before it expires.
    assert!(!store.try_duty_lease("sweep", "r2", t0, ttl).await.unwrap());
    let almost = t0 + Duration::milliseconds(9_999);
    assert!(!store
        .try_duty_lease("sweep", "r2", almost, ttl)
        .await
        .unwrap());
    // Another duty's lease is separate.
    assert!(store.try_duty_lease("poll", "r2", t0, ttl).await.unwrap());
    // Renew: the holder extends it, so it outlives its first expiry.
    let t5 = t0 + Duration::seconds(5);
    assert!(store.try_duty_lease("sweep", "r1", t5, ttl).await.unwrap());
    let t12 = t0 + Duration::seconds(12);
    assert!(!store.try_duty_lease("sweep", "r2", t12, ttl).await.unwrap());
    // Take over after expiry (t5 + 10s); then the old holder is refused.
    let t15 = t0 + Duration::seconds(15);
    assert!(store.try_duty_lease("sweep", "r2", t15, ttl).await.unwrap());
    assert!(!store.try_duty_lease("sweep", "r1", t15, ttl).await.unwrap());
    // Released (a holder shutting down): only its own, and free at once for another.
    assert_eq!(store.release_duty_leases("r2").await.unwrap(), 2);
    assert_eq!(store.release_duty_leases("r2").await.unwrap(), 0);
    assert!(store.try_duty_lease("sweep", "r1", t15, ttl).await.unwrap());
    assert!(store.try_duty_lease("poll", "r3", t15, ttl).await.unwrap());
}

pub async fn duty_leases_racing_takers_get_one(store: Arc<dyn Store>) {
    let ttl = std::time::Duration::from_secs(30);
    let now = Utc::now();
    let takers = (0..8).map(|i| {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .try_duty_lease("race", &format!("r{i}"), now, ttl)
                .await
                .unwrap()
        })
    });
    let mut won = 0;
    for t in takers.collect::<Vec<_>>() {
        if t.await.unwrap() {
            won += 1;
        }
    }
    assert_eq!(won, 1, "exactly one racing taker holds the lease");
    // The same race once the lease has expired: again exactly one.
    let later = now + Duration::seconds(31);
    let takers = (10..18).map(|i| {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .try_duty_lease("race", &format!("r{i}"), later, ttl)
                .await
                .unwrap()
        })
    });
    let mut won = 0;
    for t in takers.collect::<Vec<_>>() {
        if t.await.unwrap() {
            won += 1;
        }
    }
    assert_eq!(won, 1, "exactly one taker takes over an expired lease");
}
