//! Approvals: who may decide a run waiting in the approvals
//! inbox — a plan run `paused` by a `requires_approval` environment, or a tracked stack
//! run `unconfirmed` because its stack's environment requires approval.
//!
//! The rule, one function ([`decide`]): the approver needs operator or above in the org;
//! every `protected` environment of the run additionally needs an explicit grant for
//! that user; and the run's own requester may approve it only when the server allows
//! self-approval. Rejecting needs the same role and grants, but a requester may always
//! reject (withdraw) their own run. Every refusal says why.

use std::fmt;

use crate::Role;

/// What an approver decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decision {
    Approve,
    Reject,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Approve => "approved",
            Decision::Reject => "rejected",
        }
    }

    pub fn parse(s: &str) -> Option<Decision> {
        match s {
            "approved" => Some(Decision::Approve),
            "rejected" => Some(Decision::Reject),
            _ => None,
        }
    }

    fn verb(self) -> &'static str {
        match self {
            Decision::Approve => "approve",
            Decision::Reject => "reject",
        }
    }
}

/// What waits for a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubjectKind {
    /// A plan run started `paused`.
    PlanRun,
    /// A tracked stack run waiting in `unconfirmed` on a gated environment.
    StackRun,
}

impl SubjectKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SubjectKind::PlanRun => "plan_run",
            SubjectKind::StackRun => "stack_run",
        }
    }

    pub fn parse(s: &str) -> Option<SubjectKind> {
        match s {
            "plan_run" => Some(SubjectKind::PlanRun),
            "stack_run" => Some(SubjectKind::StackRun),
            _ => None,
        }
    }
}

/// An environment of the run being decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatedEnvironment<'a> {
    pub id: &'a str,
    pub protected: bool,
    /// Users granted approval on it.
    pub grants: &'a [String],
}

/// Who decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Approver<'a> {
    /// The user id (grants name users).
    pub user: &'a str,
    /// How the run records its requester: `user:<id>`.
    pub actor: &'a str,
    /// The approver's role in the run's org; `None`: not a member.
    pub role: Option<Role>,
}

/// Why a decision is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    NotMember,
    RoleTooLow {
        has: Role,
    },
    /// A protected environment without a grant for the approver.
    NotGranted {
        environment: String,
    },
    /// The requester approving their own run while the server forbids it.
    SelfApproval,
}

/// A refused decision, with the action it refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", message(.decision, .refusal))]
pub struct ApprovalRefused {
    pub decision: Decision,
    pub refusal: Refusal,
}

fn message(decision: &Decision, refusal: &Refusal) -> String {
    let verb = decision.verb();
    match refusal {
        Refusal::NotMember => format!("only members of the org with operator or above may {verb} runs"),
        Refusal::RoleTooLow { has } => format!(
            "your role is {has}; to {verb} a run needs {} or above",
            Role::Operator
        ),
        Refusal::NotGranted { environment } => format!(
            "environment {environment:?} is protected: to {verb} its runs needs an explicit grant, and you have none (an admin grants it with `bosun env grant {environment} USER`)"
        ),
        Refusal::SelfApproval => "you requested this run; approving your own run is not allowed on this server (another approver must approve it, or start the server with --allow-self-approval)".to_string(),
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&message(&Decision::Approve, self))
    }
}

/// Decides whether `approver` may take `decision` on a run requested by `requested_by`
/// whose approval covers `environments`.
pub fn decide(
    approver: Approver<'_>,
    decision: Decision,
    requested_by: &str,
    environments: &[GatedEnvironment<'_>],
    allow_self_approval: bool,
) -> Result<(), ApprovalRefused> {
    let refuse = |refusal| Err(ApprovalRefused { decision, refusal });
    match approver.role {
        None => return refuse(Refusal::NotMember),
        Some(has) if has < Role::Operator => return refuse(Refusal::RoleTooLow { has }),
        Some(_) => {}
    }
    if decision == Decision::Approve && !allow_self_approval && approver.actor == requested_by {
        return refuse(Refusal::SelfApproval);
    }
    for env in environments {
        if env.protected && !env.grants.iter().any(|g| g == approver.user) {
            return refuse(Refusal::NotGranted {
                environment: env.id.to_string(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approver(role: Option<Role>) -> Approver<'static> {
        Approver {
            user: "alice",
            actor: "user:alice",
            role,
        }
    }

    #[test]
    fn roles_below_operator_are_refused_saying_so() {
        for d in [Decision::Approve, Decision::Reject] {
            let err = decide(approver(Some(Role::Viewer)), d, "user:bob", &[], false).unwrap_err();
            assert_eq!(err.refusal, Refusal::RoleTooLow { has: Role::Viewer });
            assert!(err.to_string().contains("viewer"), "{err}");
            assert!(err.to_string().contains("operator or above"), "{err}");
            let err = decide(approver(None), d, "user:bob", &[], false).unwrap_err();
            assert_eq!(err.refusal, Refusal::NotMember);
            for role in [Role::Operator, Role::Admin] {
                assert!(decide(approver(Some(role)), d, "user:bob", &[], false).is_ok());
            }
        }
    }

    #[test]
    fn protected_environments_need_a_grant_even_for_admins() {
        let grants = vec!["carol".to_string()];
        let prod = GatedEnvironment {
            id: "prod",
            protected: true,
            grants: &grants,
        };
        let staging = GatedEnvironment {
            id: "staging",
            protected: false,
            grants: &[],
        };
        for role in [Role::Operator, Role::Admin] {
            let err = decide(
                approver(Some(role)),
                Decision::Approve,
                "user:bob",
                &[staging, prod],
                false,
            )
            .unwrap_err();
            assert_eq!(
                err.refusal,
                Refusal::NotGranted {
                    environment: "prod".into()
                }
            );
            assert!(err.to_string().contains("\"prod\" is protected"), "{err}");
            assert!(err.to_string().contains("grant"), "{err}");
        }
        let granted = vec!["alice".to_string()];
        let prod = GatedEnvironment {
            grants: &granted,
            ..prod
        };
        assert!(decide(
            approver(Some(Role::Operator)),
            Decision::Approve,
            "user:bob",
            &[staging, prod],
            false
        )
        .is_ok());
        // The grant does not lift the role requirement.
        assert!(decide(
            approver(Some(Role::Viewer)),
            Decision::Approve,
            "user:bob",
            &[prod],
            false
        )
        .is_err());
    }

    #[test]
    fn self_approval_only_when_allowed_and_self_rejection_always() {
        let me = approver(Some(Role::Admin));
        let err = decide(me, Decision::Approve, "user:alice", &[], false).unwrap_err();
        assert_eq!(err.refusal, Refusal::SelfApproval);
        assert!(err.to_string().contains("--allow-self-approval"), "{err}");
        assert!(decide(me, Decision::Approve, "user:alice", &[], true).is_ok());
        assert!(decide(me, Decision::Reject, "user:alice", &[], false).is_ok());
        // A scheduled run has no human requester.
        assert!(decide(me, Decision::Approve, "schedule", &[], false).is_ok());
        // Self-approval allowed still needs the grant.
        let prod = GatedEnvironment {
            id: "prod",
            protected: true,
            grants: &[],
        };
        assert!(decide(me, Decision::Approve, "user:alice", &[prod], true).is_err());
    }

    #[test]
    fn names_roundtrip() {
        for d in [Decision::Approve, Decision::Reject] {
            assert_eq!(Decision::parse(d.as_str()), Some(d));
        }
        for k in [SubjectKind::PlanRun, SubjectKind::StackRun] {
            assert_eq!(SubjectKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(Decision::parse("maybe"), None);
    }
}
