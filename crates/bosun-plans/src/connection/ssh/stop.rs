//! Stopping a command still running on the host: its process group killed from a
//! second channel on the same session, also when its `run` future is dropped.

use std::sync::Arc;

use russh::client::{self, Handle};
use russh::{ChannelWriteHalf, Sig};
use tokio::sync::OwnedSemaphorePermit;

use super::output::Collected;
use super::{open_channel, shell_quote, ClientHandler, PGID_WAIT, STOP_WAIT};

/// A started command. Dropped while armed (its `run` future dropped: a cancelled run),
/// it stops the command on the host from a task of its own.
pub(super) struct Running {
    pub(super) handle: Arc<Handle<ClientHandler>>,
    pub(super) tx: Arc<ChannelWriteHalf<client::Msg>>,
    /// `None` once handed to a stop.
    pub(super) rx: Option<russh::ChannelReadHalf>,
    pub(super) got: Collected,
    pub(super) sudo: bool,
    pub(super) armed: bool,
    /// The command's place among the connection's commands, held until it is stopped.
    pub(super) permit: Option<OwnedSemaphorePermit>,
}

impl Running {
    /// A command just started on `tx`/`rx`, armed.
    pub(super) fn new(
        handle: &Arc<Handle<ClientHandler>>,
        tx: &Arc<ChannelWriteHalf<client::Msg>>,
        rx: russh::ChannelReadHalf,
        sudo: bool,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Self {
        Running {
            handle: Arc::clone(handle),
            tx: Arc::clone(tx),
            rx: Some(rx),
            got: Collected::default(),
            sudo,
            armed: true,
            permit,
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // A drop cannot wait: the stop runs on the runtime, holding the session open.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let handle = Arc::clone(&self.handle);
        let tx = Arc::clone(&self.tx);
        let rx = self.rx.take();
        let got = std::mem::take(&mut self.got);
        let sudo = self.sudo;
        let permit = self.permit.take();
        runtime.spawn(async move {
            let mut got = got;
            stop(&handle, &tx, rx, &mut got, sudo).await;
            // The command's session slot is free again only now.
            drop(permit);
        });
    }
}

/// Stops a command that is still running: learns its process group id if the channel
/// has not said it yet (reading at most [`PGID_WAIT`]), then kills the group from a
/// second channel on the same session ([`kill_line`]: `TERM`, `KILL` if it lingers)
/// and closes the command's channel. Without a process group id (a host whose shell
/// printed none) it falls back to a `TERM` signal request, which OpenSSH honours for
/// non-root logins only.
pub(super) async fn stop(
    handle: &Handle<ClientHandler>,
    tx: &ChannelWriteHalf<client::Msg>,
    rx: Option<russh::ChannelReadHalf>,
    got: &mut Collected,
    sudo: bool,
) {
    if got.pgid.is_none() && !got.closed {
        if let Some(mut rx) = rx {
            let deadline = tokio::time::Instant::now() + PGID_WAIT;
            while got.pgid.is_none() {
                match tokio::time::timeout_at(deadline, rx.wait()).await {
                    Ok(msg) => {
                        if got.take(msg) {
                            // The command ended on its own: nothing to stop.
                            return;
                        }
                    }
                    Err(_) => break,
                }
            }
        }
    }
    let killed = match got.pgid {
        Some(pgid) => kill_group(handle, pgid, sudo).await,
        None => false,
    };
    if !killed {
        let _ = tx.signal(Sig::TERM).await;
    }
    let _ = tx.close().await;
}

/// Runs [`kill_line`] for `pgid` on a new channel and waits for it to end (within
/// [`STOP_WAIT`]); `false` if that could not be done.
async fn kill_group(handle: &Handle<ClientHandler>, pgid: u32, sudo: bool) -> bool {
    let attempt = async {
        let mut channel = open_channel(handle, "").await.ok()?;
        channel
            .exec(true, kill_line(pgid, sudo).into_bytes())
            .await
            .ok()?;
        let _ = channel.eof().await;
        let mut got = Collected::default();
        while !got.take(channel.wait().await) {}
        (!got.refused).then_some(())
    };
    matches!(tokio::time::timeout(STOP_WAIT, attempt).await, Ok(Some(())))
}

/// The remote command line that stops process group `pgid`: `TERM` to the group, then,
/// every 0.1 s for 2 s, whether any of it is left, and `KILL` to what is. With `sudo`
/// the same runs through `sudo -n` (root-owned processes of the group), or as the login
/// user when sudo refuses (sudo itself relays the `TERM` to its command). The pid itself
/// is signalled too if it leads no group (a server that did not `setsid` the session).
pub fn kill_line(pgid: u32, sudo: bool) -> String {
    let p = pgid;
    let script = format!(
        "kill -s TERM -- -{p} 2>/dev/null || kill -s TERM {p} 2>/dev/null || exit 0; \
         n=0; \
         while kill -s 0 -- -{p} 2>/dev/null || kill -s 0 {p} 2>/dev/null; do \
         if [ $n -ge 20 ]; then kill -s KILL -- -{p} 2>/dev/null; kill -s KILL {p} 2>/dev/null; exit 0; fi; \
         n=$((n+1)); sleep 0.1 2>/dev/null || {{ sleep 1 2>/dev/null; n=$((n+9)); }}; \
         done"
    );
    if sudo {
        format!(
            "sudo -n -- sh -c {} 2>/dev/null || {{ {script}; }}",
            shell_quote(&script)
        )
    } else {
        script
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_lines() {
        let line = kill_line(4242, false);
        assert!(
            line.starts_with("kill -s TERM -- -4242 2>/dev/null ||"),
            "{line}"
        );
        assert!(line.contains("kill -s KILL -- -4242"), "{line}");
        let sudo = kill_line(4242, true);
        assert!(
            sudo.starts_with("sudo -n -- sh -c 'kill -s TERM -- -4242"),
            "{sudo}"
        );
        assert!(sudo.ends_with(&format!("|| {{ {line}; }}")), "{sudo}");
    }
}
