//! A private network of a test's own, for the egress sandbox's tests: a network namespace
//! joined to this one by a veth pair on a /30 of 10.213.0.0/16, with a small HTTP server
//! listening inside it on the private address. Only ever this test's own namespace is
//! reached through it. Needs root and `ip` (iproute2); without them the test skips loudly,
//! or fails under `BOSUN_REQUIRE_TOOLS=1`.

use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A private endpoint in a namespace the test made.
pub(crate) struct TestNet {
    ns: String,
    host_if: String,
    /// The server's address: private (RFC 1918), reachable from this namespace only.
    pub(crate) addr: SocketAddr,
    /// Connections the server accepted.
    pub(crate) accepted: Arc<AtomicUsize>,
    server: JoinHandle<()>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip {args:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Whether this process may make namespaces and veth pairs (root with `ip`); if not, says
/// the skip, or panics under `BOSUN_REQUIRE_TOOLS=1`.
pub(crate) fn namespaces_or_skip() -> bool {
    let root = unsafe { libc::geteuid() } == 0;
    let has_ip = Command::new("ip")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let ok = root && has_ip && crate::egress::probe().is_ok();
    if !ok {
        if std::env::var("BOSUN_REQUIRE_TOOLS").as_deref() == Ok("1") {
            panic!("the egress sandbox tests need root, `ip` (iproute2) and network namespaces");
        }
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED (tool missing): root, ip and network namespaces"
        );
    }
    ok
}

impl TestNet {
    /// Makes the namespace and serves `body` (any path) on `10.213.x.y:8080` inside it.
    pub(crate) async fn start(body: Vec<u8>) -> TestNet {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // A /30 per namespace, spread by process so parallel test binaries do not meet.
        let slot = (pid as usize * 13 + n) % (256 * 64);
        let (third, fourth) = ((slot / 64) as u8, ((slot % 64) * 4) as u8);
        let host_ip = Ipv4Addr::new(10, 213, third, fourth + 1);
        let inner_ip = Ipv4Addr::new(10, 213, third, fourth + 2);
        let ns = format!("bosun-egress-{pid}-{n}");
        let host_if = format!("be{}h{n}", pid % 100_000);
        let inner_if = format!("be{}i{n}", pid % 100_000);
        let _ = ip(&["netns", "del", &ns]);
        let _ = ip(&["link", "del", &host_if]);
        let steps: Vec<Vec<String>> = vec![
            vec!["netns".into(), "add".into(), ns.clone()],
            vec![
                "link".into(),
                "add".into(),
                host_if.clone(),
                "type".into(),
                "veth".into(),
                "peer".into(),
                "name".into(),
                inner_if.clone(),
            ],
            vec![
                "link".into(),
                "set".into(),
                inner_if.clone(),
                "netns".into(),
                ns.clone(),
            ],
            vec![
                "addr".into(),
                "add".into(),
                format!("{host_ip}/30"),
                "dev".into(),
                host_if.clone(),
            ],
            vec!["link".into(), "set".into(), host_if.clone(), "up".into()],
            vec![
                "-n".into(),
                ns.clone(),
                "addr".into(),
                "add".into(),
                format!("{inner_ip}/30"),
                "dev".into(),
                inner_if.clone(),
            ],
            vec![
                "-n".into(),
                ns.clone(),
                "link".into(),
                "set".into(),
                inner_if.clone(),
                "up".into(),
            ],
            vec![
                "-n".into(),
                ns.clone(),
                "link".into(),
                "set".into(),
                "lo".into(),
                "up".into(),
            ],
        ];
        for step in &steps {
            let args: Vec<&str> = step.iter().map(String::as_str).collect();
            ip(&args).unwrap_or_else(|e| panic!("cannot make the test network: {e}"));
        }
        let addr = SocketAddr::from((inner_ip, 8080));
        let path = format!("/var/run/netns/{ns}");
        let listener = std::thread::spawn(move || {
            let file = std::fs::File::open(&path).unwrap();
            // SAFETY: setns moves only this short-lived thread.
            assert_eq!(
                unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) },
                0
            );
            let l = std::net::TcpListener::bind(addr).unwrap();
            l.set_nonblocking(true).unwrap();
            l
        })
        .join()
        .unwrap();
        let listener = TcpListener::from_std(listener).unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        let body = Arc::new(body);
        let server = tokio::spawn(async move {
            loop {
                let Ok((mut conn, _)) = listener.accept().await else {
                    continue;
                };
                count.fetch_add(1, Ordering::Relaxed);
                let body = Arc::clone(&body);
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                         Content-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = conn.write_all(reply.as_bytes()).await;
                    let _ = conn.write_all(&body).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        TestNet {
            ns,
            host_if,
            addr,
            accepted,
            server,
        }
    }
}

impl Drop for TestNet {
    fn drop(&mut self) {
        self.server.abort();
        let _ = ip(&["link", "del", &self.host_if]);
        let _ = ip(&["netns", "del", &self.ns]);
    }
}
