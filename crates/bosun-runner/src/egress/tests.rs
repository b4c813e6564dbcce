//! The sandbox for real: a namespace, the proxy, clients inside the namespace, and a
//! private endpoint in a namespace of the test's own (`TestNet`). Nothing here sends a
//! packet anywhere but loopback and that namespace: the refused destinations are refused
//! before any connection is made, and in the sandbox there is no route to them.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;

use super::*;
use crate::logs::LogSink;
use crate::test_net::{namespaces_or_skip, TestNet};

/// Runs `f` on a thread inside the namespace `fd`.
fn inside<T: Send + 'static>(fd: RawFd, f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        // SAFETY: setns moves only this thread.
        assert_eq!(unsafe { libc::setns(fd, libc::CLONE_NEWNET) }, 0);
        f()
    })
    .join()
    .unwrap()
}

/// Sends `request` to `addr` and reads the whole answer (or the error).
fn exchange(addr: SocketAddr, request: String) -> Result<String, std::io::Error> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    s.write_all(request.as_bytes())?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// A plain-HTTP GET of `url` through the proxy at 127.0.0.1:`port`.
fn via_proxy(port: u16, url: &str) -> String {
    exchange(
        SocketAddr::from(([127, 0, 0, 1], port)),
        format!("GET {url} HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n"),
    )
    .unwrap()
}

/// A CONNECT to `target` through the proxy, then a GET over the tunnel.
fn tunnel(port: u16, target: &str) -> String {
    exchange(
        SocketAddr::from(([127, 0, 0, 1], port)),
        format!(
            "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\n"
        ),
    )
    .unwrap()
}

struct Setup {
    sandbox: Sandbox,
    log: mpsc::Receiver<String>,
    refusals: Refusals,
}

impl Setup {
    async fn start(allow: Vec<AllowRule>, server: ServerUrls) -> Setup {
        let (tx, log) = mpsc::channel(100);
        let sink = LogSink::for_test(tx, &[]);
        let refusals = Refusals::default();
        let sandbox = Sandbox::start(&EgressPolicy { allow }, &server, &sink, &refusals)
            .await
            .unwrap();
        Setup {
            sandbox,
            log,
            refusals,
        }
    }

    fn proxy_port(&self) -> u16 {
        let url = &self.sandbox.env()[0].1;
        url.rsplit(':').next().unwrap().parse().unwrap()
    }

    fn lines(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        while let Ok(line) = self.log.try_recv() {
            lines.push(line);
        }
        lines
    }
}

fn no_server() -> ServerUrls {
    ServerUrls {
        urls: vec![],
        connect_to: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_loopback_metadata_and_names_for_them_are_refused_with_the_reason() {
    if !namespaces_or_skip() {
        return;
    }
    let private = TestNet::start(b"secret".to_vec()).await;
    // A service on this machine's loopback, which a hosted engine must not reach.
    let local = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let local_port = local.local_addr().unwrap().port();
    let mut s = Setup::start(vec![], no_server()).await;
    let (fd, port) = (s.sandbox.netns_fd(), s.proxy_port());
    let target = private.addr;
    let answers = tokio::task::spawn_blocking(move || {
        inside(fd, move || {
            vec![
                via_proxy(port, &format!("http://{target}/")),
                tunnel(port, &target.to_string()),
                via_proxy(port, "http://169.254.169.254/latest/meta-data/"),
                tunnel(port, &format!("127.0.0.1:{local_port}")),
                // A name that resolves to a loopback address: judged on the address.
                tunnel(port, &format!("localhost:{local_port}")),
                tunnel(port, "[::ffff:10.0.0.1]:443"),
                tunnel(port, "100.64.1.1:443"),
            ]
        })
    })
    .await
    .unwrap();
    for (answer, says) in answers.iter().zip([
        format!("{target} is a private address (RFC 1918)"),
        format!("{target} is a private address (RFC 1918)"),
        "169.254.169.254:80 is the cloud metadata address".to_string(),
        format!("127.0.0.1:{local_port} is a loopback address"),
        format!("localhost → 127.0.0.1:{local_port} is a loopback address"),
        "is a private address (RFC 1918)".to_string(),
        "100.64.1.1:443 is a carrier-grade NAT address".to_string(),
    ]) {
        assert!(answer.starts_with("HTTP/1.1 403 "), "{answer}");
        assert!(answer.contains(&says), "{answer:?} should say {says:?}");
        assert!(answer.contains("use a self-hosted runner pool or a public mirror"));
    }
    assert_eq!(private.accepted.load(Ordering::Relaxed), 0);
    assert_eq!(s.refusals.count(), 7);
    // Said in the run's log once per destination (the private endpoint was tried twice).
    let lines = s.lines();
    assert_eq!(lines.len(), 6, "{lines:#?}");
    assert!(lines
        .iter()
        .all(|l| l.starts_with("bosun: blocked by the hosted egress policy: ")));
    assert!(lines.iter().any(|l| l.contains("localhost → 127.0.0.1")));
    // Nothing reached the local service.
    let nothing = tokio::time::timeout(Duration::from_millis(100), local.accept()).await;
    assert!(nothing.is_err(), "the loopback service was reached");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_ignores_the_proxy_has_no_route_and_the_allow_list_opens_a_private_endpoint() {
    if !namespaces_or_skip() {
        return;
    }
    let private = TestNet::start(b"{\"ok\":true}".to_vec()).await;
    let local = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let local_addr = local.local_addr().unwrap();
    let target = private.addr;
    let mut s = Setup::start(vec![format!("{target}").parse().unwrap()], no_server()).await;
    let (fd, port) = (s.sandbox.netns_fd(), s.proxy_port());
    let (direct_private, direct_local, allowed, tunneled) =
        tokio::task::spawn_blocking(move || {
            inside(fd, move || {
                (
                    TcpStream::connect_timeout(&target, Duration::from_secs(5)).map(drop),
                    TcpStream::connect_timeout(&local_addr, Duration::from_secs(5)).map(drop),
                    via_proxy(port, &format!("http://{target}/state")),
                    tunnel(port, &target.to_string()),
                )
            })
        })
        .await
        .unwrap();
    // No route out of the namespace: a private address is unreachable, and its loopback
    // is its own (the machine's services are not on it).
    let err = direct_private.unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENETUNREACH), "{err}");
    let err = direct_local.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");
    // Through the proxy, the allow-listed endpoint answers.
    assert!(allowed.starts_with("HTTP/1.1 200 OK"), "{allowed}");
    assert!(allowed.ends_with("{\"ok\":true}"), "{allowed}");
    assert!(tunneled.starts_with("HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.1 200 OK"));
    assert_eq!(private.accepted.load(Ordering::Relaxed), 2);
    assert_eq!(s.refusals.count(), 0);
    assert!(s.lines().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_loopback_port_is_forwarded_and_its_name_let_through() {
    if !namespaces_or_skip() {
        return;
    }
    // The Bosun server, on this machine's loopback.
    let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server_addr = server.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut conn, _) = server.accept().await.unwrap();
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buf = [0u8; 1024];
                let _ = conn.read(&mut buf).await;
                let _ = conn
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nstate",
                    )
                    .await;
            });
        }
    });
    let s = Setup::start(
        vec![],
        ServerUrls {
            urls: vec![
                format!("http://{server_addr}/api/v1/orgs/o/stacks/s/state"),
                // A public URL the runner reaches at the loopback address.
                "https://bosun.example.com/id-token".to_string(),
            ],
            connect_to: Some(("bosun.example.com".into(), 443, server_addr)),
        },
    )
    .await;
    let (fd, port) = (s.sandbox.netns_fd(), s.proxy_port());
    let (direct, proxied, named) = tokio::task::spawn_blocking(move || {
        inside(fd, move || {
            (
                exchange(server_addr, "GET /state HTTP/1.1\r\nHost: x\r\n\r\n".into()).unwrap(),
                via_proxy(port, &format!("http://{server_addr}/state")),
                tunnel(port, "bosun.example.com:443"),
            )
        })
    })
    .await
    .unwrap();
    assert!(direct.ends_with("\r\n\r\nstate"), "{direct}");
    assert!(proxied.ends_with("\r\n\r\nstate"), "{proxied}");
    assert!(
        named.contains("200 Connection established") && named.ends_with("state"),
        "{named}"
    );
    assert_eq!(s.refusals.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_a_clear_answer_and_an_endless_head_is_cut_off() {
    if !namespaces_or_skip() {
        return;
    }
    let s = Setup::start(vec![], no_server()).await;
    let (fd, port) = (s.sandbox.netns_fd(), s.proxy_port());
    let proxy = SocketAddr::from(([127, 0, 0, 1], port));
    let (relative, https, huge) = tokio::task::spawn_blocking(move || {
        inside(fd, move || {
            let huge = {
                let mut conn = TcpStream::connect(proxy).unwrap();
                conn.set_read_timeout(Some(Duration::from_secs(20)))
                    .unwrap();
                let _ = conn.write_all(b"GET http://x/ HTTP/1.1\r\n");
                let filler = format!("X-Filler: {}\r\n", "a".repeat(1000));
                for _ in 0..40 {
                    if conn.write_all(filler.as_bytes()).is_err() {
                        break;
                    }
                }
                let mut out = Vec::new();
                let _ = conn.read_to_end(&mut out);
                String::from_utf8_lossy(&out).into_owned()
            };
            (
                exchange(proxy, "GET /x HTTP/1.1\r\n\r\n".into()).unwrap(),
                exchange(proxy, "GET https://x/ HTTP/1.1\r\n\r\n".into()).unwrap(),
                huge,
            )
        })
    })
    .await
    .unwrap();
    assert!(relative.starts_with("HTTP/1.1 400 ") && relative.contains("absolute http:// URL"));
    assert!(https.starts_with("HTTP/1.1 400 "), "{https}");
    assert!(huge.starts_with("HTTP/1.1 431 "), "{huge}");
    assert_eq!(s.refusals.count(), 0);
}

// ---- figures (bench/egress.sh) -------------------------------------------------------------

/// `program args` run to its end, in the namespace `netns` when given; the wall time.
fn timed_run(program: &std::path::Path, args: &[&str], netns: Option<RawFd>) -> (Duration, String) {
    use std::os::unix::process::CommandExt as _;
    let mut cmd = std::process::Command::new(program);
    cmd.args(args)
        .env("CHECKPOINT_DISABLE", "1")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    if let Some(fd) = netns {
        // SAFETY: only setns(2) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let started = std::time::Instant::now();
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{program:?} {args:?} failed");
    (
        started.elapsed(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The sandbox's cost: on an engine's start (making the namespace and the proxy, then
/// `terraform version` in it, against `terraform version` alone) and on a 50 MB download
/// by curl from a loopback server (through the proxy from inside the namespace, plain
/// HTTP and a CONNECT tunnel, against curl direct).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: bench/egress.sh"]
async fn egress_figures() {
    let terraform = crate::test_support::terraform_or_skip().expect("terraform");
    assert!(namespaces_or_skip());
    let rounds: usize = std::env::var("BENCH_EGRESS_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let mb: usize = std::env::var("BENCH_EGRESS_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);

    // Engine start.
    let (mut direct, mut sandboxed, mut setup) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        direct.push(timed_run(&terraform, &["version"], None).0);
        let started = std::time::Instant::now();
        let s = Setup::start(vec![], no_server()).await;
        setup.push(started.elapsed());
        let fd = s.sandbox.netns_fd();
        let tf = terraform.clone();
        let ran = tokio::task::spawn_blocking(move || timed_run(&tf, &["version"], Some(fd)).0)
            .await
            .unwrap();
        drop(s);
        sandboxed.push(started.elapsed().max(ran));
    }
    for v in [&mut direct, &mut sandboxed, &mut setup] {
        v.sort();
    }
    println!(
        "engine start ({rounds} rounds, terraform version): direct p50 {:.1} ms p99 {:.1} ms; \
         sandboxed p50 {:.1} ms p99 {:.1} ms; sandbox setup p50 {:.1} ms p99 {:.1} ms; \
         overhead p50 {:.1} ms",
        ms(percentile(&direct, 0.5)),
        ms(percentile(&direct, 0.99)),
        ms(percentile(&sandboxed, 0.5)),
        ms(percentile(&sandboxed, 0.99)),
        ms(percentile(&setup, 0.5)),
        ms(percentile(&setup, 0.99)),
        ms(percentile(&sandboxed, 0.5)) - ms(percentile(&direct, 0.5)),
    );

    // A download: a loopback server with the body in memory.
    let body = std::sync::Arc::new(vec![b'x'; mb * 1024 * 1024]);
    let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = server.local_addr().unwrap();
    let served = std::sync::Arc::clone(&body);
    tokio::spawn(async move {
        loop {
            let (mut conn, _) = server.accept().await.unwrap();
            let body = std::sync::Arc::clone(&served);
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(head.as_bytes()).await;
                let _ = conn.write_all(&body).await;
            });
        }
    });
    let curl = std::path::PathBuf::from("curl");
    let url = format!("http://{origin}/file");
    let s = Setup::start(vec![origin.to_string().parse().unwrap()], no_server()).await;
    let (fd, port) = (s.sandbox.netns_fd(), s.proxy_port());
    let proxy = format!("http://127.0.0.1:{port}");
    // Interleaved, so a change in the machine's load falls on all three alike. Once at
    // loopback speed (the proxy's ceiling), once paced at 1 Gbit/s (a download from the
    // internet on a fast link).
    for (pace, limit) in [
        ("loopback speed", None),
        ("paced at 1 Gbit/s", Some("125M")),
    ] {
        let ways: [(Vec<String>, Option<RawFd>); 3] = [
            (vec!["--noproxy".into(), "*".into(), url.clone()], None),
            (vec!["-x".into(), proxy.clone(), url.clone()], Some(fd)),
            (
                vec!["-p".into(), "-x".into(), proxy.clone(), url.clone()],
                Some(fd),
            ),
        ];
        let mut speeds: [Vec<f64>; 3] = Default::default();
        for _ in 0..9 {
            for (i, (args, netns)) in ways.iter().enumerate() {
                let mut all = vec!["-sS".to_string(), "-o".into(), "/dev/null".into()];
                all.extend(["-w".to_string(), "%{speed_download}".into()]);
                if let Some(limit) = limit {
                    all.extend(["--limit-rate".to_string(), limit.to_string()]);
                }
                all.extend(args.iter().cloned());
                let (curl, netns) = (curl.clone(), *netns);
                let out = tokio::task::spawn_blocking(move || {
                    let args: Vec<&str> = all.iter().map(String::as_str).collect();
                    timed_run(&curl, &args, netns).1
                })
                .await
                .unwrap();
                speeds[i].push(out.trim().parse::<f64>().unwrap() / 1024.0 / 1024.0);
            }
        }
        let [direct, plain, tunnel] = speeds.map(|mut v| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        });
        println!(
            "download {mb} MB {pace} (curl, median of 9): direct {direct:.0} MB/s; through \
             the sandbox's proxy {plain:.0} MB/s ({:.0} %), CONNECT tunnel {tunnel:.0} MB/s \
             ({:.0} %)",
            plain / direct * 100.0,
            tunnel / direct * 100.0
        );
    }
    assert_eq!(s.refusals.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_limit_are_turned_away_with_a_503() {
    if !namespaces_or_skip() {
        return;
    }
    let s = Setup::start(vec![], no_server()).await;
    let (fd, port) = (s.sandbox.netns_fd(), s.proxy_port());
    let proxy = SocketAddr::from(([127, 0, 0, 1], port));
    let (turned_away, after) = tokio::task::spawn_blocking(move || {
        inside(fd, move || {
            // Idle connections, each holding a place while it sends no request head.
            let held: Vec<TcpStream> = (0..256)
                .map(|_| TcpStream::connect(proxy).unwrap())
                .collect();
            let mut turned_away = String::new();
            for _ in 0..3 {
                turned_away = exchange(proxy, String::new()).unwrap_or_default();
                if !turned_away.is_empty() {
                    break;
                }
                // The proxy had not accepted all 256 yet: this one took the last place
                // and timed out unanswered; the next is over the limit.
            }
            drop(held);
            // With the places free again, a request is judged as usual.
            let after = (0..100)
                .map(|_| {
                    std::thread::sleep(Duration::from_millis(20));
                    via_proxy(port, "http://10.0.0.1/")
                })
                .find(|a| a.starts_with("HTTP/1.1 403"))
                .unwrap_or_default();
            (turned_away, after)
        })
    })
    .await
    .unwrap();
    assert!(turned_away.starts_with("HTTP/1.1 503 "), "{turned_away:?}");
    assert!(turned_away.ends_with("the egress proxy is at its connection limit\n"));
    assert!(after.contains("is a private address"), "{after:?}");
}
