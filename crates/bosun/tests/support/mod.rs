//! Test support: runs the real `bosun server` binary as a child process on a free
//! loopback port with its own data dir, and runs `bosun` client commands against it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub mod proxy;

pub const BIN: &str = env!("CARGO_BIN_EXE_bosun");

/// A `bosun server` child process. Killed on drop.
pub struct ServerProcess {
    pub child: Child,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    /// Whether it serves HTTPS (started with a TLS certificate).
    pub tls: bool,
    /// Every stderr line so far (the log), shared with the reader thread.
    pub log: Arc<Mutex<Vec<String>>>,
}

impl ServerProcess {
    /// Starts a server on `127.0.0.1:0` with `data_dir`, extra args and env, and waits
    /// (up to 30 s) for its "listening on" line.
    pub fn start(data_dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_listening(data_dir, "127.0.0.1:0", args, env)
    }

    /// Like [`Self::start`], listening on `listen` (a restart on the port runners know).
    pub fn start_listening(
        data_dir: &Path,
        listen: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        Self::start_command(Command::new(BIN), data_dir, listen, args, env)
    }

    /// Like [`Self::start`], run through `wrapper` (a program and its arguments that
    /// execute the rest of the command line: `setpriv … --`).
    pub fn start_wrapped(data_dir: &Path, wrapper: &[&str], args: &[&str]) -> Self {
        let mut cmd = Command::new(wrapper[0]);
        cmd.args(&wrapper[1..]).arg(BIN);
        Self::start_command(cmd, data_dir, "127.0.0.1:0", args, &[])
    }

    fn start_command(
        mut cmd: Command,
        data_dir: &Path,
        listen: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        cmd.arg("server")
            .arg("--listen")
            .arg(listen)
            .arg("--data-dir")
            .arg(data_dir)
            .args(args)
            .env_remove("BOSUN_BOOTSTRAP_TOKEN")
            .env("BOSUN_LOG", "info,bosun_server=debug,tower_http=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn bosun server");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.strip_prefix("bosun: listening on http://") {
                    let _ = tx.send((false, addr.trim().to_string()));
                } else if let Some(addr) = line.strip_prefix("bosun: listening on https://") {
                    let _ = tx.send((true, addr.trim().to_string()));
                }
                sink.lock().unwrap().push(line);
            }
        });
        let (tls, addr) = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok((tls, a)) => (tls, a.parse().unwrap()),
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "server did not start; log:\n{}",
                    log.lock().unwrap().join("\n")
                );
            }
        };
        ServerProcess {
            child,
            addr,
            data_dir: data_dir.to_path_buf(),
            tls,
            log,
        }
    }

    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The generated admin token from `<data-dir>/admin-token`.
    pub fn admin_token(&self) -> String {
        std::fs::read_to_string(self.data_dir.join("admin-token"))
            .expect("admin-token file")
            .trim()
            .to_string()
    }

    /// Waits until a log line contains `needle`, up to `timeout`.
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.log.lock().unwrap().iter().any(|l| l.contains(needle)) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    pub fn signal(&self, sig: i32) {
        let rc = unsafe { libc::kill(self.child.id() as i32, sig) };
        assert_eq!(rc, 0, "kill({sig}) failed");
    }

    /// Waits for the process to exit, up to `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `bosun ARGS` as a client of `server` with `token`.
pub fn bosun(server: &ServerProcess, token: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("BOSUN_URL", server.url())
        .env("BOSUN_TOKEN", token)
        .env_remove("BOSUN_ORG")
        .stdin(Stdio::null())
        .output()
        .expect("run bosun")
}

/// `bosun ARGS` as `token`, which must succeed: its stdout (the failure shows stdout,
/// stderr and the server's log tail).
pub fn bosun_ok(server: &ServerProcess, token: &str, args: &[&str]) -> String {
    let out = bosun(server, token, args);
    assert!(
        out.status.success(),
        "bosun {args:?} failed\nstdout:\n{}\nstderr:\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        log_tail(server, 40)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `bosun ARGS` as `token`, which must fail: its stderr.
pub fn bosun_refused(server: &ServerProcess, token: &str, args: &[&str]) -> String {
    let out = bosun(server, token, args);
    assert!(!out.status.success(), "bosun {args:?} should fail");
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// `bosun --json ARGS` as `token`, which must succeed: its output, parsed.
pub fn bosun_json(server: &ServerProcess, token: &str, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let text = bosun_ok(server, token, &all);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

/// One HTTP/1.1 exchange on its own connection (JSON body, bearer token); returns the
/// status and the body. For protocol methods (LOCK, UNLOCK) and requests the CLI does not
/// make.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&str>,
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let body = body.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    parse_response(&out)
}

/// Splits a whole HTTP/1.1 response into its status and body.
pub fn parse_response(resp: &str) -> (u16, String) {
    let status = resp.split(' ').nth(1).unwrap().parse().unwrap();
    let body = resp
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// Delivers a GitHub webhook to `POST /webhooks/github` as GitHub does: the event and
/// delivery headers and the `X-Hub-Signature-256` of the body.
pub fn deliver_webhook(
    addr: SocketAddr,
    event: &str,
    delivery: &str,
    body: &[u8],
    signature: &str,
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "POST /webhooks/github HTTP/1.1\r\nHost: x\r\nUser-Agent: GitHub-Hookshot/test\r\nContent-Type: application/json\r\nX-GitHub-Event: {event}\r\nX-GitHub-Delivery: {delivery}\r\nX-Hub-Signature-256: {signature}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    parse_response(&out)
}

// ---- tools ------------------------------------------------------------------------------

/// The real Terraform, or `None` after announcing the skip (straight to stderr, past the
/// harness's capture). With `BOSUN_REQUIRE_TOOLS=1` a missing tool fails the test.
pub fn terraform_or_skip() -> Option<PathBuf> {
    bosun_testkit::tf_provider::require_terraform()
}

/// A bare repository under `root` whose one commit on `main` holds `main.tf`, as a
/// `file://` URL (the working copy it came from is `root/src`).
pub fn bare_repository(root: &Path, main_tf: &str) -> String {
    let work = root.join("src");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "--quiet", "--initial-branch=main"]);
    std::fs::write(work.join("main.tf"), main_tf).unwrap();
    git(&work, &["add", "--all"]);
    git(&work, &["commit", "--quiet", "-m", "the module"]);
    let bare = root.join("repo.git");
    git(
        root,
        &[
            "clone",
            "--quiet",
            "--bare",
            work.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    );
    format!("file://{}", bare.display())
}

/// Writes `text` to `path` as an executable script.
pub fn write_executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Kills (SIGKILL) every process whose working directory is under `root`: what a test's
/// engines and their children leave behind must not outlive it.
pub fn kill_processes_under(root: &Path) {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if pid > 1
            && std::fs::read_link(entry.path().join("cwd")).is_ok_and(|c| c.starts_with(root))
        {
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// Runs git in `dir` with a clean identity and no user or system config.
pub fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.test"])
        .args([
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---- PostgreSQL and plain HTTP (several replicas) -----------------------------------------

/// The PostgreSQL test server's URL (`BOSUN_TEST_DATABASE_URL`), or `None` after announcing
/// the skip. With `BOSUN_REQUIRE_TOOLS=1` a missing server fails the test.
pub fn postgres_or_skip() -> Option<String> {
    bosun_testkit::postgres::server_url()
}

/// `psql URL -c SQL`, unaligned and tuples only (`|` between columns).
pub fn psql(url: &str, sql: &str) -> Output {
    Command::new("psql")
        .args([
            url,
            "-X",
            "-q",
            "-t",
            "-A",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            sql,
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run psql")
}

/// A database of its own on the PostgreSQL test server, dropped (connections and all) on
/// drop — declare it before the servers that use it, so they stop first.
pub struct PgScratch {
    admin_url: String,
    pub name: String,
    pub url: String,
}

impl PgScratch {
    pub fn create(admin_url: &str, prefix: &str) -> PgScratch {
        // Tests of one binary start at once: the clock alone can give two of them one name.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let name = format!(
            "{prefix}_{}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
        );
        let out = psql(admin_url, &format!("CREATE DATABASE {name}"));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (base, _) = admin_url.rsplit_once('/').unwrap();
        PgScratch {
            url: format!("{base}/{name}"),
            admin_url: admin_url.to_string(),
            name,
        }
    }

    /// The rows a query answers, each split at `|`.
    pub fn rows(&self, sql: &str) -> Vec<Vec<String>> {
        let out = psql(&self.url, sql);
        assert!(
            out.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| l.split('|').map(str::to_string).collect())
            .collect()
    }

    /// The one value a query answers.
    pub fn value(&self, sql: &str) -> String {
        let out = psql(&self.url, sql);
        assert!(
            out.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for PgScratch {
    fn drop(&mut self) {
        let _ = psql(
            &self.admin_url,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

/// Like [`http`], but a connection failure (a server that is gone) is an error, not a
/// panic.
pub fn try_http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&str>,
) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let body = body.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    if !out.starts_with("HTTP/") {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "no HTTP response",
        ));
    }
    Ok(parse_response(&out))
}

/// The last `n` lines of a server's log.
pub fn log_tail(server: &ServerProcess, n: usize) -> String {
    let log = server.log.lock().unwrap();
    log[log.len().saturating_sub(n)..].join("\n")
}

// ---- a PostgreSQL server of the test's own (to stop and restart) -------------------------

/// The newest PostgreSQL server bin dir: pg_config's, else /usr/lib/postgresql/*/bin.
pub fn pg_bindir() -> Option<PathBuf> {
    let usable = |d: &Path| d.join("initdb").is_file() && d.join("pg_ctl").is_file();
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if out.status.success() && usable(&dir) {
            return Some(dir);
        }
    }
    std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| {
            let e = e.ok()?;
            let version: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            usable(&bin).then_some((version, bin))
        })
        .max_by_key(|(v, _)| *v)
        .map(|(_, bin)| bin)
}

/// A PostgreSQL server of one test's own — never the shared one of
/// `BOSUN_TEST_DATABASE_URL`, which other tests use — that it may stop and restart:
/// `initdb` into a temp dir and `pg_ctl` on a free port of 127.0.0.1 (as `nobody` when
/// root: PostgreSQL refuses to run as root), trust auth, role `bosun`. Stopped
/// (immediate) on drop.
pub struct OwnPostgres {
    dir: tempfile::TempDir,
    bindir: PathBuf,
    as_nobody: bool,
    pub port: u16,
}

impl OwnPostgres {
    /// Starts one, or returns `None` after announcing the skip when there are no server
    /// binaries (a failure under `BOSUN_REQUIRE_TOOLS=1`).
    pub fn start_or_skip() -> Option<OwnPostgres> {
        let Some(bindir) = pg_bindir() else {
            if std::env::var("BOSUN_REQUIRE_TOOLS").as_deref() == Ok("1") {
                panic!("PostgreSQL server binaries (initdb, pg_ctl) are required (BOSUN_REQUIRE_TOOLS=1)");
            }
            let _ = writeln!(std::io::stderr(), "SKIPPED (tool missing): postgresql");
            return None;
        };
        let as_nobody = unsafe { libc::geteuid() } == 0;
        let dir = tempfile::Builder::new()
            .prefix("bosun-own-pg-")
            .tempdir()
            .unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        if as_nobody {
            let out = Command::new("chown")
                .arg("nobody")
                .arg(dir.path())
                .output()
                .unwrap();
            assert!(out.status.success(), "chown nobody: {out:?}");
        }
        // A free port: ask the kernel for one, then hand it to the server.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let pg = OwnPostgres {
            dir,
            bindir,
            as_nobody,
            port,
        };
        let data = pg.data_dir();
        let out = pg
            .command("initdb")
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "bosun",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "initdb: {out:?}");
        let conf = format!(
            "listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{}'\n\
             fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n",
            pg.dir.path().display()
        );
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))
            .unwrap();
        file.write_all(conf.as_bytes()).unwrap();
        pg.ctl(&["start"]);
        Some(pg)
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// One of the server's programs, run as the server's user in its dir.
    fn command(&self, program: &str) -> Command {
        let path = self.bindir.join(program);
        let mut cmd = if self.as_nobody {
            let mut c = Command::new("runuser");
            c.args(["-u", "nobody", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        };
        cmd.current_dir(self.dir.path()).stdin(Stdio::null());
        cmd
    }

    /// `pg_ctl -D <data> -l <log> -w -t 60 ARGS`, which must succeed.
    pub fn ctl(&self, args: &[&str]) {
        let log = self.dir.path().join("server.log");
        let out = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .arg("-l")
            .arg(&log)
            .args(["-w", "-t", "60"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg_ctl {args:?}: {}{}\nserver log:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
    }

    /// The server's own log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// The `postgres` database as role `bosun`.
    pub fn url(&self) -> String {
        format!("postgres://bosun@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }
}

/// `GET path` without a token: the status, the body and the `Retry-After` header.
pub fn probe(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String, Option<String>)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    if !out.starts_with("HTTP/") {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "no HTTP response",
        ));
    }
    let (head, _) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let retry_after = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("retry-after")
            .then(|| value.trim().to_string())
    });
    let (status, body) = parse_response(&out);
    Ok((status, body, retry_after))
}

/// Polls `f` until it returns `Some`, up to `timeout`; panics with `what` otherwise.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?}: {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A child process (a separate runner, say) killed when dropped.
pub struct KillOnDrop(pub Child);

impl KillOnDrop {
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.kill();
    }
}
