//! `bosun server` as a process: restart after `kill -9`, graceful shutdown on SIGTERM,
//! configuration sources and first-start bootstrap.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use support::{http, KillOnDrop, ServerProcess, BIN};

/// Reads one response with a Content-Length from a kept-alive connection.
fn read_response(reader: &mut BufReader<TcpStream>) -> (u16, String) {
    let mut status_line = String::new();
    reader.read_line(&mut status_line).unwrap();
    let status = status_line.split(' ').nth(1).unwrap().parse().unwrap();
    let mut len = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap();
            }
        }
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).unwrap();
    (status, String::from_utf8(body).unwrap())
}

const STACK: &str = r#"{"id": "net", "repository": "github:acme/infra", "path": "infra/net"}"#;

#[test]
fn data_survives_kill_9_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = ServerProcess::start(dir.path(), &[], &[]);
    let token = server.admin_token();
    let (status, body) = http(
        server.addr,
        "POST",
        "/api/v1/orgs/default/stacks",
        &token,
        Some(STACK),
    );
    assert_eq!(status, 201, "{body}");
    server.signal(libc::SIGKILL);
    server
        .wait_exit(Duration::from_secs(10))
        .expect("killed server exits");
    drop(server);

    let server = ServerProcess::start(dir.path(), &[], &[]);
    // Same token: a restart never bootstraps again.
    assert_eq!(server.admin_token(), token);
    let (status, body) = http(
        server.addr,
        "GET",
        "/api/v1/orgs/default/stacks/net",
        &token,
        None,
    );
    assert_eq!(status, 200, "{body}");
    let stack: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(stack["path"], "infra/net");
    let (_, audit) = http(
        server.addr,
        "GET",
        "/api/v1/orgs/default/audit",
        &token,
        None,
    );
    assert_eq!(audit.matches("server.bootstrap").count(), 1, "{audit}");
}

#[test]
fn sigterm_lets_in_flight_requests_finish_and_closes_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = ServerProcess::start(dir.path(), &[], &[]);
    let token = server.admin_token();

    // A kept-alive connection the server has certainly accepted.
    let stream = TcpStream::connect(server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    write!(writer, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut reader).0, 200);

    // Start a request and send only half its body: it is now in flight.
    let (head, tail) = STACK.split_at(STACK.len() / 2);
    write!(
        writer,
        "POST /api/v1/orgs/default/stacks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{head}",
        STACK.len()
    )
    .unwrap();
    writer.flush().unwrap();
    assert!(
        server.wait_for_log("uri=/api/v1/orgs/default/stacks", Duration::from_secs(20)),
        "the server never saw the request start:\n{}",
        server.log_text()
    );

    server.signal(libc::SIGTERM);
    assert!(server.wait_for_log("shutdown signal received", Duration::from_secs(20)));
    // New connections are refused or closed while the old request finishes.
    write!(writer, "{tail}").unwrap();
    writer.flush().unwrap();
    let (status, body) = read_response(&mut reader);
    assert_eq!(status, 201, "in-flight request was cut off: {body}");

    let exit = server
        .wait_exit(Duration::from_secs(20))
        .expect("server exits after SIGTERM");
    assert!(
        exit.success(),
        "exit status {exit:?}\n{}",
        server.log_text()
    );
    assert!(server.log_text().contains("store closed"));
    // A clean close checkpoints the WAL into the database file.
    let wal = dir.path().join("bosun.db-wal");
    assert!(
        !wal.exists() || std::fs::metadata(&wal).unwrap().len() == 0,
        "WAL left behind"
    );
    drop(server);

    let server = ServerProcess::start(dir.path(), &[], &[]);
    let (status, _) = http(
        server.addr,
        "GET",
        "/api/v1/orgs/default/stacks/net",
        &token,
        None,
    );
    assert_eq!(status, 200);
}

#[test]
fn bootstrap_token_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let token = "env-bootstrap-token-0123456789abcdef0123";
    let server = ServerProcess::start(dir.path(), &[], &[("BOSUN_BOOTSTRAP_TOKEN", token)]);
    assert!(
        !dir.path().join("admin-token").exists(),
        "no file when the token was given"
    );
    let (status, body) = http(server.addr, "GET", "/api/v1/whoami", token, None);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"user\":\"admin\""));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "data dir must be private");
    }
}

#[test]
fn generated_admin_token_file_is_private() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &[], &[]);
    let path = dir.path().join("admin-token");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    let (status, _) = http(
        server.addr,
        "GET",
        "/api/v1/whoami",
        &server.admin_token(),
        None,
    );
    assert_eq!(status, 200);
}

fn run_server_expecting_failure(args: &[&str], env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(BIN);
    cmd.arg("server")
        .args(args)
        .stdin(Stdio::null())
        .env_remove("BOSUN_BOOTSTRAP_TOKEN");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(!out.status.success(), "server should refuse to start");
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[test]
fn config_file_env_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bosun.toml");
    std::fs::write(&cfg, "listen = \"127.0.0.1:0\"\nlisen = \"typo\"\n").unwrap();
    let err = run_server_expecting_failure(&["--config", cfg.to_str().unwrap()], &[]);
    assert!(err.contains("unknown field `lisen`"), "{err}");

    // File < env < flag: the file names one data dir, the env another, and the flag wins
    // for listen while the env wins for the data dir.
    let file_dir = dir.path().join("from-file");
    let env_dir = dir.path().join("from-env");
    std::fs::write(
        &cfg,
        format!(
            "listen = \"127.0.0.1:1\"\ndata_dir = \"{}\"\n",
            file_dir.display()
        ),
    )
    .unwrap();
    // Killed on drop, so a failing assertion leaves no server behind.
    let mut child = KillOnDrop(
        Command::new(BIN)
            .args([
                "server",
                "--config",
                cfg.to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
            ])
            .env("BOSUN_DATA_DIR", &env_dir)
            .env("BOSUN_LISTEN", "127.0.0.1:2")
            .env_remove("BOSUN_BOOTSTRAP_TOKEN")
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Its stderr, line by line, read on a thread so a missing line fails in 30 s
    // instead of blocking the test.
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.0.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next_line = || {
        rx.recv_timeout(std::time::Duration::from_secs(30))
            .expect("the server printed nothing more in 30 s")
    };
    let addr = loop {
        if let Some(a) = next_line().strip_prefix("bosun: listening on http://") {
            break a.parse::<SocketAddr>().unwrap();
        }
    };
    // Then it names the console, at the address actually bound.
    let console = loop {
        let line = next_line();
        if line.starts_with("bosun: console at") {
            break line;
        }
    };
    assert_eq!(
        console,
        format!("bosun: console at http://{addr}/ (log in with a personal token)")
    );
    child.kill();
    assert_ne!(addr.port(), 1);
    assert_ne!(addr.port(), 2);
    assert!(env_dir.join("bosun.db").exists());
    assert!(!file_dir.exists());

    let err = run_server_expecting_failure(
        &["--listen", "127.0.0.1:0"],
        &[("BOSUN_BOOTSTRAP_TOKEN", "short")],
    );
    assert!(err.contains("BOSUN_BOOTSTRAP_TOKEN"), "{err}");
}

/// A state document of about `pad` bytes with the given serial.
fn state_doc(serial: u64, pad: usize) -> String {
    serde_json::json!({
        "version": 4,
        "terraform_version": "1.0.3",
        "serial": serial,
        "lineage": "durability",
        "outputs": {"serial": {"value": serial, "type": "number"}},
        "resources": [],
        "padding": "p".repeat(pad),
    })
    .to_string()
}

#[test]
fn kill_9_during_state_writes_leaves_only_whole_versions() {
    let dir = tempfile::tempdir().unwrap();
    let mut acked: Vec<u64> = Vec::new();
    let mut serial = 0u64;
    let rounds = 12;
    for round in 0..rounds {
        let server = ServerProcess::start(dir.path(), &[], &[]);
        let token = server.admin_token();
        if round == 0 {
            let (s, b) = http(
                server.addr,
                "POST",
                "/api/v1/orgs/default/stacks",
                &token,
                Some(STACK),
            );
            assert_eq!(s, 201, "{b}");
        }
        // A writer streams versions until the server dies under it.
        let (tx, rx) = std::sync::mpsc::channel::<u64>();
        let addr = server.addr;
        let writer_token = token.clone();
        let start = serial;
        let writer = std::thread::spawn(move || {
            let mut n = start;
            loop {
                n += 1;
                let body = state_doc(n, 64 * 1024);
                let Ok(mut s) = TcpStream::connect(addr) else {
                    return;
                };
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let req = format!(
                    "POST /api/v1/orgs/default/stacks/net/state HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {writer_token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                if s.write_all(req.as_bytes()).is_err() {
                    return;
                }
                let mut out = String::new();
                if s.read_to_string(&mut out).is_err() || out.is_empty() {
                    return;
                }
                if support::parse_response(&out).0 == 200 && tx.send(n).is_err() {
                    return;
                }
            }
        });
        // Let a few writes land (a different number each round), then kill -9 with the
        // next ones in flight.
        let wanted = 1 + round % 5;
        for _ in 0..wanted {
            let n = rx
                .recv_timeout(Duration::from_secs(30))
                .expect("writes are acknowledged");
            acked.push(n);
        }
        server.signal(libc::SIGKILL);
        writer.join().unwrap();
        acked.extend(rx.try_iter());
        serial = *acked.iter().max().unwrap() + 10;
        drop(server);
    }

    // Every version on disk is whole, every acknowledged write is there, and the current
    // pointer names a whole version.
    let conn = rusqlite::Connection::open(dir.path().join("bosun.db")).unwrap();
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    let mut stmt = conn
        .prepare(
            "SELECT version, serial, checksum, size, body FROM state_versions ORDER BY version",
        )
        .unwrap();
    let rows: Vec<(i64, i64, String, i64, Vec<u8>)> = stmt
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for (version, serial, checksum, size, body) in &rows {
        use sha2::Digest;
        assert_eq!(
            hex::encode(sha2::Sha256::digest(body)),
            *checksum,
            "version {version} torn"
        );
        assert_eq!(body.len() as i64, *size, "version {version} size");
        let doc: serde_json::Value = serde_json::from_slice(body).unwrap();
        assert_eq!(doc["serial"].as_i64(), Some(*serial));
    }
    let stored: std::collections::BTreeSet<i64> = rows.iter().map(|r| r.1).collect();
    for n in &acked {
        assert!(stored.contains(&(*n as i64)), "acknowledged write {n} lost");
    }
    let current: i64 = conn
        .query_row("SELECT current_version FROM state_heads", [], |r| r.get(0))
        .unwrap();
    let newest = rows.iter().map(|r| r.0).max().unwrap();
    assert_eq!(
        current, newest,
        "the current pointer is the newest whole version"
    );
    assert!(acked.len() >= rounds, "{} writes acknowledged", acked.len());
}
