//! Expanding a `backrefs` template with a match's groups, like Python's `match.expand`.

use super::tokenizer::{
    digits_value, is_identifier, octal_value, py_int, show, Tok, Tokenizer, DIGITS, OCTDIGITS,
};
use super::{Match, Pattern, MAXGROUPS, R};

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
                        _ => return Err(format!("bad character in group name '{}'", show(&name))),
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
                    if OCTDIGITS.contains(&c) && OCTDIGITS.contains(&d[1]) && s.next_is(OCTDIGITS) {
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
            c if c.is_ascii_alphabetic() => return Err(format!("bad escape \\{}", char::from(c))),
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
