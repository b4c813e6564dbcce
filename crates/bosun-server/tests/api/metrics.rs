//! `/metrics` read by a real exposition-format parser (Python's `prometheus_client`,
//! the Prometheus project's own client): the server is driven into known states — runs
//! of several kinds in several states, runners in every status, a held state lock,
//! webhook deliveries with their decisions — then scraped, and every series is checked
//! for its type, help, labels and value, and every histogram for its shape.
//!
//! Without `prometheus-client` the test prints `SKIPPED (tool missing):
//! prometheus-client` and passes, unless `BOSUN_REQUIRE_TOOLS=1` (scripts/test.sh
//! installs it).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use bosun_server::config::Secret;
use chrono::Utc;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::harness::TestServer;

const SECRET: &str = "webhook-secret-for-metrics";

/// Prints every family the parser finds as JSON: name, type, help and samples.
const PARSE: &str = r#"
import json, math, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for f in text_string_to_metric_families(sys.stdin.read()):
    out.append({
        "name": f.name,
        "type": f.type,
        "help": f.documentation,
        "samples": [
            {"name": s.name, "labels": s.labels,
             "value": s.value if math.isfinite(s.value) else repr(s.value)}
            for s in f.samples
        ],
    })
print(json.dumps(out))
"#;

/// Python with `prometheus_client`, or `None` after announcing the skip.
fn parser_or_skip() -> Option<()> {
    let ok = Command::new("python3")
        .args(["-c", "import prometheus_client.parser"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some(());
    }
    if std::env::var("BOSUN_REQUIRE_TOOLS").as_deref() == Ok("1") {
        panic!(
            "prometheus-client is required (BOSUN_REQUIRE_TOOLS=1): pip install prometheus-client"
        );
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED (tool missing): prometheus-client"
    );
    None
}

#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: Labels,
    value: f64,
}

#[derive(Debug)]
struct Family {
    kind: String,
    help: String,
    samples: Vec<Sample>,
}

/// The scrape as the parser reads it, by family name (a counter's without `_total`, as
/// the parser names it).
fn parse(text: &str) -> BTreeMap<String, Family> {
    let mut child = Command::new("python3")
        .args(["-c", PARSE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the exposition parser refused the scrape: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let families: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    families
        .into_iter()
        .map(|f| {
            let samples = f["samples"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| Sample {
                    name: s["name"].as_str().unwrap().to_string(),
                    labels: serde_json::from_value(s["labels"].clone()).unwrap(),
                    value: s["value"]
                        .as_f64()
                        .unwrap_or_else(|| panic!("non-finite sample {s}")),
                })
                .collect();
            (
                f["name"].as_str().unwrap().to_string(),
                Family {
                    kind: f["type"].as_str().unwrap().to_string(),
                    help: f["help"].as_str().unwrap().to_string(),
                    samples,
                },
            )
        })
        .collect()
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Family {
    /// The value of the one sample named `name` with exactly these labels.
    fn value(&self, name: &str, pairs: &[(&str, &str)]) -> f64 {
        let want = labels(pairs);
        let found: Vec<&Sample> = self
            .samples
            .iter()
            .filter(|s| s.name == name && s.labels == want)
            .collect();
        assert_eq!(found.len(), 1, "{name} {want:?} in {:#?}", self.samples);
        found[0].value
    }

    /// The samples named `name`.
    fn named(&self, name: &str) -> Vec<&Sample> {
        self.samples.iter().filter(|s| s.name == name).collect()
    }
}

/// The family `name`, of type `kind`, with a help text.
fn family<'a>(families: &'a BTreeMap<String, Family>, name: &str, kind: &str) -> &'a Family {
    let f = families
        .get(name)
        .unwrap_or_else(|| panic!("no family {name} in {:?}", families.keys()));
    assert_eq!(f.kind, kind, "{name}");
    assert!(!f.help.is_empty(), "{name} has no HELP");
    f
}

type Labels = BTreeMap<String, String>;

/// One histogram series as scraped.
struct Histogram {
    count: f64,
    sum: f64,
    /// (upper bound, cumulative count), `+Inf` last.
    buckets: Vec<(f64, f64)>,
}

/// Checks each series of a histogram family: buckets cumulative, ending at `+Inf` equal
/// to `_count`, a `_sum`. Returns the series by their labels.
fn histogram(f: &Family, name: &str) -> BTreeMap<Labels, Histogram> {
    let mut series: BTreeMap<Labels, Vec<(f64, f64)>> = BTreeMap::new();
    for s in f.named(&format!("{name}_bucket")) {
        let mut l = s.labels.clone();
        let le = l.remove("le").expect("a bucket without le");
        let le: f64 = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().unwrap()
        };
        series.entry(l).or_default().push((le, s.value));
    }
    assert!(!series.is_empty(), "{name} has no buckets");
    let mut out = BTreeMap::new();
    for (l, buckets) in series {
        let bounds: Vec<f64> = buckets.iter().map(|b| b.0).collect();
        assert!(
            bounds.windows(2).all(|w| w[0] < w[1]),
            "{name} {l:?}: bounds out of order {bounds:?}"
        );
        assert!(
            buckets.windows(2).all(|w| w[0].1 <= w[1].1),
            "{name} {l:?}: buckets not cumulative {buckets:?}"
        );
        let last = *buckets.last().unwrap();
        assert_eq!(last.0, f64::INFINITY, "{name} {l:?}: no +Inf bucket");
        let pairs: Vec<(&str, &str)> = l.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let count = f.value(&format!("{name}_count"), &pairs);
        let sum = f.value(&format!("{name}_sum"), &pairs);
        assert_eq!(last.1, count, "{name} {l:?}: +Inf bucket != _count");
        assert!(sum >= 0.0, "{name} {l:?}: negative sum");
        out.insert(
            l,
            Histogram {
                count,
                sum,
                buckets,
            },
        );
    }
    out
}

async fn lease(t: &TestServer, runner: &str) -> Value {
    let r = t
        .post(
            "/api/v1/runner/lease",
            &t.server.hosted_runner_token,
            json!({"runner_id": runner, "wait_seconds": 5}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    r.body
}

async fn report(t: &TestServer, run: &str, body: Value) {
    let r = t
        .post(
            &format!("/api/v1/runner/runs/{run}/report"),
            &t.server.hosted_runner_token,
            body,
        )
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
}

async fn trigger(t: &TestServer, stack: &str, kind: &str) -> String {
    let r = t
        .post(
            &format!("/api/v1/orgs/default/stacks/{stack}/runs"),
            &t.admin,
            json!({"kind": kind}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    r.body["id"].as_str().unwrap().to_string()
}

/// Rewrites a runner's row in the server's database (the store offers no way to
/// backdate): last heard from `ago`, under `name` (which may hold a line feed, which
/// registration refuses but a label must survive).
fn backdate_runner(t: &TestServer, id: &str, name: &str, ago: chrono::Duration) {
    let db = t.server.state().config.sqlite_path();
    let at = (Utc::now() - ago).timestamp_millis();
    let script = "import sqlite3, sys\n\
        c = sqlite3.connect(sys.argv[1], timeout=10)\n\
        n = c.execute('UPDATE runners SET last_seen = ?, created_at = ?, name = ? WHERE id = ?', \
        (int(sys.argv[2]), int(sys.argv[2]), sys.argv[3], sys.argv[4])).rowcount\n\
        c.commit()\n\
        assert n == 1, n\n";
    let out = Command::new("python3")
        .args([
            "-c",
            script,
            db.to_str().unwrap(),
            &at.to_string(),
            name,
            id,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn deliver(t: &TestServer, guid: &str, payload: &Value, signed: bool) -> StatusCode {
    let body = serde_json::to_vec(payload).unwrap();
    let mut req = t
        .client
        .post(format!("{}/webhooks/github", t.url))
        .header("content-type", "application/json")
        .header("x-github-event", "push")
        .header("x-github-delivery", guid);
    if signed {
        req = req.header(
            "x-hub-signature-256",
            bosun_testkit::sign(SECRET.as_bytes(), &body),
        );
    }
    req.body(body).send().await.unwrap().status()
}

#[tokio::test]
async fn metrics_expose_every_series_in_the_text_format() {
    let Some(()) = parser_or_skip() else { return };
    let t = TestServer::start_with(|c| {
        c.vcs.webhook_secret = Some(Secret(SECRET.into()));
        // Cloning for changed files fails at once: the push's own commit list is used.
        c.vcs.web_url = "http://127.0.0.1:9".into();
        c.vcs.poll_interval = Duration::ZERO;
    })
    .await;
    for stack in [
        json!({"id": "net", "repository": "file:///srv/git/infra"}),
        json!({"id": "app", "repository": "file:///srv/git/app"}),
        json!({"id": "web", "repository": "github:acme/infra", "path": "infra/web"}),
        json!({"id": "api", "repository": "github:acme/infra", "path": "infra/api"}),
    ] {
        let r = t.create_stack(stack).await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }

    // Runners: one busy, one idle, one drained, and two dark (backdated to an hour and
    // two days ago: only the first is recent enough for a last-seen series). Names carry
    // the characters the text format escapes.
    let busy = t.hosted_runner(r#"edge "east" \ 1"#).await;
    let idle = t.hosted_runner("idle").await;
    let drained = t.hosted_runner("drained").await;
    let r = t
        .post(
            &format!("/api/v1/orgs/default/runners/{drained}/drain"),
            &t.admin,
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    let dark_hour = t.hosted_runner("dark").await;
    backdate_runner(&t, &dark_hour, "dark\nline", chrono::Duration::hours(1));
    let dark_days = t.hosted_runner("gone").await;
    backdate_runner(&t, &dark_days, "gone", chrono::Duration::days(2));

    // Runs: a tracked run planned with changes (unconfirmed), a proposed run being
    // prepared (its runner is busy), a tracked run canceled while queued, and a
    // proposed run still queued.
    let tracked = trigger(&t, "net", "tracked").await;
    let l = lease(&t, &busy).await;
    assert_eq!(l["run_id"], json!(tracked));
    report(
        &t,
        &tracked,
        json!({"fencing": l["fencing"], "event": "started", "commit": "abcdef0"}),
    )
    .await;
    report(
        &t,
        &tracked,
        json!({"fencing": l["fencing"], "event": "planned", "summary": {"has_changes": true, "add": 1, "change": 0, "destroy": 0, "resource_changes": [], "output_changes": {}}}),
    )
    .await;
    let proposed = trigger(&t, "app", "proposed").await;
    let l = lease(&t, &busy).await;
    assert_eq!(l["run_id"], json!(proposed));
    let canceled = trigger(&t, "net", "tracked").await;
    let r = t
        .post(
            &format!("/api/v1/orgs/default/runs/{canceled}/cancel"),
            &t.admin,
            json!({}),
        )
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    trigger(&t, "net", "proposed").await;

    // A held state lock on net.
    let lock = json!({"ID": "HELD", "Operation": "OperationTypeApply", "Who": "alice", "Version": "1.0.3", "Created": "", "Path": "", "Info": ""});
    let r = t
        .call(
            Method::from_bytes(b"LOCK").unwrap(),
            "/api/v1/orgs/default/stacks/net/state",
            Some(&t.admin),
            Some(lock),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);

    // Deliveries: a push touching web (triggered) but not api (ignored), its redelivery
    // (a duplicate decision for each), and an unsigned one (refused, only counted).
    let push = json!({
        "ref": "refs/heads/main",
        "before": "1".repeat(40),
        "after": "2".repeat(40),
        "commits": [{"id": "2".repeat(40), "added": [], "modified": ["infra/web/main.tf"], "removed": []}],
        "repository": {"full_name": "acme/infra"},
        "sender": {"login": "octocat"}
    });
    assert_eq!(deliver(&t, "push-1", &push, true).await, StatusCode::OK);
    assert_eq!(deliver(&t, "push-1", &push, true).await, StatusCode::OK);
    assert_eq!(
        deliver(&t, "push-2", &push, false).await,
        StatusCode::UNAUTHORIZED
    );

    let resp = t
        .client
        .get(format!("{}/metrics", t.url))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        resp.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = resp.text().await.unwrap();
    let families = parse(&text);

    // Runs by kind and state: every kind × state, zeros included.
    let runs = family(&families, "bosun_runs", "gauge");
    assert_eq!(runs.named("bosun_runs").len(), 3 * 12, "{text}");
    let mut want: BTreeMap<(&str, &str), f64> = BTreeMap::new();
    want.insert(("tracked", "unconfirmed"), 1.0);
    want.insert(("tracked", "canceled"), 1.0);
    want.insert(("tracked", "queued"), 1.0); // started by the push
    want.insert(("proposed", "preparing"), 1.0);
    want.insert(("proposed", "queued"), 1.0);
    for s in runs.named("bosun_runs") {
        let key = (s.labels["kind"].as_str(), s.labels["state"].as_str());
        assert_eq!(
            s.value,
            want.get(&key).copied().unwrap_or(0.0),
            "bosun_runs{key:?}"
        );
    }

    // Queue wait: the two leased runs.
    let waits = histogram(
        family(&families, "bosun_run_queue_wait_seconds", "histogram"),
        "bosun_run_queue_wait_seconds",
    );
    let waits = &waits[&Labels::new()];
    assert_eq!(waits.count, 2.0);
    assert!(waits.sum < 60.0, "{}", waits.sum);
    assert!(
        family(&families, "bosun_run_queue_wait_seconds", "histogram")
            .help
            .contains("24h")
    );

    // Phase durations: only stints that ended — tracked left queued, preparing and
    // planning; proposed and canceled left queued.
    let phases = histogram(
        family(&families, "bosun_run_phase_duration_seconds", "histogram"),
        "bosun_run_phase_duration_seconds",
    );
    let counts: BTreeMap<&str, f64> = phases
        .iter()
        .map(|(l, h)| (l["phase"].as_str(), h.count))
        .collect();
    assert_eq!(
        counts,
        BTreeMap::from([
            ("queued", 3.0),
            ("preparing", 1.0),
            ("planning", 1.0),
            ("unconfirmed", 0.0),
            ("applying", 0.0),
        ])
    );
    for (l, h) in &phases {
        assert!(h.buckets.len() > 5, "{l:?} has {} buckets", h.buckets.len());
    }

    // Runners by status, as the runner list computes it.
    let runners = family(&families, "bosun_runners", "gauge");
    for (state, n) in [
        ("online", 1.0),
        ("busy", 1.0),
        ("dark", 2.0),
        ("drained", 1.0),
    ] {
        assert_eq!(
            runners.value("bosun_runners", &[("state", state)]),
            n,
            "{state}"
        );
    }
    let listed = t.get("/api/v1/orgs/default/runners", &t.admin).await.body;
    let status_of = |id: &str| {
        listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .unwrap()["status"]
            .clone()
    };
    assert_eq!(
        [status_of(&busy), status_of(&idle), status_of(&drained)],
        [json!("busy"), json!("online"), json!("drained")]
    );

    // Last-seen ages: every runner seen within the window, names unescaped intact.
    let ages = family(&families, "bosun_runner_last_seen_age_seconds", "gauge");
    let series = ages.named("bosun_runner_last_seen_age_seconds");
    let ids: Vec<&str> = series.iter().map(|s| s.labels["runner"].as_str()).collect();
    assert_eq!(
        ids.len(),
        4,
        "the runner of two days ago is left out: {ids:?}"
    );
    assert!(!ids.contains(&dark_days.as_str()));
    let busy_age = ages.value(
        "bosun_runner_last_seen_age_seconds",
        &[
            ("runner", &busy),
            ("name", r#"edge "east" \ 1"#),
            ("pool", "hosted"),
        ],
    );
    assert!((0.0..60.0).contains(&busy_age), "{busy_age}");
    let dark_age = ages.value(
        "bosun_runner_last_seen_age_seconds",
        &[
            ("runner", &dark_hour),
            ("name", "dark\nline"),
            ("pool", "hosted"),
        ],
    );
    assert!((3600.0..3660.0).contains(&dark_age), "{dark_age}");

    // The held lock's age.
    let locks = family(&families, "bosun_state_lock_age_seconds", "gauge");
    assert_eq!(locks.named("bosun_state_lock_age_seconds").len(), 1);
    let age = locks.value(
        "bosun_state_lock_age_seconds",
        &[("org", "default"), ("stack", "net")],
    );
    assert!((0.0..60.0).contains(&age), "{age}");
    let held = family(&families, "bosun_state_locks_held", "gauge");
    assert_eq!(held.named("bosun_state_locks_held").len(), 1);
    assert_eq!(
        held.value("bosun_state_locks_held", &[("org", "default")]),
        1.0
    );

    // Counters (the parser names a counter's family without `_total`).
    let late = family(&families, "bosun_state_late_writes", "counter");
    assert_eq!(late.value("bosun_state_late_writes_total", &[]), 0.0);
    let deliveries = family(&families, "bosun_webhook_deliveries", "counter");
    for (outcome, n) in [("accepted", 1.0), ("duplicate", 1.0), ("rejected", 1.0)] {
        assert_eq!(
            deliveries.value("bosun_webhook_deliveries_total", &[("outcome", outcome)]),
            n,
            "{outcome}"
        );
    }
    let decisions = family(&families, "bosun_trigger_decisions", "counter");
    for (decision, n) in [("triggered", 1.0), ("ignored", 1.0), ("duplicate", 2.0)] {
        assert_eq!(
            decisions.value("bosun_trigger_decisions_total", &[("decision", decision)]),
            n,
            "{decision}"
        );
    }

    // Notifications: no target, nothing attempted; every outcome and kind present.
    let sent = family(&families, "bosun_notification_deliveries", "counter");
    for outcome in ["delivered", "retry", "gave_up"] {
        assert_eq!(
            sent.value(
                "bosun_notification_deliveries_total",
                &[("outcome", outcome)]
            ),
            0.0
        );
    }
    // Feedback on GitHub: no App here, nothing reported; every kind and outcome present.
    let feedback = family(&families, "bosun_github_feedback", "counter");
    for kind in ["checks", "comment"] {
        for outcome in ["reported", "rate_limited", "refused", "failed"] {
            assert_eq!(
                feedback.value(
                    "bosun_github_feedback_total",
                    &[("kind", kind), ("outcome", outcome)]
                ),
                0.0,
                "{kind} {outcome}"
            );
        }
    }
    let calls = family(&families, "bosun_github_feedback_api_calls", "counter");
    assert_eq!(
        calls.value("bosun_github_feedback_api_calls_total", &[]),
        0.0
    );
    // No runner here reported egress refusals (tests/api/runners.rs raises it).
    let refused = family(&families, "bosun_egress_refused", "counter");
    assert_eq!(refused.value("bosun_egress_refused_total", &[]), 0.0);
    let failed = family(&families, "bosun_notification_failures", "counter");
    for kind in ["webhook", "slack"] {
        assert_eq!(
            failed.value("bosun_notification_failures_total", &[("kind", kind)]),
            0.0
        );
    }
    let pruned = family(&families, "bosun_notifications_pruned", "counter");
    for kind in ["deliveries", "events"] {
        assert_eq!(
            pruned.value("bosun_notifications_pruned_total", &[("kind", kind)]),
            0.0,
            "{kind}"
        );
    }

    // Retention: nothing old enough yet, nothing deleted.
    let versions = family(&families, "bosun_state_versions_pruned", "counter");
    assert_eq!(
        versions.value("bosun_state_versions_pruned_total", &[]),
        0.0
    );
    let runs = family(&families, "bosun_runs_summarised", "counter");
    for kind in ["stack_run", "plan_run"] {
        assert_eq!(
            runs.value("bosun_runs_summarised_total", &[("kind", kind)]),
            0.0,
            "{kind}"
        );
    }
    let deliveries = family(&families, "bosun_vcs_deliveries_pruned", "counter");
    assert_eq!(
        deliveries.value("bosun_vcs_deliveries_pruned_total", &[]),
        0.0
    );
    let sessions = family(&families, "bosun_sessions_pruned", "counter");
    assert_eq!(sessions.value("bosun_sessions_pruned_total", &[]), 0.0);
    // No provider here: no sign-in counted, none refused to begin (their values are
    // checked with a real provider, in sign_in.rs).
    assert!(family(&families, "bosun_sign_ins", "counter")
        .samples
        .is_empty());
    let limited = family(&families, "bosun_sign_in_starts_limited", "counter");
    assert_eq!(
        limited.value("bosun_sign_in_starts_limited_total", &[]),
        0.0
    );
    let logs = family(&families, "bosun_run_log_chunks_compressed", "counter");
    for kind in ["stack_run", "plan_run"] {
        assert_eq!(
            logs.value("bosun_run_log_chunks_compressed_total", &[("kind", kind)]),
            0.0,
            "{kind}"
        );
    }

    // The duties' last passes.
    let duties = family(&families, "bosun_duty_last_pass_timestamp_seconds", "gauge");
    // Every duty the server runs is listed, the scheduler and token revocation too.
    for duty in [
        "stale_sweep",
        "git_poll",
        "notify",
        "oidc_key_rotation",
        "schedules",
        "vcs_token_revoke",
        "retention",
        "metric_counts",
    ] {
        let at = duties.value("bosun_duty_last_pass_timestamp_seconds", &[("duty", duty)]);
        assert!(at >= 0.0, "{duty}: {at}");
    }
    // The only replica holds every lease of the duties it runs (a gauge of 0 or 1 each;
    // which replica holds what is checked with the leases moving).
    let leases = family(&families, "bosun_duty_lease_held", "gauge");
    let sweep = leases.value("bosun_duty_lease_held", &[("duty", "stale_sweep")]);
    assert!(sweep == 0.0 || sweep == 1.0, "{sweep}");
    // Polling is off: its duty never passed.
    assert_eq!(
        duties.value(
            "bosun_duty_last_pass_timestamp_seconds",
            &[("duty", "git_poll")]
        ),
        0.0
    );

    // Stale drift checks: counted per org and aged per stack (their values are checked
    // with the drift scheduler); no stack here is drift-checked.
    for name in ["bosun_drift_check_age_seconds", "bosun_drift_checks_stale"] {
        assert!(
            family(&families, name, "gauge").samples.is_empty(),
            "{name}"
        );
    }

    // Nothing else: every family is one of these.
    let names: Vec<&str> = families.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "bosun_drift_check_age_seconds",
            "bosun_drift_checks_stale",
            "bosun_duty_last_pass_timestamp_seconds",
            "bosun_duty_lease_held",
            "bosun_egress_refused",
            "bosun_github_feedback",
            "bosun_github_feedback_api_calls",
            "bosun_notification_deliveries",
            "bosun_notification_failures",
            "bosun_notifications_pruned",
            "bosun_run_log_chunks_compressed",
            "bosun_run_phase_duration_seconds",
            "bosun_run_queue_wait_seconds",
            "bosun_runner_last_seen_age_seconds",
            "bosun_runners",
            "bosun_runs",
            "bosun_runs_summarised",
            "bosun_sessions_pruned",
            "bosun_sign_in_provider_up",
            "bosun_sign_in_starts_limited",
            "bosun_sign_ins",
            "bosun_state_late_writes",
            "bosun_state_lock_age_seconds",
            "bosun_state_locks_held",
            "bosun_state_versions_pruned",
            "bosun_trigger_decisions",
            "bosun_vcs_deliveries_pruned",
            "bosun_webhook_deliveries",
        ]
    );
}

#[tokio::test]
async fn an_empty_server_exposes_zeros_and_empty_histograms() {
    let Some(()) = parser_or_skip() else { return };
    let t = TestServer::start().await;
    let text = t
        .client
        .get(format!("{}/metrics", t.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let families = parse(&text);
    let runs = family(&families, "bosun_runs", "gauge");
    assert!(runs.named("bosun_runs").iter().all(|s| s.value == 0.0));
    for name in [
        "bosun_run_queue_wait_seconds",
        "bosun_run_phase_duration_seconds",
    ] {
        for (l, h) in histogram(family(&families, name, "histogram"), name) {
            assert_eq!((h.count, h.sum), (0.0, 0.0), "{name} {l:?}");
            assert!(h.buckets.iter().all(|b| b.1 == 0.0));
        }
    }
    let runners = family(&families, "bosun_runners", "gauge");
    assert_eq!(runners.named("bosun_runners").len(), 4);
    assert!(runners.samples.iter().all(|s| s.value == 0.0));
    // Families with no series yet still declare themselves.
    for name in [
        "bosun_runner_last_seen_age_seconds",
        "bosun_state_lock_age_seconds",
        "bosun_state_locks_held",
        "bosun_drift_check_age_seconds",
        "bosun_drift_checks_stale",
    ] {
        assert!(
            family(&families, name, "gauge").samples.is_empty(),
            "{name}"
        );
    }
}
