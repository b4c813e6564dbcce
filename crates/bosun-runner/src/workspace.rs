//! A phase's workspace: a fresh directory `<work_dir>/<run>-<phase>-<fencing>` (removed
//! afterwards) holding the checkout in `src/`, the environment engine and git commands get,
//! and the backend override that points the engine at the stack's state in Bosun.

use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

use bosun_api::Lease;

/// The file that replaces whatever backend the stack's code declares (an `_override.tf`
/// file's `backend` block takes precedence over the original's).
pub(crate) const BACKEND_OVERRIDE_FILE: &str = "bosun_backend_override.tf";

/// The fallback `PATH` when the runner itself has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

pub(crate) struct Workspace {
    root: PathBuf,
    removed: bool,
    /// The lease note, locked: the workspace is this process's while it is held.
    _note: std::fs::File,
}

impl Workspace {
    /// Creates the workspace of `lease` under `work_dir`, replacing a leftover of the same
    /// name (from a runner that died mid-phase).
    pub(crate) async fn create(work_dir: &Path, lease: &Lease) -> io::Result<Workspace> {
        let name = format!(
            "{}-{}-{}",
            file_name_part(&lease.run_id),
            file_name_part(&lease.phase),
            lease.fencing
        );
        let root = work_dir.join(name);
        if tokio::fs::symlink_metadata(&root).await.is_ok() {
            remove_tree(root.clone()).await?;
        }
        create_private_dir(&root).await?;
        let note = crate::recovery::LeaseNote::of(lease).write(&root).await?;
        Ok(Workspace {
            root,
            removed: false,
            _note: note,
        })
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// Where the repository is cloned.
    pub(crate) fn src(&self) -> PathBuf {
        self.root.join("src")
    }

    /// Removes the workspace and everything in it.
    pub(crate) async fn remove(mut self) -> io::Result<()> {
        self.removed = true;
        remove_tree(self.root.clone()).await
    }

    /// Leaves the workspace on disk: it holds a state the server has not taken yet.
    pub(crate) fn keep(mut self) {
        self.removed = true;
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        // Only on unusual ways out (a panic, a dropped future): the usual one is `remove`.
        if !self.removed {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

async fn remove_tree(path: PathBuf) -> io::Result<()> {
    match tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&path)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Ok(Err(e)) => Err(e),
        Err(join) => Err(io::Error::other(join)),
    }
}

/// Creates `path` (and missing parents) readable by the runner's user only.
pub(crate) async fn create_private_dir(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    let path = path.to_path_buf();
    let made = tokio::task::spawn_blocking(move || {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&path)
    })
    .await;
    match made {
        Ok(result) => result,
        Err(join) => Err(io::Error::other(join)),
    }
}

/// `s` as part of a file name: anything but ASCII letters, digits, `-`, `_` and `.` becomes
/// `_`, so a server-chosen id cannot reach outside the work dir.
fn file_name_part(s: &str) -> String {
    let part: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if part.is_empty() {
        "_".to_string()
    } else {
        part
    }
}

/// The root module's directory for the stack's `path` inside the checkout: relative, no
/// `..`; empty or `.` is the repository root.
pub(crate) fn module_dir(src: &Path, path: &str) -> Result<PathBuf, String> {
    let rel = Path::new(path.trim());
    let mut dir = src.to_path_buf();
    for component in rel.components() {
        match component {
            Component::Normal(part) => dir.push(part),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(format!(
                    "the stack path {path:?} must be relative to the repository root, \
                     without `..`"
                ))
            }
        }
    }
    Ok(dir)
}

/// `s` as an HCL string literal (quotes, backslashes and template sequences escaped).
fn hcl_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '$' | '%' if chars.peek() == Some(&'{') => {
                out.push(c);
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The backend override: the stack's state in Bosun over the `http` backend, locked with
/// LOCK/UNLOCK on the same URL; the password (the run token) comes from
/// `TF_HTTP_PASSWORD`, never from a file.
pub(crate) fn backend_override(state_url: &str) -> String {
    let url = hcl_string(state_url);
    format!(
        "# Written by the Bosun runner: this stack's state lives in Bosun.\n\
         terraform {{\n  backend \"http\" {{\n    address        = {url}\n    \
         lock_address   = {url}\n    unlock_address = {url}\n    \
         lock_method    = \"LOCK\"\n    unlock_method  = \"UNLOCK\"\n    \
         username       = \"bosun\"\n  }}\n}}\n"
    )
}

/// The http backend's retry settings, as environment variables OpenTofu and Terraform
/// (0.13 and later) read: every state request (read, write, lock, unlock) is retried on a
/// connection failure or a 5xx for at least `window`, waiting 1 s, doubling to at most
/// 10 s between tries. So an engine rides out a server restart or a database outage
/// shorter than the window; past it, it gives up and leaves `errored.tfstate`
/// (`recovery`).
pub(crate) fn state_retry_env(window: std::time::Duration) -> Vec<(String, String)> {
    const WAIT_MIN: u64 = 1;
    const WAIT_MAX: u64 = 10;
    let window = window.as_secs();
    // The engines' own default is 2 retries; never fewer.
    let (mut retries, mut waited, mut wait) = (0u64, 0u64, WAIT_MIN);
    while waited < window || retries < 2 {
        waited += wait;
        wait = (wait * 2).min(WAIT_MAX);
        retries += 1;
    }
    vec![
        ("TF_HTTP_RETRY_MAX".to_string(), retries.to_string()),
        ("TF_HTTP_RETRY_WAIT_MIN".to_string(), WAIT_MIN.to_string()),
        ("TF_HTTP_RETRY_WAIT_MAX".to_string(), WAIT_MAX.to_string()),
    ]
}

/// The runner's own `PATH`, which engine and git commands inherit (and nothing else).
pub(crate) fn inherited_path() -> OsString {
    std::env::var_os("PATH")
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| OsString::from(DEFAULT_PATH))
}

/// The variables that give the engine the run's identity: where and with what to ask for
/// an OIDC ID token (`GET URL?audience=AUD` with `Authorization: Bearer TOKEN`).
pub(crate) const ID_TOKEN_REQUEST_URL_VAR: &str = "BOSUN_ID_TOKEN_REQUEST_URL";
pub(crate) const ID_TOKEN_REQUEST_TOKEN_VAR: &str = "BOSUN_ID_TOKEN_REQUEST_TOKEN";

/// The complete environment of an engine command: nothing of the runner's (no server
/// secrets) except `PATH`, a HOME inside the workspace, the automation switches, the run
/// token as the backend password, then the stack's variables; then — so no stack variable
/// can replace them — the run identity's request URL and token (when the lease has a
/// URL), and last what the lease's integrations resolved (`integration_env`, in order).
pub(crate) fn engine_env(
    workspace: &Path,
    lease: &Lease,
    integration_env: &[(String, String)],
) -> Vec<(String, String)> {
    let mut env = vec![
        (
            "PATH".to_string(),
            inherited_path().to_string_lossy().into_owned(),
        ),
        ("HOME".to_string(), workspace.display().to_string()),
        ("TF_IN_AUTOMATION".to_string(), "1".to_string()),
        ("TF_INPUT".to_string(), "0".to_string()),
        ("CHECKPOINT_DISABLE".to_string(), "1".to_string()),
        ("TF_HTTP_PASSWORD".to_string(), lease.run_token.clone()),
    ];
    let mut set = |key: &str, value: &str| {
        env.retain(|(k, _)| k != key);
        env.push((key.to_string(), value.to_string()));
    };
    for (key, value) in &lease.env {
        set(key, value);
    }
    if !lease.id_token_request_url.is_empty() {
        set(ID_TOKEN_REQUEST_URL_VAR, &lease.id_token_request_url);
        set(ID_TOKEN_REQUEST_TOKEN_VAR, &lease.id_token_request_token);
    }
    for (key, value) in integration_env {
        set(key, value);
    }
    env
}

/// The user name that goes with a GitHub App installation token over HTTPS.
const CLONE_TOKEN_USER: &str = "x-access-token";

/// The basic-auth credential git sends for the lease's clone token:
/// `base64("x-access-token:<token>")`.
fn clone_credential(token: &str) -> String {
    base64(format!("{CLONE_TOKEN_USER}:{token}").as_bytes())
}

/// The lease's clone token, when it has one (an empty one is none).
fn clone_token(lease: &Lease) -> Option<&str> {
    lease.clone_token.as_deref().filter(|t| !t.is_empty())
}

/// The shortest value of the lease's `mask` that is masked, in bytes. Masking a shorter
/// one would garble the log (a one-letter secret would star out that letter in every
/// line) and, with only a few bytes to guess, hides next to nothing. So a mask value of
/// 1 to 3 bytes is left unmasked (the phase's log says how many were); bytes, not
/// characters, are counted, so two two-byte characters are masked.
pub(crate) const MIN_MASK_BYTES: usize = 4;

/// The values of `lease` that must never appear in the phase's log or its failure
/// reason: the clone token and the credential git sends for it, the ID-token request
/// token, and the lease's `mask` values (resolved secrets) of at least `MIN_MASK_BYTES`.
/// Empty values are never secrets. The identity tokens integrations fetch are added to
/// the phase's `LogSink` as they arrive.
pub(crate) fn lease_secrets(lease: &Lease) -> Vec<String> {
    let mut secrets = Vec::new();
    if let Some(token) = clone_token(lease) {
        secrets.push(token.to_string());
        secrets.push(clone_credential(token));
    }
    if !lease.id_token_request_token.is_empty() {
        secrets.push(lease.id_token_request_token.clone());
    }
    secrets.extend(
        lease
            .mask
            .iter()
            .filter(|value| value.len() >= MIN_MASK_BYTES)
            .cloned(),
    );
    secrets
}

/// How many of the lease's non-empty `mask` values are too short to be masked.
pub(crate) fn unmasked_short_values(lease: &Lease) -> usize {
    lease
        .mask
        .iter()
        .filter(|value| !value.is_empty() && value.len() < MIN_MASK_BYTES)
        .count()
}

/// The environment of git commands: `PATH`, a HOME inside the workspace (no user config,
/// no stored credentials), and never a prompt for a password. With the lease's clone
/// token, every request carries it as basic auth through git's environment config
/// (`GIT_CONFIG_COUNT`): never in argv, the remote URL or `.git/config`. Credential
/// helpers are then switched off, so a refused token fails the command at once.
pub(crate) fn git_env(workspace: &Path, lease: &Lease) -> Vec<(String, String)> {
    let mut env = vec![
        (
            "PATH".to_string(),
            inherited_path().to_string_lossy().into_owned(),
        ),
        ("HOME".to_string(), workspace.display().to_string()),
        ("GIT_TERMINAL_PROMPT".to_string(), "0".to_string()),
    ];
    if let Some(token) = clone_token(lease) {
        let config = [
            (
                "http.extraHeader".to_string(),
                format!("Authorization: Basic {}", clone_credential(token)),
            ),
            // An empty value empties the list of helpers (a system one included).
            ("credential.helper".to_string(), String::new()),
        ];
        env.push(("GIT_CONFIG_COUNT".to_string(), config.len().to_string()));
        for (i, (key, value)) in config.into_iter().enumerate() {
            env.push((format!("GIT_CONFIG_KEY_{i}"), key));
            env.push((format!("GIT_CONFIG_VALUE_{i}"), value));
        }
    }
    env
}

/// Standard base64 with padding (RFC 4648).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let b = [
            group[0],
            group.get(1).copied().unwrap_or(0),
            group.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= group.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn state_retries_cover_the_window() {
        let retries = |secs| {
            let env = state_retry_env(std::time::Duration::from_secs(secs));
            assert_eq!(env[1], ("TF_HTTP_RETRY_WAIT_MIN".into(), "1".into()));
            assert_eq!(env[2], ("TF_HTTP_RETRY_WAIT_MAX".into(), "10".into()));
            env[0].1.parse::<u64>().unwrap()
        };
        // Waits 1+2+4+8 = 15 s, then 10 s each: 5 minutes take 33 retries (305 s).
        assert_eq!(retries(300), 33);
        assert_eq!(retries(15), 4);
        assert_eq!(retries(16), 5);
        // Never fewer than the engines' own default of 2.
        assert_eq!(retries(0), 2);
    }

    pub(crate) fn lease() -> Lease {
        Lease {
            run_id: "run-1".into(),
            fencing: 3,
            org: "default".into(),
            stack: "net".into(),
            kind: "tracked".into(),
            phase: "plan".into(),
            repository: "file:///tmp/repo".into(),
            clone_url: None,
            clone_token: None,
            branch: "main".into(),
            commit: None,
            path: "".into(),
            engine: "terraform".into(),
            engine_binary: None,
            env: BTreeMap::new(),
            state_url: "http://127.0.0.1:1/state".into(),
            run_token: "secret".into(),
            timeout_seconds: 60,
            heartbeat_seconds: 3,
            id_token_request_url: String::new(),
            id_token_request_token: String::new(),
            integrations: Vec::new(),
            mask: Vec::new(),
            plan_json: true,
        }
    }

    #[tokio::test]
    async fn workspaces_are_fresh_private_and_removed() {
        use std::os::unix::fs::PermissionsExt as _;
        let work = tempfile::tempdir().unwrap();
        let mut l = lease();
        l.run_id = "../../evil/run".into();
        let ws = Workspace::create(work.path(), &l).await.unwrap();
        assert_eq!(ws.root(), work.path().join(".._.._evil_run-plan-3"));
        let mode = std::fs::metadata(ws.root()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::write(ws.root().join("leftover"), "x").unwrap();
        drop(ws);
        assert!(!work.path().join(".._.._evil_run-plan-3").exists());

        let ws = Workspace::create(work.path(), &l).await.unwrap();
        std::fs::create_dir_all(ws.src().join("a/b")).unwrap();
        let root = ws.root().to_path_buf();
        // A leftover of the same name is replaced by an empty directory.
        std::mem::forget(ws);
        let ws = Workspace::create(work.path(), &l).await.unwrap();
        assert!(!ws.src().exists());
        ws.remove().await.unwrap();
        assert!(!root.exists());
    }

    #[test]
    fn module_dirs_stay_inside_the_checkout() {
        let src = Path::new("/w/src");
        assert_eq!(module_dir(src, "").unwrap(), src);
        assert_eq!(module_dir(src, ".").unwrap(), src);
        assert_eq!(
            module_dir(src, "infra/net/").unwrap(),
            src.join("infra/net")
        );
        assert_eq!(module_dir(src, "./a").unwrap(), src.join("a"));
        assert!(module_dir(src, "../x").is_err());
        assert!(module_dir(src, "a/../../x").is_err());
        assert!(module_dir(src, "/etc").is_err());
    }

    #[test]
    fn the_override_escapes_the_url() {
        let text = backend_override("http://h/api/v1/orgs/o/stacks/s/state?x=\"${y}\"");
        assert!(text
            .contains(r#"address        = "http://h/api/v1/orgs/o/stacks/s/state?x=\"$${y}\"""#));
        assert!(text.contains(r#"lock_method    = "LOCK""#));
        assert!(text.contains(r#"username       = "bosun""#));
        assert_eq!(hcl_string(r"a\b%{c}%d"), r#""a\\b%%{c}%d""#);
    }

    #[test]
    fn engine_env_is_minimal_and_takes_the_stack_variables() {
        let mut l = lease();
        l.env.insert("TF_VAR_region".into(), "eu".into());
        l.env.insert("TF_IN_AUTOMATION".into(), "yes".into());
        let env = engine_env(Path::new("/w/ws"), &l, &[]);
        let map: BTreeMap<_, _> = env.iter().cloned().collect();
        assert_eq!(map.len(), env.len(), "no duplicate keys");
        assert_eq!(map["HOME"], "/w/ws");
        assert_eq!(map["TF_HTTP_PASSWORD"], "secret");
        assert_eq!(map["TF_INPUT"], "0");
        assert_eq!(map["CHECKPOINT_DISABLE"], "1");
        assert_eq!(map["TF_VAR_region"], "eu");
        assert_eq!(map["TF_IN_AUTOMATION"], "yes");
        assert!(map.contains_key("PATH"));
        assert_eq!(map.len(), 7);
    }

    #[test]
    fn the_clone_token_reaches_git_only() {
        let mut l = lease();
        let env = git_env(Path::new("/w/ws"), &l);
        let keys: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["PATH", "HOME", "GIT_TERMINAL_PROMPT"]);
        assert!(lease_secrets(&l).is_empty());
        l.clone_token = Some(String::new());
        assert_eq!(git_env(Path::new("/w/ws"), &l).len(), 3);
        assert!(lease_secrets(&l).is_empty());

        l.clone_token = Some("ghs_abc".into());
        let env = git_env(Path::new("/w/ws"), &l);
        let map: BTreeMap<_, _> = env.iter().cloned().collect();
        assert_eq!(map["GIT_TERMINAL_PROMPT"], "0");
        assert_eq!(map["GIT_CONFIG_COUNT"], "2");
        assert_eq!(map["GIT_CONFIG_KEY_0"], "http.extraHeader");
        // base64("x-access-token:ghs_abc")
        assert_eq!(
            map["GIT_CONFIG_VALUE_0"],
            "Authorization: Basic eC1hY2Nlc3MtdG9rZW46Z2hzX2FiYw=="
        );
        assert_eq!(map["GIT_CONFIG_KEY_1"], "credential.helper");
        assert_eq!(map["GIT_CONFIG_VALUE_1"], "");
        assert_eq!(
            lease_secrets(&l),
            ["ghs_abc", "eC1hY2Nlc3MtdG9rZW46Z2hzX2FiYw=="]
        );

        // The engine never sees it.
        l.env.insert("TF_VAR_x".into(), "1".into());
        for (key, value) in engine_env(Path::new("/w/ws"), &l, &[]) {
            assert!(!key.starts_with("GIT_"), "{key}");
            assert!(!value.contains("ghs_abc"), "{key}={value}");
            assert!(!value.contains("eC1hY2Nlc3MtdG9rZW46"), "{key}={value}");
        }
    }

    #[test]
    fn the_run_identity_reaches_the_engine_only_and_wins_over_stack_variables() {
        let mut l = lease();
        l.env
            .insert(ID_TOKEN_REQUEST_URL_VAR.into(), "http://evil/".into());
        l.env
            .insert(ID_TOKEN_REQUEST_TOKEN_VAR.into(), "mine".into());
        l.env.insert("AWS_ROLE_ARN".into(), "arn:stack".into());
        // Without a request URL the lease has no run identity: the stack's values stand.
        let map: BTreeMap<_, _> = engine_env(Path::new("/w"), &l, &[]).into_iter().collect();
        assert_eq!(map[ID_TOKEN_REQUEST_URL_VAR], "http://evil/");

        l.id_token_request_url = "http://bosun/api/v1/runner/runs/r/id-token".into();
        l.id_token_request_token = "idreq-secret".into();
        let integration = [
            (
                "AWS_ROLE_ARN".to_string(),
                "arn:aws:iam::1:role/r".to_string(),
            ),
            ("AWS_ROLE_SESSION_NAME".to_string(), "bosun-r".to_string()),
        ];
        let env = engine_env(Path::new("/w"), &l, &integration);
        let map: BTreeMap<_, _> = env.iter().cloned().collect();
        assert_eq!(map.len(), env.len(), "no duplicate keys");
        assert_eq!(
            map[ID_TOKEN_REQUEST_URL_VAR],
            "http://bosun/api/v1/runner/runs/r/id-token"
        );
        assert_eq!(map[ID_TOKEN_REQUEST_TOKEN_VAR], "idreq-secret");
        assert_eq!(map["AWS_ROLE_ARN"], "arn:aws:iam::1:role/r");
        assert_eq!(map["AWS_ROLE_SESSION_NAME"], "bosun-r");

        // Git gets none of it.
        for (key, value) in git_env(Path::new("/w"), &l) {
            assert!(!key.starts_with("BOSUN_"), "{key}");
            assert!(!value.contains("idreq-secret"), "{key}={value}");
        }
        assert_eq!(lease_secrets(&l), ["idreq-secret"]);
    }

    #[test]
    fn mask_values_are_secrets_unless_empty_or_shorter_than_four_bytes() {
        let mut l = lease();
        l.mask = vec![
            "hunter22".into(),
            String::new(),
            "abc".into(),
            "abcd".into(),
            "éé".into(),
            "é".into(),
        ];
        l.clone_token = Some("ghs_abc".into());
        assert_eq!(
            lease_secrets(&l),
            [
                "ghs_abc",
                "eC1hY2Nlc3MtdG9rZW46Z2hzX2FiYw==",
                "hunter22",
                "abcd",
                "éé"
            ]
        );
        assert_eq!(unmasked_short_values(&l), 2);
    }

    #[test]
    fn base64_matches_the_rfc_vectors() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded, "{plain:?}");
        }
        assert_eq!(base64(&[0xff, 0xfe, 0xfd]), "//79");
    }
}
