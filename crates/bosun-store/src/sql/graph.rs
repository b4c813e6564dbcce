//! The org's dependency graph ([`bosun_core::graph`]) as the store keeps it: a stack's
//! `depends_on` in its row (`stacks.depends_on`, indexed by `stack_dependencies`), a plan's
//! `on_stack_change` in its row (`plans.watch_stack`, `watch_outputs`). Reads of a node's
//! neighbours and of what lies upstream of nodes, and the check that saving a node's
//! upstream edges keeps the graph acyclic — one check for stacks and plans alike.

use bosun_core::graph::{Edge, Graph, Link, Node};

use super::*;

/// The edges into `node`, from its row: none when it does not exist.
fn upstream_edges(c: &Connection, org: &str, node: &Node) -> Result<Vec<Edge>> {
    match node {
        Node::Stack(id) => {
            let column: Option<String> = c
                .prepare_cached("SELECT depends_on FROM stacks WHERE org_id = ?1 AND id = ?2")?
                .query_row(params![org, id], |r| r.get(0))
                .optional()?;
            match column {
                Some(column) => stack_edges(id, &column),
                None => Ok(Vec::new()),
            }
        }
        Node::Plan(name) => {
            let watch: Option<(Option<String>, Option<String>)> = c
                .prepare_cached(
                    "SELECT watch_stack, watch_outputs FROM plans WHERE org_id = ?1 AND name = ?2",
                )?
                .query_row(params![org, name], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            match watch {
                Some((Some(stack), outputs)) => Ok(vec![plan_edge(&stack, name, outputs)?]),
                _ => Ok(Vec::new()),
            }
        }
    }
}

/// The edges a stack's stored `depends_on` column makes into it.
fn stack_edges(stack: &str, column: &str) -> Result<Vec<Edge>> {
    let value: Value = serde_json::from_str(column).map_err(|e| corrupt("stack depends_on", e))?;
    Ok(stacks::dependency_inputs(&value)
        .into_iter()
        .map(|d| Edge {
            upstream: Node::Stack(d.stack),
            downstream: Node::stack(stack),
            link: Link::DependsOn {
                outputs: d.outputs,
                trigger_always: d.trigger_always,
            },
        })
        .collect())
}

/// The edge a plan's stored `on_stack_change` makes into it.
fn plan_edge(stack: &str, plan: &str, outputs: Option<String>) -> Result<Edge> {
    let outputs: Vec<String> = match outputs {
        Some(t) => serde_json::from_str(&t).map_err(|e| corrupt("plan watch_outputs", e))?,
        None => Vec::new(),
    };
    Ok(Edge::feeds(stack, plan, &outputs))
}

/// The edges out of `node`: the stacks that depend on it, then the plans it feeds, by id.
/// A plan feeds nothing.
fn downstream_edges(c: &Connection, org: &str, node: &Node) -> Result<Vec<Edge>> {
    let Node::Stack(id) = node else {
        return Ok(Vec::new());
    };
    let stacks: Vec<(String, String)> = c
        .prepare_cached(
            "SELECT id, depends_on FROM stacks WHERE org_id = ?1 AND id IN (
                SELECT stack_id FROM stack_dependencies WHERE org_id = ?1 AND upstream = ?2)
             ORDER BY id",
        )?
        .query_map(params![org, id], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<db::Result<_>>()?;
    let mut edges = Vec::new();
    for (stack, column) in stacks {
        edges.extend(
            stack_edges(&stack, &column)?
                .into_iter()
                .filter(|e| &e.upstream == node),
        );
    }
    edges.extend(plans_fed_by(c, org, id)?);
    Ok(edges)
}

/// The edges from `stack` to the plans it feeds, by plan name.
pub(super) fn plans_fed_by(c: &Connection, org: &str, stack: &str) -> Result<Vec<Edge>> {
    let plans: Vec<(String, Option<String>)> = c
        .prepare_cached(
            "SELECT name, watch_outputs FROM plans WHERE org_id = ?1 AND watch_stack = ?2
             ORDER BY name",
        )?
        .query_map(params![org, stack], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<db::Result<_>>()?;
    plans
        .into_iter()
        .map(|(plan, outputs)| plan_edge(stack, &plan, outputs))
        .collect()
}

/// `node`'s neighbours: the edges into it and out of it.
pub(super) fn around(c: &Connection, org: &str, node: &Node) -> Result<Graph> {
    let mut graph = Graph::new();
    for edge in upstream_edges(c, org, node)?
        .into_iter()
        .chain(downstream_edges(c, org, node)?)
    {
        graph.insert(edge);
    }
    Ok(graph)
}

/// What `node`'s changes start runs of, directly, each named as the graph names it
/// (`app`, `plan deploy`).
pub(super) fn dependents(c: &Connection, org: &str, node: &Node) -> Result<Vec<String>> {
    Ok(downstream_edges(c, org, node)?
        .iter()
        .map(|e| e.downstream.to_string())
        .collect())
}

/// Checks that `node` may be saved with the upstream `edges` (each into `node`): every
/// upstream is a stack of the org, and no cycle closes through `node`. A cycle through it
/// runs from it to an upstream and back, so only what lies upstream of the new edges is
/// read (one indexed lookup per node reached), never the org's whole graph. `field` names
/// what declared the edges (`depends_on`, `on_stack_change.stack`).
pub(super) fn check_upstreams(
    c: &Connection,
    org: &str,
    node: &Node,
    edges: &[Edge],
    field: &'static str,
) -> Result<()> {
    for edge in edges {
        if !exists(
            c,
            "SELECT 1 FROM stacks WHERE org_id = ?1 AND id = ?2",
            params![org, edge.upstream.id()],
        )? {
            return Err(StoreError::UnknownUpstream {
                field,
                stack: edge.upstream.id().to_string(),
            });
        }
    }
    let mut graph = Graph::new();
    let mut next: Vec<Node> = edges.iter().map(|e| e.upstream.clone()).collect();
    let mut seen = std::collections::BTreeSet::new();
    while let Some(at) = next.pop() {
        if !seen.insert(at.clone()) {
            continue;
        }
        for edge in upstream_edges(c, org, &at)? {
            next.push(edge.upstream.clone());
            graph.insert(edge);
        }
    }
    graph.set_upstreams(node, edges.iter().cloned());
    match graph.find_cycle() {
        Some(cycle) => Err(StoreError::DependencyCycle(
            cycle.iter().map(ToString::to_string).collect(),
        )),
        None => Ok(()),
    }
}
