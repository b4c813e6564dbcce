//! Hosts from a stack's output. A `hosts_from` source names a stack, one of its outputs
//! (a list, or a map: each entry one host) and how each entry becomes a host: templates
//! over `item` (the entry) and `key` (its index, or its key in a map) for the host's
//! name, address, port, user, labels, vars and host key.
//!
//! Templates are expressions only (`{{ item.private_ip }}`, `web-{{ key }}`); blocks
//! (`{% … %}`) are refused. Rendering is strict: a template that refers to something the
//! entry lacks is an error naming the entry and the field, never an empty value. Which
//! stack and output, and checking each host, are the caller's (the server's).

use std::collections::BTreeMap;

use minijinja::{Environment, UndefinedBehavior};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The most sources an environment has.
pub const MAX_SOURCES: usize = 16;
/// The most hosts one source gives.
pub const MAX_ITEMS: usize = 1000;
/// The longest template.
pub const MAX_TEMPLATE: usize = 1000;
/// The longest rendered value.
pub const MAX_RENDERED: usize = 4096;
/// The most labels and vars of a source.
pub const MAX_FIELDS: usize = 64;

/// One source: a stack's output, and how each of its entries becomes a host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostsFrom {
    /// A stack of the same org.
    pub stack: String,
    /// One of its outputs: a list or a map.
    pub output: String,
    /// The host's name.
    pub name: String,
    pub address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Each a label (a template); one that renders empty is left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// Variable name → template.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vars: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_key: Option<String>,
    /// The private key's path on the runner's machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_file: Option<String>,
    /// The known_hosts path on the runner's machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub known_hosts: Option<String>,
}

/// A host as one entry renders it, before the caller checks its fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedHost {
    pub name: String,
    pub address: String,
    pub port: Option<String>,
    pub user: Option<String>,
    pub labels: Vec<String>,
    pub vars: BTreeMap<String, String>,
    pub host_key: Option<String>,
    pub identity_file: Option<String>,
    pub known_hosts: Option<String>,
}

/// Why a source is refused or does not render: the field (`hosts_from[0].address`) and
/// the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SourceError {
    pub field: String,
    pub message: String,
}

fn err(field: impl Into<String>, message: impl Into<String>) -> SourceError {
    SourceError {
        field: field.into(),
        message: message.into(),
    }
}

impl HostsFrom {
    /// Every template of the source, with the field it is in.
    fn templates(&self) -> Vec<(String, &str)> {
        let mut all = vec![
            ("name".to_string(), self.name.as_str()),
            ("address".to_string(), self.address.as_str()),
        ];
        for (field, t) in [
            ("port", &self.port),
            ("user", &self.user),
            ("host_key", &self.host_key),
            ("identity_file", &self.identity_file),
            ("known_hosts", &self.known_hosts),
        ] {
            if let Some(t) = t {
                all.push((field.to_string(), t.as_str()));
            }
        }
        for (i, t) in self.labels.iter().enumerate() {
            all.push((format!("labels[{i}]"), t.as_str()));
        }
        for (k, t) in &self.vars {
            all.push((format!("vars.{k}"), t.as_str()));
        }
        all
    }
}

/// Reads an environment's `hosts_from` (a list of sources), checking every bound and
/// every template's syntax. Errors name the field (`hosts_from[1].name`).
pub fn parse(value: &Value) -> Result<Vec<HostsFrom>, SourceError> {
    let Value::Array(list) = value else {
        return Err(err("hosts_from", "expected a list of sources"));
    };
    if list.len() > MAX_SOURCES {
        return Err(err(
            "hosts_from",
            format!("at most {MAX_SOURCES} sources (got {})", list.len()),
        ));
    }
    let mut sources = Vec::with_capacity(list.len());
    for (i, raw) in list.iter().enumerate() {
        let at = format!("hosts_from[{i}]");
        let source: HostsFrom =
            serde_json::from_value(raw.clone()).map_err(|e| err(at.clone(), e.to_string()))?;
        if source.stack.trim().is_empty() || source.output.trim().is_empty() {
            return Err(err(at, "name the stack and its output"));
        }
        if source.labels.len() > MAX_FIELDS || source.vars.len() > MAX_FIELDS {
            return Err(err(
                at,
                format!("at most {MAX_FIELDS} labels and {MAX_FIELDS} vars"),
            ));
        }
        let env = environment();
        for (field, t) in source.templates() {
            let field = format!("{at}.{field}");
            if t.len() > MAX_TEMPLATE {
                return Err(err(field, format!("at most {MAX_TEMPLATE} bytes")));
            }
            if t.contains("{%") || t.contains("{#") {
                return Err(err(
                    field,
                    "only expressions ({{ item.x }}) are allowed, not blocks or comments",
                ));
            }
            env.template_from_str(t)
                .map_err(|e| err(field, format!("not a template: {e}")))?;
        }
        sources.push(source);
    }
    Ok(sources)
}

fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
    env
}

/// The hosts `source` makes of an output's value: one per entry of a list (`key` its
/// index) or of a map (`key` its key, in key order). An entry a template cannot render is
/// an error naming the entry and the field.
pub fn render(source: &HostsFrom, output: &Value) -> Result<Vec<RenderedHost>, SourceError> {
    let entries: Vec<(Value, &Value)> = match output {
        Value::Array(list) => list
            .iter()
            .enumerate()
            .map(|(i, v)| (Value::from(i), v))
            .collect(),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| (Value::from(k.clone()), v))
            .collect(),
        other => {
            return Err(err(
                "output",
                format!(
                    "output {:?} of stack {:?} is {}, not a list or a map of hosts",
                    source.output,
                    source.stack,
                    kind(other)
                ),
            ))
        }
    };
    if entries.len() > MAX_ITEMS {
        return Err(err(
            "output",
            format!(
                "output {:?} of stack {:?} has {} entries: a source gives at most {MAX_ITEMS} hosts",
                source.output,
                source.stack,
                entries.len()
            ),
        ));
    }
    let env = environment();
    let mut hosts = Vec::with_capacity(entries.len());
    for (key, item) in entries {
        let shown = match &key {
            Value::String(k) => k.clone(),
            other => other.to_string(),
        };
        let ctx = minijinja::context! {
            item => plain(item),
            key => plain(&key),
        };
        let one = |field: &str, t: &str| -> Result<String, SourceError> {
            let text = env.render_str(t, ctx.clone()).map_err(|e| {
                err(
                    field,
                    format!(
                        "entry {shown} of output {:?} of stack {:?}: {}",
                        source.output,
                        source.stack,
                        e.detail()
                            .map(str::to_string)
                            .unwrap_or_else(|| e.to_string())
                    ),
                )
            })?;
            if text.len() > MAX_RENDERED {
                return Err(err(
                    field,
                    format!("entry {shown}: renders to more than {MAX_RENDERED} bytes"),
                ));
            }
            Ok(text.trim().to_string())
        };
        let optional = |field: &str, t: &Option<String>| -> Result<Option<String>, SourceError> {
            match t {
                Some(t) => one(field, t).map(|v| Some(v).filter(|v| !v.is_empty())),
                None => Ok(None),
            }
        };
        let mut labels = Vec::new();
        for (i, t) in source.labels.iter().enumerate() {
            let label = one(&format!("labels[{i}]"), t)?;
            if !label.is_empty() && !labels.contains(&label) {
                labels.push(label);
            }
        }
        let mut vars = BTreeMap::new();
        for (k, t) in &source.vars {
            vars.insert(k.clone(), one(&format!("vars.{k}"), t)?);
        }
        hosts.push(RenderedHost {
            name: one("name", &source.name)?,
            address: one("address", &source.address)?,
            port: optional("port", &source.port)?,
            user: optional("user", &source.user)?,
            labels,
            vars,
            host_key: optional("host_key", &source.host_key)?,
            identity_file: optional("identity_file", &source.identity_file)?,
            known_hosts: optional("known_hosts", &source.known_hosts)?,
        });
    }
    Ok(hosts)
}

/// A JSON value as a template value.
fn plain(v: &Value) -> minijinja::Value {
    match v {
        Value::Null => minijinja::Value::from(()),
        Value::Bool(b) => minijinja::Value::from(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => minijinja::Value::from(i),
            (None, Some(u)) => minijinja::Value::from(u),
            _ => minijinja::Value::from(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => minijinja::Value::from(s.as_str()),
        Value::Array(items) => items.iter().map(plain).collect(),
        Value::Object(map) => {
            minijinja::Value::from_pairs(map.iter().map(|(k, v)| (k.as_str(), plain(v))))
        }
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn source(extra: Value) -> HostsFrom {
        let mut v = json!({"stack": "web-fleet", "output": "instances",
            "name": "{{ item.name }}", "address": "{{ item.private_ip }}",
            "labels": ["web", "{{ item.zone }}"]});
        if let (Value::Object(m), Value::Object(e)) = (&mut v, extra) {
            m.extend(e);
        }
        parse(&json!([v])).unwrap().remove(0)
    }

    #[test]
    fn a_list_of_objects_becomes_hosts_in_order() {
        let s = source(json!({"port": "{{ item.port | default(22) }}",
            "vars": {"index": "{{ key }}"}}));
        let hosts = render(
            &s,
            &json!([
                {"name": "web-1", "private_ip": "10.0.0.1", "zone": "a", "port": 2201},
                {"name": "web-2", "private_ip": "10.0.0.2", "zone": "b"},
            ]),
        )
        .unwrap();
        assert_eq!(hosts.len(), 2);
        assert_eq!(
            (hosts[0].name.as_str(), hosts[0].address.as_str()),
            ("web-1", "10.0.0.1")
        );
        assert_eq!(hosts[0].port.as_deref(), Some("2201"));
        assert_eq!(hosts[1].port.as_deref(), Some("22"));
        assert_eq!(hosts[1].labels, ["web", "b"]);
        assert_eq!(hosts[1].vars["index"], "1");
    }

    #[test]
    fn a_map_gives_its_keys_and_a_missing_field_names_the_entry() {
        let s = parse(&json!([{"stack": "s", "output": "o", "name": "{{ key }}",
            "address": "{{ item.ip }}"}]))
        .unwrap()
        .remove(0);
        let hosts = render(
            &s,
            &json!({"db-2": {"ip": "10.0.0.2"}, "db-1": {"ip": "10.0.0.1"}}),
        )
        .unwrap();
        assert_eq!(hosts[0].name, "db-1");
        let e = render(&s, &json!({"db-3": {"addr": "x"}})).unwrap_err();
        assert_eq!(e.field, "address");
        assert!(e.message.contains("entry db-3"), "{e}");
        let e = render(&s, &json!("10.0.0.1")).unwrap_err();
        assert!(
            e.message.contains("is a string, not a list or a map"),
            "{e}"
        );
    }

    #[test]
    fn bounds_and_blocks_are_refused_naming_the_field() {
        let long = "x".repeat(MAX_TEMPLATE + 1);
        for (bad, field) in [
            (json!({}), "hosts_from"),
            (
                json!([{"stack": "s", "output": "o", "name": "n"}]),
                "hosts_from[0]",
            ),
            (
                json!([{"stack": "s", "output": "o", "name": "{% for i in range(9) %}x{% endfor %}", "address": "a"}]),
                "hosts_from[0].name",
            ),
            (
                json!([{"stack": "s", "output": "o", "name": long, "address": "a"}]),
                "hosts_from[0].name",
            ),
            (
                json!([{"stack": "s", "output": "o", "name": "{{ item.", "address": "a"}]),
                "hosts_from[0].name",
            ),
            (
                json!([{"stack": "s", "output": "o", "name": "n", "address": "a", "colour": "x"}]),
                "hosts_from[0]",
            ),
        ] {
            let e = parse(&bad).unwrap_err();
            assert_eq!(e.field, field, "{bad}: {e}");
        }
        let many: Vec<Value> = (0..=MAX_ITEMS).map(|i| json!({"name": i})).collect();
        let s = parse(
            &json!([{"stack": "s", "output": "o", "name": "h{{ item.name }}",
            "address": "a"}]),
        )
        .unwrap()
        .remove(0);
        assert!(render(&s, &Value::Array(many))
            .unwrap_err()
            .message
            .contains("at most"));
    }
}
