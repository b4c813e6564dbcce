//! Policies as code, the rules around the engine: where a policy is evaluated (its
//! decision points), what it is attached to, what its mode makes of its messages, and
//! the one verdict a run's evaluations add up to.
//!
//! A policy's own evaluation (Rego) is `bosun-policy`'s; this module decides what that
//! evaluation means for a run:
//!
//! - **advisory**: every message is a warning; the run goes on.
//! - **soft-mandatory**: a `deny` holds the run until an org admin overrides it with a
//!   reason (audited); `require_approval` sends it to the approvals inbox.
//! - **hard-mandatory**: a `deny` fails the run, with no override.
//!
//! An evaluation that fails (a runtime error, the time bound, a policy that cannot be
//! loaded) counts as a `deny` with the error as its message, unless the policy says
//! `on_error: warn`. A failing policy is never silent.
//!
//! The **trigger** point decides deliveries, before any run exists: a mandatory policy's
//! `skip` (or `deny`, or an error counted as one) keeps a stack's run from starting, and
//! its `trigger` starts one that no watch path asked for. Soft and hard mandatory act
//! alike there — there is no run to hold for an override — and an advisory policy only
//! says what it would have done.

use std::collections::BTreeSet;

use crate::string_enum::string_enum;
use crate::{Slug, ValidationError};

/// Where a policy is evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Point {
    /// A stack run's plan, before it may apply.
    Plan,
    /// A host plan's dry-run report, before a real run.
    PlanRun,
    /// An approver approving a run waiting in the approvals inbox: a deny refuses it.
    Approval,
    /// A push, pull request or polled commit, for each stack on its branch: may skip the
    /// stack's run or start one.
    Trigger,
}

string_enum!(Point, "point", Plan => "plan", PlanRun => "plan_run", Approval => "approval",
    Trigger => "trigger");

/// What a policy's messages do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    Advisory,
    SoftMandatory,
    HardMandatory,
}

string_enum!(Mode, "mode", Advisory => "advisory", SoftMandatory => "soft_mandatory",
    HardMandatory => "hard_mandatory");

/// What an evaluation error counts as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OnError {
    Deny,
    Warn,
}

string_enum!(OnError, "on_error", Deny => "deny", Warn => "warn");

/// One policy's result on one subject, after its mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    Pass,
    Warn,
    RequireApproval,
    Deny,
    /// The trigger point: the stack's run does not start for this delivery.
    Skip,
    /// The trigger point: the stack's run starts for this delivery.
    Trigger,
}

string_enum!(Outcome, "outcome", Pass => "pass", Warn => "warn",
    RequireApproval => "require_approval", Deny => "deny", Skip => "skip",
    Trigger => "trigger");

/// The most decision points, labels and environments a policy names.
pub const MAX_ATTACHMENTS: usize = 32;
/// The most policies an org has.
pub const MAX_POLICIES_PER_ORG: usize = 100;

/// Where a policy applies: the whole org when both lists are empty, else the stacks with
/// one of `labels` and the stacks and hosts' runs in one of `environments`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attachment {
    pub labels: Vec<String>,
    pub environments: Vec<String>,
}

/// What a subject offers to be matched against an attachment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Subject<'a> {
    pub labels: &'a [String],
    pub environments: &'a [String],
}

impl Attachment {
    pub fn whole_org(&self) -> bool {
        self.labels.is_empty() && self.environments.is_empty()
    }

    pub fn applies_to(&self, s: Subject<'_>) -> bool {
        self.whole_org()
            || self.labels.iter().any(|l| s.labels.contains(l))
            || self.environments.iter().any(|e| s.environments.contains(e))
    }

    /// In words, for listings: `the whole org`, `labels prod, pci; environments prod`.
    pub fn describe(&self) -> String {
        if self.whole_org() {
            return "the whole org".into();
        }
        let mut parts = Vec::new();
        if !self.labels.is_empty() {
            parts.push(format!("stacks labelled {}", self.labels.join(", ")));
        }
        if !self.environments.is_empty() {
            parts.push(format!("environments {}", self.environments.join(", ")));
        }
        parts.join("; ")
    }

    pub fn validate(&self) -> Result<(), ValidationError> {
        slugs("labels", &self.labels)?;
        slugs("environments", &self.environments)
    }
}

fn slugs(field: &str, raw: &[String]) -> Result<(), ValidationError> {
    if raw.len() > MAX_ATTACHMENTS {
        return Err(ValidationError::new(
            field,
            format!("at most {MAX_ATTACHMENTS} (got {})", raw.len()),
        ));
    }
    crate::plan_resources::labels(field, raw)
}

/// Checks a policy's name and decision points (at least one, each once).
pub fn validate(name: &str, points: &[Point]) -> Result<(), ValidationError> {
    Slug::parse("name", name)?;
    if points.is_empty() {
        return Err(ValidationError::new(
            "points",
            "name at least one decision point (plan, plan_run, approval, trigger)",
        ));
    }
    let unique: BTreeSet<&Point> = points.iter().collect();
    if unique.len() != points.len() {
        return Err(ValidationError::new(
            "points",
            "a decision point is listed twice",
        ));
    }
    Ok(())
}

/// What one evaluation said, before the mode: the messages of each rule and the errors.
#[derive(Debug, Clone, Copy, Default)]
pub struct Said<'a> {
    pub deny: &'a [String],
    pub warn: &'a [String],
    pub require_approval: &'a [String],
    pub skip: &'a [String],
    pub trigger: &'a [String],
    pub errors: &'a [String],
}

/// The outcome of one evaluation at `point` under a policy's mode and error rule. `skip`
/// and `trigger` mean something at the trigger point only; `require_approval` means
/// nothing there (there is no run to approve yet) and counts as a warning.
pub fn outcome(point: Point, mode: Mode, on_error: OnError, said: Said<'_>) -> Outcome {
    if point == Point::Trigger {
        return trigger_outcome(mode, on_error, said);
    }
    let denies = !said.deny.is_empty() || (on_error == OnError::Deny && !said.errors.is_empty());
    let any = denies
        || !said.warn.is_empty()
        || !said.require_approval.is_empty()
        || !said.errors.is_empty();
    match mode {
        Mode::Advisory if any => Outcome::Warn,
        Mode::Advisory => Outcome::Pass,
        Mode::SoftMandatory | Mode::HardMandatory if denies => Outcome::Deny,
        _ if !said.require_approval.is_empty() => Outcome::RequireApproval,
        _ if any => Outcome::Warn,
        _ => Outcome::Pass,
    }
}

fn trigger_outcome(mode: Mode, on_error: OnError, said: Said<'_>) -> Outcome {
    let skips = !said.skip.is_empty()
        || !said.deny.is_empty()
        || (on_error == OnError::Deny && !said.errors.is_empty());
    let any = skips
        || !said.trigger.is_empty()
        || !said.warn.is_empty()
        || !said.require_approval.is_empty()
        || !said.errors.is_empty();
    match mode {
        Mode::Advisory if any => Outcome::Warn,
        Mode::Advisory => Outcome::Pass,
        _ if skips => Outcome::Skip,
        _ if !said.trigger.is_empty() => Outcome::Trigger,
        _ if any => Outcome::Warn,
        _ => Outcome::Pass,
    }
}

/// What a stack's trigger-point outcomes make of a delivery's decision for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TriggerEffect {
    /// The watch paths decide.
    Keep,
    /// No run, whatever the watch paths say.
    Skip,
    /// A run, whatever the watch paths say.
    Trigger,
}

/// A skip wins over a trigger: when policies disagree, nothing starts.
pub fn trigger_effect(outcomes: impl IntoIterator<Item = Outcome>) -> TriggerEffect {
    let mut effect = TriggerEffect::Keep;
    for o in outcomes {
        match o {
            Outcome::Skip => return TriggerEffect::Skip,
            Outcome::Trigger => effect = TriggerEffect::Trigger,
            _ => {}
        }
    }
    effect
}

/// One recorded evaluation, as the verdict reads it.
#[derive(Debug, Clone, Copy)]
pub struct Counted {
    pub mode: Mode,
    pub outcome: Outcome,
    /// An org admin overrode its deny.
    pub overridden: bool,
}

/// What a run's evaluations add up to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Nothing holds the run.
    Pass,
    /// A soft-mandatory policy denied: the run waits for an org admin's override.
    Override,
    /// A policy asks for approval: the run waits in the approvals inbox.
    Approval,
    /// A hard-mandatory policy denied: the run fails.
    Deny,
}

string_enum!(Verdict, "verdict", Pass => "pass", Override => "override",
    Approval => "approval", Deny => "deny");

/// The verdict of a run's evaluations: a hard deny fails it; a soft deny not overridden
/// holds it for an override; then a request for approval holds it for an approver.
pub fn verdict(all: &[Counted]) -> Verdict {
    let deny = |m: Mode| {
        all.iter()
            .any(|c| c.mode == m && c.outcome == Outcome::Deny && !c.overridden)
    };
    if deny(Mode::HardMandatory) {
        Verdict::Deny
    } else if deny(Mode::SoftMandatory) {
        Verdict::Override
    } else if all.iter().any(|c| c.outcome == Outcome::RequireApproval) {
        Verdict::Approval
    } else {
        Verdict::Pass
    }
}

/// What the policies hold a paused plan run for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PlanRunHold {
    /// Its dry run (the preview) has not been evaluated yet.
    Check,
    /// A soft-mandatory deny: an org admin's override lifts it.
    Override,
    /// A policy asks for approval: it waits in the approvals inbox.
    Approval,
}

string_enum!(PlanRunHold, "policy_hold", Check => "check", Override => "override",
    Approval => "approval");

impl PlanRunHold {
    /// The hold a verdict leaves on a paused plan run (`None`: nothing; a deny rejects it).
    pub fn after(verdict: Verdict) -> Option<PlanRunHold> {
        match verdict {
            Verdict::Override => Some(PlanRunHold::Override),
            Verdict::Approval => Some(PlanRunHold::Approval),
            Verdict::Pass | Verdict::Deny => None,
        }
    }
}

/// The longest reason an override takes.
pub const MAX_OVERRIDE_REASON: usize = 2000;

/// Checks an override's reason: required, trimmed, bounded.
pub fn override_reason(raw: &str) -> Result<String, ValidationError> {
    let r = raw.trim();
    if r.is_empty() {
        return Err(ValidationError::new(
            "reason",
            "an override needs a reason (it is audited)",
        ));
    }
    if r.len() > MAX_OVERRIDE_REASON {
        return Err(ValidationError::new(
            "reason",
            format!("at most {MAX_OVERRIDE_REASON} bytes"),
        ));
    }
    Ok(r.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said<'a>(
        deny: &'a [String],
        warn: &'a [String],
        appr: &'a [String],
        errors: &'a [String],
    ) -> Said<'a> {
        Said {
            deny,
            warn,
            require_approval: appr,
            errors,
            ..Said::default()
        }
    }

    fn outcome(mode: Mode, on_error: OnError, said: Said<'_>) -> Outcome {
        super::outcome(Point::Plan, mode, on_error, said)
    }

    #[test]
    fn at_the_trigger_point_mandatory_policies_skip_or_trigger_and_skip_wins() {
        let m = vec!["why".to_string()];
        let at = |mode, on_error, said| super::outcome(Point::Trigger, mode, on_error, said);
        let skip = Said {
            skip: &m,
            ..Said::default()
        };
        let trigger = Said {
            trigger: &m,
            ..Said::default()
        };
        let error = Said {
            errors: &m,
            ..Said::default()
        };
        let deny = Said {
            deny: &m,
            ..Said::default()
        };
        let approval = Said {
            require_approval: &m,
            ..Said::default()
        };
        for mode in [Mode::SoftMandatory, Mode::HardMandatory] {
            assert_eq!(at(mode, OnError::Deny, skip), Outcome::Skip);
            assert_eq!(at(mode, OnError::Deny, deny), Outcome::Skip);
            assert_eq!(at(mode, OnError::Deny, trigger), Outcome::Trigger);
            assert_eq!(at(mode, OnError::Deny, error), Outcome::Skip);
            assert_eq!(at(mode, OnError::Warn, error), Outcome::Warn);
            assert_eq!(at(mode, OnError::Deny, approval), Outcome::Warn);
            assert_eq!(at(mode, OnError::Deny, Said::default()), Outcome::Pass);
        }
        assert_eq!(at(Mode::Advisory, OnError::Deny, skip), Outcome::Warn);
        assert_eq!(at(Mode::Advisory, OnError::Deny, trigger), Outcome::Warn);
        // skip and trigger mean nothing where a run is planned or approved.
        for point in [Point::Plan, Point::PlanRun, Point::Approval] {
            assert_eq!(
                super::outcome(point, Mode::HardMandatory, OnError::Deny, skip),
                Outcome::Pass
            );
        }
        use TriggerEffect::*;
        assert_eq!(trigger_effect([]), Keep);
        assert_eq!(trigger_effect([Outcome::Warn, Outcome::Pass]), Keep);
        assert_eq!(trigger_effect([Outcome::Trigger, Outcome::Warn]), Trigger);
        assert_eq!(trigger_effect([Outcome::Trigger, Outcome::Skip]), Skip);
        assert_eq!(trigger_effect([Outcome::Skip, Outcome::Trigger]), Skip);
    }

    #[test]
    fn modes_decide_what_a_deny_is() {
        let m = vec!["no".to_string()];
        let none: Vec<String> = vec![];
        let d = said(&m, &none, &none, &none);
        assert_eq!(outcome(Mode::Advisory, OnError::Deny, d), Outcome::Warn);
        assert_eq!(
            outcome(Mode::SoftMandatory, OnError::Deny, d),
            Outcome::Deny
        );
        assert_eq!(
            outcome(Mode::HardMandatory, OnError::Deny, d),
            Outcome::Deny
        );
        let a = said(&none, &none, &m, &none);
        assert_eq!(
            outcome(Mode::HardMandatory, OnError::Deny, a),
            Outcome::RequireApproval
        );
        assert_eq!(outcome(Mode::Advisory, OnError::Deny, a), Outcome::Warn);
        let e = said(&none, &none, &none, &m);
        assert_eq!(
            outcome(Mode::HardMandatory, OnError::Deny, e),
            Outcome::Deny
        );
        assert_eq!(
            outcome(Mode::HardMandatory, OnError::Warn, e),
            Outcome::Warn
        );
        let nothing = said(&none, &none, &none, &none);
        assert_eq!(
            outcome(Mode::HardMandatory, OnError::Deny, nothing),
            Outcome::Pass
        );
    }

    #[test]
    fn the_verdict_orders_deny_override_approval() {
        let c = |mode, outcome, overridden| Counted {
            mode,
            outcome,
            overridden,
        };
        assert_eq!(verdict(&[]), Verdict::Pass);
        let soft = c(Mode::SoftMandatory, Outcome::Deny, false);
        let appr = c(Mode::SoftMandatory, Outcome::RequireApproval, false);
        let hard = c(Mode::HardMandatory, Outcome::Deny, false);
        assert_eq!(verdict(&[appr, soft]), Verdict::Override);
        assert_eq!(verdict(&[appr, soft, hard]), Verdict::Deny);
        let overridden = c(Mode::SoftMandatory, Outcome::Deny, true);
        assert_eq!(verdict(&[appr, overridden]), Verdict::Approval);
        assert_eq!(verdict(&[overridden]), Verdict::Pass);
    }

    #[test]
    fn attachments_match_labels_or_environments_or_everything() {
        let org = Attachment::default();
        let prod = Attachment {
            labels: vec!["pci".into()],
            environments: vec!["prod".into()],
        };
        let labels = vec!["pci".to_string()];
        let envs = vec!["prod".to_string()];
        let none: Vec<String> = vec![];
        assert!(org.applies_to(Subject::default()));
        assert!(prod.applies_to(Subject {
            labels: &labels,
            environments: &none
        }));
        assert!(prod.applies_to(Subject {
            labels: &none,
            environments: &envs
        }));
        assert!(!prod.applies_to(Subject::default()));
        assert_eq!(prod.describe(), "stacks labelled pci; environments prod");
        let bad = Attachment {
            labels: vec!["Not A Slug".into()],
            environments: vec![],
        };
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("labels[0]"));
    }

    #[test]
    fn names_points_and_reasons_are_checked() {
        assert!(validate("no-destroy", &[Point::Plan]).is_ok());
        assert!(validate("no-destroy", &[]).is_err());
        assert!(validate("no-destroy", &[Point::Plan, Point::Plan]).is_err());
        assert!(validate("Bad Name", &[Point::Plan]).is_err());
        assert!(override_reason("  ").is_err());
        assert_eq!(override_reason(" ok ").unwrap(), "ok");
        assert!(override_reason(&"x".repeat(MAX_OVERRIDE_REASON + 1)).is_err());
        assert_eq!(
            "soft_mandatory".parse::<Mode>().unwrap(),
            Mode::SoftMandatory
        );
        assert!("sometimes"
            .parse::<Mode>()
            .unwrap_err()
            .to_string()
            .contains("advisory"));
    }
}
