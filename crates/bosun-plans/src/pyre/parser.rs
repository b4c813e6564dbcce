//! Parsing a bytes pattern into a [`Seq`] with CPython's grammar and error messages,
//! and the checks on the whole tree that come after it.

use std::collections::HashMap;

use super::tokenizer::{
    digits_value, hex_value, is_identifier, octal_value, py_int, show, Tok, Tokenizer, DIGITS,
    HEXDIGITS, OCTDIGITS, WHITESPACE,
};
use super::tree::{At, Category, Node, RepeatKind, Seq, SetItem};
use super::{
    F_ASCII, F_DOTALL, F_IGNORECASE, F_LOCALE, F_MULTILINE, F_TEMPLATE, F_UNICODE, F_VERBOSE,
    GLOBAL_FLAGS, MAXGROUPS, MAXREPEAT, MAXWIDTH, R, TYPE_FLAGS,
};

const SPECIAL_CHARS: &[u8] = b".\\[{()*+?^$|";
const REPEAT_CHARS: &[u8] = b"*+?{";

pub(super) struct State {
    pub(super) flags: u32,
    pub(super) groupdict: HashMap<Vec<u8>, usize>,
    pub(super) groupwidths: Vec<Option<(u128, u128)>>,
    pub(super) lookbehindgroups: Option<usize>,
    pub(super) grouprefpos: Vec<usize>,
    pub(super) has_repeat: bool,
}

impl State {
    pub(super) fn groups(&self) -> usize {
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
    pub(super) fn width(&self, seq: &[Node]) -> (u128, u128) {
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

pub(super) struct Parser<'a> {
    pub(super) t: Tokenizer<'a>,
    pub(super) state: State,
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
            c if c.is_ascii_alphabetic() => return Err(format!("bad escape \\{}", char::from(c))),
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
            c if c.is_ascii_alphabetic() => return Err(format!("bad escape \\{}", char::from(c))),
            c => SetItem::Lit(c),
        })
    }

    pub(super) fn parse_sub(&mut self, verbose: bool, nested: usize) -> R<Seq> {
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
                    return Err("bad inline flags: cannot use 'u' flag with a bytes pattern".into());
                }
                add |= f;
                if f & TYPE_FLAGS != 0 && add & TYPE_FLAGS != f {
                    return Err("bad inline flags: flags 'a', 'u' and 'L' are incompatible".into());
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
                    return Err("bad inline flags: cannot turn off flags 'a', 'u' and 'L'".into());
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
                                        return Err(format!("unknown group name '{}'", show(&n)));
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
                                            return Err(format!("unknown extension {}", show(&s)));
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
                                f @ (b'i' | b'L' | b'm' | b's' | b'x' | b'a' | b't' | b'u' | b'-'),
                            ) => match self.parse_flags(f)? {
                                None => {
                                    if !first || !sp.is_empty() {
                                        return Err(
                                            "global flags not at the start of the expression"
                                                .into(),
                                        );
                                    }
                                    verbose = self.state.flags & F_VERBOSE != 0;
                                    continue;
                                }
                                Some((a, d)) => {
                                    add = a;
                                    del = d;
                                    capture = false;
                                }
                            },
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

pub(super) fn check_lookbehinds(state: &State, seq: &[Node]) -> R<()> {
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
