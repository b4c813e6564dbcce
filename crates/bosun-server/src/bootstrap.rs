//! First start: seed org `default`, user `admin` and an admin token on an empty store.
//!
//! The token is `BOSUN_BOOTSTRAP_TOKEN` when set; otherwise a random one, written to
//! `<data-dir>/admin-token` (mode 0600) — the file is in place before the store commits
//! the token, so a crash in between can never leave an admin token nobody can read.

use std::io::Write;
use std::path::PathBuf;

use bosun_core::token::TokenKind;
use bosun_store::{Bootstrap, Store};

use crate::config::ServerConfig;
use crate::service::tokens::{new_token, TokenOwner};
use crate::start_error::StartError;

pub const DEFAULT_ORG: &str = "default";
pub const ADMIN_USER: &str = "admin";

pub async fn run(store: &dyn Store, config: &ServerConfig) -> Result<Option<PathBuf>, StartError> {
    let (secret, mut token) = new_token(
        TokenKind::Personal,
        TokenOwner::User(ADMIN_USER.to_string()),
        "bootstrap admin token".into(),
        None,
    );
    let (secret, file) = match &config.bootstrap_token {
        Some(given) => (given.clone(), None),
        None => (secret, Some(config.data_dir.join("admin-token"))),
    };
    token.secret_hash = bosun_core::token::hash_token(&secret);
    let pending = file.as_ref().map(|f| f.with_extension("new"));
    if let Some(p) = &pending {
        write_private(p, &secret).map_err(|source| StartError::AdminToken {
            path: p.clone(),
            source,
        })?;
    }
    let seeded = store
        .bootstrap(&Bootstrap {
            org: DEFAULT_ORG.into(),
            user: ADMIN_USER.into(),
            token,
        })
        .await;
    match (seeded, pending, file) {
        (Ok(true), Some(p), Some(f)) => {
            std::fs::rename(&p, &f).map_err(|source| StartError::AdminToken {
                path: f.clone(),
                source,
            })?;
            tracing::info!(path = %f.display(), "created org default and user admin; admin token written");
            Ok(Some(f))
        }
        (Ok(true), _, _) => {
            tracing::info!("created org default and user admin with BOSUN_BOOTSTRAP_TOKEN");
            Ok(None)
        }
        (result, pending, _) => {
            if let Some(p) = pending {
                let _ = std::fs::remove_file(p);
            }
            result?;
            if config.bootstrap_token.is_some() {
                tracing::info!("store already has users; BOSUN_BOOTSTRAP_TOKEN ignored");
            }
            Ok(None)
        }
    }
}

/// Writes `secret` and a newline to a file only its owner may read (0600 from the start,
/// never a moment readable by others).
pub(crate) fn write_private(path: &std::path::Path, secret: &str) -> std::io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    f.write_all(secret.as_bytes())?;
    f.write_all(b"\n")?;
    f.sync_all()
}
