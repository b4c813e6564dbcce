//! Reading a pattern or template a token at a time, and the names and numbers its
//! tokens spell.

use super::R;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tok {
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
    pub(super) fn push_to(self, out: &mut Vec<u8>) {
        match self {
            Tok::Ch(c) => out.push(c),
            Tok::Esc(c) => out.extend_from_slice(&[b'\\', c]),
        }
    }
}

/// `re._parser.Tokenizer` over bytes (Python decodes them as latin-1: one char a byte).
pub(super) struct Tokenizer<'a> {
    s: &'a [u8],
    index: usize,
    pub(super) next: Option<Tok>,
}

impl<'a> Tokenizer<'a> {
    pub(super) fn new(s: &'a [u8]) -> R<Self> {
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
    pub(super) fn matches(&mut self, c: u8) -> R<bool> {
        if self.next == Some(Tok::Ch(c)) {
            self.advance()?;
            Ok(true)
        } else {
            Ok(false)
        }
    }
    pub(super) fn get(&mut self) -> R<Option<Tok>> {
        let this = self.next;
        self.advance()?;
        Ok(this)
    }
    pub(super) fn next_is(&self, set: &[u8]) -> bool {
        matches!(self.next, Some(Tok::Ch(c)) if set.contains(&c))
    }
    pub(super) fn getwhile(&mut self, n: usize, set: &[u8]) -> R<Vec<u8>> {
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
    pub(super) fn getuntil(&mut self, terminator: u8, name: &str) -> R<Vec<u8>> {
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
    pub(super) fn tell(&self) -> usize {
        self.index - self.next.map_or(0, Tok::len)
    }
    pub(super) fn seek(&mut self, index: usize) -> R<()> {
        self.index = index;
        self.advance()
    }
}

pub(super) const DIGITS: &[u8] = b"0123456789";
pub(super) const OCTDIGITS: &[u8] = b"01234567";
pub(super) const HEXDIGITS: &[u8] = b"0123456789abcdefABCDEF";
pub(super) const WHITESPACE: &[u8] = b" \t\n\r\x0b\x0c";

/// Python's `str.isidentifier()` on a latin-1 name.
pub(super) fn is_identifier(name: &[u8]) -> bool {
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
pub(super) fn py_int(name: &[u8]) -> Option<i128> {
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

pub(super) fn digits_value(d: &[u8]) -> u128 {
    d.iter().fold(0u128, |acc, &b| {
        acc.saturating_mul(10).saturating_add(u128::from(b - b'0'))
    })
}

pub(super) fn octal_value(d: &[u8]) -> u32 {
    d.iter().fold(0u32, |acc, &b| acc * 8 + u32::from(b - b'0'))
}

pub(super) fn hex_value(d: &[u8]) -> u8 {
    d.iter().fold(0u8, |acc, &b| {
        let v = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => b - b'A' + 10,
        };
        acc.wrapping_mul(16).wrapping_add(v)
    })
}

pub(super) fn show(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| char::from(b)).collect()
}
