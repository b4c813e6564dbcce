//! The database URL and the TLS it asks for. `postgres::Config` parses the URL but knows
//! only `sslmode=disable|prefer|require` and no certificates, so libpq's TLS parameters —
//! `sslmode` (with `verify-ca` and `verify-full`), `sslrootcert`, `sslcert`, `sslkey` —
//! are taken off the URL here, and the rest is left to it. They configure a rustls
//! connector that every connection of the store (the pool's and the listener's) uses,
//! with libpq's meaning for each mode:
//!
//! - `disable`: plaintext.
//! - `prefer` (the default, as in libpq): TLS when the server offers it, plaintext when it
//!   does not; the certificate is not checked unless `sslrootcert` is given.
//! - `require`: TLS or no connection; the certificate is not checked unless `sslrootcert`
//!   is given (then its chain is, as libpq does).
//! - `verify-ca`: TLS, and the certificate must chain to `sslrootcert`.
//! - `verify-full`: `verify-ca`, and the certificate must name the host connected to.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use ::postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use ::postgres::Socket;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{verify_server_cert_signed_by_trust_anchor, WebPkiServerVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use sha2::Digest;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Why a database URL's TLS settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConnInfoError {
    #[error("database url: {0}")]
    Url(String),
    #[error(
        "database url: sslmode={0:?} is not supported (use disable, prefer, require, verify-ca \
         or verify-full)"
    )]
    UnknownMode(String),
    #[error("database url: {0} is given more than once")]
    Repeated(&'static str),
    #[error(
        "database url: sslmode={0} needs sslrootcert=/path/ca.pem, the CA certificate that \
         signed the server's"
    )]
    MissingRootCert(&'static str),
    #[error("database url: {given} needs {missing} too (a client certificate and its key)")]
    HalfClientCert {
        given: &'static str,
        missing: &'static str,
    },
    #[error("cannot read {param} {path}: {source}")]
    Read {
        param: &'static str,
        path: String,
        source: io::Error,
    },
    #[error("{param} {path}: {problem}")]
    Pem {
        param: &'static str,
        path: String,
        problem: String,
    },
    #[error("TLS set-up: {0}")]
    Tls(#[from] rustls::Error),
}

/// libpq's `sslmode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(s: &str) -> Result<SslMode, ConnInfoError> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => return Err(ConnInfoError::UnknownMode(other.to_string())),
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// A parsed database URL: the client's configuration and the TLS connector for it.
#[derive(Clone)]
pub struct ConnInfo {
    pub config: ::postgres::Config,
    pub tls: Tls,
}

impl ConnInfo {
    /// Parses `url` (`postgres://user@host:port/db?sslmode=verify-full&sslrootcert=…`),
    /// reading the certificate files it names now, so a bad one stops `open`.
    pub fn parse(url: &str) -> Result<ConnInfo, ConnInfoError> {
        let (rest, params) = split_tls_params(url)?;
        let mut config: ::postgres::Config = rest.parse().map_err(|e: ::postgres::Error| {
            // The client's own message ("invalid connection string") hides the cause.
            let cause = std::error::Error::source(&e)
                .map(|c| format!(": {c}"))
                .unwrap_or_default();
            ConnInfoError::Url(format!("{e}{cause}"))
        })?;
        let mode = match &params.sslmode {
            Some(m) => SslMode::parse(m)?,
            None => SslMode::Prefer,
        };
        config.ssl_mode(match mode {
            SslMode::Disable => ::postgres::config::SslMode::Disable,
            SslMode::Prefer => ::postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                ::postgres::config::SslMode::Require
            }
        });
        let client = match mode {
            SslMode::Disable => None,
            _ => Some(Arc::new(client_config(mode, &params)?)),
        };
        Ok(ConnInfo {
            config,
            tls: Tls {
                client,
                mode,
                root_cert: params.sslrootcert,
            },
        })
    }

    /// Opens a connection.
    pub fn connect(&self) -> Result<::postgres::Client, ::postgres::Error> {
        self.config.connect(self.tls.clone())
    }
}

/// The TLS parameters taken off a URL.
#[derive(Default)]
struct TlsParams {
    sslmode: Option<String>,
    sslrootcert: Option<String>,
    sslcert: Option<String>,
    sslkey: Option<String>,
}

/// Splits libpq's TLS parameters off `url`, returning the URL without them. A string that
/// is not a `postgres://` URL (libpq's `key=value` form) is returned whole.
fn split_tls_params(url: &str) -> Result<(String, TlsParams), ConnInfoError> {
    let mut params = TlsParams::default();
    let Some(prefix_len) = ["postgres://", "postgresql://"]
        .iter()
        .find(|p| url.starts_with(*p))
        .map(|p| p.len())
    else {
        return Ok((url.to_string(), params));
    };
    // Where the query starts, found the way the client's parser finds it: the user info
    // ends at the first '@', and the query starts at the first '?' after that.
    let after_userinfo = url[prefix_len..]
        .find('@')
        .map(|i| prefix_len + i + 1)
        .unwrap_or(prefix_len);
    let Some(q) = url[after_userinfo..].find('?').map(|i| after_userinfo + i) else {
        return Ok((url.to_string(), params));
    };
    let mut kept = Vec::new();
    for pair in url[q + 1..].split('&') {
        let (raw_key, raw_value) = pair.split_once('=').unwrap_or((pair, ""));
        let slot = match percent_decode(raw_key)?.as_str() {
            "sslmode" => (&mut params.sslmode, "sslmode"),
            "sslrootcert" => (&mut params.sslrootcert, "sslrootcert"),
            "sslcert" => (&mut params.sslcert, "sslcert"),
            "sslkey" => (&mut params.sslkey, "sslkey"),
            _ => {
                kept.push(pair);
                continue;
            }
        };
        if slot.0.is_some() {
            return Err(ConnInfoError::Repeated(slot.1));
        }
        *slot.0 = Some(percent_decode(raw_value)?);
    }
    let mut rest = url[..q].to_string();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    Ok((rest, params))
}

fn percent_decode(s: &str) -> Result<String, ConnInfoError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| ConnInfoError::Url(format!("bad percent-escape in {s:?}")))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| ConnInfoError::Url(format!("{s:?} is not UTF-8")))
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn client_config(mode: SslMode, params: &TlsParams) -> Result<ClientConfig, ConnInfoError> {
    let provider = provider();
    let algs = provider.signature_verification_algorithms;
    let roots = match &params.sslrootcert {
        Some(path) => Some(Arc::new(read_roots(path)?)),
        None => match mode {
            SslMode::VerifyCa | SslMode::VerifyFull => {
                return Err(ConnInfoError::MissingRootCert(mode.as_str()))
            }
            _ => None,
        },
    };
    let verifier: Arc<dyn ServerCertVerifier> = match (mode, roots) {
        (SslMode::VerifyFull, Some(roots)) => {
            WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                .build()
                .map_err(|e| ConnInfoError::Url(format!("sslrootcert: {e}")))?
        }
        // libpq checks the chain whenever it has a root certificate, whatever the mode.
        (_, roots) => Arc::new(ChainOnly { roots, algs }),
    };
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match (&params.sslcert, &params.sslkey) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert), Some(key)) => {
            builder.with_client_auth_cert(read_certs("sslcert", cert)?, read_key(key)?)?
        }
        (Some(_), None) => {
            return Err(ConnInfoError::HalfClientCert {
                given: "sslcert",
                missing: "sslkey",
            })
        }
        (None, Some(_)) => {
            return Err(ConnInfoError::HalfClientCert {
                given: "sslkey",
                missing: "sslcert",
            })
        }
    };
    // What libpq sends: PostgreSQL 17 requires it for direct TLS (`sslnegotiation=direct`),
    // older servers ignore it.
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(config)
}

fn read_file(param: &'static str, path: &str) -> Result<Vec<u8>, ConnInfoError> {
    std::fs::read(path).map_err(|source| ConnInfoError::Read {
        param,
        path: path.to_string(),
        source,
    })
}

fn read_certs(
    param: &'static str,
    path: &str,
) -> Result<Vec<CertificateDer<'static>>, ConnInfoError> {
    let pem = read_file(param, path)?;
    let bad = |problem: String| ConnInfoError::Pem {
        param,
        path: path.to_string(),
        problem,
    };
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(bad("no PEM certificate (BEGIN CERTIFICATE) in it".into()));
    }
    Ok(certs)
}

fn read_roots(path: &str) -> Result<RootCertStore, ConnInfoError> {
    if path == "system" {
        return Err(ConnInfoError::Url(
            "sslrootcert=system (the operating system's CAs) is not supported: give the path \
             of the CA certificate that signed the server's"
                .into(),
        ));
    }
    let mut roots = RootCertStore::empty();
    for cert in read_certs("sslrootcert", path)? {
        roots.add(cert).map_err(|e| ConnInfoError::Pem {
            param: "sslrootcert",
            path: path.to_string(),
            problem: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(roots)
}

fn read_key(path: &str) -> Result<PrivateKeyDer<'static>, ConnInfoError> {
    let pem = read_file("sslkey", path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| ConnInfoError::Pem {
        param: "sslkey",
        path: path.to_string(),
        problem: format!("no unencrypted PEM private key in it: {e}"),
    })
}

/// `verify-ca` (and `prefer`/`require` given a root certificate): the chain must lead to
/// a root, whatever names the certificate carries. Without roots (`prefer` and `require`
/// alone) nothing proves who the server is: encryption against a passive listener only,
/// libpq's meaning of both modes.
#[derive(Debug)]
struct ChainOnly {
    roots: Option<Arc<RootCertStore>>,
    algs: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let cert = ParsedCertificate::try_from(end_entity)?;
            verify_server_cert_signed_by_trust_anchor(
                &cert,
                roots,
                intermediates,
                now,
                self.algs.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    // The handshake's own signatures are checked even without roots: they bind the
    // session to the certificate the server sent, which channel binding relies on.
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// The connector handed to the client for each connection (`MakeTlsConnect`).
#[derive(Clone)]
pub struct Tls {
    /// `None` for `sslmode=disable`.
    client: Option<Arc<ClientConfig>>,
    mode: SslMode,
    root_cert: Option<String>,
}

impl MakeTlsConnect<Socket> for Tls {
    type Stream = RustlsStream;
    type TlsConnect = RustlsConnect;
    type Error = io::Error;

    // The host name is only checked when a handshake happens: a Unix socket has none, and
    // `disable` never uses it.
    fn make_tls_connect(&mut self, host: &str) -> Result<RustlsConnect, io::Error> {
        Ok(RustlsConnect {
            tls: self.clone(),
            host: host.to_string(),
        })
    }
}

/// One connection's handshake.
pub struct RustlsConnect {
    tls: Tls,
    host: String,
}

/// Why a handshake failed, in the terms of the URL's parameters.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HandshakeError(String);

impl TlsConnect<Socket> for RustlsConnect {
    type Stream = RustlsStream;
    type Error = HandshakeError;
    type Future = Pin<Box<dyn Future<Output = Result<RustlsStream, HandshakeError>> + Send>>;

    fn connect(self, stream: Socket) -> Self::Future {
        Box::pin(async move {
            let RustlsConnect { tls, host } = self;
            let Some(client) = tls.client.clone() else {
                return Err(HandshakeError("sslmode=disable".into()));
            };
            let name = ServerName::try_from(host.clone()).map_err(|_| {
                HandshakeError(format!(
                    "host {host:?} is neither a DNS name nor an IP address, so no \
                     certificate can name it"
                ))
            })?;
            tokio_rustls::TlsConnector::from(client)
                .connect(name, stream)
                .await
                .map(RustlsStream)
                .map_err(|e| HandshakeError(explain(&tls, &host, &e)))
        })
    }
}

/// A handshake failure said in the URL's terms: which check refused the server.
fn explain(tls: &Tls, host: &str, e: &io::Error) -> String {
    let mode = tls.mode.as_str();
    let root = tls.root_cert.as_deref().unwrap_or("(none)");
    match e.get_ref().and_then(|r| r.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        )) => format!(
            "the server's certificate does not name host {host:?} (sslmode={mode}): {e}; \
             connect with a name the certificate holds"
        ),
        Some(rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)) => format!(
            "certificate not trusted: the server's certificate is not signed by the CA in \
             sslrootcert {root} (sslmode={mode})"
        ),
        Some(rustls::Error::InvalidCertificate(c)) => {
            format!("certificate not trusted (sslmode={mode}, sslrootcert {root}): {c}")
        }
        _ => format!("TLS handshake with {host} failed (sslmode={mode}): {e}"),
    }
}

/// An encrypted connection.
pub struct RustlsStream(tokio_rustls::client::TlsStream<Socket>);

impl AsyncRead for RustlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for RustlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl TlsStream for RustlsStream {
    /// `tls-server-end-point` (RFC 5929), which lets SCRAM authentication
    /// (`SCRAM-SHA-256-PLUS`) prove no one relays the connection. When the certificate's
    /// hash cannot be told, none is offered and SCRAM runs without binding, as the server
    /// is then told.
    fn channel_binding(&self) -> ChannelBinding {
        let cert = self
            .0
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first());
        match cert.and_then(|c| end_point_hash(c)) {
            Some(hash) => ChannelBinding::tls_server_end_point(hash),
            None => ChannelBinding::none(),
        }
    }
}

/// The certificate's hash under its signature's hash function (SHA-256 for MD5 and SHA-1
/// signatures), or `None` for a signature whose hash this does not know.
fn end_point_hash(cert: &[u8]) -> Option<Vec<u8>> {
    const RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01];
    const ECDSA: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04];
    let oid = signature_oid(cert)?;
    let (family, last) = oid.split_at(oid.len().checked_sub(1)?);
    let bits = match (family, last) {
        // md5, sha1, sha256 WithRSAEncryption
        (RSA, [0x04 | 0x05 | 0x0b]) => 256,
        (RSA, [0x0c]) => 384,
        (RSA, [0x0d]) => 512,
        _ => match oid {
            // ecdsa-with-SHA1
            [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x01] => 256,
            [p @ .., 0x03, n] if p == ECDSA => match n {
                0x02 => 256,
                0x03 => 384,
                0x04 => 512,
                _ => return None,
            },
            _ => return None,
        },
    };
    Some(match bits {
        256 => sha2::Sha256::digest(cert).to_vec(),
        384 => sha2::Sha384::digest(cert).to_vec(),
        _ => sha2::Sha512::digest(cert).to_vec(),
    })
}

/// The OID of a DER certificate's `signatureAlgorithm` (its second field).
fn signature_oid(cert: &[u8]) -> Option<&[u8]> {
    let (outer, _) = der_element(cert, 0x30)?;
    let (_tbs, rest) = der_element(outer, 0x30)?;
    let (alg, _) = der_element(rest, 0x30)?;
    let (oid, _) = der_element(alg, 0x06)?;
    Some(oid)
}

/// The contents of the DER element at the start of `b` with tag `tag`, and what follows.
fn der_element(b: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    if *b.first()? != tag {
        return None;
    }
    let first = *b.get(1)?;
    let (len, header) = if first < 0x80 {
        (usize::from(first), 2)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let len = b
            .get(2..2 + n)?
            .iter()
            .fold(0usize, |acc, byte| (acc << 8) | usize::from(*byte));
        (len, 2 + n)
    };
    let end = header.checked_add(len)?;
    Some((b.get(header..end)?, b.get(end..)?))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn tls_parameters_come_off_the_url_and_the_rest_stays() {
        let (rest, p) = split_tls_params(
            "postgres://u:p%3Fw@db.example:5433/app?application_name=x&sslmode=verify-full\
             &sslrootcert=%2Fetc%2Fca%20dir%2Fca.pem&connect_timeout=5",
        )
        .unwrap();
        assert_eq!(
            rest,
            "postgres://u:p%3Fw@db.example:5433/app?application_name=x&connect_timeout=5"
        );
        assert_eq!(p.sslmode.as_deref(), Some("verify-full"));
        assert_eq!(p.sslrootcert.as_deref(), Some("/etc/ca dir/ca.pem"));
        let (rest, p) = split_tls_params("postgres://db/app?sslmode=require").unwrap();
        assert_eq!(rest, "postgres://db/app");
        assert_eq!(p.sslmode.as_deref(), Some("require"));
        // A '?' inside the password is not the query.
        let (rest, p) = split_tls_params("postgresql://u:a?b@db/app").unwrap();
        assert_eq!(rest, "postgresql://u:a?b@db/app");
        assert!(p.sslmode.is_none());
    }

    #[test]
    fn bad_tls_parameters_are_refused_naming_them() {
        let err = |url: &str| ConnInfo::parse(url).err().expect(url).to_string();
        assert!(
            err("postgres://db/app?sslmode=allow").contains("sslmode=\"allow\" is not supported")
        );
        assert!(err("postgres://db/app?sslmode=require&sslmode=disable")
            .contains("sslmode is given more than once"));
        assert!(err("postgres://db/app?sslmode=verify-full").contains("needs sslrootcert"));
        assert!(err("postgres://db/app?sslmode=verify-ca").contains("sslmode=verify-ca needs"));
        assert_eq!(
            err("postgres://db/app?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem"),
            "cannot read sslrootcert /nonexistent/ca.pem: No such file or directory (os error 2)"
        );
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate").unwrap();
        let e = err(&format!(
            "postgres://db/app?sslmode=verify-full&sslrootcert={}",
            junk.display()
        ));
        assert!(e.contains("no PEM certificate"), "{e}");
        assert!(err("postgres://db/app?sslcert=/c.pem").contains("sslcert needs sslkey too"));
        assert!(
            err("postgres://db/app?sslmode=verify-full&sslrootcert=system")
                .contains("sslrootcert=system (the operating system's CAs) is not supported")
        );
        assert!(err("postgres://db/app?bogus=1").contains("unknown option"));
    }

    #[test]
    fn channel_binding_hashes_with_the_certificates_signature_hash() {
        let cert = |alg: &'static rcgen::SignatureAlgorithm| {
            let key = rcgen::KeyPair::generate_for(alg).unwrap();
            let params = rcgen::CertificateParams::new(vec!["db.test".to_string()]).unwrap();
            params.self_signed(&key).unwrap().der().to_vec()
        };
        let p256 = cert(&rcgen::PKCS_ECDSA_P256_SHA256);
        assert_eq!(
            end_point_hash(&p256),
            Some(sha2::Sha256::digest(&p256).to_vec())
        );
        let p384 = cert(&rcgen::PKCS_ECDSA_P384_SHA384);
        assert_eq!(
            end_point_hash(&p384),
            Some(sha2::Sha384::digest(&p384).to_vec())
        );
        // No hash of its own: no binding offered rather than a wrong one.
        assert_eq!(end_point_hash(&cert(&rcgen::PKCS_ED25519)), None);
        assert_eq!(end_point_hash(b"\x30\x03junk"), None);
    }

    #[test]
    fn no_sslmode_is_prefer_and_disable_builds_no_tls() {
        let info = ConnInfo::parse("postgres://db/app").unwrap();
        assert_eq!(info.tls.mode, SslMode::Prefer);
        assert!(info.tls.client.is_some());
        let info = ConnInfo::parse("postgres://db/app?sslmode=disable").unwrap();
        assert!(info.tls.client.is_none());
        assert_eq!(
            info.config.get_ssl_mode(),
            ::postgres::config::SslMode::Disable
        );
    }
}
