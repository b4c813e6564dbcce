//! The accept loop: each connection served by hyper's HTTP/1 (behind TLS when configured),
//! under a cap on connections held at once and a watchdog per connection, so a slow or
//! silent client cannot hold a socket and a task without bound:
//!
//! - the first request head (and the TLS handshake) must be complete within the
//!   header-read timeout of connecting, and each later head within it of its first byte
//!   (a client trickling its headers is cut off);
//! - a connection with no request in flight and no traffic for the idle timeout is closed;
//! - a request body must have arrived within the request timeout of its head. Only the
//!   reading is bounded: a handler that answers slowly on purpose (the runners' lease
//!   long-poll, the log event streams) keeps its connection as long as it answers, and
//!   the connection counts as busy, not idle, meanwhile.
//!
//! Past the cap a plain-HTTP connection is answered 503 saying so and closed; a TLS one
//! is closed before any handshake (the handshake is the costly part). Shutdown stops
//! accepting and lets every connection finish its request in flight.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::response::IntoResponse;
use axum::Router;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use tower::ServiceExt as _;

use crate::config::ListenerConfig;
use crate::error::ApiError;
use crate::tls::Tls;

/// Refused connections answered at once, at most: past it they are just closed, so a
/// flood cannot grow the refusals' own tasks.
const MAX_REFUSALS: usize = 64;
/// How long a refused connection gets to take its 503.
const REFUSAL_WRITE: Duration = Duration::from_secs(2);

/// Serves `app` on `listener` until `stop` resolves, then waits for open connections to
/// finish their requests in flight.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<Arc<Tls>>,
    limits: ListenerConfig,
    stop: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let refusals = Arc::new(Semaphore::new(MAX_REFUSALS));
    let limits = Arc::new(limits);
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => break,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and the like: the error is the listener's
                // state, not the client's; a pause lets closing connections free some.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            tracing::warn!(%peer, max = limits.max_connections, "connection refused: at the connection limit");
            if tls.is_none() {
                if let Ok(slot) = Arc::clone(&refusals).try_acquire_owned() {
                    let max = limits.max_connections;
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(REFUSAL_WRITE, refuse(tcp, max)).await;
                        drop(slot);
                    });
                }
            }
            continue;
        };
        let conn = Connection {
            peer,
            app: app.clone(),
            limits: Arc::clone(&limits),
            watcher: graceful.watcher(),
        };
        let tls = tls.clone();
        tokio::spawn(async move {
            conn.run(tcp, tls).await;
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// Answers a connection past the cap with a 503 that says why, then closes it.
async fn refuse(tcp: TcpStream, max: usize) {
    let service = hyper::service::service_fn(move |_req: hyper::Request<Incoming>| {
        let response = ApiError::Unavailable(format!(
            "the server is serving its maximum of {max} connections (max_connections); \
             retry shortly"
        ))
        .into_response();
        std::future::ready(Ok::<_, Infallible>(response))
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.keep_alive(false);
    let _ = http.serve_connection(TokioIo::new(tcp), service).await;
}

struct Connection {
    peer: SocketAddr,
    app: Router,
    limits: Arc<ListenerConfig>,
    watcher: Watcher,
}

impl Connection {
    async fn run(self, tcp: TcpStream, tls: Option<Arc<Tls>>) {
        let activity = Arc::new(Activity::new());
        match tls {
            None => {
                self.serve(Metered::new(tcp, Arc::clone(&activity)), activity)
                    .await
            }
            Some(tls) => {
                let handshake =
                    tokio::time::timeout(self.limits.header_read_timeout, tls.acceptor.accept(tcp))
                        .await;
                match handshake {
                    Ok(Ok(stream)) => {
                        self.serve(Metered::new(stream, Arc::clone(&activity)), activity)
                            .await
                    }
                    Ok(Err(e)) => {
                        tracing::debug!(peer = %self.peer, error = %e, "TLS handshake failed")
                    }
                    Err(_) => tracing::debug!(peer = %self.peer, "TLS handshake timed out"),
                }
            }
        }
    }

    async fn serve<I>(self, io: Metered<I>, activity: Arc<Activity>)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Connection {
            peer,
            app,
            limits,
            watcher,
        } = self;
        let request_timeout = limits.request_timeout;
        let in_service = Arc::clone(&activity);
        let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let busy = Busy::begin(Arc::clone(&in_service));
            let mut req = req.map(|body| Body::new(Deadline::new(body, request_timeout)));
            req.extensions_mut().insert(ConnectInfo(peer));
            let app = app.clone();
            async move {
                let response = match app.oneshot(req).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                };
                // The connection stays busy until the response's last byte is handed on
                // (a stream's end), not just until its head is ready.
                Ok::<_, Infallible>(response.map(|body| Body::new(Tracked { body, busy })))
            }
        });
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new()).keep_alive(true);
        // No route upgrades the connection (no WebSocket), and only a plain connection
        // takes part in the graceful shutdown.
        let conn = http.serve_connection(TokioIo::new(io), service);
        let conn = watcher.watch(conn);
        tokio::select! {
            served = conn => {
                if let Err(e) = served {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
            }
            why = watchdog(&activity, &limits) => {
                tracing::debug!(%peer, reason = why, "connection closed");
            }
        }
    }
}

/// What a connection is doing, as its I/O and its requests report it.
struct Activity {
    state: Mutex<State>,
    /// Wakes the watchdog when a deadline may have moved earlier or gone.
    changed: Notify,
}

struct State {
    /// Requests whose response has not been sent in full.
    in_flight: usize,
    /// A request head has been started (bytes read while no request was in flight)
    /// and not yet completed.
    head_since: Option<Instant>,
    /// The last read or write of a byte.
    last_io: Instant,
    /// Whether any request has been received: until then the first head is due within
    /// the header-read timeout of connecting.
    served: bool,
    opened: Instant,
}

impl Activity {
    fn new() -> Self {
        let now = Instant::now();
        Activity {
            state: Mutex::new(State {
                in_flight: 0,
                head_since: None,
                last_io: now,
                served: false,
                opened: now,
            }),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a few plain values: one left mid-update by a panic is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn read(&self) {
        let now = Instant::now();
        let started = {
            let mut s = self.lock();
            s.last_io = now;
            let starts = s.in_flight == 0 && s.head_since.is_none();
            if starts {
                s.head_since = Some(now);
            }
            starts
        };
        if started {
            self.changed.notify_one();
        }
    }

    fn wrote(&self) {
        self.lock().last_io = Instant::now();
    }

    /// When the connection is to be closed, as things stand; `None` while a request is
    /// in flight.
    fn deadline(&self, limits: &ListenerConfig) -> Option<(Instant, &'static str)> {
        let s = self.lock();
        if s.in_flight > 0 {
            None
        } else if let Some(since) = s.head_since {
            Some((
                since + limits.header_read_timeout,
                "request head not received within the header-read timeout",
            ))
        } else if !s.served {
            Some((
                s.opened + limits.header_read_timeout,
                "no request within the header-read timeout of connecting",
            ))
        } else {
            Some((
                s.last_io + limits.idle_timeout,
                "idle past the idle timeout",
            ))
        }
    }
}

/// Resolves when the connection is to be closed, with the reason.
async fn watchdog(activity: &Activity, limits: &ListenerConfig) -> &'static str {
    loop {
        match activity.deadline(limits) {
            None => activity.changed.notified().await,
            Some((at, why)) if at <= Instant::now() => return why,
            Some((at, _)) => {
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = activity.changed.notified() => {}
                }
            }
        }
    }
}

/// A request in flight on its connection, from its head until its response is sent.
struct Busy(Arc<Activity>);

impl Busy {
    fn begin(activity: Arc<Activity>) -> Self {
        {
            let mut s = activity.lock();
            s.in_flight += 1;
            s.head_since = None;
            s.served = true;
        }
        activity.changed.notify_one();
        Busy(activity)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        {
            let mut s = self.0.lock();
            s.in_flight = s.in_flight.saturating_sub(1);
            s.last_io = Instant::now();
        }
        self.0.changed.notify_one();
    }
}

/// A response body that keeps its request counted as in flight until it is dropped.
struct Tracked {
    body: Body,
    #[allow(dead_code)] // held for its Drop
    busy: Busy,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The request body was not received within the request timeout.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {}s (request_timeout)", .0.as_secs())]
pub struct BodyTimedOut(Duration);

/// A request body that fails once the request timeout has passed since its head.
struct Deadline {
    body: Incoming,
    sleep: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
}

impl Deadline {
    fn new(body: Incoming, timeout: Duration) -> Self {
        Deadline {
            body,
            sleep: Box::pin(tokio::time::sleep(timeout)),
            timeout,
        }
    }
}

impl HttpBody for Deadline {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if self.sleep.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(Box::new(BodyTimedOut(self.timeout)))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A connection's byte stream, reporting reads and writes to its [`Activity`].
struct Metered<I> {
    io: I,
    activity: Arc<Activity>,
}

impl<I> Metered<I> {
    fn new(io: I, activity: Arc<Activity>) -> Self {
        Metered { io, activity }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Metered<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read();
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Metered<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
