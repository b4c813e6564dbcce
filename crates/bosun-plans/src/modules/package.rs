//! `package`: system packages through the host's package manager — apt (`apt-get`,
//! `apt-cache`, `dpkg-query`) or dnf (`dnf`, `rpm`), found on the host — in one remote
//! command per step.
//!
//! The command ([`SCRIPT`]) detects the manager, reads each package's installed and
//! candidate versions and, in a real run, refreshes the package index when the step's
//! `cache_valid_time` says it is too old (and the step needs it), installs, upgrades or
//! removes only the packages that need it, and reads the versions again. It prints its
//! findings as `@bosun …` lines among the tools' own output; the step's result is
//! `changed` only when a version differs between the two reads, and its message names
//! the packages and versions. A dry run runs the same command without acting or
//! refreshing, and predicts from the versions it read (`apt-cache policy` candidates;
//! `dnf repoquery` from the metadata cache): when the index is older than
//! `cache_valid_time` and the prediction depends on it, it says it cannot know. apt's
//! index age is read from its files; dnf keeps its metadata's age itself, so there
//! `cache_valid_time` becomes dnf's `metadata_expire` for the step (`0`: `dnf
//! makecache`, which always refreshes).
//!
//! Package names are checked ([`check_name`]: no shell metacharacters, no leading `-`)
//! and still reach the host as positional arguments only.

use std::time::Duration;

use super::remote::Remote;
use super::{Change, ModuleError, Outcome};
use crate::model::{PackageManager, PackageState};

/// How long apt waits for another package manager holding the dpkg lock.
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(300);

/// A package name as apt and dnf take it: letters, digits and `.`, `_`, `+`, `-`, `:`
/// (an architecture qualifier), `~`; starting with a letter or digit.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphanumeric())
        && name.len() <= 256
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._+-:~".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "package name {name:?} is not valid: letters, digits and `.`, `_`, `+`, `-`, `:`, `~`, starting with a letter or digit"
        ))
    }
}

/// A `package` step rendered for one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageSpec {
    pub names: Vec<String>,
    pub state: PackageState,
    pub cache_valid_time: Option<Duration>,
    pub manager: PackageManager,
}

/// The one command of a package step. Arguments: `check` or `apply`, the state, the
/// manager (`auto`, `apt`, `dnf`), `cache_valid_time` in seconds (or empty), the lock
/// timeout in seconds, then the names. Prints `@bosun manager M` (or `@bosun
/// nomanager`, `@bosun missing M`), `@bosun index AGE|never|unknown` (seconds since the
/// index was refreshed), `@bosun pkg before NAME INSTALLED CANDIDATE NEWER` per package
/// (`-` for none; NEWER `yes` when the candidate is newer than the installed version),
/// and in a real run `@bosun refreshed` (apt), `@bosun unknown NAME` (nothing is done then),
/// `@bosun act WHAT` before each tool it runs, and `@bosun pkg after …` lines. The tools'
/// own output goes to the same stdout (and their stderr to stderr); a failing tool ends
/// the command with its exit code.
pub const SCRIPT: &str = r#"mode=$1; state=$2; mgr=$3; cvt=$4; lock=$5; shift 5
say() { printf '@bosun %s\n' "$*"; }
has() { command -v "$1" >/dev/null 2>&1; }
case $mgr in
  auto)
    if has apt-get && has dpkg-query; then mgr=apt
    elif has dnf && has rpm; then mgr=dnf
    else say nomanager; exit 0
    fi ;;
  apt) has apt-get && has dpkg-query || { say missing apt; exit 0; } ;;
  dnf) has dnf && has rpm || { say missing dnf; exit 0; } ;;
esac
say manager "$mgr"
export DEBIAN_FRONTEND=noninteractive
cached=
[ "$mode" = apply ] || cached=-C
# installed version of $1, or nothing
inst() {
  if [ $mgr = apt ]; then
    dpkg-query -W -f '${db:Status-Status} ${Version}\n' -- "$1" 2>/dev/null | awk '$1 == "installed" { print $2; exit }'
  else
    rpm -q --qf '%|EPOCH?{%{EPOCH}:}:{}|%{VERSION}-%{RELEASE}\n' -- "$1" 2>/dev/null | tail -n 1 | grep -v 'is not installed'
  fi
}
# candidate (newest available) version of $1, or nothing
cand() {
  if [ $mgr = apt ]; then
    apt-cache policy -- "$1" 2>/dev/null | awk '$1 == "Candidate:" && $2 != "(none)" { print $2; exit }'
  else
    dnf -q $cached repoquery --latest-limit 1 --qf '%{epoch}:%{version}-%{release}' -- "$1" 2>/dev/null | sed -n 's/^0://; 1p'
  fi
}
# whether the candidate $2 is newer than the installed $1 (of package $3)
newer() {
  if [ $mgr = apt ]; then dpkg --compare-versions "$2" gt "$1"
  else dnf -q $cached check-update -- "$3" >/dev/null 2>&1; [ $? -eq 100 ]
  fi
}
q() {
  i=$(inst "$2"); c=$(cand "$2"); n=no
  if [ -n "$i" ] && [ -n "$c" ] && newer "$i" "$c" "$2"; then n=yes; fi
  say pkg "$1" "$2" "${i:--}" "${c:--}" $n
}
# whether package $2 needs work for state $1
needs() {
  i=$(inst "$2")
  case $1 in
    absent) [ -n "$i" ] ;;
    present) [ -z "$i" ] ;;
    latest) [ -z "$i" ] && return 0; c=$(cand "$2"); [ -n "$c" ] && newer "$i" "$c" "$2" ;;
  esac
}
# seconds since the package index was refreshed (apt), or never/unknown
age() {
  if [ $mgr != apt ]; then echo unknown; return; fi
  L=; S=
  eval "$(apt-config shell L Dir::State::Lists/d S Dir::State/d)"
  newest=0
  for f in "${S}periodic/update-success-stamp" "$L" "${L}partial"; do
    [ -n "$f" ] && [ -e "$f" ] || continue
    t=$(stat -c %Y -- "$f" 2>/dev/null) || continue
    [ "$t" -gt "$newest" ] && newest=$t
  done
  if [ "$newest" -eq 0 ]; then echo never; else echo $(( $(date +%s) - newest )); fi
}
a=$(age)
say index "$a"
for n do q before "$n"; done
[ "$mode" = apply ] || exit 0
run() { say act "$*"; "$@" || { r=$?; exit $r; }; }
refresh() {
  [ -n "$cvt" ] || return 0
  if [ $mgr = apt ]; then
    if [ "$a" = never ] || [ "$a" -ge "$cvt" ]; then
      run apt-get update -q -o DPkg::Lock::Timeout="$lock"
      eval "$(apt-config shell S Dir::State/d)"
      mkdir -p "${S}periodic" && touch "${S}periodic/update-success-stamp"
      say refreshed
    fi
  elif [ "$cvt" -eq 0 ]; then
    run dnf -q makecache
  else
    # dnf refreshes a repository's metadata when it loads it past metadata_expire.
    say act dnf repoquery --setopt=metadata_expire="$cvt"
    dnf -q --setopt=metadata_expire="$cvt" repoquery --latest-limit 1 -- "$1" >/dev/null || exit $?
  fi
}
# the names that need work for state $1, as the arguments of the action
act() (
  what=$1; shift
  for n do
    shift
    if needs "$what" "$n"; then set -- "$@" "$n"; fi
  done
  [ $# -gt 0 ] || exit 0
  if [ $mgr = apt ]; then
    o="-o DPkg::Lock::Timeout=$lock -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold"
    case $what in
      absent) run apt-get remove -y -q $o -- "$@" ;;
      *) run apt-get install -y -q $o -- "$@" ;;
    esac
  else
    case $what in
      absent) run dnf -y -q remove -- "$@" ;;
      *)
        for n do
          if [ -z "$(inst "$n")" ]; then run dnf -y -q install -- "$n"; else run dnf -y -q upgrade -- "$n"; fi
        done ;;
    esac
  fi
)
if [ "$state" != absent ]; then
  pending=no
  for n do needs "$state" "$n" && pending=yes; done
  if [ $pending = yes ] || [ "$state" = latest ]; then refresh "$@"; fi
  cached=
  for n do
    if [ -z "$(inst "$n")" ] && [ -z "$(cand "$n")" ]; then say unknown "$n"; exit 0; fi
  done
fi
act "$state" "$@" || exit $?
for n do q after "$n"; done
"#;

/// One `@bosun pkg` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageFound {
    pub name: String,
    pub installed: Option<String>,
    pub candidate: Option<String>,
    /// The candidate is newer than the installed version.
    pub newer: bool,
}

/// The index's age, as the host tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexAge {
    Seconds(u64),
    /// Never refreshed (no list, no stamp).
    Never,
    /// The manager does not say (dnf).
    Unknown,
}

/// What the command reported.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Report {
    pub manager: Option<String>,
    /// No supported manager on the host.
    pub no_manager: bool,
    /// The manager the step names is not there.
    pub missing: Option<String>,
    pub index: Option<IndexAge>,
    pub before: Vec<PackageFound>,
    pub after: Vec<PackageFound>,
    pub refreshed: bool,
    pub unknown: Option<String>,
    /// The tools' output: everything that is not an `@bosun` line.
    pub output: Vec<u8>,
}

pub fn parse_report(stdout: &[u8]) -> Report {
    let mut r = Report::default();
    for raw in stdout.split_inclusive(|b| *b == b'\n') {
        let line = String::from_utf8_lossy(raw);
        let Some(rest) = line.trim_end_matches('\n').strip_prefix("@bosun ") else {
            r.output.extend_from_slice(raw);
            continue;
        };
        let f: Vec<&str> = rest.split(' ').collect();
        let opt = |s: &str| (s != "-").then(|| s.to_string());
        match f[..] {
            ["manager", m] => r.manager = Some(m.to_string()),
            ["nomanager"] => r.no_manager = true,
            ["missing", m] => r.missing = Some(m.to_string()),
            ["index", "never"] => r.index = Some(IndexAge::Never),
            ["index", a] => {
                r.index = Some(a.parse().map_or(IndexAge::Unknown, IndexAge::Seconds));
            }
            ["pkg", when, name, installed, candidate, newer] => {
                let p = PackageFound {
                    name: name.to_string(),
                    installed: opt(installed),
                    candidate: opt(candidate),
                    newer: newer == "yes",
                };
                if when == "after" {
                    r.after.push(p);
                } else {
                    r.before.push(p);
                }
            }
            ["refreshed"] => r.refreshed = true,
            ["unknown", n] => r.unknown = Some(n.to_string()),
            _ => {}
        }
    }
    r
}

fn args(spec: &PackageSpec, mode: &str) -> Vec<String> {
    let mut a = vec![
        mode.to_string(),
        spec.state.as_str().to_string(),
        spec.manager.as_str().to_string(),
        spec.cache_valid_time
            .map(|d| d.as_secs().to_string())
            .unwrap_or_default(),
        LOCK_TIMEOUT.as_secs().to_string(),
    ];
    a.extend(spec.names.iter().cloned());
    a
}

fn manager_problem(r: &Report) -> Option<ModuleError> {
    if r.no_manager {
        return Some(ModuleError::Invalid(
            "package: this host has no supported package manager (apt: apt-get and dpkg-query; dnf: dnf and rpm)".into(),
        ));
    }
    if let Some(m) = &r.missing {
        let tools = if m == "apt" {
            "apt-get and dpkg-query"
        } else {
            "dnf and rpm"
        };
        return Some(ModuleError::Invalid(format!(
            "package: manager {m} is not on this host ({tools} not found)"
        )));
    }
    None
}

fn unknown_package(name: &str, manager: &str) -> ModuleError {
    ModuleError::Invalid(format!(
        "package {name} is not available from {manager}'s package sources (unknown package?)"
    ))
}

fn show(name: &str, version: Option<&String>) -> String {
    match version {
        Some(v) => format!("{name} {v}"),
        None => name.to_string(),
    }
}

/// The result's message and change from the versions before and after a real run.
fn compare(spec: &PackageSpec, r: &Report) -> (Change, String) {
    let mut installed = Vec::new();
    let mut upgraded = Vec::new();
    let mut removed = Vec::new();
    let mut other = Vec::new();
    for b in &r.before {
        let a = r.after.iter().find(|a| a.name == b.name);
        let after = a.and_then(|a| a.installed.as_ref());
        match (&b.installed, after) {
            (None, Some(v)) => installed.push(format!("{} {v}", b.name)),
            (Some(v), None) => removed.push(format!("{} {v}", b.name)),
            (Some(old), Some(new)) if old != new => {
                upgraded.push(format!("{} {old} → {new}", b.name))
            }
            _ => other.push(b),
        }
    }
    let mut parts = Vec::new();
    if !installed.is_empty() {
        parts.push(format!("installed {}", installed.join(", ")));
    }
    if !upgraded.is_empty() {
        parts.push(format!("upgraded {}", upgraded.join(", ")));
    }
    if !removed.is_empty() {
        parts.push(format!("removed {}", removed.join(", ")));
    }
    let changed = !parts.is_empty();
    if !changed {
        parts.push(unchanged_message(spec, &r.before));
    } else if !other.is_empty() {
        let rest: Vec<String> = other
            .iter()
            .map(|p| show(&p.name, p.installed.as_ref()))
            .collect();
        parts.push(format!("unchanged {}", rest.join(", ")));
    }
    let mut message = parts.join("; ");
    if r.refreshed {
        message.push_str(" (package index refreshed)");
    }
    (
        if changed {
            Change::Changed
        } else {
            Change::Unchanged
        },
        message,
    )
}

fn unchanged_message(spec: &PackageSpec, found: &[PackageFound]) -> String {
    let list: Vec<String> = found
        .iter()
        .map(|p| show(&p.name, p.installed.as_ref()))
        .collect();
    let what = match spec.state {
        PackageState::Present => "already installed",
        PackageState::Latest => "already the latest version",
        PackageState::Absent => "already absent",
    };
    format!("{what}: {}", list.join(", "))
}

pub(super) async fn apply(spec: &PackageSpec, remote: &Remote<'_>) -> Result<Outcome, ModuleError> {
    let a = args(spec, "apply");
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let out = remote.script_output(SCRIPT, &a, None).await?;
    let report = parse_report(&out.stdout);
    if let Some(e) = manager_problem(&report) {
        return Err(e);
    }
    if out.exit_code != Some(0) {
        let what = String::from_utf8_lossy(&out.stdout)
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("@bosun act ").map(str::to_string))
            .map_or_else(
                || "package: reading the package state".to_string(),
                |act| format!("package: {act}"),
            );
        return Err(ModuleError::Failed { what, output: out });
    }
    let manager = report.manager.clone().unwrap_or_default();
    if let Some(name) = &report.unknown {
        return Err(unknown_package(name, &manager));
    }
    if report.after.len() != report.before.len() {
        return Err(ModuleError::Remote(format!(
            "package: unexpected answer {:?}",
            String::from_utf8_lossy(&out.stdout)
        )));
    }
    let (change, message) = compare(spec, &report);
    let mut outcome = Outcome::new(change, message);
    outcome.exit_code = out.exit_code;
    outcome.stdout = report.output;
    outcome.stderr = out.stderr;
    Ok(outcome)
}

/// A dry run's prediction from what the check read.
pub fn predict_from(spec: &PackageSpec, r: &Report) -> Result<Outcome, ModuleError> {
    if let Some(e) = manager_problem(r) {
        return Err(e);
    }
    let manager = r.manager.clone().unwrap_or_default();
    let limit = spec.cache_valid_time.map(|d| d.as_secs());
    // Whether a real run would refresh the index before it decides (apt tells the age;
    // dnf refreshes its metadata itself when it is older than cache_valid_time).
    let stale = match (limit, r.index) {
        (Some(_), Some(IndexAge::Never)) => Some("it was never refreshed".to_string()),
        (Some(l), Some(IndexAge::Seconds(a))) if a >= l => Some(format!(
            "it was refreshed {a}s ago, not less than cache_valid_time ({l}s)"
        )),
        (Some(l), Some(IndexAge::Unknown)) => Some(format!(
            "{manager} refreshes its metadata when it is older than cache_valid_time ({l}s)"
        )),
        _ => None,
    };
    let mut install = Vec::new();
    let mut upgrade = Vec::new();
    let mut remove = Vec::new();
    let mut unavailable = Vec::new();
    for p in &r.before {
        match (spec.state, &p.installed) {
            (PackageState::Absent, Some(v)) => remove.push(format!("{} {v}", p.name)),
            (PackageState::Absent, None) => {}
            (_, None) => match &p.candidate {
                Some(c) => install.push(format!("{} {c}", p.name)),
                None => unavailable.push(p.name.clone()),
            },
            (PackageState::Latest, Some(v)) if p.newer => upgrade.push(format!(
                "{} {v} → {}",
                p.name,
                p.candidate.clone().unwrap_or_default()
            )),
            _ => {}
        }
    }
    let mut parts = Vec::new();
    if !install.is_empty() {
        parts.push(format!("installed {}", install.join(", ")));
    }
    if !upgrade.is_empty() {
        parts.push(format!("upgraded {}", upgrade.join(", ")));
    }
    if !remove.is_empty() {
        parts.push(format!("removed {}", remove.join(", ")));
    }
    let mut warnings = Vec::new();
    if let Some(name) = unavailable.first() {
        return match (&stale, r.index) {
            // The refresh a real run does first may bring it.
            (Some(why), _) => Ok(Outcome::new(
                Change::Unknown,
                format!(
                    "cannot know: {name} is not in the package index, which a real run refreshes first ({why})"
                ),
            )),
            // dnf refreshes expired metadata by itself; a dry run reads only its cache.
            (None, Some(IndexAge::Unknown)) => Ok(Outcome::new(
                Change::Unknown,
                format!(
                    "cannot know: {name} is not in {manager}'s metadata cache, which a real run may refresh first"
                ),
            )),
            (None, _) => Err(unknown_package(name, &manager)),
        };
    }
    let outcome = if parts.is_empty() {
        match (&stale, spec.state) {
            (Some(why), PackageState::Latest) => Outcome::new(
                Change::Unknown,
                format!(
                    "cannot know: {} by the current index, which a real run refreshes first ({why})",
                    unchanged_message(spec, &r.before)
                ),
            ),
            _ => Outcome::new(Change::Unchanged, unchanged_message(spec, &r.before)),
        }
    } else {
        if let Some(why) = &stale {
            warnings.push(format!(
                "versions are from the current package index; a real run refreshes it first ({why})"
            ));
        }
        Outcome::new(Change::Changed, parts.join("; "))
    };
    Ok(Outcome {
        warnings,
        ..outcome
    })
}

pub(super) async fn predict(
    spec: &PackageSpec,
    remote: &Remote<'_>,
) -> Result<Outcome, ModuleError> {
    let a = args(spec, "check");
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let out = remote
        .script("package: reading the package state", SCRIPT, &a, None)
        .await?;
    predict_from(spec, &parse_report(&out.stdout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in [
            "nginx",
            "libc6:amd64",
            "g++",
            "python3.11",
            "kernel-devel",
            "a~b",
        ] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-y", "a b", "a;b", "$(x)", "a/b", "a=1.0", "*", ".a"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    fn spec(state: PackageState, cvt: Option<u64>) -> PackageSpec {
        PackageSpec {
            names: vec!["a".into(), "b".into()],
            state,
            cache_valid_time: cvt.map(Duration::from_secs),
            manager: PackageManager::Auto,
        }
    }

    #[test]
    fn reports_and_predictions() {
        let out = b"@bosun manager apt\n@bosun index 100\n\
@bosun pkg before a 1.0 1.1 yes\n@bosun pkg before b - 2.0 no\nGet:1 file:/x\n";
        let r = parse_report(out);
        assert_eq!(r.manager.as_deref(), Some("apt"));
        assert_eq!(r.index, Some(IndexAge::Seconds(100)));
        assert_eq!(r.output, b"Get:1 file:/x\n");
        let p = predict_from(&spec(PackageState::Present, None), &r).unwrap();
        assert_eq!(
            (p.change, p.message.as_str()),
            (Change::Changed, "installed b 2.0")
        );
        let p = predict_from(&spec(PackageState::Latest, None), &r).unwrap();
        assert_eq!(p.message, "installed b 2.0; upgraded a 1.0 → 1.1");
        let p = predict_from(&spec(PackageState::Absent, None), &r).unwrap();
        assert_eq!(p.message, "removed a 1.0");
        // A stale index: the versions may differ.
        let p = predict_from(&spec(PackageState::Present, Some(10)), &r).unwrap();
        assert_eq!(p.change, Change::Changed);
        assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
        // Nothing to do by a stale index: latest cannot know.
        let r = parse_report(
            b"@bosun manager apt\n@bosun index never\n@bosun pkg before a 1.0 1.0 no\n",
        );
        let s = PackageSpec {
            names: vec!["a".into()],
            ..spec(PackageState::Latest, Some(10))
        };
        assert_eq!(predict_from(&s, &r).unwrap().change, Change::Unknown);
        // An unknown package fails, unless a refresh could bring it.
        let r = parse_report(b"@bosun manager apt\n@bosun index 5\n@bosun pkg before zz - - no\n");
        let s = PackageSpec {
            names: vec!["zz".into()],
            ..spec(PackageState::Present, Some(10))
        };
        let e = predict_from(&s, &r).unwrap_err().to_string();
        assert!(e.contains("zz"), "{e}");
        let s = PackageSpec {
            cache_valid_time: Some(Duration::from_secs(1)),
            ..s
        };
        assert_eq!(predict_from(&s, &r).unwrap().change, Change::Unknown);
        assert!(predict_from(&s, &parse_report(b"@bosun nomanager\n")).is_err());
    }
}
