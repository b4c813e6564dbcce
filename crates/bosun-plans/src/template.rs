//! Templating: `{{ vars.x }}`, `{{ env.x }}`, `{{ inputs.x }}`, `{{ host.name }}`,
//! `{{ host.address }}`, `{{ host.labels }}`. `vars` is the merged value — plan vars <
//! environment vars < host vars < inputs. An unresolved reference renders empty and is
//! collected (the caller warns, or fails with `strict_vars`).

use std::collections::BTreeMap;

use crate::model::{Host, Inventory, Plan, Value};

/// The host facts templates see.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HostInfo {
    pub name: String,
    pub address: String,
    pub labels: Vec<String>,
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
        _plan: &Plan,
        _inventory: &Inventory,
        host: &Host,
        _inputs: &BTreeMap<String, Value>,
    ) -> Scope {
        Scope {
            host: HostInfo {
                name: host.name.clone(),
                address: host.address.clone(),
                labels: host.labels.clone(),
            },
            ..Scope::default()
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

/// Renders one template string in `scope`.
pub fn render(template: &str, _scope: &Scope) -> Result<Rendered, TemplateError> {
    Ok(Rendered {
        text: template.to_string(),
        unresolved: Vec::new(),
    })
}
