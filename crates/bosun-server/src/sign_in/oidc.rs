//! The OpenID Connect relying party: one configured identity provider, reached over HTTP.
//! Discovery from the issuer URL (its `issuer` must be the configured one), the
//! authorization URL of the code flow with PKCE (`S256`), `state` and `nonce`, the code
//! and refresh-token exchanges, the userinfo read, and the ID token's validation: the
//! signature by a key of the provider's JWKS (fetched again, once, when a token names a
//! key it lacks, so a provider rotating its keys is followed: ID tokens reach Bosun only
//! from the provider's own token endpoint, so no one else can make it fetch), `iss`,
//! `aud` (and `azp`), `exp` and `iat` within
//! [`CLOCK_SKEW`], and the `nonce` sent. Every answer is read within a size and a time
//! bound; an asymmetric algorithm is required (never `none`, never a shared secret).

use std::time::{Duration, Instant};

use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::RwLock;

use super::config::{check_provider_url, SignInProvider};
use crate::http_out::{read_bounded, ReadError};

/// How far the provider's clock and ours may disagree on `exp` and `iat`.
pub const CLOCK_SKEW: u64 = 60;
/// The cached discovery document and JWKS are read again after this.
pub const CACHE_FOR: Duration = Duration::from_secs(3600);
/// Each request to the provider must be answered within this.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest discovery document, token answer or userinfo answer read.
pub const MAX_DOCUMENT_BYTES: usize = 64 * 1024;
/// The largest JWKS read.
pub const MAX_JWKS_BYTES: usize = 256 * 1024;
/// The longest ID token validated.
pub const MAX_ID_TOKEN_BYTES: usize = 32 * 1024;

/// Why talking to the provider, or what it answered, failed. The message names the
/// provider's part at fault and never holds a token.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    /// The provider could not be reached or answered something unusable.
    #[error("identity provider {provider}: {message}")]
    Provider { provider: String, message: String },
    /// The provider refused (an `error` in its answer: `invalid_grant`, …).
    #[error("identity provider {provider} refused: {error}{}", .description.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Refused {
        provider: String,
        error: String,
        description: Option<String>,
    },
    /// The ID token failed validation.
    #[error("the ID token from {provider} is not valid: {message}")]
    InvalidToken { provider: String, message: String },
}

/// What the provider's discovery document says, as far as Bosun uses it.
#[derive(Debug, Clone, Deserialize)]
pub struct Metadata {
    pub issuer: String,
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    pub jwks_uri: String,
    #[serde(default)]
    pub userinfo_endpoint: Option<String>,
    #[serde(default)]
    pub end_session_endpoint: Option<String>,
    #[serde(default)]
    pub device_authorization_endpoint: Option<String>,
    #[serde(default)]
    pub code_challenge_methods_supported: Vec<String>,
}

/// The device authorization endpoint's answer (RFC 8628).
#[derive(Debug, Clone, Deserialize)]
pub struct DeviceAuthorization {
    pub device_code: String,
    pub user_code: String,
    pub verification_uri: String,
    #[serde(default)]
    pub verification_uri_complete: Option<String>,
    pub expires_in: u64,
    #[serde(default)]
    pub interval: Option<u64>,
}

/// The token endpoint's answer.
#[derive(Debug, Clone, Deserialize)]
pub struct Tokens {
    pub access_token: String,
    #[serde(default)]
    pub id_token: Option<String>,
    #[serde(default)]
    pub refresh_token: Option<String>,
}

/// One sign-in's secrets: `state` and `nonce` echo back, the verifier proves the code is
/// ours (PKCE).
#[derive(Debug, Clone)]
pub struct Challenge {
    pub state: String,
    pub nonce: String,
    pub verifier: String,
}

impl Challenge {
    pub fn new() -> Self {
        Challenge {
            state: random_text(),
            nonce: random_text(),
            verifier: random_text(),
        }
    }
}

impl Default for Challenge {
    fn default() -> Self {
        Self::new()
    }
}

/// 32 random bytes, base64url.
pub fn random_text() -> String {
    let bytes: [u8; 32] = rand::random();
    crate::b64url::encode(bytes)
}

/// The PKCE `S256` challenge of a verifier.
pub fn pkce_challenge(verifier: &str) -> String {
    crate::b64url::encode(Sha256::digest(verifier.as_bytes()))
}

struct Cached<T> {
    value: T,
    at: Instant,
}

/// One provider: its configuration, and the discovery document and keys read from it.
pub struct OidcClient {
    pub config: SignInProvider,
    http: reqwest::Client,
    metadata: RwLock<Option<Cached<Metadata>>>,
    keys: RwLock<Option<Cached<Vec<Jwk>>>>,
    /// How its discovery last went: 0 not asked yet, 1 answered well, 2 failed.
    up: std::sync::atomic::AtomicU8,
    /// Until when a refresh is not asked of it again, after it could not be reached.
    resting_until: std::sync::Mutex<Option<Instant>>,
}

/// How long sessions' refreshes leave a provider alone after it could not be reached:
/// pages stay fast through its outage, and it is asked again soon after.
pub const REST_AFTER_FAILURE: Duration = Duration::from_secs(30);

impl OidcClient {
    pub fn new(config: SignInProvider) -> Result<Self, OidcError> {
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| OidcError::Provider {
                provider: config.id.clone(),
                message: format!("cannot build an HTTP client: {e}"),
            })?;
        Ok(OidcClient {
            config,
            http,
            metadata: RwLock::new(None),
            keys: RwLock::new(None),
            up: std::sync::atomic::AtomicU8::new(0),
            resting_until: std::sync::Mutex::new(None),
        })
    }

    fn error(&self, message: impl Into<String>) -> OidcError {
        OidcError::Provider {
            provider: self.config.id.clone(),
            message: message.into(),
        }
    }

    fn invalid(&self, message: impl Into<String>) -> OidcError {
        OidcError::InvalidToken {
            provider: self.config.id.clone(),
            message: message.into(),
        }
    }

    /// Whether refreshes leave it alone for now, since it could not be reached a moment
    /// ago.
    fn resting(&self) -> bool {
        self.resting_until
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|until| Instant::now() < until)
    }

    /// Whether its discovery last answered a document Bosun can use; `None` before it
    /// was first asked.
    pub fn reachable(&self) -> Option<bool> {
        match self.up.load(std::sync::atomic::Ordering::Relaxed) {
            1 => Some(true),
            2 => Some(false),
            _ => None,
        }
    }

    /// The discovery document (cached for [`CACHE_FOR`]).
    pub async fn metadata(&self) -> Result<Metadata, OidcError> {
        if let Some(c) = self.metadata.read().await.as_ref() {
            if c.at.elapsed() < CACHE_FOR {
                return Ok(c.value.clone());
            }
        }
        let found = self.discover().await;
        self.up.store(
            if found.is_ok() { 1 } else { 2 },
            std::sync::atomic::Ordering::Relaxed,
        );
        found
    }

    /// Reads and checks the discovery document, caching it.
    async fn discover(&self) -> Result<Metadata, OidcError> {
        let url = format!(
            "{}/.well-known/openid-configuration",
            self.config.issuer.trim_end_matches('/')
        );
        let doc: Metadata = self.get_json(&url, MAX_DOCUMENT_BYTES, None).await?;
        if doc.issuer != self.config.issuer {
            return Err(self.error(format!(
                "its discovery document names issuer {:?}, not the configured {:?}",
                doc.issuer, self.config.issuer
            )));
        }
        for (name, url) in [
            ("authorization_endpoint", Some(&doc.authorization_endpoint)),
            ("token_endpoint", Some(&doc.token_endpoint)),
            ("jwks_uri", Some(&doc.jwks_uri)),
            ("userinfo_endpoint", doc.userinfo_endpoint.as_ref()),
            ("end_session_endpoint", doc.end_session_endpoint.as_ref()),
            (
                "device_authorization_endpoint",
                doc.device_authorization_endpoint.as_ref(),
            ),
        ] {
            if let Some(url) = url {
                check_provider_url(url)
                    .map_err(|why| self.error(format!("its {name} {url:?} {why}")))?;
            }
        }
        if !doc.code_challenge_methods_supported.is_empty()
            && !doc
                .code_challenge_methods_supported
                .iter()
                .any(|m| m == "S256")
        {
            return Err(self.error("it does not support PKCE with S256"));
        }
        *self.metadata.write().await = Some(Cached {
            value: doc.clone(),
            at: Instant::now(),
        });
        Ok(doc)
    }

    /// Where the browser goes to sign in.
    pub async fn authorization_url(
        &self,
        challenge: &Challenge,
        redirect_uri: &str,
    ) -> Result<String, OidcError> {
        let meta = self.metadata().await?;
        let mut url = reqwest::Url::parse(&meta.authorization_endpoint)
            .map_err(|e| self.error(format!("its authorization_endpoint: {e}")))?;
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &self.config.client_id)
            .append_pair("redirect_uri", redirect_uri)
            .append_pair("scope", &self.config.scopes.join(" "))
            .append_pair("state", &challenge.state)
            .append_pair("nonce", &challenge.nonce)
            .append_pair("code_challenge", &pkce_challenge(&challenge.verifier))
            .append_pair("code_challenge_method", "S256");
        Ok(url.to_string())
    }

    /// Where the browser goes to sign out at the provider too (RP-initiated logout), when
    /// it offers that: its end-session endpoint with the session's ID token as the hint
    /// and `back` to return to.
    pub async fn end_session_url(
        &self,
        id_token: Option<&str>,
        back: &str,
    ) -> Result<Option<String>, OidcError> {
        let meta = self.metadata().await?;
        let Some(endpoint) = meta.end_session_endpoint else {
            return Ok(None);
        };
        let mut url = reqwest::Url::parse(&endpoint)
            .map_err(|e| self.error(format!("its end_session_endpoint: {e}")))?;
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("client_id", &self.config.client_id)
                .append_pair("post_logout_redirect_uri", back);
            if let Some(t) = id_token {
                q.append_pair("id_token_hint", t);
            }
        }
        Ok(Some(url.to_string()))
    }

    /// Exchanges the callback's code for tokens.
    pub async fn exchange_code(
        &self,
        code: &str,
        verifier: &str,
        redirect_uri: &str,
    ) -> Result<Tokens, OidcError> {
        self.token_request(&[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", redirect_uri),
            ("code_verifier", verifier),
        ])
        .await
    }

    /// Whether the provider offers the device authorization grant (RFC 8628).
    pub async fn offers_device_flow(&self) -> Result<bool, OidcError> {
        Ok(self
            .metadata()
            .await?
            .device_authorization_endpoint
            .is_some())
    }

    /// Begins a device authorization (a CLI login): the codes the person enters at the
    /// provider. Refused when the provider offers no device authorization endpoint.
    pub async fn device_authorization(&self) -> Result<DeviceAuthorization, OidcError> {
        let meta = self.metadata().await?;
        let endpoint = meta.device_authorization_endpoint.ok_or_else(|| {
            self.error("it offers no device authorization endpoint (RFC 8628); sign in to the console instead")
        })?;
        let scope = self.config.scopes.join(" ");
        let mut form: Vec<(&str, &str)> = vec![("scope", &scope)];
        let mut req = self.http.post(&endpoint);
        match &self.config.client_secret {
            Some(secret) => req = req.basic_auth(&self.config.client_id, Some(&secret.0)),
            None => form.push(("client_id", &self.config.client_id)),
        }
        let reply =
            req.form(&form).send().await.map_err(|e| {
                self.error(format!("its device authorization endpoint: {}", plain(&e)))
            })?;
        let value = self.answer(reply, "device authorization endpoint").await?;
        serde_json::from_value(value)
            .map_err(|e| self.error(format!("its device authorization answer: {e}")))
    }

    /// Asks whether the person has approved a device authorization: tokens when they
    /// have; `Refused` with `authorization_pending` or `slow_down` while not yet.
    pub async fn poll_device(&self, device_code: &str) -> Result<Tokens, OidcError> {
        self.token_request(&[
            ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"),
            ("device_code", device_code),
        ])
        .await
    }

    /// New tokens for a refresh token.
    pub async fn refresh(&self, refresh_token: &str) -> Result<Tokens, OidcError> {
        if self.resting() {
            return Err(self.error(format!(
                "it could not be reached less than {}s ago; it is asked again shortly",
                REST_AFTER_FAILURE.as_secs()
            )));
        }
        let answered = self
            .token_request(&[
                ("grant_type", "refresh_token"),
                ("refresh_token", refresh_token),
            ])
            .await;
        if let Err(OidcError::Provider { .. }) = &answered {
            *self.resting_until.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(Instant::now() + REST_AFTER_FAILURE);
        }
        answered
    }

    async fn token_request(&self, form: &[(&str, &str)]) -> Result<Tokens, OidcError> {
        let meta = self.metadata().await?;
        let mut req = self.http.post(&meta.token_endpoint);
        let mut form: Vec<(&str, &str)> = form.to_vec();
        match &self.config.client_secret {
            Some(secret) => req = req.basic_auth(&self.config.client_id, Some(&secret.0)),
            None => form.push(("client_id", &self.config.client_id)),
        }
        let reply = req
            .form(&form)
            .send()
            .await
            .map_err(|e| self.error(format!("its token endpoint: {}", plain(&e))))?;
        let value = self.answer(reply, "token endpoint").await?;
        serde_json::from_value(value).map_err(|e| self.error(format!("its token answer: {e}")))
    }

    /// An OAuth endpoint's JSON answer; its `error` as [`OidcError::Refused`].
    async fn answer(&self, reply: reqwest::Response, what: &str) -> Result<Value, OidcError> {
        let status = reply.status();
        let body = self.read(reply, MAX_DOCUMENT_BYTES).await?;
        let value: Value = serde_json::from_slice(&body)
            .map_err(|_| self.error(format!("its {what} answered {status} without JSON")))?;
        if let Some(error) = value.get("error").and_then(Value::as_str) {
            return Err(OidcError::Refused {
                provider: self.config.id.clone(),
                error: error.chars().take(200).collect(),
                description: value
                    .get("error_description")
                    .and_then(Value::as_str)
                    .map(|d| d.chars().take(500).collect()),
            });
        }
        if !status.is_success() {
            return Err(self.error(format!("its {what} answered {status}")));
        }
        Ok(value)
    }

    /// The userinfo endpoint's claims for an access token, when the provider has one;
    /// their `sub` must be `subject`.
    pub async fn userinfo(&self, access_token: &str, subject: &str) -> Result<Value, OidcError> {
        let meta = self.metadata().await?;
        let Some(url) = meta.userinfo_endpoint else {
            return Ok(Value::Object(Default::default()));
        };
        let claims: Value = self
            .get_json(&url, MAX_DOCUMENT_BYTES, Some(access_token))
            .await?;
        if claims.get("sub").and_then(Value::as_str) != Some(subject) {
            return Err(self.invalid("the userinfo answer is about another subject"));
        }
        Ok(claims)
    }

    /// Validates an ID token and answers its claims. `nonce`: the one the sign-in sent
    /// (a refreshed token may carry none; one it carries must still be ours).
    pub async fn validate_id_token(
        &self,
        token: &str,
        nonce: Option<&str>,
    ) -> Result<Value, OidcError> {
        if token.len() > MAX_ID_TOKEN_BYTES {
            return Err(self.invalid(format!("it is longer than {MAX_ID_TOKEN_BYTES} bytes")));
        }
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| self.invalid(format!("its header: {e}")))?;
        let alg = header.alg;
        if matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) {
            return Err(self.invalid(format!(
                "it is signed with {alg:?}, a shared secret; an asymmetric key is required"
            )));
        }
        let jwk = self.key_for(header.kid.as_deref(), alg).await?;
        let key = DecodingKey::from_jwk(&jwk).map_err(|e| self.invalid(format!("key: {e}")))?;
        let meta = self.metadata().await?;
        let mut validation = Validation::new(alg);
        validation.leeway = CLOCK_SKEW;
        validation.set_issuer(&[meta.issuer.as_str()]);
        validation.set_audience(&[self.config.client_id.as_str()]);
        validation.set_required_spec_claims(&["exp", "iat", "iss", "aud", "sub"]);
        let data = jsonwebtoken::decode::<Value>(token, &key, &validation).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind::*;
            self.invalid(match e.kind() {
                InvalidSignature => "its signature does not verify".to_string(),
                ExpiredSignature => "it has expired (exp)".to_string(),
                InvalidAudience => format!(
                    "its audience (aud) is not this client ({})",
                    self.config.client_id
                ),
                InvalidIssuer => format!("its issuer (iss) is not {}", meta.issuer),
                MissingRequiredClaim(c) => format!("it lacks the {c} claim"),
                other => format!("{other:?}"),
            })
        })?;
        let claims = data.claims;
        let now = chrono::Utc::now().timestamp();
        let iat = claims.get("iat").and_then(Value::as_i64).unwrap_or(0);
        if iat > now + CLOCK_SKEW as i64 {
            return Err(self.invalid("it was issued in the future (iat)"));
        }
        // Several audiences: it must have been issued to us (`azp`).
        if claims
            .get("aud")
            .and_then(Value::as_array)
            .is_some_and(|a| a.len() > 1)
            && claims.get("azp").and_then(Value::as_str) != Some(self.config.client_id.as_str())
        {
            return Err(self.invalid("it has several audiences and its azp is not this client"));
        }
        match (nonce, claims.get("nonce").and_then(Value::as_str)) {
            (Some(sent), Some(got))
                if crate::console::constant_eq(sent.as_bytes(), got.as_bytes()) => {}
            (Some(_), _) => {
                return Err(self.invalid("its nonce is not the one this sign-in sent"));
            }
            (None, _) => {}
        }
        if claims
            .get("sub")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(self.invalid("it names no subject (sub)"));
        }
        Ok(claims)
    }

    /// The provider's key for `kid` (and `alg`), fetching the JWKS again when it lacks it.
    async fn key_for(&self, kid: Option<&str>, alg: Algorithm) -> Result<Jwk, OidcError> {
        let find = |keys: &[Jwk]| -> Option<Jwk> {
            let fits = |k: &&Jwk| {
                k.common
                    .key_algorithm
                    .and_then(|a| a.to_string().parse::<Algorithm>().ok())
                    .is_none_or(|a| a == alg)
                    && !matches!(
                        k.common.public_key_use,
                        Some(jsonwebtoken::jwk::PublicKeyUse::Encryption)
                    )
            };
            match kid {
                Some(kid) => keys
                    .iter()
                    .filter(fits)
                    .find(|k| k.common.key_id.as_deref() == Some(kid))
                    .cloned(),
                // No kid: only a set with a single fitting key says which.
                None => {
                    let fitting: Vec<&Jwk> = keys.iter().filter(fits).collect();
                    (fitting.len() == 1).then(|| fitting[0].clone())
                }
            }
        };
        if let Some(c) = self.keys.read().await.as_ref() {
            if let Some(k) = find(&c.value).filter(|_| c.at.elapsed() < CACHE_FOR) {
                return Ok(k);
            }
        }
        {
            let meta = self.metadata().await?;
            let set: Value = self.get_json(&meta.jwks_uri, MAX_JWKS_BYTES, None).await?;
            // Keys Bosun cannot read (another kind, another use) are passed over.
            let keys: Vec<Jwk> = set
                .get("keys")
                .and_then(Value::as_array)
                .ok_or_else(|| self.error("its JWKS has no keys"))?
                .iter()
                .take(100)
                .filter_map(|k| serde_json::from_value(k.clone()).ok())
                .collect();
            let found = find(&keys);
            *self.keys.write().await = Some(Cached {
                value: keys,
                at: Instant::now(),
            });
            if let Some(k) = found {
                return Ok(k);
            }
        }
        Err(self.invalid(match kid {
            Some(kid) => {
                format!("it is signed with key {kid:?}, which the provider's JWKS does not hold")
            }
            None => "it names no key (kid) and the provider's JWKS has several".to_string(),
        }))
    }

    async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
        max: usize,
        bearer: Option<&str>,
    ) -> Result<T, OidcError> {
        let mut req = self.http.get(url).header("accept", "application/json");
        if let Some(token) = bearer {
            req = req.bearer_auth(token);
        }
        let reply = req
            .send()
            .await
            .map_err(|e| self.error(format!("{url}: {}", plain(&e))))?;
        let status = reply.status();
        if !status.is_success() {
            return Err(self.error(format!("{url} answered {status}")));
        }
        let body = self.read(reply, max).await?;
        serde_json::from_slice(&body).map_err(|e| self.error(format!("{url}: {e}")))
    }

    async fn read(&self, reply: reqwest::Response, max: usize) -> Result<Vec<u8>, OidcError> {
        read_bounded(reply, max).await.map_err(|e| match e {
            ReadError::TooLarge => self.error(format!("an answer was larger than {max} bytes")),
            ReadError::Transport(e) => self.error(plain(&e)),
        })
    }
}

/// A transport error in words, without its URL (whose query may hold a code).
fn plain(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        format!("no answer within {}s", REQUEST_TIMEOUT.as_secs())
    } else if e.is_connect() {
        "cannot connect".to_string()
    } else {
        std::error::Error::source(e)
            .map(|s| s.to_string())
            .unwrap_or_else(|| "the request failed".to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkce_is_s256_of_the_verifier() {
        // RFC 7636, appendix B.
        assert_eq!(
            pkce_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
        let c = Challenge::new();
        assert_ne!(c.state, c.nonce);
        assert_eq!(c.verifier.len(), 43);
    }
}
