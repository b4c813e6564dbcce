//! Bosun's host-plan engine: ordered steps run per host over SSH (or locally), usable
//! with no server (`bosun plan exec`) and by runners for plans stored on the server.
//!
//! - [`model`]: plan and inventory files, parsed in two stages (raw YAML → validated),
//!   errors with file, line and column; lint.
//! - [`template`]: `{{ vars.x }}`, `{{ env.x }}`, `{{ inputs.x }}`, `{{ host.* }}`,
//!   unresolved references collected (or refused with `strict_vars`).
//! - [`condition`]: the `when:` expression language; a malformed condition fails open.
//! - [`facts`]: `host.facts.*` (OS family, distribution, version, arch, hostname),
//!   gathered with one command per host, only for runs that refer to them.
//! - [`lineinfile`]: `file.lineinfile`, byte-identical to Ansible's `lineinfile`.
//! - `pyre` (crate-private): Python's `re` on bytes patterns, translated to `fancy_regex`
//!   for `lineinfile`.
//! - [`connection`]: `local` and `ssh` connections (host keys verified, stdin closed,
//!   non-interactive sudo) and the staged host check.
//! - [`modules`] and [`exec`]: the modules (raw commands, files, packages, users and
//!   groups), the executor (step by step across hosts, bounded parallelism, halting,
//!   timeouts) and the dry run.
//! - [`live`]: raw commands' output as they print it, in lines, bounded per step and host.

pub mod condition;
pub mod connection;
pub mod exec;
pub mod facts;
pub mod host_source;
pub mod lineinfile;
pub mod live;
pub mod model;
pub mod modules;
mod pyre;
pub mod template;
