//! Stage 3 for inventories: raw structures become a validated [`Inventory`], hosts in
//! file order with the defaults filled in.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::index::{join_key, Index};
use super::raw::{RawEnvironment, RawInventory};
use crate::model::{ConnectionKind, Environment, Host, Inventory, ModelError};

/// An inventory's raw structure as the model; `expand`: `~` paths become this machine's
/// home folder.
pub(super) fn validate(
    ix: &Index,
    raw: RawInventory,
    expand: bool,
) -> Result<Inventory, ModelError> {
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
    let mut hosts = Vec::new();
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
            name,
        });
    }
    Ok(Inventory {
        environments,
        hosts,
    })
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
