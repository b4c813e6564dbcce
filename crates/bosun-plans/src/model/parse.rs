//! Plan and inventory files: YAML → raw serde structures → validated model, with file,
//! line and column on every error; and lint (malformed conditions, unresolvable
//! references) before anything runs.
//!
//! The stages (ripgrep's low-args → high-args):
//!
//! 1. **Index.** The text is read once as YAML events (`yaml-rust2`) into a map from
//!    each value's path (`steps[1].timeout`, `hosts.web-1.port`) to where the value and
//!    its key start. Duplicate keys, which serde would silently collapse, are refused
//!    here, at the second key.
//! 2. **Raw.** `serde_norway` reads the text into raw structures that mirror the file
//!    (unknown fields refused, every field optional); syntax and type errors carry its
//!    line and column.
//! 3. **Validate.** Raw structures become the model; every semantic error is placed
//!    with the index at the key or value that is wrong.
//!
//! Format decisions:
//! - `command:` is a list (argv as written) or a string split into words the way a
//!   POSIX shell splits them — `'single'` quotes literal, `"double"` quotes with `\`
//!   escaping `"`, `\`, `$` and `` ` ``, a backslash outside quotes escaping the next
//!   character — with no expansion of any kind, and `{{ … }}`/`{% … %}` kept whole
//!   even when they hold spaces or quotes. Shell operators (`|`, `>`, `&&`) are plain
//!   words there: use `shell` for them.
//! - `shell:` is a string or `{cmd}`; `script:` is a path or `{src, args}` (`args` a
//!   list or a string split like `command`); `src` (script and `file.copy`) is relative
//!   to the plan file's folder.
//! - `timeout:` is a number of seconds or a duration: `90`, `60s`, `2m`, `1h30m`,
//!   `500ms`, `1.5s` (units `ms`, `s`, `m`, `h`, `d`), greater than zero.
//! - `mode:` is a string of octal digits (`"0644"`, unquoted `0644` reads as that string
//!   too) or a template; a YAML number (`644`, `0o644`) is refused as ambiguous.
//! - A step without `name` is named after its module. `when:` conditions and templates
//!   are kept as written: a malformed one does not stop parsing (it fails open at run
//!   time); lint reports it.
//! - Inventory: hosts keep file order; a host inherits `user`, `port`,
//!   `identity_file`, `known_hosts` and `connection` from `defaults`; `address`
//!   defaults to the name and `port` to 22; a leading `~` in a path is the home folder.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use yaml_rust2::parser::{Event, Parser as YamlParser};

use super::bounds::{check_limits, Limits};
use super::{
    ConnectionKind, CopySource, Environment, FileSchedule, Host, InputDef, Inventory,
    LineInFileArgs, Location, ModelError, Module, Plan, SourceMap, Step, Targets, Value,
};
use crate::{condition, template};

/// A lint finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LintFinding {
    pub location: Location,
    pub message: String,
}

/// Everything lint found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LintReport {
    pub findings: Vec<LintFinding>,
}

/// The module names, as written in plan files.
const MODULES: [&str; 7] = [
    "command",
    "shell",
    "script",
    "file.lineinfile",
    "file.copy",
    "file.directory",
    "file.absent",
];

/// A step's keys other than its module.
const STEP_FIELDS: [&str; 5] = ["name", "when", "sudo", "continue_on_error", "timeout"];

// =================================================================================
// Stage 1: the location index

#[derive(Debug, Clone, Copy)]
struct Mark {
    index: usize,
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
struct Index {
    file: String,
    values: BTreeMap<String, Mark>,
    keys: BTreeMap<String, Mark>,
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

fn join_key(parent: &str, key: &str) -> String {
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
    /// Reads `text`; `None` when it is not YAML (serde then says why, with a location).
    fn build(file: &str, text: &str) -> Option<Index> {
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
    fn value(&self, path: &str) -> Location {
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

    fn source_map(&self) -> SourceMap {
        SourceMap {
            file: self.file.clone(),
            entries: self
                .values
                .iter()
                .map(|(p, m)| (p.clone(), self.loc(*m)))
                .collect(),
        }
    }

    fn err_value(&self, path: &str, message: impl Into<String>) -> ModelError {
        ModelError {
            location: self.value(path),
            message: message.into(),
            limit: None,
        }
    }

    fn err_key(&self, path: &str, message: impl Into<String>) -> ModelError {
        ModelError {
            location: self.key(path),
            message: message.into(),
            limit: None,
        }
    }

    /// The first duplicate key, as an error at its second occurrence.
    fn duplicate_error(&self, what: impl Fn(&str) -> Option<&'static str>) -> Option<ModelError> {
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

/// A serde_norway error as a located model error.
fn yaml_error(file: &str, e: &serde_norway::Error) -> ModelError {
    let text = e.to_string();
    let message = match text.rfind(" at line ") {
        Some(i) if e.location().is_some() => text[..i].to_string(),
        _ => text,
    };
    let (line, column) = e.location().map_or((1, 1), |l| (l.line(), l.column()));
    ModelError {
        location: Location {
            file: file.to_string(),
            line,
            column,
        },
        message,
        limit: None,
    }
}

/// Stages 1 and 2: the index and the raw structure — after the limits (`bounds.rs`),
/// which keep both YAML readers off texts that would make them slow. `kind` ("plan",
/// "inventory") names the file in a limit's refusal.
fn read<T: for<'de> Deserialize<'de>>(
    file: &str,
    kind: &str,
    text: &str,
    what: impl Fn(&str) -> Option<&'static str>,
) -> Result<(Index, T), ModelError> {
    check_limits(file, kind, text, &Limits::FILE)?;
    let index = Index::build(file, text);
    if let Some(e) = index.as_ref().and_then(|i| i.duplicate_error(what)) {
        return Err(e);
    }
    if text
        .lines()
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#') || l.trim() == "---")
    {
        return Err(ModelError {
            location: Location {
                file: file.to_string(),
                line: 1,
                column: 1,
            },
            message: "the file is empty".into(),
            limit: None,
        });
    }
    let raw: T = serde_norway::from_str(text).map_err(|e| yaml_error(file, &e))?;
    let index = index.unwrap_or_else(|| Index {
        file: file.to_string(),
        ..Index::default()
    });
    Ok((index, raw))
}

// =================================================================================
// Stage 2: raw structures

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a plan: a mapping with name, targets and steps"
)]
struct RawPlan {
    name: Option<String>,
    targets: Option<RawTargets>,
    concurrent_runs: Option<bool>,
    strict_vars: Option<bool>,
    inputs: Option<BTreeMap<String, Option<RawInput>>>,
    vars: Option<BTreeMap<String, Value>>,
    schedule: Option<RawSchedule>,
    steps: Option<Vec<RawStep>>,
}

#[derive(Deserialize, Default)]
#[serde(
    deny_unknown_fields,
    expecting = "targets: a mapping with hosts, labels, environments"
)]
struct RawTargets {
    hosts: Option<Vec<String>>,
    labels: Option<Vec<String>>,
    environments: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "an input: a mapping with default, description"
)]
struct RawInput {
    default: Option<Value>,
    description: Option<String>,
}

/// A step as written: its fields, its module keys (in order) and any other keys.
struct RawStep {
    name: Option<String>,
    when: Option<String>,
    sudo: Option<bool>,
    continue_on_error: Option<bool>,
    timeout: Option<RawNumberOrText>,
    modules: Vec<(String, RawModule)>,
    unknown: Vec<String>,
}

enum RawModule {
    Command(Words),
    Shell(RawShell),
    Script(RawScript),
    LineInFile(RawLineInFile),
    Copy(RawCopy),
    Directory(RawDirectory),
    Absent(RawAbsent),
}

impl<'de> Deserialize<'de> for RawStep {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawStep;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a step: a mapping with a name and one module")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<RawStep, M::Error> {
                let mut s = RawStep {
                    name: None,
                    when: None,
                    sudo: None,
                    continue_on_error: None,
                    timeout: None,
                    modules: Vec::new(),
                    unknown: Vec::new(),
                };
                while let Some(key) = map.next_key::<String>()? {
                    let module = match key.as_str() {
                        "name" => {
                            s.name = map.next_value()?;
                            continue;
                        }
                        "when" => {
                            s.when = map.next_value()?;
                            continue;
                        }
                        "sudo" => {
                            s.sudo = map.next_value()?;
                            continue;
                        }
                        "continue_on_error" => {
                            s.continue_on_error = map.next_value()?;
                            continue;
                        }
                        "timeout" => {
                            s.timeout = map.next_value()?;
                            continue;
                        }
                        "command" => RawModule::Command(map.next_value()?),
                        "shell" => RawModule::Shell(map.next_value()?),
                        "script" => RawModule::Script(map.next_value()?),
                        "file.lineinfile" => RawModule::LineInFile(map.next_value()?),
                        "file.copy" => RawModule::Copy(map.next_value()?),
                        "file.directory" => RawModule::Directory(map.next_value()?),
                        "file.absent" => RawModule::Absent(map.next_value()?),
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                            s.unknown.push(key);
                            continue;
                        }
                    };
                    s.modules.push((key, module));
                }
                Ok(s)
            }
        }
        d.deserialize_map(V)
    }
}

/// A list of words, or a string to split into words.
enum Words {
    List(Vec<String>),
    Line(String),
}

impl<'de> Deserialize<'de> for Words {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Words;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of arguments or a command line")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Words, E> {
                Ok(Words::Line(v.to_string()))
            }
            fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<Words, S::Error> {
                let mut out = Vec::new();
                while let Some(w) = seq.next_element::<String>()? {
                    out.push(w);
                }
                Ok(Words::List(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// A number, or text (`timeout: 60` / `timeout: 60s`; `mode: 644` / `mode: "0644"`).
enum RawNumberOrText {
    Number(f64),
    Text(String),
}

impl<'de> Deserialize<'de> for RawNumberOrText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawNumberOrText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number or a string")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(RawNumberOrText::Number(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(RawNumberOrText::Number(v as f64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(RawNumberOrText::Number(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(RawNumberOrText::Text(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// `shell: "cmd"` or `shell: {cmd: …}`; `script: "path"` or `script: {src, args}`.
macro_rules! string_or_map {
    ($raw:ident, $map:ident, $from_text:expr, $expecting:literal) => {
        impl<'de> Deserialize<'de> for $raw {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = $raw;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($expecting)
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<$raw, E> {
                        Ok(($from_text)(v.to_string()))
                    }
                    fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<$raw, M::Error> {
                        $map::deserialize(de::value::MapAccessDeserializer::new(map))
                            .map($raw::from)
                    }
                }
                d.deserialize_any(V)
            }
        }
    };
}

struct RawShell {
    cmd: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShellMap {
    cmd: Option<String>,
}

impl From<ShellMap> for RawShell {
    fn from(m: ShellMap) -> Self {
        RawShell { cmd: m.cmd }
    }
}

string_or_map!(
    RawShell,
    ShellMap,
    |cmd| RawShell { cmd: Some(cmd) },
    "a command line or a mapping with cmd"
);

struct RawSchedule {
    cron: Option<String>,
    timezone: Option<String>,
    inputs: Option<BTreeMap<String, Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScheduleMap {
    cron: Option<String>,
    timezone: Option<String>,
    inputs: Option<BTreeMap<String, Value>>,
}

impl From<ScheduleMap> for RawSchedule {
    fn from(m: ScheduleMap) -> Self {
        RawSchedule {
            cron: m.cron,
            timezone: m.timezone,
            inputs: m.inputs,
        }
    }
}

string_or_map!(
    RawSchedule,
    ScheduleMap,
    |cron| RawSchedule {
        cron: Some(cron),
        timezone: None,
        inputs: None,
    },
    "a cron schedule or a mapping with cron, timezone, inputs"
);

struct RawScript {
    src: Option<String>,
    args: Option<Words>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptMap {
    src: Option<String>,
    args: Option<Words>,
}

impl From<ScriptMap> for RawScript {
    fn from(m: ScriptMap) -> Self {
        RawScript {
            src: m.src,
            args: m.args,
        }
    }
}

string_or_map!(
    RawScript,
    ScriptMap,
    |src| RawScript {
        src: Some(src),
        args: None
    },
    "a script path or a mapping with src, args"
);

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "file.lineinfile's parameters: a mapping"
)]
struct RawLineInFile {
    path: Option<String>,
    line: Option<String>,
    regexp: Option<String>,
    search_string: Option<String>,
    state: Option<String>,
    insertafter: Option<String>,
    insertbefore: Option<String>,
    backrefs: Option<bool>,
    firstmatch: Option<bool>,
    create: Option<bool>,
    mode: Option<RawNumberOrText>,
    owner: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "file.copy's parameters: a mapping")]
struct RawCopy {
    path: Option<String>,
    content: Option<String>,
    src: Option<String>,
    mode: Option<RawNumberOrText>,
    owner: Option<String>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "file.directory's parameters: a mapping"
)]
struct RawDirectory {
    path: Option<String>,
    mode: Option<RawNumberOrText>,
    owner: Option<String>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "file.absent's parameters: a mapping with path"
)]
struct RawAbsent {
    path: Option<String>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "an inventory: a mapping with environments, defaults, hosts"
)]
struct RawInventory {
    environments: Option<BTreeMap<String, Option<RawEnvironment>>>,
    defaults: Option<RawDefaults>,
    hosts: Option<Ordered<Option<RawHost>>>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "an environment: a mapping with vars, requires_approval, protected"
)]
struct RawEnvironment {
    vars: Option<BTreeMap<String, Value>>,
    requires_approval: Option<bool>,
    protected: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(
    deny_unknown_fields,
    expecting = "defaults: a mapping with user, port, identity_file, known_hosts, connection"
)]
struct RawDefaults {
    user: Option<String>,
    port: Option<i64>,
    identity_file: Option<String>,
    known_hosts: Option<String>,
    connection: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(
    deny_unknown_fields,
    expecting = "a host: a mapping with address, port, user, …"
)]
struct RawHost {
    address: Option<String>,
    port: Option<i64>,
    user: Option<String>,
    connection: Option<String>,
    labels: Option<Vec<String>>,
    vars: Option<BTreeMap<String, Value>>,
    environment: Option<String>,
    identity_file: Option<String>,
    known_hosts: Option<String>,
    host_key: Option<String>,
}

/// A mapping read in file order.
struct Ordered<V>(Vec<(String, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Ordered<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Vis<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for Vis<V> {
            type Value = Ordered<V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Ordered<V>, M::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, V>()? {
                    out.push((k, v));
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(Vis(std::marker::PhantomData))
    }
}

// =================================================================================
// Stage 3: validation

/// Parses a plan file's text; `file` names it in errors (and resolves `src:` paths).
pub fn parse_plan(file: &Path, text: &str) -> Result<Plan, ModelError> {
    let name = file.display().to_string();
    let (ix, raw): (Index, RawPlan) = read(&name, "plan", text, |parent| match parent {
        "" => Some("plan field"),
        "inputs" => Some("input"),
        "vars" => Some("variable"),
        _ if parent.starts_with("steps[") && !parent.contains('.') => Some("step key"),
        _ => None,
    })?;
    let base = file.parent().unwrap_or_else(|| Path::new(""));

    let plan_name = match raw.name {
        None => return Err(ix.err_value("", "a plan needs a `name`")),
        Some(n) if n.trim().is_empty() => {
            return Err(ix.err_value("name", "the plan's name is empty"))
        }
        Some(n) => n,
    };
    let raw_targets = raw.targets.unwrap_or_default();
    let list = |field: &str, v: Option<Vec<String>>| -> Result<Vec<String>, ModelError> {
        let v = v.unwrap_or_default();
        for (i, s) in v.iter().enumerate() {
            if s.trim().is_empty() {
                return Err(ix.err_value(&format!("targets.{field}[{i}]"), "empty target name"));
            }
        }
        Ok(v)
    };
    let targets = Targets {
        hosts: list("hosts", raw_targets.hosts)?,
        labels: list("labels", raw_targets.labels)?,
        environments: list("environments", raw_targets.environments)?,
    };
    let inputs = raw
        .inputs
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| {
            let v = v.map_or_else(InputDef::default, |r| InputDef {
                default: r.default,
                description: r.description,
            });
            (k, v)
        })
        .collect();
    let schedule = raw
        .schedule
        .map(|s| validate_schedule(&ix, &inputs, s))
        .transpose()?;
    let raw_steps = match raw.steps {
        None => return Err(ix.err_value("", "a plan needs `steps`")),
        Some(s) if s.is_empty() => {
            return Err(ix.err_value("steps", "a plan needs at least one step"))
        }
        Some(s) => s,
    };
    let steps = raw_steps
        .into_iter()
        .enumerate()
        .map(|(i, s)| validate_step(&ix, base, &format!("steps[{i}]"), s))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Plan {
        name: plan_name,
        targets,
        concurrent_runs: raw.concurrent_runs.unwrap_or(false),
        strict_vars: raw.strict_vars.unwrap_or(false),
        inputs,
        vars: raw.vars.unwrap_or_default(),
        schedule,
        steps,
        locations: ix.source_map(),
    })
}

/// A `schedule:` as the server takes it: a cron, an optional zone, declared inputs only
/// (the cron and zone themselves are checked by the server, which fires them).
fn validate_schedule(
    ix: &Index,
    inputs: &BTreeMap<String, InputDef>,
    raw: RawSchedule,
) -> Result<FileSchedule, ModelError> {
    let cron = match raw.cron {
        Some(c) if !c.trim().is_empty() => c,
        Some(_) => return Err(ix.err_value("schedule.cron", "the schedule is empty")),
        None => return Err(ix.err_value("schedule", "a schedule needs a `cron`")),
    };
    if raw.timezone.as_deref().is_some_and(|z| z.trim().is_empty()) {
        return Err(ix.err_value(
            "schedule.timezone",
            "the time zone is empty (leave it out for UTC)",
        ));
    }
    let scheduled = raw.inputs.unwrap_or_default();
    if let Some(unknown) = scheduled.keys().find(|k| !inputs.contains_key(*k)) {
        let declared: Vec<&str> = inputs.keys().map(String::as_str).collect();
        return Err(ix.err_key(
            &format!("schedule.inputs.{unknown}"),
            format!(
                "the plan has no input {unknown:?} (it declares: {})",
                if declared.is_empty() {
                    "none".to_string()
                } else {
                    declared.join(", ")
                }
            ),
        ));
    }
    Ok(FileSchedule {
        cron,
        timezone: raw.timezone,
        inputs: scheduled,
    })
}

fn validate_step(ix: &Index, base: &Path, p: &str, raw: RawStep) -> Result<Step, ModelError> {
    if let Some(key) = raw.unknown.first() {
        return Err(ix.err_key(
            &join_key(p, key),
            format!(
                "unknown module `{key}` (modules: {}; other step keys: {})",
                MODULES.join(", "),
                STEP_FIELDS.join(", ")
            ),
        ));
    }
    let mut modules = raw.modules.into_iter();
    let Some((key, module)) = modules.next() else {
        return Err(ix.err_value(
            p,
            format!("the step has no module: give one of {}", MODULES.join(", ")),
        ));
    };
    if let Some((second, _)) = modules.next() {
        return Err(ix.err_key(
            &join_key(p, &second),
            format!("a step runs one module, and this one also has `{key}`"),
        ));
    }
    let mp = join_key(p, &key);
    let module = validate_module(ix, base, &mp, module)?;
    let timeout = match raw.timeout {
        None => None,
        Some(t) => Some(parse_timeout(&t).map_err(|m| ix.err_value(&join_key(p, "timeout"), m))?),
    };
    let name = match raw.name {
        Some(n) if !n.trim().is_empty() => n,
        _ => module.kind().to_string(),
    };
    Ok(Step {
        name,
        module,
        when: raw.when,
        sudo: raw.sudo.unwrap_or(false),
        continue_on_error: raw.continue_on_error.unwrap_or(false),
        timeout,
        location: ix.value(p),
    })
}

/// A required, non-empty string parameter.
fn required(
    ix: &Index,
    mp: &str,
    module: &str,
    field: &str,
    v: Option<String>,
) -> Result<String, ModelError> {
    match v {
        None => Err(ix.err_key(mp, format!("{module} needs `{field}`"))),
        Some(s) if s.is_empty() => {
            Err(ix.err_value(&join_key(mp, field), format!("`{field}` is empty")))
        }
        Some(s) => Ok(s),
    }
}

fn mode(ix: &Index, mp: &str, v: Option<RawNumberOrText>) -> Result<Option<String>, ModelError> {
    let path = join_key(mp, "mode");
    match v {
        None => Ok(None),
        Some(RawNumberOrText::Number(_)) => Err(ix.err_value(
            &path,
            "write the mode as a string of octal digits, e.g. mode: \"0644\" (a YAML number is ambiguous)",
        )),
        Some(RawNumberOrText::Text(s)) => {
            let octal = (3..=5).contains(&s.len())
                && s.bytes().all(|b| (b'0'..=b'7').contains(&b))
                && (s.len() < 5 || s.starts_with('0'));
            if octal || s.contains("{{") {
                Ok(Some(s))
            } else {
                Err(ix.err_value(&path, format!("mode `{s}` is not octal digits like \"0644\"")))
            }
        }
    }
}

fn owner(ix: &Index, mp: &str, v: Option<String>) -> Result<Option<String>, ModelError> {
    match v {
        Some(s) if s.trim().is_empty() => {
            Err(ix.err_value(&join_key(mp, "owner"), "`owner` is empty"))
        }
        v => Ok(v),
    }
}

fn local_path(base: &Path, src: &str) -> PathBuf {
    let p = Path::new(src);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

fn words(ix: &Index, path: &str, w: Words) -> Result<Vec<String>, ModelError> {
    match w {
        Words::List(v) => Ok(v),
        Words::Line(s) => split_words(&s).map_err(|m| ix.err_value(path, m)),
    }
}

/// Which of two present keys was written second (for "cannot be used together").
fn later(ix: &Index, mp: &str, a: &str, b: &str) -> String {
    let (pa, pb) = (join_key(mp, a), join_key(mp, b));
    let ia = ix.keys.get(&pa).map_or(0, |m| m.index);
    let ib = ix.keys.get(&pb).map_or(0, |m| m.index);
    if ia > ib {
        pa
    } else {
        pb
    }
}

fn validate_module(
    ix: &Index,
    base: &Path,
    mp: &str,
    raw: RawModule,
) -> Result<Module, ModelError> {
    Ok(match raw {
        RawModule::Command(w) => {
            let argv = words(ix, mp, w)?;
            if argv.first().is_none_or(|a| a.is_empty()) {
                return Err(ix.err_value(mp, "command needs a program to run"));
            }
            Module::Command { argv }
        }
        RawModule::Shell(s) => match s.cmd {
            Some(cmd) if !cmd.trim().is_empty() => Module::Shell { cmd },
            _ => return Err(ix.err_key(mp, "shell needs a command line")),
        },
        RawModule::Script(s) => {
            let src = required(ix, mp, "script", "src", s.src)?;
            let args = match s.args {
                None => Vec::new(),
                Some(w) => words(ix, &join_key(mp, "args"), w)?,
            };
            Module::Script {
                src: local_path(base, &src),
                args,
            }
        }
        RawModule::LineInFile(r) => {
            let state = r.state.unwrap_or_else(|| "present".into());
            if state != "present" && state != "absent" {
                return Err(ix.err_value(
                    &join_key(mp, "state"),
                    format!("state must be `present` or `absent`, not `{state}`"),
                ));
            }
            let path = required(ix, mp, "file.lineinfile", "path", r.path)?;
            if r.regexp.is_some() && r.search_string.is_some() {
                return Err(ix.err_key(
                    &later(ix, mp, "regexp", "search_string"),
                    "`regexp` and `search_string` cannot be used together",
                ));
            }
            if r.insertafter.is_some() && r.insertbefore.is_some() {
                return Err(ix.err_key(
                    &later(ix, mp, "insertafter", "insertbefore"),
                    "`insertafter` and `insertbefore` cannot be used together",
                ));
            }
            let backrefs = r.backrefs.unwrap_or(false);
            if backrefs && r.regexp.is_none() {
                return Err(ix.err_key(&join_key(mp, "backrefs"), "`backrefs` needs `regexp`"));
            }
            if state == "present" && r.line.is_none() {
                return Err(ix.err_key(mp, "file.lineinfile needs `line` with state present"));
            }
            if state == "absent"
                && r.line.is_none()
                && r.regexp.is_none()
                && r.search_string.is_none()
            {
                return Err(ix.err_key(
                    mp,
                    "file.lineinfile needs `line`, `regexp` or `search_string` with state absent",
                ));
            }
            Module::LineInFile(LineInFileArgs {
                path,
                line: r.line,
                regexp: r.regexp,
                search_string: r.search_string,
                state: Some(state),
                insertafter: r.insertafter,
                insertbefore: r.insertbefore,
                backrefs,
                firstmatch: r.firstmatch.unwrap_or(false),
                create: r.create.unwrap_or(false),
                mode: mode(ix, mp, r.mode)?,
                owner: owner(ix, mp, r.owner)?,
            })
        }
        RawModule::Copy(r) => {
            let path = required(ix, mp, "file.copy", "path", r.path)?;
            let source = match (r.content, r.src) {
                (Some(_), Some(_)) => {
                    return Err(ix.err_key(
                        &later(ix, mp, "content", "src"),
                        "`content` and `src` cannot be used together",
                    ))
                }
                (Some(c), None) => CopySource::Content(c),
                (None, Some(s)) if !s.is_empty() => CopySource::Src(local_path(base, &s)),
                (None, Some(_)) => return Err(ix.err_value(&join_key(mp, "src"), "`src` is empty")),
                (None, None) => return Err(ix.err_key(mp, "file.copy needs `content` or `src`")),
            };
            Module::Copy {
                path,
                source,
                mode: mode(ix, mp, r.mode)?,
                owner: owner(ix, mp, r.owner)?,
            }
        }
        RawModule::Directory(r) => Module::Directory {
            path: required(ix, mp, "file.directory", "path", r.path)?,
            mode: mode(ix, mp, r.mode)?,
            owner: owner(ix, mp, r.owner)?,
        },
        RawModule::Absent(r) => Module::Absent {
            path: required(ix, mp, "file.absent", "path", r.path)?,
        },
    })
}

const TIMEOUT_HELP: &str = "write seconds (90) or a duration like 60s, 2m, 1h30m";

fn parse_timeout(t: &RawNumberOrText) -> Result<Duration, String> {
    let d = match t {
        RawNumberOrText::Number(n) => Duration::try_from_secs_f64(*n)
            .map_err(|_| format!("bad timeout `{n}`: {TIMEOUT_HELP}"))?,
        RawNumberOrText::Text(s) => {
            parse_duration(s).ok_or_else(|| format!("bad timeout `{s}`: {TIMEOUT_HELP}"))?
        }
    };
    if d.is_zero() {
        return Err(format!(
            "the timeout must be more than zero: {TIMEOUT_HELP}"
        ));
    }
    Ok(d)
}

/// `90`, `60s`, `2m`, `1h30m`, `500ms`, `1.5s`, `1d`.
fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    if let Ok(n) = s.parse::<f64>() {
        return if s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            Duration::try_from_secs_f64(n).ok()
        } else {
            None
        };
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return None;
        }
        let n: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        let secs = match &rest[..unit_len] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "d" => 86400.0,
            _ => return None,
        };
        rest = rest[unit_len..].trim_start();
        total += n * secs;
    }
    Duration::try_from_secs_f64(total).ok()
}

/// Splits a command line into words like a POSIX shell, without expansions; template
/// tags (`{{ … }}`, `{% … %}`, `{# … #}`) stay whole.
fn split_words(s: &str) -> Result<Vec<String>, String> {
    let chars: Vec<char> = s.chars().collect();
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut i = 0;
    // Copies a template tag starting at `i` (if one does) and returns where it ends.
    let tag = |i: usize, cur: &mut String| -> Result<Option<usize>, String> {
        let close = match (chars.get(i), chars.get(i + 1)) {
            (Some('{'), Some('{')) => ['}', '}'],
            (Some('{'), Some('%')) => ['%', '}'],
            (Some('{'), Some('#')) => ['#', '}'],
            _ => return Ok(None),
        };
        let mut j = i + 2;
        while j + 1 < chars.len() && !(chars[j] == close[0] && chars[j + 1] == close[1]) {
            j += 1;
        }
        if j + 1 >= chars.len() {
            return Err(format!(
                "unclosed template tag `{}{}`",
                chars[i],
                chars[i + 1]
            ));
        }
        cur.extend(&chars[i..j + 2]);
        Ok(Some(j + 2))
    };
    while i < chars.len() {
        let c = chars[i];
        if let Some(next) = tag(i, &mut cur)? {
            in_word = true;
            i = next;
            continue;
        }
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
                i += 1;
            }
            '\'' => {
                in_word = true;
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err("unterminated ' quote in the command line".into()),
                        Some('\'') => {
                            i += 1;
                            break;
                        }
                        Some(&ch) => {
                            if let Some(next) = tag(i, &mut cur)? {
                                i = next;
                            } else {
                                cur.push(ch);
                                i += 1;
                            }
                        }
                    }
                }
            }
            '"' => {
                in_word = true;
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err("unterminated \" quote in the command line".into()),
                        Some('"') => {
                            i += 1;
                            break;
                        }
                        Some('\\') => {
                            match chars.get(i + 1) {
                                Some(&e @ ('"' | '\\' | '$' | '`')) => cur.push(e),
                                Some('\n') => {}
                                Some(&e) => {
                                    cur.push('\\');
                                    cur.push(e);
                                }
                                None => {
                                    return Err("unterminated \" quote in the command line".into())
                                }
                            }
                            i += 2;
                        }
                        Some(&ch) => {
                            if let Some(next) = tag(i, &mut cur)? {
                                i = next;
                            } else {
                                cur.push(ch);
                                i += 1;
                            }
                        }
                    }
                }
            }
            '\\' => {
                match chars.get(i + 1) {
                    Some('\n') => {}
                    Some(&e) => {
                        cur.push(e);
                        in_word = true;
                    }
                    None => return Err("the command line ends with a lone `\\`".into()),
                }
                i += 2;
            }
            c => {
                cur.push(c);
                in_word = true;
                i += 1;
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

// ---------------------------------------------------------------------------------
// Inventory

/// Parses an inventory file's text (`~/…` paths are this machine's home folder).
pub fn parse_inventory(file: &Path, text: &str) -> Result<Inventory, ModelError> {
    inventory(file, text, true)
}

/// Parses an inventory to be used on another machine (the server stores it for its
/// runners): `identity_file` and `known_hosts` stay as written, `~` included.
pub fn parse_inventory_as_written(file: &Path, text: &str) -> Result<Inventory, ModelError> {
    inventory(file, text, false)
}

fn inventory(file: &Path, text: &str, expand: bool) -> Result<Inventory, ModelError> {
    let expand_tilde = |p: &str| {
        if expand {
            expand_tilde(p)
        } else {
            PathBuf::from(p)
        }
    };
    let name = file.display().to_string();
    let (ix, raw): (Index, RawInventory) = read(&name, "inventory", text, |parent| match parent {
        "" => Some("inventory field"),
        "hosts" => Some("host"),
        "environments" => Some("environment"),
        _ => None,
    })?;
    let mut environments = BTreeMap::new();
    for (k, e) in raw.environments.unwrap_or_default() {
        if k.trim().is_empty() {
            return Err(ix.err_key(&join_key("environments", &k), "empty environment name"));
        }
        let e = e.unwrap_or(RawEnvironment {
            vars: None,
            requires_approval: None,
            protected: None,
        });
        environments.insert(
            k,
            Environment {
                vars: e.vars.unwrap_or_default(),
                requires_approval: e.requires_approval.unwrap_or(false),
                protected: e.protected.unwrap_or(false),
            },
        );
    }
    let defaults = raw.defaults.unwrap_or_default();
    let default_port = match defaults.port {
        None => 22,
        Some(p) => port(&ix, "defaults.port", p)?,
    };
    let default_connection = match &defaults.connection {
        None => ConnectionKind::Ssh,
        Some(c) => connection(&ix, "defaults.connection", c)?,
    };
    let mut hosts = Vec::new();
    for (name, h) in raw.hosts.map(|o| o.0).unwrap_or_default() {
        let hp = join_key("hosts", &name);
        if name.trim().is_empty() {
            return Err(ix.err_key(&hp, "empty host name"));
        }
        let h = h.unwrap_or_default();
        let address = match h.address {
            Some(a) if a.trim().is_empty() => {
                return Err(ix.err_value(&join_key(&hp, "address"), "`address` is empty"))
            }
            Some(a) => a,
            None => name.clone(),
        };
        let port = match h.port {
            Some(p) => port(&ix, &join_key(&hp, "port"), p)?,
            None => default_port,
        };
        let connection = match &h.connection {
            Some(c) => connection(&ix, &join_key(&hp, "connection"), c)?,
            None => default_connection,
        };
        if let Some(env) = &h.environment {
            if !environments.contains_key(env) {
                let known: Vec<&str> = environments.keys().map(String::as_str).collect();
                return Err(ix.err_value(
                    &join_key(&hp, "environment"),
                    format!(
                        "unknown environment `{env}` (defined: {})",
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    ),
                ));
            }
        }
        let host_key =
            match h.host_key {
                Some(k) if k.split_whitespace().count() < 2 => return Err(ix.err_value(
                    &join_key(&hp, "host_key"),
                    "`host_key` is a public key line: `<type> <base64>`, e.g. `ssh-ed25519 AAAA…`",
                )),
                k => k.map(|k| k.trim().to_string()),
            };
        hosts.push(Host {
            address,
            port,
            user: h.user.or_else(|| defaults.user.clone()),
            connection,
            labels: h.labels.unwrap_or_default(),
            vars: h.vars.unwrap_or_default(),
            environment: h.environment,
            identity_file: h
                .identity_file
                .or_else(|| defaults.identity_file.clone())
                .map(|p| expand_tilde(&p)),
            known_hosts: h
                .known_hosts
                .or_else(|| defaults.known_hosts.clone())
                .map(|p| expand_tilde(&p)),
            host_key,
            name,
        });
    }
    Ok(Inventory {
        environments,
        hosts,
    })
}

fn port(ix: &Index, path: &str, p: i64) -> Result<u16, ModelError> {
    u16::try_from(p)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| ix.err_value(path, format!("port {p} is out of range (1-65535)")))
}

fn connection(ix: &Index, path: &str, c: &str) -> Result<ConnectionKind, ModelError> {
    match c {
        "ssh" => Ok(ConnectionKind::Ssh),
        "local" => Ok(ConnectionKind::Local),
        other => Err(ix.err_value(
            path,
            format!("connection must be `ssh` or `local`, not `{other}`"),
        )),
    }
}

/// `~` and `~/…` are the home folder (`$HOME`); other paths are kept as written.
fn expand_tilde(p: &str) -> PathBuf {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty());
    match (p, home) {
        ("~", Some(h)) => PathBuf::from(h),
        (p, Some(h)) if p.starts_with("~/") => PathBuf::from(h).join(&p[2..]),
        (p, _) => PathBuf::from(p),
    }
}

// =================================================================================
// Lint

/// The template strings of a module, each with its path below the module key.
fn module_templates(module: &Module) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut add = |path: String, s: Option<&String>| {
        if let Some(s) = s {
            out.push((path, s.clone()));
        }
    };
    match module {
        Module::Command { argv } => {
            for (i, a) in argv.iter().enumerate() {
                add(format!("command[{i}]"), Some(a));
            }
        }
        Module::Shell { cmd } => add("shell.cmd".into(), Some(cmd)),
        Module::Script { src, args } => {
            add("script.src".into(), Some(&src.display().to_string()));
            for (i, a) in args.iter().enumerate() {
                add(format!("script.args[{i}]"), Some(a));
            }
        }
        Module::LineInFile(a) => {
            let p = "file.lineinfile";
            add(format!("{p}.path"), Some(&a.path));
            add(format!("{p}.line"), a.line.as_ref());
            add(format!("{p}.regexp"), a.regexp.as_ref());
            add(format!("{p}.search_string"), a.search_string.as_ref());
            add(format!("{p}.insertafter"), a.insertafter.as_ref());
            add(format!("{p}.insertbefore"), a.insertbefore.as_ref());
            add(format!("{p}.mode"), a.mode.as_ref());
            add(format!("{p}.owner"), a.owner.as_ref());
        }
        Module::Copy {
            path,
            source,
            mode,
            owner,
        } => {
            add("file.copy.path".into(), Some(path));
            match source {
                CopySource::Content(c) => add("file.copy.content".into(), Some(c)),
                CopySource::Src(s) => add("file.copy.src".into(), Some(&s.display().to_string())),
            }
            add("file.copy.mode".into(), mode.as_ref());
            add("file.copy.owner".into(), owner.as_ref());
        }
        Module::Directory { path, mode, owner } => {
            add("file.directory.path".into(), Some(path));
            add("file.directory.mode".into(), mode.as_ref());
            add("file.directory.owner".into(), owner.as_ref());
        }
        Module::Absent { path } => add("file.absent.path".into(), Some(path)),
    }
    out
}

/// What lint knows is defined, per namespace.
struct Known {
    vars: BTreeSet<String>,
    inputs: BTreeSet<String>,
    /// `None`: not knowable without an inventory.
    env: Option<BTreeSet<String>>,
    with_inventory: bool,
}

impl Known {
    fn new(plan: &Plan, inventory: Option<&Inventory>) -> Known {
        let mut vars: BTreeSet<String> = plan.vars.keys().cloned().collect();
        let inputs: BTreeSet<String> = plan.inputs.keys().cloned().collect();
        vars.extend(inputs.iter().cloned());
        let env = inventory.map(|inv| {
            let mut env = BTreeSet::new();
            for h in plan.target_hosts(inv) {
                vars.extend(h.vars.keys().cloned());
                if let Some(e) = h.environment.as_ref().and_then(|e| inv.environments.get(e)) {
                    env.extend(e.vars.keys().cloned());
                }
            }
            vars.extend(env.iter().cloned());
            env
        });
        Known {
            vars,
            inputs,
            env,
            with_inventory: inventory.is_some(),
        }
    }

    /// Why `reference` (dotted; namespace first) cannot resolve, if it cannot.
    fn problem(&self, reference: &str) -> Option<String> {
        let mut parts = reference.splitn(3, '.');
        let ns = parts.next()?;
        let key = parts.next();
        let Some(key) = key else {
            return if condition::NAMESPACES.contains(&ns) {
                None
            } else {
                Some(format!(
                    "unknown name `{ns}`: references start with vars., env., inputs. or host."
                ))
            };
        };
        let r = format!("{ns}.{key}");
        match ns {
            "vars" if !self.vars.contains(key) => Some(if self.with_inventory {
                format!("`{r}` is not defined in the plan's vars or inputs, nor in the vars of any targeted host or environment")
            } else {
                format!("`{r}` is not defined in the plan's vars or inputs")
            }),
            "inputs" if !self.inputs.contains(key) => {
                Some(format!("`{r}` is not one of the plan's inputs"))
            }
            "env" => match &self.env {
                Some(env) if !env.contains(key) => {
                    Some(format!("`{r}` is not defined in any targeted environment"))
                }
                _ => None,
            },
            "host" if !["name", "address", "labels"].contains(&key) => Some(format!(
                "`{r}` does not exist: a host has name, address and labels"
            )),
            "vars" | "inputs" | "host" => None,
            _ => Some(format!(
                "unknown name `{ns}`: references start with vars., env., inputs. or host."
            )),
        }
    }
}

/// Lints a parsed plan (with its inventory when given, so references resolve).
pub fn lint(plan: &Plan, inventory: Option<&Inventory>) -> LintReport {
    let mut findings: Vec<LintFinding> = Vec::new();
    let locs = &plan.locations;
    let mut add = |location: Location, message: String| {
        let f = LintFinding { location, message };
        if !findings.contains(&f) {
            findings.push(f);
        }
    };

    if let Some(inv) = inventory {
        for (i, h) in plan.targets.hosts.iter().enumerate() {
            if !inv.hosts.iter().any(|x| &x.name == h) {
                add(
                    locs.locate(&format!("targets.hosts[{i}]")),
                    format!("unknown target host `{h}`: not in the inventory"),
                );
            }
        }
        for (i, l) in plan.targets.labels.iter().enumerate() {
            if !inv.hosts.iter().any(|x| x.labels.contains(l)) {
                add(
                    locs.locate(&format!("targets.labels[{i}]")),
                    format!("no host in the inventory has label `{l}`"),
                );
            }
        }
        for (i, e) in plan.targets.environments.iter().enumerate() {
            let loc = locs.locate(&format!("targets.environments[{i}]"));
            if !inv.environments.contains_key(e) {
                add(
                    loc,
                    format!("unknown target environment `{e}`: not in the inventory"),
                );
            } else if !inv.hosts.iter().any(|x| x.environment.as_ref() == Some(e)) {
                add(
                    loc,
                    format!("no host in the inventory is in environment `{e}`"),
                );
            }
        }
        if plan.target_hosts(inv).is_empty() {
            add(
                locs.locate("targets"),
                "the plan's targets match no host in the inventory".into(),
            );
        }
    }

    let known = Known::new(plan, inventory);
    for (i, step) in plan.steps.iter().enumerate() {
        let sp = format!("steps[{i}]");
        if let Some(when) = &step.when {
            let loc = locs
                .get(&format!("{sp}.when"))
                .cloned()
                .unwrap_or_else(|| step.location.clone());
            match condition::parse(when) {
                Err(e) => add(loc, format!("malformed condition {when:?}: {e}")),
                Ok(ast) => {
                    for r in condition::references(&ast) {
                        if let Some(problem) = known.problem(&r) {
                            add(loc.clone(), problem);
                        }
                    }
                }
            }
        }
        for (field, text) in module_templates(&step.module) {
            let loc = locs.locate(&format!("{sp}.{field}"));
            match template::references(&text) {
                Err(e) => add(loc, format!("template error in `{field}`: {}", e.message)),
                Ok(refs) => {
                    for r in refs {
                        if let Some(problem) = known.problem(&r) {
                            add(loc.clone(), problem);
                        }
                    }
                }
            }
        }
    }
    LintReport { findings }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

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

    #[test]
    fn split_words_like_a_shell() {
        let cases: &[(&str, &[&str])] = &[
            ("systemctl restart app", &["systemctl", "restart", "app"]),
            ("  a   b  ", &["a", "b"]),
            ("echo 'a b' \"c d\"", &["echo", "a b", "c d"]),
            ("echo \"a \\\"q\\\" \\$x \\n\"", &["echo", "a \"q\" $x \\n"]),
            ("echo a\\ b", &["echo", "a b"]),
            ("echo ''", &["echo", ""]),
            (
                "x{{ vars.a | default('b c') }}y z",
                &["x{{ vars.a | default('b c') }}y", "z"],
            ),
            (
                "echo \"{{ vars.x | default(\"a\") }}\"",
                &["echo", "{{ vars.x | default(\"a\") }}"],
            ),
            ("a|b > c", &["a|b", ">", "c"]),
        ];
        for (line, want) in cases {
            assert_eq!(split_words(line).unwrap(), *want, "{line}");
        }
        for bad in ["echo 'a", "echo \"a", "echo {{ x", "a \\"] {
            assert!(split_words(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        let s = |x: u64| Some(Duration::from_secs(x));
        assert_eq!(parse_duration("60s"), s(60));
        assert_eq!(parse_duration("2m"), s(120));
        assert_eq!(parse_duration("1h30m"), s(5400));
        assert_eq!(parse_duration("1h 30m"), s(5400));
        assert_eq!(parse_duration("90"), s(90));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        for bad in ["60x", "", "s", "-1s", "1e3", "m5", "5 m x"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }
}
