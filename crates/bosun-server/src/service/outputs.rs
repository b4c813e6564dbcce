//! A stack's outputs: those of its current state version (or any version), compared with
//! the version before it by `bosun_core::outputs` — the work behind the API's handler and
//! the console's stack page. Values of outputs that are sensitive — in either version of
//! a comparison — never leave this module: the wire shows `null` and says that the
//! output changed.

use std::collections::BTreeMap;

use bosun_api::{
    OutputChangeKind, OutputSensitivityChange, StackOutput, StackOutputChange, StackOutputs,
};
use bosun_core::outputs::{compare, ChangeKind, OutputChange, SensitivityChange};
use bosun_core::state::Output;
use serde_json::Value;

use crate::app::AppState;
use crate::error::ApiError;

/// The stack's outputs at `version` (the current one when `None`), compared with the
/// version numbered just before it — unless retention deleted that one, which the answer
/// says (`previous_pruned`) instead of comparing with an older one.
pub async fn show(
    state: &AppState,
    org: &str,
    stack: &str,
    version: Option<i64>,
) -> Result<StackOutputs, ApiError> {
    if state.store.get_stack(org, stack).await?.is_none() {
        return Err(ApiError::NotFound(format!(
            "stack {stack:?} in org {org:?}"
        )));
    }
    let Some((meta, body)) = state.store.state_version(org, stack, version).await? else {
        return match version {
            Some(n) => Err(ApiError::NotFound(format!(
                "state version {n} of stack {stack:?}"
            ))),
            None => Ok(StackOutputs {
                version: None,
                serial: None,
                previous_version: None,
                previous_pruned: false,
                outputs: BTreeMap::new(),
                changes: Vec::new(),
                changed: false,
            }),
        };
    };
    // The version numbered just before, or none: retention may have deleted it (a version
    // numbered further back is no "previous" to compare with).
    let previous = state
        .store
        .list_state_versions(org, stack, Some(meta.version), 1)
        .await?
        .into_iter()
        .next()
        .filter(|p| p.version == meta.version - 1);
    let previous_pruned = previous.is_none() && meta.version > 1;
    let empty = BTreeMap::new();
    let before = previous.as_ref().map_or(&empty, |p| &p.outputs);
    let changes = match previous_pruned {
        true => Vec::new(),
        false => compare(before, &meta.outputs),
    };
    let types = declared_types(&body);
    Ok(StackOutputs {
        version: Some(meta.version),
        serial: Some(meta.serial),
        previous_version: previous.as_ref().map(|p| p.version),
        previous_pruned,
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
    })
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
