//! A stack's outputs: those of its current state version (or any version), compared with
//! the version before it by `bosun_core::outputs`.
//!
//! Outputs are read from the versions the state backend stored; nothing is kept beside
//! them. Values of outputs that are sensitive — in either version of a comparison — never
//! leave this module: the wire shows `null` and says that the output changed.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use bosun_api::{
    OutputChangeKind, OutputSensitivityChange, StackOutput, StackOutputChange, StackOutputs,
};
use bosun_core::authz::Access;
use bosun_core::outputs::{compare, ChangeKind, OutputChange, SensitivityChange};
use bosun_core::state::{Output, StateAccess, StateOp};
use serde::Deserialize;
use serde_json::Value;

use crate::app::AppState;
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery};
use crate::route::{Endpoint, Route};

/// `GET /orgs/{org}/stacks/{stack}/outputs`
pub const SHOW: Endpoint = Endpoint::get(
    "/orgs/{org}/stacks/{stack}/outputs",
    Access::State(StateAccess::Op(StateOp::Read)),
);

pub fn routes() -> Vec<Route> {
    // Whoever may read the state may read what it outputs: viewers and up, and run
    // tokens of the stack or of a stack granted to read it.
    vec![SHOW.route(show)]
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct OutputsQuery {
    /// Show this state version (compared with the one before it) instead of the current.
    pub version: Option<i64>,
}

/// The stack's outputs — of its current state version, or of `?version=N` — each
/// compared with the version numbered just before it (late writes included). Sensitive
/// values are `null`, and changes of outputs sensitive in either version carry no
/// values. A stack with no state has no version, outputs or changes.
#[utoipa::path(get, path = "/api/v1/orgs/{org}/stacks/{stack}/outputs", tag = "state",
    params(("org" = String, Path), ("stack" = String, Path), OutputsQuery),
    responses((status = 200, body = StackOutputs), (status = 404, body = bosun_api::ErrorBody)))]
pub async fn show(
    State(state): State<AppState>,
    ApiPath((org, stack)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<OutputsQuery>,
) -> Result<Json<StackOutputs>, ApiError> {
    if state.store.get_stack(&org, &stack).await?.is_none() {
        return Err(ApiError::NotFound(format!(
            "stack {stack:?} in org {org:?}"
        )));
    }
    let Some((meta, body)) = state.store.state_version(&org, &stack, q.version).await? else {
        return match q.version {
            Some(n) => Err(ApiError::NotFound(format!(
                "state version {n} of stack {stack:?}"
            ))),
            None => Ok(Json(StackOutputs {
                version: None,
                serial: None,
                previous_version: None,
                outputs: BTreeMap::new(),
                changes: Vec::new(),
                changed: false,
            })),
        };
    };
    let previous = state
        .store
        .list_state_versions(&org, &stack, Some(meta.version), 1)
        .await?
        .into_iter()
        .next();
    let empty = BTreeMap::new();
    let before = previous.as_ref().map_or(&empty, |p| &p.outputs);
    let changes = compare(before, &meta.outputs);
    let types = declared_types(&body);
    Ok(Json(StackOutputs {
        version: Some(meta.version),
        serial: Some(meta.serial),
        previous_version: previous.as_ref().map(|p| p.version),
        changed: bosun_core::outputs::changed(&changes),
        changes: changes
            .iter()
            .map(|c| change_wire(c, before, &meta.outputs))
            .collect(),
        outputs: meta
            .outputs
            .iter()
            .map(|(name, o)| {
                let output = StackOutput {
                    output_type: types.get(name).cloned(),
                    sensitive: o.sensitive,
                    value: shown(o),
                };
                (name.clone(), output)
            })
            .collect(),
    }))
}

fn shown(o: &Output) -> Value {
    if o.sensitive {
        Value::Null
    } else {
        o.value.clone()
    }
}

/// The `type` each output declares in the state document, where it has one (Terraform
/// and OpenTofu write it; hand-made documents may not). An unreadable document — the
/// backend refused those on write — simply declares none.
fn declared_types(body: &[u8]) -> BTreeMap<String, Value> {
    let Ok(doc) = serde_json::from_slice::<Value>(body) else {
        return BTreeMap::new();
    };
    doc.get("outputs")
        .and_then(Value::as_object)
        .map(|outs| {
            outs.iter()
                .filter_map(|(name, o)| {
                    o.get("type")
                        .filter(|t| !t.is_null())
                        .map(|t| (name.clone(), t.clone()))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn change_wire(
    c: &OutputChange,
    previous: &BTreeMap<String, Output>,
    current: &BTreeMap<String, Output>,
) -> StackOutputChange {
    let hidden = c.involves_sensitive();
    let value_of = |outputs: &BTreeMap<String, Output>| {
        (!hidden)
            .then(|| outputs.get(&c.name).map(|o| o.value.clone()))
            .flatten()
    };
    let (show_previous, show_current) = match c.kind {
        ChangeKind::Changed => (true, true),
        ChangeKind::Removed => (true, false),
        ChangeKind::Added => (false, true),
        ChangeKind::SensitivityChanged | ChangeKind::Unchanged => (false, false),
    };
    StackOutputChange {
        name: c.name.clone(),
        change: match c.kind {
            ChangeKind::Added => OutputChangeKind::Added,
            ChangeKind::Removed => OutputChangeKind::Removed,
            ChangeKind::Changed => OutputChangeKind::Changed,
            ChangeKind::SensitivityChanged => OutputChangeKind::SensitivityChanged,
            ChangeKind::Unchanged => OutputChangeKind::Unchanged,
        },
        sensitivity: c.sensitivity().map(|s| match s {
            SensitivityChange::BecameSensitive => OutputSensitivityChange::BecameSensitive,
            SensitivityChange::NoLongerSensitive => OutputSensitivityChange::NoLongerSensitive,
        }),
        sensitive: hidden,
        previous: if show_previous {
            value_of(previous)
        } else {
            None
        },
        current: if show_current {
            value_of(current)
        } else {
            None
        },
    }
}
