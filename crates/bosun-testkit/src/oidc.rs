//! A real OpenID Provider for sign-in tests: `oidc-provider` (the certified Node.js
//! implementation, installed by `scripts/test.sh` into `target/npm`), run on loopback by
//! `oidc_provider.mjs` with the clients and users a test gives, and driven through its
//! test endpoints: replace users (their groups), rotate the signing key, tamper with the
//! next ID token, list the token and end-session requests it saw.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

/// The provider's script, written next to the npm install so Node finds its packages.
const SCRIPT: &str = include_str!("oidc_provider.mjs");

/// The npm package the provider is (`scripts/test.sh` installs it).
pub const PACKAGE: &str = "oidc-provider";

/// Where `scripts/test.sh` installs npm packages: `target/npm` under the workspace root.
fn npm_dir() -> PathBuf {
    match std::env::var_os("BOSUN_NPM_DIR") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/npm")),
    }
}

/// `true` when Node.js and the `oidc-provider` package are here. Otherwise announces
/// `SKIPPED (tool missing): oidc-provider` on stderr and returns `false` — or, with
/// `BOSUN_REQUIRE_TOOLS=1`, fails.
pub fn require_oidc_provider() -> bool {
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let package = npm_dir()
        .join("node_modules/oidc-provider/package.json")
        .is_file();
    if node && package {
        return true;
    }
    if std::env::var("BOSUN_REQUIRE_TOOLS").as_deref() == Ok("1") {
        panic!(
            "oidc-provider is required (BOSUN_REQUIRE_TOOLS=1) but {} is missing: run scripts/test.sh",
            if node { "the npm package" } else { "node" }
        );
    }
    let _ = writeln!(std::io::stderr(), "SKIPPED (tool missing): oidc-provider");
    false
}

/// The script, written once per process next to the npm install (named by its content,
/// so processes writing it at once write the same bytes to the same place).
fn script_path() -> PathBuf {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        use sha2::{Digest, Sha256};
        let dir = npm_dir();
        let tag = hex::encode(&Sha256::digest(SCRIPT.as_bytes())[..6]);
        let script = dir.join(format!("bosun_oidc_provider-{tag}.mjs"));
        let tmp = dir.join(format!(
            "bosun_oidc_provider-{tag}.{}.tmp",
            std::process::id()
        ));
        std::fs::write(&tmp, SCRIPT).expect("write the provider's script");
        std::fs::rename(&tmp, &script).expect("place the provider's script");
        script
    })
    .clone()
}

/// A running provider; stopped when dropped.
pub struct OpenIdProvider {
    child: Child,
    /// `http://127.0.0.1:PORT`: its issuer, and the base of every endpoint.
    pub issuer: String,
    http: reqwest::Client,
}

impl OpenIdProvider {
    /// Starts the provider with `users` (account id → claims) and no client yet.
    pub fn start(users: Value) -> OpenIdProvider {
        Self::spawn(users, true)
    }

    /// Starts a provider like [`Self::start`], but one that offers no device authorization
    /// grant (its discovery names no endpoint for it).
    pub fn start_without_device_flow(users: Value) -> OpenIdProvider {
        Self::spawn(users, false)
    }

    fn spawn(users: Value, device_flow: bool) -> OpenIdProvider {
        let script = script_path();
        let config = serde_json::json!({"clients": [], "users": users, "device_flow": device_flow});
        let mut child = Command::new("node")
            .arg(&script)
            .env("OP_CONFIG", config.to_string())
            .env("NODE_NO_WARNINGS", "1")
            .stdout(Stdio::piped())
            .stderr(if std::env::var_os("BOSUN_OP_DEBUG").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .spawn()
            .expect("start node");
        let stdout = child.stdout.take().expect("the provider's stdout");
        let mut line = String::new();
        let mut out = BufReader::new(stdout);
        out.read_line(&mut line).expect("read the provider's port");
        // Whatever it prints later is drained, so it never writes into a closed pipe.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        let port: u16 = line
            .trim()
            .strip_prefix("listening ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the provider did not start: {line:?}"));
        OpenIdProvider {
            child,
            issuer: format!("http://127.0.0.1:{port}"),
            // No pooled connections: Node closes an idle one after 5 s, and a request
            // sent on it as it closes fails.
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .build()
                .expect("an HTTP client"),
        }
    }

    async fn post(&self, path: &str, body: Value) {
        let reply = self
            .http
            .post(format!("{}/__test/{path}", self.issuer))
            .json(&body)
            .send()
            .await
            .expect("reach the provider");
        assert!(
            reply.status().is_success(),
            "the provider refused /__test/{path}: {}",
            reply.status()
        );
    }

    /// Replaces the registered clients (oidc-provider's client metadata).
    pub async fn set_clients(&self, clients: Value) {
        self.post("clients", clients).await
    }

    /// Replaces the users: account id → claims (`email`, `groups`, …).
    pub async fn set_users(&self, users: Value) {
        self.post("users", users).await
    }

    /// A new signing key signs from now on (the old one stays published).
    pub async fn rotate_keys(&self) {
        self.post("rotate", serde_json::json!({})).await
    }

    /// The next ID token is re-signed with one thing wrong: `aud`, `expired`,
    /// `signature`, `nonce`, `hs256` (a shared secret) or `none` (unsigned).
    pub async fn tamper_next(&self, mode: &str) {
        self.post("tamper", serde_json::json!({ "mode": mode }))
            .await
    }

    /// The token and end-session requests it saw, in order (`{path, method}`).
    pub async fn requests(&self) -> Vec<Value> {
        self.http
            .get(format!("{}/__test/requests", self.issuer))
            .send()
            .await
            .expect("reach the provider")
            .json()
            .await
            .expect("the provider's request list")
    }
}

impl Drop for OpenIdProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
