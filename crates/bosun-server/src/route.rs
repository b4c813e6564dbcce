//! One API route: its method(s), path, access policy and handler, as each capability
//! declares it in its `routes()` (the router in `routes.rs` builds them all).

use axum::handler::Handler;
use axum::http::Method;
use axum::routing::{self, MethodRouter};
use bosun_core::authz::Access;

use crate::app::AppState;

pub const API_PREFIX: &str = "/api/v1";

/// An API route's method, path and access policy, named once as a constant of the
/// capability that serves it: its `routes()` builds the route from it
/// ([`Endpoint::route`]) and the console asks it whether a page or button is allowed —
/// so a page cannot name a route that does not exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub method: Verb,
    /// Relative to `/api/v1`, with `{param}` segments.
    pub path: &'static str,
    pub access: Access,
}

/// The methods of [`Endpoint`]s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

impl Verb {
    pub fn method(self) -> Method {
        match self {
            Verb::Get => Method::GET,
            Verb::Post => Method::POST,
            Verb::Put => Method::PUT,
            Verb::Patch => Method::PATCH,
            Verb::Delete => Method::DELETE,
        }
    }
}

impl Endpoint {
    pub const fn get(path: &'static str, access: Access) -> Self {
        Endpoint {
            method: Verb::Get,
            path,
            access,
        }
    }
    pub const fn post(path: &'static str, access: Access) -> Self {
        Endpoint {
            method: Verb::Post,
            path,
            access,
        }
    }

    /// The route serving this endpoint with `handler`.
    pub fn route<H: Handler<T, AppState>, T: 'static>(self, handler: H) -> Route {
        Route::with(self.method.method(), self.path, self.access, handler)
    }
}

/// One API route. `path` is relative to `/api/v1` and uses `{param}` segments.
pub struct Route {
    /// Usually one; several for a protocol endpoint whose handler dispatches on the
    /// method itself (the state backend's GET/POST/LOCK/UNLOCK).
    pub methods: Vec<Method>,
    pub path: &'static str,
    pub access: Access,
    /// A body limit for this route instead of the server-wide one.
    pub body_limit: Option<BodyLimitKind>,
    pub(crate) handler: MethodRouter<AppState>,
    /// The handler takes every method and dispatches itself (`any_of`).
    pub(crate) dispatches: bool,
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
