//! Plan and inventory files: YAML → raw serde structures → validated model, with file,
//! line and column on every error; and lint (malformed conditions, unresolvable
//! references) before anything runs.

use std::path::Path;

use super::{Inventory, Location, ModelError, Plan};

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

/// Parses a plan file's text; `file` names it in errors (and resolves `src:` paths).
pub fn parse_plan(file: &Path, _text: &str) -> Result<Plan, ModelError> {
    Err(ModelError {
        location: Location {
            file: file.display().to_string(),
            line: 1,
            column: 1,
        },
        message: "plan files are not implemented yet".into(),
    })
}

/// Parses an inventory file's text.
pub fn parse_inventory(file: &Path, _text: &str) -> Result<Inventory, ModelError> {
    Err(ModelError {
        location: Location {
            file: file.display().to_string(),
            line: 1,
            column: 1,
        },
        message: "inventory files are not implemented yet".into(),
    })
}

/// Lints a parsed plan (with its inventory when given, so references resolve).
pub fn lint(_plan: &Plan, _inventory: Option<&Inventory>) -> LintReport {
    LintReport::default()
}
