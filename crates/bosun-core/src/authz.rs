//! Who may call what: the pure decision behind the server's one authorization layer.
//!
//! Every API route declares an [`Access`] policy; the server authenticates the caller into
//! a [`Principal`] and asks [`authorize`]. A refusal always says why.

use std::collections::BTreeMap;

use crate::role::Role;
use crate::token::TokenKind;

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The id of the token presented (never the secret).
    pub token_id: String,
    pub kind: PrincipalKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrincipalKind {
    /// A user acting through a personal token, with their role in each org.
    User {
        user: String,
        server_admin: bool,
        roles: BTreeMap<String, Role>,
    },
    /// A runner pool of one org.
    /// `org: None` is the server's own hosted pool, which serves every org.
    Pool { org: Option<String>, pool: String },
    /// One Run, scoped to its stack, plus the upstream stacks whose state it may read.
    Run {
        org: String,
        run: String,
        stack: String,
        read_stacks: Vec<String>,
    },
}

impl Principal {
    pub fn token_kind(&self) -> TokenKind {
        match self.kind {
            PrincipalKind::User { .. } => TokenKind::Personal,
            PrincipalKind::Pool { .. } => TokenKind::Pool,
            PrincipalKind::Run { .. } => TokenKind::Run,
        }
    }

    /// The user behind the token, for personal tokens.
    pub fn user(&self) -> Option<&str> {
        match &self.kind {
            PrincipalKind::User { user, .. } => Some(user),
            _ => None,
        }
    }

    /// A short description for audit records: `user:alice`, `pool:acme/edge`, `run:…`.
    pub fn actor(&self) -> String {
        match &self.kind {
            PrincipalKind::User { user, .. } => format!("user:{user}"),
            PrincipalKind::Pool { org, pool } => {
                format!("pool:{}/{pool}", org.as_deref().unwrap_or("*"))
            }
            PrincipalKind::Run { run, .. } => format!("run:{run}"),
        }
    }

    pub fn role_in(&self, org: &str) -> Option<Role> {
        match &self.kind {
            PrincipalKind::User { roles, .. } => roles.get(org).copied(),
            _ => None,
        }
    }
}

/// The policy a route declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Any user with a personal token (e.g. "who am I", "my tokens").
    User,
    /// A user with the server-admin flag (creating orgs and users).
    ServerAdmin,
    /// A member of the org in the path with at least this role.
    Org(Role),
    /// The runner protocol: runner-pool tokens only.
    Runner,
    /// A stack's state (`{org}` and `{stack}` in the path), decided by
    /// [`crate::state::authorize_state`], which also admits run tokens.
    State(crate::state::StateAccess),
}

/// Why a call was refused. `Unauthenticated` maps to 401, the rest to 403.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// A token of the wrong kind; `needs` names the kind(s) the endpoint takes.
    WrongTokenKind {
        kind: TokenKind,
        needs: &'static str,
    },
    NotServerAdmin,
    NotMember {
        org: String,
    },
    RoleTooLow {
        org: String,
        has: Role,
        needs: Role,
    },
    /// A scoped token (a run's) reaching outside its scope.
    OutOfScope {
        reason: String,
    },
}

impl std::fmt::Display for Denial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Denial::WrongTokenKind { kind, needs } => write!(
                f,
                "a {kind} token cannot call this endpoint; it needs {needs}"
            ),
            Denial::NotServerAdmin => write!(f, "this action needs a server administrator"),
            Denial::NotMember { org } => write!(f, "you are not a member of org {org:?}"),
            Denial::RoleTooLow { org, has, needs } => write!(
                f,
                "your role in org {org:?} is {has}; this action needs {needs} or above"
            ),
            Denial::OutOfScope { reason } => f.write_str(reason),
        }
    }
}

/// What the runner protocol takes, as refusals name it.
pub const NEEDS_POOL: &str = "a runner-pool token (bosun token create --pool)";
/// What the user endpoints take, as refusals name it.
pub const NEEDS_PERSONAL: &str = "a personal token (bosun token create)";

/// Decides whether `who` may call a route with policy `access`; `org` is the org named
/// in the path, if any.
pub fn authorize(who: &Principal, access: Access, org: Option<&str>) -> Result<(), Denial> {
    if access == Access::Runner {
        return match who.kind {
            PrincipalKind::Pool { .. } => Ok(()),
            _ => Err(Denial::WrongTokenKind {
                kind: who.token_kind(),
                needs: NEEDS_POOL,
            }),
        };
    }
    if let Access::State(_) = access {
        // Needs the stack and the operation: the guard calls `authorize_state`.
        return Ok(());
    }
    let PrincipalKind::User {
        server_admin,
        roles,
        ..
    } = &who.kind
    else {
        // Pool and run tokens reach only the endpoints built for them (runner leasing,
        // state backend), which carry their own policies.
        return Err(Denial::WrongTokenKind {
            kind: who.token_kind(),
            needs: NEEDS_PERSONAL,
        });
    };
    match access {
        Access::User => Ok(()),
        Access::ServerAdmin if *server_admin => Ok(()),
        Access::ServerAdmin => Err(Denial::NotServerAdmin),
        Access::State(_) | Access::Runner => Ok(()),
        Access::Org(needs) => {
            let org = org.unwrap_or_default();
            match roles.get(org) {
                None => Err(Denial::NotMember {
                    org: org.to_string(),
                }),
                Some(has) if *has >= needs => Ok(()),
                Some(has) => Err(Denial::RoleTooLow {
                    org: org.to_string(),
                    has: *has,
                    needs,
                }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(role: Option<Role>, server_admin: bool) -> Principal {
        let mut roles = BTreeMap::new();
        if let Some(r) = role {
            roles.insert("acme".to_string(), r);
        }
        Principal {
            token_id: "t".into(),
            kind: PrincipalKind::User {
                user: "u".into(),
                server_admin,
                roles,
            },
        }
    }

    #[test]
    fn exhaustive_role_matrix() {
        for has in [
            None,
            Some(Role::Viewer),
            Some(Role::Operator),
            Some(Role::Admin),
        ] {
            for needs in Role::ALL {
                let got = authorize(&user(has, false), Access::Org(needs), Some("acme"));
                let expect = has.is_some_and(|h| h >= needs);
                assert_eq!(got.is_ok(), expect, "has {has:?} needs {needs:?}");
                // Membership in one org never grants anything in another.
                assert!(authorize(&user(has, true), Access::Org(needs), Some("other")).is_err());
            }
        }
    }

    #[test]
    fn machine_tokens_refused_on_user_endpoints() {
        let pool = Principal {
            token_id: "t".into(),
            kind: PrincipalKind::Pool {
                org: Some("acme".into()),
                pool: "edge".into(),
            },
        };
        let run = Principal {
            token_id: "t".into(),
            kind: PrincipalKind::Run {
                org: "acme".into(),
                run: "r".into(),
                stack: "s".into(),
                read_stacks: vec![],
            },
        };
        for p in [pool, run] {
            for a in [Access::User, Access::ServerAdmin, Access::Org(Role::Viewer)] {
                assert!(matches!(
                    authorize(&p, a, Some("acme")),
                    Err(Denial::WrongTokenKind { .. })
                ));
            }
        }
    }

    #[test]
    fn wrong_token_kind_names_the_kind_needed() {
        let run = Principal {
            token_id: "t".into(),
            kind: PrincipalKind::Run {
                org: "acme".into(),
                run: "r".into(),
                stack: "s".into(),
                read_stacks: vec![],
            },
        };
        let runner = authorize(&run, Access::Runner, None)
            .unwrap_err()
            .to_string();
        assert!(runner.starts_with("a run token cannot"), "{runner}");
        assert!(runner.contains("runner-pool token"), "{runner}");
        let endpoint = authorize(&run, Access::User, None).unwrap_err().to_string();
        assert!(endpoint.contains("needs a personal token"), "{endpoint}");
        let person = authorize(&user(Some(Role::Admin), true), Access::Runner, None)
            .unwrap_err()
            .to_string();
        assert!(person.contains("a personal token cannot"), "{person}");
        assert!(person.contains("runner-pool token"), "{person}");
    }

    #[test]
    fn server_admin_flag() {
        assert!(authorize(&user(None, true), Access::ServerAdmin, None).is_ok());
        assert_eq!(
            authorize(&user(Some(Role::Admin), false), Access::ServerAdmin, None),
            Err(Denial::NotServerAdmin)
        );
    }
}
