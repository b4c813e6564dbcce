//! The OIDC issuer's process state shared by its handlers and its key rotation duty.

/// Serializes key generation, so concurrent first requests make one key.
#[derive(Default)]
pub struct Issuer {
    pub(crate) keygen: tokio::sync::Mutex<()>,
}
