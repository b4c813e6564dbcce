//! The integrations that assemble a run's environment — run identity, cloud credentials,
//! secret backends, variables — each declaring what it needs, put in an order where every
//! integration comes after what it needs. The order is a pure function of the stack and
//! the phase, so the same stack always resolves the same way, and the first failure
//! names the integration that failed.

use std::fmt;

use crate::run::Phase;
use crate::stack::StackSpec;

/// What an integration provides, which others may need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// The run's OIDC identity (the ID-token request token).
    Identity,
    /// Cloud credentials (AWS web identity), which use the identity.
    CloudCredentials,
    /// Secret backends (the built-in store), which may use cloud credentials.
    SecretBackend,
    /// The engine's variables, plain or secret references.
    Variables,
}

/// One integration of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Integration {
    /// How people read it in logs and failures: `identity`, `aws (plan role)`, …
    pub name: String,
    pub kind: Kind,
    /// The kinds it needs resolved first.
    pub needs: Vec<Kind>,
}

impl fmt::Display for Integration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// Integrations whose needs cannot all be met (a need nobody provides, or a cycle).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("integration {name} needs {need:?}, which nothing before it provides")]
pub struct Unresolvable {
    pub name: String,
    pub need: Kind,
}

/// The integrations of one phase of a run of `spec`, in resolution order.
pub fn for_phase(spec: &StackSpec, phase: Phase) -> Result<Vec<Integration>, Unresolvable> {
    let mut list = vec![Integration {
        name: "identity".into(),
        kind: Kind::Identity,
        needs: vec![],
    }];
    if spec.aws.is_some() {
        list.push(Integration {
            name: format!("aws ({phase} role)"),
            kind: Kind::CloudCredentials,
            needs: vec![Kind::Identity],
        });
    }
    let has_secrets = spec.variables.values().any(|v| v.starts_with("secret://"));
    if has_secrets {
        list.push(Integration {
            name: "secrets (built-in store)".into(),
            kind: Kind::SecretBackend,
            needs: vec![],
        });
    }
    list.push(Integration {
        name: "variables".into(),
        kind: Kind::Variables,
        needs: if has_secrets {
            vec![Kind::SecretBackend]
        } else {
            vec![]
        },
    });
    order(list)
}

/// Orders integrations so each comes after every integration of a kind it needs;
/// among those ready at once, by kind then name — so any input order gives one result.
pub fn order(mut pending: Vec<Integration>) -> Result<Vec<Integration>, Unresolvable> {
    pending.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    let mut done: Vec<Integration> = Vec::with_capacity(pending.len());
    while !pending.is_empty() {
        // A kind is available once no pending integration still provides it.
        let ready = pending.iter().position(|i| {
            i.needs.iter().all(|need| {
                done.iter().any(|d| d.kind == *need) && !pending.iter().any(|p| p.kind == *need)
            })
        });
        match ready {
            Some(at) => done.push(pending.remove(at)),
            None => {
                let stuck = &pending[0];
                let need = stuck
                    .needs
                    .iter()
                    .copied()
                    .find(|n| !done.iter().any(|d| d.kind == *n))
                    .or_else(|| stuck.needs.first().copied())
                    .unwrap_or(stuck.kind);
                return Err(Unresolvable {
                    name: stuck.name.clone(),
                    need,
                });
            }
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::{AwsInput, StackInput};
    use proptest::prelude::*;

    fn spec(aws: bool, secret: bool) -> StackSpec {
        let mut i = StackInput {
            id: "net".into(),
            repository: "github:acme/infra".into(),
            ..StackInput::default()
        };
        if aws {
            i.aws = Some(AwsInput {
                plan_role_arn: "arn:aws:iam::123456789012:role/p".into(),
                ..AwsInput::default()
            });
        }
        if secret {
            i.variables
                .insert("TF_VAR_db".into(), "secret://db/password".into());
        }
        StackSpec::from_input(i).unwrap()
    }

    fn names(list: &[Integration]) -> Vec<&str> {
        list.iter().map(|i| i.name.as_str()).collect()
    }

    #[test]
    fn identity_then_cloud_then_secrets_then_variables() {
        let all = for_phase(&spec(true, true), Phase::Apply).unwrap();
        assert_eq!(
            names(&all),
            [
                "identity",
                "aws (apply role)",
                "secrets (built-in store)",
                "variables"
            ]
        );
        let plain = for_phase(&spec(false, false), Phase::Plan).unwrap();
        assert_eq!(names(&plain), ["identity", "variables"]);
    }

    #[test]
    fn a_need_nobody_provides_is_an_error() {
        let e = order(vec![Integration {
            name: "vault".into(),
            kind: Kind::SecretBackend,
            needs: vec![Kind::CloudCredentials],
        }])
        .unwrap_err();
        assert_eq!(e.name, "vault");
        assert_eq!(e.need, Kind::CloudCredentials);
    }

    proptest! {
        /// Any input order gives the same order, and needs always come first.
        #[test]
        fn order_is_deterministic(perm in Just((0..4usize).collect::<Vec<_>>()).prop_shuffle()) {
            let base = for_phase(&spec(true, true), Phase::Plan).unwrap();
            let shuffled: Vec<Integration> = perm.iter().map(|&i| base[i].clone()).collect();
            let again = order(shuffled).unwrap();
            prop_assert_eq!(&again, &base);
            for (at, i) in again.iter().enumerate() {
                for need in &i.needs {
                    prop_assert!(again[..at].iter().any(|d| d.kind == *need));
                }
            }
        }
    }
}
