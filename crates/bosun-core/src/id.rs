//! Slugs: the immutable, URL-safe identifiers of orgs, stacks, users and pools, and the
//! labels hosts and stacks carry.

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

/// Labels (a host's, a stack's): slugs, each once. An error names the entry at fault
/// (`labels[1]`).
pub fn labels(field: &str, raw: &[String]) -> Result<(), ValidationError> {
    label_slugs(field, raw).map(|_| ())
}

/// [`labels`], answering the labels as slugs in the order given.
pub fn label_slugs(field: &str, raw: &[String]) -> Result<Vec<Slug>, ValidationError> {
    let mut out = Vec::with_capacity(raw.len());
    for (i, l) in raw.iter().enumerate() {
        let label = Slug::parse(&format!("{field}[{i}]"), l)?;
        if raw[..i].contains(l) {
            return Err(ValidationError::new(
                format!("{field}[{i}]"),
                format!("label {l:?} is listed twice"),
            ));
        }
        out.push(label);
    }
    Ok(out)
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
    fn labels_are_slugs_each_once() {
        let l = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(labels("labels", &l(&["web", "eu-1"])).is_ok());
        let ok = label_slugs("labels", &l(&["web", "eu-1"])).unwrap();
        assert_eq!(
            ok.iter().map(Slug::as_str).collect::<Vec<_>>(),
            ["web", "eu-1"]
        );
        assert!(label_slugs("labels", &[]).unwrap().is_empty());
        assert_eq!(
            labels("labels", &l(&["web", "Web"])).unwrap_err().field,
            "labels[1]"
        );
        let twice = labels("labels", &l(&["web", "db", "web"])).unwrap_err();
        assert_eq!(twice.field, "labels[2]");
        assert!(twice.message.contains("twice"), "{twice}");
    }

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
