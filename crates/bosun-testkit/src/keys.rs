//! The test GitHub App's key pair: a committed 2048-bit RSA key (PKCS#1 PEM, the form
//! GitHub hands out), its public half for the double to verify App JWTs with, a second
//! unrelated key for "signed by someone else" cases, and helpers to write the key to disk
//! and to mint App JWTs the way GitHub documents them.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use jsonwebtoken::{Algorithm, EncodingKey, Header};

/// The App's private key, PEM (`-----BEGIN RSA PRIVATE KEY-----`), as GitHub issues it.
pub fn app_private_key_pem() -> &'static str {
    include_str!("../fixtures/github-app.pem")
}

/// The App's public key, PEM (`-----BEGIN PUBLIC KEY-----`, SPKI).
pub fn app_public_key_pem() -> &'static str {
    include_str!("../fixtures/github-app.pub.pem")
}

/// A second RSA private key that is NOT the App's: JWTs signed with it must be refused.
pub fn other_private_key_pem() -> &'static str {
    include_str!("../fixtures/other-key.pem")
}

/// Writes the App's private key to `dir/github-app.pem` with mode 0600 and returns the
/// path (what an operator would point `--github-app-key` style config at).
pub fn write_app_key(dir: &Path) -> PathBuf {
    let path = dir.join("github-app.pem");
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    file.write_all(app_private_key_pem().as_bytes())
        .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    path
}

/// An App JWT for `app_id` signed (RS256) with the fixture key, as GitHub documents:
/// `iat` 60 s in the past, `exp` 9 minutes ahead, `iss` the App id (as a string).
pub fn app_jwt(app_id: i64) -> String {
    jwt_with(
        app_private_key_pem(),
        &serde_json::json!(app_id.to_string()),
        -60,
        540,
    )
}

/// An RS256 JWT signed with `private_pem`, claims `iss`, `iat = now + iat_offset`,
/// `exp = now + exp_offset` (seconds). For tests that need a bad JWT on purpose.
pub fn jwt_with(
    private_pem: &str,
    iss: &serde_json::Value,
    iat_offset: i64,
    exp_offset: i64,
) -> String {
    let now = chrono::Utc::now().timestamp();
    let claims = serde_json::json!({
        "iss": iss,
        "iat": now + iat_offset,
        "exp": now + exp_offset,
    });
    let key = EncodingKey::from_rsa_pem(private_pem.as_bytes()).expect("RSA private key PEM");
    jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims, &key).expect("signing JWT")
}
