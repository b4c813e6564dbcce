//! The rules for what plans run against — hosts, environments, plan names — as pure
//! checks. Every error names the field at fault, so the API and the CLI can point at it.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::{Slug, ValidationError};

/// The longest host name.
pub const HOST_NAME_MAX: usize = 63;
/// The longest address (a DNS name is at most 253 characters).
pub const ADDRESS_MAX: usize = 253;

/// How a host is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connection {
    Ssh,
    Local,
}

impl Connection {
    pub fn as_str(self) -> &'static str {
        match self {
            Connection::Ssh => "ssh",
            Connection::Local => "local",
        }
    }

    pub fn parse(field: &str, raw: &str) -> Result<Self, ValidationError> {
        match raw {
            "ssh" => Ok(Connection::Ssh),
            "local" => Ok(Connection::Local),
            _ => Err(ValidationError::new(
                field,
                format!("must be \"ssh\" or \"local\" (got {raw:?})"),
            )),
        }
    }
}

/// A host name: `[a-z0-9][a-z0-9._-]*`, at most 63 characters.
pub fn host_name(field: &str, raw: &str) -> Result<(), ValidationError> {
    let bad = |m: &str| Err(ValidationError::new(field, format!("{m} (got {raw:?})")));
    if raw.is_empty() || raw.len() > HOST_NAME_MAX {
        return bad("must be 1 to 63 characters long");
    }
    let first_ok = raw
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if !first_ok {
        return bad("must start with a lowercase letter or digit");
    }
    if !raw
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
    {
        return bad("may contain only lowercase letters, digits, '.', '_' and '-'");
    }
    Ok(())
}

/// An address: a DNS name, an IPv4 or an IPv6 address (no scheme, port or spaces).
pub fn address(field: &str, raw: &str) -> Result<(), ValidationError> {
    let bad = |m: &str| Err(ValidationError::new(field, format!("{m} (got {raw:?})")));
    if raw.is_empty() || raw.len() > ADDRESS_MAX {
        return bad("must be 1 to 253 characters long");
    }
    if raw.parse::<std::net::IpAddr>().is_ok() {
        return Ok(());
    }
    if raw.contains(':') {
        return bad("is not a host name or IP address (give the port in `port`)");
    }
    let labels_ok = raw.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    });
    if !labels_ok {
        return bad("is not a host name or IP address");
    }
    Ok(())
}

/// A port, 1..=65535.
pub fn port(field: &str, raw: i64) -> Result<u16, ValidationError> {
    u16::try_from(raw)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| ValidationError::new(field, format!("must be 1 to 65535 (got {raw})")))
}

/// Labels: slugs, each once (the rule is the one stacks' labels follow too).
pub use crate::id::labels;

/// An environment id: a slug.
pub fn environment_id(field: &str, raw: &str) -> Result<(), ValidationError> {
    Slug::parse(field, raw).map(|_| ())
}

/// A plan name: a slug.
pub fn plan_name(field: &str, raw: &str) -> Result<(), ValidationError> {
    Slug::parse(field, raw).map(|_| ())
}

/// A user name on the host (no spaces, no `@`, at most 64 characters).
pub fn user(field: &str, raw: &str) -> Result<(), ValidationError> {
    if raw.is_empty()
        || raw.len() > 64
        || raw
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '@' || c == ':')
    {
        return Err(ValidationError::new(
            field,
            format!("must be a user name of 1 to 64 characters without spaces, '@' or ':' (got {raw:?})"),
        ));
    }
    Ok(())
}

/// A path on the runner's machine (identity or known_hosts file): non-empty, one line.
pub fn path(field: &str, raw: &str) -> Result<(), ValidationError> {
    if raw.trim().is_empty() || raw.contains(['\n', '\r', '\0']) {
        return Err(ValidationError::new(
            field,
            "must be a non-empty path on one line",
        ));
    }
    Ok(())
}

/// Pinned host-key algorithms.
const KEY_TYPES: [&str; 5] = [
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
];

/// A pinned host key: `<type> <base64>` (an optional trailing comment is allowed), where
/// the type is `ssh-ed25519`, `ecdsa-sha2-*` or `ssh-rsa`.
pub fn host_key(field: &str, raw: &str) -> Result<(), ValidationError> {
    let mut parts = raw.split_whitespace();
    let (Some(kind), Some(body)) = (parts.next(), parts.next()) else {
        return Err(ValidationError::new(
            field,
            "must be \"<type> <base64 key>\", e.g. \"ssh-ed25519 AAAAC3Nza…\"",
        ));
    };
    if !KEY_TYPES.contains(&kind) {
        return Err(ValidationError::new(
            field,
            format!("key type {kind:?} is not one of {}", KEY_TYPES.join(", ")),
        ));
    }
    let base64_ok = body.len() >= 16
        && body.len() % 4 == 0
        && body
            .trim_end_matches('=')
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
        && body.bytes().rev().take_while(|b| *b == b'=').count() <= 2;
    if !base64_ok {
        return Err(ValidationError::new(
            field,
            "the key after the type is not base64",
        ));
    }
    Ok(())
}

/// Variables: a JSON object with non-empty keys of letters, digits and `_`, not starting
/// with a digit (so templates can reach them as `vars.<key>`).
pub fn vars(field: &str, raw: &Value) -> Result<BTreeMap<String, Value>, ValidationError> {
    let Value::Object(map) = raw else {
        return Err(ValidationError::new(
            field,
            "must be an object of variables (\"name\": value)",
        ));
    };
    for key in map.keys() {
        var_name(&format!("{field}.{key}"), key)?;
    }
    Ok(map.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

/// A variable name: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn var_name(field: &str, key: &str) -> Result<(), ValidationError> {
    let ok = key
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ok {
        return Err(ValidationError::new(
            field,
            format!("variable names are letters, digits and '_', not starting with a digit (got {key:?})"),
        ));
    }
    Ok(())
}

/// A `secret://<namespace>/<key>` reference found in a text, with its 1-based line and
/// column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRef<'a> {
    pub namespace: &'a str,
    pub key: &'a str,
    pub line: usize,
    pub column: usize,
}

/// Every `secret://<namespace>/<key>` reference in `text` (a plan file, a variable), in
/// order. The namespace runs over slug characters, the key over letters, digits, `_`,
/// `.` and `-`; a reference without a `/` or a key is skipped (not a reference).
pub fn secret_refs(text: &str) -> Vec<SecretRef<'_>> {
    const MARK: &str = "secret://";
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find(MARK).map(|i| from + i) {
        let rest = &text[at + MARK.len()..];
        from = at + MARK.len();
        let ns_len = rest
            .bytes()
            .take_while(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
            .count();
        if ns_len == 0 || rest.as_bytes().get(ns_len) != Some(&b'/') {
            continue;
        }
        let key_rest = &rest[ns_len + 1..];
        let key_len = key_rest
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || b"_.-".contains(b))
            .count();
        if key_len == 0 {
            continue;
        }
        let before = &text[..at];
        let line = before.matches('\n').count() + 1;
        let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
        out.push(SecretRef {
            namespace: &rest[..ns_len],
            key: &key_rest[..key_len],
            line,
            column,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn host_names() {
        for ok in ["a", "web-1", "db.eu_1", "0x", &"a".repeat(63)] {
            assert!(host_name("name", ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", ".a", "Web", "a b", "a/b", &"a".repeat(64)] {
            let e = host_name("name", bad).unwrap_err();
            assert_eq!(e.field, "name", "{bad}");
        }
    }

    #[test]
    fn addresses() {
        for ok in [
            "10.1.0.11",
            "::1",
            "fe80::1",
            "web-1.example.com",
            "localhost",
        ] {
            assert!(address("address", ok).is_ok(), "{ok}");
        }
        for bad in ["", "a b", "ssh://x", "host:22", "a..b", "-a.com", "x/y"] {
            assert_eq!(
                address("address", bad).unwrap_err().field,
                "address",
                "{bad}"
            );
        }
    }

    #[test]
    fn ports_and_connections() {
        assert_eq!(port("port", 22).unwrap(), 22);
        assert_eq!(port("port", 65535).unwrap(), 65535);
        for bad in [0, -1, 65536] {
            assert!(port("port", bad)
                .unwrap_err()
                .message
                .contains("1 to 65535"));
        }
        assert_eq!(Connection::parse("c", "local").unwrap(), Connection::Local);
        assert!(Connection::parse("c", "telnet").is_err());
    }

    #[test]
    fn host_keys() {
        let ed = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDxkfIaTBCx7IfHK+Wz8o2Dcw6j7I5l2ia0Ez+Lk3WlN";
        assert!(host_key("host_key", ed).is_ok());
        assert!(host_key("host_key", &format!("{ed} root@web-1")).is_ok());
        assert!(host_key(
            "host_key",
            "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTY="
        )
        .is_ok());
        for bad in [
            "",
            "ssh-ed25519",
            "ssh-dss AAAAB3NzaC1kc3MAAACBAP1",
            "ssh-ed25519 not*base64!!!!!!!!!!",
            "AAAAC3NzaC1lZDI1NTE5AAAAIDxk",
        ] {
            assert_eq!(
                host_key("host_key", bad).unwrap_err().field,
                "host_key",
                "{bad}"
            );
        }
    }

    #[test]
    fn variables() {
        let v = vars("vars", &json!({"app_port": 80, "_x": {"a": [1]}})).unwrap();
        assert_eq!(v["app_port"], json!(80));
        assert_eq!(vars("vars", &json!([1])).unwrap_err().field, "vars");
        assert_eq!(
            vars("vars", &json!({"1x": 1})).unwrap_err().field,
            "vars.1x"
        );
        assert!(vars("vars", &json!({"a-b": 1})).is_err());
    }

    #[test]
    fn secret_references_with_positions() {
        let text =
            "a: secret://prod/db.pass\n  b: \"x secret://ops/k-1\" secret://Bad/x secret://n/\n";
        let refs = secret_refs(text);
        let got: Vec<(&str, &str, usize, usize)> = refs
            .iter()
            .map(|r| (r.namespace, r.key, r.line, r.column))
            .collect();
        assert_eq!(got, [("prod", "db.pass", 1, 4), ("ops", "k-1", 2, 9)]);
        assert!(secret_refs("no references here").is_empty());
    }

    #[test]
    fn slugs_and_users() {
        assert!(environment_id("id", "prod").is_ok());
        assert_eq!(environment_id("id", "Prod").unwrap_err().field, "id");
        assert!(plan_name("name", "app-config").is_ok());
        assert!(plan_name("name", "app config").is_err());
        assert!(user("user", "deploy").is_ok());
        assert!(user("user", "de ploy").is_err());
        assert!(path("identity_file", "~/.ssh/id_ed25519").is_ok());
        assert!(path("identity_file", " ").is_err());
    }
}
