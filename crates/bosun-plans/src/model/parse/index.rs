//! Stage 1: where every value and mapping key of a YAML text starts, by path, read once
//! from the text's YAML events; duplicate keys are found here.

use std::collections::BTreeMap;

use yaml_rust2::parser::{Event, Parser as YamlParser};

use crate::model::{Location, ModelError, SourceMap};

#[derive(Debug, Clone, Copy)]
pub(super) struct Mark {
    pub(super) index: usize,
    line: usize,
    column: usize,
}

enum Frame {
    Map {
        path: String,
        /// The key whose value comes next; `None` while a key is expected.
        key: Option<String>,
        seen: BTreeMap<String, Mark>,
        first_key: bool,
        start: Mark,
    },
    Seq {
        path: String,
        next: usize,
    },
}

/// Where every value (and every mapping key) of one YAML text starts.
#[derive(Debug, Default)]
pub(super) struct Index {
    file: String,
    values: BTreeMap<String, Mark>,
    pub(super) keys: BTreeMap<String, Mark>,
    /// `(path of the key, first occurrence, duplicate occurrence)`.
    duplicates: Vec<(String, Mark, Mark)>,
    /// Bytes of paths stored so far (see [`PLACES_BUDGET`]).
    stored: usize,
}

/// The longest path the index places. Every node's path repeats its parents' keys, so
/// a long key above many nodes (`? <500 KB>` over a list of 250,000 items) would cost
/// their product; past this a node is left unplaced and errors point at the nearest
/// placed parent.
const MAX_PATH: usize = 256;

/// Total bytes of paths one index stores; past it the rest of the file goes unplaced.
const PLACES_BUDGET: usize = 16 * 1024 * 1024;

/// The path of a node the index does not place (NUL is never in a YAML text).
const UNPLACED: &str = "\u{0}";

pub(super) fn join_key(parent: &str, key: &str) -> String {
    if parent == UNPLACED || parent.len() + 1 + key.len() > MAX_PATH {
        UNPLACED.to_string()
    } else if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

fn item_path(parent: &str, item: usize) -> String {
    if parent == UNPLACED || parent.len() + 22 > MAX_PATH {
        UNPLACED.to_string()
    } else {
        format!("{parent}[{item}]")
    }
}

impl Index {
    /// An index that places nothing: every location is the file's start.
    pub(super) fn empty(file: &str) -> Index {
        Index {
            file: file.to_string(),
            ..Index::default()
        }
    }

    /// Reads `text`; `None` when it is not YAML (serde then says why, with a location).
    pub(super) fn build(file: &str, text: &str) -> Option<Index> {
        let mut index = Index {
            file: file.to_string(),
            ..Index::default()
        };
        let mut parser = YamlParser::new_from_str(text);
        let mut stack: Vec<Frame> = Vec::new();
        loop {
            let (event, marker) = parser.next_token().ok()?;
            let mark = Mark {
                index: marker.index(),
                line: marker.line(),
                column: marker.col() + 1,
            };
            match event {
                Event::StreamEnd => break,
                Event::Scalar(ref value, ..) => {
                    if let Some(path) = index.node_start(&mut stack, mark, Some(value)) {
                        index.place_value(path, mark);
                    }
                }
                Event::Alias(_) => {
                    if let Some(path) = index.node_start(&mut stack, mark, None) {
                        index.place_value(path, mark);
                    }
                }
                Event::MappingStart(..) => {
                    let path = index
                        .node_start(&mut stack, mark, None)
                        .unwrap_or_else(|| "?".into());
                    index.place_value(path.clone(), mark);
                    stack.push(Frame::Map {
                        path,
                        key: None,
                        seen: BTreeMap::new(),
                        first_key: true,
                        start: mark,
                    });
                }
                Event::SequenceStart(..) => {
                    let path = index
                        .node_start(&mut stack, mark, None)
                        .unwrap_or_else(|| "?".into());
                    index.place_value(path.clone(), mark);
                    stack.push(Frame::Seq { path, next: 0 });
                }
                Event::MappingEnd | Event::SequenceEnd => {
                    stack.pop();
                }
                _ => {}
            }
        }
        Some(index)
    }

    /// Places a node that starts at `mark`: returns its path when it is a value, or
    /// records it as a key (`scalar` is the key's text) and returns `None`.
    fn node_start(
        &mut self,
        stack: &mut [Frame],
        mark: Mark,
        scalar: Option<&String>,
    ) -> Option<String> {
        let Some(top) = stack.last_mut() else {
            return Some(String::new());
        };
        match top {
            Frame::Seq { path, next } => {
                let p = item_path(path, *next);
                *next += 1;
                Some(p)
            }
            Frame::Map {
                path,
                key,
                seen,
                first_key,
                start,
            } => {
                if let Some(k) = key.take() {
                    return Some(join_key(path, &k));
                }
                // A block mapping's start event comes after its first key: the mapping
                // starts where that key does.
                if *first_key {
                    *first_key = false;
                    if mark.index < start.index && path != UNPLACED {
                        self.values.insert(path.clone(), mark);
                    }
                }
                let k = scalar.cloned().unwrap_or_else(|| "?".into());
                let kp = join_key(path, &k);
                match seen.get(&k) {
                    Some(first) if scalar.is_some() => {
                        // An unplaced key is named by its start alone.
                        let kp = if kp == UNPLACED {
                            let short: String = k.chars().take(64).collect();
                            join_key(if path == UNPLACED { "…" } else { path }, &short)
                        } else {
                            kp
                        };
                        self.duplicates.push((kp, *first, mark));
                    }
                    _ => {
                        seen.insert(k.clone(), mark);
                        if kp != UNPLACED && self.stored < PLACES_BUDGET {
                            self.stored += kp.len();
                            self.keys.entry(kp).or_insert(mark);
                        }
                    }
                }
                *key = Some(k);
                None
            }
        }
    }

    fn place_value(&mut self, path: String, mark: Mark) {
        if path != UNPLACED && self.stored < PLACES_BUDGET {
            self.stored += path.len();
            self.values.entry(path).or_insert(mark);
        }
    }

    fn loc(&self, m: Mark) -> Location {
        Location {
            file: self.file.clone(),
            line: m.line,
            column: m.column,
        }
    }

    /// Where the value at `path` starts (else its nearest parent, else the file start).
    pub(super) fn value(&self, path: &str) -> Location {
        let mut p = path;
        loop {
            if let Some(m) = self.values.get(p) {
                return self.loc(*m);
            }
            match p.rfind(['.', '[']) {
                Some(i) => p = &p[..i],
                None => {
                    return Location {
                        file: self.file.clone(),
                        line: 1,
                        column: 1,
                    }
                }
            }
        }
    }

    /// Where the key of `path` starts (else where its value does).
    fn key(&self, path: &str) -> Location {
        match self.keys.get(path) {
            Some(m) => self.loc(*m),
            None => self.value(path),
        }
    }

    pub(super) fn source_map(&self) -> SourceMap {
        SourceMap {
            file: self.file.clone(),
            entries: self
                .values
                .iter()
                .map(|(p, m)| (p.clone(), self.loc(*m)))
                .collect(),
        }
    }

    pub(super) fn err_value(&self, path: &str, message: impl Into<String>) -> ModelError {
        ModelError {
            location: self.value(path),
            message: message.into(),
            limit: None,
        }
    }

    pub(super) fn err_key(&self, path: &str, message: impl Into<String>) -> ModelError {
        ModelError {
            location: self.key(path),
            message: message.into(),
            limit: None,
        }
    }

    /// The first duplicate key, as an error at its second occurrence.
    pub(super) fn duplicate_error(
        &self,
        what: impl Fn(&str) -> Option<&'static str>,
    ) -> Option<ModelError> {
        let (path, first, dup) = self.duplicates.iter().min_by_key(|(_, _, d)| d.index)?;
        let (parent, key) = match path.rfind('.') {
            Some(i) => (&path[..i], &path[i + 1..]),
            None => ("", path.as_str()),
        };
        let noun = what(parent).unwrap_or("key");
        Some(ModelError {
            location: self.loc(*dup),
            message: format!(
                "duplicate {noun} `{key}` (first at line {}, column {})",
                first.line, first.column
            ),
            limit: None,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::model::parse_plan;
    use std::path::Path;

    #[test]
    fn a_long_key_over_many_items_is_indexed_in_bounded_space() {
        // Each item's path repeated the 60 KB key: 1.2 GB of paths for a 100 KB file.
        let text = format!(
            "name: p\nvars:\n  ? {}\n  : [{}a]\nsteps:\n  - command: [x]\n",
            "k".repeat(60_000),
            "a,".repeat(20_000)
        );
        let index = Index::build("p.yaml", &text).unwrap();
        let stored: usize = index
            .values
            .keys()
            .chain(index.keys.keys())
            .map(String::len)
            .sum();
        assert!(stored < 64 * 1024, "{stored} bytes of paths");
        assert!(index.values.keys().all(|p| p.len() <= MAX_PATH));
        let plan = parse_plan(Path::new("p.yaml"), &text).unwrap();
        assert_eq!(plan.vars.len(), 1);
        // Errors under an unplaced key point at the nearest placed parent.
        assert_eq!(
            index.value(&format!("vars.{}[3]", "k".repeat(60_000))).line,
            3
        );
    }

    #[test]
    fn a_duplicate_long_key_is_named_by_its_start() {
        let key = "k".repeat(300);
        let text = format!("name: p\nvars:\n  {key}: 1\n  {key}: 2\nsteps:\n  - command: [x]\n");
        let e = parse_plan(Path::new("p.yaml"), &text).unwrap_err();
        assert_eq!(e.location.line, 4, "{e}");
        assert!(
            e.message
                .starts_with(&format!("duplicate variable `{}`", "k".repeat(64))),
            "{e}"
        );
    }
}
