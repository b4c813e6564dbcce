//! Host key verification: a pinned `host_key`, or `known_hosts` entries (plain, wildcard,
//! hashed, `@revoked`) under the name OpenSSH would look up.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use hmac::Mac as _;
use russh::client;
use russh::keys::ssh_key::PublicKey;
use russh::keys::{Algorithm, HashAlg, PublicKeyOrCertificate};

use super::connect::{host_address, host_port};
use super::local_user::{expand_home, home_dir};
use crate::connection::ConnError;
use crate::model::Host;

/// The russh handler: it only verifies the server's key.
pub(crate) struct ClientHandler {
    pub(super) host: String,
    pub(super) policy: HostKeyPolicy,
    /// How the key was trusted, for the host check's report.
    pub(super) trust: Arc<std::sync::Mutex<String>>,
}

/// A handshake failure: a refused host key (with the reason) or anything else.
#[derive(Debug)]
pub(crate) enum HandshakeError {
    HostKey(String),
    Ssh(russh::Error),
}

impl From<russh::Error> for HandshakeError {
    fn from(e: russh::Error) -> Self {
        HandshakeError::Ssh(e)
    }
}

impl client::Handler for ClientHandler {
    type Error = HandshakeError;

    async fn check_server_key(
        &mut self,
        server_key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let key = match server_key {
            PublicKeyOrCertificate::PublicKey { key, .. } => key,
            PublicKeyOrCertificate::Certificate(_) => {
                return Err(HandshakeError::HostKey(
                    "the server presented a host certificate, which Bosun does not verify; pin its host key instead".into(),
                ))
            }
        };
        match self.policy.verify(key) {
            Ok(how) => {
                if let Ok(mut trust) = self.trust.lock() {
                    *trust = how;
                }
                Ok(true)
            }
            Err(reason) => {
                tracing::warn!(host = %self.host, "refusing host key: {reason}");
                Err(HandshakeError::HostKey(reason))
            }
        }
    }
}

/// How a host's key is judged.
#[derive(Debug)]
pub(super) enum HostKeyPolicy {
    Pinned(PublicKey),
    KnownHosts {
        /// The name OpenSSH looks up: `address` or `[address]:port`.
        name: String,
        /// `ssh-keyscan` arguments for the advice.
        keyscan: String,
        files: Vec<PathBuf>,
        /// The entries for `name`, in file order.
        entries: Vec<KnownHost>,
    },
}

#[derive(Debug, Clone)]
pub(super) struct KnownHost {
    file: PathBuf,
    line: usize,
    revoked: bool,
    key: PublicKey,
}

impl HostKeyPolicy {
    pub(super) fn for_host(host: &Host) -> Result<Self, ConnError> {
        if let Some(pinned) = &host.host_key {
            let key = PublicKey::from_openssh(pinned.trim()).map_err(|e| ConnError::HostKey {
                host: host.name.clone(),
                reason: format!(
                    "the pinned host_key is not an OpenSSH public key (`ssh-ed25519 AAAA…`): {e}"
                ),
            })?;
            return Ok(HostKeyPolicy::Pinned(key));
        }
        let address = host_address(host);
        let port = host_port(host);
        let name = if port == 22 {
            address.to_string()
        } else {
            format!("[{address}]:{port}")
        };
        let keyscan = if port == 22 {
            address.to_string()
        } else {
            format!("-p {port} {address}")
        };
        let files = match &host.known_hosts {
            Some(path) => vec![expand_home(path)],
            None => {
                let mut files = Vec::new();
                if let Some(home) = home_dir() {
                    files.push(home.join(".ssh").join("known_hosts"));
                }
                files.push(PathBuf::from("/etc/ssh/ssh_known_hosts"));
                files
            }
        };
        let mut entries = Vec::new();
        for file in &files {
            // A missing or unreadable file knows no host; the refusal names it.
            if let Ok(text) = std::fs::read_to_string(file) {
                entries.extend(known_hosts_entries(&text, &name, file));
            }
        }
        Ok(HostKeyPolicy::KnownHosts {
            name,
            keyscan,
            files,
            entries,
        })
    }

    /// The default host key algorithms, those this host is known by first.
    pub(super) fn preferred_algorithms(&self) -> Vec<Algorithm> {
        let known: Vec<&PublicKey> = match self {
            HostKeyPolicy::Pinned(key) => vec![key],
            HostKeyPolicy::KnownHosts { entries, .. } => entries
                .iter()
                .filter(|e| !e.revoked)
                .map(|e| &e.key)
                .collect(),
        };
        let defaults = russh::Preferred::DEFAULT.key.to_vec();
        let (mut first, rest): (Vec<Algorithm>, Vec<Algorithm>) = defaults
            .into_iter()
            .partition(|alg| known.iter().any(|k| same_type(&k.algorithm(), alg)));
        first.extend(rest);
        first
    }

    /// `Ok(how it is trusted)` or `Err(why not)`.
    fn verify(&self, key: &PublicKey) -> Result<String, String> {
        let presented = describe(key);
        match self {
            HostKeyPolicy::Pinned(pinned) => {
                if pinned.key_data() == key.key_data() {
                    Ok(format!("{presented} matches the pinned host_key"))
                } else {
                    Err(format!(
                        "the server's key {presented} does not match the pinned host_key {}: possible man-in-the-middle (if the host was rebuilt, pin its new key)",
                        describe(pinned)
                    ))
                }
            }
            HostKeyPolicy::KnownHosts {
                name,
                keyscan,
                files,
                entries,
            } => {
                if let Some(e) = entries
                    .iter()
                    .find(|e| e.revoked && e.key.key_data() == key.key_data())
                {
                    return Err(format!(
                        "the server's key {presented} is marked @revoked in {} line {}",
                        e.file.display(),
                        e.line
                    ));
                }
                if let Some(e) = entries
                    .iter()
                    .find(|e| !e.revoked && e.key.key_data() == key.key_data())
                {
                    return Ok(format!(
                        "{presented} matches {} line {}",
                        e.file.display(),
                        e.line
                    ));
                }
                if let Some(e) = entries
                    .iter()
                    .find(|e| !e.revoked && same_type(&e.key.algorithm(), &key.algorithm()))
                {
                    return Err(format!(
                        "the server's key {presented} for {name} does not match the one in {} line {} ({}): possible man-in-the-middle (if the host was rebuilt, check the new key and replace that line)",
                        e.file.display(),
                        e.line,
                        describe(&e.key)
                    ));
                }
                let file = files
                    .first()
                    .map(|f| f.display().to_string())
                    .unwrap_or_else(|| "~/.ssh/known_hosts".into());
                let others = if entries.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (it is known there only by other key types: {})",
                        entries
                            .iter()
                            .map(|e| e.key.algorithm().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                };
                Err(format!(
                    "the server's key {presented} for {name} is not in known_hosts ({}){others}: add it with `ssh-keyscan {keyscan} >> {file}` after checking its fingerprint, or pin host_key",
                    files
                        .iter()
                        .map(|f| f.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            }
        }
    }
}

/// `ssh-ed25519 SHA256:…`.
fn describe(key: &PublicKey) -> String {
    format!("{} {}", key.algorithm(), key.fingerprint(HashAlg::Sha256))
}

/// Whether two algorithms are the same key type (every RSA signature hash is one type).
fn same_type(a: &Algorithm, b: &Algorithm) -> bool {
    match (a, b) {
        (Algorithm::Rsa { .. }, Algorithm::Rsa { .. }) => true,
        _ => a == b,
    }
}

/// The entries of a known_hosts file that apply to `name`. Lines that do not parse are
/// skipped (as OpenSSH does); `@cert-authority` lines are ignored (certificates are not
/// accepted anyway).
fn known_hosts_entries(text: &str, name: &str, file: &Path) -> Vec<KnownHost> {
    let mut found = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.split_whitespace();
        let mut first = fields.next().unwrap_or_default();
        let mut revoked = false;
        if first.starts_with('@') {
            match first {
                "@revoked" => revoked = true,
                _ => continue,
            }
            first = fields.next().unwrap_or_default();
        }
        let (Some(kind), Some(data)) = (fields.next(), fields.next()) else {
            continue;
        };
        if !patterns_match(first, name) {
            continue;
        }
        let Ok(key) = PublicKey::from_openssh(&format!("{kind} {data}")) else {
            continue;
        };
        found.push(KnownHost {
            file: file.to_path_buf(),
            line: index + 1,
            revoked,
            key,
        });
    }
    found
}

/// OpenSSH's host pattern list: comma-separated patterns with `*` and `?`, `!` negating
/// (a negated match excludes the line), or one hashed `|1|salt|hash` name.
fn patterns_match(patterns: &str, name: &str) -> bool {
    if let Some(hashed) = patterns.strip_prefix("|1|") {
        return hashed_match(hashed, name);
    }
    let mut matched = false;
    for pattern in patterns.split(',') {
        if let Some(negated) = pattern.strip_prefix('!') {
            if glob(negated.as_bytes(), name.as_bytes()) {
                return false;
            }
        } else if glob(pattern.as_bytes(), name.as_bytes()) {
            matched = true;
        }
    }
    matched
}

fn hashed_match(hashed: &str, name: &str) -> bool {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut parts = hashed.splitn(2, '|');
    let (Some(salt), Some(hash)) = (parts.next(), parts.next()) else {
        return false;
    };
    let (Ok(salt), Ok(hash)) = (b64.decode(salt), b64.decode(hash)) else {
        return false;
    };
    let Ok(mut mac) = hmac::Hmac::<sha1::Sha1>::new_from_slice(&salt) else {
        return false;
    };
    mac.update(name.as_bytes());
    mac.verify_slice(&hash).is_ok()
}

/// Case-insensitive glob with `*` and `?` (host names are case-insensitive).
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || text.get(t).is_some_and(|x| x.eq_ignore_ascii_case(&c)) => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern
        .get(p..)
        .is_some_and(|rest| rest.iter().all(|&c| c == b'*'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_patterns() {
        assert!(patterns_match("web-1,10.0.0.1", "10.0.0.1"));
        assert!(patterns_match("[127.0.0.1]:2222", "[127.0.0.1]:2222"));
        assert!(!patterns_match("127.0.0.1", "[127.0.0.1]:2222"));
        assert!(patterns_match("*.example.com", "web.EXAMPLE.com"));
        assert!(!patterns_match(
            "*.example.com,!bad.example.com",
            "bad.example.com"
        ));
        assert!(patterns_match("web-?", "web-7"));
        assert!(!patterns_match("web-?", "web-17"));
        // `ssh-keygen -H` of "example.com" (from OpenSSH's own format).
        assert!(patterns_match(
            "|1|O33ESRMWPVkMYIwJ1Uw+n877jTo=|nuuC5vEqXlEZ/8BXQR7m619W6Ak=",
            "example.com"
        ));
        assert!(!patterns_match(
            "|1|O33ESRMWPVkMYIwJ1Uw+n877jTo=|nuuC5vEqXlEZ/8BXQR7m619W6Ak=",
            "example.org"
        ));
    }

    #[test]
    fn known_hosts_lines() {
        let text = "\
# comment
@cert-authority *.example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJdD7y3aLq454yWBdwLWbieU1ebz9/cu7/QEXn9OIeZJ
[h]:2222\tssh-ed25519   AAAAC3NzaC1lZDI1NTE5AAAAIJdD7y3aLq454yWBdwLWbieU1ebz9/cu7/QEXn9OIeZJ comment
[h]:2222 ssh-ed25519 not-base64
@revoked [h]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA6rWI3G1sz07DnfFlrouTcysQlj2P+jpNSOEWD9OJ3X
h ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILIG2T/B0l0gaqj3puu510tu9N1OkQ4znY3LYuEm5zCF
";
        let found = known_hosts_entries(text, "[h]:2222", Path::new("kh"));
        assert_eq!(
            found
                .iter()
                .map(|e| (e.line, e.revoked))
                .collect::<Vec<_>>(),
            vec![(3, false), (5, true)]
        );
    }
}
