//! Inventory import over the API: every environment and host of an inventory file
//! created or replaced in one transaction.

use axum::extract::State;
use axum::Json;
use bosun_api::{InventoryImportAnswer, InventoryImportRequest};

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath};
use crate::service::inventory as service;

/// Import an inventory file (org admin) — the YAML `bosun plan exec --inventory` reads:
/// every environment and host in it is created, or replaced when it exists, in one
/// transaction; nothing else changes. `~` in paths stays as written (the runner's home).
#[utoipa::path(post, path = "/api/v1/orgs/{org}/inventory", tag = "plans",
    params(("org" = String, Path)),
    request_body = InventoryImportRequest,
    responses((status = 200, body = InventoryImportAnswer), (status = "4XX", body = bosun_api::ErrorBody)))]
pub async fn import_inventory(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(org): ApiPath<String>,
    ApiJson(body): ApiJson<InventoryImportRequest>,
) -> Result<Json<InventoryImportAnswer>, ApiError> {
    Ok(Json(service::import(&state, &caller, &org, body).await?))
}
