//! Signals: small wake-ups that cross server replicas ("a run may be dispatchable", "a
//! notification was written", "run X changed"). They carry no data — a subscriber that
//! hears one looks in the store — so a lost or repeated signal costs only latency, and
//! every waiter keeps a slow fallback poll.
//!
//! A write transaction queues the signals of its changes ([`emit`], on the blocking
//! thread that runs it); the store publishes them only once it commits, and drops them
//! when it rolls back. Each store instance fans signals out to its subscribers through
//! one `tokio::sync::broadcast` channel ([`Hub`]). SQLite: that is all (one process).
//! PostgreSQL: the same signals are also sent with `NOTIFY bosun_signals` inside the
//! writing transaction (so PostgreSQL delivers them only on commit), and one `LISTEN`
//! connection per store forwards other instances' signals into the hub.

use std::cell::RefCell;

/// A wake-up published on commit (or by [`crate::Store::publish`](crate::SignalStore::publish)).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Signal {
    /// A run or plan run may have become dispatchable: waiting leases look again.
    Dispatch,
    /// Notification deliveries were written: the delivery duty sends them.
    Notification,
    /// A run's or plan run's logs or state changed (its id).
    Run(String),
    /// Signals may have been missed (a listener reconnected, a subscriber fell behind):
    /// every waiter looks again.
    Resync,
}

impl Signal {
    /// Whether a waiter on run `id` should look again.
    pub fn concerns_run(&self, id: &str) -> bool {
        match self {
            Signal::Run(r) => r == id,
            Signal::Resync => true,
            _ => false,
        }
    }

    /// Whether waiting leases should look again.
    pub fn concerns_dispatch(&self) -> bool {
        matches!(self, Signal::Dispatch | Signal::Resync)
    }

    /// Whether the notification delivery duty should look again.
    pub fn concerns_notifications(&self) -> bool {
        matches!(self, Signal::Notification | Signal::Resync)
    }

    /// The wire form (a `NOTIFY` payload's part after the sender): `d`, `n`, `*`, `r:<id>`.
    pub(crate) fn encode(&self) -> String {
        match self {
            Signal::Dispatch => "d".into(),
            Signal::Notification => "n".into(),
            Signal::Resync => "*".into(),
            Signal::Run(id) => format!("r:{id}"),
        }
    }

    pub(crate) fn decode(text: &str) -> Option<Signal> {
        match text {
            "d" => Some(Signal::Dispatch),
            "n" => Some(Signal::Notification),
            "*" => Some(Signal::Resync),
            _ => text
                .strip_prefix("r:")
                .map(|id| Signal::Run(id.to_string())),
        }
    }
}

/// What a receiver got: a signal, or (having lagged, or on a closed hub) a resync.
pub async fn next(rx: &mut tokio::sync::broadcast::Receiver<Signal>) -> Signal {
    use tokio::sync::broadcast::error::RecvError;
    match rx.recv().await {
        Ok(s) => s,
        Err(RecvError::Lagged(_)) => Signal::Resync,
        // The store is gone: nothing will ever come; wait for the caller's other arms.
        Err(RecvError::Closed) => std::future::pending().await,
    }
}

thread_local! {
    static PENDING: RefCell<Vec<Signal>> = const { RefCell::new(Vec::new()) };
}

/// Queues a signal of the write transaction running on this thread: published when it
/// commits, dropped when it does not.
pub(crate) fn emit(signal: Signal) {
    PENDING.with(|p| {
        let mut p = p.borrow_mut();
        if !p.contains(&signal) {
            p.push(signal);
        }
    });
}

/// The signals the transaction on this thread queued (and clears them): called before a
/// transaction starts (to drop leftovers) and after it commits.
pub(crate) fn take_pending() -> Vec<Signal> {
    PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()))
}

/// Buffered signals per subscriber before it lags (and gets a `Resync`).
const CAPACITY: usize = 1024;

/// One store instance's fan-out to its subscribers.
pub(crate) struct Hub {
    tx: tokio::sync::broadcast::Sender<Signal>,
    /// Names this instance in `NOTIFY` payloads, so its listener skips its own.
    pub(crate) instance: String,
}

impl Hub {
    pub(crate) fn new() -> Hub {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Hub {
            tx: tokio::sync::broadcast::channel(CAPACITY).0,
            instance: format!("{:x}.{:x}.{n}", std::process::id(), nanos),
        }
    }

    pub(crate) fn send(&self, signal: Signal) {
        // No subscriber: nobody waits.
        let _ = self.tx.send(signal);
    }

    pub(crate) fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Signal> {
        self.tx.subscribe()
    }

    /// The `NOTIFY` payload of a signal from this instance.
    pub(crate) fn payload(&self, signal: &Signal) -> String {
        format!("{}|{}", self.instance, signal.encode())
    }

    /// A received payload: the signal, unless it is this instance's own (already sent
    /// locally) or unreadable.
    pub(crate) fn receive(&self, payload: &str) {
        match payload.split_once('|') {
            Some((from, _)) if from == self.instance => {}
            Some((_, code)) => match Signal::decode(code) {
                Some(s) => self.send(s),
                None => tracing::debug!(payload, "ignoring an unknown signal"),
            },
            None => tracing::debug!(payload, "ignoring an unknown signal"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn signals_roundtrip_their_wire_form() {
        for s in [
            Signal::Dispatch,
            Signal::Notification,
            Signal::Resync,
            Signal::Run("r-1".into()),
        ] {
            assert_eq!(Signal::decode(&s.encode()), Some(s));
        }
        assert_eq!(Signal::decode("x"), None);
    }

    #[test]
    fn a_hub_skips_its_own_payloads() {
        let (a, b) = (Hub::new(), Hub::new());
        let mut rx = a.subscribe();
        a.receive(&a.payload(&Signal::Dispatch));
        a.receive(&b.payload(&Signal::Run("r".into())));
        assert_eq!(rx.try_recv().unwrap(), Signal::Run("r".into()));
        assert!(rx.try_recv().is_err());
    }
}
