//! Python's `re` on bytes patterns, translated to `fancy_regex`.
//!
//! [`Pattern::compile`] follows CPython 3.11's `re._parser` token by token: the same
//! escapes (`\d\s\w\b\A\Z`, `\xhh`, octal, `\1` vs `\101`), classes (`[]a]`, `[a-]`,
//! ranges), `{m,n}` read as a literal when it is not a valid repeat, inline flags
//! (`i m s x a L`, global only at the start), groups (`(?P<n>…)`, `(?P=n)`, `(?:…)`,
//! `(?#…)`, look-ahead and fixed-width look-behind, `(?(1)…|…)`, `(?>…)`) and the same
//! parse errors. The parsed tree is emitted with every byte set spelled out, so that
//! the engine's own notions of classes, case and anchors never leak in: Python bytes
//! patterns are ASCII-only (`\w` = `[0-9A-Za-z_]`, IGNORECASE folds ASCII letters only),
//! `.` is any byte but `\n`, `^` is the start (or after any `\n` with `m`), and `$`
//! matches at the end or before a final `\n` (on a `readlines()` line, the only `\n` is
//! the last byte, so the engine's multi-line `$` is exactly Python's).
//!
//! The stages, in order: [`tokenizer`] reads the pattern a token at a time, [`parser`]
//! turns the tokens into a [`tree`] and checks it, and [`emit`] writes the tree out as a
//! `fancy_regex` pattern; [`template`] expands a `backrefs` line with a match's groups.

mod emit;
mod parser;
mod template;
mod tokenizer;
mod tree;

use std::collections::HashMap;

use emit::Emitter;
use parser::{check_lookbehinds, Parser, State};
pub(crate) use template::expand;
use tokenizer::Tokenizer;

const F_TEMPLATE: u32 = 1;
const F_IGNORECASE: u32 = 2;
const F_LOCALE: u32 = 4;
const F_MULTILINE: u32 = 8;
const F_DOTALL: u32 = 16;
const F_UNICODE: u32 = 32;
const F_VERBOSE: u32 = 64;
const F_ASCII: u32 = 256;
const TYPE_FLAGS: u32 = F_ASCII | F_LOCALE | F_UNICODE;
const GLOBAL_FLAGS: u32 = F_TEMPLATE;

/// `_sre.MAXREPEAT`: an unbounded repeat.
const MAXREPEAT: u128 = 4_294_967_295;
/// `_sre.MAXGROUPS` on 64-bit builds.
const MAXGROUPS: u128 = 1_073_741_823;
const MAXWIDTH: u128 = 1 << 64;

/// Errors are plain messages, worded like CPython's where it refuses the same pattern.
type R<T> = Result<T, String>;

/// A compiled Python bytes pattern.
pub(crate) struct Pattern {
    regex: fancy_regex::Regex,
    /// Capturing groups, without group 0 (`pattern.groups`).
    groups: usize,
    groupindex: HashMap<Vec<u8>, usize>,
}

/// The spans of a match's groups (index 0: the whole match).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Match {
    spans: Vec<Option<(usize, usize)>>,
}

impl Pattern {
    /// `re.compile(pattern)` for a bytes pattern that will search haystacks of at
    /// most `max_hay` bytes.
    pub(crate) fn compile(pattern: &[u8], max_hay: usize) -> R<Pattern> {
        let mut p = Parser {
            t: Tokenizer::new(pattern)?,
            state: State {
                flags: 0,
                groupdict: HashMap::new(),
                groupwidths: vec![None],
                lookbehindgroups: None,
                grouprefpos: Vec::new(),
                has_repeat: false,
            },
        };
        let tree = p.parse_sub(false, 0)?;
        if p.t.next.is_some() {
            return Err("unbalanced parenthesis".into());
        }
        let state = p.state;
        if let Some(g) = state.grouprefpos.iter().find(|&&g| g >= state.groups()) {
            return Err(format!("invalid group reference {g}"));
        }
        if state.flags & F_TEMPLATE != 0 && state.has_repeat {
            return Err("internal: unsupported template operator".into());
        }
        check_lookbehinds(&state, &tree)?;
        let mut emitter = Emitter {
            state: &state,
            out: String::new(),
            max_hay: max_hay as u128,
        };
        emitter.seq(&tree, state.flags);
        let translated = emitter.out;
        let regex = fancy_regex::RegexBuilder::new(&translated)
            .bytes_mode(fancy_regex::BytesMode::Ascii)
            .backtrack_limit(50_000_000)
            .build()
            .map_err(|e| format!("not supported by the regex engine ({e})"))?;
        Ok(Pattern {
            regex,
            groups: state.groups() - 1,
            groupindex: state.groupdict,
        })
    }

    /// `pattern.search(hay)`.
    pub(crate) fn search(&self, hay: &[u8]) -> R<Option<Match>> {
        let caps = self.regex.captures(hay).map_err(|e| e.to_string())?;
        Ok(caps.map(|c| Match {
            spans: (0..=self.groups)
                .map(|i| c.get(i).map(|m| (m.start(), m.end())))
                .collect(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use crate::pyre;

    #[test]
    fn lineinfile_python_regex_features() {
        let hit = |re: &str, hay: &[u8]| {
            pyre::Pattern::compile(re.as_bytes(), hay.len())
                .unwrap()
                .search(hay)
                .unwrap()
                .is_some()
        };
        assert!(hit("(?i)^permitrootlogin", b"PermitRootLogin yes\n"));
        assert!(!hit("(?i)\\xe9", b"\xc9"), "IGNORECASE folds ASCII only");
        assert!(hit("^(?!#)\\s*Port\\b", b"  Port 22\n"));
        assert!(!hit("^(?!#)\\s*Port\\b", b"#Port 22\n"));
        assert!(hit("(?<=x=)\\d", b"x=1\n"));
        assert!(hit("^(.)\\1", b"aab\n"));
        assert!(hit("(?x) ^ x = \\d  # comment", b"x=1\n"));
        assert!(hit("(?P<q>['\"]).*(?P=q)", b"'v'\n"));
        assert!(hit("(a)?(?(1)b|c)", b"c\n"));
        assert!(
            !hit("a*+a", b"aaa\n"),
            "possessive repeats do not give back"
        );
        assert!(!hit("(?>a*)a", b"aaa\n"), "atomic groups do not give back");
        assert!(hit("(?=a)*b", b"b\n"));
        assert!(hit("a{2,4294967294}", b"aaa\n"));
        assert!(hit("[]a]", b"]\n"));
        assert!(hit("\\101\\0", b"A\x00\n"));
        assert!(hit("(?s:.)\\Z", b"a\n"));
        assert!(!hit("a\\Z", b"a\n"), "\\Z is the very end");
        for bad in [
            "a**",
            "*",
            "(?i",
            "[b-a]",
            "\\q",
            "(?P<1>a)",
            "a)",
            "(?<=a|bc)",
            "\\2(a)",
        ] {
            assert!(pyre::Pattern::compile(bad.as_bytes(), 10).is_err(), "{bad}");
        }
    }
}
