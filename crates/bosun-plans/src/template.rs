//! Templating: `{{ vars.x }}`, `{{ env.x }}`, `{{ inputs.x }}`, `{{ host.name }}`,
//! `{{ host.address }}`, `{{ host.labels }}`, `{{ host.facts.arch }}`. `vars` is the
//! merged value — plan vars < environment vars < host vars < inputs. `host.facts` holds
//! the host's [facts](crate::facts) once the executor has gathered them (only in runs
//! that refer to them). An unresolved reference renders empty and is collected (the
//! caller warns, or fails with `strict_vars`).
//!
//! Templates are MiniJinja (Jinja2 syntax), configured like Ansible's: no HTML escaping,
//! `trim_blocks` on, a trailing newline kept. Strings render as they are, numbers and
//! booleans as their text (`1.0`, `true`), `null` as nothing, lists and maps the
//! MiniJinja way (`['a', 'b']`, `{'k': 1}`).
//!
//! Unresolved references are found while rendering: every namespace (and every map
//! inside it) is an object that records a key it does not have, as written
//! (`vars.missing`, `vars.db.port`, or a bare `foo` for an unknown name). A lookup that
//! is handed straight to `default`/`d` or tested with `is defined`/`is undefined` is
//! a guard, not a miss, and is not reported. Merging is shallow: a layer's key
//! replaces the whole value of a lower layer's key.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use minijinja::value::{Enumerator, Object, ObjectRepr, Rest, ValueKind};
use minijinja::{Environment, State, UndefinedBehavior};

use crate::facts::Facts;
use crate::model::{Host, Inventory, Plan, Value};

/// The host as templates and conditions see it (`host.*`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HostInfo {
    pub name: String,
    pub address: String,
    pub labels: Vec<String>,
    /// `host.facts`: gathered from the host by the executor, for runs that refer to them;
    /// `None` (every `host.facts.*` unresolved) until then.
    pub facts: Option<Facts>,
}

impl HostInfo {
    /// `host` as a map: `name`, `address`, `labels`, and `facts` when gathered.
    pub fn to_value(&self) -> Value {
        let mut host = serde_json::json!({
            "name": self.name,
            "address": self.address,
            "labels": self.labels,
        });
        if let (Some(facts), Value::Object(map)) = (&self.facts, &mut host) {
            map.insert("facts".into(), facts.to_value());
        }
        host
    }
}

/// Everything a template or condition on one host can refer to.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Scope {
    /// Merged: plan vars < environment vars < host vars < inputs.
    pub vars: BTreeMap<String, Value>,
    /// The host's environment's variables only.
    pub env: BTreeMap<String, Value>,
    /// Run overrides (with the plan's input defaults filled in).
    pub inputs: BTreeMap<String, Value>,
    pub host: HostInfo,
}

impl Scope {
    /// The scope of `host` for a run of `plan` with `inputs` (overrides).
    pub fn for_host(
        plan: &Plan,
        inventory: &Inventory,
        host: &Host,
        inputs: &BTreeMap<String, Value>,
    ) -> Scope {
        let env = host
            .environment
            .as_ref()
            .and_then(|e| inventory.environments.get(e))
            .map(|e| e.vars.clone())
            .unwrap_or_default();
        let mut effective_inputs: BTreeMap<String, Value> = plan
            .inputs
            .iter()
            .filter_map(|(k, def)| def.default.clone().map(|v| (k.clone(), v)))
            .collect();
        effective_inputs.extend(inputs.iter().map(|(k, v)| (k.clone(), v.clone())));
        let mut vars = plan.vars.clone();
        vars.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
        vars.extend(host.vars.iter().map(|(k, v)| (k.clone(), v.clone())));
        vars.extend(effective_inputs.iter().map(|(k, v)| (k.clone(), v.clone())));
        Scope {
            vars,
            env,
            inputs: effective_inputs,
            host: HostInfo {
                name: host.name.clone(),
                address: host.address.clone(),
                labels: host.labels.clone(),
                facts: None,
            },
        }
    }
}

/// A rendered string and the references that did not resolve.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rendered {
    pub text: String,
    /// As written, e.g. `vars.missing`.
    pub unresolved: Vec<String>,
}

/// A template that cannot be rendered (a syntax error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("template {template:?}: {message}")]
pub struct TemplateError {
    pub template: String,
    pub message: String,
}

/// Whether a string holds template syntax at all (plain strings skip the engine).
fn is_template(s: &str) -> bool {
    s.contains("{{") || s.contains("{%") || s.contains("{#")
}

fn template_error(template: &str, e: &minijinja::Error) -> TemplateError {
    let mut message = match e.detail() {
        Some(d) => format!("{}: {d}", e.kind()),
        None => e.kind().to_string(),
    };
    if let Some(line) = e.line() {
        if template.contains('\n') {
            message.push_str(&format!(" (line {line})"));
        }
    }
    TemplateError {
        template: template.to_string(),
        message,
    }
}

/// The misses recorded while rendering.
#[derive(Debug, Default)]
struct Tracker {
    misses: Mutex<Vec<String>>,
}

impl Tracker {
    fn record(&self, path: String) {
        if let Ok(mut m) = self.misses.lock() {
            m.push(path);
        }
    }

    /// A guard (`default`, `is defined`) received an undefined value: the miss that
    /// made it is not an unresolved reference.
    fn forgive_last(&self) {
        if let Ok(mut m) = self.misses.lock() {
            m.pop();
        }
    }

    fn take(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        if let Ok(mut m) = self.misses.lock() {
            for p in m.drain(..) {
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        }
        out
    }
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

/// A map (a namespace or a map inside one) that records the keys it misses.
#[derive(Debug)]
struct TrackedMap {
    path: String,
    map: serde_json::Map<String, Value>,
    tracker: Arc<Tracker>,
}

impl Object for TrackedMap {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Map
    }

    fn get_value(self: &Arc<Self>, key: &minijinja::Value) -> Option<minijinja::Value> {
        let k = key.as_str()?;
        match self.map.get(k) {
            Some(v) => Some(to_jinja(v, &join(&self.path, k), &self.tracker)),
            None => {
                self.tracker.record(join(&self.path, k));
                None
            }
        }
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Values(
            self.map
                .keys()
                .map(|k| minijinja::Value::from(k.as_str()))
                .collect(),
        )
    }
}

/// The template's root: the four namespaces; any other name is recorded as a miss
/// unless it is one of the engine's globals (`range`, `dict`, …).
#[derive(Debug)]
struct Root {
    namespaces: BTreeMap<&'static str, minijinja::Value>,
    globals: BTreeSet<String>,
    tracker: Arc<Tracker>,
}

impl Object for Root {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Map
    }

    fn get_value(self: &Arc<Self>, key: &minijinja::Value) -> Option<minijinja::Value> {
        let k = key.as_str()?;
        if let Some(v) = self.namespaces.get(k) {
            return Some(v.clone());
        }
        if !self.globals.contains(k) {
            self.tracker.record(k.to_string());
        }
        None
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Str(&["vars", "env", "inputs", "host"])
    }
}

fn to_jinja(v: &Value, path: &str, tracker: &Arc<Tracker>) -> minijinja::Value {
    match v {
        Value::Null => minijinja::Value::from(()),
        Value::Bool(b) => minijinja::Value::from(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                minijinja::Value::from(i)
            } else if let Some(u) = n.as_u64() {
                minijinja::Value::from(u)
            } else {
                minijinja::Value::from(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Value::String(s) => minijinja::Value::from(s.as_str()),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, x)| to_jinja(x, &format!("{path}[{i}]"), tracker))
            .collect(),
        Value::Object(map) => minijinja::Value::from_object(TrackedMap {
            path: path.to_string(),
            map: map.clone(),
            tracker: tracker.clone(),
        }),
    }
}

fn namespace(
    map: &BTreeMap<String, Value>,
    name: &str,
    tracker: &Arc<Tracker>,
) -> minijinja::Value {
    minijinja::Value::from_object(TrackedMap {
        path: name.to_string(),
        map: map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        tracker: tracker.clone(),
    })
}

/// The engine as every template uses it; `tracker` receives misses.
fn environment(tracker: Option<Arc<Tracker>>) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Chainable);
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
    if let Ok(syntax) = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .keep_trailing_newline(true)
        .build()
    {
        env.set_syntax(syntax);
    }
    env.set_formatter(|out, state, value| {
        if value.is_none() {
            Ok(())
        } else if value.kind() == ValueKind::Bool {
            // As YAML and JSON write them, not Python's `True`.
            let text = if value.is_true() { "true" } else { "false" };
            out.write_str(text).map_err(|e| {
                minijinja::Error::new(minijinja::ErrorKind::WriteFailure, e.to_string())
            })
        } else {
            minijinja::escape_formatter(out, state, value)
        }
    });
    if let Some(tracker) = tracker {
        for name in ["default", "d"] {
            let t = tracker.clone();
            env.add_filter(
                name,
                move |state: &State, value: &minijinja::Value, args: Rest<minijinja::Value>| {
                    if value.is_undefined() {
                        t.forgive_last();
                    }
                    minijinja::filters::default(state, value, args)
                },
            );
        }
        let t = tracker.clone();
        env.add_test("defined", move |value: &minijinja::Value| {
            if value.is_undefined() {
                t.forgive_last();
            }
            !value.is_undefined()
        });
        let t = tracker;
        env.add_test("undefined", move |value: &minijinja::Value| {
            if value.is_undefined() {
                t.forgive_last();
            }
            value.is_undefined()
        });
    }
    env
}

/// Renders one template string in `scope`.
pub fn render(template: &str, scope: &Scope) -> Result<Rendered, TemplateError> {
    if !is_template(template) {
        return Ok(Rendered {
            text: template.to_string(),
            unresolved: Vec::new(),
        });
    }
    let tracker = Arc::new(Tracker::default());
    let env = environment(Some(tracker.clone()));
    let globals: BTreeSet<String> = env.globals().map(|(k, _)| k.to_string()).collect();
    let host_map: BTreeMap<String, Value> = match scope.host.to_value() {
        Value::Object(m) => m.into_iter().collect(),
        _ => BTreeMap::new(),
    };
    let root = Root {
        namespaces: BTreeMap::from([
            ("vars", namespace(&scope.vars, "vars", &tracker)),
            ("env", namespace(&scope.env, "env", &tracker)),
            ("inputs", namespace(&scope.inputs, "inputs", &tracker)),
            ("host", namespace(&host_map, "host", &tracker)),
        ]),
        globals,
        tracker: tracker.clone(),
    };
    let tmpl = env
        .template_from_str(template)
        .map_err(|e| template_error(template, &e))?;
    let text = tmpl
        .render(minijinja::Value::from_object(root))
        .map_err(|e| template_error(template, &e))?;
    Ok(Rendered {
        text,
        unresolved: tracker.take(),
    })
}

/// Checks a template's syntax (for lint and upload).
pub fn check(template: &str) -> Result<(), TemplateError> {
    if !is_template(template) {
        return Ok(());
    }
    let env = environment(None);
    env.template_from_str(template)
        .map(|_| ())
        .map_err(|e| template_error(template, &e))
}

/// The names a template looks up, dotted as far as they are attribute lookups
/// (`vars.db.port`, `host.facts.arch`; `host['x']` is `host`), sorted; `None` when it does
/// not parse. A string without template syntax looks nothing up.
pub fn variables(template: &str) -> Option<Vec<String>> {
    if !is_template(template) {
        return Some(Vec::new());
    }
    let env = environment(None);
    let tmpl = env.template_from_str(template).ok()?;
    let mut found: Vec<String> = tmpl.undeclared_variables(true).into_iter().collect();
    found.sort();
    Some(found)
}

/// The references a template makes, found without rendering it: a namespace and its
/// key (`vars.app`, `host.name`; deeper lookups are cut to that, except a host fact,
/// which is `host.facts.NAME`), or a bare name that is
/// neither a namespace nor a global (`foo`). A namespace used whole (`vars['x']`,
/// `vars | items`) is not listed. Syntax errors are errors.
pub fn references(template: &str) -> Result<Vec<String>, TemplateError> {
    if !is_template(template) {
        return Ok(Vec::new());
    }
    let env = environment(None);
    let globals: BTreeSet<String> = env.globals().map(|(k, _)| k.to_string()).collect();
    let tmpl = env
        .template_from_str(template)
        .map_err(|e| template_error(template, &e))?;
    let mut out: Vec<String> = Vec::new();
    let mut found: Vec<String> = tmpl.undeclared_variables(true).into_iter().collect();
    found.sort();
    for name in found {
        let mut parts = name.split('.');
        let Some(first) = parts.next() else { continue };
        let r = if crate::condition::NAMESPACES.contains(&first) {
            match (parts.next(), first) {
                (Some("facts"), "host") => match parts.next() {
                    Some(fact) => format!("host.facts.{fact}"),
                    None => "host.facts".to_string(),
                },
                (Some(key), _) => format!("{first}.{key}"),
                (None, _) => continue,
            }
        } else if globals.contains(first) {
            continue;
        } else {
            first.to_string()
        };
        if !out.contains(&r) {
            out.push(r);
        }
    }
    Ok(out)
}
