//! The real `bosun server` serving HTTPS with certificates made in the test: client
//! commands verify it (`--ca-file`; another CA is refused with a message saying what to
//! do), a renewed certificate is served after SIGHUP without a restart, and runs with the
//! real Terraform go through end to end over TLS — on a separate `bosun runner` given the
//! CA, whose engine's http backend trusts it too, and on the server's embedded runners.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use bosun_testkit::tls::TestCa;
use serde_json::Value;
use support::{terraform_or_skip, ServerProcess, BIN};

/// The module every stack runs here: outputs only, no providers.
const MAIN_TF: &str = r#"output "greeting" {
  value = "hello over tls"
}
"#;

/// A temp dir with a CA and the server's certificate (for 127.0.0.1) in it.
struct Tls {
    dir: tempfile::TempDir,
    ca: TestCa,
}

impl Tls {
    /// With `full_chain`, the certificate file holds the CA after the server's
    /// certificate, as a deployment's full-chain file does.
    fn new(full_chain: bool) -> Tls {
        let dir = tempfile::Builder::new()
            .prefix("bosun-tls-")
            .tempdir()
            .unwrap();
        let ca = TestCa::new("bosun test CA");
        std::fs::write(dir.path().join("ca.pem"), &ca.cert_pem).unwrap();
        let cert = ca.server_cert(&["127.0.0.1", "localhost"]);
        cert.write(
            &dir.path().join("server.crt"),
            &dir.path().join("server.key"),
        );
        if full_chain {
            let chain = format!("{}{}", cert.cert_pem, ca.cert_pem);
            std::fs::write(dir.path().join("server.crt"), chain).unwrap();
        }
        Tls { dir, ca }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn server(&self, extra: &[&str]) -> ServerProcess {
        let cert = self.path("server.crt");
        let key = self.path("server.key");
        let mut args = vec![
            "--tls-cert-file",
            cert.to_str().unwrap(),
            "--tls-key-file",
            key.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let server = ServerProcess::start(&self.path("data"), &args, &[]);
        assert!(server.tls, "the server says it listens on https");
        server
    }
}

impl Drop for Tls {
    fn drop(&mut self) {
        support::kill_processes_under(self.dir.path());
    }
}

/// `bosun ARGS` against `server`, trusting `ca` (when given).
fn cli(server: &ServerProcess, ca: Option<&Path>, args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env("BOSUN_URL", server.url())
        .env("BOSUN_TOKEN", server.admin_token())
        .env_remove("BOSUN_ORG")
        .env_remove("BOSUN_CA_FILE")
        .stdin(Stdio::null());
    if let Some(ca) = ca {
        cmd.env("BOSUN_CA_FILE", ca);
    }
    cmd.output().unwrap()
}

fn ok_json(server: &ServerProcess, ca: &Path, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = cli(server, Some(ca), &all);
    assert!(
        out.status.success(),
        "bosun {args:?} failed: {}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        tail(server)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn tail(server: &ServerProcess) -> String {
    let log = server.log.lock().unwrap();
    log[log.len().saturating_sub(40)..].join("\n")
}

#[test]
fn client_commands_verify_the_server_certificate() {
    let tls = Tls::new(false);
    let server = tls.server(&["--local-runners", "0"]);
    assert!(server.url().starts_with("https://"));

    let who = ok_json(&server, &tls.path("ca.pem"), &["whoami"]);
    assert!(who.is_object(), "{who}");

    // The same command trusting another CA, or only the public roots, is refused with
    // what to do about it.
    std::fs::write(tls.path("other.pem"), TestCa::new("other CA").cert_pem).unwrap();
    for ca in [Some(tls.path("other.pem")), None] {
        let out = cli(&server, ca.as_deref(), &["whoami"]);
        assert!(!out.status.success(), "trusting {ca:?} must fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("does not trust"), "{err}");
        assert!(err.contains("--ca-file"), "{err}");
    }
    // A CA file that is not one is refused before any request, naming it.
    std::fs::write(tls.path("junk.pem"), "junk").unwrap();
    let out = cli(&server, Some(&tls.path("junk.pem")), &["whoami"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("junk.pem"), "{err}");
}

#[test]
fn sighup_serves_a_renewed_certificate_without_a_restart() {
    let tls = Tls::new(false);
    // File checks far apart: only the signal can make the renewal show within the test.
    let server = tls.server(&["--local-runners", "0", "--tls-reload-interval", "1h"]);
    let pid = server.child.id();

    let renewed = TestCa::new("renewed CA");
    std::fs::write(tls.path("renewed.pem"), &renewed.cert_pem).unwrap();
    renewed
        .server_cert(&["127.0.0.1"])
        .write(&tls.path("server.crt"), &tls.path("server.key"));
    server.signal(libc::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cli(&server, Some(&tls.path("renewed.pem")), &["whoami"])
        .status
        .success()
    {
        assert!(
            Instant::now() < deadline,
            "the renewed certificate was never served; log:\n{}",
            tail(&server)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        !cli(&server, Some(&tls.path("ca.pem")), &["whoami"])
            .status
            .success(),
        "the old certificate is no longer served"
    );
    assert_eq!(server.child.id(), pid);
    assert!(server.log_text().contains("TLS certificate reloaded"));
    let _ = &tls.ca;
}

/// A bare repository holding `MAIN_TF`, as a `file://` URL.
fn repository(tls: &Tls) -> String {
    support::bare_repository(tls.dir.path(), MAIN_TF)
}

/// Triggers a run of an autodeploy stack and waits until it has finished; returns the
/// state versions.
fn run_to_the_end(server: &ServerProcess, ca: &Path, stack: &str) -> Vec<Value> {
    let run = ok_json(server, ca, &["run", "trigger", stack]);
    let id = run["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let r = ok_json(server, ca, &["run", "show", &id]);
        match r["state"].as_str().unwrap() {
            "finished" => break,
            "failed" | "force_failed" | "canceled" | "interrupted" | "discarded" => {
                let logs = cli(server, Some(ca), &["run", "logs", &id]);
                panic!(
                    "run {id} ended {r:#}\nrun log:\n{}\nserver log:\n{}",
                    String::from_utf8_lossy(&logs.stdout),
                    tail(server)
                );
            }
            _ => {}
        }
        assert!(Instant::now() < deadline, "run {id} did not finish: {r:#}");
        std::thread::sleep(Duration::from_millis(200));
    }
    ok_json(server, ca, &["state", "versions", stack])["items"]
        .as_array()
        .unwrap()
        .clone()
}

fn create_stack(
    server: &ServerProcess,
    ca: &Path,
    id: &str,
    repo: &str,
    tf: &Path,
    extra: &[&str],
) {
    let mut args = vec![
        "stack",
        "create",
        id,
        "--repository",
        repo,
        "--engine",
        "terraform",
        "--engine-binary",
        tf.to_str().unwrap(),
        "--autodeploy",
    ];
    args.extend_from_slice(extra);
    ok_json(server, ca, &args);
}

/// A child process killed when dropped.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_separate_runner_given_the_ca_runs_terraform_against_the_tls_server() {
    let Some(tf) = terraform_or_skip() else {
        return;
    };
    let tls = Tls::new(false);
    let server = tls.server(&["--local-runners", "0"]);
    let ca = tls.path("ca.pem");
    let repo = repository(&tls);
    create_stack(&server, &ca, "edge", &repo, &tf, &["--runner-pool", "edge"]);
    let pool = ok_json(&server, &ca, &["token", "create", "--pool", "edge"])["secret"]
        .as_str()
        .unwrap()
        .to_string();

    let runner_log = std::fs::File::create(tls.path("runner.log")).unwrap();
    let _runner = KillOnDrop(
        Command::new(BIN)
            .args(["runner", "--server", &server.url(), "--token", &pool])
            .arg("--ca-file")
            .arg(&ca)
            .arg("--work-dir")
            .arg(tls.path("runner-work"))
            .args(["--name", "edge-tls"])
            .env_remove("BOSUN_TOKEN")
            .env_remove("BOSUN_URL")
            .env_remove("BOSUN_RUNNER_TOKEN")
            .env_remove("BOSUN_CA_FILE")
            .env_remove("SSL_CERT_FILE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(runner_log)
            .spawn()
            .unwrap(),
    );

    let versions = run_to_the_end(&server, &ca, "edge");
    assert_eq!(
        versions.len(),
        1,
        "the engine wrote state over https: {versions:#?}"
    );
    assert_eq!(
        versions[0]["outputs"]["greeting"]["value"], "hello over tls",
        "{versions:#?}"
    );
}

#[test]
fn the_embedded_runners_run_terraform_against_their_tls_server() {
    let Some(tf) = terraform_or_skip() else {
        return;
    };
    // Nothing but the full chain: the embedded runners and their engine trust it.
    let tls = Tls::new(true);
    let server = tls.server(&["--local-runners", "1"]);
    let ca = tls.path("ca.pem");
    let repo = repository(&tls);
    create_stack(&server, &ca, "web", &repo, &tf, &[]);
    let versions = run_to_the_end(&server, &ca, "web");
    assert_eq!(versions.len(), 1, "{versions:#?}");
    assert_eq!(
        versions[0]["outputs"]["greeting"]["value"],
        "hello over tls"
    );
}
