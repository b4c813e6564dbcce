//! The parsed pattern: the tree the parser builds and the emitter writes out.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Category {
    Digit,
    NotDigit,
    Space,
    NotSpace,
    Word,
    NotWord,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SetItem {
    Lit(u8),
    Range(u8, u8),
    Cat(Category),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum At {
    Beginning,
    End,
    BeginningString,
    EndString,
    Boundary,
    NonBoundary,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RepeatKind {
    Greedy,
    Lazy,
    Possessive,
}

pub(super) type Seq = Vec<Node>;

#[derive(Debug, Clone)]
pub(super) enum Node {
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
