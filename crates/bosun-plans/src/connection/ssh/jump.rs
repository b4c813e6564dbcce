//! Bastions (`proxy_jump`): a host behind one is reached the way OpenSSH's `ProxyJump`
//! reaches it. Bosun connects to the bastion as to any host (its own address, user,
//! identity, `known_hosts` or pinned key; through its own bastion first, for a chain),
//! opens a `direct-tcpip` channel on that connection to the host's `address:port` (the
//! bastion resolves and connects to it), and runs the SSH client over the channel as it
//! would over TCP: the host's key is verified under the host's own name and port, and
//! the host authenticates with its own settings. The bastion runs no command.
//!
//! **Sharing** ([`Jumps`]): within a run, the hosts behind one bastion share one
//! connection to it, each on a channel of its own (like OpenSSH's `ControlMaster`). A
//! bastion connection lives as long as a connection through it does: closing the last
//! of those closes it (and, in turn, its own bastion's). A bastion that could not be
//! reached is not tried again in the same run: every host behind it fails with the same
//! error. One that dropped meanwhile is connected to anew by the next host that needs it.
//!
//! **Errors name the hop**: a bastion's own failure reads `via bastion "b": …` (its
//! resolve, connect, host key or authentication error), a channel the bastion could not
//! open reads `bastion "b" could not open a channel to ADDRESS:PORT: …`, and the host's
//! own failures (host key, authentication) name the host as usual.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use russh::client::{self, Handle};
use russh::{ChannelOpenFailure, ChannelStream};

use super::connect::{
    authenticate, handshake, host_address, host_port, resolve, secs, tcp_connect,
};
use super::host_keys::ClientHandler;
use crate::connection::{ConnError, ConnectOptions};
use crate::model::Host;

/// An authenticated connection to a bastion, which hosts behind it open channels on.
pub(crate) struct Hop {
    /// The bastion's name, for errors.
    pub(crate) name: String,
    handle: Arc<Handle<ClientHandler>>,
    /// The bastion this one is reached through: kept open while this one is.
    via: Mutex<Option<Arc<Hop>>>,
    /// Set once [`Hop::close`] has ended the session.
    closed: AtomicBool,
}

impl std::fmt::Debug for Hop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hop")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Hop {
    /// An authenticated session to bastion `name`, reached through `via` (if any).
    pub(crate) fn new(name: &str, handle: Handle<ClientHandler>, via: Option<Arc<Hop>>) -> Hop {
        Hop {
            name: name.to_string(),
            handle: Arc::new(handle),
            via: Mutex::new(via),
            closed: AtomicBool::new(false),
        }
    }

    /// Connects to `bastion` (through its own bastion first, from `jumps`): every error
    /// of its own stages reads `via bastion "NAME": …`.
    async fn connect(
        bastion: &Host,
        options: &ConnectOptions,
        jumps: &Jumps,
    ) -> Result<Hop, ConnError> {
        let limit = options.connect_timeout;
        let via = match &bastion.proxy_jump {
            Some(outer) => Some(Box::pin(jumps.bastion(outer, options)).await?),
            None => None,
        };
        let named = |error: ConnError| ConnError::Via {
            bastion: bastion.name.clone(),
            error: Box::new(error),
        };
        let (mut handle, _trust) = reach(bastion, via.as_deref(), limit).await.map_err(named)?;
        authenticate(bastion, &mut handle, limit)
            .await
            .map_err(named)?;
        Ok(Hop::new(&bastion.name, handle, via))
    }

    fn is_closed(&self) -> bool {
        self.handle.is_closed()
    }

    /// Ends this bastion's session (the channels on it with it), then lets go of the
    /// bastion it was reached through.
    async fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        let _ = self
            .handle
            .disconnect(russh::Disconnect::ByApplication, "", "en")
            .await;
        let via = self
            .via
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(via) = via {
            Box::pin(release(via)).await;
        }
    }
}

impl Drop for Hop {
    /// A bastion let go of without [`release`] (a connection dropped unclosed) still
    /// ends its session, from a task: a drop cannot wait.
    fn drop(&mut self) {
        if self.closed.load(Ordering::Relaxed) || self.handle.is_closed() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let handle = Arc::clone(&self.handle);
        runtime.spawn(async move {
            let _ = handle
                .disconnect(russh::Disconnect::ByApplication, "", "en")
                .await;
        });
    }
}

/// Lets go of one use of a bastion: the last use closes it (and so on down its chain).
pub(crate) async fn release(hop: Arc<Hop>) {
    if let Some(hop) = Arc::into_inner(hop) {
        hop.close().await;
    }
}

/// The session to `host` up to its host key: over TCP to its address, or over a channel
/// through `via`, its bastion. Returns the session and how the key was trusted.
pub(crate) async fn reach(
    host: &Host,
    via: Option<&Hop>,
    limit: Duration,
) -> Result<(Handle<ClientHandler>, String), ConnError> {
    match via {
        None => {
            let addrs = resolve(host, limit).await?;
            let (stream, _addr) = tcp_connect(host, &addrs, limit).await?;
            handshake(host, stream, limit).await
        }
        Some(hop) => {
            let stream = tunnel(hop, host, limit).await?;
            handshake(host, stream, limit).await
        }
    }
}

/// A `direct-tcpip` channel on the bastion's session to the host's `address:port`, as a
/// byte stream (the bastion resolves the address).
pub(crate) async fn tunnel(
    hop: &Hop,
    host: &Host,
    limit: Duration,
) -> Result<ChannelStream<client::Msg>, ConnError> {
    let address = host_address(host);
    let port = host_port(host);
    let fail = |reason: String| ConnError::Tunnel {
        bastion: hop.name.clone(),
        addr: format!("{address}:{port}"),
        reason,
    };
    if hop.is_closed() {
        return Err(fail("the bastion's SSH session has ended".into()));
    }
    // As OpenSSH's `ssh -W`: the originator is the bastion's own loopback.
    let open = hop
        .handle
        .channel_open_direct_tcpip(address, u32::from(port), "127.0.0.1", 0);
    match tokio::time::timeout(limit, open).await {
        Err(_) => Err(fail(format!("no answer in {}", secs(limit)))),
        Ok(Err(russh::Error::ChannelOpenFailure(why))) => Err(fail(refusal(&why))),
        Ok(Err(e)) => Err(fail(e.to_string())),
        Ok(Ok(channel)) => Ok(channel.into_stream()),
    }
}

/// Why a bastion refused a `direct-tcpip` channel, in words.
fn refusal(why: &ChannelOpenFailure) -> String {
    match why {
        ChannelOpenFailure::AdministrativelyProhibited => {
            "the bastion refused to forward (administratively prohibited: its sshd has `AllowTcpForwarding no`, or a `PermitOpen` or `DisableForwarding` that does not allow this)".into()
        }
        ChannelOpenFailure::ConnectFailed => {
            "the bastion could not connect there (refused, unreachable or unknown from the bastion)".into()
        }
        ChannelOpenFailure::UnknownChannelType => {
            "the bastion does not open direct-tcpip channels".into()
        }
        ChannelOpenFailure::ResourceShortage => "the bastion is short of resources".into(),
        ChannelOpenFailure::Other { code, reason } => format!("refused ({code}: {reason})"),
    }
}

/// The bastion connections of one run, shared by the hosts behind them (see the module
/// docs). [`super::SshConnection::connect`] uses a set of its own: one bastion
/// connection per host.
#[derive(Default)]
pub struct Jumps {
    slots: Mutex<Vec<Slot>>,
}

impl std::fmt::Debug for Jumps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.slots.lock().map(|s| s.len()).unwrap_or_default();
        f.debug_struct("Jumps").field("bastions", &n).finish()
    }
}

/// One bastion of a run: its connection while hosts use it, or why it failed.
struct Slot {
    host: Arc<Host>,
    state: Arc<tokio::sync::Mutex<SlotState>>,
}

enum SlotState {
    Unused,
    /// Held by the connections through it (this is no use of its own).
    Open(Weak<Hop>),
    Failed(ConnError),
}

impl Jumps {
    pub fn new() -> Jumps {
        Jumps::default()
    }

    /// A use of the connection to `bastion`: the open one, else a new one (hosts asking
    /// meanwhile wait for it). Give it back with [`release`].
    pub(crate) async fn bastion(
        &self,
        bastion: &Arc<Host>,
        options: &ConnectOptions,
    ) -> Result<Arc<Hop>, ConnError> {
        let state = {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            let found = slots
                .iter()
                .find(|s| Arc::ptr_eq(&s.host, bastion) || *s.host == **bastion);
            match found {
                Some(slot) => Arc::clone(&slot.state),
                None => {
                    let state = Arc::new(tokio::sync::Mutex::new(SlotState::Unused));
                    slots.push(Slot {
                        host: Arc::clone(bastion),
                        state: Arc::clone(&state),
                    });
                    state
                }
            }
        };
        let mut state = state.lock().await;
        match &*state {
            SlotState::Failed(e) => return Err(e.clone()),
            SlotState::Open(hop) => {
                if let Some(hop) = hop.upgrade().filter(|h| !h.is_closed()) {
                    return Ok(hop);
                }
            }
            SlotState::Unused => {}
        }
        match Hop::connect(bastion, options, self).await {
            Ok(hop) => {
                let hop = Arc::new(hop);
                *state = SlotState::Open(Arc::downgrade(&hop));
                Ok(hop)
            }
            Err(e) => {
                *state = SlotState::Failed(e.clone());
                Err(e)
            }
        }
    }
}
