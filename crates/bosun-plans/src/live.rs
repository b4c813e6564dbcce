//! A command's output as people watch it run: cut into lines per stream, each line shown
//! whole or not at all (so masking a secret in a line never meets half of it), and at
//! most [`LIVE_BYTES`] per step and host — past that, one line says the rest is not
//! shown live, so a chatty command cannot flood a run's log. What is not shown live is
//! still in the step's result.

use crate::connection::Stream;

/// The most of one step's output on one host shown live (both streams together).
pub const LIVE_BYTES: usize = 32 * 1024;

/// What a line of live output is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineKind {
    Stdout,
    Stderr,
    /// Bosun's note that the live output of this step on this host stops here.
    Cut,
}

/// One line a step's command printed on a host, as it was printed (masked as every text
/// of the run is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputLine {
    /// 1-based.
    pub step: usize,
    pub host: String,
    pub kind: LineKind,
    /// Without its newline.
    pub text: String,
}

impl OutputLine {
    /// The line prefixed by its host (`[web-1] text`, `[web-1 stderr] text`), for a log
    /// where the lines of hosts working at once interleave.
    pub fn display(&self) -> String {
        let prefix = match self.kind {
            LineKind::Stderr => format!("[{} stderr]", self.host),
            LineKind::Stdout | LineKind::Cut => format!("[{}]", self.host),
        };
        if self.text.is_empty() {
            prefix
        } else {
            format!("{prefix} {}", self.text)
        }
    }
}

/// Cuts one step's output on one host into lines, within a budget of bytes.
#[derive(Debug)]
pub(crate) struct Lines {
    limit: usize,
    /// Bytes of the budget not spent yet.
    left: usize,
    cut: bool,
    /// Each stream's line in progress (stdout, stderr).
    pending: [Vec<u8>; 2],
}

impl Lines {
    pub(crate) fn new(limit: usize) -> Self {
        Lines {
            limit,
            left: limit,
            cut: false,
            pending: [Vec::new(), Vec::new()],
        }
    }

    /// Takes the next bytes of `stream`; returns the lines they complete, and the note
    /// that the output is cut once a line does not fit the budget (nothing after it is
    /// shown). A line in progress counts against the budget too, so what is held stays
    /// within it.
    pub(crate) fn push(&mut self, stream: Stream, bytes: &[u8]) -> Vec<(LineKind, String)> {
        let mut out = Vec::new();
        if self.cut {
            return out;
        }
        let (i, kind) = match stream {
            Stream::Stdout => (0, LineKind::Stdout),
            Stream::Stderr => (1, LineKind::Stderr),
        };
        let mut rest = bytes;
        while let Some(at) = rest.iter().position(|&b| b == b'\n') {
            let (head, tail) = rest.split_at(at);
            rest = tail.get(1..).unwrap_or_default();
            let cost = self.pending[i].len() + head.len() + 1;
            if cost > self.left {
                out.push(self.cut_here());
                return out;
            }
            self.left -= cost;
            let mut line = std::mem::take(&mut self.pending[i]);
            line.extend_from_slice(head);
            out.push((kind, text_of(&line)));
        }
        self.pending[i].extend_from_slice(rest);
        if self.pending[0].len() + self.pending[1].len() > self.left {
            out.push(self.cut_here());
        }
        out
    }

    /// The command has ended: the last line of each stream that had no newline.
    pub(crate) fn finish(&mut self) -> Vec<(LineKind, String)> {
        let mut out = Vec::new();
        for (i, kind) in [(0, LineKind::Stdout), (1, LineKind::Stderr)] {
            let line = std::mem::take(&mut self.pending[i]);
            if !self.cut && !line.is_empty() {
                self.left = self.left.saturating_sub(line.len());
                out.push((kind, text_of(&line)));
            }
        }
        out
    }

    fn cut_here(&mut self) -> (LineKind, String) {
        self.cut = true;
        self.pending = [Vec::new(), Vec::new()];
        (
            LineKind::Cut,
            format!(
                "bosun: the rest of this step's output is not shown live (over {} KiB); its result keeps it",
                self.limit / 1024
            ),
        )
    }
}

/// A line's bytes as text: invalid UTF-8 replaced, a carriage return before the newline
/// dropped.
fn text_of(line: &[u8]) -> String {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    String::from_utf8_lossy(line).into_owned()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn texts(found: Vec<(LineKind, String)>) -> Vec<String> {
        found
            .into_iter()
            .map(|(k, t)| match k {
                LineKind::Stdout => t,
                LineKind::Stderr => format!("! {t}"),
                LineKind::Cut => "CUT".into(),
            })
            .collect()
    }

    #[test]
    fn lines_are_whole_per_stream() {
        let mut l = Lines::new(1024);
        assert_eq!(texts(l.push(Stream::Stdout, b"one\ntw")), ["one"]);
        assert_eq!(texts(l.push(Stream::Stderr, b"err")), Vec::<String>::new());
        assert_eq!(texts(l.push(Stream::Stdout, b"o\r\n\nthr")), ["two", ""]);
        assert_eq!(texts(l.push(Stream::Stderr, b"or\n")), ["! error"]);
        assert_eq!(texts(l.finish()), ["thr"]);
        assert_eq!(texts(l.finish()), Vec::<String>::new());
    }

    #[test]
    fn past_the_budget_one_note_and_nothing_more() {
        let mut l = Lines::new(10);
        assert_eq!(texts(l.push(Stream::Stdout, b"12345\n")), ["12345"]);
        // 4 bytes left: this line does not fit, and is not shown in part.
        assert_eq!(texts(l.push(Stream::Stdout, b"abcdef\nok\n")), ["CUT"]);
        assert_eq!(
            texts(l.push(Stream::Stdout, b"more\n")),
            Vec::<String>::new()
        );
        assert_eq!(texts(l.push(Stream::Stderr, b"x\n")), Vec::<String>::new());
        assert_eq!(texts(l.finish()), Vec::<String>::new());
        // A line with no end that outgrows the budget is cut as it grows.
        let mut l = Lines::new(10);
        assert_eq!(
            texts(l.push(Stream::Stdout, b"0123456789")),
            Vec::<String>::new()
        );
        assert_eq!(texts(l.push(Stream::Stderr, b"x")), ["CUT"]);
        let note = Lines::new(LIVE_BYTES).cut_here().1;
        assert!(note.contains("over 32 KiB"), "{note}");
    }

    #[test]
    fn lines_show_their_host() {
        let line = |kind, text: &str| OutputLine {
            step: 1,
            host: "web-1".into(),
            kind,
            text: text.into(),
        };
        assert_eq!(line(LineKind::Stdout, "hi").display(), "[web-1] hi");
        assert_eq!(
            line(LineKind::Stderr, "oops").display(),
            "[web-1 stderr] oops"
        );
        assert_eq!(line(LineKind::Stdout, "").display(), "[web-1]");
    }

    proptest! {
        /// However the output is split into chunks, the lines shown are the same, each a
        /// whole line of the output, in order, within the budget.
        #[test]
        fn chunking_does_not_change_the_lines(
            text in "[a-c\n]{0,200}",
            cuts in proptest::collection::vec(0usize..200, 0..8),
            limit in 1usize..120,
        ) {
            let bytes = text.as_bytes();
            let mut whole = Lines::new(limit);
            let mut expected = whole.push(Stream::Stdout, bytes);
            expected.extend(whole.finish());
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
            cuts.sort_unstable();
            let mut split = Lines::new(limit);
            let mut got = Vec::new();
            let mut from = 0;
            for c in cuts.into_iter().chain([bytes.len()]) {
                got.extend(split.push(Stream::Stdout, &bytes[from..c]));
                from = c;
            }
            got.extend(split.finish());
            prop_assert_eq!(&got, &expected);
            let shown: Vec<&String> = got
                .iter()
                .filter(|(k, _)| *k == LineKind::Stdout)
                .map(|(_, t)| t)
                .collect();
            let all: Vec<&str> = text.split('\n').collect();
            prop_assert!(shown.len() <= all.len());
            for (s, t) in shown.iter().zip(&all) {
                prop_assert_eq!(s.as_str(), *t);
            }
            prop_assert!(shown.iter().map(|s| s.len() + 1).sum::<usize>() <= limit + 1);
        }
    }
}
