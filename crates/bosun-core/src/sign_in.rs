//! People signing in through their identity provider: what an ID token's claims make of
//! them in Bosun. The rules that map the provider's groups (or any claim) to org
//! memberships ([`RoleRule`], [`memberships_from_claims`]), the changes that bring a
//! person's provider-given memberships in line with them ([`membership_changes`]; the
//! ones an admin gave by hand are never touched), and the user id a first sign-in
//! proposes ([`proposed_user_id`]).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::{Role, Slug, ValidationError};

/// Which orgs a rule grants its role in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrgScope {
    /// Every org of the server (`org = "*"`).
    Every,
    One(Slug),
}

/// One rule: whoever's `claim` holds `value` (a string equal to it, or a list containing
/// it) is `role` in `org`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleRule {
    pub claim: String,
    pub value: String,
    pub org: OrgScope,
    pub role: Role,
}

/// The most rules one provider may have.
pub const MAX_RULES: usize = 256;
/// The most values one claim may hold that the rules look at (a person in more groups
/// than this is refused, naming the claim, rather than read partly).
pub const MAX_CLAIM_VALUES: usize = 1_000;

impl RoleRule {
    /// A rule as configured: `claim` (the provider's groups claim when empty), `value`,
    /// `org` (`*` or an org id) and `role`. `at` names it in errors (`roles[2]`).
    pub fn parse(
        at: &str,
        claim: &str,
        value: &str,
        org: &str,
        role: &str,
    ) -> Result<Self, ValidationError> {
        if claim.is_empty() || claim.len() > 128 {
            return Err(ValidationError::new(
                format!("{at}.claim"),
                "must name a claim (1 to 128 characters)",
            ));
        }
        if value.is_empty() || value.len() > 256 {
            return Err(ValidationError::new(
                format!("{at}.group"),
                "must be 1 to 256 characters",
            ));
        }
        let org = match org {
            "*" => OrgScope::Every,
            one => OrgScope::One(Slug::parse(&format!("{at}.org"), one)?),
        };
        let role = role
            .parse::<Role>()
            .map_err(|e| ValidationError::new(format!("{at}.role"), e.message))?;
        Ok(RoleRule {
            claim: claim.to_string(),
            value: value.to_string(),
            org,
            role,
        })
    }

    /// Whether `claims` match: the claim is this string, or a list holding it.
    fn matches(&self, claims: &Value) -> Result<bool, ValidationError> {
        match claims.get(&self.claim) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::String(s)) => Ok(*s == self.value),
            Some(Value::Array(items)) => {
                if items.len() > MAX_CLAIM_VALUES {
                    return Err(ValidationError::new(
                        self.claim.clone(),
                        format!(
                            "holds {} values; at most {MAX_CLAIM_VALUES} are read",
                            items.len()
                        ),
                    ));
                }
                Ok(items
                    .iter()
                    .any(|v| v.as_str() == Some(self.value.as_str())))
            }
            Some(Value::Bool(b)) => Ok(b.to_string() == self.value),
            Some(Value::Number(n)) => Ok(n.to_string() == self.value),
            Some(Value::Object(_)) => Ok(false),
        }
    }

    /// The rule in words, for the audit entry of the change it caused.
    pub fn describe(&self) -> String {
        let org = match &self.org {
            OrgScope::Every => "every org".to_string(),
            OrgScope::One(o) => format!("org {o}"),
        };
        format!(
            "claim {:?} holds {:?} → {} of {org}",
            self.claim, self.value, self.role
        )
    }
}

/// A membership the provider's claims give: the role, and the rule that gave it (the
/// highest role wins; between equal roles, the first rule).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    pub role: Role,
    pub because: String,
}

/// The memberships `claims` give under `rules`, by org, over the server's `orgs` (a rule
/// for every org grants in each; one naming an org the server lacks grants nothing).
pub fn memberships_from_claims(
    rules: &[RoleRule],
    claims: &Value,
    orgs: &[String],
) -> Result<BTreeMap<String, Granted>, ValidationError> {
    let mut out: BTreeMap<String, Granted> = BTreeMap::new();
    for rule in rules {
        if !rule.matches(claims)? {
            continue;
        }
        let targets: Vec<&str> = match &rule.org {
            OrgScope::Every => orgs.iter().map(String::as_str).collect(),
            OrgScope::One(o) => orgs
                .iter()
                .map(String::as_str)
                .filter(|x| *x == o.as_str())
                .collect(),
        };
        for org in targets {
            let better = out.get(org).is_none_or(|g| rule.role > g.role);
            if better {
                out.insert(
                    org.to_string(),
                    Granted {
                        role: rule.role,
                        because: rule.describe(),
                    },
                );
            }
        }
    }
    Ok(out)
}

/// Where a membership came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MembershipSource {
    /// Given by an admin: sign-in never changes it.
    Manual,
    /// Given by the identity provider's claims at the last sign-in.
    Provider,
}

crate::string_enum::string_enum!(MembershipSource, "source", Manual => "manual", Provider => "provider");

/// One change a sign-in makes to a person's memberships.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MembershipChange {
    Add {
        org: String,
        role: Role,
        because: String,
    },
    Change {
        org: String,
        from: Role,
        to: Role,
        because: String,
    },
    /// No rule gives it any more.
    Remove { org: String, role: Role },
}

/// The changes that bring a person's provider-given memberships in line with `granted`.
/// `current` is every membership they hold (org → role, source); a manual one is left as
/// it is, whatever the rules say.
pub fn membership_changes(
    current: &BTreeMap<String, (Role, MembershipSource)>,
    granted: &BTreeMap<String, Granted>,
) -> Vec<MembershipChange> {
    let mut out = Vec::new();
    for (org, g) in granted {
        match current.get(org) {
            None => out.push(MembershipChange::Add {
                org: org.clone(),
                role: g.role,
                because: g.because.clone(),
            }),
            Some((role, MembershipSource::Provider)) if *role != g.role => {
                out.push(MembershipChange::Change {
                    org: org.clone(),
                    from: *role,
                    to: g.role,
                    because: g.because.clone(),
                })
            }
            Some(_) => {}
        }
    }
    for (org, (role, source)) in current {
        if *source == MembershipSource::Provider && !granted.contains_key(org) {
            out.push(MembershipChange::Remove {
                org: org.clone(),
                role: *role,
            });
        }
    }
    out
}

/// The user id a first sign-in proposes: the claim's value (a username, or an email's
/// local part) made a slug — lower case, other characters as `-`, at most 63 — or
/// `user` when nothing of it is left. The store adds `-2`, `-3`, … when it is taken.
pub fn proposed_user_id(name: &str) -> String {
    let local = name.split('@').next().unwrap_or_default();
    let mut out = String::new();
    for c in local.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.truncate(Slug::MAX_LEN - 4);
    let out = out.trim_end_matches('-').to_string();
    if out.len() < Slug::MIN_LEN {
        "user".to_string()
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(value: &str, org: &str, role: &str) -> RoleRule {
        RoleRule::parse("roles[0]", "groups", value, org, role).unwrap()
    }

    #[test]
    fn rules_grant_the_highest_role_per_org() {
        let rules = [
            rule("platform-admins", "*", "admin"),
            rule("team-net", "net", "operator"),
            rule("readers", "net", "viewer"),
            rule("team-ghost", "ghost", "admin"),
        ];
        let orgs = ["net".to_string(), "web".to_string()];
        let got = memberships_from_claims(
            &rules,
            &json!({"groups": ["team-net", "readers", "team-ghost"]}),
            &orgs,
        )
        .unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got["net"].role, Role::Operator);
        assert!(got["net"].because.contains("team-net"), "{got:?}");
        let admin = memberships_from_claims(
            &rules,
            &json!({"groups": ["platform-admins", "readers"]}),
            &orgs,
        )
        .unwrap();
        assert_eq!(
            admin.values().map(|g| g.role).collect::<Vec<_>>(),
            [Role::Admin, Role::Admin]
        );
        // A claim that is one string, or missing, or of another shape.
        let one = RoleRule::parse("roles[0]", "department", "infra", "web", "viewer").unwrap();
        assert_eq!(
            memberships_from_claims(
                std::slice::from_ref(&one),
                &json!({"department": "infra"}),
                &orgs
            )
            .unwrap()["web"]
                .role,
            Role::Viewer
        );
        assert!(
            memberships_from_claims(&[one], &json!({"department": {"x": 1}}), &orgs)
                .unwrap()
                .is_empty()
        );
        // A claim too long to read is refused, naming it.
        let many: Vec<String> = (0..=MAX_CLAIM_VALUES).map(|i| format!("g{i}")).collect();
        let e = memberships_from_claims(&rules, &json!({ "groups": many }), &orgs).unwrap_err();
        assert_eq!(e.field, "groups");
    }

    #[test]
    fn rules_are_checked_when_configured() {
        assert_eq!(
            RoleRule::parse("roles[1]", "groups", "x", "Bad Org", "admin")
                .unwrap_err()
                .field,
            "roles[1].org"
        );
        assert_eq!(
            RoleRule::parse("roles[1]", "groups", "x", "net", "owner")
                .unwrap_err()
                .field,
            "roles[1].role"
        );
        assert_eq!(
            RoleRule::parse("roles[1]", "groups", "", "net", "admin")
                .unwrap_err()
                .field,
            "roles[1].group"
        );
    }

    #[test]
    fn changes_follow_the_provider_and_leave_manual_memberships() {
        use MembershipSource::*;
        let current: BTreeMap<String, (Role, MembershipSource)> = [
            ("net".to_string(), (Role::Viewer, Provider)),
            ("web".to_string(), (Role::Admin, Manual)),
            ("old".to_string(), (Role::Operator, Provider)),
            ("ops".to_string(), (Role::Viewer, Manual)),
        ]
        .into();
        let granted: BTreeMap<String, Granted> = [
            ("net", Role::Operator),
            ("web", Role::Viewer),
            ("new", Role::Admin),
        ]
        .into_iter()
        .map(|(o, role)| {
            (
                o.to_string(),
                Granted {
                    role,
                    because: "rule".into(),
                },
            )
        })
        .collect();
        let changes = membership_changes(&current, &granted);
        assert_eq!(
            changes,
            [
                MembershipChange::Change {
                    org: "net".into(),
                    from: Role::Viewer,
                    to: Role::Operator,
                    because: "rule".into()
                },
                MembershipChange::Add {
                    org: "new".into(),
                    role: Role::Admin,
                    because: "rule".into()
                },
                MembershipChange::Remove {
                    org: "old".into(),
                    role: Role::Operator
                },
            ]
        );
        // Nothing to change the second time.
        let mut after = current.clone();
        after.remove("old");
        after.insert("net".into(), (Role::Operator, Provider));
        after.insert("new".into(), (Role::Admin, Provider));
        assert!(membership_changes(&after, &granted).is_empty());
    }

    #[test]
    fn a_first_sign_in_proposes_a_slug() {
        assert_eq!(proposed_user_id("Alice.Smith@example.com"), "alice-smith");
        assert_eq!(proposed_user_id("bob"), "bob");
        assert_eq!(proposed_user_id("Zoë_O'Neil"), "zo-o-neil");
        assert_eq!(proposed_user_id("@@@"), "user");
        assert_eq!(proposed_user_id("x"), "user");
        let long = proposed_user_id(&"a".repeat(200));
        assert!(long.len() <= Slug::MAX_LEN - 4);
        Slug::parse("id", &long).unwrap();
        Slug::parse("id", &format!("{long}-99")).unwrap();
    }
}
