//! The route table: every API route with its method, path and access policy, and the
//! router built from it.
//!
//! Routes are registered only through [`api_routes`], so each one passes the auth guard
//! and the OpenAPI test can check the document against this table.

use axum::extract::DefaultBodyLimit;
use axum::handler::Handler;
use axum::http::{Method, Uri};
use axum::middleware::from_fn_with_state;
use axum::routing::{self, MethodRouter};
use axum::{Extension, Router};
use bosun_core::authz::Access;
use tower_http::trace::{DefaultMakeSpan, DefaultOnResponse, TraceLayer};
use tracing::Level;

use crate::auth::{guard, Guard};
use crate::error::ApiError;
use crate::extract::BodyLimit;
use crate::server::AppState;

pub const API_PREFIX: &str = "/api/v1";

/// One API route. `path` is relative to `/api/v1` and uses `{param}` segments.
pub struct Route {
    /// Usually one; several for a protocol endpoint whose handler dispatches on the
    /// method itself (the state backend's GET/POST/LOCK/UNLOCK).
    pub methods: Vec<Method>,
    pub path: &'static str,
    pub access: Access,
    /// A body limit for this route instead of the server-wide one.
    pub body_limit: Option<BodyLimitKind>,
    handler: MethodRouter<AppState>,
    /// The handler takes every method and dispatches itself (`any_of`).
    dispatches: bool,
}

/// Which configured limit a route's bodies get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyLimitKind {
    /// `max_state_bytes`: state documents are far larger than API requests.
    State,
}

impl Route {
    fn with<H, T>(method: Method, path: &'static str, access: Access, handler: H) -> Self
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        let handler = match method.as_str() {
            "POST" => routing::post(handler),
            "PUT" => routing::put(handler),
            "PATCH" => routing::patch(handler),
            "DELETE" => routing::delete(handler),
            _ => routing::get(handler),
        };
        Route {
            methods: vec![method],
            path,
            access,
            body_limit: None,
            handler,
            dispatches: false,
        }
    }

    /// A route answering several methods (standard or not, like `LOCK`) with one handler
    /// that dispatches on the method; any other method gets 405 from the handler.
    pub fn any_of<H: Handler<T, AppState>, T: 'static>(
        methods: &[&str],
        p: &'static str,
        a: Access,
        h: H,
    ) -> Self {
        Route {
            methods: methods
                .iter()
                .filter_map(|m| Method::from_bytes(m.as_bytes()).ok())
                .collect(),
            path: p,
            access: a,
            body_limit: None,
            handler: routing::any(h),
            dispatches: true,
        }
    }

    pub fn with_body_limit(mut self, kind: BodyLimitKind) -> Self {
        self.body_limit = Some(kind);
        self
    }

    pub fn get<H: Handler<T, AppState>, T: 'static>(p: &'static str, a: Access, h: H) -> Self {
        Self::with(Method::GET, p, a, h)
    }
    pub fn post<H: Handler<T, AppState>, T: 'static>(p: &'static str, a: Access, h: H) -> Self {
        Self::with(Method::POST, p, a, h)
    }
    pub fn put<H: Handler<T, AppState>, T: 'static>(p: &'static str, a: Access, h: H) -> Self {
        Self::with(Method::PUT, p, a, h)
    }
    pub fn patch<H: Handler<T, AppState>, T: 'static>(p: &'static str, a: Access, h: H) -> Self {
        Self::with(Method::PATCH, p, a, h)
    }
    pub fn delete<H: Handler<T, AppState>, T: 'static>(p: &'static str, a: Access, h: H) -> Self {
        Self::with(Method::DELETE, p, a, h)
    }

    /// The full path as served and documented.
    pub fn full_path(&self) -> String {
        format!("{API_PREFIX}{}", self.path)
    }
}

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
    routes.extend(crate::plans::schedule::routes());
    routes
}

/// The whole HTTP application.
pub fn router(state: AppState) -> Router {
    let limit = state.config.max_body_bytes;
    let mut app = Router::new();
    for route in api_routes() {
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
        routing::get(crate::openapi::serve),
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
