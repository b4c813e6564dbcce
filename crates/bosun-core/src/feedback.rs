//! Feedback on GitHub: which of check runs and the pull-request comment a stack's runs
//! get (`PrFeedback`, the org's unless the stack says otherwise), what a run's check run
//! says (its status, conclusion and title), and the pull-request comment's text, kept
//! under GitHub's size limit.

use crate::string_enum::string_enum;

/// What a stack's runs report on GitHub.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PrFeedback {
    /// A check run per stack and commit, and the pull request's comment.
    #[default]
    Both,
    /// Check runs only.
    Checks,
    /// The pull request's comment only.
    Comment,
    /// Nothing.
    None,
}

string_enum!(PrFeedback, "pr_feedback", Both => "both", Checks => "checks", Comment => "comment",
    None => "none");

impl PrFeedback {
    pub const ALL: [PrFeedback; 4] = [
        PrFeedback::Both,
        PrFeedback::Checks,
        PrFeedback::Comment,
        PrFeedback::None,
    ];

    /// The stack's own setting, else the org's.
    pub fn resolve(stack: Option<PrFeedback>, org: PrFeedback) -> PrFeedback {
        stack.unwrap_or(org)
    }

    pub fn checks(self) -> bool {
        matches!(self, PrFeedback::Both | PrFeedback::Checks)
    }

    pub fn comment(self) -> bool {
        matches!(self, PrFeedback::Both | PrFeedback::Comment)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stack_setting_wins_over_the_org() {
        assert_eq!(
            PrFeedback::resolve(Some(PrFeedback::None), PrFeedback::Both),
            PrFeedback::None
        );
        assert_eq!(
            PrFeedback::resolve(None, PrFeedback::Checks),
            PrFeedback::Checks
        );
        for f in PrFeedback::ALL {
            assert_eq!(f.as_str().parse::<PrFeedback>().unwrap(), f);
        }
        assert!("all".parse::<PrFeedback>().is_err());
        assert!(PrFeedback::Both.checks() && PrFeedback::Both.comment());
        assert!(PrFeedback::Checks.checks() && !PrFeedback::Checks.comment());
        assert!(!PrFeedback::Comment.checks() && PrFeedback::Comment.comment());
        assert!(!PrFeedback::None.checks() && !PrFeedback::None.comment());
    }
}
