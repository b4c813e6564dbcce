//! The server's integration tests: each test boots the real server in-process on a free
//! loopback port with its own temporary data dir, and talks HTTP to it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod approvals;
mod authz;
mod bad_input;
mod console;
mod console_ops;
mod drift;
mod duties;
mod faults_disk;
mod feedback;
mod harness;
mod identity;
mod lists;
mod metrics;
mod notify;
mod openapi;
mod outputs;
mod plan_runs;
mod plans_resources;
mod retention;
mod runners;
mod runs;
mod security_hostile;
mod security_input;
mod security_listener;
mod security_secrets;
mod security_tenancy;
mod security_web;
mod snapshots;
mod stacks;
mod state;
mod tenancy;
mod terraform;
mod tokens;
mod vcs;
