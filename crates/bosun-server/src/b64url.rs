//! Base64url without padding: how Bosun writes bytes as text that URLs, headers and
//! cookies carry as they are (random secrets, PKCE challenges, sealed handles, flashes).

use base64::Engine as _;

pub fn encode(bytes: impl AsRef<[u8]>) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The bytes `text` encodes; `None` when it is no base64url.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .ok()
}
