//! The one error type for input that breaks a domain rule, naming the field at fault.

use std::fmt;

/// Input that breaks a rule. `field` is the dotted path of the offending field
/// (`watch_paths[2]`, `depends_on[0].stack`) so a client can point at it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ValidationError {
    pub field: String,
    pub message: String,
}

impl ValidationError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }

    /// Re-roots the error under a parent field: `path` → `depends_on[0].path`.
    pub fn under(mut self, parent: &str) -> Self {
        self.field = if self.field.is_empty() {
            parent.to_string()
        } else if self.field.starts_with('[') {
            format!("{parent}{}", self.field)
        } else {
            format!("{parent}.{}", self.field)
        };
        self
    }
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}
