//! `bosun notify` end to end: the real binary against a real `bosun server` child process,
//! delivering to a small HTTP receiver in this test process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::Output;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use support::{bosun, ServerProcess};

const SECRET: &str = "cli-test-secret-0123";

fn describe(out: &Output) -> String {
    format!(
        "status: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Accepts HTTP/1.1 requests, keeps each body, answers 200.
fn receiver() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let sink = bodies.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some((k, v)) = line.split_once(':') {
                    if k.eq_ignore_ascii_case("content-length") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            sink.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&body).into_owned());
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        }
    });
    (url, bodies)
}

#[test]
fn notify_targets_test_events_and_the_delivery_log() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &["--local-runners", "0"], &[]);
    let admin = server.admin_token();
    let run = |args: &[&str]| bosun(&server, &admin, args);
    let ok = |args: &[&str]| {
        let out = run(args);
        assert!(out.status.success(), "bosun {args:?}\n{}", describe(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    let (url, bodies) = receiver();
    let secret_file = dir.path().join("hook.key");
    std::fs::write(&secret_file, format!("{SECRET}\n")).unwrap();

    let added = ok(&[
        "notify",
        "target",
        "add",
        "ops",
        "--kind",
        "webhook",
        "--endpoint",
        &url,
        "--secret-file",
        secret_file.to_str().unwrap(),
    ]);
    assert!(
        added.starts_with("added notification target ops\n"),
        "{added}"
    );
    assert!(added.contains("rules (defaults):"), "{added}");
    assert!(
        added.contains("run_ended (kinds: any; states: failed,force_failed,interrupted)"),
        "{added}"
    );
    ok(&[
        "notify",
        "target",
        "add",
        "chat",
        "--kind",
        "slack",
        "--endpoint",
        "http://127.0.0.1:1/unreachable",
        "--rule",
        "run_ended/drift/failed",
    ]);
    let list = ok(&["notify", "target", "list"]);
    let lines: Vec<&str> = list.lines().collect();
    assert!(lines[0].starts_with("ID"), "{list}");
    assert!(
        lines[1].starts_with("chat") && lines[1].contains("slack") && lines[1].ends_with('1'),
        "{list}"
    );
    assert!(
        lines[2].starts_with("ops") && lines[2].contains("defaults"),
        "{list}"
    );
    let shown: Value =
        serde_json::from_str(&ok(&["notify", "target", "show", "ops", "--json"])).unwrap();
    assert_eq!(shown["has_secret"], true);
    assert!(!shown.to_string().contains(SECRET));

    // A test event reaches the receiver; the command reports the first attempt.
    let tested = ok(&["notify", "target", "test", "ops"]);
    assert!(tested.contains("delivered (HTTP 200)"), "{tested}");
    let got = bodies.lock().unwrap().clone();
    assert_eq!(got.len(), 1, "{got:?}");
    let body: Value = serde_json::from_str(&got[0]).unwrap();
    assert_eq!(
        (&body["event"], &body["data"]["target"]),
        (&Value::from("test"), &Value::from("ops"))
    );
    let log = ok(&["notify", "deliveries", "ops"]);
    assert!(log.lines().next().unwrap().starts_with("ID"), "{log}");
    assert!(log.contains("test") && log.contains("delivered"), "{log}");

    // An unreachable target: the test says why and exits non-zero.
    let out = run(&["notify", "target", "test", "chat"]);
    assert!(!out.status.success(), "{}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("failed: cannot connect"),
        "{}",
        describe(&out)
    );

    // Refusals name the problem.
    let out = run(&[
        "notify",
        "target",
        "add",
        "bad",
        "--kind",
        "webhook",
        "--endpoint",
        "ftp://x/y",
        "--secret",
        "s",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("http:// or https://"),
        "{}",
        describe(&out)
    );
    let out = run(&[
        "notify",
        "target",
        "add",
        "bad",
        "--kind",
        "slack",
        "--endpoint",
        &url,
        "--rule",
        "/drift",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("names no event"),
        "{}",
        describe(&out)
    );

    assert_eq!(
        ok(&["notify", "target", "delete", "ops"]),
        "deleted notification target ops\n"
    );
    let out = run(&["notify", "deliveries", "ops"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not found"),
        "{}",
        describe(&out)
    );
}
