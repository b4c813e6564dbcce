//! Why the server could not start: each cause named with what it was doing.

use std::net::SocketAddr;
use std::path::PathBuf;

use bosun_store::StoreError;

/// Why `RunningServer::start` (or one of its steps) failed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot create data dir {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open the store: {0}")]
    Store(#[from] StoreError),
    #[error("cannot read or write the replica id file {path}: {source}")]
    ReplicaId {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot write the admin token file {path}: {source}")]
    AdminToken {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot use the secrets key: {0}")]
    Secrets(#[from] crate::secrets::KeyError),
    #[error("invalid sign-in configuration: {0}")]
    SignIn(#[from] crate::sign_in::oidc::OidcError),
    #[error("invalid GitHub configuration: {0}")]
    Github(#[from] crate::vcs::github::GithubError),
    #[error("server failed: {0}")]
    Serve(std::io::Error),
    #[error("{0}")]
    Tls(#[from] crate::tls::TlsError),
}
