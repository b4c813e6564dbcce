//! The egress proxy: HTTP `CONNECT` (what engines use for https) and plain HTTP requests
//! in absolute form. It resolves each destination itself, judges every address it got
//! (`addr::not_public`, the operator's allow list, the Bosun server's own endpoints),
//! and connects only to an address it judged — so a name that resolves differently a
//! second time (DNS rebinding) gains nothing. A refusal answers `403` with the reason,
//! and says it once per destination in the run's log.
//!
//! Bounds: a request head of at most `MAX_HEAD_BYTES`, read within `HEAD_TIMEOUT`; name
//! resolution and connecting each within their timeouts; at most `MAX_CONNECTIONS` at
//! once per phase.

use std::collections::HashSet;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use super::addr::not_public;
use super::{AllowRule, EgressPolicy, Refusals};
use crate::logs::LogSink;

const MAX_CONNECTIONS: usize = 256;
const MAX_HEAD_BYTES: usize = 16 * 1024;
const MAX_HEADERS: usize = 100;
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// The relay's buffers, each way: large enough that a provider download is not held
/// back by them (64 KiB gave about two thirds of the throughput of 256 KiB).
const RELAY_BUFFER: usize = 256 * 1024;
/// At most this many distinct refusals are written to a run's log (each is counted).
const MAX_LOGGED_REFUSALS: usize = 50;

/// Where a connection goes.
#[derive(Debug, Clone)]
pub(super) enum Destination {
    Addr(SocketAddr),
    /// Resolved when connecting, each address tried in turn (the server's own name).
    Name(String, u16),
}

impl Destination {
    pub(super) async fn connect(&self) -> io::Result<TcpStream> {
        let addrs = match self {
            Destination::Addr(addr) => vec![*addr],
            Destination::Name(host, port) => resolve(host, *port).await?,
        };
        connect_any(&addrs).await
    }
}

/// A Bosun server endpoint a phase was given (state, identity): always let through, to
/// `connect_to` when the runner reaches the server there.
#[derive(Debug, Clone)]
pub(super) struct ServerEndpoint {
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) connect_to: Option<SocketAddr>,
}

/// What one phase's proxy knows.
pub(super) struct ProxyContext {
    policy: EgressPolicy,
    server: Vec<ServerEndpoint>,
    log: LogSink,
    refusals: Refusals,
    logged: Mutex<HashSet<(String, u16)>>,
}

impl ProxyContext {
    pub(super) fn new(
        policy: EgressPolicy,
        server: Vec<ServerEndpoint>,
        log: LogSink,
        refusals: Refusals,
    ) -> Self {
        ProxyContext {
            policy,
            server,
            log,
            refusals,
            logged: Mutex::new(HashSet::new()),
        }
    }

    /// The addresses `host:port` may be reached at, or why not.
    async fn decide(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, Verdict> {
        if let Some(server) = self
            .server
            .iter()
            .find(|s| s.port == port && s.host.eq_ignore_ascii_case(host))
        {
            if let Some(addr) = server.connect_to {
                return Ok(vec![addr]);
            }
            return resolve(host, port).await.map_err(Verdict::Unresolved);
        }
        let named = self.policy.allow.iter().any(|rule| {
            matches!(rule, AllowRule::Endpoint { host: h, port: p }
                if *p == port && h.eq_ignore_ascii_case(host))
        });
        let addrs = resolve(host, port).await.map_err(Verdict::Unresolved)?;
        if named {
            return Ok(addrs);
        }
        let in_range = |ip: IpAddr| {
            self.policy
                .allow
                .iter()
                .any(|rule| matches!(rule, AllowRule::Range(cidr) if cidr.contains(ip)))
        };
        let mut refused = None;
        let allowed: Vec<SocketAddr> = addrs
            .into_iter()
            .filter(|addr| {
                if in_range(addr.ip()) {
                    return true;
                }
                match not_public(addr.ip()) {
                    None => true,
                    Some(reason) => {
                        refused.get_or_insert((*addr, reason));
                        false
                    }
                }
            })
            .collect();
        match (allowed.is_empty(), refused) {
            (false, _) => Ok(allowed),
            (true, Some((addr, reason))) => Err(Verdict::Refused { addr, reason }),
            (true, None) => Err(Verdict::Unresolved(io::Error::other("no addresses"))),
        }
    }

    /// Counts a refusal and says it in the run's log, once per destination.
    async fn refused(&self, host: &str, addr: SocketAddr, reason: &str) -> String {
        self.refusals.add();
        let target = if host.parse::<IpAddr>().is_ok() {
            format!("{addr}")
        } else {
            format!("{host} → {addr}")
        };
        let message = format!(
            "blocked by the hosted egress policy: {target} is {reason}; use a self-hosted \
             runner pool or a public mirror (an operator can allow it with --egress-allow)"
        );
        let first = {
            let mut logged = self.logged.lock().unwrap_or_else(|e| e.into_inner());
            logged.len() < MAX_LOGGED_REFUSALS && logged.insert((host.to_string(), addr.port()))
        };
        if first {
            self.log.line(format!("bosun: {message}")).await;
        }
        message
    }
}

enum Verdict {
    Refused {
        addr: SocketAddr,
        reason: &'static str,
    },
    Unresolved(io::Error),
}

/// Serves the proxy on `listener` until the task is aborted.
pub(super) async fn serve(listener: TcpListener, ctx: Arc<ProxyContext>) {
    accept_each(
        listener,
        move |client| handle(client, Arc::clone(&ctx)),
        |client| {
            // Without waiting: a full socket buffer only loses the explanation.
            let _ = client.try_write(AT_LIMIT);
        },
    )
    .await;
}

/// The answer to a connection over `MAX_CONNECTIONS`.
const AT_LIMIT: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n\
    Content-Length: 44\r\nConnection: close\r\n\r\nthe egress proxy is at its connection limit\n";

/// Serves each connection accepted on `listener` with `serve_one`, at most
/// `MAX_CONNECTIONS` at once, until the task is aborted (which ends them all). One over
/// the limit goes to `turn_away`, which must not wait, and is then closed.
pub(super) async fn accept_each<F, Fut>(
    listener: TcpListener,
    serve_one: F,
    turn_away: fn(&TcpStream),
) where
    F: Fn(TcpStream) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((conn, _)) = accepted else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                if conns.len() >= MAX_CONNECTIONS {
                    turn_away(&conn);
                    continue;
                }
                conns.spawn(serve_one(conn));
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// One client connection: one request, then (when let through) the bytes both ways.
async fn handle(mut client: TcpStream, ctx: Arc<ProxyContext>) {
    let (buf, head_len) = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await {
        Ok(Ok(Some(read))) => read,
        Ok(Ok(None)) | Ok(Err(_)) => return,
        Err(_) => {
            let _ = answer(&mut client, 408, "no complete request head in time").await;
            return;
        }
    };
    let request = match Request::parse(&buf[..head_len]) {
        Ok(r) => r,
        Err(why) => {
            let _ = answer(&mut client, 400, &why).await;
            return;
        }
    };
    let addrs = match ctx.decide(&request.host, request.port).await {
        Ok(addrs) => addrs,
        Err(Verdict::Refused { addr, reason }) => {
            let message = ctx.refused(&request.host, addr, reason).await;
            let _ = answer(&mut client, 403, &message).await;
            return;
        }
        Err(Verdict::Unresolved(e)) => {
            let message = format!("cannot resolve {}: {e}", request.host);
            ctx.log
                .line(format!("bosun: egress proxy: {message}"))
                .await;
            let _ = answer(&mut client, 502, &message).await;
            return;
        }
    };
    let mut upstream = match connect_any(&addrs).await {
        Ok(s) => s,
        Err(e) => {
            let message = format!("cannot connect to {}:{}: {e}", request.host, request.port);
            let _ = answer(&mut client, 502, &message).await;
            return;
        }
    };
    let rest = &buf[head_len..];
    let sent = match &request.forward_head {
        None => {
            client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
        }
        Some(head) => upstream.write_all(head).await,
    };
    if sent.is_err() || upstream.write_all(rest).await.is_err() {
        return;
    }
    let _ = relay(&mut client, &mut upstream).await;
}

/// Copies both ways until both sides are done; each side's end is passed on as a
/// shutdown of the other's writing half.
pub(super) async fn relay(a: &mut TcpStream, b: &mut TcpStream) -> io::Result<(u64, u64)> {
    let _ = a.set_nodelay(true);
    let _ = b.set_nodelay(true);
    tokio::io::copy_bidirectional_with_sizes(a, b, RELAY_BUFFER, RELAY_BUFFER).await
}

/// Reads until the end of the request head: `(bytes read, head length)`; `None` when the
/// client closed first. A head over `MAX_HEAD_BYTES` is an error.
async fn read_head(client: &mut TcpStream) -> io::Result<Option<(Vec<u8>, usize)>> {
    let mut buf = Vec::with_capacity(2048);
    let mut chunk = [0u8; 4096];
    loop {
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf[from..].windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok(Some((buf, from + end + 4)));
        }
        if buf.len() > MAX_HEAD_BYTES {
            let _ = answer(client, 431, "the request head is over 16 KiB").await;
            return Ok(None);
        }
    }
}

/// A request the proxy understood.
struct Request {
    host: String,
    port: u16,
    /// For plain HTTP: the head to send upstream (origin form, `Connection: close`).
    /// `None` for CONNECT.
    forward_head: Option<Vec<u8>>,
}

impl Request {
    fn parse(head: &[u8]) -> Result<Request, String> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(head) {
            Ok(httparse::Status::Complete(_)) => {}
            Ok(httparse::Status::Partial) => return Err("an incomplete request head".into()),
            Err(e) => return Err(format!("a malformed request: {e}")),
        }
        let method = req.method.unwrap_or_default();
        let target = req.path.unwrap_or_default();
        if method.eq_ignore_ascii_case("CONNECT") {
            let (host, port) = split_authority(target, None)
                .ok_or_else(|| format!("CONNECT needs host:port, not {target:?}"))?;
            return Ok(Request {
                host,
                port,
                forward_head: None,
            });
        }
        let Some(rest) = target
            .strip_prefix("http://")
            .or_else(|| target.strip_prefix("HTTP://"))
        else {
            return Err(format!(
                "the proxy takes CONNECT or an absolute http:// URL, not {target:?}"
            ));
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let authority = authority.rsplit('@').next().unwrap_or(authority);
        let (host, port) =
            split_authority(authority, Some(80)).ok_or_else(|| format!("no host in {target:?}"))?;
        let path = if path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_string()
        };
        let mut out =
            format!("{method} {path} HTTP/1.{}\r\n", req.version.unwrap_or(1)).into_bytes();
        for h in req.headers.iter() {
            let hop = [
                "proxy-connection",
                "proxy-authorization",
                "connection",
                "keep-alive",
            ]
            .iter()
            .any(|n| h.name.eq_ignore_ascii_case(n));
            if !hop {
                out.extend_from_slice(h.name.as_bytes());
                out.extend_from_slice(b": ");
                out.extend_from_slice(h.value);
                out.extend_from_slice(b"\r\n");
            }
        }
        // One request per connection: a client that reuses it for another host would
        // otherwise reach that host through this destination.
        out.extend_from_slice(b"Connection: close\r\n\r\n");
        Ok(Request {
            host,
            port,
            forward_head: Some(out),
        })
    }
}

/// `host:port` / `[v6]:port` / `host` (with `default_port`), the host lowercased and
/// checked to be a name or an address.
fn split_authority(raw: &str, default_port: Option<u16>) -> Option<(String, u16)> {
    let (host, port) = if let Some(rest) = raw.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => default_port?,
            None => return None,
        };
        host.parse::<std::net::Ipv6Addr>().ok()?;
        (host.to_string(), port)
    } else {
        match raw.rsplit_once(':') {
            Some((host, port)) => (host.to_string(), port.parse().ok()?),
            None => (raw.to_string(), default_port?),
        }
    };
    let valid = !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._:".contains(&b));
    (valid && port > 0).then(|| (host.to_ascii_lowercase(), port))
}

async fn resolve(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let found = tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host, port)))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "name resolution timed out"))??;
    let addrs: Vec<SocketAddr> = found.collect();
    if addrs.is_empty() {
        return Err(io::Error::other("the name has no addresses"));
    }
    Ok(addrs)
}

/// Connects to the first of `addrs` that answers.
async fn connect_any(addrs: &[SocketAddr]) -> io::Result<TcpStream> {
    let mut last = io::Error::other("no addresses");
    for addr in addrs {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => last = e,
            Err(_) => last = io::Error::new(io::ErrorKind::TimedOut, "connecting timed out"),
        }
    }
    Err(last)
}

/// Answers the client with `status` and `message` as the body, then closes.
async fn answer(client: &mut TcpStream, status: u16, message: &str) -> io::Result<()> {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        _ => "Service Unavailable",
    };
    let body = format!("{message}\n");
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\nX-Bosun-Egress: refused\r\n\r\n",
        body.len()
    );
    client.write_all(head.as_bytes()).await?;
    client.write_all(body.as_bytes()).await?;
    client.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_and_absolute_requests_parse() {
        let r = Request::parse(b"CONNECT registry.terraform.io:443 HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        assert_eq!((r.host.as_str(), r.port), ("registry.terraform.io", 443));
        assert!(r.forward_head.is_none());

        let r = Request::parse(b"CONNECT [fd00::1]:8443 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!((r.host.as_str(), r.port), ("fd00::1", 8443));

        let r = Request::parse(
            b"GET http://Mirror.Example:8080/a/b?c=d HTTP/1.1\r\nHost: mirror.example:8080\r\n\
              Proxy-Connection: keep-alive\r\nConnection: keep-alive\r\nAccept: */*\r\n\r\n",
        )
        .unwrap();
        assert_eq!((r.host.as_str(), r.port), ("mirror.example", 8080));
        let head = String::from_utf8(r.forward_head.unwrap()).unwrap();
        assert_eq!(
            head,
            "GET /a/b?c=d HTTP/1.1\r\nHost: mirror.example:8080\r\nAccept: */*\r\n\
             Connection: close\r\n\r\n"
        );

        let r = Request::parse(b"GET http://user:pw@h?q HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!((r.host.as_str(), r.port), ("h", 80));
        assert!(String::from_utf8(r.forward_head.unwrap())
            .unwrap()
            .starts_with("GET /?q HTTP/1.0\r\n"));
    }

    #[test]
    fn requests_the_proxy_does_not_take_say_why() {
        for (head, says) in [
            (&b"GET /local HTTP/1.1\r\n\r\n"[..], "absolute http:// URL"),
            (b"GET https://h/ HTTP/1.1\r\n\r\n", "absolute http:// URL"),
            (b"CONNECT h HTTP/1.1\r\n\r\n", "host:port"),
            (b"CONNECT h:0 HTTP/1.1\r\n\r\n", "host:port"),
            (b"CONNECT h:99999 HTTP/1.1\r\n\r\n", "host:port"),
            (b"CONNECT bad host:1 HTTP/1.1\r\n\r\n", "malformed"),
            (b"CONNECT a/b:1 HTTP/1.1\r\n\r\n", "host:port"),
            (b"\x00\x01 garbage\r\n\r\n", "malformed"),
        ] {
            let err = Request::parse(head).err().unwrap_or_default();
            assert!(
                err.contains(says),
                "{:?}: {err:?}",
                String::from_utf8_lossy(head)
            );
        }
    }
}
