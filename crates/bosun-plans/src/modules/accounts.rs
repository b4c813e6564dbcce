//! `user` and `group`: local accounts through the host's own tools — `getent` and `id`
//! to read, `useradd`/`usermod`/`userdel` and `groupadd`/`groupmod`/`groupdel` to act —
//! and a user's `~/.ssh/authorized_keys`, written as that user.
//!
//! - `group` is one remote command: it reads the group (`getent group`), acts if it must
//!   and prints what it found, and [`decide_group`] on that gives the result a dry run
//!   predicts from a read alone.
//! - `user` reads everything it compares in one command (the passwd entry, the primary
//!   and supplementary groups, the groups it refers to, who holds the uid, the
//!   authorized_keys file and its folder), decides ([`decide_user`]), and only when
//!   something differs runs a second command: the `useradd`/`usermod`/`userdel` argv it
//!   decided on, then the keys. A dry run stops after the read.
//! - The keys file is written by the user itself (`runuser`, else `su`), so a `.ssh`
//!   that the user swapped for a symbolic link cannot make root write elsewhere; root
//!   only hands back a `.ssh` folder that is not the user's (`chown -h`, which never
//!   follows a link). A `.ssh` or `authorized_keys` that is a symbolic link is refused.
//!
//! Names, ids, paths and key lines are checked before anything runs (see the `check_*`
//! functions), and every value reaches the host as a positional argument.

use std::collections::{BTreeMap, BTreeSet};

use super::remote::Remote;
use super::{Change, ModuleError, Outcome, Overlay};
use crate::model::Presence;

/// The longest user or group name.
pub const NAME_MAX: usize = 32;

/// A user or group name: `[a-z_][a-z0-9_-]*[$]?`, at most [`NAME_MAX`] characters.
pub fn check_name(kind: &str, name: &str) -> Result<(), String> {
    let body = name.strip_suffix('$').unwrap_or(name);
    let ok = !body.is_empty()
        && name.len() <= NAME_MAX
        && body
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && body
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{kind} name {name:?} is not valid: lower-case letters, digits, `_` and `-`, starting with a letter or `_`, an optional final `$`, at most {NAME_MAX} characters"
        ))
    }
}

/// A group as a user refers to it: a name, or a gid.
pub fn check_group_ref(group: &str) -> Result<(), String> {
    if !group.is_empty() && group.bytes().all(|b| b.is_ascii_digit()) {
        return parse_id("gid", group).map(|_| ());
    }
    check_name("group", group)
}

/// A uid or gid: 0 to 4294967294 (4294967295 is `-1` to the tools).
pub fn parse_id(field: &str, text: &str) -> Result<u32, String> {
    let bad = || format!("`{field}` must be a whole number from 0 to 4294967294, not {text:?}");
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    match text.parse::<u32>() {
        Ok(n) if n != u32::MAX => Ok(n),
        _ => Err(bad()),
    }
}

/// `shell` and `home`: an absolute path that fits a passwd field.
pub fn check_path(field: &str, path: &str) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err(format!("`{field}` must be an absolute path, not {path:?}"));
    }
    if path.contains([':', '\n', '\r', '\0']) {
        return Err(format!(
            "`{field}` {path:?} holds a `:`, a newline or a NUL, which a passwd entry cannot"
        ));
    }
    Ok(())
}

/// `comment` (the GECOS field): anything but `:`, newlines and NUL.
pub fn check_comment(comment: &str) -> Result<(), String> {
    if comment.contains([':', '\n', '\r', '\0']) {
        return Err(format!(
            "`comment` {comment:?} holds a `:`, a newline or a NUL, which a passwd entry cannot"
        ));
    }
    Ok(())
}

/// One `authorized_keys` line: not empty, no line break, no NUL.
pub fn check_key_line(line: &str) -> Result<(), String> {
    if line.trim().is_empty() {
        return Err("an authorized key is empty".into());
    }
    if line.contains(['\n', '\r', '\0']) {
        return Err(format!(
            "an authorized key holds a line break or a NUL (one key per list item): {:?}",
            line.chars().take(40).collect::<String>()
        ));
    }
    Ok(())
}

/// A `group` step rendered for one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSpec {
    pub name: String,
    pub state: Presence,
    pub gid: Option<u32>,
    pub system: bool,
}

/// A `user` step rendered for one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserSpec {
    pub name: String,
    pub state: Presence,
    pub uid: Option<u32>,
    /// The primary group: a name or a gid.
    pub group: Option<String>,
    pub groups: Option<Vec<String>>,
    pub append: bool,
    pub shell: Option<String>,
    pub home: Option<String>,
    pub create_home: bool,
    pub system: bool,
    pub comment: Option<String>,
    pub authorized_keys: Option<Vec<String>>,
    pub remove: bool,
}

impl UserSpec {
    /// The authorized_keys file's bytes: each key on its own line.
    pub fn keys_content(&self) -> Option<Vec<u8>> {
        self.authorized_keys.as_ref().map(|keys| {
            let mut s = String::new();
            for k in keys {
                s.push_str(k.trim_end());
                s.push('\n');
            }
            s.into_bytes()
        })
    }
}

/// A `getent group` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupEntry {
    pub name: String,
    pub gid: u32,
}

fn parse_group_line(line: &str) -> Option<GroupEntry> {
    let mut f = line.split(':');
    let name = f.next()?.to_string();
    let _password = f.next()?;
    let gid = f.next()?.parse().ok()?;
    Some(GroupEntry { name, gid })
}

/// A `getent passwd` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasswdEntry {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub comment: String,
    pub home: String,
    pub shell: String,
}

fn parse_passwd_line(line: &str) -> Option<PasswdEntry> {
    let f: Vec<&str> = line.split(':').collect();
    let [name, _password, uid, gid, comment, home, shell] = f[..] else {
        return None;
    };
    Some(PasswdEntry {
        name: name.to_string(),
        uid: uid.parse().ok()?,
        gid: gid.parse().ok()?,
        comment: comment.to_string(),
        home: home.to_string(),
        shell: shell.to_string(),
    })
}

// ---------------------------------------------------------------------------------
// group

/// Reads group `$2` (and who has gid `$3`, when given) and, with `$1` = `apply`, makes
/// it as `$4` (state), `$5` (`system`) say. Prints `name LINE` (the `getent group` line,
/// or `-`), `gid LINE` when `$3` is given, then runs `groupadd`, `groupmod -g` or
/// `groupdel` — the exit code is the tool's.
const GROUP: &str = r#"mode=$1; name=$2; gid=$3; state=$4; sys=$5
cur=$(getent group "$name") || cur=
echo "name ${cur:--}"
if [ -n "$gid" ]; then
  held=$(getent group "$gid") || held=
  echo "gid ${held:--}"
fi
[ "$mode" = apply ] || exit 0
if [ "$state" = absent ]; then
  [ -z "$cur" ] || exec groupdel -- "$name"
  exit 0
fi
if [ -z "$cur" ]; then
  set -- groupadd
  [ -z "$gid" ] || set -- "$@" -g "$gid"
  [ "$sys" != system ] || set -- "$@" -r
  exec "$@" -- "$name"
fi
cg=$(printf '%s\n' "$cur" | cut -d: -f3)
if [ -n "$gid" ] && [ "$gid" != "$cg" ]; then exec groupmod -g "$gid" -- "$name"; fi
"#;

/// What a group step found: the group, and which group holds the gid it asks for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupFound {
    pub current: Option<GroupEntry>,
    pub gid_holder: Option<GroupEntry>,
}

fn parse_group_answer(stdout: &[u8]) -> Result<GroupFound, ModuleError> {
    let text = String::from_utf8_lossy(stdout);
    let mut found = GroupFound::default();
    let mut named = false;
    for line in text.lines() {
        let (key, rest) = line.split_once(' ').unwrap_or((line, ""));
        if key != "name" && key != "gid" {
            continue;
        }
        let entry = if rest == "-" {
            None
        } else {
            Some(parse_group_line(rest).ok_or_else(|| {
                ModuleError::Remote(format!("reading the group: unexpected answer {line:?}"))
            })?)
        };
        match key {
            "name" => {
                found.current = entry;
                named = true;
            }
            "gid" => found.gid_holder = entry,
            _ => {}
        }
    }
    if !named {
        return Err(ModuleError::Remote("reading the group: no answer".into()));
    }
    Ok(found)
}

/// What a group step does (or would do) to a group that is `found`.
pub fn decide_group(spec: &GroupSpec, found: &GroupFound) -> Result<(Change, String), ModuleError> {
    let name = &spec.name;
    let taken = |gid: u32| match &found.gid_holder {
        Some(h) if &h.name != name => Err(ModuleError::Invalid(format!(
            "group {name}: gid {gid} is already the gid of group {}",
            h.name
        ))),
        _ => Ok(()),
    };
    match (spec.state, &found.current) {
        (Presence::Absent, None) => {
            Ok((Change::Unchanged, format!("group {name} is already absent")))
        }
        (Presence::Absent, Some(g)) => Ok((
            Change::Changed,
            format!("group {name} removed (gid {})", g.gid),
        )),
        (Presence::Present, None) => {
            if let Some(gid) = spec.gid {
                taken(gid)?;
            }
            let mut what = Vec::new();
            if let Some(gid) = spec.gid {
                what.push(format!("gid {gid}"));
            }
            if spec.system {
                what.push("system".to_string());
            }
            Ok((
                Change::Changed,
                if what.is_empty() {
                    format!("group {name} created")
                } else {
                    format!("group {name} created ({})", what.join(", "))
                },
            ))
        }
        (Presence::Present, Some(g)) => match spec.gid {
            Some(gid) if gid != g.gid => {
                taken(gid)?;
                Ok((
                    Change::Changed,
                    format!("group {name}: gid {} → {gid}", g.gid),
                ))
            }
            _ => Ok((
                Change::Unchanged,
                format!("group {name} exists (gid {})", g.gid),
            )),
        },
    }
}

fn group_args(spec: &GroupSpec, mode: &str) -> Vec<String> {
    vec![
        mode.to_string(),
        spec.name.clone(),
        spec.gid.map(|g| g.to_string()).unwrap_or_default(),
        match spec.state {
            Presence::Present => "present".into(),
            Presence::Absent => "absent".into(),
        },
        if spec.system {
            "system".into()
        } else {
            String::new()
        },
    ]
}

pub(super) async fn apply_group(
    spec: &GroupSpec,
    remote: &Remote<'_>,
) -> Result<Outcome, ModuleError> {
    let args = group_args(spec, "apply");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = remote.script_output(GROUP, &args, None).await?;
    let found = parse_group_answer(&out.stdout);
    if out.exit_code != Some(0) {
        return Err(ModuleError::Failed {
            what: format!("group {}", spec.name),
            output: out,
        });
    }
    let (change, message) = decide_group(spec, &found?)?;
    Ok(Outcome::new(change, message))
}

pub(super) async fn predict_group(
    spec: &GroupSpec,
    remote: &Remote<'_>,
    overlay: &mut Overlay,
) -> Result<Outcome, ModuleError> {
    let args = group_args(spec, "check");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = remote
        .script(
            &format!("cannot read group {}", spec.name),
            GROUP,
            &args,
            None,
        )
        .await?;
    let mut found = parse_group_answer(&out.stdout)?;
    // What earlier steps of this dry run would have done to the group.
    match overlay.groups.get(&spec.name) {
        Some(Some(gid)) => {
            let gid = gid.or(found.current.as_ref().map(|g| g.gid));
            match gid {
                Some(gid) => {
                    found.current = Some(GroupEntry {
                        name: spec.name.clone(),
                        gid,
                    })
                }
                // Made by an earlier step with a gid the system picks: the same as asking
                // for none, or a change to the one asked for.
                None => {
                    let (change, message) = match (spec.state, spec.gid) {
                        (Presence::Absent, _) => {
                            (Change::Changed, format!("group {} removed", spec.name))
                        }
                        (Presence::Present, Some(g)) => (
                            Change::Changed,
                            format!("group {}: gid set to {g}", spec.name),
                        ),
                        (Presence::Present, None) => {
                            (Change::Unchanged, format!("group {} exists", spec.name))
                        }
                    };
                    let after = (spec.state == Presence::Present).then_some(spec.gid);
                    overlay.groups.insert(spec.name.clone(), after);
                    let mut outcome = Outcome::new(change, message);
                    outcome.warnings.extend(overlay.caveat());
                    return Ok(outcome);
                }
            }
        }
        Some(None) => found.current = None,
        None => {}
    }
    let (change, message) = decide_group(spec, &found)?;
    let after = (spec.state == Presence::Present)
        .then(|| spec.gid.or(found.current.as_ref().map(|g| g.gid)));
    overlay.groups.insert(spec.name.clone(), after);
    let mut outcome = Outcome::new(change, message);
    outcome.warnings.extend(overlay.caveat());
    Ok(outcome)
}

// ---------------------------------------------------------------------------------
// user

/// Reads what a user step compares (run as [`USER_READ_HEAD`] then [`USER_READ_REST`]).
/// Arguments: name, uid (or empty), the `home` the step asks for (or empty), `keys` when
/// the step manages authorized_keys (or empty), then the groups the step refers to.
/// Prints, one per line: `passwd LINE|-`; when the user exists, `member GID NAME` for
/// each of its groups (`id -G` paired with `id -Gn`, the primary one first); `uid
/// LINE|-` (who holds the uid) when one is given; `ref REF LINE|-` for each group
/// referred to; `defhome DIR` (useradd's base for homes); and with `keys`: `keyhome DIR`
/// (the home the keys go in), then `homedir`, `sshdir` and `keys`, each `absent`,
/// `link`, `other` or `dir|file MODE UID GID`, the file's bytes after the `keys` line.
const USER_READ_HEAD: &str = r#"name=$1; uid=$2; home=$3; keys=$4; shift 4
ent=$(getent passwd "$name") || ent=
echo "passwd ${ent:--}"
if [ -n "$ent" ]; then
  ids=$(id -G -- "$name") || exit 1
  names=$(id -Gn -- "$name" 2>/dev/null)
  set -f
  i=1
  for g in $ids; do
    n=$(printf '%s\n' $names | sed -n "${i}p")
    echo "member $g ${n:-$g}"
    i=$((i + 1))
  done
  set +f
fi
"#;

/// The rest of the read: the uid's holder, the groups referred to, homes and keys.
const USER_READ_REST: &str = r#"if [ -n "$uid" ]; then
  held=$(getent passwd "$uid") || held=
  echo "uid ${held:--}"
fi
for r do
  line=$(getent group "$r") || line=
  echo "ref $r ${line:--}"
done
base=$(useradd -D 2>/dev/null | sed -n 's/^HOME=//p')
echo "defhome ${base:-/home}"
[ "$keys" = keys ] || exit 0
if [ -z "$home" ]; then
  if [ -n "$ent" ]; then home=$(printf '%s\n' "$ent" | cut -d: -f6); else home="${base:-/home}/$name"; fi
fi
echo "keyhome $home"
look() {
  if [ -L "$1" ]; then echo "$2 link"
  elif [ -d "$1" ]; then echo "$2 dir $(stat -c '%a %u %g' -- "$1")"
  elif [ -f "$1" ]; then echo "$2 file $(stat -c '%a %u %g' -- "$1")"
  elif [ -e "$1" ]; then echo "$2 other"
  else echo "$2 absent"
  fi
}
look "$home" homedir
look "$home/.ssh" sshdir
look "$home/.ssh/authorized_keys" keys
if [ -f "$home/.ssh/authorized_keys" ] && [ ! -L "$home/.ssh/authorized_keys" ]; then
  exec cat -- "$home/.ssh/authorized_keys"
fi
"#;

/// Acts for a user step. Arguments: name, `keys` when the keys file is to be written
/// (its bytes on stdin) or empty, then the account command's argv (`useradd …`,
/// `usermod …`, `userdel …`; none when only the keys change). The keys go to
/// `<home>/.ssh/authorized_keys` of the user's passwd entry (as it is after the
/// command): root gives back a `.ssh` that is not the user's (`chown -h`), then the user
/// itself makes the folder (0700) and replaces the file atomically (0600).
const USER_ACT: &str = r#"name=$1; keys=$2; shift 2
if [ $# -gt 0 ]; then "$@" || exit $?; fi
[ "$keys" = keys ] || exit 0
ent=$(getent passwd "$name") || { echo "user $name does not exist" >&2; exit 1; }
uid=$(printf '%s\n' "$ent" | cut -d: -f3)
gid=$(printf '%s\n' "$ent" | cut -d: -f4)
home=$(printf '%s\n' "$ent" | cut -d: -f6)
d="$home/.ssh"
if [ ! -d "$home" ]; then
  echo "the home folder $home of user $name does not exist: cannot write $d/authorized_keys" >&2; exit 1
fi
if [ -L "$d" ] || { [ -e "$d" ] && [ ! -d "$d" ]; }; then
  echo "$d is a symbolic link or not a folder: refusing to write authorized_keys there" >&2; exit 1
fi
if [ -L "$d/authorized_keys" ] || { [ -e "$d/authorized_keys" ] && [ ! -f "$d/authorized_keys" ]; }; then
  echo "$d/authorized_keys is a symbolic link or not a regular file: refusing to replace it" >&2; exit 1
fi
if [ -d "$d" ] && [ "$(stat -c '%u %g' -- "$d")" != "$uid $gid" ]; then chown -h "$uid:$gid" -- "$d" || exit 1; fi
W='umask 077; d=$1
[ -d "$d" ] || mkdir -m 700 -- "$d" || exit 1
chmod 700 -- "$d" || exit 1
t=$(mktemp "$d/.authorized_keys.bosun.XXXXXX") || exit 1
if cat > "$t" && chmod 600 -- "$t" && mv -f -- "$t" "$d/authorized_keys"; then exit 0; fi
rm -f -- "$t"; exit 1'
if [ "$(id -u)" = "$uid" ]; then exec sh -c "$W" sh "$d"
elif command -v runuser >/dev/null 2>&1; then exec runuser -u "$name" -- sh -c "$W" sh "$d"
else exec su -s /bin/sh -c "$W" "$name" -- sh "$d"
fi
"#;

/// The state of a path a user step reads: `absent`, `link`, `other`, or a folder or
/// file with its mode and owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathFound {
    Absent,
    Link,
    Other,
    Dir { mode: u32, uid: u32, gid: u32 },
    File { mode: u32, uid: u32, gid: u32 },
}

impl PathFound {
    fn parse(text: &str) -> Option<PathFound> {
        let f: Vec<&str> = text.split_whitespace().collect();
        Some(match f[..] {
            ["absent"] => PathFound::Absent,
            ["link"] => PathFound::Link,
            ["other"] => PathFound::Other,
            [kind @ ("dir" | "file"), mode, uid, gid] => {
                let mode = u32::from_str_radix(mode, 8).ok()?;
                let (uid, gid) = (uid.parse().ok()?, gid.parse().ok()?);
                if kind == "dir" {
                    PathFound::Dir { mode, uid, gid }
                } else {
                    PathFound::File { mode, uid, gid }
                }
            }
            _ => return None,
        })
    }
}

/// What a user step read from the host.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserFound {
    pub current: Option<PasswdEntry>,
    /// The user's groups (gid, name), the primary one first.
    pub member_of: Vec<(u32, String)>,
    /// Who holds the uid the step asks for.
    pub uid_holder: Option<String>,
    /// The groups the step refers to, as written → the group, when it exists.
    pub refs: BTreeMap<String, Option<GroupEntry>>,
    /// useradd's base for homes (`HOME=` of `useradd -D`).
    pub default_base: String,
    /// With authorized_keys: the home they go in, `.ssh`, the file and its bytes.
    pub keys: Option<KeysFound>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeysFound {
    pub home: String,
    pub home_dir: PathFound,
    pub ssh_dir: PathFound,
    pub file: PathFound,
    pub content: Vec<u8>,
}

fn parse_user_answer(stdout: &[u8]) -> Result<UserFound, ModuleError> {
    let bad = |why: String| ModuleError::Remote(format!("reading the user: {why}"));
    let mut found = UserFound::default();
    let mut rest = stdout;
    let mut saw_passwd = false;
    let (mut home, mut home_dir, mut ssh_dir) = (None, None, None);
    while !rest.is_empty() {
        let nl = rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len());
        let line = String::from_utf8_lossy(&rest[..nl]).to_string();
        rest = rest.get(nl + 1..).unwrap_or_default();
        let (key, value) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        match key {
            "passwd" => {
                saw_passwd = true;
                if value != "-" {
                    found.current = Some(
                        parse_passwd_line(value)
                            .ok_or_else(|| bad(format!("unexpected passwd entry {value:?}")))?,
                    );
                }
            }
            "member" => {
                let (gid, name) = value
                    .split_once(' ')
                    .and_then(|(g, n)| Some((g.parse().ok()?, n.to_string())))
                    .ok_or_else(|| bad(format!("unexpected line {line:?}")))?;
                found.member_of.push((gid, name));
            }
            "uid" if value != "-" => {
                found.uid_holder = value.split(':').next().map(str::to_string);
            }
            "ref" => {
                let (r, entry) = value.split_once(' ').unwrap_or((value, "-"));
                let entry = if entry == "-" {
                    None
                } else {
                    Some(
                        parse_group_line(entry)
                            .ok_or_else(|| bad(format!("unexpected group entry {entry:?}")))?,
                    )
                };
                found.refs.insert(r.to_string(), entry);
            }
            "defhome" => found.default_base = value.to_string(),
            "keyhome" => home = Some(value.to_string()),
            "homedir" => {
                home_dir = Some(
                    PathFound::parse(value)
                        .ok_or_else(|| bad(format!("unexpected line {line:?}")))?,
                )
            }
            "sshdir" => {
                ssh_dir = Some(
                    PathFound::parse(value)
                        .ok_or_else(|| bad(format!("unexpected line {line:?}")))?,
                )
            }
            "keys" => {
                let file = PathFound::parse(value)
                    .ok_or_else(|| bad(format!("unexpected line {line:?}")))?;
                found.keys = Some(KeysFound {
                    home: home.clone().unwrap_or_default(),
                    home_dir: home_dir.clone().unwrap_or(PathFound::Absent),
                    ssh_dir: ssh_dir.clone().unwrap_or(PathFound::Absent),
                    file,
                    content: rest.to_vec(),
                });
                break;
            }
            _ => {}
        }
    }
    if !saw_passwd {
        return Err(bad("no answer".into()));
    }
    Ok(found)
}

/// What a user step does: the account command (if any) and whether the keys are
/// written, with the result's change and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserDecision {
    pub change: Change,
    pub message: String,
    pub command: Vec<String>,
    pub write_keys: bool,
    /// A dry run cannot tell (why).
    pub unknown: Option<String>,
}

fn join_names(v: &[String]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(",")
    }
}

/// Decides a user step on what was read; `overlay_groups` are the groups earlier steps
/// of a dry run would have made (name → exists), `raw_before` whether a raw command ran
/// before (then a missing group is unknown, not an error).
pub fn decide_user(
    spec: &UserSpec,
    found: &UserFound,
    overlay_groups: &BTreeMap<String, Option<Option<u32>>>,
    raw_before: bool,
) -> Result<UserDecision, ModuleError> {
    let name = &spec.name;
    let done = |change, message: String, command: Vec<String>, write_keys| UserDecision {
        change,
        message,
        command,
        write_keys,
        unknown: None,
    };
    if spec.state == Presence::Absent {
        return Ok(match &found.current {
            None => done(
                Change::Unchanged,
                format!("user {name} is already absent"),
                Vec::new(),
                false,
            ),
            Some(cur) => {
                let mut cmd = vec!["userdel".to_string()];
                if spec.remove {
                    cmd.push("-r".into());
                }
                cmd.extend(["--".into(), name.clone()]);
                let what = if spec.remove {
                    format!("user {name} removed with its home {}", cur.home)
                } else {
                    format!("user {name} removed (its home {} is kept)", cur.home)
                };
                done(Change::Changed, what, cmd, false)
            }
        });
    }
    // The groups referred to: each must exist (or be made by an earlier step).
    let mut unknown = None;
    let resolve = |r: &str| -> Result<Option<String>, ModuleError> {
        match found.refs.get(r) {
            Some(Some(g)) => match overlay_groups.get(&g.name) {
                Some(None) => Err(ModuleError::Invalid(format!(
                    "user {name}: group {r} would be removed by an earlier step"
                ))),
                _ => Ok(Some(g.name.clone())),
            },
            _ => match overlay_groups.get(r) {
                Some(Some(_)) => Ok(Some(r.to_string())),
                _ if raw_before => Ok(None),
                _ => Err(ModuleError::Invalid(format!(
                    "user {name}: group {r} does not exist"
                ))),
            },
        }
    };
    let primary = match &spec.group {
        None => None,
        Some(g) => match resolve(g)? {
            Some(n) => Some(n),
            None => {
                unknown = Some(format!(
                    "group {g} does not exist now; an earlier raw command may create it"
                ));
                Some(g.clone())
            }
        },
    };
    let mut wanted_groups: Option<Vec<String>> = None;
    if let Some(groups) = &spec.groups {
        let mut v = Vec::new();
        for g in groups {
            match resolve(g)? {
                Some(n) => v.push(n),
                None => {
                    unknown = Some(format!(
                        "group {g} does not exist now; an earlier raw command may create it"
                    ));
                    v.push(g.clone());
                }
            }
        }
        v.sort();
        v.dedup();
        wanted_groups = Some(v);
    }
    if let Some(uid) = spec.uid {
        if let Some(holder) = found.uid_holder.as_ref().filter(|h| *h != name) {
            return Err(ModuleError::Invalid(format!(
                "user {name}: uid {uid} is already the uid of user {holder}"
            )));
        }
    }
    let keys = spec.keys_content();
    let mut notes: Vec<String> = Vec::new();
    let mut cmd: Vec<String> = Vec::new();
    match &found.current {
        None => {
            cmd.push("useradd".into());
            let mut what = Vec::new();
            if let Some(uid) = spec.uid {
                cmd.extend(["-u".into(), uid.to_string()]);
                what.push(format!("uid {uid}"));
            }
            if let Some(g) = &primary {
                cmd.extend(["-g".into(), g.clone()]);
                what.push(format!("group {g}"));
            }
            if let Some(groups) = &wanted_groups {
                if !groups.is_empty() {
                    cmd.extend(["-G".into(), groups.join(",")]);
                    what.push(format!("groups {}", groups.join(",")));
                }
            }
            if let Some(s) = &spec.shell {
                cmd.extend(["-s".into(), s.clone()]);
                what.push(format!("shell {s}"));
            }
            let home = spec
                .home
                .clone()
                .unwrap_or_else(|| format!("{}/{name}", found.default_base.trim_end_matches('/')));
            if let Some(h) = &spec.home {
                cmd.extend(["-d".into(), h.clone()]);
            }
            what.push(format!(
                "home {home}{}",
                if spec.create_home {
                    ""
                } else {
                    " (not created)"
                }
            ));
            cmd.push(if spec.create_home { "-m" } else { "-M" }.into());
            if spec.system {
                cmd.push("-r".into());
                what.push("system".into());
            }
            if let Some(c) = &spec.comment {
                cmd.extend(["-c".into(), c.clone()]);
            }
            cmd.extend(["--".into(), name.clone()]);
            notes.push(format!("user {name} created ({})", what.join(", ")));
            if let Some(k) = &spec.authorized_keys {
                let home_exists = found
                    .keys
                    .as_ref()
                    .is_some_and(|f| matches!(f.home_dir, PathFound::Dir { .. }));
                if !spec.create_home && !home_exists {
                    return Err(ModuleError::Invalid(format!(
                        "user {name}: authorized_keys go in {home}/.ssh, and {home} does not exist (create_home is false)"
                    )));
                }
                notes.push(format!("authorized_keys written ({} keys)", k.len()));
            }
            Ok(UserDecision {
                change: Change::Changed,
                message: notes.join("; "),
                command: cmd,
                write_keys: keys.is_some(),
                unknown,
            })
        }
        Some(cur) => {
            let mut args: Vec<String> = Vec::new();
            if let Some(uid) = spec.uid.filter(|u| *u != cur.uid) {
                args.extend(["-u".into(), uid.to_string()]);
                notes.push(format!("uid {} → {uid}", cur.uid));
            }
            let cur_primary = found
                .member_of
                .iter()
                .find(|(g, _)| *g == cur.gid)
                .map(|(_, n)| n.clone())
                .unwrap_or_else(|| cur.gid.to_string());
            if let Some(g) = &primary {
                let same = *g == cur_primary || *g == cur.gid.to_string();
                if !same {
                    args.extend(["-g".into(), g.clone()]);
                    notes.push(format!("group {cur_primary} → {g}"));
                }
            }
            let primary_after = primary.clone().unwrap_or(cur_primary.clone());
            if let Some(wanted) = &wanted_groups {
                // The primary group is the user's already: never a supplementary change.
                let wanted: BTreeSet<&String> =
                    wanted.iter().filter(|g| **g != primary_after).collect();
                let current: BTreeSet<&String> = found
                    .member_of
                    .iter()
                    .filter(|(gid, n)| *gid != cur.gid && *n != primary_after)
                    .map(|(_, n)| n)
                    .collect();
                let missing: Vec<String> =
                    wanted.difference(&current).map(|s| s.to_string()).collect();
                let extra: Vec<String> =
                    current.difference(&wanted).map(|s| s.to_string()).collect();
                if spec.append {
                    if !missing.is_empty() {
                        args.extend(["-a".into(), "-G".into(), missing.join(",")]);
                        notes.push(format!("added to groups {}", missing.join(",")));
                    }
                } else if !missing.is_empty() || !extra.is_empty() {
                    let all: Vec<String> = wanted.iter().map(|s| s.to_string()).collect();
                    args.extend(["-G".into(), all.join(",")]);
                    let mut n = Vec::new();
                    if !missing.is_empty() {
                        n.push(format!("added to {}", missing.join(",")));
                    }
                    if !extra.is_empty() {
                        n.push(format!("removed from {}", extra.join(",")));
                    }
                    notes.push(format!(
                        "groups: {} (now {})",
                        n.join(", "),
                        join_names(&all)
                    ));
                }
            }
            if let Some(s) = spec.shell.as_ref().filter(|s| **s != cur.shell) {
                args.extend(["-s".into(), s.clone()]);
                notes.push(format!("shell {} → {s}", cur.shell));
            }
            if let Some(h) = spec.home.as_ref().filter(|h| **h != cur.home) {
                args.extend(["-d".into(), h.clone()]);
                notes.push(format!("home {} → {h} (not moved)", cur.home));
            }
            if let Some(c) = spec.comment.as_ref().filter(|c| **c != cur.comment) {
                args.extend(["-c".into(), c.clone()]);
                notes.push(format!("comment {:?} → {c:?}", cur.comment));
            }
            if !args.is_empty() {
                cmd.push("usermod".into());
                cmd.extend(args);
                cmd.extend(["--".into(), name.clone()]);
            }
            let mut write_keys = false;
            if let (Some(content), Some(k)) = (&keys, &found.keys) {
                let home_moves = spec.home.as_ref().is_some_and(|h| *h != cur.home);
                let uid_after = spec.uid.unwrap_or(cur.uid);
                let dir_ok = matches!(k.ssh_dir, PathFound::Dir { mode: 0o700, uid, .. } if uid == uid_after);
                let file_ok = matches!(k.file, PathFound::File { mode: 0o600, uid, .. } if uid == uid_after)
                    && k.content == *content;
                if !matches!(k.home_dir, PathFound::Dir { .. }) {
                    return Err(ModuleError::Invalid(format!(
                        "user {name}: the home folder {} does not exist: cannot write authorized_keys",
                        k.home
                    )));
                }
                match (&k.ssh_dir, &k.file) {
                    (PathFound::Link | PathFound::Other | PathFound::File { .. }, _) => {
                        return Err(ModuleError::Invalid(format!(
                            "{}/.ssh is a symbolic link or not a folder: refusing to write authorized_keys there",
                            k.home
                        )))
                    }
                    (_, PathFound::Link | PathFound::Other | PathFound::Dir { .. }) => {
                        return Err(ModuleError::Invalid(format!(
                            "{}/.ssh/authorized_keys is a symbolic link or not a regular file: refusing to replace it",
                            k.home
                        )))
                    }
                    _ => {}
                }
                if home_moves || !dir_ok || !file_ok {
                    write_keys = true;
                    let n = spec.authorized_keys.as_ref().map_or(0, Vec::len);
                    notes.push(if matches!(k.file, PathFound::Absent) {
                        format!("authorized_keys written ({n} keys)")
                    } else if k.content == *content && !home_moves {
                        "authorized_keys: mode or owner fixed".to_string()
                    } else {
                        format!("authorized_keys replaced ({n} keys)")
                    });
                }
            }
            let change = if cmd.is_empty() && !write_keys {
                Change::Unchanged
            } else {
                Change::Changed
            };
            let message = if change == Change::Unchanged {
                format!("user {name} exists (uid {}), unchanged", cur.uid)
            } else {
                format!("user {name}: {}", notes.join("; "))
            };
            Ok(UserDecision {
                change,
                message,
                command: cmd,
                write_keys,
                unknown,
            })
        }
    }
}

fn user_read_args(spec: &UserSpec) -> Vec<String> {
    let mut args = vec![
        spec.name.clone(),
        if spec.state == Presence::Present {
            spec.uid.map(|u| u.to_string()).unwrap_or_default()
        } else {
            String::new()
        },
        spec.home.clone().unwrap_or_default(),
        if spec.authorized_keys.is_some() && spec.state == Presence::Present {
            "keys".into()
        } else {
            String::new()
        },
    ];
    if spec.state == Presence::Present {
        args.extend(spec.group.iter().cloned());
        args.extend(spec.groups.iter().flatten().cloned());
    }
    args
}

async fn read_user(spec: &UserSpec, remote: &Remote<'_>) -> Result<UserFound, ModuleError> {
    let args = user_read_args(spec);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let script = user_read_script();
    let out = remote
        .script(
            &format!("cannot read user {}", spec.name),
            &script,
            &args,
            None,
        )
        .await?;
    parse_user_answer(&out.stdout)
}

fn user_read_script() -> String {
    format!("{USER_READ_HEAD}{USER_READ_REST}")
}

pub(super) async fn apply_user(
    spec: &UserSpec,
    remote: &Remote<'_>,
) -> Result<Outcome, ModuleError> {
    let found = read_user(spec, remote).await?;
    let decision = decide_user(spec, &found, &BTreeMap::new(), false)?;
    if decision.command.is_empty() && !decision.write_keys {
        return Ok(Outcome::new(decision.change, decision.message));
    }
    let mut args: Vec<String> = vec![
        spec.name.clone(),
        if decision.write_keys {
            "keys".into()
        } else {
            String::new()
        },
    ];
    args.extend(decision.command.iter().cloned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let stdin = if decision.write_keys {
        spec.keys_content()
    } else {
        None
    };
    let out = remote.script_output(USER_ACT, &args, stdin).await?;
    if out.exit_code != Some(0) {
        let what = match decision.command.first().map(String::as_str) {
            Some(tool) => format!("user {} ({tool})", spec.name),
            None => format!("user {}: writing authorized_keys", spec.name),
        };
        return Err(ModuleError::Failed { what, output: out });
    }
    let mut outcome = Outcome::new(decision.change, decision.message);
    outcome.stdout = out.stdout;
    outcome.stderr = out.stderr;
    Ok(outcome)
}

pub(super) async fn predict_user(
    spec: &UserSpec,
    remote: &Remote<'_>,
    overlay: &mut Overlay,
) -> Result<Outcome, ModuleError> {
    let found = read_user(spec, remote).await?;
    let raw_before = overlay.caveat().is_some();
    let decision = decide_user(spec, &found, &overlay.groups, raw_before)?;
    let mut outcome = match &decision.unknown {
        Some(why) => Outcome::new(
            Change::Unknown,
            format!("{} (cannot know: {why})", decision.message),
        ),
        None => Outcome::new(decision.change, decision.message),
    };
    outcome.warnings.extend(overlay.caveat());
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["a", "_a", "bt-1_x", "host$", &"a".repeat(32)] {
            assert!(check_name("user", ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "1a",
            "A",
            "-a",
            "a b",
            "a;b",
            "a$b",
            "$",
            &"a".repeat(33),
            "é",
        ] {
            assert!(check_name("user", bad).is_err(), "{bad}");
        }
        assert!(check_group_ref("1000").is_ok());
        assert!(check_group_ref("4294967295").is_err());
        assert_eq!(parse_id("uid", "0"), Ok(0));
        assert!(parse_id("uid", "-1").is_err());
        assert!(parse_id("uid", "1e3").is_err());
        assert!(check_path("shell", "/bin/sh").is_ok());
        assert!(check_path("shell", "bash").is_err());
        assert!(check_path("home", "/a:b").is_err());
        assert!(check_comment("Ada Lovelace, room 1").is_ok());
        assert!(check_comment("a:b").is_err());
        assert!(check_key_line("ssh-ed25519 AAAA x").is_ok());
        assert!(check_key_line("a\nb").is_err());
        assert!(check_key_line(" ").is_err());
    }

    #[test]
    fn user_answers() {
        let out = b"passwd bt-a:x:1500:1500:Bee Tee:/home/bt-a:/bin/sh\n\
member 1500 bt-a\nmember 27 sudo\nuid bt-a:x:1500:1500::/home/bt-a:/bin/sh\n\
ref sudo sudo:x:27:bt-a\nref nope -\ndefhome /home\nkeyhome /home/bt-a\n\
homedir dir 755 1500 1500\nsshdir dir 700 1500 1500\nkeys file 600 1500 1500\nssh-ed25519 AAAA k\n";
        let f = parse_user_answer(out).unwrap();
        let cur = f.current.clone().unwrap();
        assert_eq!((cur.uid, cur.comment.as_str()), (1500, "Bee Tee"));
        assert_eq!(
            f.member_of,
            vec![(1500, "bt-a".into()), (27, "sudo".into())]
        );
        assert_eq!(f.uid_holder.as_deref(), Some("bt-a"));
        assert_eq!(f.refs.get("nope"), Some(&None));
        let k = f.keys.unwrap();
        assert_eq!(k.content, b"ssh-ed25519 AAAA k\n");
        assert_eq!(
            k.file,
            PathFound::File {
                mode: 0o600,
                uid: 1500,
                gid: 1500
            }
        );
        assert!(parse_user_answer(b"").is_err());
    }
}
