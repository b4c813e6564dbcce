//! The file modules: `file.copy`, `file.template`, `file.lineinfile`, `file.directory`,
//! `file.absent`. A `file.template` arrives rendered (its text is the whole file) and
//! takes `file.copy`'s path from there on; only its name differs.
//!
//! One pure decision ([`decide`]) from the path's current state to the actions that
//! bring it where the step wants it serves both modes: a dry run reads the host (or the
//! overlay of earlier predictions), decides and reports the state it would leave; a real
//! run makes the same decision with as few remote commands as it can:
//!
//! - `file.copy` (and `file.template`), `file.directory`, `file.absent` know what they
//!   want up front, so each is one command that looks and acts at once ([`Remote::put`],
//!   [`Remote::directory`], [`Remote::remove`]) and reports the state it found;
//!   [`decide`] on that state gives the result, message and `changed` a dry run predicts.
//! - `file.lineinfile` needs the file's bytes first: a probe (one command, which also
//!   says whether the folder above an absent file exists), then — only when something
//!   changes — a [`Remote::put`] of the new bytes.

use super::diff::diff;
use super::mode::{show, ModeSpec};
use super::remote::{FileState, OwnerSpec, Remote};
use super::{Change, ModuleError, Outcome, Overlay, Prediction, RenderedModule, RenderedSource};
use crate::lineinfile;

/// What to do to the host.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Action {
    Write {
        content: Vec<u8>,
        mode: Option<ModeSpec>,
        owner: Option<OwnerSpec>,
        /// Create the missing folders above the file first (`lineinfile` with `create`).
        make_parents: bool,
    },
    Attributes {
        mode: Option<ModeSpec>,
        owner: Option<OwnerSpec>,
    },
    Mkdir {
        mode: Option<ModeSpec>,
        owner: Option<OwnerSpec>,
    },
    Remove,
}

#[derive(Debug)]
struct Decision {
    after: FileState,
    actions: Vec<Action>,
    changed: bool,
    message: String,
}

/// The desired bytes of a copy or a template (a copy's local `src` is read here, once);
/// `None` for other modules.
async fn whole_content(module: &RenderedModule) -> Result<Option<Vec<u8>>, ModuleError> {
    match module {
        RenderedModule::Copy {
            source: RenderedSource::Content(c),
            ..
        }
        | RenderedModule::Template { content: c, .. } => Ok(Some(c.clone().into_bytes())),
        RenderedModule::Copy {
            source: RenderedSource::Src(p),
            ..
        } => tokio::fs::read(p)
            .await
            .map(Some)
            .map_err(|e| ModuleError::Local {
                path: p.display().to_string(),
                reason: e.to_string(),
            }),
        _ => Ok(None),
    }
}

/// Whether the decision depends on the folder above the path: a file module that may
/// create the file.
fn needs_parent(module: &RenderedModule, current: &FileState) -> bool {
    matches!(current, FileState::Absent) && needs_content(module)
}

/// Whether the module needs the file's bytes (not just its kind and attributes).
fn needs_content(module: &RenderedModule) -> bool {
    matches!(
        module,
        RenderedModule::Copy { .. }
            | RenderedModule::Template { .. }
            | RenderedModule::LineInFile { .. }
    )
}

/// Mode and owner work on an existing path: what changes, and the resulting attributes.
struct AttrPlan {
    mode: Option<ModeSpec>,
    owner: Option<OwnerSpec>,
    new_mode: Option<u32>,
    new_owner: Option<super::Ownership>,
    notes: Vec<String>,
}

fn plan_attributes(
    cur_mode: Option<u32>,
    cur_owner: Option<&super::Ownership>,
    is_dir: bool,
    mode: Option<&ModeSpec>,
    owner: Option<&OwnerSpec>,
) -> AttrPlan {
    let mut p = AttrPlan {
        mode: None,
        owner: None,
        new_mode: cur_mode,
        new_owner: cur_owner.cloned(),
        notes: Vec::new(),
    };
    if let Some(m) = mode {
        let want = cur_mode.map(|c| m.mode.apply(c, is_dir));
        let differs = match (want, cur_mode) {
            (Some(w), Some(c)) => w != c,
            _ => true,
        };
        if differs {
            p.mode = Some(m.clone());
            p.new_mode = want.or(m.mode.absolute());
            p.notes.push(match (cur_mode, p.new_mode) {
                (Some(c), Some(n)) => format!("mode {} → {}", show(c), show(n)),
                _ => format!("mode set to {}", m.text),
            });
        }
    }
    if let Some(o) = owner {
        if !o.satisfied_by(cur_owner) {
            p.owner = Some(o.clone());
            p.new_owner = o.applied_to(cur_owner);
            p.notes.push(format!("owner set to {}", o.text));
        }
    }
    p
}

/// Decides what `module` does to a path that is `current`; `parent_exists` says whether
/// the folder above it exists (it matters only when the path is absent).
fn decide(
    module: &RenderedModule,
    current: &FileState,
    copy_bytes: Option<Vec<u8>>,
    parent_exists: bool,
) -> Result<Decision, ModuleError> {
    let not_a_file = |path: &str, what: &FileState| {
        ModuleError::Invalid(format!(
            "{path} is {}; {} works on regular files",
            what.describe(),
            module_kind(module)
        ))
    };
    match module {
        RenderedModule::Copy { .. } | RenderedModule::Template { .. } => decide_copy(
            module,
            current,
            copy_bytes.unwrap_or_default(),
            parent_exists,
            None,
        ),
        RenderedModule::LineInFile {
            path,
            params,
            mode,
            owner,
        } => match current {
            FileState::Absent => {
                let out = lineinfile::apply(None, params)?;
                match out.content {
                    None => Ok(Decision {
                        after: FileState::Absent,
                        actions: Vec::new(),
                        changed: false,
                        message: out.message,
                    }),
                    // Ansible creates the folders above a file it creates.
                    Some(content) => Ok(create(
                        content,
                        mode.as_ref(),
                        owner.as_ref(),
                        &out.message,
                        !parent_exists,
                    )),
                }
            }
            FileState::File {
                content: cur,
                mode: cm,
                owner: co,
            } => {
                let out = lineinfile::apply(Some(cur), params)?;
                let content = out.content.unwrap_or_else(|| cur.clone());
                let mut d = update(
                    cur != &content,
                    *cm,
                    co.as_ref(),
                    content,
                    mode.as_ref(),
                    owner.as_ref(),
                    &out.message,
                );
                if out.changed {
                    d.changed = true;
                }
                if !d.changed {
                    d.message = if out.message.is_empty() {
                        "unchanged".into()
                    } else {
                        out.message
                    };
                }
                Ok(d)
            }
            other => Err(not_a_file(path, other)),
        },
        RenderedModule::Directory { path, mode, owner } => match current {
            FileState::Absent => Ok(Decision {
                after: FileState::Directory {
                    mode: mode.as_ref().and_then(|m| m.mode.absolute()),
                    owner: owner.as_ref().and_then(|o| o.applied_to(None)),
                },
                actions: vec![Action::Mkdir {
                    mode: mode.clone(),
                    owner: owner.clone(),
                }],
                changed: true,
                message: "directory created".into(),
            }),
            FileState::Directory {
                mode: cm,
                owner: co,
            } => {
                let p = plan_attributes(*cm, co.as_ref(), true, mode.as_ref(), owner.as_ref());
                let changed = p.mode.is_some() || p.owner.is_some();
                Ok(Decision {
                    after: FileState::Directory {
                        mode: p.new_mode,
                        owner: p.new_owner,
                    },
                    actions: if changed {
                        vec![Action::Attributes {
                            mode: p.mode,
                            owner: p.owner,
                        }]
                    } else {
                        Vec::new()
                    },
                    changed,
                    message: if changed {
                        p.notes.join(", ")
                    } else {
                        "directory exists".into()
                    },
                })
            }
            other => Err(ModuleError::Invalid(format!(
                "{path} exists and is {}, not a directory",
                other.describe()
            ))),
        },
        RenderedModule::Absent { .. } => Ok(match current {
            FileState::Absent => Decision {
                after: FileState::Absent,
                actions: Vec::new(),
                changed: false,
                message: "already absent".into(),
            },
            FileState::Directory { .. } => Decision {
                after: FileState::Absent,
                actions: vec![Action::Remove],
                changed: true,
                message: "directory removed (with everything in it)".into(),
            },
            _ => Decision {
                after: FileState::Absent,
                actions: vec![Action::Remove],
                changed: true,
                message: "removed".into(),
            },
        }),
        _ => Err(ModuleError::Invalid(
            "not a file module (internal error)".into(),
        )),
    }
}

/// `file.copy`'s (and `file.template`'s) decision. `differs` says whether an existing
/// file's bytes differ from `content` when the host compared them (a real run's one
/// command reads no bytes back); `None`: compare with the bytes in `current`.
fn decide_copy(
    module: &RenderedModule,
    current: &FileState,
    content: Vec<u8>,
    parent_exists: bool,
    differs: Option<bool>,
) -> Result<Decision, ModuleError> {
    let (RenderedModule::Copy {
        path, mode, owner, ..
    }
    | RenderedModule::Template {
        path, mode, owner, ..
    }) = module
    else {
        return Err(ModuleError::Invalid(format!(
            "{} does not write whole files (internal error)",
            module_kind(module)
        )));
    };
    match current {
        FileState::Absent if !parent_exists => Err(ModuleError::Invalid(format!(
            "destination directory {} does not exist",
            super::parent_of(path).unwrap_or(".")
        ))),
        FileState::Absent => Ok(create(
            content,
            mode.as_ref(),
            owner.as_ref(),
            "file created",
            false,
        )),
        FileState::File {
            content: cur,
            mode: cm,
            owner: co,
        } => Ok(update(
            differs.unwrap_or_else(|| cur != &content),
            *cm,
            co.as_ref(),
            content,
            mode.as_ref(),
            owner.as_ref(),
            "content replaced",
        )),
        other => Err(ModuleError::Invalid(format!(
            "{path} is {}; {} works on regular files",
            other.describe(),
            module_kind(module)
        ))),
    }
}

fn module_kind(module: &RenderedModule) -> &'static str {
    match module {
        RenderedModule::Copy { .. } => "file.copy",
        RenderedModule::Template { .. } => "file.template",
        RenderedModule::LineInFile { .. } => "file.lineinfile",
        RenderedModule::Directory { .. } => "file.directory",
        RenderedModule::Absent { .. } => "file.absent",
        RenderedModule::Command { .. } => "command",
        RenderedModule::Shell { .. } => "shell",
        RenderedModule::Script { .. } => "script",
        RenderedModule::Package(_) => "package",
        RenderedModule::User(_) => "user",
        RenderedModule::Group(_) => "group",
    }
}

/// A new file with `content`.
fn create(
    content: Vec<u8>,
    mode: Option<&ModeSpec>,
    owner: Option<&OwnerSpec>,
    message: &str,
    make_parents: bool,
) -> Decision {
    Decision {
        after: FileState::File {
            content: content.clone(),
            mode: mode.and_then(|m| m.mode.absolute()),
            owner: owner.and_then(|o| o.applied_to(None)),
        },
        actions: vec![Action::Write {
            content,
            mode: mode.cloned(),
            owner: owner.cloned(),
            make_parents,
        }],
        changed: true,
        message: message.to_string(),
    }
}

/// An existing file that should hold `content` (`content_changed`: its bytes differ),
/// with `mode` and `owner` when given.
fn update(
    content_changed: bool,
    cur_mode: Option<u32>,
    cur_owner: Option<&super::Ownership>,
    content: Vec<u8>,
    mode: Option<&ModeSpec>,
    owner: Option<&OwnerSpec>,
    content_message: &str,
) -> Decision {
    let p = plan_attributes(cur_mode, cur_owner, false, mode, owner);
    let mut notes = Vec::new();
    if content_changed {
        notes.push(content_message.to_string());
    }
    notes.extend(p.notes.iter().cloned());
    let actions = if content_changed {
        // The write starts from the existing mode; a symbolic mode applies to that, an
        // octal one replaces it — the same result `plan_attributes` predicted.
        vec![Action::Write {
            content: content.clone(),
            mode: p.mode.clone(),
            owner: p.owner.clone(),
            make_parents: false,
        }]
    } else if p.mode.is_some() || p.owner.is_some() {
        vec![Action::Attributes {
            mode: p.mode.clone(),
            owner: p.owner.clone(),
        }]
    } else {
        Vec::new()
    };
    let changed = !actions.is_empty();
    Decision {
        after: FileState::File {
            content,
            mode: p.new_mode,
            owner: p.new_owner,
        },
        actions,
        changed,
        message: if changed {
            notes.join(", ")
        } else {
            "unchanged".into()
        },
    }
}

fn path_of(module: &RenderedModule) -> Result<&str, ModuleError> {
    module
        .path()
        .ok_or_else(|| ModuleError::Invalid("not a file module (internal error)".into()))
}

pub(super) async fn apply(
    module: &RenderedModule,
    remote: &Remote<'_>,
) -> Result<Outcome, ModuleError> {
    let path = path_of(module)?;
    let decision = match module {
        // One command each: look and act at once, then decide on what was found (the
        // script did what the decision says; see `Remote::put` and friends).
        RenderedModule::Copy { mode, owner, .. } | RenderedModule::Template { mode, owner, .. } => {
            let content = whole_content(module).await?.unwrap_or_default();
            let report = remote
                .put(path, &content, mode.as_ref(), owner.as_ref(), false)
                .await?;
            decide_copy(
                module,
                &report.before,
                content,
                report.parent_exists,
                Some(report.differs),
            )?
        }
        RenderedModule::Directory { mode, owner, .. } => {
            let before = remote
                .directory(path, mode.as_ref(), owner.as_ref())
                .await?;
            decide(module, &before, None, true)?
        }
        RenderedModule::Absent { .. } => {
            let before = remote.remove(path).await?;
            decide(module, &before, None, true)?
        }
        // The new bytes depend on the current ones: probe, decide, then write if needed.
        _ => {
            let probe = remote.probe(path, needs_content(module)).await?;
            let decision = decide(module, &probe.state, None, probe.parent_exists)?;
            for action in &decision.actions {
                let (content, mode, owner, make_parents) = match action {
                    Action::Write {
                        content,
                        mode,
                        owner,
                        make_parents,
                    } => (content.as_slice(), mode, owner, *make_parents),
                    // Same bytes: the put changes only mode and owner.
                    Action::Attributes { mode, owner } => {
                        (current_content(&probe.state), mode, owner, false)
                    }
                    Action::Mkdir { .. } | Action::Remove => {
                        return Err(ModuleError::Invalid(format!(
                            "{} does not {action:?} (internal error)",
                            module_kind(module)
                        )))
                    }
                };
                let report = remote
                    .put(path, content, mode.as_ref(), owner.as_ref(), make_parents)
                    .await?;
                // The path changed under us between the probe and the write.
                if !matches!(report.before, FileState::File { .. } | FileState::Absent) {
                    return Err(ModuleError::Invalid(format!(
                        "{path} is {}; {} works on regular files",
                        report.before.describe(),
                        module_kind(module)
                    )));
                }
                if matches!(report.before, FileState::Absent) && !report.parent_exists {
                    return Err(ModuleError::Invalid(format!(
                        "destination directory {} does not exist",
                        super::parent_of(path).unwrap_or(".")
                    )));
                }
            }
            decision
        }
    };
    let change = if decision.changed {
        Change::Changed
    } else {
        Change::Unchanged
    };
    Ok(Outcome::new(change, decision.message))
}

/// The bytes of a probed file (empty for anything else).
fn current_content(state: &FileState) -> &[u8] {
    match state {
        FileState::File { content, .. } => content,
        _ => &[],
    }
}

pub(super) async fn predict(
    module: &RenderedModule,
    remote: &Remote<'_>,
    overlay: &mut Overlay,
) -> Result<Outcome, ModuleError> {
    let path = path_of(module)?;
    let copy_bytes = whole_content(module).await?;
    let mut warnings = Vec::new();
    // The probe answers for the folder above too; what earlier predictions say about
    // that folder wins.
    let (current, probed_parent) = match overlay.get(path) {
        Some(state) => (state, None),
        None => {
            let probe = remote.probe(path, needs_content(module)).await?;
            (probe.state, Some(probe.parent_exists))
        }
    };
    if let Some(caveat) = overlay.caveat() {
        warnings.push(caveat);
    }
    let parent_exists = match (needs_parent(module, &current), super::parent_of(path)) {
        (true, Some(parent)) => match (overlay.dir_exists(parent), probed_parent) {
            (Some(known), _) => known,
            (None, Some(probed)) => probed,
            (None, None) => remote.is_directory(parent).await?,
        },
        _ => true,
    };
    let decision = decide(module, &current, copy_bytes, parent_exists)?;
    for action in &decision.actions {
        match action {
            Action::Write {
                make_parents: true, ..
            }
            | Action::Mkdir { .. } => overlay.note_parents(path),
            _ => {}
        }
    }
    let change = if decision.changed {
        Change::Changed
    } else {
        Change::Unchanged
    };
    let message = decision.message.clone();
    let diff = if decision.changed {
        diff(path, &current, &decision.after)
    } else {
        None
    };
    overlay.set(path, decision.after.clone());
    Ok(Outcome {
        diff,
        prediction: Some(Prediction {
            path: path.to_string(),
            before: current,
            after: decision.after,
        }),
        warnings,
        ..Outcome::new(change, message)
    })
}
