//! [`StackStore`] for both backends: each method delegates to `sql/stacks.rs`.

use super::super::*;

#[async_trait]
impl StackStore for db::Store {
    async fn create_stack(
        &self,
        org: &str,
        spec: &StackSpec,
        audit: &Audit,
    ) -> Result<StackRecord> {
        let (org, spec, audit) = (org.to_string(), spec.clone(), audit.clone());
        self.write(move |tx| stacks::create(tx, &org, &spec, &audit))
            .await
    }

    async fn get_stack(&self, org: &str, id: &str) -> Result<Option<StackRecord>> {
        let (org, id) = (org.to_string(), id.to_string());
        self.read(move |c| stacks::get(c, &org, &id)).await
    }

    async fn list_stacks(
        &self,
        org: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<StackRecord>> {
        let (org, after) = (org.to_string(), after.unwrap_or("").to_string());
        self.read(move |c| stacks::list(c, &org, &after, limit))
            .await
    }

    async fn get_stack_in_context(
        &self,
        org: &str,
        id: &str,
    ) -> Result<Option<(StackRecord, StackContext)>> {
        let (org, id) = (org.to_string(), id.to_string());
        self.read(move |c| {
            let Some(stack) = stacks::get(c, &org, &id)? else {
                return Ok(None);
            };
            let mut context = stacks::context(c, &org, std::slice::from_ref(&stack))?;
            context.graph = graph::around(c, &org, &bosun_core::graph::Node::stack(id))?;
            Ok(Some((stack, context)))
        })
        .await
    }

    async fn list_stacks_in_context(
        &self,
        org: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<(Vec<StackRecord>, StackContext)> {
        let (org, after) = (org.to_string(), after.unwrap_or("").to_string());
        self.read(move |c| {
            let page = stacks::list(c, &org, &after, limit)?;
            let context = stacks::context(c, &org, &page)?;
            Ok((page, context))
        })
        .await
    }

    async fn list_stacks_with_activity(
        &self,
        org: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<(Vec<StackRecord>, StackContext, StackActivity)> {
        let (org, after) = (org.to_string(), after.unwrap_or("").to_string());
        self.read(move |c| {
            let page = stacks::list(c, &org, &after, limit)?;
            let context = stacks::context(c, &org, &page)?;
            let mut activity = StackActivity::default();
            // The page's id range: one statement each, not one per stack.
            if let (Some(first), Some(last)) = (page.first(), page.last()) {
                let (first, last) = (first.spec.id.as_str(), last.spec.id.as_str());
                activity.last_runs = runs::last_between(c, &org, first, last)?
                    .into_iter()
                    .map(|r| (r.stack.clone(), r))
                    .collect();
                activity.locks = state::locks_between(c, &org, first, last)?
                    .into_iter()
                    .collect();
            }
            Ok((page, context, activity))
        })
        .await
    }

    async fn stack_context(&self, org: &str, records: &[StackRecord]) -> Result<StackContext> {
        let (org, records) = (org.to_string(), records.to_vec());
        self.read(move |c| stacks::context(c, &org, &records)).await
    }

    async fn dependency_graph(
        &self,
        org: &str,
        node: &bosun_core::graph::Node,
    ) -> Result<bosun_core::graph::Graph> {
        let (org, node) = (org.to_string(), node.clone());
        self.read(move |c| graph::around(c, &org, &node)).await
    }

    async fn update_stack(
        &self,
        org: &str,
        spec: &StackSpec,
        audit: &Audit,
    ) -> Result<StackRecord> {
        let (org, spec, audit) = (org.to_string(), spec.clone(), audit.clone());
        self.write(move |tx| stacks::update(tx, &org, &spec, &audit))
            .await
    }

    async fn delete_stack(
        &self,
        org: &str,
        id: &str,
        delete_state: bool,
        audit: &Audit,
    ) -> Result<()> {
        let (org, id, audit) = (org.to_string(), id.to_string(), audit.clone());
        self.write(move |tx| stacks::delete(tx, &org, &id, delete_state, &audit))
            .await
    }
}
