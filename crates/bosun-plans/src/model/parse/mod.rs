//! Plan and inventory files: YAML → raw serde structures → validated model, with file,
//! line and column on every error; and lint (malformed conditions, unresolvable
//! references) before anything runs.
//!
//! The stages, run in this order by [`parse_plan`] and [`parse_inventory`] once the
//! text is within the limits (`bounds.rs`):
//!
//! 1. **Index** (`index.rs`). The text is read once as YAML events (`yaml-rust2`) into a
//!    map from each value's path (`steps[1].timeout`, `hosts.web-1.port`) to where the
//!    value and its key start. Duplicate keys, which serde would silently collapse, are
//!    refused here, at the second key.
//! 2. **Raw** (`raw.rs`). `serde_norway` reads the text into raw structures that mirror
//!    the file (unknown fields refused, every field optional); syntax and type errors
//!    carry its line and column.
//! 3. **Validate** (`plan.rs`, `inventory.rs`). Raw structures become the model; every
//!    semantic error is placed with the index at the key or value that is wrong.
//!
//! [`lint()`] (`lint.rs`) then works on a parsed plan.
//!
//! Format decisions:
//! - `command:` is a list (argv as written) or a string split into words the way a
//!   POSIX shell splits them — `'single'` quotes literal, `"double"` quotes with `\`
//!   escaping `"`, `\`, `$` and `` ` ``, a backslash outside quotes escaping the next
//!   character — with no expansion of any kind, and `{{ … }}`/`{% … %}` kept whole
//!   even when they hold spaces or quotes. Shell operators (`|`, `>`, `&&`) are plain
//!   words there: use `shell` for them.
//! - `shell:` is a string or `{cmd}`; `script:` is a path or `{src, args}` (`args` a
//!   list or a string split like `command`); `src` (script and `file.copy`) is relative
//!   to the plan file's folder.
//! - `timeout:` is a number of seconds or a duration: `90`, `60s`, `2m`, `1h30m`,
//!   `500ms`, `1.5s` (units `ms`, `s`, `m`, `h`, `d`), greater than zero.
//! - `mode:` is a string of octal digits (`"0644"`, unquoted `0644` reads as that string
//!   too) or a template; a YAML number (`644`, `0o644`) is refused as ambiguous.
//! - `package`'s `name` is a name or a list of names; `cache_valid_time` is whole
//!   seconds or a duration like `timeout`'s. `user`'s and `group`'s `uid`/`gid` are a
//!   YAML integer or a string of digits (or a template); names, paths, comments and key
//!   lines written literally are checked here, templates once they render. Parameters
//!   that cannot apply are refused (`shell` with `state: absent`, `remove` without it,
//!   `append` without `groups`, `cache_valid_time` with `state: absent`).
//! - A step without `name` is named after its module. `when:` conditions and templates
//!   are kept as written: a malformed one does not stop parsing (it fails open at run
//!   time); lint reports it.
//! - Inventory: hosts keep file order; a host inherits `user`, `port`,
//!   `identity_file`, `known_hosts`, `connection` and `proxy_jump` from `defaults`;
//!   `address` defaults to the name and `port` to 22; a leading `~` in a path is the home
//!   folder; `proxy_jump` names a bastion among the inventory's hosts (`inventory.rs`).

mod index;
mod inventory;
mod lint;
mod plan;
mod raw;

use std::path::Path;

use serde::Deserialize;

use super::bounds::{check_limits, Limits};
use super::{Inventory, Location, ModelError, Plan};
use index::Index;
pub use inventory::{resolve_jumps, Jump, JumpError, UnresolvedInventory, MAX_JUMPS};
pub(crate) use lint::module_templates;
pub use lint::{lint, LintFinding, LintReport};
pub use plan::MODULES;
use raw::{yaml_error, RawInventory, RawPlan};

/// Parses a plan file's text; `file` names it in errors (and resolves `src:` paths).
pub fn parse_plan(file: &Path, text: &str) -> Result<Plan, ModelError> {
    let name = file.display().to_string();
    let (ix, raw): (Index, RawPlan) = read(&name, "plan", text, |parent| match parent {
        "" => Some("plan field"),
        "inputs" => Some("input"),
        "vars" => Some("variable"),
        _ if (parent.starts_with("steps[") || parent.starts_with("handlers["))
            && !parent.contains('.') =>
        {
            Some("step key")
        }
        "health_check" => Some("step key"),
        _ => None,
    })?;
    let base = file.parent().unwrap_or_else(|| Path::new(""));
    plan::validate(&ix, base, raw)
}

/// Parses an inventory file's text (`~/…` paths are this machine's home folder).
pub fn parse_inventory(file: &Path, text: &str) -> Result<Inventory, ModelError> {
    read_inventory(file, text, true)
}

/// Parses an inventory to be used on another machine (the server stores it for its
/// runners): `identity_file` and `known_hosts` stay as written, `~` included.
pub fn parse_inventory_as_written(file: &Path, text: &str) -> Result<Inventory, ModelError> {
    read_inventory(file, text, false)
}

/// Parses an inventory as [`parse_inventory_as_written`] does, but leaves its bastions
/// unresolved: a `proxy_jump` may name a host the file does not have (the server's
/// import: a host of the org). Resolve them with [`resolve_jumps`] once every host is
/// known. Everything else is checked, and each error located, as in a full parse.
pub fn parse_inventory_unresolved(
    file: &Path,
    text: &str,
) -> Result<UnresolvedInventory, ModelError> {
    let (ix, raw) = read_raw_inventory(file, text)?;
    inventory::validate_unresolved(&ix, raw, false)
}

fn read_inventory(file: &Path, text: &str, expand: bool) -> Result<Inventory, ModelError> {
    let (ix, raw) = read_raw_inventory(file, text)?;
    inventory::validate(&ix, raw, expand)
}

fn read_raw_inventory(file: &Path, text: &str) -> Result<(Index, RawInventory), ModelError> {
    let name = file.display().to_string();
    read(&name, "inventory", text, |parent| match parent {
        "" => Some("inventory field"),
        "hosts" => Some("host"),
        "environments" => Some("environment"),
        _ => None,
    })
}

/// Stages 1 and 2: the index and the raw structure — after the limits (`bounds.rs`),
/// which keep both YAML readers off texts that would make them slow. `kind` ("plan",
/// "inventory") names the file in a limit's refusal.
fn read<T: for<'de> Deserialize<'de>>(
    file: &str,
    kind: &str,
    text: &str,
    what: impl Fn(&str) -> Option<&'static str>,
) -> Result<(Index, T), ModelError> {
    check_limits(file, kind, text, &Limits::FILE)?;
    let index = Index::build(file, text);
    if let Some(e) = index.as_ref().and_then(|i| i.duplicate_error(what)) {
        return Err(e);
    }
    if text
        .lines()
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#') || l.trim() == "---")
    {
        return Err(ModelError {
            location: Location {
                file: file.to_string(),
                line: 1,
                column: 1,
            },
            message: "the file is empty".into(),
            limit: None,
        });
    }
    let raw: T = serde_norway::from_str(text).map_err(|e| yaml_error(file, &e))?;
    let index = index.unwrap_or_else(|| Index::empty(file));
    Ok((index, raw))
}
