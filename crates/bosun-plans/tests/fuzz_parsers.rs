//! Property tests over the parsers of outside input in this crate — plan and inventory
//! YAML, `when:` conditions, templates — the stable-Rust counterpart of the `cargo fuzz`
//! targets in `fuzz/`. Each runs a bounded number of generated inputs and asserts: no
//! panic, a refusal that names the problem, and a bounded time per input. The limits
//! pass (`check_limits`) is also held to its promise: its depth and node counts are never
//! below what `serde_norway` builds from the same text.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use bosun_plans::condition;
use bosun_plans::model::{
    check_limits, lint, parse_inventory, parse_inventory_as_written, parse_plan, InputLimit, Limits,
};
use bosun_plans::template::{self, HostInfo, Scope};
use proptest::prelude::*;
use serde_json::{json, Value};

/// Per input, in a debug build on a busy machine: generous, and still far below the
/// tens of seconds the unbounded parsers took.
const PER_INPUT: Duration = Duration::from_secs(2);

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn timed<T>(what: &str, input: &str, f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = f();
    let took = started.elapsed();
    assert!(
        took < PER_INPUT,
        "{what} took {took:?} on {} bytes: {:?}",
        input.len(),
        input.chars().take(200).collect::<String>()
    );
    out
}

/// Pieces YAML is made of, quoting and indentation included, so that generated texts
/// hit the scanner's states (quotes, block scalars, continued plain scalars, flow
/// collections, anchors and aliases) rather than only plain words.
const YAML_PIECES: &[&str] = &[
    "[",
    "]",
    "{",
    "}",
    ", ",
    ",",
    ": ",
    ":",
    "- ",
    "-",
    "? ",
    "'",
    "''",
    "\"",
    "\\",
    "\\\"",
    "#",
    " # c",
    "\n",
    "\n  ",
    "\n    ",
    "\n- ",
    " ",
    "\t",
    "a",
    "bc",
    "k: ",
    "&a ",
    "&b ",
    "*a",
    "*b",
    " *a",
    "|\n",
    "|-\n  ",
    ">\n  ",
    "|2\n",
    "!t ",
    "---\n",
    "...\n",
    "\r\n",
    "%YAML 1.2\n",
    "\u{85}",
    "é",
    "0",
    "~",
    "name: p\n",
    "steps:\n",
    "hosts:\n",
];

fn yaml_soup() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(YAML_PIECES), 0..48).prop_map(|p| p.concat())
}

fn unlimited() -> Limits {
    Limits {
        max_bytes: usize::MAX,
        max_depth: usize::MAX,
        max_alias_nodes: u64::MAX,
    }
}

/// Nesting of a parsed value: a scalar 0, a collection one more than its deepest item.
fn depth(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Nodes of a parsed value, mapping keys included.
fn nodes(v: &Value) -> u64 {
    match v {
        Value::Array(a) => 1 + a.iter().map(nodes).sum::<u64>(),
        Value::Object(m) => 1 + m.values().map(|v| 1 + nodes(v)).sum::<u64>(),
        _ => 1,
    }
}

proptest! {
    #![proptest_config(config(512))]

    /// The limits pass never counts less than the parser builds: if it did, a text
    /// could slip past it deeper (or larger) than the limit says.
    #[test]
    fn limits_never_undercount_the_parser(text in yaml_soup()) {
        let checked = timed("check_limits", &text, || {
            check_limits("t.yaml", "plan", &text, &unlimited())
        });
        let parsed = serde_norway::from_str::<Value>(&text);
        match checked {
            Ok(shape) => {
                if let Ok(v) = parsed {
                    prop_assert!(depth(&v) <= shape.depth, "depth {} > {shape:?} for {text:?} = {v}", depth(&v));
                    prop_assert!(nodes(&v) <= shape.nodes.max(1), "nodes {} > {shape:?} for {text:?} = {v}", nodes(&v));
                }
            }
            // The one refusal without a limit to cross: an endless expansion, which
            // the parser cannot read either.
            Err(e) => {
                prop_assert!(e.message.contains("inside the node it names"), "{e}");
                prop_assert!(parsed.is_err(), "{text:?} was refused ({e}) but parses as {parsed:?}");
            }
        }
    }

    /// Plans and inventories of any shape: parsed (both inventory readings) and linted
    /// without a panic, quickly; every error is placed in the file.
    #[test]
    fn plan_and_inventory_files_never_panic(text in prop_oneof![yaml_soup(), ".{0,300}"]) {
        timed("parse and lint", &text, || {
            let plan = parse_plan(Path::new("plan.yaml"), &text);
            let inventory = parse_inventory(Path::new("inventory.yaml"), &text);
            let written = parse_inventory_as_written(Path::new("inventory.yaml"), &text);
            for e in [plan.as_ref().err(), inventory.as_ref().err(), written.as_ref().err()].into_iter().flatten() {
                assert!(e.location.line >= 1 && e.location.column >= 1, "{e:?}");
                assert!(!e.message.is_empty(), "{e:?}");
            }
            if let Ok(plan) = &plan {
                let _ = lint(plan, inventory.as_ref().ok());
                if let Ok(inventory) = &inventory {
                    let _ = plan.target_hosts(inventory);
                }
            }
        });
    }
}

/// A YAML document tree: rendered in block or flow style, with anchors and aliases, so
/// the comparison with the parser sees well-formed nesting (random pieces rarely parse).
#[derive(Debug, Clone)]
enum Node {
    Scalar(u8),
    Seq(Vec<Node>),
    Map(Vec<Node>),
    Anchored(Box<Node>),
    Alias(u8),
}

fn tree() -> impl Strategy<Value = (Node, Vec<bool>)> {
    let leaf = prop_oneof![
        any::<u8>().prop_map(Node::Scalar),
        any::<u8>().prop_map(Node::Alias)
    ];
    let node = leaf.prop_recursive(6, 48, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Node::Seq),
            prop::collection::vec(inner.clone(), 0..5).prop_map(Node::Map),
            inner.prop_map(|n| Node::Anchored(Box::new(n))),
        ]
    });
    (node, prop::collection::vec(any::<bool>(), 64))
}

const BLOCK_SCALARS: &[&str] = &[
    "a", "b c", "x[y", "it's", "a#b", "'q [x'", "\"d {\"", "1", "~", "é",
];
const FLOW_SCALARS: &[&str] = &["a", "b c", "'q [x'", "\"d {\"", "1", "é"];

struct Render<'a> {
    styles: &'a [bool],
    next: usize,
    anchors: usize,
}

impl Render<'_> {
    fn coin(&mut self) -> bool {
        self.next += 1;
        self.styles[self.next % self.styles.len()]
    }

    fn alias(&self, k: u8) -> Option<String> {
        (self.anchors > 0).then(|| format!("*a{}", usize::from(k) % self.anchors))
    }

    fn flow(&mut self, n: &Node) -> String {
        match n {
            Node::Scalar(k) => FLOW_SCALARS[usize::from(*k) % FLOW_SCALARS.len()].to_string(),
            Node::Alias(k) => self.alias(*k).unwrap_or_else(|| "z".into()),
            Node::Seq(items) => {
                let items: Vec<String> = items.iter().map(|i| self.flow(i)).collect();
                format!("[{}]", items.join(", "))
            }
            Node::Map(items) => {
                let items: Vec<String> = items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| format!("k{i}: {}", self.flow(v)))
                    .collect();
                format!("{{{}}}", items.join(", "))
            }
            Node::Anchored(inner) => {
                let name = self.anchors;
                let body = self.flow(inner);
                self.anchors += 1;
                format!("&a{name} {body}")
            }
        }
    }

    /// `n` as the value after `key:` or `-` at `indent`: the rest of that line, then
    /// its block lines.
    fn value(&mut self, n: &Node, indent: usize) -> String {
        let pad = " ".repeat(indent);
        match n {
            Node::Scalar(k) if self.coin() => {
                format!(
                    " |\n{pad}{}\n",
                    BLOCK_SCALARS[usize::from(*k) % BLOCK_SCALARS.len()]
                )
            }
            Node::Scalar(k) => format!(
                " {}\n",
                BLOCK_SCALARS[usize::from(*k) % BLOCK_SCALARS.len()]
            ),
            Node::Alias(k) => format!(" {}\n", self.alias(*k).unwrap_or_else(|| "z".into())),
            Node::Seq(items) | Node::Map(items) if items.is_empty() || self.coin() => {
                format!(" {}\n", self.flow(n))
            }
            Node::Seq(items) => {
                let mut out = String::from("\n");
                for item in items {
                    out.push_str(&format!("{pad}-{}", self.value(item, indent + 2)));
                }
                out
            }
            Node::Map(items) => {
                let mut out = String::from("\n");
                for (i, v) in items.iter().enumerate() {
                    out.push_str(&format!("{pad}k{i}:{}", self.value(v, indent + 2)));
                }
                out
            }
            Node::Anchored(inner) => {
                let name = self.anchors;
                let body = self.value(inner, indent);
                self.anchors += 1;
                format!(" &a{name}{body}")
            }
        }
    }
}

proptest! {
    #![proptest_config(config(512))]

    /// Well-formed documents of every style: the limits pass counts at least the levels
    /// and nodes the parser builds.
    #[test]
    fn limits_never_undercount_well_formed_documents((root, styles) in tree()) {
        let mut render = Render { styles: &styles, next: 0, anchors: 0 };
        let text = format!("root:{}", render.value(&root, 2));
        let shape = check_limits("t.yaml", "plan", &text, &unlimited());
        let parsed = serde_norway::from_str::<Value>(&text);
        match (shape, parsed) {
            (Ok(shape), Ok(v)) => {
                prop_assert!(depth(&v) <= shape.depth, "depth {} > {shape:?} for {text:?} = {v}", depth(&v));
                prop_assert!(nodes(&v) <= shape.nodes, "nodes {} > {shape:?} for {text:?} = {v}", nodes(&v));
            }
            (Err(e), Ok(v)) => prop_assert!(false, "{text:?} refused ({e}) but parses as {v}"),
            _ => {}
        }
    }
}

/// Openers that each nest one level, and what closes them.
const OPENERS: &[(&str, &str)] = &[("[", "]"), ("{a: ", "}"), ("[a: ", "]"), ("[{", "}]")];

proptest! {
    #![proptest_config(config(48))]

    /// Nesting past the limit, however it is written, is refused before parsing: named,
    /// placed, and fast whatever the depth.
    #[test]
    fn deep_nesting_is_refused_fast(
        depth in 65usize..40_000,
        opener in prop::sample::select(OPENERS),
        where_ in prop::sample::select(&["plan", "inventory"][..]),
    ) {
        let nest = format!("{}x{}", opener.0.repeat(depth), opener.1.repeat(depth));
        let text = match where_ {
            "plan" => format!("name: p\nvars:\n  x: {nest}\nsteps:\n  - command: [true]\n"),
            _ => format!("hosts:\n  web:\n    vars:\n      x: {nest}\n"),
        };
        let e = timed("a deep file", &text, || match where_ {
            "plan" => parse_plan(Path::new("p.yaml"), &text).map(|_| ()),
            _ => parse_inventory(Path::new("i.yaml"), &text).map(|_| ()),
        })
        .unwrap_err();
        prop_assert_eq!(e.limit, Some(InputLimit::Depth));
        prop_assert!(e.message.contains(&format!("{where_} nests deeper than the limit of 64 levels")), "{}", e);
        prop_assert_eq!(e.location.line, 3 + usize::from(where_ == "inventory"));
    }

    /// Block nesting (indentation, compact `- - -`) counts too.
    #[test]
    fn deep_block_nesting_is_refused(depth in 65usize..400, compact in any::<bool>()) {
        let text = if compact {
            format!("name: p\nvars:\n  x:\n    {}x\n", "- ".repeat(depth))
        } else {
            let mut t = String::from("name: p\nvars:\n");
            for level in 1..depth {
                t.push_str(&format!("{}k:\n", "  ".repeat(level)));
            }
            t
        };
        let e = timed("block nesting", &text, || parse_plan(Path::new("p.yaml"), &text)).unwrap_err();
        prop_assert_eq!(e.limit, Some(InputLimit::Depth), "{}", e);
    }

    /// Aliases of aliases ("billion laughs"), in flow or block style, are refused once
    /// their expansion passes the limit, without expanding them.
    #[test]
    fn alias_bombs_are_refused_fast(levels in 2u32..12, fanout in 2usize..24, block in any::<bool>()) {
        let mut text = String::from("name: p\nvars:\n  l0: &l0 [x, x]\n");
        for level in 1..levels {
            let refs = vec![format!("*l{}", level - 1); fanout];
            if block {
                text.push_str(&format!("  l{level}: &l{level}\n"));
                for r in refs {
                    text.push_str(&format!("    - {r}\n"));
                }
            } else {
                text.push_str(&format!("  l{level}: &l{level} [{}]\n", refs.join(", ")));
            }
        }
        text.push_str("steps:\n  - command: [true]\n");
        let expanded: f64 = (1..levels).map(|l| (fanout as f64).powi(l as i32) * 2.0).sum();
        let result = timed("an alias chain", &text, || parse_plan(Path::new("p.yaml"), &text));
        if expanded > Limits::FILE.max_alias_nodes as f64 {
            let e = result.unwrap_err();
            prop_assert_eq!(e.limit, Some(InputLimit::Aliases), "{}", e);
            prop_assert!(e.message.contains("100000 nodes"), "{}", e);
        }
    }
}

fn scope() -> Scope {
    let vars: BTreeMap<String, Value> = [
        ("name".to_string(), json!("web")),
        ("count".to_string(), json!(3)),
        ("list".to_string(), json!(["a", "b", 1])),
        ("map".to_string(), json!({"k": {"n": [1, 2]}})),
    ]
    .into_iter()
    .collect();
    Scope {
        env: vars.clone(),
        inputs: BTreeMap::from([("port".to_string(), json!(8080))]),
        vars,
        host: HostInfo {
            name: "web-1".into(),
            address: "10.0.0.1".into(),
            labels: vec!["web".into()],
            facts: None,
        },
    }
}

const CONDITION_PIECES: &[&str] = &[
    "(",
    ")",
    "not ",
    " and ",
    " or ",
    " == ",
    " != ",
    " in ",
    " > ",
    " <= ",
    "vars.name",
    "vars.map.k.n",
    "inputs.port",
    "host.labels",
    "'web'",
    "\"x\"",
    "3",
    "-1.5",
    "true",
    "[",
    "]",
    ", ",
    " ",
    "'",
    "\\",
    "é",
];

const TEMPLATE_PIECES: &[&str] = &[
    "{{",
    "}}",
    "{%",
    "%}",
    "{#",
    "#}",
    "(",
    ")",
    " if ",
    " else ",
    "for x in vars.list",
    "endfor",
    "endif",
    " | upper",
    " | default('x')",
    "vars.name",
    "vars.map.k",
    "'",
    "\"",
    " ~ ",
    "[",
    "]",
    "text ",
    "\n",
];

proptest! {
    #![proptest_config(config(256))]

    /// `when:` conditions: any text is decided (malformed ones fail open) without a
    /// panic; a parsed one prints to text that parses to itself.
    #[test]
    fn conditions_never_panic(text in prop_oneof![
        prop::collection::vec(prop::sample::select(CONDITION_PIECES), 0..40).prop_map(|p| p.concat()),
        ".{0,200}",
    ]) {
        timed("a condition", &text, || {
            let _ = condition::check(&text);
            let _ = condition::decide(&text, &scope());
            if let Ok(expr) = condition::parse(&text) {
                let _ = condition::references(&expr);
                let printed = expr.to_string();
                let again = condition::parse(&printed).unwrap_or_else(|e| panic!("{text:?} printed as {printed:?}: {e:?}"));
                assert_eq!(again.to_string(), printed);
            }
        });
    }

    /// Parentheses and `not` nested past the parser's limit are refused, naming it.
    #[test]
    fn deep_conditions_are_refused(depth in 65usize..50_000, not in any::<bool>()) {
        let text = if not {
            format!("{}true", "not ".repeat(depth))
        } else {
            format!("{}true{}", "(".repeat(depth), ")".repeat(depth))
        };
        let e = timed("a deep condition", &text, || condition::check(&text)).unwrap_err();
        prop_assert!(e.contains("nested more than 64 deep"), "{}", e);
    }

    /// Templates (checked by lint, rendered per host): any text, no panic.
    #[test]
    fn templates_never_panic(text in prop_oneof![
        prop::collection::vec(prop::sample::select(TEMPLATE_PIECES), 0..40).prop_map(|p| p.concat()),
        ".{0,200}",
    ]) {
        timed("a template", &text, || {
            let _ = template::check(&text);
            let _ = template::references(&text);
            let _ = template::render(&text, &scope());
        });
    }

    /// Deeply nested template expressions end in an error, not a stack overflow.
    #[test]
    fn deep_templates_are_refused(depth in 100usize..20_000) {
        let text = format!("{{{{ {}vars.name{} }}}}", "(".repeat(depth), ")".repeat(depth));
        let result = timed("a deep template", &text, || template::check(&text));
        prop_assert!(result.is_err(), "{} levels accepted", depth);
    }
}

/// A long key above many items: every item's location path used to repeat the key
/// (the product of the two in memory); now bounded.
#[test]
fn a_long_key_over_many_items_parses_quickly() {
    let text = format!(
        "name: p\nvars:\n  ? {}\n  : [{}a]\nsteps:\n  - command: [x]\n",
        "k".repeat(200_000),
        "a,".repeat(100_000)
    );
    let plan = timed("a long key", &text, || {
        parse_plan(Path::new("p.yaml"), &text)
    })
    .unwrap();
    assert_eq!(plan.vars.len(), 1);
}
