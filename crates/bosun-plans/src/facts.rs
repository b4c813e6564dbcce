//! Host facts (`host.facts.*`): what a host says about itself — `os_family`,
//! `distribution`, `version`, `arch`, `hostname` — gathered with one POSIX `sh` command
//! per host ([`GATHER_COMMAND`]: `uname -m`, `uname -n` and the `ID`, `ID_LIKE` and
//! `VERSION_ID` lines of `/etc/os-release`, or `/usr/lib/os-release`), only in runs whose
//! templates or conditions refer to them ([`step_needs_facts`]), then kept for the rest
//! of the run.
//!
//! - `arch`: `uname -m` (`x86_64`, `aarch64`, …); `hostname`: `uname -n`.
//! - `distribution`: os-release's `ID` (`debian`, `ubuntu`, `rocky`, …), or `unknown`.
//! - `version`: os-release's `VERSION_ID` (`12`, `22.04`, `9.3`), or empty (rolling
//!   distributions such as Arch Linux have none).
//! - `os_family`: the first of `ID`, then each word of `ID_LIKE`, that [`family_of`]
//!   knows — `debian`, `redhat`, `suse`, `arch`, `alpine`, `gentoo` — or `unknown`.
//!
//! The output is read bounded ([`MAX_OUTPUT`] bytes, values cut to [`MAX_VALUE`]
//! characters, control characters dropped); lines that are not a fact are ignored.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::connection::{CommandSpec, Connection, RunRequest};
use crate::model::{CopySource, Module, Step, Value};
use crate::{condition, template};

/// The facts, by name, as `host.facts.NAME`.
pub const FACTS: [&str; 5] = ["os_family", "distribution", "version", "arch", "hostname"];

/// What the host printed that the parser reads: the rest is ignored.
pub const MAX_OUTPUT: usize = 16 * 1024;

/// The longest value kept (in characters).
pub const MAX_VALUE: usize = 256;

/// How long gathering may take on a host before it fails the host.
pub const GATHER_TIMEOUT: Duration = Duration::from_secs(30);

/// The one command that gathers a host's facts (run with `sh -c`, never with sudo).
pub const GATHER_COMMAND: &str = "\
printf 'arch=%s\\n' \"$(uname -m 2>/dev/null)\"
printf 'hostname=%s\\n' \"$(uname -n 2>/dev/null)\"
for f in /etc/os-release /usr/lib/os-release; do
  if [ -r \"$f\" ]; then
    head -n 100 \"$f\" | while IFS= read -r l || [ -n \"$l\" ]; do
      case $l in ID=*|ID_LIKE=*|VERSION_ID=*) printf 'os.%s\\n' \"$l\" ;; esac
    done
    break
  fi
done
exit 0
";

/// A host's facts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Facts {
    pub os_family: String,
    pub distribution: String,
    pub version: String,
    pub arch: String,
    pub hostname: String,
}

impl Facts {
    /// As templates and conditions see them: a map of the [`FACTS`].
    pub fn to_value(&self) -> Value {
        serde_json::json!({
            "os_family": self.os_family,
            "distribution": self.distribution,
            "version": self.version,
            "arch": self.arch,
            "hostname": self.hostname,
        })
    }
}

/// The family of an os-release `ID` (or one word of `ID_LIKE`), if it is one the engine
/// knows.
pub fn family_of(id: &str) -> Option<&'static str> {
    let id = id.trim().to_ascii_lowercase();
    let family = match id.as_str() {
        "debian" | "ubuntu" | "raspbian" | "linuxmint" | "pop" | "elementary" | "kali"
        | "devuan" | "pureos" | "zorin" => "debian",
        "rhel" | "redhat" | "fedora" | "centos" | "rocky" | "almalinux" | "ol" | "amzn"
        | "scientific" | "cloudlinux" | "eurolinux" | "virtuozzo" => "redhat",
        "suse"
        | "opensuse"
        | "opensuse-leap"
        | "opensuse-tumbleweed"
        | "sles"
        | "sled"
        | "sles_sap" => "suse",
        "arch" | "archarm" | "manjaro" | "endeavouros" | "garuda" => "arch",
        "alpine" | "postmarketos" => "alpine",
        "gentoo" => "gentoo",
        _ => return None,
    };
    Some(family)
}

/// An os-release value as written: unquoted (`"…"` with `\"`, `\\`, `\$`, `` \` ``
/// escapes, or `'…'`), trimmed.
fn unquote(raw: &str) -> String {
    let v = raw.trim();
    if v.len() >= 2 && v.starts_with('"') && v.ends_with('"') {
        let inner = &v[1..v.len() - 1];
        let mut out = String::with_capacity(inner.len());
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                match chars.next() {
                    Some(n @ ('"' | '\\' | '$' | '`')) => out.push(n),
                    Some(n) => {
                        out.push('\\');
                        out.push(n);
                    }
                    None => out.push('\\'),
                }
            } else {
                out.push(c);
            }
        }
        out
    } else if v.len() >= 2 && v.starts_with('\'') && v.ends_with('\'') {
        v[1..v.len() - 1].to_string()
    } else {
        v.to_string()
    }
}

/// A value as kept: control characters dropped, at most [`MAX_VALUE`] characters.
fn bounded(v: &str) -> String {
    v.chars()
        .filter(|c| !c.is_control())
        .take(MAX_VALUE)
        .collect::<String>()
        .trim()
        .to_string()
}

/// Reads what [`GATHER_COMMAND`] printed (its first [`MAX_OUTPUT`] bytes; for each
/// fact its first line). Fails when `arch` or `hostname` is missing or empty.
pub fn parse(stdout: &[u8]) -> Result<Facts, String> {
    let head = &stdout[..stdout.len().min(MAX_OUTPUT)];
    let text = String::from_utf8_lossy(head);
    let mut found: BTreeMap<&str, String> = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let (key, value) = match key {
            "arch" | "hostname" => (key, bounded(value)),
            "os.ID" | "os.ID_LIKE" | "os.VERSION_ID" => (key, bounded(&unquote(value))),
            _ => continue,
        };
        found.entry(key).or_insert(value);
    }
    let required = |key: &str, what: &str| match found.get(key) {
        Some(v) if !v.is_empty() => Ok(v.clone()),
        _ => Err(format!("`{what}` printed nothing")),
    };
    let arch = required("arch", "uname -m")?;
    let hostname = required("hostname", "uname -n")?;
    let id = found
        .get("os.ID")
        .map(|s| s.to_ascii_lowercase())
        .filter(|s| !s.is_empty());
    let like = found.get("os.ID_LIKE").cloned().unwrap_or_default();
    let os_family = id
        .iter()
        .map(String::as_str)
        .chain(like.split_whitespace())
        .find_map(family_of)
        .unwrap_or("unknown")
        .to_string();
    Ok(Facts {
        os_family,
        distribution: id.unwrap_or_else(|| "unknown".into()),
        version: found.get("os.VERSION_ID").cloned().unwrap_or_default(),
        arch,
        hostname,
    })
}

/// Gathers the host's facts with one command on `conn`, within [`GATHER_TIMEOUT`]. The
/// error says why, for people (the caller prefixes what it was doing).
pub async fn gather(conn: &dyn Connection) -> Result<Facts, String> {
    let request = RunRequest {
        command: CommandSpec::Shell(GATHER_COMMAND.into()),
        sudo: false,
        stdin: None,
        timeout: Some(GATHER_TIMEOUT),
    };
    // The connection enforces the timeout; this is the guard should it not answer.
    let out =
        match tokio::time::timeout(GATHER_TIMEOUT + Duration::from_secs(5), conn.run(&request))
            .await
        {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => return Err(format!("timed out after {}s", GATHER_TIMEOUT.as_secs())),
        };
    if out.timed_out {
        return Err(format!("timed out after {}s", GATHER_TIMEOUT.as_secs()));
    }
    if out.exit_code != Some(0) {
        let code = out
            .exit_code
            .map_or("killed".to_string(), |c| format!("exit code {c}"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(match stderr.lines().rev().find(|l| !l.trim().is_empty()) {
            Some(line) => format!("{code}: {}", bounded(line)),
            None => code,
        });
    }
    parse(&out.stdout)
}

/// Whether a template string refers to `host.facts` (`host.facts.arch`, or the `host`
/// namespace used whole in a template that mentions `facts`). A template that does not
/// parse does not (rendering it fails the step anyway).
pub fn template_needs_facts(text: &str) -> bool {
    if !text.contains("facts") {
        return false;
    }
    template::variables(text).is_some_and(|vars| {
        vars.iter()
            .any(|v| v == "host" || v == "host.facts" || v.starts_with("host.facts."))
    })
}

/// Whether a `when:` condition refers to `host.facts` (or to `host` whole).
pub fn condition_needs_facts(expr: &str) -> bool {
    match condition::parse(expr) {
        Ok(ast) => condition::references(&ast)
            .iter()
            .any(|r| r == "host" || r == "host.facts" || r.starts_with("host.facts.")),
        Err(_) => false,
    }
}

/// Whether running `step` needs its host's facts: its `when:`, any of its template
/// strings, or its `file.template` `src` file (read as the module reads it, bounded;
/// a file that cannot be read needs nothing — the step fails on it anyway) refers to
/// `host.facts`.
pub fn step_needs_facts(step: &Step) -> bool {
    if step.when.as_deref().is_some_and(condition_needs_facts) {
        return true;
    }
    if let Module::Template {
        source: CopySource::Src(src),
        ..
    } = &step.module
    {
        if crate::modules::read_template(src).is_ok_and(|t| template_needs_facts(&t)) {
            return true;
        }
    }
    crate::model::module_templates(&step.module)
        .iter()
        .any(|(_, t)| template_needs_facts(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(os_family: &str, distribution: &str, version: &str) -> Facts {
        Facts {
            os_family: os_family.into(),
            distribution: distribution.into(),
            version: version.into(),
            arch: "x86_64".into(),
            hostname: "web-1".into(),
        }
    }

    #[test]
    fn debian() {
        let out = b"arch=x86_64\nhostname=web-1\nos.ID=debian\nos.VERSION_ID=\"12\"\n";
        assert_eq!(parse(out), Ok(facts("debian", "debian", "12")));
    }

    #[test]
    fn families_come_from_id_then_id_like() {
        let cases = [
            ("ubuntu", "debian", "debian"),
            ("rocky", "\"rhel centos fedora\"", "redhat"),
            ("fedora", "", "redhat"),
            ("\"opensuse-leap\"", "\"suse opensuse\"", "suse"),
            ("manjaro", "arch", "arch"),
            ("alpine", "", "alpine"),
            // An unknown ID with a known ID_LIKE.
            ("somethingnew", "\"ubuntu debian\"", "debian"),
            ("nixos", "", "unknown"),
            ("freebsd", "", "unknown"),
        ];
        for (id, like, want) in cases {
            let out = format!("arch=aarch64\nhostname=h\nos.ID={id}\nos.ID_LIKE={like}\n");
            let f = parse(out.as_bytes()).unwrap();
            assert_eq!(f.os_family, want, "ID={id} ID_LIKE={like}");
            assert_eq!(f.distribution, unquote(id), "ID={id}");
        }
    }

    #[test]
    fn no_os_release_is_unknown() {
        let f = parse(b"arch=x86_64\nhostname=web-1\n").unwrap();
        assert_eq!(f, facts("unknown", "unknown", ""));
    }

    #[test]
    fn quoting_escapes_and_junk() {
        let out = "Welcome to the host!\r\n\
                   arch=x86_64\r\n\
                   hostname=web-1\r\n\
                   garbage without equals\n\
                   os.NAME=\"Not asked for\"\n\
                   os.ID='Debian'\n\
                   os.ID=ubuntu\n\
                   os.VERSION_ID=\"1\\\"2\\$\\\\x\"\n\
                   =\n\
                   \n";
        let f = parse(out.as_bytes()).unwrap();
        // The first line of a fact wins; IDs are compared in lower case.
        assert_eq!(f.distribution, "debian");
        assert_eq!(f.os_family, "debian");
        assert_eq!(f.version, "1\"2$\\x");
        assert_eq!(f.hostname, "web-1");
    }

    #[test]
    fn output_is_bounded() {
        // A huge value is cut, control characters dropped.
        let long = "a".repeat(10_000);
        let out = format!("arch=x86\x07_64\nhostname={long}\n");
        let f = parse(out.as_bytes()).unwrap();
        assert_eq!(f.arch, "x86_64");
        assert_eq!(f.hostname.len(), MAX_VALUE);
        // Only the first MAX_OUTPUT bytes are read: a fact past them is not seen.
        let mut out = b"arch=x86_64\n".to_vec();
        out.extend(std::iter::repeat_n(b'#', MAX_OUTPUT));
        out.extend(b"\nhostname=late\n");
        assert_eq!(parse(&out), Err("`uname -n` printed nothing".into()));
        // Not UTF-8: read lossily, never a panic.
        let f = parse(b"arch=x86_64\nhostname=h\xff\xfe\nos.ID=\xc3\n").unwrap();
        assert!(f.hostname.starts_with('h'), "{f:?}");
    }

    #[test]
    fn arch_and_hostname_are_required() {
        assert_eq!(
            parse(b"arch=\nhostname=h\n"),
            Err("`uname -m` printed nothing".into())
        );
        assert_eq!(parse(b""), Err("`uname -m` printed nothing".into()));
    }

    #[test]
    fn what_needs_facts() {
        assert!(template_needs_facts("{{ host.facts.arch }}"));
        assert!(template_needs_facts("{{ host.facts.nope }}"));
        assert!(template_needs_facts(
            "{% if host.facts.os_family == 'debian' %}apt{% endif %}"
        ));
        assert!(template_needs_facts("{{ host['facts'].arch }}"));
        assert!(!template_needs_facts("{{ host.name }} facts"));
        assert!(!template_needs_facts("{{ vars.facts }}"));
        assert!(!template_needs_facts("host.facts.arch"));
        assert!(!template_needs_facts("{{ host.facts.arch"));
        assert!(condition_needs_facts("host.facts.os_family == \"debian\""));
        assert!(condition_needs_facts("not host.facts.nope"));
        assert!(!condition_needs_facts("vars.facts == 1"));
        assert!(!condition_needs_facts("host.facts.os_family =="));
    }
}
