//! A stack's outputs over HTTP: the API's handler, an adapter over
//! `crate::service::outputs`.

use axum::extract::State;
use axum::Json;
use bosun_api::StackOutputs;
use bosun_core::authz::Access;
use bosun_core::state::{StateAccess, StateOp};
use serde::Deserialize;

use crate::app::AppState;
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery};
use crate::route::{endpoint, Endpoint, Route};

/// Served by [`show`].
pub const SHOW: Endpoint = endpoint!(Access::State(StateAccess::Op(StateOp::Read)), show);

pub fn routes() -> Vec<Route> {
    // Whoever may read the state may read what it outputs: viewers and up, and run
    // tokens of the stack or of a stack granted to read it.
    vec![SHOW.route()]
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
    Ok(Json(
        crate::service::outputs::show(&state, &org, &stack, q.version).await?,
    ))
}
