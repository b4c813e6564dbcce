//! The `[sign_in]` table of the config file: whether a personal token may still open a
//! console session (break-glass), how long sessions last, and the identity providers
//! people sign in with, each with the rules that map its claims to org memberships.
//!
//! ```toml
//! [sign_in]
//! token_login = true        # false: only the providers open sessions
//! session_idle = "8h"       # a session unused this long ends
//! session_max = "24h"       # and none lasts longer than this
//! refresh_every = "10m"     # how often a provider session is vouched for again
//! keep_ended_sessions = "90days"  # ended (or expired) sessions are then deleted; 0s: keep
//! starts_per_minute = 300   # sign-ins begun on this server (console and bosun login)
//!
//! [[sign_in.providers]]
//! id = "corp"               # a slug: in URLs, audit entries and `bosun login --provider`
//! name = "Corp SSO"         # the sign-in button's label
//! issuer = "https://idp.example.com"
//! client_id = "bosun"
//! client_secret_file = "/etc/bosun/corp-secret"   # none: a public client (PKCE only)
//! scopes = ["openid", "email", "profile", "groups"]
//! username_claim = "preferred_username"
//! email_claim = "email"
//! groups_claim = "groups"
//!
//! [[sign_in.providers.roles]]
//! group = "platform-admins" # a value of the groups claim (or of `claim`, when given)
//! org = "*"                 # every org, or one org's id
//! role = "admin"
//! ```

use std::path::PathBuf;
use std::time::Duration;

use bosun_core::sign_in::{RoleRule, MAX_RULES};
use bosun_core::Slug;
use serde::Deserialize;

use crate::config::{ConfigError, Secret};

pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(8 * 3600);
pub const DEFAULT_SESSION_MAX: Duration = Duration::from_secs(24 * 3600);
pub const DEFAULT_REFRESH_EVERY: Duration = Duration::from_secs(600);
pub const DEFAULT_KEEP_ENDED_SESSIONS: Duration = Duration::from_secs(90 * 24 * 3600);
/// Sign-ins one server begins per minute (each asks the provider and keeps a row for up to
/// ten minutes), a burst of as many at once.
pub const DEFAULT_STARTS_PER_MINUTE: u32 = 300;
/// The most `starts_per_minute` may be.
pub const MAX_STARTS_PER_MINUTE: u32 = 100_000;
/// The most providers one server may have.
pub const MAX_PROVIDERS: usize = 16;

/// `[sign_in]` as written.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SignInFile {
    pub token_login: Option<bool>,
    pub session_idle: Option<String>,
    pub session_max: Option<String>,
    pub refresh_every: Option<String>,
    pub keep_ended_sessions: Option<String>,
    pub starts_per_minute: Option<u32>,
    #[serde(default)]
    pub providers: Vec<ProviderFile>,
}

/// One `[[sign_in.providers]]` as written.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProviderFile {
    pub id: String,
    pub name: Option<String>,
    pub issuer: String,
    pub client_id: String,
    pub client_secret_file: Option<PathBuf>,
    pub scopes: Option<Vec<String>>,
    pub username_claim: Option<String>,
    pub email_claim: Option<String>,
    pub groups_claim: Option<String>,
    #[serde(default)]
    pub roles: Vec<RoleFile>,
}

/// One rule as written.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RoleFile {
    /// The claim to look in; the provider's `groups_claim` when left out.
    pub claim: Option<String>,
    pub group: String,
    pub org: String,
    pub role: String,
}

/// How people sign in, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct SignInConfig {
    pub token_login: bool,
    pub session_idle: Duration,
    pub session_max: Duration,
    pub refresh_every: Duration,
    /// How long an ended (or expired) session is kept, for its person's list and the
    /// audit of why it ended; zero: forever.
    pub keep_ended_sessions: Duration,
    /// Sign-ins this server begins per minute (console buttons and `bosun login` alike);
    /// more are refused until the budget refills.
    pub starts_per_minute: u32,
    pub providers: Vec<SignInProvider>,
}

impl Default for SignInConfig {
    fn default() -> Self {
        SignInConfig {
            token_login: true,
            session_idle: DEFAULT_SESSION_IDLE,
            session_max: DEFAULT_SESSION_MAX,
            refresh_every: DEFAULT_REFRESH_EVERY,
            keep_ended_sessions: DEFAULT_KEEP_ENDED_SESSIONS,
            starts_per_minute: DEFAULT_STARTS_PER_MINUTE,
            providers: Vec::new(),
        }
    }
}

/// One identity provider, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct SignInProvider {
    pub id: String,
    pub name: String,
    pub issuer: String,
    pub client_id: String,
    pub client_secret: Option<Secret>,
    pub scopes: Vec<String>,
    pub username_claim: String,
    pub email_claim: String,
    pub groups_claim: String,
    pub rules: Vec<RoleRule>,
}

const KEY: &str = "sign_in";

fn invalid(message: String) -> ConfigError {
    ConfigError::Invalid { key: KEY, message }
}

fn duration(name: &str, raw: Option<&String>, default: Duration) -> Result<Duration, ConfigError> {
    match raw {
        None => Ok(default),
        Some(text) => {
            humantime::parse_duration(text).map_err(|e| invalid(format!("{name} {text:?}: {e}")))
        }
    }
}

/// Where a provider may live: `https`, or `http` on this machine only (a provider on
/// loopback, as in a test or beside the server).
pub fn check_provider_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("is not a URL: {e}"))?;
    match parsed.scheme() {
        "https" => Ok(()),
        "http" => {
            let host = parsed.host_str().unwrap_or_default();
            let loopback = host == "localhost"
                || host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|a| a.is_loopback());
            if loopback {
                Ok(())
            } else {
                Err("must be https (plain http only on loopback)".into())
            }
        }
        other => Err(format!("has scheme {other:?}; it must be https")),
    }
}

impl SignInConfig {
    pub fn from_file(f: Option<&SignInFile>) -> Result<Self, ConfigError> {
        let Some(f) = f else {
            return Ok(SignInConfig::default());
        };
        let session_idle = duration(
            "session_idle",
            f.session_idle.as_ref(),
            DEFAULT_SESSION_IDLE,
        )?;
        let session_max = duration("session_max", f.session_max.as_ref(), DEFAULT_SESSION_MAX)?;
        let refresh_every = duration(
            "refresh_every",
            f.refresh_every.as_ref(),
            DEFAULT_REFRESH_EVERY,
        )?;
        let keep_ended_sessions = duration(
            "keep_ended_sessions",
            f.keep_ended_sessions.as_ref(),
            DEFAULT_KEEP_ENDED_SESSIONS,
        )?;
        if session_idle.is_zero() || session_max.is_zero() {
            return Err(invalid(
                "session_idle and session_max must be longer than 0s".into(),
            ));
        }
        let starts_per_minute = f.starts_per_minute.unwrap_or(DEFAULT_STARTS_PER_MINUTE);
        if !(1..=MAX_STARTS_PER_MINUTE).contains(&starts_per_minute) {
            return Err(invalid(format!(
                "starts_per_minute = {starts_per_minute}: must be 1 to {MAX_STARTS_PER_MINUTE}"
            )));
        }
        if f.providers.len() > MAX_PROVIDERS {
            return Err(invalid(format!(
                "{} providers; at most {MAX_PROVIDERS}",
                f.providers.len()
            )));
        }
        let mut providers: Vec<SignInProvider> = Vec::new();
        for (i, p) in f.providers.iter().enumerate() {
            let at = format!("providers[{i}]");
            let provider = provider(&at, p)?;
            if providers.iter().any(|q| q.id == provider.id) {
                return Err(invalid(format!("{at}.id: {:?} is used twice", provider.id)));
            }
            providers.push(provider);
        }
        let token_login = f.token_login.unwrap_or(true);
        if !token_login && providers.is_empty() {
            return Err(invalid(
                "token_login = false with no provider would leave no way to sign in to the console"
                    .into(),
            ));
        }
        Ok(SignInConfig {
            token_login,
            session_idle,
            session_max,
            refresh_every,
            keep_ended_sessions,
            starts_per_minute,
            providers,
        })
    }
}

fn provider(at: &str, p: &ProviderFile) -> Result<SignInProvider, ConfigError> {
    let id = Slug::parse(&format!("{at}.id"), &p.id).map_err(|e| invalid(e.to_string()))?;
    check_provider_url(&p.issuer)
        .map_err(|why| invalid(format!("{at}.issuer {:?} {why}", p.issuer)))?;
    if p.client_id.is_empty() || p.client_id.len() > 256 {
        return Err(invalid(format!(
            "{at}.client_id must be 1 to 256 characters"
        )));
    }
    let client_secret = match &p.client_secret_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| invalid(format!("{at}.client_secret_file {}: {e}", path.display())))?;
            let secret = text.trim().to_string();
            if secret.is_empty() {
                return Err(invalid(format!(
                    "{at}.client_secret_file {} is empty",
                    path.display()
                )));
            }
            Some(Secret(secret))
        }
        None => None,
    };
    let scopes = p
        .scopes
        .clone()
        .unwrap_or_else(|| ["openid", "email", "profile"].map(str::to_string).to_vec());
    if !scopes.iter().any(|s| s == "openid") {
        return Err(invalid(format!("{at}.scopes must hold \"openid\"")));
    }
    if scopes
        .iter()
        .any(|s| s.is_empty() || s.contains(char::is_whitespace))
    {
        return Err(invalid(format!("{at}.scopes: a scope is one word")));
    }
    let groups_claim = p.groups_claim.clone().unwrap_or_else(|| "groups".into());
    if p.roles.len() > MAX_RULES {
        return Err(invalid(format!(
            "{at}.roles: {} rules; at most {MAX_RULES}",
            p.roles.len()
        )));
    }
    let rules = p
        .roles
        .iter()
        .enumerate()
        .map(|(j, r)| {
            RoleRule::parse(
                &format!("{at}.roles[{j}]"),
                r.claim.as_deref().unwrap_or(&groups_claim),
                &r.group,
                &r.org,
                &r.role,
            )
            .map_err(|e| invalid(format!("{}: {}", e.field, e.message)))
        })
        .collect::<Result<_, _>>()?;
    Ok(SignInProvider {
        id: id.into_string(),
        name: p.name.clone().unwrap_or_else(|| p.id.clone()),
        issuer: p.issuer.clone(),
        client_id: p.client_id.clone(),
        client_secret,
        scopes,
        username_claim: p
            .username_claim
            .clone()
            .unwrap_or_else(|| "preferred_username".into()),
        email_claim: p.email_claim.clone().unwrap_or_else(|| "email".into()),
        groups_claim,
        rules,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<SignInConfig, ConfigError> {
        #[derive(Deserialize)]
        struct Wrap {
            sign_in: SignInFile,
        }
        let w: Wrap = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        SignInConfig::from_file(Some(&w.sign_in))
    }

    #[test]
    fn a_provider_and_its_rules_are_read_and_checked() {
        let c = parse(
            r#"
            [sign_in]
            session_idle = "1h"
            [[sign_in.providers]]
            id = "corp"
            issuer = "https://idp.example.com"
            client_id = "bosun"
            scopes = ["openid", "groups"]
            [[sign_in.providers.roles]]
            group = "platform-admins"
            org = "*"
            role = "admin"
            [[sign_in.providers.roles]]
            claim = "department"
            group = "net"
            org = "net"
            role = "operator"
            "#,
        )
        .unwrap();
        assert_eq!(c.session_idle, Duration::from_secs(3600));
        assert_eq!(c.session_max, DEFAULT_SESSION_MAX);
        let p = &c.providers[0];
        assert_eq!(
            (p.name.as_str(), p.groups_claim.as_str()),
            ("corp", "groups")
        );
        assert_eq!(p.rules[0].claim, "groups");
        assert_eq!(p.rules[1].claim, "department");

        for (bad, says) in [
            (
                r#"[sign_in]
                [[sign_in.providers]]
                id = "corp"
                issuer = "http://idp.example.com"
                client_id = "bosun""#,
                "must be https",
            ),
            (
                r#"[sign_in]
                [[sign_in.providers]]
                id = "corp"
                issuer = "https://idp.example.com"
                client_id = "bosun"
                scopes = ["email"]"#,
                "must hold \"openid\"",
            ),
            (
                r#"[sign_in]
                [[sign_in.providers]]
                id = "corp"
                issuer = "https://idp.example.com"
                client_id = "bosun"
                [[sign_in.providers.roles]]
                group = "x"
                org = "net"
                role = "owner""#,
                "providers[0].roles[0].role",
            ),
            (
                r#"[sign_in]
                token_login = false"#,
                "no way to sign in",
            ),
            (
                r#"[sign_in]
                session_max = "soon""#,
                "session_max",
            ),
            (
                r#"[sign_in]
                starts_per_minute = 0"#,
                "starts_per_minute = 0: must be 1 to",
            ),
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{e} (wanted {says:?})");
        }
        // Loopback may be plain http.
        assert!(check_provider_url("http://127.0.0.1:8080").is_ok());
        assert!(check_provider_url("http://localhost:8080").is_ok());
        assert!(check_provider_url("ftp://idp.example.com").is_err());
    }
}
