//! The OpenAPI document, generated from the routes it is given (the router gives
//! `api_routes`, once at start): each route's handler annotation (`#[utoipa::path]`) and
//! the wire types it names.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::route::Route;

#[derive(OpenApi)]
#[openapi(
    info(title = "Bosun API", description = "Bosun control plane: stacks, runs, state, plans."),
    modifiers(&BearerAuth),
    security(("bearer" = []))
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The generated document: the API's description, and the operation each of `routes`
/// (the router's `api_routes`) serves, as its handler's `#[utoipa::path]` declares it.
pub fn document(routes: &[Route]) -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    let mut schemas = Vec::new();
    for route in routes {
        for op in &route.docs {
            op.document(&mut doc.paths, &mut schemas);
        }
    }
    doc.components
        .get_or_insert_with(Default::default)
        .schemas
        .extend(schemas);
    doc
}
