//! Runners: how a runner's engines reach the network (`Egress`), as it registered it.

use crate::string_enum::string_enum;

/// How a runner's engines reach the network, as the runner says when it registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Egress {
    /// Engines run in the egress sandbox: only what the egress policy allows goes out.
    Restricted,
    /// No sandbox: a self-hosted runner's default (its point is the operator's network).
    Unrestricted,
    /// No sandbox on a runner that should have one (a hosted runner): its operator passed
    /// `--egress-unrestricted`.
    OptedOut,
}

string_enum!(Egress, "egress", Restricted => "restricted", Unrestricted => "unrestricted",
    OptedOut => "opted_out");

impl Egress {
    pub const ALL: [Egress; 3] = [Egress::Restricted, Egress::Unrestricted, Egress::OptedOut];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn egress_modes_read_back_from_their_stored_form() {
        for e in Egress::ALL {
            assert_eq!(e.as_str().parse::<Egress>().unwrap(), e);
        }
        assert_eq!(Egress::OptedOut.as_str(), "opted_out");
        assert!("open".parse::<Egress>().is_err());
    }
}
