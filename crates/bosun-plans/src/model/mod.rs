//! Plans and inventories as the engine uses them: validated, with every templated string
//! kept as written (rendered per host at run time). Parsing (`parse/`) turns YAML into
//! these in two stages — raw serde structures, then validation — and every error names
//! the file, line and column. Before either, `bounds.rs` checks the text against
//! [`Limits::FILE`] (size, nesting depth, alias expansion) in one linear pass.

mod bounds;
mod parse;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use bounds::{check_limits, InputLimit, Limits, Shape};
pub(crate) use parse::module_templates;
pub use parse::{
    lint, parse_inventory, parse_inventory_as_written, parse_inventory_unresolved, parse_plan,
    resolve_jumps, Jump, JumpError, LintFinding, LintReport, UnresolvedInventory, MAX_JUMPS,
    MODULES,
};

/// A variable value: YAML scalars, lists and maps, as JSON values.
pub type Value = serde_json::Value;

/// Where something is in a source file (1-based).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Location {
    pub file: String,
    pub line: usize,
    pub column: usize,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// A plan file that cannot be used, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{location}: {message}")]
pub struct ModelError {
    pub location: Location,
    pub message: String,
    /// The input limit the text went over (checked before parsing), if that is why.
    pub limit: Option<InputLimit>,
}

/// A validated plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub name: String,
    pub targets: Targets,
    /// Allow runs of this plan to overlap on the same hosts (server-side guard).
    pub concurrent_runs: bool,
    /// Fail on an unresolved reference instead of rendering it empty.
    pub strict_vars: bool,
    /// Run overrides, with their defaults.
    pub inputs: BTreeMap<String, InputDef>,
    /// Plan defaults (lowest precedence of `vars`).
    pub vars: BTreeMap<String, Value>,
    /// The file's `schedule:`: the server keeps the plan's schedule to it on upload.
    pub schedule: Option<FileSchedule>,
    /// The file's `on_stack_change:`: the server starts a run when a tracked run of that
    /// stack changes one of these outputs (any output when none is named).
    pub on_stack_change: Option<OnStackChange>,
    pub steps: Vec<Step>,
    /// Steps that run only where a step naming them in `notify` changed the host: once
    /// per host at the next flush (a `flush: handlers` step, or the end of the host's
    /// batch), in the order written here. Names are unique.
    pub handlers: Vec<Step>,
    /// Run notified handlers at the end of a batch even when the run halted.
    pub force_handlers: bool,
    /// How the target hosts are split into batches and what gates each next batch.
    pub rollout: Rollout,
    /// Where each part of the plan was written (for lint and run-time warnings).
    pub locations: SourceMap,
}

/// A rolling rollout: the whole plan runs on one batch of hosts before the next starts.
/// The default is one batch of every target host, with no gate.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Rollout {
    /// Batch sizes in order, the last repeating (`serial: [1, 10%, 50%]`); empty: one
    /// batch.
    pub serial: Vec<BatchSize>,
    /// Hosts of a batch may fail (and stop, alone) up to this share of the batch; past
    /// it the rollout stops. `None`: the first failure halts the run.
    pub max_fail_percentage: Option<u8>,
    /// Wait this long between two batches (real runs only).
    pub pause_between_batches: Option<Duration>,
    /// A step run on each batch's hosts after the batch; a host it fails on (after its
    /// retries) stops the rollout.
    pub health_check: Option<HealthCheck>,
}

/// One entry of `serial`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchSize {
    Hosts(usize),
    /// A share of all target hosts, rounded down, at least one host.
    Percent(u8),
}

/// `health_check:`: a step, tried `1 + retries` times per host, `delay` apart.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthCheck {
    pub step: Step,
    pub retries: u32,
    pub delay: Duration,
}

impl Rollout {
    /// The batches over `hosts` target hosts, as index ranges in target order.
    pub fn batches(&self, hosts: usize) -> Vec<std::ops::Range<usize>> {
        let mut out = Vec::new();
        let mut start = 0;
        let mut i = 0;
        while start < hosts {
            let size = match self.serial.get(i).or(self.serial.last()) {
                None => hosts,
                Some(BatchSize::Hosts(n)) => (*n).max(1),
                Some(BatchSize::Percent(p)) => (hosts * usize::from(*p) / 100).max(1),
            };
            let end = (start + size).min(hosts);
            out.push(start..end);
            start = end;
            i += 1;
        }
        out
    }
}

/// A plan file's `on_stack_change:`: runs started by a stack's output change.
#[derive(Debug, Clone, PartialEq)]
pub struct OnStackChange {
    /// A stack of the plan's org, by id.
    pub stack: String,
    /// The outputs whose change starts a run; empty: any output.
    pub outputs: Vec<String>,
    /// The run's inputs taken from the stack's outputs: input name → output name.
    pub inputs: BTreeMap<String, String>,
}

/// A plan file's `schedule:` — a cron string, or a mapping with `cron`, `timezone` and
/// `inputs`. The server checks the cron and the zone when the file is uploaded and keeps
/// the plan's schedule to it: set while the file says it, removed when the file drops it.
#[derive(Debug, Clone, PartialEq)]
pub struct FileSchedule {
    /// Five-field cron or an `@daily`-style macro, as written.
    pub cron: String,
    /// IANA time zone the cron is read in; `None`: UTC.
    pub timezone: Option<String>,
    /// Inputs of every scheduled run (each one the plan declares).
    pub inputs: BTreeMap<String, Value>,
}

/// Locations of a file's parts by path: mapping keys joined with `.`, list items as
/// `[i]` — `name`, `targets.hosts[0]`, `steps[1]`, `steps[1].when`,
/// `steps[0].file.lineinfile.path`, `vars.app`. The location is where the value starts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SourceMap {
    pub file: String,
    pub entries: BTreeMap<String, Location>,
}

impl SourceMap {
    /// The location of `path`, if it was written in the file.
    pub fn get(&self, path: &str) -> Option<&Location> {
        self.entries.get(path)
    }

    /// The location of `path`, else of its nearest written parent, else the file's start.
    pub fn locate(&self, path: &str) -> Location {
        let mut p = path;
        loop {
            if let Some(l) = self.entries.get(p) {
                return l.clone();
            }
            match p.rfind(['.', '[']) {
                Some(i) => p = &p[..i],
                None => {
                    return Location {
                        file: self.file.clone(),
                        line: 1,
                        column: 1,
                    }
                }
            }
        }
    }
}

/// Hosts a plan runs on: the union of these.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Targets {
    pub hosts: Vec<String>,
    pub labels: Vec<String>,
    pub environments: Vec<String>,
    /// On the server: hosts taken from stacks' outputs when a run starts, targeted too
    /// (see [`crate::host_source`]). `bosun plan exec` has no stacks and refuses them.
    pub hosts_from: Vec<crate::host_source::HostsFrom>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct InputDef {
    pub default: Option<Value>,
    pub description: Option<String>,
}

/// One step: a module and how to run it.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub name: String,
    pub module: Module,
    /// The `when:` expression as written (see `condition`).
    pub when: Option<String>,
    pub sudo: bool,
    pub continue_on_error: bool,
    pub timeout: Option<Duration>,
    /// Handlers (by name) to run on a host where this step changed something.
    pub notify: Vec<String>,
    /// Where the step starts in its file.
    pub location: Location,
}

impl Step {
    /// A `flush: handlers` step.
    pub fn is_flush(&self) -> bool {
        matches!(self.module, Module::FlushHandlers)
    }
}

/// What a step does. Every string is a template, rendered per host.
#[derive(Debug, Clone, PartialEq)]
pub enum Module {
    /// argv, no shell.
    Command {
        argv: Vec<String>,
    },
    /// A `sh -c` command line.
    Shell {
        cmd: String,
    },
    /// A local script uploaded to the host and run there with `args`.
    Script {
        src: PathBuf,
        args: Vec<String>,
    },
    LineInFile(LineInFileArgs),
    Copy {
        path: String,
        source: CopySource,
        mode: Option<String>,
        owner: Option<String>,
    },
    /// A template (inline, or a local file read when the step renders) rendered per
    /// host, then written like `Copy`.
    Template {
        path: String,
        source: CopySource,
        mode: Option<String>,
        owner: Option<String>,
    },
    Directory {
        path: String,
        mode: Option<String>,
        owner: Option<String>,
    },
    Absent {
        path: String,
    },
    /// `flush: handlers`: the notified handlers run now, not at the end of the batch
    /// (the executor does this itself; nothing runs on a host).
    FlushHandlers,
    /// System packages through the host's package manager.
    Package(PackageArgs),
    /// A local user account.
    User(UserArgs),
    /// A local group.
    Group(GroupArgs),
}

impl Module {
    /// The name as written in plan files (`command`, `file.lineinfile`, …).
    pub fn kind(&self) -> &'static str {
        match self {
            Module::Command { .. } => "command",
            Module::Shell { .. } => "shell",
            Module::Script { .. } => "script",
            Module::LineInFile(_) => "file.lineinfile",
            Module::Copy { .. } => "file.copy",
            Module::Template { .. } => "file.template",
            Module::Directory { .. } => "file.directory",
            Module::Absent { .. } => "file.absent",
            Module::FlushHandlers => "flush",
            Module::Package(_) => "package",
            Module::User(_) => "user",
            Module::Group(_) => "group",
        }
    }
}

/// Where `file.copy`'s bytes or `file.template`'s template come from.
#[derive(Debug, Clone, PartialEq)]
pub enum CopySource {
    /// Inline content (a template).
    Content(String),
    /// A local file, relative to the plan file's folder: copied byte for byte by
    /// `file.copy`, rendered as a template by `file.template`.
    Src(PathBuf),
}

/// `file.lineinfile`'s parameters, as Ansible names them (templates unrendered).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LineInFileArgs {
    pub path: String,
    pub line: Option<String>,
    pub regexp: Option<String>,
    pub search_string: Option<String>,
    /// `present` (default) or `absent`.
    pub state: Option<String>,
    /// A regex, or `EOF`.
    pub insertafter: Option<String>,
    /// A regex, or `BOF`.
    pub insertbefore: Option<String>,
    pub backrefs: bool,
    pub firstmatch: bool,
    pub create: bool,
    pub mode: Option<String>,
    pub owner: Option<String>,
}

/// Whether a package, user or group should be there (`package` adds `latest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PackageState {
    #[default]
    Present,
    Absent,
    /// Installed, at the newest version the package index offers.
    Latest,
}

impl PackageState {
    pub fn as_str(self) -> &'static str {
        match self {
            PackageState::Present => "present",
            PackageState::Absent => "absent",
            PackageState::Latest => "latest",
        }
    }
}

/// Which package manager a `package` step uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PackageManager {
    /// apt (`apt-get` and `dpkg-query`) if the host has it, else dnf (`dnf` and `rpm`).
    #[default]
    Auto,
    Apt,
    Dnf,
}

impl PackageManager {
    pub fn as_str(self) -> &'static str {
        match self {
            PackageManager::Auto => "auto",
            PackageManager::Apt => "apt",
            PackageManager::Dnf => "dnf",
        }
    }
}

/// `package`'s parameters (names are templates).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PackageArgs {
    /// One or more package names.
    pub names: Vec<String>,
    pub state: PackageState,
    /// Refresh the package index first when it is older than this (`present` and
    /// `latest` only).
    pub cache_valid_time: Option<Duration>,
    pub manager: PackageManager,
}

/// `present` or `absent`, for users and groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Presence {
    #[default]
    Present,
    Absent,
}

/// `group`'s parameters (templates unrendered).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GroupArgs {
    pub name: String,
    pub state: Presence,
    /// A number, or a template that renders to one.
    pub gid: Option<String>,
    /// Create it as a system group (used only when the group is created).
    pub system: bool,
}

/// `user`'s parameters (templates unrendered).
#[derive(Debug, Clone, PartialEq)]
pub struct UserArgs {
    pub name: String,
    pub state: Presence,
    /// A number, or a template that renders to one.
    pub uid: Option<String>,
    /// The primary group (a name or a gid).
    pub group: Option<String>,
    /// Supplementary groups: exactly these unless `append`.
    pub groups: Option<Vec<String>>,
    pub append: bool,
    pub shell: Option<String>,
    pub home: Option<String>,
    pub create_home: bool,
    /// Create it as a system user (used only when the user is created).
    pub system: bool,
    pub comment: Option<String>,
    /// Exactly the keys of `<home>/.ssh/authorized_keys`, one line each.
    pub authorized_keys: Option<Vec<String>>,
    /// With `state: absent`: remove the home folder and mail spool too.
    pub remove: bool,
}

impl Default for UserArgs {
    fn default() -> Self {
        UserArgs {
            name: String::new(),
            state: Presence::Present,
            uid: None,
            group: None,
            groups: None,
            append: false,
            shell: None,
            home: None,
            create_home: true,
            system: false,
            comment: None,
            authorized_keys: None,
            remove: false,
        }
    }
}

/// A validated inventory.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Inventory {
    pub environments: BTreeMap<String, Environment>,
    /// In file order.
    pub hosts: Vec<Host>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Environment {
    pub vars: BTreeMap<String, Value>,
    pub requires_approval: bool,
    pub protected: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConnectionKind {
    #[default]
    Ssh,
    Local,
}

/// A host, with the inventory's `defaults` already applied.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Host {
    pub name: String,
    /// Defaults to the name.
    pub address: String,
    /// Default 22.
    pub port: u16,
    /// Default: the local user name.
    pub user: Option<String>,
    pub connection: ConnectionKind,
    pub labels: Vec<String>,
    pub vars: BTreeMap<String, Value>,
    pub environment: Option<String>,
    /// Private key file; `None`: the agent, then `~/.ssh/id_*`.
    pub identity_file: Option<PathBuf>,
    /// `known_hosts` file; `None`: `~/.ssh/known_hosts`.
    pub known_hosts: Option<PathBuf>,
    /// A pinned host key (`ssh-ed25519 AAAA…`), checked instead of known_hosts.
    pub host_key: Option<String>,
    /// The bastion this host is reached through (`proxy_jump:`): another host of the
    /// inventory, with its own settings and its own `proxy_jump` (a chain). `None`: the
    /// host is connected to directly.
    pub proxy_jump: Option<Arc<Host>>,
}

impl Host {
    /// The bastions this host is reached through, the first one connected to first
    /// (the end of the `proxy_jump` chain); empty for a host reached directly.
    pub fn jump_chain(&self) -> Vec<&Host> {
        let mut chain = Vec::new();
        let mut next = self.proxy_jump.as_deref();
        while let Some(bastion) = next {
            chain.push(bastion);
            next = bastion.proxy_jump.as_deref();
        }
        chain.reverse();
        chain
    }
}

impl Plan {
    /// Every step the plan can run, with the path it was written at (`steps[2]`,
    /// `handlers[0]`, `health_check`): the steps, then the handlers, then the health check.
    pub fn all_steps(&self) -> Vec<(String, &Step)> {
        let steps = self.steps.iter().enumerate();
        let handlers = self.handlers.iter().enumerate();
        steps
            .map(|(i, s)| (format!("steps[{i}]"), s))
            .chain(handlers.map(|(i, s)| (format!("handlers[{i}]"), s)))
            .chain(
                self.rollout
                    .health_check
                    .iter()
                    .map(|h| ("health_check".to_string(), &h.step)),
            )
            .collect()
    }

    /// The inventory's hosts this plan targets (union of hosts, labels, environments),
    /// in inventory order.
    pub fn target_hosts<'a>(&self, inventory: &'a Inventory) -> Vec<&'a Host> {
        inventory
            .hosts
            .iter()
            .filter(|h| {
                self.targets.hosts.contains(&h.name)
                    || h.labels.iter().any(|l| self.targets.labels.contains(l))
                    || h.environment
                        .as_ref()
                        .is_some_and(|e| self.targets.environments.contains(e))
            })
            .collect()
    }
}
