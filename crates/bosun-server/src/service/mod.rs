//! The service layer: each capability's work and rules as plain functions over
//! [`crate::app::AppState`] — called by the JSON API's handlers, the console's pages and
//! the background duties alike, which only adapt their inputs and outputs.

pub mod approvals;
pub mod cli_login;
pub mod drift;
pub mod environments;
pub mod host_sources;
pub mod hosts;
pub mod identities;
pub mod identity;
pub mod inventory;
pub mod notify;
pub mod outputs;
pub mod plan_runs;
pub mod plan_schedules;
pub mod plans;
pub mod policies;
pub mod runners;
pub mod runs;
pub mod secrets;
pub mod sessions;
pub mod stacks;
pub mod state;
pub mod tenancy;
pub mod tokens;
pub mod triggers;

use std::collections::BTreeMap;

use bosun_core::plan_resources as rules;
use bosun_core::ValidationError;
use serde_json::Value;

use crate::error::ApiError;

/// `Ok` when the store deleted the org's `kind` named `name`; 404 naming it when there
/// was none.
pub(crate) fn deleted(done: bool, kind: &str, name: &str, org: &str) -> Result<(), ApiError> {
    if done {
        Ok(())
    } else {
        Err(ApiError::NotFound(format!(
            "{kind} {name:?} in org {org:?}"
        )))
    }
}

/// A request's `field` refused with `message` (400 `validation_failed`).
pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> ApiError {
    ValidationError::new(field, message).into()
}

/// A request's `vars`, checked by `bosun_core::plan_resources::vars`: absent or `null`
/// is none.
pub(crate) fn vars_of(field: &str, v: Option<&Value>) -> Result<BTreeMap<String, Value>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(v) => Ok(rules::vars(field, v)?),
    }
}
