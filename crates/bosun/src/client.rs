//! The HTTP client the `bosun` commands share: builds API URLs, sends the bearer token,
//! and turns transport failures and error responses into messages a person can act on.

use std::fmt;
use std::time::Duration;

use anyhow::{anyhow, Context};
use bosun_api::{ErrorBody, ErrorCode};
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION};
use reqwest::{Method, StatusCode, Url};
use serde::Serialize;
use serde_json::Value;

/// Where the server is and who we are to it.
pub struct ClientConfig {
    pub url: String,
    pub token: Option<String>,
    /// PEM certificates trusted for an https server besides the built-in public roots.
    pub ca_file: Option<std::path::PathBuf>,
}

/// An error response from the server, as its `{"error": …}` body describes it.
#[derive(Debug)]
pub struct ApiFailure {
    /// `http_<status>` (an [`ErrorCode::Other`]) when the body is not a Bosun error body.
    pub code: ErrorCode,
    pub message: String,
    pub field: Option<String>,
    /// The error body as the server sent it, when it is a Bosun error body (`--json`
    /// prints it as it came).
    pub body: Option<Value>,
}

impl fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (", self.message)?;
        if let Some(field) = &self.field {
            write!(f, "field: {field}, ")?;
        }
        write!(f, "code: {})", self.code)
    }
}

impl std::error::Error for ApiFailure {}

pub struct Client {
    http: reqwest::Client,
    base: Url,
}

impl Client {
    pub fn new(config: ClientConfig) -> anyhow::Result<Self> {
        let token = config
            .token
            .clone()
            .filter(|t| !t.trim().is_empty())
            .ok_or_else(|| {
                anyhow!(
                    "no API token: pass --token or set BOSUN_TOKEN (a new server writes its \
                     first admin token to <data-dir>/admin-token)"
                )
            })?;
        let mut auth =
            HeaderValue::from_str(&format!("Bearer {}", token.trim())).map_err(|_| {
                anyhow!("the API token contains characters that cannot be sent in an HTTP header")
            })?;
        // Keeps the secret out of any debug output of the request.
        auth.set_sensitive(true);
        Self::build(&config, Some(auth))
    }

    /// A client with no token, for the few calls a person makes before they have one
    /// (`bosun login`).
    pub fn anonymous(config: ClientConfig) -> anyhow::Result<Self> {
        Self::build(&config, None)
    }

    fn build(config: &ClientConfig, auth: Option<HeaderValue>) -> anyhow::Result<Self> {
        let base = Url::parse(&config.url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.has_host())
            .ok_or_else(|| {
                anyhow!(
                    "invalid server URL {:?}: expected http(s)://HOST[:PORT] (--url or BOSUN_URL)",
                    config.url
                )
            })?;
        let mut headers = HeaderMap::new();
        if let Some(auth) = auth {
            headers.insert(AUTHORIZATION, auth);
        }
        let mut builder = reqwest::Client::builder()
            .default_headers(headers)
            .user_agent(concat!("bosun-cli/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(120))
            // Below the server's default idle timeout (60 s), so a pooled connection is
            // not reused just as the server closes it.
            .pool_idle_timeout(Duration::from_secs(30));
        if let Some(path) = &config.ca_file {
            let pem = std::fs::read(path).with_context(|| {
                format!("cannot read the CA file {} (--ca-file)", path.display())
            })?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).with_context(|| {
                format!(
                    "the CA file {} is not PEM certificates (--ca-file)",
                    path.display()
                )
            })?;
            if certs.is_empty() {
                anyhow::bail!(
                    "the CA file {} holds no PEM CERTIFICATE block (--ca-file)",
                    path.display()
                );
            }
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let http = builder.build().context("cannot set up the HTTP client")?;
        Ok(Client { http, base })
    }

    /// The URL of an API path given as its segments, each percent-encoded on its own so
    /// an id can never reach a different route.
    fn endpoint(&self, segments: &[&str]) -> anyhow::Result<Url> {
        let mut url = self.base.clone();
        url.set_query(None);
        url.set_fragment(None);
        url.path_segments_mut()
            .map_err(|()| anyhow!("server URL {} cannot have a path", self.base))?
            .pop_if_empty()
            .extend(["api", "v1"])
            .extend(segments);
        Ok(url)
    }

    /// POSTs `body` as JSON to a path outside the API (`/cli-login`), answering the JSON.
    pub async fn post_outside_api<B: Serialize + ?Sized>(
        &self,
        path: &[&str],
        body: &B,
    ) -> anyhow::Result<Value> {
        let mut url = self.base.clone();
        url.set_query(None);
        url.path_segments_mut()
            .map_err(|()| anyhow!("server URL {} cannot have a path", self.base))?
            .pop_if_empty()
            .extend(path);
        let reply = self
            .http
            .post(url.clone())
            .json(body)
            .send()
            .await
            .map_err(|e| self.transport_error(&url, e))?;
        let status = reply.status();
        let bytes = reply
            .bytes()
            .await
            .map_err(|e| self.transport_error(&url, e))?;
        let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if !status.is_success() {
            let message = value["error"]["message"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| format!("the server answered {status}"));
            anyhow::bail!("{message}");
        }
        Ok(value)
    }

    /// Sends a request and returns the response's JSON (`Value::Null` for an empty body).
    pub async fn request<B: Serialize + ?Sized>(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, String)],
        body: Option<&B>,
    ) -> anyhow::Result<Value> {
        let (status, bytes) = self.send(method, segments, query, body).await?;
        if bytes.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&bytes).with_context(|| {
            format!(
                "the server at {} answered {status} with a body that is not JSON",
                self.server()
            )
        })
    }

    /// Sends a GET and returns the body as the server sent it, `None` for 204 No Content:
    /// for documents (a state file) that must reach the user as stored, not re-encoded.
    pub async fn get_raw(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
    ) -> anyhow::Result<Option<Vec<u8>>> {
        let (status, bytes) = self.send::<()>(Method::GET, segments, query, None).await?;
        Ok((status != StatusCode::NO_CONTENT).then_some(bytes))
    }

    /// Opens a GET of a server-sent event stream: the response, its body still to be read
    /// as it arrives. An error status yields the server's error. The client's timeout
    /// still bounds the whole stream; a caller that follows for longer reconnects.
    pub async fn get_event_stream(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
    ) -> anyhow::Result<reqwest::Response> {
        let url = self.endpoint(segments)?;
        let mut req = self
            .http
            .get(url.clone())
            .header(reqwest::header::ACCEPT, "text/event-stream");
        if !query.is_empty() {
            req = req.query(query);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| self.transport_error(&url, e))?;
        let status = resp.status();
        if !status.is_success() {
            let bytes = resp
                .bytes()
                .await
                .map_err(|e| self.transport_error(&url, e))?;
            return Err(failure(status, &bytes).into());
        }
        Ok(resp)
    }

    /// Sends a request; a success status yields the status and body, an error status
    /// the server's error.
    async fn send<B: Serialize + ?Sized>(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, String)],
        body: Option<&B>,
    ) -> anyhow::Result<(StatusCode, Vec<u8>)> {
        let url = self.endpoint(segments)?;
        let mut req = self.http.request(method, url.clone());
        if !query.is_empty() {
            req = req.query(query);
        }
        if let Some(body) = body {
            req = req.json(body);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| self.transport_error(&url, e))?;
        let status = resp.status();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| self.transport_error(&url, e))?;
        if !status.is_success() {
            return Err(failure(status, &bytes).into());
        }
        Ok((status, bytes.to_vec()))
    }

    pub async fn get(&self, segments: &[&str], query: &[(&str, String)]) -> anyhow::Result<Value> {
        self.request::<()>(Method::GET, segments, query, None).await
    }

    pub async fn post<B: Serialize + ?Sized>(
        &self,
        segments: &[&str],
        body: &B,
    ) -> anyhow::Result<Value> {
        self.request(Method::POST, segments, &[], Some(body)).await
    }

    pub async fn put<B: Serialize + ?Sized>(
        &self,
        segments: &[&str],
        body: &B,
    ) -> anyhow::Result<Value> {
        self.request(Method::PUT, segments, &[], Some(body)).await
    }

    pub async fn patch<B: Serialize + ?Sized>(
        &self,
        segments: &[&str],
        body: &B,
    ) -> anyhow::Result<Value> {
        self.request(Method::PATCH, segments, &[], Some(body)).await
    }

    pub async fn delete(&self, segments: &[&str]) -> anyhow::Result<Value> {
        self.request::<()>(Method::DELETE, segments, &[], None)
            .await
    }

    /// The server URL as the user gave it, for messages.
    fn server(&self) -> &str {
        self.base.as_str().trim_end_matches('/')
    }

    fn transport_error(&self, url: &Url, e: reqwest::Error) -> anyhow::Error {
        // reqwest's own message is only "error sending request"; the cause is in the chain.
        let mut cause = String::new();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            cause = s.to_string();
            source = s.source();
        }
        if cause.is_empty() {
            cause = e.to_string();
        }
        if untrusted_certificate(&e) {
            anyhow!(
                "the Bosun server at {} presented a TLS certificate this client does not \
                 trust: {cause} (pass --ca-file or set BOSUN_CA_FILE to the CA that issued it)",
                self.server()
            )
        } else if e.is_connect() {
            anyhow!(
                "cannot connect to the Bosun server at {}: {cause} (is it running? set --url or BOSUN_URL)",
                self.server()
            )
        } else if e.is_timeout() {
            anyhow!(
                "the Bosun server at {} did not answer in time",
                self.server()
            )
        } else {
            anyhow!("request to {url} failed: {cause}")
        }
    }
}

/// Whether the request failed because the server's certificate did not verify. rustls's
/// error sits inside `io::Error`s (nested) in reqwest's chain, where `source()` skips it.
fn untrusted_certificate(e: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        let mut inner = s;
        while let Some(wrapped) = inner
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            inner = wrapped;
        }
        if matches!(
            inner.downcast_ref::<rustls::Error>(),
            Some(rustls::Error::InvalidCertificate(_))
        ) {
            return true;
        }
        source = s.source();
    }
    false
}

/// Reads an error response; a body that is not ours (a proxy's page, say) still yields
/// a message with the status and the start of the body.
fn failure(status: StatusCode, bytes: &[u8]) -> ApiFailure {
    match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(body) => ApiFailure {
            code: body.error.code,
            message: body.error.message,
            field: body.error.field,
            body: serde_json::from_slice(bytes).ok(),
        },
        Err(_) => {
            let text = String::from_utf8_lossy(bytes);
            let snippet: String = text.trim().chars().take(200).collect();
            ApiFailure {
                code: ErrorCode::Other(format!("http_{}", status.as_u16())),
                message: if snippet.is_empty() {
                    format!("the server answered {status}")
                } else {
                    format!("the server answered {status}: {snippet}")
                },
                field: None,
                body: None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(url: &str) -> anyhow::Result<Client> {
        Client::new(ClientConfig {
            url: url.into(),
            token: Some("t".into()),
            ca_file: None,
        })
    }

    #[test]
    fn endpoints_encode_each_segment() -> anyhow::Result<()> {
        let c = client("http://h:1/prefix/")?;
        let u = c.endpoint(&["orgs", "a/b", "stacks", "x y"])?;
        assert_eq!(
            u.as_str(),
            "http://h:1/prefix/api/v1/orgs/a%2Fb/stacks/x%20y"
        );
        let c = client("http://h:1")?;
        assert_eq!(
            c.endpoint(&["whoami"])?.as_str(),
            "http://h:1/api/v1/whoami"
        );
        Ok(())
    }

    #[test]
    fn rejects_bad_config() {
        assert!(client("not a url").is_err());
        assert!(client("ftp://h").is_err());
        let missing = Client::new(ClientConfig {
            url: "http://h".into(),
            token: Some("  ".into()),
            ca_file: None,
        });
        assert!(missing.is_err_and(|e| e.to_string().contains("BOSUN_TOKEN")));
    }

    #[test]
    fn failure_messages() {
        let f = failure(
            StatusCode::BAD_REQUEST,
            br#"{"error":{"code":"validation_failed","message":"path: bad","field":"path"}}"#,
        );
        assert_eq!(
            f.to_string(),
            "path: bad (field: path, code: validation_failed)"
        );
        let f = failure(StatusCode::BAD_GATEWAY, b"<html>oops</html>");
        assert_eq!(
            f.to_string(),
            "the server answered 502 Bad Gateway: <html>oops</html> (code: http_502)"
        );
    }
}
