//! The staged connection check (`bosun host check`): resolve, connect, host key,
//! authenticate, sudo — each ok, warning or failed with a reason, and every stage after a
//! failure skipped. The stages are the very steps [`super::ssh::SshConnection::connect`]
//! takes, run one at a time so the report says which one broke.
//!
//! - **resolve**: the address (DNS, or a literal) to socket addresses.
//! - **connect**: a TCP connection and an SSH handshake (a host that accepts TCP but
//!   does not speak SSH fails here).
//! - **host key**: the server's key against the pinned `host_key` or `known_hosts`.
//! - **authenticate**: the keys of the connection's order (identity file, agent,
//!   `~/.ssh/id_*`) as the host's user.
//! - **sudo**: `sudo -n true`. A sudo that wants a password is a **warning** — a run
//!   cannot answer prompts — as is a missing sudo or one that refuses the user: only
//!   steps with `sudo: true` need it.
//!
//! A host behind bastions (`proxy_jump`) gets each bastion's resolve, connect, host key
//! and authenticate stages first (named after the bastion: `bastion-1: connect`), the
//! first one connected to first; its own resolve is left to the bastion before it (which
//! resolves the address when it opens the channel), its connect is that channel and the
//! handshake over it. The first stage that fails says which hop broke.
//!
//! A `local` host has nothing to resolve, connect to or log in to (those stages are ok,
//! "local"); its sudo is checked on this machine.

use std::sync::Arc;
use std::time::{Duration, Instant};

use russh::client::Handle;

use crate::model::{ConnectionKind, Host};

use super::local::LocalConnection;
use super::ssh::{self, release, ClientHandler, Hop, SshConnection};
use super::{CommandSpec, ConnError, ConnectOptions, Connection, Output, RunRequest};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageStatus {
    Ok,
    Warning,
    Failed,
    /// Not reached (an earlier stage failed).
    Skipped,
}

/// One stage's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    /// The bastion this stage checked, for a host behind one (`None`: the host itself).
    pub bastion: Option<String>,
    /// `resolve`, `connect`, `host key`, `authenticate`, `sudo`.
    pub name: &'static str,
    pub status: StageStatus,
    pub detail: String,
}

impl Stage {
    /// `resolve`, or `BASTION: resolve` for a bastion's stage.
    pub fn label(&self) -> String {
        match &self.bastion {
            Some(b) => format!("{b}: {}", self.name),
            None => self.name.to_string(),
        }
    }
}

/// The stages, in order.
pub const STAGES: [&str; 5] = ["resolve", "connect", "host key", "authenticate", "sudo"];

/// A bastion's stages (it runs no command, so no sudo), before its host's.
pub const BASTION_STAGES: [&str; 4] = ["resolve", "connect", "host key", "authenticate"];

/// The warning for a sudo that asks for a password.
pub const SUDO_PASSWORD_WARNING: &str = "sudo asks for a password: a run cannot answer prompts; grant passwordless sudo for the commands this host is managed with";

/// Checks a host stage by stage: for a host behind bastions, each bastion's stages
/// first (the first one connected to first), then the host's own.
pub async fn check(host: &Host, options: &ConnectOptions) -> Vec<Stage> {
    match host.connection {
        ConnectionKind::Local => check_local(options).await,
        ConnectionKind::Ssh => check_ssh(host, options).await,
    }
}

/// The first failed stage, if any: the bastion it checked (`None`: the host itself) and
/// its name — which hop broke.
pub fn failed_stage(stages: &[Stage]) -> Option<&Stage> {
    stages.iter().find(|s| s.status == StageStatus::Failed)
}

/// Collects stages in the order planned; after a failure the remaining ones are skipped.
struct Report {
    /// Every stage to check: the bastion it belongs to (if any) and its name.
    planned: Vec<(Option<String>, &'static str)>,
    stages: Vec<Stage>,
}

impl Report {
    /// The stages of `host` behind `chain` (its bastions, the first connected to first).
    fn new(chain: &[&Host]) -> Report {
        let mut planned = Vec::new();
        for bastion in chain {
            for name in BASTION_STAGES {
                planned.push((Some(bastion.name.clone()), name));
            }
        }
        planned.extend(STAGES.iter().map(|name| (None, *name)));
        Report {
            planned,
            stages: Vec::new(),
        }
    }

    fn ok(&mut self, name: &'static str, detail: impl Into<String>) {
        self.push(name, StageStatus::Ok, detail.into());
    }

    /// Records the next planned stage, which is `name`.
    fn push(&mut self, name: &'static str, status: StageStatus, detail: String) {
        let bastion = match self.planned.get(self.stages.len()) {
            Some((bastion, planned)) => {
                debug_assert_eq!(*planned, name, "stages out of order");
                bastion.clone()
            }
            None => None,
        };
        self.stages.push(Stage {
            bastion,
            name,
            status,
            detail,
        });
    }

    /// Records `name` as failed and every later stage as skipped.
    fn fail(&mut self, name: &'static str, detail: impl Into<String>) {
        self.push(name, StageStatus::Failed, detail.into());
        let what = self.stages.last().map(Stage::label).unwrap_or_default();
        let from = self.stages.len();
        for (bastion, later) in &self.planned[from..] {
            self.stages.push(Stage {
                bastion: bastion.clone(),
                name: later,
                status: StageStatus::Skipped,
                detail: format!("not checked: {what} failed"),
            });
        }
    }
}

async fn check_ssh(host: &Host, options: &ConnectOptions) -> Vec<Stage> {
    let limit = options.connect_timeout;
    let chain = host.jump_chain();
    let mut report = Report::new(&chain);
    let mut via: Option<Arc<Hop>> = None;
    for bastion in chain {
        match reach_stages(&mut report, bastion, via.as_deref(), limit).await {
            Some(handle) => via = Some(Arc::new(Hop::new(&bastion.name, handle, via.take()))),
            None => {
                if let Some(via) = via {
                    release(via).await;
                }
                return report.stages;
            }
        }
    }
    let Some(handle) = reach_stages(&mut report, host, via.as_deref(), limit).await else {
        if let Some(via) = via {
            release(via).await;
        }
        return report.stages;
    };

    let connection = SshConnection::from_handle(host, handle, limit).through(via);
    let outcome = connection.run(&sudo_probe(limit)).await;
    connection.close().await;
    match sudo_verdict(outcome, limit) {
        Ok((status, detail)) => report.push("sudo", status, detail),
        Err(detail) => report.fail("sudo", detail),
    }
    report.stages
}

/// The resolve, connect, host key and authenticate stages of `host` (directly, or through
/// `via`, its bastion): its session, or `None` once a stage failed (recorded).
async fn reach_stages(
    report: &mut Report,
    host: &Host,
    via: Option<&Hop>,
    limit: Duration,
) -> Option<Handle<ClientHandler>> {
    let started = Instant::now();
    let (handshake, at) = match via {
        None => {
            let addrs = match ssh::resolve(host, limit).await {
                Ok(addrs) => addrs,
                Err(e) => {
                    report.fail("resolve", e.to_string());
                    return None;
                }
            };
            let shown: Vec<String> = addrs.iter().take(3).map(|a| a.to_string()).collect();
            let more = if addrs.len() > 3 {
                format!(" and {} more", addrs.len() - 3)
            } else {
                String::new()
            };
            report.ok(
                "resolve",
                format!("{}{more} ({})", shown.join(", "), took(started)),
            );
            let started = Instant::now();
            let (stream, addr) = match ssh::tcp_connect(host, &addrs, limit).await {
                Ok(connected) => connected,
                Err(e) => {
                    report.fail("connect", e.to_string());
                    return None;
                }
            };
            (
                ssh::handshake(host, stream, limit).await,
                format!("SSH server at {addr} ({})", took(started)),
            )
        }
        Some(hop) => {
            let target = format!("{}:{}", ssh::host_address(host), ssh::host_port(host));
            report.ok(
                "resolve",
                format!("left to bastion {:?}: it connects to {target}", hop.name),
            );
            let started = Instant::now();
            let stream = match ssh::tunnel(hop, host, limit).await {
                Ok(stream) => stream,
                Err(e) => {
                    report.fail("connect", e.to_string());
                    return None;
                }
            };
            (
                ssh::handshake(host, stream, limit).await,
                format!(
                    "SSH server at {target} through bastion {:?} ({})",
                    hop.name,
                    took(started)
                ),
            )
        }
    };
    let (mut handle, trust) = match handshake {
        Ok(session) => session,
        Err(e @ ConnError::HostKey { .. }) => {
            report.ok("connect", at);
            report.fail("host key", e.to_string());
            return None;
        }
        Err(e) => {
            report.fail("connect", e.to_string());
            return None;
        }
    };
    report.ok("connect", at);
    report.ok("host key", trust);

    let started = Instant::now();
    match ssh::authenticate(host, &mut handle, limit).await {
        Ok(how) => report.ok("authenticate", format!("{how} ({})", took(started))),
        Err(e) => {
            report.fail("authenticate", e.to_string());
            return None;
        }
    }
    Some(handle)
}

async fn check_local(options: &ConnectOptions) -> Vec<Stage> {
    let mut report = Report::new(&[]);
    for name in ["resolve", "connect", "host key", "authenticate"] {
        report.ok(name, "local");
    }
    let limit = options.connect_timeout;
    let outcome = LocalConnection::new().run(&sudo_probe(limit)).await;
    match sudo_verdict(outcome, limit) {
        Ok((status, detail)) => report.push("sudo", status, detail),
        Err(detail) => report.fail("sudo", detail),
    }
    report.stages
}

/// `sudo -n true`, through a shell so a missing sudo is an exit status (127), the same
/// locally and remotely, rather than a failure to start.
fn sudo_probe(limit: Duration) -> RunRequest {
    RunRequest {
        command: CommandSpec::Shell("exec sudo -n -- true".into()),
        sudo: false,
        stdin: None,
        timeout: Some(limit),
    }
}

/// The sudo stage's verdict; `Err` when the probe could not run at all.
fn sudo_verdict(
    outcome: Result<Output, ConnError>,
    limit: Duration,
) -> Result<(StageStatus, String), String> {
    let out = outcome.map_err(|e| format!("could not run `sudo -n true`: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if out.timed_out {
        return Ok((
            StageStatus::Warning,
            format!(
                "`sudo -n true` did not finish in {:.0} s",
                limit.as_secs_f64()
            ),
        ));
    }
    if out.exit_code == Some(0) {
        return Ok((StageStatus::Ok, "passwordless sudo works".into()));
    }
    if super::local::sudo_wants_password(out.exit_code, &out.stderr) {
        return Ok((StageStatus::Warning, SUDO_PASSWORD_WARNING.into()));
    }
    if out.exit_code == Some(127) {
        return Ok((
            StageStatus::Warning,
            "sudo is not installed: steps with `sudo: true` will fail on this host".into(),
        ));
    }
    let code = out
        .exit_code
        .map_or_else(|| "killed".to_string(), |c| format!("exit {c}"));
    Ok((
        StageStatus::Warning,
        format!("`sudo -n true` failed ({code}): {stderr}; steps with `sudo: true` will fail on this host"),
    ))
}

fn took(started: Instant) -> String {
    format!("{} ms", started.elapsed().as_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(code: i32, stderr: &str) -> Result<Output, ConnError> {
        Ok(Output {
            exit_code: Some(code),
            stderr: stderr.as_bytes().to_vec(),
            ..Output::default()
        })
    }

    #[test]
    fn sudo_verdicts() {
        let limit = Duration::from_secs(5);
        assert_eq!(sudo_verdict(out(0, ""), limit).unwrap().0, StageStatus::Ok);
        assert_eq!(
            sudo_verdict(out(1, "sudo: a password is required\n"), limit).unwrap(),
            (StageStatus::Warning, SUDO_PASSWORD_WARNING.to_string())
        );
        assert_eq!(
            sudo_verdict(
                out(1, "sudo: a terminal is required to read the password"),
                limit
            )
            .unwrap()
            .1,
            SUDO_PASSWORD_WARNING
        );
        let (status, detail) =
            sudo_verdict(out(127, "sh: 1: exec: sudo: not found"), limit).unwrap();
        assert_eq!(status, StageStatus::Warning);
        assert!(detail.contains("not installed"), "{detail}");
        let (status, detail) =
            sudo_verdict(out(1, "deploy is not in the sudoers file."), limit).unwrap();
        assert_eq!(status, StageStatus::Warning);
        assert!(detail.contains("not in the sudoers file"), "{detail}");
        assert!(sudo_verdict(
            Err(ConnError::Lost {
                host: "h".into(),
                reason: "gone".into()
            }),
            limit
        )
        .is_err());
    }

    #[test]
    fn a_failure_skips_the_later_stages() {
        let mut report = Report::new(&[]);
        report.ok("resolve", "x");
        report.fail("connect", "refused");
        let got: Vec<_> = report.stages.iter().map(|s| (s.name, s.status)).collect();
        assert_eq!(
            got,
            vec![
                ("resolve", StageStatus::Ok),
                ("connect", StageStatus::Failed),
                ("host key", StageStatus::Skipped),
                ("authenticate", StageStatus::Skipped),
                ("sudo", StageStatus::Skipped),
            ]
        );
    }
}
