//! Slugs: the immutable, URL-safe identifiers of orgs, stacks, users and pools.

use std::fmt;

use crate::ValidationError;

/// A validated slug: 2–63 characters of `a-z`, `0-9` and `-`, starting with a letter or
/// digit and not ending with `-`. Ids appear in URLs, state addresses and OIDC subjects,
/// so they are strict and never change once created.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Slug(String);

impl Slug {
    pub const MIN_LEN: usize = 2;
    pub const MAX_LEN: usize = 63;

    pub fn parse(field: &str, raw: &str) -> Result<Self, ValidationError> {
        check_slug(raw).map_err(|m| ValidationError::new(field, format!("{m} (got {raw:?})")))?;
        Ok(Self(raw.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Display for Slug {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for Slug {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

fn check_slug(raw: &str) -> Result<(), &'static str> {
    let len = raw.len();
    if !(Slug::MIN_LEN..=Slug::MAX_LEN).contains(&len) {
        return Err("must be 2 to 63 characters long");
    }
    if !raw
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err("may contain only lowercase letters, digits and '-'");
    }
    if raw.starts_with('-') || raw.ends_with('-') {
        return Err("must start and end with a letter or digit");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_and_refuses() {
        for ok in ["ab", "networking", "prod-eu-1", "0a", &"a".repeat(63)] {
            assert!(Slug::parse("id", ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "a",
            "Net",
            "a_b",
            "-ab",
            "ab-",
            "a b",
            "ü1",
            &"a".repeat(64),
        ] {
            let e = Slug::parse("id", bad).unwrap_err();
            assert_eq!(e.field, "id");
        }
    }

    proptest! {
        #[test]
        fn valid_slugs_roundtrip(s in "[a-z0-9][a-z0-9-]{0,61}[a-z0-9]") {
            let slug = Slug::parse("id", &s).unwrap();
            prop_assert_eq!(slug.as_str(), s.as_str());
        }

        #[test]
        fn uppercase_never_accepted(s in "[a-z0-9]{1,30}[A-Z][a-z0-9]{0,30}") {
            prop_assert!(Slug::parse("id", &s).is_err());
        }
    }
}
