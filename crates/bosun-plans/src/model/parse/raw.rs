//! Stage 2: the raw structures `serde_norway` reads a file into, mirroring the file
//! (unknown fields refused, every field optional), and its errors as located ones.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use crate::model::{Location, ModelError, Value};

/// A serde_norway error as a located model error.
pub(super) fn yaml_error(file: &str, e: &serde_norway::Error) -> ModelError {
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

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a plan: a mapping with name, targets and steps"
)]
pub(super) struct RawPlan {
    pub(super) name: Option<String>,
    pub(super) targets: Option<RawTargets>,
    pub(super) concurrent_runs: Option<bool>,
    pub(super) strict_vars: Option<bool>,
    pub(super) inputs: Option<BTreeMap<String, Option<RawInput>>>,
    pub(super) vars: Option<BTreeMap<String, Value>>,
    pub(super) schedule: Option<RawSchedule>,
    pub(super) on_stack_change: Option<RawOnStackChange>,
    pub(super) steps: Option<Vec<RawStep>>,
    pub(super) handlers: Option<Vec<RawStep>>,
    pub(super) force_handlers: Option<bool>,
    pub(super) serial: Option<Value>,
    pub(super) max_fail_percentage: Option<Value>,
    pub(super) pause_between_batches: Option<RawNumberOrText>,
    pub(super) health_check: Option<RawStep>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "on_stack_change: a mapping with stack and outputs"
)]
pub(super) struct RawOnStackChange {
    pub(super) stack: Option<String>,
    pub(super) outputs: Option<Vec<String>>,
    pub(super) inputs: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize, Default)]
#[serde(
    deny_unknown_fields,
    expecting = "targets: a mapping with hosts, labels, environments"
)]
pub(super) struct RawTargets {
    pub(super) hosts: Option<Vec<String>>,
    pub(super) labels: Option<Vec<String>>,
    pub(super) environments: Option<Vec<String>>,
    pub(super) hosts_from: Option<Value>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "an input: a mapping with default, description"
)]
pub(super) struct RawInput {
    pub(super) default: Option<Value>,
    pub(super) description: Option<String>,
}

/// A step as written: its fields, its module keys (in order) and any other keys.
pub(super) struct RawStep {
    pub(super) name: Option<String>,
    pub(super) when: Option<String>,
    pub(super) sudo: Option<bool>,
    pub(super) continue_on_error: Option<bool>,
    pub(super) timeout: Option<RawNumberOrText>,
    /// A handler name or a list of them.
    pub(super) notify: Option<Value>,
    /// `health_check` only.
    pub(super) retries: Option<Value>,
    /// `health_check` only.
    pub(super) delay: Option<RawNumberOrText>,
    pub(super) modules: Vec<(String, RawModule)>,
    pub(super) unknown: Vec<String>,
}

pub(super) enum RawModule {
    Command(Words),
    Shell(RawShell),
    Script(RawScript),
    LineInFile(RawLineInFile),
    Copy(RawCopy),
    Template(RawTemplate),
    Directory(RawDirectory),
    Absent(RawAbsent),
    /// `flush: handlers` (the value as written).
    Flush(String),
    Package(RawPackage),
    User(RawUser),
    Group(RawGroup),
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
                    notify: None,
                    retries: None,
                    delay: None,
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
                        "notify" => {
                            s.notify = map.next_value()?;
                            continue;
                        }
                        "retries" => {
                            s.retries = map.next_value()?;
                            continue;
                        }
                        "delay" => {
                            s.delay = map.next_value()?;
                            continue;
                        }
                        "flush" => RawModule::Flush(map.next_value()?),
                        "command" => RawModule::Command(map.next_value()?),
                        "shell" => RawModule::Shell(map.next_value()?),
                        "script" => RawModule::Script(map.next_value()?),
                        "file.lineinfile" => RawModule::LineInFile(map.next_value()?),
                        "file.copy" => RawModule::Copy(map.next_value()?),
                        "file.template" => RawModule::Template(map.next_value()?),
                        "file.directory" => RawModule::Directory(map.next_value()?),
                        "file.absent" => RawModule::Absent(map.next_value()?),
                        "package" => RawModule::Package(map.next_value()?),
                        "user" => RawModule::User(map.next_value()?),
                        "group" => RawModule::Group(map.next_value()?),
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
pub(super) enum Words {
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
pub(super) enum RawNumberOrText {
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

pub(super) struct RawShell {
    pub(super) cmd: Option<String>,
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

pub(super) struct RawSchedule {
    pub(super) cron: Option<String>,
    pub(super) timezone: Option<String>,
    pub(super) inputs: Option<BTreeMap<String, Value>>,
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

pub(super) struct RawScript {
    pub(super) src: Option<String>,
    pub(super) args: Option<Words>,
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
pub(super) struct RawLineInFile {
    pub(super) path: Option<String>,
    pub(super) line: Option<String>,
    pub(super) regexp: Option<String>,
    pub(super) search_string: Option<String>,
    pub(super) state: Option<String>,
    pub(super) insertafter: Option<String>,
    pub(super) insertbefore: Option<String>,
    pub(super) backrefs: Option<bool>,
    pub(super) firstmatch: Option<bool>,
    pub(super) create: Option<bool>,
    pub(super) mode: Option<RawNumberOrText>,
    pub(super) owner: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "file.copy's parameters: a mapping")]
pub(super) struct RawCopy {
    pub(super) path: Option<String>,
    pub(super) content: Option<String>,
    pub(super) src: Option<String>,
    pub(super) mode: Option<RawNumberOrText>,
    pub(super) owner: Option<String>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "file.template's parameters: a mapping"
)]
pub(super) struct RawTemplate {
    pub(super) path: Option<String>,
    pub(super) content: Option<String>,
    pub(super) src: Option<String>,
    pub(super) mode: Option<RawNumberOrText>,
    pub(super) owner: Option<String>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "file.directory's parameters: a mapping"
)]
pub(super) struct RawDirectory {
    pub(super) path: Option<String>,
    pub(super) mode: Option<RawNumberOrText>,
    pub(super) owner: Option<String>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "file.absent's parameters: a mapping with path"
)]
pub(super) struct RawAbsent {
    pub(super) path: Option<String>,
}

/// A name, or a list of names (`package`'s `name`).
pub(super) enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl<'de> Deserialize<'de> for OneOrMany {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OneOrMany;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a name or a list of names")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<OneOrMany, E> {
                Ok(OneOrMany::One(v.to_string()))
            }
            fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<OneOrMany, S::Error> {
                let mut out = Vec::new();
                while let Some(w) = seq.next_element::<String>()? {
                    out.push(w);
                }
                Ok(OneOrMany::Many(out))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "package's parameters: a mapping with name"
)]
pub(super) struct RawPackage {
    pub(super) name: Option<OneOrMany>,
    pub(super) state: Option<String>,
    pub(super) cache_valid_time: Option<RawNumberOrText>,
    pub(super) manager: Option<String>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "user's parameters: a mapping with name"
)]
pub(super) struct RawUser {
    pub(super) name: Option<String>,
    pub(super) state: Option<String>,
    pub(super) uid: Option<RawNumberOrText>,
    pub(super) group: Option<RawNumberOrText>,
    pub(super) groups: Option<Vec<String>>,
    pub(super) append: Option<bool>,
    pub(super) shell: Option<String>,
    pub(super) home: Option<String>,
    pub(super) create_home: Option<bool>,
    pub(super) system: Option<bool>,
    pub(super) comment: Option<String>,
    pub(super) authorized_keys: Option<Vec<String>>,
    pub(super) remove: Option<bool>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "group's parameters: a mapping with name"
)]
pub(super) struct RawGroup {
    pub(super) name: Option<String>,
    pub(super) state: Option<String>,
    pub(super) gid: Option<RawNumberOrText>,
    pub(super) system: Option<bool>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "an inventory: a mapping with environments, defaults, hosts"
)]
pub(super) struct RawInventory {
    pub(super) environments: Option<BTreeMap<String, Option<RawEnvironment>>>,
    pub(super) defaults: Option<RawDefaults>,
    pub(super) hosts: Option<Ordered<Option<RawHost>>>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "an environment: a mapping with vars, requires_approval, protected"
)]
pub(super) struct RawEnvironment {
    pub(super) vars: Option<BTreeMap<String, Value>>,
    pub(super) requires_approval: Option<bool>,
    pub(super) protected: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(
    deny_unknown_fields,
    expecting = "defaults: a mapping with user, port, identity_file, known_hosts, connection, proxy_jump"
)]
pub(super) struct RawDefaults {
    pub(super) user: Option<String>,
    pub(super) port: Option<i64>,
    pub(super) identity_file: Option<String>,
    pub(super) known_hosts: Option<String>,
    pub(super) connection: Option<String>,
    pub(super) proxy_jump: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(
    deny_unknown_fields,
    expecting = "a host: a mapping with address, port, user, …"
)]
pub(super) struct RawHost {
    pub(super) address: Option<String>,
    pub(super) port: Option<i64>,
    pub(super) user: Option<String>,
    pub(super) connection: Option<String>,
    pub(super) labels: Option<Vec<String>>,
    pub(super) vars: Option<BTreeMap<String, Value>>,
    pub(super) environment: Option<String>,
    pub(super) identity_file: Option<String>,
    pub(super) known_hosts: Option<String>,
    pub(super) host_key: Option<String>,
    pub(super) proxy_jump: Option<String>,
}

/// A mapping read in file order.
pub(super) struct Ordered<V>(pub(super) Vec<(String, V)>);

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
