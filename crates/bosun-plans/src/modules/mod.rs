//! The modules: what each step does on a host, for real ([`apply`]) or as a dry-run
//! prediction ([`predict`]).
//!
//! A step's module is first [`render`]ed for its host: every template string through
//! [`template::render`], unresolved references collected (the executor warns, or fails
//! the step under `strict_vars`), modes and owners validated. Then:
//!
//! - `command`, `shell`, `script` run on the host and always count as changed; a dry
//!   run cannot know what they would do and says so.
//! - `file.template`'s template is rendered here too — inline, or a local file read
//!   while rendering, on the machine running the plan (at most [`TEMPLATE_MAX_BYTES`]
//!   of UTF-8) — like any other string; the text it renders to is then written exactly
//!   like `file.copy`'s `content` (below), and results still name it `file.template`.
//! - `file.copy`, `file.template`, `file.lineinfile`, `file.directory`, `file.absent`
//!   read the path's current state from the host (kind, mode, owner, bytes), decide, and
//!   change only what differs — writes are atomic (a temporary file beside the target,
//!   then `mv`).
//!   Reading and changing cost one remote command for a copy, a template, a directory or an
//!   absent path (the host compares and acts, and reports the state it found), and a
//!   probe plus, when something changes, a write for a lineinfile.
//!   A dry run decides the same way and carries a unified diff; its predictions are kept
//!   in an [`Overlay`] per host so a later file step on the same path starts from what
//!   the earlier one would have written.
//! - `package` (`package.rs`) is one remote command: find apt or dnf, read the installed
//!   and candidate versions, refresh the index when `cache_valid_time` says, act, read
//!   again; `changed` means a version differs. A dry run reads only and predicts.
//! - `user` and `group` (`accounts.rs`) read the accounts (`getent`, `id`, the keys
//!   file) and act with the shadow tools only where something differs — `group` in one
//!   command, `user` in a read and, when it changes something, one more. A dry run's
//!   group predictions go into the [`Overlay`] too, so a user step after a group step
//!   that would make its group is predicted as the real run would go.
//!
//! All host work goes through [`Connection::run`](crate::connection::Connection::run).

pub mod accounts;
mod diff;
mod file;
pub mod mode;
pub mod package;
mod raw;
pub mod remote;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read as _;
use std::path::{Path, PathBuf};

use crate::connection::{ConnError, Output};
use crate::lineinfile::{self, LineInFileError};
use crate::model::{CopySource, Module, Presence};
use crate::template::{self, Scope, TemplateError};

pub use accounts::{GroupSpec, UserSpec};
pub use mode::ModeSpec;
pub use package::PackageSpec;
pub use remote::{FileState, OwnerSpec, Ownership, Remote};

/// The message for a real run that meets a `secret://` reference.
pub const SECRETS_NEED_SERVER: &str =
    "secret references need a Bosun server (plan exec has no secret store)";

/// The largest template file (`file.template`'s `src`) a step reads: 1 MiB.
pub const TEMPLATE_MAX_BYTES: usize = 1024 * 1024;

/// A module with its templates rendered for one host.
#[derive(Debug, Clone, PartialEq)]
pub enum RenderedModule {
    Command {
        argv: Vec<String>,
    },
    Shell {
        cmd: String,
    },
    Script {
        src: PathBuf,
        args: Vec<String>,
    },
    LineInFile {
        path: String,
        params: lineinfile::Params,
        mode: Option<ModeSpec>,
        owner: Option<OwnerSpec>,
    },
    Copy {
        path: String,
        source: RenderedSource,
        mode: Option<ModeSpec>,
        owner: Option<OwnerSpec>,
    },
    /// `file.template`: the rendered text, written like a copy's `content`.
    Template {
        path: String,
        content: String,
        mode: Option<ModeSpec>,
        owner: Option<OwnerSpec>,
    },
    Directory {
        path: String,
        mode: Option<ModeSpec>,
        owner: Option<OwnerSpec>,
    },
    Absent {
        path: String,
    },
    Package(PackageSpec),
    User(UserSpec),
    Group(GroupSpec),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenderedSource {
    Content(String),
    /// A local file, read as bytes (not a template).
    Src(PathBuf),
}

impl RenderedModule {
    /// A raw command: not idempotent, unknowable in a dry run.
    pub fn is_raw(&self) -> bool {
        matches!(
            self,
            RenderedModule::Command { .. }
                | RenderedModule::Shell { .. }
                | RenderedModule::Script { .. }
        )
    }

    /// The path a file module works on.
    pub fn path(&self) -> Option<&str> {
        match self {
            RenderedModule::LineInFile { path, .. }
            | RenderedModule::Copy { path, .. }
            | RenderedModule::Template { path, .. }
            | RenderedModule::Directory { path, .. }
            | RenderedModule::Absent { path } => Some(path),
            _ => None,
        }
    }
}

/// A rendered module and what rendering found.
#[derive(Debug, Clone, PartialEq)]
pub struct Render {
    pub module: RenderedModule,
    /// References that did not resolve (as written, e.g. `vars.missing`), in order, once
    /// each.
    pub unresolved: Vec<String>,
    /// Some rendered value holds a `secret://` reference.
    pub has_secret_refs: bool,
}

/// Why a step failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModuleError {
    #[error(transparent)]
    Template(#[from] TemplateError),
    #[error("unresolved reference(s) with strict_vars: {}", .0.join(", "))]
    Unresolved(Vec<String>),
    #[error("{SECRETS_NEED_SERVER}")]
    SecretReferences,
    #[error("{0}")]
    Invalid(String),
    #[error("file.lineinfile: {0}")]
    LineInFile(#[from] LineInFileError),
    #[error("cannot read local file {path}: {reason}")]
    Local { path: String, reason: String },
    #[error(transparent)]
    Connection(#[from] ConnError),
    /// A host command exited non-zero; `what` says what it was for (empty for a raw
    /// command: the step is the command).
    #[error("{}", failed_text(.what, .output))]
    Failed { what: String, output: Output },
    #[error("timed out")]
    TimedOut { output: Option<Output> },
    #[error("sudo needs a password on this host; a run cannot answer prompts (grant passwordless sudo for the commands the host is managed with)")]
    SudoPassword { output: Output },
    #[error("{0}")]
    Remote(String),
}

/// `what (exit code N): last stderr line`, or `exit code N: …` for a raw command.
fn failed_text(what: &str, output: &Output) -> String {
    let code = match output.exit_code {
        Some(c) => format!("exit code {c}"),
        None => "killed".into(),
    };
    let mut text = if what.is_empty() {
        code
    } else {
        format!("{what} ({code})")
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    if let Some(line) = stderr.lines().rev().find(|l| !l.trim().is_empty()) {
        text.push_str(": ");
        text.push_str(line.trim());
    }
    text
}

impl ModuleError {
    /// The host command's output, when the failure came from one.
    pub fn output(&self) -> Option<&Output> {
        match self {
            ModuleError::Failed { output, .. } | ModuleError::SudoPassword { output } => {
                Some(output)
            }
            ModuleError::TimedOut { output } => output.as_ref(),
            _ => None,
        }
    }

    pub fn is_timeout(&self) -> bool {
        matches!(self, ModuleError::TimedOut { .. })
    }
}

/// Whether a step changed (or would change) its host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    Changed,
    Unchanged,
    /// A dry run of a raw command: it cannot be known.
    Unknown,
}

/// A dry run's prediction for one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prediction {
    pub path: String,
    pub before: FileState,
    pub after: FileState,
}

/// What a step did (or would do) on one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub change: Change,
    pub exit_code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// One line for people: `line added`, `would run: …`, `directory created`.
    pub message: String,
    /// Dry run of a file module: the unified diff (`--- PATH (before)`/`+++ PATH
    /// (after)`) and mode/owner changes; `None` when nothing would change.
    pub diff: Option<String>,
    /// Dry run of a file module: before and after.
    pub prediction: Option<Prediction>,
    pub warnings: Vec<String>,
}

impl Outcome {
    fn new(change: Change, message: impl Into<String>) -> Self {
        Outcome {
            change,
            exit_code: None,
            stdout: Vec::new(),
            stderr: Vec::new(),
            message: message.into(),
            diff: None,
            prediction: None,
            warnings: Vec::new(),
        }
    }
}

/// A dry run's picture of one host: the predicted state of every path an earlier file
/// step touched, the directories earlier steps would have created, and whether a raw
/// command ran before (after which nothing is certain). Paths are compared as written
/// (after trailing slashes are dropped): `/a/./b` and `/a/b` are different paths here.
#[derive(Debug, Clone, Default)]
pub struct Overlay {
    files: BTreeMap<String, FileState>,
    /// Directories that would exist (created with `mkdir -p` and its parents).
    made_dirs: BTreeSet<String>,
    /// The name of the last raw-command step the dry run passed on this host.
    raw_command: Option<String>,
    /// Groups as earlier `group` steps would leave them: present (with the gid when it
    /// is known) or absent (`None`).
    pub(crate) groups: BTreeMap<String, Option<Option<u32>>>,
}

/// `path` without trailing slashes (`/` stays `/`).
fn normal(path: &str) -> &str {
    let t = path.trim_end_matches('/');
    if t.is_empty() && path.starts_with('/') {
        "/"
    } else {
        t
    }
}

/// The parent of `path` as written, if it has one (`None` for `/` and bare names).
pub(crate) fn parent_of(path: &str) -> Option<&str> {
    let p = normal(path);
    let i = p.rfind('/')?;
    if i == 0 {
        return (p.len() > 1).then_some("/");
    }
    Some(&p[..i])
}

impl Overlay {
    pub fn new() -> Self {
        Overlay::default()
    }

    /// The predicted state of `path`: an earlier step's prediction for it, or absent
    /// when an earlier step removed (or replaced with a file) a folder above it.
    pub fn get(&self, path: &str) -> Option<FileState> {
        let path = normal(path);
        if let Some(state) = self.files.get(path) {
            return Some(state.clone());
        }
        let mut p = path;
        while let Some(parent) = parent_of(p) {
            match self.files.get(parent) {
                Some(FileState::Directory { .. }) => return None,
                Some(_) => return Some(FileState::Absent),
                None if self.made_dirs.contains(parent) => return None,
                None => p = parent,
            }
        }
        None
    }

    /// Whether `dir` would be a directory, if the predictions say.
    pub fn dir_exists(&self, dir: &str) -> Option<bool> {
        let dir = normal(dir);
        match self.get(dir) {
            Some(FileState::Directory { .. }) => Some(true),
            Some(_) => Some(false),
            None => self.made_dirs.contains(dir).then_some(true),
        }
    }

    /// Records a prediction; removing a path removes what was predicted under it.
    pub fn set(&mut self, path: &str, state: FileState) {
        let path = normal(path);
        if !matches!(state, FileState::Directory { .. }) {
            let prefix = format!("{}/", path.trim_end_matches('/'));
            for (p, s) in self.files.iter_mut() {
                if p.starts_with(&prefix) {
                    *s = FileState::Absent;
                }
            }
            self.made_dirs.retain(|d| !d.starts_with(&prefix));
        }
        self.files.insert(path.to_string(), state);
    }

    /// Records that every folder above `path` would exist (`mkdir -p` of its parent).
    pub fn note_parents(&mut self, path: &str) {
        let mut p = normal(path);
        while let Some(parent) = parent_of(p) {
            if !matches!(self.files.get(parent), Some(FileState::Directory { .. })) {
                self.files.remove(parent);
                self.made_dirs.insert(parent.to_string());
            }
            p = parent;
        }
    }

    /// Notes that the raw-command step `step` would have run before what follows.
    pub fn note_raw_command(&mut self, step: &str) {
        self.raw_command = Some(step.to_string());
    }

    /// The caveat for predictions made after a raw command.
    pub fn caveat(&self) -> Option<String> {
        self.raw_command.as_ref().map(|s| {
            format!(
                "an earlier raw command (step {s:?}) may change this: the prediction may be \
                 inaccurate"
            )
        })
    }
}

/// Renders `module` in `scope`.
pub fn render(module: &Module, scope: &Scope) -> Result<Render, ModuleError> {
    render_with(module, scope, None)
}

/// Renders `module` in `scope`, substituting the `secret://namespace/key` references
/// that `secrets` resolves (reference as written → value); a reference it does not
/// resolve stays, and `has_secret_refs` says so. Only real runs on a server pass values.
pub fn render_with(
    module: &Module,
    scope: &Scope,
    secrets: Option<&BTreeMap<String, String>>,
) -> Result<Render, ModuleError> {
    let mut r = Renderer {
        scope,
        unresolved: Vec::new(),
        secrets: false,
        values: secrets,
    };
    let module = match module {
        Module::Command { argv } => RenderedModule::Command {
            argv: argv.iter().map(|a| r.text(a)).collect::<Result<_, _>>()?,
        },
        Module::Shell { cmd } => RenderedModule::Shell { cmd: r.text(cmd)? },
        Module::Script { src, args } => RenderedModule::Script {
            src: src.clone(),
            args: args.iter().map(|a| r.text(a)).collect::<Result<_, _>>()?,
        },
        Module::LineInFile(a) => {
            let state = r.opt(&a.state)?;
            let absent = match state.as_deref() {
                None | Some("present") => false,
                Some("absent") => true,
                Some(other) => {
                    return Err(ModuleError::Invalid(format!(
                        "file.lineinfile: state must be present or absent, not {other:?}"
                    )))
                }
            };
            RenderedModule::LineInFile {
                path: r.path(&a.path)?,
                params: lineinfile::Params {
                    line: r.opt(&a.line)?,
                    regexp: r.opt(&a.regexp)?,
                    search_string: r.opt(&a.search_string)?,
                    absent,
                    insertafter: r.opt(&a.insertafter)?,
                    insertbefore: r.opt(&a.insertbefore)?,
                    backrefs: a.backrefs,
                    firstmatch: a.firstmatch,
                    create: a.create,
                },
                mode: r.mode(&a.mode)?,
                owner: r.owner(&a.owner)?,
            }
        }
        Module::Copy {
            path,
            source,
            mode,
            owner,
        } => RenderedModule::Copy {
            path: r.path(path)?,
            source: match source {
                CopySource::Content(c) => RenderedSource::Content(r.text(c)?),
                CopySource::Src(p) => RenderedSource::Src(p.clone()),
            },
            mode: r.mode(mode)?,
            owner: r.owner(owner)?,
        },
        Module::Template {
            path,
            source,
            mode,
            owner,
        } => RenderedModule::Template {
            path: r.path(path)?,
            content: match source {
                CopySource::Content(c) => r.text(c)?,
                CopySource::Src(p) => {
                    let text = read_template(p)?;
                    // The error names the file, not its (possibly long) text.
                    r.text(&text).map_err(|e| match e {
                        ModuleError::Template(t) => {
                            ModuleError::Invalid(format!("template {}: {}", p.display(), t.message))
                        }
                        other => other,
                    })?
                }
            },
            mode: r.mode(mode)?,
            owner: r.owner(owner)?,
        },
        Module::Directory { path, mode, owner } => RenderedModule::Directory {
            path: r.path(path)?,
            mode: r.mode(mode)?,
            owner: r.owner(owner)?,
        },
        Module::Absent { path } => {
            let path = r.path(path)?;
            if path.trim_matches(|c| c == '/' || c == '.').is_empty() {
                return Err(ModuleError::Invalid(format!(
                    "file.absent refuses to remove {path:?}"
                )));
            }
            RenderedModule::Absent { path }
        }
        Module::FlushHandlers => {
            return Err(ModuleError::Invalid(
                "`flush: handlers` is done by the executor: nothing runs on a host".into(),
            ))
        }
        Module::Package(a) => RenderedModule::Package(PackageSpec {
            names: a
                .names
                .iter()
                .map(|n| r.checked(n, package::check_name))
                .collect::<Result<_, _>>()?,
            state: a.state,
            cache_valid_time: a.cache_valid_time,
            manager: a.manager,
        }),
        Module::Group(a) => RenderedModule::Group(GroupSpec {
            name: r.checked(&a.name, |n| accounts::check_name("group", n))?,
            state: a.state,
            gid: r.id("gid", &a.gid)?,
            system: a.system,
        }),
        Module::User(a) => {
            let opt = |r: &mut Renderer<'_>,
                       v: &Option<String>,
                       check: &dyn Fn(&str) -> Result<(), String>|
             -> Result<Option<String>, ModuleError> {
                v.as_deref().map(|t| r.checked(t, check)).transpose()
            };
            let group_ref = |g: &str| accounts::check_group_ref(g);
            RenderedModule::User(UserSpec {
                name: r.checked(&a.name, |n| accounts::check_name("user", n))?,
                state: a.state,
                uid: r.id("uid", &a.uid)?,
                group: opt(&mut r, &a.group, &group_ref)?,
                groups: a
                    .groups
                    .as_ref()
                    .map(|v| {
                        v.iter()
                            .map(|g| r.checked(g, group_ref))
                            .collect::<Result<Vec<_>, _>>()
                    })
                    .transpose()?,
                append: a.append,
                shell: opt(&mut r, &a.shell, &|p| accounts::check_path("shell", p))?,
                home: opt(&mut r, &a.home, &|p| accounts::check_path("home", p))?,
                create_home: a.create_home,
                system: a.system,
                comment: match &a.comment {
                    None => None,
                    Some(c) => {
                        let c = r.text(c)?;
                        accounts::check_comment(&c).map_err(ModuleError::Invalid)?;
                        Some(c)
                    }
                },
                authorized_keys: a
                    .authorized_keys
                    .as_ref()
                    .map(|v| {
                        v.iter()
                            .map(|k| r.checked(k, accounts::check_key_line))
                            .collect::<Result<Vec<_>, _>>()
                    })
                    .transpose()?,
                remove: a.state == Presence::Absent && a.remove,
            })
        }
    };
    Ok(Render {
        module,
        unresolved: r.unresolved,
        has_secret_refs: r.secrets,
    })
}

/// A `file.template` step's template file, read on the machine running the plan: at
/// most [`TEMPLATE_MAX_BYTES`], UTF-8 text.
/// (The executor also reads it once per run, with the same bounds, to learn whether it
/// refers to `host.facts`: [`crate::facts::step_needs_facts`].)
pub(crate) fn read_template(src: &Path) -> Result<String, ModuleError> {
    let local = |e: std::io::Error| ModuleError::Local {
        path: src.display().to_string(),
        reason: e.to_string(),
    };
    let file = std::fs::File::open(src).map_err(local)?;
    let mut bytes = Vec::new();
    file.take(TEMPLATE_MAX_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(local)?;
    if bytes.len() > TEMPLATE_MAX_BYTES {
        return Err(ModuleError::Invalid(format!(
            "template {} is refused: it is larger than 1 MiB ({TEMPLATE_MAX_BYTES} bytes)",
            src.display()
        )));
    }
    String::from_utf8(bytes).map_err(|e| {
        ModuleError::Invalid(format!(
            "template {} is refused: it is not UTF-8 text (invalid bytes at offset {})",
            src.display(),
            e.utf8_error().valid_up_to()
        ))
    })
}

struct Renderer<'a> {
    scope: &'a Scope,
    unresolved: Vec<String>,
    /// A reference is left in some rendered value.
    secrets: bool,
    values: Option<&'a BTreeMap<String, String>>,
}

impl Renderer<'_> {
    fn text(&mut self, template: &str) -> Result<String, ModuleError> {
        let rendered = template::render(template, self.scope)?;
        for u in rendered.unresolved {
            if !self.unresolved.contains(&u) {
                self.unresolved.push(u);
            }
        }
        if !rendered.text.contains(SECRET_MARK) {
            return Ok(rendered.text);
        }
        match self.values {
            Some(values) => {
                let (text, left) = substitute_secrets(&rendered.text, values);
                self.secrets |= left;
                Ok(text)
            }
            None => {
                self.secrets = true;
                Ok(rendered.text)
            }
        }
    }

    /// A template rendered, then checked (an empty result is refused too).
    fn checked(
        &mut self,
        template: &str,
        check: impl Fn(&str) -> Result<(), String>,
    ) -> Result<String, ModuleError> {
        let v = self.text(template)?;
        if v.is_empty() {
            return Err(ModuleError::Invalid(format!("{template:?} renders empty")));
        }
        check(&v).map_err(ModuleError::Invalid)?;
        Ok(v)
    }

    /// A uid or gid rendered and read as a number.
    fn id(&mut self, field: &str, template: &Option<String>) -> Result<Option<u32>, ModuleError> {
        self.opt(template)?
            .map(|v| accounts::parse_id(field, v.trim()).map_err(ModuleError::Invalid))
            .transpose()
    }

    fn opt(&mut self, template: &Option<String>) -> Result<Option<String>, ModuleError> {
        template.as_deref().map(|t| self.text(t)).transpose()
    }

    fn path(&mut self, template: &str) -> Result<String, ModuleError> {
        let path = self.text(template)?;
        if path.trim().is_empty() {
            return Err(ModuleError::Invalid(format!(
                "path {template:?} renders empty"
            )));
        }
        if path.contains('\0') || path.contains('\n') {
            return Err(ModuleError::Invalid(format!(
                "path {path:?} holds a NUL or newline"
            )));
        }
        Ok(path)
    }

    fn mode(&mut self, template: &Option<String>) -> Result<Option<ModeSpec>, ModuleError> {
        self.opt(template)?
            .map(|m| mode::parse(&m).map_err(ModuleError::Invalid))
            .transpose()
    }

    fn owner(&mut self, template: &Option<String>) -> Result<Option<OwnerSpec>, ModuleError> {
        self.opt(template)?
            .map(|o| OwnerSpec::parse(&o).map_err(ModuleError::Invalid))
            .transpose()
    }
}

/// Runs `module` on the host for real.
pub async fn apply(module: &RenderedModule, remote: &Remote<'_>) -> Result<Outcome, ModuleError> {
    match module {
        RenderedModule::Command { .. }
        | RenderedModule::Shell { .. }
        | RenderedModule::Script { .. } => raw::apply(module, remote).await,
        RenderedModule::Package(spec) => package::apply(spec, remote).await,
        RenderedModule::User(spec) => accounts::apply_user(spec, remote).await,
        RenderedModule::Group(spec) => accounts::apply_group(spec, remote).await,
        _ => file::apply(module, remote).await,
    }
}

/// Predicts what `module` would do on the host (reading it, changing nothing), starting
/// from `overlay`'s earlier predictions, and records its own there.
pub async fn predict(
    module: &RenderedModule,
    remote: &Remote<'_>,
    overlay: &mut Overlay,
    step_name: &str,
) -> Result<Outcome, ModuleError> {
    match module {
        RenderedModule::Command { .. }
        | RenderedModule::Shell { .. }
        | RenderedModule::Script { .. } => {
            let outcome = raw::predict(module).await?;
            overlay.note_raw_command(step_name);
            Ok(outcome)
        }
        RenderedModule::Package(spec) => {
            let mut outcome = package::predict(spec, remote).await?;
            outcome.warnings.extend(overlay.caveat());
            Ok(outcome)
        }
        RenderedModule::User(spec) => accounts::predict_user(spec, remote, overlay).await,
        RenderedModule::Group(spec) => accounts::predict_group(spec, remote, overlay).await,
        _ => file::predict(module, remote, overlay).await,
    }
}

const SECRET_MARK: &str = "secret://";

/// The length of the `namespace/key` part after a `secret://` mark.
fn reference_len(after: &str) -> usize {
    after
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '-' | '.')))
        .unwrap_or(after.len())
}

/// Replaces each `secret://namespace/key` reference `values` resolves with its value;
/// also answers whether a reference was left (one `values` does not hold).
pub fn substitute_secrets(text: &str, values: &BTreeMap<String, String>) -> (String, bool) {
    let mut out = String::with_capacity(text.len());
    let mut left = false;
    let mut rest = text;
    while let Some(i) = rest.find(SECRET_MARK) {
        out.push_str(&rest[..i]);
        let after = &rest[i + SECRET_MARK.len()..];
        let end = reference_len(after);
        let reference = &rest[i..i + SECRET_MARK.len() + end];
        match values.get(reference) {
            Some(v) => out.push_str(v),
            None => {
                left = true;
                out.push_str(reference);
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    (out, left)
}

/// Replaces every `secret://namespace/key` reference in `text` with
/// `secret://[redacted]`.
pub fn redact_secrets(text: &str) -> String {
    const MARK: &str = SECRET_MARK;
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(MARK) {
        out.push_str(&rest[..i]);
        out.push_str("secret://[redacted]");
        let after = &rest[i + MARK.len()..];
        let end = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '-' | '.')))
            .unwrap_or(after.len());
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// Shows an argv as a shell would need it quoted.
pub fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_substituted_only_where_resolved() {
        let values: BTreeMap<String, String> =
            [("secret://prod/db".to_string(), "hunter2".to_string())].into();
        assert_eq!(
            substitute_secrets("pw=secret://prod/db; x", &values),
            ("pw=hunter2; x".to_string(), false)
        );
        assert_eq!(
            substitute_secrets("secret://prod/db secret://prod/other", &values),
            ("hunter2 secret://prod/other".to_string(), true)
        );
        assert_eq!(
            substitute_secrets("plain", &values),
            ("plain".to_string(), false)
        );
    }

    #[test]
    fn secrets_are_redacted() {
        assert_eq!(
            redact_secrets("token=secret://prod/db-password; x"),
            "token=secret://[redacted]; x"
        );
        assert_eq!(
            redact_secrets("a secret://a/b and secret://c/d.e"),
            "a secret://[redacted] and secret://[redacted]"
        );
        assert_eq!(redact_secrets("nothing"), "nothing");
    }

    #[test]
    fn argv_display() {
        assert_eq!(
            shell_words(&["echo".into(), "a b".into(), "it's".into(), "".into()]),
            r#"echo 'a b' 'it'\''s' ''"#
        );
    }

    #[test]
    fn overlay_absent_removes_children() {
        let mut o = Overlay::new();
        o.set(
            "/d/f",
            FileState::File {
                content: b"x".to_vec(),
                mode: None,
                owner: None,
            },
        );
        o.set("/d", FileState::Absent);
        assert_eq!(o.get("/d/f"), Some(FileState::Absent));
        // Never predicted, but under a removed folder.
        assert_eq!(o.get("/d/g/h"), Some(FileState::Absent));
        assert_eq!(o.dir_exists("/d"), Some(false));
        assert_eq!(o.get("/elsewhere"), None);
        o.note_parents("/d/e/f");
        assert_eq!(o.dir_exists("/d/e"), Some(true));
        assert_eq!(o.dir_exists("/d/"), Some(true));
        assert_eq!(o.get("/d/e/x"), None);
    }

    #[test]
    fn parents() {
        assert_eq!(parent_of("/a/b"), Some("/a"));
        assert_eq!(parent_of("/a/b/"), Some("/a"));
        assert_eq!(parent_of("/a"), Some("/"));
        assert_eq!(parent_of("/"), None);
        assert_eq!(parent_of("a"), None);
        assert_eq!(parent_of("a/b"), Some("a"));
    }
}
