//! What a statement reads, whatever its plan says (SQLite): a plan's `SEARCH … USING
//! INDEX` reads as few rows as its range holds, and a range as wide as every org's rows is
//! a search all the same. These tests seed one org large and one small, and check through
//! SQLite's step counters (`query_log::take_steps`) that a read for the small org, or a
//! capped read for the large one, steps over a bounded number of rows.
//!
//! Its own test binary: the statement record is process-wide.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bosun_store::{query_log, DatabaseStore, DriftStore, SqliteStore};
use chrono::{TimeZone, Utc};

/// Stale stacks of the large org whose alert is pending: a scheduler back from an outage
/// finds every stale stack of every org so.
const LARGE: i64 = 5_000;

/// Far fewer steps than one per row of the large org: a statement over its rows takes
/// several steps per row.
const BOUND: u64 = 1_000;

/// Drift-checked stacks in org `big` (`LARGE` of them) and `acme` (3), every one stale
/// and its alert not raised yet (`alert_at` passed).
fn seed(path: &std::path::Path, t0: i64) {
    let conn = rusqlite::Connection::open(path).unwrap();
    let stacks = |org: &str, n: i64| {
        format!(
            "INSERT INTO orgs (id, name, created_at) VALUES ('{org}', '{org}', 1);
             WITH RECURSIVE i(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM i WHERE n < {n})
             INSERT INTO stacks (org_id, id, name, repository, branch, path, watch_paths,
                 engine, tier, autodeploy, variables, depends_on, runner_pool, created_at,
                 updated_at)
             SELECT '{org}', 's' || n, 's' || n, 'r', 'main', '.', '[]', 'terraform',
                 'standard', 0, '{{}}', '[]', 'hosted', 1, 1 FROM i;
             INSERT INTO drift_schedules (org_id, stack_id, schedule, timezone, since,
                 next_at, stale_at, alert_at)
             SELECT '{org}', id, '0 * * * *', 'UTC', {t0}, {t0}, {t0}, {t0}
             FROM stacks WHERE org_id = '{org}';"
        )
    };
    conn.execute_batch(&format!(
        "BEGIN; {} {} COMMIT;",
        stacks("big", LARGE),
        stacks("acme", 3)
    ))
    .unwrap();
}

fn most_steps() -> (u64, String) {
    query_log::take_steps()
        .into_iter()
        .map(|(sql, steps)| (steps, sql))
        .max()
        .unwrap_or_default()
}

/// The drift dashboard's stale count: the small org's reads its own three pending alerts,
/// not the large org's five thousand; the large org's stops at the page's cap.
#[tokio::test]
async fn an_orgs_stale_count_reads_its_own_pending_alerts_up_to_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bosun.db");
    let t0 = 1_717_236_000_000i64;
    SqliteStore::open(&path).await.unwrap().close().await;
    seed(&path, t0);
    query_log::start();
    let store = SqliteStore::open(&path).await.unwrap();
    let now = Utc.timestamp_millis_opt(t0 + 3_600_000).unwrap();
    query_log::take_steps();

    assert_eq!(store.count_stale_drift("acme", now, 1001).await.unwrap(), 3);
    let (steps, sql) = most_steps();
    assert!(
        steps < BOUND,
        "counting 3 stale stacks took {steps} steps in one statement: {sql}"
    );

    assert_eq!(store.count_stale_drift("big", now, 11).await.unwrap(), 11);
    let (steps, sql) = most_steps();
    assert!(
        steps < BOUND,
        "counting up to 11 of {LARGE} stale stacks took {steps} steps in one statement: {sql}"
    );

    // The counter sees a statement over the large org's rows: /metrics counts every org.
    let by_org = store.stale_drift_checks(now, 10).await.unwrap().by_org;
    assert_eq!(by_org.get("big"), Some(&LARGE));
    let (steps, _) = most_steps();
    assert!(
        steps > LARGE as u64,
        "counting every org's pending alerts took only {steps} steps"
    );
}
