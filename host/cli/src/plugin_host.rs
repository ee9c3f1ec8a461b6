//! The agent's view of the plugin runtime: [`ToolHost`] over [`Runtime`], and the runtime's
//! approval requests sent to the agent's [`Gate`] (so the chat front door can ask the human).

use std::sync::Arc;

use talaria_agent::approval::{Decision, Gate};
use talaria_agent::{BoxFuture, ToolContext, ToolHost};
use talaria_protocol::{ToolError, ToolSpec};
use talaria_runtime::{Approval, ApprovalRequest, Approver, CallContext, Runtime};

/// Plugin tools, as the loop calls them.
pub struct PluginTools {
    pub runtime: Runtime,
}

impl ToolHost for PluginTools {
    fn specs(&self) -> BoxFuture<'_, Vec<ToolSpec>> {
        Box::pin(async move {
            let (tools, problems) = self.runtime.tools().await;
            for p in problems {
                tracing::warn!("{p}");
            }
            tools
        })
    }

    fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a str,
        ctx: ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let ctx = CallContext { session_id: ctx.session_id, call_id: ctx.call_id, workspace: ctx.workspace };
            let out = self.runtime.call(name, arguments, ctx).await?;
            for d in &out.denials {
                tracing::info!("{name}: {d}");
            }
            Ok(out.output)
        })
    }
}

/// Dangerous commands go to the gate (a prompt in the terminal, or a denial when unattended).
pub struct GateApprover(pub Arc<Gate>);

impl Approver for GateApprover {
    fn approve<'a>(
        &'a self,
        request: &'a ApprovalRequest,
    ) -> std::pin::Pin<Box<dyn Future<Output = Approval> + Send + 'a>> {
        Box::pin(async move {
            match self.0.ask_approval(&request.plugin, &request.command, &request.key, &request.reason).await {
                Decision::Once => Approval::Once,
                Decision::Session => Approval::Session,
                Decision::Always => Approval::Always,
                Decision::Deny => Approval::Deny,
            }
        })
    }

    fn interactive(&self) -> bool {
        self.0.interactive()
    }
}
