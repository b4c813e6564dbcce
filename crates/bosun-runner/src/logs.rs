//! A phase's log on its way to the server: lines are batched into numbered chunks
//! (`LogBatcher`: at most 16 KiB each, flushed every 200 ms) and shipped in order by one
//! task per phase (`spawn_shipper`), which resends a batch until the server accepts it.
//! Resending is safe because the server keeps the first copy of each `seq`: no line is
//! lost or duplicated by a network error.
//!
//! Every line passes through `LogSink`, which masks the phase's secrets (`Redactor`: the
//! clone token, in case a remote echoes it; the ID-token request token; the lease's
//! resolved secret values; the identity tokens integrations fetch, added as they arrive)
//! before the line is queued: nothing unmasked reaches the batcher, so chunk boundaries
//! cannot split a secret. Command output is
//! assembled into whole lines before it gets here; the one place a line is cut — an
//! overlong line without a newline — goes through `LogSink::fragment`, which holds back a
//! tail that could be the start of a secret and prepends it to what follows.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};
use std::time::Duration;

use bosun_api::{LogAppend, LogChunk};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::client::{retry, ClientError, ServerClient};
use crate::control::{Shutdown, Stop, StopSignal};

/// How often a partly filled chunk is sent.
pub(crate) const FLUSH_INTERVAL: Duration = Duration::from_millis(200);
/// The largest chunk, in bytes of text.
pub(crate) const MAX_CHUNK_BYTES: usize = 16 * 1024;
/// The most chunk text one request carries (a backlog goes out in several requests, well
/// under the server's body limit).
const MAX_REQUEST_BYTES: usize = 256 * 1024;
/// Lines waiting for the shipper; when full, readers of engine output wait.
const LINE_QUEUE: usize = 4096;

/// Turns lines into numbered chunks. Pure: no I/O, no clock.
#[derive(Debug)]
pub(crate) struct LogBatcher {
    next_seq: i64,
    max_bytes: usize,
    open: String,
    sealed: VecDeque<LogChunk>,
}

impl LogBatcher {
    /// A batcher whose first chunk gets `next_seq`; `max_bytes` is at least 4 (one char).
    pub(crate) fn new(next_seq: i64, max_bytes: usize) -> Self {
        LogBatcher {
            next_seq,
            max_bytes: max_bytes.max(4),
            open: String::new(),
            sealed: VecDeque::new(),
        }
    }

    /// Adds one line (a newline is appended). A line that does not fit the open chunk
    /// starts a new one; a line longer than a chunk is split at character boundaries.
    /// Returns whether a full chunk is ready to send.
    pub(crate) fn push_line(&mut self, line: &str) -> bool {
        let len = line.len() + 1;
        if !self.open.is_empty() && self.open.len() + len > self.max_bytes {
            self.seal();
        }
        self.open.push_str(line);
        self.open.push('\n');
        while self.open.len() >= self.max_bytes {
            let mut cut = self.max_bytes;
            while !self.open.is_char_boundary(cut) {
                cut -= 1;
            }
            let rest = self.open.split_off(cut);
            self.seal();
            self.open = rest;
        }
        !self.sealed.is_empty()
    }

    /// Closes the open chunk (if it has any text) and numbers it.
    pub(crate) fn seal(&mut self) {
        if self.open.is_empty() {
            return;
        }
        let text = std::mem::take(&mut self.open);
        self.sealed.push_back(LogChunk::new(self.next_seq, text));
        self.next_seq += 1;
    }

    pub(crate) fn has_sealed(&self) -> bool {
        !self.sealed.is_empty()
    }

    /// Removes the oldest sealed chunks, at least one, up to `max_bytes` of text.
    pub(crate) fn take_batch(&mut self, max_bytes: usize) -> Vec<LogChunk> {
        let mut batch = Vec::new();
        let mut bytes = 0;
        while let Some(chunk) = self.sealed.front() {
            if !batch.is_empty() && bytes + chunk.text.len() > max_bytes {
                break;
            }
            bytes += chunk.text.len();
            if let Some(chunk) = self.sealed.pop_front() {
                batch.push(chunk);
            }
        }
        batch
    }

    /// The `seq` the next sealed chunk will get.
    #[cfg(test)]
    pub(crate) fn next_seq(&self) -> i64 {
        self.next_seq
    }
}

/// What a masked secret is replaced with.
pub(crate) const MASK: &str = "***";

/// Masks secret values in text.
#[derive(Debug)]
pub(crate) struct Redactor {
    /// Non-empty, longest first (a secret that contains another is masked whole).
    secrets: Vec<String>,
}

impl Redactor {
    pub(crate) fn new(secrets: impl IntoIterator<Item = String>) -> Self {
        let mut redactor = Redactor {
            secrets: Vec::new(),
        };
        redactor.extend(secrets);
        redactor
    }

    /// Adds secrets (empty ones are ignored) to those already masked.
    fn extend(&mut self, secrets: impl IntoIterator<Item = String>) {
        self.secrets
            .extend(secrets.into_iter().filter(|s| !s.is_empty()));
        self.secrets
            .sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        self.secrets.dedup();
    }

    /// `text` with every occurrence of a secret replaced by `***`.
    pub(crate) fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = Cow::Owned(out.replace(secret.as_str(), MASK));
            }
        }
        out
    }

    /// The length of the longest end of `text` that is the beginning (not the whole) of a
    /// secret: what must wait for the rest of a cut line before it can be logged.
    fn open_tail(&self, text: &str) -> usize {
        self.secrets
            .iter()
            .filter_map(|secret| {
                (1..secret.len().min(text.len() + 1))
                    .rev()
                    .find(|&n| secret.get(..n).is_some_and(|start| text.ends_with(start)))
            })
            .max()
            .unwrap_or(0)
    }
}

/// Where a phase writes its log lines, masking the phase's secrets: those of the lease
/// (`workspace::lease_secrets`) and those the phase learns while it runs (`add_secret`:
/// the identity tokens integrations fetch). Cloned into every task that produces output;
/// all clones share one set of secrets. The log is complete once every clone is dropped
/// and the shipper has returned.
#[derive(Clone)]
pub(crate) struct LogSink {
    tx: mpsc::Sender<String>,
    redactor: Arc<RwLock<Redactor>>,
}

impl LogSink {
    fn new(tx: mpsc::Sender<String>, secrets: impl IntoIterator<Item = String>) -> Self {
        LogSink {
            tx,
            redactor: Arc::new(RwLock::new(Redactor::new(secrets))),
        }
    }

    /// The redactor, for reading. A writer that panicked cannot have left it half
    /// changed (`extend` only pushes, sorts and dedups), so a poisoned lock is used anyway.
    fn redactor(&self) -> RwLockReadGuard<'_, Redactor> {
        self.redactor.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Masks `secret` from now on, in every clone of this sink (an empty one is ignored).
    /// Call it before the value can reach any output.
    pub(crate) fn add_secret(&self, secret: impl Into<String>) {
        self.redactor
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .extend([secret.into()]);
    }

    /// Queues one line (without its newline), masked. A shipper that stopped (fenced)
    /// discards it.
    pub(crate) async fn line(&self, line: impl Into<String>) {
        let line = line.into();
        let masked = match self.redactor().redact(&line) {
            Cow::Borrowed(_) => line,
            Cow::Owned(masked) => masked,
        };
        let _ = self.tx.send(masked).await;
    }

    /// Queues the first part of a line that is cut for its length, masked, except for a
    /// tail that could be the beginning of a secret (of any of them: the longest such
    /// tail is kept): that tail is returned, and the caller puts it in front of the rest
    /// of the line.
    pub(crate) async fn fragment(&self, text: &str) -> String {
        let (head, tail) = {
            let redactor = self.redactor();
            let masked = redactor.redact(text);
            let keep = redactor.open_tail(&masked);
            let (head, tail) = masked.split_at(masked.len() - keep);
            (head.to_string(), tail.to_string())
        };
        if !head.is_empty() {
            let _ = self.tx.send(head).await;
        }
        tail
    }

    /// `text` masked as the log's lines are (for failure reasons, which the server shows
    /// too).
    pub(crate) fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        self.redactor().redact(text)
    }

    /// A sink whose lines go straight to `tx` (tests read them there).
    #[cfg(test)]
    pub(crate) fn for_test(tx: mpsc::Sender<String>, secrets: &[&str]) -> Self {
        LogSink::new(tx, secrets.iter().map(|s| s.to_string()))
    }
}

/// How a shipper ended.
#[derive(Debug)]
pub(crate) enum ShipEnd {
    /// Every line reached the server (or was refused for good and logged).
    Delivered,
    /// The lease was fenced; lines after that point were dropped.
    Fenced,
    /// The runner shut down before the server could be reached.
    GaveUp,
}

/// Starts the shipper of one phase's log, numbering chunks from `next_seq`; the sink masks
/// `secrets`. A fenced answer raises `Stop::Fenced` on `stop` (so the engine dies at once).
pub(crate) fn spawn_shipper(
    client: Arc<ServerClient>,
    run_id: String,
    fencing: i64,
    next_seq: i64,
    secrets: Vec<String>,
    stop: StopSignal,
    shutdown: Shutdown,
) -> (LogSink, JoinHandle<ShipEnd>) {
    let (tx, rx) = mpsc::channel(LINE_QUEUE);
    let shipper = Shipper {
        client,
        run_id,
        fencing,
        stop,
        shutdown,
        batcher: LogBatcher::new(next_seq, MAX_CHUNK_BYTES),
    };
    let sink = LogSink::new(tx, secrets);
    (sink, tokio::spawn(shipper.run(rx)))
}

struct Shipper {
    client: Arc<ServerClient>,
    run_id: String,
    fencing: i64,
    stop: StopSignal,
    shutdown: Shutdown,
    batcher: LogBatcher,
}

impl Shipper {
    async fn run(mut self, mut rx: mpsc::Receiver<String>) -> ShipEnd {
        let mut tick = tokio::time::interval(FLUSH_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let end = loop {
            let flush = tokio::select! {
                line = rx.recv() => match line {
                    Some(line) => self.batcher.push_line(&line),
                    None => {
                        self.batcher.seal();
                        break self.flush().await;
                    }
                },
                _ = tick.tick() => {
                    self.batcher.seal();
                    self.batcher.has_sealed()
                }
            };
            if flush {
                match self.flush().await {
                    ShipEnd::Delivered => {}
                    end => break end,
                }
            }
        };
        // Whatever still arrives is dropped, but keep reading so no producer blocks on a
        // full queue while the phase winds down.
        rx.close();
        while rx.recv().await.is_some() {}
        end
    }

    /// Sends every sealed chunk, in order, each batch until accepted.
    async fn flush(&mut self) -> ShipEnd {
        while self.batcher.has_sealed() {
            let append = LogAppend {
                fencing: self.fencing,
                chunks: self.batcher.take_batch(MAX_REQUEST_BYTES),
            };
            let client = &self.client;
            let run = self.run_id.as_str();
            let sent = retry("sending log chunks", self.shutdown.give_up(), || {
                client.append_logs(run, &append)
            })
            .await;
            match sent {
                Ok(()) => {}
                Err(ClientError::Fenced) => {
                    self.stop.stop(Stop::Fenced);
                    return ShipEnd::Fenced;
                }
                Err(ClientError::GaveUp) => return ShipEnd::GaveUp,
                Err(e) => {
                    // Refused for good (a bug on one side): keep the rest of the log going.
                    let first = append.chunks.first().map(|c| c.seq);
                    tracing::error!(run = %self.run_id, error = %e, first_seq = ?first,
                        "the server refused log chunks; they are lost");
                }
            }
        }
        ShipEnd::Delivered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(chunks: &[LogChunk]) -> Vec<(i64, &str)> {
        chunks.iter().map(|c| (c.seq, c.text.as_str())).collect()
    }

    #[test]
    fn lines_fill_a_chunk_until_it_is_full() {
        let mut b = LogBatcher::new(7, 16);
        assert!(!b.push_line("abc"));
        assert!(!b.push_line("defgh"));
        // "abc\ndefgh\n" is 10 bytes; "ijklmn\n" would make 17: it opens the next chunk.
        assert!(b.push_line("ijklmn"));
        b.seal();
        let batch = b.take_batch(usize::MAX);
        assert_eq!(texts(&batch), [(7, "abc\ndefgh\n"), (8, "ijklmn\n")]);
        assert_eq!(b.next_seq(), 9);
        assert!(!b.has_sealed());
    }

    #[test]
    fn a_chunk_that_reaches_the_limit_exactly_is_sealed() {
        let mut b = LogBatcher::new(0, 8);
        assert!(b.push_line("1234567"));
        assert_eq!(texts(&b.take_batch(usize::MAX)), [(0, "1234567\n")]);
    }

    #[test]
    fn long_lines_are_split_at_char_boundaries() {
        let mut b = LogBatcher::new(0, 8);
        // Each 'é' is two bytes: 7 of them plus a newline is 15 bytes.
        assert!(b.push_line("ééééééé"));
        b.seal();
        let batch = b.take_batch(usize::MAX);
        assert_eq!(texts(&batch), [(0, "éééé"), (1, "ééé\n")]);
        assert!(batch.iter().all(|c| c.text.len() <= 8));
    }

    #[test]
    fn seal_of_an_empty_chunk_numbers_nothing() {
        let mut b = LogBatcher::new(3, 16);
        b.seal();
        assert!(!b.has_sealed());
        assert!(b.take_batch(usize::MAX).is_empty());
        assert_eq!(b.next_seq(), 3);
    }

    #[test]
    fn batches_respect_the_request_size_and_keep_order() {
        let mut b = LogBatcher::new(0, 10);
        for i in 0..10 {
            b.push_line(&format!("line {i}"));
        }
        b.seal();
        let first = b.take_batch(15);
        let second = b.take_batch(15);
        let mut rest = Vec::new();
        while b.has_sealed() {
            rest.extend(b.take_batch(15));
        }
        assert_eq!(first.len(), 2);
        assert_eq!(second.len(), 2);
        let all: Vec<LogChunk> = first.into_iter().chain(second).chain(rest).collect();
        let seqs: Vec<i64> = all.iter().map(|c| c.seq).collect();
        assert_eq!(seqs, (0..10).collect::<Vec<_>>());
        let text: String = all.iter().map(|c| c.text.as_str()).collect();
        let expected: String = (0..10).map(|i| format!("line {i}\n")).collect();
        assert_eq!(text, expected);
    }

    fn redactor(secrets: &[&str]) -> Redactor {
        Redactor::new(secrets.iter().map(|s| s.to_string()))
    }

    #[test]
    fn secrets_are_masked_wherever_they_appear() {
        let r = redactor(&["tok", "", "tok", "xx-tok-xx"]);
        assert_eq!(r.redact("no secret here"), "no secret here");
        assert!(matches!(r.redact("no secret here"), Cow::Borrowed(_)));
        assert_eq!(r.redact("tok tok"), "*** ***");
        // The longer secret is masked whole, not as `xx-***-xx`.
        assert_eq!(r.redact("a xx-tok-xx b"), "a *** b");
        let none = redactor(&[]);
        assert_eq!(none.redact("tok"), "tok");
        assert_eq!(none.open_tail("to"), 0);
    }

    #[test]
    fn an_open_tail_is_the_start_of_a_secret() {
        let r = redactor(&["ghs_secret"]);
        assert_eq!(r.open_tail("output ghs_sec"), 7);
        assert_eq!(r.open_tail("output g"), 1);
        assert_eq!(r.open_tail("output"), 0);
        assert_eq!(r.open_tail(""), 0);
        assert_eq!(r.open_tail("gh"), 2);
        // A whole secret is not open (it is masked before this is asked).
        assert_eq!(r.open_tail("x ghs_secret"), 0);
    }

    #[tokio::test]
    async fn a_secret_cut_between_fragments_is_still_masked() {
        let (tx, mut rx) = mpsc::channel(16);
        let sink = LogSink::for_test(tx, &["aXa-secret"]);
        let mut lines = Vec::new();
        // The secret arrives in three pieces; its start also overlaps itself.
        let mut carry = sink.fragment("first part aX").await;
        assert_eq!(carry, "aX");
        carry = sink.fragment(&format!("{carry}a-se")).await;
        assert_eq!(carry, "aXa-se");
        sink.line(format!("{carry}cret and the rest")).await;
        sink.line("whole aXa-secret line").await;
        drop(sink);
        while let Some(line) = rx.recv().await {
            lines.push(line);
        }
        assert_eq!(lines, ["first part ", "*** and the rest", "whole *** line"]);
    }

    #[tokio::test]
    async fn several_secrets_each_cut_between_fragments_are_all_masked() {
        let (tx, mut rx) = mpsc::channel(16);
        let sink = LogSink::for_test(tx, &["first-SECRET-1", "second-SECRET-2"]);
        // Both secrets are cut, one across the first boundary, one across the second.
        let mut carry = sink.fragment("a first-SEC").await;
        assert_eq!(carry, "first-SEC");
        carry = sink.fragment(&format!("{carry}RET-1 and second-SE")).await;
        assert_eq!(carry, "second-SE");
        sink.line(format!("{carry}CRET-2 end")).await;
        // Two secrets that begin alike: the longer possible start is held back.
        let sink2 = LogSink::for_test(sink.tx.clone(), &["abc-1111", "abc-22"]);
        carry = sink2.fragment("x abc-").await;
        assert_eq!(carry, "abc-");
        carry = sink2.fragment(&format!("{carry}22 abc-11")).await;
        assert_eq!(carry, "abc-11");
        sink2.line(format!("{carry}11 y")).await;
        drop((sink, sink2));
        let mut lines = Vec::new();
        while let Some(line) = rx.recv().await {
            lines.push(line);
        }
        assert_eq!(lines, ["a ", "*** and ", "*** end", "x ", "*** ", "*** y"]);
        let all = lines.concat();
        for secret in ["first-SECRET-1", "second-SECRET-2", "abc-1111", "abc-22"] {
            assert!(!all.contains(secret), "{secret} in {all}");
        }
    }

    #[tokio::test]
    async fn secrets_added_later_are_masked_by_every_clone() {
        let (tx, mut rx) = mpsc::channel(16);
        let sink = LogSink::for_test(tx, &["lease-secret"]);
        let clone = sink.clone();
        clone.line("tok-fetched-later lease-secret").await;
        sink.add_secret("tok-fetched-later");
        sink.add_secret("");
        clone.line("tok-fetched-later lease-secret").await;
        assert_eq!(sink.redact("[tok-fetched-later]"), "[***]");
        assert_eq!(clone.fragment("a tok-fetch").await, "tok-fetch");
        drop((sink, clone));
        let mut lines = Vec::new();
        while let Some(line) = rx.recv().await {
            lines.push(line);
        }
        assert_eq!(lines, ["tok-fetched-later ***", "*** ***", "a "]);
    }

    #[test]
    fn a_batch_always_takes_at_least_one_chunk() {
        let mut b = LogBatcher::new(0, 100);
        b.push_line(&"x".repeat(50));
        b.seal();
        assert_eq!(b.take_batch(10).len(), 1);
    }
}
