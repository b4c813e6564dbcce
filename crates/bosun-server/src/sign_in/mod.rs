//! People sign in through their identity provider: the configured providers
//! ([`Providers`]), what a provider's claims make of a person ([`vouched`]: their
//! identity, the user id a first sign-in proposes, and the memberships the rules grant),
//! and a provider session vouched for again ([`refresh`]), so roles follow the provider
//! between sign-ins. The console's pages for it are `console/sign_in.rs`; the relying
//! party's protocol is [`oidc`]; the `[sign_in]` settings are [`config`].

pub mod config;
pub mod oidc;

use std::sync::Arc;

use bosun_core::sign_in::{memberships_from_claims, proposed_user_id, OrgScope};
use bosun_store::{ProviderSignIn, SessionGrant};
use serde_json::Value;

use crate::app::AppState;
use config::SignInConfig;
use oidc::{OidcClient, OidcError};

/// The most orgs a rule for every org (`org = "*"`) grants a role in.
pub const MAX_ORGS: u32 = 10_000;

/// The identity providers this server signs people in with, by id, in configured order,
/// and the budget of sign-ins it begins.
pub struct Providers {
    list: Vec<Arc<OidcClient>>,
    starts: StartBudget,
    /// Sign-ins finished, by (provider, way, result), for `/metrics`.
    finished: std::sync::Mutex<std::collections::BTreeMap<Finished, u64>>,
    /// Sign-in starts refused for the budget, for `/metrics`.
    limited: std::sync::atomic::AtomicU64,
}

/// A kind of sign-in finished: at which provider, which way, and whether it signed the
/// person in.
pub type Finished = (String, Way, bool);

/// How a person signed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Way {
    /// The console's button.
    Console,
    /// `bosun login` through the device flow.
    CliDevice,
    /// `bosun login` through this machine's browser.
    CliBrowser,
}

impl Way {
    pub fn as_str(self) -> &'static str {
        match self {
            Way::Console => "console",
            Way::CliDevice => "cli_device",
            Way::CliBrowser => "cli_browser",
        }
    }
}

impl Default for Providers {
    fn default() -> Self {
        Providers {
            list: Vec::new(),
            starts: StartBudget::new(config::DEFAULT_STARTS_PER_MINUTE),
            finished: Default::default(),
            limited: Default::default(),
        }
    }
}

impl Providers {
    pub fn new(config: &SignInConfig) -> Result<Self, OidcError> {
        Ok(Providers {
            list: config
                .providers
                .iter()
                .map(|p| OidcClient::new(p.clone()).map(Arc::new))
                .collect::<Result<_, _>>()?,
            starts: StartBudget::new(config.starts_per_minute),
            finished: Default::default(),
            limited: Default::default(),
        })
    }

    /// Counts a sign-in at a configured `provider` finished `way`: signed in, or refused.
    pub fn count(&self, provider: &str, way: Way, signed_in: bool) {
        if self.get(provider).is_none() {
            return;
        }
        let mut finished = self.finished.lock().unwrap_or_else(|p| p.into_inner());
        *finished
            .entry((provider.to_string(), way, signed_in))
            .or_default() += 1;
    }

    /// Each provider's id, and whether its discovery last answered well (`None`: not asked
    /// yet).
    pub fn reachability(&self) -> Vec<(String, Option<bool>)> {
        self.list
            .iter()
            .map(|p| (p.config.id.clone(), p.reachable()))
            .collect()
    }

    /// Sign-ins finished, by (provider, way, signed in), and starts refused for the budget.
    pub fn counts(&self) -> (Vec<(Finished, u64)>, u64) {
        let finished = self.finished.lock().unwrap_or_else(|p| p.into_inner());
        (
            finished.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            self.limited.load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// Takes one sign-in start from the budget (a console button, or a `bosun login`):
    /// refused while it is spent, with the seconds until one is back. Each start asks the
    /// provider and keeps a row until it expires, and needs no token, so no one can make
    /// the server do either without bound.
    pub fn begin_start(&self) -> Result<(), u64> {
        self.starts.take().inspect_err(|_| {
            self.limited
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        })
    }

    pub fn get(&self, id: &str) -> Option<Arc<OidcClient>> {
        self.list.iter().find(|p| p.config.id == id).cloned()
    }

    pub fn all(&self) -> &[Arc<OidcClient>] {
        &self.list
    }
}

/// Asks each provider for its discovery document once, as the server starts, so a
/// misconfigured or unreachable provider is logged (and shown by
/// `bosun_sign_in_provider_up`) before anyone tries to sign in. Nothing waits on it.
pub fn probe(providers: Arc<Providers>) {
    for client in providers.all().iter().cloned() {
        tokio::spawn(async move {
            match client.metadata().await {
                Ok(meta) => tracing::info!(
                    provider = %client.config.id,
                    device_flow = meta.device_authorization_endpoint.is_some(),
                    "identity provider answers its discovery"
                ),
                Err(e) => tracing::warn!(
                    provider = %client.config.id,
                    "identity provider cannot be used yet, sign-ins with it will fail: {e}"
                ),
            }
        });
    }
}

/// A token bucket of `per_minute` starts, refilled evenly, as many as that at once.
struct StartBudget {
    per_minute: u32,
    /// Starts left, and when that was counted.
    left: std::sync::Mutex<(f64, std::time::Instant)>,
}

impl StartBudget {
    fn new(per_minute: u32) -> Self {
        StartBudget {
            per_minute: per_minute.max(1),
            left: std::sync::Mutex::new((per_minute.max(1) as f64, std::time::Instant::now())),
        }
    }

    fn take(&self) -> Result<(), u64> {
        let rate = self.per_minute as f64 / 60.0;
        let mut left = self.left.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        left.0 =
            (left.0 + now.duration_since(left.1).as_secs_f64() * rate).min(self.per_minute as f64);
        left.1 = now;
        if left.0 >= 1.0 {
            left.0 -= 1.0;
            Ok(())
        } else {
            Err((((1.0 - left.0) / rate).ceil() as u64).max(1))
        }
    }
}

/// Claims too large to keep: each string claim Bosun reads is cut to this.
const MAX_CLAIM_TEXT: usize = 256;

fn text_claim(claims: &Value, name: &str) -> Option<String> {
    claims
        .get(name)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(|s| s.chars().take(MAX_CLAIM_TEXT).collect())
}

/// The ID token's claims with the userinfo answer's laid over them (it is the fresher
/// for profile claims and groups); the token's own protocol claims stay.
pub fn merge_claims(id_token: Value, userinfo: Value) -> Value {
    let mut claims = id_token;
    if let (Value::Object(into), Value::Object(from)) = (&mut claims, userinfo) {
        for (k, v) in from {
            if !matches!(
                k.as_str(),
                "iss" | "aud" | "exp" | "iat" | "nbf" | "nonce" | "sub" | "azp"
            ) {
                into.insert(k, v);
            }
        }
    }
    claims
}

/// What `provider`'s claims make of the person: identity, proposed user id, and the
/// memberships its rules grant now. A claim the rules cannot read is a refusal naming it.
pub async fn vouched(
    state: &AppState,
    provider: &OidcClient,
    claims: &Value,
) -> Result<ProviderSignIn, String> {
    let p = &provider.config;
    let subject = text_claim(claims, "sub").ok_or("the provider named no subject (sub)")?;
    let issuer = text_claim(claims, "iss").unwrap_or_else(|| p.issuer.clone());
    let email = text_claim(claims, &p.email_claim);
    let username = text_claim(claims, &p.username_claim);
    let every_org = p.rules.iter().any(|r| r.org == OrgScope::Every);
    let orgs: Vec<String> = if every_org {
        state
            .store
            .org_ids(MAX_ORGS)
            .await
            .map_err(|e| format!("cannot read the orgs: {e}"))?
    } else {
        p.rules
            .iter()
            .filter_map(|r| match &r.org {
                OrgScope::One(o) => Some(o.to_string()),
                OrgScope::Every => None,
            })
            .collect()
    };
    let granted = memberships_from_claims(&p.rules, claims, &orgs)
        .map_err(|e| format!("claim {}: {}", e.field, e.message))?;
    // Only orgs that exist get a membership (a rule may name one not created yet).
    let mut existing = std::collections::BTreeMap::new();
    for (org, g) in granted {
        if every_org
            || state
                .store
                .get_org(&org)
                .await
                .map_err(|e| e.to_string())?
                .is_some()
        {
            existing.insert(org, g);
        }
    }
    let name = username
        .clone()
        .or_else(|| email.clone())
        .unwrap_or_else(|| subject.clone());
    Ok(ProviderSignIn {
        provider: p.id.clone(),
        issuer,
        subject,
        email,
        username,
        proposed_user: proposed_user_id(&name),
        granted: existing,
    })
}

/// What a provider's fresh tokens (from a code or a device grant) make of the person:
/// the ID token validated (with the `nonce` the sign-in sent, if it sent one), userinfo
/// read and laid over it, the person vouched for; with the ID token itself and the
/// refresh token sealed for the session. An error says what was wrong.
pub async fn from_tokens(
    state: &AppState,
    provider: &OidcClient,
    tokens: &oidc::Tokens,
    nonce: Option<&str>,
) -> Result<Vouched, String> {
    let id_token = tokens
        .id_token
        .clone()
        .ok_or("the identity provider answered no ID token")?;
    let claims = provider
        .validate_id_token(&id_token, nonce)
        .await
        .map_err(|e| e.to_string())?;
    let subject = claims
        .get("sub")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let (who, refresh) = vouch(state, provider, claims, tokens, &subject).await?;
    Ok(Vouched {
        who,
        id_token,
        refresh,
    })
}

/// The step both a sign-in and a refresh end with: the validated ID token's `claims` with
/// the userinfo answer (about `subject`) laid over them, the person vouched for, and the
/// provider's refresh token sealed.
async fn vouch(
    state: &AppState,
    provider: &OidcClient,
    claims: Value,
    tokens: &oidc::Tokens,
    subject: &str,
) -> Result<(ProviderSignIn, Option<bosun_store::Sealed>), String> {
    let userinfo = provider
        .userinfo(&tokens.access_token, subject)
        .await
        .map_err(|e| e.to_string())?;
    let who = vouched(state, provider, &merge_claims(claims, userinfo)).await?;
    let refresh = match &tokens.refresh_token {
        Some(t) => Some(
            state
                .secrets_key
                .seal(t.as_bytes())
                .map_err(|e| format!("cannot seal the refresh token: {e}"))?,
        ),
        None => None,
    };
    Ok((who, refresh))
}

/// A person a provider's fresh tokens vouched for ([`from_tokens`]).
pub struct Vouched {
    pub who: ProviderSignIn,
    pub id_token: String,
    /// The provider's refresh token, sealed with the secrets key.
    pub refresh: Option<bosun_store::Sealed>,
}

/// Why a session could not be vouched for again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefreshError {
    /// The provider no longer vouches for the person (or the session cannot be refreshed
    /// at all): the session ends.
    Refused(String),
    /// The provider (or the store) cannot be asked right now: the session stays as it is
    /// and is refreshed later, so an outage of the provider signs no one out.
    Unavailable(String),
}

impl std::fmt::Display for RefreshError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RefreshError::Refused(why) | RefreshError::Unavailable(why) => f.write_str(why),
        }
    }
}

impl From<String> for RefreshError {
    fn from(why: String) -> Self {
        RefreshError::Refused(why)
    }
}

impl From<&str> for RefreshError {
    fn from(why: &str) -> Self {
        RefreshError::Refused(why.to_string())
    }
}

impl From<OidcError> for RefreshError {
    fn from(e: OidcError) -> Self {
        match e {
            OidcError::Provider { .. } => RefreshError::Unavailable(e.to_string()),
            OidcError::Refused { .. } | OidcError::InvalidToken { .. } => {
                RefreshError::Refused(e.to_string())
            }
        }
    }
}

/// Asks the provider of a session to vouch for its person again (the refresh token's
/// grant, the new ID token, userinfo) and brings their memberships in line. A
/// [`RefreshError::Refused`] is why the session must end; an `Unavailable` one leaves it
/// be.
pub async fn refresh(state: &AppState, grant: &SessionGrant) -> Result<(), RefreshError> {
    let session = &grant.session;
    let provider = session
        .provider
        .as_deref()
        .and_then(|id| state.sign_in.get(id))
        .ok_or("its identity provider is no longer configured")?;
    let sealed = session
        .refresh
        .as_ref()
        .ok_or("the identity provider gave no refresh token; sign in again")?;
    let refresh_token = state
        .secrets_key
        .open(sealed)
        .map_err(|e| format!("its refresh token cannot be opened: {e}"))?;
    let refresh_token = String::from_utf8(refresh_token)
        .map_err(|_| "its refresh token is not text".to_string())?;
    let tokens = provider.refresh(&refresh_token).await?;
    let mut claims = match &tokens.id_token {
        Some(t) => provider.validate_id_token(t, None).await?,
        None => serde_json::json!({}),
    };
    // The subject is the session's person's, whatever the provider answers.
    let sub = session
        .subject
        .clone()
        .ok_or("the session's subject is unknown; sign in again")?;
    if claims
        .get("sub")
        .and_then(Value::as_str)
        .is_some_and(|s| s != sub)
    {
        return Err("the identity provider answered for another subject".into());
    }
    if let Value::Object(o) = &mut claims {
        o.insert("sub".into(), Value::String(sub.clone()));
        o.entry("iss")
            .or_insert(Value::String(provider.config.issuer.clone()));
    }
    let (who, rotated) = vouch(state, &provider, claims, &tokens, &sub).await?;
    state
        .store
        .refresh_session(
            &session.id,
            &who,
            tokens.id_token.as_deref(),
            rotated.as_ref(),
        )
        .await
        .map_err(|e| RefreshError::Unavailable(e.to_string()))?;
    Ok(())
}

#[cfg(test)]
mod budget_tests {
    use super::StartBudget;

    #[test]
    fn the_start_budget_allows_its_burst_then_refuses_saying_when() {
        let budget = StartBudget::new(3);
        for _ in 0..3 {
            assert_eq!(budget.take(), Ok(()));
        }
        // Three a minute: one is back within 20 s.
        let wait = budget.take().unwrap_err();
        assert!((1..=20).contains(&wait), "{wait}");
        // Refilled as time passes (here, the last count moved back a minute).
        budget.left.lock().unwrap().1 -= std::time::Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(budget.take(), Ok(()));
        }
        assert!(budget.take().is_err());
    }
}
