//! The remote command line for a request: quoting, `sudo`, the process group marker and
//! the host's `timeout`.

use super::{KILL_AFTER_SECS, PGID_MARKER};
use crate::connection::{CommandSpec, ConnError, RunRequest};

/// Quotes one word for a POSIX shell: left as is when it is made only of characters no
/// shell treats specially, else single-quoted with each `'` written `'\''`.
pub fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:,+@%".contains(&b));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The remote command line for `request` (see the module docs).
pub fn command_line(request: &RunRequest) -> Result<String, ConnError> {
    command_line_as(request, request.sudo)
}

/// The remote command line for `request`, under `sudo -n` only when `sudo` (a session
/// already running as root runs a sudo request without its own sudo).
pub(super) fn command_line_as(request: &RunRequest, sudo: bool) -> Result<String, ConnError> {
    let program = match &request.command {
        CommandSpec::Argv(argv) => {
            if argv.is_empty() {
                return Err(ConnError::Other("empty command".into()));
            }
            argv.iter()
                .map(|w| shell_quote(w))
                .collect::<Vec<_>>()
                .join(" ")
        }
        CommandSpec::Shell(line) => format!("sh -c {}", shell_quote(line)),
    };
    if program.contains('\0') {
        return Err(ConnError::Other(
            "a command cannot contain a NUL byte".into(),
        ));
    }
    let program = if sudo {
        format!("sudo -n -- {program}")
    } else {
        program
    };
    // The shell says its pid (its process group's id, see `Collected::pgid`) on stderr,
    // then becomes the command: no process more than the command itself.
    let announce = format!("echo {PGID_MARKER}$$ >&2; ");
    Ok(match request.timeout {
        None => format!("{announce}exec {program}"),
        Some(limit) => {
            let secs = format!("{}.{:03}", limit.as_secs(), limit.subsec_millis());
            format!(
                "{announce}if command -v timeout >/dev/null 2>&1; then exec timeout -k {KILL_AFTER_SECS} {secs} {program}; else exec {program}; fi"
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn quoting_is_posix_single_quotes() {
        assert_eq!(shell_quote("plain-word_1.txt"), "plain-word_1.txt");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote("$HOME"), "'$HOME'");
        assert_eq!(shell_quote("FOO=bar"), "'FOO=bar'");
        assert_eq!(shell_quote("~"), "'~'");
    }

    #[test]
    fn command_lines() {
        let req = |command, sudo, timeout| RunRequest {
            command,
            sudo,
            stdin: None,
            timeout,
        };
        let argv = CommandSpec::Argv(vec!["echo".into(), "a b".into()]);
        assert_eq!(
            command_line(&req(argv.clone(), false, None)).unwrap(),
            "echo bosun-pgid:$$ >&2; exec echo 'a b'"
        );
        assert_eq!(
            command_line(&req(argv, true, None)).unwrap(),
            "echo bosun-pgid:$$ >&2; exec sudo -n -- echo 'a b'"
        );
        assert_eq!(
            command_line(&req(CommandSpec::Shell("echo $x".into()), false, None)).unwrap(),
            "echo bosun-pgid:$$ >&2; exec sh -c 'echo $x'"
        );
        assert_eq!(
            command_line(&req(
                CommandSpec::Shell("true".into()),
                true,
                Some(Duration::from_millis(1500))
            ))
            .unwrap(),
            "echo bosun-pgid:$$ >&2; if command -v timeout >/dev/null 2>&1; then exec timeout -k 5 1.500 sudo -n -- sh -c true; else exec sudo -n -- sh -c true; fi"
        );
        assert!(command_line(&req(CommandSpec::Argv(vec![]), false, None)).is_err());
    }
}
