//! Masking, on the server, the secret values a lease carried in the log chunks its runner
//! sends back, before a chunk is stored (and so before anyone streams it). The runner
//! masks them too; this is the second line, for a runner that does not (an old or foreign
//! one, or a bug).
//!
//! The values live in memory only, per run and fencing number (`LeaseMasks`): registered
//! when the lease is built, and — on a replica that did not build it, or after a restart —
//! re-derived from the store through the caller's `derive` (the run's secret references
//! resolved again), never stored in plaintext. A value split across two chunks is masked
//! as the runner's `LogSink::fragment` does it: the end of a chunk that could be the
//! beginning of a value is held back and put in front of the next chunk, so the stored
//! chunk boundary moves but no byte is lost. A resent chunk (its reply was lost) is
//! recognised by its `seq` and not masked twice. What is still held when the phase ends is
//! written as a last chunk by `take_tail`'s caller. What a runner reports besides its log —
//! a plan run's per-host results and report, a phase's failure reason — is masked with the
//! same values (`LeaseMasks::masker`).

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bosun_api::LogChunk;

use crate::error::ApiError;

/// What a masked value is replaced with: the runner's mask, so both read the same.
pub const MASK: &str = "***";

/// An entry nobody touched for this long belongs to a lease that ended without a report
/// here (swept, or reported to another replica): dropped when entries are added.
const IDLE: Duration = Duration::from_secs(6 * 60 * 60);

/// Masks secret values in text.
#[derive(Debug, Default, Clone)]
pub struct Masker {
    /// Non-empty, longest first (a value that contains another is masked whole).
    values: Vec<String>,
}

impl Masker {
    pub fn new(values: impl IntoIterator<Item = String>) -> Self {
        let mut values: Vec<String> = values.into_iter().filter(|v| !v.is_empty()).collect();
        values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        values.dedup();
        Masker { values }
    }

    /// `text` with every occurrence of a value replaced by [`MASK`].
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for value in &self.values {
            if out.contains(value.as_str()) {
                out = Cow::Owned(out.replace(value.as_str(), MASK));
            }
        }
        out
    }

    /// Every string inside `value` (a runner's report) redacted, keys included.
    pub fn redact_json(&self, value: &mut serde_json::Value) {
        use serde_json::Value;
        if self.values.is_empty() {
            return;
        }
        match value {
            Value::String(s) => {
                if let Cow::Owned(masked) = self.redact(s) {
                    *s = masked;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_json(v)),
            Value::Object(map) => {
                let entries = std::mem::take(map);
                for (k, mut v) in entries {
                    self.redact_json(&mut v);
                    map.insert(self.redact(&k).into_owned(), v);
                }
            }
            _ => {}
        }
    }

    /// The length of the longest end of `text` that is the beginning (not the whole) of a
    /// value: what must wait for the next chunk before it can be stored. It ends on a
    /// character boundary, as the value's beginning does.
    pub fn open_tail(&self, text: &str) -> usize {
        self.values
            .iter()
            .filter_map(|value| {
                (1..value.len().min(text.len() + 1))
                    .rev()
                    .find(|&n| value.get(..n).is_some_and(|start| text.ends_with(start)))
            })
            .max()
            .unwrap_or(0)
    }
}

/// Which log a run id names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogKind {
    StackRun,
    PlanRun,
}

/// One lease's masking: its fencing number and values, fixed when it is made (a new
/// lease replaces the entry), and what moves with each append.
#[derive(Debug)]
struct RunMask {
    fencing: i64,
    masker: Masker,
    progress: tokio::sync::Mutex<Progress>,
}

/// The next `seq` this replica expects and the held back end of the last chunk.
#[derive(Debug)]
struct Progress {
    next_seq: Option<i64>,
    tail: String,
    touched: Instant,
}

impl RunMask {
    fn new(fencing: i64, values: Vec<String>) -> Self {
        RunMask {
            fencing,
            masker: Masker::new(values),
            progress: tokio::sync::Mutex::new(Progress {
                next_seq: None,
                tail: String::new(),
                touched: Instant::now(),
            }),
        }
    }
}

impl Masker {
    /// `chunks` as they are to be stored after `progress`, and the progress after storing
    /// them — applied only once the store took them, so a failed append masks nothing
    /// twice.
    fn plan(
        &self,
        progress: (Option<i64>, &str),
        mut chunks: Vec<LogChunk>,
    ) -> (Vec<(i64, String)>, Option<i64>, String) {
        chunks.sort_by_key(|c| c.seq);
        let (mut next, mut tail) = (progress.0, progress.1.to_string());
        let mut out = Vec::with_capacity(chunks.len());
        for chunk in chunks {
            // Already stored through this replica (a resend after a lost reply, or a
            // repeated seq): the store keeps its first copy, and the held tail is not
            // this chunk's to take.
            if next.is_some_and(|n| chunk.seq < n) {
                continue;
            }
            // A gap (chunks in between went to another replica) still takes the held
            // tail first: displaced by a chunk, rather than lost.
            let text = std::mem::take(&mut tail) + &chunk.text;
            let masked = self.redact(&text);
            let keep = self.open_tail(&masked);
            let (head, rest) = masked.split_at(masked.len() - keep);
            out.push((chunk.seq, head.to_string()));
            tail = rest.to_string();
            next = Some(chunk.seq + 1);
        }
        (out, next, tail)
    }
}

type Entries = HashMap<(LogKind, String), Arc<RunMask>>;

/// The masking of every lease this replica knows, by log and run id.
#[derive(Debug, Default)]
pub struct LeaseMasks {
    runs: Mutex<Entries>,
}

impl LeaseMasks {
    fn runs(&self) -> std::sync::MutexGuard<'_, Entries> {
        // Nothing panics while holding it but a HashMap insert or remove, which leave the
        // map whole: a poisoned lock is used anyway.
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Installs `entry` for `run`, dropping entries idle for long (their leases ended
    /// without a report here).
    fn install(&self, kind: LogKind, run: &str, entry: Arc<RunMask>) {
        let mut runs = self.runs();
        runs.retain(|_, m| {
            m.progress
                .try_lock()
                .map_or(true, |p| p.touched.elapsed() < IDLE)
        });
        runs.insert((kind, run.to_string()), entry);
    }

    /// The values a lease just handed out (secrets, tokens): masked in its log from now on.
    pub fn register(&self, kind: LogKind, run: &str, fencing: i64, values: Vec<String>) {
        self.install(kind, run, Arc::new(RunMask::new(fencing, values)));
    }

    /// This replica's entry for the lease `run`/`fencing`, if it has one.
    fn get(&self, kind: LogKind, run: &str, fencing: i64) -> Option<Arc<RunMask>> {
        self.runs()
            .get(&(kind, run.to_string()))
            .filter(|m| m.fencing == fencing)
            .cloned()
    }

    /// The masker of the lease `run`/`fencing`, for what its runner reports besides the
    /// log (per-host results, failure reasons, reports). A replica without the lease's
    /// values gets them from `derive` without keeping them: the lease may be ending, and
    /// a stale fencing number must not displace the live lease's entry.
    pub async fn masker<D, DF>(
        &self,
        kind: LogKind,
        run: &str,
        fencing: i64,
        derive: D,
    ) -> Result<Masker, ApiError>
    where
        D: FnOnce() -> DF,
        DF: Future<Output = Result<Vec<String>, ApiError>>,
    {
        Ok(match self.get(kind, run, fencing) {
            Some(entry) => entry.masker.clone(),
            None => Masker::new(derive().await?),
        })
    }

    /// [`LeaseMasks::masker`] for a runner's final report: when the run's secrets no
    /// longer resolve it masks nothing rather than refuse the report, since the report is
    /// what settles the run (the log, masked as it arrived, is unaffected).
    pub async fn report_masker<D, DF>(
        &self,
        kind: LogKind,
        run: &str,
        fencing: i64,
        derive: D,
    ) -> Masker
    where
        D: FnOnce() -> DF,
        DF: Future<Output = Result<Vec<String>, ApiError>>,
    {
        match self.masker(kind, run, fencing, derive).await {
            Ok(masker) => masker,
            Err(e) => {
                tracing::warn!(run, error = %e, "the lease's secrets no longer resolve; its report is stored as sent");
                Masker::default()
            }
        }
    }

    /// Masks `chunks` of the lease `run`/`fencing` and stores them with `append`. A
    /// replica without the lease's values gets them from `derive` first. Appends of one
    /// lease are serialised, so a held tail goes to the chunk right after it.
    pub async fn append_masked<D, DF, A, AF>(
        &self,
        kind: LogKind,
        run: &str,
        fencing: i64,
        chunks: Vec<LogChunk>,
        derive: D,
        append: A,
    ) -> Result<(), ApiError>
    where
        D: FnOnce() -> DF,
        DF: Future<Output = Result<Vec<String>, ApiError>>,
        A: FnOnce(Vec<(i64, String)>) -> AF,
        AF: Future<Output = Result<(), ApiError>>,
    {
        let entry = match self.get(kind, run, fencing) {
            Some(entry) => entry,
            None => {
                let fresh = Arc::new(RunMask::new(fencing, derive().await?));
                // Another request may have made this lease's entry while `derive` ran:
                // keep that one (and its held tail).
                match self.get(kind, run, fencing) {
                    Some(entry) => entry,
                    None => {
                        self.install(kind, run, fresh.clone());
                        fresh
                    }
                }
            }
        };
        let mut progress = entry.progress.lock().await;
        let (stored, next, tail) = entry
            .masker
            .plan((progress.next_seq, &progress.tail), chunks);
        append(stored).await?;
        progress.next_seq = next;
        progress.tail = tail;
        progress.touched = Instant::now();
        Ok(())
    }

    /// Forgets the lease `run`/`fencing` (its phase ended) and answers what it still held
    /// back, for the caller to store as the log's last chunk: not a whole value, since
    /// nothing followed to complete one.
    pub async fn take_tail(&self, kind: LogKind, run: &str, fencing: i64) -> Option<String> {
        let entry = self.get(kind, run, fencing)?;
        let tail = std::mem::take(&mut entry.progress.lock().await.tail);
        let mut runs = self.runs();
        if runs
            .get(&(kind, run.to_string()))
            .is_some_and(|e| Arc::ptr_eq(e, &entry))
        {
            runs.remove(&(kind, run.to_string()));
        }
        (!tail.is_empty()).then_some(tail)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn chunk(seq: i64, text: &str) -> LogChunk {
        LogChunk::new(seq, text)
    }

    #[test]
    fn masks_longest_first_and_holds_back_a_possible_beginning() {
        let m = Masker::new(["hunter2".to_string(), "hunter".into(), String::new()]);
        assert_eq!(m.redact("a hunter2 and hunter"), "a *** and ***");
        assert_eq!(m.open_tail("pw: hunt"), 4);
        assert_eq!(m.open_tail("pw: hunter2"), 0);
        assert_eq!(m.open_tail("nothing"), 0);
        let multibyte = Masker::new(["é-secret".to_string()]);
        assert_eq!(multibyte.open_tail("xé"), "é".len());
    }

    #[test]
    fn reports_are_masked_in_every_string_and_key() {
        let m = Masker::new(["hunter2".to_string()]);
        let mut report = serde_json::json!({
            "hosts": [{"stdout": "pw hunter2", "exit": 1}],
            "hunter2": "key",
            "ok": true
        });
        m.redact_json(&mut report);
        assert_eq!(
            report,
            serde_json::json!({"hosts": [{"stdout": "pw ***", "exit": 1}], "***": "key", "ok": true})
        );
    }

    #[test]
    fn a_value_split_across_chunks_is_masked_and_resends_are_skipped() {
        let m = Masker::new(["hunter2".to_string()]);
        let (stored, next, tail) = m.plan((None, ""), vec![chunk(4, "pw: hun")]);
        assert_eq!(stored, vec![(4, "pw: ".to_string())]);
        assert_eq!((next, tail.as_str()), (Some(5), "hun"));
        // The first chunk again (its reply was lost) with the next one.
        let (stored, next, tail) = m.plan(
            (next, &tail),
            vec![chunk(5, "ter2 ok\n"), chunk(4, "pw: hun")],
        );
        assert_eq!(stored, vec![(5, "*** ok\n".to_string())]);
        assert_eq!((next, tail.as_str()), (Some(6), ""));
    }
}
