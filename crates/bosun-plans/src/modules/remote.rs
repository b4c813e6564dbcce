//! File work on a host, every bit of it through [`Connection::run`] with small POSIX `sh`
//! scripts (paths and values are positional arguments, never spliced into the script),
//! each one remote command: probing a path (kind, mode, owner, whether the folder above
//! an absent path exists and, for a regular file, its bytes); putting a file — the
//! desired bytes on stdin, compared on the host and written atomically (a temporary file
//! beside it, then `mv`) only if they differ, mode and owner set where they differ;
//! making a directory or fixing its mode and owner; removing a path; uploading and
//! running a script. The scripts that act also report the state they found first, so
//! the caller decides on it (message, `changed`) as a dry run would have.

use std::time::Duration;

use tokio::time::Instant;

use super::mode::ModeSpec;
use super::ModuleError;
use crate::connection::{CommandSpec, Connection, Output, OutputTap, RunRequest};

/// Owner and group of a path, by name and by id.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ownership {
    pub user: String,
    pub group: String,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

/// What a path is, with its mode and owner when known (a prediction may not know them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileState {
    Absent,
    File {
        content: Vec<u8>,
        mode: Option<u32>,
        owner: Option<Ownership>,
    },
    Directory {
        mode: Option<u32>,
        owner: Option<Ownership>,
    },
    /// Something else: a device, a socket, a FIFO.
    Other,
}

impl FileState {
    pub fn describe(&self) -> &'static str {
        match self {
            FileState::Absent => "absent",
            FileState::File { .. } => "a file",
            FileState::Directory { .. } => "a directory",
            FileState::Other => "not a regular file or directory",
        }
    }
}

/// An owner as a plan writes it: `user`, `user:group` or `:group` (names or ids).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerSpec {
    pub text: String,
    pub user: Option<String>,
    pub group: Option<String>,
}

impl OwnerSpec {
    pub fn parse(text: &str) -> Result<OwnerSpec, String> {
        let t = text.trim();
        let valid = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '$'))
                && !s.starts_with('-')
        };
        let (user, group) = match t.split_once(':') {
            Some((u, g)) => (
                (!u.is_empty()).then(|| u.to_string()),
                (!g.is_empty()).then(|| g.to_string()),
            ),
            None => (Some(t.to_string()), None),
        };
        if user.is_none() && group.is_none() {
            return Err(format!("owner {text:?} names no user or group"));
        }
        for part in user.iter().chain(group.iter()) {
            if !valid(part) {
                return Err(format!(
                    "owner {text:?}: {part:?} is not a user or group name"
                ));
            }
        }
        Ok(OwnerSpec {
            text: t.to_string(),
            user,
            group,
        })
    }

    /// Whether `current` already satisfies this spec (unknown ownership does not).
    pub fn satisfied_by(&self, current: Option<&Ownership>) -> bool {
        let Some(cur) = current else {
            return false;
        };
        let same = |want: &str, name: &str, id: Option<u32>| {
            want == name || id.is_some_and(|id| want == id.to_string())
        };
        self.user
            .as_deref()
            .is_none_or(|u| same(u, &cur.user, cur.uid))
            && self
                .group
                .as_deref()
                .is_none_or(|g| same(g, &cur.group, cur.gid))
    }

    /// The ownership a path has after `chown` with this spec (by name; ids unknown).
    pub fn applied_to(&self, current: Option<&Ownership>) -> Option<Ownership> {
        let base = current.cloned();
        let (user, uid) = match (&self.user, &base) {
            (Some(u), _) => (u.clone(), None),
            (None, Some(b)) => (b.user.clone(), b.uid),
            (None, None) => return None,
        };
        let (group, gid) = match (&self.group, &base) {
            (Some(g), _) => (g.clone(), None),
            (None, Some(b)) => (b.group.clone(), b.gid),
            (None, None) => return None,
        };
        Some(Ownership {
            user,
            group,
            uid,
            gid,
        })
    }
}

/// Where commands of one step go, until when they may run, and who watches the output
/// of the step's own command.
pub struct Remote<'a> {
    pub conn: &'a dyn Connection,
    pub sudo: bool,
    /// The step's deadline (its `timeout`).
    pub deadline: Option<Instant>,
    /// Sees what the step's raw command prints while it runs ([`Remote::run_watched`],
    /// [`Remote::run_script`]); the probes and writes of file steps are never shown.
    pub live: Option<&'a OutputTap<'a>>,
}

/// What `$1` is: `absent` (`absent noparent` when `$3`, the folder above it, is not a
/// directory), or its kind, mode and owner; with `$2` = `content`, a regular file's bytes
/// follow.
const PROBE: &str = r#"p=$1
if [ -d "$p" ]; then t=directory
elif [ -f "$p" ]; then t=file
elif [ -e "$p" ]; then t=other
elif [ -n "$3" ] && [ ! -d "$3" ]; then echo absent noparent; exit 0
else echo absent; exit 0
fi
m=$(stat -L -c '%a %U %G %u %g' -- "$p" 2>/dev/null || stat -L -f '%Lp %Su %Sg %u %g' -- "$p") || exit 1
echo "$t $m"
if [ "$t" = file ] && [ "$2" = content ]; then exec cat -- "$p"; fi
"#;

const IS_DIR: &str = r#"if [ -d "$1" ]; then echo yes; else echo no; fi"#;

/// Shared by [`PUT`] and [`DIRECTORY`]: whether the owner spec (`$ou`, `$og`: user and
/// group as written, either may be empty) differs from the current one (`$cu`/`$cuid`,
/// `$cg`/`$cgid`; empty when there is none): a name or an id satisfies it.
const NEED_OWNER: &str = r#"need_owner() {
  if [ -n "$ou" ] && [ "$ou" != "$cu" ] && [ "$ou" != "$cuid" ]; then return 0; fi
  if [ -n "$og" ] && [ "$og" != "$cg" ] && [ "$og" != "$cgid" ]; then return 0; fi
  return 1
}
"#;

/// Compare-and-write in one command: the desired bytes on stdin go to a temporary file
/// beside `$1`, are compared with the current file (`cmp`, only when the sizes agree),
/// and replace it with `mv` only if they differ; mode and owner apply where they differ.
/// Arguments: path, the folder above it (empty: none), mode as written, the mode in
/// octal when the mode is octal (so a current mode can be compared with it), owner as
/// written, its user and group parts, the desired size, and `parents` to create a missing
/// folder above. A new file starts from the default mode under the caller's umask, a
/// replaced one from the current file's mode and owner; a symbolic mode applies to
/// that. Owner before mode (a `chown` may clear set-id bits).
///
/// Prints the state before (the first line: `directory`, `other`, `absent noparent` —
/// then nothing is written — `absent`, or `file MODE USER GROUP UID GID`) and, once
/// done, `same` (content equal; mode and owner fixed if needed) or `written`.
const PUT: &str = r#"p=$1; d=$2; mode=$3; want=$4; owner=$5; ou=$6; og=$7; size=$8; mk=$9
if [ -d "$p" ]; then echo directory; exit 0
elif [ -e "$p" ] && [ ! -f "$p" ]; then echo other; exit 0
fi
set -e
cm=; cu=; cg=; cuid=; cgid=; cs=
if [ -f "$p" ]; then
  set -- $(stat -L -c '%a %U %G %u %g %s' -- "$p" 2>/dev/null || stat -L -f '%Lp %Su %Sg %u %g %z' -- "$p")
  [ $# -eq 6 ]
  cm=$1; cu=$2; cg=$3; cuid=$4; cgid=$5; cs=$6
  echo "file $cm $cu $cg $cuid $cgid"
else
  if [ -n "$d" ] && [ ! -d "$d" ]; then
    if [ "$mk" = parents ]; then mkdir -p -- "$d"; else echo absent noparent; exit 0; fi
  fi
  echo absent
  [ -n "$want" ] || u=$(umask)
fi
t=$(mktemp "$p.bosun.XXXXXX")
trap 'rm -f "$t"' EXIT
cat > "$t"
if [ -n "$cm" ] && [ "$cs" = "$size" ]; then
  if cmp -s "$t" "$p"; then
    need_owner && chown "$owner" -- "$p"
    if [ -n "$mode" ] && { [ -z "$want" ] || [ "$want" != "$cm" ]; }; then chmod "$mode" -- "$p"; fi
    echo same
    exit 0
  else
    r=$?
    [ $r -eq 1 ] || { echo "cannot compare with cmp (exit code $r)" >&2; exit 1; }
  fi
fi
if [ -n "$cm" ]; then
  if [ ! -O "$p" ] || [ ! -G "$p" ] || [ -g "${d:-.}" ]; then chown "$cuid:$cgid" "$t" 2>/dev/null || true; fi
  need_owner && chown "$owner" "$t"
  [ -n "$want" ] || chmod "$cm" "$t"
else
  [ -z "$owner" ] || chown "$owner" "$t"
  [ -n "$want" ] || chmod "$(printf '%o' $(( 0666 & ~0$u )))" "$t"
fi
[ -z "$mode" ] || chmod "$mode" "$t"
mv -f "$t" "$p"
trap - EXIT
echo written
"#;

/// A directory in one command. Arguments: path, mode as written, the mode in octal when
/// it is octal, owner as written, its user and group parts, and `m` when `mkdir -m` can
/// set the mode (octal, no set-id or sticky bits). Prints the state before (`absent`,
/// `file`, `other` — then nothing is done — or `directory MODE USER GROUP UID GID`); a new
/// directory is made with its parents, an existing one gets mode and owner where they
/// differ.
const DIRECTORY: &str = r#"p=$1; mode=$2; want=$3; owner=$4; ou=$5; og=$6; mk=$7
if [ -d "$p" ]; then
  set -- $(stat -L -c '%a %U %G %u %g' -- "$p" 2>/dev/null || stat -L -f '%Lp %Su %Sg %u %g' -- "$p")
  [ $# -eq 5 ] || exit 1
  cm=$1; cu=$2; cg=$3; cuid=$4; cgid=$5
  echo "directory $cm $cu $cg $cuid $cgid"
  set -e
  if [ -n "$mode" ] && { [ -z "$want" ] || [ "$want" != "$cm" ]; }; then chmod "$mode" -- "$p"; fi
  need_owner && chown "$owner" -- "$p"
  exit 0
elif [ -f "$p" ]; then echo file; exit 0
elif [ -e "$p" ]; then echo other; exit 0
fi
echo absent
set -e
if [ "$mk" = m ]; then mkdir -p -m "$mode" -- "$p"
else
  mkdir -p -- "$p"
  [ -z "$mode" ] || chmod "$mode" -- "$p"
fi
[ -z "$owner" ] || chown "$owner" -- "$p"
"#;

/// Removes `$1` (recursively) if it exists; prints what it was: `absent`, `directory` or
/// `present`.
const REMOVE: &str = r#"if [ -d "$1" ]; then echo directory
elif [ -e "$1" ]; then echo present
else echo absent; exit 0
fi
exec rm -rf -- "$1"
"#;

/// Uploads stdin to a private temporary file, runs it with the arguments (stdin
/// closed), removes it and exits as the script did.
const SCRIPT: &str = r#"t=$(mktemp "${TMPDIR:-/tmp}/bosun-script.XXXXXX") || { echo "bosun: cannot upload the script" >&2; exit 125; }
cat > "$t" && chmod 700 "$t" || { rm -f "$t"; echo "bosun: cannot upload the script" >&2; exit 125; }
"$t" "$@" < /dev/null
rc=$?
rm -f "$t"
exit $rc
"#;

impl Remote<'_> {
    fn remaining(&self) -> Result<Option<Duration>, ModuleError> {
        match self.deadline {
            None => Ok(None),
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(ModuleError::TimedOut { output: None });
                }
                Ok(Some(left))
            }
        }
    }

    /// Runs `command`; a timeout or a sudo password prompt is an error, any exit code is
    /// returned.
    pub async fn run(
        &self,
        command: CommandSpec,
        stdin: Option<Vec<u8>>,
    ) -> Result<Output, ModuleError> {
        self.execute(command, stdin, None).await
    }

    /// [`Remote::run`], with the output shown to [`Remote::live`] as it is printed.
    pub async fn run_watched(
        &self,
        command: CommandSpec,
        stdin: Option<Vec<u8>>,
    ) -> Result<Output, ModuleError> {
        self.execute(command, stdin, self.live).await
    }

    async fn execute(
        &self,
        command: CommandSpec,
        stdin: Option<Vec<u8>>,
        live: Option<&OutputTap<'_>>,
    ) -> Result<Output, ModuleError> {
        let request = RunRequest {
            command,
            sudo: self.sudo,
            stdin,
            timeout: self.remaining()?,
        };
        let output = match live {
            Some(live) => self.conn.run_live(&request, live).await?,
            None => self.conn.run(&request).await?,
        };
        if output.timed_out {
            return Err(ModuleError::TimedOut {
                output: Some(output),
            });
        }
        if output.sudo_password_required {
            return Err(ModuleError::SudoPassword { output });
        }
        Ok(output)
    }

    /// Runs one of the scripts above (or a module's own) with `args`; a non-zero exit
    /// fails as `what`.
    pub(super) async fn script(
        &self,
        what: &str,
        script: &str,
        args: &[&str],
        stdin: Option<Vec<u8>>,
    ) -> Result<Output, ModuleError> {
        let mut argv = vec!["sh".to_string(), "-c".into(), script.into(), "sh".into()];
        argv.extend(args.iter().map(|a| a.to_string()));
        let output = self.run(CommandSpec::Argv(argv), stdin).await?;
        if output.exit_code != Some(0) {
            return Err(ModuleError::Failed {
                what: what.to_string(),
                output,
            });
        }
        Ok(output)
    }

    /// Runs one of the scripts above (or a module's own) with `args`; the output whatever
    /// the exit code.
    pub(super) async fn script_output(
        &self,
        script: &str,
        args: &[&str],
        stdin: Option<Vec<u8>>,
    ) -> Result<Output, ModuleError> {
        let mut argv = vec!["sh".to_string(), "-c".into(), script.into(), "sh".into()];
        argv.extend(args.iter().map(|a| a.to_string()));
        self.run(CommandSpec::Argv(argv), stdin).await
    }

    /// What `path` is (with its bytes when it is a regular file and `content`), and, when
    /// it is absent, whether the folder above it is a directory — one command.
    pub async fn probe(&self, path: &str, content: bool) -> Result<Probe, ModuleError> {
        let mode = if content { "content" } else { "" };
        let parent = super::parent_of(path).unwrap_or("");
        let out = self
            .script(
                &format!("cannot inspect {path}"),
                PROBE,
                &[path, mode, parent],
                None,
            )
            .await?;
        parse_probe(path, out.stdout)
    }

    /// Whether `path` is a directory.
    pub async fn is_directory(&self, path: &str) -> Result<bool, ModuleError> {
        let out = self
            .script(&format!("cannot inspect {path}"), IS_DIR, &[path], None)
            .await?;
        Ok(out.stdout.starts_with(b"yes"))
    }

    /// Makes `path` a regular file holding `content`, with `mode` and `owner`, in one
    /// command: written (atomically) only when the bytes differ, mode and owner set only
    /// where they differ. With `make_parents`, missing folders above it are created;
    /// without, a missing folder writes nothing (the report says so). A path that is a
    /// directory or something else is left alone, and the report says what it is.
    pub async fn put(
        &self,
        path: &str,
        content: &[u8],
        mode: Option<&ModeSpec>,
        owner: Option<&OwnerSpec>,
        make_parents: bool,
    ) -> Result<PutReport, ModuleError> {
        let parent = super::parent_of(path).unwrap_or("");
        let (mode_text, want) = mode_args(mode);
        let (owner_text, user, group) = owner_args(owner);
        let size = content.len().to_string();
        let parents = if make_parents { "parents" } else { "" };
        let script = format!("{NEED_OWNER}{PUT}");
        let out = self
            .script_output(
                &script,
                &[
                    path, parent, mode_text, &want, owner_text, user, group, &size, parents,
                ],
                Some(content.to_vec()),
            )
            .await?;
        let (before, rest) = parse_before(path, &out.stdout);
        if out.exit_code != Some(0) {
            let what = match (&before, rest.first().map(String::as_str)) {
                (None, _) => format!("cannot inspect {path}"),
                (Some(_), Some("same")) => format!("cannot set mode/owner of {path}"),
                (Some(_), _) => format!("cannot write {path}"),
            };
            return Err(ModuleError::Failed { what, output: out });
        }
        let Some((state, parent_exists)) = before else {
            return Err(ModuleError::Remote(format!("writing {path}: no answer")));
        };
        let outcome = rest.first().map(String::as_str);
        let differs = match (&state, outcome) {
            (FileState::File { .. } | FileState::Absent, Some("written")) => true,
            (FileState::File { .. }, Some("same")) => false,
            (FileState::Absent, None) if !parent_exists => false,
            (FileState::Directory { .. } | FileState::Other, None) => false,
            _ => {
                return Err(ModuleError::Remote(format!(
                    "writing {path}: unexpected answer {:?}",
                    String::from_utf8_lossy(&out.stdout)
                )))
            }
        };
        Ok(PutReport {
            before: state,
            parent_exists,
            differs,
        })
    }

    /// Makes `path` a directory with `mode` and `owner` (folders above it too), in one
    /// command; returns what it was before (without content). Something other than a
    /// directory at `path` is left alone.
    pub async fn directory(
        &self,
        path: &str,
        mode: Option<&ModeSpec>,
        owner: Option<&OwnerSpec>,
    ) -> Result<FileState, ModuleError> {
        let (mode_text, want) = mode_args(mode);
        let (owner_text, user, group) = owner_args(owner);
        // `mkdir -m` sets an octal mode without set-id or sticky bits exactly.
        let mkdir_m = match mode.map(|m| &m.mode) {
            Some(super::mode::Mode::Octal(m)) if *m <= 0o777 => "m",
            _ => "",
        };
        let script = format!("{NEED_OWNER}{DIRECTORY}");
        let out = self
            .script_output(
                &script,
                &[path, mode_text, &want, owner_text, user, group, mkdir_m],
                None,
            )
            .await?;
        let (before, _) = parse_before(path, &out.stdout);
        if out.exit_code != Some(0) {
            let what = match &before {
                None => format!("cannot inspect {path}"),
                Some((FileState::Directory { .. }, _)) => {
                    format!("cannot set mode/owner of {path}")
                }
                Some(_) => format!("cannot create directory {path}"),
            };
            return Err(ModuleError::Failed { what, output: out });
        }
        before
            .map(|(state, _)| state)
            .ok_or_else(|| ModuleError::Remote(format!("inspecting {path}: no answer")))
    }

    /// Removes `path` (with everything in it) if it exists, in one command; returns what
    /// it was: absent, a directory, or [`FileState::Other`] for anything else.
    pub async fn remove(&self, path: &str) -> Result<FileState, ModuleError> {
        let out = self
            .script(&format!("cannot remove {path}"), REMOVE, &[path], None)
            .await?;
        match out.stdout.split(|b| *b == b'\n').next() {
            Some(b"absent") => Ok(FileState::Absent),
            Some(b"directory") => Ok(FileState::Directory {
                mode: None,
                owner: None,
            }),
            Some(b"present") => Ok(FileState::Other),
            _ => Err(ModuleError::Remote(format!(
                "removing {path}: unexpected answer {:?}",
                String::from_utf8_lossy(&out.stdout)
            ))),
        }
    }

    /// Uploads `script` and runs it with `args`, its output shown to [`Remote::live`];
    /// the output is returned whatever the exit code (125 with `bosun: cannot upload the
    /// script` on stderr: the upload failed).
    pub async fn run_script(&self, script: &[u8], args: &[String]) -> Result<Output, ModuleError> {
        let mut argv = vec!["sh".to_string(), "-c".into(), SCRIPT.into(), "sh".into()];
        argv.extend(args.iter().cloned());
        self.run_watched(CommandSpec::Argv(argv), Some(script.to_vec()))
            .await
    }
}

/// A probe's answer: the path's state and whether the folder above it is a directory
/// (asked only when the path is absent; `true` otherwise, and for a path with no folder
/// above it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub state: FileState,
    pub parent_exists: bool,
}

/// What [`Remote::put`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutReport {
    /// The state before (a file's `content` is not read: empty).
    pub before: FileState,
    /// Whether the folder above the path existed (it matters when the path was absent).
    pub parent_exists: bool,
    /// The file was written (it was absent, or its bytes differed).
    pub differs: bool,
}

/// The `mode` argument of the scripts, and the mode in octal as `stat %a` prints it when
/// it is octal (empty for a symbolic mode or none).
fn mode_args(mode: Option<&ModeSpec>) -> (&str, String) {
    match mode {
        None => ("", String::new()),
        Some(m) => (
            m.text.as_str(),
            m.mode
                .absolute()
                .map(|v| format!("{v:o}"))
                .unwrap_or_default(),
        ),
    }
}

/// The owner arguments of the scripts: as written, its user part, its group part.
fn owner_args(owner: Option<&OwnerSpec>) -> (&str, &str, &str) {
    match owner {
        None => ("", "", ""),
        Some(o) => (
            o.text.as_str(),
            o.user.as_deref().unwrap_or(""),
            o.group.as_deref().unwrap_or(""),
        ),
    }
}

/// The first line of a script's answer — the state before, as `kind [MODE USER GROUP UID
/// GID]` or `absent noparent` — and the lines after it. `None` when there is no first
/// line or it cannot be read.
fn parse_before(path: &str, stdout: &[u8]) -> (Option<(FileState, bool)>, Vec<String>) {
    let text = String::from_utf8_lossy(stdout);
    let mut lines = text.lines();
    let first = lines.next().map(|l| {
        let mut head = l.as_bytes().to_vec();
        head.push(b'\n');
        parse_probe(path, head)
    });
    let rest = lines.map(str::to_string).collect();
    match first {
        Some(Ok(p)) => (Some((p.state, p.parent_exists)), rest),
        _ => (None, rest),
    }
}

fn parse_probe(path: &str, stdout: Vec<u8>) -> Result<Probe, ModuleError> {
    let bad = |why: &str| ModuleError::Remote(format!("inspecting {path}: {why}"));
    let nl = stdout
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(|| bad("no answer"))?;
    let head = String::from_utf8_lossy(&stdout[..nl]).to_string();
    let mut fields = head.split_whitespace();
    let kind = fields.next().unwrap_or_default();
    let rest: Vec<&str> = fields.collect();
    let found = |state| {
        Ok(Probe {
            state,
            parent_exists: true,
        })
    };
    match (kind, &rest[..]) {
        ("absent", []) => return found(FileState::Absent),
        ("absent", ["noparent"]) => {
            return Ok(Probe {
                state: FileState::Absent,
                parent_exists: false,
            })
        }
        // The one-command scripts name what they will not touch without its attributes.
        ("file", []) => {
            return found(FileState::File {
                content: Vec::new(),
                mode: None,
                owner: None,
            })
        }
        ("directory", []) => {
            return found(FileState::Directory {
                mode: None,
                owner: None,
            })
        }
        ("other", []) => return found(FileState::Other),
        _ => {}
    }
    let [mode, user, group, uid, gid] = rest[..] else {
        return Err(bad(&format!("unexpected answer {head:?}")));
    };
    let mode = u32::from_str_radix(mode, 8).map_err(|_| bad(&format!("mode {mode:?}")))?;
    let owner = Ownership {
        user: user.to_string(),
        group: group.to_string(),
        uid: uid.parse().ok(),
        gid: gid.parse().ok(),
    };
    match kind {
        "file" => found(FileState::File {
            content: stdout[nl + 1..].to_vec(),
            mode: Some(mode),
            owner: Some(owner),
        }),
        "directory" => found(FileState::Directory {
            mode: Some(mode),
            owner: Some(owner),
        }),
        "other" => found(FileState::Other),
        _ => Err(bad(&format!("unexpected answer {head:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_specs() {
        let o = OwnerSpec::parse("alice:staff").unwrap();
        assert_eq!(o.user.as_deref(), Some("alice"));
        assert_eq!(o.group.as_deref(), Some("staff"));
        let o = OwnerSpec::parse(":staff").unwrap();
        assert_eq!(o.user, None);
        assert!(OwnerSpec::parse(":").is_err());
        assert!(OwnerSpec::parse("a b").is_err());
        assert!(OwnerSpec::parse("-rf").is_err());
        let cur = Ownership {
            user: "root".into(),
            group: "wheel".into(),
            uid: Some(0),
            gid: Some(0),
        };
        assert!(OwnerSpec::parse("root").unwrap().satisfied_by(Some(&cur)));
        assert!(OwnerSpec::parse("0:0").unwrap().satisfied_by(Some(&cur)));
        assert!(!OwnerSpec::parse("root:staff")
            .unwrap()
            .satisfied_by(Some(&cur)));
        assert!(!OwnerSpec::parse("root").unwrap().satisfied_by(None));
    }

    #[test]
    fn probe_answers() {
        assert_eq!(
            parse_probe("/x", b"absent\n".to_vec()).unwrap(),
            Probe {
                state: FileState::Absent,
                parent_exists: true
            }
        );
        assert_eq!(
            parse_probe("/x", b"absent noparent\n".to_vec()).unwrap(),
            Probe {
                state: FileState::Absent,
                parent_exists: false
            }
        );
        let f = parse_probe("/x", b"file 644 root root 0 0\nhello\n".to_vec())
            .unwrap()
            .state;
        assert_eq!(
            f,
            FileState::File {
                content: b"hello\n".to_vec(),
                mode: Some(0o644),
                owner: Some(Ownership {
                    user: "root".into(),
                    group: "root".into(),
                    uid: Some(0),
                    gid: Some(0)
                })
            }
        );
        assert!(parse_probe("/x", b"file 644\n".to_vec()).is_err());
        assert!(parse_probe("/x", b"absent nonsense\n".to_vec()).is_err());
        assert!(parse_probe("/x", Vec::new()).is_err());
        // The one-command scripts' first line, and what follows it.
        let (before, rest) = parse_before("/x", b"directory\n");
        assert_eq!(
            before,
            Some((
                FileState::Directory {
                    mode: None,
                    owner: None
                },
                true
            ))
        );
        assert!(rest.is_empty());
        let (before, rest) = parse_before("/x", b"file 600 a b 1 2\nsame\n");
        assert!(matches!(
            before,
            Some((FileState::File { mode: Some(0o600), ref content, .. }, true)) if content.is_empty()
        ));
        assert_eq!(rest, vec!["same".to_string()]);
        assert_eq!(parse_before("/x", b"").0, None);
    }
}
