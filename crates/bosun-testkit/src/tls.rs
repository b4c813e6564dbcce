//! Certificates made in the test: a CA and server certificates it issues, as PEM, for
//! serving and trusting TLS without anything from outside the test.

/// A certificate authority that issues server certificates.
pub struct TestCa {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    /// The CA's own certificate, PEM: what clients trust.
    pub cert_pem: String,
}

/// A server certificate (chain: the leaf alone) and its private key, PEM.
pub struct ServerCert {
    pub cert_pem: String,
    pub key_pem: String,
}

impl TestCa {
    /// A new CA named `name`.
    ///
    /// # Panics
    /// When rcgen cannot make the key or certificate (a test setup failure).
    #[allow(clippy::expect_used)]
    pub fn new(name: &str) -> TestCa {
        let key = rcgen::KeyPair::generate().expect("CA key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let cert = params.self_signed(&key).expect("CA certificate");
        TestCa {
            cert_pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A server certificate for `names` (DNS names or IP addresses), issued by this CA.
    ///
    /// # Panics
    /// When rcgen cannot make the key or certificate (a test setup failure).
    #[allow(clippy::expect_used)]
    pub fn server_cert(&self, names: &[&str]) -> ServerCert {
        let key = rcgen::KeyPair::generate().expect("server key");
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names).expect("server params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "bosun test server");
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("server certificate");
        ServerCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

impl ServerCert {
    /// Writes the certificate and key to `cert` and `key`, each replaced in one step
    /// (a rename), so a server watching them never reads half a file.
    ///
    /// # Panics
    /// When a file cannot be written.
    #[allow(clippy::expect_used)]
    pub fn write(&self, cert: &std::path::Path, key: &std::path::Path) {
        for (path, text) in [(key, &self.key_pem), (cert, &self.cert_pem)] {
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, text).expect("write PEM");
            std::fs::rename(&tmp, path).expect("rename PEM");
        }
    }
}
