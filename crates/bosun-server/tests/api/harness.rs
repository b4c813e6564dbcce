//! Boots a server for one test and sends requests to it.

use bosun_core::Role;
use bosun_server::{ConfigOverrides, FileConfig, RunningServer, ServerConfig};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

pub const BOOTSTRAP: &str = "bootstrap-token-for-tests-0123456789abcdef";

pub struct TestServer {
    pub server: RunningServer,
    pub url: String,
    pub admin: String,
    pub client: reqwest::Client,
    _dir: tempfile::TempDir,
}

pub struct Reply {
    pub status: StatusCode,
    pub body: Value,
}

impl Reply {
    /// The error code of an error reply.
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }
    pub fn message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or("")
    }
}

impl TestServer {
    /// What `/metrics` answers now.
    pub async fn metrics_text(&self) -> String {
        self.client
            .get(format!("{}/metrics", self.url))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(tweak: impl FnOnce(&mut ServerConfig)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut config = ServerConfig::merge(
            ConfigOverrides {
                listen: Some("127.0.0.1:0".parse().unwrap()),
                data_dir: Some(dir.path().to_path_buf()),
                bootstrap_token: Some(BOOTSTRAP.into()),
                ..Default::default()
            },
            FileConfig::default(),
        )
        .unwrap();
        tweak(&mut config);
        let server = RunningServer::start(config).await.unwrap();
        TestServer {
            url: format!("http://{}", server.local_addr),
            server,
            admin: BOOTSTRAP.into(),
            client: reqwest::Client::new(),
            _dir: dir,
        }
    }

    /// Environment `id` of org `default`, written straight to the store (seed data).
    pub async fn seed_environment(&self, id: &str, requires_approval: bool, protected: bool) {
        let env = bosun_store::NewEnvironment {
            org: "default".into(),
            id: id.into(),
            vars: Default::default(),
            requires_approval,
            protected,
            hosts_from: None,
        };
        let store = &self.server.state().store;
        store.create_environment(&env, &seed_audit()).await.unwrap();
    }

    /// An SSH host of org `default` at 127.0.0.1:22 with one label, written straight to
    /// the store (seed data).
    pub async fn seed_host(&self, name: &str, label: &str, environment: Option<&str>) {
        let host = bosun_store::NewHost {
            org: "default".into(),
            name: name.into(),
            address: "127.0.0.1".into(),
            port: 22,
            user: None,
            connection: "ssh".into(),
            labels: vec![label.into()],
            vars: Default::default(),
            environment: environment.map(str::to_string),
            identity_file: None,
            host_key: None,
            known_hosts: None,
            proxy_jump: None,
        };
        let store = &self.server.state().store;
        store.create_host(&host, &seed_audit()).await.unwrap();
    }

    /// Plan `name` of org `default` with `source`, written straight to the store (seed
    /// data: not parsed, and no schedule taken from it).
    pub async fn seed_plan(&self, name: &str, source: &str) {
        let plan = bosun_store::NewPlan {
            org: "default".into(),
            name: name.into(),
            source: source.into(),
            schedule: None,
            on_stack_change: None,
        };
        let store = &self.server.state().store;
        store.save_plan(&plan, &seed_audit()).await.unwrap();
    }

    /// Shuts the server down; its data dir lives on with the returned handle.
    pub async fn shutdown(self) -> tempfile::TempDir {
        self.server.shutdown().await.unwrap();
        self._dir
    }

    /// Sends a JSON request (`body` serialized when given) and decodes the JSON reply.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        let mut req = self.client.request(method, format!("{}{}", self.url, path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        Self::decode(req.send().await.unwrap()).await
    }

    /// Sends raw bytes with a content type.
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        token: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> Reply {
        let mut req = self
            .client
            .request(method, format!("{}{}", self.url, path))
            .bearer_auth(token)
            .body(body);
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        Self::decode(req.send().await.unwrap()).await
    }

    async fn decode(resp: reqwest::Response) -> Reply {
        let status = resp.status();
        let text = resp.text().await.unwrap();
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text)
                .unwrap_or_else(|_| panic!("non-JSON reply {status}: {text}"))
        };
        Reply { status, body }
    }

    pub async fn get(&self, path: &str, token: &str) -> Reply {
        self.call(Method::GET, path, Some(token), None).await
    }

    pub async fn post(&self, path: &str, token: &str, body: Value) -> Reply {
        self.call(Method::POST, path, Some(token), Some(body)).await
    }

    /// Creates a user with `role` in org `default` (or no membership) and returns a
    /// personal token for them.
    pub async fn user_token(&self, user: &str, role: Option<Role>) -> String {
        let r = self
            .post("/api/v1/users", &self.admin, json!({"id": user}))
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        if let Some(role) = role {
            let r = self
                .call(
                    Method::PUT,
                    &format!("/api/v1/orgs/default/members/{user}"),
                    Some(&self.admin),
                    Some(json!({"role": role.as_str()})),
                )
                .await;
            assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        }
        let r = self
            .post(
                "/api/v1/tokens",
                &self.admin,
                json!({"user": user, "description": "test"}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        r.body["secret"].as_str().unwrap().to_string()
    }

    /// Registers a runner `name` in the server's hosted pool; returns its id.
    pub async fn hosted_runner(&self, name: &str) -> String {
        let r = self
            .post(
                "/api/v1/runner/register",
                &self.server.hosted_runner_token,
                json!({"name": name}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        r.body["runner_id"].as_str().unwrap().to_string()
    }

    pub async fn create_stack(&self, body: Value) -> Reply {
        self.post("/api/v1/orgs/default/stacks", &self.admin, body)
            .await
    }

    /// The number of audit records across the server (read from the store).
    pub async fn audit_total(&self) -> usize {
        self.server
            .state()
            .store
            .list_audit(None, None, 100_000)
            .await
            .unwrap()
            .len()
    }
}

/// The audit entry of seed data written straight to the store.
pub fn seed_audit() -> bosun_store::Audit {
    bosun_store::Audit {
        org: Some("default".into()),
        actor: "user:test".into(),
        token_id: None,
        action: "test.seed".into(),
        target: "seed".into(),
        detail: json!({}),
    }
}

/// Polls `done` every 20 ms until it holds (deadline 20 s), saying `what` if it never does.
pub async fn eventually<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while !done().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} never happened"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
