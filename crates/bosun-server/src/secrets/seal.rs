//! Sealing values at rest with the server's secrets key: XChaCha20-Poly1305 (AEAD) with a
//! random 192-bit nonce per value, and the key's fingerprint stored beside each sealed
//! value so a wrong key is named, not guessed at.
//!
//! The key comes from a file or `BOSUN_SECRETS_KEY` (base64 of 32 bytes). Without one, a
//! server whose store holds nothing sealed writes a fresh key to `<data-dir>/secrets.key`
//! (0600); a store that holds sealed values and no matching key refuses to start.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use bosun_store::Sealed;
use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;
use sha2::{Digest, Sha256};

pub use crate::config::KeySource;

#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("the secrets key {0}: {1}")]
    BadKey(String, String),
    #[error("cannot read the secrets key file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write the secrets key file {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("a value was sealed with secrets key {sealed_with}, but this key is {this}")]
    WrongKey { sealed_with: String, this: String },
    #[error(
        "a sealed value does not open with secrets key {0}: it was altered or the key is wrong"
    )]
    Corrupt(String),
}

/// The server's secrets key.
#[derive(Clone)]
pub struct SecretsKey {
    cipher: XChaCha20Poly1305,
    id: String,
}

impl std::fmt::Debug for SecretsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretsKey({})", self.id)
    }
}

impl SecretsKey {
    /// A key from its base64 text; `what` names where it came from in errors.
    pub fn from_base64(text: &str, what: &str) -> Result<Self, SealError> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|e| SealError::BadKey(what.into(), format!("is not base64: {e}")))?;
        if bytes.len() != 32 {
            return Err(SealError::BadKey(
                what.into(),
                format!(
                    "must be 32 bytes (base64 of 32 random bytes), got {}",
                    bytes.len()
                ),
            ));
        }
        let id =
            hex::encode(&Sha256::digest([b"bosun-secrets-key:".as_slice(), &bytes].concat())[..8]);
        let cipher = XChaCha20Poly1305::new_from_slice(&bytes)
            .map_err(|e| SealError::BadKey(what.into(), e.to_string()))?;
        Ok(SecretsKey { cipher, id })
    }

    pub fn load(source: &KeySource) -> Result<Self, SealError> {
        match source {
            KeySource::Value(v) => Self::from_base64(&v.0, "in BOSUN_SECRETS_KEY"),
            KeySource::File(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| SealError::Read {
                    path: path.clone(),
                    source,
                })?;
                Self::from_base64(&text, &format!("in {}", path.display()))
            }
        }
    }

    /// Writes a new random key to `path` (0600, created exclusively) and returns it.
    pub fn generate_into(path: &Path) -> Result<Self, SealError> {
        let mut bytes = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut bytes);
        let text = base64::engine::general_purpose::STANDARD.encode(bytes);
        let err = |source| SealError::Write {
            path: path.to_path_buf(),
            source,
        };
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut file = options.open(path).map_err(err)?;
        std::io::Write::write_all(&mut file, format!("{text}\n").as_bytes()).map_err(err)?;
        file.sync_all().map_err(err)?;
        Self::from_base64(&text, &format!("in {}", path.display()))
    }

    /// The key's fingerprint, stored with every value it seals.
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn seal(&self, plaintext: &[u8]) -> Result<Sealed, SealError> {
        let mut nonce = [0u8; 24];
        rand::thread_rng().fill_bytes(&mut nonce);
        let ciphertext = self
            .cipher
            .encrypt(XNonce::from_slice(&nonce), plaintext)
            .map_err(|_| SealError::Corrupt(self.id.clone()))?;
        Ok(Sealed {
            ciphertext,
            nonce: nonce.to_vec(),
            key_id: self.id.clone(),
        })
    }

    pub fn open(&self, sealed: &Sealed) -> Result<Vec<u8>, SealError> {
        if sealed.key_id != self.id {
            return Err(SealError::WrongKey {
                sealed_with: sealed.key_id.clone(),
                this: self.id.clone(),
            });
        }
        if sealed.nonce.len() != 24 {
            return Err(SealError::Corrupt(self.id.clone()));
        }
        self.cipher
            .decrypt(
                XNonce::from_slice(&sealed.nonce),
                sealed.ciphertext.as_slice(),
            )
            .map_err(|_| SealError::Corrupt(self.id.clone()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn key() -> SecretsKey {
        SecretsKey::from_base64(
            &base64::engine::general_purpose::STANDARD.encode([7u8; 32]),
            "test",
        )
        .unwrap()
    }

    #[test]
    fn seals_and_opens_and_refuses_tampering_or_another_key() {
        let k = key();
        let s = k.seal(b"hunter2").unwrap();
        assert_ne!(s.ciphertext, b"hunter2");
        assert_eq!(k.open(&s).unwrap(), b"hunter2");
        let mut t = s.clone();
        t.ciphertext[0] ^= 1;
        assert!(matches!(k.open(&t), Err(SealError::Corrupt(_))));
        let other = SecretsKey::from_base64(
            &base64::engine::general_purpose::STANDARD.encode([8u8; 32]),
            "o",
        )
        .unwrap();
        assert!(matches!(other.open(&s), Err(SealError::WrongKey { .. })));
        // Two seals of one value differ (fresh nonces).
        assert_ne!(
            k.seal(b"x").unwrap().ciphertext,
            k.seal(b"x").unwrap().ciphertext
        );
    }

    #[test]
    fn bad_keys_are_named() {
        let e = SecretsKey::from_base64("c2hvcnQ=", "in /etc/key").unwrap_err();
        assert!(
            e.to_string().contains("in /etc/key") && e.to_string().contains("32 bytes"),
            "{e}"
        );
        let e = SecretsKey::from_base64("!!", "in env").unwrap_err();
        assert!(e.to_string().contains("not base64"), "{e}");
    }
}
