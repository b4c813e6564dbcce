//! File modes as plans write them — octal (`0644`, `755`) or symbolic with an explicit
//! who (`u+x,go-w`, `a=rX`) — and what they make of a current mode, so a step can tell
//! whether `chmod` would change anything and a dry run can predict the result.

use std::fmt;

/// A validated mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// An absolute mode (permission and special bits).
    Octal(u32),
    /// Symbolic clauses, applied to the current mode.
    Symbolic(Vec<Clause>),
}

/// One symbolic clause: who, then operations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clause {
    /// Which of user, group and others the clause is about.
    who: Who,
    /// Each operator (`+`, `-`, `=`) with the permissions after it.
    ops: Vec<(char, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Who {
    u: bool,
    g: bool,
    o: bool,
}

/// The text as written, kept for `chmod`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModeSpec {
    pub text: String,
    pub mode: Mode,
}

impl fmt::Display for ModeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Parses a mode; the error says what is wrong.
pub fn parse(text: &str) -> Result<ModeSpec, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("mode is empty".into());
    }
    if t.chars().all(|c| c.is_ascii_digit()) {
        if t.len() > 4 || t.len() < 3 || t.chars().any(|c| c > '7') {
            return Err(format!(
                "mode {text:?}: an octal mode has 3 or 4 digits 0-7 (e.g. 0644)"
            ));
        }
        let value = u32::from_str_radix(t, 8).map_err(|e| format!("mode {text:?}: {e}"))?;
        return Ok(ModeSpec {
            text: t.to_string(),
            mode: Mode::Octal(value),
        });
    }
    let mut clauses = Vec::new();
    for clause in t.split(',') {
        clauses.push(parse_clause(clause).map_err(|e| format!("mode {text:?}: {e}"))?);
    }
    Ok(ModeSpec {
        text: t.to_string(),
        mode: Mode::Symbolic(clauses),
    })
}

fn parse_clause(clause: &str) -> Result<Clause, String> {
    let mut who = Who {
        u: false,
        g: false,
        o: false,
    };
    let mut chars = clause.chars().peekable();
    let mut any_who = false;
    while let Some(&c) = chars.peek() {
        match c {
            'u' => who.u = true,
            'g' => who.g = true,
            'o' => who.o = true,
            'a' => {
                who.u = true;
                who.g = true;
                who.o = true;
            }
            _ => break,
        }
        any_who = true;
        chars.next();
    }
    if !any_who {
        return Err(format!(
            "{clause:?} names no who (u, g, o or a); without one the result depends on \
             the host's umask"
        ));
    }
    let mut ops: Vec<(char, String)> = Vec::new();
    for c in chars {
        match c {
            '+' | '-' | '=' => ops.push((c, String::new())),
            'r' | 'w' | 'x' | 'X' | 's' | 't' => match ops.last_mut() {
                Some((_, perms)) => perms.push(c),
                None => return Err(format!("{clause:?}: expected +, - or = before {c:?}")),
            },
            _ => return Err(format!("{clause:?}: unexpected {c:?}")),
        }
    }
    if ops.is_empty() {
        return Err(format!("{clause:?}: expected +, - or ="));
    }
    Ok(Clause { who, ops })
}

impl Mode {
    /// The mode after applying this to `current` (`is_dir` matters for `X`).
    pub fn apply(&self, current: u32, is_dir: bool) -> u32 {
        match self {
            Mode::Octal(m) => *m,
            Mode::Symbolic(clauses) => {
                let mut mode = current & 0o7777;
                for clause in clauses {
                    for (op, perms) in &clause.ops {
                        let bits = clause.bits(perms, mode, is_dir);
                        match op {
                            '+' => mode |= bits,
                            '-' => mode &= !bits,
                            _ => {
                                mode &= !clause.who_mask();
                                mode |= bits;
                            }
                        }
                    }
                }
                mode
            }
        }
    }

    /// The mode a new file or directory gets: octal modes are exact; symbolic ones
    /// depend on the host's default (`None`).
    pub fn absolute(&self) -> Option<u32> {
        match self {
            Mode::Octal(m) => Some(*m),
            Mode::Symbolic(_) => None,
        }
    }
}

impl Clause {
    /// Every bit `=` resets for this who.
    fn who_mask(&self) -> u32 {
        let mut m = 0;
        if self.who.u {
            m |= 0o4700;
        }
        if self.who.g {
            m |= 0o2070;
        }
        if self.who.o {
            m |= 0o1007;
        }
        m
    }

    fn bits(&self, perms: &str, current: u32, is_dir: bool) -> u32 {
        let mut rwx = 0;
        let mut special = 0;
        for p in perms.chars() {
            match p {
                'r' => rwx |= 4,
                'w' => rwx |= 2,
                'x' => rwx |= 1,
                'X' if is_dir || current & 0o111 != 0 => rwx |= 1,
                's' => {
                    if self.who.u {
                        special |= 0o4000;
                    }
                    if self.who.g {
                        special |= 0o2000;
                    }
                }
                't' if self.who.o => special |= 0o1000,
                _ => {}
            }
        }
        let mut bits = special;
        if self.who.u {
            bits |= rwx << 6;
        }
        if self.who.g {
            bits |= rwx << 3;
        }
        if self.who.o {
            bits |= rwx;
        }
        bits
    }
}

/// Formats a mode like `stat` (`644`, `2755`) with a leading zero: `0644`.
pub fn show(mode: u32) -> String {
    format!("{:04o}", mode & 0o7777)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(text: &str) -> Mode {
        parse(text).unwrap().mode
    }

    #[test]
    fn octal_modes() {
        assert_eq!(m("0644"), Mode::Octal(0o644));
        assert_eq!(m("755"), Mode::Octal(0o755));
        assert_eq!(m("2775"), Mode::Octal(0o2775));
        assert!(parse("0888").is_err());
        assert!(parse("12").is_err());
        assert!(parse("01234").is_err());
        assert!(parse("").is_err());
    }

    #[test]
    fn symbolic_modes_apply_to_the_current_mode() {
        assert_eq!(m("u+x").apply(0o644, false), 0o744);
        assert_eq!(m("go-w").apply(0o666, false), 0o644);
        assert_eq!(m("a=r").apply(0o755, false), 0o444);
        assert_eq!(m("u=rw,go=r").apply(0o777, false), 0o644);
        assert_eq!(m("a+X").apply(0o644, false), 0o644);
        assert_eq!(m("a+X").apply(0o644, true), 0o755);
        assert_eq!(m("a+X").apply(0o744, false), 0o755);
        assert_eq!(m("g+s").apply(0o755, true), 0o2755);
        assert_eq!(m("o+t").apply(0o777, true), 0o1777);
        assert_eq!(m("u+rw-x").apply(0o100, false), 0o600);
    }

    #[test]
    fn symbolic_modes_need_a_who_and_an_operator() {
        assert!(parse("+x").unwrap_err().contains("umask"));
        assert!(parse("u").is_err());
        assert!(parse("u+q").is_err());
        assert!(parse("urw").is_err());
    }
}
