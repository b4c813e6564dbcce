//! The stages of a connection — resolve, TCP connect (or, behind a bastion, a channel
//! through it: `jump.rs`), SSH handshake, authentication — each within a time limit;
//! [`super::SshConnection::connect`] and the host check run them in turn.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use russh::client::{self, Handle};
use russh::keys::{HashAlg, PrivateKeyWithHashAlg};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::host_keys::{ClientHandler, HandshakeError, HostKeyPolicy};
use super::local_user::{expand_home, home_dir, local_user};
use crate::connection::ConnError;
use crate::model::Host;

/// Resolves the host's address to socket addresses.
pub(crate) async fn resolve(host: &Host, limit: Duration) -> Result<Vec<SocketAddr>, ConnError> {
    let address = host_address(host);
    let port = host_port(host);
    let fail = |reason: String| ConnError::Resolve {
        host: address.to_string(),
        reason,
    };
    if address.is_empty() {
        return Err(fail("the host has no address".into()));
    }
    let lookup = tokio::net::lookup_host((address.to_string(), port));
    match tokio::time::timeout(limit, lookup).await {
        Err(_) => Err(fail(format!("no answer in {}", secs(limit)))),
        Ok(Err(e)) => Err(fail(e.to_string())),
        Ok(Ok(addrs)) => {
            let addrs: Vec<SocketAddr> = addrs.collect();
            if addrs.is_empty() {
                Err(fail("no addresses".into()))
            } else {
                Ok(addrs)
            }
        }
    }
}

/// Opens a TCP connection to the first address that answers.
pub(crate) async fn tcp_connect(
    host: &Host,
    addrs: &[SocketAddr],
    limit: Duration,
) -> Result<(TcpStream, SocketAddr), ConnError> {
    let mut last = String::from("no address to try");
    for addr in addrs {
        match tokio::time::timeout(limit, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok((stream, *addr));
            }
            Ok(Err(e)) => last = format!("{addr}: {e}"),
            Err(_) => last = format!("{addr}: no answer in {}", secs(limit)),
        }
    }
    Err(ConnError::Connect {
        addr: format!("{}:{}", host_address(host), host_port(host)),
        reason: last,
    })
}

/// Runs the SSH handshake on `stream` (a TCP connection, or a channel through the host's
/// bastion), verifying the host key — the same way either way. Returns the session and
/// how the key was trusted ("matches the pinned host_key", "known_hosts FILE line N").
pub(crate) async fn handshake<S>(
    host: &Host,
    stream: S,
    limit: Duration,
) -> Result<(Handle<ClientHandler>, String), ConnError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let policy = HostKeyPolicy::for_host(host)?;
    let mut config = client::Config {
        keepalive_interval: Some(Duration::from_secs(15)),
        keepalive_max: 4,
        nodelay: true,
        ..client::Config::default()
    };
    config.preferred.key = Cow::Owned(policy.preferred_algorithms());
    let trust = Arc::new(std::sync::Mutex::new(String::new()));
    let handler = ClientHandler {
        host: host.name.clone(),
        policy,
        trust: Arc::clone(&trust),
    };
    let connect = client::connect_stream(Arc::new(config), stream, handler);
    let handle = match tokio::time::timeout(limit, connect).await {
        Err(_) => {
            return Err(ConnError::Connect {
                addr: endpoint(host),
                reason: format!("no SSH handshake in {}", secs(limit)),
            })
        }
        Ok(Err(HandshakeError::HostKey(reason))) => {
            return Err(ConnError::HostKey {
                host: host.name.clone(),
                reason,
            })
        }
        Ok(Err(HandshakeError::Ssh(e))) => {
            return Err(ConnError::Connect {
                addr: endpoint(host),
                reason: format!("SSH handshake failed: {e}"),
            })
        }
        Ok(Ok(handle)) => handle,
    };
    let trust = trust.lock().map(|t| t.clone()).unwrap_or_default();
    Ok((handle, trust))
}

/// Authenticates (see the module docs for the order of keys). Returns what worked.
pub(crate) async fn authenticate(
    host: &Host,
    handle: &mut Handle<ClientHandler>,
    limit: Duration,
) -> Result<String, ConnError> {
    let user = match &host.user {
        Some(user) if !user.is_empty() => user.clone(),
        _ => local_user().ok_or_else(|| ConnError::Auth {
            host: host.name.clone(),
            user: "?".into(),
            reason: "no user given and the local user name is unknown".into(),
        })?,
    };
    let fail = |reason: String| ConnError::Auth {
        host: host.name.clone(),
        user: user.clone(),
        reason,
    };
    match tokio::time::timeout(limit, try_keys(host, handle, &user)).await {
        Err(_) => Err(fail(format!("no answer in {}", secs(limit)))),
        Ok(Err(reason)) => Err(fail(reason)),
        Ok(Ok(how)) => Ok(format!("as {user} {how}")),
    }
}

async fn try_keys(
    host: &Host,
    handle: &mut Handle<ClientHandler>,
    user: &str,
) -> Result<String, String> {
    if let Some(path) = &host.identity_file {
        let path = expand_home(path);
        let key = load_key(&path)?;
        return match offer_key(handle, user, key).await? {
            Some(fp) => Ok(format!("with key {} ({fp})", path.display())),
            None => Err(format!("the server refused the key in {}", path.display())),
        };
    }

    let mut tried = Vec::new();
    if std::env::var_os("SSH_AUTH_SOCK").is_some_and(|s| !s.is_empty()) {
        match offer_agent(handle, user).await {
            Ok(Some(how)) => return Ok(how),
            Ok(None) => tried.push("the agent's keys".to_string()),
            Err(e) => tried.push(format!("the agent ({e})")),
        }
    }
    if let Some(home) = home_dir() {
        for name in ["id_ed25519", "id_ecdsa", "id_rsa"] {
            let path = home.join(".ssh").join(name);
            if !path.is_file() {
                continue;
            }
            match load_key(&path) {
                Err(e) => tried.push(e),
                Ok(key) => match offer_key(handle, user, key).await? {
                    Some(fp) => return Ok(format!("with key {} ({fp})", path.display())),
                    None => tried.push(format!("{} (refused)", path.display())),
                },
            }
        }
    }
    if tried.is_empty() {
        Err("no key to offer: no identity_file, no ssh-agent (SSH_AUTH_SOCK unset) and no ~/.ssh/id_ed25519, id_ecdsa or id_rsa".into())
    } else {
        Err(format!("no key was accepted; tried {}", tried.join(", ")))
    }
}

fn load_key(path: &Path) -> Result<russh::keys::PrivateKey, String> {
    match russh::keys::load_secret_key(path, None) {
        Ok(key) => Ok(key),
        Err(russh::keys::Error::KeyIsEncrypted) => Err(format!(
            "{} is encrypted: a run cannot type a passphrase (load it into ssh-agent and leave identity_file unset)",
            path.display()
        )),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// Offers one private key. `Some(fingerprint)` if accepted.
async fn offer_key(
    handle: &mut Handle<ClientHandler>,
    user: &str,
    key: russh::keys::PrivateKey,
) -> Result<Option<String>, String> {
    let fingerprint = key.public_key().fingerprint(HashAlg::Sha256).to_string();
    let hash = if key.algorithm().is_rsa() {
        rsa_hash(handle).await
    } else {
        None
    };
    let key = PrivateKeyWithHashAlg::new(Arc::new(key), hash);
    let result = handle
        .authenticate_publickey(user, key)
        .await
        .map_err(|e| format!("the connection failed during authentication: {e}"))?;
    Ok(result.success().then_some(fingerprint))
}

async fn offer_agent(
    handle: &mut Handle<ClientHandler>,
    user: &str,
) -> Result<Option<String>, String> {
    let mut agent = russh::keys::agent::client::AgentClient::connect_env()
        .await
        .map_err(|e| e.to_string())?;
    let identities = agent
        .request_identities()
        .await
        .map_err(|e| e.to_string())?;
    for identity in identities {
        let russh::keys::agent::AgentIdentity::PublicKey { key, comment } = identity else {
            continue;
        };
        let hash = if key.algorithm().is_rsa() {
            rsa_hash(handle).await
        } else {
            None
        };
        let fingerprint = key.fingerprint(HashAlg::Sha256).to_string();
        match handle
            .authenticate_publickey_with(user, key, hash, &mut agent)
            .await
        {
            Ok(result) if result.success() => {
                return Ok(Some(format!(
                    "with the agent's key {comment} ({fingerprint})"
                )))
            }
            Ok(_) => {}
            Err(e) => return Err(format!("signing with {comment}: {e}")),
        }
    }
    Ok(None)
}

/// The RSA signature hash the server accepts (SHA-2 unless it says otherwise).
async fn rsa_hash(handle: &Handle<ClientHandler>) -> Option<HashAlg> {
    match handle.best_supported_rsa_hash().await {
        Ok(Some(hash)) => hash,
        _ => Some(HashAlg::Sha256),
    }
}

pub(crate) fn host_address(host: &Host) -> &str {
    if host.address.is_empty() {
        &host.name
    } else {
        &host.address
    }
}

/// `address:port`, and the bastion it is reached through if any: what a connect error
/// names.
pub(super) fn endpoint(host: &Host) -> String {
    let addr = format!("{}:{}", host_address(host), host_port(host));
    match &host.proxy_jump {
        Some(bastion) => format!("{addr} (through bastion {:?})", bastion.name),
        None => addr,
    }
}

pub(crate) fn host_port(host: &Host) -> u16 {
    if host.port == 0 {
        22
    } else {
        host.port
    }
}

pub(super) fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}
