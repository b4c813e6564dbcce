//! The store's SQL, one module per domain: one source compiled into each backend
//! (`sqlite.rs`, `postgres.rs`, each including this directory once), reading that
//! backend's connection, transaction, row and parameter types and its dialect through
//! `db` there. Each domain module holds its rows, statements and rules; `store.rs` is the
//! `impl Store`; `common.rs` the helpers every domain uses.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use bosun_core::run::{transition, Event, RunKind, RunState, STALE_REASON};
use bosun_core::stack::{AwsInput, DependencyInput, DriftInput, StackInput, StackSpec};
use bosun_core::state::{
    decide_lock, decide_unlock, decide_write, Current, Lock, Output, StateDoc, UnlockDecision,
    UnlockRequest, Writer,
};
use bosun_core::token::TokenKind;
use bosun_core::Role;
use chrono::{DateTime, TimeZone, Utc};
use serde_json::{json, Value};

use super::db::{self, params, OptionalExtension, Transaction};
use super::{exists_or, is_foreign_key_violation, is_unique_violation, Connection, Row};
use crate::*;

mod approvals;
pub(super) mod audit;
pub(super) mod common;
mod database;
mod deps;
pub(super) mod drift;
mod duties;
mod feedback;
mod graph;
mod identity;
mod logs;
mod metrics;
mod notify;
mod plan_resources;
mod plan_runs;
mod policies;
mod retention;
mod runners;
mod runs;
mod secrets;
mod sign_in;
mod stacks;
mod state;
mod store;
mod tokens;
mod vcs;

use common::*;
