//! The loop's one registry of tools: every tool, whatever its kind, is a [`ToolHandler`]
//! found by name, and every call reaches it through the same stages (`calls.rs`). The agent's
//! own tools (`builtins.rs`) reach the loop's state through the [`Scope`] each call is lent.

use std::collections::HashMap;
use std::sync::Arc;

use talaria_protocol::{ToolContext, ToolError, ToolSpec};
use tokio_util::sync::CancellationToken;

use super::Agent;
use crate::tools::BoxFuture;

/// What the loop lends a tool call: the agent it runs in and what stops the turn. The agent's
/// own tools need both; the others ignore it. Only the loop makes one (`calls.rs`): a front
/// door with no model (`tools call`, `mcp serve`) still runs its calls in a conversation.
#[derive(Clone, Copy)]
pub struct Scope<'a> {
    pub(super) agent: &'a Agent,
    pub(super) cancel: &'a CancellationToken,
}

/// Runs calls of one or more tools: the agent's own, a plugin runtime's, an MCP server's, an
/// editor's. The loop has checked hooks and approvals before, and caps the result after.
pub trait ToolHandler: Send + Sync {
    /// Run `ctx.tool` with `ctx.arguments` (a JSON object). The result is text for the model.
    /// `scope` is what the loop lends the call (the agent's own tools use it; others may
    /// ignore it).
    fn call<'a>(&'a self, ctx: &'a ToolContext, scope: Scope<'a>) -> BoxFuture<'a, Result<String, ToolError>>;
}

/// Tools listed when a session starts: a plugin runtime's, an MCP server's.
pub trait ToolSource: ToolHandler {
    /// Every tool it offers (problems are its own to report).
    /// Shared, not copied: every conversation of a process lists the same specs.
    fn specs(&self) -> BoxFuture<'_, Vec<Arc<ToolSpec>>>;
}

/// Tools a front end serves in place of the tools of the same name (an editor's view of the
/// files, ACP's `fs` capability). It serves a tool under that tool's own spec, so the model
/// sees no difference, and owes the same limits as the tool it stands in for.
pub trait ToolOverlay: ToolHandler {
    /// Whether it serves `spec`, a tool a [`ToolSource`] offers.
    fn serves(&self, spec: &ToolSpec) -> bool;
}

/// Where a session's tools come from besides the agent's own, in order: an earlier source
/// keeps a name a later one offers too.
#[derive(Clone, Default)]
pub struct ToolSources {
    pub sources: Vec<Arc<dyn ToolSource>>,
    pub overlay: Option<Arc<dyn ToolOverlay>>,
}

/// Every tool a session can call, by name, with the handler that runs it.
#[derive(Clone, Default)]
pub struct Registry {
    specs: Vec<Arc<ToolSpec>>,
    handlers: HashMap<String, Arc<dyn ToolHandler>>,
}

impl Registry {
    /// `own` (the agent's tools) first, then each source's in order; a name already taken is
    /// left out with a warning. The overlay then serves the source tools it claims.
    pub async fn build(
        own: impl IntoIterator<Item = (Arc<ToolSpec>, Arc<dyn ToolHandler>)>,
        sources: &ToolSources,
        warnings: &mut Vec<String>,
    ) -> Self {
        let mut registry = Self::default();
        for (spec, handler) in own {
            registry.add(spec, handler);
        }
        let listed = futures_util::future::join_all(sources.sources.iter().map(|s| s.specs())).await;
        for (source, specs) in sources.sources.iter().zip(listed) {
            for spec in specs {
                if registry.handlers.contains_key(&spec.name) {
                    warnings.push(format!(
                        "`{}` offers tool `{}`, which is already taken; it is left out",
                        spec.plugin, spec.name
                    ));
                    continue;
                }
                let handler: Arc<dyn ToolHandler> = match &sources.overlay {
                    Some(overlay) if overlay.serves(&spec) => overlay.clone(),
                    _ => source.clone(),
                };
                registry.add(spec, handler);
            }
        }
        registry
    }

    fn add(&mut self, spec: Arc<ToolSpec>, handler: Arc<dyn ToolHandler>) {
        self.handlers.insert(spec.name.clone(), handler);
        self.specs.push(spec);
    }

    /// Every tool, the agent's own first.
    pub fn specs(&self) -> &[Arc<ToolSpec>] {
        &self.specs
    }

    /// What runs `name`.
    pub fn handler(&self, name: &str) -> Option<&Arc<dyn ToolHandler>> {
        self.handlers.get(name)
    }
}
