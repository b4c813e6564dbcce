//! Stage 3 for plans: raw structures become a validated [`Plan`], every error placed
//! at the key or value that is wrong; commands, timeouts and modes are read here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::index::{join_key, Index};
use super::raw::{
    OneOrMany, RawGroup, RawModule, RawNumberOrText, RawOnStackChange, RawPackage, RawPlan,
    RawSchedule, RawStep, RawUser, Words,
};
use crate::model::{
    BatchSize, CopySource, FileSchedule, GroupArgs, HealthCheck, InputDef, LineInFileArgs,
    ModelError, Module, OnStackChange, PackageArgs, PackageManager, PackageState, Plan, Presence,
    Rollout, Step, Targets, UserArgs, Value,
};
use crate::modules::{accounts, package};

/// The module names, as written in plan files.
pub const MODULES: [&str; 11] = [
    "command",
    "shell",
    "script",
    "file.lineinfile",
    "file.copy",
    "file.template",
    "file.directory",
    "file.absent",
    "package",
    "user",
    "group",
];

/// A step's keys other than its module.
const STEP_FIELDS: [&str; 7] = [
    "name",
    "when",
    "sudo",
    "continue_on_error",
    "timeout",
    "notify",
    "flush",
];

/// The most retries a health check may have.
const MAX_RETRIES: u64 = 100;

/// How long a health check waits between tries unless it says.
const DEFAULT_DELAY: Duration = Duration::from_secs(5);

/// The longest wait between two tries of a health check.
const MAX_DELAY: Duration = Duration::from_secs(3600);

/// The longest pause between two batches.
const MAX_PAUSE: Duration = Duration::from_secs(24 * 3600);

/// Where a step is written: its keys differ a little.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Step,
    Handler,
    HealthCheck,
}

/// A plan's raw structure as the model (`base`: the plan file's folder, for `src:`).
pub(super) fn validate(ix: &Index, base: &Path, raw: RawPlan) -> Result<Plan, ModelError> {
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
    let hosts_from = match &raw_targets.hosts_from {
        None => Vec::new(),
        Some(v) => crate::host_source::parse(v).map_err(|e| {
            ix.err_value(
                &format!("targets.{}", e.field),
                format!("targets.{}: {}", e.field, e.message),
            )
        })?,
    };
    let targets = Targets {
        hosts: list("hosts", raw_targets.hosts)?,
        labels: list("labels", raw_targets.labels)?,
        environments: list("environments", raw_targets.environments)?,
        hosts_from,
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
        .map(|s| validate_schedule(ix, &inputs, s))
        .transpose()?;
    let on_stack_change = raw
        .on_stack_change
        .map(|o| validate_on_stack_change(ix, &inputs, o))
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
        .map(|(i, s)| validate_step(ix, base, &format!("steps[{i}]"), Role::Step, s))
        .collect::<Result<Vec<_>, _>>()?;
    let handlers = raw
        .handlers
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, s)| validate_step(ix, base, &format!("handlers[{i}]"), Role::Handler, s))
        .collect::<Result<Vec<_>, _>>()?;
    check_handlers(ix, &steps, &handlers)?;
    let rollout = Rollout {
        serial: match raw.serial {
            None => Vec::new(),
            Some(v) => serial(ix, &v)?,
        },
        max_fail_percentage: raw
            .max_fail_percentage
            .map(|v| percentage(&v).map_err(|m| ix.err_value("max_fail_percentage", m)))
            .transpose()?,
        pause_between_batches: raw
            .pause_between_batches
            .map(|t| {
                duration(&t, "pause", true)
                    .and_then(|d| at_most(d, MAX_PAUSE, "pause"))
                    .map_err(|m| ix.err_value("pause_between_batches", m))
            })
            .transpose()?,
        health_check: raw
            .health_check
            .map(|h| health_check(ix, base, h))
            .transpose()?,
    };
    Ok(Plan {
        name: plan_name,
        targets,
        concurrent_runs: raw.concurrent_runs.unwrap_or(false),
        strict_vars: raw.strict_vars.unwrap_or(false),
        inputs,
        vars: raw.vars.unwrap_or_default(),
        schedule,
        on_stack_change,
        steps,
        handlers,
        force_handlers: raw.force_handlers.unwrap_or(false),
        rollout,
        locations: ix.source_map(),
    })
}

/// Handler names are unique, every `notify` names one, and a `flush` has some to run.
fn check_handlers(ix: &Index, steps: &[Step], handlers: &[Step]) -> Result<(), ModelError> {
    for (i, h) in handlers.iter().enumerate() {
        if let Some(first) = handlers[..i].iter().position(|o| o.name == h.name) {
            return Err(ix.err_value(
                &format!("handlers[{i}].name"),
                format!(
                    "two handlers are named {:?} (handlers[{first}] too): notify finds a handler by its name",
                    h.name
                ),
            ));
        }
    }
    let names: Vec<&str> = handlers.iter().map(|h| h.name.as_str()).collect();
    for (i, step) in steps.iter().enumerate() {
        if step.is_flush() && handlers.is_empty() {
            return Err(ix.err_value(
                &format!("steps[{i}].flush"),
                "the plan has no `handlers:` to flush",
            ));
        }
        for (j, n) in step.notify.iter().enumerate() {
            if !names.contains(&n.as_str()) {
                // A single name has no `[j]`: its place falls back to `notify`.
                return Err(ix.err_value(
                    &format!("steps[{i}].notify[{j}]"),
                    format!(
                        "no handler is named {n:?} (handlers: {})",
                        if names.is_empty() {
                            "none; declare them under `handlers:`".to_string()
                        } else {
                            names.join(", ")
                        }
                    ),
                ));
            }
        }
    }
    Ok(())
}

const SERIAL_HELP: &str =
    "serial is a number of hosts (5), a share of them (\"10%\"), or a list of these ([1, \"10%\", \"50%\"])";

/// `serial:` — one batch size or a list of them.
fn serial(ix: &Index, v: &Value) -> Result<Vec<BatchSize>, ModelError> {
    match v {
        Value::Array(items) if items.is_empty() => {
            Err(ix.err_value("serial", format!("the list is empty: {SERIAL_HELP}")))
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| batch_size(v).map_err(|m| ix.err_value(&format!("serial[{i}]"), m)))
            .collect(),
        v => Ok(vec![batch_size(v).map_err(|m| ix.err_value("serial", m))?]),
    }
}

fn batch_size(v: &Value) -> Result<BatchSize, String> {
    let bad = || format!("bad batch size {v}: {SERIAL_HELP}");
    match v {
        Value::Number(n) => match n.as_u64() {
            Some(n) if n >= 1 => Ok(BatchSize::Hosts(usize::try_from(n).map_err(|_| bad())?)),
            _ => Err(bad()),
        },
        Value::String(s) => match s.trim().strip_suffix('%') {
            Some(p) => match p.trim().parse::<u8>() {
                Ok(p @ 1..=100) => Ok(BatchSize::Percent(p)),
                _ => Err(format!(
                    "bad batch size {s:?}: a share is 1% to 100% of the hosts"
                )),
            },
            None => match s.trim().parse::<usize>() {
                Ok(n) if n >= 1 => Ok(BatchSize::Hosts(n)),
                _ => Err(bad()),
            },
        },
        _ => Err(bad()),
    }
}

/// `max_fail_percentage:` — 0 to 100, as a number or `"20%"`.
fn percentage(v: &Value) -> Result<u8, String> {
    let n = match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().trim_end_matches('%').trim().parse::<u64>().ok(),
        _ => None,
    };
    match n {
        Some(n) if n <= 100 => Ok(u8::try_from(n).unwrap_or(100)),
        _ => Err(format!(
            "bad percentage {v}: a whole number from 0 to 100 (the share of a batch's hosts that may fail)"
        )),
    }
}

/// `health_check:` — a step, plus `retries` and `delay`.
fn health_check(ix: &Index, base: &Path, raw: RawStep) -> Result<HealthCheck, ModelError> {
    let retries = match &raw.retries {
        None => 0,
        Some(v) => match v.as_u64() {
            Some(n) if n <= MAX_RETRIES => u32::try_from(n).unwrap_or(0),
            _ => {
                return Err(ix.err_value(
                    "health_check.retries",
                    format!("retries is a whole number from 0 to {MAX_RETRIES}, not {v}"),
                ))
            }
        },
    };
    let delay = match &raw.delay {
        None => DEFAULT_DELAY,
        Some(t) => duration(t, "delay", true)
            .and_then(|d| at_most(d, MAX_DELAY, "delay"))
            .map_err(|m| ix.err_value("health_check.delay", m))?,
    };
    let step = validate_step(ix, base, "health_check", Role::HealthCheck, raw)?;
    if step.is_flush() {
        return Err(ix.err_key(
            "health_check.flush",
            "a health check runs a module: `flush` is a step of `steps:`",
        ));
    }
    Ok(HealthCheck {
        step,
        retries,
        delay,
    })
}

/// An `on_stack_change:`: a stack id and output names, each a name Terraform accepts
/// (letters, digits, `_`, `-`), at most 32 outputs, none twice.
fn validate_on_stack_change(
    ix: &Index,
    declared: &BTreeMap<String, InputDef>,
    raw: RawOnStackChange,
) -> Result<OnStackChange, ModelError> {
    let name_ok = |s: &str, max: usize| {
        !s.is_empty()
            && s.len() <= max
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    let stack = match raw.stack {
        Some(s) if name_ok(&s, 63) => s,
        Some(s) => {
            return Err(ix.err_value(
                "on_stack_change.stack",
                format!("{s:?} is not a stack id (letters, digits, `-`, `_`)"),
            ))
        }
        None => {
            return Err(ix.err_value(
                "on_stack_change",
                "name the `stack` whose output changes start a run",
            ))
        }
    };
    let outputs = raw.outputs.unwrap_or_default();
    if outputs.len() > 32 {
        return Err(ix.err_value(
            "on_stack_change.outputs",
            format!("at most 32 outputs (got {})", outputs.len()),
        ));
    }
    for (i, o) in outputs.iter().enumerate() {
        if !name_ok(o, 128) {
            return Err(ix.err_value(
                &format!("on_stack_change.outputs[{i}]"),
                format!("{o:?} is not an output name"),
            ));
        }
        if outputs[..i].contains(o) {
            return Err(ix.err_value(
                &format!("on_stack_change.outputs[{i}]"),
                format!("output {o:?} is named twice"),
            ));
        }
    }
    let inputs = raw.inputs.unwrap_or_default();
    for (input, output) in &inputs {
        if !declared.contains_key(input) {
            return Err(ix.err_key(
                &format!("on_stack_change.inputs.{input}"),
                format!("the plan declares no input {input:?}"),
            ));
        }
        if !name_ok(output, 128) {
            return Err(ix.err_value(
                &format!("on_stack_change.inputs.{input}"),
                format!("{output:?} is not an output name"),
            ));
        }
    }
    Ok(OnStackChange {
        stack,
        outputs,
        inputs,
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

fn validate_step(
    ix: &Index,
    base: &Path,
    p: &str,
    role: Role,
    raw: RawStep,
) -> Result<Step, ModelError> {
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
    if role != Role::HealthCheck {
        for (field, set) in [
            ("retries", raw.retries.is_some()),
            ("delay", raw.delay.is_some()),
        ] {
            if set {
                return Err(ix.err_key(
                    &join_key(p, field),
                    format!("`{field}` belongs to `health_check:` only"),
                ));
            }
        }
    }
    if role != Role::Step && raw.notify.is_some() {
        return Err(ix.err_key(
            &join_key(p, "notify"),
            match role {
                Role::Handler => "a handler cannot notify other handlers",
                _ => "a health check cannot notify handlers",
            },
        ));
    }
    let mp = join_key(p, &key);
    if let RawModule::Flush(what) = &module {
        if role == Role::Handler {
            return Err(ix.err_key(&mp, "`flush` is a step of `steps:`, not a handler"));
        }
        if what != "handlers" {
            return Err(ix.err_value(
                &mp,
                format!("write `flush: handlers` (there is nothing else to flush), not {what:?}"),
            ));
        }
        let extra = [
            ("when", raw.when.is_some()),
            ("sudo", raw.sudo.is_some()),
            ("continue_on_error", raw.continue_on_error.is_some()),
            ("timeout", raw.timeout.is_some()),
            ("notify", raw.notify.is_some()),
        ];
        if let Some((field, _)) = extra.iter().find(|(_, set)| *set) {
            return Err(ix.err_key(
                &join_key(p, field),
                format!("a `flush: handlers` step takes only a `name`, not `{field}`"),
            ));
        }
    }
    let module = validate_module(ix, base, &mp, module)?;
    let timeout = match raw.timeout {
        None => None,
        Some(t) => Some(parse_timeout(&t).map_err(|m| ix.err_value(&join_key(p, "timeout"), m))?),
    };
    let name = match raw.name {
        Some(n) if !n.trim().is_empty() => n,
        _ if role == Role::Handler => {
            return Err(ix.err_value(p, "a handler needs a `name`: steps notify it by that name"))
        }
        _ if role == Role::HealthCheck => "health check".to_string(),
        _ => module.kind().to_string(),
    };
    let notify = match raw.notify {
        None => Vec::new(),
        Some(v) => notify_names(&v).map_err(|m| ix.err_value(&join_key(p, "notify"), m))?,
    };
    Ok(Step {
        name,
        module,
        when: raw.when,
        sudo: raw.sudo.unwrap_or(false),
        continue_on_error: raw.continue_on_error.unwrap_or(false),
        timeout,
        notify,
        location: ix.value(p),
    })
}

/// `notify:` — a handler's name or a list of them.
fn notify_names(v: &Value) -> Result<Vec<String>, String> {
    let help = "notify names a handler, or a list of handlers: notify: [reload nginx]";
    let names = match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items
            .iter()
            .map(|i| {
                i.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| help.to_string())
            })
            .collect::<Result<Vec<_>, _>>()?,
        _ => return Err(help.to_string()),
    };
    if names.iter().any(|n| n.trim().is_empty()) {
        return Err(format!("an empty handler name: {help}"));
    }
    Ok(names)
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

/// `file.copy`'s and `file.template`'s `content` or `src` (exactly one; `src` not
/// empty, resolved against `base`).
fn source(
    ix: &Index,
    base: &Path,
    mp: &str,
    module: &str,
    content: Option<String>,
    src: Option<String>,
) -> Result<CopySource, ModelError> {
    match (content, src) {
        (Some(_), Some(_)) => Err(ix.err_key(
            &later(ix, mp, "content", "src"),
            "`content` and `src` cannot be used together",
        )),
        (Some(c), None) => Ok(CopySource::Content(c)),
        (None, Some(s)) if !s.is_empty() => Ok(CopySource::Src(local_path(base, &s))),
        (None, Some(_)) => Err(ix.err_value(&join_key(mp, "src"), "`src` is empty")),
        (None, None) => Err(ix.err_key(mp, format!("{module} needs `content` or `src`"))),
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
            Module::Copy {
                path,
                source: source(ix, base, mp, "file.copy", r.content, r.src)?,
                mode: mode(ix, mp, r.mode)?,
                owner: owner(ix, mp, r.owner)?,
            }
        }
        RawModule::Template(r) => {
            let path = required(ix, mp, "file.template", "path", r.path)?;
            Module::Template {
                path,
                source: source(ix, base, mp, "file.template", r.content, r.src)?,
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
        RawModule::Flush(_) => Module::FlushHandlers,
        RawModule::Package(r) => Module::Package(validate_package(ix, mp, r)?),
        RawModule::User(r) => Module::User(validate_user(ix, mp, r)?),
        RawModule::Group(r) => Module::Group(validate_group(ix, mp, r)?),
    })
}

/// Whether a parameter is a template (checked once rendered, per host).
fn is_template(s: &str) -> bool {
    s.contains("{{") || s.contains("{%")
}

/// A literal value checked by `check` now; a template is checked when it renders.
fn checked(
    ix: &Index,
    path: &str,
    value: &str,
    check: impl Fn(&str) -> Result<(), String>,
) -> Result<(), ModelError> {
    if value.is_empty() {
        let field = path.rsplit(['.']).next().unwrap_or(path);
        return Err(ix.err_value(path, format!("`{field}` is empty")));
    }
    if is_template(value) {
        return Ok(());
    }
    check(value).map_err(|m| ix.err_value(path, m))
}

/// `state:` among `allowed` (the first is the default).
fn state_of<'a>(
    ix: &Index,
    mp: &str,
    v: Option<String>,
    allowed: &[&'a str],
) -> Result<&'a str, ModelError> {
    let Some(v) = v else {
        return Ok(allowed[0]);
    };
    allowed.iter().find(|a| **a == v).copied().ok_or_else(|| {
        let list: Vec<String> = allowed.iter().map(|a| format!("`{a}`")).collect();
        let (last, rest) = list.split_last().map_or(("", &[][..]), |(l, r)| (l, r));
        ix.err_value(
            &join_key(mp, "state"),
            format!("state must be {} or {last}, not `{v}`", rest.join(", ")),
        )
    })
}

/// A uid or gid: a YAML integer, a string of digits, or a template that renders to one.
fn numeric_id(
    ix: &Index,
    mp: &str,
    field: &str,
    v: Option<RawNumberOrText>,
) -> Result<Option<String>, ModelError> {
    let path = join_key(mp, field);
    match v {
        None => Ok(None),
        Some(RawNumberOrText::Number(n)) => {
            if n.fract() == 0.0 && (0.0..f64::from(u32::MAX)).contains(&n) {
                Ok(Some(format!("{n:.0}")))
            } else {
                Err(ix.err_value(
                    &path,
                    format!("`{field}` must be a whole number from 0 to 4294967294, not {n}"),
                ))
            }
        }
        Some(RawNumberOrText::Text(s)) => {
            checked(ix, &path, &s, |t| accounts::parse_id(field, t).map(|_| ()))?;
            Ok(Some(s))
        }
    }
}

/// Refuses `fields` (given, i.e. `Some`) that do not apply with state absent.
fn absent_refuses(
    ix: &Index,
    mp: &str,
    module: &str,
    given: &[(&str, bool)],
    keeps: &str,
) -> Result<(), ModelError> {
    match given.iter().find(|(_, g)| *g) {
        Some((field, _)) => Err(ix.err_key(
            &join_key(mp, field),
            format!("`{field}` does not apply with state absent ({module} with state absent takes {keeps})"),
        )),
        None => Ok(()),
    }
}

fn validate_package(ix: &Index, mp: &str, r: RawPackage) -> Result<PackageArgs, ModelError> {
    let state = match state_of(ix, mp, r.state, &["present", "absent", "latest"])? {
        "absent" => PackageState::Absent,
        "latest" => PackageState::Latest,
        _ => PackageState::Present,
    };
    let name_path = join_key(mp, "name");
    let names = match r.name {
        None => return Err(ix.err_key(mp, "package needs `name` (a name or a list of names)")),
        Some(OneOrMany::One(n)) => {
            checked(ix, &name_path, &n, package::check_name)?;
            vec![n]
        }
        Some(OneOrMany::Many(v)) => {
            if v.is_empty() {
                return Err(ix.err_value(&name_path, "`name` is an empty list"));
            }
            for (i, n) in v.iter().enumerate() {
                checked(ix, &format!("{name_path}[{i}]"), n, package::check_name)?;
            }
            v
        }
    };
    let manager = match r.manager.as_deref() {
        None | Some("auto") => PackageManager::Auto,
        Some("apt") => PackageManager::Apt,
        Some("dnf") => PackageManager::Dnf,
        Some(other) => {
            return Err(ix.err_value(
                &join_key(mp, "manager"),
                format!("manager must be `auto`, `apt` or `dnf`, not `{other}`"),
            ))
        }
    };
    let cache_path = join_key(mp, "cache_valid_time");
    let cache_valid_time = match r.cache_valid_time {
        None => None,
        Some(_) if state == PackageState::Absent => {
            return Err(ix.err_key(
                &cache_path,
                "`cache_valid_time` does not apply with state absent (nothing is installed)",
            ))
        }
        Some(RawNumberOrText::Number(n))
            if n >= 0.0 && n.fract() == 0.0 && Duration::try_from_secs_f64(n).is_ok() =>
        {
            Duration::try_from_secs_f64(n).ok()
        }
        Some(RawNumberOrText::Text(t)) if parse_duration(&t).is_some() => parse_duration(&t),
        Some(RawNumberOrText::Number(n)) => {
            return Err(ix.err_value(
                &cache_path,
                format!(
                "bad cache_valid_time `{n}`: write whole seconds (3600) or a duration like 1h, 30m"
            ),
            ))
        }
        Some(RawNumberOrText::Text(t)) => {
            return Err(ix.err_value(
                &cache_path,
                format!(
                "bad cache_valid_time `{t}`: write whole seconds (3600) or a duration like 1h, 30m"
            ),
            ))
        }
    };
    Ok(PackageArgs {
        names,
        state,
        cache_valid_time,
        manager,
    })
}

fn validate_group(ix: &Index, mp: &str, r: RawGroup) -> Result<GroupArgs, ModelError> {
    let state = match state_of(ix, mp, r.state, &["present", "absent"])? {
        "absent" => Presence::Absent,
        _ => Presence::Present,
    };
    let name = r.name.ok_or_else(|| ix.err_key(mp, "group needs `name`"))?;
    checked(ix, &join_key(mp, "name"), &name, |n| {
        accounts::check_name("group", n)
    })?;
    if state == Presence::Absent {
        absent_refuses(
            ix,
            mp,
            "group",
            &[("gid", r.gid.is_some()), ("system", r.system.is_some())],
            "only `name`",
        )?;
    }
    Ok(GroupArgs {
        name,
        state,
        gid: numeric_id(ix, mp, "gid", r.gid)?,
        system: r.system.unwrap_or(false),
    })
}

fn validate_user(ix: &Index, mp: &str, r: RawUser) -> Result<UserArgs, ModelError> {
    let state = match state_of(ix, mp, r.state, &["present", "absent"])? {
        "absent" => Presence::Absent,
        _ => Presence::Present,
    };
    let name = r.name.ok_or_else(|| ix.err_key(mp, "user needs `name`"))?;
    checked(ix, &join_key(mp, "name"), &name, |n| {
        accounts::check_name("user", n)
    })?;
    match state {
        Presence::Absent => absent_refuses(
            ix,
            mp,
            "user",
            &[
                ("uid", r.uid.is_some()),
                ("group", r.group.is_some()),
                ("groups", r.groups.is_some()),
                ("append", r.append.is_some()),
                ("shell", r.shell.is_some()),
                ("home", r.home.is_some()),
                ("create_home", r.create_home.is_some()),
                ("system", r.system.is_some()),
                ("comment", r.comment.is_some()),
                ("authorized_keys", r.authorized_keys.is_some()),
            ],
            "`name` and `remove`",
        )?,
        Presence::Present => {
            if r.remove.is_some() {
                return Err(ix.err_key(
                    &join_key(mp, "remove"),
                    "`remove` applies only with state absent",
                ));
            }
        }
    }
    if r.append.is_some() && r.groups.is_none() {
        return Err(ix.err_key(&join_key(mp, "append"), "`append` needs `groups`"));
    }
    let group = match r.group {
        None => None,
        Some(RawNumberOrText::Number(n)) => {
            numeric_id(ix, mp, "group", Some(RawNumberOrText::Number(n)))?
        }
        Some(RawNumberOrText::Text(g)) => {
            checked(ix, &join_key(mp, "group"), &g, |g| {
                accounts::check_group_ref(g)
            })?;
            Some(g)
        }
    };
    if let Some(groups) = &r.groups {
        for (i, g) in groups.iter().enumerate() {
            checked(ix, &format!("{}[{i}]", join_key(mp, "groups")), g, |g| {
                accounts::check_group_ref(g)
            })?;
        }
    }
    for (field, v) in [("shell", &r.shell), ("home", &r.home)] {
        if let Some(v) = v {
            checked(ix, &join_key(mp, field), v, |p| {
                accounts::check_path(field, p)
            })?;
        }
    }
    if let Some(c) = &r.comment {
        if !is_template(c) {
            accounts::check_comment(c).map_err(|m| ix.err_value(&join_key(mp, "comment"), m))?;
        }
    }
    if let Some(keys) = &r.authorized_keys {
        for (i, k) in keys.iter().enumerate() {
            checked(
                ix,
                &format!("{}[{i}]", join_key(mp, "authorized_keys")),
                k,
                accounts::check_key_line,
            )?;
        }
    }
    Ok(UserArgs {
        name,
        state,
        uid: numeric_id(ix, mp, "uid", r.uid)?,
        group,
        groups: r.groups,
        append: r.append.unwrap_or(false),
        shell: r.shell,
        home: r.home,
        create_home: r.create_home.unwrap_or(true),
        system: r.system.unwrap_or(false),
        comment: r.comment,
        authorized_keys: r.authorized_keys,
        remove: r.remove.unwrap_or(false),
    })
}

const TIMEOUT_HELP: &str = "write seconds (90) or a duration like 60s, 2m, 1h30m";

fn parse_timeout(t: &RawNumberOrText) -> Result<Duration, String> {
    duration(t, "timeout", false)
}

/// `d`, if it is at most `max`.
fn at_most(d: Duration, max: Duration, what: &str) -> Result<Duration, String> {
    if d > max {
        Err(format!(
            "the {what} is at most {}h (a run waiting longer looks stuck)",
            max.as_secs() / 3600
        ))
    } else {
        Ok(d)
    }
}

/// A number of seconds or a duration (`what` names it in errors); zero only if allowed.
fn duration(t: &RawNumberOrText, what: &str, zero: bool) -> Result<Duration, String> {
    let d = match t {
        RawNumberOrText::Number(n) => Duration::try_from_secs_f64(*n)
            .map_err(|_| format!("bad {what} `{n}`: {TIMEOUT_HELP}"))?,
        RawNumberOrText::Text(s) => {
            parse_duration(s).ok_or_else(|| format!("bad {what} `{s}`: {TIMEOUT_HELP}"))?
        }
    };
    if d.is_zero() && !zero {
        return Err(format!("the {what} must be more than zero: {TIMEOUT_HELP}"));
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

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
