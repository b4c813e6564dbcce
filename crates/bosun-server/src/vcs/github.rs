//! The GitHub App client: the App's JWT (RS256), installation tokens scoped to one
//! repository with `contents: read`, their revocation, and finding the installation that
//! covers a repository. Talks to any API base URL (GitHub Enterprise Server).

use std::time::Duration;

use chrono::{DateTime, Utc};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::config::VcsConfig;

/// What can go wrong talking to GitHub; the text is shown to people (run reasons).
#[derive(Debug, thiserror::Error)]
pub enum GithubError {
    #[error("the GitHub App is not configured on this server (--github-app-id and --github-app-key-file)")]
    NotConfigured,
    #[error("the GitHub App private key is not a usable RSA PEM key: {0}")]
    BadKey(String),
    #[error("GitHub API {what}: {message}")]
    Api { what: String, message: String },
}

/// A short-lived installation token.
#[derive(Debug, Clone)]
pub struct InstallationToken {
    pub token: String,
    pub expires_at: DateTime<Utc>,
}

struct App {
    id: i64,
    key: EncodingKey,
}

/// The App client, cheap to share.
pub struct Github {
    http: reqwest::Client,
    api_url: String,
    web_url: String,
    app: Option<App>,
}

#[derive(Serialize)]
struct Claims {
    iat: i64,
    exp: i64,
    iss: String,
}

#[derive(Deserialize)]
struct TokenReply {
    token: String,
    expires_at: DateTime<Utc>,
}

#[derive(Deserialize)]
struct InstallationReply {
    id: i64,
    account: Option<Account>,
}

#[derive(Deserialize)]
struct Account {
    login: String,
}

impl Github {
    pub fn new(config: &VcsConfig) -> Result<Self, GithubError> {
        let app = match &config.app {
            Some(a) => Some(App {
                id: a.app_id,
                key: EncodingKey::from_rsa_pem(a.private_key_pem.0.as_bytes())
                    .map_err(|e| GithubError::BadKey(e.to_string()))?,
            }),
            None => None,
        };
        let http = reqwest::Client::builder()
            .user_agent(concat!("bosun/", env!("CARGO_PKG_VERSION")))
            .timeout(Duration::from_secs(20))
            .build()
            .map_err(|e| GithubError::Api {
                what: "client".into(),
                message: e.to_string(),
            })?;
        Ok(Github {
            http,
            api_url: config.api_url.trim_end_matches('/').to_string(),
            web_url: config.web_url.trim_end_matches('/').to_string(),
            app,
        })
    }

    pub fn app_configured(&self) -> bool {
        self.app.is_some()
    }

    /// The HTTPS address a repository (`owner/repo`) is cloned from.
    pub fn clone_url(&self, full_name: &str) -> String {
        format!("{}/{full_name}.git", self.web_url)
    }

    /// The App's JWT: valid for 9 minutes, issued a minute in the past for clock skew.
    fn app_jwt(&self) -> Result<String, GithubError> {
        let app = self.app.as_ref().ok_or(GithubError::NotConfigured)?;
        let now = Utc::now().timestamp();
        let claims = Claims {
            iat: now - 60,
            exp: now + 9 * 60,
            iss: app.id.to_string(),
        };
        jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims, &app.key)
            .map_err(|e| GithubError::BadKey(e.to_string()))
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.api_url))
            .header("Accept", "application/vnd.github+json")
            .header("X-GitHub-Api-Version", "2022-11-28")
    }

    /// An installation token for exactly one repository (`owner/repo`), `contents: read`.
    pub async fn installation_token(
        &self,
        installation: i64,
        full_name: &str,
    ) -> Result<InstallationToken, GithubError> {
        let what = format!("installation token for {full_name}");
        let jwt = self.app_jwt()?;
        let repo = full_name.rsplit('/').next().unwrap_or(full_name);
        let reply = self
            .request(
                reqwest::Method::POST,
                &format!("/app/installations/{installation}/access_tokens"),
            )
            .bearer_auth(jwt)
            .json(&json!({"repositories": [repo], "permissions": {"contents": "read"}}))
            .send()
            .await
            .map_err(|e| api_error(&what, e))?;
        let reply: TokenReply = parse(&what, reply).await?;
        Ok(InstallationToken {
            token: reply.token,
            expires_at: reply.expires_at,
        })
    }

    /// Revokes an installation token. A token GitHub no longer knows (expired, already
    /// revoked) counts as revoked.
    pub async fn revoke(&self, token: &str) -> Result<(), GithubError> {
        let what = "token revocation".to_string();
        let reply = self
            .request(reqwest::Method::DELETE, "/installation/token")
            .bearer_auth(token)
            .send()
            .await
            .map_err(|e| api_error(&what, e))?;
        let status = reply.status();
        if status.is_success() || status == reqwest::StatusCode::UNAUTHORIZED {
            return Ok(());
        }
        Err(GithubError::Api {
            what,
            message: format!("HTTP {status}"),
        })
    }

    /// The installation of this App covering `owner/repo`, if any: `(id, account)`.
    pub async fn find_installation(
        &self,
        full_name: &str,
    ) -> Result<Option<(i64, String)>, GithubError> {
        let what = format!("installation lookup for {full_name}");
        let jwt = self.app_jwt()?;
        let reply = self
            .request(
                reqwest::Method::GET,
                &format!("/repos/{full_name}/installation"),
            )
            .bearer_auth(jwt)
            .send()
            .await
            .map_err(|e| api_error(&what, e))?;
        if reply.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let reply: InstallationReply = parse(&what, reply).await?;
        let account = reply
            .account
            .map(|a| a.login)
            .unwrap_or_else(|| full_name.split('/').next().unwrap_or("").to_string());
        Ok(Some((reply.id, account)))
    }
}

fn api_error(what: &str, e: reqwest::Error) -> GithubError {
    GithubError::Api {
        what: what.to_string(),
        message: e.to_string(),
    }
}

async fn parse<T: serde::de::DeserializeOwned>(
    what: &str,
    reply: reqwest::Response,
) -> Result<T, GithubError> {
    let status = reply.status();
    let body = reply.bytes().await.map_err(|e| api_error(what, e))?;
    if !status.is_success() {
        let message = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(String::from))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).chars().take(200).collect());
        return Err(GithubError::Api {
            what: what.to_string(),
            message: format!("HTTP {status}: {message}"),
        });
    }
    serde_json::from_slice(&body).map_err(|e| GithubError::Api {
        what: what.to_string(),
        message: format!("unexpected reply: {e}"),
    })
}
