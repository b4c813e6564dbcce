//! Runs of a stack: kinds, triggers, states, and the one transition function that
//! decides every state change — the server only loads a run, asks [`transition`], and
//! stores the answer.

use crate::policy::Verdict;
use crate::string_enum::string_enum;

/// What a run does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunKind {
    /// Plan, then apply (after confirmation or with autodeploy).
    Tracked,
    /// Plan only (pull requests).
    Proposed,
    /// A plan that reports drift.
    Drift,
}

/// What started a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Trigger {
    Push,
    PullRequest,
    Manual,
    Retry,
    Dependency,
    Schedule,
}

/// The states a stack run goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunState {
    Queued,
    Preparing,
    Planning,
    Unconfirmed,
    Applying,
    Finished,
    Failed,
    Discarded,
    Canceled,
    Interrupted,
    ForceFailed,
    Skipped,
}

/// The phase a runner executes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    Plan,
    Apply,
}

string_enum!(RunKind, "kind", Tracked => "tracked", Proposed => "proposed", Drift => "drift");
string_enum!(Trigger, "trigger", Push => "push", PullRequest => "pull_request", Manual => "manual",
    Retry => "retry", Dependency => "dependency", Schedule => "schedule");
string_enum!(RunState, "state", Queued => "queued", Preparing => "preparing", Planning => "planning",
    Unconfirmed => "unconfirmed", Applying => "applying", Finished => "finished", Failed => "failed",
    Discarded => "discarded", Canceled => "canceled", Interrupted => "interrupted",
    ForceFailed => "force_failed", Skipped => "skipped");
string_enum!(Phase, "phase", Plan => "plan", Apply => "apply");

impl RunState {
    pub const ALL: [RunState; 12] = [
        RunState::Queued,
        RunState::Preparing,
        RunState::Planning,
        RunState::Unconfirmed,
        RunState::Applying,
        RunState::Finished,
        RunState::Failed,
        RunState::Discarded,
        RunState::Canceled,
        RunState::Interrupted,
        RunState::ForceFailed,
        RunState::Skipped,
    ];

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunState::Finished
                | RunState::Failed
                | RunState::Discarded
                | RunState::Canceled
                | RunState::Interrupted
                | RunState::ForceFailed
                | RunState::Skipped
        )
    }

    /// A runner is (or should be) working on it: heartbeats are expected.
    pub fn is_executing(self) -> bool {
        matches!(
            self,
            RunState::Preparing | RunState::Planning | RunState::Applying
        )
    }
}

/// Something that happens to a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A runner leased the run's next phase.
    Leased,
    /// The runner started the engine for the leased phase.
    PhaseStarted,
    /// The plan finished; `changes` when it proposes any resource or output change;
    /// `policy`: the verdict of the policies evaluated on it.
    PlanFinished { changes: bool, policy: Verdict },
    /// An org admin overrode the soft-mandatory policies that denied the plan; `then` is
    /// what the other policies still ask (`Approval` or `Pass`).
    PolicyOverride { then: Verdict },
    /// The apply finished successfully.
    ApplyFinished,
    /// The phase failed; the reason is kept on the run.
    PhaseFailed,
    /// An operator confirmed the plan.
    Confirm,
    /// An operator discarded the plan.
    Discard,
    /// An operator canceled the run (a runner that is executing is told to stop).
    Cancel,
    /// The runner stopped the engine after a cancel.
    CancelAcknowledged,
    /// The phase ran past its tier's timeout.
    Timeout,
    /// The stale sweep: no heartbeat for too long.
    Stale,
    /// The runner that leased the run went dark before starting it: nothing ran.
    Requeue,
    /// A dependency-triggered run whose upstream failed.
    UpstreamFailed,
}

impl Event {
    /// A plan finished with no policy holding it.
    pub fn planned(changes: bool) -> Event {
        Event::PlanFinished {
            changes,
            policy: Verdict::Pass,
        }
    }
}

/// The facts about a run that transitions depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunFacts {
    pub kind: RunKind,
    pub autodeploy: bool,
    pub trigger: Trigger,
    /// The phase the run is in or waiting for (plan until confirmed, then apply).
    pub phase: Phase,
    /// A runner holds a lease on the current phase.
    pub leased: bool,
    /// The runner has started the engine for the leased phase.
    pub started: bool,
    /// What the policies evaluated on its plan hold it for (`Pass`: nothing).
    pub policy_hold: Verdict,
}

/// The result of a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Next {
    pub state: RunState,
    /// The phase the run is now in.
    pub phase: Phase,
    /// Whether the run now waits for a runner to lease its phase.
    pub needs_lease: bool,
    /// The runner must be told to stop (cancel while executing).
    pub stop_runner: bool,
    /// What the policies hold the run for now (`Pass`: nothing; always `Pass` once the
    /// run has left `unconfirmed`).
    pub policy_hold: Verdict,
}

/// Why an event does not apply to a run in its state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot {event} a run that is {state}")]
pub struct InvalidTransition {
    pub state: RunState,
    pub event: &'static str,
}

fn event_name(e: &Event) -> &'static str {
    match e {
        Event::Leased => "lease",
        Event::PhaseStarted => "start",
        Event::PlanFinished { .. } => "finish the plan of",
        Event::PolicyOverride { .. } => "override the policies of",
        Event::ApplyFinished => "finish the apply of",
        Event::PhaseFailed => "fail",
        Event::Confirm => "confirm",
        Event::Discard => "discard",
        Event::Cancel => "cancel",
        Event::CancelAcknowledged => "acknowledge the cancel of",
        Event::Timeout => "time out",
        Event::Stale => "force-fail",
        Event::Requeue => "requeue",
        Event::UpstreamFailed => "skip",
    }
}

/// The run state machine: the one function that decides every transition.
pub fn transition(
    state: RunState,
    facts: RunFacts,
    event: &Event,
) -> Result<Next, InvalidTransition> {
    use RunState::*;
    let refuse = || InvalidTransition {
        state,
        event: event_name(event),
    };
    let to = |state: RunState, phase, needs_lease| Next {
        state,
        phase,
        needs_lease,
        stop_runner: false,
        policy_hold: match state {
            Unconfirmed => facts.policy_hold,
            _ => Verdict::Pass,
        },
    };
    let held = |hold: Verdict| Next {
        policy_hold: hold,
        ..to(Unconfirmed, Phase::Plan, false)
    };
    let end = |s| to(s, facts.phase, false);
    match (state, event) {
        (Queued, Event::Leased) => Ok(to(Preparing, Phase::Plan, false)),
        (Preparing, Event::PhaseStarted) => Ok(to(Planning, Phase::Plan, false)),
        (Preparing, Event::Requeue) if !facts.started => Ok(to(Queued, Phase::Plan, true)),
        (Planning, Event::PlanFinished { changes, policy }) => {
            // A denied plan fails; a proposed run has nothing an override could let
            // through, so a soft-mandatory deny fails it too.
            let denied = match policy {
                Verdict::Deny => true,
                Verdict::Override => facts.kind != RunKind::Tracked,
                Verdict::Pass | Verdict::Approval => false,
            };
            if denied {
                Ok(end(Failed))
            } else if facts.kind != RunKind::Tracked || !changes {
                Ok(end(Finished))
            } else if *policy != Verdict::Pass {
                Ok(held(*policy))
            } else if facts.autodeploy {
                Ok(to(Applying, Phase::Apply, true))
            } else {
                Ok(to(Unconfirmed, Phase::Plan, false))
            }
        }
        (Unconfirmed, Event::PolicyOverride { then }) if facts.policy_hold == Verdict::Override => {
            match then {
                Verdict::Approval => Ok(held(Verdict::Approval)),
                Verdict::Pass if facts.autodeploy => Ok(to(Applying, Phase::Apply, true)),
                Verdict::Pass => Ok(held(Verdict::Pass)),
                Verdict::Override | Verdict::Deny => Err(refuse()),
            }
        }
        // A soft-mandatory deny is lifted by an override only.
        (Unconfirmed, Event::Confirm) if facts.policy_hold != Verdict::Override => {
            Ok(to(Applying, Phase::Apply, true))
        }
        (Unconfirmed, Event::Discard) => Ok(end(Discarded)),
        (Applying, Event::Leased) if !facts.leased => Ok(to(Applying, Phase::Apply, false)),
        (Applying, Event::PhaseStarted) if facts.leased && !facts.started => {
            Ok(to(Applying, Phase::Apply, false))
        }
        (Applying, Event::Requeue) if facts.leased && !facts.started => {
            Ok(to(Applying, Phase::Apply, true))
        }
        (Applying, Event::ApplyFinished) => Ok(end(Finished)),
        (Preparing | Planning | Applying, Event::PhaseFailed) => Ok(end(Failed)),
        (Queued | Unconfirmed, Event::Cancel) => Ok(end(Canceled)),
        (Applying, Event::Cancel) if !facts.leased => Ok(end(Canceled)),
        (Preparing | Planning | Applying, Event::Cancel) => Ok(Next {
            stop_runner: true,
            ..to(state, facts.phase, false)
        }),
        (Preparing | Planning | Applying, Event::CancelAcknowledged) => Ok(end(Canceled)),
        (Planning | Applying, Event::Timeout) => Ok(end(Interrupted)),
        (Preparing | Planning | Applying, Event::Stale) if facts.leased => Ok(end(ForceFailed)),
        (Queued, Event::UpstreamFailed) if facts.trigger == Trigger::Dependency => Ok(end(Skipped)),
        _ => Err(refuse()),
    }
}

/// The reason a force-failed run carries.
pub const STALE_REASON: &str = "runner timed out or never reported";

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(kind: RunKind) -> RunFacts {
        RunFacts {
            kind,
            autodeploy: false,
            trigger: Trigger::Manual,
            phase: Phase::Plan,
            leased: false,
            started: false,
            policy_hold: Verdict::Pass,
        }
    }

    fn all_events() -> Vec<Event> {
        vec![
            Event::Leased,
            Event::PhaseStarted,
            Event::planned(true),
            Event::planned(false),
            Event::ApplyFinished,
            Event::PhaseFailed,
            Event::Confirm,
            Event::Discard,
            Event::Cancel,
            Event::CancelAcknowledged,
            Event::Timeout,
            Event::Stale,
            Event::Requeue,
            Event::UpstreamFailed,
        ]
    }

    #[test]
    fn tracked_happy_path() {
        let mut f = facts(RunKind::Tracked);
        let n = transition(RunState::Queued, f, &Event::Leased).unwrap();
        assert_eq!((n.state, n.needs_lease), (RunState::Preparing, false));
        f.leased = true;
        let n = transition(n.state, f, &Event::PhaseStarted).unwrap();
        assert_eq!(n.state, RunState::Planning);
        f.started = true;
        let n = transition(n.state, f, &Event::planned(true)).unwrap();
        assert_eq!(n.state, RunState::Unconfirmed);
        let n = transition(n.state, f, &Event::Confirm).unwrap();
        assert_eq!(
            (n.state, n.phase, n.needs_lease),
            (RunState::Applying, Phase::Apply, true)
        );
        let f2 = RunFacts {
            phase: Phase::Apply,
            leased: false,
            started: false,
            ..f
        };
        let n = transition(n.state, f2, &Event::Leased).unwrap();
        assert_eq!((n.state, n.needs_lease), (RunState::Applying, false));
        let f3 = RunFacts { leased: true, ..f2 };
        let n = transition(n.state, f3, &Event::PhaseStarted).unwrap();
        let n = transition(
            n.state,
            RunFacts {
                started: true,
                ..f3
            },
            &Event::ApplyFinished,
        )
        .unwrap();
        assert_eq!(n.state, RunState::Finished);
    }

    #[test]
    fn autodeploy_proposed_and_no_changes() {
        let planning = |kind, autodeploy| RunFacts {
            autodeploy,
            leased: true,
            started: true,
            ..facts(kind)
        };
        let n = transition(
            RunState::Planning,
            planning(RunKind::Tracked, true),
            &Event::planned(true),
        )
        .unwrap();
        assert_eq!((n.state, n.needs_lease), (RunState::Applying, true));
        for kind in [RunKind::Proposed, RunKind::Drift] {
            let n = transition(
                RunState::Planning,
                planning(kind, true),
                &Event::planned(true),
            )
            .unwrap();
            assert_eq!(n.state, RunState::Finished, "{kind} never applies");
        }
        let n = transition(
            RunState::Planning,
            planning(RunKind::Tracked, false),
            &Event::planned(false),
        )
        .unwrap();
        assert_eq!(n.state, RunState::Finished);
    }

    #[test]
    fn terminal_states_accept_nothing() {
        for state in RunState::ALL.into_iter().filter(|s| s.is_terminal()) {
            for e in all_events() {
                for leased in [false, true] {
                    let f = RunFacts {
                        leased,
                        ..facts(RunKind::Tracked)
                    };
                    assert!(transition(state, f, &e).is_err(), "{state} accepted {e:?}");
                }
            }
        }
    }

    #[test]
    fn every_pair_is_decided_and_never_leaves_a_run_stuck() {
        // Over every (state, event, facts) the function answers, and every non-terminal
        // state has a way out through cancel.
        for state in RunState::ALL {
            for e in all_events() {
                for kind in [RunKind::Tracked, RunKind::Proposed, RunKind::Drift] {
                    for (leased, started) in [(false, false), (true, false), (true, true)] {
                        for autodeploy in [false, true] {
                            let f = RunFacts {
                                leased,
                                started,
                                autodeploy,
                                ..facts(kind)
                            };
                            if let Ok(n) = transition(state, f, &e) {
                                if n.state.is_terminal() {
                                    assert!(!n.needs_lease && !n.stop_runner);
                                }
                            }
                        }
                    }
                }
            }
            if !state.is_terminal() {
                let f = RunFacts {
                    leased: state.is_executing(),
                    ..facts(RunKind::Tracked)
                };
                assert!(
                    transition(state, f, &Event::Cancel).is_ok(),
                    "{state} cannot be canceled"
                );
            }
        }
    }

    #[test]
    fn stale_timeout_requeue_and_skip() {
        let leased = RunFacts {
            leased: true,
            ..facts(RunKind::Tracked)
        };
        for s in [RunState::Preparing, RunState::Planning, RunState::Applying] {
            assert_eq!(
                transition(s, leased, &Event::Stale).unwrap().state,
                RunState::ForceFailed
            );
        }
        // Waiting for a runner is not stale.
        assert!(transition(RunState::Queued, facts(RunKind::Tracked), &Event::Stale).is_err());
        assert!(transition(RunState::Applying, facts(RunKind::Tracked), &Event::Stale).is_err());
        assert_eq!(
            transition(RunState::Planning, leased, &Event::Timeout)
                .unwrap()
                .state,
            RunState::Interrupted
        );
        // Requeue only when nothing started.
        assert_eq!(
            transition(RunState::Preparing, leased, &Event::Requeue)
                .unwrap()
                .state,
            RunState::Queued
        );
        let started = RunFacts {
            started: true,
            ..leased
        };
        assert!(transition(RunState::Preparing, started, &Event::Requeue).is_err());
        // Only dependency runs are skipped, and drift runs are never dependency runs.
        assert!(transition(
            RunState::Queued,
            facts(RunKind::Tracked),
            &Event::UpstreamFailed
        )
        .is_err());
        let dep = RunFacts {
            trigger: Trigger::Dependency,
            ..facts(RunKind::Tracked)
        };
        assert_eq!(
            transition(RunState::Queued, dep, &Event::UpstreamFailed)
                .unwrap()
                .state,
            RunState::Skipped
        );
    }

    #[test]
    fn cancel_while_executing_stops_the_runner_first() {
        let leased = RunFacts {
            leased: true,
            started: true,
            ..facts(RunKind::Tracked)
        };
        let n = transition(RunState::Planning, leased, &Event::Cancel).unwrap();
        assert_eq!((n.state, n.stop_runner), (RunState::Planning, true));
        let n = transition(RunState::Planning, leased, &Event::CancelAcknowledged).unwrap();
        assert_eq!(n.state, RunState::Canceled);
        assert_eq!(
            transition(RunState::Queued, facts(RunKind::Tracked), &Event::Cancel)
                .unwrap()
                .state,
            RunState::Canceled
        );
    }

    #[test]
    fn names_roundtrip() {
        for s in RunState::ALL {
            assert_eq!(s.as_str().parse::<RunState>().unwrap(), s);
        }
        assert!("running".parse::<RunState>().is_err());
        assert_eq!(
            "pull_request".parse::<Trigger>().unwrap(),
            Trigger::PullRequest
        );
    }

    #[test]
    fn policies_fail_hold_or_let_a_plan_through() {
        let planning = |kind, autodeploy| RunFacts {
            autodeploy,
            leased: true,
            started: true,
            ..facts(kind)
        };
        let done = |kind, autodeploy, changes, policy| {
            transition(
                RunState::Planning,
                planning(kind, autodeploy),
                &Event::PlanFinished { changes, policy },
            )
            .unwrap()
        };
        // A hard deny fails any run, with or without changes.
        for kind in [RunKind::Tracked, RunKind::Proposed] {
            for changes in [true, false] {
                assert_eq!(
                    done(kind, true, changes, Verdict::Deny).state,
                    RunState::Failed
                );
            }
        }
        // A soft deny holds a tracked run (even with autodeploy), fails a proposed one.
        let n = done(RunKind::Tracked, true, true, Verdict::Override);
        assert_eq!(
            (n.state, n.policy_hold),
            (RunState::Unconfirmed, Verdict::Override)
        );
        assert_eq!(
            done(RunKind::Proposed, true, true, Verdict::Override).state,
            RunState::Failed
        );
        // A request for approval holds a tracked autodeploy run; a proposed one finishes.
        let n = done(RunKind::Tracked, true, true, Verdict::Approval);
        assert_eq!(
            (n.state, n.policy_hold),
            (RunState::Unconfirmed, Verdict::Approval)
        );
        assert_eq!(
            done(RunKind::Proposed, true, true, Verdict::Approval).state,
            RunState::Finished
        );

        // Held for an override: a confirm is refused; an override moves it on.
        let held = |hold, autodeploy| RunFacts {
            policy_hold: hold,
            autodeploy,
            ..facts(RunKind::Tracked)
        };
        let soft = held(Verdict::Override, true);
        assert!(transition(RunState::Unconfirmed, soft, &Event::Confirm).is_err());
        let go = |f, then| transition(RunState::Unconfirmed, f, &Event::PolicyOverride { then });
        let n = go(soft, Verdict::Pass).unwrap();
        assert_eq!(
            (n.state, n.policy_hold),
            (RunState::Applying, Verdict::Pass)
        );
        let n = go(held(Verdict::Override, false), Verdict::Pass).unwrap();
        assert_eq!(
            (n.state, n.policy_hold),
            (RunState::Unconfirmed, Verdict::Pass)
        );
        let n = go(soft, Verdict::Approval).unwrap();
        assert_eq!(
            (n.state, n.policy_hold),
            (RunState::Unconfirmed, Verdict::Approval)
        );
        // Nothing to override on a run no soft deny holds.
        assert!(go(held(Verdict::Approval, true), Verdict::Pass).is_err());
        assert!(go(held(Verdict::Pass, true), Verdict::Pass).is_err());
        // Approved (a confirm from the inbox): it applies and the hold is gone.
        let n = transition(
            RunState::Unconfirmed,
            held(Verdict::Approval, false),
            &Event::Confirm,
        )
        .unwrap();
        assert_eq!(
            (n.state, n.policy_hold),
            (RunState::Applying, Verdict::Pass)
        );
    }
}
