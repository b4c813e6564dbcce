//! The egress sandbox: what an engine of a restricted runner may reach over the network.
//!
//! Each phase's engine commands run in a network namespace of their own, whose only
//! interfaces are its loopback. On it listen two things the runner serves from outside
//! the namespace: the **egress proxy** (`proxy`), given to the engine as `HTTPS_PROXY`
//! and `HTTP_PROXY`, which lets through connections to public addresses and refuses the
//! rest (`addr`), checked on the address it resolved and then connects to; and, when the
//! Bosun server's URL is on loopback, a **forward** of that port to the server, so the
//! engine's state backend reaches Bosun as it would unsandboxed. Anything that ignores the
//! proxy has no route at all (`netns`).
//!
//! Creating the namespace takes `CAP_SYS_ADMIN`. A runner that must sandbox and cannot
//! refuses to start (`probe`); `--egress-unrestricted` opts out, visibly.

mod addr;
mod netns;
mod proxy;
#[cfg(test)]
mod tests;

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

pub use addr::{not_public, Cidr};
pub(crate) use netns::{host_port, Sandbox, ServerUrls};

/// Whether a runner's engines are sandboxed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum EgressMode {
    /// Engines run in the egress sandbox: public internet yes, private networks no.
    Restricted(EgressPolicy),
    /// No sandbox: the engine has the runner machine's network. A self-hosted runner's
    /// default (reaching the operator's network is its point).
    #[default]
    Unrestricted,
    /// No sandbox on a runner that should have one (the server's hosted runners): the
    /// operator passed `--egress-unrestricted`. Said at every start and shown on the
    /// runner.
    OptedOut,
}

impl EgressMode {
    /// How the runner registers (`RunnerEgress`).
    pub fn registered(&self) -> bosun_api::RunnerEgress {
        match self {
            EgressMode::Restricted(_) => bosun_api::RunnerEgress::Restricted,
            EgressMode::Unrestricted => bosun_api::RunnerEgress::Unrestricted,
            EgressMode::OptedOut => bosun_api::RunnerEgress::OptedOut,
        }
    }
}

/// What an operator lets a restricted engine reach besides the public internet.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EgressPolicy {
    pub allow: Vec<AllowRule>,
}

/// One `--egress-allow` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowRule {
    /// `host:port` (a name or an address, `[v6]:port`): that destination, whatever it
    /// resolves to.
    Endpoint { host: String, port: u16 },
    /// `addr/prefix` or a bare address: any port of those addresses.
    Range(Cidr),
}

impl std::str::FromStr for AllowRule {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        let raw = raw.trim();
        if raw.is_empty() || raw.len() > 300 {
            return Err("an egress allow entry is host:port, an address, or addr/prefix".into());
        }
        if raw.contains('/') || raw.parse::<IpAddr>().is_ok() {
            return Cidr::parse(raw).map(AllowRule::Range);
        }
        if let Ok(addr) = raw.parse::<SocketAddr>() {
            return Ok(AllowRule::Endpoint {
                host: addr.ip().to_string(),
                port: addr.port(),
            });
        }
        let Some((host, port)) = raw.rsplit_once(':') else {
            return Err(format!(
                "{raw:?} names no port: an egress allow entry is host:port, an address, or \
                 addr/prefix"
            ));
        };
        let port: u16 = port
            .parse()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("{raw:?}: the port must be 1 to 65535"))?;
        let valid = !host.is_empty()
            && host.len() <= 253
            && host.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
        if !valid {
            return Err(format!("{raw:?}: {host:?} is not a host name"));
        }
        Ok(AllowRule::Endpoint {
            host: host.to_ascii_lowercase(),
            port,
        })
    }
}

impl fmt::Display for AllowRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllowRule::Endpoint { host, port } if host.contains(':') => {
                write!(f, "[{host}]:{port}")
            }
            AllowRule::Endpoint { host, port } => write!(f, "{host}:{port}"),
            AllowRule::Range(cidr) => cidr.fmt(f),
        }
    }
}

/// Why a runner that must sandbox its engines cannot.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot sandbox engines: creating a network namespace failed ({0}); the egress sandbox \
     needs CAP_SYS_ADMIN (run as root or grant the capability), or pass \
     --egress-unrestricted to run engines with this machine's whole network"
)]
pub struct SandboxUnavailable(pub std::io::Error);

/// Whether this process can make the sandbox: creates a namespace and drops it.
pub fn probe() -> Result<(), SandboxUnavailable> {
    netns::Namespace::create(&[])
        .map(drop)
        .map_err(SandboxUnavailable)
}

/// How many connections a phase's engine tried that the policy refused.
#[derive(Debug, Clone, Default)]
pub(crate) struct Refusals(Arc<AtomicU32>);

impl Refusals {
    pub(crate) fn add(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod rule_tests {
    use super::*;

    #[test]
    fn allow_entries_parse_and_bad_ones_say_why() {
        let rule = |s: &str| s.parse::<AllowRule>();
        assert_eq!(
            rule("Mirror.Example.com:443").unwrap(),
            AllowRule::Endpoint {
                host: "mirror.example.com".into(),
                port: 443
            }
        );
        assert_eq!(
            rule("10.1.2.3:8080").unwrap(),
            AllowRule::Endpoint {
                host: "10.1.2.3".into(),
                port: 8080
            }
        );
        assert_eq!(
            rule("[fd00::1]:443").unwrap(),
            AllowRule::Endpoint {
                host: "fd00::1".into(),
                port: 443
            }
        );
        assert_eq!(rule("[fd00::1]:443").unwrap().to_string(), "[fd00::1]:443");
        assert_eq!(rule("10.0.0.0/8").unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(rule("127.0.0.1").unwrap().to_string(), "127.0.0.1/32");
        for (bad, says) in [
            ("mirror.example.com", "names no port"),
            ("mirror:0", "port"),
            ("mirror:99999", "port"),
            ("bad_host!:80", "not a host name"),
            ("10.0.0.1/8", "first address"),
            ("", "host:port"),
        ] {
            let err = rule(bad).unwrap_err();
            assert!(err.contains(says), "{bad:?}: {err}");
        }
    }
}
