//! `when:` conditions: a small expression language over the template namespaces —
//! comparisons (`==`, `!=`, `<`, `<=`, `>`, `>=`), `and`/`or`/`not`, `in`, parentheses,
//! string/number/bool literals and dotted references (`vars.x`, `host.labels`). A
//! malformed condition fails open: the step runs and a warning is recorded.

use crate::template::Scope;

/// What a condition decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Run,
    Skip,
    /// The condition could not be parsed or evaluated: the step runs (fail open) and
    /// this warning is recorded.
    RunMalformed(String),
}

/// Checks a condition's syntax (for lint and upload): the error says what is wrong.
pub fn check(expr: &str) -> Result<(), String> {
    Err(format!("conditions are not implemented yet: {expr:?}"))
}

/// Evaluates a condition in `scope`.
pub fn decide(expr: &str, _scope: &Scope) -> Decision {
    Decision::RunMalformed(format!("conditions are not implemented yet: {expr:?}"))
}
