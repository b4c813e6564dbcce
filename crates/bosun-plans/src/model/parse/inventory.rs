//! Stage 3 for inventories: raw structures become a validated [`Inventory`], hosts in
//! file order with the defaults filled in and each `proxy_jump` resolved to its bastion.
//!
//! `proxy_jump` names another host of the same inventory, which may have a `proxy_jump`
//! of its own (a chain of at most [`MAX_JUMPS`] bastions). A name that is no host, a
//! bastion with `connection: local`, a `local` host with `proxy_jump`, a host jumping
//! through itself and a chain that comes back to a host it passed are refused at the
//! `proxy_jump` that is wrong (`defaults.proxy_jump` when the host inherited it).
//! `defaults.proxy_jump` applies to every `ssh` host but the bastion it names; `none`
//! (as in OpenSSH) connects a host directly whatever the default says.
//!
//! The resolution is public ([`resolve_jumps`], [`JumpError`]): the server reads an
//! imported file with its bastions left unresolved ([`UnresolvedInventory`]), since they
//! may be hosts it already keeps, and resolves them over the org's hosts, and its stored
//! hosts' chains, with the same rules.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use super::index::{join_key, Index};
use super::raw::{RawEnvironment, RawInventory};
use crate::model::{ConnectionKind, Environment, Host, Inventory, ModelError};

/// The most bastions a host may be reached through, one after another.
pub const MAX_JUMPS: usize = 8;

/// The `proxy_jump` value that means "connect directly" (as OpenSSH's `ProxyJump none`).
const NO_JUMP: &str = "none";

/// A host's bastion as a file names it: the bastion's name, and the path of the key
/// that named it (`hosts.web-1.proxy_jump`, or `defaults.proxy_jump` when the host
/// inherited it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Jump {
    pub bastion: String,
    pub written_at: String,
}

/// An inventory read whole but for its bastions: every host's `proxy_jump` is `None`,
/// and [`UnresolvedInventory::jumps`] says, host by host, which bastion the file names.
/// For an inventory whose bastions may be hosts kept elsewhere (the server's import:
/// the org's stored hosts), resolved with [`resolve_jumps`] once they are added.
#[derive(Debug, Clone, PartialEq)]
pub struct UnresolvedInventory {
    pub inventory: Inventory,
    /// One per host of `inventory`, in its order.
    pub jumps: Vec<Option<Jump>>,
}

/// An inventory's raw structure as the model; `expand`: `~` paths become this machine's
/// home folder.
pub(super) fn validate(
    ix: &Index,
    raw: RawInventory,
    expand: bool,
) -> Result<Inventory, ModelError> {
    let UnresolvedInventory { inventory, jumps } = validate_unresolved(ix, raw, expand)?;
    let names: Vec<Option<String>> = jumps
        .iter()
        .map(|j| j.as_ref().map(|j| j.bastion.clone()))
        .collect();
    let path_of = |i: usize| jumps[i].as_ref().map_or("", |j| j.written_at.as_str());
    let hosts = resolve_jumps(inventory.hosts, &names, |i, why| {
        let hint = match why {
            JumpError::Cycle { .. } if path_of(i) == "defaults.proxy_jump" => {
                " (write `proxy_jump: none` on a host that is reached directly)"
            }
            _ => "",
        };
        ix.err_value(path_of(i), format!("{why}{hint}"))
    })?;
    Ok(Inventory {
        environments: inventory.environments,
        hosts,
    })
}

/// [`validate`] but for the bastions, which it leaves to the caller.
pub(super) fn validate_unresolved(
    ix: &Index,
    raw: RawInventory,
    expand: bool,
) -> Result<UnresolvedInventory, ModelError> {
    let expand_tilde = |p: &str| {
        if expand {
            expand_tilde(p)
        } else {
            PathBuf::from(p)
        }
    };
    let mut environments = BTreeMap::new();
    for (k, e) in raw.environments.unwrap_or_default() {
        if k.trim().is_empty() {
            return Err(ix.err_key(&join_key("environments", &k), "empty environment name"));
        }
        let e = e.unwrap_or(RawEnvironment {
            vars: None,
            requires_approval: None,
            protected: None,
        });
        environments.insert(
            k,
            Environment {
                vars: e.vars.unwrap_or_default(),
                requires_approval: e.requires_approval.unwrap_or(false),
                protected: e.protected.unwrap_or(false),
            },
        );
    }
    let defaults = raw.defaults.unwrap_or_default();
    let default_port = match defaults.port {
        None => 22,
        Some(p) => port(ix, "defaults.port", p)?,
    };
    let default_connection = match &defaults.connection {
        None => ConnectionKind::Ssh,
        Some(c) => connection(ix, "defaults.connection", c)?,
    };
    let default_jump = match defaults.proxy_jump.as_deref().map(str::trim) {
        Some("") => return Err(ix.err_value("defaults.proxy_jump", "`proxy_jump` is empty")),
        Some(NO_JUMP) | None => None,
        Some(j) => Some(j.to_string()),
    };
    let mut hosts = Vec::new();
    // Per host: the bastion's name and the path of the key that named it.
    let mut jumps: Vec<Option<Jump>> = Vec::new();
    for (name, h) in raw.hosts.map(|o| o.0).unwrap_or_default() {
        let hp = join_key("hosts", &name);
        if name.trim().is_empty() {
            return Err(ix.err_key(&hp, "empty host name"));
        }
        let h = h.unwrap_or_default();
        let address = match h.address {
            Some(a) if a.trim().is_empty() => {
                return Err(ix.err_value(&join_key(&hp, "address"), "`address` is empty"))
            }
            Some(a) => a,
            None => name.clone(),
        };
        let port = match h.port {
            Some(p) => port(ix, &join_key(&hp, "port"), p)?,
            None => default_port,
        };
        let connection = match &h.connection {
            Some(c) => connection(ix, &join_key(&hp, "connection"), c)?,
            None => default_connection,
        };
        if let Some(env) = &h.environment {
            if !environments.contains_key(env) {
                let known: Vec<&str> = environments.keys().map(String::as_str).collect();
                return Err(ix.err_value(
                    &join_key(&hp, "environment"),
                    format!(
                        "unknown environment `{env}` (defined: {})",
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    ),
                ));
            }
        }
        let host_key =
            match h.host_key {
                Some(k) if k.split_whitespace().count() < 2 => return Err(ix.err_value(
                    &join_key(&hp, "host_key"),
                    "`host_key` is a public key line: `<type> <base64>`, e.g. `ssh-ed25519 AAAA…`",
                )),
                k => k.map(|k| k.trim().to_string()),
            };
        let jump_path = join_key(&hp, "proxy_jump");
        let jump = match h.proxy_jump.as_deref().map(str::trim) {
            Some("") => return Err(ix.err_value(&jump_path, "`proxy_jump` is empty")),
            Some(NO_JUMP) => None,
            Some(_) if connection == ConnectionKind::Local => {
                return Err(ix.err_value(
                    &jump_path,
                    "a host with `connection: local` is this machine: it has no `proxy_jump`",
                ))
            }
            Some(j) if j == name => {
                return Err(ix.err_value(
                    &jump_path,
                    format!("host `{name}` cannot jump through itself"),
                ))
            }
            Some(j) => Some(Jump {
                bastion: j.to_string(),
                written_at: jump_path,
            }),
            // The default bastion is reached directly, and so are local hosts.
            None => default_jump
                .as_ref()
                .filter(|j| **j != name && connection == ConnectionKind::Ssh)
                .map(|j| Jump {
                    bastion: j.clone(),
                    written_at: "defaults.proxy_jump".to_string(),
                }),
        };
        jumps.push(jump);
        hosts.push(Host {
            address,
            port,
            user: h.user.or_else(|| defaults.user.clone()),
            connection,
            labels: h.labels.unwrap_or_default(),
            vars: h.vars.unwrap_or_default(),
            environment: h.environment,
            identity_file: h
                .identity_file
                .or_else(|| defaults.identity_file.clone())
                .map(|p| expand_tilde(&p)),
            known_hosts: h
                .known_hosts
                .or_else(|| defaults.known_hosts.clone())
                .map(|p| expand_tilde(&p)),
            host_key,
            proxy_jump: None,
            name,
        });
    }
    Ok(UnresolvedInventory {
        inventory: Inventory {
            environments,
            hosts,
        },
        jumps,
    })
}

/// Why a host's `proxy_jump` cannot be resolved ([`resolve_jumps`]); its `Display` is
/// the message an inventory file's error gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JumpError {
    /// The bastion is no host of the inventory.
    Unknown { bastion: String },
    /// The bastion has `connection: local`.
    LocalBastion { bastion: String },
    /// The chain comes back to a host it passed: the hosts around the cycle, in chain
    /// order, the first repeated at the end.
    Cycle { hosts: Vec<String> },
    /// The host is reached through more than [`MAX_JUMPS`] bastions.
    TooLong { host: String },
}

impl std::fmt::Display for JumpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JumpError::Unknown { bastion } => write!(
                f,
                "`proxy_jump` names no host of this inventory: `{bastion}`"
            ),
            JumpError::LocalBastion { bastion } => write!(
                f,
                "`proxy_jump` names `{bastion}`, which has `connection: local`: a bastion is an ssh host"
            ),
            JumpError::Cycle { hosts } => write!(
                f,
                "`proxy_jump` goes round in a cycle: {}",
                hosts.join(" → ")
            ),
            JumpError::TooLong { host } => write!(
                f,
                "host `{host}` is reached through more than {MAX_JUMPS} bastions (a `proxy_jump` chain has at most {MAX_JUMPS})"
            ),
        }
    }
}

/// Each host's `proxy_jump` (`jumps[i]`: the name of host `i`'s bastion) resolved to
/// that host, chains included: every [`Host::proxy_jump`] set from `jumps` (whatever it
/// was). Unknown names, local bastions, cycles and chains longer than [`MAX_JUMPS`] are
/// refused with `err(i, why)`, `i` the host whose `proxy_jump` is wrong (for a cycle, the
/// one whose bastion closes it; for a chain too long, the host at its start). Iterative:
/// a long chain cannot overflow the stack.
///
/// What a file's parse runs once its hosts are read; the server runs it over an org's
/// stored hosts, where no file says where an error is.
pub fn resolve_jumps<E>(
    hosts: Vec<Host>,
    jumps: &[Option<String>],
    mut err: impl FnMut(usize, JumpError) -> E,
) -> Result<Vec<Host>, E> {
    assert_eq!(hosts.len(), jumps.len(), "one jump per host");
    if jumps.iter().all(Option::is_none) {
        return Ok(hosts
            .into_iter()
            .map(|mut h| {
                h.proxy_jump = None;
                h
            })
            .collect());
    }
    let by_name: HashMap<&str, usize> = hosts
        .iter()
        .enumerate()
        .map(|(i, h)| (h.name.as_str(), i))
        .collect();
    // Per host: the index of its bastion.
    let mut next: Vec<Option<usize>> = Vec::with_capacity(hosts.len());
    for (i, jump) in jumps.iter().enumerate() {
        let Some(bastion) = jump else {
            next.push(None);
            continue;
        };
        let Some(&j) = by_name.get(bastion.as_str()) else {
            return Err(err(
                i,
                JumpError::Unknown {
                    bastion: bastion.clone(),
                },
            ));
        };
        if hosts[j].connection == ConnectionKind::Local {
            return Err(err(
                i,
                JumpError::LocalBastion {
                    bastion: bastion.clone(),
                },
            ));
        }
        next.push(Some(j));
    }
    // Per host: its bastion chain as one Arc'd host, and how many bastions that chain has.
    let mut built: Vec<Option<Arc<Host>>> = vec![None; hosts.len()];
    let mut depth: Vec<usize> = vec![0; hosts.len()];
    for start in 0..hosts.len() {
        if built[start].is_some() {
            continue;
        }
        let too_long = |hosts: &[Host]| JumpError::TooLong {
            host: hosts[start].name.clone(),
        };
        // From this host along its bastions, up to one already built (or the end).
        let mut chain = vec![start];
        let mut at = start;
        let mut below = 0;
        while let Some(j) = next[at] {
            if built[j].is_some() {
                below = depth[j] + 1;
                break;
            }
            if let Some(k) = chain.iter().position(|&c| c == j) {
                let names: Vec<String> = chain[k..]
                    .iter()
                    .chain([&j])
                    .map(|&c| hosts[c].name.clone())
                    .collect();
                return Err(err(at, JumpError::Cycle { hosts: names }));
            }
            chain.push(j);
            at = j;
            if chain.len() > MAX_JUMPS + 1 {
                return Err(err(start, too_long(&hosts)));
            }
        }
        if below + chain.len() - 1 > MAX_JUMPS {
            return Err(err(start, too_long(&hosts)));
        }
        for (k, &i) in chain.iter().enumerate().rev() {
            depth[i] = below + (chain.len() - 1 - k);
            let mut host = hosts[i].clone();
            host.proxy_jump = next[i].and_then(|j| built[j].clone());
            built[i] = Some(Arc::new(host));
        }
    }
    Ok(built
        .into_iter()
        .zip(hosts)
        .map(|(b, h)| b.map_or(h, Arc::unwrap_or_clone))
        .collect())
}

fn port(ix: &Index, path: &str, p: i64) -> Result<u16, ModelError> {
    u16::try_from(p)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| ix.err_value(path, format!("port {p} is out of range (1-65535)")))
}

fn connection(ix: &Index, path: &str, c: &str) -> Result<ConnectionKind, ModelError> {
    match c {
        "ssh" => Ok(ConnectionKind::Ssh),
        "local" => Ok(ConnectionKind::Local),
        other => Err(ix.err_value(
            path,
            format!("connection must be `ssh` or `local`, not `{other}`"),
        )),
    }
}

/// `~` and `~/…` are the home folder (`$HOME`); other paths are kept as written.
fn expand_tilde(p: &str) -> PathBuf {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty());
    match (p, home) {
        ("~", Some(h)) => PathBuf::from(h),
        (p, Some(h)) if p.starts_with("~/") => PathBuf::from(h).join(&p[2..]),
        (p, _) => PathBuf::from(p),
    }
}
