//! Writing a parsed tree out as a `fancy_regex` pattern, with every byte set spelled out.

use super::parser::State;
use super::tree::{At, Category, Node, RepeatKind, SetItem};
use super::{F_DOTALL, F_IGNORECASE, F_MULTILINE, MAXREPEAT, TYPE_FLAGS};

pub(super) struct Emitter<'s> {
    pub(super) state: &'s State,
    pub(super) out: String,
    /// The longest haystack the pattern will search: a bounded repeat whose item
    /// consumes at least one byte behaves as unbounded past it.
    pub(super) max_hay: u128,
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

    pub(super) fn seq(&mut self, seq: &[Node], flags: u32) {
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
