//! A real OpenSSH server for tests: [`SshdHost`] runs `/usr/sbin/sshd -D -e -f <config>`
//! on a free `127.0.0.1` port as the current user (root in CI, anyone locally), with its
//! own ed25519 host key and a generated client key as the only authorized key. Password
//! and keyboard-interactive authentication are off, `StrictModes` is off (the temp dir's
//! permissions do not matter), the pid file and logs live in the temp dir. [`SshdFleet`]
//! starts several that all trust one client key.
//!
//! Sessions get an empty `HOME` inside the temp dir (sshd `SetEnv`) unless
//! [`SshdOptions::real_home`] says otherwise: the machine's dotfiles stay out of the
//! tests (bash sources `~/.bashrc` for every ssh command; on a developer machine that can
//! cost hundreds of milliseconds per command and change `PATH`). The working directory
//! is still the user's real home, where sshd starts sessions.
//!
//! Everything is sync (`std::process`), so sync tests and tokio tests alike can use it.
//! sshd's own log (`-e`, `LogLevel VERBOSE`) goes to `<dir>/sshd.log`, read back by
//! [`SshdHost::log`] to explain a failure. Dropping the host kills sshd.
//!
//! Notes on running as root: sshd then insists on its privilege-separation directory
//! (`/run/sshd`), which the Debian package normally creates at boot; [`SshdHost::start`]
//! creates it (0755) if it is missing. `UsePAM no` keeps PAM (and its container
//! troubles) out of the way; `UsePrivilegeSeparation` is not written because OpenSSH 7.5+
//! removed it (it only logs a deprecation warning). As a non-root user sshd can only log
//! in that same user, which is the user [`SshdHost::user`] reports.
//!
//! Running as root, a host can log in another user instead ([`SshdOptions::login_user`]),
//! e.g. one made by [`ensure_sudo_user`] with a sudoers rule of the test's choosing
//! (idempotent: a fixed name, created once per machine, its rule rewritten each time and
//! checked with `visudo -cf`); [`require_sudo_users`] says whether that is possible here.
//!
//! sshd's `MaxSessions` is left at its default (10 channels per connection), like a real
//! host, so a client that opens more concurrent channels must queue them.
//!
//! An sshd can run inside a network namespace of the test's own
//! ([`SshdOptions::netns`], see [`crate::netns`]), listening on an address of that
//! namespace ([`SshdOptions::listen`]) on port [`NETNS_PORT`]: a host the test process
//! itself cannot reach unless it joins a namespace linked to it. Such an sshd is ready
//! when its log says it listens (the test cannot connect to it to find out).

use std::fs;
use std::io::Write as _;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where Debian's `openssh-server` puts sshd.
pub const SSHD: &str = "/usr/sbin/sshd";

/// The port of an sshd in a network namespace (the namespace is the test's own: nothing
/// else listens there).
pub const NETNS_PORT: u16 = 2222;

/// Key types [`keygen`] can make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    Ed25519,
    Ecdsa,
    Rsa,
}

impl KeyType {
    fn keygen_args(self) -> &'static [&'static str] {
        match self {
            KeyType::Ed25519 => &["-t", "ed25519"],
            KeyType::Ecdsa => &["-t", "ecdsa", "-b", "256"],
            KeyType::Rsa => &["-t", "rsa", "-b", "2048"],
        }
    }
}

/// A key pair written by `ssh-keygen`.
#[derive(Debug, Clone)]
pub struct KeyPair {
    /// The private key (OpenSSH format, unencrypted).
    pub private_key: PathBuf,
    /// The public key line, `ssh-ed25519 AAAA… comment`.
    pub public_line: String,
}

impl KeyPair {
    /// The public key as `type base64`, without the comment.
    pub fn public_key(&self) -> String {
        self.public_line
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Generates an unencrypted key pair at `path` (and `path.pub`) with `ssh-keygen`.
pub fn keygen(path: &Path, kind: KeyType) -> KeyPair {
    let mut pub_path = path.as_os_str().to_owned();
    pub_path.push(".pub");
    let _ = fs::remove_file(path);
    let _ = fs::remove_file(&pub_path);
    let out = Command::new("ssh-keygen")
        .args(kind.keygen_args())
        .args(["-q", "-N", "", "-C", "bosun-test", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running ssh-keygen: {e} (is openssh-client installed?)"));
    assert!(
        out.status.success(),
        "ssh-keygen {kind:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let public_line = fs::read_to_string(&pub_path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", PathBuf::from(&pub_path).display()))
        .trim()
        .to_string();
    KeyPair {
        private_key: path.to_path_buf(),
        public_line,
    }
}

/// Whether sshd and ssh-keygen are installed.
pub fn sshd_available() -> bool {
    Path::new(SSHD).is_file()
        && Command::new("ssh-keygen")
            .arg("-?")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
}

/// `true` when sshd is usable; otherwise announces `SKIPPED (tool missing): sshd` on
/// stderr (outside libtest's capture, so `scripts/test.sh` sees it) and returns `false`.
/// With `BOSUN_REQUIRE_TOOLS=1` a missing sshd is a failure instead.
pub fn require_sshd() -> bool {
    if sshd_available() {
        return true;
    }
    if std::env::var("BOSUN_REQUIRE_TOOLS").as_deref() == Ok("1") {
        panic!("sshd is required (BOSUN_REQUIRE_TOOLS=1) but {SSHD} or ssh-keygen is missing: apt-get install openssh-server");
    }
    let _ = writeln!(std::io::stderr(), "SKIPPED (tool missing): sshd");
    false
}

/// `true` when tests can make login users with sudo rules here: running as root with
/// `useradd`, `sudo` and `visudo` installed. Otherwise announces `SKIPPED (tool missing):
/// root with sudo` on stderr and returns `false` — or, with `BOSUN_REQUIRE_TOOLS=1`,
/// fails.
pub fn require_sudo_users() -> bool {
    let missing: Vec<&str> = [
        ("root", current_uid() == 0),
        ("useradd", Path::new("/usr/sbin/useradd").is_file()),
        ("sudo", Path::new("/usr/bin/sudo").is_file()),
        ("visudo", Path::new("/usr/sbin/visudo").is_file()),
    ]
    .into_iter()
    .filter(|(_, ok)| !ok)
    .map(|(what, _)| what)
    .collect();
    if missing.is_empty() {
        return true;
    }
    if std::env::var("BOSUN_REQUIRE_TOOLS").as_deref() == Ok("1") {
        panic!(
            "making sudo test users needs root, useradd, sudo and visudo (BOSUN_REQUIRE_TOOLS=1); missing: {} (run the tests as root; apt-get install sudo)",
            missing.join(", ")
        );
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED (tool missing): root with sudo ({})",
        missing.join(", ")
    );
    false
}

/// Makes sure login user `name` exists (with a home, `/bin/sh`, no password but not
/// locked, so public-key logins work with `UsePAM no`) and that its only sudoers rule is
/// `name <rule>` (e.g. `ALL=(ALL) ALL`, which asks for a password, or `ALL=(ALL)
/// NOPASSWD: ALL`), in `/etc/sudoers.d/<name>` once `visudo -cf` accepts it. Call
/// [`require_sudo_users`] first. Safe to call from tests running at once.
pub fn ensure_sudo_user(name: &str, rule: &str) {
    assert!(
        name.starts_with("bosun-test-")
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
        "test users are named bosun-test-<lowercase letters, digits, dashes>: {name:?}"
    );
    let exists = |name: &str| {
        Command::new("id")
            .args(["-u", name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !exists(name) {
        let out = Command::new("/usr/sbin/useradd")
            .args([
                "--create-home",
                "--shell",
                "/bin/sh",
                "--password",
                "*",
                name,
            ])
            .output()
            .unwrap();
        // Exit 9: another test made it meanwhile.
        assert!(
            out.status.success() || (out.status.code() == Some(9) && exists(name)),
            "useradd {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // sudo skips files in sudoers.d whose name has a dot: write one, check it, rename it.
    let dir = Path::new("/etc/sudoers.d");
    fs::create_dir_all(dir).unwrap();
    let staged = dir.join(format!(".{name}.{}", std::process::id()));
    fs::write(&staged, format!("{name} {rule}\n")).unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        fs::set_permissions(&staged, fs::Permissions::from_mode(0o440)).unwrap();
    }
    let out = Command::new("/usr/sbin/visudo")
        .arg("-cf")
        .arg(&staged)
        .output()
        .unwrap();
    if !out.status.success() {
        let _ = fs::remove_file(&staged);
        panic!(
            "visudo rejects the rule {rule:?} for {name}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    fs::rename(&staged, dir.join(name)).unwrap();
}

/// How to start an [`SshdHost`] beyond the defaults.
#[derive(Debug, Clone, Default)]
pub struct SshdOptions {
    /// Authorize this existing client key instead of generating one.
    pub client_key: Option<KeyPair>,
    /// Environment variables sshd sets in every session (`SetEnv`), e.g. a `PATH` with
    /// stand-in programs first.
    pub session_env: Vec<(String, String)>,
    /// Extra sshd_config lines, appended verbatim.
    pub extra_config: Vec<String>,
    /// Keep the user's real `HOME` in sessions. By default sessions get `HOME=<dir>/home`
    /// (an empty dir), so the machine's shell start-up files (a `~/.bashrc`, which bash
    /// sources for every ssh command) neither slow commands down nor change them.
    pub real_home: bool,
    /// Log sessions in as this user instead of the current one (sshd must run as root).
    /// The host's folder and authorized keys are then made readable by everyone (the
    /// keys are public): sshd reads them as the user. See [`ensure_sudo_user`].
    pub login_user: Option<String>,
    /// Run sshd inside this network namespace (a [`crate::netns::NetNs`]'s name), on
    /// port [`NETNS_PORT`].
    pub netns: Option<String>,
    /// The address sshd listens on: `127.0.0.1` unless given (in a namespace, one of its
    /// own addresses).
    pub listen: Option<String>,
}

/// A running sshd (on `127.0.0.1` unless [`SshdOptions`] say otherwise); killed on drop.
#[derive(Debug)]
pub struct SshdHost {
    dir: PathBuf,
    child: Option<Child>,
    address: String,
    port: u16,
    user: String,
    client_key: KeyPair,
    host_key: KeyPair,
    known_hosts: PathBuf,
}

impl SshdHost {
    /// Starts sshd with its files in `dir` (which must exist and outlive the host).
    pub fn start(dir: &Path) -> SshdHost {
        SshdHost::start_with(dir, SshdOptions::default())
    }

    /// Starts sshd with `options`.
    pub fn start_with(dir: &Path, options: SshdOptions) -> SshdHost {
        assert!(
            Path::new(SSHD).is_file(),
            "{SSHD} is missing: apt-get install openssh-server (tests should call require_sshd first)"
        );
        let dir = dir.to_path_buf();
        fs::create_dir_all(&dir).unwrap();
        if current_uid() == 0 {
            ensure_privsep_dir();
        }
        let host_key = keygen(&dir.join("ssh_host_ed25519_key"), KeyType::Ed25519);
        let client_key = options
            .client_key
            .clone()
            .unwrap_or_else(|| keygen(&dir.join("client_ed25519"), KeyType::Ed25519));
        let authorized = dir.join("authorized_keys");
        fs::write(&authorized, format!("{}\n", client_key.public_line)).unwrap();
        let user = match &options.login_user {
            None => current_user(),
            Some(other) => {
                assert_eq!(
                    current_uid(),
                    0,
                    "only root's sshd can log in another user ({other})"
                );
                use std::os::unix::fs::PermissionsExt as _;
                for (path, mode) in [(&dir, 0o755), (&authorized, 0o644)] {
                    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
                }
                for up in dir.ancestors().skip(1) {
                    let mode = fs::metadata(up).unwrap().permissions().mode();
                    assert!(
                        mode & 0o001 != 0,
                        "{other} cannot reach its authorized keys: {} is mode {:o} (make the folders above the host's 0755)",
                        up.display(),
                        mode & 0o7777
                    );
                }
                other.clone()
            }
        };

        let address = options
            .listen
            .clone()
            .unwrap_or_else(|| "127.0.0.1".to_string());
        let mut last_log = String::new();
        for _attempt in 0..10 {
            let port = if options.netns.is_some() {
                NETNS_PORT
            } else {
                free_port()
            };
            let config = dir.join("sshd_config");
            fs::write(
                &config,
                config_text(&dir, &address, port, &authorized, &host_key, &options),
            )
            .unwrap();
            let log_path = dir.join("sshd.log");
            let log = fs::File::create(&log_path).unwrap();
            let mut command = match &options.netns {
                Some(ns) => {
                    let mut c = Command::new("ip");
                    c.args(["netns", "exec", ns, SSHD]);
                    c
                }
                None => Command::new(SSHD),
            };
            let mut child = command
                .arg("-D")
                .arg("-e")
                .arg("-f")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::from(log))
                .spawn()
                .unwrap_or_else(|e| panic!("starting {SSHD}: {e}"));
            let listening = match options.netns {
                Some(_) => wait_logged_listening(&mut child, &log_path),
                None => wait_listening(&mut child, port),
            };
            match listening {
                Ok(()) => {
                    let known_hosts = dir.join("known_hosts");
                    let host = SshdHost {
                        dir,
                        child: Some(child),
                        address,
                        port,
                        user,
                        client_key,
                        host_key,
                        known_hosts,
                    };
                    fs::write(&host.known_hosts, format!("{}\n", host.known_hosts_line())).unwrap();
                    return host;
                }
                Err(reason) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    last_log = fs::read_to_string(&log_path).unwrap_or_default();
                    // Another test may have taken the port between our probe and
                    // sshd's bind: try another one. Anything else is fatal.
                    if !last_log.contains("Address already in use") {
                        panic!("sshd did not start ({reason}); its log:\n{last_log}");
                    }
                }
            }
        }
        panic!("sshd could not bind a free port after 10 attempts; last log:\n{last_log}");
    }

    /// The address sshd listens on: `127.0.0.1`, or [`SshdOptions::listen`].
    pub fn address(&self) -> &str {
        &self.address
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `ADDRESS:PORT`.
    pub fn socket_addr(&self) -> SocketAddr {
        let ip: std::net::IpAddr = self.address.parse().expect("sshd listens on an IP address");
        SocketAddr::new(ip, self.port)
    }

    /// The user sessions log in as: the user running the tests, or
    /// [`SshdOptions::login_user`].
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The authorized client key's private key file.
    pub fn client_key_path(&self) -> &Path {
        &self.client_key.private_key
    }

    /// The authorized client key.
    pub fn client_key(&self) -> &KeyPair {
        &self.client_key
    }

    /// The host key as `ssh-ed25519 AAAA…` (no comment): what `host_key:` pins.
    pub fn host_public_key(&self) -> String {
        self.host_key.public_key()
    }

    /// The `known_hosts` line for this server: `[127.0.0.1]:PORT ssh-ed25519 AAAA…`.
    pub fn known_hosts_line(&self) -> String {
        format!(
            "[{}]:{} {}",
            self.address(),
            self.port,
            self.host_public_key()
        )
    }

    /// A `known_hosts` file holding [`Self::known_hosts_line`] (in the host's dir).
    pub fn known_hosts_path(&self) -> &Path {
        &self.known_hosts
    }

    /// Adds another authorized public key line (sshd reads the file at each login).
    pub fn authorize_key(&self, public_line: &str) {
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(self.dir.join("authorized_keys"))
            .unwrap();
        writeln!(f, "{public_line}").unwrap();
    }

    /// The host's files: keys, config, log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// sshd's log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("sshd.log")).unwrap_or_default()
    }

    /// How many logins sshd has accepted so far (its log's `Accepted publickey` lines).
    pub fn logins(&self) -> usize {
        self.log().matches("Accepted publickey for ").count()
    }

    /// How many connections sshd is serving now: its live child processes (one per
    /// connection; each ends when its connection does).
    pub fn connections(&self) -> usize {
        let Some(pid) = self.child.as_ref().map(Child::id) else {
            return 0;
        };
        let Ok(entries) = fs::read_dir("/proc") else {
            return 0;
        };
        entries
            .filter_map(Result::ok)
            .filter_map(|e| fs::read_to_string(e.path().join("stat")).ok())
            .filter(|stat| {
                // `pid (comm) state ppid …`: comm may hold spaces, so read after `)`.
                let mut rest = stat.rsplit(')').next().unwrap_or("").split_whitespace();
                let state = rest.next();
                let ppid = rest.next().and_then(|p| p.parse::<u32>().ok());
                ppid == Some(pid) && state != Some("Z")
            })
            .count()
    }

    /// Stops sshd (sessions already running go on until they end). Idempotent.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for SshdHost {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Several sshds trusting one client key, with one `known_hosts` file for all.
#[derive(Debug)]
pub struct SshdFleet {
    // Hosts before the dir: they stop before their files go.
    hosts: Vec<SshdHost>,
    client_key: KeyPair,
    known_hosts: PathBuf,
    dir: tempfile::TempDir,
}

impl SshdFleet {
    /// Starts `n` sshds in a fresh temp dir.
    pub fn start(n: usize) -> SshdFleet {
        let dir = tempfile::tempdir().unwrap();
        let client_key = keygen(&dir.path().join("client_ed25519"), KeyType::Ed25519);
        let hosts: Vec<SshdHost> = (0..n)
            .map(|i| {
                SshdHost::start_with(
                    &dir.path().join(format!("host-{i}")),
                    SshdOptions {
                        client_key: Some(client_key.clone()),
                        ..SshdOptions::default()
                    },
                )
            })
            .collect();
        let known_hosts = dir.path().join("known_hosts");
        let lines: String = hosts
            .iter()
            .map(|h| format!("{}\n", h.known_hosts_line()))
            .collect();
        fs::write(&known_hosts, lines).unwrap();
        SshdFleet {
            hosts,
            client_key,
            known_hosts,
            dir,
        }
    }

    pub fn hosts(&self) -> &[SshdHost] {
        &self.hosts
    }

    /// The client key every host authorizes.
    pub fn client_key_path(&self) -> &Path {
        &self.client_key.private_key
    }

    /// A `known_hosts` file with every host's line.
    pub fn known_hosts_path(&self) -> &Path {
        &self.known_hosts
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

fn config_text(
    dir: &Path,
    address: &str,
    port: u16,
    authorized: &Path,
    host_key: &KeyPair,
    options: &SshdOptions,
) -> String {
    let mut text = format!(
        "Port {port}\n\
         ListenAddress {address}\n\
         HostKey {host_key}\n\
         PidFile {pid}\n\
         AuthorizedKeysFile {authorized}\n\
         StrictModes no\n\
         UsePAM no\n\
         PubkeyAuthentication yes\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n\
         PermitRootLogin prohibit-password\n\
         PrintMotd no\n\
         UseDNS no\n\
         LogLevel VERBOSE\n",
        host_key = host_key.private_key.display(),
        pid = dir.join("sshd.pid").display(),
        authorized = authorized.display(),
    );
    let mut env = Vec::new();
    if !options.real_home && !options.session_env.iter().any(|(k, _)| k == "HOME") {
        let home = dir.join("home");
        fs::create_dir_all(&home).unwrap();
        env.push(("HOME".to_string(), home.display().to_string()));
    }
    env.extend(options.session_env.iter().cloned());
    if !env.is_empty() {
        text.push_str("SetEnv");
        for (k, v) in &env {
            assert!(
                !v.contains(['"', ' ', '\n']) && !k.contains(['=', ' ', '\n']),
                "SetEnv values here must not contain spaces or quotes: {k}={v}"
            );
            text.push_str(&format!(" {k}={v}"));
        }
        text.push('\n');
    }
    for line in &options.extra_config {
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// Waits until sshd accepts TCP connections on `port` and greets with `SSH-`.
fn wait_listening(child: &mut Child, port: u16) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("sshd exited: {status}"));
        }
        if let Ok(stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            if greets(stream) {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "port {port} did not accept SSH connections in 10 s"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until sshd's log says it listens (for an sshd the test cannot connect to).
fn wait_logged_listening(child: &mut Child, log: &Path) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if fs::read_to_string(log).is_ok_and(|l| l.contains("Server listening on ")) {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("sshd exited: {status}"));
        }
        if Instant::now() > deadline {
            return Err("sshd did not say it listens in 10 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn greets(mut stream: TcpStream) -> bool {
    use std::io::Read as _;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut buf = [0u8; 4];
    let ok = stream.read_exact(&mut buf).is_ok() && &buf == b"SSH-";
    // Say goodbye politely so sshd logs a plain disconnect, not a protocol error.
    let _ = stream.write_all(b"SSH-2.0-bosun-testkit-probe\r\n");
    ok
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn current_uid() -> u32 {
    Command::new("id")
        .arg("-u")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(u32::MAX)
}

fn current_user() -> String {
    let out = Command::new("id")
        .arg("-un")
        .output()
        .unwrap_or_else(|e| panic!("running id -un: {e}"));
    let user = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!user.is_empty(), "id -un printed nothing");
    user
}

/// As root, sshd refuses to start without `/run/sshd` (its privilege-separation chroot),
/// which a container without an init system may not have.
fn ensure_privsep_dir() {
    let dir = Path::new("/run/sshd");
    if !dir.is_dir() {
        use std::os::unix::fs::DirBuilderExt as _;
        let _ = fs::DirBuilder::new()
            .mode(0o755)
            .recursive(true)
            .create(dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// OpenSSH's own client, strict about the host key, through the harness's files.
    fn ssh(host: &SshdHost, key: &Path, known_hosts: &Path, cmd: &str) -> std::process::Output {
        Command::new("ssh")
            .args(["-F", "/dev/null", "-o", "BatchMode=yes"])
            .args(["-o", "StrictHostKeyChecking=yes"])
            .arg("-o")
            .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
            .arg("-i")
            .arg(key)
            .arg("-p")
            .arg(host.port().to_string())
            .arg(format!("{}@{}", host.user(), host.address()))
            .arg(cmd)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    #[test]
    fn openssh_client_logs_in_with_the_generated_key_and_known_hosts_line() {
        if !require_sshd() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let host = SshdHost::start(dir.path());
        assert!(host
            .known_hosts_line()
            .starts_with(&format!("[127.0.0.1]:{} ssh-ed25519 AAAA", host.port())));
        let out = ssh(
            &host,
            host.client_key_path(),
            host.known_hosts_path(),
            "echo hi; id -un",
        );
        assert!(
            out.status.success(),
            "ssh failed: {}\nsshd log:\n{}",
            String::from_utf8_lossy(&out.stderr),
            host.log()
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("hi\n{}\n", host.user())
        );
        // Sessions get the harness's empty HOME.
        let out = ssh(
            &host,
            host.client_key_path(),
            host.known_hosts_path(),
            "echo $HOME",
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            host.dir().join("home").display().to_string()
        );

        // Another key is refused (only the generated one is authorized).
        let other = keygen(&dir.path().join("other"), KeyType::Ed25519);
        let out = ssh(&host, &other.private_key, host.known_hosts_path(), "true");
        assert!(!out.status.success());
        // …until it is authorized.
        host.authorize_key(&other.public_line);
        let out = ssh(&host, &other.private_key, host.known_hosts_path(), "true");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn fleet_hosts_share_one_client_key_and_known_hosts_file() {
        if !require_sshd() {
            return;
        }
        let fleet = SshdFleet::start(3);
        let ports: std::collections::BTreeSet<u16> =
            fleet.hosts().iter().map(|h| h.port()).collect();
        assert_eq!(ports.len(), 3);
        for host in fleet.hosts() {
            let out = ssh(
                host,
                fleet.client_key_path(),
                fleet.known_hosts_path(),
                "true",
            );
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    #[test]
    fn drop_stops_sshd() {
        if !require_sshd() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let addr = {
            let host = SshdHost::start(dir.path());
            host.socket_addr()
        };
        assert!(TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err());
    }
}
