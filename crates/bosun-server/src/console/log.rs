//! A run's log as a page shows it: each line with the time (UTC) its chunk reached the
//! server, and a divider where the phase that wrote it changes (plan, apply) — the same
//! marks `console.js` adds to the chunks that follow live.

use bosun_api::LogChunk;

/// One line of a log (or the rest of a line a chunk boundary cut), with what goes
/// before it.
pub struct LogLine {
    /// The phase that starts with this line.
    pub divider: Option<String>,
    /// `HH:MM:SS` when a line starts here and its chunk has a time.
    pub time: Option<String>,
    /// The whole time (RFC 3339), for `datetime`.
    pub at: String,
    pub text: String,
}

/// The first page of a log, ready for the template, and where it left off for the
/// script that appends what follows (`data-phase`, `data-mid`).
pub struct PageLog {
    pub lines: Vec<LogLine>,
    /// The phase of the last chunk shown.
    pub phase: Option<String>,
    /// The last chunk shown ended in the middle of a line.
    pub mid_line: bool,
}

/// Cuts chunks into lines with their marks.
pub fn page_log(chunks: &[LogChunk]) -> PageLog {
    let mut log = PageLog {
        lines: Vec::new(),
        phase: None,
        mid_line: false,
    };
    for chunk in chunks {
        let mut divider = None;
        if let Some(p) = chunk
            .phase
            .as_ref()
            .filter(|p| log.phase.as_ref() != Some(*p))
        {
            divider = Some(p.clone());
            log.phase = Some(p.clone());
        }
        let at = chunk.at.map(|t| t.to_rfc3339()).unwrap_or_default();
        for text in chunk.text.split_inclusive('\n') {
            log.lines.push(LogLine {
                divider: divider.take(),
                time: match (log.mid_line, chunk.at) {
                    (false, Some(t)) => Some(t.format("%H:%M:%S").to_string()),
                    _ => None,
                },
                at: at.clone(),
                text: text.to_string(),
            });
            log.mid_line = !text.ends_with('\n');
        }
    }
    log
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    #[test]
    fn lines_carry_their_time_and_phase_changes() {
        let at = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).single();
        let chunk = |seq, text: &str, phase: Option<&str>| LogChunk {
            at,
            phase: phase.map(str::to_string),
            ..LogChunk::new(seq, text)
        };
        let log = page_log(&[
            chunk(0, "a\nb", Some("plan")),
            chunk(1, "c\n", Some("plan")),
            chunk(2, "d\n", Some("apply")),
        ]);
        let shown: Vec<(Option<&str>, Option<&str>, &str)> = log
            .lines
            .iter()
            .map(|l| (l.divider.as_deref(), l.time.as_deref(), l.text.as_str()))
            .collect();
        assert_eq!(
            shown,
            [
                (Some("plan"), Some("03:04:05"), "a\n"),
                (None, Some("03:04:05"), "b"),
                (None, None, "c\n"),
                (Some("apply"), Some("03:04:05"), "d\n"),
            ]
        );
        assert_eq!(log.phase.as_deref(), Some("apply"));
        assert!(!log.mid_line);
        // Chunks stored without a time or phase show as they are.
        let old = page_log(&[LogChunk::new(0, "x")]);
        assert!(old.lines[0].time.is_none() && old.lines[0].divider.is_none());
        assert!(old.mid_line);
    }
}
