//! Runs of a host plan: their states, the one transition function that
//! decides every state change, the concurrency guard's overlap rule and the approval
//! gate, and a gated run's preview (the dry run beside it): what it predicts per host and
//! why it ends when its run is decided. The store loads a run, asks [`transition`], and
//! writes the answer.
//!
//! A leased run is `running` from the lease on; `started` says whether the runner began
//! executing steps. A lease that never started is put back in the queue (nothing ran);
//! a started run whose runner went silent is `interrupted`, keeping the per-host
//! progress already reported. An abort settles the record at once; when a runner holds
//! the run, the lease is kept until the runner acknowledges (or goes silent) so its
//! heartbeat can be told to stop. Beside a run, people read the end of each step's
//! output ([`output_tail`]).

use std::collections::BTreeSet;

use crate::string_enum::string_enum;

/// The states of a plan run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PlanRunState {
    Queued,
    /// Waiting for an approval (a target host is in a `requires_approval` environment).
    Paused,
    Running,
    Succeeded,
    Failed,
    Rejected,
    Aborted,
    Interrupted,
}

/// What started a plan run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PlanTrigger {
    Manual,
    Schedule,
    /// A tracked run of a stack changed outputs the plan's `on_stack_change` watches.
    Stack,
}

string_enum!(PlanRunState, "state", Queued => "queued", Paused => "paused", Running => "running",
    Succeeded => "succeeded", Failed => "failed", Rejected => "rejected", Aborted => "aborted",
    Interrupted => "interrupted");
string_enum!(PlanTrigger, "trigger", Manual => "manual", Schedule => "schedule",
    Stack => "stack");

impl PlanRunState {
    pub const ALL: [PlanRunState; 8] = [
        PlanRunState::Queued,
        PlanRunState::Paused,
        PlanRunState::Running,
        PlanRunState::Succeeded,
        PlanRunState::Failed,
        PlanRunState::Rejected,
        PlanRunState::Aborted,
        PlanRunState::Interrupted,
    ];

    pub fn is_terminal(self) -> bool {
        !self.is_active()
    }

    /// Counts for the concurrency guard: queued, paused or running.
    pub fn is_active(self) -> bool {
        matches!(
            self,
            PlanRunState::Queued | PlanRunState::Paused | PlanRunState::Running
        )
    }
}

/// Something that happens to a plan run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanRunEvent {
    /// A runner leased the run.
    Leased,
    /// The runner began executing steps.
    Started,
    /// The runner finished executing: `ok` when every step succeeded (or was tolerated).
    Finished { ok: bool },
    /// An approver let a paused run go.
    Approve,
    /// An approver refused a paused run.
    Reject,
    /// An operator aborted the run.
    Abort,
    /// The runner stopped after an abort.
    AbortAcknowledged,
    /// The stale sweep: the runner stopped heart-beating after it started.
    Stale,
    /// The runner leased the run but went silent before starting: nothing ran.
    Requeue,
}

impl PlanRunEvent {
    fn name(self) -> &'static str {
        match self {
            PlanRunEvent::Leased => "lease",
            PlanRunEvent::Started => "start",
            PlanRunEvent::Finished { .. } => "finish",
            PlanRunEvent::Approve => "approve",
            PlanRunEvent::Reject => "reject",
            PlanRunEvent::Abort => "abort",
            PlanRunEvent::AbortAcknowledged => "acknowledge the abort of",
            PlanRunEvent::Stale => "interrupt",
            PlanRunEvent::Requeue => "requeue",
        }
    }
}

/// The facts about a run that transitions depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PlanRunFacts {
    /// A runner holds a lease on the run.
    pub leased: bool,
    /// The runner began executing steps.
    pub started: bool,
}

/// The result of a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanRunNext {
    pub state: PlanRunState,
    /// The run waits for a runner to lease it.
    pub needs_lease: bool,
    /// A runner holds the run after the transition.
    pub leased: bool,
    /// The runner began executing steps (after the transition).
    pub started: bool,
    /// The runner holding the run must be told to stop (through its heartbeat answer).
    pub stop_runner: bool,
}

/// Why an event does not apply to a run in its state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot {event} a plan run that is {state}")]
pub struct InvalidPlanTransition {
    pub state: PlanRunState,
    pub event: &'static str,
}

/// The state a new run starts in: `paused` when a target host's environment requires
/// approval, else `queued` (and waiting for a runner).
pub fn initial(gated: bool) -> PlanRunNext {
    PlanRunNext {
        state: if gated {
            PlanRunState::Paused
        } else {
            PlanRunState::Queued
        },
        needs_lease: !gated,
        leased: false,
        started: false,
        stop_runner: false,
    }
}

/// The plan-run state machine: the one function that decides every transition.
pub fn transition(
    state: PlanRunState,
    facts: PlanRunFacts,
    event: PlanRunEvent,
) -> Result<PlanRunNext, InvalidPlanTransition> {
    use PlanRunEvent as E;
    use PlanRunState::*;
    let refuse = || InvalidPlanTransition {
        state,
        event: event.name(),
    };
    let to = |state, needs_lease, leased, started| PlanRunNext {
        state,
        needs_lease,
        leased,
        started,
        stop_runner: false,
    };
    // Settled: no runner, nothing waiting.
    let end = |s| to(s, false, false, facts.started);
    match (state, event) {
        (Queued, E::Leased) if !facts.leased => Ok(to(Running, false, true, false)),
        (Running, E::Started) if facts.leased && !facts.started => {
            Ok(to(Running, false, true, true))
        }
        (Running, E::Requeue) if facts.leased && !facts.started => {
            Ok(to(Queued, true, false, false))
        }
        (Running, E::Finished { ok }) if facts.leased && facts.started => {
            Ok(end(if ok { Succeeded } else { Failed }))
        }
        (Running, E::Stale) if facts.leased && facts.started => Ok(end(Interrupted)),
        (Paused, E::Approve) => Ok(to(Queued, true, false, false)),
        (Paused, E::Reject) => Ok(end(Rejected)),
        (Queued | Paused, E::Abort) if !facts.leased => Ok(end(Aborted)),
        // Settled at once; the lease stays until the runner has stopped, so its
        // heartbeat answer can tell it to.
        (Running, E::Abort) if facts.leased => Ok(PlanRunNext {
            stop_runner: true,
            ..to(Aborted, false, true, facts.started)
        }),
        // The runner of an aborted run stopped, finished anyway, or went silent: the
        // record stays aborted, the lease is released.
        (Aborted, E::AbortAcknowledged | E::Finished { .. } | E::Stale | E::Requeue)
            if facts.leased =>
        {
            Ok(end(Aborted))
        }
        _ => Err(refuse()),
    }
}

/// The concurrency guard's rule: the hosts of `new` that an active run also targets,
/// sorted and without repeats. Empty: no overlap.
pub fn overlap<'a>(active: impl IntoIterator<Item = &'a [String]>, new: &[String]) -> Vec<String> {
    let new: BTreeSet<&str> = new.iter().map(String::as_str).collect();
    let mut found = BTreeSet::new();
    for hosts in active {
        for h in hosts {
            if new.contains(h.as_str()) {
                found.insert(h.clone());
            }
        }
    }
    found.into_iter().collect()
}

/// The refusal of the concurrency guard: the overlapping hosts, then each run holding
/// them (`(id, state)`) with the command that shows it.
pub fn guard_message(hosts: &[String], runs: &[(String, String)]) -> String {
    let mut message = format!(
        "Already has a run in progress on the same targets: {}",
        hosts.join(", ")
    );
    for (i, (id, state)) in runs.iter().enumerate() {
        let waits = if state == "paused" {
            ", waiting for approval"
        } else {
            ""
        };
        message.push_str(if i == 0 {
            " — held by run "
        } else {
            "; run "
        });
        message.push_str(&format!(
            "{id} ({state}{waits}: `bosun plan-run show {id}`)"
        ));
    }
    message
}

/// The gate rule: the environments among `environments` (those of the target hosts)
/// that require approval, sorted and without repeats. Non-empty: the run starts paused.
pub fn gated_environments<'a>(
    environments: impl IntoIterator<Item = (&'a str, bool)>,
) -> Vec<String> {
    environments
        .into_iter()
        .filter(|(_, requires_approval)| *requires_approval)
        .map(|(e, _)| e.to_string())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The reason an interrupted run carries.
pub const STALE_REASON: &str =
    "the runner stopped reporting; the per-host progress it reported is kept";

/// The reason a preview carries when its run left `paused` — approved, rejected or
/// aborted (`event`) — while the preview was still queued or running: it is aborted so
/// that the real run never runs beside it. `None` for an event that does not decide a
/// paused run.
pub fn preview_decided_reason(run: &str, event: PlanRunEvent) -> Option<String> {
    let verb = match event {
        PlanRunEvent::Approve => "approved",
        PlanRunEvent::Reject => "rejected",
        PlanRunEvent::Abort => "aborted",
        _ => return None,
    };
    Some(format!(
        "its run {run} was {verb} before this preview ended"
    ))
}

/// What a preview (the dry run of a paused run) predicts for one host, from that host's
/// per-step results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostPrediction {
    /// A step would change something on the host.
    WouldChange,
    /// Every step reported was checked and none would change anything.
    NoChange,
    /// No step would change anything, but a raw command's effect cannot be predicted.
    CannotKnow,
    /// A step failed on the host (a failure its step tolerates does not count).
    Failed,
    /// No step reported yet.
    Pending,
}

/// One host's prediction from its results, each `(status, ignored)`: a failure decides
/// first, then a change, then a step that cannot be predicted.
pub fn host_prediction<'a>(results: impl IntoIterator<Item = (&'a str, bool)>) -> HostPrediction {
    let mut seen = false;
    let (mut changed, mut unknown) = (false, false);
    for (status, ignored) in results {
        seen = true;
        match status {
            "failed" | "timed_out" if !ignored => return HostPrediction::Failed,
            "changed" => changed = true,
            "unknown" => unknown = true,
            _ => {}
        }
    }
    if !seen {
        HostPrediction::Pending
    } else if changed {
        HostPrediction::WouldChange
    } else if unknown {
        HostPrediction::CannotKnow
    } else {
        HostPrediction::NoChange
    }
}

/// A preview's per-host predictions counted, as people read them beside a decision:
/// `2 hosts would change, 1 no change`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PreviewSummary {
    pub would_change: usize,
    pub no_change: usize,
    pub cannot_know: usize,
    pub failed: usize,
    pub pending: usize,
}

impl PreviewSummary {
    /// The predictions of `hosts` (the preview's targets) from its results, each
    /// `(host, status, ignored)`; a host with no result is pending.
    pub fn of<'a>(
        hosts: &[String],
        results: impl IntoIterator<Item = (&'a str, &'a str, bool)> + Clone,
    ) -> PreviewSummary {
        let mut s = PreviewSummary::default();
        for host in hosts {
            let mine = results
                .clone()
                .into_iter()
                .filter(|(h, _, _)| *h == host.as_str())
                .map(|(_, status, ignored)| (status, ignored));
            match host_prediction(mine) {
                HostPrediction::WouldChange => s.would_change += 1,
                HostPrediction::NoChange => s.no_change += 1,
                HostPrediction::CannotKnow => s.cannot_know += 1,
                HostPrediction::Failed => s.failed += 1,
                HostPrediction::Pending => s.pending += 1,
            }
        }
        s
    }
}

/// Where a preview is, for whoever decides its run: while it goes on, that it does; once
/// it ended, what it predicts — `running`, `2 hosts would change, 1 no change`, `failed:
/// 1 host failed, 1 no change`.
pub fn preview_outcome(state: PlanRunState, summary: &PreviewSummary) -> String {
    match state {
        PlanRunState::Queued => "queued, waiting for a runner".into(),
        PlanRunState::Running => "running".into(),
        PlanRunState::Succeeded => summary.to_string(),
        other => format!("{other}: {summary}"),
    }
}

/// A preview as its run's deciders read it, from its wire form: its state (`running`,
/// `succeeded`, …; an unknown one is shown as it is), its target `hosts` and its results
/// `(host, status, ignored)` — [`preview_outcome`] over [`PreviewSummary::of`].
pub fn describe_preview<'a>(
    state: &str,
    hosts: &[String],
    results: impl IntoIterator<Item = (&'a str, &'a str, bool)> + Clone,
) -> String {
    let summary = PreviewSummary::of(hosts, results);
    match state.parse::<PlanRunState>() {
        Ok(state) => preview_outcome(state, &summary),
        Err(_) => state.to_string(),
    }
}

impl std::fmt::Display for PreviewSummary {
    /// The counts that are not zero, the first with its noun: `2 hosts would change, 1 no
    /// change, 1 cannot know`; `no host` when there is none.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts = [
            (self.would_change, "would change"),
            (self.no_change, "no change"),
            (self.cannot_know, "cannot know"),
            (self.failed, "failed"),
            (self.pending, "not checked yet"),
        ];
        let mut first = true;
        for (n, what) in parts.into_iter().filter(|(n, _)| *n > 0) {
            if first {
                let noun = if n == 1 { "host" } else { "hosts" };
                write!(f, "{n} {noun} {what}")?;
                first = false;
            } else {
                write!(f, ", {n} {what}")?;
            }
        }
        if first {
            f.write_str("no host")?;
        }
        Ok(())
    }
}

/// The end of a step's output, as people read it beside the run: its last lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputTail<'a> {
    /// The last lines shown (the first may be the end of a longer line), without the
    /// output's final newline.
    pub text: &'a str,
    /// Lines before `text`, whole or in part, that are not shown.
    pub cut_lines: usize,
}

/// At most `max_lines` lines and `max_bytes` bytes of the end of `output`; a last line
/// longer than `max_bytes` is shown by its end.
pub fn output_tail(output: &str, max_lines: usize, max_bytes: usize) -> OutputTail<'_> {
    let text = output.strip_suffix('\n').unwrap_or(output);
    let mut start = text.len();
    // Where the line looked at ends (its newline excluded).
    let mut end = text.len();
    let mut shown = 0;
    while shown < max_lines {
        let from = text[..end].rfind('\n').map_or(0, |at| at + 1);
        if text.len() - from > max_bytes {
            if shown == 0 {
                // One line longer than the room: its end, from a character boundary.
                start = text.len() - max_bytes.min(text.len());
                while !text.is_char_boundary(start) {
                    start += 1;
                }
            }
            break;
        }
        start = from;
        shown += 1;
        if from == 0 {
            break;
        }
        end = from - 1;
    }
    let before = &text[..start];
    let partial = !before.is_empty() && !before.ends_with('\n');
    OutputTail {
        text: &text[start..],
        cut_lines: before.matches('\n').count() + usize::from(partial),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PlanRunEvent as E;
    use PlanRunState as S;

    fn all_events() -> Vec<PlanRunEvent> {
        vec![
            E::Leased,
            E::Started,
            E::Finished { ok: true },
            E::Finished { ok: false },
            E::Approve,
            E::Reject,
            E::Abort,
            E::AbortAcknowledged,
            E::Stale,
            E::Requeue,
        ]
    }

    fn all_facts() -> [PlanRunFacts; 3] {
        [
            PlanRunFacts {
                leased: false,
                started: false,
            },
            PlanRunFacts {
                leased: true,
                started: false,
            },
            PlanRunFacts {
                leased: true,
                started: true,
            },
        ]
    }

    /// The whole table, written out: (state, leased, started, event) → next state.
    /// Every pair not listed is refused.
    fn expected(
        s: PlanRunState,
        f: PlanRunFacts,
        e: PlanRunEvent,
    ) -> Option<(PlanRunState, bool, bool, bool)> {
        // (next state, needs_lease, leased, stop_runner)
        let (l, st) = (f.leased, f.started);
        Some(match (s, l, st, e) {
            (S::Queued, false, _, E::Leased) => (S::Running, false, true, false),
            (S::Queued, false, _, E::Abort) => (S::Aborted, false, false, false),
            (S::Paused, _, _, E::Approve) => (S::Queued, true, false, false),
            (S::Paused, _, _, E::Reject) => (S::Rejected, false, false, false),
            (S::Paused, false, _, E::Abort) => (S::Aborted, false, false, false),
            (S::Running, true, false, E::Started) => (S::Running, false, true, false),
            (S::Running, true, false, E::Requeue) => (S::Queued, true, false, false),
            (S::Running, true, true, E::Finished { ok: true }) => {
                (S::Succeeded, false, false, false)
            }
            (S::Running, true, true, E::Finished { ok: false }) => (S::Failed, false, false, false),
            (S::Running, true, true, E::Stale) => (S::Interrupted, false, false, false),
            (S::Running, true, _, E::Abort) => (S::Aborted, false, true, true),
            (
                S::Aborted,
                true,
                _,
                E::AbortAcknowledged | E::Finished { .. } | E::Stale | E::Requeue,
            ) => (S::Aborted, false, false, false),
            _ => return None,
        })
    }

    #[test]
    fn every_state_event_and_fact_is_decided_as_the_table_says() {
        for s in PlanRunState::ALL {
            for f in all_facts() {
                for e in all_events() {
                    let got = transition(s, f, e)
                        .ok()
                        .map(|n| (n.state, n.needs_lease, n.leased, n.stop_runner));
                    assert_eq!(got, expected(s, f, e), "{s} {f:?} {e:?}");
                    if let Ok(n) = transition(s, f, e) {
                        // A settled run waits for nothing; only an abort keeps a runner.
                        if n.state.is_terminal() {
                            assert!(!n.needs_lease);
                            assert!(!n.leased || (n.state == S::Aborted && n.stop_runner));
                        }
                        if n.needs_lease {
                            assert!(!n.leased);
                        }
                    } else {
                        let err = transition(s, f, e).unwrap_err();
                        assert!(err.to_string().contains(s.as_str()), "{err}");
                    }
                }
            }
        }
    }

    #[test]
    fn every_active_run_can_be_aborted_and_nothing_stays_running() {
        for s in PlanRunState::ALL.into_iter().filter(|s| s.is_active()) {
            let f = PlanRunFacts {
                leased: s == S::Running,
                started: s == S::Running,
            };
            let n = transition(s, f, E::Abort).unwrap();
            assert_eq!(n.state, S::Aborted, "{s}");
        }
        // A leased run whose runner goes silent always leaves `running`.
        for f in all_facts().into_iter().filter(|f| f.leased) {
            let e = if f.started { E::Stale } else { E::Requeue };
            assert_ne!(transition(S::Running, f, e).unwrap().state, S::Running);
        }
    }

    #[test]
    fn terminal_states_accept_nothing_but_the_release_of_an_aborted_lease() {
        for s in PlanRunState::ALL.into_iter().filter(|s| s.is_terminal()) {
            for e in all_events() {
                let f = PlanRunFacts::default();
                assert!(transition(s, f, e).is_err(), "{s} accepted {e:?}");
            }
        }
    }

    #[test]
    fn the_gate_starts_paused_runs() {
        assert_eq!(initial(true).state, S::Paused);
        assert!(!initial(true).needs_lease);
        assert_eq!(initial(false).state, S::Queued);
        assert!(initial(false).needs_lease);
        assert_eq!(
            gated_environments([
                ("prod", true),
                ("staging", false),
                ("prod", true),
                ("dr", true)
            ]),
            ["dr", "prod"]
        );
        assert!(gated_environments([("staging", false)]).is_empty());
    }

    #[test]
    fn overlap_is_sorted_and_unique() {
        let a = vec!["web-2".to_string(), "db".to_string()];
        let b = vec!["web-1".to_string(), "web-2".to_string()];
        let new = vec![
            "web-2".to_string(),
            "web-1".to_string(),
            "cache".to_string(),
        ];
        assert_eq!(
            overlap([a.as_slice(), b.as_slice()], &new),
            ["web-1", "web-2"]
        );
        assert!(overlap([a.as_slice()], &["x".to_string()]).is_empty());
        assert!(overlap(std::iter::empty(), &new).is_empty());
        assert_eq!(
            guard_message(&["web-1".into(), "web-2".into()], &[]),
            "Already has a run in progress on the same targets: web-1, web-2"
        );
        assert_eq!(
            guard_message(
                &["web-1".into()],
                &[
                    ("prun-a".into(), "paused".into()),
                    ("prun-b".into(), "running".into())
                ]
            ),
            "Already has a run in progress on the same targets: web-1 — held by run prun-a \
             (paused, waiting for approval: `bosun plan-run show prun-a`); run prun-b \
             (running: `bosun plan-run show prun-b`)"
        );
    }

    #[test]
    fn a_preview_is_summed_per_host_failure_first_then_change() {
        assert_eq!(host_prediction([]), HostPrediction::Pending);
        assert_eq!(
            host_prediction([("ok", false), ("skipped", false)]),
            HostPrediction::NoChange
        );
        assert_eq!(
            host_prediction([("ok", false), ("unknown", false)]),
            HostPrediction::CannotKnow
        );
        assert_eq!(
            host_prediction([("unknown", false), ("changed", false)]),
            HostPrediction::WouldChange
        );
        assert_eq!(
            host_prediction([("changed", false), ("failed", false)]),
            HostPrediction::Failed
        );
        // A tolerated failure does not fail the host.
        assert_eq!(
            host_prediction([("timed_out", true), ("ok", false)]),
            HostPrediction::NoChange
        );
        let hosts: Vec<String> = ["web-1", "web-2", "db", "cache"]
            .into_iter()
            .map(String::from)
            .collect();
        let results = [
            ("web-1", "changed", false),
            ("web-1", "ok", false),
            ("web-2", "changed", false),
            ("db", "ok", false),
            ("ghost", "changed", false),
        ];
        let s = PreviewSummary::of(&hosts, results);
        assert_eq!(
            s,
            PreviewSummary {
                would_change: 2,
                no_change: 1,
                pending: 1,
                ..PreviewSummary::default()
            }
        );
        assert_eq!(
            s.to_string(),
            "2 hosts would change, 1 no change, 1 not checked yet"
        );
        let one = PreviewSummary {
            no_change: 1,
            cannot_know: 2,
            ..PreviewSummary::default()
        };
        assert_eq!(one.to_string(), "1 host no change, 2 cannot know");
        assert_eq!(PreviewSummary::default().to_string(), "no host");
        assert_eq!(preview_outcome(S::Running, &s), "running");
        assert_eq!(
            preview_outcome(S::Queued, &s),
            "queued, waiting for a runner"
        );
        assert_eq!(
            preview_outcome(S::Succeeded, &one),
            "1 host no change, 2 cannot know"
        );
        assert_eq!(
            preview_outcome(S::Aborted, &one),
            "aborted: 1 host no change, 2 cannot know"
        );
        assert_eq!(
            preview_decided_reason("prun-1", E::Approve).as_deref(),
            Some("its run prun-1 was approved before this preview ended")
        );
        assert!(preview_decided_reason("prun-1", E::Reject)
            .unwrap()
            .contains("was rejected"));
        assert!(preview_decided_reason("prun-1", E::Abort)
            .unwrap()
            .contains("was aborted"));
        assert_eq!(preview_decided_reason("prun-1", E::Leased), None);
    }

    #[test]
    fn names_roundtrip() {
        for s in PlanRunState::ALL {
            assert_eq!(s.as_str().parse::<PlanRunState>().unwrap(), s);
        }
        assert!("finished".parse::<PlanRunState>().is_err());
        assert_eq!(
            "schedule".parse::<PlanTrigger>().unwrap(),
            PlanTrigger::Schedule
        );
    }

    #[test]
    fn the_tail_of_an_output() {
        let t = |o, l, b| {
            let t = output_tail(o, l, b);
            (t.text, t.cut_lines)
        };
        assert_eq!(t("", 3, 100), ("", 0));
        assert_eq!(t("a\nb\nc\n", 3, 100), ("a\nb\nc", 0));
        assert_eq!(t("a\nb\nc\nd", 2, 100), ("c\nd", 2));
        // The byte bound: whole lines only, unless the last line alone is too long.
        assert_eq!(t("aaaa\nbb\ncc\n", 5, 6), ("bb\ncc", 1));
        assert_eq!(t("aaaa\nbbbbbbbb\n", 5, 3), ("bbb", 2));
        assert_eq!(t("x\né€é\n", 5, 4), ("é", 2));
        assert_eq!(t("a\n\n\n", 2, 100), ("\n", 1));
        assert_eq!(t("a\nb", 0, 100), ("", 2));
    }

    proptest::proptest! {
        /// The tail is the end of the output (less its last newline), within the bounds,
        /// and what it leaves out is counted in lines.
        #[test]
        fn a_tail_is_the_end_within_bounds(
            output in "[ab\n]{0,60}",
            lines in 0usize..8,
            bytes in 0usize..30,
        ) {
            let t = output_tail(&output, lines, bytes);
            let text = output.strip_suffix('\n').unwrap_or(&output);
            proptest::prop_assert!(text.ends_with(t.text));
            proptest::prop_assert!(t.text.len() <= bytes || t.text.is_empty());
            proptest::prop_assert!(t.text.is_empty() || t.text.split('\n').count() <= lines);
            let before = &text[..text.len() - t.text.len()];
            let whole = before.is_empty() || before.ends_with('\n');
            proptest::prop_assert_eq!(
                t.cut_lines,
                before.matches('\n').count() + usize::from(!whole)
            );
        }
    }
}
