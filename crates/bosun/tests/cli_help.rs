//! `bosun --help` as people read it, from the real binary: every command's positional
//! arguments are described, the client options read as optional (they have environment
//! variables and defaults), and the commands that ignore client options do not list them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_bosun");

/// `bosun <path…> --help`, which must succeed.
fn help(path: &[String]) -> String {
    let out = Command::new(BIN)
        .args(path)
        .arg("--help")
        .env_remove("BOSUN_URL")
        .env_remove("BOSUN_TOKEN")
        .env_remove("BOSUN_ORG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bosun {path:?} --help: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The lines of a help section (`Commands:`, `Arguments:`, …), up to the next heading.
fn section<'a>(text: &'a str, heading: &str) -> Vec<&'a str> {
    text.lines()
        .skip_while(|l| *l != heading)
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .collect()
}

/// Every command path under `path`, depth first (`help` left out).
fn walk(path: Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
    let text = help(&path);
    let subs: Vec<String> = section(&text, "Commands:")
        .iter()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect();
    out.push((path.clone(), text));
    for sub in subs {
        let mut next = path.clone();
        next.push(sub);
        walk(next, out);
    }
}

fn every_command() -> Vec<(Vec<String>, String)> {
    let mut out = Vec::new();
    walk(Vec::new(), &mut out);
    assert!(out.len() > 60, "only {} commands found", out.len());
    out
}

/// The positional arguments a help text lists with no description: `<ID>` alone on its
/// line (short help), or followed by no indented description line (long help).
fn undescribed(text: &str) -> Vec<String> {
    let lines = section(text, "Arguments:");
    let mut missing = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        if !(line.starts_with("  <") || line.starts_with("  [")) {
            continue;
        }
        let name_end = trimmed.find(['>', ']']).map_or(trimmed.len(), |e| e + 1);
        let rest = trimmed[name_end..].trim_start_matches("...").trim();
        let next_is_description = lines
            .get(i + 1)
            .is_some_and(|n| n.starts_with("          ") && !n.trim().is_empty());
        if rest.is_empty() && !next_is_description {
            missing.push(trimmed[..name_end].to_string());
        }
    }
    missing
}

#[test]
fn every_positional_argument_is_described() {
    let mut missing = Vec::new();
    let mut positionals = 0;
    for (path, text) in every_command() {
        positionals += section(&text, "Arguments:")
            .iter()
            .filter(|l| l.starts_with("  <") || l.starts_with("  ["))
            .count();
        for arg in undescribed(&text) {
            missing.push(format!("bosun {} {arg}", path.join(" ")));
        }
    }
    assert!(
        positionals > 40,
        "only {positionals} positional arguments found"
    );
    assert!(
        missing.is_empty(),
        "positional arguments without a description:\n{}",
        missing.join("\n")
    );
}

/// What a help text says of `--flag`: its line, and the description lines under it
/// (long help puts the description on the next lines).
fn option_line(text: &str, flag: &str) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let at = lines.iter().position(|l| {
        l.trim_start()
            .strip_prefix(flag)
            .is_some_and(|rest| rest.starts_with(' ') || rest.is_empty())
    })?;
    let mut said = lines[at].to_string();
    for next in &lines[at + 1..] {
        if !next.starts_with("          ") {
            break;
        }
        said.push(' ');
        said.push_str(next.trim());
    }
    Some(said)
}

#[test]
fn url_and_token_read_as_optional() {
    for (path, text) in every_command() {
        let usage = text.lines().find(|l| l.starts_with("Usage:")).unwrap();
        assert!(
            !usage.contains("--url") && !usage.contains("--token"),
            "bosun {path:?}: {usage}"
        );
        for (flag, env) in [("--url", "BOSUN_URL"), ("--token", "BOSUN_TOKEN")] {
            // `bosun server` and `bosun runner` do not list them (below).
            let Some(line) = option_line(&text, flag) else {
                continue;
            };
            if path.first().is_some_and(|c| c == "runner") {
                continue;
            }
            assert!(
                line.contains("optional") && line.contains(env),
                "bosun {} --help shows {flag} as if it were required: {line}",
                path.join(" ")
            );
        }
    }
}

#[test]
fn server_and_runner_help_list_no_client_option_they_ignore() {
    let server = help(&["server".to_string()]);
    for flag in ["--url", "--token", "--org", "--json"] {
        assert!(
            option_line(&server, flag).is_none(),
            "bosun server --help lists {flag}:\n{server}"
        );
    }
    // What it does use stays.
    assert!(option_line(&server, "--ca-file").is_some(), "{server}");
    assert!(option_line(&server, "--listen").is_some(), "{server}");

    let runner = help(&["runner".to_string()]);
    for flag in ["--url", "--org", "--json"] {
        assert!(
            option_line(&runner, flag).is_none(),
            "bosun runner --help lists {flag}:\n{runner}"
        );
    }
    let token = option_line(&runner, "--token").unwrap_or_else(|| panic!("{runner}"));
    assert!(
        token.contains("pool") && token.contains("BOSUN_RUNNER_TOKEN"),
        "{token}"
    );

    // A client command still lists every one.
    let client = help(&["stack".to_string(), "list".to_string()]);
    for flag in ["--url", "--token", "--org", "--json", "--ca-file"] {
        assert!(option_line(&client, flag).is_some(), "{flag}:\n{client}");
    }
    // Ignored, not refused: a script may pass them to every command.
    let out = Command::new(BIN)
        .args(["server", "--url", "http://x:1", "--org", "o", "--json"])
        .args(["--token", "t", "--help"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
