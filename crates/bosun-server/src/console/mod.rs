//! The console: server-rendered HTML pages at `/` over the same data, service functions
//! and roles as the API.
//!
//! Each page module owns its routes, loads through the API's own handler functions or the
//! store, and renders an askama template from `templates/console/`. Who may see a page or
//! press a button is never decided here: [`Layout::require`] and [`Layout::can`] take the
//! [`Endpoint`] constant of the API route that does the same thing (e.g.
//! `crate::runs::CONFIRM`), the one its router entry is built from, so the console and
//! the API cannot disagree and a page cannot name a route that does not exist. Forms carry the session's CSRF token and
//! answer with a redirect and a one-time message (the refusal's own text when refused).

mod approvals;
mod audit;
mod drift;
mod log;
mod page;
mod plans;
mod policies;
mod run;
mod runners;
pub(crate) mod session;
pub(crate) mod sign_in;
mod stack;
mod stacks;
mod state;

use axum::extract::{Path, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use bosun_core::authz::{authorize, Access};

use crate::app::AppState;
use crate::error::ApiError;
use crate::route::Endpoint;
pub use page::{refusal, render, urlencode, Flash, PageError};
pub(crate) use session::constant_eq;
pub use session::Session;

/// The console's routes, merged into the server's router.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(home))
        .route("/login", get(session::login_form).post(session::login))
        .route("/logout", post(session::logout))
        .merge(sign_in::router())
        .route("/console/static/{file}", get(static_file))
        .merge(stacks::router())
        .merge(stack::router())
        .merge(run::router())
        .merge(state::router())
        .merge(runners::router())
        .merge(approvals::router())
        .merge(plans::router())
        .merge(drift::router())
        .merge(audit::router())
        .layer(axum::middleware::from_fn(session::remember_org))
}

/// What every page shows around its content: who is looking, the org, the navigation.
pub struct Layout {
    pub title: String,
    pub org: String,
    pub orgs: Vec<String>,
    pub user: String,
    pub csrf: String,
    /// Which navigation entry is current (`stacks`, `runners`, …).
    pub nav: &'static str,
    pub flash: Option<Flash>,
    principal: bosun_core::authz::Principal,
}

impl Layout {
    /// The layout of a page of `org`, refused unless the session may read it through the
    /// API endpoint `read` (e.g. `crate::stacks::LIST`).
    pub fn new(
        session: Session,
        org: &str,
        nav: &'static str,
        title: impl Into<String>,
        read: Endpoint,
    ) -> Result<Self, PageError> {
        let layout = Layout {
            title: title.into(),
            org: org.to_string(),
            orgs: session.orgs(),
            user: session.user().to_string(),
            csrf: session.csrf.clone(),
            nav,
            flash: session.flash.clone(),
            principal: session.principal,
        };
        layout.require(read)?;
        Ok(layout)
    }

    /// Refuses, saying why, unless the API would allow `endpoint` in this org.
    pub fn require(&self, endpoint: Endpoint) -> Result<(), PageError> {
        let refused =
            |d: bosun_core::authz::Denial| PageError::Api(ApiError::Forbidden(d.to_string()));
        authorize(&self.principal, endpoint.access, Some(&self.org)).map_err(refused)?;
        // State routes are decided per operation (as the API's guard does); for people,
        // whose sessions these are, the stack does not change the answer.
        if let Access::State(sel) = endpoint.access {
            if let Some(op) = sel.op(endpoint.method().as_str()) {
                bosun_core::state::authorize_state(&self.principal, op, &self.org, "")
                    .map_err(refused)?;
            }
        }
        Ok(())
    }

    /// Whether the API would allow `endpoint` here: buttons show only when it would.
    pub fn can(&self, endpoint: Endpoint) -> bool {
        self.require(endpoint).is_ok()
    }

    /// The caller as the API handlers take it, for actions done through them.
    pub fn caller(&self) -> crate::auth::Caller {
        crate::auth::Caller(self.principal.clone())
    }
}

/// The query of a console log stream: the page's last chunk, so the stream goes on from
/// there. Stack runs and plan runs both hand it to their API stream as a `LogsQuery`.
#[derive(serde::Deserialize)]
pub struct StreamQuery {
    after: Option<i64>,
}

impl StreamQuery {
    pub fn into_api(self) -> crate::extract::ApiQuery<crate::logs::LogsQuery> {
        crate::extract::ApiQuery(crate::logs::LogsQuery {
            after: self.after,
            limit: None,
        })
    }
}

/// `GET /`: the org this browser looked at last, if the user is still a member; else the
/// first of the user's orgs that has stacks (its stacks), else plans (its plans), else
/// the first org; or the login page.
async fn home(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    session: Result<Session, PageError>,
) -> Response {
    let s = match session {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    let orgs = s.orgs();
    if let Some(last) = session::last_org(&headers).filter(|o| orgs.iter().any(|m| m == o)) {
        let page = match first_with_content(&state, &[last.to_string()]).await {
            Ok(Some((_, page))) => page,
            Ok(None) => "stacks",
            Err(e) => return PageError::Api(e).into_response(),
        };
        return Redirect::to(&format!("/orgs/{last}/{page}")).into_response();
    }
    let Some(first) = orgs.first() else {
        return PageError::Api(ApiError::Forbidden(format!(
            "{} is not a member of any org; an admin adds members with `bosun org member add`",
            s.user()
        )))
        .into_response();
    };
    match first_with_content(&state, &orgs).await {
        Ok(Some((org, page))) => {
            Redirect::to(&format!("/orgs/{}/{page}", urlencode(&org))).into_response()
        }
        Ok(None) => Redirect::to(&format!("/orgs/{}/stacks", urlencode(first))).into_response(),
        Err(e) => PageError::Api(e).into_response(),
    }
}

/// The first of `orgs` with a stack (its stacks page), else the first with a plan (its
/// plans page).
async fn first_with_content(
    state: &AppState,
    orgs: &[String],
) -> Result<Option<(String, &'static str)>, ApiError> {
    for org in orgs {
        if !state.store.list_stacks(org, None, 1).await?.is_empty() {
            return Ok(Some((org.clone(), "stacks")));
        }
    }
    for org in orgs {
        if !state.store.list_plans(org).await?.is_empty() {
            return Ok(Some((org.clone(), "plans")));
        }
    }
    Ok(None)
}

const CSS: &str = include_str!("../../static/console.css");
const JS: &str = include_str!("../../static/console.js");

/// The console's stylesheet and script, built into the binary.
async fn static_file(Path(file): Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "console.css" => (CSS, "text/css; charset=utf-8"),
        "console.js" => (JS, "text/javascript; charset=utf-8"),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    (
        [
            (CONTENT_TYPE, HeaderValue::from_static(kind)),
            (
                CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=300"),
            ),
        ],
        body,
    )
        .into_response()
}

/// "3m 20s ago"-style ages for people; exact times stay in the `title`/`datetime`.
pub fn age(from: chrono::DateTime<chrono::Utc>) -> String {
    let secs = (chrono::Utc::now() - from).num_seconds().max(0);
    duration_text(secs)
}

/// "1h 5m", "42s": a whole number of seconds for people.
pub fn duration_text(secs: i64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m {}s", s / 60, s % 60),
        s if s < 86400 => format!("{}h {}m", s / 3600, (s % 3600) / 60),
        s => format!("{}d {}h", s / 86400, (s % 86400) / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration_text(5), "5s");
        assert_eq!(duration_text(200), "3m 20s");
        assert_eq!(duration_text(3900), "1h 5m");
        assert_eq!(duration_text(90000), "1d 1h");
        assert_eq!(urlencode("a b/c?"), "a%20b/c%3F");
    }
}
