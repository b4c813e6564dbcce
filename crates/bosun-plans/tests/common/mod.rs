//! What the SSH connection tests share: a started sshd, an inventory host for it, a
//! connection, requests, and process checks on the (loopback) host.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::{Duration, Instant};

use bosun_plans::connection::ssh::SshConnection;
use bosun_plans::connection::{CommandSpec, ConnectOptions, Connection, Output, RunRequest};
use bosun_plans::model::{ConnectionKind, Host};
use bosun_testkit::sshd::{require_sshd, SshdHost, SshdOptions};
use tempfile::TempDir;

/// A started sshd in its own temp dir, or `None` (skip announced).
pub fn sshd() -> Option<(TempDir, SshdHost)> {
    sshd_with(SshdOptions::default())
}

pub fn sshd_with(options: SshdOptions) -> Option<(TempDir, SshdHost)> {
    if !require_sshd() {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let host = SshdHost::start_with(&dir.path().join("sshd"), options);
    Some((dir, host))
}

/// An inventory host for `sshd`: its port, user, client key and known_hosts file.
pub fn host_for(sshd: &SshdHost) -> Host {
    Host {
        name: "test-host".into(),
        address: sshd.address().into(),
        port: sshd.port(),
        user: Some(sshd.user().into()),
        connection: ConnectionKind::Ssh,
        identity_file: Some(sshd.client_key_path().to_path_buf()),
        known_hosts: Some(sshd.known_hosts_path().to_path_buf()),
        ..Host::default()
    }
}

pub fn options() -> ConnectOptions {
    ConnectOptions {
        connect_timeout: Duration::from_secs(10),
    }
}

pub async fn connect(sshd: &SshdHost, host: &Host) -> SshConnection {
    match SshConnection::connect(host, &options()).await {
        Ok(c) => c,
        Err(e) => panic!("connect failed: {e}\nsshd log:\n{}", sshd.log()),
    }
}

pub fn argv(words: &[&str]) -> RunRequest {
    RunRequest {
        command: CommandSpec::Argv(words.iter().map(|w| w.to_string()).collect()),
        sudo: false,
        stdin: None,
        timeout: None,
    }
}

pub fn shell(line: &str) -> RunRequest {
    RunRequest {
        command: CommandSpec::Shell(line.into()),
        sudo: false,
        stdin: None,
        timeout: None,
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub async fn run_ok(conn: &dyn Connection, request: &RunRequest) -> Output {
    let out = conn.run(request).await.unwrap();
    assert!(
        !out.timed_out,
        "{request:?} timed out: {}",
        text(&out.stderr)
    );
    out
}

/// Writes an executable script.
pub fn script(path: &Path, body: &str) {
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Whether process `pid` is gone (or a zombie about to be reaped).
pub fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

pub fn wait_gone(pid: u32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if process_gone(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    process_gone(pid)
}

pub fn read_pid(path: &Path) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            if let Ok(pid) = s.trim().parse() {
                return pid;
            }
        }
        assert!(Instant::now() < deadline, "no pid in {}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// How a test that changes the machine's accounts or packages acts as root: `Some(false)`
/// as root, `Some(true)` through a passwordless `sudo -n`, `None` when neither works —
/// announced as `SKIPPED (tool missing): …` on stderr, or a failure under
/// `BOSUN_REQUIRE_TOOLS=1`. `tools` are programs the test drives, checked too.
pub fn require_root_or_sudo(tools: &[&str]) -> Option<bool> {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| !Path::new(t).is_file())
        .collect();
    let sudo = if is_root() {
        Some(false)
    } else if std::process::Command::new("sudo")
        .args(["-n", "true"])
        .stdin(std::process::Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success())
    {
        Some(true)
    } else {
        None
    };
    let why = match (sudo, missing.is_empty()) {
        (Some(s), true) => return Some(s),
        (None, _) => "root or a passwordless sudo -n".to_string(),
        (Some(_), false) => missing.join(", "),
    };
    if std::env::var("BOSUN_REQUIRE_TOOLS").as_deref() == Ok("1") {
        panic!("this test needs {why} (BOSUN_REQUIRE_TOOLS=1)");
    }
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "SKIPPED (tool missing): {why}");
    None
}

/// Runs `argv` as root (through `sudo -n` when `sudo`), returning its output.
pub fn as_root(sudo: bool, argv: &[&str]) -> std::process::Output {
    let mut cmd = if sudo {
        let mut c = std::process::Command::new("sudo");
        c.arg("-n").arg("--").args(argv);
        c
    } else {
        let mut c = std::process::Command::new(argv[0]);
        c.args(&argv[1..]);
        c
    };
    cmd.stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {argv:?}: {e}"))
}

/// A name no other test run picks: `prefix` and 8 hex digits.
pub fn unique_name(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let n = nanos
        ^ (u64::from(std::process::id()) << 32)
        ^ NEXT
            .fetch_add(1, Ordering::SeqCst)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mixed = n.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32;
    format!("{prefix}{mixed:08x}")
}

/// A connection that counts the commands it runs (on this machine).
pub struct Counting {
    pub inner: bosun_plans::connection::local::LocalConnection,
    pub commands: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl Connection for Counting {
    async fn run(
        &self,
        request: &RunRequest,
    ) -> Result<Output, bosun_plans::connection::ConnError> {
        self.commands
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.run(request).await
    }
    async fn close(&self) {}
}

/// Runs `plan` on `inventory` with the default options (dry or not), ignoring progress.
pub async fn run_plan(
    plan: &bosun_plans::model::Plan,
    inventory: &bosun_plans::model::Inventory,
    dry_run: bool,
) -> bosun_plans::exec::RunReport {
    let options = bosun_plans::exec::RunOptions {
        dry_run,
        ..bosun_plans::exec::RunOptions::default()
    };
    bosun_plans::exec::run(plan, inventory, options, |_| {})
        .await
        .unwrap()
}
