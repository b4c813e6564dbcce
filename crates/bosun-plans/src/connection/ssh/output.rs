//! Reading a command's channel: its stdout, its stderr without the process group
//! marker, and how it ended.

use russh::ChannelMsg;

use super::{LINGER_AFTER_EXIT, PGID_MARKER};

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
}

impl Collected {
    /// Appends stderr bytes; until the [`PGID_MARKER`] line has been seen, looks for it
    /// and cuts it out. Anything before it (a shell start-up file's chatter) is kept.
    fn push_stderr(&mut self, data: &[u8]) {
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
}

/// Where `needle` first occurs in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Reads a channel until the server closes it, or until it has been silent for
/// [`LINGER_AFTER_EXIT`] after the exit status.
pub(super) async fn collect(rx: &mut russh::ChannelReadHalf, got: &mut Collected) {
    loop {
        let msg = if got.exited() {
            match tokio::time::timeout(LINGER_AFTER_EXIT, rx.wait()).await {
                Ok(msg) => msg,
                Err(_) => return,
            }
        } else {
            rx.wait().await
        };
        if got.take(msg) {
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
}
