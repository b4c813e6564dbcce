//! The dependency graph: what a change of one stack starts. One model holds both kinds of
//! edge Bosun has:
//!
//! - a stack's `depends_on` ([`Link::DependsOn`]): an upstream stack's changed outputs
//!   start a run of the downstream stack, its inputs mapped from them;
//! - a plan's `on_stack_change` ([`Link::Feeds`]): a stack's changed outputs start a run
//!   of the plan.
//!
//! Saving either kind of edge refuses one that would close a cycle
//! ([`Graph::find_cycle`]); deleting a node others hang from is refused naming them
//! ([`Graph::downstream`]); the pages that show a stack read its neighbours from it. A
//! [`Graph`] holds the part of an org's graph a store read: the whole of it, or what lies
//! around one node.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::stack::Dependency;

/// A node of the graph: a stack by id, or a plan by name (of one org).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Node {
    Stack(String),
    Plan(String),
}

impl Node {
    pub fn stack(id: impl Into<String>) -> Self {
        Node::Stack(id.into())
    }

    pub fn plan(name: impl Into<String>) -> Self {
        Node::Plan(name.into())
    }

    /// The stack's id or the plan's name.
    pub fn id(&self) -> &str {
        match self {
            Node::Stack(id) | Node::Plan(id) => id,
        }
    }
}

/// A stack by its bare id (as `depends_on` names it), a plan as `plan NAME`.
impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::Stack(id) => f.write_str(id),
            Node::Plan(name) => write!(f, "plan {name}"),
        }
    }
}

/// What an edge carries from its upstream to its downstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    /// A downstream stack's `depends_on` entry: upstream output → downstream input
    /// variable; with `trigger_always`, every successful upstream apply starts the
    /// downstream run, changed outputs or not.
    DependsOn {
        outputs: BTreeMap<String, String>,
        trigger_always: bool,
    },
    /// A plan's `on_stack_change`: the outputs whose change starts its run (empty: any).
    Feeds { outputs: Vec<String> },
}

/// One edge: `upstream`'s changes start runs of `downstream`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    pub upstream: Node,
    pub downstream: Node,
    pub link: Link,
}

impl Edge {
    /// The edge a stack's `depends_on` entry makes, from the upstream it names.
    pub fn depends_on(stack: &str, dependency: &Dependency) -> Edge {
        Edge {
            upstream: Node::stack(dependency.stack.as_str()),
            downstream: Node::stack(stack),
            link: Link::DependsOn {
                outputs: dependency.outputs.clone(),
                trigger_always: dependency.trigger_always,
            },
        }
    }

    /// The edge a plan's `on_stack_change` makes, from the stack it watches.
    pub fn feeds(stack: &str, plan: &str, outputs: &[String]) -> Edge {
        Edge {
            upstream: Node::stack(stack),
            downstream: Node::plan(plan),
            link: Link::Feeds {
                outputs: outputs.to_vec(),
            },
        }
    }
}

/// Edges by upstream then downstream (one edge per pair), with the reverse index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Graph {
    down: BTreeMap<Node, BTreeMap<Node, Link>>,
    up: BTreeMap<Node, BTreeSet<Node>>,
}

impl Graph {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an edge, replacing the one between the same two nodes.
    pub fn insert(&mut self, edge: Edge) {
        self.up
            .entry(edge.downstream.clone())
            .or_default()
            .insert(edge.upstream.clone());
        self.down
            .entry(edge.upstream)
            .or_default()
            .insert(edge.downstream, edge.link);
    }

    /// The graph as it would be with `node` saved: its upstream edges replaced by `edges`
    /// (each of which has `node` downstream).
    pub fn set_upstreams(&mut self, node: &Node, edges: impl IntoIterator<Item = Edge>) {
        for up in self.up.remove(node).unwrap_or_default() {
            if let Some(out) = self.down.get_mut(&up) {
                out.remove(node);
                if out.is_empty() {
                    self.down.remove(&up);
                }
            }
        }
        for edge in edges {
            debug_assert_eq!(&edge.downstream, node);
            self.insert(edge);
        }
    }

    /// The nodes `node`'s changes start runs of, in order (stacks, then plans).
    pub fn downstream<'a>(&'a self, node: &Node) -> impl Iterator<Item = (&'a Node, &'a Link)> {
        self.down.get(node).into_iter().flatten()
    }

    /// The nodes whose changes start runs of `node`, in order.
    pub fn upstream<'a>(&'a self, node: &'a Node) -> impl Iterator<Item = (&'a Node, &'a Link)> {
        self.up
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(move |up| Some((up, self.down.get(up)?.get(node)?)))
    }

    /// Every edge, by upstream then downstream.
    pub fn edges(&self) -> impl Iterator<Item = Edge> + '_ {
        self.down.iter().flat_map(|(up, out)| {
            out.iter().map(move |(down, link)| Edge {
                upstream: up.clone(),
                downstream: down.clone(),
                link: link.clone(),
            })
        })
    }

    /// Finds a cycle, returned as the path along the edges that starts and ends at the
    /// same node (`a → b → a`: `a` starts `b`, which starts `a`), or `None` for a DAG.
    pub fn find_cycle(&self) -> Option<Vec<Node>> {
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            Active,
            Done,
        }
        let mut marks: BTreeMap<&Node, Mark> = BTreeMap::new();
        for start in self.down.keys() {
            if marks.contains_key(start) {
                continue;
            }
            // Iterative DFS: (node, its downstreams not followed yet).
            let mut path: Vec<(&Node, std::collections::btree_map::Keys<'_, Node, Link>)> =
                vec![(start, self.down[start].keys())];
            marks.insert(start, Mark::Active);
            while let Some((node, next)) = path.last_mut() {
                let node = *node;
                match next.next() {
                    Some(down) => match marks.get(down) {
                        Some(Mark::Active) => {
                            let from = path.iter().position(|(n, _)| *n == down)?;
                            let mut cycle: Vec<Node> =
                                path[from..].iter().map(|(n, _)| (*n).clone()).collect();
                            cycle.push(down.clone());
                            return Some(cycle);
                        }
                        Some(Mark::Done) => {}
                        None => {
                            marks.insert(down, Mark::Active);
                            let keys = match self.down.get(down) {
                                Some(out) => out.keys(),
                                None => {
                                    marks.insert(down, Mark::Done);
                                    continue;
                                }
                            };
                            path.push((down, keys));
                        }
                    },
                    None => {
                        marks.insert(node, Mark::Done);
                        path.pop();
                    }
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn stacks(edges: &[(&str, &str)]) -> Graph {
        let mut g = Graph::new();
        for (up, down) in edges {
            g.insert(Edge {
                upstream: Node::stack(*up),
                downstream: Node::stack(*down),
                link: Link::DependsOn {
                    outputs: BTreeMap::new(),
                    trigger_always: false,
                },
            });
        }
        g
    }

    fn names(path: Option<Vec<Node>>) -> Option<Vec<String>> {
        path.map(|p| p.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn cycles_are_found_along_the_edges() {
        assert_eq!(stacks(&[("a", "b"), ("b", "c")]).find_cycle(), None);
        assert_eq!(
            names(stacks(&[("a", "b"), ("b", "c"), ("c", "a")]).find_cycle()),
            Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
        );
        assert_eq!(
            names(stacks(&[("a", "a")]).find_cycle()),
            Some(vec!["a".into(), "a".into()])
        );
        // A diamond is no cycle.
        assert_eq!(
            stacks(&[("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]).find_cycle(),
            None
        );
    }

    #[test]
    fn plans_are_nodes_of_the_same_graph() {
        let mut g = stacks(&[("net", "app")]);
        g.insert(Edge::feeds("app", "deploy", &["hosts".into()]));
        g.insert(Edge::feeds("net", "deploy", &[]));
        assert_eq!(g.find_cycle(), None);
        let down: Vec<String> = g
            .downstream(&Node::stack("net"))
            .map(|(n, _)| n.to_string())
            .collect();
        assert_eq!(down, ["app", "plan deploy"]);
        let deploy = Node::plan("deploy");
        let up: Vec<(&Node, &Link)> = g.upstream(&deploy).collect();
        assert_eq!(
            up,
            [
                (
                    &Node::stack("app"),
                    &Link::Feeds {
                        outputs: vec!["hosts".into()]
                    }
                ),
                (&Node::stack("net"), &Link::Feeds { outputs: vec![] })
            ]
        );
        assert_eq!(g.edges().count(), 3);
        // Were a plan to feed a stack, the cycle through it would be found the same way.
        g.insert(Edge {
            upstream: Node::plan("deploy"),
            downstream: Node::stack("net"),
            link: Link::Feeds { outputs: vec![] },
        });
        let cycle = names(g.find_cycle()).unwrap();
        assert_eq!(cycle.first(), cycle.last());
        assert!(cycle.contains(&"plan deploy".to_string()), "{cycle:?}");
    }

    #[test]
    fn saving_a_node_replaces_its_upstreams_only() {
        let mut g = stacks(&[("aa", "bb"), ("bb", "cc"), ("xx", "bb")]);
        g.set_upstreams(
            &Node::stack("bb"),
            [Edge::depends_on(
                "bb",
                &Dependency {
                    stack: crate::Slug::parse("stack", "cc").unwrap(),
                    outputs: BTreeMap::new(),
                    trigger_always: true,
                },
            )],
        );
        // bb's own downstream (cc) stays; its upstreams aa and xx are gone; cc → bb closes
        // a cycle.
        assert_eq!(g.downstream(&Node::stack("aa")).count(), 0);
        let bb = Node::stack("bb");
        assert_eq!(
            g.upstream(&bb).map(|(n, _)| n).collect::<Vec<_>>(),
            [&Node::stack("cc")]
        );
        assert_eq!(
            names(g.find_cycle()),
            Some(vec!["bb".into(), "cc".into(), "bb".into()])
        );
    }

    proptest! {
        #[test]
        fn random_dags_have_no_cycle_and_a_back_edge_makes_one(
            n in 2usize..30,
            seed in proptest::collection::vec(any::<u16>(), 0..80),
        ) {
            // Edges only from lower to higher index: always acyclic.
            let mut edges = Vec::new();
            for pair in seed.chunks(2) {
                if let [a, b] = pair {
                    let (a, b) = (*a as usize % n, *b as usize % n);
                    if a < b { edges.push((format!("s{a}"), format!("s{b}"))); }
                }
            }
            let refs: Vec<(&str, &str)> =
                edges.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
            let mut g = stacks(&refs);
            prop_assert_eq!(g.find_cycle(), None);
            // Closing any path with an edge back to its start is found.
            if let Some((a, b)) = edges.first() {
                g.insert(Edge {
                    upstream: Node::stack(b.as_str()),
                    downstream: Node::stack(a.as_str()),
                    link: Link::Feeds { outputs: vec![] },
                });
                let cycle = g.find_cycle();
                prop_assert!(cycle.is_some());
                let cycle = cycle.unwrap();
                prop_assert_eq!(cycle.first(), cycle.last());
                for w in cycle.windows(2) {
                    prop_assert!(g.downstream(&w[0]).any(|(d, _)| d == &w[1]));
                }
            }
        }
    }
}
