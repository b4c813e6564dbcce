//! TLS on the listener: the certificate chain and key read from PEM files, served through
//! a resolver whose key can be swapped while connections are open, so a renewed
//! certificate takes effect without a restart — on SIGHUP at once, or when the watcher
//! sees the files change. A renewal that does not load (half written, key and chain not
//! matching) leaves the current certificate in place and says why in the log.
//!
//! rustls runs on the ring provider, the one reqwest's `rustls-tls` already brings, so
//! the binary carries one crypto stack.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

use crate::config::TlsFiles;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the TLS certificate file {path}: {message}")]
    Cert { path: PathBuf, message: String },
    #[error(
        "the TLS certificate file {path} holds no certificate (expected PEM CERTIFICATE blocks)"
    )]
    NoCert { path: PathBuf },
    #[error("cannot read the TLS key file {path}: {message}")]
    Key { path: PathBuf, message: String },
    #[error("the TLS key in {key} does not fit the certificate in {cert}: {message}")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        message: String,
    },
    #[error("cannot set up TLS: {0}")]
    Setup(String),
}

/// The listener's TLS: the acceptor, and the certificate it presents (swappable).
pub struct Tls {
    pub acceptor: TlsAcceptor,
    current: Arc<Current>,
    files: TlsFiles,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls").field("files", &self.files).finish()
    }
}

/// The certified key every new handshake gets.
struct Current(RwLock<Arc<CertifiedKey>>);

impl fmt::Debug for Current {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Current")
    }
}

impl ResolvesServerCert for Current {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        // A poisoned lock still holds a whole key: swaps replace the Arc in one step.
        Some(match self.0.read() {
            Ok(key) => Arc::clone(&key),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        })
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads the chain and key and checks that they belong together.
pub fn load(files: &TlsFiles) -> Result<CertifiedKey, TlsError> {
    let cert_err = |message: String| TlsError::Cert {
        path: files.cert_file.clone(),
        message,
    };
    let chain = CertificateDer::pem_file_iter(&files.cert_file)
        .map_err(|e| cert_err(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| cert_err(e.to_string()))?;
    if chain.is_empty() {
        return Err(TlsError::NoCert {
            path: files.cert_file.clone(),
        });
    }
    let key = PrivateKeyDer::from_pem_file(&files.key_file).map_err(|e| TlsError::Key {
        path: files.key_file.clone(),
        message: e.to_string(),
    })?;
    CertifiedKey::from_der(chain, key, &provider()).map_err(|e| TlsError::Mismatch {
        cert: files.cert_file.clone(),
        key: files.key_file.clone(),
        message: e.to_string(),
    })
}

impl Tls {
    /// Loads the files; a server does not start with a certificate it cannot serve.
    pub fn new(files: &TlsFiles) -> Result<Self, TlsError> {
        let current = Arc::new(Current(RwLock::new(Arc::new(load(files)?))));
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Setup(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(current.clone());
        // The server speaks HTTP/1.1 only (as without TLS).
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Tls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            current,
            files: files.clone(),
        })
    }

    /// Reads the files again and serves them to new handshakes; on error the certificate
    /// in use stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let key = Arc::new(load(&self.files)?);
        match self.current.0.write() {
            Ok(mut current) => *current = key,
            Err(poisoned) => *poisoned.into_inner() = key,
        }
        Ok(())
    }

    /// The chain's certificate file, for clients of this server that trust what it serves
    /// (the embedded runners).
    pub fn cert_file(&self) -> &Path {
        &self.files.cert_file
    }
}

/// What the watcher compares to see a renewal: each file's modification time and size.
type Fingerprint = [Option<(SystemTime, u64)>; 2];

fn fingerprint(files: &TlsFiles) -> Fingerprint {
    let one = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())))
    };
    [one(&files.cert_file), one(&files.key_file)]
}

/// Reloads the certificate on SIGHUP and whenever the files change (looked at every
/// `interval`), until `stopping` is set.
pub async fn watch(
    tls: Arc<Tls>,
    interval: Duration,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangup = match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP; TLS files are still re-read when they change");
            None
        }
    };
    let mut seen = fingerprint(&tls.files);
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let forced = tokio::select! {
            _ = tick.tick() => false,
            Some(()) = async {
                match hangup.as_mut() {
                    Some(h) => h.recv().await,
                    None => std::future::pending().await,
                }
            } => true,
            _ = crate::duties::stopped(&mut stopping) => return,
        };
        let now = fingerprint(&tls.files);
        if !forced && now == seen {
            continue;
        }
        // A failed load is retried only when the files change again (or on SIGHUP), so a
        // broken renewal is logged once, not on every tick.
        seen = now;
        match tls.reload() {
            Ok(()) => tracing::info!(
                cert = %tls.files.cert_file.display(),
                "TLS certificate reloaded"
            ),
            Err(e) => tracing::warn!(
                error = %e,
                "TLS certificate not reloaded; the current one is still served"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use bosun_testkit::tls::TestCa;

    fn files(dir: &Path) -> TlsFiles {
        TlsFiles {
            cert_file: dir.join("c.pem"),
            key_file: dir.join("k.pem"),
        }
    }

    #[test]
    fn unusable_files_are_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        let e = Tls::new(&f).unwrap_err();
        assert!(matches!(e, TlsError::Cert { .. }), "{e}");
        assert!(e.to_string().contains("c.pem"), "{e}");

        let ca = TestCa::new("ca");
        let one = ca.server_cert(&["localhost"]);
        let other = ca.server_cert(&["localhost"]);
        std::fs::write(&f.cert_file, "no PEM here").unwrap();
        std::fs::write(&f.key_file, &one.key_pem).unwrap();
        let e = Tls::new(&f).unwrap_err();
        assert!(matches!(e, TlsError::NoCert { .. }), "{e}");

        std::fs::write(&f.cert_file, &one.cert_pem).unwrap();
        std::fs::write(&f.key_file, &other.key_pem).unwrap();
        let e = Tls::new(&f).unwrap_err();
        assert!(matches!(e, TlsError::Mismatch { .. }), "{e}");
    }

    #[test]
    fn a_broken_renewal_keeps_the_certificate_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        TestCa::new("ca")
            .server_cert(&["localhost"])
            .write(&f.cert_file, &f.key_file);
        let tls = Tls::new(&f).unwrap();
        let served = |tls: &Tls| tls.current.0.read().unwrap().cert.clone();
        let before = served(&tls);
        std::fs::write(&f.cert_file, "-----BEGIN CERTIFICATE-----\ntruncated").unwrap();
        assert!(tls.reload().is_err());
        assert_eq!(served(&tls), before);

        TestCa::new("renewed")
            .server_cert(&["localhost"])
            .write(&f.cert_file, &f.key_file);
        tls.reload().unwrap();
        assert_ne!(served(&tls), before);
    }
}
