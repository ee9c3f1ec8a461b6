//! What a front end serves itself instead of the plugins: an editor's terminal and its view of
//! the files (ACP's `terminal` and `fs` client capabilities).
//!
//! Both stand in for plugins' work without widening it. A [`Terminal`] gets a command only after
//! the runtime's checks passed (dangerous-command verdict and approval, secret scan, working
//! directory inside the workspace). A [`ToolOverlay`] serves some plugin tools itself, under
//! the plugin's own spec (the model sees no difference), and owes the same limits as the tool
//! it stands in for: it is one more handler in the agent's tool registry, and its calls pass
//! the same hooks, approvals, checkpoints and caps as any.

use std::fmt;
use std::sync::Arc;

pub use talaria_agent::ToolOverlay;
pub use talaria_runtime::{CommandError, CommandOutput, CommandRun, Terminal};

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
