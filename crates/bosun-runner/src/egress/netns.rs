//! The network namespace an engine runs in, and the phase's sandbox around it.
//!
//! The namespace is made on a short-lived thread of its own (`unshare(CLONE_NEWNET)`
//! moves only the calling thread), which brings its loopback up and binds, inside it, the
//! listeners the runner serves: the proxy, and a forward for each loopback port of the
//! Bosun server. The thread then ends; the namespace lives on through its file
//! descriptor and those sockets, while the runner's own connections (to the server, to
//! the destinations the proxy lets through) stay in the runner's namespace. Engine
//! commands enter it between fork and exec (`setns`).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinSet;

use super::proxy::{self, relay, Destination, ProxyContext, ServerEndpoint};
use super::{EgressPolicy, Refusals};
use crate::logs::LogSink;

/// For each loopback port of the server: its listeners (127.0.0.1, and ::1 when the
/// namespace has IPv6).
type Forwards = Vec<(u16, Vec<std::net::TcpListener>)>;

/// A network namespace with its loopback up and the runner's listeners in it.
pub(super) struct Namespace {
    fd: OwnedFd,
    proxy: std::net::TcpListener,
    forwards: Forwards,
}

impl Namespace {
    /// Makes the namespace, with a forward listener on each of `forward_ports`.
    pub(super) fn create(forward_ports: &[u16]) -> io::Result<Namespace> {
        let ports = forward_ports.to_vec();
        std::thread::Builder::new()
            .name("bosun-netns".into())
            .spawn(move || Namespace::create_here(&ports))?
            .join()
            .map_err(|_| io::Error::other("the namespace thread panicked"))?
    }

    /// On the calling thread, which is left in the new namespace.
    fn create_here(forward_ports: &[u16]) -> io::Result<Namespace> {
        // SAFETY: unshare has no memory-safety preconditions; it moves this thread only.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error());
        }
        loopback_up()?;
        let fd = OwnedFd::from(std::fs::File::open("/proc/thread-self/ns/net")?);
        let (proxy, forwards) = bind_listeners(forward_ports)?;
        Ok(Namespace {
            fd,
            proxy,
            forwards,
        })
    }
}

/// The runner's listeners, in the calling thread's namespace: a forward on each of
/// `forward_ports` (the server's own port numbers), then the proxy on a port the kernel
/// picks. In that order: the proxy's pick is then never a port a forward needs (picked
/// first, it could be the server's port number, and that phase would fail with "address
/// in use").
fn bind_listeners(forward_ports: &[u16]) -> io::Result<(std::net::TcpListener, Forwards)> {
    let mut forwards = Vec::new();
    for &port in forward_ports {
        let mut listeners = vec![std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port))?];
        // `localhost` may resolve to ::1 first; a namespace without IPv6 has none.
        if let Ok(v6) = std::net::TcpListener::bind((Ipv6Addr::LOCALHOST, port)) {
            listeners.push(v6);
        }
        for l in &listeners {
            l.set_nonblocking(true)?;
        }
        forwards.push((port, listeners));
    }
    let proxy = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    proxy.set_nonblocking(true)?;
    Ok((proxy, forwards))
}

/// Sets IFF_UP on `lo` in the calling thread's namespace.
fn loopback_up() -> io::Result<()> {
    // SAFETY: a plain socket(2); the result is checked and owned below.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a new descriptor owned by nothing else.
    let sock = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write the ifreq we own.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) < 0 {
            return Err(io::Error::last_os_error());
        }
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The Bosun server as a phase reaches it: its URLs' hosts and ports, and where the
/// runner itself connects for them (`RunnerConfig::connect_to`).
#[derive(Debug, Clone)]
pub(crate) struct ServerUrls {
    pub(crate) urls: Vec<String>,
    pub(crate) connect_to: Option<(String, u16, SocketAddr)>,
}

/// One phase's sandbox: its namespace, the proxy and forwards serving it. Dropping it
/// stops them; the namespace goes with the last process in it.
pub(crate) struct Sandbox {
    ns: Arc<OwnedFd>,
    proxy_port: u16,
    tasks: JoinSet<()>,
}

impl Sandbox {
    /// Makes the phase's namespace and starts serving it.
    pub(crate) async fn start(
        policy: &EgressPolicy,
        server: &ServerUrls,
        log: &LogSink,
        refusals: &Refusals,
    ) -> io::Result<Sandbox> {
        let mut endpoints = Vec::new();
        let mut forward_ports = Vec::new();
        for url in &server.urls {
            let Some((host, port)) = host_port(url) else {
                continue;
            };
            let connect_to = server
                .connect_to
                .as_ref()
                .filter(|(h, p, _)| h.eq_ignore_ascii_case(&host) && *p == port)
                .map(|(_, _, addr)| *addr);
            // A client that does not proxy loopback (Go's) connects in the namespace,
            // where the server's loopback port is forwarded to it; one that proxies
            // everything (curl) reaches it through the proxy.
            if is_loopback_host(&host) && !forward_ports.iter().any(|(p, _)| *p == port) {
                let to = match connect_to {
                    Some(addr) => Destination::Addr(addr),
                    None => Destination::Name(host.clone(), port),
                };
                forward_ports.push((port, to));
            }
            endpoints.push(ServerEndpoint {
                host,
                port,
                connect_to,
            });
        }
        let ports: Vec<u16> = forward_ports.iter().map(|(p, _)| *p).collect();
        let ns = tokio::task::spawn_blocking(move || Namespace::create(&ports))
            .await
            .map_err(io::Error::other)??;
        let proxy_port = ns.proxy.local_addr()?.port();
        let ctx = Arc::new(ProxyContext::new(
            policy.clone(),
            endpoints,
            log.clone(),
            refusals.clone(),
        ));
        let mut tasks = JoinSet::new();
        tasks.spawn(proxy::serve(TcpListener::from_std(ns.proxy)?, ctx));
        for ((_, listeners), (_, to)) in ns.forwards.into_iter().zip(forward_ports) {
            for listener in listeners {
                tasks.spawn(forward(TcpListener::from_std(listener)?, to.clone()));
            }
        }
        Ok(Sandbox {
            ns: Arc::new(ns.fd),
            proxy_port,
            tasks,
        })
    }

    /// What the engine's environment gets: the proxy for every scheme, in both the
    /// spellings tools read, and no exceptions.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        let url = format!("http://127.0.0.1:{}", self.proxy_port);
        let mut env = Vec::new();
        for key in ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"] {
            env.push((key.to_string(), url.clone()));
        }
        for key in ["NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"] {
            env.push((key.to_string(), String::new()));
        }
        env
    }

    /// The namespace's descriptor, for `setns` in the engine's child process.
    pub(crate) fn netns_fd(&self) -> RawFd {
        self.ns.as_raw_fd()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.tasks.abort_all();
    }
}

/// Forwards each connection on `listener` (inside the namespace) to the server.
async fn forward(listener: TcpListener, to: Destination) {
    let serve_one = move |mut inside: tokio::net::TcpStream| {
        let to = to.clone();
        async move {
            if let Ok(mut outside) = to.connect().await {
                let _ = relay(&mut inside, &mut outside).await;
            }
        }
    };
    proxy::accept_each(listener, serve_one, |_| {}).await;
}

/// `(host, port)` of an http(s) URL, the port defaulted by scheme; brackets are taken off
/// an IPv6 host.
pub(crate) fn host_port(url: &str) -> Option<(String, u16)> {
    let parsed = reqwest::Url::parse(url).ok()?;
    let host = parsed
        .host_str()?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    Some((host, parsed.port_or_known_default()?))
}

/// `localhost` or a loopback address: what Go's proxy settings send directly.
fn is_loopback_host(host: &str) -> bool {
    host == "localhost"
        || host.ends_with(".localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_give_their_host_and_port() {
        assert_eq!(
            host_port("https://Bosun.Example.com/api"),
            Some(("bosun.example.com".into(), 443))
        );
        assert_eq!(
            host_port("http://127.0.0.1:8080/x"),
            Some(("127.0.0.1".into(), 8080))
        );
        assert_eq!(host_port("http://[::1]:9/x"), Some(("::1".into(), 9)));
        assert_eq!(host_port("not a url"), None);
        assert!(is_loopback_host("localhost"));
        assert!(is_loopback_host("::1"));
        assert!(is_loopback_host("127.3.4.5"));
        assert!(!is_loopback_host("10.0.0.1"));
        assert!(!is_loopback_host("bosun.example.com"));
    }

    /// The proxy's port is picked after the forwards are bound, so it is never a port a
    /// forward needs. In a namespace whose ephemeral range is two ports, the kernel's
    /// first pick for the proxy is the second (an odd offset from the range's start):
    /// forwarding that one, the proxy bound first took it and the forward failed with
    /// "address in use".
    #[test]
    fn the_proxy_never_takes_a_port_the_server_is_forwarded_on() {
        if !crate::test_net::namespaces_or_skip() {
            return;
        }
        std::thread::spawn(|| {
            // SAFETY: unshare moves only this thread, which ends with the test.
            assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNET) }, 0);
            loopback_up().unwrap();
            // This namespace's own setting (the thread's namespace at open). Where /proc/sys
            // is read-only the range cannot be narrowed: the listeners are still checked,
            // without forcing the kernel's pick, and the test says so.
            if let Err(e) = std::fs::write("/proc/sys/net/ipv4/ip_local_port_range", "40000 40001")
            {
                eprintln!("NOTE: cannot narrow the ephemeral range ({e}): a weaker check");
                let (proxy, forwards) = bind_listeners(&[40001]).unwrap();
                assert_eq!(forwards[0].0, 40001);
                assert_ne!(proxy.local_addr().unwrap().port(), 40001);
                return;
            }
            for _ in 0..10 {
                let (proxy, forwards) =
                    bind_listeners(&[40001]).expect("the forward on 40001 binds beside the proxy");
                assert_eq!(forwards[0].0, 40001);
                assert_eq!(proxy.local_addr().unwrap().port(), 40000);
            }
        })
        .join()
        .unwrap();
    }
}
