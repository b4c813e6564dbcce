//! The stacks part of the store contract: [`StackStore`], one of the traits [`Store`](crate::Store)
//! is made of.

use async_trait::async_trait;
use bosun_core::graph::{Graph, Node};
use bosun_core::stack::StackSpec;

use crate::{Audit, Result, StackActivity, StackContext, StackRecord};

/// Stacks: their definitions, pages, neighbours in the dependency graph, updates and
/// deletes.
#[async_trait]
pub trait StackStore: Send + Sync {
    /// Creates a stack, checking in the same transaction that its upstreams exist and
    /// that it closes no dependency cycle.
    async fn create_stack(&self, org: &str, spec: &StackSpec, audit: &Audit)
        -> Result<StackRecord>;
    async fn get_stack(&self, org: &str, id: &str) -> Result<Option<StackRecord>>;
    /// Stacks ordered by id, strictly after `after`, at most `limit`.
    async fn list_stacks(
        &self,
        org: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<StackRecord>>;
    /// [`get_stack`](Self::get_stack) and the stack's [`StackContext`], in one call.
    async fn get_stack_in_context(
        &self,
        org: &str,
        id: &str,
    ) -> Result<Option<(StackRecord, StackContext)>>;
    /// [`list_stacks`](Self::list_stacks) and the page's [`StackContext`], in one call.
    async fn list_stacks_in_context(
        &self,
        org: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<(Vec<StackRecord>, StackContext)>;
    /// [`list_stacks_in_context`](Self::list_stacks_in_context) and the page's
    /// [`StackActivity`] (each stack's latest run and held state lock), in one call.
    async fn list_stacks_with_activity(
        &self,
        org: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<(Vec<StackRecord>, StackContext, StackActivity)>;
    /// The [`StackContext`] of stacks of `org` already read (a stack just written).
    async fn stack_context(&self, org: &str, stacks: &[StackRecord]) -> Result<StackContext>;
    /// `node`'s neighbours in the org's dependency graph: the edges into it and out of it
    /// (the stacks that depend on a stack and the plans it feeds, by id).
    async fn dependency_graph(&self, org: &str, node: &Node) -> Result<Graph>;
    /// Replaces a stack's definition (same id), with the same checks as create.
    async fn update_stack(&self, org: &str, spec: &StackSpec, audit: &Audit)
        -> Result<StackRecord>;
    /// Refuses while other stacks depend on it, plans are fed by it, or runs of it are
    /// open; refuses to drop its state versions unless `delete_state`.
    async fn delete_stack(
        &self,
        org: &str,
        id: &str,
        delete_state: bool,
        audit: &Audit,
    ) -> Result<()>;
}
