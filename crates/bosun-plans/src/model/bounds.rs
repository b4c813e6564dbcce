//! Limits on a plan or inventory text, checked before a YAML parser reads it.
//!
//! The YAML readers behind `parse/` are not linear on hostile input: libyaml (under
//! `serde_norway`) looks at every open flow level at each token, so `[[[[…` costs the
//! square of its depth (100,000 levels took 25 s), and an alias replays its anchored node
//! each time it is used, so aliases of aliases (`&b [*a, *a, …]`, "billion laughs") grow
//! exponentially. This pass reads the text once, in time linear in its length, and
//! refuses a text that is too large, nests too deep, or whose aliases expand to too
//! many nodes — each refusal naming the limit, with the line and column where it was
//! crossed.
//!
//! To know which brackets, indentation, anchors and aliases are real (not inside quotes,
//! comments or block scalars), it follows libyaml's scanner: the same token rules, the
//! same block indentation stack, the same simple-key rule that decides where a block
//! mapping starts. Where a rule is only approximated the estimate errs high: the depth
//! and node counts here are never below what the parser builds (the property tests in
//! `tests/fuzz_parsers.rs` check that against `serde_norway`). After a point where
//! libyaml would stop with an error, what this pass counts no longer matters: nothing
//! parses past it.

use std::collections::HashMap;

use super::{Location, ModelError};

/// Which limit a text went over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputLimit {
    /// The text is larger than [`Limits::max_bytes`].
    Size,
    /// Collections nest deeper than [`Limits::max_depth`].
    Depth,
    /// Aliases expand to more than [`Limits::max_alias_nodes`] nodes, or an alias names
    /// the node it is inside of (an endless expansion).
    Aliases,
}

/// The bounds a YAML text is read under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest text, in bytes.
    pub max_bytes: usize,
    /// Deepest nesting of collections (the top-level mapping is level 1).
    pub max_depth: usize,
    /// Most nodes all aliases together may expand to.
    pub max_alias_nodes: u64,
}

impl Limits {
    /// The limits every plan and inventory file is read under: far above what a real
    /// file needs, far below what makes parsing slow.
    pub const FILE: Limits = Limits {
        max_bytes: 1024 * 1024,
        max_depth: 64,
        max_alias_nodes: 100_000,
    };
}

/// What the scan measured: upper bounds of what a YAML parser builds from the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Shape {
    /// Deepest nesting, aliases expanded.
    pub depth: usize,
    /// Nodes, aliases expanded.
    pub nodes: u64,
    /// The part of `nodes` that aliases added.
    pub alias_nodes: u64,
}

/// Checks `text` against `limits`; `file` and `what` ("plan", "inventory") name it in
/// the error, which carries the [`InputLimit`] crossed.
pub fn check_limits(
    file: &str,
    what: &str,
    text: &str,
    limits: &Limits,
) -> Result<Shape, ModelError> {
    if text.len() > limits.max_bytes {
        return Err(ModelError {
            location: Location {
                file: file.to_string(),
                line: 1,
                column: 1,
            },
            message: format!(
                "the {what} is {} bytes, over the limit of {} bytes",
                text.len(),
                limits.max_bytes
            ),
            limit: Some(InputLimit::Size),
        });
    }
    let mut scan = Scan::new(text, limits);
    match scan.run() {
        Ok(()) => Ok(scan.shape),
        Err(over) => {
            let message = match over.what {
                Over::Depth => format!(
                    "the {what} nests deeper than the limit of {} levels",
                    limits.max_depth
                ),
                Over::AliasNodes(name) => format!(
                    "the {what}'s aliases expand to more than the limit of {} nodes (at alias *{name})",
                    limits.max_alias_nodes
                ),
                Over::Recursive(name) => format!(
                    "alias *{name} is inside the node it names, an endless expansion"
                ),
            };
            Err(ModelError {
                location: Location {
                    file: file.to_string(),
                    line: over.line,
                    column: over.column,
                },
                message,
                limit: Some(match over.what {
                    Over::Depth => InputLimit::Depth,
                    Over::AliasNodes(_) | Over::Recursive(_) => InputLimit::Aliases,
                }),
            })
        }
    }
}

// ---------------------------------------------------------------------------------

enum Over<'a> {
    Depth,
    AliasNodes(&'a str),
    Recursive(&'a str),
}

struct Crossed<'a> {
    what: Over<'a>,
    line: usize,
    column: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Seq,
    Map,
}

/// One level of libyaml's block indentation stack.
struct Block {
    column: usize,
    kind: Kind,
    /// A sequence whose `-` sit at this mapping's own column (`key:\n- a`): one level
    /// more than the indentation shows.
    indentless: bool,
}

/// One open flow collection.
struct Flow {
    kind: Kind,
    /// In a sequence, `a: b` (or `? a`) is a one-pair mapping: one level more.
    pair: bool,
    /// The deepest level reached in the current entry: the pair mapping, opened at the
    /// `:`, retroactively holds it.
    entry_peak: usize,
}

/// Where an anchored node starts.
#[derive(Clone, Copy)]
struct Start<'a> {
    name: &'a str,
    /// Which definition of `name` this is: a name defined again names the new node
    /// from then on.
    id: usize,
    nodes: u64,
    depth: usize,
}

#[derive(Clone, Copy)]
enum Close {
    /// When the flow stack is shorter than this.
    Flow(usize),
    /// When the block stack is shorter than this.
    Block(usize),
    /// When that block level is popped or its indentless sequence ends.
    Indentless(usize),
}

/// An anchored collection still open.
struct Frame<'a> {
    start: Start<'a>,
    peak: usize,
    close: Close,
}

/// A possible simple key on flow level 0: where a block mapping starts if a `:` follows
/// on the same line.
struct Key<'a> {
    line: usize,
    index: usize,
    column: usize,
    peak: usize,
    /// An anchor written before the key: it belongs to the mapping the key starts, or to
    /// an empty node when the key does not start one.
    anchor: Option<Start<'a>>,
}

/// A finished anchored node.
#[derive(Clone, Copy)]
struct Anchor {
    nodes: u64,
    depth: usize,
}

/// libyaml gives up on a simple key this many bytes after its start.
const SIMPLE_KEY_SPAN: usize = 1024;

struct Scan<'a, 'l> {
    text: &'a str,
    b: &'a [u8],
    i: usize,
    line: usize,
    col: usize,
    limits: &'l Limits,
    flows: Vec<Flow>,
    blocks: Vec<Block>,
    depth: usize,
    simple_key_allowed: bool,
    key: Option<Key<'a>>,
    pending: Option<Start<'a>>,
    frames: Vec<Frame<'a>>,
    anchors: HashMap<&'a str, Anchor>,
    /// The latest definition of each anchor name, finished or not.
    defined: HashMap<&'a str, usize>,
    definitions: usize,
    shape: Shape,
}

type Step<'a> = Result<(), Crossed<'a>>;

impl<'a, 'l> Scan<'a, 'l> {
    fn new(text: &'a str, limits: &'l Limits) -> Self {
        Scan {
            text,
            b: text.as_bytes(),
            i: 0,
            line: 1,
            col: 0,
            limits,
            flows: Vec::new(),
            blocks: Vec::new(),
            depth: 0,
            simple_key_allowed: true,
            key: None,
            pending: None,
            frames: Vec::new(),
            anchors: HashMap::new(),
            defined: HashMap::new(),
            definitions: 0,
            shape: Shape::default(),
        }
    }

    // ---- characters ----

    fn at(&self, k: usize) -> u8 {
        self.b.get(self.i + k).copied().unwrap_or(0)
    }

    fn eof(&self) -> bool {
        self.i >= self.b.len()
    }

    /// A line break at `i + k` (libyaml's: CR, LF, NEL, LS, PS).
    fn is_break(&self, k: usize) -> bool {
        match self.at(k) {
            b'\r' | b'\n' => true,
            0xC2 => self.at(k + 1) == 0x85,
            0xE2 => self.at(k + 1) == 0x80 && matches!(self.at(k + 2), 0xA8 | 0xA9),
            _ => false,
        }
    }

    fn is_blank(&self, k: usize) -> bool {
        matches!(self.at(k), b' ' | b'\t')
    }

    /// Blank, break or end of text (libyaml's `IS_BLANKZ`, NUL included).
    fn is_blankz(&self, k: usize) -> bool {
        self.is_blank(k) || self.is_break(k) || self.i + k >= self.b.len() || self.at(k) == 0
    }

    fn is_breakz(&self, k: usize) -> bool {
        self.is_break(k) || self.i + k >= self.b.len() || self.at(k) == 0
    }

    /// Moves past one character (not a line break).
    fn advance(&mut self) {
        if self.eof() {
            return;
        }
        let width = match self.b[self.i] {
            b if b < 0x80 => 1,
            b if b >= 0xF0 => 4,
            b if b >= 0xE0 => 3,
            _ => 2,
        };
        self.i = (self.i + width).min(self.b.len());
        self.col += 1;
    }

    /// Moves past one line break (CR LF is one).
    fn advance_break(&mut self) {
        if self.at(0) == b'\r' && self.at(1) == b'\n' {
            self.i += 2;
        } else {
            self.advance();
        }
        self.line += 1;
        self.col = 0;
    }

    fn skip_to_break(&mut self) {
        while !self.is_breakz(0) {
            self.advance();
        }
    }

    fn document_marker(&self) -> bool {
        self.col == 0
            && ((self.at(0) == b'-' && self.at(1) == b'-' && self.at(2) == b'-')
                || (self.at(0) == b'.' && self.at(1) == b'.' && self.at(2) == b'.'))
            && self.is_blankz(3)
    }

    fn indent(&self) -> isize {
        self.blocks.last().map_or(-1, |b| b.column as isize)
    }

    fn crossed(&self, what: Over<'a>) -> Crossed<'a> {
        Crossed {
            what,
            line: self.line,
            column: self.col + 1,
        }
    }

    // ---- depth, nodes, anchors ----

    /// Notes that something reaches `level` (a collection opened, or an alias expanded
    /// there) and refuses it past the limit.
    fn reach(&mut self, level: usize) -> Step<'a> {
        self.shape.depth = self.shape.depth.max(level);
        for f in &mut self.frames {
            f.peak = f.peak.max(level);
        }
        for f in &mut self.flows {
            f.entry_peak = f.entry_peak.max(level);
        }
        if let Some(k) = &mut self.key {
            k.peak = k.peak.max(level);
        }
        if level > self.limits.max_depth {
            return Err(self.crossed(Over::Depth));
        }
        Ok(())
    }

    fn deeper(&mut self) -> Step<'a> {
        self.depth += 1;
        self.shape.nodes = self.shape.nodes.saturating_add(1);
        self.reach(self.depth)
    }

    /// A node that holds nothing: a scalar (`counted`) or an empty value. A scalar
    /// counts twice: in a flow mapping, `{a, b}`, each key has an empty value unwritten.
    fn leaf(&mut self, counted: bool) {
        if counted {
            self.shape.nodes = self.shape.nodes.saturating_add(2);
        }
        if let Some(p) = self.pending.take() {
            self.finish(p, Anchor { nodes: 1, depth: 0 });
        }
    }

    /// Records a finished anchored node, unless its name was defined again meanwhile.
    fn finish(&mut self, start: Start<'a>, anchor: Anchor) {
        if self.defined.get(start.name) == Some(&start.id) {
            self.anchors.insert(start.name, anchor);
        }
    }

    /// The pending anchor, if any, names the collection just opened.
    fn open_frame(&mut self, close: Close) {
        if let Some(start) = self.pending.take() {
            self.open_frame_at(start, close);
        }
    }

    fn open_frame_at(&mut self, start: Start<'a>, close: Close) {
        self.frames.push(Frame {
            start,
            peak: self.depth.max(start.depth),
            close,
        });
    }

    /// Finishes the anchored collections that have ended.
    fn close_frames(&mut self) {
        while let Some(f) = self.frames.last() {
            let closed = match f.close {
                Close::Flow(len) => self.flows.len() < len,
                Close::Block(len) => self.blocks.len() < len,
                Close::Indentless(len) => {
                    self.blocks.len() < len
                        || !self.blocks.get(len - 1).is_some_and(|b| b.indentless)
                }
            };
            if !closed {
                break;
            }
            let Some(f) = self.frames.pop() else { break };
            let anchor = Anchor {
                nodes: self.shape.nodes.saturating_sub(f.start.nodes).max(1),
                depth: f.peak.saturating_sub(f.start.depth),
            };
            self.finish(f.start, anchor);
        }
    }

    fn save_key(&mut self) {
        if self.flows.is_empty() && self.simple_key_allowed {
            self.key = Some(Key {
                line: self.line,
                index: self.i,
                column: self.col,
                peak: self.depth,
                anchor: self.pending,
            });
        }
    }

    /// libyaml's `roll_indent` on flow level 0: a new block collection when `column` is
    /// right of the current indentation.
    fn roll(&mut self, column: usize, kind: Kind) -> Result<bool, Crossed<'a>> {
        if !self.flows.is_empty() || self.indent() >= column as isize {
            return Ok(false);
        }
        self.blocks.push(Block {
            column,
            kind,
            indentless: false,
        });
        self.deeper()?;
        Ok(true)
    }

    /// libyaml's `unroll_indent`: block collections right of `column` end.
    fn unroll(&mut self, column: isize) {
        if !self.flows.is_empty() {
            return;
        }
        while self.indent() > column {
            self.leaf(false);
            if let Some(b) = self.blocks.pop() {
                self.depth -= 1 + usize::from(b.indentless);
            }
            self.close_frames();
        }
    }

    /// A key or value at the current mapping's own column ends its indentless sequence.
    fn end_indentless(&mut self) {
        if let Some(b) = self.blocks.last_mut() {
            if b.indentless {
                b.indentless = false;
                self.depth -= 1;
                self.close_frames();
            }
        }
    }

    // ---- the scan ----

    fn run(&mut self) -> Step<'a> {
        loop {
            self.skip_to_token();
            if let Some(k) = &self.key {
                if k.line < self.line || k.index + SIMPLE_KEY_SPAN < self.i {
                    self.key = None;
                }
            }
            self.unroll(self.col as isize);
            if self.eof() {
                self.leaf(false);
                return Ok(());
            }
            let before = self.i;
            let c = self.at(0);
            if self.col == 0 && c == b'%' {
                self.skip_to_break();
            } else if self.document_marker() {
                self.unroll(-1);
                self.leaf(false);
                self.key = None;
                self.simple_key_allowed = false;
                for _ in 0..3 {
                    self.advance();
                }
            } else {
                match c {
                    b'[' => self.flow_start(Kind::Seq)?,
                    b'{' => self.flow_start(Kind::Map)?,
                    b']' | b'}' => self.flow_end(),
                    b',' => self.flow_entry(),
                    b'-' if self.is_blankz(1) => self.block_entry()?,
                    b'?' if !self.flows.is_empty() || self.is_blankz(1) => self.explicit_key()?,
                    b':' if !self.flows.is_empty() || self.is_blankz(1) => self.value()?,
                    b'*' => self.alias()?,
                    b'&' => self.anchor(),
                    b'!' => self.tag(),
                    b'|' | b'>' if self.flows.is_empty() => self.block_scalar(),
                    b'\'' | b'"' => self.quoted(c),
                    _ => self.plain(),
                }
            }
            // A character libyaml refuses ends its parse; step over it so the scan ends.
            if self.i == before {
                self.advance();
            }
        }
    }

    /// libyaml's `scan_to_next_token`: spaces, tabs where allowed, comments, breaks.
    fn skip_to_token(&mut self) {
        loop {
            if self.col == 0 && self.at(0) == 0xEF && self.at(1) == 0xBB && self.at(2) == 0xBF {
                self.advance();
            }
            while self.at(0) == b' '
                || ((!self.flows.is_empty() || !self.simple_key_allowed) && self.at(0) == b'\t')
            {
                self.advance();
            }
            if self.at(0) == b'#' {
                self.skip_to_break();
            }
            if !self.is_break(0) {
                return;
            }
            self.advance_break();
            if self.flows.is_empty() {
                self.simple_key_allowed = true;
            }
        }
    }

    fn flow_start(&mut self, kind: Kind) -> Step<'a> {
        self.save_key();
        self.flows.push(Flow {
            kind,
            pair: false,
            entry_peak: 0,
        });
        self.deeper()?;
        if let Some(f) = self.flows.last_mut() {
            f.entry_peak = self.depth;
        }
        let len = self.flows.len();
        self.open_frame(Close::Flow(len));
        self.simple_key_allowed = true;
        self.advance();
        Ok(())
    }

    fn flow_end(&mut self) {
        self.leaf(false);
        match self.flows.pop() {
            Some(f) => {
                self.depth -= 1 + usize::from(f.pair);
                self.close_frames();
            }
            None => self.key = None,
        }
        self.simple_key_allowed = false;
        self.advance();
    }

    fn flow_entry(&mut self) {
        self.leaf(false);
        match self.flows.last_mut() {
            Some(f) => {
                if f.pair {
                    f.pair = false;
                    self.depth -= 1;
                }
                f.entry_peak = self.depth;
            }
            None => self.key = None,
        }
        self.simple_key_allowed = true;
        self.advance();
    }

    /// `?` or `:` inside a flow sequence opens a one-pair mapping around the entry.
    fn flow_pair(&mut self) -> Step<'a> {
        let Some(f) = self.flows.last_mut() else {
            return Ok(());
        };
        if f.kind == Kind::Seq && !f.pair {
            f.pair = true;
            let entry_peak = f.entry_peak;
            self.depth += 1;
            self.reach(self.depth)?;
            self.reach(entry_peak + 1)?;
        }
        Ok(())
    }

    fn block_entry(&mut self) -> Step<'a> {
        // The entry may be empty: one node more.
        self.shape.nodes = self.shape.nodes.saturating_add(1);
        if self.flows.is_empty() {
            let column = self.col;
            if self.roll(column, Kind::Seq)? {
                let len = self.blocks.len();
                self.open_frame(Close::Block(len));
            } else if let Some(b) = self
                .blocks
                .last_mut()
                .filter(|b| b.kind == Kind::Map && b.column == column && !b.indentless)
            {
                b.indentless = true;
                self.deeper()?;
                let len = self.blocks.len();
                self.open_frame(Close::Indentless(len));
            } else {
                self.leaf(false);
            }
            self.key = None;
        } else {
            self.leaf(false);
        }
        self.simple_key_allowed = true;
        self.advance();
        Ok(())
    }

    fn explicit_key(&mut self) -> Step<'a> {
        // The key and its value may both be empty: two nodes more.
        self.shape.nodes = self.shape.nodes.saturating_add(2);
        if self.flows.is_empty() {
            let column = self.col;
            if self.roll(column, Kind::Map)? {
                let len = self.blocks.len();
                self.open_frame(Close::Block(len));
            } else {
                self.end_indentless();
                self.leaf(false);
            }
            self.key = None;
            self.simple_key_allowed = true;
        } else {
            self.leaf(false);
            self.flow_pair()?;
            self.simple_key_allowed = false;
        }
        self.advance();
        Ok(())
    }

    fn value(&mut self) -> Step<'a> {
        // The value, and a key not written, may be empty: two nodes more.
        self.shape.nodes = self.shape.nodes.saturating_add(2);
        if !self.flows.is_empty() {
            self.leaf(false);
            self.flow_pair()?;
            self.simple_key_allowed = false;
            self.advance();
            return Ok(());
        }
        match self.key.take() {
            Some(key) => {
                // The mapping starts at the key, so the key (a flow collection, say)
                // was one level deeper than counted while it was read.
                let pushed = self.roll(key.column, Kind::Map)?;
                if pushed {
                    self.reach(key.peak + 1)?;
                } else {
                    self.end_indentless();
                }
                if let Some(a) = key.anchor {
                    if pushed {
                        let len = self.blocks.len();
                        self.open_frame_at(a, Close::Block(len));
                    } else {
                        self.finish(a, Anchor { nodes: 1, depth: 0 });
                    }
                }
                self.leaf(false);
                self.simple_key_allowed = false;
            }
            None => {
                let column = self.col;
                if self.roll(column, Kind::Map)? {
                    let len = self.blocks.len();
                    self.open_frame(Close::Block(len));
                } else {
                    self.end_indentless();
                    self.leaf(false);
                }
                self.simple_key_allowed = true;
            }
        }
        self.advance();
        Ok(())
    }

    /// An anchor or alias name (libyaml: ASCII letters, digits, `_`, `-`).
    fn name(&mut self) -> &'a str {
        self.advance();
        let from = self.i;
        while matches!(self.at(0), b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z' | b'_' | b'-') {
            self.advance();
        }
        self.text.get(from..self.i).unwrap_or("")
    }

    fn anchor(&mut self) {
        self.save_key();
        self.simple_key_allowed = false;
        let nodes = self.shape.nodes;
        let depth = self.depth;
        let name = self.name();
        let id = self.definitions;
        self.definitions += 1;
        self.defined.insert(name, id);
        self.pending = Some(Start {
            name,
            id,
            nodes,
            depth,
        });
    }

    fn alias(&mut self) -> Step<'a> {
        self.save_key();
        self.simple_key_allowed = false;
        let at = self.crossed(Over::Depth);
        let name = self.name();
        let latest = self.defined.get(name).copied();
        if self.frames.iter().any(|f| Some(f.start.id) == latest) {
            return Err(Crossed {
                what: Over::Recursive(name),
                ..at
            });
        }
        let target = self
            .anchors
            .get(name)
            .copied()
            .unwrap_or(Anchor { nodes: 1, depth: 0 });
        // An alias can be a key whose value is empty (`{*a}`): one node more.
        self.shape.nodes = self.shape.nodes.saturating_add(target.nodes + 1);
        self.shape.alias_nodes = self.shape.alias_nodes.saturating_add(target.nodes);
        if self.shape.alias_nodes > self.limits.max_alias_nodes {
            return Err(Crossed {
                what: Over::AliasNodes(name),
                ..at
            });
        }
        if let Err(e) = self.reach(self.depth + target.depth) {
            return Err(Crossed { what: e.what, ..at });
        }
        if let Some(p) = self.pending.take() {
            self.finish(p, target);
        }
        Ok(())
    }

    fn tag(&mut self) {
        self.save_key();
        self.simple_key_allowed = false;
        while !self.is_blankz(0) {
            self.advance();
        }
    }

    fn quoted(&mut self, quote: u8) {
        self.save_key();
        self.simple_key_allowed = false;
        self.leaf(true);
        self.advance();
        while !self.eof() {
            let c = self.at(0);
            if self.is_break(0) {
                self.advance_break();
            } else if quote == b'\'' && c == b'\'' {
                self.advance();
                if self.at(0) != b'\'' {
                    return;
                }
                self.advance();
            } else if quote == b'"' && c == b'"' {
                self.advance();
                return;
            } else if quote == b'"' && c == b'\\' {
                self.advance();
                if self.is_break(0) {
                    self.advance_break();
                } else {
                    self.advance();
                }
            } else {
                self.advance();
            }
        }
    }

    /// libyaml's `scan_block_scalar`: the header, then every line indented at least as
    /// far as the content (given by an indicator or the first non-empty line).
    fn block_scalar(&mut self) {
        self.key = None;
        self.simple_key_allowed = true;
        self.leaf(true);
        self.advance();
        let mut increment = 0usize;
        if matches!(self.at(0), b'+' | b'-') {
            self.advance();
            if self.at(0).is_ascii_digit() {
                increment = usize::from(self.at(0) - b'0');
                self.advance();
            }
        } else if self.at(0).is_ascii_digit() {
            increment = usize::from(self.at(0) - b'0');
            self.advance();
            if matches!(self.at(0), b'+' | b'-') {
                self.advance();
            }
        }
        while self.is_blank(0) {
            self.advance();
        }
        if self.at(0) == b'#' {
            self.skip_to_break();
        }
        // Anything else on the header line is an error in libyaml.
        self.skip_to_break();
        if self.is_break(0) {
            self.advance_break();
        }
        let mut indent = if increment == 0 {
            0
        } else {
            (self.indent() + increment as isize).max(increment as isize) as usize
        };
        if !self.block_breaks(&mut indent) {
            return;
        }
        while self.col == indent && !self.eof() {
            self.skip_to_break();
            if self.eof() {
                return;
            }
            self.advance_break();
            if !self.block_breaks(&mut indent) {
                return;
            }
        }
    }

    /// Empty lines and indentation inside a block scalar; fixes the content indentation
    /// when it is not yet known. `false` where libyaml stops (a tab as indentation).
    fn block_breaks(&mut self, indent: &mut usize) -> bool {
        let mut max_indent = 0;
        loop {
            while (*indent == 0 || self.col < *indent) && self.at(0) == b' ' {
                self.advance();
            }
            max_indent = max_indent.max(self.col);
            if (*indent == 0 || self.col < *indent) && self.at(0) == b'\t' {
                return false;
            }
            if !self.is_break(0) {
                break;
            }
            self.advance_break();
        }
        if *indent == 0 {
            *indent = max_indent.max((self.indent() + 1).max(1) as usize);
        }
        true
    }

    /// libyaml's `scan_plain_scalar`: chunks of text separated by blanks and, outside
    /// flow collections, continued on lines indented right of the current block.
    fn plain(&mut self) {
        self.save_key();
        self.simple_key_allowed = false;
        self.leaf(true);
        let min_column = self.indent() + 1;
        let in_flow = !self.flows.is_empty();
        let mut leading_break = false;
        'scalar: loop {
            if self.document_marker() || self.at(0) == b'#' {
                break;
            }
            while !self.is_blankz(0) {
                let c = self.at(0);
                if in_flow
                    && c == b':'
                    && matches!(self.at(1), b',' | b'?' | b'[' | b']' | b'{' | b'}')
                {
                    break 'scalar;
                }
                if (c == b':' && self.is_blankz(1))
                    || (in_flow && matches!(c, b',' | b'[' | b']' | b'{' | b'}'))
                {
                    break;
                }
                self.advance();
            }
            if !(self.is_blank(0) || self.is_break(0)) {
                break;
            }
            while self.is_blank(0) || self.is_break(0) {
                if self.is_blank(0) {
                    if leading_break && (self.col as isize) < min_column && self.at(0) == b'\t' {
                        break 'scalar;
                    }
                    self.advance();
                } else {
                    self.advance_break();
                    leading_break = true;
                }
            }
            if !in_flow && (self.col as isize) < min_column {
                break;
            }
        }
        if leading_break {
            self.simple_key_allowed = true;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn shape(text: &str) -> Shape {
        let unlimited = Limits {
            max_bytes: usize::MAX,
            max_depth: usize::MAX,
            max_alias_nodes: u64::MAX,
        };
        check_limits("t.yaml", "plan", text, &unlimited).unwrap()
    }

    fn refused(text: &str) -> ModelError {
        check_limits("t.yaml", "plan", text, &Limits::FILE).unwrap_err()
    }

    #[test]
    fn depth_follows_block_and_flow_nesting() {
        assert_eq!(shape("a: b\n").depth, 1);
        assert_eq!(shape("a:\n  b:\n    c: [x, {y: z}]\n").depth, 5);
        assert_eq!(shape("a:\n- x\n- y\n").depth, 2, "indentless sequence");
        assert_eq!(shape("- - - a\n").depth, 3);
        assert_eq!(
            shape("[a: [b]]\n").depth,
            3,
            "one-pair mapping in a sequence"
        );
    }

    #[test]
    fn brackets_in_quotes_comments_and_block_scalars_do_not_count() {
        let text = "a: '[[[['\nb: \"[[[[\\\"\"\n# [[[[\nc: |\n  [[[[\n  {{{{\nd: x[[[[\n";
        assert_eq!(shape(text).depth, 1);
    }

    #[test]
    fn a_continued_plain_scalar_is_not_a_quote() {
        // The `'` starts no quoted scalar: it continues `hello`, so the brackets are real.
        let text = format!("a: hello\n  'world\nb: {}\nc: '\n", "[".repeat(70));
        let e = refused(&text);
        assert_eq!(e.limit, Some(InputLimit::Depth));
        assert_eq!((e.location.line, e.location.column), (3, 67));
    }

    #[test]
    fn deep_nesting_is_refused_where_it_crosses_the_limit() {
        let text = format!(
            "name: p\nvars:\n  x: {}{}\n",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let e = refused(&text);
        assert_eq!(e.limit, Some(InputLimit::Depth));
        assert_eq!(
            e.message,
            "the plan nests deeper than the limit of 64 levels"
        );
        assert_eq!((e.location.line, e.location.column), (3, 6 + 62));
        let blocks: String = (0..70).map(|i| format!("{}k:\n", " ".repeat(i))).collect();
        assert_eq!(refused(&blocks).limit, Some(InputLimit::Depth));
        assert_eq!(refused(&"- ".repeat(70)).limit, Some(InputLimit::Depth));
    }

    #[test]
    fn alias_chains_are_refused() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            let p = i - 1;
            let refs = vec![format!("*a{p}"); 10].join(", ");
            text.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        let e = refused(&text);
        assert_eq!(e.limit, Some(InputLimit::Aliases));
        assert!(e.message.contains("100000 nodes"), "{}", e.message);
        assert!(e.location.line > 4, "{e:?}");
    }

    #[test]
    fn an_alias_inside_its_own_anchor_is_refused() {
        let e = refused("a: &x\n  b: *x\n");
        assert_eq!(e.limit, Some(InputLimit::Aliases));
        assert_eq!(
            e.message,
            "alias *x is inside the node it names, an endless expansion"
        );
        assert_eq!((e.location.line, e.location.column), (2, 6));
        assert_eq!(
            refused("a: &x [1, [*x]]\n").limit,
            Some(InputLimit::Aliases)
        );
    }

    #[test]
    fn a_name_defined_again_inside_its_anchor_is_not_recursive() {
        // `*a0` names the inner `&a0`, already finished (found by the property tests).
        let s = shape("root: &a0\n  k0: &a0 a\n  k1: *a0\n");
        assert_eq!(s.alias_nodes, 1, "{s:?}");
    }

    #[test]
    fn aliases_count_their_anchored_node() {
        let s = shape("base: &b {user: deploy, port: 22}\nweb: *b\ndb: *b\n");
        assert!(s.alias_nodes >= 2 * 5, "{s:?}");
        assert!(s.depth >= 2, "{s:?}");
        // An anchor on a key names the key, not the mapping.
        let s = shape("m:\n  &k key: [1, 2, 3]\nn: *k\n");
        assert_eq!(s.alias_nodes, 1, "{s:?}");
    }

    #[test]
    fn size_is_checked_first() {
        let limits = Limits {
            max_bytes: 10,
            ..Limits::FILE
        };
        let e = check_limits("t.yaml", "inventory", "hosts: {a: {}}\n", &limits).unwrap_err();
        assert_eq!(e.limit, Some(InputLimit::Size));
        assert_eq!(
            e.message,
            "the inventory is 15 bytes, over the limit of 10 bytes"
        );
    }
}
