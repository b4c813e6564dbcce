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
//! Regular expressions are Python's `re` on bytes. [`pyre`] parses the pattern with the
//! grammar and errors of CPython's `re._parser` and translates it into a `fancy_regex`
//! pattern over bytes (ASCII classes, `$` matching before a final `\n`, Python's
//! case-insensitivity, look-around, backreferences, conditionals, atomic groups and
//! possessive repeats), searched like `re.search`; `backrefs` expands `line` the way
//! `match.expand(line)` does (`\1`, `\g<1>`, `\g<name>`, `\n`, octal escapes, …).

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

/// Python's `re` on bytes patterns, translated to `fancy_regex`.
///
/// [`Pattern::compile`] follows CPython 3.11's `re._parser` token by token: the same
/// escapes (`\d\s\w\b\A\Z`, `\xhh`, octal, `\1` vs `\101`), classes (`[]a]`, `[a-]`,
/// ranges), `{m,n}` read as a literal when it is not a valid repeat, inline flags
/// (`i m s x a L`, global only at the start), groups (`(?P<n>…)`, `(?P=n)`, `(?:…)`,
/// `(?#…)`, look-ahead and fixed-width look-behind, `(?(1)…|…)`, `(?>…)`) and the same
/// parse errors. The parsed tree is emitted with every byte set spelled out, so that
/// the engine's own notions of classes, case and anchors never leak in: Python bytes
/// patterns are ASCII-only (`\w` = `[0-9A-Za-z_]`, IGNORECASE folds ASCII letters only),
/// `.` is any byte but `\n`, `^` is the start (or after any `\n` with `m`), and `$`
/// matches at the end or before a final `\n` (on a `readlines()` line, the only `\n` is
/// the last byte, so the engine's multi-line `$` is exactly Python's).
pub(crate) mod pyre {
    use std::collections::HashMap;

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

    const SPECIAL_CHARS: &[u8] = b".\\[{()*+?^$|";
    const REPEAT_CHARS: &[u8] = b"*+?{";

    type R<T> = Result<T, String>;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Tok {
        Ch(u8),
        Esc(u8),
    }

    impl Tok {
        fn len(self) -> usize {
            match self {
                Tok::Ch(_) => 1,
                Tok::Esc(_) => 2,
            }
        }
        fn push_to(self, out: &mut Vec<u8>) {
            match self {
                Tok::Ch(c) => out.push(c),
                Tok::Esc(c) => out.extend_from_slice(&[b'\\', c]),
            }
        }
    }

    /// `re._parser.Tokenizer` over bytes (Python decodes them as latin-1: one char a byte).
    struct Tokenizer<'a> {
        s: &'a [u8],
        index: usize,
        next: Option<Tok>,
    }

    impl<'a> Tokenizer<'a> {
        fn new(s: &'a [u8]) -> R<Self> {
            let mut t = Tokenizer {
                s,
                index: 0,
                next: None,
            };
            t.advance()?;
            Ok(t)
        }
        fn advance(&mut self) -> R<()> {
            let Some(&c) = self.s.get(self.index) else {
                self.next = None;
                return Ok(());
            };
            if c == b'\\' {
                let Some(&e) = self.s.get(self.index + 1) else {
                    return Err("bad escape (end of pattern)".into());
                };
                self.next = Some(Tok::Esc(e));
                self.index += 2;
            } else {
                self.next = Some(Tok::Ch(c));
                self.index += 1;
            }
            Ok(())
        }
        fn matches(&mut self, c: u8) -> R<bool> {
            if self.next == Some(Tok::Ch(c)) {
                self.advance()?;
                Ok(true)
            } else {
                Ok(false)
            }
        }
        fn get(&mut self) -> R<Option<Tok>> {
            let this = self.next;
            self.advance()?;
            Ok(this)
        }
        fn next_is(&self, set: &[u8]) -> bool {
            matches!(self.next, Some(Tok::Ch(c)) if set.contains(&c))
        }
        fn getwhile(&mut self, n: usize, set: &[u8]) -> R<Vec<u8>> {
            let mut out = Vec::new();
            for _ in 0..n {
                match self.next {
                    Some(Tok::Ch(c)) if set.contains(&c) => {
                        out.push(c);
                        self.advance()?;
                    }
                    _ => break,
                }
            }
            Ok(out)
        }
        fn getuntil(&mut self, terminator: u8, name: &str) -> R<Vec<u8>> {
            let mut out = Vec::new();
            loop {
                let c = self.next;
                self.advance()?;
                match c {
                    None if out.is_empty() => return Err(format!("missing {name}")),
                    None => {
                        return Err(format!(
                            "missing {}, unterminated name",
                            char::from(terminator)
                        ))
                    }
                    Some(Tok::Ch(t)) if t == terminator => {
                        if out.is_empty() {
                            return Err(format!("missing {name}"));
                        }
                        return Ok(out);
                    }
                    Some(tok) => tok.push_to(&mut out),
                }
            }
        }
        fn tell(&self) -> usize {
            self.index - self.next.map_or(0, Tok::len)
        }
        fn seek(&mut self, index: usize) -> R<()> {
            self.index = index;
            self.advance()
        }
    }

    const DIGITS: &[u8] = b"0123456789";
    const OCTDIGITS: &[u8] = b"01234567";
    const HEXDIGITS: &[u8] = b"0123456789abcdefABCDEF";
    const WHITESPACE: &[u8] = b" \t\n\r\x0b\x0c";

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Category {
        Digit,
        NotDigit,
        Space,
        NotSpace,
        Word,
        NotWord,
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum SetItem {
        Lit(u8),
        Range(u8, u8),
        Cat(Category),
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum At {
        Beginning,
        End,
        BeginningString,
        EndString,
        Boundary,
        NonBoundary,
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum RepeatKind {
        Greedy,
        Lazy,
        Possessive,
    }

    type Seq = Vec<Node>;

    #[derive(Debug, Clone)]
    enum Node {
        Lit(u8),
        Set {
            negate: bool,
            items: Vec<SetItem>,
        },
        Any,
        At(At),
        Repeat {
            min: u128,
            max: u128,
            kind: RepeatKind,
            item: Seq,
        },
        Group {
            index: Option<usize>,
            add: u32,
            del: u32,
            body: Seq,
        },
        Atomic(Seq),
        Assert {
            behind: bool,
            negate: bool,
            body: Seq,
        },
        GroupRef(usize),
        GroupRefExists {
            group: usize,
            yes: Seq,
            no: Option<Seq>,
        },
        Branch(Vec<Seq>),
    }

    /// Python's `str.isidentifier()` on a latin-1 name.
    fn is_identifier(name: &[u8]) -> bool {
        fn start(b: u8) -> bool {
            b.is_ascii_alphabetic()
                || b == b'_'
                || matches!(b, 0xAA | 0xB5 | 0xBA | 0xC0..=0xD6 | 0xD8..=0xF6 | 0xF8..=0xFF)
        }
        match name.split_first() {
            None => false,
            Some((&first, rest)) => {
                start(first)
                    && rest
                        .iter()
                        .all(|&b| start(b) || b.is_ascii_digit() || b == 0xB7)
            }
        }
    }

    /// Python's `int(name)` on a latin-1 string: surrounding whitespace, a sign, ASCII
    /// digits with single underscores between them.
    fn py_int(name: &[u8]) -> Option<i128> {
        let is_space = |b: &u8| matches!(b, b'\t'..=b'\r' | 0x1C..=0x20 | 0x85 | 0xA0);
        let start = name.iter().position(|b| !is_space(b))?;
        let end = name.iter().rposition(|b| !is_space(b))? + 1;
        let mut s = &name[start..end];
        let mut negative = false;
        if let Some((&sign, rest)) = s.split_first() {
            if sign == b'+' || sign == b'-' {
                negative = sign == b'-';
                s = rest;
            }
        }
        if s.is_empty() || s[0] == b'_' || s[s.len() - 1] == b'_' {
            return None;
        }
        let mut value: i128 = 0;
        let mut prev_underscore = false;
        for &b in s {
            if b == b'_' {
                if prev_underscore {
                    return None;
                }
                prev_underscore = true;
                continue;
            }
            prev_underscore = false;
            if !b.is_ascii_digit() {
                return None;
            }
            value = value
                .saturating_mul(10)
                .saturating_add(i128::from(b - b'0'));
        }
        Some(if negative { -value } else { value })
    }

    fn digits_value(d: &[u8]) -> u128 {
        d.iter().fold(0u128, |acc, &b| {
            acc.saturating_mul(10).saturating_add(u128::from(b - b'0'))
        })
    }

    fn octal_value(d: &[u8]) -> u32 {
        d.iter().fold(0u32, |acc, &b| acc * 8 + u32::from(b - b'0'))
    }

    fn hex_value(d: &[u8]) -> u8 {
        d.iter().fold(0u8, |acc, &b| {
            let v = match b {
                b'0'..=b'9' => b - b'0',
                b'a'..=b'f' => b - b'a' + 10,
                _ => b - b'A' + 10,
            };
            acc.wrapping_mul(16).wrapping_add(v)
        })
    }

    fn show(bytes: &[u8]) -> String {
        bytes.iter().map(|&b| char::from(b)).collect()
    }

    struct State {
        flags: u32,
        groupdict: HashMap<Vec<u8>, usize>,
        groupwidths: Vec<Option<(u128, u128)>>,
        lookbehindgroups: Option<usize>,
        grouprefpos: Vec<usize>,
        has_repeat: bool,
    }

    impl State {
        fn groups(&self) -> usize {
            self.groupwidths.len()
        }
        fn opengroup(&mut self, name: Option<Vec<u8>>) -> R<usize> {
            let gid = self.groups();
            self.groupwidths.push(None);
            if gid as u128 >= MAXGROUPS {
                return Err("too many groups".into());
            }
            if let Some(name) = name {
                if let Some(ogid) = self.groupdict.get(&name) {
                    return Err(format!(
                        "redefinition of group name '{}' as group {gid}; was group {ogid}",
                        show(&name)
                    ));
                }
                self.groupdict.insert(name, gid);
            }
            Ok(gid)
        }
        fn checkgroup(&self, gid: usize) -> bool {
            self.groupwidths.get(gid).is_some_and(Option::is_some)
        }
        fn checklookbehindgroup(&self, gid: usize) -> R<()> {
            if let Some(lb) = self.lookbehindgroups {
                if !self.checkgroup(gid) {
                    return Err("cannot refer to an open group".into());
                }
                if gid >= lb {
                    return Err(
                        "cannot refer to group defined in the same lookbehind subpattern".into(),
                    );
                }
            }
            Ok(())
        }

        /// `SubPattern.getwidth()`.
        fn width(&self, seq: &[Node]) -> (u128, u128) {
            let (mut lo, mut hi) = (0u128, 0u128);
            for node in seq {
                let (i, j) = match node {
                    Node::Branch(alts) => {
                        let mut i = MAXWIDTH;
                        let mut j = 0;
                        for alt in alts {
                            let (l, h) = self.width(alt);
                            i = i.min(l);
                            j = j.max(h);
                        }
                        (i, j)
                    }
                    Node::Atomic(body) | Node::Group { body, .. } => self.width(body),
                    Node::Repeat { min, max, item, .. } => {
                        let (i, j) = self.width(item);
                        let lo_add = i.saturating_mul(*min);
                        if *max == MAXREPEAT && j > 0 {
                            lo = lo.saturating_add(lo_add);
                            hi = MAXWIDTH;
                            continue;
                        }
                        (lo_add, j.saturating_mul(*max))
                    }
                    Node::Lit(_) | Node::Set { .. } | Node::Any => (1, 1),
                    Node::GroupRef(g) => self
                        .groupwidths
                        .get(*g)
                        .copied()
                        .flatten()
                        .unwrap_or((0, 0)),
                    Node::GroupRefExists { yes, no, .. } => {
                        let (mut i, mut j) = self.width(yes);
                        match no {
                            Some(no) => {
                                let (l, h) = self.width(no);
                                i = i.min(l);
                                j = j.max(h);
                            }
                            None => i = 0,
                        }
                        (i, j)
                    }
                    Node::At(_) | Node::Assert { .. } => (0, 0),
                };
                lo = lo.saturating_add(i);
                hi = hi.saturating_add(j);
            }
            (lo.min(MAXWIDTH), hi.min(MAXWIDTH))
        }
    }

    struct Parser<'a> {
        t: Tokenizer<'a>,
        state: State,
    }

    impl Parser<'_> {
        fn escape(&mut self, c: u8) -> R<Node> {
            let cat = |c| Node::Set {
                negate: false,
                items: vec![SetItem::Cat(c)],
            };
            Ok(match c {
                b'A' => Node::At(At::BeginningString),
                b'b' => Node::At(At::Boundary),
                b'B' => Node::At(At::NonBoundary),
                b'd' => cat(Category::Digit),
                b'D' => cat(Category::NotDigit),
                b's' => cat(Category::Space),
                b'S' => cat(Category::NotSpace),
                b'w' => cat(Category::Word),
                b'W' => cat(Category::NotWord),
                b'Z' => Node::At(At::EndString),
                b'a' => Node::Lit(0x07),
                b'f' => Node::Lit(0x0c),
                b'n' => Node::Lit(b'\n'),
                b'r' => Node::Lit(b'\r'),
                b't' => Node::Lit(b'\t'),
                b'v' => Node::Lit(0x0b),
                b'\\' => Node::Lit(b'\\'),
                b'x' => {
                    let h = self.t.getwhile(2, HEXDIGITS)?;
                    if h.len() != 2 {
                        return Err(format!("incomplete escape \\x{}", show(&h)));
                    }
                    Node::Lit(hex_value(&h))
                }
                b'0' => {
                    let mut d = vec![b'0'];
                    d.extend(self.t.getwhile(2, OCTDIGITS)?);
                    Node::Lit(octal_value(&d) as u8)
                }
                b'1'..=b'9' => {
                    let mut d = vec![c];
                    if let Some(Tok::Ch(n)) = self.t.next {
                        if n.is_ascii_digit() {
                            self.t.get()?;
                            d.push(n);
                            if OCTDIGITS.contains(&c)
                                && OCTDIGITS.contains(&n)
                                && self.t.next_is(OCTDIGITS)
                            {
                                if let Some(Tok::Ch(third)) = self.t.get()? {
                                    d.push(third);
                                }
                                let v = octal_value(&d);
                                if v > 0o377 {
                                    return Err(format!(
                                        "octal escape value \\{} outside of range 0-0o377",
                                        show(&d)
                                    ));
                                }
                                return Ok(Node::Lit(v as u8));
                            }
                        }
                    }
                    let group = digits_value(&d) as usize;
                    if group < self.state.groups() {
                        if !self.state.checkgroup(group) {
                            return Err("cannot refer to an open group".into());
                        }
                        self.state.checklookbehindgroup(group)?;
                        return Ok(Node::GroupRef(group));
                    }
                    return Err(format!("invalid group reference {group}"));
                }
                c if c.is_ascii_alphabetic() => {
                    return Err(format!("bad escape \\{}", char::from(c)))
                }
                c => Node::Lit(c),
            })
        }

        fn class_escape(&mut self, c: u8) -> R<SetItem> {
            Ok(match c {
                b'a' => SetItem::Lit(0x07),
                b'b' => SetItem::Lit(0x08),
                b'f' => SetItem::Lit(0x0c),
                b'n' => SetItem::Lit(b'\n'),
                b'r' => SetItem::Lit(b'\r'),
                b't' => SetItem::Lit(b'\t'),
                b'v' => SetItem::Lit(0x0b),
                b'\\' => SetItem::Lit(b'\\'),
                b'd' => SetItem::Cat(Category::Digit),
                b'D' => SetItem::Cat(Category::NotDigit),
                b's' => SetItem::Cat(Category::Space),
                b'S' => SetItem::Cat(Category::NotSpace),
                b'w' => SetItem::Cat(Category::Word),
                b'W' => SetItem::Cat(Category::NotWord),
                b'x' => {
                    let h = self.t.getwhile(2, HEXDIGITS)?;
                    if h.len() != 2 {
                        return Err(format!("incomplete escape \\x{}", show(&h)));
                    }
                    SetItem::Lit(hex_value(&h))
                }
                b'0'..=b'7' => {
                    let mut d = vec![c];
                    d.extend(self.t.getwhile(2, OCTDIGITS)?);
                    let v = octal_value(&d);
                    if v > 0o377 {
                        return Err(format!(
                            "octal escape value \\{} outside of range 0-0o377",
                            show(&d)
                        ));
                    }
                    SetItem::Lit(v as u8)
                }
                b'8' | b'9' => return Err(format!("bad escape \\{}", char::from(c))),
                c if c.is_ascii_alphabetic() => {
                    return Err(format!("bad escape \\{}", char::from(c)))
                }
                c => SetItem::Lit(c),
            })
        }

        fn parse_sub(&mut self, verbose: bool, nested: usize) -> R<Seq> {
            let mut items: Vec<Seq> = Vec::new();
            let mut verbose = verbose;
            loop {
                let first = nested == 0 && items.is_empty();
                items.push(self.parse(verbose, nested + 1, first)?);
                if !self.t.matches(b'|')? {
                    break;
                }
                if nested == 0 {
                    verbose = self.state.flags & F_VERBOSE != 0;
                }
            }
            if items.len() == 1 {
                return Ok(items.pop().unwrap_or_default());
            }
            Ok(vec![Node::Branch(items)])
        }

        fn parse_class(&mut self) -> R<Node> {
            let negate = self.t.matches(b'^')?;
            let mut set: Vec<SetItem> = Vec::new();
            loop {
                let this = self
                    .t
                    .get()?
                    .ok_or_else(|| "unterminated character set".to_string())?;
                if this == Tok::Ch(b']') && !set.is_empty() {
                    break;
                }
                let code1 = match this {
                    Tok::Esc(c) => self.class_escape(c)?,
                    Tok::Ch(c) => SetItem::Lit(c),
                };
                if self.t.matches(b'-')? {
                    let that = self
                        .t
                        .get()?
                        .ok_or_else(|| "unterminated character set".to_string())?;
                    if that == Tok::Ch(b']') {
                        set.push(code1);
                        set.push(SetItem::Lit(b'-'));
                        break;
                    }
                    let code2 = match that {
                        Tok::Esc(c) => self.class_escape(c)?,
                        Tok::Ch(c) => SetItem::Lit(c),
                    };
                    let bad = || {
                        let mut s = Vec::new();
                        this.push_to(&mut s);
                        s.push(b'-');
                        that.push_to(&mut s);
                        format!("bad character range {}", show(&s))
                    };
                    match (code1, code2) {
                        (SetItem::Lit(lo), SetItem::Lit(hi)) if lo <= hi => {
                            set.push(SetItem::Range(lo, hi))
                        }
                        _ => return Err(bad()),
                    }
                } else {
                    set.push(code1);
                }
            }
            Ok(Node::Set { negate, items: set })
        }

        fn parse_flags(&mut self, first: u8) -> R<Option<(u32, u32)>> {
            fn flag(c: u8) -> Option<u32> {
                Some(match c {
                    b'i' => F_IGNORECASE,
                    b'L' => F_LOCALE,
                    b'm' => F_MULTILINE,
                    b's' => F_DOTALL,
                    b'x' => F_VERBOSE,
                    b'a' => F_ASCII,
                    b't' => F_TEMPLATE,
                    b'u' => F_UNICODE,
                    _ => return None,
                })
            }
            let alpha = |t: Tok| matches!(t, Tok::Ch(c) if c.is_ascii_alphabetic() || c >= 0xAA);
            let mut add = 0u32;
            let mut del = 0u32;
            let mut ch = Tok::Ch(first);
            if first != b'-' {
                loop {
                    let Tok::Ch(c) = ch else {
                        return Err("missing -, : or )".into());
                    };
                    let Some(f) = flag(c) else {
                        return Err("unknown flag".into());
                    };
                    if c == b'u' {
                        return Err(
                            "bad inline flags: cannot use 'u' flag with a bytes pattern".into()
                        );
                    }
                    add |= f;
                    if f & TYPE_FLAGS != 0 && add & TYPE_FLAGS != f {
                        return Err(
                            "bad inline flags: flags 'a', 'u' and 'L' are incompatible".into()
                        );
                    }
                    ch = self
                        .t
                        .get()?
                        .ok_or_else(|| "missing -, : or )".to_string())?;
                    if matches!(ch, Tok::Ch(b')' | b'-' | b':')) {
                        break;
                    }
                    if !matches!(ch, Tok::Ch(c) if flag(c).is_some()) {
                        return Err(if alpha(ch) {
                            "unknown flag"
                        } else {
                            "missing -, : or )"
                        }
                        .into());
                    }
                }
            }
            if ch == Tok::Ch(b')') {
                self.state.flags |= add;
                return Ok(None);
            }
            if add & GLOBAL_FLAGS != 0 {
                return Err("bad inline flags: cannot turn on global flag".into());
            }
            if ch == Tok::Ch(b'-') {
                ch = self.t.get()?.ok_or_else(|| "missing flag".to_string())?;
                if !matches!(ch, Tok::Ch(c) if flag(c).is_some()) {
                    return Err(if alpha(ch) {
                        "unknown flag"
                    } else {
                        "missing flag"
                    }
                    .into());
                }
                loop {
                    let f = match ch {
                        Tok::Ch(c) => flag(c).unwrap_or(0),
                        Tok::Esc(_) => 0,
                    };
                    if f & TYPE_FLAGS != 0 {
                        return Err(
                            "bad inline flags: cannot turn off flags 'a', 'u' and 'L'".into()
                        );
                    }
                    del |= f;
                    ch = self.t.get()?.ok_or_else(|| "missing :".to_string())?;
                    if ch == Tok::Ch(b':') {
                        break;
                    }
                    if !matches!(ch, Tok::Ch(c) if flag(c).is_some()) {
                        return Err(if alpha(ch) {
                            "unknown flag"
                        } else {
                            "missing :"
                        }
                        .into());
                    }
                }
            }
            if del & GLOBAL_FLAGS != 0 {
                return Err("bad inline flags: cannot turn off global flag".into());
            }
            if add & del != 0 {
                return Err("bad inline flags: flag turned on and off".into());
            }
            Ok(Some((add, del)))
        }

        fn checkgroupname(name: &[u8]) -> R<()> {
            if is_identifier(name) {
                Ok(())
            } else {
                Err(format!("bad character in group name '{}'", show(name)))
            }
        }

        #[allow(clippy::too_many_lines)]
        fn parse(&mut self, verbose: bool, nested: usize, first: bool) -> R<Seq> {
            let mut verbose = verbose;
            let mut sp: Seq = Vec::new();
            while let Some(this) = self.t.next {
                if matches!(this, Tok::Ch(b'|' | b')')) {
                    break;
                }
                self.t.get()?;
                if verbose {
                    if matches!(this, Tok::Ch(c) if WHITESPACE.contains(&c)) {
                        continue;
                    }
                    if this == Tok::Ch(b'#') {
                        loop {
                            match self.t.get()? {
                                None | Some(Tok::Ch(b'\n')) => break,
                                _ => {}
                            }
                        }
                        continue;
                    }
                }
                let c = match this {
                    Tok::Esc(c) => {
                        let node = self.escape(c)?;
                        sp.push(node);
                        continue;
                    }
                    Tok::Ch(c) if !SPECIAL_CHARS.contains(&c) => {
                        sp.push(Node::Lit(c));
                        continue;
                    }
                    Tok::Ch(c) => c,
                };
                match c {
                    b'[' => {
                        let node = self.parse_class()?;
                        sp.push(node);
                    }
                    c if REPEAT_CHARS.contains(&c) => {
                        let here = self.t.tell();
                        let (min, max) = match c {
                            b'?' => (0, 1),
                            b'*' => (0, MAXREPEAT),
                            b'+' => (1, MAXREPEAT),
                            _ => {
                                if self.t.next == Some(Tok::Ch(b'}')) {
                                    sp.push(Node::Lit(b'{'));
                                    continue;
                                }
                                let lo = self.t.getwhile(usize::MAX, DIGITS)?;
                                let hi = if self.t.matches(b',')? {
                                    self.t.getwhile(usize::MAX, DIGITS)?
                                } else {
                                    lo.clone()
                                };
                                if !self.t.matches(b'}')? {
                                    sp.push(Node::Lit(b'{'));
                                    self.t.seek(here)?;
                                    continue;
                                }
                                let mut min = 0;
                                let mut max = MAXREPEAT;
                                if !lo.is_empty() {
                                    min = digits_value(&lo);
                                    if min >= MAXREPEAT {
                                        return Err("the repetition number is too large".into());
                                    }
                                }
                                if !hi.is_empty() {
                                    max = digits_value(&hi);
                                    if max >= MAXREPEAT {
                                        return Err("the repetition number is too large".into());
                                    }
                                    if max < min {
                                        return Err("min repeat greater than max repeat".into());
                                    }
                                }
                                (min, max)
                            }
                        };
                        let item = match sp.pop() {
                            None | Some(Node::At(_)) => return Err("nothing to repeat".into()),
                            Some(Node::Repeat { .. }) => return Err("multiple repeat".into()),
                            Some(Node::Group {
                                index: None,
                                add: 0,
                                del: 0,
                                body,
                            }) => body,
                            Some(node) => vec![node],
                        };
                        let kind = if self.t.matches(b'?')? {
                            RepeatKind::Lazy
                        } else if self.t.matches(b'+')? {
                            RepeatKind::Possessive
                        } else {
                            RepeatKind::Greedy
                        };
                        self.state.has_repeat = true;
                        sp.push(Node::Repeat {
                            min,
                            max,
                            kind,
                            item,
                        });
                    }
                    b'.' => sp.push(Node::Any),
                    b'(' => {
                        let mut capture = true;
                        let mut atomic = false;
                        let mut name = None;
                        let mut add = 0;
                        let mut del = 0;
                        if self.t.matches(b'?')? {
                            let ch = self
                                .t
                                .get()?
                                .ok_or_else(|| "unexpected end of pattern".to_string())?;
                            match ch {
                                Tok::Ch(b'P') => {
                                    if self.t.matches(b'<')? {
                                        let n = self.t.getuntil(b'>', "group name")?;
                                        Self::checkgroupname(&n)?;
                                        name = Some(n);
                                    } else if self.t.matches(b'=')? {
                                        let n = self.t.getuntil(b')', "group name")?;
                                        Self::checkgroupname(&n)?;
                                        let Some(&gid) = self.state.groupdict.get(&n) else {
                                            return Err(format!(
                                                "unknown group name '{}'",
                                                show(&n)
                                            ));
                                        };
                                        if !self.state.checkgroup(gid) {
                                            return Err("cannot refer to an open group".into());
                                        }
                                        self.state.checklookbehindgroup(gid)?;
                                        sp.push(Node::GroupRef(gid));
                                        continue;
                                    } else {
                                        let Some(next) = self.t.get()? else {
                                            return Err("unexpected end of pattern".into());
                                        };
                                        let mut s = b"?P".to_vec();
                                        next.push_to(&mut s);
                                        return Err(format!("unknown extension {}", show(&s)));
                                    }
                                }
                                Tok::Ch(b':') => capture = false,
                                Tok::Ch(b'#') => {
                                    loop {
                                        if self.t.next.is_none() {
                                            return Err("missing ), unterminated comment".into());
                                        }
                                        if self.t.get()? == Some(Tok::Ch(b')')) {
                                            break;
                                        }
                                    }
                                    continue;
                                }
                                Tok::Ch(k @ (b'=' | b'!' | b'<')) => {
                                    let mut kind = k;
                                    let mut behind = false;
                                    let mut saved_lookbehind = None;
                                    if k == b'<' {
                                        let Some(n) = self.t.get()? else {
                                            return Err("unexpected end of pattern".into());
                                        };
                                        match n {
                                            Tok::Ch(c @ (b'=' | b'!')) => kind = c,
                                            other => {
                                                let mut s = b"?<".to_vec();
                                                other.push_to(&mut s);
                                                return Err(format!(
                                                    "unknown extension {}",
                                                    show(&s)
                                                ));
                                            }
                                        }
                                        behind = true;
                                        saved_lookbehind = Some(self.state.lookbehindgroups);
                                        if self.state.lookbehindgroups.is_none() {
                                            self.state.lookbehindgroups = Some(self.state.groups());
                                        }
                                    }
                                    let body = self.parse_sub(verbose, nested + 1)?;
                                    if let Some(None) = saved_lookbehind {
                                        self.state.lookbehindgroups = None;
                                    }
                                    if !self.t.matches(b')')? {
                                        return Err("missing ), unterminated subpattern".into());
                                    }
                                    sp.push(Node::Assert {
                                        behind,
                                        negate: kind == b'!',
                                        body,
                                    });
                                    continue;
                                }
                                Tok::Ch(b'(') => {
                                    let condname = self.t.getuntil(b')', "group name")?;
                                    let condgroup = if is_identifier(&condname) {
                                        match self.state.groupdict.get(&condname) {
                                            Some(&g) => g,
                                            None => {
                                                return Err(format!(
                                                    "unknown group name '{}'",
                                                    show(&condname)
                                                ))
                                            }
                                        }
                                    } else {
                                        let g = match py_int(&condname) {
                                            Some(g) if g >= 0 => g as u128,
                                            _ => {
                                                return Err(format!(
                                                    "bad character in group name '{}'",
                                                    show(&condname)
                                                ))
                                            }
                                        };
                                        if g == 0 {
                                            return Err("bad group number".into());
                                        }
                                        if g >= MAXGROUPS {
                                            return Err(format!("invalid group reference {g}"));
                                        }
                                        self.state.grouprefpos.push(g as usize);
                                        g as usize
                                    };
                                    self.state.checklookbehindgroup(condgroup)?;
                                    let yes = self.parse(verbose, nested + 1, false)?;
                                    let no = if self.t.matches(b'|')? {
                                        let no = self.parse(verbose, nested + 1, false)?;
                                        if self.t.next == Some(Tok::Ch(b'|')) {
                                            return Err(
                                                "conditional backref with more than two branches"
                                                    .into(),
                                            );
                                        }
                                        Some(no)
                                    } else {
                                        None
                                    };
                                    if !self.t.matches(b')')? {
                                        return Err("missing ), unterminated subpattern".into());
                                    }
                                    sp.push(Node::GroupRefExists {
                                        group: condgroup,
                                        yes,
                                        no,
                                    });
                                    continue;
                                }
                                Tok::Ch(b'>') => {
                                    capture = false;
                                    atomic = true;
                                }
                                Tok::Ch(
                                    f @ (b'i' | b'L' | b'm' | b's' | b'x' | b'a' | b't' | b'u'
                                    | b'-'),
                                ) => {
                                    match self.parse_flags(f)? {
                                        None => {
                                            if !first || !sp.is_empty() {
                                                return Err("global flags not at the start of the expression".into());
                                            }
                                            verbose = self.state.flags & F_VERBOSE != 0;
                                            continue;
                                        }
                                        Some((a, d)) => {
                                            add = a;
                                            del = d;
                                            capture = false;
                                        }
                                    }
                                }
                                other => {
                                    let mut s = b"?".to_vec();
                                    other.push_to(&mut s);
                                    return Err(format!("unknown extension {}", show(&s)));
                                }
                            }
                        }
                        let group = if capture {
                            Some(self.state.opengroup(name)?)
                        } else {
                            None
                        };
                        let sub_verbose = (verbose || add & F_VERBOSE != 0) && del & F_VERBOSE == 0;
                        let body = self.parse_sub(sub_verbose, nested + 1)?;
                        if !self.t.matches(b')')? {
                            return Err("missing ), unterminated subpattern".into());
                        }
                        if let Some(g) = group {
                            let w = self.state.width(&body);
                            if let Some(slot) = self.state.groupwidths.get_mut(g) {
                                *slot = Some(w);
                            }
                        }
                        if atomic {
                            sp.push(Node::Atomic(body));
                        } else {
                            sp.push(Node::Group {
                                index: group,
                                add,
                                del,
                                body,
                            });
                        }
                    }
                    b'^' => sp.push(Node::At(At::Beginning)),
                    b'$' => sp.push(Node::At(At::End)),
                    _ => return Err(format!("unsupported special character {}", char::from(c))),
                }
            }
            Ok(sp)
        }
    }

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

    struct Emitter<'s> {
        state: &'s State,
        out: String,
        /// The longest haystack the pattern will search: a bounded repeat whose item
        /// consumes at least one byte behaves as unbounded past it.
        max_hay: u128,
    }

    fn byte_set_of(items: &[SetItem], negate: bool, ignorecase: bool) -> [bool; 256] {
        let mut set = [false; 256];
        let cat = |c: Category, b: u8| match c {
            Category::Digit => b.is_ascii_digit(),
            Category::NotDigit => !b.is_ascii_digit(),
            Category::Space => matches!(b, b' ' | b'\t'..=b'\r'),
            Category::NotSpace => !matches!(b, b' ' | b'\t'..=b'\r'),
            Category::Word => b.is_ascii_alphanumeric() || b == b'_',
            Category::NotWord => !(b.is_ascii_alphanumeric() || b == b'_'),
        };
        for item in items {
            match *item {
                SetItem::Lit(b) => set[usize::from(b)] = true,
                SetItem::Range(lo, hi) => {
                    for b in lo..=hi {
                        set[usize::from(b)] = true;
                    }
                }
                SetItem::Cat(c) => {
                    for b in 0..=255u8 {
                        if cat(c, b) {
                            set[usize::from(b)] = true;
                        }
                    }
                }
            }
        }
        if ignorecase {
            for b in 0..=255u8 {
                if set[usize::from(b)] && b.is_ascii_alphabetic() {
                    set[usize::from(b ^ 0x20)] = true;
                }
            }
        }
        if negate {
            for v in &mut set {
                *v = !*v;
            }
        }
        set
    }

    fn push_byte(out: &mut String, b: u8) {
        if b.is_ascii_alphanumeric() {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("\\x{{{b:02X}}}"));
        }
    }

    const NEVER: &str = "[^\\x{00}-\\x{FF}]";

    impl Emitter<'_> {
        fn set(&mut self, set: &[bool; 256]) {
            let mut ranges = Vec::new();
            let mut b = 0usize;
            while b < 256 {
                if set[b] {
                    let start = b;
                    while b + 1 < 256 && set[b + 1] {
                        b += 1;
                    }
                    ranges.push((start as u8, b as u8));
                }
                b += 1;
            }
            if ranges.is_empty() {
                self.out.push_str(NEVER);
                return;
            }
            self.out.push('[');
            for (lo, hi) in ranges {
                push_byte(&mut self.out, lo);
                if hi != lo {
                    self.out.push('-');
                    push_byte(&mut self.out, hi);
                }
            }
            self.out.push(']');
        }

        fn seq(&mut self, seq: &[Node], flags: u32) {
            for node in seq {
                self.node(node, flags);
            }
        }

        fn node(&mut self, node: &Node, flags: u32) {
            let ic = flags & F_IGNORECASE != 0;
            match node {
                Node::Lit(b) => {
                    if ic && b.is_ascii_alphabetic() {
                        let set = byte_set_of(&[SetItem::Lit(*b)], false, true);
                        self.set(&set);
                    } else {
                        push_byte(&mut self.out, *b);
                    }
                }
                Node::Set { negate, items } => {
                    let set = byte_set_of(items, *negate, ic);
                    self.set(&set);
                }
                Node::Any => {
                    let all = flags & F_DOTALL != 0;
                    let set = if all {
                        byte_set_of(&[SetItem::Range(0, 255)], false, false)
                    } else {
                        byte_set_of(&[SetItem::Lit(b'\n')], true, false)
                    };
                    self.set(&set);
                }
                Node::At(at) => self.out.push_str(match at {
                    At::Beginning if flags & F_MULTILINE != 0 => "(?m:^)",
                    At::Beginning | At::BeginningString => "\\A",
                    At::End => "(?m:$)",
                    At::EndString => "\\z",
                    At::Boundary => "\\b",
                    At::NonBoundary => "\\B",
                }),
                Node::Repeat {
                    min,
                    max,
                    kind,
                    item,
                } => self.repeat(*min, *max, *kind, item, flags),
                Node::Group {
                    index,
                    add,
                    del,
                    body,
                } => {
                    let mut f = flags;
                    if add & TYPE_FLAGS != 0 {
                        f &= !TYPE_FLAGS;
                    }
                    let f = (f | add) & !del;
                    self.out.push_str(if index.is_some() { "(" } else { "(?:" });
                    self.seq(body, f);
                    self.out.push(')');
                }
                Node::Atomic(body) => {
                    self.out.push_str("(?>");
                    self.seq(body, flags);
                    self.out.push(')');
                }
                Node::Assert {
                    behind,
                    negate,
                    body,
                } => {
                    self.out.push_str(match (behind, negate) {
                        (false, false) => "(?=",
                        (false, true) => "(?!",
                        (true, false) => "(?<=",
                        (true, true) => "(?<!",
                    });
                    self.seq(body, flags);
                    self.out.push(')');
                }
                Node::GroupRef(g) => {
                    let open = if ic { "(?i:" } else { "(?:" };
                    self.out.push_str(&format!("{open}\\{g})"));
                }
                Node::GroupRefExists { group, yes, no } => {
                    self.out.push_str(&format!("(?({group})"));
                    self.seq(yes, flags);
                    self.out.push('|');
                    if let Some(no) = no {
                        self.seq(no, flags);
                    }
                    self.out.push(')');
                }
                Node::Branch(alts) => {
                    self.out.push_str("(?:");
                    for (i, alt) in alts.iter().enumerate() {
                        if i > 0 {
                            self.out.push('|');
                        }
                        self.seq(alt, flags);
                    }
                    self.out.push(')');
                }
            }
        }

        fn repeat(&mut self, min: u128, max: u128, kind: RepeatKind, item: &[Node], flags: u32) {
            let (lo_w, hi_w) = self.state.width(item);
            if kind == RepeatKind::Possessive {
                self.out.push_str("(?>");
            }
            if hi_w == 0 {
                // The engine refuses to repeat what matches nothing (look-arounds,
                // anchors, empty groups); such a repeat is the item once, or optional.
                self.out.push_str("(?:");
                if min == 0 && kind == RepeatKind::Lazy {
                    self.out.push('|');
                }
                self.out.push_str("(?:");
                self.seq(item, flags);
                self.out.push(')');
                if min == 0 && kind != RepeatKind::Lazy {
                    self.out.push('|');
                }
                self.out.push(')');
            } else if lo_w >= 1 && min.saturating_mul(lo_w) > self.max_hay {
                self.out.push_str(NEVER);
            } else {
                let unbounded = max == MAXREPEAT || (lo_w >= 1 && max > self.max_hay);
                self.out.push_str("(?:");
                self.seq(item, flags);
                self.out.push(')');
                match (min, unbounded) {
                    (0, true) => self.out.push('*'),
                    (1, true) => self.out.push('+'),
                    (m, true) => self.out.push_str(&format!("{{{m},}}")),
                    (m, false) if m == max => self.out.push_str(&format!("{{{m}}}")),
                    (m, false) => self.out.push_str(&format!("{{{m},{max}}}")),
                }
                if kind == RepeatKind::Lazy {
                    self.out.push('?');
                }
            }
            if kind == RepeatKind::Possessive {
                self.out.push(')');
            }
        }
    }

    fn check_lookbehinds(state: &State, seq: &[Node]) -> R<()> {
        for node in seq {
            match node {
                Node::Assert { behind, body, .. } => {
                    if *behind {
                        let (lo, hi) = state.width(body);
                        if lo != hi {
                            return Err("look-behind requires fixed-width pattern".into());
                        }
                    }
                    check_lookbehinds(state, body)?;
                }
                Node::Repeat { item: s, .. } | Node::Group { body: s, .. } | Node::Atomic(s) => {
                    check_lookbehinds(state, s)?
                }
                Node::GroupRefExists { yes, no, .. } => {
                    check_lookbehinds(state, yes)?;
                    if let Some(no) = no {
                        check_lookbehinds(state, no)?;
                    }
                }
                Node::Branch(alts) => {
                    for alt in alts {
                        check_lookbehinds(state, alt)?;
                    }
                }
                _ => {}
            }
        }
        Ok(())
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

    enum Piece {
        Literal(Vec<u8>),
        Group(usize),
    }

    /// `re._parser.parse_template` for a bytes template.
    fn parse_template(pattern: &Pattern, template: &[u8]) -> R<Vec<Piece>> {
        let mut s = Tokenizer::new(template)?;
        let mut pieces = Vec::new();
        let mut literal = Vec::new();
        let addgroup = |index: u128, literal: &mut Vec<u8>, pieces: &mut Vec<Piece>| {
            if index > pattern.groups as u128 {
                return Err(format!("invalid group reference {index}"));
            }
            if !literal.is_empty() {
                pieces.push(Piece::Literal(std::mem::take(literal)));
            }
            pieces.push(Piece::Group(index as usize));
            Ok(())
        };
        while let Some(this) = s.get()? {
            let c = match this {
                Tok::Ch(c) => {
                    literal.push(c);
                    continue;
                }
                Tok::Esc(c) => c,
            };
            match c {
                b'g' => {
                    if !s.matches(b'<')? {
                        return Err("missing <".into());
                    }
                    let name = s.getuntil(b'>', "group name")?;
                    let index = if is_identifier(&name) {
                        match pattern.groupindex.get(&name) {
                            Some(&i) => i as u128,
                            None => return Err(format!("unknown group name '{}'", show(&name))),
                        }
                    } else {
                        let i = match py_int(&name) {
                            Some(i) if i >= 0 => i as u128,
                            _ => {
                                return Err(format!(
                                    "bad character in group name '{}'",
                                    show(&name)
                                ))
                            }
                        };
                        if i >= MAXGROUPS {
                            return Err(format!("invalid group reference {i}"));
                        }
                        i
                    };
                    addgroup(index, &mut literal, &mut pieces)?;
                }
                b'0' => {
                    let mut d = vec![b'0'];
                    if s.next_is(OCTDIGITS) {
                        if let Some(Tok::Ch(x)) = s.get()? {
                            d.push(x);
                        }
                        if s.next_is(OCTDIGITS) {
                            if let Some(Tok::Ch(x)) = s.get()? {
                                d.push(x);
                            }
                        }
                    }
                    literal.push((octal_value(&d) & 0xff) as u8);
                }
                b'1'..=b'9' => {
                    let mut d = vec![c];
                    let mut isoctal = false;
                    if s.next_is(DIGITS) {
                        if let Some(Tok::Ch(x)) = s.get()? {
                            d.push(x);
                        }
                        if OCTDIGITS.contains(&c)
                            && OCTDIGITS.contains(&d[1])
                            && s.next_is(OCTDIGITS)
                        {
                            if let Some(Tok::Ch(x)) = s.get()? {
                                d.push(x);
                            }
                            isoctal = true;
                            let v = octal_value(&d);
                            if v > 0o377 {
                                return Err(format!(
                                    "octal escape value \\{} outside of range 0-0o377",
                                    show(&d)
                                ));
                            }
                            literal.push(v as u8);
                        }
                    }
                    if !isoctal {
                        addgroup(digits_value(&d), &mut literal, &mut pieces)?;
                    }
                }
                b'a' => literal.push(0x07),
                b'b' => literal.push(0x08),
                b'f' => literal.push(0x0c),
                b'n' => literal.push(b'\n'),
                b'r' => literal.push(b'\r'),
                b't' => literal.push(b'\t'),
                b'v' => literal.push(0x0b),
                b'\\' => literal.push(b'\\'),
                c if c.is_ascii_alphabetic() => {
                    return Err(format!("bad escape \\{}", char::from(c)))
                }
                c => literal.extend_from_slice(&[b'\\', c]),
            }
        }
        if !literal.is_empty() {
            pieces.push(Piece::Literal(literal));
        }
        Ok(pieces)
    }

    /// `match.expand(template)`: groups that did not take part expand to nothing.
    pub(crate) fn expand(pattern: &Pattern, m: &Match, hay: &[u8], template: &[u8]) -> R<Vec<u8>> {
        let mut out = Vec::new();
        for piece in parse_template(pattern, template)? {
            match piece {
                Piece::Literal(l) => out.extend_from_slice(&l),
                Piece::Group(g) => {
                    if let Some(Some((start, end))) = m.spans.get(g) {
                        out.extend_from_slice(&hay[*start..*end]);
                    }
                }
            }
        }
        Ok(out)
    }
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
