//! File work on a host, every bit of it through [`Connection::run`] with small POSIX `sh`
//! scripts (paths and values are positional arguments, never spliced into the script):
//! probing a path (kind, mode, owner and, for a regular file, its bytes), writing a file
//! atomically (a temporary file beside it, then `mv`), creating a directory, setting mode
//! and owner, removing a path, and uploading and running a script.

use std::time::Duration;

use tokio::time::Instant;

use super::mode::ModeSpec;
use super::ModuleError;
use crate::connection::{CommandSpec, Connection, Output, RunRequest};

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

/// Where commands of one step go, and until when they may run.
pub struct Remote<'a> {
    pub conn: &'a dyn Connection,
    pub sudo: bool,
    /// The step's deadline (its `timeout`).
    pub deadline: Option<Instant>,
}

const PROBE: &str = r#"p=$1
if [ -d "$p" ]; then t=directory
elif [ -f "$p" ]; then t=file
elif [ -e "$p" ]; then t=other
else echo absent; exit 0
fi
m=$(stat -L -c '%a %U %G %u %g' -- "$p" 2>/dev/null || stat -L -f '%Lp %Su %Sg %u %g' -- "$p") || exit 1
echo "$t $m"
if [ "$t" = file ] && [ "$2" = content ]; then exec cat -- "$p"; fi
"#;

const IS_DIR: &str = r#"if [ -d "$1" ]; then echo yes; else echo no; fi"#;

/// Writes stdin to `$1` atomically. The mode starts as the existing file's (else the
/// default for a new file under the caller's umask), then `$2` applies to it (so a
/// symbolic mode is relative to that); owner `$3`, else the existing file's when
/// permitted. With `$4` = `parents`, missing folders above it are created first.
const WRITE: &str = r#"set -e
p=$1; mode=$2; owner=$3
u=$(umask)
if [ "$4" = parents ]; then mkdir -p -- "$(dirname -- "$p")"; fi
umask 077
t=$(mktemp "$p.bosun.XXXXXX")
trap 'rm -f "$t"' EXIT
cat > "$t"
if [ -e "$p" ]; then
  cur=$(stat -L -c '%a %u:%g' -- "$p" 2>/dev/null || stat -L -f '%Lp %u:%g' -- "$p")
  base=${cur%% *}
  [ -n "$owner" ] || chown "${cur#* }" "$t" 2>/dev/null || true
else
  base=$(printf '%o' $(( 0666 & ~0$u )))
fi
chmod "$base" "$t"
[ -z "$mode" ] || chmod "$mode" "$t"
[ -z "$owner" ] || chown "$owner" "$t"
mv -f "$t" "$p"
trap - EXIT
"#;

const DIRECTORY: &str = r#"set -e
p=$1; mode=$2; owner=$3
if [ -e "$p" ] && [ ! -d "$p" ]; then echo "$p exists and is not a directory" >&2; exit 1; fi
mkdir -p -- "$p"
[ -z "$mode" ] || chmod "$mode" -- "$p"
[ -z "$owner" ] || chown "$owner" -- "$p"
"#;

const ATTRS: &str = r#"set -e
p=$1; mode=$2; owner=$3
[ -z "$mode" ] || chmod "$mode" -- "$p"
[ -z "$owner" ] || chown "$owner" -- "$p"
"#;

const REMOVE: &str = r#"rm -rf -- "$1""#;

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
        let request = RunRequest {
            command,
            sudo: self.sudo,
            stdin,
            timeout: self.remaining()?,
        };
        let output = self.conn.run(&request).await?;
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

    /// Runs one of the scripts above with `args`; a non-zero exit fails as `what`.
    async fn script(
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

    /// What `path` is (with its bytes when it is a regular file and `content`).
    pub async fn probe(&self, path: &str, content: bool) -> Result<FileState, ModuleError> {
        let mode = if content { "content" } else { "" };
        let out = self
            .script(
                &format!("cannot inspect {path}"),
                PROBE,
                &[path, mode],
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

    /// Replaces `path`'s content atomically (creating the folders above it first with
    /// `make_parents`).
    pub async fn write(
        &self,
        path: &str,
        content: &[u8],
        mode: Option<&ModeSpec>,
        owner: Option<&OwnerSpec>,
        make_parents: bool,
    ) -> Result<(), ModuleError> {
        let mode = mode.map(|m| m.text.as_str()).unwrap_or("");
        let owner = owner.map(|o| o.text.as_str()).unwrap_or("");
        let parents = if make_parents { "parents" } else { "" };
        self.script(
            &format!("cannot write {path}"),
            WRITE,
            &[path, mode, owner, parents],
            Some(content.to_vec()),
        )
        .await
        .map(|_| ())
    }

    pub async fn directory(
        &self,
        path: &str,
        mode: Option<&ModeSpec>,
        owner: Option<&OwnerSpec>,
    ) -> Result<(), ModuleError> {
        let mode = mode.map(|m| m.text.as_str()).unwrap_or("");
        let owner = owner.map(|o| o.text.as_str()).unwrap_or("");
        self.script(
            &format!("cannot create directory {path}"),
            DIRECTORY,
            &[path, mode, owner],
            None,
        )
        .await
        .map(|_| ())
    }

    /// Sets mode and/or owner of an existing path.
    pub async fn attributes(
        &self,
        path: &str,
        mode: Option<&ModeSpec>,
        owner: Option<&OwnerSpec>,
    ) -> Result<(), ModuleError> {
        if mode.is_none() && owner.is_none() {
            return Ok(());
        }
        let mode = mode.map(|m| m.text.as_str()).unwrap_or("");
        let owner = owner.map(|o| o.text.as_str()).unwrap_or("");
        self.script(
            &format!("cannot set mode/owner of {path}"),
            ATTRS,
            &[path, mode, owner],
            None,
        )
        .await
        .map(|_| ())
    }

    pub async fn remove(&self, path: &str) -> Result<(), ModuleError> {
        self.script(&format!("cannot remove {path}"), REMOVE, &[path], None)
            .await
            .map(|_| ())
    }

    /// Uploads `script` and runs it with `args`; the output is returned whatever the exit
    /// code (125 with `bosun: cannot upload the script` on stderr: the upload failed).
    pub async fn run_script(&self, script: &[u8], args: &[String]) -> Result<Output, ModuleError> {
        let mut argv = vec!["sh".to_string(), "-c".into(), SCRIPT.into(), "sh".into()];
        argv.extend(args.iter().cloned());
        self.run(CommandSpec::Argv(argv), Some(script.to_vec()))
            .await
    }
}

fn parse_probe(path: &str, stdout: Vec<u8>) -> Result<FileState, ModuleError> {
    let bad = |why: &str| ModuleError::Remote(format!("inspecting {path}: {why}"));
    let nl = stdout
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(|| bad("no answer"))?;
    let head = String::from_utf8_lossy(&stdout[..nl]).to_string();
    let mut fields = head.split_whitespace();
    let kind = fields.next().unwrap_or_default();
    if kind == "absent" {
        return Ok(FileState::Absent);
    }
    let rest: Vec<&str> = fields.collect();
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
        "file" => Ok(FileState::File {
            content: stdout[nl + 1..].to_vec(),
            mode: Some(mode),
            owner: Some(owner),
        }),
        "directory" => Ok(FileState::Directory {
            mode: Some(mode),
            owner: Some(owner),
        }),
        "other" => Ok(FileState::Other),
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
            FileState::Absent
        );
        let f = parse_probe("/x", b"file 644 root root 0 0\nhello\n".to_vec()).unwrap();
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
        assert!(parse_probe("/x", Vec::new()).is_err());
    }
}
