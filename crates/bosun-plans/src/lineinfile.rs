//! `file.lineinfile`, byte-identical to Ansible's `lineinfile` for `line`, `regexp`,
//! `search_string`, `state`, `insertafter`, `insertbefore`, `backrefs`, `firstmatch` and
//! `create`: a pure function from the file's current bytes to its new bytes.
//!
//! The algorithm is a line-for-line port of `present()` and `absent()` in ansible-core's
//! `lib/ansible/modules/lineinfile.py`, including its quirks: the file is split like
//! Python's binary `readlines()` (lines keep their endings), an exact-line match compares
//! `line` with the file's line stripped of trailing `\r`/`\n`, a replaced line always ends
//! with `\n`, and a line inserted after a regexp match on a last line that lacks its
//! newline is glued to that line (Ansible does exactly that; the differential test
//! `tests/lineinfile_ansible.rs` pins every such behaviour against real ansible-core).
//!
//! Regular expressions are Python's `re` on bytes. `crate::pyre` parses the pattern with the
//! grammar and errors of CPython's `re._parser` and translates it into a `fancy_regex`
//! pattern over bytes (ASCII classes, `$` matching before a final `\n`, Python's
//! case-insensitivity, look-around, backreferences, conditionals, atomic groups and
//! possessive repeats), searched like `re.search`; `backrefs` expands `line` the way
//! `match.expand(line)` does (`\1`, `\g<1>`, `\g<name>`, `\n`, octal escapes, …).

use crate::pyre;

/// Rendered parameters.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Params {
    pub line: Option<String>,
    pub regexp: Option<String>,
    pub search_string: Option<String>,
    /// `true`: `state: absent`.
    pub absent: bool,
    pub insertafter: Option<String>,
    pub insertbefore: Option<String>,
    pub backrefs: bool,
    pub firstmatch: bool,
    pub create: bool,
}

/// What the module would do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The new content; `None` when the file does not exist and stays so.
    pub content: Option<Vec<u8>>,
    pub changed: bool,
    /// Ansible's message (`line added`, `line replaced`, `1 line(s) removed`, …).
    pub message: String,
}

/// Invalid parameters or an impossible request, worded like Ansible's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LineInFileError(pub String);

const LINESEP: &[u8] = b"\n";

/// Applies the module to `current` (`None`: the file does not exist).
///
/// Parameter checks come in Ansible's order: mutually exclusive parameters
/// (`insertbefore`/`insertafter`, `regexp`/`search_string`, `backrefs`/`search_string`;
/// `backrefs: false` counts as not given), then `regexp` with `backrefs`, `line` with
/// `state: present`, and one of `line`, `search_string`, `regexp` with `state: absent`.
pub fn apply(current: Option<&[u8]>, params: &Params) -> Result<Outcome, LineInFileError> {
    let mut exclusive = Vec::new();
    if params.insertbefore.is_some() && params.insertafter.is_some() {
        exclusive.push("insertbefore|insertafter");
    }
    if params.regexp.is_some() && params.search_string.is_some() {
        exclusive.push("regexp|search_string");
    }
    if params.backrefs && params.search_string.is_some() {
        exclusive.push("backrefs|search_string");
    }
    if !exclusive.is_empty() {
        return Err(LineInFileError(format!(
            "parameters are mutually exclusive: {}",
            exclusive.join(", ")
        )));
    }
    if params.absent {
        if params.regexp.is_none() && params.search_string.is_none() && params.line.is_none() {
            return Err(LineInFileError(
                "one of line, search_string, or regexp is required with state=absent".into(),
            ));
        }
        absent(current, params)
    } else {
        if params.backrefs && params.regexp.is_none() {
            return Err(LineInFileError(
                "regexp is required with backrefs=true".into(),
            ));
        }
        let Some(line) = params.line.as_deref() else {
            return Err(LineInFileError(
                "line is required with state=present".into(),
            ));
        };
        // Ansible defaults insertafter to EOF only when neither position is given.
        let insertafter = match (&params.insertafter, &params.insertbefore) {
            (None, None) => Some("EOF"),
            (after, _) => after.as_deref(),
        };
        present(
            current,
            params,
            line.as_bytes(),
            insertafter,
            params.insertbefore.as_deref(),
        )
    }
}

/// Python's `bytes.readlines()`: split after every `\n`, endings kept.
fn readlines(content: &[u8]) -> Vec<Vec<u8>> {
    content
        .split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

/// `line.rstrip(b'\r\n')`.
fn rstrip_eol(line: &[u8]) -> &[u8] {
    let end = line
        .iter()
        .rposition(|&b| b != b'\r' && b != b'\n')
        .map_or(0, |i| i + 1);
    &line[..end]
}

/// `b_lines[-1][-1:] in (b'\n', b'\r')` is false: the last line lacks an ending.
fn last_line_unterminated(lines: &[Vec<u8>]) -> bool {
    lines
        .last()
        .is_some_and(|l| !matches!(l.last(), Some(b'\n' | b'\r')))
}

fn with_sep(line: &[u8]) -> Vec<u8> {
    let mut v = line.to_vec();
    v.extend_from_slice(LINESEP);
    v
}

/// Python truthiness of an optional string parameter.
fn truthy(s: Option<&str>) -> bool {
    s.is_some_and(|s| !s.is_empty())
}

fn compile(what: &str, pattern: &str, lines: &[Vec<u8>]) -> Result<pyre::Pattern, LineInFileError> {
    let max_len = lines.iter().map(Vec::len).max().unwrap_or(0);
    pyre::Pattern::compile(pattern.as_bytes(), max_len)
        .map_err(|e| LineInFileError(format!("invalid {what} {pattern:?}: {e}")))
}

fn search(
    re: &pyre::Pattern,
    hay: &[u8],
    pattern: &str,
) -> Result<Option<pyre::Match>, LineInFileError> {
    re.search(hay)
        .map_err(|e| LineInFileError(format!("matching {pattern:?} failed: {e}")))
}

/// What found the line to replace (`match` in Ansible's `present()`).
enum Found {
    Nothing,
    Regexp(pyre::Match),
    SearchString,
}

fn present(
    current: Option<&[u8]>,
    params: &Params,
    b_line: &[u8],
    insertafter: Option<&str>,
    insertbefore: Option<&str>,
) -> Result<Outcome, LineInFileError> {
    let existed = current.is_some();
    let mut lines = match current {
        None if !params.create => {
            return Err(LineInFileError("Destination does not exist !".into()));
        }
        None => Vec::new(),
        Some(content) => readlines(content),
    };

    let bre_m = match &params.regexp {
        Some(r) => Some((compile("regexp", r, &lines)?, r.as_str())),
        None => None,
    };
    let bre_ins = match (insertafter, insertbefore) {
        (Some(a), _) if a != "BOF" && a != "EOF" => Some((compile("insertafter", a, &lines)?, a)),
        (None, Some(b)) if b != "BOF" => Some((compile("insertbefore", b, &lines)?, b)),
        _ => None,
    };

    // index[0]: the line found by regexp, search_string or an exact match;
    // index[1]: where insertafter/insertbefore would put the line.
    let mut index0: Option<usize> = None;
    let mut index1: Option<usize> = None;
    let mut found = Found::Nothing;
    let mut exact_line_match = false;

    if let Some((re, pattern)) = &bre_m {
        for (lineno, cur) in lines.iter().enumerate() {
            if let Some(m) = search(re, cur, pattern)? {
                index0 = Some(lineno);
                found = Found::Regexp(m);
                if params.firstmatch {
                    break;
                }
            }
        }
    }
    if let Some(needle) = &params.search_string {
        for (lineno, cur) in lines.iter().enumerate() {
            if contains(cur, needle.as_bytes()) {
                index0 = Some(lineno);
                found = Found::SearchString;
                if params.firstmatch {
                    break;
                }
            }
        }
    }
    if matches!(found, Found::Nothing) {
        for (lineno, cur) in lines.iter().enumerate() {
            if b_line == rstrip_eol(cur) {
                index0 = Some(lineno);
                exact_line_match = true;
            } else if let Some((re, pattern)) = &bre_ins {
                if search(re, cur, pattern)?.is_some() {
                    if truthy(insertafter) {
                        index1 = Some(lineno + 1);
                        if params.firstmatch {
                            break;
                        }
                    }
                    if truthy(insertbefore) {
                        index1 = Some(lineno);
                        if params.firstmatch {
                            break;
                        }
                    }
                }
            }
        }
    }

    let mut msg = "";
    let mut changed = false;
    if let Some(i0) = index0 {
        let mut new_line = match (&found, &bre_m) {
            (Found::Regexp(m), Some((re, _))) if params.backrefs => {
                pyre::expand(re, m, &lines[i0], b_line).map_err(|e| {
                    LineInFileError(format!("backrefs: invalid template {b_line:?}: {e}"))
                })?
            }
            _ => b_line.to_vec(),
        };
        if !new_line.ends_with(LINESEP) {
            new_line.extend_from_slice(LINESEP);
        }
        // Ansible has a branch here for "no regexp, no search_string, no match and no
        // exact line", which cannot be reached: without regexp and search_string only an
        // exact line sets index[0]. Only its replace branch is live.
        let _ = exact_line_match;
        if lines[i0] != new_line {
            lines[i0] = new_line;
            msg = "line replaced";
            changed = true;
        }
    } else if params.backrefs {
        // Without a match there is nothing to populate the backrefs: do nothing.
    } else if insertbefore == Some("BOF") || insertafter == Some("BOF") {
        lines.insert(0, with_sep(b_line));
        msg = "line added";
        changed = true;
    } else if insertafter == Some("EOF") || index1.is_none() {
        if last_line_unterminated(&lines) {
            lines.push(LINESEP.to_vec());
        }
        lines.push(with_sep(b_line));
        msg = "line added";
        changed = true;
    } else if let (true, Some(i1)) = (truthy(insertafter), index1) {
        // Ansible does not terminate an unterminated last line on this path.
        if lines.len() == i1 {
            if rstrip_eol(&lines[i1 - 1]) != b_line {
                lines.push(with_sep(b_line));
                msg = "line added";
                changed = true;
            }
        } else if b_line != rstrip_eol(&lines[i1]) {
            lines.insert(i1, with_sep(b_line));
            msg = "line added";
            changed = true;
        }
    } else if let Some(i1) = index1 {
        lines.insert(i1, with_sep(b_line));
        msg = "line added";
        changed = true;
    }

    Ok(Outcome {
        content: (existed || changed).then(|| lines.concat()),
        changed,
        message: msg.to_string(),
    })
}

fn absent(current: Option<&[u8]>, params: &Params) -> Result<Outcome, LineInFileError> {
    let Some(content) = current else {
        return Ok(Outcome {
            content: None,
            changed: false,
            message: "file not present".into(),
        });
    };
    let lines = readlines(content);
    let bre_c = match &params.regexp {
        Some(r) => Some((compile("regexp", r, &lines)?, r.as_str())),
        None => None,
    };
    let b_line = params.line.as_deref().unwrap_or("None").as_bytes();
    let mut kept = Vec::with_capacity(lines.len());
    let mut removed = 0usize;
    for cur in lines {
        let hit = if let Some((re, pattern)) = &bre_c {
            search(re, &cur, pattern)?.is_some()
        } else if let Some(needle) = &params.search_string {
            contains(&cur, needle.as_bytes())
        } else {
            b_line == rstrip_eol(&cur)
        };
        if hit {
            removed += 1;
        } else {
            kept.push(cur);
        }
    }
    let changed = removed > 0;
    Ok(Outcome {
        content: Some(kept.concat()),
        changed,
        message: if changed {
            format!("{removed} line(s) removed")
        } else {
            String::new()
        },
    })
}

/// Python's `needle in haystack` on bytes.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    //! The trickiest behaviours with Ansible's bytes written out (each checked against
    //! ansible-core 2.19's module), and the idempotence property.
    use super::*;
    use proptest::prelude::*;

    fn line(l: &str) -> Params {
        Params {
            line: Some(l.into()),
            ..Params::default()
        }
    }

    fn run(content: &[u8], p: &Params) -> (Vec<u8>, bool, String) {
        let o = apply(Some(content), p).unwrap();
        (o.content.unwrap(), o.changed, o.message)
    }

    #[track_caller]
    fn check(content: &[u8], p: &Params, want: &[u8], changed: bool, msg: &str) {
        let (got, ch, m) = run(content, p);
        assert_eq!(
            (String::from_utf8_lossy(&got), ch, m.as_str()),
            (String::from_utf8_lossy(want), changed, msg)
        );
        assert_eq!(got, want);
    }

    #[test]
    fn lineinfile_exact_line_with_crlf_is_rewritten_with_lf() {
        check(
            b"a\r\nb\r\n",
            &line("b"),
            b"a\r\nb\n",
            true,
            "line replaced",
        );
    }

    #[test]
    fn lineinfile_eof_insert_terminates_the_last_line_first() {
        check(b"a\nb", &line("c"), b"a\nb\nc\n", true, "line added");
        // A bare CR counts as a line ending.
        check(b"a\r", &line("x"), b"a\rx\n", true, "line added");
        check(
            b"a\nline",
            &line("line"),
            b"a\nline\n",
            true,
            "line replaced",
        );
    }

    #[test]
    fn lineinfile_a_file_ending_in_a_bare_cr_grows_on_every_run_like_ansible() {
        // Ansible takes a final `\r` as a line ending and appends, but readlines() does
        // not split on `\r`, so the line it wrote is never found again.
        check(b"\r", &line("a"), b"\ra\n", true, "line added");
        check(b"\ra\n", &line("a"), b"\ra\na\n", true, "line added");
    }

    #[test]
    fn lineinfile_insertafter_on_an_unterminated_last_line_glues_like_ansible() {
        let p = Params {
            insertafter: Some("^b".into()),
            ..line("x")
        };
        check(b"a\nb", &p, b"a\nbx\n", true, "line added");
    }

    #[test]
    fn lineinfile_python_anchors_on_readlines_lines() {
        // `$` matches before the line's own newline; `^` only at its start.
        let p = Params {
            regexp: Some("c$".into()),
            ..line("C")
        };
        check(b"a\nc\n", &p, b"a\nC\n", true, "line replaced");
        let p = Params {
            regexp: Some("^$".into()),
            ..line("blank")
        };
        check(b"foo\n\n", &p, b"foo\nblank\n", true, "line replaced");
        // Python bytes patterns are ASCII: \w does not match \xe9.
        let p = Params {
            regexp: Some("^caf\\w$".into()),
            ..line("cafe")
        };
        check(b"caf\xe9\n", &p, b"caf\xe9\ncafe\n", true, "line added");
        // `{,x}` is no repeat: Python reads it literally.
        let p = Params {
            regexp: Some("^a{,x}$".into()),
            ..line("B")
        };
        check(b"a{,x}\n", &p, b"B\n", true, "line replaced");
    }

    #[test]
    fn lineinfile_backrefs_expand_like_match_expand() {
        let br = |re: &str, l: &str| Params {
            regexp: Some(re.into()),
            backrefs: true,
            ..line(l)
        };
        check(
            b"a\n",
            &br("^(a)", "\\1\\t\\\\\\101"),
            b"a\t\\A\n",
            true,
            "line replaced",
        );
        // The group took the line's newline with it; a newline is still added.
        check(
            b"foo  \n",
            &br("(\\s*)$", "<\\1>"),
            b"<  \n>\n",
            true,
            "line replaced",
        );
        check(
            b"k = v\n",
            &br("^(?P<k>\\w+) = (?P<v>\\w+)$", "\\g<v>=\\g<k>"),
            b"v=k\n",
            true,
            "line replaced",
        );
        // No match: nothing happens, not even with create on a missing file.
        check(b"a\n", &br("^z(.)", "\\1"), b"a\n", false, "");
        let p = Params {
            create: true,
            ..br("(a)", "\\1")
        };
        let o = apply(None, &p).unwrap();
        assert_eq!((o.content, o.changed), (None, false));
        // A bad template fails only when a line matched.
        assert!(apply(Some(b"b\n"), &br("^(b)", "\\q")).is_err());
        assert!(apply(Some(b"b\n"), &br("^(b)", "\\2")).is_err());
    }

    #[test]
    fn lineinfile_firstmatch_insertafter_can_duplicate_a_later_line() {
        let p = Params {
            insertafter: Some("^[ab]".into()),
            firstmatch: true,
            ..line("x")
        };
        check(b"a\nb\nx\n", &p, b"a\nx\nb\nx\n", true, "line added");
    }

    #[test]
    fn lineinfile_search_string_and_absent() {
        let p = Params {
            search_string: Some(String::new()),
            ..line("z")
        };
        check(b"a\nb\n", &p, b"a\nz\n", true, "line replaced");
        let p = Params {
            absent: true,
            ..line("a")
        };
        check(b"a\r\nb\r\na", &p, b"b\r\n", true, "2 line(s) removed");
        let o = apply(None, &p).unwrap();
        assert_eq!(
            (o.content, o.changed, o.message.as_str()),
            (None, false, "file not present")
        );
    }

    #[test]
    fn lineinfile_line_ending_in_newline_gets_another_on_insert() {
        check(b"a\n", &line("b\n"), b"a\nb\n\n", true, "line added");
        let p = Params {
            regexp: Some("^a".into()),
            ..line("b\n")
        };
        check(b"a\n", &p, b"b\n", true, "line replaced");
    }

    #[test]
    fn lineinfile_parameter_errors_are_worded_like_ansible() {
        let err = |p: &Params| apply(Some(b"a\n"), p).unwrap_err().0;
        assert_eq!(
            err(&Params {
                regexp: Some("a".into()),
                search_string: Some("a".into()),
                backrefs: true,
                ..line("x")
            }),
            "parameters are mutually exclusive: regexp|search_string, backrefs|search_string"
        );
        assert_eq!(
            err(&Params {
                insertafter: Some("a".into()),
                insertbefore: Some("b".into()),
                ..line("x")
            }),
            "parameters are mutually exclusive: insertbefore|insertafter"
        );
        assert_eq!(
            err(&Params {
                backrefs: true,
                ..line("x")
            }),
            "regexp is required with backrefs=true"
        );
        assert_eq!(
            err(&Params::default()),
            "line is required with state=present"
        );
        assert_eq!(
            err(&Params {
                absent: true,
                ..Params::default()
            }),
            "one of line, search_string, or regexp is required with state=absent"
        );
        assert_eq!(
            apply(None, &line("x")).unwrap_err().0,
            "Destination does not exist !"
        );
        assert!(err(&Params {
            regexp: Some("(".into()),
            ..line("x")
        })
        .contains("missing ), unterminated subpattern"));
        assert!(err(&Params {
            regexp: Some("(?<=a+)b".into()),
            ..line("x")
        })
        .contains("look-behind requires fixed-width pattern"));
    }

    /// A present-state case without backrefs on which Ansible is idempotent: `line` has no
    /// `\r`/`\n` (a line ending in one is never found again), a `regexp` or
    /// `search_string` finds the line it writes (otherwise the next run replaces another
    /// matching line), and a file searched with an `insertafter` regexp ends with a
    /// newline (otherwise Ansible glues the line to the last one, see
    /// `lineinfile_insertafter_on_an_unterminated_last_line_glues_like_ansible`), and the
    /// file does not end in a bare `\r` (see
    /// `lineinfile_a_file_ending_in_a_bare_cr_grows_on_every_run_like_ansible`).
    fn idempotent_case() -> impl Strategy<Value = (Option<Vec<u8>>, Params)> {
        let file_lines = prop::collection::vec(
            (
                "[abc=# ]{0,5}",
                prop_oneof![Just("\n"), Just("\r\n"), Just("\r")],
            ),
            0..7,
        );
        (
            file_lines,
            any::<bool>(),
            prop::option::weighted(0.9, Just(())),
            "[abc=# ]{0,6}",
            0..9usize,
            any::<bool>(),
            any::<prop::sample::Index>(),
            prop::sample::select(vec!["^a", "=", "^#", "b$", "c", "^$"]),
        )
            .prop_map(
                |(lines, unterminated, exists, l, mode, firstmatch, cut, re)| {
                    let after_regex = matches!(mode, 3 | 8);
                    let content = exists.map(|()| {
                        let mut c = Vec::new();
                        for (i, (text, end)) in lines.iter().enumerate() {
                            c.extend_from_slice(text.as_bytes());
                            let last = i + 1 == lines.len();
                            if !(last && unterminated && !after_regex) {
                                c.extend_from_slice(end.as_bytes());
                            }
                        }
                        // A file ending in a bare CR counts as terminated, but the CR
                        // does not end a line for readlines(): see below.
                        if c.last() == Some(&b'\r') {
                            c.push(b'\n');
                        }
                        c
                    });
                    let prefix = &l[..cut.index(l.len() + 1)];
                    let escaped: String = prefix
                        .chars()
                        .flat_map(|c| {
                            let esc = (!c.is_ascii_alphanumeric()).then_some('\\');
                            esc.into_iter().chain(std::iter::once(c))
                        })
                        .collect();
                    let mut p = Params {
                        line: Some(l.clone()),
                        firstmatch,
                        create: true,
                        ..Params::default()
                    };
                    match mode {
                        1 => p.insertafter = Some("BOF".into()),
                        2 => p.insertafter = Some("EOF".into()),
                        3 => p.insertafter = Some(re.into()),
                        4 => p.insertbefore = Some("BOF".into()),
                        5 => p.insertbefore = Some(re.into()),
                        6 => p.regexp = Some(format!("^{escaped}")),
                        7 => p.search_string = Some(prefix.to_string()),
                        8 => {
                            p.regexp = Some(format!("^{escaped}"));
                            p.insertafter = Some(re.into());
                        }
                        _ => {}
                    }
                    (content, p)
                },
            )
    }

    proptest! {
        /// It never adds a line it already wrote: a second run changes nothing.
        #[test]
        fn lineinfile_second_apply_changes_nothing((content, params) in idempotent_case()) {
            let first = apply(content.as_deref(), &params).unwrap();
            let second = apply(first.content.as_deref(), &params).unwrap();
            prop_assert!(!second.changed, "second run: {:?} after {:?}", second, first);
            prop_assert_eq!(&second.content, &first.content);
            prop_assert_eq!(second.message.as_str(), "");
        }
    }
}
