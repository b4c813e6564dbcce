//! `when:` conditions: a small expression language over the template namespaces —
//! comparisons (`==`, `!=`, `<`, `<=`, `>`, `>=`), `and`/`or`/`not`, `in`/`not in`,
//! parentheses, string/number/bool literals and dotted references (`vars.x`,
//! `host.labels`, `host.facts.os_family`). A malformed condition fails open: the step runs and a warning is
//! recorded.
//!
//! Grammar (loosest first; comparisons do not chain):
//!
//! ```text
//! expr    := and ("or" and)*
//! and     := not ("and" not)*
//! not     := "not" not | cmp
//! cmp     := primary (op primary)?      op: == != < <= > >= in "not in"
//! primary := literal | reference | "(" expr ")"
//! literal := "str" | 'str' | -?digits[.digits][e±digits] | true | false
//! reference := (vars|env|inputs|host) ("." ident)*
//! ```
//!
//! Semantics: numbers compare numerically and strings lexically; a comparison of
//! mixed kinds (or with an unresolved reference) is false, and `!=` is `not ==`.
//! `a in b`: an element of a list, a substring of a string, a key of a map. A bare
//! reference is truthy when it is a non-empty string, list or map, a non-zero number or
//! `true`; an unresolved reference is falsy. The tokenizer and parser are hand-written
//! (no dependencies) and never panic; nesting is bounded.

use std::cmp::Ordering;
use std::fmt;

use crate::model::Value;
use crate::template::Scope;

/// What a condition decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Run,
    Skip,
    /// The condition could not be parsed or evaluated: the step runs (fail open) and
    /// this warning is recorded.
    RunMalformed(String),
}

/// The namespaces a reference may start with.
pub const NAMESPACES: [&str; 4] = ["vars", "env", "inputs", "host"];

/// How deep parentheses and `not` may nest (the parser is recursive).
const MAX_DEPTH: usize = 64;

/// A parsed condition.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Lit(Lit),
    /// A dotted reference: namespace first (`["vars", "x"]`).
    Ref(Vec<String>),
    Not(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Cmp(CmpOp, Box<Expr>, Box<Expr>),
}

/// A literal value.
#[derive(Debug, Clone, PartialEq)]
pub enum Lit {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

/// A binary comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    In,
    NotIn,
}

impl CmpOp {
    fn as_str(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
            CmpOp::In => "in",
            CmpOp::NotIn => "not in",
        }
    }
}

/// A syntax error: what is wrong, and where (1-based character column).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("column {column}: {message}")]
pub struct ConditionError {
    pub column: usize,
    pub message: String,
}

/// Checks a condition's syntax (for lint and upload): the error says what is wrong.
pub fn check(expr: &str) -> Result<(), String> {
    parse(expr).map(|_| ()).map_err(|e| e.to_string())
}

/// Evaluates a condition in `scope`.
pub fn decide(expr: &str, scope: &Scope) -> Decision {
    match parse(expr) {
        Ok(ast) => {
            if truthy(&eval(&ast, scope)) {
                Decision::Run
            } else {
                Decision::Skip
            }
        }
        Err(e) => Decision::RunMalformed(format!("malformed condition {expr:?}: {e}")),
    }
}

/// Parses a condition.
pub fn parse(expr: &str) -> Result<Expr, ConditionError> {
    let tokens = tokenize(expr)?;
    let mut p = Parser {
        tokens,
        pos: 0,
        depth: 0,
        end_column: expr.chars().count() + 1,
    };
    if p.tokens.is_empty() {
        return Err(ConditionError {
            column: 1,
            message: "empty condition".into(),
        });
    }
    let e = p.expr()?;
    match p.peek() {
        None => Ok(e),
        Some(t) => Err(p.error_at(t.column, format!("unexpected {}", t.kind.describe()))),
    }
}

/// The references a condition makes, dotted (`vars.x`, `host.labels`), in order, once.
pub fn references(expr: &Expr) -> Vec<String> {
    fn walk(e: &Expr, out: &mut Vec<String>) {
        match e {
            Expr::Lit(_) => {}
            Expr::Ref(path) => {
                let s = path.join(".");
                if !out.contains(&s) {
                    out.push(s);
                }
            }
            Expr::Not(a) => walk(a, out),
            Expr::And(a, b) | Expr::Or(a, b) | Expr::Cmp(_, a, b) => {
                walk(a, out);
                walk(b, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(expr, &mut out);
    out
}

// ---------------------------------------------------------------------------------
// Tokens

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Str(String),
    Int(i64),
    Float(f64),
    Ident(String),
    Dot,
    LParen,
    RParen,
    Op(CmpOp),
    And,
    Or,
    Not,
    In,
    True,
    False,
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Str(s) => format!("string {s:?}"),
            Tok::Int(i) => format!("number {i}"),
            Tok::Float(f) => format!("number {f:?}"),
            Tok::Ident(s) => format!("name `{s}`"),
            Tok::Dot => "`.`".into(),
            Tok::LParen => "`(`".into(),
            Tok::RParen => "`)`".into(),
            Tok::Op(op) => format!("`{}`", op.as_str()),
            Tok::And => "`and`".into(),
            Tok::Or => "`or`".into(),
            Tok::Not => "`not`".into(),
            Tok::In => "`in`".into(),
            Tok::True => "`true`".into(),
            Tok::False => "`false`".into(),
        }
    }
}

#[derive(Debug, Clone)]
struct Token {
    kind: Tok,
    /// 1-based character column.
    column: usize,
}

fn tokenize(src: &str) -> Result<Vec<Token>, ConditionError> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let err = |i: usize, message: String| ConditionError {
        column: i + 1,
        message,
    };
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        let push = |out: &mut Vec<Token>, kind: Tok| {
            out.push(Token {
                kind,
                column: start + 1,
            })
        };
        match c {
            c if c.is_whitespace() => i += 1,
            '(' => {
                push(&mut out, Tok::LParen);
                i += 1;
            }
            ')' => {
                push(&mut out, Tok::RParen);
                i += 1;
            }
            '.' if !chars.get(i + 1).is_some_and(char::is_ascii_digit) => {
                push(&mut out, Tok::Dot);
                i += 1;
            }
            '=' | '!' | '<' | '>' => {
                let next_eq = chars.get(i + 1) == Some(&'=');
                let op = match (c, next_eq) {
                    ('=', true) => CmpOp::Eq,
                    ('!', true) => CmpOp::Ne,
                    ('<', true) => CmpOp::Le,
                    ('>', true) => CmpOp::Ge,
                    ('<', false) => CmpOp::Lt,
                    ('>', false) => CmpOp::Gt,
                    ('=', false) => {
                        return Err(err(i, "`=` is not an operator; compare with `==`".into()))
                    }
                    _ => return Err(err(i, "`!` is not an operator; use `not` or `!=`".into())),
                };
                push(&mut out, Tok::Op(op));
                i += if next_eq { 2 } else { 1 };
            }
            '"' | '\'' => {
                let quote = c;
                let mut s = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err(err(start, "unterminated string".into())),
                        Some(&ch) if ch == quote => {
                            i += 1;
                            break;
                        }
                        Some('\\') => {
                            match chars.get(i + 1) {
                                None => return Err(err(start, "unterminated string".into())),
                                Some('n') => s.push('\n'),
                                Some('t') => s.push('\t'),
                                Some('r') => s.push('\r'),
                                Some(&e @ ('\\' | '"' | '\'')) => s.push(e),
                                // Unknown escapes stay as written.
                                Some(&e) => {
                                    s.push('\\');
                                    s.push(e);
                                }
                            }
                            i += 2;
                        }
                        Some(&ch) => {
                            s.push(ch);
                            i += 1;
                        }
                    }
                }
                push(&mut out, Tok::Str(s));
            }
            c if c.is_ascii_digit()
                || (c == '-' || c == '.') && chars.get(i + 1).is_some_and(char::is_ascii_digit) =>
            {
                let (tok, next) = number(&chars, i).map_err(|m| err(start, m))?;
                push(&mut out, tok);
                i = next;
            }
            c if c.is_alphabetic() || c == '_' => {
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let kind = match word.as_str() {
                    "and" => Tok::And,
                    "or" => Tok::Or,
                    "not" => Tok::Not,
                    "in" => Tok::In,
                    "true" | "True" => Tok::True,
                    "false" | "False" => Tok::False,
                    _ => Tok::Ident(word),
                };
                push(&mut out, kind);
            }
            '&' | '|' => {
                let word = if c == '&' { "and" } else { "or" };
                return Err(err(i, format!("`{c}` is not an operator; use `{word}`")));
            }
            other => return Err(err(i, format!("unexpected character {other:?}"))),
        }
    }
    Ok(out)
}

/// Reads a number literal at `i`: `-?digits[.digits][e[+-]digits]` (or `.digits`).
fn number(chars: &[char], mut i: usize) -> Result<(Tok, usize), String> {
    let start = i;
    if chars[i] == '-' {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let s = *i;
        while *i < chars.len() && chars[*i].is_ascii_digit() {
            *i += 1;
        }
        *i > s
    };
    let mut float = false;
    digits(&mut i);
    if chars.get(i) == Some(&'.') && chars.get(i + 1).is_some_and(char::is_ascii_digit) {
        float = true;
        i += 1;
        digits(&mut i);
    }
    if matches!(chars.get(i), Some('e' | 'E')) {
        let mut j = i + 1;
        if matches!(chars.get(j), Some('+' | '-')) {
            j += 1;
        }
        if digits(&mut j) {
            float = true;
            i = j;
        }
    }
    if chars
        .get(i)
        .is_some_and(|c| c.is_alphanumeric() || *c == '_')
    {
        return Err("a number must not run into a name".into());
    }
    let text: String = chars[start..i].iter().collect();
    if !float {
        if let Ok(n) = text.parse::<i64>() {
            return Ok((Tok::Int(n), i));
        }
    }
    match text.parse::<f64>() {
        Ok(f) if f.is_finite() => Ok((Tok::Float(f), i)),
        _ => Err(format!("number {text} is out of range")),
    }
}

// ---------------------------------------------------------------------------------
// Parser

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    depth: usize,
    end_column: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn peek_kind(&self) -> Option<&Tok> {
        self.peek().map(|t| &t.kind)
    }

    fn error_at(&self, column: usize, message: String) -> ConditionError {
        ConditionError { column, message }
    }

    fn here(&self) -> usize {
        self.peek().map_or(self.end_column, |t| t.column)
    }

    fn enter(&mut self) -> Result<(), ConditionError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error_at(self.here(), format!("nested more than {MAX_DEPTH} deep")));
        }
        Ok(())
    }

    fn expr(&mut self) -> Result<Expr, ConditionError> {
        let mut left = self.and()?;
        while self.peek_kind() == Some(&Tok::Or) {
            self.pos += 1;
            let right = self.and()?;
            left = Expr::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Expr, ConditionError> {
        let mut left = self.not()?;
        while self.peek_kind() == Some(&Tok::And) {
            self.pos += 1;
            let right = self.not()?;
            left = Expr::And(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn not(&mut self) -> Result<Expr, ConditionError> {
        if self.peek_kind() == Some(&Tok::Not) {
            self.pos += 1;
            self.enter()?;
            let inner = self.not()?;
            self.depth -= 1;
            return Ok(Expr::Not(Box::new(inner)));
        }
        self.cmp()
    }

    fn cmp_op(&mut self) -> Option<CmpOp> {
        let op = match self.peek_kind()? {
            Tok::Op(op) => *op,
            Tok::In => CmpOp::In,
            Tok::Not if self.tokens.get(self.pos + 1).map(|t| &t.kind) == Some(&Tok::In) => {
                self.pos += 1;
                CmpOp::NotIn
            }
            _ => return None,
        };
        self.pos += 1;
        Some(op)
    }

    fn cmp(&mut self) -> Result<Expr, ConditionError> {
        let left = self.primary()?;
        let Some(op) = self.cmp_op() else {
            return Ok(left);
        };
        let right = self.primary()?;
        if let Some(t) = self.peek() {
            if matches!(t.kind, Tok::Op(_) | Tok::In)
                || (t.kind == Tok::Not
                    && self.tokens.get(self.pos + 1).map(|t| &t.kind) == Some(&Tok::In))
            {
                return Err(self.error_at(
                    t.column,
                    "comparisons do not chain; join them with `and`".into(),
                ));
            }
        }
        Ok(Expr::Cmp(op, Box::new(left), Box::new(right)))
    }

    fn primary(&mut self) -> Result<Expr, ConditionError> {
        let Some(tok) = self.peek().cloned() else {
            return Err(self.error_at(self.end_column, "unexpected end of condition".into()));
        };
        self.pos += 1;
        match tok.kind {
            Tok::Str(s) => Ok(Expr::Lit(Lit::Str(s))),
            Tok::Int(n) => Ok(Expr::Lit(Lit::Int(n))),
            Tok::Float(f) => Ok(Expr::Lit(Lit::Float(f))),
            Tok::True => Ok(Expr::Lit(Lit::Bool(true))),
            Tok::False => Ok(Expr::Lit(Lit::Bool(false))),
            Tok::LParen => {
                self.enter()?;
                let inner = self.expr()?;
                self.depth -= 1;
                match self.peek() {
                    Some(Token {
                        kind: Tok::RParen, ..
                    }) => {
                        self.pos += 1;
                        Ok(inner)
                    }
                    Some(t) => Err(self.error_at(
                        t.column,
                        format!("expected `)`, found {}", t.kind.describe()),
                    )),
                    None => Err(self.error_at(
                        self.end_column,
                        format!("unclosed `(` opened at column {}", tok.column),
                    )),
                }
            }
            Tok::Ident(name) => {
                if !NAMESPACES.contains(&name.as_str()) {
                    return Err(self.error_at(
                        tok.column,
                        format!(
                            "unknown name `{name}`: references start with vars., env., inputs. or host."
                        ),
                    ));
                }
                let mut path = vec![name];
                while self.peek_kind() == Some(&Tok::Dot) {
                    self.pos += 1;
                    match self.peek().cloned() {
                        Some(Token {
                            kind: Tok::Ident(seg),
                            ..
                        }) => {
                            self.pos += 1;
                            path.push(seg);
                        }
                        Some(t) => {
                            return Err(self.error_at(
                                t.column,
                                format!("expected a name after `.`, found {}", t.kind.describe()),
                            ))
                        }
                        None => {
                            return Err(
                                self.error_at(self.end_column, "expected a name after `.`".into())
                            )
                        }
                    }
                }
                Ok(Expr::Ref(path))
            }
            other => Err(self.error_at(
                tok.column,
                format!("expected a value, found {}", other.describe()),
            )),
        }
    }
}

// ---------------------------------------------------------------------------------
// Printing (the inverse of `parse`: minimal parentheses)

fn prec(e: &Expr) -> u8 {
    match e {
        Expr::Or(..) => 1,
        Expr::And(..) => 2,
        Expr::Not(..) => 3,
        Expr::Cmp(..) => 4,
        Expr::Lit(_) | Expr::Ref(_) => 5,
    }
}

fn write_sub(f: &mut fmt::Formatter<'_>, e: &Expr, min: u8) -> fmt::Result {
    if prec(e) < min {
        write!(f, "({e})")
    } else {
        write!(f, "{e}")
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Lit(l) => write!(f, "{l}"),
            Expr::Ref(path) => write!(f, "{}", path.join(".")),
            Expr::Not(a) => {
                f.write_str("not ")?;
                write_sub(f, a, 3)
            }
            Expr::And(a, b) => {
                write_sub(f, a, 2)?;
                f.write_str(" and ")?;
                write_sub(f, b, 3)
            }
            Expr::Or(a, b) => {
                write_sub(f, a, 1)?;
                f.write_str(" or ")?;
                write_sub(f, b, 2)
            }
            Expr::Cmp(op, a, b) => {
                write_sub(f, a, 5)?;
                write!(f, " {} ", op.as_str())?;
                write_sub(f, b, 5)
            }
        }
    }
}

impl fmt::Display for Lit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lit::Str(s) => {
                f.write_str("\"")?;
                for c in s.chars() {
                    match c {
                        '"' => f.write_str("\\\"")?,
                        '\\' => f.write_str("\\\\")?,
                        '\n' => f.write_str("\\n")?,
                        '\t' => f.write_str("\\t")?,
                        '\r' => f.write_str("\\r")?,
                        c => write!(f, "{c}")?,
                    }
                }
                f.write_str("\"")
            }
            Lit::Int(n) => write!(f, "{n}"),
            // `{:?}` is the shortest text that reads back as the same float, and always
            // has a `.` or an exponent, so it reads back as a float.
            Lit::Float(x) => write!(f, "{x:?}"),
            Lit::Bool(b) => write!(f, "{b}"),
        }
    }
}

// ---------------------------------------------------------------------------------
// Evaluation

/// A value during evaluation: a resolved one, or an unresolved reference.
#[derive(Debug, Clone)]
enum Val {
    Undefined,
    V(Value),
}

fn lit_value(l: &Lit) -> Value {
    match l {
        Lit::Str(s) => Value::String(s.clone()),
        Lit::Int(n) => Value::from(*n),
        Lit::Float(x) => serde_json::Number::from_f64(*x).map_or(Value::Null, Value::Number),
        Lit::Bool(b) => Value::Bool(*b),
    }
}

/// Looks a dotted reference up in the scope (`["vars", "db", "port"]`).
pub fn lookup(scope: &Scope, path: &[String]) -> Option<Value> {
    let (ns, rest) = path.split_first()?;
    let map = match ns.as_str() {
        "vars" => &scope.vars,
        "env" => &scope.env,
        "inputs" => &scope.inputs,
        "host" => {
            let host = scope.host.to_value();
            let mut cur = &host;
            for seg in rest {
                cur = cur.as_object()?.get(seg)?;
            }
            return Some(cur.clone());
        }
        _ => return None,
    };
    let Some((first, deeper)) = rest.split_first() else {
        return Some(Value::Object(
            map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        ));
    };
    let mut cur = map.get(first)?;
    for seg in deeper {
        cur = cur.as_object()?.get(seg)?;
    }
    Some(cur.clone())
}

fn eval(e: &Expr, scope: &Scope) -> Val {
    match e {
        Expr::Lit(l) => Val::V(lit_value(l)),
        Expr::Ref(path) => lookup(scope, path).map_or(Val::Undefined, Val::V),
        Expr::Not(a) => Val::V(Value::Bool(!truthy(&eval(a, scope)))),
        Expr::And(a, b) => Val::V(Value::Bool(
            truthy(&eval(a, scope)) && truthy(&eval(b, scope)),
        )),
        Expr::Or(a, b) => Val::V(Value::Bool(
            truthy(&eval(a, scope)) || truthy(&eval(b, scope)),
        )),
        Expr::Cmp(op, a, b) => {
            let (a, b) = (eval(a, scope), eval(b, scope));
            Val::V(Value::Bool(compare(*op, &a, &b)))
        }
    }
}

fn truthy(v: &Val) -> bool {
    match v {
        Val::Undefined => false,
        Val::V(v) => match v {
            Value::Null => false,
            Value::Bool(b) => *b,
            Value::Number(n) => n.as_f64().is_some_and(|x| x != 0.0),
            Value::String(s) => !s.is_empty(),
            Value::Array(a) => !a.is_empty(),
            Value::Object(o) => !o.is_empty(),
        },
    }
}

fn compare(op: CmpOp, a: &Val, b: &Val) -> bool {
    let (Val::V(a), Val::V(b)) = (a, b) else {
        // An unresolved side: nothing holds but inequality and non-membership.
        return matches!(op, CmpOp::Ne | CmpOp::NotIn);
    };
    match op {
        CmpOp::Eq => equal(a, b),
        CmpOp::Ne => !equal(a, b),
        CmpOp::In => contains(b, a),
        CmpOp::NotIn => !contains(b, a),
        CmpOp::Lt | CmpOp::Le | CmpOp::Gt | CmpOp::Ge => match order(a, b) {
            None => false,
            Some(o) => match op {
                CmpOp::Lt => o == Ordering::Less,
                CmpOp::Le => o != Ordering::Greater,
                CmpOp::Gt => o == Ordering::Greater,
                _ => o != Ordering::Less,
            },
        },
    }
}

fn num_order(a: &serde_json::Number, b: &serde_json::Number) -> Option<Ordering> {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        return Some(x.cmp(&y));
    }
    if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
        return Some(x.cmp(&y));
    }
    a.as_f64()?.partial_cmp(&b.as_f64()?)
}

fn order(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => num_order(x, y),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => num_order(x, y) == Some(Ordering::Equal),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| equal(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| equal(v, w)))
        }
        _ => a == b,
    }
}

fn contains(container: &Value, item: &Value) -> bool {
    match (container, item) {
        (Value::Array(xs), _) => xs.iter().any(|x| equal(x, item)),
        (Value::String(s), Value::String(sub)) => s.contains(sub.as_str()),
        (Value::Object(m), Value::String(k)) => m.contains_key(k),
        _ => false,
    }
}
