//! What a front end serves itself instead of the plugins: an editor's terminal and its view of
//! the files (ACP's `terminal` and `fs` client capabilities).
//!
//! Both stand in for plugins' work without widening it. A [`Terminal`] gets a command only after
//! the runtime's checks passed (dangerous-command verdict and approval, secret scan, working
//! directory inside the workspace). A [`ToolOverlay`] serves some plugin tools itself, under
//! the plugin's own spec (the model sees no difference), and owes the same limits as the tool
//! it stands in for.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Mutex};

use talaria_agent::{BoxFuture, ToolContext, ToolHost};
use talaria_protocol::{ToolError, ToolSpec};
pub use talaria_runtime::{CommandError, CommandOutput, CommandRun, Terminal};

/// Tools a front end serves in place of the plugins' tools of the same name.
pub trait ToolOverlay: Send + Sync {
    /// Whether it serves `spec`, a tool the plugins provide.
    fn serves(&self, spec: &ToolSpec) -> bool;

    /// Run `name` (one it serves) with the model's raw JSON arguments.
    fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a str,
        ctx: ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>>;
}

/// What a conversation's front end offers ([`crate::Start::offered`]); nothing by default.
#[derive(Clone, Default)]
pub struct Offered {
    /// Where the commands of this conversation's plugins run.
    pub terminal: Option<Arc<dyn Terminal>>,
    /// Tools served by the front end.
    pub tools: Option<Arc<dyn ToolOverlay>>,
}

impl fmt::Debug for Offered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Offered")
            .field("terminal", &self.terminal.is_some())
            .field("tools", &self.tools.is_some())
            .finish()
    }
}

/// The plugins' tools with some served by an overlay.
pub(crate) struct Overlaid {
    pub plugins: Arc<dyn ToolHost>,
    pub overlay: Arc<dyn ToolOverlay>,
    /// The names the overlay serves, as of the last listing (until then: none).
    served: Mutex<HashSet<String>>,
}

impl Overlaid {
    pub fn new(plugins: Arc<dyn ToolHost>, overlay: Arc<dyn ToolOverlay>) -> Self {
        Self { plugins, overlay, served: Mutex::new(HashSet::new()) }
    }
}

impl ToolHost for Overlaid {
    fn specs(&self) -> BoxFuture<'_, Vec<ToolSpec>> {
        Box::pin(async move {
            let specs = self.plugins.specs().await;
            let served = specs.iter().filter(|s| self.overlay.serves(s)).map(|s| s.name.clone()).collect();
            *crate::lock(&self.served) = served;
            specs
        })
    }

    fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a str,
        ctx: ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        if crate::lock(&self.served).contains(name) {
            self.overlay.call(name, arguments, ctx)
        } else {
            self.plugins.call(name, arguments, ctx)
        }
    }
}

/// The plugins' tools and the MCP servers' side by side (MCP tools are all `mcp_…`, and a
/// plugin tool of the same name keeps it).
pub(crate) struct Joined {
    pub plugins: Arc<dyn ToolHost>,
    pub mcp: Arc<talaria_mcp::client::Servers>,
    /// The MCP tools' names, as of the last listing.
    mcp_names: Mutex<HashSet<String>>,
}

impl Joined {
    pub fn new(plugins: Arc<dyn ToolHost>, mcp: Arc<talaria_mcp::client::Servers>) -> Self {
        Self { plugins, mcp, mcp_names: Mutex::new(HashSet::new()) }
    }
}

impl ToolHost for Joined {
    fn specs(&self) -> BoxFuture<'_, Vec<ToolSpec>> {
        Box::pin(async move {
            let (mut specs, mcp) = futures_util::future::join(self.plugins.specs(), self.mcp.specs()).await;
            let taken: HashSet<String> = specs.iter().map(|s| s.name.clone()).collect();
            let mcp: Vec<ToolSpec> = mcp.into_iter().filter(|s| !taken.contains(&s.name)).collect();
            *crate::lock(&self.mcp_names) = mcp.iter().map(|s| s.name.clone()).collect();
            specs.extend(mcp);
            specs
        })
    }

    fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a str,
        ctx: ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        if crate::lock(&self.mcp_names).contains(name) {
            self.mcp.call(name, arguments, ctx)
        } else {
            self.plugins.call(name, arguments, ctx)
        }
    }
}
