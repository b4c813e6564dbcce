//! Bosun's HTTP server: the API under `/api/v1`, health probes, authorization, error
//! mapping and the OpenAPI document, over a [`bosun_store::Store`].
//!
//! Each capability is a module that owns its routes and their handlers (`stacks`,
//! `tenancy`, `tokens`, …); the handlers only adapt HTTP to the capability's work and
//! rules in `service::<domain>`, which the console's pages and the background duties
//! call too. The cross-cutting pieces every route passes through are `auth` (who is
//! calling, may they), `error` (the one mapping to HTTP) and `extract` (request bodies
//! and queries with errors in our format).

mod app;
mod approvals;
pub mod auth;
mod b64url;
mod bootstrap;
pub mod config;
mod console;
mod drift;
mod duties;
pub mod error;
mod extract;
mod fencing;
mod health;
mod http_out;
pub mod identity;
mod listener;
mod logs;
mod metrics;
pub mod notify;
pub mod openapi;
mod outputs;
mod paging;
mod plans;
mod policies;
mod prepare;
pub mod retention;
pub mod route;
pub mod routes;
mod runners;
mod runs;
pub mod schedules;
pub mod secrets;
mod server;
pub mod service;
pub mod sign_in;
mod stacks;
mod start_error;
mod state;
mod tenancy;
pub mod tls;
mod tokens;
pub mod vcs;
mod web_headers;

pub use app::AppState;
pub use config::{ConfigError, ConfigOverrides, FileConfig, ServerConfig};
pub use server::{RunningServer, StartError};
