//! Rendering for people and scripts: aligned tables, `key: value` blocks, and the
//! server's JSON pretty-printed.

use std::io::Write;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::Value;

/// Writes to stdout. A closed pipe (`bosun stack list | head`) is not an error: the
/// reader has all it wanted.
pub fn emit(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// Prints the server's JSON as it was sent, indented.
pub fn emit_json(value: &Value) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    emit(&text)
}

pub fn timestamp(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

pub fn opt_timestamp(t: &Option<DateTime<Utc>>) -> String {
    t.as_ref().map(timestamp).unwrap_or_else(|| "-".into())
}

pub fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// A table with a header row; columns are padded to their widest cell.
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&'static str]) -> Self {
        Table {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let cols = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let header: Vec<String> = self.headers.iter().map(|h| h.to_string()).collect();
        for row in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in row.iter().take(cols).enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                line.push_str(cell);
                if i + 1 < cols {
                    let pad = widths[i].saturating_sub(cell.chars().count());
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `key: value` lines with the values aligned; a multi-line value continues under its
/// first line.
#[derive(Default)]
pub struct Fields {
    entries: Vec<(&'static str, Vec<String>)>,
}

impl Fields {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add(&mut self, key: &'static str, value: impl Into<String>) -> &mut Self {
        self.entries.push((key, vec![value.into()]));
        self
    }

    /// A value of several lines; none shows as `-`.
    pub fn lines(&mut self, key: &'static str, values: Vec<String>) -> &mut Self {
        let values = if values.is_empty() {
            vec!["-".to_string()]
        } else {
            values
        };
        self.entries.push((key, values));
        self
    }

    /// [`Fields::lines`], left out when there are none.
    pub fn lines_if_any(&mut self, key: &'static str, values: Vec<String>) -> &mut Self {
        if !values.is_empty() {
            self.lines(key, values);
        }
        self
    }

    pub fn render(&self) -> String {
        let width = self
            .entries
            .iter()
            .map(|(k, _)| k.chars().count() + 1)
            .max()
            .unwrap_or(0);
        let mut out = String::new();
        for (key, values) in &self.entries {
            for (i, value) in values.iter().enumerate() {
                let label = if i == 0 {
                    format!("{key}:")
                } else {
                    String::new()
                };
                let line = format!("{label:<width$} {value}");
                out.push_str(line.trim_end());
                out.push('\n');
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns_without_trailing_spaces() {
        let mut t = Table::new(&["ID", "NAME"]);
        t.row(vec!["a-long-id".into(), "A".into()]);
        t.row(vec!["b".into(), "".into()]);
        assert_eq!(t.render(), "ID         NAME\na-long-id  A\nb\n");
    }

    #[test]
    fn fields_align_and_continue() {
        let mut f = Fields::new();
        f.add("id", "web")
            .lines("variables", vec!["a=1".into(), "b=2".into()])
            .lines("depends on", vec![]);
        assert_eq!(
            f.render(),
            "id:         web\nvariables:  a=1\n            b=2\ndepends on: -\n"
        );
    }
}
