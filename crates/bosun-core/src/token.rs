//! Bearer tokens: their kinds, their printed form and the hash kept at rest.
//!
//! A token is `bosun_<kind>_<64 hex>`; only its SHA-256 is stored. Tokens carry 256 bits
//! of randomness, so a fast hash is enough — there is nothing to brute-force.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};

use crate::ValidationError;

/// What a token stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenKind {
    /// A user's personal/API token: acts with the user's roles.
    Personal,
    /// A runner-pool token: a runner joins its org's pool with it.
    Pool,
    /// Minted per Run, scoped to that Run's stack or plan, revoked when the Run ends.
    Run,
}

impl TokenKind {
    pub const ALL: [TokenKind; 3] = [TokenKind::Personal, TokenKind::Pool, TokenKind::Run];

    pub fn as_str(self) -> &'static str {
        match self {
            TokenKind::Personal => "personal",
            TokenKind::Pool => "pool",
            TokenKind::Run => "run",
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            TokenKind::Personal => "bosun_pat_",
            TokenKind::Pool => "bosun_pool_",
            TokenKind::Run => "bosun_run_",
        }
    }
}

impl fmt::Display for TokenKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TokenKind {
    type Err = ValidationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TokenKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                ValidationError::new(
                    "kind",
                    format!("unknown token kind {s:?}; expected personal, pool or run"),
                )
            })
    }
}

/// Builds the printed token from 32 random bytes supplied by the caller.
pub fn format_token(kind: TokenKind, random: &[u8; 32]) -> String {
    format!("{}{}", kind.prefix(), hex::encode(random))
}

/// The value stored at rest for a presented token.
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// The kind a presented token claims by its prefix, if it looks like one of ours.
pub fn kind_of(token: &str) -> Option<TokenKind> {
    TokenKind::ALL.into_iter().find(|k| {
        token
            .strip_prefix(k.prefix())
            .is_some_and(|rest| rest.len() == 64)
    })
}

/// Checks an operator-supplied bootstrap token: it becomes an admin credential, so it
/// must be long enough not to be guessed.
pub fn check_bootstrap_token(token: &str) -> Result<(), ValidationError> {
    if token.len() < 32 || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ValidationError::new(
            "BOSUN_BOOTSTRAP_TOKEN",
            "must be at least 32 characters with no whitespace",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_and_recognise() {
        for kind in TokenKind::ALL {
            let t = format_token(kind, &[7u8; 32]);
            assert_eq!(kind_of(&t), Some(kind));
            assert_eq!(kind.as_str().parse::<TokenKind>().unwrap(), kind);
        }
        assert_eq!(kind_of("bosun_pat_short"), None);
        assert_ne!(hash_token("a"), hash_token("b"));
        assert_eq!(hash_token("a").len(), 64);
    }

    #[test]
    fn bootstrap_token_rules() {
        assert!(check_bootstrap_token("short").is_err());
        assert!(check_bootstrap_token(&"x".repeat(32)).is_ok());
        assert!(check_bootstrap_token(&format!("{} ", "x".repeat(32))).is_err());
    }
}
