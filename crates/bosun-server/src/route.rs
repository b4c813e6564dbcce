//! One API route: its access policy and handler, with the method and path its handler's
//! `#[utoipa::path]` declares — the one place a route's path is written. Each capability
//! lists its routes in `routes()`; the router (`routes.rs`) and the OpenAPI document
//! (`openapi.rs`) are both built from that list.

use axum::handler::Handler;
use axum::http::Method;
use axum::routing::{self, MethodFilter, MethodRouter};
use bosun_core::authz::Access;
use utoipa::openapi::path::{HttpMethod, Operation, Paths};
use utoipa::openapi::{RefOr, Schema};

use crate::app::AppState;

pub const API_PREFIX: &str = "/api/v1";

/// What a handler's `#[utoipa::path]` declares, as functions (the `__path_<handler>`
/// type utoipa generates): its path, methods, operation and the schemas it names.
#[derive(Clone, Copy)]
pub struct Doc {
    path: fn() -> String,
    methods: fn() -> Vec<HttpMethod>,
    operation: fn() -> Operation,
    tags: fn() -> Vec<&'static str>,
    schemas: fn(&mut Vec<(String, RefOr<Schema>)>),
}

impl Doc {
    pub const fn of<P>() -> Self
    where
        P: utoipa::Path + utoipa::__dev::SchemaReferences + utoipa::__dev::Tags<'static>,
    {
        Doc {
            path: P::path,
            methods: P::methods,
            operation: P::operation,
            tags: <P as utoipa::__dev::Tags<'static>>::tags,
            schemas: <P as utoipa::__dev::SchemaReferences>::schemas,
        }
    }

    /// The path relative to `/api/v1`, with `{param}` segments.
    pub fn path(&self) -> String {
        let full = (self.path)();
        match full.strip_prefix(API_PREFIX) {
            Some(rest) => rest.to_string(),
            None => panic!("documented path {full} is not under {API_PREFIX}"),
        }
    }

    pub fn methods(&self) -> Vec<Method> {
        (self.methods)().into_iter().map(http_method).collect()
    }

    /// Adds this operation and the schemas it names to `paths` and `schemas`.
    pub fn document(&self, paths: &mut Paths, schemas: &mut Vec<(String, RefOr<Schema>)>) {
        let mut operation = (self.operation)();
        let tags = (self.tags)();
        if !tags.is_empty() {
            operation
                .tags
                .get_or_insert_with(Vec::new)
                .extend(tags.iter().map(|t| t.to_string()));
        }
        paths.add_path_operation((self.path)(), (self.methods)(), operation);
        (self.schemas)(schemas);
    }
}

fn http_method(m: HttpMethod) -> Method {
    match m {
        HttpMethod::Get => Method::GET,
        HttpMethod::Put => Method::PUT,
        HttpMethod::Post => Method::POST,
        HttpMethod::Delete => Method::DELETE,
        HttpMethod::Options => Method::OPTIONS,
        HttpMethod::Head => Method::HEAD,
        HttpMethod::Patch => Method::PATCH,
        HttpMethod::Trace => Method::TRACE,
    }
}

/// An API route's access policy, handler and documentation, named as a constant of the
/// capability that serves it when the console also asks about it (`crate::runs::CONFIRM`):
/// its `routes()` builds the route from it ([`Endpoint::route`]) and the console asks it
/// whether a page or button is allowed — so a page cannot name a route that does not
/// exist. Made with [`endpoint!`].
#[derive(Clone, Copy)]
pub struct Endpoint {
    pub access: Access,
    pub doc: Doc,
    /// The handler on the documented method(s).
    handler: fn() -> MethodRouter<AppState>,
}

impl Endpoint {
    pub const fn new(access: Access, doc: Doc, handler: fn() -> MethodRouter<AppState>) -> Self {
        Endpoint {
            access,
            doc,
            handler,
        }
    }

    /// The method the route answers (the first, for a route documented with several).
    pub fn method(&self) -> Method {
        self.doc.methods().into_iter().next().unwrap_or(Method::GET)
    }

    /// The route serving this endpoint.
    pub fn route(self) -> Route {
        Route {
            methods: self.doc.methods(),
            path: self.doc.path(),
            access: self.access,
            body_limit: None,
            handler: (self.handler)(),
            dispatches: false,
            docs: vec![self.doc],
        }
    }
}

/// `handler` on the methods `P` documents.
pub fn on_documented<P, H, T>(handler: H) -> MethodRouter<AppState>
where
    P: utoipa::Path,
    H: Handler<T, AppState>,
    T: 'static,
{
    let filter = P::methods()
        .into_iter()
        .map(|m| match m {
            HttpMethod::Get => MethodFilter::GET,
            HttpMethod::Put => MethodFilter::PUT,
            HttpMethod::Post => MethodFilter::POST,
            HttpMethod::Delete => MethodFilter::DELETE,
            HttpMethod::Options => MethodFilter::OPTIONS,
            HttpMethod::Head => MethodFilter::HEAD,
            HttpMethod::Patch => MethodFilter::PATCH,
            HttpMethod::Trace => MethodFilter::TRACE,
        })
        .reduce(MethodFilter::or)
        // `#[utoipa::path]` refuses to compile without a method.
        .unwrap_or(MethodFilter::GET);
    routing::on(filter, handler)
}

/// `endpoint!(access, handler)`: the [`Endpoint`] serving `handler` (a function with a
/// `#[utoipa::path]`, named by a path like `list` or `api::list`) under `access`.
macro_rules! endpoint {
    ($access:expr, $handler:ident) => {
        pastey::paste! {
            $crate::route::Endpoint::new(
                $access,
                $crate::route::Doc::of::<[<__path_ $handler>]>(),
                || $crate::route::on_documented::<[<__path_ $handler>], _, _>($handler),
            )
        }
    };
    ($access:expr, $module:ident :: $handler:ident) => {
        pastey::paste! {
            $crate::route::Endpoint::new(
                $access,
                $crate::route::Doc::of::<$module::[<__path_ $handler>]>(),
                || $crate::route::on_documented::<$module::[<__path_ $handler>], _, _>(
                    $module::$handler,
                ),
            )
        }
    };
}

/// `route!(access, handler)`: the [`Route`] serving `handler` under `access`.
macro_rules! route {
    ($access:expr, $($handler:tt)+) => {
        $crate::route::endpoint!($access, $($handler)+).route()
    };
}

/// `documents!(handler)`: what `handler`'s `#[utoipa::path]` declares, for a route that
/// documents more than one handler ([`Route::also_documents`]).
macro_rules! documents {
    ($handler:ident) => {
        pastey::paste! { $crate::route::Doc::of::<[<__path_ $handler>]>() }
    };
}

pub(crate) use {documents, endpoint, route};

/// One API route. `path` is relative to `/api/v1` and uses `{param}` segments.
pub struct Route {
    /// Usually one; several for a protocol endpoint whose handler dispatches on the
    /// method itself (the state backend's GET/POST/LOCK/UNLOCK).
    pub methods: Vec<Method>,
    pub path: String,
    pub access: Access,
    /// A body limit for this route instead of the server-wide one.
    pub body_limit: Option<BodyLimitKind>,
    pub(crate) handler: MethodRouter<AppState>,
    /// The handler takes every method and dispatches itself (`any_of`).
    pub(crate) dispatches: bool,
    /// The operations this route serves, for the OpenAPI document.
    pub(crate) docs: Vec<Doc>,
}

/// Which configured limit a route's bodies get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyLimitKind {
    /// `max_state_bytes`: state documents are far larger than API requests.
    State,
}

impl Route {
    /// A route answering several methods (standard or not, like `LOCK`) with one handler
    /// that dispatches on the method; any other method gets 405 from the handler. Its
    /// path is the one `doc` (the handler's `#[utoipa::path]`) declares.
    pub fn any_of<H: Handler<T, AppState>, T: 'static>(
        methods: &[&str],
        access: Access,
        doc: Doc,
        handler: H,
    ) -> Self {
        Route {
            methods: methods
                .iter()
                .filter_map(|m| Method::from_bytes(m.as_bytes()).ok())
                .collect(),
            path: doc.path(),
            access,
            body_limit: None,
            handler: routing::any(handler),
            dispatches: true,
            docs: vec![doc],
        }
    }

    /// Documents another operation this route's handler serves (a dispatching route's
    /// other methods); its path must be this route's.
    pub fn also_documents(mut self, doc: Doc) -> Self {
        assert_eq!(doc.path(), self.path, "a route documents only its own path");
        self.docs.push(doc);
        self
    }

    pub fn with_body_limit(mut self, kind: BodyLimitKind) -> Self {
        self.body_limit = Some(kind);
        self
    }

    /// The full path as served and documented.
    pub fn full_path(&self) -> String {
        format!("{API_PREFIX}{}", self.path)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn an_endpoint_serves_the_method_and_path_its_handler_documents() {
        let route = crate::runs::CONFIRM.route();
        assert_eq!(route.methods, vec![Method::POST]);
        assert_eq!(route.path, "/orgs/{org}/runs/{run}/confirm");
        assert_eq!(route.full_path(), "/api/v1/orgs/{org}/runs/{run}/confirm");
        assert_eq!(crate::state::FORCE_UNLOCK.method(), Method::POST);
        assert_eq!(crate::stacks::LIST.method(), Method::GET);
    }

    #[test]
    fn the_state_backend_documents_both_standard_methods_of_its_one_path() {
        let routes = crate::state::routes();
        let backend = routes
            .iter()
            .find(|r| r.dispatches)
            .map(|r| (r.path.clone(), r.docs.iter().map(Doc::methods).collect()));
        assert_eq!(
            backend,
            Some((
                "/orgs/{org}/stacks/{stack}/state".to_string(),
                vec![vec![Method::GET], vec![Method::POST]]
            ))
        );
    }

    #[test]
    fn no_two_routes_answer_the_same_method_and_path() {
        let mut seen = BTreeSet::new();
        for route in crate::routes::api_routes() {
            for m in &route.methods {
                assert!(
                    seen.insert((m.to_string(), route.path.clone())),
                    "{m} {} is served twice",
                    route.path
                );
            }
        }
        assert!(seen.len() > 90, "{} routes", seen.len());
    }
}
