//! A loopback proxy the test controls, standing between a client (a runner, an engine)
//! and the server: it forwards every connection to the upstream address and can
//! - hold HTTP requests whose request line contains a pattern until released (the client
//!   side is read one HTTP/1.1 request at a time: the head, then its `Content-Length`
//!   body), so a test can kill the server while a state write is on its way;
//! - stall every byte both ways, like a network partition that heals later (TCP keeps
//!   the connections; nothing crosses until `heal`);
//! - cut every connection and refuse new ones, like a partition that resets.
//!
//! Each connection gets two threads; the proxy lives until the test ends.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
struct State {
    /// Requests whose request line contains this wait.
    hold: Option<String>,
    /// Requests held so far (waiting or released).
    held: usize,
    stalled: bool,
    cut: bool,
    /// Every connection's sockets, to cut them.
    sockets: Vec<TcpStream>,
    /// Request lines forwarded, in order.
    forwarded: Vec<String>,
}

struct Shared {
    upstream: SocketAddr,
    state: Mutex<State>,
    changed: Condvar,
}

pub struct Proxy {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

impl Proxy {
    /// A proxy on a free loopback port forwarding to `upstream`.
    pub fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            upstream,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let accepting = Arc::clone(&shared);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let shared = Arc::clone(&accepting);
                {
                    let mut st = shared.state.lock().unwrap();
                    if st.cut {
                        let _ = client.shutdown(Shutdown::Both);
                        continue;
                    }
                    if let Ok(c) = client.try_clone() {
                        st.sockets.push(c);
                    }
                }
                std::thread::spawn(move || serve(shared, client));
            }
        });
        Proxy { addr, shared }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// From now on, requests whose request line contains `pattern` wait for `release`.
    pub fn hold(&self, pattern: &str) {
        self.shared.state.lock().unwrap().hold = Some(pattern.to_string());
    }

    /// Lets held requests (and later ones) through.
    pub fn release(&self) {
        self.shared.state.lock().unwrap().hold = None;
        self.shared.changed.notify_all();
    }

    /// How many requests were held so far.
    pub fn held(&self) -> usize {
        self.shared.state.lock().unwrap().held
    }

    /// Waits until `n` requests have been held, up to `timeout`.
    pub fn wait_held(&self, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.state.lock().unwrap();
        while st.held < n {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            st = self.shared.changed.wait_timeout(st, left).unwrap().0;
        }
        true
    }

    /// The request lines forwarded so far.
    pub fn forwarded(&self) -> Vec<String> {
        self.shared.state.lock().unwrap().forwarded.clone()
    }

    /// Nothing crosses, either way, until `heal`.
    pub fn stall(&self) {
        self.shared.state.lock().unwrap().stalled = true;
    }

    /// Every open connection is closed and new ones are refused, until `heal`.
    pub fn cut(&self) {
        let mut st = self.shared.state.lock().unwrap();
        st.cut = true;
        for s in st.sockets.drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Ends a stall or a cut.
    pub fn heal(&self) {
        let mut st = self.shared.state.lock().unwrap();
        st.stalled = false;
        st.cut = false;
        self.shared.changed.notify_all();
    }
}

impl Shared {
    /// Waits out a stall; false once the proxy cut the connections.
    fn may_pass(&self) -> bool {
        let mut st = self.state.lock().unwrap();
        while st.stalled && !st.cut {
            st = self.changed.wait(st).unwrap();
        }
        !st.cut
    }

    fn track(&self, socket: &TcpStream) {
        if let Ok(s) = socket.try_clone() {
            self.state.lock().unwrap().sockets.push(s);
        }
    }
}

/// One client connection: requests are read one at a time and forwarded over one
/// upstream connection, opened at the first request; answers flow back raw.
fn serve(shared: Arc<Shared>, mut client: TcpStream) {
    let mut upstream: Option<TcpStream> = None;
    let mut buf = Vec::new();
    while let Some((head_len, body_len)) = read_head(&mut client, &mut buf) {
        let total = head_len + body_len;
        while buf.len() < total {
            let mut chunk = [0u8; 16 * 1024];
            match client.read(&mut chunk) {
                Ok(0) | Err(_) => return close(&client, upstream.as_ref()),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let request: Vec<u8> = buf.drain(..total).collect();
        let line = String::from_utf8_lossy(&request)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string();
        wait_if_held(&shared, &line);
        if !shared.may_pass() {
            break;
        }
        if upstream.is_none() {
            let Ok(up) = TcpStream::connect(shared.upstream) else {
                break;
            };
            shared.track(&up);
            let (Ok(from_up), Ok(to_client)) = (up.try_clone(), client.try_clone()) else {
                break;
            };
            let answers = Arc::clone(&shared);
            std::thread::spawn(move || pump(answers, from_up, to_client));
            upstream = Some(up);
        }
        let Some(up) = upstream.as_mut() else { break };
        if up.write_all(&request).is_err() {
            break;
        }
        shared.state.lock().unwrap().forwarded.push(line);
    }
    close(&client, upstream.as_ref());
}

fn close(client: &TcpStream, upstream: Option<&TcpStream>) {
    let _ = client.shutdown(Shutdown::Both);
    if let Some(up) = upstream {
        let _ = up.shutdown(Shutdown::Both);
    }
}

fn wait_if_held(shared: &Shared, line: &str) {
    let mut st = shared.state.lock().unwrap();
    let matches = |st: &State| st.hold.as_deref().is_some_and(|p| line.contains(p));
    if !matches(&st) {
        return;
    }
    st.held += 1;
    shared.changed.notify_all();
    while matches(&st) {
        st = shared.changed.wait(st).unwrap();
    }
}

/// Reads until `buf` holds a whole request head; returns its length and the body's
/// (`Content-Length`, 0 without one). `None` when the client is gone.
fn read_head(client: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(usize, usize)> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let body = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            return Some((end + 4, body));
        }
        let mut chunk = [0u8; 16 * 1024];
        match client.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Copies the server's answers to the client, waiting out stalls.
fn pump(shared: Arc<Shared>, mut from: TcpStream, mut to: TcpStream) {
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match from.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if !shared.may_pass() || to.write_all(&chunk[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}
