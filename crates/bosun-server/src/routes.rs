//! The route table: every API route with its method, path and access policy, and the
//! router built from it.
//!
//! Routes are registered only through [`api_routes`], so each one passes the auth guard
//! and the OpenAPI test can check the document against this table.

use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::http::{header, Method, Uri};
use axum::middleware::from_fn_with_state;
use axum::routing;
use axum::{Extension, Router};
use tower_http::trace::{DefaultMakeSpan, DefaultOnResponse, TraceLayer};
use tracing::Level;

use crate::app::AppState;
use crate::auth::{guard, Guard};
use crate::error::ApiError;
use crate::extract::BodyLimit;
use crate::route::{BodyLimitKind, Route, API_PREFIX};

/// Every authenticated API route.
pub fn api_routes() -> Vec<Route> {
    let mut routes = Vec::new();
    routes.extend(crate::tenancy::routes());
    routes.extend(crate::tokens::routes());
    routes.extend(crate::stacks::routes());
    routes.extend(crate::state::routes());
    routes.extend(crate::outputs::routes());
    routes.extend(crate::runs::routes());
    routes.extend(crate::drift::routes());
    routes.extend(crate::runners::routes());
    routes.extend(crate::vcs::routes());
    routes.extend(crate::secrets::routes());
    routes.extend(crate::identity::routes());
    routes.extend(crate::notify::routes());
    routes.extend(crate::plans::resources::routes());
    routes.extend(crate::plans::runs::routes());
    routes.extend(crate::approvals::routes());
    routes.extend(crate::policies::routes());
    routes.extend(crate::plans::schedule::routes());
    routes
}

/// The whole HTTP application.
pub fn router(state: AppState) -> Router {
    let limit = state.config.max_body_bytes;
    let routes = api_routes();
    // The document is the same for the process's life: built once, served as bytes.
    let openapi =
        Bytes::from(serde_json::to_vec(&crate::openapi::document(&routes)).unwrap_or_default());
    let mut app = Router::new();
    for route in routes {
        let guard_state = Guard {
            state: state.clone(),
            access: route.access,
        };
        let path = route.full_path();
        let guard_layer = from_fn_with_state(guard_state, guard);
        // An `any` handler lives in the method router's fallback, which only `layer`
        // reaches; the guard answers 405 itself for methods the route does not take.
        let mut handler = if route.dispatches {
            route.handler.layer(guard_layer)
        } else {
            route.handler.route_layer(guard_layer)
        };
        if let Some(BodyLimitKind::State) = route.body_limit {
            let limit = state.config.max_state_bytes;
            handler = handler
                .layer::<_, std::convert::Infallible>(DefaultBodyLimit::max(limit))
                .layer::<_, std::convert::Infallible>(Extension(BodyLimit(limit)));
        }
        app = app.route(&path, handler);
    }
    app.route(
        &format!("{API_PREFIX}/openapi.json"),
        routing::get(move || async move {
            (
                [(header::CONTENT_TYPE, "application/json")],
                openapi.clone(),
            )
        }),
    )
    .merge(crate::console::router())
    .route("/healthz", routing::get(crate::health::healthz))
    .route("/readyz", routing::get(crate::health::readyz))
    .route("/metrics", routing::get(crate::metrics::serve))
    // The OIDC issuer: public documents, and the request-token endpoint phases call.
    .route(
        "/.well-known/openid-configuration",
        routing::get(crate::identity::discovery),
    )
    .route(
        "/.well-known/jwks.json",
        routing::get(crate::identity::jwks),
    )
    .route(
        crate::identity::TOKEN_PATH,
        routing::get(crate::identity::token),
    )
    // `bosun login`: no token yet (the identity provider vouches for the person).
    .route("/cli-login", routing::post(crate::tokens::cli_login_start))
    .route(
        "/cli-login/poll",
        routing::post(crate::tokens::cli_login_poll),
    )
    .route(
        "/cli-login/exchange",
        routing::post(crate::tokens::cli_login_exchange),
    )
    // Authenticated by its HMAC signature, not a bearer token, so anyone may post a body:
    // its own, smaller cap (`--webhook-max-bytes`), checked by the handler before reading.
    .route(
        "/webhooks/github",
        routing::post(crate::vcs::webhook::receive)
            .layer::<_, std::convert::Infallible>(DefaultBodyLimit::max(
                state.config.webhook_max_bytes,
            ))
            .layer::<_, std::convert::Infallible>(Extension(BodyLimit(
                state.config.webhook_max_bytes,
            ))),
    )
    .fallback(route_not_found)
    .method_not_allowed_fallback(method_not_allowed)
    .layer(DefaultBodyLimit::max(limit))
    .layer(Extension(BodyLimit(limit)))
    .layer(from_fn_with_state(
        state.clone(),
        crate::web_headers::security_headers,
    ))
    .layer(
        TraceLayer::new_for_http()
            .make_span_with(DefaultMakeSpan::new().level(Level::INFO))
            .on_request(|req: &axum::http::Request<_>, _: &tracing::Span| {
                tracing::debug!(method = %req.method(), uri = %req.uri(), "request started");
            })
            .on_response(DefaultOnResponse::new().level(Level::DEBUG)),
    )
    .with_state(state)
}

async fn route_not_found(uri: Uri) -> ApiError {
    ApiError::RouteNotFound(uri.path().to_string())
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::MethodNotAllowed {
        method: method.to_string(),
        path: uri.path().to_string(),
    }
}
