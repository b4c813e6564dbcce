//! Reading a command's channel: its stdout, its stderr without the process group
//! marker, and how it ended — handed to a watcher as it arrives, when there is one.

use russh::ChannelMsg;

use super::{LINGER_AFTER_EXIT, PGID_MARKER};
use crate::connection::{OutputTap, Stream};

/// What a channel said.
#[derive(Debug, Default)]
pub(super) struct Collected {
    pub(super) stdout: Vec<u8>,
    /// The command's stderr, without the [`PGID_MARKER`] line.
    pub(super) stderr: Vec<u8>,
    pub(super) exit_code: Option<i32>,
    pub(super) signal: Option<String>,
    /// The server answered the exec request with a failure.
    pub(super) refused: bool,
    /// The server closed the channel (as opposed to the session vanishing).
    pub(super) closed: bool,
    /// The remote shell's pid, which is its process group's id: OpenSSH starts every
    /// session's shell with `setsid`, and the shell `exec`s the command.
    pub(super) pgid: Option<u32>,
    /// How far stderr has been searched for the marker.
    scanned: usize,
    /// How much of stdout and of stderr a watcher has been handed.
    shown: [usize; 2],
}

impl Collected {
    /// Appends stderr bytes; until the [`PGID_MARKER`] line has been seen, looks for it
    /// and cuts it out. Anything before it (a shell start-up file's chatter) is kept.
    pub(super) fn push_stderr(&mut self, data: &[u8]) {
        self.stderr.extend_from_slice(data);
        let marker = PGID_MARKER.as_bytes();
        while self.pgid.is_none() {
            let Some(at) = find(&self.stderr[self.scanned..], marker).map(|i| self.scanned + i)
            else {
                // A marker split across chunks starts in the last few bytes.
                self.scanned = self
                    .scanned
                    .max(self.stderr.len().saturating_sub(marker.len() - 1));
                return;
            };
            let digits = at + marker.len();
            let Some(len) = self.stderr[digits..].iter().position(|&b| b == b'\n') else {
                // The rest of the line has not arrived yet.
                self.scanned = at;
                return;
            };
            let pid = std::str::from_utf8(&self.stderr[digits..digits + len])
                .ok()
                .filter(|s| !s.is_empty() && s.len() <= 10 && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u32>().ok())
                .filter(|&pid| pid > 1);
            match pid {
                Some(pid) => {
                    self.pgid = Some(pid);
                    self.stderr.drain(at..digits + len + 1);
                    self.scanned = at;
                }
                // Not ours after all: look further on.
                None => self.scanned = digits,
            }
        }
    }

    /// Records one message; `true` once the channel has ended.
    pub(super) fn take(&mut self, msg: Option<ChannelMsg>) -> bool {
        match msg {
            Some(ChannelMsg::Data { data }) => self.stdout.extend_from_slice(&data),
            Some(ChannelMsg::ExtendedData { data, ext: 1 }) => self.push_stderr(&data),
            Some(ChannelMsg::ExitStatus { exit_status }) => {
                self.exit_code = Some(i32::try_from(exit_status).unwrap_or(i32::MAX));
            }
            Some(ChannelMsg::ExitSignal { signal_name, .. }) => {
                self.signal = Some(format!("{signal_name:?}"));
            }
            Some(ChannelMsg::Failure) => {
                self.refused = true;
                self.closed = true;
                return true;
            }
            Some(ChannelMsg::Close) => {
                self.closed = true;
                return true;
            }
            Some(_) => {}
            None => return true,
        }
        false
    }

    fn exited(&self) -> bool {
        self.exit_code.is_some() || self.signal.is_some()
    }

    /// Hands `live` what it has not seen yet. Until the marker has been cut out, stderr
    /// is handed over only up to where it could start (`scanned`); `all` (the channel has
    /// ended) hands over the rest whatever it is.
    pub(super) fn show(&mut self, live: &OutputTap<'_>, all: bool) {
        let err_ready = if all || self.pgid.is_some() {
            self.stderr.len()
        } else {
            self.scanned.min(self.stderr.len())
        };
        for (i, stream, bytes, ready) in [
            (0, Stream::Stdout, &self.stdout, self.stdout.len()),
            (1, Stream::Stderr, &self.stderr, err_ready),
        ] {
            if let Some(new) = bytes.get(self.shown[i]..ready).filter(|b| !b.is_empty()) {
                live(stream, new);
                self.shown[i] = ready;
            }
        }
    }
}

/// Where `needle` first occurs in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Reads a channel until the server closes it, or until it has been silent for
/// [`LINGER_AFTER_EXIT`] after the exit status; `live` sees the output as it comes.
pub(super) async fn collect(
    rx: &mut russh::ChannelReadHalf,
    got: &mut Collected,
    live: Option<&OutputTap<'_>>,
) {
    loop {
        let msg = if got.exited() {
            match tokio::time::timeout(LINGER_AFTER_EXIT, rx.wait()).await {
                Ok(msg) => msg,
                Err(_) => return,
            }
        } else {
            rx.wait().await
        };
        let ended = got.take(msg);
        if let Some(live) = live {
            got.show(live, false);
        }
        if ended {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_group_marker_is_cut_from_stderr() {
        let pushed = |chunks: &[&[u8]]| {
            let mut got = Collected::default();
            for chunk in chunks {
                got.push_stderr(chunk);
            }
            (got.pgid, String::from_utf8_lossy(&got.stderr).into_owned())
        };
        assert_eq!(
            pushed(&[b"bosun-pgid:4242\nerr"]),
            (Some(4242), "err".into())
        );
        // Split anywhere, even inside the marker or the number.
        let all = b"bosun-pgid:4242\nerr\nbosun-pgid:7\n";
        for at in 0..all.len() {
            let (a, b) = all.split_at(at);
            assert_eq!(
                pushed(&[a, b]),
                (Some(4242), "err\nbosun-pgid:7\n".into()),
                "split at {at}"
            );
        }
        // A start-up file's chatter before it is kept; a marker that is not one is skipped.
        assert_eq!(
            pushed(&[b"motd\nbosun-pgid:x\n", b"bosun-pgid:99\n"]),
            (Some(99), "motd\nbosun-pgid:x\n".into())
        );
        // No marker (yet): nothing is cut.
        assert_eq!(pushed(&[b"bosun-pgid:12"]), (None, "bosun-pgid:12".into()));
        assert_eq!(pushed(&[b""]), (None, String::new()));
    }

    /// A watcher sees stderr without the marker, however the chunks fall, every byte
    /// once; what could still be the marker waits until it is known not to be.
    #[test]
    fn a_watcher_never_sees_the_marker() {
        let all = b"motd\nbosun-pgid:4242\nerr one\nerr two\n";
        for at in 0..all.len() {
            let (a, b) = all.split_at(at);
            let seen = std::sync::Mutex::new(Vec::new());
            let live = |stream: Stream, bytes: &[u8]| {
                assert_eq!(stream, Stream::Stderr);
                seen.lock().unwrap().extend_from_slice(bytes);
            };
            let mut got = Collected::default();
            got.push_stderr(a);
            got.show(&live, false);
            let early = seen.lock().unwrap().clone();
            assert!(
                b"motd\nerr one\nerr two\n".starts_with(&early),
                "split at {at}: {:?}",
                String::from_utf8_lossy(&early)
            );
            got.push_stderr(b);
            got.show(&live, false);
            got.show(&live, true);
            assert_eq!(
                String::from_utf8_lossy(&seen.lock().unwrap()),
                "motd\nerr one\nerr two\n",
                "split at {at}"
            );
        }
        // No marker at all: the end hands everything over.
        let seen = std::sync::Mutex::new(Vec::new());
        let live = |_: Stream, bytes: &[u8]| seen.lock().unwrap().extend_from_slice(bytes);
        let mut got = Collected::default();
        got.push_stderr(b"bosun-pg");
        got.show(&live, false);
        assert!(seen.lock().unwrap().is_empty());
        got.show(&live, true);
        assert_eq!(&seen.lock().unwrap()[..], b"bosun-pg");
    }
}
