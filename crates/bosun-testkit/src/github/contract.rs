//! GitHub's REST API contract for the double: GitHub's own OpenAPI description of
//! `api.github.com` (`generated/api.github.com.json` of the `@octokit/openapi` npm package,
//! installed by `scripts/test.sh`), against which every REST request the double serves is
//! checked before it is answered.
//!
//! A request conforms when its method and path are an operation of the description (path
//! parameters declared `integer` parse as integers) and its body validates against the
//! operation's `application/json` request schema. The schemas are OpenAPI 3.0: each is
//! translated to JSON Schema draft 7 (`nullable: true` allows `null`, `$ref`s to
//! `#/components/schemas/…` become `#/definitions/…` carried along, OpenAPI-only keywords
//! dropped), compiled with the `jsonschema` crate on first use and cached.
//!
//! The description is read once per process (a [`OnceLock`]); [`Contract::path`] says
//! where from (`$BOSUN_GITHUB_OPENAPI`, else the workspace's `target/npm`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use serde::Deserialize;
use serde_json::{json, Map, Value};

/// The npm package the description comes from (`scripts/test.sh` installs it).
pub const OPENAPI_PACKAGE: &str = "@octokit/openapi";
/// The version `scripts/test.sh` installs.
pub const OPENAPI_VERSION: &str = "23.0.2";

/// The default location of the description: `target/npm/...` under the workspace root,
/// where `scripts/test.sh` installs the package.
const DEFAULT_DESCRIPTION: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../target/npm/node_modules/@octokit/openapi/generated/api.github.com.json"
);

/// The most component schemas one request schema may reach (a cycle is carried once, as
/// `definitions`; this only bounds a pathological description).
const MAX_SCHEMAS: usize = 4096;
/// How many `$ref`s in a row are followed to a parameter or request body.
const MAX_REF_CHAIN: usize = 8;
/// Path parameters GitHub lets carry slashes unescaped (a file path, a git ref, a branch):
/// as the last segment of a template they may take every remaining segment.
const SLASHED_PARAMS: &[&str] = &["path", "ref", "branch", "basehead"];
/// How many schema errors a violation lists.
const MAX_ERRORS: usize = 5;

/// Why a request does not conform, and how GitHub would answer it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ViolationKind {
    /// No operation has this method and path: GitHub answers 404.
    NoRoute,
    /// The body is not JSON though the operation takes JSON: GitHub answers 400.
    NotJson,
    /// The body (or its absence) does not satisfy the operation: GitHub answers 422.
    Body,
}

/// A request that does not conform: what is wrong, and the operation's documentation.
#[derive(Debug, Clone)]
pub(crate) struct Violation {
    pub(crate) kind: ViolationKind,
    pub(crate) message: String,
    pub(crate) documentation_url: Option<String>,
}

/// The operation a conforming request is.
#[derive(Debug, Clone)]
pub(crate) struct Matched {
    pub(crate) operation_id: String,
}

/// GitHub's REST API description, indexed for checking requests. See the module docs.
pub struct Contract {
    templates: Vec<Template>,
    schemas: Map<String, Value>,
    parameters: Map<String, Value>,
    compiled: Mutex<HashMap<String, Arc<Compiled>>>,
}

impl std::fmt::Debug for Contract {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Contract")
            .field("paths", &self.templates.len())
            .finish_non_exhaustive()
    }
}

/// One `paths` entry: its template split into segments, and its operations.
struct Template {
    template: String,
    segments: Vec<Vec<Part>>,
    operations: Vec<(String, Operation)>,
}

/// A piece of a path segment: literal text or a `{parameter}`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Param(String),
}

struct Operation {
    operation_id: String,
    /// The operation's parameters, then the path item's (each maybe a `$ref`).
    parameters: Vec<Value>,
    request_body: Option<Value>,
    documentation_url: Option<String>,
}

/// A compiled request schema, or why it could not be compiled (a bug of the translation).
enum Compiled {
    Schema(Box<jsonschema::Validator>),
    Broken(String),
}

#[derive(Deserialize)]
struct RawDescription {
    paths: BTreeMap<String, RawPathItem>,
    #[serde(default)]
    components: RawComponents,
}

#[derive(Deserialize, Default)]
struct RawComponents {
    #[serde(default)]
    schemas: Map<String, Value>,
    #[serde(default)]
    parameters: Map<String, Value>,
}

#[derive(Deserialize)]
struct RawPathItem {
    #[serde(default)]
    parameters: Vec<Value>,
    get: Option<RawOperation>,
    put: Option<RawOperation>,
    post: Option<RawOperation>,
    patch: Option<RawOperation>,
    delete: Option<RawOperation>,
    head: Option<RawOperation>,
    options: Option<RawOperation>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawOperation {
    operation_id: String,
    #[serde(default)]
    parameters: Vec<Value>,
    request_body: Option<Value>,
    external_docs: Option<RawDocs>,
}

#[derive(Deserialize)]
struct RawDocs {
    url: Option<String>,
}

impl Contract {
    /// Where the description is read from: `$BOSUN_GITHUB_OPENAPI` if set, else the
    /// workspace's `target/npm/node_modules/@octokit/openapi/generated/api.github.com.json`.
    pub fn path() -> PathBuf {
        match std::env::var_os("BOSUN_GITHUB_OPENAPI") {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => PathBuf::from(DEFAULT_DESCRIPTION),
        }
    }

    /// The process's contract, read from [`Contract::path`] on first use; `None` when the
    /// file does not exist. A file that exists but is not the description panics.
    pub fn global() -> Option<&'static Contract> {
        static GLOBAL: OnceLock<Option<Contract>> = OnceLock::new();
        GLOBAL
            .get_or_init(|| Contract::load_from(&Contract::path()))
            .as_ref()
    }

    /// The description at `path`, `None` when it does not exist; panics when it exists but
    /// is not an OpenAPI description.
    pub fn load_from(path: &Path) -> Option<Contract> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => panic!("reading {}: {e}", path.display()),
        };
        let raw: RawDescription = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            panic!(
                "{} is not GitHub's OpenAPI description: {e}",
                path.display()
            )
        });
        Some(Contract::from_raw(raw))
    }

    /// The contract of an OpenAPI description given as JSON (for tests of the checker).
    pub fn from_value(description: Value) -> Result<Contract, String> {
        let raw: RawDescription = serde_json::from_value(description).map_err(|e| e.to_string())?;
        Ok(Contract::from_raw(raw))
    }

    fn from_raw(raw: RawDescription) -> Contract {
        let templates = raw
            .paths
            .into_iter()
            .map(|(template, item)| {
                let segments = template
                    .trim_start_matches('/')
                    .split('/')
                    .map(parse_segment)
                    .collect();
                let methods = [
                    ("GET", item.get),
                    ("PUT", item.put),
                    ("POST", item.post),
                    ("PATCH", item.patch),
                    ("DELETE", item.delete),
                    ("HEAD", item.head),
                    ("OPTIONS", item.options),
                ];
                let operations = methods
                    .into_iter()
                    .filter_map(|(method, op)| {
                        let op = op?;
                        let mut parameters = op.parameters;
                        parameters.extend(item.parameters.iter().cloned());
                        Some((
                            method.to_string(),
                            Operation {
                                operation_id: op.operation_id,
                                parameters,
                                request_body: op.request_body,
                                documentation_url: op.external_docs.and_then(|d| d.url),
                            },
                        ))
                    })
                    .collect();
                Template {
                    template,
                    segments,
                    operations,
                }
            })
            .collect();
        Contract {
            templates,
            schemas: raw.components.schemas,
            parameters: raw.components.parameters,
            compiled: Mutex::new(HashMap::new()),
        }
    }

    /// Checks one request: `Ok(operation_id)` when `method path` is an operation of the
    /// description and `body` (empty for none) satisfies its request schema, else
    /// `Err(what is wrong)`. `path` may carry a query, which is not checked.
    pub fn check(&self, method: &str, path: &str, body: &[u8]) -> Result<String, String> {
        self.check_request(method, path, body)
            .map(|m| m.operation_id)
            .map_err(|v| v.message)
    }

    /// The operations of the description, as `(METHOD, template, operation_id)`.
    pub fn operations(&self) -> Vec<(String, String, String)> {
        self.templates
            .iter()
            .flat_map(|t| {
                t.operations
                    .iter()
                    .map(|(m, op)| (m.clone(), t.template.clone(), op.operation_id.clone()))
            })
            .collect()
    }

    /// Compiles the request schema of `operation_id` (if it has a JSON one): `Err` when the
    /// translated schema does not compile. For the test that every schema does.
    pub fn compile(&self, operation_id: &str) -> Result<(), String> {
        let op = self
            .templates
            .iter()
            .flat_map(|t| t.operations.iter())
            .map(|(_, op)| op)
            .find(|op| op.operation_id == operation_id)
            .ok_or_else(|| format!("no operation {operation_id}"))?;
        let Some(body) = op.request_body.as_ref().map(|b| self.deref(b)) else {
            return Ok(());
        };
        if body.pointer("/content/application~1json/schema").is_none() {
            return Ok(());
        }
        match &*self.compiled_schema(op, &body) {
            Compiled::Schema(_) => Ok(()),
            Compiled::Broken(e) => Err(e.clone()),
        }
    }

    pub(crate) fn check_request(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> Result<Matched, Violation> {
        let method = method.to_ascii_uppercase();
        let path = path.split_once('?').map_or(path, |(p, _)| p);
        let (template, op) = self.route(&method, path)?;
        let documentation_url = op.documentation_url.clone();
        let violation = |kind: ViolationKind, message: String| Violation {
            kind,
            message,
            documentation_url: documentation_url.clone(),
        };

        let trimmed = body.trim_ascii();
        let request_body = op.request_body.as_ref().map(|b| self.deref(b));
        let Some(request_body) = request_body else {
            if trimmed.is_empty() {
                return Ok(Matched {
                    operation_id: op.operation_id.clone(),
                });
            }
            return Err(violation(
                ViolationKind::Body,
                format!(
                    "{} ({method} {template}) takes no request body, but one was sent",
                    op.operation_id
                ),
            ));
        };
        if trimmed.is_empty() {
            if request_body["required"] == json!(true) {
                return Err(violation(
                    ViolationKind::Body,
                    format!(
                        "{} ({method} {template}) requires a request body, none was sent",
                        op.operation_id
                    ),
                ));
            }
            return Ok(Matched {
                operation_id: op.operation_id.clone(),
            });
        }
        if request_body
            .pointer("/content/application~1json/schema")
            .is_none()
        {
            // Not a JSON operation (markdown, release assets): the double does not check it.
            return Ok(Matched {
                operation_id: op.operation_id.clone(),
            });
        }
        let instance: Value = serde_json::from_slice(trimmed).map_err(|e| {
            violation(
                ViolationKind::NotJson,
                format!("the body is not JSON ({e})"),
            )
        })?;
        match &*self.compiled_schema(op, &request_body) {
            Compiled::Broken(e) => Err(violation(
                ViolationKind::Body,
                format!(
                    "bosun-testkit could not compile the request schema of {}: {e}",
                    op.operation_id
                ),
            )),
            Compiled::Schema(validator) => {
                let errors: Vec<String> = validator
                    .iter_errors(&instance)
                    .map(|e| {
                        let at = e.instance_path().as_str();
                        let at = if at.is_empty() { "the body" } else { at };
                        format!("{at}: {e}")
                    })
                    .collect();
                if errors.is_empty() {
                    Ok(Matched {
                        operation_id: op.operation_id.clone(),
                    })
                } else {
                    let more = errors.len().saturating_sub(MAX_ERRORS);
                    let mut message = format!(
                        "the body does not match the request schema of {}: {}",
                        op.operation_id,
                        errors[..errors.len().min(MAX_ERRORS)].join("; ")
                    );
                    if more > 0 {
                        message.push_str(&format!(" (and {more} more)"));
                    }
                    Err(violation(ViolationKind::Body, message))
                }
            }
        }
    }

    /// The template and operation `method path` is, preferring literal segments over
    /// parameters (as GitHub's router does).
    fn route(&self, method: &str, path: &str) -> Result<(&str, &Operation), Violation> {
        let no_route = |message: String| Violation {
            kind: ViolationKind::NoRoute,
            message,
            documentation_url: None,
        };
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        // Exact segment counts first; then a last `{path}`, `{ref}`… may take the rest.
        let mut candidates: Vec<(&Template, Vec<(String, String)>)> = self
            .templates
            .iter()
            .filter_map(|t| match_template(t, &segments, false).map(|p| (t, p)))
            .collect();
        if candidates.is_empty() {
            candidates = self
                .templates
                .iter()
                .filter_map(|t| match_template(t, &segments, true).map(|p| (t, p)))
                .collect();
        }
        if candidates.is_empty() {
            return Err(no_route(format!(
                "no path of GitHub's REST API matches {path}"
            )));
        }
        candidates.sort_by_key(|(t, _)| literal_key(t));
        let mut bad_params = Vec::new();
        let mut other_methods = BTreeSet::new();
        for (template, params) in &candidates {
            let Some((_, op)) = template.operations.iter().find(|(m, _)| m == method) else {
                other_methods.extend(template.operations.iter().map(|(m, _)| m.as_str()));
                continue;
            };
            match self.integer_params(op, params) {
                Ok(()) => return Ok((&template.template, op)),
                Err(e) => bad_params.push(format!("{} ({}): {e}", template.template, method)),
            }
        }
        if let Some(first) = bad_params.into_iter().next() {
            return Err(no_route(first));
        }
        let template = &candidates[0].0.template;
        Err(no_route(format!(
            "{method} is not an operation of {template} (it has {})",
            other_methods.into_iter().collect::<Vec<_>>().join(", ")
        )))
    }

    /// Every path parameter of `op` whose schema is `integer` parses as one.
    fn integer_params(&self, op: &Operation, params: &[(String, String)]) -> Result<(), String> {
        for param in &op.parameters {
            let param = self.deref(param);
            if param["in"] != "path" {
                continue;
            }
            let Some(name) = param["name"].as_str() else {
                continue;
            };
            let schema = self.deref(&param["schema"]);
            if schema["type"] != "integer" {
                continue;
            }
            if let Some((_, value)) = params.iter().find(|(n, _)| n == name) {
                if value.parse::<i64>().is_err() {
                    return Err(format!(
                        "path parameter {name} must be an integer (got {value:?})"
                    ));
                }
            }
        }
        Ok(())
    }

    /// `value` with a `$ref` to `#/components/{schemas,parameters}/…` followed (a few
    /// levels); anything else as is.
    fn deref(&self, value: &Value) -> Value {
        let mut current = value.clone();
        for _ in 0..MAX_REF_CHAIN {
            let Some(target) = current.get("$ref").and_then(Value::as_str) else {
                return current;
            };
            let resolved = if let Some(name) = target.strip_prefix("#/components/schemas/") {
                self.schemas.get(&unescape(name))
            } else if let Some(name) = target.strip_prefix("#/components/parameters/") {
                self.parameters.get(&unescape(name))
            } else {
                None
            };
            match resolved {
                Some(v) => current = v.clone(),
                None => return Value::Null,
            }
        }
        current
    }

    fn compiled_schema(&self, op: &Operation, request_body: &Value) -> Arc<Compiled> {
        let mut cache = self.compiled.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = cache.get(&op.operation_id) {
            return c.clone();
        }
        let schema = &request_body["content"]["application/json"]["schema"];
        let compiled = match self.json_schema(schema) {
            Ok(document) => match jsonschema::options()
                .with_draft(jsonschema::Draft::Draft7)
                .should_validate_formats(true)
                .build(&document)
            {
                Ok(v) => Compiled::Schema(Box::new(v)),
                Err(e) => Compiled::Broken(e.to_string()),
            },
            Err(e) => Compiled::Broken(e),
        };
        let compiled = Arc::new(compiled);
        cache.insert(op.operation_id.clone(), compiled.clone());
        compiled
    }

    /// The JSON Schema (draft 7) document of an OpenAPI request schema: the translated
    /// schema, with every component schema it reaches under `definitions`.
    fn json_schema(&self, schema: &Value) -> Result<Value, String> {
        let mut wanted = BTreeSet::new();
        let root = translate(schema, &mut wanted);
        let mut definitions = Map::new();
        let mut done = BTreeSet::new();
        while let Some(name) = wanted.difference(&done).next().cloned() {
            done.insert(name.clone());
            if done.len() > MAX_SCHEMAS {
                return Err(format!("more than {MAX_SCHEMAS} referenced schemas"));
            }
            let target = self
                .schemas
                .get(&unescape(&name))
                .ok_or_else(|| format!("$ref to a missing schema {name}"))?;
            definitions.insert(unescape(&name), translate(target, &mut wanted));
        }
        Ok(json!({
            "allOf": [root],
            "definitions": definitions,
        }))
    }
}

/// A JSON pointer token unescaped (`~1` is `/`, `~0` is `~`).
fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn parse_segment(segment: &str) -> Vec<Part> {
    let mut parts = Vec::new();
    let mut rest = segment;
    while !rest.is_empty() {
        match rest.find('{') {
            Some(0) => {
                let end = rest.find('}').unwrap_or(rest.len() - 1);
                parts.push(Part::Param(rest[1..end].to_string()));
                rest = &rest[end + 1..];
            }
            Some(i) => {
                parts.push(Part::Literal(rest[..i].to_string()));
                rest = &rest[i..];
            }
            None => {
                parts.push(Part::Literal(rest.to_string()));
                rest = "";
            }
        }
    }
    parts
}

/// The parameters of `segments` matched against `template`, if it matches. With
/// `rest_in_last`, a last segment that is one of the [`SLASHED_PARAMS`] takes every
/// remaining segment.
fn match_template(
    template: &Template,
    segments: &[&str],
    rest_in_last: bool,
) -> Option<Vec<(String, String)>> {
    let n = template.segments.len();
    let mut params = Vec::new();
    if rest_in_last {
        let slashed = matches!(
            template.segments.last()?.as_slice(),
            [Part::Param(name)] if SLASHED_PARAMS.contains(&name.as_str())
        );
        if !slashed || segments.len() <= n {
            return None;
        }
    } else if segments.len() != n {
        return None;
    }
    for (i, parts) in template.segments.iter().enumerate() {
        let value = if rest_in_last && i == n - 1 {
            segments[i..].join("/")
        } else {
            segments[i].to_string()
        };
        match_segment(parts, &value, &mut params)?;
    }
    Some(params)
}

/// Matches one segment: a `{param}` takes text up to the next literal part (or the end),
/// and must not be empty.
fn match_segment(parts: &[Part], value: &str, params: &mut Vec<(String, String)>) -> Option<()> {
    let mut rest = value;
    for (i, part) in parts.iter().enumerate() {
        match part {
            Part::Literal(text) => rest = rest.strip_prefix(text.as_str())?,
            Part::Param(name) => {
                let taken = match parts.get(i + 1) {
                    Some(Part::Literal(next)) => &rest[..rest.find(next.as_str())?],
                    _ => rest,
                };
                if taken.is_empty() {
                    return None;
                }
                params.push((name.clone(), taken.to_string()));
                rest = &rest[taken.len()..];
            }
        }
    }
    rest.is_empty().then_some(())
}

/// Orders templates literal-first, segment by segment.
fn literal_key(template: &Template) -> Vec<bool> {
    template
        .segments
        .iter()
        .map(|parts| parts.iter().any(|p| matches!(p, Part::Param(_))))
        .collect()
}

/// An OpenAPI 3.0 schema as JSON Schema draft 7: `$ref`s to component schemas point into
/// `#/definitions/` (and are added to `wanted`), `nullable: true` allows `null`, and the
/// OpenAPI-only keywords are dropped. `$ref` siblings are ignored, as OpenAPI 3.0 says,
/// except `nullable`.
fn translate(schema: &Value, wanted: &mut BTreeSet<String>) -> Value {
    let Some(object) = schema.as_object() else {
        // `true`/`false` schemas, or junk: kept as they are.
        return schema.clone();
    };
    let nullable = object.get("nullable") == Some(&Value::Bool(true));
    if let Some(target) = object.get("$ref").and_then(Value::as_str) {
        let reference = match target.strip_prefix("#/components/schemas/") {
            Some(name) => {
                wanted.insert(name.to_string());
                json!({"$ref": format!("#/definitions/{name}")})
            }
            // A reference the double cannot follow: accept anything there.
            None => json!({}),
        };
        return if nullable {
            json!({"anyOf": [{"type": "null"}, reference]})
        } else {
            reference
        };
    }

    let mut out = Map::new();
    for (key, value) in object {
        let translated = match key.as_str() {
            // OpenAPI-only, or annotations whose OpenAPI form is not JSON Schema's.
            "nullable" | "discriminator" | "readOnly" | "writeOnly" | "xml" | "externalDocs"
            | "example" | "examples" | "deprecated" => continue,
            "properties" | "patternProperties" => match value.as_object() {
                Some(map) => Value::Object(
                    map.iter()
                        .map(|(k, v)| (k.clone(), translate(v, wanted)))
                        .collect(),
                ),
                None => value.clone(),
            },
            "allOf" | "anyOf" | "oneOf" => match value.as_array() {
                Some(list) => Value::Array(list.iter().map(|v| translate(v, wanted)).collect()),
                None => value.clone(),
            },
            "items" => match value {
                Value::Array(list) => {
                    Value::Array(list.iter().map(|v| translate(v, wanted)).collect())
                }
                other => translate(other, wanted),
            },
            "additionalProperties" | "not" | "additionalItems" => translate(value, wanted),
            _ => value.clone(),
        };
        out.insert(key.clone(), translated);
    }
    if !nullable {
        return Value::Object(out);
    }
    match out.get("type").cloned() {
        Some(Value::String(t)) => {
            out.insert("type".into(), json!([t, "null"]));
            if let Some(Value::Array(values)) = out.get_mut("enum") {
                if !values.contains(&Value::Null) {
                    values.push(Value::Null);
                }
            }
            Value::Object(out)
        }
        _ => json!({"anyOf": [{"type": "null"}, Value::Object(out)]}),
    }
}

/// The process's contract, or `None` after announcing the skip on stderr once (outside
/// libtest's output capture, so `scripts/test.sh` sees it). With `BOSUN_REQUIRE_TOOLS=1` a
/// missing description panics instead.
pub fn require_contract() -> Option<&'static Contract> {
    if let Some(contract) = Contract::global() {
        return Some(contract);
    }
    if std::env::var("BOSUN_REQUIRE_TOOLS").as_deref() == Ok("1") {
        panic!(
            "{OPENAPI_PACKAGE} {OPENAPI_VERSION} is required (BOSUN_REQUIRE_TOOLS=1) but {} does not exist: run scripts/test.sh (it installs the package into target/npm)",
            Contract::path().display()
        );
    }
    static ANNOUNCED: std::sync::Once = std::sync::Once::new();
    ANNOUNCED.call_once(|| {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED (tool missing): {OPENAPI_PACKAGE} {OPENAPI_VERSION} — the GitHub double serves without checking requests against GitHub's REST description; run scripts/test.sh"
        );
    });
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Contract {
        Contract::from_value(json!({
            "paths": {
                "/repos/{owner}/{repo}/things/{thing_id}": {
                    "get": {"operationId": "things/get", "parameters": [
                        {"$ref": "#/components/parameters/thing-id"}
                    ]},
                    "patch": {
                        "operationId": "things/update",
                        "parameters": [{"$ref": "#/components/parameters/thing-id"}],
                        "requestBody": {"required": true, "content": {"application/json": {
                            "schema": {"type": "object", "properties": {
                                "label": {"type": "string", "nullable": true},
                                "owner": {"$ref": "#/components/schemas/nullable-user"},
                                "kind": {"type": "string", "enum": ["a", "b"]}
                            }, "additionalProperties": false}
                        }}}
                    }
                },
                "/repos/{owner}/{repo}/things/latest": {
                    "get": {"operationId": "things/latest"}
                },
                "/repos/{owner}/{repo}/compare/{base}...{head}": {
                    "get": {"operationId": "repos/compare"}
                },
                "/repos/{owner}/{repo}/contents/{path}": {
                    "get": {"operationId": "repos/get-content"}
                },
                "/repos/{owner}/{repo}": {
                    "get": {"operationId": "repos/get"}
                }
            },
            "components": {
                "parameters": {"thing-id": {"name": "thing_id", "in": "path",
                    "schema": {"type": "integer"}}},
                "schemas": {"nullable-user": {"type": "object", "nullable": true,
                    "properties": {"login": {"type": "string"},
                        "boss": {"$ref": "#/components/schemas/nullable-user"}},
                    "required": ["login"]}}
            }
        }))
        .unwrap()
    }

    #[test]
    fn routes_prefer_literals_and_check_integers() {
        let c = tiny();
        assert_eq!(
            c.check("GET", "/repos/a/b/things/7", b"").unwrap(),
            "things/get"
        );
        assert_eq!(
            c.check("GET", "/repos/a/b/things/latest?x=1", b"").unwrap(),
            "things/latest"
        );
        let e = c.check("GET", "/repos/a/b/things/seven", b"").unwrap_err();
        assert!(e.contains("must be an integer"), "{e}");
        let e = c.check("PUT", "/repos/a/b/things/7", b"").unwrap_err();
        assert!(e.contains("PUT is not an operation"), "{e}");
        assert!(e.contains("GET, PATCH"), "{e}");
        let e = c.check("GET", "/repos/a/b/nothing", b"").unwrap_err();
        assert!(e.contains("no path"), "{e}");
        assert!(c.check("GET", "/repos/a/b/things/7/more", b"").is_err());
        assert_eq!(c.check("GET", "/repos/a/b", b"").unwrap(), "repos/get");
        assert_eq!(
            c.check("GET", "/repos/a/b/compare/main...topic", b"")
                .unwrap(),
            "repos/compare"
        );
        assert!(c.check("GET", "/repos/a/b/compare/main", b"").is_err());
        assert_eq!(
            c.check("GET", "/repos/a/b/contents/dir/file.txt", b"")
                .unwrap(),
            "repos/get-content"
        );
    }

    #[test]
    fn bodies_are_checked_with_nullable_and_refs() {
        let c = tiny();
        let p = "/repos/a/b/things/7";
        let ok = |body: Value| c.check("PATCH", p, body.to_string().as_bytes());
        assert!(ok(json!({"label": "x"})).is_ok());
        assert!(ok(json!({"label": null})).is_ok());
        assert!(ok(json!({"owner": null})).is_ok());
        assert!(ok(json!({"owner": {"login": "a", "boss": {"login": "b", "boss": null}}})).is_ok());
        let e = ok(json!({"owner": {"boss": null}})).unwrap_err();
        assert!(e.contains("login"), "{e}");
        let e = ok(json!({"kind": "c"})).unwrap_err();
        assert!(e.contains("/kind"), "{e}");
        let e = ok(json!({"label": 3})).unwrap_err();
        assert!(e.contains("/label"), "{e}");
        let e = ok(json!({"extra": 1})).unwrap_err();
        assert!(e.contains("extra"), "{e}");
        let e = c.check("PATCH", p, b"").unwrap_err();
        assert!(e.contains("requires a request body"), "{e}");
        let e = c.check("PATCH", p, b"{nope").unwrap_err();
        assert!(e.contains("not JSON"), "{e}");
        let e = c.check("GET", p, b"{}").unwrap_err();
        assert!(e.contains("takes no request body"), "{e}");
    }

    /// Every JSON request schema of GitHub's description translates and compiles.
    #[test]
    fn every_request_schema_of_the_description_compiles() {
        let Some(contract) = require_contract() else {
            return;
        };
        let operations = contract.operations();
        assert!(operations.len() > 500, "{} operations", operations.len());
        let broken: Vec<String> = operations
            .iter()
            .filter_map(|(_, _, id)| contract.compile(id).err().map(|e| format!("{id}: {e}")))
            .collect();
        assert!(broken.is_empty(), "{broken:#?}");
    }
}
