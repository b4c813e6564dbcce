//! Prometheus metrics at `/metrics`, in the text exposition format 0.0.4.
//!
//! Everything about runs, runners, locks and trigger decisions is read from the store on
//! each scrape, so it survives restarts and every replica answers the same; only the
//! webhook delivery counter (refused deliveries are stored nowhere) and the duties' last
//! passes belong to this process. Timings come from the newest runs created within the
//! store's window (24 hours; at most 1,000 runs) so a scrape's cost grows neither with
//! history nor with the store's pace: those histograms slide with the window — read their
//! buckets as they are, not with `rate()`.
//!
//! Run and trigger-decision counts come from deltas the store's triggers write with each
//! change; the `metric_counts` duty folds them every minute, so a scrape reads a few rows
//! whatever the number of runs.
//!
//! The notification counters belong to this process too (each replica's delivery duty
//! counts its own attempts; Prometheus sums them), and so does the egress refusal count
//! (each replica counts the phase reports it took).
//!
//! Access: the series name orgs, stacks and runners, so `/metrics` is not open to whoever
//! reaches the server. With a metrics token it needs `Authorization: Bearer <token>`; with
//! a metrics listen address it is served on that listener only (`router`), and the main
//! listener answers 404; with neither, the main listener serves it only when it listens
//! on loopback (a local scraper), and refuses it with 403 saying what to set otherwise.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::IntoResponse;
use bosun_core::run::{RunKind, RunState};
use chrono::{DateTime, Utc};

use crate::app::AppState;
use crate::error::ApiError;

/// How often the count deltas are folded.
const FOLD_EVERY: Duration = Duration::from_secs(60);

/// The `metric_counts` duty: folds the run and trigger-decision count deltas into one row
/// per metric, a pass a minute.
pub(crate) fn fold_duty() -> crate::duties::Duty {
    crate::duties::Duty::new("metric_counts", Some(FOLD_EVERY), |state| {
        let state = state.clone();
        Box::pin(async move {
            let folded = state.store.fold_metric_counts().await?;
            tracing::debug!(folded, "metric count deltas folded");
            Ok(None)
        })
    })
}
use crate::service::runners::{dark_after, runner_status, RUNNER_STATUSES};

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Upper bounds (seconds) for the wait from a run's creation to its first lease: runners
/// long-poll, so an idle pool answers in well under a second.
const QUEUE_WAIT_BUCKETS: [f64; 13] = [
    0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0,
];

/// Upper bounds (seconds) for the time spent in a state: seconds (preparing) to a day
/// (a plan waiting for confirmation).
const PHASE_BUCKETS: [f64; 15] = [
    1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0,
    43200.0, 86400.0,
];

/// Every run kind, for a stable set of `bosun_runs` series.
const KINDS: [RunKind; 3] = [RunKind::Tracked, RunKind::Proposed, RunKind::Drift];

/// `/metrics` on the main listener.
pub async fn serve(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    if let Some(addr) = state.config.metrics.listen {
        return Err(ApiError::NotFound(format!(
            "/metrics is served on the metrics listener ({addr}, metrics_listen), not here"
        )));
    }
    if state.config.metrics.token.is_none() && !state.config.listen.ip().is_loopback() {
        return Err(ApiError::Forbidden(
            "/metrics is off on a listener that is not loopback: set a metrics token \
             (--metrics-token) or a metrics listen address (--metrics-listen)"
                .into(),
        ));
    }
    check_token(&state, &headers)?;
    exposition(&state).await
}

/// The metrics listener's routes: `/metrics` only.
pub fn router(state: AppState) -> axum::Router {
    axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(
                |State(state): State<AppState>, headers: HeaderMap| async move {
                    check_token(&state, &headers)?;
                    exposition(&state).await
                },
            ),
        )
        .with_state(state)
}

/// With a metrics token configured, the request must carry it as a bearer token.
fn check_token(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(expected) = &state.config.metrics.token else {
        return Ok(());
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .ok_or_else(|| {
            ApiError::Unauthenticated(
                "/metrics needs the metrics token: send Authorization: Bearer <token>".into(),
            )
        })?;
    // Compared as digests: equal-length values whatever was sent, so the time taken
    // says nothing about how much of the token matched.
    use sha2::Digest as _;
    let same =
        sha2::Sha256::digest(presented.as_bytes()) == sha2::Sha256::digest(expected.0.as_bytes());
    if same {
        Ok(())
    } else {
        Err(ApiError::Unauthenticated(
            "the metrics token does not match".into(),
        ))
    }
}

async fn exposition(state: &AppState) -> Result<axum::response::Response, ApiError> {
    let m = state.store.metrics().await?;
    let now = Utc::now();
    let window = window_text(m.window);
    let mut out = Exposition::default();

    out.family("bosun_runs", "gauge", "Runs stored, by kind and state.");
    let mut runs = m.runs.clone();
    for kind in KINDS {
        for s in RunState::ALL {
            let n = runs
                .remove(&(kind.as_str().to_string(), s.as_str().to_string()))
                .unwrap_or(0);
            out.sample(
                "bosun_runs",
                &[("kind", kind.as_str()), ("state", s.as_str())],
                n,
            );
        }
    }
    // Anything else the store holds is shown rather than dropped.
    for ((kind, s), n) in runs {
        out.sample("bosun_runs", &[("kind", &kind), ("state", &s)], n);
    }

    out.family(
        "bosun_run_queue_wait_seconds",
        "histogram",
        &format!(
            "Seconds from a run's creation to its first lease by a runner, for the newest \
             {newest} runs created in the last {window} that were leased (a sliding window \
             read from the store on each scrape).",
            newest = m.window_runs
        ),
    );
    out.histogram(
        "bosun_run_queue_wait_seconds",
        &[],
        &QUEUE_WAIT_BUCKETS,
        &seconds(&m.queue_waits_ms),
    );

    out.family(
        "bosun_run_phase_duration_seconds",
        "histogram",
        &format!(
            "Seconds runs spent in a state before leaving it, by state (applying includes \
             the wait for the apply lease), for the newest {newest} runs created in the \
             last {window} (a sliding window read from the store on each scrape).",
            newest = m.window_runs
        ),
    );
    let mut phases = m.phase_durations_ms.clone();
    for phase in RunState::ALL.into_iter().filter(|s| !s.is_terminal()) {
        let observed = phases.remove(phase.as_str()).unwrap_or_default();
        out.histogram(
            "bosun_run_phase_duration_seconds",
            &[("phase", phase.as_str())],
            &PHASE_BUCKETS,
            &seconds(&observed),
        );
    }
    for (phase, observed) in phases {
        out.histogram(
            "bosun_run_phase_duration_seconds",
            &[("phase", &phase)],
            &PHASE_BUCKETS,
            &seconds(&observed),
        );
    }

    let dark_after = dark_after(state);
    out.family(
        "bosun_runners",
        "gauge",
        "Registered runners by status, as the runner list shows them: online, busy \
         (holding a lease), dark (silent past the stale limit) or drained.",
    );
    let statuses: Vec<&str> = m
        .runners
        .iter()
        .map(|r| runner_status(r, now, dark_after, |id| m.busy_runners.contains(id)))
        .collect();
    for status in RUNNER_STATUSES {
        let n = statuses.iter().filter(|s| **s == status).count();
        out.sample("bosun_runners", &[("state", status)], n);
    }

    out.family(
        "bosun_runner_last_seen_age_seconds",
        "gauge",
        &format!(
            "Seconds since each runner last contacted the server, for runners seen in the \
             last {window}."
        ),
    );
    let recent = chrono::Duration::from_std(m.window).unwrap_or(chrono::Duration::days(1));
    for r in m.runners.iter().filter(|r| now - r.last_seen <= recent) {
        out.sample(
            "bosun_runner_last_seen_age_seconds",
            &[("runner", &r.id), ("name", &r.name), ("pool", &r.pool)],
            age_seconds(now, r.last_seen),
        );
    }

    out.family(
        "bosun_state_locks_held",
        "gauge",
        "Held state locks, by org (orgs holding none are absent).",
    );
    for (org, n) in &m.locks_held {
        out.sample("bosun_state_locks_held", &[("org", org)], *n);
    }

    out.family(
        "bosun_state_lock_age_seconds",
        "gauge",
        &format!(
            "Seconds each held state lock has been held, for the {} oldest held locks.",
            m.stack_series
        ),
    );
    for l in &m.locks {
        out.sample(
            "bosun_state_lock_age_seconds",
            &[("org", &l.org), ("stack", &l.stack)],
            age_seconds(now, l.acquired_at),
        );
    }

    let stale = crate::drift::stale_check_ages(state, m.stack_series).await?;
    out.family(
        "bosun_drift_checks_stale",
        "gauge",
        "Drift-checked stacks whose checking is stale (no successful check within twice \
         the schedule's interval), by org (orgs with none are absent).",
    );
    for (org, n) in &stale.by_org {
        out.sample("bosun_drift_checks_stale", &[("org", org)], *n);
    }
    out.family(
        "bosun_drift_check_age_seconds",
        "gauge",
        &format!(
            "Seconds since a stale drift-checked stack's last successful drift check (or, \
             with none yet, since its schedule took effect), for the {} most overdue stale \
             stacks; a stack checked on time has no series.",
            m.stack_series
        ),
    );
    for (org, stack, age) in stale.ages {
        out.sample(
            "bosun_drift_check_age_seconds",
            &[("org", &org), ("stack", &stack)],
            age,
        );
    }

    out.family(
        "bosun_state_late_writes_total",
        "counter",
        "State versions written by runs that had already ended.",
    );
    out.sample("bosun_state_late_writes_total", &[], m.late_writes);

    let c = &state.vcs.counters;
    out.family(
        "bosun_webhook_deliveries_total",
        "counter",
        "GitHub webhook deliveries this server process received, by outcome (rejected: \
         bad or missing signature).",
    );
    for (outcome, n) in [
        ("accepted", &c.accepted),
        ("duplicate", &c.duplicate),
        ("rejected", &c.rejected),
    ] {
        out.sample(
            "bosun_webhook_deliveries_total",
            &[("outcome", outcome)],
            n.load(Ordering::Relaxed),
        );
    }

    out.family(
        "bosun_github_feedback_total",
        "counter",
        "Feedback reports on GitHub this server process made, by kind (checks: check runs; \
         comment: pull-request comments) and outcome (reported; rate_limited: waited out; \
         refused: a permission the installation lacks, not asked again for an hour; failed: \
         retried with backoff or given up).",
    );
    for kind in ["checks", "comment"] {
        let f = c.feedback(kind);
        for outcome in crate::vcs::shared::FeedbackCounters::OUTCOMES {
            out.sample(
                "bosun_github_feedback_total",
                &[("kind", kind), ("outcome", outcome)],
                f.get(outcome).load(Ordering::Relaxed),
            );
        }
    }
    out.family(
        "bosun_github_feedback_api_calls_total",
        "counter",
        "GitHub API calls this server process made for feedback: check runs, comments and \
         the installation tokens they use.",
    );
    out.sample(
        "bosun_github_feedback_api_calls_total",
        &[],
        state.vcs.github.feedback_calls.load(Ordering::Relaxed),
    );

    out.family(
        "bosun_egress_refused_total",
        "counter",
        "Connections from engines that the hosted egress policy refused, as runners \
         reported them with their phases to this server process.",
    );
    out.sample(
        "bosun_egress_refused_total",
        &[],
        state.runner_counters.egress_refused.load(Ordering::Relaxed),
    );

    let d = m.trigger_decisions;
    out.family(
        "bosun_trigger_decisions_total",
        "counter",
        "Trigger decisions stored, one per stack a webhook or poll delivery concerned: \
         triggered (a run started), ignored (the stack was left alone) or duplicate (a \
         repeated delivery, which changes nothing).",
    );
    for (decision, n) in [
        ("triggered", d.triggered),
        ("ignored", d.ignored),
        ("duplicate", d.duplicate),
    ] {
        out.sample(
            "bosun_trigger_decisions_total",
            &[("decision", decision)],
            n,
        );
    }

    let n = &state.notifications;
    out.family(
        "bosun_notification_deliveries_total",
        "counter",
        "Notification delivery attempts this server process made, by outcome: delivered, \
         retry (failed, tried again later) or gave_up (failed on the last attempt).",
    );
    for (outcome, c) in [
        ("delivered", &n.delivered),
        ("retry", &n.retried),
        ("gave_up", &n.gave_up),
    ] {
        out.sample(
            "bosun_notification_deliveries_total",
            &[("outcome", outcome)],
            c.load(Ordering::Relaxed),
        );
    }
    out.family(
        "bosun_notification_failures_total",
        "counter",
        "Failed notification delivery attempts this server process made, by target kind.",
    );
    for kind in crate::service::notify::KINDS {
        out.sample(
            "bosun_notification_failures_total",
            &[("kind", kind)],
            n.failures(kind).load(Ordering::Relaxed),
        );
    }
    out.family(
        "bosun_notifications_pruned_total",
        "counter",
        "Notification history this server process deleted as older than the retention: \
         settled deliveries, and events left without deliveries.",
    );
    for (kind, c) in [
        ("deliveries", &n.pruned_deliveries),
        ("events", &n.pruned_events),
    ] {
        out.sample(
            "bosun_notifications_pruned_total",
            &[("kind", kind)],
            c.load(Ordering::Relaxed),
        );
    }

    let r = &state.retention;
    out.family(
        "bosun_state_versions_pruned_total",
        "counter",
        "State versions this server process deleted as past the retention (older than \
         --state-keep-for and not among a stack's newest --state-keep-versions).",
    );
    out.sample(
        "bosun_state_versions_pruned_total",
        &[],
        r.state_versions_pruned.load(Ordering::Relaxed),
    );
    out.family(
        "bosun_run_log_chunks_compressed_total",
        "counter",
        "Log chunks of ended runs this server process packed into compressed blocks, by \
         kind of run (stack_run, plan_run).",
    );
    for (kind, c) in [
        ("stack_run", &r.log_chunks_compressed_stack_runs),
        ("plan_run", &r.log_chunks_compressed_plan_runs),
    ] {
        out.sample(
            "bosun_run_log_chunks_compressed_total",
            &[("kind", kind)],
            c.load(Ordering::Relaxed),
        );
    }
    out.family(
        "bosun_runs_summarised_total",
        "counter",
        "Runs this server process summarised as ended longer ago than --run-retention \
         (their logs, and a stack run's plan or a plan run's step output, deleted; their \
         records kept), by kind of run (stack_run, plan_run).",
    );
    for (kind, c) in [
        ("stack_run", &r.runs_summarised),
        ("plan_run", &r.plan_runs_summarised),
    ] {
        out.sample(
            "bosun_runs_summarised_total",
            &[("kind", kind)],
            c.load(Ordering::Relaxed),
        );
    }
    out.family(
        "bosun_vcs_deliveries_pruned_total",
        "counter",
        "Webhook and poll deliveries (with their trigger decisions) this server process \
         deleted as received longer ago than --delivery-retention.",
    );
    out.sample(
        "bosun_vcs_deliveries_pruned_total",
        &[],
        r.deliveries_pruned.load(Ordering::Relaxed),
    );
    out.family(
        "bosun_sessions_pruned_total",
        "counter",
        "Console sessions this server process deleted as ended (or expired) longer ago \
         than sign_in.keep_ended_sessions.",
    );
    out.sample(
        "bosun_sessions_pruned_total",
        &[],
        r.sessions_pruned.load(Ordering::Relaxed),
    );

    out.family(
        "bosun_sign_ins_total",
        "counter",
        "Sign-ins at an identity provider this server process finished, by provider, way \
         (console, cli_device, cli_browser) and result (signed_in, refused).",
    );
    let (finished, limited) = state.sign_in.counts();
    for ((provider, way, signed_in), n) in finished {
        out.sample(
            "bosun_sign_ins_total",
            &[
                ("provider", provider.as_str()),
                ("way", way.as_str()),
                ("result", if signed_in { "signed_in" } else { "refused" }),
            ],
            n,
        );
    }
    out.family(
        "bosun_sign_in_provider_up",
        "gauge",
        "1 when an identity provider's discovery last answered a document Bosun can use, 0 \
         when it failed (asked at start, then as its cache of an hour runs out), by provider.",
    );
    for (provider, up) in state.sign_in.reachability() {
        if let Some(up) = up {
            out.sample(
                "bosun_sign_in_provider_up",
                &[("provider", provider.as_str())],
                u64::from(up),
            );
        }
    }
    out.family(
        "bosun_sign_in_starts_limited_total",
        "counter",
        "Sign-ins this server process refused to begin, past sign_in.starts_per_minute.",
    );
    out.sample("bosun_sign_in_starts_limited_total", &[], limited);

    out.family(
        "bosun_duty_last_pass_timestamp_seconds",
        "gauge",
        "When a background duty of this server process last completed a pass (Unix \
         seconds; 0 before its first).",
    );
    for (duty, last) in state.duties.last_passes() {
        out.sample(
            "bosun_duty_last_pass_timestamp_seconds",
            &[("duty", duty)],
            last as f64 / 1000.0,
        );
    }

    out.family(
        "bosun_duty_lease_held",
        "gauge",
        "1 for each background duty whose cluster-wide lease this server process holds \
         (it runs the duty's passes), 0 for those another replica holds.",
    );
    for (duty, held) in state.duties.leases_held() {
        out.sample(
            "bosun_duty_lease_held",
            &[("duty", duty)],
            if held { 1.0 } else { 0.0 },
        );
    }

    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], out.text).into_response())
}

/// The window as HELP text says it: `24h`, `90m` or `45s`.
fn window_text(window: Duration) -> String {
    let s = window.as_secs();
    if s > 0 && s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s > 0 && s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

fn seconds(ms: &[i64]) -> Vec<f64> {
    ms.iter().map(|ms| *ms as f64 / 1000.0).collect()
}

/// Seconds from `then` to `now`, never negative (another replica's clock may run ahead).
fn age_seconds(now: DateTime<Utc>, then: DateTime<Utc>) -> f64 {
    ((now - then).num_milliseconds() as f64 / 1000.0).max(0.0)
}

/// A sample value as the text format writes it.
trait Value {
    fn text(&self) -> String;
}

impl Value for f64 {
    fn text(&self) -> String {
        if *self == 0.0 {
            // Also -0.0 (an empty float sum): written as 0.
            "0".into()
        } else if self.is_nan() {
            "NaN".into()
        } else if self.is_infinite() {
            if *self > 0.0 { "+Inf" } else { "-Inf" }.into()
        } else {
            self.to_string()
        }
    }
}

macro_rules! integer_value {
    ($($t:ty),*) => {$(
        impl Value for $t {
            fn text(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
integer_value!(i64, u64, usize);

/// The text exposition format, written family by family.
#[derive(Default)]
struct Exposition {
    text: String,
}

impl Exposition {
    /// A family's `HELP` and `TYPE` lines; its samples follow.
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Value) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (label, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{label}=\"{}\"", escape_label(v));
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {}", value.text());
    }

    /// One histogram series: cumulative `_bucket`s ending with `+Inf`, `_sum`, `_count`.
    fn histogram(&mut self, name: &str, labels: &[(&str, &str)], bounds: &[f64], observed: &[f64]) {
        let bucket = format!("{name}_bucket");
        for (le, n) in cumulative(bounds, observed) {
            let le = le.text();
            let mut with_le = labels.to_vec();
            with_le.push(("le", &le));
            self.sample(&bucket, &with_le, n);
        }
        self.sample(&format!("{name}_sum"), labels, observed.iter().sum::<f64>());
        self.sample(&format!("{name}_count"), labels, observed.len());
    }
}

/// (upper bound, observations at or below it) for each bound and then `+Inf`.
fn cumulative(bounds: &[f64], observed: &[f64]) -> Vec<(f64, usize)> {
    bounds
        .iter()
        .copied()
        .chain([f64::INFINITY])
        .map(|le| (le, observed.iter().filter(|v| **v <= le).count()))
        .collect()
}

/// A label value: backslash, double quote and line feed escaped.
fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// HELP text: backslash and line feed escaped.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_and_help_are_escaped() {
        assert_eq!(escape_label(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(escape_label("line\nnext"), "line\\nnext");
        assert_eq!(escape_help("a \\ \"b\"\nc"), "a \\\\ \"b\"\\nc");
        let mut e = Exposition::default();
        e.sample("m", &[("a", "x\"y"), ("b", "\\")], 1_i64);
        assert_eq!(e.text, "m{a=\"x\\\"y\",b=\"\\\\\"} 1\n");
    }

    #[test]
    fn histograms_are_cumulative_and_end_at_count() {
        let mut e = Exposition::default();
        e.histogram(
            "h",
            &[("phase", "planning")],
            &[1.0, 2.5],
            &[0.5, 1.0, 2.0, 9.0],
        );
        assert_eq!(
            e.text,
            "h_bucket{phase=\"planning\",le=\"1\"} 2\n\
             h_bucket{phase=\"planning\",le=\"2.5\"} 3\n\
             h_bucket{phase=\"planning\",le=\"+Inf\"} 4\n\
             h_sum{phase=\"planning\"} 12.5\n\
             h_count{phase=\"planning\"} 4\n"
        );
    }

    #[test]
    fn values_and_windows_read_as_prometheus_and_people_expect() {
        assert_eq!(0.0_f64.text(), "0");
        assert_eq!(Vec::<f64>::new().iter().sum::<f64>().text(), "0");
        assert_eq!(1.5_f64.text(), "1.5");
        assert_eq!(f64::INFINITY.text(), "+Inf");
        assert_eq!(window_text(Duration::from_secs(86_400)), "24h");
        assert_eq!(window_text(Duration::from_secs(90 * 60)), "90m");
        assert_eq!(window_text(Duration::from_secs(45)), "45s");
    }
}
